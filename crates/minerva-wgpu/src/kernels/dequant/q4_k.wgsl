// Q4_K: super-blocks of 256 values, 144 bytes.
//
//   byte 0    2      4            16                      144
//        +----+------+------------+------------------------+
//        | d  | dmin | scales[12] | qs[128]                |
//        +----+------+------------+------------------------+
//   8 sub-blocks of 32 with 6-bit scale sc and min m packed in `scales` (ggml's
//   get_scale_min_k4); 64-value group g uses lo nibbles of qs[32g..32g+32] for sub-block 2g and
//   hi nibbles for 2g+1.  y = d * sc * q - dmin * m
fn scale_min_k4(sb: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(load_u8(sb + j) & 63u), f32(load_u8(sb + j + 4u) & 63u));
    }
    let sc = (load_u8(sb + j + 4u) & 0xfu) | ((load_u8(sb + j - 4u) >> 6u) << 4u);
    let m = (load_u8(sb + j + 4u) >> 4u) | ((load_u8(sb + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

fn load8(rb: u32, k: u32) -> array<f32, 8> {
    let blk = body_at(rb, k / BLOCK_ELEMS);
    let e = k % 256u;
    let g = e / 64u;
    let hi = (e % 64u) / 32u;
    let sm = scale_min_k4(blk + 4u, 2u * g + hi);
    let d = f16_at(blk) * sm.x;
    let m = f16_at(blk + 2u) * sm.y;
    let q = blk + 16u + 32u * g + (e % 32u);
    var words = array<u32, 2>(load_u32(q), load_u32(q + 4u));
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        let n = (words[i / 4u] >> ((i % 4u) * 8u + hi * 4u)) & 0xfu;
        v[i] = d * f32(n) - m;
    }
    return v;
}

fn load1(rb: u32, k: u32) -> f32 {
    var v = load8(rb, k & ~7u);
    return v[k & 7u];
}
