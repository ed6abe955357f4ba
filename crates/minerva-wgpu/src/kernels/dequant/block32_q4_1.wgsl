// Q4_1 block32 (see block32_generic.wgsl): a block is 20 bytes, so every block is word-aligned:
// word 0 holds d and m, words 1..4 the quants (value 4j.. in word j's low nibbles, 16+4j.. in
// its high nibbles); y = d·q + m.
fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    let i = (rb + (k / 32u) * 20u) >> 2u;
    let dm = unpack2x16float(w[i]);
    let q = vec4<u32>(w[i + 1u], w[i + 2u], w[i + 3u], w[i + 4u]);
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
