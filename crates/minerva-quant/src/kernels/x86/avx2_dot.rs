//! AVX2 (+FMA, F16C) dot kernels for [`crate::matvec`]: one weight row × one activation, for the
//! formats without a tile kernel: Q2_K and Q3_K against Q8_K activations, F32/F16/BF16 against f32
//! ones; and the helpers the tile kernels share (Q4_K/Q5_K/Q6_K are in `avx2_tile_k.rs`).
//!
//! K-quants multiply 32 weight quants by 32 Q8 activation quants at a time with `maddubs`
//! (u8 × i8 → pairs summed in i16, no saturation for these ranges: at most 2·63·127 = 16 002)
//! and `madd` (i16 pairs → i32, weighted by the sub-block scales), exactly as llama.cpp's AVX2
//! paths. The integer sum of a block is exact; it is scaled once per block (`d_w · d_a`) and
//! accumulated in f32 with FMA, so results differ from the scalar kernels only by f32 summation
//! order.
//!
//! As in `avx2_dequant.rs`, memory safety does not rest on `unsafe`: blocks are `chunks_exact` and vectors
//! are read with `bytemuck` (unaligned loads); the only unsafe step is the caller's promise that the
//! CPU has AVX2, FMA and F16C (see `super::AVX2_FMA_F16C`).

use core::arch::x86_64::{
    __m128i, __m256, __m256i, _MM_HINT_T1, _mm_add_ps, _mm_add_ss, _mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32,
    _mm_movehdup_ps, _mm_movehl_ps, _mm_prefetch, _mm_set1_epi16, _mm_shuffle_ps, _mm_srli_epi16, _mm256_and_si256,
    _mm256_castps256_ps128, _mm256_castsi256_ps, _mm256_cvtepu16_epi32, _mm256_cvtph_ps, _mm256_extractf128_ps,
    _mm256_fmadd_ps, _mm256_set_m128i, _mm256_set1_epi8, _mm256_setzero_ps, _mm256_slli_epi32,
};

use bytemuck::pod_read_unaligned;

use crate::activation::Activation;

/// Little-endian f16 at the start of `b`, widened with F16C. Broadcast first (`set1`), not
/// `cvtsi32_si128`: LLVM turned the latter into a `vpinsrw` merging into the accumulator's
/// register, which chained every block's scale onto the previous block's FMA (≈ 18 cycles a block).
/// In the tile kernels, where only lane 0 is used, LLVM narrows even this to that `vpinsrw`: they
/// use [`f16_splat`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16_at(b: &[u8]) -> f32 {
    let bits = i16::from_le_bytes([b[0], b[1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(bits)))
}

/// Little-endian f16 at the start of `b` in all 8 lanes: a `vpbroadcastw` from memory and one
/// `vcvtph2ps`, every lane used, so no instruction reads a register it does not write (see
/// [`f16_at`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16_splat(b: &[u8]) -> __m256 {
    _mm256_cvtph_ps(_mm_set1_epi16(i16::from_le_bytes([b[0], b[1]])))
}

/// The two little-endian f16 at `b[..4]` (a Q4_1/Q5_1 block's scale and minimum), widened with
/// F16C from one 32-bit load.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16_pair_at(b: &[u8]) -> (f32, f32) {
    let bits = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let both = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
    (_mm_cvtss_f32(both), _mm_cvtss_f32(_mm_movehdup_ps(both)))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn load32(b: &[u8]) -> __m256i {
    pod_read_unaligned::<__m256i>(&b[..32])
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
}

/// A block's 16 nibble bytes as 32 bytes in value order: low nibbles, then high nibbles.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn unpack_nibbles(qs: &[u8]) -> __m256i {
    let packed = pod_read_unaligned::<__m128i>(&qs[..16]);
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(packed), packed);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// A vector of 16 i16 for `madd` over 32 values of two 16-value sub-blocks: `lo` in lanes 0..8
/// (values 0..16), `hi` in lanes 8..16 (values 16..32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn pair_scales(lo: i16, hi: i16) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
}

/// How far ahead of its position a float row's dot product prefetches the weights, in bytes: the
/// hardware prefetcher alone kept a bf16 matvec at about two thirds of a core's read bandwidth
/// (docs/benchmarks.md, "AVX-VNNI without AVX-512…"). Into L2 (`prefetcht1`), as the i16 tiles
/// do (`avx2_tile_i16::prefetch`): into L1 it held back GPT-OSS's bf16 matrices read from DRAM.
const FLOAT_PREFETCH_AHEAD: usize = 12288;

/// The float formats: `widen(bytes)` turns 8 stored values into 8 f32; four accumulators hide the
/// FMA latency; each 32 values prefetch one cache line [`FLOAT_PREFETCH_AHEAD`] bytes on. A tail
/// of fewer than 32 values is summed into the first accumulator 8 at a time, then the last (< 8)
/// values in scalar code.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_float(row: &[u8], x: &[f32], width: usize, widen: impl Fn(&[u8]) -> __m256) -> f32 {
    let xv = |x: &[f32]| pod_read_unaligned::<__m256>(bytemuck::cast_slice(&x[..8]));
    let mut acc = [_mm256_setzero_ps(); 4];
    let (w32, x32) = (row.chunks_exact(32 * width), x.chunks_exact(32));
    let (w_tail, x_tail) = (w32.remainder(), x32.remainder());
    for (i, (w, x)) in w32.zip(x32).enumerate() {
        // The weights a few rows on (a matvec walks its rows in order), past this row's end: a
        // prefetch never faults, so the address need not be in `row`.
        _mm_prefetch::<_MM_HINT_T1>(row.as_ptr().wrapping_add(32 * width * i + FLOAT_PREFETCH_AHEAD).cast::<i8>());
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(widen(&w[8 * width * k..]), xv(&x[8 * k..]), *acc);
        }
    }
    let (w8, x8) = (w_tail.chunks_exact(8 * width), x_tail.chunks_exact(8));
    let (w_rest, x_rest) = (w8.remainder(), x8.remainder());
    for (w, x) in w8.zip(x8) {
        acc[0] = _mm256_fmadd_ps(widen(w), xv(x), acc[0]);
    }
    let total = hsum_ps(sum4(acc));
    // The last values one at a time, widened through an 8-lane buffer.
    let mut w_buf = [0u8; 32];
    w_buf[..w_rest.len()].copy_from_slice(w_rest);
    let tail = bytemuck::cast::<__m256, [f32; 8]>(widen(&w_buf));
    total + tail.iter().zip(x_rest).map(|(w, x)| w * x).sum::<f32>()
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sum4(acc: [__m256; 4]) -> __m256 {
    use core::arch::x86_64::_mm256_add_ps;
    _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_f32(row: &[u8], act: &Activation<'_>) -> f32 {
    dot_float(row, act.x, 4, |w| pod_read_unaligned::<__m256>(&w[..32]))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_f16(row: &[u8], act: &Activation<'_>) -> f32 {
    dot_float(row, act.x, 2, |w| _mm256_cvtph_ps(pod_read_unaligned::<__m128i>(&w[..16])))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_bf16(row: &[u8], act: &Activation<'_>) -> f32 {
    dot_float(row, act.x, 2, |w| {
        let wide = _mm256_cvtepu16_epi32(pod_read_unaligned::<__m128i>(&w[..16]));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
    })
}
