//! The K-quant layouts of [`crate::repack`]: Q4_K, Q5_K and Q6_K super-blocks of 256 values, 16
//! rows interleaved, multiplied with Q8_K activations (llama.cpp's `vec_dot_type` for the K-quants, and
//! what the zero-copy K-quant kernels read: repacking them changes no activation's precision).
//!
//! A decoded slot t holds values 4t .. 4t + 4 of each of the 16 rows (64 bytes, row r's four at
//! 4r), as in the 32-value formats; per super-block of a group:
//!
//! ```text
//! Q4_K (2368 B = 16 × 144 + 64)
//!   quants     32 slots × 64 B   slot 8p + c, row r, byte i = row r's qs byte 32p + 4c + i
//!                                (low nibble: sub-block 2p value 4c + i, high: sub-block 2p + 1)
//!   scales      4 × 32 B         pair p, row r: sc(2p), sc(2p + 1)   (6-bit, unpacked to bytes)
//!   minimums    4 × 32 B         pair p, row r: m(2p), m(2p + 1)
//!   d, dmin    16 × f16 each
//! Q5_K (2880 B = 16 × 176 + 64): Q4_K's parts at the same offsets, then
//!   fifth bits 64 × u64          word t, bit 4r + i = row r's fifth bit of value 4t + i
//! Q6_K (3360 B = 16 × 210)
//!   low bits   32 slots × 64 B   slot c: low nibble = bits 0..4 of decoded slot c, high nibble
//!                                of decoded slot 32 + c
//!   high bits  16 slots × 64 B   slot e, bits 2k, 2k + 1 = bits 4, 5 of decoded slot e + 16k
//!   scales      8 × 32 B         pair p, row r: sc(2p), sc(2p + 1)   (i8, one per 16 values)
//!   d          16 × f16
//! ```
//!
//! The scales are unpacked once (Q4_K's 6-bit fields cost 64 bytes per super-block of 16 rows,
//! 2.8 %) and kept in pairs, so a kernel widens a pair to i16 lanes in one instruction for
//! `vpmaddwd` / `vpdpwssd`. Per row and super-block the sums are exact integers, then fixed f32
//! steps ([`reference_kernel`]):
//!
//! ```text
//! Q4_K  s = Σ_j sc_j · Σ q·a       n = Σ_j m_j · Σa_j (32 values each; Q5_K the same, q 0..31)
//!       acc = fma(d_w·d_a, f32(s), acc);  acc = fma(−(dmin_w·d_a), f32(n), acc)
//! Q6_K  s = Σ_j sc_j · Σ q·a − 32 · Σ_j sc_j · Σa_j  (q unsigned 0..63; 16 values each)
//!       acc = fma(d_w·d_a, f32(s), acc)
//! ```

use half::f16;
use minerva_core::DType;

use super::{GROUP_ROWS, SLOT_BYTES};
use crate::activation::Activation;

/// Values per super-block.
const QK: usize = 256;

/// Where a Q4_K super-block's parts begin within its part of a group.
pub(crate) mod q4_k {
    pub(crate) const SCALES: usize = 32 * super::SLOT_BYTES;
    pub(crate) const MINIMUMS: usize = SCALES + 128;
    pub(crate) const D: usize = MINIMUMS + 128;
    pub(crate) const DMIN: usize = D + 32;
    pub(crate) const BYTES: usize = DMIN + 32;
}

/// Where a Q5_K super-block's fifth bits begin (the rest as Q4_K's), and its size.
pub(crate) mod q5_k {
    pub(crate) const HIGH: usize = super::q4_k::BYTES;
    pub(crate) const BYTES: usize = HIGH + 64 * 8;
}

/// Where a Q6_K super-block's parts begin within its part of a group.
pub(crate) mod q6_k {
    pub(crate) const HIGH: usize = 32 * super::SLOT_BYTES;
    pub(crate) const SCALES: usize = HIGH + 16 * super::SLOT_BYTES;
    pub(crate) const D: usize = SCALES + 256;
    pub(crate) const BYTES: usize = D + 32;
}

/// Bytes of one super-block of a group of 16 rows, for the K-quants that repack.
pub(crate) const fn group_block_bytes(dtype: DType) -> Option<usize> {
    match dtype {
        DType::Q4_K => Some(q4_k::BYTES),
        DType::Q5_K => Some(q5_k::BYTES),
        DType::Q6_K => Some(q6_k::BYTES),
        _ => None,
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

/// A Q6_K block's 256 six-bit quants (0..63) in value order.
fn q6_k_values(block: &[u8]) -> [u8; QK] {
    let (ql, qh) = (&block[..128], &block[128..192]);
    let mut q = [0u8; QK];
    for h in 0..2 {
        for l in 0..32 {
            let (lo, hi) = (ql[64 * h + l], ql[64 * h + l + 32]);
            let high = qh[32 * h + l];
            q[128 * h + l] = (lo & 0xF) | ((high & 3) << 4);
            q[128 * h + l + 32] = (hi & 0xF) | (((high >> 2) & 3) << 4);
            q[128 * h + l + 64] = (lo >> 4) | (((high >> 4) & 3) << 4);
            q[128 * h + l + 96] = (hi >> 4) | (((high >> 6) & 3) << 4);
        }
    }
    q
}

/// The inverse of [`q6_k_values`]: `ql` and `qh` into `block[..192]`.
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

/// Byte `i` of row `r` in slot `s` of a super-block's part.
const fn at(slot: usize, r: usize, i: usize) -> usize {
    SLOT_BYTES * slot + 4 * r + i
}

/// Up to 16 GGML rows of Q4_K, Q5_K or Q6_K into one group (every byte written; missing rows zero).
pub(crate) fn pack_group(dtype: DType, rows: &[&[u8]], out: &mut [u8]) {
    let (block_bytes, group_block) = (dtype.block_bytes(), group_block_bytes(dtype).unwrap_or(0));
    for (b, dst) in out.chunks_exact_mut(group_block).enumerate() {
        dst.fill(0);
        for (r, row) in rows.iter().enumerate() {
            let src = &row[b * block_bytes..][..block_bytes];
            match dtype {
                DType::Q4_K | DType::Q5_K => {
                    let qs = if dtype == DType::Q5_K { 48 } else { 16 };
                    for (slot, bytes) in src[qs..qs + 128].chunks_exact(4).enumerate() {
                        dst[at(slot, r, 0)..][..4].copy_from_slice(bytes);
                    }
                    if dtype == DType::Q5_K {
                        let qh = &src[16..48];
                        for v in 0..QK {
                            let bit = u64::from((qh[v % 32] >> (v / 32)) & 1);
                            let word = q5_k::HIGH + 8 * (v / 4);
                            let mask = u64::from_le_bytes(dst[word..word + 8].try_into().expect("eight bytes"));
                            dst[word..word + 8].copy_from_slice(&(mask | bit << (4 * r + v % 4)).to_le_bytes());
                        }
                    }
                    let (sc, m) = q4_k_scales(&src[4..16]);
                    for j in 0..8 {
                        dst[q4_k::SCALES + 32 * (j / 2) + 2 * r + j % 2] = sc[j];
                        dst[q4_k::MINIMUMS + 32 * (j / 2) + 2 * r + j % 2] = m[j];
                    }
                    dst[q4_k::D + 2 * r..][..2].copy_from_slice(&src[0..2]);
                    dst[q4_k::DMIN + 2 * r..][..2].copy_from_slice(&src[2..4]);
                }
                _ => {
                    let q = q6_k_values(src);
                    for (v, &q) in q.iter().enumerate() {
                        let (t, i) = (v / 4, v % 4);
                        dst[at(t % 32, r, i)] |= (q & 0xF) << (4 * (t / 32));
                        dst[q6_k::HIGH + at(t % 16, r, i)] |= (q >> 4) << (2 * (t / 16));
                    }
                    for j in 0..16 {
                        dst[q6_k::SCALES + 32 * (j / 2) + 2 * r + j % 2] = src[192 + j];
                    }
                    dst[q6_k::D + 2 * r..][..2].copy_from_slice(&src[208..210]);
                }
            }
        }
    }
}

/// Row `r` of a Q4_K, Q5_K or Q6_K group back to its GGML bytes.
pub(crate) fn unpack_row(dtype: DType, group: &[u8], r: usize, out: &mut [u8]) {
    let (block_bytes, group_block) = (dtype.block_bytes(), group_block_bytes(dtype).unwrap_or(0));
    for (b, dst) in out.chunks_exact_mut(block_bytes).enumerate() {
        let src = &group[b * group_block..][..group_block];
        match dtype {
            DType::Q4_K | DType::Q5_K => {
                let qs = if dtype == DType::Q5_K { 48 } else { 16 };
                for (slot, bytes) in dst[qs..qs + 128].chunks_exact_mut(4).enumerate() {
                    bytes.copy_from_slice(&src[at(slot, r, 0)..][..4]);
                }
                if dtype == DType::Q5_K {
                    let qh = &mut dst[16..48];
                    qh.fill(0);
                    for v in 0..QK {
                        qh[v % 32] |= (q5_k_fifth_bit(src, r, v) as u8) << (v / 32);
                    }
                }
                let sc = std::array::from_fn(|j| src[q4_k::SCALES + 32 * (j / 2) + 2 * r + j % 2]);
                let m = std::array::from_fn(|j| src[q4_k::MINIMUMS + 32 * (j / 2) + 2 * r + j % 2]);
                dst[4..16].copy_from_slice(&q4_k_packed_scales(&sc, &m));
                dst[0..2].copy_from_slice(&src[q4_k::D + 2 * r..][..2]);
                dst[2..4].copy_from_slice(&src[q4_k::DMIN + 2 * r..][..2]);
            }
            _ => {
                q6_k_store_values(&std::array::from_fn(|v| q6_k_quant(src, r, v)), dst);
                for j in 0..16 {
                    dst[192 + j] = src[q6_k::SCALES + 32 * (j / 2) + 2 * r + j % 2];
                }
                dst[208..210].copy_from_slice(&src[q6_k::D + 2 * r..][..2]);
            }
        }
    }
}

/// Row `r`'s six-bit quant of value `v` (0..63) from a Q6_K super-block's part of a group.
fn q6_k_quant(src: &[u8], r: usize, v: usize) -> u8 {
    let (t, i) = (v / 4, v % 4);
    let low = (src[at(t % 32, r, i)] >> (4 * (t / 32))) & 0xF;
    let high = (src[q6_k::HIGH + at(t % 16, r, i)] >> (2 * (t / 16))) & 3;
    low | (high << 4)
}

/// Row `r`'s fifth bit of value `v` from a Q5_K super-block's part of a group.
fn q5_k_fifth_bit(src: &[u8], r: usize, v: usize) -> u32 {
    let word = q5_k::HIGH + 8 * (v / 4);
    let mask = u64::from_le_bytes(src[word..word + 8].try_into().expect("eight bytes"));
    ((mask >> (4 * r + v % 4)) & 1) as u32
}

/// Row `r`'s four-bit quant of value `v` from a Q4_K (or Q5_K) super-block's part of a group.
fn q4_k_quant(src: &[u8], r: usize, v: usize) -> u8 {
    let (j, l) = (v / 32, v % 32);
    let byte = src[at(8 * (j / 2) + l / 4, r, l % 4)];
    if j % 2 == 0 { byte & 0xF } else { byte >> 4 }
}

/// The scalar kernel of the K-quant layouts: the definition their SIMD kernels equal bit for bit.
pub(crate) fn reference_kernel(dtype: DType, group: &[u8], acts: &[Activation<'_>], out: &mut [[f32; GROUP_ROWS]]) {
    let group_block = group_block_bytes(dtype).unwrap_or(usize::MAX);
    for (act, out) in acts.iter().zip(out.iter_mut()) {
        *out = [0.0; GROUP_ROWS];
        for (b, src) in group.chunks_exact(group_block).enumerate() {
            let a = &act.qs[QK * b..][..QK];
            let bsums = &act.bsums[16 * b..][..16];
            let d_a = act.d[b];
            for (r, acc) in out.iter_mut().enumerate() {
                let d_w = f16::from_le_bytes([src[d_at(dtype) + 2 * r], src[d_at(dtype) + 2 * r + 1]]);
                match dtype {
                    DType::Q4_K | DType::Q5_K => {
                        let (mut s, mut n) = (0i32, 0i32);
                        let quant = |v: usize| {
                            let fifth = if dtype == DType::Q5_K { q5_k_fifth_bit(src, r, v) << 4 } else { 0 };
                            (u32::from(q4_k_quant(src, r, v)) | fifth) as i32
                        };
                        for j in 0..8 {
                            let sc = i32::from(src[q4_k::SCALES + 32 * (j / 2) + 2 * r + j % 2]);
                            let m = i32::from(src[q4_k::MINIMUMS + 32 * (j / 2) + 2 * r + j % 2]);
                            let dot: i32 = (32 * j..32 * j + 32).map(|v| quant(v) * i32::from(a[v] as i8)).sum();
                            s += sc * dot;
                            n += m * (i32::from(bsums[2 * j]) + i32::from(bsums[2 * j + 1]));
                        }
                        let dmin = f16::from_le_bytes([src[q4_k::DMIN + 2 * r], src[q4_k::DMIN + 2 * r + 1]]).to_f32();
                        *acc = (d_w.to_f32() * d_a).mul_add(s as f32, *acc);
                        *acc = (-(dmin * d_a)).mul_add(n as f32, *acc);
                    }
                    _ => {
                        let (mut s, mut c) = (0i32, 0i32);
                        for j in 0..16 {
                            let sc = i32::from(src[q6_k::SCALES + 32 * (j / 2) + 2 * r + j % 2] as i8);
                            let dot: i32 = (16 * j..16 * j + 16)
                                .map(|v| i32::from(q6_k_quant(src, r, v)) * i32::from(a[v] as i8))
                                .sum();
                            s += sc * dot;
                            c += sc * i32::from(bsums[j]);
                        }
                        *acc = (d_w.to_f32() * d_a).mul_add((s - 32 * c) as f32, *acc);
                    }
                }
            }
        }
    }
}

/// Where a super-block's 16 f16 `d`s begin.
const fn d_at(dtype: DType) -> usize {
    match dtype {
        DType::Q4_K | DType::Q5_K => q4_k::D,
        _ => q6_k::D,
    }
}
