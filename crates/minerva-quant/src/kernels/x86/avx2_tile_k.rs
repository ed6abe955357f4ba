//! AVX2 (+FMA, F16C) matmul kernels for the K-quants Q4_K, Q5_K and Q6_K against Q8_K activations:
//! one weight row against `A` activations at a time. A super-block's scales, minimums and quants
//! are decoded once and multiplied into all `A` activations, where a per-row dot kernel would
//! decode them again for every activation of a prefill.
//!
//! K-quants multiply 32 weight quants by 32 Q8 activation quants at a time with `maddubs` (u8 × i8
//! → pairs summed in i16, no saturation for these ranges: at most 2·63·127 = 16 002) and `madd`
//! (i16 pairs → i32, weighted by the sub-block scales), as llama.cpp's AVX2 paths. A block's
//! integer sum is exact; it is scaled once per block (`d_w · d_a`) and accumulated in f32 with FMA.
//!
//! Fewer than `A` remaining activations go through the same step with `A = 1`: each (row,
//! activation) pair gets exactly the same operations in the same order however many activations
//! came with it, so results are bit-identical whatever the batch (the engine's batch-invariance
//! tests rely on it).
//!
//! Memory safety does not rest on `unsafe`, as in the other kernel files: blocks are
//! `chunks_exact`, vectors are read with `bytemuck`; the caller promises AVX2, FMA and F16C.

use core::arch::x86_64::{
    __m256, __m256i, _mm_cvtsi32_si128, _mm256_add_epi32, _mm256_and_si256, _mm256_cvtepi32_ps, _mm256_fmadd_ps,
    _mm256_madd_epi16, _mm256_maddubs_epi16, _mm256_or_si256, _mm256_set1_epi8, _mm256_set1_epi16, _mm256_set1_ps,
    _mm256_setzero_ps, _mm256_setzero_si256, _mm256_slli_epi16, _mm256_srl_epi16, _mm256_srli_epi16,
};

use super::avx2_dot::{f16_at, hsum_ps, k4_scale_mins, load32, pair_scales};
use crate::activation::Activation;

/// Every row of `weights` against every activation: `A` at a time through `step`, the rest one by
/// one through `step_one` (the same step with `A = 1`). A step takes one super-block `w` (index `b`
/// in its row) and a group of activations, adds its scaled integer sums into `acc` and what comes
/// off (minimums, offsets) into `off`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tiles<const A: usize>(
    weights: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
    block_bytes: usize,
    step: impl Fn(&[u8], usize, &[Activation<'_>; A], &mut [__m256; A], &mut [f32; A]),
    step_one: impl Fn(&[u8], usize, &[Activation<'_>; 1], &mut [__m256; 1], &mut [f32; 1]),
) {
    let n = acts.len();
    for (row, y) in weights.chunks_exact(row_bytes).zip(out.chunks_exact_mut(n)) {
        let mut groups = acts.chunks_exact(A);
        let mut ys = y.chunks_exact_mut(A);
        for (group, ys) in (&mut groups).zip(&mut ys) {
            let group: &[Activation<'_>; A] = group.try_into().expect("chunks of A");
            let (mut acc, mut off) = ([_mm256_setzero_ps(); A], [0.0f32; A]);
            for (b, w) in row.chunks_exact(block_bytes).enumerate() {
                step(w, b, group, &mut acc, &mut off);
            }
            for ((y, acc), off) in ys.iter_mut().zip(acc).zip(off) {
                *y = hsum_ps(acc) - off;
            }
        }
        for (y, act) in ys.into_remainder().iter_mut().zip(groups.remainder()) {
            let (mut acc, mut off) = ([_mm256_setzero_ps()], [0.0f32]);
            for (b, w) in row.chunks_exact(block_bytes).enumerate() {
                step_one(w, b, std::array::from_ref(act), &mut acc, &mut off);
            }
            *y = hsum_ps(acc[0]) - off[0];
        }
    }
}

/// Q4_K, or with `FIFTH` Q5_K: 8 sub-blocks of 32 values, 6-bit scales and minimums. Q5_K adds
/// the fifth bits: bit `j` of `qh[i]` is the high bit of value `32·j + i`, so sub-block `j` takes
/// bit `j` of each of the 32 `qh` bytes, moved to 0x10 and OR-ed onto the nibbles (quants 0..=31,
/// still unsigned for `maddubs`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k4_step<const FIFTH: bool, const A: usize>(
    w: &[u8],
    b: usize,
    group: &[Activation<'_>; A],
    acc: &mut [__m256; A],
    off: &mut [f32; A],
) {
    let qs_at = if FIFTH { 48 } else { 16 };
    let (mask, one) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(1));
    let (scales, mins) = k4_scale_mins(w);
    let qh = if FIFTH { load32(&w[16..48]) } else { _mm256_setzero_si256() };
    let fifth = |j: i32| {
        if FIFTH {
            _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j)), one))
        } else {
            _mm256_setzero_si256()
        }
    };
    let a: [&[u8]; A] = std::array::from_fn(|k| &group[k].qs[256 * b..][..256]);
    let qs = &w[qs_at..];
    let mut sums = [_mm256_setzero_si256(); A];
    for chunk in 0..4 {
        let packed = load32(&qs[32 * chunk..]);
        let low = _mm256_or_si256(_mm256_and_si256(packed, mask), fifth(2 * chunk as i32));
        let high = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(packed), mask), fifth(2 * chunk as i32 + 1));
        let (scale_low, scale_high) = (_mm256_set1_epi16(scales[2 * chunk]), _mm256_set1_epi16(scales[2 * chunk + 1]));
        for (sum, a) in sums.iter_mut().zip(a) {
            let p_low = _mm256_maddubs_epi16(low, load32(&a[64 * chunk..]));
            let p_high = _mm256_maddubs_epi16(high, load32(&a[64 * chunk + 32..]));
            *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(p_low, scale_low));
            *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(p_high, scale_high));
        }
    }
    for (k, act) in group.iter().enumerate() {
        let (d, bsums) = (act.d[b], &act.sums[16 * b..][..16]);
        let min_sum: i32 = (0..8).map(|j| mins[j] * (bsums[2 * j] + bsums[2 * j + 1])).sum();
        acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(w) * d), _mm256_cvtepi32_ps(sums[k]), acc[k]);
        off[k] += f16_at(&w[2..]) * d * min_sum as f32;
    }
}

/// Q6_K: 6-bit quants (low nibbles in `ql`, high two bits in `qh`) of 16 sub-blocks of 16 values
/// with signed 8-bit scales. `maddubs` takes the unsigned quants (0..=63, as in
/// `avx2_dequant::dequantize_row_q6_k`); the −32 comes off through the activation's `bsums`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6_k_step<const A: usize>(
    w: &[u8],
    b: usize,
    group: &[Activation<'_>; A],
    acc: &mut [__m256; A],
    off: &mut [f32; A],
) {
    let (low4, low2) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x03));
    let scales: [i16; 16] = std::array::from_fn(|i| i16::from(w[192 + i] as i8));
    let a: [&[u8]; A] = std::array::from_fn(|k| &group[k].qs[256 * b..][..256]);
    let mut sums = [_mm256_setzero_si256(); A];
    for half in 0..2 {
        let ql = &w[64 * half..];
        let (lo, hi) = (load32(ql), load32(&ql[32..]));
        let h = load32(&w[128 + 32 * half..]);
        let high2 = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, low2));
        let quarters = [
            _mm256_or_si256(_mm256_and_si256(lo, low4), high2(h)),
            _mm256_or_si256(_mm256_and_si256(hi, low4), high2(_mm256_srli_epi16::<2>(h))),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(lo), low4), high2(_mm256_srli_epi16::<4>(h))),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(hi), low4), high2(_mm256_srli_epi16::<6>(h))),
        ];
        for (quarter, q6) in quarters.into_iter().enumerate() {
            let start = 128 * half + 32 * quarter;
            let scale = pair_scales(scales[start / 16], scales[start / 16 + 1]);
            for (sum, a) in sums.iter_mut().zip(a) {
                let products = _mm256_maddubs_epi16(q6, load32(&a[start..]));
                *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(products, scale));
            }
        }
    }
    for (k, act) in group.iter().enumerate() {
        let (d, bsums) = (act.d[b], &act.sums[16 * b..][..16]);
        let offset: i32 = scales.iter().zip(bsums).map(|(&sc, &s)| i32::from(sc) * s).sum();
        let scale = f16_at(&w[208..]) * d;
        acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(sums[k]), acc[k]);
        off[k] += scale * (32 * offset) as f32;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_q4_k<const A: usize>(weights: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles::<A>(
        weights,
        row_bytes,
        acts,
        out,
        144,
        |w, b, g, acc, off| k4_step::<false, A>(w, b, g, acc, off),
        |w, b, g, acc, off| k4_step::<false, 1>(w, b, g, acc, off),
    );
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_q5_k<const A: usize>(weights: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles::<A>(
        weights,
        row_bytes,
        acts,
        out,
        176,
        |w, b, g, acc, off| k4_step::<true, A>(w, b, g, acc, off),
        |w, b, g, acc, off| k4_step::<true, 1>(w, b, g, acc, off),
    );
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_q6_k<const A: usize>(weights: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles::<A>(
        weights,
        row_bytes,
        acts,
        out,
        210,
        |w, b, g, acc, off| q6_k_step::<A>(w, b, g, acc, off),
        |w, b, g, acc, off| q6_k_step::<1>(w, b, g, acc, off),
    );
}
