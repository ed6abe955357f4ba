// dot32 for any dtype: Σ of 32 weights from value `k` (a multiple of 32) of the row at byte `rb`
// times x4[xo..xo+8] (32 f32 as vec4s), through the dtype's load8. The formats with a dot32 of
// their own read the whole block in aligned words instead.
fn dot32(rb: u32, k: u32, xo: u32) -> f32 {
    var s = 0.0;
    for (var j = 0u; j < 4u; j++) {
        let v = load8(rb, k + 8u * j);
        s += dot(vec4<f32>(v[0], v[1], v[2], v[3]), x4[xo + 2u * j])
            + dot(vec4<f32>(v[4], v[5], v[6], v[7]), x4[xo + 2u * j + 1u]);
    }
    return s;
}
