//! AVX-512 decode of MXFP4 at one activation: four rows × two blocks per step, in 512-bit vectors.
//!
//! The 256-bit row tiles (`avx512_tile`) are held back by their shuffles, which Intel cores run on
//! one port: the widening load, two `vpermw` lookups, the reduction's unpacks and the exponents'
//! inserts (docs/benchmarks.md, "MXFP4 decode two blocks at a time"). Here a row's two blocks share
//! one vector, so each reduction, convert and scale covers eight (row, block) pairs instead of
//! four, and the nibbles are looked up without being widened first:
//!
//! ```text
//!   bytes  [q0 q1 | q0' q1'] (8-byte halves of two blocks' nibbles, two 16-byte loads)
//!       -> [q0 q0 q1 q1 | q0' q0' q1' q1']          one vpermq
//!   word j of each 128-bit lane holds bytes (2j, 2j+1) of its half; shifted by 0 (words 0..4)
//!   or 8 (words 4..8), its low nibble is the low nibble of byte 2j or 2j+1: values
//!       [0 2 4 6 1 3 5 7 | 8 10 12 14 9 11 13 15 | the same for the second block]
//!   and 4 bits further right, the high nibbles: the same plus 16        one vpsrlvw, one vpsrlw
//!   vpermw looks each value up (it reads an index's low 5 bits: a doubled table of 16)
//!   vpmaddwd / vpdpwssd against the activations in the same order (laid out once per call)
//! ```
//!
//! Every 128-bit lane of a row's sum then holds values of one half only ({0..8, 16..24} or
//! {8..16, 24..32}), as `avx2_tile_i16`'s lanes do, so the same reduction (`reduce4`, lane by
//! lane) gives each (row, half) the same exact integer, and the same f32 product of the scales and
//! FMA per block follow in block order: the results equal the other MXFP4 kernels' bit for bit.
//! The four exponents of each block come in by one gather and become `2^(e - 128)` by `vscalefps`
//! (exact, subnormals included). An odd last block takes `avx512_tile`'s 256-bit step.
//!
//! Memory safety rests on slices and `bytemuck` loads except the exponent gather, whose `unsafe`
//! reads four bytes at offsets checked against the rows' slice (see `exponents`); the caller
//! promises AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI (see `super::AVX512_VNNI`).

use core::arch::x86_64::{
    __m128i, __m256, __m256i, __m512, __m512i, _mm256_add_ps, _mm256_and_si256, _mm256_castpd_ps, _mm256_cvtepi32_ps,
    _mm256_fmadd_ps, _mm256_i32gather_epi32, _mm256_mul_ps, _mm256_scalef_ps, _mm256_set1_epi32, _mm256_set1_ps,
    _mm256_setr_epi32, _mm256_setzero_ps, _mm256_setzero_si256, _mm512_add_epi32, _mm512_broadcast_i32x4,
    _mm512_castps_pd, _mm512_castps256_ps512, _mm512_castps512_ps256, _mm512_castsi256_si512, _mm512_cvtepi32_ps,
    _mm512_extractf64x4_pd, _mm512_inserti64x4, _mm512_madd_epi16, _mm512_mask_broadcast_i32x4, _mm512_mul_ps,
    _mm512_permutex_epi64, _mm512_permutexvar_epi16, _mm512_permutexvar_ps, _mm512_setr_epi32, _mm512_shuffle_epi8,
    _mm512_srli_epi16, _mm512_srlv_epi16, _mm512_unpackhi_epi32, _mm512_unpackhi_epi64, _mm512_unpacklo_epi32,
    _mm512_unpacklo_epi64,
};
use std::cell::RefCell;

use bytemuck::pod_read_unaligned;

use super::avx2_tile_i16::{ROWS, accumulate, prefetch, prefetch_lead, reduce4, results, twice};
use super::avx512_tile::{MXFP4_VALUES, decode_mxfp4, quants_dot};
use crate::activation::Activation;

const BLOCK_BYTES: usize = 17;

/// The doubled E2M1 values as i16 by nibble, twice: `vpermw` on 512 bits reads an index's low 5
/// bits, and the fifth is a bit of the next nibble.
const DOUBLED_TABLE: [i16; 32] = {
    let mut values = [0; 32];
    let mut i = 0;
    while i < 32 {
        values[i] = MXFP4_VALUES[i % 16];
        i += 1;
    }
    values
};

/// Per 16-bit word of each 128-bit lane: the right shift that brings its value's nibble down
/// (words 0..4 the low byte's, words 4..8 the high byte's).
const LOW_SHIFTS: [i16; 32] = {
    let mut shifts = [0; 32];
    let mut i = 0;
    while i < 32 {
        shifts[i] = if i % 8 < 4 { 0 } else { 8 };
        i += 1;
    }
    shifts
};

/// One pair of blocks' activations in the order of the decoded values (module docs): the quants
/// of values 0..16 of both blocks, of values 16..32, then the two blocks' scales, each eight
/// times (as f32 bits).
type PairActs = [__m512i; 3];

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

/// Writes `act`'s quants and scales for each pair of blocks into `pairs` (an odd last block is
/// left to the 256-bit step, which reads `act` itself).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn lay_out(act: &Activation<'_>, pairs: &mut Vec<PairActs>) {
    // Within each 128-bit lane (8 i16): values 0 2 4 6 1 3 5 7 of its 8, as bytes.
    let order = _mm512_broadcast_i32x4(pod_read_unaligned::<__m128i>(&[
        0u8, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
    ]));
    let (quants, _) = act.q16.as_chunks::<64>();
    pairs.clear();
    for (pair, scales) in quants.iter().zip(act.d.as_chunks::<2>().0) {
        // [values 0..16 of the first block | of the second] and [16..32 | 16..32].
        let mut halves = [order; 2];
        for (h, half) in halves.iter_mut().enumerate() {
            let first = pod_read_unaligned::<__m256i>(bytemuck::cast_slice(&pair[16 * h..16 * h + 16]));
            let second = pod_read_unaligned::<__m256i>(bytemuck::cast_slice(&pair[32 + 16 * h..48 + 16 * h]));
            *half = _mm512_shuffle_epi8(_mm512_inserti64x4::<1>(_mm512_castsi256_si512(first), second), order);
        }
        let d = bytemuck::cast::<[[f32; 8]; 2], __m512i>([[scales[0]; 8], [scales[1]; 8]]);
        pairs.push([halves[0], halves[1], d]);
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
    let table = bytemuck::cast::<[i16; 32], __m512i>(DOUBLED_TABLE);
    let shifts = bytemuck::cast::<[i16; 32], __m512i>(LOW_SHIFTS);
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
        let mut sums = [table; ROWS];
        for r in 0..ROWS {
            let bytes = &rows[r][p];
            let first = pod_read_unaligned::<__m128i>(&bytes[1..17]);
            let second = pod_read_unaligned::<__m128i>(&bytes[18..34]);
            let both = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(first), 0xFF00, second);
            let low_index = _mm512_srlv_epi16(_mm512_permutex_epi64::<0b01_01_00_00>(both), shifts);
            let low = _mm512_permutexvar_epi16(low_index, table);
            let high = _mm512_permutexvar_epi16(_mm512_srli_epi16::<4>(low_index), table);
            sums[r] = pair_dot(low, high, pair);
        }
        let v = _mm512_cvtepi32_ps(reduce4_512(sums));
        let exponents =
            _mm512_castps256_ps512(exponents(group, 2 * BLOCK_BYTES * p, exponent_at, 3 * row_bytes + BLOCK_BYTES));
        let scales =
            _mm512_mul_ps(_mm512_permutexvar_ps(spread, exponents), bytemuck::cast::<__m512i, __m512>(pair[2]));
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

/// Two blocks' quants (`low`: values 0..16, `high`: 16..32, in the module's order) · the pair's
/// activations: 16 i32 lanes, 4 per (block, half), exact.
///
/// The `vpdpwssd` is written in `asm!` because LLVM splits the intrinsic into `vpmaddwd` +
/// `vpaddd` unless it tunes for a CPU it knows to run `vpdpwssd` fast (as in `avx512_tile`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(unsafe_code)]
fn pair_dot(low: __m512i, high: __m512i, pair: &PairActs) -> __m512i {
    let mut s = _mm512_madd_epi16(low, pair[0]);
    // SAFETY: the instruction reads the 64 bytes of `pair[1]` (a reference) and writes only `s`'s
    // register; the caller promises AVX-512 VNNI (this function's features).
    unsafe {
        core::arch::asm!("vpdpwssd {s}, {w}, zmmword ptr [{p}]", s = inout(zmm_reg) s, w = in(zmm_reg) high,
            p = in(reg) &raw const pair[1], options(pure, readonly, nostack, preserves_flags));
    }
    s
}

/// `avx2_tile_i16::reduce4` on each 256-bit half: lanes `i` and `i + 4` of each half hold the two
/// halves of dot `i`'s block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn reduce4_512(s: [__m512i; 4]) -> __m512i {
    let t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
    let t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
    _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23))
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
