//! AVX2 dequantizers. Each is bit-for-bit equal to its scalar reference: the per-block factors
//! are computed by the same scalar code, and each value then takes the reference's exact f32
//! operations in the same order (a multiply, then an add or subtract: never an FMA, which would
//! round once instead of twice).
//!
//! Memory safety does not rest on `unsafe`: blocks and outputs are whole `chunks_exact` pairs and
//! vectors move in and out through `bytemuck` (unaligned reads, array casts), so the only unsafe
//! step is the caller's promise that the CPU has AVX2 (see `super::AVX2`).

use core::arch::x86_64::{
    __m128i, __m256, __m256i, _mm_and_si128, _mm_cvtsi64_si128, _mm_set1_epi8, _mm_setr_epi8, _mm_shuffle_epi8,
    _mm_srli_epi16, _mm_srli_si128, _mm_sub_epi8, _mm256_add_ps, _mm256_and_si256, _mm256_castsi256_si128,
    _mm256_cvtepi8_epi32, _mm256_cvtepi32_ps, _mm256_cvtepu8_epi32, _mm256_extracti128_si256, _mm256_mul_ps,
    _mm256_or_si256, _mm256_set1_epi8, _mm256_set1_ps, _mm256_slli_epi16, _mm256_srli_epi16, _mm256_sub_epi8,
    _mm256_sub_ps,
};

use bytemuck::pod_read_unaligned;
use half::f16;

use crate::ggml::k_quants::k4_factors;
use crate::ggml::mxfp4::{KVALUES_MXFP4, e8m0_to_f32_half};

#[inline]
fn read_f16(bytes: &[u8]) -> f32 {
    f16::from_le_bytes([bytes[0], bytes[1]]).to_f32()
}

#[inline]
#[target_feature(enable = "avx2")]
fn store8(out: &mut [f32], v: __m256) {
    out[..8].copy_from_slice(&bytemuck::cast::<__m256, [f32; 8]>(v));
}

/// The low 8 signed bytes of `v` as f32.
#[inline]
#[target_feature(enable = "avx2")]
fn i8x8_to_ps(v: __m128i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
}

/// The low 8 unsigned bytes of `v` as f32.
#[inline]
#[target_feature(enable = "avx2")]
fn u8x8_to_ps(v: __m128i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
}

/// 16 signed bytes as two vectors of 8 f32.
#[inline]
#[target_feature(enable = "avx2")]
fn i8x16_to_ps(v: __m128i) -> [__m256; 2] {
    [i8x8_to_ps(v), i8x8_to_ps(_mm_srli_si128::<8>(v))]
}

/// 16 unsigned bytes as two vectors of 8 f32.
#[inline]
#[target_feature(enable = "avx2")]
fn u8x16_to_ps(v: __m128i) -> [__m256; 2] {
    [u8x8_to_ps(v), u8x8_to_ps(_mm_srli_si128::<8>(v))]
}

/// The two 128-bit halves of `v`.
#[inline]
#[target_feature(enable = "avx2")]
fn halves(v: __m256i) -> [__m128i; 2] {
    [_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v)]
}

#[target_feature(enable = "avx2")]
pub(super) fn dequantize_row_q8_0(bytes: &[u8], out: &mut [f32]) {
    for (block, values) in bytes.chunks_exact(34).zip(out.chunks_exact_mut(32)) {
        let d = _mm256_set1_ps(read_f16(block));
        for (k, values8) in values.chunks_exact_mut(8).enumerate() {
            let quants = pod_read_unaligned::<u64>(&block[2 + 8 * k..10 + 8 * k]);
            let q = i8x8_to_ps(_mm_cvtsi64_si128(quants as i64));
            store8(values8, _mm256_mul_ps(q, d));
        }
    }
}

/// A block's 16 nibble bytes split into (low nibbles, high nibbles), one per byte.
#[inline]
#[target_feature(enable = "avx2")]
fn split_nibbles(qs: &[u8]) -> (__m128i, __m128i) {
    let packed = pod_read_unaligned::<__m128i>(&qs[..16]);
    let mask = _mm_set1_epi8(0x0F);
    (_mm_and_si128(packed, mask), _mm_and_si128(_mm_srli_epi16::<4>(packed), mask))
}

#[target_feature(enable = "avx2")]
pub(super) fn dequantize_row_q4_0(bytes: &[u8], out: &mut [f32]) {
    for (block, values) in bytes.chunks_exact(18).zip(out.chunks_exact_mut(32)) {
        let d = _mm256_set1_ps(read_f16(block));
        let (low, high) = split_nibbles(&block[2..]);
        let eight = _mm_set1_epi8(8);
        let (low, high) = (_mm_sub_epi8(low, eight), _mm_sub_epi8(high, eight));
        let quants = [i8x16_to_ps(low), i8x16_to_ps(high)];
        for (values8, q) in values.chunks_exact_mut(8).zip(quants.iter().flatten()) {
            store8(values8, _mm256_mul_ps(d, *q));
        }
    }
}

#[target_feature(enable = "avx2")]
pub(super) fn dequantize_row_q4_1(bytes: &[u8], out: &mut [f32]) {
    for (block, values) in bytes.chunks_exact(20).zip(out.chunks_exact_mut(32)) {
        let d = _mm256_set1_ps(read_f16(block));
        let m = _mm256_set1_ps(read_f16(&block[2..]));
        let (low, high) = split_nibbles(&block[4..]);
        let quants = [u8x16_to_ps(low), u8x16_to_ps(high)];
        for (values8, q) in values.chunks_exact_mut(8).zip(quants.iter().flatten()) {
            store8(values8, _mm256_add_ps(_mm256_mul_ps(d, *q), m));
        }
    }
}

#[target_feature(enable = "avx2")]
pub(super) fn dequantize_row_mxfp4(bytes: &[u8], out: &mut [f32]) {
    let k = KVALUES_MXFP4;
    #[rustfmt::skip]
    let table = _mm_setr_epi8(
        k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7],
        k[8], k[9], k[10], k[11], k[12], k[13], k[14], k[15],
    );
    for (block, values) in bytes.chunks_exact(17).zip(out.chunks_exact_mut(32)) {
        let d = _mm256_set1_ps(e8m0_to_f32_half(block[0]));
        let (low, high) = split_nibbles(&block[1..]);
        let (low, high) = (_mm_shuffle_epi8(table, low), _mm_shuffle_epi8(table, high));
        let kvalues = [i8x16_to_ps(low), i8x16_to_ps(high)];
        for (values8, kv) in values.chunks_exact_mut(8).zip(kvalues.iter().flatten()) {
            store8(values8, _mm256_mul_ps(d, *kv));
        }
    }
}

#[target_feature(enable = "avx2")]
pub(super) fn dequantize_row_q4_k(bytes: &[u8], out: &mut [f32]) {
    let mask = _mm256_set1_epi8(0x0F);
    for (block, values) in bytes.chunks_exact(144).zip(out.chunks_exact_mut(256)) {
        let scales: [u8; 12] = block[4..16].try_into().expect("12 scale bytes");
        let factors =
            k4_factors(f16::from_le_bytes([block[0], block[1]]), f16::from_le_bytes([block[2], block[3]]), &scales);
        let qs = &block[16..];
        for (chunk, values64) in values.chunks_exact_mut(64).enumerate() {
            let packed = pod_read_unaligned::<__m256i>(&qs[32 * chunk..32 * chunk + 32]);
            let low = _mm256_and_si256(packed, mask);
            let high = _mm256_and_si256(_mm256_srli_epi16::<4>(packed), mask);
            for (sub, (nibbles, values32)) in [low, high].into_iter().zip(values64.chunks_exact_mut(32)).enumerate() {
                let (scale, offset) = factors[2 * chunk + sub];
                let (scale, offset) = (_mm256_set1_ps(scale), _mm256_set1_ps(offset));
                let [lo, hi] = halves(nibbles);
                let quants = [u8x16_to_ps(lo), u8x16_to_ps(hi)];
                for (values8, q) in values32.chunks_exact_mut(8).zip(quants.iter().flatten()) {
                    store8(values8, _mm256_sub_ps(_mm256_mul_ps(scale, *q), offset));
                }
            }
        }
    }
}

/// The unsigned quants (0..=63) of one 128-value half of a Q6_K block, as four vectors of 32 bytes
/// (values `128·half + 32k ..`): quarter k takes its low 4 bits from `ql` (low, low, high, high
/// nibble of the half's two 32-byte runs) and its high 2 bits from bits `2k..` of `qh`; see the
/// Q6_K diagram in ggml::k_quants. Shared by the dequantizer and the matmul kernels.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn q6_k_quarters(block: &[u8], half: usize) -> [__m256i; 4] {
    let (low4, low2) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x03));
    let ql = &block[64 * half..64 * half + 64];
    let a = pod_read_unaligned::<__m256i>(&ql[..32]);
    let b = pod_read_unaligned::<__m256i>(&ql[32..]);
    let h = pod_read_unaligned::<__m256i>(&block[128 + 32 * half..160 + 32 * half]);
    let high2 = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, low2));
    [
        _mm256_or_si256(_mm256_and_si256(a, low4), high2(h)),
        _mm256_or_si256(_mm256_and_si256(b, low4), high2(_mm256_srli_epi16::<2>(h))),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(a), low4), high2(_mm256_srli_epi16::<4>(h))),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(b), low4), high2(_mm256_srli_epi16::<6>(h))),
    ]
}

#[target_feature(enable = "avx2")]
pub(super) fn dequantize_row_q6_k(bytes: &[u8], out: &mut [f32]) {
    for (block, values) in bytes.chunks_exact(210).zip(out.chunks_exact_mut(256)) {
        let d = read_f16(&block[208..]);
        let factors: [f32; 16] = std::array::from_fn(|i| d * f32::from(block[192 + i] as i8));
        for (half, values128) in values.chunks_exact_mut(128).enumerate() {
            for (quarter, (q6, values32)) in
                q6_k_quarters(block, half).into_iter().zip(values128.chunks_exact_mut(32)).enumerate()
            {
                let signed = _mm256_sub_epi8(q6, _mm256_set1_epi8(32));
                let [lo, hi] = halves(signed);
                let sub_block = (128 * half + 32 * quarter) / 16;
                for (k, (values8, q)) in
                    values32.chunks_exact_mut(8).zip([i8x16_to_ps(lo), i8x16_to_ps(hi)].iter().flatten()).enumerate()
                {
                    let factor = _mm256_set1_ps(factors[sub_block + k / 2]);
                    store8(values8, _mm256_mul_ps(factor, *q));
                }
            }
        }
    }
}
