//! Zero-copy tensor views.

use crate::DType;

/// A tensor as a format crate hands it out: borrowed from the file's bytes, never copied.
///
/// `shape` is in numpy order (outermost dimension first, the contiguous row last); a GGUF tensor
/// with `ne = [512, 6]` has shape `[6, 512]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorView<'a> {
    /// The tensor's name in its file.
    pub name: &'a str,
    /// Element type as stored.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: &'a [usize],
    /// The stored bytes (quantized blocks stay as they are).
    pub bytes: &'a [u8],
}

impl TensorView<'_> {
    /// Number of elements (the product of the shape; 1 for a scalar).
    pub fn element_count(&self) -> usize {
        // A view is only built from a validated shape, whose product fits in usize.
        self.shape.iter().product()
    }

    /// Length of the innermost (contiguous) dimension, 1 for a scalar.
    pub fn row_len(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }
}

/// Why a shape cannot describe stored bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The product of the dimensions overflows `usize`.
    #[error("element count of shape {shape:?} overflows")]
    Overflow {
        /// The offending shape.
        shape: Vec<u64>,
    },
    /// The row length is not a whole number of the dtype's blocks.
    #[error("row length {row_len} is not a multiple of {dtype}'s block of {block} elements")]
    PartialBlock {
        /// The dtype.
        dtype: DType,
        /// The innermost dimension.
        row_len: u64,
        /// Elements per block.
        block: usize,
    },
}

/// Elements and bytes of a tensor of `dtype` with dimensions `dims` (any order; the row is `row_len`),
/// checked for overflow and whole blocks. Returns `(elements, bytes)`.
pub fn element_count(dtype: DType, dims: &[u64], row_len: u64) -> Result<(usize, usize), ShapeError> {
    let overflow = || ShapeError::Overflow { shape: dims.to_vec() };
    // The product of the non-zero dimensions must fit too: a zero dimension makes the element count
    // 0, but code that multiplies dimensions in another order (or a subset of them) must not
    // overflow either (found by fuzzing the GGUF reader).
    let mut nonzero: usize = 1;
    for &d in dims.iter().filter(|&&d| d != 0) {
        let d = usize::try_from(d).map_err(|_| overflow())?;
        nonzero = nonzero.checked_mul(d).ok_or_else(overflow)?;
    }
    let elements = if dims.contains(&0) { 0 } else { nonzero };
    let block = dtype.block_elems();
    if !row_len.is_multiple_of(block as u64) {
        return Err(ShapeError::PartialBlock { dtype, row_len, block });
    }
    let bytes = (elements / block).checked_mul(dtype.block_bytes()).ok_or_else(overflow)?;
    Ok((elements, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_bytes() {
        assert_eq!(element_count(DType::F16, &[576, 30], 576), Ok((17280, 34560)));
        assert_eq!(element_count(DType::Q8_0, &[64, 2], 64), Ok((128, 136)));
        assert!(matches!(element_count(DType::Q8_0, &[48, 2], 48), Err(ShapeError::PartialBlock { .. })));
        assert!(matches!(element_count(DType::F32, &[u64::MAX, 2], 2), Err(ShapeError::Overflow { .. })));
        assert_eq!(element_count(DType::F32, &[], 1), Ok((1, 4)));
        assert_eq!(element_count(DType::F32, &[0, 7], 7), Ok((0, 0)));
        assert!(matches!(element_count(DType::F32, &[0, u64::MAX / 2, 4], 0), Err(ShapeError::Overflow { .. })));
    }
}
