// Q4_0 block32 (see block32_generic.wgsl): a block is 18 bytes at an even offset, so its five
// covering words hold it, shifted by 16 bits when it starts mid-word. Word j of the realigned
// quants holds values 4j..4j+3 (low nibbles) and 16+4j..16+4j+3 (high nibbles); y = d·(q − 8).
fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    let blk = rb + (k / 32u) * 18u;
    let i = blk >> 2u;
    let s = (blk & 2u) * 8u;
    let a = vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]);
    let b = vec4<u32>(a.yzw, w[i + 4u]);
    let d = unpack2x16float(a.x >> s).x;
    let q = select((a >> vec4<u32>(16u)) | (b << vec4<u32>(16u)), b, s != 0u);
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
