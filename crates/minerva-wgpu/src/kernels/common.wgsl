// Shared WGSL, prepended to every kernel that reads a weight. The kernel declares the weight
// binding `w: array<vec4<u32>>` (16-byte loads where the layout aligns them: `quad`); these
// helpers also read it by *byte* offset, because GGML blocks put fields at offsets that are not
// multiples of 4. Words are little-endian, as in the file.
//
// A row's blocks are stored as layout.rs describes (from the constants it emits: GROUP_BLOCKS,
// HEAD_BYTES, BODY_BYTES, HEADS_BYTES, GROUP_BYTES): groups of blocks, each group's heads first
// (padded to 16 bytes), then its bodies, each 16-byte aligned.

// Byte offset of block `b`'s head in the row at byte `rb`.
fn head_at(rb: u32, b: u32) -> u32 {
    return rb + (b / GROUP_BLOCKS) * GROUP_BYTES + (b % GROUP_BLOCKS) * HEAD_BYTES;
}

// Byte offset of block `b`'s body in the row at byte `rb`.
fn body_at(rb: u32, b: u32) -> u32 {
    return rb + (b / GROUP_BLOCKS) * GROUP_BYTES + HEADS_BYTES + (b % GROUP_BLOCKS) * BODY_BYTES;
}

// The 16 bytes at a 16-byte aligned `off`.
fn quad(off: u32) -> vec4<u32> {
    return w[off >> 4u];
}

// Word `i` (bytes 4i..4i + 4).
fn word(i: u32) -> u32 {
    return w[i >> 2u][i & 3u];
}

// The byte at `off`.
fn load_u8(off: u32) -> u32 {
    return (word(off >> 2u) >> ((off & 3u) * 8u)) & 0xffu;
}

// The u16 at an even `off` (never straddles a word).
fn load_u16(off: u32) -> u32 {
    return (word(off >> 2u) >> ((off & 2u) * 8u)) & 0xffffu;
}

// The u32 at any `off`: one word when aligned, else the two words it straddles.
fn load_u32(off: u32) -> u32 {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    if (s == 0u) {
        return word(i);
    }
    return (word(i) >> s) | (word(i + 1u) << (32u - s));
}

// IEEE half at an even `off`. unpack2x16float is core WGSL: no SHADER_F16 needed.
fn f16_at(off: u32) -> f32 {
    return unpack2x16float(load_u16(off)).x;
}

// bfloat16 at an even `off`: the high half of an f32.
fn bf16_at(off: u32) -> f32 {
    return bitcast<f32>(load_u16(off) << 16u);
}

// Byte `i` (0..3) of `word` as a signed 8-bit integer.
fn i8_of(word: u32, i: u32) -> f32 {
    return f32(bitcast<i32>(word << (24u - 8u * i)) >> 24u);
}

// ggml's ggml_e8m0_to_fp32_half: 2^(e-128), with e = 0, 1 giving the subnormals 2^-128, 2^-127.
fn e8m0_half(e: u32) -> f32 {
    if (e < 2u) {
        return bitcast<f32>(0x00200000u << e);
    }
    return bitcast<f32>((e - 1u) << 23u);
}
