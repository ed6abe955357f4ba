// F32 block32 (see block32_generic.wgsl): 32 floats are 128 bytes at a 16-byte aligned offset
// (as block32_f16.wgsl): eight aligned 16-byte loads.
fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    var out: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        out[j] = bitcast<vec4<f32>>(quad(rb + 4u * k + 16u * j));
    }
    return out;
}
