// Q4_1 block32 (see block32_generic.wgsl): d and m are the word of the block's head, the quants
// one aligned 16-byte load from its body (layout.rs): value 4j.. in word j's low nibbles,
// 16+4j.. in its high nibbles; y = d·q + m.
fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    let b = k / 32u;
    let dm = unpack2x16float(word(head_at(rb, b) >> 2u));
    let q = quad(body_at(rb, b));
    let lo = q & vec4<u32>(0x0f0f0f0fu);
    let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
    let dv = vec4<f32>(dm.x);
    let m = vec4<f32>(dm.y);
    return array<vec4<f32>, 8>(
        fma(vec4<f32>(unpack4xU8(lo.x)), dv, m), fma(vec4<f32>(unpack4xU8(lo.y)), dv, m),
        fma(vec4<f32>(unpack4xU8(lo.z)), dv, m), fma(vec4<f32>(unpack4xU8(lo.w)), dv, m),
        fma(vec4<f32>(unpack4xU8(hi.x)), dv, m), fma(vec4<f32>(unpack4xU8(hi.y)), dv, m),
        fma(vec4<f32>(unpack4xU8(hi.z)), dv, m), fma(vec4<f32>(unpack4xU8(hi.w)), dv, m));
}
