//! MLX affine quantization (`mx.quantize(w, group_size, bits)`, mode `"affine"`).
//!
//! Sources: MLX `python/src/ops.cpp` (`quantize` docstring), `mlx/ops.cpp` (`affine_dequantize`);
//! checked against `mlx` 0.32.4 on Linux (CPU) by `fixtures/quant/make_quant_goldens.py`.
//!
//! ```text
//! weight u32 [out, in*bits/32]   — one continuous little-endian bit stream per row:
//!   value i occupies bits i*bits .. (i+1)*bits, LSB first. For 2/4/8 bits a value never crosses
//!   a u32 word; for 3/5/6 bits it may (e.g. 3-bit value 10 uses bits 30..33: two of word 0, one
//!   of word 1).
//!
//!   bits=4:  word 0 = | v7 | v6 | v5 | v4 | v3 | v2 | v1 | v0 |   (v0 in bits 0..4)
//!
//! scales, biases [out, in/group_size] in the model's float dtype (f16, bf16 or f32)
//! w[i] = q[i] * scale[i / group_size] + bias[i / group_size]
//! ```
//!
//! MLX evaluates `q * scale + bias` in the scales' dtype, rounding after each operation.
//! [`MlxAffine::dequantize_exact`] does the same (bit for bit); [`MlxAffine::dequantize_ref`]
//! evaluates it in f32 (two roundings, never an FMA), which equals MLX's output for f32 scales and
//! differs from it by up to half a step of the scales' type for f16/bf16 ones.

use half::{bf16, f16};
use minerva_core::DType;

use crate::QuantError;

/// The parameters of an MLX affine-quantized tensor (its `config.json` `quantization` entry plus
/// the scales' dtype).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlxAffine {
    /// Bits per value: 2, 3, 4, 5, 6 or 8.
    pub bits: u32,
    /// Values per scale/bias group: 32, 64 or 128.
    pub group_size: usize,
    /// The dtype of `scales` and `biases`: F16, BF16 or F32.
    pub scale_dtype: DType,
}

impl MlxAffine {
    /// Checks the parameters against what MLX supports.
    pub fn validate(&self) -> Result<(), QuantError> {
        let bits_ok = matches!(self.bits, 2 | 3 | 4 | 5 | 6 | 8);
        let group_ok = matches!(self.group_size, 32 | 64 | 128);
        if !bits_ok || !group_ok {
            return Err(QuantError::MlxParameters { bits: self.bits, group_size: self.group_size });
        }
        if !matches!(self.scale_dtype, DType::F16 | DType::BF16 | DType::F32) {
            return Err(QuantError::MlxScaleDType { dtype: self.scale_dtype });
        }
        Ok(())
    }

    /// Dequantizes `values.len()` values from `weight` (the u32 tensor's little-endian bytes),
    /// `scales` and `biases` (raw bytes in `scale_dtype`), computing `q·scale + bias` in f32.
    /// Whole tensors may be passed flattened: each row is a whole number of groups, so rows pack
    /// back to back.
    pub fn dequantize_ref(
        &self,
        weight: &[u8],
        scales: &[u8],
        biases: &[u8],
        values: &mut [f32],
    ) -> Result<(), QuantError> {
        self.dequantize_with(weight, scales, biases, values, |v| v)
    }

    /// [`MlxAffine::dequantize_ref`] as `mx.dequantize` computes it: in the scales' float type,
    /// each operation rounded to it (`bf16(bf16(q·scale) + bias)` for bf16 scales). The values are
    /// exactly representable in `scale_dtype`.
    pub fn dequantize_exact(
        &self,
        weight: &[u8],
        scales: &[u8],
        biases: &[u8],
        values: &mut [f32],
    ) -> Result<(), QuantError> {
        match self.scale_dtype {
            DType::BF16 => self.dequantize_with(weight, scales, biases, values, |v| bf16::from_f32(v).to_f32()),
            DType::F16 => self.dequantize_with(weight, scales, biases, values, |v| f16::from_f32(v).to_f32()),
            _ => self.dequantize_ref(weight, scales, biases, values),
        }
    }

    /// `round(round(q·scale) + bias)` for every value.
    fn dequantize_with(
        &self,
        weight: &[u8],
        scales: &[u8],
        biases: &[u8],
        values: &mut [f32],
        round: impl Fn(f32) -> f32,
    ) -> Result<(), QuantError> {
        self.validate()?;
        let n = values.len();
        if !n.is_multiple_of(self.group_size) {
            return Err(QuantError::PartialGroupValues { len: n, group_size: self.group_size });
        }
        let groups = n / self.group_size;
        let bits = self.bits as usize;
        // A group of >= 32 values fills whole u32 words, so the byte count is exact.
        check_component("weight", n * bits / 8, weight.len())?;
        let scale_bytes = self.scale_dtype.block_bytes();
        check_component("scales", groups * scale_bytes, scales.len())?;
        check_component("biases", groups * scale_bytes, biases.len())?;

        let read_float = |bytes: &[u8], g: usize| read_scale(self.scale_dtype, bytes, g);
        for (g, group) in values.chunks_exact_mut(self.group_size).enumerate() {
            let (scale, bias) = (read_float(scales, g), read_float(biases, g));
            for (k, w) in group.iter_mut().enumerate() {
                let q = read_bits(weight, (g * self.group_size + k) * bits, self.bits);
                *w = round(round(q as f32 * scale) + bias);
            }
        }
        Ok(())
    }
}

fn check_component(component: &'static str, expected: usize, actual: usize) -> Result<(), QuantError> {
    if expected == actual {
        return Ok(());
    }
    Err(QuantError::ComponentLength { format: "MLX affine", component, expected, actual, unit: "bytes" })
}

/// Scale or bias number `g` from raw little-endian bytes of `dtype` (validated F16/BF16/F32).
fn read_scale(dtype: DType, bytes: &[u8], g: usize) -> f32 {
    match dtype {
        DType::F16 => f16::from_le_bytes([bytes[2 * g], bytes[2 * g + 1]]).to_f32(),
        DType::BF16 => bf16::from_le_bytes([bytes[2 * g], bytes[2 * g + 1]]).to_f32(),
        _ => f32::from_le_bytes(bytes[4 * g..4 * g + 4].try_into().expect("4 bytes")),
    }
}

/// `width` bits (at most 8) starting at bit `start` of a little-endian bit stream. Reads the two
/// bytes the field can touch; the second is absent only when the field ends in the last byte.
fn read_bits(stream: &[u8], start: usize, width: u32) -> u32 {
    let byte = start / 8;
    let low = u32::from(stream[byte]);
    let high = stream.get(byte + 1).map_or(0, |&b| u32::from(b));
    ((low | (high << 8)) >> (start % 8)) & ((1 << width) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_bit_values_cross_word_boundaries() {
        // Values 0..=10 at 3 bits: value 10 spans bits 30..33, two bits in word 0, one in word 1.
        let mut stream = 0u64;
        for (i, v) in (0..11u64).map(|v| v % 8).enumerate() {
            stream |= v << (3 * i);
        }
        let bytes = stream.to_le_bytes();
        for i in 0..11 {
            assert_eq!(read_bits(&bytes, 3 * i, 3), (i % 8) as u32, "value {i}");
        }
        // The last field of a stream: no byte after it to read.
        assert_eq!(read_bits(&[0xAB], 4, 4), 0xA);
    }

    #[test]
    fn exact_dequantization_rounds_each_operation_to_the_scale_type() {
        // One 8-bit group of 32: q = 0..32, bf16 scale 0.3 (0.30078125), bias 1.7 (1.703125).
        let weight: Vec<u8> = (0..32u8).collect();
        let (scale, bias) = (bf16::from_f32(0.3), bf16::from_f32(1.7));
        let params = MlxAffine { bits: 8, group_size: 32, scale_dtype: DType::BF16 };
        let (mut exact, mut f32_path) = (vec![0.0; 32], vec![0.0; 32]);
        params.dequantize_exact(&weight, &scale.to_le_bytes(), &bias.to_le_bytes(), &mut exact).unwrap();
        params.dequantize_ref(&weight, &scale.to_le_bytes(), &bias.to_le_bytes(), &mut f32_path).unwrap();
        for q in 0..32 {
            let product = bf16::from_f32(q as f32 * scale.to_f32());
            let want = bf16::from_f32(product.to_f32() + bias.to_f32()).to_f32();
            assert_eq!(exact[q], want, "q = {q}");
            assert_eq!(f32_path[q], q as f32 * scale.to_f32() + bias.to_f32(), "q = {q}");
        }
        // The two differ (here at q = 31: 9.3242 + 1.7031 rounds differently in two steps).
        assert_ne!(exact, f32_path);
    }

    #[test]
    fn parameters_outside_mlx_are_rejected() {
        let bad_bits = MlxAffine { bits: 7, group_size: 64, scale_dtype: DType::F16 };
        assert_eq!(bad_bits.validate(), Err(QuantError::MlxParameters { bits: 7, group_size: 64 }));
        let bad_dtype = MlxAffine { bits: 4, group_size: 64, scale_dtype: DType::Q8_0 };
        assert_eq!(bad_dtype.validate(), Err(QuantError::MlxScaleDType { dtype: DType::Q8_0 }));
    }
}
