// Q4_1 dot32 (see dot32_generic.wgsl): a block is 20 bytes, so every block is word-aligned:
// word 0 holds d and m, words 1..4 the quants (value 4j.. in word j's low nibbles, 16+4j.. in
// its high nibbles). y = d·q + m, so Σ y·x = d·Σ q·x + m·Σ x.
fn dot32(rb: u32, k: u32, xo: u32) -> f32 {
    let i = (rb + (k / 32u) * 20u) >> 2u;
    let dm = unpack2x16float(w[i]);
    let q = vec4<u32>(w[i + 1u], w[i + 2u], w[i + 3u], w[i + 4u]);
    let lo = q & vec4<u32>(0x0f0f0f0fu);
    let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
    let x0 = x4[xo]; let x1 = x4[xo + 1u]; let x2 = x4[xo + 2u]; let x3 = x4[xo + 3u];
    let x4_ = x4[xo + 4u]; let x5 = x4[xo + 5u]; let x6 = x4[xo + 6u]; let x7 = x4[xo + 7u];
    let qx = dot(vec4<f32>(unpack4xU8(lo.x)), x0) + dot(vec4<f32>(unpack4xU8(lo.y)), x1)
        + dot(vec4<f32>(unpack4xU8(lo.z)), x2) + dot(vec4<f32>(unpack4xU8(lo.w)), x3)
        + dot(vec4<f32>(unpack4xU8(hi.x)), x4_) + dot(vec4<f32>(unpack4xU8(hi.y)), x5)
        + dot(vec4<f32>(unpack4xU8(hi.z)), x6) + dot(vec4<f32>(unpack4xU8(hi.w)), x7);
    let sx = dot(x0 + x1 + x2 + x3 + x4_ + x5 + x6 + x7, vec4<f32>(1.0));
    return dm.x * qx + dm.y * sx;
}
