//! MLX affine groups (4- or 8-bit codes, bf16 scales and biases) to their bf16 values as
//! `mx.dequantize` computes them, 16 values per step: `bf16(bf16(q·scale) + bias)`, each rounding
//! to nearest even as `half::bf16::from_f32` does, so the bytes equal
//! `MlxAffine::groups_to_bytes_ref`'s bit for bit.

use std::arch::x86_64::*;

/// Whole groups of `group_size` (a multiple of 16) values of `bits` (4 or 8) into `out` (2 bytes
/// per value); `weight`, `scales` and `biases` hold exactly those groups (checked by the caller).
#[target_feature(enable = "avx2")]
pub(crate) fn affine_bf16_to_bytes(
    bits: u32,
    group_size: usize,
    weight: &[u8],
    scales: &[u8],
    biases: &[u8],
    out: &mut [u8],
) {
    let group_weight = group_size * bits as usize / 8;
    let groups = out.len() / (2 * group_size);
    assert!(
        weight.len() >= groups * group_weight && scales.len() >= 2 * groups && biases.len() >= 2 * groups,
        "components of {groups} groups"
    );
    for g in 0..groups {
        let scale = bf16_at(scales, g);
        let bias = bf16_at(biases, g);
        let (scale, bias) = (_mm256_set1_ps(scale), _mm256_set1_ps(bias));
        let codes = &weight[g * group_weight..][..group_weight];
        let out = &mut out[g * 2 * group_size..][..2 * group_size];
        for (step, out) in out.chunks_exact_mut(32).enumerate() {
            // Sixteen codes, in order, as two vectors of eight i32.
            let (lo, hi) = if bits == 8 {
                // SAFETY: the slice is 16 bytes.
                let q = unsafe { _mm_loadu_si128(codes[16 * step..][..16].as_ptr().cast()) };
                (_mm256_cvtepu8_epi32(q), _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(q)))
            } else {
                // Byte j holds values 2j (low nibble) and 2j + 1 (high nibble).
                // SAFETY: the slice is 8 bytes.
                let packed = unsafe { _mm_loadl_epi64(codes[8 * step..][..8].as_ptr().cast()) };
                let mask = _mm_set1_epi8(0x0F);
                let low = _mm_and_si128(packed, mask);
                let high = _mm_and_si128(_mm_srli_epi16::<4>(packed), mask);
                let q = _mm_unpacklo_epi8(low, high);
                (_mm256_cvtepu8_epi32(q), _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(q)))
            };
            let value = |q: __m256i| {
                let product = _mm256_castsi256_ps(round_bf16(_mm256_mul_ps(_mm256_cvtepi32_ps(q), scale)));
                // The sum rounded the same way, its bf16 bits taken straight from the high half.
                _mm256_srli_epi32::<16>(rounding_carry(_mm256_add_ps(product, bias)))
            };
            // packus interleaves the 128-bit lanes of its operands; the permute puts them back.
            let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(value(lo), value(hi)));
            // SAFETY: `out` is 32 bytes (a chunk of exactly 32).
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), packed) };
        }
    }
}

/// bf16 number `g` of `bytes` as f32.
fn bf16_at(bytes: &[u8], g: usize) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([bytes[2 * g], bytes[2 * g + 1]])) << 16)
}

/// Each lane rounded to bf16 (its bits, low half zero), to nearest even as `half::bf16::from_f32`.
/// Its NaN rule (quiet, truncated) needs no lane of its own here: every input is a product or a
/// sum, which the hardware makes a quiet NaN whose low half is zero (a bf16 payload, or the
/// default NaN), and rounding leaves such a NaN as it is.
#[target_feature(enable = "avx2")]
fn round_bf16(x: __m256) -> __m256i {
    _mm256_and_si256(rounding_carry(x), _mm256_set1_epi32(0xFFFF_0000u32 as i32))
}

/// Each lane's bits plus what rounds its high half to nearest even (`0x7FFF` and the high half's
/// lowest bit): the high half is then the rounded bf16.
#[target_feature(enable = "avx2")]
fn rounding_carry(x: __m256) -> __m256i {
    let bits = _mm256_castps_si256(x);
    let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(1));
    _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)))
}

#[cfg(test)]
mod tests {
    use minerva_core::DType;

    use crate::MlxAffine;

    /// Random codes, and scales and biases that reach every case of the rounding: ordinary values,
    /// ties, subnormals, overflow to infinity, infinities and NaNs.
    #[test]
    fn equals_the_reference_bit_for_bit() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        let mut next = crate::test_rng::xorshift(0x9E37_79B9_7F4A_7C15);
        let special = [0x7F80u16, 0xFF80, 0x7FC1, 0xFF81, 0x7F7F, 0x0001, 0x8001, 0x3F80, 0x0000];
        for bits in [4u32, 8] {
            for group_size in [32usize, 64, 128] {
                let groups = 37;
                let params = MlxAffine { bits, group_size, scale_dtype: DType::BF16 };
                let weight: Vec<u8> = (0..groups * group_size * bits as usize / 8).map(|_| next() as u8).collect();
                let float = |r: u64| match r % 8 {
                    0 => special[(r >> 8) as usize % special.len()],
                    _ => (r >> 16) as u16,
                };
                let scales: Vec<u8> = (0..groups).flat_map(|_| float(next()).to_le_bytes()).collect();
                let biases: Vec<u8> = (0..groups).flat_map(|_| float(next()).to_le_bytes()).collect();
                let mut simd = vec![0u8; groups * group_size * 2];
                let mut reference = simd.clone();
                // SAFETY: AVX2 was detected above.
                unsafe { super::affine_bf16_to_bytes(bits, group_size, &weight, &scales, &biases, &mut simd) };
                params.groups_to_bytes_ref(&weight, &scales, &biases, &mut reference);
                assert!(simd == reference, "bits {bits}, group {group_size}");
            }
        }
    }
}
