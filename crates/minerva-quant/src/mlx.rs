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
use crate::pool;

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

/// One row's bytes in each component of an MLX affine matrix ([`MlxAffine::row_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AffineRowBytes {
    /// Of the codes (`weight`).
    pub codes: usize,
    /// Of the scales, and of the biases.
    pub scales: usize,
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

    /// Bytes per row of `cols` values: of codes, and of scales (as many of biases). An error for
    /// parameters MLX does not support or `cols` not a whole number of groups.
    pub fn row_bytes(&self, cols: usize) -> Result<AffineRowBytes, QuantError> {
        self.validate()?;
        if !cols.is_multiple_of(self.group_size) {
            return Err(QuantError::PartialGroupValues { len: cols, group_size: self.group_size });
        }
        // A group of >= 32 values is whole u32 words of codes.
        Ok(AffineRowBytes {
            codes: cols / 8 * self.bits as usize,
            scales: cols / self.group_size * self.scale_dtype.block_bytes(),
        })
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
        self.check(values.len(), weight, scales, biases)?;
        self.fill(weight, scales, biases, values, |v| v);
        Ok(())
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
        self.check(values.len(), weight, scales, biases)?;
        self.fill_exact(weight, scales, biases, values);
        Ok(())
    }

    /// [`MlxAffine::dequantize_exact`] straight into `out`: the values as little-endian bytes of
    /// `scale_dtype` (the type MLX computes them in, so the conversion is exact), on the current
    /// pool's threads a chunk of groups at a time, without an f32 copy of the whole tensor. What
    /// a loader keeps of an MLX matrix it cannot use quantized.
    pub fn dequantize_exact_to_bytes(
        &self,
        weight: &[u8],
        scales: &[u8],
        biases: &[u8],
        out: &mut [u8],
    ) -> Result<(), QuantError> {
        self.validate()?;
        let width = self.scale_dtype.block_bytes();
        let values = out.len() / width;
        if !out.len().is_multiple_of(width) {
            return Err(QuantError::PartialGroupValues { len: values, group_size: self.group_size });
        }
        self.check(values, weight, scales, biases)?;
        // Whole groups per task: a group's quants are `group_size · bits / 8` whole bytes.
        let (group_weight, group_out) = (self.group_size * self.bits as usize / 8, self.group_size * width);
        pool::for_each_chunk_mut(out, CHUNK_GROUPS * group_out, |c, out| {
            let (first, groups) = (c * CHUNK_GROUPS, out.len() / group_out);
            self.groups_to_bytes(
                &weight[first * group_weight..][..groups * group_weight],
                &scales[first * width..][..groups * width],
                &biases[first * width..][..groups * width],
                out,
            );
        });
        Ok(())
    }

    /// [`MlxAffine::dequantize_exact_to_bytes`] of whole groups on the calling thread, components
    /// of exactly `out`'s groups (checked by the caller): what a product reading MLX's layout in
    /// place ([`crate::Matrix::MlxAffine`]) stages a few rows at a time. SIMD for bf16 scales.
    pub(crate) fn groups_to_bytes(&self, weight: &[u8], scales: &[u8], biases: &[u8], out: &mut [u8]) {
        match self.scale_dtype {
            DType::BF16 => (crate::kernels::vector_kernels().mlx_affine_bf16)(self, weight, scales, biases, out),
            _ => self.groups_to_bytes_ref(weight, scales, biases, out),
        }
    }

    /// [`MlxAffine::groups_to_bytes`] a value at a time: the reference its SIMD forms equal bit
    /// for bit.
    pub(crate) fn groups_to_bytes_ref(&self, weight: &[u8], scales: &[u8], biases: &[u8], out: &mut [u8]) {
        let width = self.scale_dtype.block_bytes();
        let (group_weight, group_out) = (self.group_size * self.bits as usize / 8, self.group_size * width);
        let mut values = [0.0f32; 128];
        let values = &mut values[..self.group_size];
        for (g, out) in out.chunks_exact_mut(group_out).enumerate() {
            let (weight, scale, bias) = (
                &weight[g * group_weight..][..group_weight],
                &scales[g * width..][..width],
                &biases[g * width..][..width],
            );
            self.fill_exact(weight, scale, bias, values);
            let bytes = out.chunks_exact_mut(width).zip(values.iter());
            match self.scale_dtype {
                DType::BF16 => bytes.for_each(|(b, &v)| b.copy_from_slice(&bf16::from_f32(v).to_le_bytes())),
                DType::F16 => bytes.for_each(|(b, &v)| b.copy_from_slice(&f16::from_f32(v).to_le_bytes())),
                _ => bytes.for_each(|(b, &v)| b.copy_from_slice(&v.to_le_bytes())),
            }
        }
    }

    /// The block dtype that holds this layout's values 32 at a time, for kernels that read
    /// whole blocks (the GPU's): [`DType::MLX_A8`] for 8-bit codes and [`DType::MLX_A4`] for
    /// 4-bit ones with bf16 scales (mlx-lm's `convert -q` of a bf16 model); `None` otherwise.
    pub fn block_dtype(&self) -> Option<DType> {
        match (self.bits, self.scale_dtype) {
            (8, DType::BF16) => Some(DType::MLX_A8),
            (4, DType::BF16) => Some(DType::MLX_A4),
            _ => None,
        }
    }

    /// The values as blocks of [`MlxAffine::block_dtype`] into `out` (whole blocks, lossless):
    /// per 32 values their group's scale and bias as stored, then their codes as stored. A layout
    /// without a block dtype is [`QuantError::Unsupported`]; wrong lengths are errors.
    pub fn to_blocks(&self, weight: &[u8], scales: &[u8], biases: &[u8], out: &mut [u8]) -> Result<(), QuantError> {
        let dtype = self.block_dtype().ok_or(QuantError::Unsupported {
            dtype: self.scale_dtype,
            operation: "MLX affine blocks (8- or 4-bit codes with bf16 scales only)",
        })?;
        self.validate()?;
        let block_bytes = dtype.block_bytes();
        if !out.len().is_multiple_of(block_bytes) {
            return Err(QuantError::PartialBlockBytes { dtype, len: out.len(), block_bytes });
        }
        let values = out.len() / block_bytes * 32;
        self.check(values, weight, scales, biases)?;
        let codes = 32 * self.bits as usize / 8;
        for (b, block) in out.chunks_exact_mut(block_bytes).enumerate() {
            let g = b * 32 / self.group_size;
            block[..2].copy_from_slice(&scales[2 * g..2 * g + 2]);
            block[2..4].copy_from_slice(&biases[2 * g..2 * g + 2]);
            block[4..].copy_from_slice(&weight[b * codes..][..codes]);
        }
        Ok(())
    }

    /// Quantizes `values` (whole groups, each a value of `scale_dtype`, as the tensor MLX
    /// quantizes holds them) into `weight` (the u32 words' little-endian bytes), `scales` and
    /// `biases` (raw bytes of `scale_dtype`), as `mx.quantize(w, group_size, bits)` does, bit for
    /// bit (checked against mlx 0.32.4 by `tests/golden.rs`). Per group, in f32: the scale is
    /// `(max − min) / (2^bits − 1)` (at least 1e-7), signed so that the edge of larger magnitude
    /// (`min` if `|min| > |max|`, else `max`) is a whole number of steps from zero, then refined to
    /// `edge / round(edge / scale)` where that is not zero; the bias is the edge (0 where it rounded
    /// to zero); each quant is `round((w − bias) / scale)` (ties to even) clamped to the range.
    /// Scales and biases are then rounded to `scale_dtype`.
    pub fn quantize(
        &self,
        values: &[f32],
        weight: &mut [u8],
        scales: &mut [u8],
        biases: &mut [u8],
    ) -> Result<(), QuantError> {
        self.check(values.len(), weight, scales, biases)?;
        weight.fill(0);
        let n_bins = ((1u32 << self.bits) - 1) as f32;
        for (g, group) in values.chunks_exact(self.group_size).enumerate() {
            let (min, max) =
                group.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &w| (lo.min(w), hi.max(w)));
            let min_is_edge = min.abs() > max.abs();
            let step = ((max - min) / n_bins).max(1e-7);
            let (mut scale, edge) = if min_is_edge { (step, min) } else { (-step, max) };
            let q0 = (edge / scale).round_ties_even();
            if q0 != 0.0 {
                scale = edge / q0;
            }
            let bias = if q0 == 0.0 { 0.0 } else { edge };
            for (k, &w) in group.iter().enumerate() {
                let q = ((w - bias) / scale).round_ties_even().clamp(0.0, n_bins) as u32;
                write_bits(weight, (g * self.group_size + k) * self.bits as usize, q);
            }
            write_scale(self.scale_dtype, scales, g, scale);
            write_scale(self.scale_dtype, biases, g, bias);
        }
        Ok(())
    }

    /// Checks the parameters and that `n` values are whole groups with components of their
    /// lengths.
    fn check(&self, n: usize, weight: &[u8], scales: &[u8], biases: &[u8]) -> Result<(), QuantError> {
        self.validate()?;
        if !n.is_multiple_of(self.group_size) {
            return Err(QuantError::PartialGroupValues { len: n, group_size: self.group_size });
        }
        self.check_components(n, weight, scales, biases)
    }

    /// [`MlxAffine::fill`] rounding each operation to the scales' type, as MLX does.
    fn fill_exact(&self, weight: &[u8], scales: &[u8], biases: &[u8], values: &mut [f32]) {
        match self.scale_dtype {
            DType::BF16 => self.fill(weight, scales, biases, values, |v| bf16::from_f32(v).to_f32()),
            DType::F16 => self.fill(weight, scales, biases, values, |v| f16::from_f32(v).to_f32()),
            _ => self.fill(weight, scales, biases, values, |v| v),
        }
    }

    /// Checks the components' lengths for `n` values (a whole number of groups).
    fn check_components(&self, n: usize, weight: &[u8], scales: &[u8], biases: &[u8]) -> Result<(), QuantError> {
        let groups = n / self.group_size;
        // A group of >= 32 values fills whole u32 words, so the byte count is exact.
        check_component("weight", n * self.bits as usize / 8, weight.len())?;
        let scale_bytes = self.scale_dtype.block_bytes();
        check_component("scales", groups * scale_bytes, scales.len())?;
        check_component("biases", groups * scale_bytes, biases.len())
    }

    /// `values` (whole groups) from components of checked lengths.
    fn fill(&self, weight: &[u8], scales: &[u8], biases: &[u8], values: &mut [f32], round: impl Fn(f32) -> f32) {
        let read_float = |bytes: &[u8], g: usize| read_scale(self.scale_dtype, bytes, g);
        for (g, group) in values.chunks_exact_mut(self.group_size).enumerate() {
            let (scale, bias) = (read_float(scales, g), read_float(biases, g));
            let first = g * self.group_size;
            if self.bits == 8 {
                // Each value is one byte of the stream.
                for (w, &q) in group.iter_mut().zip(&weight[first..]) {
                    *w = round(round(f32::from(q) * scale) + bias);
                }
            } else {
                for (k, w) in group.iter_mut().enumerate() {
                    let q = read_bits(weight, (first + k) * self.bits as usize, self.bits);
                    *w = round(round(q as f32 * scale) + bias);
                }
            }
        }
    }
}

/// [`DType::MLX_A8`] or [`DType::MLX_A4`] blocks (`bits`) to their values, as `mx.dequantize`.
fn dequantize_blocks(bits: u32, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let dtype = if bits == 8 { DType::MLX_A8 } else { DType::MLX_A4 };
    let block_bytes = dtype.block_bytes();
    if !bytes.len().is_multiple_of(block_bytes) {
        return Err(QuantError::PartialBlockBytes { dtype, len: bytes.len(), block_bytes });
    }
    if out.len() != bytes.len() / block_bytes * 32 {
        let expected = bytes.len() / block_bytes * 32;
        return Err(QuantError::OutputLength { dtype, expected, actual: out.len(), unit: "values" });
    }
    let round = |v: f32| bf16::from_f32(v).to_f32();
    for (block, values) in bytes.chunks_exact(block_bytes).zip(out.chunks_exact_mut(32)) {
        let (scale, bias) = (read_scale(DType::BF16, block, 0), read_scale(DType::BF16, block, 1));
        for (i, v) in values.iter_mut().enumerate() {
            let q = if bits == 8 { block[4 + i] } else { (block[4 + i / 2] >> (4 * (i % 2))) & 0x0F };
            *v = round(round(f32::from(q) * scale) + bias);
        }
    }
    Ok(())
}

/// Rows of [`DType::MLX_A8`] blocks to their values.
pub(crate) fn dequantize_row_mlx_a8(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks(8, bytes, out)
}

/// Rows of [`DType::MLX_A4`] blocks to their values.
pub(crate) fn dequantize_row_mlx_a4(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks(4, bytes, out)
}

/// Groups per task of [`MlxAffine::dequantize_exact_to_bytes`]: 64 Ki values of 64-value groups.
const CHUNK_GROUPS: usize = 1024;

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

/// Scale or bias number `g` into raw little-endian bytes of `dtype` (validated F16/BF16/F32),
/// rounded to nearest even.
fn write_scale(dtype: DType, bytes: &mut [u8], g: usize, value: f32) {
    match dtype {
        DType::F16 => bytes[2 * g..2 * g + 2].copy_from_slice(&f16::from_f32(value).to_le_bytes()),
        DType::BF16 => bytes[2 * g..2 * g + 2].copy_from_slice(&bf16::from_f32(value).to_le_bytes()),
        _ => bytes[4 * g..4 * g + 4].copy_from_slice(&value.to_le_bytes()),
    }
}

/// ORs `value` (fewer than 9 bits, clear above them) into a zeroed little-endian bit stream at
/// bit `start`: the two bytes the field can touch (the second only where it exists).
fn write_bits(stream: &mut [u8], start: usize, value: u32) {
    let (byte, shifted) = (start / 8, value << (start % 8));
    stream[byte] |= shifted as u8;
    if let Some(next) = stream.get_mut(byte + 1) {
        *next |= (shifted >> 8) as u8;
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

    /// Into bytes on several threads, across task boundaries: the values of `dequantize_exact`,
    /// bit for bit, for every bit width, group size and scale type; wrong lengths are the same
    /// typed errors.
    #[test]
    fn bytes_on_the_pool_equal_exact_dequantization() {
        let mut next = crate::test_rng::xorshift(0x9E37_79B9_7F4A_7C15);
        let pool = crate::ComputePool::new(3).unwrap();
        for scale_dtype in [DType::BF16, DType::F16, DType::F32] {
            for bits in [2u32, 3, 4, 5, 6, 8] {
                for group_size in [32usize, 64, 128] {
                    let params = MlxAffine { bits, group_size, scale_dtype };
                    // Two and a half tasks' worth of groups.
                    let groups = 2 * CHUNK_GROUPS + CHUNK_GROUPS / 2 + 3;
                    let n = groups * group_size;
                    let weight: Vec<u8> = (0..n * bits as usize / 8).map(|_| next() as u8).collect();
                    let width = scale_dtype.block_bytes();
                    let float = |v: f32| match scale_dtype {
                        DType::BF16 => bf16::from_f32(v).to_le_bytes().to_vec(),
                        DType::F16 => f16::from_f32(v).to_le_bytes().to_vec(),
                        _ => v.to_le_bytes().to_vec(),
                    };
                    let mut random = |scale: f32| (next() % 2001) as f32 / 1000.0 * scale - scale;
                    let scales: Vec<u8> = (0..groups).flat_map(|_| float(random(0.05))).collect();
                    let biases: Vec<u8> = (0..groups).flat_map(|_| float(random(1.0))).collect();
                    let mut values = vec![0.0f32; n];
                    params.dequantize_exact(&weight, &scales, &biases, &mut values).unwrap();
                    let want: Vec<u8> = values.iter().flat_map(|&v| float(v)).collect();
                    let mut got = vec![0u8; n * width];
                    pool.install(|| params.dequantize_exact_to_bytes(&weight, &scales, &biases, &mut got)).unwrap();
                    assert!(got == want, "{scale_dtype} {bits} bits, groups of {group_size}");
                }
            }
        }
        let params = MlxAffine { bits: 8, group_size: 32, scale_dtype: DType::BF16 };
        let (weight, scales) = (vec![0u8; 64], vec![0u8; 4]);
        assert_eq!(
            params.dequantize_exact_to_bytes(&weight, &scales, &scales, &mut [0u8; 2 * 48]),
            Err(QuantError::PartialGroupValues { len: 48, group_size: 32 })
        );
        assert_eq!(
            params.dequantize_exact_to_bytes(&weight, &scales[..2], &scales, &mut [0u8; 2 * 64]),
            Err(QuantError::ComponentLength {
                format: "MLX affine",
                component: "scales",
                expected: 4,
                actual: 2,
                unit: "bytes"
            })
        );
    }

    #[test]
    fn parameters_outside_mlx_are_rejected() {
        let bad_bits = MlxAffine { bits: 7, group_size: 64, scale_dtype: DType::F16 };
        assert_eq!(bad_bits.validate(), Err(QuantError::MlxParameters { bits: 7, group_size: 64 }));
        let bad_dtype = MlxAffine { bits: 4, group_size: 64, scale_dtype: DType::Q8_0 };
        assert_eq!(bad_dtype.validate(), Err(QuantError::MlxScaleDType { dtype: DType::Q8_0 }));
    }
}
