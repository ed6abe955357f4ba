// MLX_A4: MLX's 4-bit affine values, blocks of 32 in 20 bytes (word-aligned).
//
//   byte 0       2       4                    20
//        +-------+-------+--------------------+
//        | scale | bias  | q[0..16]           |   lo nibble of q[j] = y[2j], hi nibble = y[2j+1]
//        +-------+-------+--------------------+   y = bf16(bf16(q·scale) + bias)
//
// On the GPU (layout.rs) the head is scale and bias, the body q.
// `affine` (the rounding): mlx_affine.wgsl.

fn load8(rb: u32, k: u32) -> array<f32, 8> {
    let b = k / BLOCK_ELEMS;
    let sb = load_u32(head_at(rb, b));
    let scale = bitcast<f32>(sb << 16u);
    let bias = bitcast<f32>(sb & 0xffff0000u);
    // Values k .. k + 8 (k a multiple of 8): one word of nibbles, in order.
    let nibbles = load_u32(body_at(rb, b) + (k % 32u) / 2u);
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        v[i] = affine((nibbles >> (4u * i)) & 0xfu, scale, bias);
    }
    return v;
}

fn load1(rb: u32, k: u32) -> f32 {
    var v = load8(rb, k & ~7u);
    return v[k & 7u];
}
