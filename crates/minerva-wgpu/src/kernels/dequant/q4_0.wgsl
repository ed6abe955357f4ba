// Q4_0: blocks of 32 values, 18 bytes.
//
//   byte 0    2                    18
//        +----+--------------------+
//        | d  | qs[0..16]          |   lo nibble of qs[j] = y[j], hi nibble = y[j+16]
//        +----+--------------------+   y = d * (q - 8)
// On the GPU (layout.rs) the head is d, the body qs.
fn load8(rb: u32, k: u32) -> array<f32, 8> {
    let b = k / BLOCK_ELEMS;
    let d = f16_at(head_at(rb, b));
    let j = k % 32u;
    let q = body_at(rb, b) + (j % 16u);
    let shift = (j / 16u) * 4u;
    var words = array<u32, 2>(load_u32(q), load_u32(q + 4u));
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        let n = (words[i / 4u] >> ((i % 4u) * 8u + shift)) & 0xfu;
        v[i] = d * (f32(n) - 8.0);
    }
    return v;
}

fn load1(rb: u32, k: u32) -> f32 {
    var v = load8(rb, k & ~7u);
    return v[k & 7u];
}
