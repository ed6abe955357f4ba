// Q4_K block32 (see block32_generic.wgsl and q4_k.wgsl): the 32 values of one sub-block of a
// 144-byte super-block, which sits at a 16-byte aligned offset (rows are whole super-blocks and
// 144 is a multiple of 16), read in aligned 16-byte loads, each byte once: d, dmin and the 12
// scale bytes in the first, the sub-block's nibbles in two of the eight quant loads;
// y = d·sc·q − dmin·m, as load8 computes it.
fn scale_byte(s: vec4<u32>, b: u32) -> u32 {
    // Scale byte b sits at byte 4 + b of the super-block: word 1 + b / 4 of `s`.
    return (s[1u + b / 4u] >> ((b % 4u) * 8u)) & 0xffu;
}

fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    let blk = body_at(rb, k / 256u);
    let sub = (k % 256u) / 32u;
    let g = sub / 2u;
    let hi = vec4<u32>((sub % 2u) * 4u);
    let s = quad(blk);
    let dm = unpack2x16float(s.x);
    // ggml's get_scale_min_k4 for sub-block `sub`.
    var sc = scale_byte(s, sub) & 63u;
    var mn = scale_byte(s, sub + 4u) & 63u;
    if (sub >= 4u) {
        sc = (scale_byte(s, sub + 4u) & 0xfu) | ((scale_byte(s, sub - 4u) >> 6u) << 4u);
        mn = (scale_byte(s, sub + 4u) >> 4u) | ((scale_byte(s, sub) >> 6u) << 4u);
    }
    let d = vec4<f32>(dm.x * f32(sc));
    let m = vec4<f32>(dm.y * f32(mn));
    let q = blk + 16u + 32u * g;
    let qa = (quad(q) >> hi) & vec4<u32>(0x0f0f0f0fu);
    let qb = (quad(q + 16u) >> hi) & vec4<u32>(0x0f0f0f0fu);
    return array<vec4<f32>, 8>(
        d * vec4<f32>(unpack4xU8(qa.x)) - m, d * vec4<f32>(unpack4xU8(qa.y)) - m,
        d * vec4<f32>(unpack4xU8(qa.z)) - m, d * vec4<f32>(unpack4xU8(qa.w)) - m,
        d * vec4<f32>(unpack4xU8(qb.x)) - m, d * vec4<f32>(unpack4xU8(qb.y)) - m,
        d * vec4<f32>(unpack4xU8(qb.z)) - m, d * vec4<f32>(unpack4xU8(qb.w)) - m);
}
