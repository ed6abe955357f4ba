// Q4_K block32 (see block32_generic.wgsl and q4_k.wgsl): the 32 values of one sub-block of a
// 144-byte super-block, which sits at a word-aligned offset (rows are whole super-blocks). Each
// byte is read once: d and dmin in the first word, the 12 scale bytes in the next three, the
// sub-block's nibbles in 8 of the 32 quant words; y = d·sc·q − dmin·m, as load8 computes it.
fn scale_byte(s: array<u32, 3>, b: u32) -> u32 {
    return (s[b / 4u] >> ((b % 4u) * 8u)) & 0xffu;
}

fn block32(rb: u32, k: u32) -> array<vec4<f32>, 8> {
    let blk = rb + (k / 256u) * 144u;
    let i = blk >> 2u;
    let sub = (k % 256u) / 32u;
    let g = sub / 2u;
    let hi = (sub % 2u) * 4u;
    let dm = unpack2x16float(w[i]);
    let s = array<u32, 3>(w[i + 1u], w[i + 2u], w[i + 3u]);
    // ggml's get_scale_min_k4 for sub-block `sub`.
    var sc = scale_byte(s, sub) & 63u;
    var mn = scale_byte(s, sub + 4u) & 63u;
    if (sub >= 4u) {
        sc = (scale_byte(s, sub + 4u) & 0xfu) | ((scale_byte(s, sub - 4u) >> 6u) << 4u);
        mn = (scale_byte(s, sub + 4u) >> 4u) | ((scale_byte(s, sub) >> 6u) << 4u);
    }
    let d = dm.x * f32(sc);
    let m = dm.y * f32(mn);
    let q = i + 4u + 8u * g;
    var out: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let word = w[q + j] >> hi;
        let n = vec4<u32>(word & 0xfu, (word >> 8u) & 0xfu, (word >> 16u) & 0xfu, (word >> 24u) & 0xfu);
        out[j] = d * vec4<f32>(n) - m;
    }
    return out;
}
