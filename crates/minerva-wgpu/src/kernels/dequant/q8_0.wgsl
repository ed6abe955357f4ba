// Q8_0: blocks of 32 values, 34 bytes.
//
//   byte 0    2                               34
//        +----+-------------------------------+
//        | d  | qs[0..32]  i8                 |   y = d * qs
//        +----+-------------------------------+
fn load8(rb: u32, k: u32) -> array<f32, 8> {
    let blk = rb + (k / BLOCK_ELEMS) * BLOCK_BYTES;
    let d = f16_at(blk);
    let q = blk + 2u + (k % 32u);
    let a = load_u32(q);
    let b = load_u32(q + 4u);
    return array<f32, 8>(d * i8_of(a, 0u), d * i8_of(a, 1u), d * i8_of(a, 2u), d * i8_of(a, 3u),
        d * i8_of(b, 0u), d * i8_of(b, 1u), d * i8_of(b, 2u), d * i8_of(b, 3u));
}

fn load1(rb: u32, k: u32) -> f32 {
    var v = load8(rb, k & ~7u);
    return v[k & 7u];
}
