// BF16 block32 (see block32_generic.wgsl): 32 bfloat16s are 64 bytes at a 16-byte aligned offset
// (as block32_f16.wgsl): four aligned 16-byte loads; a bfloat16 is the high half of an f32.
fn bf16x4(a: u32, b: u32) -> vec4<f32> {
    let q = vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u);
    return bitcast<vec4<f32>>(q);
}

fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    var out: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let q = quad(rb + 2u * k + 16u * j);
        out[2u * j] = bf16x4(q.x, q.y);
        out[2u * j + 1u] = bf16x4(q.z, q.w);
    }
    return out;
}
