// MLX affine values as mx.dequantize computes them: y = bf16(bf16(q·scale) + bias), for bf16
// scale and bias, each operation rounded to nearest even in integer operations (which also keeps
// a compiler from fusing the product and the sum). Prepended to mlx_a8.wgsl and mlx_a4.wgsl.
fn bf16_round(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}

fn affine(q: u32, scale: f32, bias: f32) -> f32 {
    return bf16_round(bf16_round(f32(q) * scale) + bias);
}
