// Q8_0: blocks of 32 values, 34 bytes.
//
//   byte 0    2                               34
//        +----+-------------------------------+
//        | d  | qs[0..32]  i8                 |   y = d * qs
//        +----+-------------------------------+
// On the GPU (layout.rs) the head is d, the body qs.
fn load8(rb: u32, k: u32) -> array<f32, 8> {
    let b = k / BLOCK_ELEMS;
    let d = f16_at(head_at(rb, b));
    let q = body_at(rb, b) + (k % 32u);
    let qa = load_u32(q);
    let qb = load_u32(q + 4u);
    return array<f32, 8>(d * i8_of(qa, 0u), d * i8_of(qa, 1u), d * i8_of(qa, 2u), d * i8_of(qa, 3u),
        d * i8_of(qb, 0u), d * i8_of(qb, 1u), d * i8_of(qb, 2u), d * i8_of(qb, 3u));
}

fn load1(rb: u32, k: u32) -> f32 {
    var v = load8(rb, k & ~7u);
    return v[k & 7u];
}
