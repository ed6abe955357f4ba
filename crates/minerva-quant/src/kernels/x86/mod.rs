//! The x86-64 instruction sets and their rows of the kernel table:
//!
//! * [`AVX2`] — the dequantizers (`avx2_dequant.rs`), which need AVX2 alone;
//! * [`AVX2_FMA_F16C`] — the matmul kernels: tiles of rows × activations for the 32-value block
//!   formats (`avx2_tile.rs`; against i16 activations `avx2_tile_i16.rs`; from 8
//!   activations on, panels of 8 rows unpacked once per call, `avx2_panel.rs`), one row ×
//!   `K_QUANT_ACTS` activations for Q2_K…Q6_K (`avx2_tile_k.rs`), for the float formats one
//!   row · one activation at a time and panels of rows × activations with the same arithmetic
//!   per pair (`float_panel.rs`);
//! * [`AVX2_VNNI`] — AVX-VNNI without AVX-512 (Intel client CPUs since Alder Lake): the i16
//!   tiles and panels of `avx2_tile_i16` / `avx2_panel` with each `vpmaddwd` + `vpaddd` into an
//!   accumulator done by one VEX `vpdpwssd` (`avx_vnni.rs`); the repacked formats' kernels with
//!   one VEX `vpdpbusd` per slot and activation (`repacked::avx_vnni`, `repacked_k::avx_vnni`:
//!   AVX-512's arithmetic on 256 bits); bit for bit the AVX2 results;
//! * [`AVX512_VNNI`] — from [`avx512_panel::MIN_ACTS`] activations on, the i16 panels 16 rows wide
//!   with `vpdpwssd` (`avx512_panel.rs`), and for Q2_K…Q6_K panels of scaled i16 quants
//!   (`avx512_panel_k.rs`); below, the i16 tiles with a `vpdpwssd` block dot, MXFP4 decoded by
//!   `vpermw` and Q5's fifth bits by a masked add (`avx512_tile.rs`; MXFP4 at one activation as
//!   bytes by `vpdpbusd`, four rows per 512-bit step, `avx512_mxfp4.rs`; from 8 activations the AVX2 panels with EVEX
//!   `vpdpwssd`); bit for bit the AVX2 results; the float panels 2 rows × 2 activations wide
//!   (`float_panel.rs`), the same bits as AVX2's;
//! * [`AMX_INT8`] — AMX tiles on top of AVX-512 VNNI (Intel Xeon since Sapphire Rapids): the
//!   repacked 32-value formats (`amx.rs`) and K-quants (`amx_k.rs`) sixteen activations at a time
//!   by `tdpbssd`, bit for bit the AVX-512 kernels' results, which it runs for the rest.
//!
//! The kernels are `#[target_feature]` functions; the rows hold plain `fn` wrappers that call
//! them, which the kernel table uses only after the ISA's `detected` check has passed.

// The one unsafe thing here: calling `#[target_feature]` functions, after run-time detection
// (or, for `prefetch_l2`, of the x86-64 baseline).
#![allow(unsafe_code)]

mod amx;
mod amx_k;
mod avx2_dequant;
mod avx2_dot;
mod avx2_mlx;
mod avx2_panel;
mod avx2_split_mxfp4;
mod avx2_tile;
mod avx2_tile_i16;
mod avx2_tile_k;
mod avx2_vector;
mod avx512_mxfp4;
mod avx512_panel;
mod avx512_panel_k;
mod avx512_tile;
mod avx512_vector;
mod avx_vnni;
mod float_panel;
mod repacked;
mod repacked_k;

use std::arch::is_x86_feature_detected as has;

use minerva_core::DType::{BF16, F16, F32, MXFP4, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0};

use super::{DotsTransposed, Isa, Kernels, VectorKernels};
use crate::kernels::widened;

/// Asks for the cache lines of `bytes` to be loaded into L2 (`prefetcht1`): a hint that changes
/// no result (`crate::vector::prefetch`).
pub(crate) fn prefetch_l2(bytes: &[u8]) {
    use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
    let Some(last) = bytes.last() else { return };
    // From the line holding the first byte to the one holding the last.
    let lines = bytes.as_ptr().addr() % 64 + bytes.len();
    for line in 0..lines.div_ceil(64) {
        let at = bytes.get(64 * line).unwrap_or(last);
        // SAFETY: SSE (`prefetcht1`) is part of the x86-64 baseline, and a prefetch of an address
        // inside a live slice neither faults nor changes anything the program can read.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(std::ptr::from_ref(at).cast::<i8>()) }
    }
}

/// A [`super::DequantizeFn`] that checks the lengths for `$dtype`, then runs the unchecked
/// `#[target_feature]` dequantizer `$kernel`.
macro_rules! dequantize {
    ($dtype:expr, $kernel:path) => {
        |bytes: &[u8], out: &mut [f32]| {
            crate::blocks::check_dequantize_lengths($dtype, bytes.len(), out.len())?;
            // SAFETY: an ISA's rows run only after its `detected` check confirmed every feature
            // the kernel enables (see `super::Isa::detected`).
            unsafe { $kernel(bytes, out) };
            Ok(())
        }
    };
}

/// A [`super::TileKernel`] of `avx2_tile`, in tiles of 4 rows × `$acts` activations (2 unless
/// given).
macro_rules! avx2_tile {
    ($kernel:ident) => {
        avx2_tile!($kernel, 2)
    };
    ($kernel:ident, $acts:expr) => {
        tile!(avx2_tile::$kernel::<4, $acts>)
    };
}

/// Groups of four activations per tile of `avx2_tile_i16` (each weight block decoded once for 8
/// activations: 1536×576, 16 activations, 1 thread, against 4: Q4_0 about 1.25×, Q5_0 1.2×, Q4_1 1.05×).
const I16_ACT_GROUPS: usize = 2;

/// Activations per pass over a K-quant row in `avx2_tile_k`.
const K_QUANT_ACTS: usize = 4;

/// AVX2 dequantizers, bit-identical to the reference.
pub(super) const AVX2: Isa = Isa {
    name: "avx2",
    detected: || has!("avx2"),
    rows: &[
        Kernels::new(Q8_0).dequantize(dequantize!(Q8_0, avx2_dequant::dequantize_row_q8_0)),
        Kernels::new(Q4_0).dequantize(dequantize!(Q4_0, avx2_dequant::dequantize_row_q4_0)),
        Kernels::new(Q4_1).dequantize(dequantize!(Q4_1, avx2_dequant::dequantize_row_q4_1)),
        Kernels::new(MXFP4).dequantize(dequantize!(MXFP4, avx2_dequant::dequantize_row_mxfp4)),
        Kernels::new(Q4_K).dequantize(dequantize!(Q4_K, avx2_dequant::dequantize_row_q4_k)),
        Kernels::new(Q6_K).dequantize(dequantize!(Q6_K, avx2_dequant::dequantize_row_q6_k)),
    ],
};

/// AVX2 integer matmul kernels with FMA accumulation and F16C scale conversion.
pub(super) const AVX2_FMA_F16C: Isa = Isa {
    name: "avx2+fma+f16c",
    detected: || has!("avx2") && has!("fma") && has!("f16c"),
    rows: &[
        Kernels::new(F32).tile(tile!(float_panel::avx2::tiles_f32)),
        Kernels::new(F16).tile(tile!(float_panel::avx2::tiles_f16)),
        Kernels::new(BF16).tile(tile!(float_panel::avx2::tiles_bf16)),
        Kernels::new(Q8_0)
            .tile(avx2_tile!(tiles_q8_0))
            .tile_i16(tile!(avx2_tile_i16::tiles_q8_0::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx2::<{ repacked::Q8_0 }>)),
        Kernels::new(Q4_0)
            .tile(avx2_tile!(tiles_q4_0))
            .tile_i16(tile!(avx2_tile_i16::tiles_q4_0::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx2::<{ repacked::Q4_0 }>)),
        Kernels::new(Q4_1)
            .tile(avx2_tile!(tiles_q4_1))
            .tile_i16(tile!(avx2_tile_i16::tiles_q4_1::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx2::<{ repacked::Q4_1 }>)),
        Kernels::new(Q5_0)
            .tile(avx2_tile!(tiles_q5_0))
            .tile_i16(tile!(avx2_tile_i16::tiles_q5_0::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx2::<{ repacked::Q5_0 }>)),
        Kernels::new(Q5_1)
            .tile(avx2_tile!(tiles_q5_1))
            .tile_i16(tile!(avx2_tile_i16::tiles_q5_1::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx2::<{ repacked::Q5_1 }>)),
        Kernels::new(MXFP4)
            .tile(avx2_tile!(tiles_mxfp4))
            .tile_i16(tile!(avx2_tile_i16::tiles_mxfp4::<I16_ACT_GROUPS>))
            .split_i16(|rows, first, acts, out| {
                // SAFETY: an ISA's rows run only after its `detected` check confirmed every
                // feature the kernel enables (see `super::Isa::detected`).
                unsafe { avx2_split_mxfp4::split_mxfp4_i16(rows, first, acts, out) }
            })
            .repacked(repacked!(repacked::avx2::<{ repacked::MXFP4 }>)),
        // Q2_K's and Q3_K's repacked kernels ran `repacked/llama8b_14336x4096` 2.2× and 1.13–1.35×
        // (one activation), 1.54× and 1.28× (64) as fast as the zero-copy kernels at one thread
        // (Xeon family 6 model 207 limited to this row; docs/benchmarks.md).
        Kernels::new(Q2_K)
            .tile(tile!(avx2_tile_k::tiles_q2_k::<K_QUANT_ACTS>))
            .repacked_paying(repacked!(repacked_k::avx2::<{ repacked_k::Q2_K }>)),
        Kernels::new(Q3_K)
            .tile(tile!(avx2_tile_k::tiles_q3_k::<K_QUANT_ACTS>))
            .repacked_paying(repacked!(repacked_k::avx2::<{ repacked_k::Q3_K }>)),
        // The repacked Q4_K and Q5_K kernels read a large matrix for one activation at 0.85–1.02×
        // and 0.75–0.78× the zero-copy kernels' rate, and Q5_K's runs 64 activations at
        // 0.62–0.74× (`repacked/llama8b_*`, `llama1b_*`, one thread, AMD Zen 3), so decode would
        // lose what prefill gains; Q6_K's measured 0.98–1.37× with one activation and 1.14–1.36×
        // with 64 (docs/benchmarks.md).
        Kernels::new(Q4_K)
            .tile(tile!(avx2_tile_k::tiles_q4_k::<K_QUANT_ACTS>))
            .repacked(repacked!(repacked_k::avx2::<{ repacked_k::Q4_K }>)),
        Kernels::new(Q5_K)
            .tile(tile!(avx2_tile_k::tiles_q5_k::<K_QUANT_ACTS>))
            .repacked(repacked!(repacked_k::avx2::<{ repacked_k::Q5_K }>)),
        Kernels::new(Q6_K)
            .tile(tile!(avx2_tile_k::tiles_q6_k::<K_QUANT_ACTS>))
            .repacked_paying(repacked!(repacked_k::avx2::<{ repacked_k::Q6_K }>)),
    ],
};

/// AVX-VNNI (VEX `vpdpwssd` and `vpdpbusd`, without AVX-512) on top of AVX2 + FMA + F16C: the
/// i16 matmul of the 32-value block formats and the repacked formats' products, bit for bit the
/// AVX2 kernels' results (the other entries are AVX2's).
pub(super) const AVX2_VNNI: Isa = Isa {
    name: "avx2+avxvnni",
    detected: || has!("avx2") && has!("fma") && has!("f16c") && has!("avxvnni"),
    rows: &[
        Kernels::new(Q8_0)
            .tile_i16(tile!(avx_vnni::kernel_q8_0::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx_vnni::<{ repacked::Q8_0 }>)),
        Kernels::new(Q4_0)
            .tile_i16(tile!(avx_vnni::kernel_q4_0::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx_vnni::<{ repacked::Q4_0 }>)),
        Kernels::new(Q4_1)
            .tile_i16(tile!(avx_vnni::kernel_q4_1::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx_vnni::<{ repacked::Q4_1 }>)),
        Kernels::new(Q5_0)
            .tile_i16(tile!(avx_vnni::kernel_q5_0::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx_vnni::<{ repacked::Q5_0 }>)),
        Kernels::new(Q5_1)
            .tile_i16(tile!(avx_vnni::kernel_q5_1::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx_vnni::<{ repacked::Q5_1 }>)),
        Kernels::new(MXFP4)
            .tile_i16(tile!(avx_vnni::kernel_mxfp4::<I16_ACT_GROUPS>))
            .repacked(repacked!(repacked::avx_vnni::<{ repacked::MXFP4 }>)),
        // Not marked paying, as in the AVX2 row: Q5_K's kernel reads a large matrix for one
        // activation at 0.92–0.96× the zero-copy kernels' rate (with 64 activations 1.26×;
        // `repacked/llama8b_*`, one thread, Xeon family 6 model 207 limited to this row). Q4_K's
        // runs 1.2× and 1.5× as fast, but with Gemma 3's Q4_K matrices repacked too (and AVX2's
        // f32 vectors) its perplexity on `licenses.txt` is 0.174 % from llama.cpp's, past
        // `gemma3_llama_cpp.rs`'s 0.15 % (0.025 % without them; 0.002 % with AVX-512's vectors):
        // `--repack on` uses it, `auto` not. Q6_K keeps the AVX2 row's kernel (see
        // `repacked_k::avx_vnni`).
        Kernels::new(Q4_K).repacked(repacked!(repacked_k::avx_vnni::<{ repacked_k::Q4_K }>)),
        Kernels::new(Q5_K).repacked(repacked!(repacked_k::avx_vnni::<{ repacked_k::Q5_K }>)),
    ],
};

/// AMX-TILE and AMX-INT8 on top of AVX-512 VNNI, where the OS lets the process use tile data: the
/// repacked formats' products with many activations (the other entries are AVX-512's). The
/// K-quants' kernels run a large matrix 1.6–2.3× (Q4_K) and 1.1–1.5× (Q6_K) as fast as the AVX-512 VNNI
/// kernel with 64 and 512 activations (`repacked/llama8b_14336x4096/Q4_K`,
/// `repacked/llama1b_2048x8192/Q6_K`, one thread, Xeon family 6 model 207).
pub(super) const AMX_INT8: Isa = Isa {
    name: "amx+avx512",
    detected: || (AVX512_VNNI.detected)() && amx::usable(),
    rows: &[
        Kernels::new(Q8_0).repacked_paying(repacked!(amx::repacked::<{ repacked::Q8_0 }>)),
        Kernels::new(Q4_0).repacked_paying(repacked!(amx::repacked::<{ repacked::Q4_0 }>)),
        Kernels::new(Q4_1).repacked_paying(repacked!(amx::repacked::<{ repacked::Q4_1 }>)),
        Kernels::new(Q5_0).repacked_paying(repacked!(amx::repacked::<{ repacked::Q5_0 }>)),
        Kernels::new(Q5_1).repacked_paying(repacked!(amx::repacked::<{ repacked::Q5_1 }>)),
        Kernels::new(MXFP4).repacked(repacked!(amx::repacked::<{ repacked::MXFP4 }>)),
        Kernels::new(Q2_K).repacked_paying(repacked!(amx_k::repacked::<{ repacked_k::Q2_K }>)),
        Kernels::new(Q3_K).repacked_paying(repacked!(amx_k::repacked::<{ repacked_k::Q3_K }>)),
        Kernels::new(Q4_K).repacked_paying(repacked!(amx_k::repacked::<{ repacked_k::Q4_K }>)),
        Kernels::new(Q5_K).repacked_paying(repacked!(amx_k::repacked::<{ repacked_k::Q5_K }>)),
        Kernels::new(Q6_K).repacked_paying(repacked!(amx_k::repacked::<{ repacked_k::Q6_K }>)),
    ],
};

/// AVX-512 (F, BW, VL) with VNNI on top of AVX2 + FMA + F16C: the i16 matmul of the 32-value block
/// formats and the Q2_K…Q6_K matmul (the float formats keep the AVX2 row's kernels).
pub(super) const AVX512_VNNI: Isa = Isa {
    name: "avx512+vnni",
    detected: || {
        has!("avx2")
            && has!("fma")
            && has!("f16c")
            && has!("avx512f")
            && has!("avx512bw")
            && has!("avx512vl")
            && has!("avx512vnni")
    },
    rows: &[
        Kernels::new(F32).tile(tile!(float_panel::avx512::tiles_f32)),
        Kernels::new(F16).tile(tile!(float_panel::avx512::tiles_f16)),
        Kernels::new(BF16).tile(tile!(float_panel::avx512::tiles_bf16)),
        Kernels::new(Q8_0)
            .tile_i16(tile!(avx512_panel::kernel_q8_0::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx512::<{ repacked::Q8_0 }>)),
        Kernels::new(Q4_0)
            .tile_i16(tile!(avx512_panel::kernel_q4_0::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx512::<{ repacked::Q4_0 }>)),
        Kernels::new(Q4_1)
            .tile_i16(tile!(avx512_panel::kernel_q4_1::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx512::<{ repacked::Q4_1 }>)),
        Kernels::new(Q5_0)
            .tile_i16(tile!(avx512_panel::kernel_q5_0::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx512::<{ repacked::Q5_0 }>)),
        Kernels::new(Q5_1)
            .tile_i16(tile!(avx512_panel::kernel_q5_1::<I16_ACT_GROUPS>))
            .repacked_paying(repacked!(repacked::avx512::<{ repacked::Q5_1 }>)),
        Kernels::new(MXFP4)
            .tile_i16(tile!(avx512_panel::kernel_mxfp4::<I16_ACT_GROUPS>))
            .repacked(repacked!(repacked::avx512::<{ repacked::MXFP4 }>)),
        Kernels::new(Q2_K)
            .tile(tile!(avx512_panel_k::kernel_q2_k::<K_QUANT_ACTS>))
            .repacked_paying(repacked!(repacked_k::avx512::<{ repacked_k::Q2_K }>)),
        Kernels::new(Q3_K)
            .tile(tile!(avx512_panel_k::kernel_q3_k::<K_QUANT_ACTS>))
            .repacked_paying(repacked!(repacked_k::avx512::<{ repacked_k::Q3_K }>)),
        Kernels::new(Q4_K)
            .tile(tile!(avx512_panel_k::kernel_q4_k::<K_QUANT_ACTS>))
            .repacked_paying(repacked!(repacked_k::avx512::<{ repacked_k::Q4_K }>)),
        Kernels::new(Q5_K)
            .tile(tile!(avx512_panel_k::kernel_q5_k::<K_QUANT_ACTS>))
            .repacked_paying(repacked!(repacked_k::avx512::<{ repacked_k::Q5_K }>)),
        Kernels::new(Q6_K)
            .tile(tile!(avx512_panel_k::kernel_q6_k::<K_QUANT_ACTS>))
            .repacked_paying(repacked!(repacked_k::avx512::<{ repacked_k::Q6_K }>)),
    ],
};

/// The f32 vector kernels of AVX2 + FMA, if this CPU has both.
pub(super) fn avx2_fma_vector() -> Option<VectorKernels> {
    let set = (has!("avx2") && has!("fma")).then_some(VectorKernels {
        isa: "avx2+fma",
        // SAFETY: returned only after the check above found AVX2 and FMA.
        dot: |a, b| unsafe { avx2_vector::dot_f32(a, b) },
        // SAFETY: as above.
        dots: |out, x, rows| unsafe { avx2_vector::dots_f32(out, x, rows) },
        // SAFETY: as above.
        axpy: |y, a, x| unsafe { avx2_vector::axpy_f32(y, a, x) },
        // SAFETY: as above.
        exp: |xs| unsafe { avx2_vector::exp_f32(xs) },
        // SAFETY: as above.
        weighted_sum_add: |out, weights, rows| unsafe { avx2_vector::weighted_sum_add_f32(out, weights, rows) },
        weighted_sums_add: |outs, weights, rows| {
            for (out, weights) in outs.iter_mut().zip(weights) {
                // SAFETY: as above.
                unsafe { avx2_vector::weighted_sum_add_f32(out, weights, rows) }
            }
        },
        // The rows widened a block at a time for the AVX2 `dots` (F16C's own loads below).
        f16_in_registers: false,
        dots_f16: |out, x, rows| {
            // SAFETY: as above.
            widened::dots_f16(|out, x, rows| unsafe { avx2_vector::dots_f32(out, x, rows) }, out, x, rows)
        },
        dots_many_f16: None,
        weighted_sums_add_f16: |outs, weights, rows| {
            let sums = |outs: &mut [&mut [f32]], weights: &[&[f32]], rows: &[f32]| {
                for (out, weights) in outs.iter_mut().zip(weights) {
                    // SAFETY: as above.
                    unsafe { avx2_vector::weighted_sum_add_f32(out, weights, rows) }
                }
            };
            widened::weighted_sums_add_f16(sums, outs, weights, rows)
        },
        widen_f16: widened::widen_f16,
        dots_transposed: None,
        // SAFETY: as above.
        softmax: |xs, scale, sink| unsafe { avx2_vector::softmax_f32(xs, scale, sink) },
        // SAFETY: as above.
        quantize_i16: |x, q, d, sums| unsafe { avx2_vector::quantize_i16_blocks(x, q, d, sums) },
        // SAFETY: as above.
        quantize_q8_1: |x, blocks| unsafe { repacked::quantize_q8_1(x, blocks) },
        // SAFETY: as above.
        quantize_q8_k: |x, qs, d, bsums| unsafe { avx2_vector::quantize_q8_k_blocks(x, qs, d, bsums) },
        // SAFETY: as above.
        transpose: |src, rows, cols, first_col, dst| unsafe {
            avx2_vector::transpose_f32(src, rows, cols, first_col, dst)
        },
        mlx_affine_bf16: |p, weight, scales, biases, out| match p.bits {
            // SAFETY: as above.
            4 | 8 => unsafe { avx2_mlx::affine_bf16_to_bytes(p.bits, p.group_size, weight, scales, biases, out) },
            _ => p.groups_to_bytes_ref(weight, scales, biases, out),
        },
    })?;
    Some(if has!("f16c") {
        VectorKernels {
            f16_in_registers: true,
            // SAFETY: used only after the checks above found AVX2, FMA and F16C.
            dots_f16: |out, x, rows| unsafe { avx2_vector::dots_f16(out, x, rows) },
            weighted_sums_add_f16: |outs, weights, rows| {
                for (out, weights) in outs.iter_mut().zip(weights) {
                    // SAFETY: as above.
                    unsafe { avx2_vector::weighted_sum_add_f16(out, weights, rows) }
                }
            },
            // SAFETY: as above.
            widen_f16: |values, out| unsafe { avx2_vector::widen_f16(values, out) },
            ..set
        }
    } else {
        set
    })
}

/// The AVX2 + FMA vector kernels with AVX-512F's attention kernels in place of theirs (the dot
/// products of a query with many keys, the weighted sums of several queries at once, softmax
/// and `e^x`: the last two the AVX2 kernels' results, bit for bit), if this CPU has all three.
pub(super) fn avx512_vector() -> Option<VectorKernels> {
    let avx2 = avx2_fma_vector()?;
    // f16 rows widened in registers where F16C is there too (every AVX-512 CPU so far).
    let with_f16 = if has!("f16c") {
        VectorKernels {
            f16_in_registers: true,
            // SAFETY: used only after the checks here and below found AVX2, FMA, F16C and AVX-512F.
            dots_f16: |out, x, rows| unsafe { avx512_vector::dots_f16(out, x, rows) },
            // SAFETY: as above.
            dots_many_f16: Some(|outs, xs, rows| unsafe { avx512_vector::dots_many_f16(outs, xs, rows) }),
            // SAFETY: as above.
            weighted_sums_add_f16: |outs, weights, rows| unsafe {
                avx512_vector::weighted_sums_add_f16(outs, weights, rows)
            },
            // SAFETY: as above.
            quantize_q8_1: |x, blocks| unsafe { avx512_vector::quantize_q8_1(x, blocks) },
            ..avx2
        }
    } else {
        avx2
    };
    has!("avx512f").then_some(VectorKernels {
        isa: "avx512f+avx2+fma",
        // SAFETY: returned only after the checks above found AVX2, FMA and AVX-512F.
        dots: |out, x, rows| unsafe { avx512_vector::dots_f32(out, x, rows) },
        // SAFETY: as above.
        weighted_sums_add: |outs, weights, rows| unsafe { avx512_vector::weighted_sums_add_f32(outs, weights, rows) },
        // SAFETY: as above.
        softmax: |xs, scale, sink| unsafe { avx512_vector::softmax_f32(xs, scale, sink) },
        // SAFETY: as above.
        exp: |xs| unsafe { avx512_vector::exp_f32(xs) },
        dots_transposed: Some(DotsTransposed {
            // SAFETY: as above.
            dots: |outs, xs, firsts, keys| unsafe { avx512_vector::dots_transposed(outs, xs, firsts, keys) },
            chunks: &avx512_vector::TRANSPOSED_CHUNKS,
        }),
        ..with_f16
    })
}

#[cfg(test)]
mod tests {
    use super::{avx2_fma_vector, avx512_vector};
    use crate::kernels::{SCALAR_VECTOR, VectorKernels};

    /// Every x86 vector set this CPU runs (the selected one is also tested through `crate::vector`).
    fn sets() -> Vec<VectorKernels> {
        [avx2_fma_vector(), avx512_vector()].into_iter().flatten().collect()
    }

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len).map(|i| ((i * 37 + seed * 101) % 211) as f32 / 53.0 - 2.0).collect()
    }

    /// Each set's `dots` gives a row the value it gets alone, within `len·ε·Σ|x·r|` of the exact
    /// sum, at the head sizes attention meets (the AVX-512 kernel's 4, 8 and 16 chunks, any other
    /// multiple of 16, and lengths it leaves to AVX2), with groups of sixteen rows and a last
    /// short one.
    #[test]
    fn every_sets_dots_give_each_row_one_value_near_the_exact_sum() {
        for set in sets() {
            for len in [16, 48, 64, 72, 128, 200, 256] {
                for n in [1, 5, 16, 17, 40] {
                    let x = values(len, n);
                    let rows = values(n * len, len);
                    let mut out = vec![f32::NAN; n + 3];
                    (set.dots)(&mut out, &x, &rows);
                    for (j, row) in rows.chunks_exact(len).enumerate() {
                        let mut alone = [f32::NAN];
                        (set.dots)(&mut alone, &x, row);
                        assert_eq!(out[j].to_bits(), alone[0].to_bits(), "{} len {len} row {j} of {n}", set.isa);
                        let exact: f64 = x.iter().zip(row).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                        let magnitude: f64 = x.iter().zip(row).map(|(a, b)| f64::from((a * b).abs())).sum();
                        let bound = len as f64 * f64::from(f32::EPSILON) * magnitude;
                        assert!((f64::from(out[j]) - exact).abs() <= bound, "{} len {len} row {j}", set.isa);
                    }
                    assert_eq!(&out[n..], &[0.0; 3], "{} len {len}: past the rows", set.isa);
                }
            }
        }
    }

    /// The AVX-512 set's softmax and `e^x` give the AVX2 set's bits: every length up to 80 (pairs
    /// of 8-value chunks, an odd chunk, a tail), scales, with and without a sink, and values that
    /// meet every branch of `e^x` (beyond its clamps, NaN, infinities, zeros of both signs).
    #[test]
    fn avx512_softmax_and_exp_equal_avx2s_bit_for_bit() {
        let (Some(avx2), Some(avx512)) = (avx2_fma_vector(), avx512_vector()) else {
            eprintln!("no AVX-512F on this CPU: its softmax and e^x are not run here");
            return;
        };
        let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 95.0, -120.0, 88.7, -103.9, 1e-30];
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for len in 0..=80 {
            for seed in 0..3 {
                let mut xs = values(len, seed + len);
                for (i, x) in xs.iter_mut().enumerate() {
                    *x *= 20.0;
                    if seed == 2 && i % 7 == 3 {
                        *x = special[(i / 7) % special.len()];
                    }
                }
                let (mut a, mut b) = (xs.clone(), xs.clone());
                (avx2.exp)(&mut a);
                (avx512.exp)(&mut b);
                assert_eq!(bits(&a), bits(&b), "exp len {len} seed {seed}");
                for (scale, sink) in [(0.125, None), (1.0, Some(0.5)), (0.3, Some(f32::NAN)), (2.0, Some(-200.0))] {
                    let (mut a, mut b) = (xs.clone(), xs.clone());
                    (avx2.softmax)(&mut a, scale, sink);
                    (avx512.softmax)(&mut b, scale, sink);
                    assert_eq!(bits(&a), bits(&b), "softmax len {len} seed {seed} scale {scale} sink {sink:?}");
                }
            }
        }
    }

    /// Each set's `weighted_sums_add` equals the scalar loops bit for bit, for any number of
    /// queries (groups of four and a rest), head sizes with and without a tail past the 64-wide
    /// steps, and queries whose weights or outputs differ in length (one at a time).
    #[test]
    fn every_sets_weighted_sums_equal_the_scalar_loops() {
        for set in sets() {
            for len in [8, 64, 100, 128, 256] {
                for (queries, count) in [(1, 7), (3, 40), (4, 1), (6, 33), (9, 12), (0, 3)] {
                    let rows = values(count * len, len + queries);
                    let weights: Vec<Vec<f32>> = (0..queries).map(|q| values(count, q + 7)).collect();
                    let starts: Vec<Vec<f32>> = (0..queries).map(|q| values(len, q)).collect();
                    let run = |f: crate::kernels::WeightedSumsFn, weights: &[Vec<f32>]| {
                        let mut outs = starts.clone();
                        let mut out_refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| &mut o[..]).collect();
                        let weight_refs: Vec<&[f32]> = weights.iter().map(|w| &w[..]).collect();
                        f(&mut out_refs, &weight_refs, &rows);
                        outs
                    };
                    assert_eq!(
                        run(set.weighted_sums_add, &weights),
                        run(SCALAR_VECTOR.weighted_sums_add, &weights),
                        "{} len {len} queries {queries} rows {count}",
                        set.isa
                    );
                    let mut uneven = weights.clone();
                    if let Some(last) = uneven.last_mut() {
                        last.truncate(count / 2);
                    }
                    assert_eq!(
                        run(set.weighted_sums_add, &uneven),
                        run(SCALAR_VECTOR.weighted_sums_add, &uneven),
                        "{} len {len} queries {queries} rows {count}, uneven weights",
                        set.isa
                    );
                }
            }
        }
    }

    /// f16 rows as values of an f16 KV cache: any f16 but NaN (infinities and subnormals among them).
    fn halves(len: usize, seed: usize) -> Vec<half::f16> {
        let special = [half::f16::INFINITY, half::f16::NEG_INFINITY, half::f16::from_bits(1), half::f16::MAX];
        (0..len)
            .map(|i| match (i * 7 + seed) % 97 {
                0 => special[(i / 97 + seed) % special.len()],
                _ => half::f16::from_f32(((i * 37 + seed * 101) % 211) as f32 / 53.0 - 2.0),
            })
            .collect()
    }

    fn widen(rows: &[half::f16]) -> Vec<f32> {
        rows.iter().map(|v| v.to_f32()).collect()
    }

    /// Each set's (and the scalar set's) `dots_f16` gives bit for bit what its `dots` gives on the
    /// rows widened to f32: lengths the AVX-512 kernel takes in registers (4, 8, 16 and 5 chunks)
    /// and lengths it widens in blocks (0, 12, 72; 3000, longer than a block), row counts around
    /// the groups of sixteen and the blocks, `out` longer and shorter than the rows.
    #[test]
    fn every_sets_f16_dots_equal_its_dots_of_the_widened_rows() {
        for set in sets().into_iter().chain([SCALAR_VECTOR]) {
            for len in [0, 12, 64, 72, 80, 128, 256, 3000] {
                for (n, extra) in [(0, 2), (1, 0), (15, 3), (16, 0), (17, 1), (33, 0), (40, -2_isize)] {
                    let x = values(len, n);
                    let rows = halves(n * len, len + n);
                    let size = (n as isize + extra) as usize;
                    let (mut got, mut want) = (vec![f32::NAN; size], vec![f32::NAN; size]);
                    (set.dots_f16)(&mut got, &x, &rows);
                    (set.dots)(&mut want, &x, &widen(&rows));
                    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{} len {len} rows {n} out {size}", set.isa);
                }
            }
        }
    }

    /// Each set's `dots_many_f16` (where it has one) gives bit for bit its `dots_f16` query by
    /// query: 1–9 queries (groups of four, three, two and one), lengths it takes together (1, 4 and
    /// 5 chunks) and one at a time (0, 12), row counts around the groups of four, outputs longer
    /// and shorter than the rows, and queries (or outputs) of uneven lengths.
    #[test]
    fn every_sets_f16_dots_of_many_queries_equal_its_dots_query_by_query() {
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let mut checked = 0;
        for set in sets() {
            let Some(dots_many) = set.dots_many_f16 else { continue };
            for len in [0, 12, 16, 64, 80] {
                for (n, extra) in [(0, 1), (1, 0), (3, 2), (4, 0), (7, 0), (9, -2_isize), (33, 1)] {
                    for queries in 1..=9 {
                        for uneven in [None, Some("x"), Some("out")] {
                            let rows = halves(n * len, len + n + queries);
                            let size = (n as isize + extra) as usize;
                            let xs: Vec<Vec<f32>> = (0..queries)
                                .map(|q| values(if uneven == Some("x") && q == 1 { len + 16 } else { len }, q + n))
                                .collect();
                            let sizes: Vec<usize> = (0..queries)
                                .map(|q| if uneven == Some("out") && q == 2 { size + 1 } else { size })
                                .collect();
                            let mut got: Vec<Vec<f32>> = sizes.iter().map(|&s| vec![f32::NAN; s]).collect();
                            let mut want = got.clone();
                            let x_refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
                            let mut outs: Vec<&mut [f32]> = got.iter_mut().map(Vec::as_mut_slice).collect();
                            dots_many(&mut outs, &x_refs, &rows);
                            for (want, x) in want.iter_mut().zip(&xs) {
                                (set.dots_f16)(want, x, &rows);
                            }
                            for (q, (got, want)) in got.iter().zip(&want).enumerate() {
                                let what = format!(
                                    "{} len {len} rows {n} out {size} queries {queries} {uneven:?} q {q}",
                                    set.isa
                                );
                                assert_eq!(bits(got), bits(want), "{what}");
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        // Every AVX-512 CPU so far has F16C: the test checks something there.
        if sets().iter().any(|set| set.isa.starts_with("avx512")) {
            assert!(checked > 0, "the AVX-512 set has dots_many_f16");
        }
    }

    /// Each set's `weighted_sums_add_f16` gives bit for bit what its `weighted_sums_add` gives on
    /// the rows widened to f32: 1–9 queries, outputs with and without a tail past the 64-wide
    /// steps (and 3000 values, longer than a block), weights of equal and of uneven lengths,
    /// outputs of uneven lengths.
    #[test]
    fn every_sets_f16_weighted_sums_equal_its_sums_of_the_widened_rows() {
        for set in sets().into_iter().chain([SCALAR_VECTOR]) {
            for len in [8, 64, 100, 128, 3000] {
                for (queries, count) in [(1, 7), (3, 40), (4, 1), (6, 33), (9, 12), (0, 3)] {
                    let rows = halves(count * len, len + queries);
                    let wide = widen(&rows);
                    let weights: Vec<Vec<f32>> = (0..queries).map(|q| values(count, q + 7)).collect();
                    let mut uneven = weights.clone();
                    if let Some(last) = uneven.last_mut() {
                        last.truncate(count / 2);
                    }
                    for (weights, out_lens) in [(&weights, false), (&uneven, false), (&weights, true)] {
                        // Uneven outputs: the last query's is 8 values shorter (it reads rows of its own length).
                        let starts: Vec<Vec<f32>> = (0..queries)
                            .map(|q| values(if out_lens && q + 1 == queries { len.saturating_sub(8) } else { len }, q))
                            .collect();
                        let weight_refs: Vec<&[f32]> = weights.iter().map(|w| &w[..]).collect();
                        let (mut got, mut want) = (starts.clone(), starts);
                        let mut refs: Vec<&mut [f32]> = got.iter_mut().map(|o| &mut o[..]).collect();
                        (set.weighted_sums_add_f16)(&mut refs, &weight_refs, &rows);
                        let mut refs: Vec<&mut [f32]> = want.iter_mut().map(|o| &mut o[..]).collect();
                        (set.weighted_sums_add)(&mut refs, &weight_refs, &wide);
                        let bits = |v: &[Vec<f32>]| v.iter().flatten().map(|v| v.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&got), bits(&want), "{} len {len} queries {queries} rows {count}", set.isa);
                    }
                }
            }
        }
    }
}

/// [`crate::matrix`]'s MXFP4 nibble reorder (HF's pairs to GGML's halves) in SSE2, part of the
/// x86-64 baseline.
pub(crate) fn mxfp4_pairs_to_halves(hf: [u8; 16]) -> [u8; 16] {
    // SAFETY: SSE2 is part of the x86-64 baseline; every CPU this code runs on has it.
    unsafe { mxfp4_pairs_to_halves_sse2(hf) }
}

#[target_feature(enable = "sse2")]
fn mxfp4_pairs_to_halves_sse2(hf: [u8; 16]) -> [u8; 16] {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_or_si128, _mm_set1_epi8, _mm_slli_epi16, _mm_srli_epi16, _mm_unpackhi_epi8,
        _mm_unpacklo_epi8,
    };
    let b = bytemuck::cast::<[u8; 16], __m128i>(hf);
    let mask = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(b, mask);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(b), mask);
    // Bytes 0..8's nibbles interleaved are values 0..16; bytes 8..16's are values 16..32.
    let first = _mm_unpacklo_epi8(lo, hi);
    let second = _mm_unpackhi_epi8(lo, hi);
    bytemuck::cast(_mm_or_si128(first, _mm_slli_epi16::<4>(second)))
}
