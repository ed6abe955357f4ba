//! The fast dequantize entry point: SIMD where this CPU and dtype have a kernel, the scalar
//! reference otherwise. Every fast kernel equals the reference bit for bit (tested by
//! `tests/fast_path.rs`), so callers may switch between the two freely.

use minerva_core::DType;

use crate::QuantError;
use crate::blocks::check_dequantize_lengths;

/// Dequantizes like [`crate::dequantize`], with an AVX2 kernel (chosen at run time) for Q8_0,
/// Q4_0, Q4_1, MXFP4, Q4_K and Q6_K on x86-64, and the reference everywhere else.
pub fn dequantize_fast(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = crate::x86::avx2_dequantizer(dtype) {
        check_dequantize_lengths(dtype, bytes.len(), out.len())?;
        kernel(bytes, out);
        return Ok(());
    }
    crate::dequantize(dtype, bytes, out)
}

/// Whether [`dequantize_fast`] has a SIMD kernel for `dtype` on this CPU.
pub fn has_fast_path(dtype: DType) -> bool {
    #[cfg(target_arch = "x86_64")]
    if crate::x86::avx2_dequantizer(dtype).is_some() {
        return true;
    }
    let _ = dtype;
    false
}
