//! AVX2 (+FMA, F16C) matmul kernels for the K-quants Q2_K…Q6_K against Q8_K activations:
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
    __m128i, __m256, __m256i, _mm_add_epi32, _mm_cvtepu8_epi16, _mm_cvtsi32_si128, _mm_cvtsi64_si128,
    _mm_cvtsi128_si32, _mm_set_epi64x, _mm_set1_epi8, _mm_set1_epi16, _mm_shuffle_epi32, _mm_sub_epi8,
    _mm_unpackhi_epi64, _mm256_add_epi32, _mm256_and_si256, _mm256_broadcastsi128_si256, _mm256_castsi256_si128,
    _mm256_cvtepi8_epi16, _mm256_cvtepi32_ps, _mm256_cvtepu8_epi16, _mm256_cvtepu16_epi32, _mm256_extracti128_si256,
    _mm256_fmadd_ps, _mm256_madd_epi16, _mm256_maddubs_epi16, _mm256_or_si256, _mm256_set_m128i, _mm256_set1_epi8,
    _mm256_set1_epi16, _mm256_set1_ps, _mm256_setzero_ps, _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_slli_epi16,
    _mm256_slli_epi32, _mm256_srl_epi16, _mm256_srli_epi16,
};

use bytemuck::pod_read_unaligned;

use super::avx2_dequant::q6_k_quarters;
use super::avx2_dot::{f16_at, hsum_ps, load32, pair_scales};
use super::avx2_tile_i16::{prefetch, prefetch_lead};
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
    for (r, (row, y)) in weights.chunks_exact(row_bytes).zip(out.chunks_exact_mut(n)).enumerate() {
        let mut groups = acts.chunks_exact(A);
        let mut ys = y.chunks_exact_mut(A);
        // The rows as one stream into L2, as the i16 tiles prefetch theirs (one row at a time here);
        // only the first pass over a row prefetches: the later ones find it in cache.
        let mut lead = Some(r * row_bytes + prefetch_lead(1, row_bytes));
        for (group, ys) in (&mut groups).zip(&mut ys) {
            let group: &[Activation<'_>; A] = group.try_into().expect("chunks of A");
            let (mut acc, mut off) = ([_mm256_setzero_ps(); A], [0.0f32; A]);
            for (b, w) in row.chunks_exact(block_bytes).enumerate() {
                if let Some(at) = lead {
                    prefetch(weights, at + b * block_bytes, block_bytes);
                }
                step(w, b, group, &mut acc, &mut off);
            }
            lead = None;
            for ((y, acc), off) in ys.iter_mut().zip(acc).zip(off) {
                *y = hsum_ps(acc) - off;
            }
        }
        for (y, act) in ys.into_remainder().iter_mut().zip(groups.remainder()) {
            let (mut acc, mut off) = ([_mm256_setzero_ps()], [0.0f32]);
            for (b, w) in row.chunks_exact(block_bytes).enumerate() {
                if let Some(at) = lead {
                    prefetch(weights, at + b * block_bytes, block_bytes);
                }
                step_one(w, b, std::array::from_ref(act), &mut acc, &mut off);
            }
            lead = None;
            *y = hsum_ps(acc[0]) - off[0];
        }
    }
}

/// The 8 scales and 8 minimums of a Q4_K/Q5_K super-block (6 bits each, packed in 12 bytes as
/// `get_scale_min_k4` reads them) as 8 i16 each, unpacked in general registers with the masks
/// llama.cpp uses: no bytes go through memory, which as scalars stored and reloaded as a vector
/// stalled the store-to-load forwarding.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn k4_scales_mins(w: &[u8]) -> (__m128i, __m128i) {
    const LOW6: u32 = 0x3F3F_3F3F;
    const LOW4: u32 = 0x0F0F_0F0F;
    const LOW2: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([w[4 + 4 * i], w[5 + 4 * i], w[6 + 4 * i], w[7 + 4 * i]]);
    let (u0, u1, u2) = (word(0), word(1), word(2));
    // Sub-blocks 0..4 keep their 6 low bits; 4..8 take 4 bits from bytes 8..12 and their top two
    // bits from the top of bytes 0..4 (scales) or 4..8 (minimums).
    let scales = u64::from(u0 & LOW6) | u64::from((u2 & LOW4) | (((u0 >> 6) & LOW2) << 4)) << 32;
    let mins = u64::from(u1 & LOW6) | u64::from(((u2 >> 4) & LOW4) | (((u1 >> 6) & LOW2) << 4)) << 32;
    (_mm_cvtepu8_epi16(_mm_cvtsi64_si128(scales as i64)), _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mins as i64)))
}

/// Sub-blocks `2·chunk` and `2·chunk + 1` of a Q4_K super-block (or, with `FIFTH`, Q5_K's, the
/// fifth bits OR-ed on as 0x10) as 32 unsigned quants each, in value order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn k4_chunk<const FIFTH: bool>(w: &[u8], chunk: usize) -> (__m256i, __m256i) {
    let mask = _mm256_set1_epi8(0x0F);
    let packed = load32(&w[if FIFTH { 48 } else { 16 } + 32 * chunk..]);
    let (low, high) = (_mm256_and_si256(packed, mask), _mm256_and_si256(_mm256_srli_epi16::<4>(packed), mask));
    if !FIFTH {
        return (low, high);
    }
    let qh = load32(&w[16..48]);
    let fifth = |j: usize| {
        let bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j as i32)), _mm256_set1_epi8(1));
        _mm256_slli_epi16::<4>(bit)
    };
    (_mm256_or_si256(low, fifth(2 * chunk)), _mm256_or_si256(high, fifth(2 * chunk + 1)))
}

/// Σ of the 8 i32 lanes (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
}

/// An activation's 16 `bsums` (i16) of super-block `b`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bsums(act: &Activation<'_>, b: usize) -> __m256i {
    pod_read_unaligned::<__m256i>(bytemuck::cast_slice(&act.bsums[16 * b..16 * b + 16]))
}

/// The `A` activations' 256 quants of super-block `b`.
#[inline]
fn quants<'a, const A: usize>(group: &'a [Activation<'_>; A], b: usize) -> [&'a [u8]; A] {
    let mut a: [&[u8]; A] = [&[]; A];
    for (a, act) in a.iter_mut().zip(group) {
        *a = &act.qs[256 * b..256 * b + 256];
    }
    a
}

/// Adds a super-block's integer `sums`, scaled by `d_w·d_a`, into `acc`, and its minimums' term
/// `dmin_w·d_a·Σ m·bsums` into `off` (`mins`: 16 i16, each sub-block's minimum against each of
/// its `bsums`), for Q4_K/Q5_K and Q2_K.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn add_with_minimums<const A: usize>(
    (d_w, dmin_w): (f32, f32),
    mins: __m256i,
    group: &[Activation<'_>; A],
    b: usize,
    sums: &[__m256i; A],
    acc: &mut [__m256; A],
    off: &mut [f32; A],
) {
    for k in 0..A {
        let act = &group[k];
        let d = act.d[b];
        let min_sum = hsum_epi32(_mm256_madd_epi16(mins, bsums(act, b)));
        acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d_w * d), _mm256_cvtepi32_ps(sums[k]), acc[k]);
        off[k] += dmin_w * d * min_sum as f32;
    }
}

/// Adds a super-block's integer `sums`, scaled by `d_w·d_a`, into `acc`, and its offset's term
/// `d_w·d_a·k·Σ s·bsums` into `off` (`scales`: 16 i16, each sub-block's scale against each of its
/// `bsums`; `k` the offset every quant carries), for Q6_K (`k` = 32) and Q3_K (`k` = 4).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
fn add_with_offsets<const A: usize>(
    d_w: f32,
    k: i32,
    scales: __m256i,
    group: &[Activation<'_>; A],
    b: usize,
    sums: &[__m256i; A],
    acc: &mut [__m256; A],
    off: &mut [f32; A],
) {
    for j in 0..A {
        let act = &group[j];
        let offset = hsum_epi32(_mm256_madd_epi16(scales, bsums(act, b)));
        let scale = d_w * act.d[b];
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(sums[j]), acc[j]);
        off[j] += scale * (k * offset) as f32;
    }
}

/// `sums[j] += madd(maddubs(q, activation j's quants start..start + 32), scale)`: 32 unsigned
/// quants against each activation, the pairs' products weighted by their sub-blocks' scales.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn add_products<const A: usize>(q: __m256i, scale: __m256i, a: &[&[u8]; A], start: usize, sums: &mut [__m256i; A]) {
    for j in 0..A {
        let products = _mm256_maddubs_epi16(q, load32(&a[j][start..]));
        sums[j] = _mm256_add_epi32(sums[j], _mm256_madd_epi16(products, scale));
    }
}

/// Q4_K, or with `FIFTH` Q5_K: 8 sub-blocks of 32 values, 6-bit scales and minimums. Q5_K adds
/// the fifth bits: bit `j` of `qh[i]` is the high bit of value `32·j + i`, so sub-block `j` takes
/// bit `j` of each of the 32 `qh` bytes, moved to 0x10 and OR-ed onto the nibbles (quants 0..=31,
/// still unsigned for `maddubs`). The minimums' integer sum `Σ m_j·(bsums of sub-block j)` is one
/// `madd` of the minimums (each twice) with the 16 `bsums`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k4_step<const FIFTH: bool, const A: usize>(
    w: &[u8],
    b: usize,
    group: &[Activation<'_>; A],
    acc: &mut [__m256; A],
    off: &mut [f32; A],
) {
    let (scales, mins) = k4_scales_mins(w);
    let scales = _mm256_broadcastsi128_si256(scales);
    // Sub-block j's scale in all 16 lanes: bytes 2j and 2j + 1 of each 128-bit half.
    let scale_of = |j: i16| _mm256_shuffle_epi8(scales, _mm256_set1_epi16((2 * j) | ((2 * j + 1) << 8)));
    let mins = _mm256_cvtepu16_epi32(mins);
    let mins_twice = _mm256_or_si256(mins, _mm256_slli_epi32::<16>(mins));
    let a = quants(group, b);
    let mut sums = [_mm256_setzero_si256(); A];
    for chunk in 0..4 {
        let (low, high) = k4_chunk::<FIFTH>(w, chunk);
        let (scale_low, scale_high) = (scale_of(2 * chunk as i16), scale_of(2 * chunk as i16 + 1));
        for k in 0..A {
            let p_low = _mm256_maddubs_epi16(low, load32(&a[k][64 * chunk..]));
            let p_high = _mm256_maddubs_epi16(high, load32(&a[k][64 * chunk + 32..]));
            sums[k] = _mm256_add_epi32(sums[k], _mm256_madd_epi16(p_low, scale_low));
            sums[k] = _mm256_add_epi32(sums[k], _mm256_madd_epi16(p_high, scale_high));
        }
    }
    add_with_minimums((f16_at(w), f16_at(&w[2..])), mins_twice, group, b, &sums, acc, off);
}

/// Q6_K: 6-bit quants (low nibbles in `ql`, high two bits in `qh`) of 16 sub-blocks of 16 values
/// with signed 8-bit scales. `maddubs` takes the unsigned quants (0..=63, as in
/// `avx2_dequant::dequantize_row_q6_k`); the −32 comes off through the activation's `bsums`, their
/// sum weighted by the scales being one `madd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6_k_step<const A: usize>(
    w: &[u8],
    b: usize,
    group: &[Activation<'_>; A],
    acc: &mut [__m256; A],
    off: &mut [f32; A],
) {
    let scales: [i16; 16] = std::array::from_fn(|i| i16::from(w[192 + i] as i8));
    let scales_wide = _mm256_cvtepi8_epi16(pod_read_unaligned::<__m128i>(&w[192..208]));
    let a = quants(group, b);
    let mut sums = [_mm256_setzero_si256(); A];
    for half in 0..2 {
        for (quarter, q6) in q6_k_quarters(w, half).into_iter().enumerate() {
            let start = 128 * half + 32 * quarter;
            let scale = pair_scales(scales[start / 16], scales[start / 16 + 1]);
            add_products(q6, scale, &a, start, &mut sums);
        }
    }
    add_with_offsets(f16_at(&w[208..]), 32, scales_wide, group, b, &sums, acc, off);
}

/// Quarter `quarter` (0..4) of Q2_K/Q3_K's packed 2-bit quants: bits `2·quarter..` of each byte.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn two_bits(packed: __m256i, quarter: usize) -> __m256i {
    _mm256_and_si256(_mm256_srl_epi16(packed, _mm_cvtsi32_si128(2 * quarter as i32)), _mm256_set1_epi8(3))
}

/// Quarter `quarter` of half `half` of a Q2_K super-block: its 32 unsigned quants (0..=3), values
/// `128·half + 32·quarter ..`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q2_k_quants(w: &[u8], half: usize, quarter: usize) -> __m256i {
    two_bits(load32(&w[16 + 32 * half..]), quarter)
}

/// Quarter `quarter` of half `half` of a Q3_K super-block: its 32 unsigned quants `q` (0..=7, the
/// value being `q − 4`), values `128·half + 32·quarter ..`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q3_k_quants(w: &[u8], half: usize, quarter: usize) -> __m256i {
    let low = two_bits(load32(&w[32 + 32 * half..]), quarter);
    let bit = _mm_cvtsi32_si128((4 * half + quarter) as i32);
    let high = _mm256_slli_epi16::<2>(_mm256_and_si256(_mm256_srl_epi16(load32(&w[..32]), bit), _mm256_set1_epi8(1)));
    _mm256_or_si256(low, high)
}

/// Q2_K: 2-bit quants of 16-value sub-blocks with 4-bit scales (low nibble) and minimums (high
/// nibble). Quarter `j` of each 128-value half is bits `2j..2j+2` of the half's 32 `qs` bytes (32
/// values, two sub-blocks). The minimums' integer sum is one `madd` with the activation's `bsums`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q2_k_step<const A: usize>(
    w: &[u8],
    b: usize,
    group: &[Activation<'_>; A],
    acc: &mut [__m256; A],
    off: &mut [f32; A],
) {
    let scales = &w[..16];
    let mins = _mm256_srli_epi16::<4>(_mm256_cvtepu8_epi16(pod_read_unaligned::<__m128i>(scales)));
    let a = quants(group, b);
    let mut sums = [_mm256_setzero_si256(); A];
    for half in 0..2 {
        for quarter in 0..4 {
            let q = q2_k_quants(w, half, quarter);
            let start = 128 * half + 32 * quarter;
            let (lo, hi) = (scales[start / 16] & 0x0F, scales[start / 16 + 1] & 0x0F);
            let scale = pair_scales(i16::from(lo), i16::from(hi));
            add_products(q, scale, &a, start, &mut sums);
        }
    }
    add_with_minimums((f16_at(&w[80..]), f16_at(&w[82..])), mins, group, b, &sums, acc, off);
}

/// Q3_K's 16 signed 6-bit scales (`w[96..108]`, as `ggml::k_quants::q3_k_scales` reads them) as
/// 16 i8 in a register, unpacked in general registers with llama.cpp's masks, as
/// [`k4_scales_mins`] (bytes stored one by one and reloaded as a vector stall the forwarding).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q3_k_scale_bytes(w: &[u8]) -> __m128i {
    const LOW4: u32 = 0x0F0F_0F0F;
    const LOW2: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([w[96 + 4 * i], w[97 + 4 * i], w[98 + 4 * i], w[99 + 4 * i]]);
    let (u0, u1, high) = (word(0), word(1), word(2));
    // Scale i: low four bits from byte i (i < 8) or the top of byte i − 8, top two bits from
    // bits 2(i / 4) of byte 8 + i % 4; stored plus 32.
    let low =
        u64::from((u0 & LOW4) | ((high & LOW2) << 4)) | u64::from((u1 & LOW4) | (((high >> 2) & LOW2) << 4)) << 32;
    let top = u64::from(((u0 >> 4) & LOW4) | (((high >> 4) & LOW2) << 4))
        | u64::from(((u1 >> 4) & LOW4) | (((high >> 6) & LOW2) << 4)) << 32;
    _mm_sub_epi8(_mm_set_epi64x(top as i64, low as i64), _mm_set1_epi8(32))
}

/// Q3_K: Q2_K's 2-bit layout plus a high bit per value (bit `j` of `hmask[i]` for value
/// `32·j + i`), 6-bit signed scales, quants `q − 4` for `q` = low bits | high bit << 2 in 0..=7.
/// `maddubs` takes the unsigned `q`; the `−4` comes off through the activation's `bsums`, their
/// sum weighted by the scales being one `madd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q3_k_step<const A: usize>(
    w: &[u8],
    b: usize,
    group: &[Activation<'_>; A],
    acc: &mut [__m256; A],
    off: &mut [f32; A],
) {
    let scales_wide = _mm256_cvtepi8_epi16(q3_k_scale_bytes(w));
    let a = quants(group, b);
    let mut sums = [_mm256_setzero_si256(); A];
    for half in 0..2 {
        // Sub-blocks 8·half .. 8·half + 8's scales as i16, in both 128-bit lanes.
        let eight = _mm256_broadcastsi128_si256(if half == 0 {
            _mm256_castsi256_si128(scales_wide)
        } else {
            _mm256_extracti128_si256::<1>(scales_wide)
        });
        for quarter in 0..4 {
            let q = q3_k_quants(w, half, quarter);
            let start = 128 * half + 32 * quarter;
            // `pair_scales` of sub-blocks 2·quarter, 2·quarter + 1 of the eight: their i16 bytes
            // repeated through the low and the high lane.
            let (lo, hi) = (4 * quarter as i16, 4 * quarter as i16 + 2);
            let scale = _mm256_shuffle_epi8(
                eight,
                _mm256_set_m128i(_mm_set1_epi16(hi | (hi + 1) << 8), _mm_set1_epi16(lo | (lo + 1) << 8)),
            );
            add_products(q, scale, &a, start, &mut sums);
        }
    }
    add_with_offsets(f16_at(&w[108..]), 4, scales_wide, group, b, &sums, acc, off);
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_q2_k<const A: usize>(weights: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles::<A>(
        weights,
        row_bytes,
        acts,
        out,
        84,
        |w, b, g, acc, off| q2_k_step::<A>(w, b, g, acc, off),
        |w, b, g, acc, off| q2_k_step::<1>(w, b, g, acc, off),
    );
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_q3_k<const A: usize>(weights: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles::<A>(
        weights,
        row_bytes,
        acts,
        out,
        110,
        |w, b, g, acc, off| q3_k_step::<A>(w, b, g, acc, off),
        |w, b, g, acc, off| q3_k_step::<1>(w, b, g, acc, off),
    );
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
