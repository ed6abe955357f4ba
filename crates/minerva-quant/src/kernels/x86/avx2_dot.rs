//! AVX2 (+FMA, F16C) dot kernels for [`crate::matvec`]: one weight row × one activation, for the
//! formats without a tile kernel: Q2_K and Q3_K against Q8_K activations; and the helpers the tile
//! kernels share (Q4_K/Q5_K/Q6_K are in `avx2_tile_k.rs`, F32/F16/BF16 in `float_panel.rs`).
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
    __m128i, __m256, __m256i, _mm_add_ps, _mm_add_ss, _mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32, _mm_movehdup_ps,
    _mm_movehl_ps, _mm_set1_epi16, _mm_shuffle_ps, _mm_srli_epi16, _mm256_and_si256, _mm256_castps256_ps128,
    _mm256_cvtph_ps, _mm256_extractf128_ps, _mm256_set_m128i, _mm256_set1_epi8,
};

use bytemuck::pod_read_unaligned;

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
