//! The repacked formats as the SIMD kernels' const parameter (a `DType` cannot be one on stable
//! Rust), and what their kernels read of each (`crate::repack`'s layouts): one table for every
//! ISA's repacked kernels (`x86::repacked`, `x86::repacked_k`, `aarch64::neon_repacked`), and
//! for `crate::repack`'s packing, which is compiled per format on every target.

// Targets without SIMD kernels use only what the packing needs.
#![cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]

use minerva_core::DType;

use crate::activation::Activation;
use crate::repack::k_quants::{self, Layout};
use crate::repack::{ActBlock, SLOT_BYTES};

/// The 32-value formats (`crate::repack`, Q8_0 activations).
pub(crate) const Q8_0: u8 = 0;
pub(crate) const Q4_0: u8 = 1;
pub(crate) const Q4_1: u8 = 2;
pub(crate) const Q5_0: u8 = 3;
pub(crate) const Q5_1: u8 = 4;
/// The K-quants (`crate::repack::k_quants`, Q8_K activations).
pub(crate) const Q4_K: u8 = 5;
pub(crate) const Q5_K: u8 = 6;
pub(crate) const Q6_K: u8 = 7;
pub(crate) const Q3_K: u8 = 8;
pub(crate) const Q2_K: u8 = 9;
/// MXFP4 (Q8_0 activations, as the 32-value formats): its nibbles in Q4_0's slots, its E8M0
/// exponents one byte per row.
pub(crate) const MXFP4: u8 = 10;

/// The dtype of a 32-value format.
pub(crate) const fn dtype(format: u8) -> DType {
    match format {
        Q8_0 => DType::Q8_0,
        Q4_0 => DType::Q4_0,
        Q4_1 => DType::Q4_1,
        Q5_0 => DType::Q5_0,
        MXFP4 => DType::MXFP4,
        _ => DType::Q5_1,
    }
}

/// The format of a 32-value dtype ([`dtype`]'s inverse).
///
/// # Panics
///
/// For a dtype without a 32-value repacked layout (callers hand the K-quants to
/// `crate::repack::k_quants` first).
pub(crate) const fn of(dtype: DType) -> u8 {
    match dtype {
        DType::Q8_0 => Q8_0,
        DType::Q4_0 => Q4_0,
        DType::Q4_1 => Q4_1,
        DType::Q5_0 => Q5_0,
        DType::Q5_1 => Q5_1,
        DType::MXFP4 => MXFP4,
        _ => panic!("not a 32-value repacked format"),
    }
}

/// Bytes of quants per block of a group (with Q5's fifth bits): where the scales begin.
pub(crate) const fn quant_bytes(format: u8) -> usize {
    match format {
        Q8_0 => 8 * SLOT_BYTES,
        Q5_0 | Q5_1 => 5 * SLOT_BYTES,
        _ => 4 * SLOT_BYTES,
    }
}

/// Whether the format has a minimum per block (Q4_1, Q5_1).
pub(crate) const fn has_minimum(format: u8) -> bool {
    matches!(format, Q4_1 | Q5_1)
}

/// Whether the format keeps a fifth bit per value (Q5_0, Q5_1).
pub(crate) const fn has_fifth_bit(format: u8) -> bool {
    matches!(format, Q5_0 | Q5_1)
}

/// Whether the format's scales are E8M0 exponents, one byte per row (MXFP4), not f16 values.
pub(crate) const fn has_e8m0_scales(format: u8) -> bool {
    format == MXFP4
}

/// Bytes per block of a group: the quants, 16 f16 scales (MXFP4: 16 E8M0 bytes), and 16 f16
/// minimums for Q4_1, Q5_1.
pub(crate) const fn block_bytes(format: u8) -> usize {
    quant_bytes(format)
        + if has_minimum(format) {
            64
        } else if has_e8m0_scales(format) {
            16
        } else {
            32
        }
}

/// The layout of a repacked K-quant format.
pub(crate) const fn k_layout(format: u8) -> Layout {
    match format {
        Q4_K => k_quants::Q4_K,
        Q5_K => k_quants::Q5_K,
        Q3_K => k_quants::Q3_K,
        Q2_K => k_quants::Q2_K,
        _ => k_quants::Q6_K,
    }
}

/// Whether a K-quant format has sub-blocks of 16 values (Q2_K, Q3_K, Q6_K), not 32 (Q4_K, Q5_K).
pub(crate) const fn k_sixteen(format: u8) -> bool {
    matches!(format, Q2_K | Q3_K | Q6_K)
}

/// Whether a K-quant format has signed scales and no minimums (Q3_K, Q6_K), not unsigned scales
/// and minimums (Q2_K, Q4_K, Q5_K).
pub(crate) const fn k_signed(format: u8) -> bool {
    matches!(format, Q3_K | Q6_K)
}

/// What a signed K-quant's stored quants carry on top of their value (Q6_K 32, Q3_K 4: both
/// stored unsigned), as a shift: the kernels take `offset · Σ sc_j·Σa_j` off the exact sum.
pub(crate) const fn k_offset_shift(format: u8) -> u32 {
    k_layout(format).offset_shift
}

/// The first `blocks` blocks of each of `acts`' first `N` activations.
#[inline(always)]
pub(crate) fn blocks_of<'a, const N: usize>(acts: &'a [Activation<'_>], blocks: usize) -> [&'a [ActBlock]; N] {
    // A loop, not `array::from_fn`, whose closure a decode batch's profile showed as a call of
    // its own (`core::array::try_from_fn`, 1–2 % of the samples); 64 activations 2 % faster.
    let mut of: [&[ActBlock]; N] = [&[]; N];
    for (of, act) in of.iter_mut().zip(&acts[..N]) {
        *of = &act.blocks[..blocks];
    }
    of
}
