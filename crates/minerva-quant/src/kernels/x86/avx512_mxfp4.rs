//! AVX-512 decode of MXFP4 at one activation: four rows × two blocks per step, as bytes.
//!
//! Widening each nibble to an i16 before the multiply (`avx512_tile`, and this module's first
//! form) costs shuffles on one port. Here the nibbles stay bytes: one 512-bit vector holds one
//! block of four rows (a row's 16 bytes per 128-bit lane), `vpshufb` looks up low and high nibbles
//! (values 0..16 and 16..32 of each row) as the doubled E2M1 value plus 12, an unsigned byte, and
//! `vpdpbusd` multiplies bytes by the i16 activations split into bytes, laid out once per call:
//!
//! ```text
//!   a = 256·hi + lo      hi: signed byte, lo: unsigned byte (exact for every i16)
//!   q' = q + 12          0..=24, a byte that is unsigned and signed alike
//!   Σ q'·a = 256·vpdpbusd(q', hi) + vpdpbusd(lo, q')      (the 256 by one shift in between)
//!   Σ q·a  = Σ q'·a - 12·Σ a                               (Σ a per half, laid out per call)
//! ```
//!
//! Each i32 lane of a row's sum covers four bytes, i.e. values of one half only (bytes 0..8 hold
//! values 0..8 and 16..24, bytes 8..16 the rest), so adding lane pairs (`halves`, two `vpermt2d`
//! for two blocks) gives each (row, half) the exact integer the other MXFP4 kernels reach, and the
//! same f32 product of the scales and FMA per block follow in block order: the results equal
//! theirs bit for bit. The exponents of both blocks come in by one gather and become
//! `2^(e - 128)` by `vscalefps` (exact, subnormals included). An odd last block takes
//! `avx512_tile`'s 256-bit step.
//!
//! Memory safety rests on slices and `bytemuck` loads except the exponent gather, whose `unsafe`
//! reads four bytes at offsets checked against the rows' slice (see `exponents`); the caller
//! promises AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI (see `super::AVX512_VNNI`).

use core::arch::x86_64::{
    __m128i, __m256, __m256i, __m512, __m512i, _mm256_add_ps, _mm256_and_si256, _mm256_castpd_ps, _mm256_cvtepi32_ps,
    _mm256_fmadd_ps, _mm256_i32gather_epi32, _mm256_mul_ps, _mm256_scalef_ps, _mm256_set1_epi32, _mm256_set1_ps,
    _mm256_setr_epi32, _mm256_setzero_ps, _mm256_setzero_si256, _mm512_add_epi32, _mm512_and_si512,
    _mm512_broadcast_i32x4, _mm512_castps_pd, _mm512_castps256_ps512, _mm512_castps512_ps256, _mm512_castsi128_si512,
    _mm512_cvtepi32_ps, _mm512_dpbusd_epi32, _mm512_extractf64x4_pd, _mm512_inserti32x4, _mm512_mul_ps,
    _mm512_permutex2var_epi32, _mm512_permutexvar_ps, _mm512_set1_epi8, _mm512_setr_epi32, _mm512_setzero_si512,
    _mm512_shuffle_epi8, _mm512_slli_epi32, _mm512_srli_epi16, _mm512_sub_epi32,
};
use std::cell::RefCell;

use bytemuck::pod_read_unaligned;

use super::avx2_tile_i16::{ROWS, accumulate, prefetch, prefetch_lead, reduce4, results, twice};
use super::avx512_tile::{MXFP4_VALUES, decode_mxfp4, quants_dot};
use crate::activation::Activation;

const BLOCK_BYTES: usize = 17;

/// What the quants are offset by to be unsigned bytes: the doubled E2M1 values reach -12.
const OFFSET: i32 = 12;

/// The doubled E2M1 values plus [`OFFSET`] by nibble, as bytes (`vpshufb`'s table).
const OFFSET_TABLE: [u8; 16] = {
    let mut values = [0; 16];
    let mut i = 0;
    while i < 16 {
        values[i] = (MXFP4_VALUES[i] + OFFSET as i16) as u8;
        i += 1;
    }
    values
};

/// One pair of blocks' activations as `four_rows` reads them.
#[derive(Clone, Copy)]
struct PairActs {
    /// Per block: the high bytes of values 0..16, their low bytes, the high and low bytes of
    /// values 16..32.
    bytes: [[__m128i; 4]; 2],
    /// `OFFSET` · the sum of each (block, half)'s activation quants, in `halves`' lanes.
    offsets: __m512i,
    /// The two blocks' scales, each eight times (as f32 bits).
    d: __m512i,
}

thread_local! {
    /// The current call's activation pairs, kept per thread (a few KiB).
    static PAIRS: RefCell<Vec<PairActs>> = const { RefCell::new(Vec::new()) };
}

/// `out[r]` = row `r` of `w` (whole rows of `row_bytes`) · `act` for the rows in whole groups of
/// four; returns how many rows that was (the caller's 256-bit tiles take the last one to three,
/// with the same bits).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn rows(w: &[u8], row_bytes: usize, act: &Activation<'_>, out: &mut [f32]) -> usize {
    let blocks = act.d.len();
    // The exponents' gather takes offsets up to three rows on as i32.
    if row_bytes < blocks * BLOCK_BYTES || i32::try_from(3 * row_bytes + BLOCK_BYTES).is_err() {
        return 0;
    }
    PAIRS.with_borrow_mut(|pairs| {
        lay_out(act, pairs);
        let mut done = 0;
        for (g, (group, out)) in w.chunks_exact(ROWS * row_bytes).zip(out.chunks_exact_mut(ROWS)).enumerate() {
            let stream = &w[g * ROWS * row_bytes..];
            out.copy_from_slice(&four_rows(group, stream, row_bytes, blocks, pairs, act));
            done += ROWS;
        }
        done
    })
}

/// Writes `act`'s quants, split into bytes, their sums and the scales for each pair of blocks
/// into `pairs` (an odd last block is left to the 256-bit step, which reads `act` itself).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn lay_out(act: &Activation<'_>, pairs: &mut Vec<PairActs>) {
    let (quants, _) = act.q16.as_chunks::<64>();
    pairs.clear();
    for (pair, scales) in quants.iter().zip(act.d.as_chunks::<2>().0) {
        let mut bytes = [[0u8; 64]; 2];
        let mut half_sums = [[0i32; 2]; 2];
        for (b, block) in pair.as_chunks::<32>().0.iter().enumerate() {
            // [high bytes of values 0..16 | low bytes | high bytes of 16..32 | low bytes].
            for (i, &q) in block.iter().enumerate() {
                let at = 32 * (i / 16) + i % 16;
                bytes[b][at] = (q >> 8) as u8;
                bytes[b][at + 16] = q as u8;
                // Values 0..8 and 16..24 make half 0, the rest half 1.
                half_sums[b][(i % 16) / 8] += i32::from(q);
            }
        }
        let offsets: [i32; 16] = std::array::from_fn(|lane| OFFSET * half_sums[lane / 8][lane % 8 / ROWS]);
        let d = bytemuck::cast::<[[f32; 8]; 2], __m512i>([[scales[0]; 8], [scales[1]; 8]]);
        pairs.push(PairActs {
            bytes: bytes.map(bytemuck::cast::<[u8; 64], [__m128i; 4]>),
            offsets: bytemuck::cast::<[i32; 16], __m512i>(offsets),
            d,
        });
    }
}

/// Rows `group` (four of `row_bytes`, the first of `stream`, which the prefetch runs along) ·
/// the activation: `blocks` blocks, in pairs from `pairs`, an odd last one from `act`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn four_rows(
    group: &[u8],
    stream: &[u8],
    row_bytes: usize,
    blocks: usize,
    pairs: &[PairActs],
    act: &Activation<'_>,
) -> [f32; ROWS] {
    let table = _mm512_broadcast_i32x4(bytemuck::cast::<[u8; 16], __m128i>(OFFSET_TABLE));
    let nibble = _mm512_set1_epi8(0x0F);
    let spread = _mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7);
    let lead = prefetch_lead(ROWS, row_bytes);
    let rb = row_bytes as i32;
    let exponent_at = _mm256_setr_epi32(0, rb, 2 * rb, 3 * rb, 17, rb + 17, 2 * rb + 17, 3 * rb + 17);
    let mut rows: [&[[u8; 2 * BLOCK_BYTES]]; ROWS] = [&[]; ROWS];
    for (r, row) in rows.iter_mut().enumerate() {
        *row = group[r * row_bytes..][..blocks * BLOCK_BYTES].as_chunks().0;
    }
    let mut acc = _mm256_setzero_ps();
    for (p, pair) in pairs.iter().enumerate() {
        prefetch(stream, lead + ROWS * 2 * BLOCK_BYTES * p, ROWS * 2 * BLOCK_BYTES);
        let mut sums = [_mm512_setzero_si512(); 2];
        for (b, sum) in sums.iter_mut().enumerate() {
            let at = BLOCK_BYTES * b + 1;
            let mut raw = _mm512_castsi128_si512(pod_read_unaligned::<__m128i>(&rows[0][p][at..at + 16]));
            raw = _mm512_inserti32x4::<1>(raw, pod_read_unaligned::<__m128i>(&rows[1][p][at..at + 16]));
            raw = _mm512_inserti32x4::<2>(raw, pod_read_unaligned::<__m128i>(&rows[2][p][at..at + 16]));
            raw = _mm512_inserti32x4::<3>(raw, pod_read_unaligned::<__m128i>(&rows[3][p][at..at + 16]));
            let low = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, nibble));
            let high = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16::<4>(raw), nibble));
            *sum = block_dot(low, high, &pair.bytes[b]);
        }
        let v = _mm512_cvtepi32_ps(_mm512_sub_epi32(halves(sums), pair.offsets));
        let exponents =
            _mm512_castps256_ps512(exponents(group, 2 * BLOCK_BYTES * p, exponent_at, 3 * row_bytes + BLOCK_BYTES));
        let scales = _mm512_mul_ps(_mm512_permutexvar_ps(spread, exponents), bytemuck::cast::<__m512i, __m512>(pair.d));
        acc = _mm256_fmadd_ps(_mm512_castps512_ps256(scales), _mm512_castps512_ps256(v), acc);
        acc = _mm256_fmadd_ps(upper(scales), upper(v), acc);
    }
    if blocks % 2 == 1 {
        // As `avx2_tile_i16`'s row tiles step a block.
        let b = blocks - 1;
        let quants: &[i16; 32] = act.q16[32 * b..32 * b + 32].try_into().expect("a block of 32");
        let (mut dots, mut scales) = ([_mm256_setzero_si256(); ROWS], [0.0; ROWS]);
        for r in 0..ROWS {
            let (q, d, _) = decode_mxfp4(&group[r * row_bytes + BLOCK_BYTES * b..][..BLOCK_BYTES]);
            (dots[r], scales[r]) = (quants_dot(q, quants), d);
        }
        let scales = _mm256_mul_ps(twice(scales), _mm256_set1_ps(act.d[b]));
        acc = accumulate(acc, reduce4(dots), None, scales, None);
    }
    results(acc)
}

/// The upper 8 lanes of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn upper(v: __m512) -> __m256 {
    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)))
}

/// Four rows' quants of one block plus [`OFFSET`] (`low`: values 0..16 of each row in its
/// 128-bit lane, `high`: 16..32) · the block's activations split into bytes (`acts`, as
/// `lay_out` writes them): per row, four i32 sums of eight products each, exact, still offset.
///
/// `a = 256·hi + lo` with `hi` signed and `lo` unsigned bytes, and the offset quants are unsigned
/// bytes up to 24, so `vpdpbusd` takes `quant · hi` (quant as the unsigned operand) and
/// `lo · quant` (quant as the signed one) without saturating or rounding.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn block_dot(low: __m512i, high: __m512i, acts: &[__m128i; 4]) -> __m512i {
    let part = |i: usize| _mm512_broadcast_i32x4(acts[i]);
    let mut s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), low, part(0));
    s = _mm512_dpbusd_epi32(s, high, part(2));
    s = _mm512_slli_epi32::<8>(s);
    s = _mm512_dpbusd_epi32(s, part(1), low);
    _mm512_dpbusd_epi32(s, part(3), high)
}

/// Block sums `s` (per row's 128-bit lane, i32 lanes 0 and 1 of half 0, 2 and 3 of half 1) to
/// one integer per (block, half, row): lane `8·block + 4·half + row`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn halves(s: [__m512i; 2]) -> __m512i {
    let first = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 16, 20, 24, 28, 18, 22, 26, 30);
    let second = _mm512_setr_epi32(1, 5, 9, 13, 3, 7, 11, 15, 17, 21, 25, 29, 19, 23, 27, 31);
    _mm512_add_epi32(_mm512_permutex2var_epi32(s[0], first, s[1]), _mm512_permutex2var_epi32(s[0], second, s[1]))
}

/// The four rows' E8M0 scales (halved, as `e8m0_to_f32_half`) of the pair of blocks at byte `at`
/// of each row (`offsets` from there, the largest `last`): `[row 0..4 first block | row 0..4
/// second block]`, each `2^(e - 128)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(unsafe_code)]
fn exponents(group: &[u8], at: usize, offsets: __m256i, last: usize) -> __m256 {
    let bytes = &group[at..];
    // The furthest read, 4 bytes at `last` (the second block of the last row), lies within that
    // row's pair of blocks, which `four_rows` sliced from `group`; checked here all the same.
    assert!(last + 4 <= bytes.len(), "an exponent past the rows");
    // SAFETY: each of the 8 offsets is at most `last` (offsets grow with the row and block) and
    // `bytes[offset..offset + 4]` is in bounds by the assertion; the gather reads only those.
    let raw = unsafe { _mm256_i32gather_epi32::<1>(bytes.as_ptr().cast::<i32>(), offsets) };
    let e = _mm256_cvtepi32_ps(_mm256_and_si256(raw, _mm256_set1_epi32(0xFF)));
    _mm256_scalef_ps(_mm256_set1_ps(1.0), _mm256_add_ps(e, _mm256_set1_ps(-128.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::mxfp4::e8m0_to_f32_half;

    /// Every E8M0 exponent, at each of the eight (row, block) places a gather reads, comes out as
    /// the scalar decoder's scale, subnormals included.
    #[test]
    fn exponents_equal_the_scalar_decoder_for_every_byte() {
        use std::arch::is_x86_feature_detected as has;
        let detected = has!("avx2")
            && has!("fma")
            && has!("f16c")
            && has!("avx512f")
            && has!("avx512bw")
            && has!("avx512vl")
            && has!("avx512vnni");
        if !detected {
            eprintln!("no AVX-512 VNNI on this CPU: the exponent gather is not run here");
            return;
        }
        let row_bytes = 3 * BLOCK_BYTES;
        let offsets = [0, row_bytes, 2 * row_bytes, 3 * row_bytes].map(|r| r as i32);
        for first in (0..=255u8).step_by(8) {
            let mut group = vec![0xA5u8; 4 * row_bytes];
            for place in 0..8 {
                let (row, block) = (place % 4, place / 4);
                group[row * row_bytes + block * BLOCK_BYTES] = first.wrapping_add(place as u8);
            }
            let at = bytemuck::cast::<[i32; 8], __m256i>([
                offsets[0],
                offsets[1],
                offsets[2],
                offsets[3],
                offsets[0] + 17,
                offsets[1] + 17,
                offsets[2] + 17,
                offsets[3] + 17,
            ]);
            // SAFETY: the features were detected above.
            #[allow(unsafe_code)]
            let got = unsafe { exponents(&group, 0, at, 3 * row_bytes + BLOCK_BYTES) };
            let got: [f32; 8] = bytemuck::cast(got);
            for (place, value) in got.iter().enumerate() {
                let e = first.wrapping_add(place as u8);
                assert_eq!(value.to_bits(), e8m0_to_f32_half(e).to_bits(), "e {e} at place {place}");
            }
        }
    }
}
