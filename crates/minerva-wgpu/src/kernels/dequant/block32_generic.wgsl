// block32 for any dtype: the 32 weights from value `k` (a multiple of 32) of the row at byte
// `rb`, dequantized, as 8 vec4s, through the dtype's load8. The formats with a block32 of their
// own read the whole block in aligned words instead.
fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    var out: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let v = load8(rb, k + 8u * j);
        out[2u * j] = vec4<f32>(v[0], v[1], v[2], v[3]);
        out[2u * j + 1u] = vec4<f32>(v[4], v[5], v[6], v[7]);
    }
    return out;
}
