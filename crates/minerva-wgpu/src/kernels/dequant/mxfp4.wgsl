// MXFP4 (GGML layout): blocks of 32 values, 17 bytes (so in the file blocks start at odd
// offsets; on the GPU (layout.rs) the head is e, the body qs).
//
//   byte 0    1                    17
//        +----+--------------------+
//        | e  | qs[0..16]          |   lo nibble of qs[j] = y[j], hi nibble = y[j+16]
//        +----+--------------------+   y = kvalues[q] * 2^(e-128)  (ggml's doubled E2M1)
const KVALUES_MXFP4 = array<f32, 16>(0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,
    0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);

fn load8(rb: u32, k: u32) -> array<f32, 8> {
    let b = k / BLOCK_ELEMS;
    let d = e8m0_half(load_u8(head_at(rb, b)));
    let j = k % 32u;
    let q = body_at(rb, b) + (j % 16u);
    let shift = (j / 16u) * 4u;
    var words = array<u32, 2>(load_u32(q), load_u32(q + 4u));
    var table = KVALUES_MXFP4;
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        let n = (words[i / 4u] >> ((i % 4u) * 8u + shift)) & 0xfu;
        v[i] = d * table[n];
    }
    return v;
}

fn load1(rb: u32, k: u32) -> f32 {
    var v = load8(rb, k & ~7u);
    return v[k & 7u];
}
