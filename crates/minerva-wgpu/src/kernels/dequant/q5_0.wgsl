// Q5_0: blocks of 32 values, 22 bytes.
//
//   byte 0    2         6                    22
//        +----+---------+--------------------+
//        | d  | qh (u32)| qs[0..16]          |   lo nibble of qs[j] = low 4 bits of y[j], hi nibble
//        +----+---------+--------------------+   those of y[j+16]; bit j of qh = bit 4 of y[j]
//                                                y = d * (q - 16)
// On the GPU (layout.rs) the head is d and qh (6 bytes, at even offsets), the body qs.
fn load8(rb: u32, k: u32) -> array<f32, 8> {
    let b = k / BLOCK_ELEMS;
    let h = head_at(rb, b);
    let d = f16_at(h);
    let qh = load_u32(h + 2u);
    let j = k % 32u;
    let q = body_at(rb, b) + (j % 16u);
    let shift = (j / 16u) * 4u;
    var words = array<u32, 2>(load_u32(q), load_u32(q + 4u));
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        let lo = (words[i / 4u] >> ((i % 4u) * 8u + shift)) & 0xfu;
        let hi = ((qh >> (j + i)) & 1u) << 4u;
        v[i] = d * (f32(lo | hi) - 16.0);
    }
    return v;
}

fn load1(rb: u32, k: u32) -> f32 {
    var v = load8(rb, k & ~7u);
    return v[k & 7u];
}
