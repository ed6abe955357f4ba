// Q8_0 block32 (see block32_generic.wgsl): a block is 34 bytes at an even offset; its nine
// covering words hold it, shifted by 16 bits when it starts mid-word (then the quants are
// word-aligned); y = d·q.
fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    let blk = rb + (k / 32u) * 34u;
    let i = blk >> 2u;
    let s = (blk & 2u) * 8u;
    let a = vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]);
    let b = vec4<u32>(w[i + 4u], w[i + 5u], w[i + 6u], w[i + 7u]);
    let a1 = vec4<u32>(a.yzw, b.x);
    let b1 = vec4<u32>(b.yzw, w[i + 8u]);
    let d = unpack2x16float(a.x >> s).x;
    let h = vec4<u32>(16u);
    let qa = select((a >> h) | (a1 << h), a1, s != 0u);
    let qb = select((b >> h) | (b1 << h), b1, s != 0u);
    return array<vec4<f32>, 8>(
        d * vec4<f32>(unpack4xI8(qa.x)), d * vec4<f32>(unpack4xI8(qa.y)),
        d * vec4<f32>(unpack4xI8(qa.z)), d * vec4<f32>(unpack4xI8(qa.w)),
        d * vec4<f32>(unpack4xI8(qb.x)), d * vec4<f32>(unpack4xI8(qb.y)),
        d * vec4<f32>(unpack4xI8(qb.z)), d * vec4<f32>(unpack4xI8(qb.w)));
}
