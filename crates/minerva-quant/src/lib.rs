//! Minerva's quantized block formats and their scalar reference (de)quantizers.
//!
//! * [`ggml`] — the GGML block types (`Q4_0` … `Q8_K`, `MXFP4`) as `#[repr(C)]` structs whose sizes
//!   are checked at compile time against [`minerva_core::DTYPE_TABLE`], each beside a byte diagram
//!   and a reference dequantizer named as ggml names it (`dequantize_row_q4_0_ref`, …).
//! * [`mxfp4`] — MXFP4 in the Hugging Face GPT-OSS layout and MLX's `mxfp4` mode, and lossless
//!   conversion to and from GGML's MXFP4 blocks.
//! * [`mlx`] — MLX affine quantization (2–8 bits, groups of 32/64/128).
//! * [`dequantize_fast`] — AVX2 kernels picked at run time (scalar fallback), bit-identical to the
//!   reference; the scalar reference lives in `ggml`, the SIMD code in `x86/avx2.rs`.
//! * [`matvec`] / [`matmul`] — fused quantized matrix × vector / small matrix products with
//!   activations quantized on the fly (Q8_0 / Q8_K), multi-threaded over rows with rayon; AVX2
//!   tile kernels (4 rows × 2 activations) for the 32-value block formats in `x86/avx2_tile.rs`,
//!   per-row dot kernels for the others in `x86/avx2_dot.rs`, scalar ones in `matmul/ref_.rs`
//!   ([`matvec_ref`]). [`matmul_i16`] quantizes activations to i16 instead (f32-level accuracy).
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

mod blocks;
mod error;
mod fast;
mod float;
pub mod ggml;
mod matmul;
pub mod mlx;
pub mod mxfp4;
#[cfg(target_arch = "x86_64")]
mod x86;

use minerva_core::DType;

pub use blocks::Block;
pub use error::QuantError;
pub use fast::{dequantize_fast, has_fast_path};
pub use float::{dequantize_row_bf16, dequantize_row_f16, dequantize_row_f32};
pub use ggml::k_quants::{
    BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, dequantize_row_q2_k_ref, dequantize_row_q3_k_ref,
    dequantize_row_q4_k_ref, dequantize_row_q5_k_ref, dequantize_row_q6_k_ref,
};
pub use ggml::mxfp4::{BlockMxfp4, dequantize_row_mxfp4_ref, quantize_row_mxfp4_ref};
pub use ggml::q4::{
    BlockQ4_0, BlockQ4_1, dequantize_row_q4_0_ref, dequantize_row_q4_1_ref, quantize_row_q4_0_ref,
    quantize_row_q4_1_ref,
};
pub use ggml::q5::{BlockQ5_0, BlockQ5_1, dequantize_row_q5_0_ref, dequantize_row_q5_1_ref};
pub use ggml::q8::{
    BlockQ8_0, BlockQ8_K, dequantize_row_q8_0_ref, dequantize_row_q8_k_ref, quantize_row_q8_0_ref,
    quantize_row_q8_k_ref,
};
pub use matmul::{
    activation_dtype, has_fast_matmul, has_i16_matmul, matmul, matmul_i16, matmul_i16_ref, matmul_ref, matvec,
    matvec_ref,
};
pub use mlx::MlxAffine;
pub use mxfp4::{dequantize_hf_mxfp4_ref, dequantize_mlx_mxfp4_ref, ggml_mxfp4_to_hf, hf_mxfp4_to_ggml};

/// A row converter: input bytes (or values) to output values (or bytes).
type DequantizeFn = fn(&[u8], &mut [f32]) -> Result<(), QuantError>;
type QuantizeFn = fn(&[f32], &mut [u8]) -> Result<(), QuantError>;

/// The reference dequantizer for `dtype`, if this crate has one.
pub fn dequantizer(dtype: DType) -> Option<DequantizeFn> {
    let f: DequantizeFn = match dtype {
        DType::F32 => dequantize_row_f32,
        DType::F16 => dequantize_row_f16,
        DType::BF16 => dequantize_row_bf16,
        DType::Q4_0 => dequantize_row_q4_0_ref,
        DType::Q4_1 => dequantize_row_q4_1_ref,
        DType::Q5_0 => dequantize_row_q5_0_ref,
        DType::Q5_1 => dequantize_row_q5_1_ref,
        DType::Q8_0 => dequantize_row_q8_0_ref,
        DType::Q2_K => dequantize_row_q2_k_ref,
        DType::Q3_K => dequantize_row_q3_k_ref,
        DType::Q4_K => dequantize_row_q4_k_ref,
        DType::Q5_K => dequantize_row_q5_k_ref,
        DType::Q6_K => dequantize_row_q6_k_ref,
        DType::Q8_K => dequantize_row_q8_k_ref,
        DType::MXFP4 => dequantize_row_mxfp4_ref,
        _ => return None,
    };
    Some(f)
}

/// The reference quantizer for `dtype`, if this crate has one.
pub fn quantizer(dtype: DType) -> Option<QuantizeFn> {
    let f: QuantizeFn = match dtype {
        DType::Q4_0 => quantize_row_q4_0_ref,
        DType::Q4_1 => quantize_row_q4_1_ref,
        DType::Q8_0 => quantize_row_q8_0_ref,
        DType::Q8_K => quantize_row_q8_k_ref,
        DType::MXFP4 => quantize_row_mxfp4_ref,
        _ => return None,
    };
    Some(f)
}

/// Dequantizes `bytes` of `dtype` (whole blocks, any alignment) into `out` (exactly the values
/// they hold). Dtypes without a dequantizer here (IQ*, TQ*, NVFP4, integers, …) are
/// [`QuantError::Unsupported`].
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let f = dequantizer(dtype).ok_or(QuantError::Unsupported { dtype, operation: "dequantize" })?;
    f(bytes, out)
}

/// Quantizes `values` (whole blocks) into `out` (exactly the bytes they take) with the reference
/// quantizer for `dtype`: Q4_0, Q4_1, Q8_0, Q8_K or MXFP4; others are [`QuantError::Unsupported`].
pub fn quantize(dtype: DType, values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let f = quantizer(dtype).ok_or(QuantError::Unsupported { dtype, operation: "quantize" })?;
    f(values, out)
}
