// Q6_K: super-blocks of 256 values, 210 bytes.
//
//   byte 0         128       192          208  210
//        +---------+---------+------------+----+
//        | ql[128] | qh[64]  | scales[16] | d  |
//        +---------+---------+------------+----+
//   Value e: half n = e/128, quarter t = (e%128)/32, l = e%32:
//   q = (4 bits of ql[64n + l + 32(t&1)] at shift 4(t>>1)) | (2 bits of qh[32n + l] at 2t) << 4,
//   y = d * scales[8n + l/16 + 2t] * (q - 32)   (scales are i8)
// On the GPU (layout.rs) the head is d, the body the first 208 bytes.
fn load8(rb: u32, k: u32) -> array<f32, 8> {
    let b = k / BLOCK_ELEMS;
    let blk = body_at(rb, b);
    let e = k % 256u;
    let n = e / 128u;
    let t = (e % 128u) / 32u;
    let l = e % 32u;
    let sc = load_u8(blk + 192u + 8u * n + l / 16u + 2u * t);
    let d = f16_at(head_at(rb, b)) * f32(bitcast<i32>(sc << 24u) >> 24u);
    let lo = blk + 64u * n + l + 32u * (t & 1u);
    let hb = blk + 128u + 32u * n + l;
    var ql = array<u32, 2>(load_u32(lo), load_u32(lo + 4u));
    var qh = array<u32, 2>(load_u32(hb), load_u32(hb + 4u));
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        let sh = (i % 4u) * 8u;
        let low = (ql[i / 4u] >> (sh + 4u * (t >> 1u))) & 0xfu;
        let high = (qh[i / 4u] >> (sh + 2u * t)) & 3u;
        v[i] = d * (f32(low | (high << 4u)) - 32.0);
    }
    return v;
}

fn load1(rb: u32, k: u32) -> f32 {
    var v = load8(rb, k & ~7u);
    return v[k & 7u];
}
