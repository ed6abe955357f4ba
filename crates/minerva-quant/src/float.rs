//! Plain float dtypes as "blocks" of one value: F32, F16, BF16 (little-endian, any alignment).

use half::f16;
use minerva_core::DType;

use crate::QuantError;
use crate::blocks::check_dequantize_lengths;

/// Reads little-endian f32 values (bit for bit; NaN payloads kept).
pub fn dequantize_row_f32(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_dequantize_lengths(DType::F32, bytes.len(), out.len())?;
    for (y, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    Ok(())
}

/// Widens little-endian IEEE binary16 values to f32 (exact; a signalling NaN comes back quiet,
/// as from x86's `vcvtph2ps`).
pub fn dequantize_row_f16(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_dequantize_lengths(DType::F16, bytes.len(), out.len())?;
    for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *y = f16::from_le_bytes([b[0], b[1]]).to_f32();
    }
    Ok(())
}

/// Widens little-endian bfloat16 values to f32: the bits shifted up by 16 (exact, as gguf-py).
pub fn dequantize_row_bf16(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_dequantize_lengths(DType::BF16, bytes.len(), out.len())?;
    for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        // Not `half::bf16::to_f32`, which sets the quiet bit of NaNs: gguf-py keeps them as is.
        *y = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
    }
    Ok(())
}
