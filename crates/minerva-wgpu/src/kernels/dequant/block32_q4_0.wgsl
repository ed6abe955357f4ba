// Q4_0 block32 (see block32_generic.wgsl): the block's 16 quant bytes are one aligned 16-byte
// load from its body, d a half-word of its head (layout.rs). Word j of the quants holds values
// 4j..4j+3 (low nibbles) and 16+4j..16+4j+3 (high nibbles); y = d·(q − 8).
fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    let b = k / 32u;
    let d = f16_at(head_at(rb, b));
    let q = quad(body_at(rb, b));
    let lo = q & vec4<u32>(0x0f0f0f0fu);
    let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
    let dv = vec4<f32>(d);
    let o = vec4<f32>(-8.0 * d);
    return array<vec4<f32>, 8>(
        fma(vec4<f32>(unpack4xU8(lo.x)), dv, o), fma(vec4<f32>(unpack4xU8(lo.y)), dv, o),
        fma(vec4<f32>(unpack4xU8(lo.z)), dv, o), fma(vec4<f32>(unpack4xU8(lo.w)), dv, o),
        fma(vec4<f32>(unpack4xU8(hi.x)), dv, o), fma(vec4<f32>(unpack4xU8(hi.y)), dv, o),
        fma(vec4<f32>(unpack4xU8(hi.z)), dv, o), fma(vec4<f32>(unpack4xU8(hi.w)), dv, o));
}
