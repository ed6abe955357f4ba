//! 8-bit GGML blocks: Q8_0 (weights) and Q8_K (the activation format K-quant dot products use).
//!
//! Sources: ggml `ggml-common.h` (layouts) and `ggml-quants.c` (`dequantize_row_q8_0`,
//! `quantize_row_q8_0_ref`, `quantize_row_q8_K_ref`, `dequantize_row_q8_K`); gguf-py 0.19
//! `gguf/quants.py` (`Q8_0`), whose results the golden tests match bit for bit.

use bytemuck::{Pod, Zeroable};
use half::f16;
use minerva_core::DType;

use crate::QuantError;
use crate::blocks::{dequantize_blocks, first_abs_max_index, impl_block, quantize_blocks};

/// Q8_0: 32 values, one f16 scale, 8.5 bits per weight.
///
/// ```text
/// byte  0      2                                   34
///       +------+-----------------------------------+
///       | d    | qs[0] qs[1] ...           qs[31]  |
///       | f16  | i8 x 32                           |
///       +------+-----------------------------------+
/// y[j] = d * qs[j]
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Signed quants, one per value.
    pub qs: [i8; 32],
}

fn decode_q8_0(block: &BlockQ8_0, out: &mut [f32]) {
    let d = block.d.to_f32();
    for (y, &q) in out.iter_mut().zip(&block.qs) {
        // gguf-py computes `x * d` in f32; multiplication commutes, so the order is free.
        *y = f32::from(q) * d;
    }
}
impl_block!(BlockQ8_0, DType::Q8_0, decode_q8_0);

/// Dequantizes Q8_0 blocks (`bytes`, any alignment) into `out`.
pub fn dequantize_row_q8_0_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockQ8_0>(bytes, out)
}

/// Quantizes `values` into Q8_0 blocks, exactly as ggml's `quantize_row_q8_0_ref` and gguf-py do:
/// `d = amax / 127`, `q = round_half_away(x / d)` computed as `x * (1/d)`.
pub fn quantize_row_q8_0_ref(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    quantize_blocks(values, out, |x| {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let mut qs = [0i8; 32];
        for (q, v) in qs.iter_mut().zip(x) {
            // `f32::round` rounds half away from zero, like C's `roundf` and gguf-py's `np_roundf`.
            *q = (v * id).round() as i8;
        }
        BlockQ8_0 { d: f16::from_f32(d), qs }
    })
}

/// Q8_K: 256 values, one f32 scale, and per-16 sums of the quants (used by dot products only).
///
/// ```text
/// byte  0      4                        260                     292
///       +------+------------------------+-----------------------+
///       | d    | qs[0..256]             | bsums[0..16]          |
///       | f32  | i8 x 256               | i16 x 16              |
///       +------+------------------------+-----------------------+
/// y[j] = d * qs[j]        bsums[i] = sum(qs[16i .. 16i+16])
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_K {
    /// Scale (f32, unlike the weight formats).
    pub d: f32,
    /// Signed quants, one per value.
    pub qs: [i8; 256],
    /// Sum of each run of 16 quants.
    pub bsums: [i16; 16],
}

fn decode_q8_k(block: &BlockQ8_K, out: &mut [f32]) {
    for (y, &q) in out.iter_mut().zip(&block.qs) {
        *y = block.d * f32::from(q);
    }
}
impl_block!(BlockQ8_K, DType::Q8_K, decode_q8_k);

/// Dequantizes Q8_K blocks into `out` (as ggml's `dequantize_row_q8_K`).
pub fn dequantize_row_q8_k_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockQ8_K>(bytes, out)
}

/// ggml's `nearest_int`: adding 1.5·2²³ leaves the integer in the low mantissa bits, rounded by
/// the FPU's round-half-to-even. Exact for |x| < 2²², which quantization guarantees.
fn nearest_int(x: f32) -> i32 {
    let shifted = x + 12_582_912.0;
    (shifted.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Quantizes activations into Q8_K blocks, as ggml's `quantize_row_q8_K_ref`:
/// `iscale = -127 / max` (max = the value of largest magnitude, sign kept), `q = min(127,
/// nearest_int(iscale * x))`, `d = 1 / iscale`. An all-zero block gets `d = 0` and zero quants;
/// ggml leaves that block's `bsums` unwritten, we write zeros.
pub fn quantize_row_q8_k_ref(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    quantize_blocks(values, out, |x| {
        let mut block = BlockQ8_K::zeroed();
        let max = x[first_abs_max_index(x)];
        if max == 0.0 {
            return block;
        }
        let iscale = -127.0 / max;
        for (q, &v) in block.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (sum, run) in block.bsums.iter_mut().zip(block.qs.chunks_exact(16)) {
            *sum = run.iter().map(|&q| i16::from(q)).sum();
        }
        block.d = 1.0 / iscale;
        block
    })
}
