// MLX_A8: MLX's 8-bit affine values, blocks of 32 in 36 bytes (word-aligned).
//
//   byte 0       2       4                             36
//        +-------+-------+-----------------------------+
//        | scale | bias  | q[0..32]  u8                |   y = bf16(bf16(q·scale) + bias)
//        +-------+-------+-----------------------------+   (bf16 scale and bias)
//
// On the GPU (layout.rs) the head is scale and bias, the body q.
// `affine` (the rounding): mlx_affine.wgsl.

fn load8(rb: u32, k: u32) -> array<f32, 8> {
    let b = k / BLOCK_ELEMS;
    let sb = load_u32(head_at(rb, b));
    let scale = bitcast<f32>(sb << 16u);
    let bias = bitcast<f32>(sb & 0xffff0000u);
    let q = body_at(rb, b) + (k % 32u);
    var words = array<u32, 2>(load_u32(q), load_u32(q + 4u));
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        v[i] = affine((words[i / 4u] >> ((i % 4u) * 8u)) & 0xffu, scale, bias);
    }
    return v;
}

fn load1(rb: u32, k: u32) -> f32 {
    var v = load8(rb, k & ~7u);
    return v[k & 7u];
}
