//! Minerva's quantized block formats and their scalar reference (de)quantizers.
//!
//! * [`ggml`] — the GGML block types (`Q4_0` … `Q8_K`, `MXFP4`) as `#[repr(C)]` structs whose sizes
//!   are checked at compile time against [`minerva_core::DTYPE_TABLE`], each beside a byte diagram
//!   and a reference dequantizer named as ggml names it (`dequantize_row_q4_0_ref`, …).
//! * [`mxfp4`] — MXFP4 in the Hugging Face GPT-OSS layout and MLX's `mxfp4` mode, and lossless
//!   conversion to and from GGML's MXFP4 blocks.
//! * [`mlx`] — MLX affine quantization (2–8 bits, groups of 32/64/128).
//! * [`dequantize_fast`] — SIMD kernels picked at run time (scalar fallback), bit-identical to the
//!   reference; the scalar reference lives in `ggml`, the SIMD code in `kernels/x86/avx2_dequant.rs`.
//! * [`matvec`] / [`matmul`] — fused quantized matrix × vector / small matrix products with
//!   activations quantized on the fly (Q8_0 / Q8_K), multi-threaded over rows on a [`ComputePool`]; AVX2
//!   tile kernels (4 rows × 2 activations; 4 × 8 against i16 activations) for the 32-value block
//!   formats in `kernels/x86/avx2_tile.rs` and `avx2_tile_i16.rs`, panel kernels for prefills
//!   against i16 activations (8 rows unpacked once per call, `avx2_panel.rs`; the tiles' results
//!   bit for bit), 1 row × 4 activations for Q2_K…Q6_K in
//!   `avx2_tile_k.rs`, per-row dot kernels for the float formats in `kernels/x86/avx2_dot.rs`,
//!   scalar ones in `kernels/reference.rs` ([`matvec_ref`]). [`matmul_i16`] quantizes activations
//!   to i16 instead (f32-level accuracy).
//! * [`vector`] — f32 dot products, `y += a·x` and weighted sums of rows (attention), `e^x` (softmax
//!   and the gated activations), AVX2+FMA where detected.
//! * [`pool`] — [`ComputePool`], the threads matrix products (and the model's other per-op loops)
//!   run on: the caller takes part and idle workers spin briefly, for hundreds of short loops a step.
//!
//! Which function does what for each dtype is one table, `kernels/mod.rs`: a scalar reference row
//! per dtype and, per instruction set, rows of the kernels that set speeds up, merged once per
//! process after run-time detection ([`cpu_kernels`] says which ISA each entry came from).
//!
//! The reference code reads blocks from byte slices of any alignment (as a memory-mapped model file
//! gives them) and follows its source's f32 arithmetic step for step: the tests under `tests/`
//! compare it **bit for bit** with values that gguf-py 0.19 and MLX 0.32 computed (fixtures made by
//! `fixtures/quant/make_quant_goldens.py`). Wrong-sized inputs are a [`QuantError`], never a panic.
//!
//! ```
//! use minerva_core::DType;
//! use minerva_quant::dequantize;
//!
//! // One Q8_0 block: f16 scale 0.5 (0x3800, little-endian), then 32 signed quants.
//! let mut block = vec![0x00, 0x38];
//! block.extend((0..32i8).map(|q| (q - 16) as u8));
//!
//! let mut values = [0.0f32; 32];
//! dequantize(DType::Q8_0, &block, &mut values)?;
//! assert_eq!(values[0], -8.0); // 0.5 * -16
//! assert_eq!(values[31], 7.5); // 0.5 * 15
//!
//! // A partial block is a typed error that names the dtype and the lengths.
//! let err = dequantize(DType::Q8_0, &block[..33], &mut values).unwrap_err();
//! assert_eq!(err.to_string(), "Q8_0: 33 bytes is not a whole number of 34-byte blocks");
//! # Ok::<(), minerva_quant::QuantError>(())
//! ```

mod activation;
mod blocks;
mod error;
mod float;
pub mod ggml;
mod kernels;
mod matmul;
mod matrix;
pub mod mlx;
pub mod mxfp4;
pub mod pool;
mod repack;
pub mod streamed;
pub mod vector;

use kernels::{DequantizeFn, QuantizeFn};
use minerva_core::DType;

pub use blocks::Block;
pub use error::QuantError;
pub use float::{dequantize_row_bf16, dequantize_row_f16, dequantize_row_f32};
pub use ggml::k_quantize::{quantize_row_q4_k_ref, quantize_row_q5_k_ref, quantize_row_q6_k_ref};
pub use ggml::k_quants::{
    BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, dequantize_row_q2_k_ref, dequantize_row_q3_k_ref,
    dequantize_row_q4_k_ref, dequantize_row_q5_k_ref, dequantize_row_q6_k_ref,
};
pub use ggml::mxfp4::{BlockMxfp4, dequantize_row_mxfp4_ref, quantize_row_mxfp4_ref};
pub use ggml::q4::{
    BlockQ4_0, BlockQ4_1, dequantize_row_q4_0_ref, dequantize_row_q4_1_ref, quantize_row_q4_0_ref,
    quantize_row_q4_1_ref,
};
pub use ggml::q5::{
    BlockQ5_0, BlockQ5_1, dequantize_row_q5_0_ref, dequantize_row_q5_1_ref, quantize_row_q5_0_ref,
    quantize_row_q5_1_ref,
};
pub use ggml::q8::{
    BlockQ8_0, BlockQ8_K, dequantize_row_q8_0_ref, dequantize_row_q8_k_ref, quantize_row_q8_0_ref,
    quantize_row_q8_k_ref,
};
pub use kernels::{CpuKernels, ISAS_VAR, cpu_kernels, detected_isas};
pub use matmul::{
    Product, activation_dtype, has_fast_matmul, has_i16_matmul, matmul, matmul_i16, matmul_i16_each, matmul_i16_matrix,
    matmul_i16_ref, matmul_ref, matmul_repacked_with_isa, matmul_with_isa, matvec, matvec_ref,
};
pub use matrix::Matrix;
pub use mlx::{AffineRowBytes, MlxAffine};
pub use mxfp4::{dequantize_hf_mxfp4_ref, dequantize_mlx_mxfp4_ref, ggml_mxfp4_to_hf, hf_mxfp4_to_ggml};
pub use pool::ComputePool;
pub use repack::{
    GROUP_ROWS, Repacked, RepackedView, is_repackable, repacked_kernel_isa, repacking_changes_activations,
    repacking_pays,
};
pub use streamed::StreamedBytes;

/// The reference dequantizer for `dtype`, if this crate has one.
pub fn dequantizer(dtype: DType) -> Option<DequantizeFn> {
    kernels::reference(dtype).dequantize
}

/// The reference quantizer for `dtype`, if this crate has one.
pub fn quantizer(dtype: DType) -> Option<QuantizeFn> {
    kernels::reference(dtype).quantize
}

/// Dequantizes `bytes` of `dtype` (whole blocks, any alignment) into `out` (exactly the values
/// they hold). Dtypes without a dequantizer here (IQ*, TQ*, NVFP4, integers, …) are
/// [`QuantError::Unsupported`].
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let f = dequantizer(dtype).ok_or(QuantError::Unsupported { dtype, operation: "dequantize" })?;
    f(bytes, out)
}

/// Dequantizes like [`dequantize`] with the fastest dequantizer this CPU has for `dtype` (an AVX2
/// one for Q8_0, Q4_0, Q4_1, MXFP4, Q4_K and Q6_K on x86-64, the reference everywhere else).
/// Every fast dequantizer equals the reference bit for bit (tested by `tests/fast_path.rs`), so
/// callers may switch between the two freely.
pub fn dequantize_fast(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let f = kernels::selected(dtype).kernels.dequantize;
    f.ok_or(QuantError::Unsupported { dtype, operation: "dequantize" })?(bytes, out)
}

/// Whether [`dequantize_fast`] has a SIMD kernel for `dtype` on this CPU.
pub fn has_fast_path(dtype: DType) -> bool {
    cpu_kernels(dtype).dequantize.is_some_and(|isa| isa != kernels::SCALAR)
}

/// Quantizes `values` (whole blocks) into `out` (exactly the bytes they take) with the reference
/// quantizer for `dtype`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K or MXFP4 (each
/// bit-identical to ggml's `quantize_row_*_ref`); others are [`QuantError::Unsupported`].
pub fn quantize(dtype: DType, values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let f = quantizer(dtype).ok_or(QuantError::Unsupported { dtype, operation: "quantize" })?;
    f(values, out)
}

/// The README's example, compiled (and, unless marked `no_run`, run) as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The unit tests' random numbers.
#[cfg(test)]
pub(crate) mod test_rng {
    /// Marsaglia's xorshift64 from `seed` (not zero): reproducible inputs without a dependency.
    pub(crate) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }
}
