// Q5_0 block32 (see block32_generic.wgsl): d and qh from the block's 6-byte head, the low
// nibbles one aligned 16-byte load from its body (layout.rs). Word j of the quants holds the low
// 4 bits of values 4j..4j+3 (low nibbles) and 16+4j..16+4j+3 (high nibbles); bit i of qh is
// bit 4 of value i; y = d·(q − 16).
fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    let b = k / 32u;
    let h = head_at(rb, b);
    let d = f16_at(h);
    let qh = vec4<u32>(load_u32(h + 2u));
    let q = quad(body_at(rb, b));
    let lo = q & vec4<u32>(0x0f0f0f0fu);
    let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
    let dv = vec4<f32>(d);
    let o = vec4<f32>(-16.0 * d);
    var out: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let at = vec4<u32>(4u * j) + vec4<u32>(0u, 1u, 2u, 3u);
        let bit_lo = ((qh >> at) & vec4<u32>(1u)) << vec4<u32>(4u);
        let bit_hi = ((qh >> (at + vec4<u32>(16u))) & vec4<u32>(1u)) << vec4<u32>(4u);
        out[j] = fma(vec4<f32>(unpack4xU8(lo[j]) | bit_lo), dv, o);
        out[j + 4u] = fma(vec4<f32>(unpack4xU8(hi[j]) | bit_hi), dv, o);
    }
    return out;
}
