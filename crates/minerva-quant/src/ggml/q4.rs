//! 4-bit GGML blocks: Q4_0 (symmetric) and Q4_1 (scale + minimum).
//!
//! Sources: ggml `ggml-common.h` (layouts), `ggml-quants.c` (`dequantize_row_q4_0`,
//! `quantize_row_q4_0_ref`, and the `_1` variants); gguf-py 0.19 `gguf/quants.py` (`Q4_0`, `Q4_1`),
//! whose results the golden tests match bit for bit.
//!
//! Both use **split halves**: byte `j` holds value `j` in its low nibble and value `j + 16` in its
//! high nibble (not the interleaved order of HF MXFP4).

use bytemuck::{Pod, Zeroable};
use half::f16;
use minerva_core::DType;

use crate::QuantError;
use crate::blocks::{dequantize_blocks, first_abs_max_index, impl_block, quantize_blocks};

/// Q4_0: 32 values, one f16 scale, 4.5 bits per weight.
///
/// ```text
/// byte  0      2                             18
///       +------+-----------------------------+
///       | d    | qs[0] ... qs[15]            |
///       | f16  | u8 x 16: lo nibble = y[j],  |
///       |      |          hi nibble = y[j+16]|
///       +------+-----------------------------+
/// y[j]    = d * ((qs[j] & 0xF) - 8)
/// y[j+16] = d * ((qs[j] >> 4)  - 8)
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Nibbles, split halves.
    pub qs: [u8; 16],
}

fn decode_q4_0(block: &BlockQ4_0, out: &mut [f32]) {
    let d = block.d.to_f32();
    let (low_half, high_half) = out.split_at_mut(16);
    for (j, &byte) in block.qs.iter().enumerate() {
        low_half[j] = d * f32::from(i16::from(byte & 0x0F) - 8);
        high_half[j] = d * f32::from(i16::from(byte >> 4) - 8);
    }
}
impl_block!(BlockQ4_0, DType::Q4_0, decode_q4_0);

/// Dequantizes Q4_0 blocks (`bytes`, any alignment) into `out`.
pub fn dequantize_row_q4_0_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockQ4_0>(bytes, out)
}

/// Packs 32 nibbles (each < 16) in split-halves order.
fn pack_split_halves(nibbles: &[u8; 32]) -> [u8; 16] {
    std::array::from_fn(|j| nibbles[j] | (nibbles[j + 16] << 4))
}

/// Quantizes `values` into Q4_0, as ggml's `quantize_row_q4_0_ref` and gguf-py: `max` is the value
/// of largest magnitude (sign kept), `d = max / -8` so that `max` maps to quant 0 exactly, and
/// `q = min(15, trunc(x/d + 8.5))`.
pub fn quantize_row_q4_0_ref(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    quantize_blocks(values, out, |x| {
        let max = x[first_abs_max_index(x)];
        let d = max / -8.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        // `as u8` saturates; `x * id + 8.5` is at least 0.5 here, so only the top needs the clamp.
        let nibbles: [u8; 32] = std::array::from_fn(|j| ((x[j] * id + 8.5).trunc() as u8).min(15));
        BlockQ4_0 { d: f16::from_f32(d), qs: pack_split_halves(&nibbles) }
    })
}

/// Q4_1: 32 values, an f16 scale and an f16 minimum, 5 bits per weight.
///
/// ```text
/// byte  0      2      4                             20
///       +------+------+-----------------------------+
///       | d    | m    | qs[0] ... qs[15]            |
///       | f16  | f16  | u8 x 16, split halves       |
///       +------+------+-----------------------------+
/// y[j]    = (qs[j] & 0xF) * d + m
/// y[j+16] = (qs[j] >> 4)  * d + m
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (the value of quant 0).
    pub m: f16,
    /// Nibbles, split halves.
    pub qs: [u8; 16],
}

fn decode_q4_1(block: &BlockQ4_1, out: &mut [f32]) {
    let (d, m) = (block.d.to_f32(), block.m.to_f32());
    let (low_half, high_half) = out.split_at_mut(16);
    for (j, &byte) in block.qs.iter().enumerate() {
        // Two roundings (multiply, then add), as gguf-py and ggml's scalar code; never an FMA.
        low_half[j] = d * f32::from(byte & 0x0F) + m;
        high_half[j] = d * f32::from(byte >> 4) + m;
    }
}
impl_block!(BlockQ4_1, DType::Q4_1, decode_q4_1);

/// Dequantizes Q4_1 blocks (`bytes`, any alignment) into `out`.
pub fn dequantize_row_q4_1_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockQ4_1>(bytes, out)
}

/// Quantizes `values` into Q4_1, as ggml's `quantize_row_q4_1_ref` and gguf-py:
/// `d = (max - min) / 15`, `q = min(15, trunc((x - min)/d + 0.5))`.
pub fn quantize_row_q4_1_ref(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    quantize_blocks(values, out, |x| {
        let min = x.iter().copied().fold(x[0], |m, v| if v < m { v } else { m });
        let max = x.iter().copied().fold(x[0], |m, v| if v > m { v } else { m });
        let d = (max - min) / 15.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let nibbles: [u8; 32] = std::array::from_fn(|j| (((x[j] - min) * id + 0.5).trunc() as u8).min(15));
        BlockQ4_1 { d: f16::from_f32(d), m: f16::from_f32(min), qs: pack_split_halves(&nibbles) }
    })
}
