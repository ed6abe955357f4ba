//! 5-bit GGML blocks: Q5_0 (symmetric) and Q5_1 (scale + minimum).
//!
//! Sources: ggml `ggml-common.h` (layouts), `ggml-quants.c` (`dequantize_row_q5_0`,
//! `dequantize_row_q5_1`); gguf-py 0.19 `gguf/quants.py` (`Q5_0`, `Q5_1`).
//!
//! The low four bits are nibbles in split-halves order, as in Q4_0; the fifth bit of value `j`
//! is bit `j` of the little-endian u32 `qh`.

use bytemuck::{Pod, Zeroable};
use half::f16;
use minerva_core::DType;

use crate::QuantError;
use crate::blocks::{dequantize_blocks, first_abs_max_index, impl_block, quantize_blocks};

/// Q5_0: 32 values, one f16 scale, 5.5 bits per weight.
///
/// ```text
/// byte  0      2            6                             22
///       +------+------------+-----------------------------+
///       | d    | qh         | qs[0] ... qs[15]            |
///       | f16  | u32 LE:    | u8 x 16, split halves       |
///       |      | bit j = 5th|                             |
///       |      | bit of y[j]|                             |
///       +------+------------+-----------------------------+
/// y[j]    = d * (((qs[j] & 0xF) | ((qh >> j) & 1) << 4)        - 16)
/// y[j+16] = d * (((qs[j] >> 4)  | ((qh >> (j+16)) & 1) << 4)   - 16)
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: f16,
    /// Fifth bits, a little-endian u32 stored as bytes (the block is only 2-aligned).
    pub qh: [u8; 4],
    /// Low nibbles, split halves.
    pub qs: [u8; 16],
}

/// The 5-bit quants of a Q5 block, in value order.
pub(crate) fn five_bit_quants(qh: [u8; 4], qs: &[u8; 16]) -> [u8; 32] {
    let high_bits = u32::from_le_bytes(qh);
    std::array::from_fn(|i| {
        let nibble = if i < 16 { qs[i] & 0x0F } else { qs[i - 16] >> 4 };
        nibble | ((((high_bits >> i) & 1) as u8) << 4)
    })
}

fn decode_q5_0(block: &BlockQ5_0, out: &mut [f32]) {
    let d = block.d.to_f32();
    for (y, q) in out.iter_mut().zip(five_bit_quants(block.qh, &block.qs)) {
        *y = d * f32::from(i16::from(q) - 16);
    }
}
impl_block!(BlockQ5_0, DType::Q5_0, decode_q5_0);

/// Dequantizes Q5_0 blocks (`bytes`, any alignment) into `out`.
pub fn dequantize_row_q5_0_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockQ5_0>(bytes, out)
}

/// Q5_1: 32 values, an f16 scale and an f16 minimum, 6 bits per weight.
///
/// ```text
/// byte  0      2      4            8                             24
///       +------+------+------------+-----------------------------+
///       | d    | m    | qh u32 LE  | qs[0] ... qs[15]            |
///       | f16  | f16  | 5th bits   | u8 x 16, split halves       |
///       +------+------+------------+-----------------------------+
/// y[i] = q[i] * d + m,  q[i] = 5-bit quant as in Q5_0 (unsigned, no offset)
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (the value of quant 0).
    pub m: f16,
    /// Fifth bits, a little-endian u32 stored as bytes.
    pub qh: [u8; 4],
    /// Low nibbles, split halves.
    pub qs: [u8; 16],
}

fn decode_q5_1(block: &BlockQ5_1, out: &mut [f32]) {
    let (d, m) = (block.d.to_f32(), block.m.to_f32());
    for (y, q) in out.iter_mut().zip(five_bit_quants(block.qh, &block.qs)) {
        *y = d * f32::from(q) + m;
    }
}
impl_block!(BlockQ5_1, DType::Q5_1, decode_q5_1);

/// Dequantizes Q5_1 blocks (`bytes`, any alignment) into `out`.
pub fn dequantize_row_q5_1_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockQ5_1>(bytes, out)
}

/// The fifth bits of 32 quants (value `j` at bit `j`) and their low nibbles in split-halves order.
fn pack_five_bits(quants: &[u8; 32]) -> ([u8; 4], [u8; 16]) {
    let mut high_bits = 0u32;
    let qs = std::array::from_fn(|j| {
        let (lo, hi) = (quants[j], quants[j + 16]);
        high_bits |= u32::from((lo >> 4) & 1) << j | u32::from((hi >> 4) & 1) << (j + 16);
        (lo & 0x0F) | ((hi & 0x0F) << 4)
    });
    (high_bits.to_le_bytes(), qs)
}

/// Quantizes `values` into Q5_0 blocks as ggml's `quantize_row_q5_0_ref`: `d = max / −16` for the
/// value of largest magnitude, quants `min(31, trunc(x/d + 16.5))`.
pub fn quantize_row_q5_0_ref(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    quantize_blocks(values, out, |x| {
        // ggml starts from +0.0 and keeps the first strictly larger magnitude.
        let first = x[first_abs_max_index(x)];
        let max = if first.abs() > 0.0 { first } else { 0.0 };
        let d = max / -16.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        // `as i8` truncates toward zero like C's cast (the sums lie in [0.5, 32.5]).
        let quants: [u8; 32] = std::array::from_fn(|j| ((x[j] * id + 16.5) as i8).min(31) as u8);
        let (qh, qs) = pack_five_bits(&quants);
        BlockQ5_0 { d: f16::from_f32(d), qh, qs }
    })
}

/// Quantizes `values` into Q5_1 blocks as ggml's `quantize_row_q5_1_ref`: `d = (max − min) / 31`,
/// `m = min`, quants `trunc((x − min)/d + 0.5)`.
pub fn quantize_row_q5_1_ref(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    quantize_blocks(values, out, |x| {
        let (min, max) = x
            .iter()
            .fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (if v < lo { v } else { lo }, if v > hi { v } else { hi }));
        let d = (max - min) / 31.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let quants: [u8; 32] = std::array::from_fn(|j| ((x[j] - min) * id + 0.5) as u8);
        let (qh, qs) = pack_five_bits(&quants);
        BlockQ5_1 { d: f16::from_f32(d), m: f16::from_f32(min), qh, qs }
    })
}
