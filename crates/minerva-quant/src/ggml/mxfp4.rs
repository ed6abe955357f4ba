//! GGML's MXFP4 block (type id 39): one E8M0 exponent byte and 32 FP4 (E2M1) values.
//!
//! Sources: ggml `ggml-common.h` (`block_mxfp4`, `kvalues_mxfp4`), `ggml-impl.h`
//! (`ggml_e8m0_to_fp32_half`), `ggml-quants.c` (`dequantize_row_mxfp4`, `quantize_row_mxfp4_ref`);
//! gguf-py 0.19 `gguf/quants.py` (`MXFP4`).
//!
//! ggml stores the E2M1 values **doubled** (`kvalues`, integers) and halves the scale instead:
//! `kvalues[n] * 2^(e-128) == E2M1[n] * 2^(e-127)`, the OCP value, with the exponent byte
//! unchanged. One visible difference from the OCP/HF reading: nibble 8 (E2M1 −0) is the integer
//! `0`, so ggml decodes it as **+0.0**.

use bytemuck::{Pod, Zeroable};
use minerva_core::DType;

use crate::QuantError;
use crate::blocks::{dequantize_blocks, impl_block, quantize_blocks};

/// ggml's `kvalues_mxfp4`: the E2M1 values times two; bit 3 of the nibble is the sign.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// ggml's `ggml_e8m0_to_fp32_half`: `2^(e-128)` as f32, built from bits so that e = 0 and 1 give
/// the subnormals 2^-128 and 2^-127. e = 255 (NaN in OCP E8M0) is not special: it gives 2^127.
pub const fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { ((e as u32) - 1) << 23 };
    f32::from_bits(bits)
}

/// MXFP4 (GGML layout): 32 values, 4.25 bits per weight.
///
/// ```text
/// byte  0      1                             17
///       +------+-----------------------------+
///       | e    | qs[0] ... qs[15]            |
///       | E8M0 | u8 x 16: lo nibble = y[j],  |
///       |      |          hi nibble = y[j+16]|  (split halves, like Q4_0)
///       +------+-----------------------------+
/// y[j]    = kvalues[qs[j] & 0xF] * 2^(e-128)
/// y[j+16] = kvalues[qs[j] >> 4]  * 2^(e-128)
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockMxfp4 {
    /// Shared exponent, E8M0 (bias 127).
    pub e: u8,
    /// FP4 (E2M1) nibbles, split halves.
    pub qs: [u8; 16],
}

fn decode_mxfp4(block: &BlockMxfp4, out: &mut [f32]) {
    let d = e8m0_to_f32_half(block.e);
    let (low_half, high_half) = out.split_at_mut(16);
    for (j, &byte) in block.qs.iter().enumerate() {
        low_half[j] = d * f32::from(KVALUES_MXFP4[usize::from(byte & 0x0F)]);
        high_half[j] = d * f32::from(KVALUES_MXFP4[usize::from(byte >> 4)]);
    }
}
impl_block!(BlockMxfp4, DType::MXFP4, decode_mxfp4);

/// Dequantizes GGML MXFP4 blocks (`bytes`, any alignment) into `out`.
pub fn dequantize_row_mxfp4_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockMxfp4>(bytes, out)
}

/// The nibble whose value `d * kvalues[n]` is nearest `x`; ties keep the lowest nibble (ggml's
/// strict `<`, numpy's `argmin`), so 0 encodes as nibble 0, never 8.
fn nearest_kvalue(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (d * f32::from(KVALUES_MXFP4[0]) - x).abs();
    for (n, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (d * f32::from(k) - x).abs();
        if err < best_err {
            best_err = err;
            best = n as u8;
        }
    }
    best
}

/// Quantizes `values` into GGML MXFP4, as `quantize_row_mxfp4_ref` and gguf-py:
/// `e = floor(log2(amax)) - 2 + 127` (so amax lands in the top binade of the doubled values, 8..12)
/// or 0 for an all-zero block; each value takes the nearest `kvalues[n] * 2^(e-128)`.
///
/// For `0 < amax < 2^-125` the C code converts a negative float to `u8` (undefined behaviour;
/// numpy wraps). We saturate to `e = 0`, the closest representable exponent.
pub fn quantize_row_mxfp4_ref(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    quantize_blocks(values, out, |x| {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        // `log2` is f32 `log2f`, as in ggml (and numpy's float32 `log2`); `as u8` saturates.
        let e = if amax > 0.0 { (amax.log2().floor() - 2.0 + 127.0) as u8 } else { 0 };
        let d = e8m0_to_f32_half(e);
        let nibbles: [u8; 32] = std::array::from_fn(|j| nearest_kvalue(x[j], d));
        BlockMxfp4 { e, qs: std::array::from_fn(|j| nibbles[j] | (nibbles[j + 16] << 4)) }
    })
}
