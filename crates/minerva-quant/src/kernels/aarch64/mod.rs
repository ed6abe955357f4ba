//! The aarch64 instruction sets and their rows of the kernel table:
//!
//! * [`NEON`] — i16-activation tile kernels for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and MXFP4
//!   (`neon_tile.rs`: what the model's matrix products use for these formats), Q8_K-activation
//!   kernels for Q2_K…Q6_K (`neon_tile_k.rs`, the reference's results bit for bit), panels of
//!   float weights (F32/F16/BF16) × f32 activations (`neon_float.rs`) and the f32 vector kernels
//!   (`neon_vector.rs`: attention's dot products, `exp` and softmax in 4 lanes), and the kernels
//!   of every repacked format (`neon_repacked.rs`, 8-bit activations).
//! * [`NEON_DOTPROD`] — the same repacked kernels with `sdot` for their products.
//!
//! NEON is part of the aarch64 baseline (every aarch64 Linux and macOS machine has it); the
//! kernels are still `#[target_feature(enable = "neon")]` functions (the intrinsics require it of
//! their caller), which the rows call after the ISA's `detected` check, as on x86-64.

// The unsafe things here: calling `#[target_feature]` functions after run-time detection, and
// `vld1q_*`/`vst1q_*` on slices whose length was checked first.
#![allow(unsafe_code)]

mod neon_float;
mod neon_repacked;
mod neon_tile;
mod neon_tile_k;
mod neon_vector;

use minerva_core::DType::{BF16, F16, F32, MXFP4, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0};

use super::{Isa, Kernels, VectorKernels};

/// NEON with the dot-product extension (`sdot`, Armv8.4-A and many v8.2 cores): the repacked
/// kernels' products, four rows by four values per instruction; NEON's rows for the rest.
pub(super) const NEON_DOTPROD: Isa = Isa {
    name: "neon+dotprod",
    detected: || std::arch::is_aarch64_feature_detected!("neon") && std::arch::is_aarch64_feature_detected!("dotprod"),
    rows: &[
        Kernels::new(Q8_0).repacked(repacked!(neon_repacked::dotprod::kernel::<{ neon_repacked::Q8_0 }>)),
        Kernels::new(Q4_0).repacked(repacked!(neon_repacked::dotprod::kernel::<{ neon_repacked::Q4_0 }>)),
        Kernels::new(Q4_1).repacked(repacked!(neon_repacked::dotprod::kernel::<{ neon_repacked::Q4_1 }>)),
        Kernels::new(Q5_0).repacked(repacked!(neon_repacked::dotprod::kernel::<{ neon_repacked::Q5_0 }>)),
        Kernels::new(Q5_1).repacked(repacked!(neon_repacked::dotprod::kernel::<{ neon_repacked::Q5_1 }>)),
        Kernels::new(MXFP4).repacked(repacked!(neon_repacked::dotprod::kernel::<{ neon_repacked::MXFP4 }>)),
        Kernels::new(Q2_K).repacked(repacked!(neon_repacked::dotprod::kernel_k::<{ neon_repacked::Q2_K }>)),
        Kernels::new(Q3_K).repacked(repacked!(neon_repacked::dotprod::kernel_k::<{ neon_repacked::Q3_K }>)),
        Kernels::new(Q4_K).repacked(repacked!(neon_repacked::dotprod::kernel_k::<{ neon_repacked::Q4_K }>)),
        Kernels::new(Q5_K).repacked(repacked!(neon_repacked::dotprod::kernel_k::<{ neon_repacked::Q5_K }>)),
        Kernels::new(Q6_K).repacked(repacked!(neon_repacked::dotprod::kernel_k::<{ neon_repacked::Q6_K }>)),
    ],
};

/// NEON kernels (aarch64 baseline).
pub(super) const NEON: Isa = Isa {
    name: "neon",
    detected: || std::arch::is_aarch64_feature_detected!("neon"),
    rows: &[
        Kernels::new(F32).tile(tile!(neon_float::tiles_f32)),
        Kernels::new(F16).tile(tile!(neon_float::tiles_f16)),
        Kernels::new(BF16).tile(tile!(neon_float::tiles_bf16)),
        Kernels::new(Q8_0)
            .tile_i16(tile!(neon_tile::tiles_i16_q8_0))
            .repacked(repacked!(neon_repacked::neon::kernel::<{ neon_repacked::Q8_0 }>)),
        Kernels::new(Q4_0)
            .tile_i16(tile!(neon_tile::tiles_i16_q4_0))
            .repacked(repacked!(neon_repacked::neon::kernel::<{ neon_repacked::Q4_0 }>)),
        Kernels::new(Q4_1)
            .tile_i16(tile!(neon_tile::tiles_i16_q4_1))
            .repacked(repacked!(neon_repacked::neon::kernel::<{ neon_repacked::Q4_1 }>)),
        Kernels::new(Q5_0)
            .tile_i16(tile!(neon_tile::tiles_i16_q5_0))
            .repacked(repacked!(neon_repacked::neon::kernel::<{ neon_repacked::Q5_0 }>)),
        Kernels::new(Q5_1)
            .tile_i16(tile!(neon_tile::tiles_i16_q5_1))
            .repacked(repacked!(neon_repacked::neon::kernel::<{ neon_repacked::Q5_1 }>)),
        Kernels::new(MXFP4)
            .tile_i16(tile!(neon_tile::tiles_i16_mxfp4))
            .repacked(repacked!(neon_repacked::neon::kernel::<{ neon_repacked::MXFP4 }>)),
        Kernels::new(Q2_K)
            .tile(tile!(neon_tile_k::tiles_q2_k))
            .repacked(repacked!(neon_repacked::neon::kernel_k::<{ neon_repacked::Q2_K }>)),
        Kernels::new(Q3_K)
            .tile(tile!(neon_tile_k::tiles_q3_k))
            .repacked(repacked!(neon_repacked::neon::kernel_k::<{ neon_repacked::Q3_K }>)),
        Kernels::new(Q4_K)
            .tile(tile!(neon_tile_k::tiles_q4_k))
            .repacked(repacked!(neon_repacked::neon::kernel_k::<{ neon_repacked::Q4_K }>)),
        Kernels::new(Q5_K)
            .tile(tile!(neon_tile_k::tiles_q5_k))
            .repacked(repacked!(neon_repacked::neon::kernel_k::<{ neon_repacked::Q5_K }>)),
        Kernels::new(Q6_K)
            .tile(tile!(neon_tile_k::tiles_q6_k))
            .repacked(repacked!(neon_repacked::neon::kernel_k::<{ neon_repacked::Q6_K }>)),
    ],
};

/// The f32 vector kernels of NEON, if this CPU has it.
pub(super) fn neon_vector() -> Option<VectorKernels> {
    std::arch::is_aarch64_feature_detected!("neon").then_some(VectorKernels {
        isa: "neon",
        // SAFETY: returned only after the check above found NEON.
        dot: |a, b| unsafe { neon_vector::dot_f32(a, b) },
        // SAFETY: as above.
        dots: |out, x, rows| unsafe { neon_vector::dots_f32(out, x, rows) },
        // SAFETY: as above.
        axpy: |y, a, x| unsafe { neon_vector::axpy_f32(y, a, x) },
        // SAFETY: as above.
        exp: |xs| unsafe { neon_vector::exp_f32(xs) },
        // Scalar `axpy` row by row, which NEON's `axpy` equals bit for bit.
        weighted_sum_add: super::reference::vector_weighted_sum_add_f32,
        weighted_sums_add: super::reference::vector_weighted_sums_add_f32,
        // The rows widened a block at a time for NEON's `dots`.
        f16_in_registers: false,
        dots_f16: |out, x, rows| {
            // SAFETY: as above.
            super::widened::dots_f16(|out, x, rows| unsafe { neon_vector::dots_f32(out, x, rows) }, out, x, rows)
        },
        dots_many_f16: None,
        weighted_sums_add_f16: |outs, weights, rows| {
            super::widened::weighted_sums_add_f16(super::reference::vector_weighted_sums_add_f32, outs, weights, rows)
        },
        widen_f16: super::widened::widen_f16,
        dots_transposed: None,
        // SAFETY: as above.
        softmax: |xs, scale, sink| unsafe { neon_vector::softmax_f32(xs, scale, sink) },
        quantize_i16: super::reference::quantize_i16_blocks,
        quantize_q8_1: crate::activation::quantize_act_blocks,
        quantize_q8_k: crate::activation::quantize_q8_k_blocks,
        transpose: super::reference::vector_transpose_f32,
        mlx_affine_bf16: |p, weight, scales, biases, out| p.groups_to_bytes_ref(weight, scales, biases, out),
    })
}
