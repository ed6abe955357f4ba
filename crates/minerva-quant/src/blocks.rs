//! What every GGML block type shares: a dtype, a byte size checked at compile time, a per-block
//! decoder, and the length checks and block walk that turn a per-block decoder into a row decoder.
//!
//! Blocks are read with [`bytemuck::pod_read_unaligned`]: model files hand us `&[u8]` at any
//! alignment (a 34-byte Q8_0 block is only 2-aligned by accident), so the reference path copies each
//! block onto the stack instead of casting the slice.

use bytemuck::Pod;
use minerva_core::DType;

use crate::QuantError;

/// A GGML quantization block: `#[repr(C)]`, no padding, exactly `DTYPE.block_bytes()` bytes.
pub trait Block: Pod {
    /// The dtype this block stores.
    const DTYPE: DType;

    /// Decodes this block into `out`, which holds exactly `DTYPE.block_elems()` values.
    fn dequantize(&self, out: &mut [f32]);
}

/// Implements [`Block`] and asserts at compile time that the struct's size is the dtype table's.
macro_rules! impl_block {
    ($block:ty, $dtype:expr, $decode:path) => {
        impl $crate::blocks::Block for $block {
            const DTYPE: ::minerva_core::DType = $dtype;
            fn dequantize(&self, out: &mut [f32]) {
                $decode(self, out)
            }
        }
        const _: () = assert!(::core::mem::size_of::<$block>() == $dtype.block_bytes());
    };
}
pub(crate) use impl_block;

/// Checks that `in_bytes` is whole blocks of `dtype` and that `out_values` is what they decode to.
/// Returns the number of blocks.
pub(crate) fn check_dequantize_lengths(dtype: DType, in_bytes: usize, out_values: usize) -> Result<usize, QuantError> {
    let block_bytes = dtype.block_bytes();
    if !in_bytes.is_multiple_of(block_bytes) {
        return Err(QuantError::PartialBlockBytes { dtype, len: in_bytes, block_bytes });
    }
    let blocks = in_bytes / block_bytes;
    // Cannot overflow: a block's values never outnumber its bits, and `in_bytes` fits in memory.
    let expected = blocks * dtype.block_elems();
    if out_values != expected {
        return Err(QuantError::OutputLength { dtype, expected, actual: out_values, unit: "values" });
    }
    Ok(blocks)
}

/// Checks that `in_values` is whole blocks of `dtype` and `out_bytes` is what they encode to.
/// Returns the number of blocks.
pub(crate) fn check_quantize_lengths(dtype: DType, in_values: usize, out_bytes: usize) -> Result<usize, QuantError> {
    let block_elems = dtype.block_elems();
    if !in_values.is_multiple_of(block_elems) {
        return Err(QuantError::PartialBlockValues { dtype, len: in_values, block_elems });
    }
    let blocks = in_values / block_elems;
    let expected = blocks * dtype.block_bytes();
    if out_bytes != expected {
        return Err(QuantError::OutputLength { dtype, expected, actual: out_bytes, unit: "bytes" });
    }
    Ok(blocks)
}

/// Decodes a row of `B` blocks read from bytes of any alignment.
pub(crate) fn dequantize_blocks<B: Block>(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_dequantize_lengths(B::DTYPE, bytes.len(), out.len())?;
    let in_blocks = bytes.chunks_exact(B::DTYPE.block_bytes());
    for (block_bytes, block_out) in in_blocks.zip(out.chunks_exact_mut(B::DTYPE.block_elems())) {
        bytemuck::pod_read_unaligned::<B>(block_bytes).dequantize(block_out);
    }
    Ok(())
}

/// Encodes a row of values into `B` blocks, one block at a time, with `quantize_block`.
pub(crate) fn quantize_blocks<B: Block>(
    values: &[f32],
    out: &mut [u8],
    quantize_block: impl Fn(&[f32]) -> B,
) -> Result<(), QuantError> {
    check_quantize_lengths(B::DTYPE, values.len(), out.len())?;
    let in_blocks = values.chunks_exact(B::DTYPE.block_elems());
    for (block_values, block_out) in in_blocks.zip(out.chunks_exact_mut(B::DTYPE.block_bytes())) {
        block_out.copy_from_slice(bytemuck::bytes_of(&quantize_block(block_values)));
    }
    Ok(())
}

/// The index of the first value with the largest magnitude, as ggml's and gguf-py's quantizers
/// pick it (a strict `>`, so ties keep the earliest; numpy's `argmax` agrees).
pub(crate) fn first_abs_max_index(values: &[f32]) -> usize {
    let mut best = 0;
    let mut best_abs = 0.0f32;
    for (i, v) in values.iter().enumerate() {
        if v.abs() > best_abs {
            best_abs = v.abs();
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_checks_name_dtype_and_lengths() {
        assert_eq!(check_dequantize_lengths(DType::Q4_0, 36, 64), Ok(2));
        assert_eq!(
            check_dequantize_lengths(DType::Q4_0, 35, 64),
            Err(QuantError::PartialBlockBytes { dtype: DType::Q4_0, len: 35, block_bytes: 18 })
        );
        assert_eq!(
            check_dequantize_lengths(DType::Q6_K, 210, 255),
            Err(QuantError::OutputLength { dtype: DType::Q6_K, expected: 256, actual: 255, unit: "values" })
        );
        assert_eq!(check_quantize_lengths(DType::MXFP4, 64, 34), Ok(2));
        assert_eq!(
            check_quantize_lengths(DType::MXFP4, 48, 34),
            Err(QuantError::PartialBlockValues { dtype: DType::MXFP4, len: 48, block_elems: 32 })
        );
        assert_eq!(check_dequantize_lengths(DType::Q8_0, 0, 0), Ok(0));
    }

    #[test]
    fn first_abs_max_keeps_the_earliest_tie() {
        assert_eq!(first_abs_max_index(&[1.0, -3.0, 3.0, 2.0]), 1);
        assert_eq!(first_abs_max_index(&[0.0, -0.0]), 0);
    }
}
