// F16 block32 (see block32_generic.wgsl): 32 halves are 64 bytes at a 16-byte aligned offset
// (the block kernels run only where the columns are a multiple of 32, so every row starts
// aligned): four aligned 16-byte loads.
fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    var out: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let q = quad(rb + 2u * k + 16u * j);
        out[2u * j] = vec4<f32>(unpack2x16float(q.x), unpack2x16float(q.y));
        out[2u * j + 1u] = vec4<f32>(unpack2x16float(q.z), unpack2x16float(q.w));
    }
    return out;
}
