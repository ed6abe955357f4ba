//! The K-quant layouts of [`crate::repack`]: Q2_K…Q6_K super-blocks of 256 values, 16
//! rows interleaved, multiplied with Q8_K activations (llama.cpp's `vec_dot_type` for the
//! K-quants, and what the zero-copy K-quant kernels read: repacking them changes no activation's
//! precision).
//!
//! A decoded slot holds four values of each of the 16 rows (64 bytes, row r's four at 4r), as in
//! the 32-value formats. A super-block's part of a group is a run of *parts*, each everything a
//! kernel needs for two sub-blocks, in the order it reads them, then the f16 scales of the rows
//! (one pass over a group is one forward sweep through memory: a layout that made the kernels
//! jump between regions ran at half the DRAM bandwidth of the file's own rows on one activation):
//!
//! ```text
//! Q4_K, Q5_K: 4 parts of 64 values (sub-blocks 2p, 2p + 1 of 32), then d, dmin (16 × f16 each)
//!   fifth bits 16 × u64    (Q5_K only, first) word 8h + c, bit 4r + i: the fifth bit of slot c's
//!                          value i in sub-block 2p + h
//!   slots       8 × 64 B   slot c, row r, byte i: value 4c + i of sub-block 2p (low nibble) and
//!                          of sub-block 2p + 1 (high nibble)
//!   scales     32 B        row r: sc(2p), sc(2p + 1)     (6-bit, unpacked to bytes)
//!   minimums   32 B        row r: m(2p), m(2p + 1)
//!   Q4_K 4 × 576 + 64 = 2368 B = 16 × 144 + 64;  Q5_K 4 × 704 + 64 = 2880 B = 16 × 176 + 64
//! Q6_K: 8 parts of 32 values (sub-blocks 2p, 2p + 1 of 16), then d (16 × f16)
//!   low bits    4 × 64 B   slot k, row r, byte i: bits 0..4 of value 4k + i (low nibble) and
//!                          of value 16 + 4k + i (high nibble)
//!   high bits   2 × 64 B   slot e, bits 2m, 2m + 1 of byte (r, i): bits 4, 5 of value
//!                          16e + 4m + i
//!   scales     32 B        row r: sc(2p), sc(2p + 1)     (i8)
//!   8 × 416 + 32 = 3360 B = 16 × 210
//! Q3_K: 8 parts of 32 values (sub-blocks 2p, 2p + 1 of 16), then d (16 × f16)
//!   low bits    2 × 64 B   slot e, bits 2m, 2m + 1 of byte (r, i): bits 0, 1 of value
//!                          16e + 4m + i (Q6_K's high bits' order)
//!   high bits   1 × 64 B   bit 4e + m of byte (r, i): bit 2 of value 16e + 4m + i
//!   scales     32 B        row r: sc(2p), sc(2p + 1)     (i8, −32..31)
//!   8 × 224 + 32 = 1824 B = 16 × 114
//! Q2_K: 8 parts of 32 values (sub-blocks 2p, 2p + 1 of 16), then d, dmin (16 × f16 each)
//!   low bits    2 × 64 B   as Q3_K's (the whole value, 0..3)
//!   scales     32 B        row r: GGML's bytes of 2p, 2p + 1 (scale low nibble, minimum high)
//!   8 × 160 + 64 = 1344 B = 16 × 84
//! ```
//!
//! Q3_K's and Q6_K's quants are stored unsigned: their values plus 4 and plus 32 (Q3_K's are
//! GGML's two low bits with its `hmask` bit as bit 2: GGML subtracts 4 where that bit is clear).
//!
//! The scales are unpacked once (Q4_K's and Q5_K's 6-bit fields cost 64 bytes per super-block of
//! 16 rows, 2.8 % and 2.3 %) and kept in pairs, so a kernel widens a pair to i16 lanes in one
//! instruction for `vpmaddwd` / `vpdpwssd`. Per row and super-block the sums are exact integers,
//! then fixed f32 steps ([`reference_kernel`]):
//!
//! ```text
//! Q4_K  s = Σ_j sc_j · Σ q·a       n = Σ_j m_j · Σa_j (32 values each; Q5_K the same, q 0..31)
//!       acc = fma(d_w·d_a, f32(s), acc);  acc = fma(−(dmin_w·d_a), f32(n), acc)
//! Q6_K  s = Σ_j sc_j · Σ q·a − 32 · Σ_j sc_j · Σa_j  (q unsigned 0..63; 16 values each)
//!       acc = fma(d_w·d_a, f32(s), acc)
//! Q3_K  the same with q unsigned 0..7 and 4 · Σ_j sc_j · Σa_j
//! Q2_K  s = Σ_j sc_j · Σ q·a       n = Σ_j m_j · Σa_j  (16 values each), then as Q4_K
//! ```

use half::f16;
use minerva_core::DType;

use super::{GROUP_ROWS, SLOT_BYTES};
use crate::activation::Activation;
use crate::ggml::k_quants::q3_k_scales;

/// Values per super-block.
const QK: usize = 256;

/// Where a super-block's parts lie within its part of a group (module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// Values per part (two sub-blocks).
    pub(crate) values: usize,
    /// Bytes per part.
    pub(crate) part: usize,
    /// Within a part: the decoded slots.
    pub(crate) slots: usize,
    /// Within a part: the scale pairs, the minimum pairs (Q4_K, Q5_K), and the fifth bits (Q5_K)
    /// or the high bits (Q3_K, Q6_K). A field a format lacks (Q4_K's `high`, Q3_K's and Q6_K's
    /// `minimums` and `dmin`) holds an offset past the fields it has and is never read.
    pub(crate) scales: usize,
    pub(crate) minimums: usize,
    pub(crate) high: usize,
    /// After the parts: the rows' d, then (Q4_K, Q5_K) dmin.
    pub(crate) d: usize,
    pub(crate) dmin: usize,
    /// Bytes of a super-block of a group.
    pub(crate) bytes: usize,
    /// Q3_K's and Q6_K's quants are stored plus `1 << offset_shift` (4, 32); 0 for the formats with
    /// minimums, whose quants carry no offset.
    pub(crate) offset_shift: u32,
}

pub(crate) const Q4_K: Layout = Layout {
    values: 64,
    part: 576,
    slots: 0,
    scales: 512,
    minimums: 544,
    high: 576,
    d: 2304,
    dmin: 2336,
    bytes: 2368,
    offset_shift: 0,
};
pub(crate) const Q5_K: Layout = Layout {
    values: 64,
    part: 704,
    slots: 128,
    scales: 640,
    minimums: 672,
    high: 0,
    d: 2816,
    dmin: 2848,
    bytes: 2880,
    offset_shift: 0,
};
pub(crate) const Q6_K: Layout = Layout {
    values: 32,
    part: 416,
    slots: 0,
    scales: 384,
    minimums: 416,
    high: 256,
    d: 3328,
    dmin: 3360,
    bytes: 3360,
    offset_shift: 5,
};
pub(crate) const Q3_K: Layout = Layout {
    values: 32,
    part: 224,
    slots: 0,
    scales: 192,
    minimums: 224,
    high: 128,
    d: 1792,
    dmin: 1824,
    bytes: 1824,
    offset_shift: 2,
};
/// Q2_K's minimums share the scales' bytes (the high nibbles).
pub(crate) const Q2_K: Layout = Layout {
    values: 32,
    part: 160,
    slots: 0,
    scales: 128,
    minimums: 128,
    high: 160,
    d: 1280,
    dmin: 1312,
    bytes: 1344,
    offset_shift: 0,
};

/// The layout of a K-quant that repacks.
#[inline(always)]
pub(crate) const fn layout(dtype: DType) -> Option<Layout> {
    match dtype {
        DType::Q4_K => Some(Q4_K),
        DType::Q5_K => Some(Q5_K),
        DType::Q6_K => Some(Q6_K),
        DType::Q3_K => Some(Q3_K),
        DType::Q2_K => Some(Q2_K),
        _ => None,
    }
}

/// Bytes of one super-block of a group of 16 rows, for the K-quants that repack.
pub(crate) const fn group_block_bytes(dtype: DType) -> Option<usize> {
    match layout(dtype) {
        Some(layout) => Some(layout.bytes),
        None => None,
    }
}

/// Q4_K's packed 6-bit scales and minimums (12 bytes) as 8 of each.
fn q4_k_scales(packed: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        (sc[j], m[j]) = if j < 4 {
            (packed[j] & 63, packed[j + 4] & 63)
        } else {
            ((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4), (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4))
        };
    }
    (sc, m)
}

/// The inverse of [`q4_k_scales`] (a bijection on 6-bit values).
fn q4_k_packed_scales(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut packed = [0u8; 12];
    for i in 0..4 {
        packed[i] = sc[i] | ((sc[i + 4] >> 4) << 6);
        packed[i + 4] = m[i] | ((m[i + 4] >> 4) << 6);
        packed[i + 8] = (sc[i + 4] & 0xF) | ((m[i + 4] & 0xF) << 4);
    }
    packed
}

/// A Q6_K block's 256 six-bit quants (0..63, in value order) into its `ql` and `qh` (`block[..192]`).
fn q6_k_store_values(q: &[u8; QK], block: &mut [u8]) {
    let (ql, qh) = block[..192].split_at_mut(128);
    for h in 0..2 {
        for l in 0..32 {
            let v = [q[128 * h + l], q[128 * h + l + 32], q[128 * h + l + 64], q[128 * h + l + 96]];
            ql[64 * h + l] = (v[0] & 0xF) | ((v[2] & 0xF) << 4);
            ql[64 * h + l + 32] = (v[1] & 0xF) | ((v[3] & 0xF) << 4);
            qh[32 * h + l] = (v[0] >> 4) | ((v[1] >> 4) << 2) | ((v[2] >> 4) << 4) | ((v[3] >> 4) << 6);
        }
    }
}

/// Q3_K's 16 signed scales as GGML packs them (12 bytes): [`q3_k_scales`]' inverse.
fn q3_k_packed_scales(sc: &[u8; 16]) -> [u8; 12] {
    let mut packed = [0u8; 12];
    for (i, &sc) in sc.iter().enumerate() {
        let raw = (sc as i8 as i32 + 32) as u8;
        if i < 8 {
            packed[i] |= raw & 0xF;
        } else {
            packed[i - 8] |= (raw & 0xF) << 4;
        }
        packed[8 + i % 4] |= (raw >> 4) << (2 * (i / 4));
    }
    packed
}

/// Bits of a value's low and high fields: Q2_K 2 (none), Q3_K 2 and 1, Q5_K 4 and 1, Q6_K 4 and 2
/// (Q4_K 4, none).
#[inline(always)]
const fn field_bits(dtype: DType) -> (u32, u32) {
    match dtype {
        DType::Q2_K => (2, 0),
        DType::Q3_K => (2, 1),
        DType::Q6_K => (4, 2),
        _ => (4, 1),
    }
}

/// Where row `r`'s value `v` lies in a super-block's part of a group: (byte, shift) of its low
/// bits ([`field_bits`]), and for Q3_K / Q5_K / Q6_K of its high bits.
#[inline(always)]
fn value_at(dtype: DType, r: usize, v: usize) -> ((usize, u32), Option<(usize, u32)>) {
    let Some(l) = layout(dtype) else { return ((0, 0), None) };
    let (p, within, i) = (v / l.values, v % l.values, v % 4);
    let base = p * l.part + 4 * r + i;
    match dtype {
        DType::Q2_K | DType::Q3_K => {
            let (e, m) = (within / 16, within % 16 / 4);
            let high = (dtype == DType::Q3_K).then_some((base + l.high, (4 * e + m) as u32));
            ((base + l.slots + SLOT_BYTES * e, 2 * m as u32), high)
        }
        DType::Q6_K => {
            let (k, e) = (within % 16 / 4, within / 16);
            let m = within % 16 / 4;
            ((base + l.slots + SLOT_BYTES * k, 4 * e as u32), Some((base + l.high + SLOT_BYTES * e, 2 * m as u32)))
        }
        _ => {
            let (h, c) = (within / 32, within % 32 / 4);
            let low = (base + l.slots + SLOT_BYTES * c, 4 * h as u32);
            // Word 8h + c of the fifth bits, bit 4r + i: byte (4r + i) / 8 of it.
            let word = p * l.part + l.high + 8 * (8 * h + c);
            let high = (dtype == DType::Q5_K).then_some((word + (4 * r + i) / 8, ((4 * r + i) % 8) as u32));
            (low, high)
        }
    }
}

/// Where row `r`'s scale (and minimum) byte of sub-block `j` lies.
#[inline(always)]
fn scale_at(l: Layout, r: usize, j: usize) -> (usize, usize) {
    let at = j / 2 * l.part + 2 * r + j % 2;
    (at + l.scales, at + l.minimums)
}

/// Row `r`'s quant of value `v` (Q2_K 0..3, Q3_K 0..7, Q4_K 0..15, Q5_K 0..31, Q6_K 0..63).
fn quant(dtype: DType, src: &[u8], r: usize, v: usize) -> u8 {
    let (low_bits, high_bits) = field_bits(dtype);
    let ((at, shift), high) = value_at(dtype, r, v);
    let low = (src[at] >> shift) & ((1 << low_bits) - 1);
    match high {
        Some((at, shift)) => low | (((src[at] >> shift) & ((1 << high_bits) - 1)) << low_bits),
        None => low,
    }
}

/// Row `r`'s quants, scales (minimums) and f16 scale bytes of one GGML K-quant block.
struct Block {
    q: [u8; QK],
    sc: [u8; 16],
    m: [u8; 8],
    d: [u8; 2],
    dmin: [u8; 2],
}

impl Block {
    /// A GGML block's scales (and minimums) and f16 scale bytes; the quants are left zero:
    /// [`pack_quants`] moves them into a group straight from the GGML bytes.
    #[inline(always)]
    fn scales_from_ggml(dtype: DType, src: &[u8]) -> Block {
        let mut block = Block { q: [0; QK], sc: [0; 16], m: [0; 8], d: [0; 2], dmin: [0; 2] };
        match dtype {
            DType::Q2_K => {
                // The scale bytes as they are (minimum in the high nibble): they are stored so.
                block.sc.copy_from_slice(&src[..16]);
                block.d.copy_from_slice(&src[80..82]);
                block.dmin.copy_from_slice(&src[82..84]);
            }
            DType::Q3_K => {
                let packed: &[u8; 12] = src[96..108].try_into().expect("twelve scale bytes");
                block.sc = q3_k_scales(packed).map(|sc| sc as u8);
                block.d.copy_from_slice(&src[108..110]);
            }
            DType::Q6_K => {
                block.sc.copy_from_slice(&src[192..208]);
                block.d.copy_from_slice(&src[208..210]);
            }
            _ => {
                let (sc, m) = q4_k_scales(&src[4..16]);
                block.sc[..8].copy_from_slice(&sc);
                block.m = m;
                block.d.copy_from_slice(&src[0..2]);
                block.dmin.copy_from_slice(&src[2..4]);
            }
        }
        block
    }

    fn to_ggml(&self, dtype: DType, dst: &mut [u8]) {
        match dtype {
            DType::Q2_K => {
                dst[..16].copy_from_slice(&self.sc);
                let qs = &mut dst[16..80];
                qs.fill(0);
                for (v, &q) in self.q.iter().enumerate() {
                    let (half, quarter, lane) = (v / 128, v % 128 / 32, v % 32);
                    qs[32 * half + lane] |= q << (2 * quarter);
                }
                dst[80..82].copy_from_slice(&self.d);
                dst[82..84].copy_from_slice(&self.dmin);
            }
            DType::Q3_K => {
                let (hmask, rest) = dst[..110].split_at_mut(32);
                let (qs, rest) = rest.split_at_mut(64);
                hmask.fill(0);
                qs.fill(0);
                for (v, &q) in self.q.iter().enumerate() {
                    let (half, quarter, lane) = (v / 128, v % 128 / 32, v % 32);
                    qs[32 * half + lane] |= (q & 3) << (2 * quarter);
                    hmask[lane] |= (q >> 2) << (v / 32);
                }
                rest[..12].copy_from_slice(&q3_k_packed_scales(&self.sc));
                rest[12..14].copy_from_slice(&self.d);
            }
            DType::Q6_K => {
                q6_k_store_values(&self.q, dst);
                dst[192..208].copy_from_slice(&self.sc);
                dst[208..210].copy_from_slice(&self.d);
            }
            _ => {
                dst[0..2].copy_from_slice(&self.d);
                dst[2..4].copy_from_slice(&self.dmin);
                let sc: [u8; 8] = self.sc[..8].try_into().expect("eight scales");
                dst[4..16].copy_from_slice(&q4_k_packed_scales(&sc, &self.m));
                let (qh, qs) =
                    if dtype == DType::Q5_K { dst[16..176].split_at_mut(32) } else { dst[16..144].split_at_mut(0) };
                qh.fill(0);
                qs.fill(0);
                for v in 0..QK {
                    let (j, l) = (v / 32, v % 32);
                    qs[32 * (j / 2) + l] |= (self.q[v] & 0xF) << (4 * (j % 2));
                    if let Some(bit) = qh.get_mut(l) {
                        *bit |= (self.q[v] >> 4) << j;
                    }
                }
            }
        }
    }
}

/// Four bytes of `bytes` from `at`, little-endian.
#[inline(always)]
fn word(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

/// Writes `w` as four bytes of `dst` from `at`.
#[inline(always)]
fn put(dst: &mut [u8], at: usize, w: u32) {
    dst[at..at + 4].copy_from_slice(&w.to_le_bytes());
}

/// Row `r`'s quants of one GGML super-block (`src`) into its lanes of the group's super-block
/// (`dst`, zero before): four values of one row at a time, read and written as words, the layout
/// [`value_at`] describes (the round-trip test checks the two agree).
#[inline(always)]
fn pack_quants(dtype: DType, l: Layout, src: &[u8], r: usize, dst: &mut [u8]) {
    // Byte i of a word is value i of the four; each field keeps to its byte when shifted.
    let row = 4 * r;
    match dtype {
        DType::Q2_K | DType::Q3_K => {
            // Value 32p + 16e + 4m + i: bits 2(p % 4) of byte 32(p / 4) + 16e + 4m + i of `qs`;
            // Q3_K's bit 2 is bit p of `hmask` byte 16e + 4m + i.
            let (qs, hmask) = if dtype == DType::Q2_K { (&src[16..80], &[][..]) } else { (&src[32..96], &src[..32]) };
            for p in 0..8 {
                let (at, shift) = (32 * (p / 4), 2 * (p % 4));
                let part = p * l.part;
                for e in 0..2 {
                    let mut w = 0;
                    for m in 0..4 {
                        w |= ((word(qs, at + 16 * e + 4 * m) >> shift) & 0x0303_0303) << (2 * m);
                    }
                    put(dst, part + l.slots + SLOT_BYTES * e + row, w);
                }
                if dtype == DType::Q3_K {
                    let mut w = 0;
                    for e in 0..2 {
                        for m in 0..4 {
                            w |= ((word(hmask, 16 * e + 4 * m) >> p) & 0x0101_0101) << (4 * e + m);
                        }
                    }
                    put(dst, part + l.high + row, w);
                }
            }
        }
        DType::Q6_K => {
            // Value 32p + w: `ql` byte 64(p / 4) + 32(p % 2) + w, nibble (p % 4) / 2, and bits
            // 2(p % 4) of `qh` byte 32(p / 4) + w.
            let (ql, qh) = (&src[..128], &src[128..192]);
            for p in 0..8 {
                let part = p * l.part;
                let (low_at, nibble) = (64 * (p / 4) + 32 * (p % 2), 4 * ((p % 4) / 2));
                for k in 0..4 {
                    let low = (word(ql, low_at + 4 * k) >> nibble) & 0x0F0F_0F0F;
                    let high = (word(ql, low_at + 16 + 4 * k) >> nibble) & 0x0F0F_0F0F;
                    put(dst, part + l.slots + SLOT_BYTES * k + row, low | high << 4);
                }
                let (high_at, shift) = (32 * (p / 4), 2 * (p % 4));
                for e in 0..2 {
                    let mut w = 0;
                    for m in 0..4 {
                        w |= ((word(qh, high_at + 16 * e + 4 * m) >> shift) & 0x0303_0303) << (2 * m);
                    }
                    put(dst, part + l.high + SLOT_BYTES * e + row, w);
                }
            }
        }
        _ => {
            // Q4_K, Q5_K: slot c of part p is `qs` bytes 32p + 4c.. as they are (value 64p + 4c + i
            // in the low nibble, 64p + 32 + 4c + i in the high); Q5_K's fifth bit of value
            // 64p + 32h + 4c + i is bit 2p + h of `qh` byte 4c + i, stored at bit 4r + i of word
            // 8h + c.
            let (qh, qs) = if dtype == DType::Q5_K { (&src[16..48], &src[48..176]) } else { (&[][..], &src[16..144]) };
            for p in 0..4 {
                let part = p * l.part;
                for c in 0..8 {
                    put(dst, part + l.slots + SLOT_BYTES * c + row, word(qs, 32 * p + 4 * c));
                    if dtype != DType::Q5_K {
                        continue;
                    }
                    for h in 0..2 {
                        let bits = (word(qh, 4 * c) >> (2 * p + h)) & 0x0101_0101;
                        let nibble = ((bits | bits >> 7 | bits >> 14 | bits >> 21) & 0xF) as u8;
                        dst[part + l.high + 8 * (8 * h + c) + r / 2] |= nibble << (4 * (r % 2));
                    }
                }
            }
        }
    }
}

/// Whether a K-quant has minimums (Q2_K, Q4_K, Q5_K; not Q3_K, Q6_K).
fn has_minimums(dtype: DType) -> bool {
    matches!(dtype, DType::Q2_K | DType::Q4_K | DType::Q5_K)
}

/// Whether a K-quant's minimums have bytes of their own (Q4_K, Q5_K; Q2_K's share the scales').
fn has_minimum_bytes(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_K | DType::Q5_K)
}

/// Up to 16 GGML rows of Q2_K…Q6_K into one group (every byte written; missing rows zero).
pub(crate) fn pack_group(dtype: DType, rows: &[&[u8]], out: &mut [u8]) {
    // One copy of the loop per format, its layout's offsets constants, and the quants moved four
    // values of a row at a time (`pack_quants`): a Llama 1B Q2_K file's load spent 86 % of its
    // samples here when each value's place was worked out from a run-time layout, one by one.
    match dtype {
        DType::Q2_K => pack_group_as(DType::Q2_K, rows, out),
        DType::Q3_K => pack_group_as(DType::Q3_K, rows, out),
        DType::Q4_K => pack_group_as(DType::Q4_K, rows, out),
        DType::Q5_K => pack_group_as(DType::Q5_K, rows, out),
        DType::Q6_K => pack_group_as(DType::Q6_K, rows, out),
        _ => {}
    }
}

#[inline(always)]
fn pack_group_as(dtype: DType, rows: &[&[u8]], out: &mut [u8]) {
    let Some(l) = layout(dtype) else { return };
    let block_bytes = dtype.block_bytes();
    let subs = QK / (l.values / 2);
    for (b, dst) in out.chunks_exact_mut(l.bytes).enumerate() {
        dst.fill(0);
        for (r, row) in rows.iter().enumerate() {
            let src = &row[b * block_bytes..][..block_bytes];
            pack_quants(dtype, l, src, r, dst);
            let block = Block::scales_from_ggml(dtype, src);
            for j in 0..subs {
                let (sc, m) = scale_at(l, r, j);
                dst[sc] = block.sc[j];
                if has_minimum_bytes(dtype) {
                    dst[m] = block.m[j];
                }
            }
            dst[l.d + 2 * r..][..2].copy_from_slice(&block.d);
            if has_minimums(dtype) {
                dst[l.dmin + 2 * r..][..2].copy_from_slice(&block.dmin);
            }
        }
    }
}

/// Row `r` of a Q2_K…Q6_K group back to its GGML bytes.
pub(crate) fn unpack_row(dtype: DType, group: &[u8], r: usize, out: &mut [u8]) {
    let Some(l) = layout(dtype) else { return };
    let subs = QK / (l.values / 2);
    for (b, dst) in out.chunks_exact_mut(dtype.block_bytes()).enumerate() {
        let src = &group[b * l.bytes..][..l.bytes];
        let mut block = Block { q: [0; QK], sc: [0; 16], m: [0; 8], d: [0; 2], dmin: [0; 2] };
        for v in 0..QK {
            block.q[v] = quant(dtype, src, r, v);
        }
        for j in 0..subs {
            let (sc, m) = scale_at(l, r, j);
            block.sc[j] = src[sc];
            if has_minimum_bytes(dtype) {
                block.m[j] = src[m];
            }
        }
        block.d.copy_from_slice(&src[l.d + 2 * r..][..2]);
        if has_minimums(dtype) {
            block.dmin.copy_from_slice(&src[l.dmin + 2 * r..][..2]);
        }
        block.to_ggml(dtype, dst);
    }
}

/// The scalar kernel of the K-quant layouts: the definition their SIMD kernels equal bit for bit.
pub(crate) fn reference_kernel(dtype: DType, group: &[u8], acts: &[Activation<'_>], out: &mut [[f32; GROUP_ROWS]]) {
    let Some(l) = layout(dtype) else { return };
    for (act, out) in acts.iter().zip(out.iter_mut()) {
        *out = [0.0; GROUP_ROWS];
        for (b, src) in group.chunks_exact(l.bytes).enumerate() {
            let a = &act.qs[QK * b..][..QK];
            let bsums = &act.bsums[16 * b..][..16];
            let d_a = act.d[b];
            for (r, acc) in out.iter_mut().enumerate() {
                let d_w = f16::from_le_bytes([src[l.d + 2 * r], src[l.d + 2 * r + 1]]).to_f32();
                let dot = |values: std::ops::Range<usize>| -> i32 {
                    values.map(|v| i32::from(quant(dtype, src, r, v)) * i32::from(a[v] as i8)).sum()
                };
                if !has_minimums(dtype) {
                    let offset = 1 << l.offset_shift;
                    let (mut s, mut c) = (0i32, 0i32);
                    for j in 0..16 {
                        let sc = i32::from(src[scale_at(l, r, j).0] as i8);
                        s += sc * dot(16 * j..16 * j + 16);
                        c += sc * i32::from(bsums[j]);
                    }
                    *acc = (d_w * d_a).mul_add((s - offset * c) as f32, *acc);
                } else {
                    let (mut s, mut n) = (0i32, 0i32);
                    if dtype == DType::Q2_K {
                        for j in 0..16 {
                            let byte = src[scale_at(l, r, j).0];
                            s += i32::from(byte & 0xF) * dot(16 * j..16 * j + 16);
                            n += i32::from(byte >> 4) * i32::from(bsums[j]);
                        }
                    } else {
                        for j in 0..8 {
                            let (sc, m) = scale_at(l, r, j);
                            s += i32::from(src[sc]) * dot(32 * j..32 * j + 32);
                            n += i32::from(src[m]) * (i32::from(bsums[2 * j]) + i32::from(bsums[2 * j + 1]));
                        }
                    }
                    let dmin = f16::from_le_bytes([src[l.dmin + 2 * r], src[l.dmin + 2 * r + 1]]).to_f32();
                    *acc = (d_w * d_a).mul_add(s as f32, *acc);
                    *acc = (-(dmin * d_a)).mul_add(n as f32, *acc);
                }
            }
        }
    }
}
