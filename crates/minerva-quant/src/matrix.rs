//! The weight matrices the fused products read: GGML's rows of whole blocks, or MXFP4 as Hugging
//! Face and MLX store it, read where it lies.
//!
//! ```text
//! Matrix::Blocks            row r: bytes r·row_bytes ..  (each block: its scale, then its quants)
//! Matrix::Mxfp4Split        row r: physical row p = r·row_stride
//!   nibbles  (16 B/group)   groups p·G .. (p+1)·G, two values per byte, interleaved (lo: v2j, hi: v2j+1)
//!   scales   (1 B/group)    bytes  p·G .. (p+1)·G, E8M0
//! Matrix::MlxAffine         row r: cols·bits/8 bytes of codes, cols/group scales and biases
//! ```
//!
//! A split matrix runs without a converted copy of its weights. Against one to seven i16
//! activations (decode; below the panels' eight), where the CPU has one, a kernel reads the split
//! layout itself (`kernels/x86/avx2_split_mxfp4.rs`: one byte shuffle per block and activations
//! permuted once per call keep the GGML kernels' halves, so the bits are theirs). Otherwise each
//! task converts its rows, a few at a time, into a per-thread buffer of GGML blocks (24 KiB for
//! 16 rows of GPT-OSS) that stays in L1 while the GGML kernel reads it, for every activation of a
//! prefill chunk. The conversion is llama.cpp's (`hf_mxfp4_to_ggml`): the scale byte, then the
//! nibbles reordered from HF's pairs (byte j: values 2j, 2j + 1) to GGML's halves (byte j: values
//! j, j + 16), a few SIMD instructions per block. Either way every product equals the one on
//! converted weights bit for bit.
//!
//! An MLX affine matrix (8-bit, 4-bit, …, codes with a float scale and bias per group) runs the
//! same way on the kernels of its scales' float type: each task turns a few rows into the values
//! `mx.dequantize` gives (rounded as MLX rounds them, [`MlxAffine::groups_to_bytes`]) in the same
//! per-thread buffer, so every product equals the product on the dequantized copy a loader would
//! otherwise keep (twice the bytes of 8-bit codes), bit for bit.
//!
//! `row_stride` 2 reads every other row: the gate (or up) half of GPT-OSS's HF `gate_up_proj`,
//! whose rows interleave the two, without de-interleaving the tensor.

use std::cell::RefCell;

use minerva_core::DType;

use crate::activation::Activation;
use crate::kernels::{MatKernel, SPLIT_MAX_ACTS, SplitKernel, SplitRows};
use crate::mxfp4::{MXFP4_GROUP, MXFP4_GROUP_BYTES, dequantize_hf_mxfp4_ref};
use crate::{AffineRowBytes, MlxAffine, QuantError};

/// A `rows × cols` weight matrix, row-major, as a fused product reads it.
#[derive(Clone, Copy, Debug)]
pub enum Matrix<'a> {
    /// Rows of whole `dtype` blocks (a GGUF tensor, or anything converted to one).
    Blocks {
        /// The blocks' dtype.
        dtype: DType,
        /// `rows` rows of `cols` values.
        bytes: &'a [u8],
    },
    /// MXFP4 as HF (`_blocks`, `_scales`) and MLX (`mode="mxfp4"`: `weight` as little-endian
    /// bytes, `scales`) store it: per physical row `cols / 32` groups of 16 bytes of interleaved
    /// nibbles and as many E8M0 scale bytes. Row `r` is physical row `r · row_stride`.
    Mxfp4Split {
        /// 16 bytes per group.
        nibbles: &'a [u8],
        /// One byte per group.
        scales: &'a [u8],
        /// Physical rows from one row to the next (1; 2 for one half of interleaved rows).
        row_stride: usize,
    },
    /// MLX's affine layout (`mode="affine"`), read where it lies: per row `cols · bits / 8` bytes
    /// of codes (the u32 words' little-endian bytes) and `cols / group_size` scales and biases in
    /// `params.scale_dtype`. Multiplied on that float type's kernels.
    MlxAffine {
        /// The codes.
        weight: &'a [u8],
        /// One scale per group.
        scales: &'a [u8],
        /// One bias per group.
        biases: &'a [u8],
        /// Bits, group size and the scales' dtype.
        params: MlxAffine,
    },
    /// Q4_0, Q4_1 or Q8_0 rows repacked into interleaved groups of 16 ([`crate::Repacked`]),
    /// multiplied with Q8_0 activations by `crate::repack`'s kernels.
    Repacked(crate::repack::RepackedView<'a>),
}

impl<'a> Matrix<'a> {
    /// The dtype of the kernels this matrix runs on (MXFP4 for a split matrix).
    pub fn dtype(&self) -> DType {
        match self {
            Matrix::Blocks { dtype, .. } => *dtype,
            Matrix::Mxfp4Split { .. } => DType::MXFP4,
            Matrix::MlxAffine { params, .. } => params.scale_dtype,
            Matrix::Repacked(view) => view.dtype(),
        }
    }

    /// Rows `first..first + count` of a matrix of `cols` columns, as a matrix of their own.
    /// Ranges outside the matrix are a [`QuantError::MatmulOperand`].
    pub fn rows(&self, first: usize, count: usize, cols: usize) -> Result<Matrix<'a>, QuantError> {
        let dtype = self.dtype();
        let too_short = |len: usize, unit| QuantError::MatmulOperand {
            dtype,
            operand: "weights",
            expected: first.saturating_add(count),
            actual: len,
            unit,
        };
        let overflow = QuantError::ShapeOverflow { dtype, rows: first.saturating_add(count), cols, n: 1 };
        match *self {
            Matrix::Blocks { dtype, bytes } => {
                let row_bytes = row_bytes(dtype, cols)?;
                let start = first.checked_mul(row_bytes).ok_or(overflow.clone())?;
                let len = count.checked_mul(row_bytes).ok_or(overflow)?;
                let bytes = bytes.get(start..).and_then(|b| b.get(..len)).ok_or(too_short(bytes.len(), "bytes"))?;
                Ok(Matrix::Blocks { dtype, bytes })
            }
            Matrix::Mxfp4Split { nibbles, scales, row_stride } => {
                let groups = split_groups(cols)?;
                let start =
                    first.checked_mul(row_stride).and_then(|p| p.checked_mul(groups)).ok_or(overflow.clone())?;
                let nibble_start = start.checked_mul(MXFP4_GROUP_BYTES).ok_or(overflow)?;
                let nibbles = nibbles.get(nibble_start..).ok_or(too_short(nibbles.len(), "bytes"))?;
                let scales = scales.get(start..).ok_or(too_short(scales.len(), "bytes"))?;
                let view = Matrix::Mxfp4Split { nibbles, scales, row_stride };
                view.check_shape(count, cols)?;
                Ok(view)
            }
            Matrix::MlxAffine { weight, scales, biases, params } => {
                let AffineRowBytes { codes: code_bytes, scales: scale_bytes } = params.row_bytes(cols)?;
                let part = |bytes: &'a [u8], per_row: usize| -> Result<&'a [u8], QuantError> {
                    let start = first.checked_mul(per_row).ok_or(overflow.clone())?;
                    let len = count.checked_mul(per_row).ok_or(overflow.clone())?;
                    bytes.get(start..).and_then(|b| b.get(..len)).ok_or(too_short(bytes.len(), "bytes"))
                };
                let weight = part(weight, code_bytes)?;
                let (scales, biases) = (part(scales, scale_bytes)?, part(biases, scale_bytes)?);
                Ok(Matrix::MlxAffine { weight, scales, biases, params })
            }
            Matrix::Repacked(view) => Ok(Matrix::Repacked(view.rows(first, count)?)),
        }
    }

    /// Checks that the matrix holds `rows × cols` values; returns GGML's bytes per row (what a
    /// split matrix's rows take once staged).
    pub fn check_shape(&self, rows: usize, cols: usize) -> Result<usize, QuantError> {
        let dtype = self.dtype();
        let overflow = QuantError::ShapeOverflow { dtype, rows, cols, n: 1 };
        match *self {
            Matrix::Blocks { dtype, bytes } => {
                let row_bytes = row_bytes(dtype, cols)?;
                let expected = row_bytes.checked_mul(rows).ok_or(overflow)?;
                if bytes.len() != expected {
                    return Err(QuantError::MatmulOperand {
                        dtype,
                        operand: "weights",
                        expected,
                        actual: bytes.len(),
                        unit: "bytes",
                    });
                }
                Ok(row_bytes)
            }
            Matrix::Mxfp4Split { nibbles, scales, row_stride } => {
                let groups = split_groups(cols)?;
                if row_stride == 0 {
                    return Err(QuantError::ComponentLength {
                        format: "MXFP4 (split)",
                        component: "row stride",
                        expected: 1,
                        actual: 0,
                        unit: "rows",
                    });
                }
                // The last row read is physical row (rows - 1) · stride; rows past it (the other
                // half of interleaved rows) may follow.
                let physical = match rows {
                    0 => 0,
                    _ => (rows - 1).checked_mul(row_stride).and_then(|p| p.checked_add(1)).ok_or(overflow.clone())?,
                };
                let needed_scales = physical.checked_mul(groups).ok_or(overflow.clone())?;
                let needed_nibbles = needed_scales.checked_mul(MXFP4_GROUP_BYTES).ok_or(overflow)?;
                for (component, needed, actual) in
                    [("nibbles", needed_nibbles, nibbles.len()), ("scales", needed_scales, scales.len())]
                {
                    if actual < needed {
                        return Err(QuantError::ComponentLength {
                            format: "MXFP4 (split)",
                            component,
                            expected: needed,
                            actual,
                            unit: "bytes",
                        });
                    }
                }
                Ok(groups * (1 + MXFP4_GROUP_BYTES))
            }
            Matrix::MlxAffine { weight, scales, biases, params } => {
                let AffineRowBytes { codes: code_bytes, scales: scale_bytes } = params.row_bytes(cols)?;
                for (component, per_row, actual) in [
                    ("weight", code_bytes, weight.len()),
                    ("scales", scale_bytes, scales.len()),
                    ("biases", scale_bytes, biases.len()),
                ] {
                    let expected = per_row.checked_mul(rows).ok_or(overflow.clone())?;
                    if actual != expected {
                        return Err(QuantError::ComponentLength {
                            format: "MLX affine",
                            component,
                            expected,
                            actual,
                            unit: "bytes",
                        });
                    }
                }
                Ok(cols * params.scale_dtype.block_bytes())
            }
            Matrix::Repacked(view) => view.check_shape(rows, cols),
        }
    }

    /// Dequantizes the `rows × cols` values into `out` (exactly as many), with the fastest
    /// dequantizer for a block matrix and the reference one for a split matrix.
    pub fn dequantize(&self, rows: usize, cols: usize, out: &mut [f32]) -> Result<(), QuantError> {
        let row_bytes = self.check_shape(rows, cols)?;
        self.check_output(rows * cols, out.len(), "values")?;
        match *self {
            Matrix::Blocks { dtype, bytes } => crate::dequantize_fast(dtype, bytes, out),
            Matrix::Mxfp4Split { nibbles, scales, row_stride } => {
                let groups = row_bytes / (1 + MXFP4_GROUP_BYTES);
                for (r, values) in out.chunks_exact_mut(cols.max(1)).enumerate().take(rows) {
                    let p = r * row_stride * groups;
                    let nib = &nibbles[p * MXFP4_GROUP_BYTES..(p + groups) * MXFP4_GROUP_BYTES];
                    dequantize_hf_mxfp4_ref(nib, &scales[p..p + groups], values)?;
                }
                Ok(())
            }
            Matrix::MlxAffine { weight, scales, biases, params } => {
                params.dequantize_exact(weight, scales, biases, out)
            }
            Matrix::Repacked(view) => {
                let mut blocks = vec![0u8; rows * row_bytes];
                view.unpack(&mut blocks);
                crate::dequantize_fast(view.dtype(), &blocks, out)
            }
        }
    }

    /// The `rows × cols` values as GGML blocks into `out` (exactly their bytes): a copy for a
    /// block matrix, llama.cpp's conversion for a split one (lossless), `mx.dequantize`'s values
    /// in the scales' float type for an MLX affine one, on the current pool's threads.
    pub fn to_ggml_blocks(&self, rows: usize, cols: usize, out: &mut [u8]) -> Result<(), QuantError> {
        let row_bytes = self.check_shape(rows, cols)?;
        self.check_output(rows * row_bytes, out.len(), "bytes")?;
        match *self {
            Matrix::Blocks { bytes, .. } => out.copy_from_slice(bytes),
            Matrix::Mxfp4Split { nibbles, scales, row_stride } if row_bytes > 0 => {
                let rows = SplitRows { nibbles, scales, row_stride, groups: row_bytes / (1 + MXFP4_GROUP_BYTES) };
                // About 64 KiB of blocks per task.
                let rows_per_task = (65_536 / row_bytes).max(1);
                crate::pool::for_each_chunk_mut(out, rows_per_task * row_bytes, |t, out| {
                    split_rows_to_ggml(rows, t * rows_per_task, out);
                });
            }
            Matrix::Mxfp4Split { .. } => {}
            Matrix::MlxAffine { weight, scales, biases, params } => {
                params.dequantize_exact_to_bytes(weight, scales, biases, out)?
            }
            Matrix::Repacked(view) => view.unpack(out),
        }
        Ok(())
    }

    /// An output of `actual` `unit` where the shape implies `expected`.
    fn check_output(&self, expected: usize, actual: usize, unit: &'static str) -> Result<(), QuantError> {
        if actual == expected {
            return Ok(());
        }
        Err(QuantError::MatmulOperand { dtype: self.dtype(), operand: "y", expected, actual, unit })
    }

    /// This matrix's rows as the block kernels read them (a repacked matrix has its own kernels:
    /// `crate::repack::multiply`).
    pub(crate) fn source(&self, cols: usize) -> RowSource<'a> {
        match *self {
            Matrix::Blocks { bytes, .. } => RowSource::Blocks(bytes),
            Matrix::Repacked(_) => unreachable!("repacked matrices are multiplied by crate::repack"),
            Matrix::Mxfp4Split { nibbles, scales, row_stride } => RowSource::Mxfp4Split {
                rows: SplitRows { nibbles, scales, row_stride, groups: cols / MXFP4_GROUP },
                in_place: crate::kernels::selected(DType::MXFP4).kernels.split_i16,
            },
            Matrix::MlxAffine { weight, scales, biases, params } => {
                // `check_shape` has accepted these parameters for `cols`.
                let row = params.row_bytes(cols).expect("an MLX affine matrix's shape is checked before its products");
                RowSource::MlxAffine { weight, scales, biases, params, row }
            }
        }
    }
}

fn row_bytes(dtype: DType, cols: usize) -> Result<usize, QuantError> {
    let block_elems = dtype.block_elems();
    if !cols.is_multiple_of(block_elems) {
        return Err(QuantError::PartialBlockValues { dtype, len: cols, block_elems });
    }
    (cols / block_elems).checked_mul(dtype.block_bytes()).ok_or(QuantError::ShapeOverflow {
        dtype,
        rows: 1,
        cols,
        n: 1,
    })
}

fn split_groups(cols: usize) -> Result<usize, QuantError> {
    if !cols.is_multiple_of(MXFP4_GROUP) {
        return Err(QuantError::PartialBlockValues { dtype: DType::MXFP4, len: cols, block_elems: MXFP4_GROUP });
    }
    Ok(cols / MXFP4_GROUP)
}

/// A checked matrix's rows as the kernels read them (see [`Matrix::source`]).
#[derive(Clone, Copy)]
pub(crate) enum RowSource<'a> {
    Blocks(&'a [u8]),
    /// With the kernel that reads the rows in place for a few i16 activations, where this CPU
    /// has one (the others stage them as GGML blocks).
    Mxfp4Split {
        rows: SplitRows<'a>,
        in_place: Option<SplitKernel>,
    },
    MlxAffine {
        weight: &'a [u8],
        scales: &'a [u8],
        biases: &'a [u8],
        params: MlxAffine,
        row: AffineRowBytes,
    },
}

/// Rows staged at a time from a split matrix: a multiple of every kernel's row tile, and small
/// enough (16 × 1,530 bytes for GPT-OSS's 2,880 columns) to stay in L1 between the copy and the
/// kernel.
const STAGE_ROWS: usize = 16;

thread_local! {
    /// The rows a thread has staged, GGML MXFP4 blocks.
    static STAGED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl RowSource<'_> {
    /// `kernel` over rows `first..first + count` (each `row_bytes` once in GGML's layout) against
    /// `acts`, into `out` (`count × acts.len()`, row-major).
    pub(crate) fn apply(
        self,
        kernel: MatKernel,
        first: usize,
        count: usize,
        row_bytes: usize,
        acts: &[Activation<'_>],
        out: &mut [f32],
    ) {
        match self {
            RowSource::Blocks(bytes) => {
                kernel.apply(&bytes[first * row_bytes..][..count * row_bytes], row_bytes, acts, out);
            }
            RowSource::Mxfp4Split { rows, in_place: Some(split) }
                if rows.groups > 0
                    && acts.len() <= SPLIT_MAX_ACTS
                    && acts.iter().all(|a| a.q16.len() == 32 * rows.groups) =>
            {
                split(rows, first, acts, out);
            }
            RowSource::Mxfp4Split { rows, .. } => STAGED.with_borrow_mut(|staged| {
                staged.resize(STAGE_ROWS * row_bytes, 0);
                let n = acts.len();
                for (c, out) in out.chunks_mut(STAGE_ROWS * n).enumerate() {
                    let stage = &mut staged[..out.len() / n * row_bytes];
                    split_rows_to_ggml(rows, first + c * STAGE_ROWS, stage);
                    kernel.apply(stage, row_bytes, acts, out);
                }
            }),
            RowSource::MlxAffine { weight, scales, biases, params, row } => STAGED.with_borrow_mut(|staged| {
                staged.resize(STAGE_ROWS * row_bytes, 0);
                let n = acts.len();
                let AffineRowBytes { codes: code_bytes, scales: scale_bytes } = row;
                for (c, out) in out.chunks_mut(STAGE_ROWS * n).enumerate() {
                    let (row, rows) = (first + c * STAGE_ROWS, out.len() / n);
                    let stage = &mut staged[..rows * row_bytes];
                    params.groups_to_bytes(
                        &weight[row * code_bytes..][..rows * code_bytes],
                        &scales[row * scale_bytes..][..rows * scale_bytes],
                        &biases[row * scale_bytes..][..rows * scale_bytes],
                        stage,
                    );
                    kernel.apply(stage, row_bytes, acts, out);
                }
            }),
        }
    }
}

/// GGML MXFP4 blocks for rows `first..` of a split matrix (as many as `out` holds), as llama.cpp's
/// converter writes them: the scale byte, then the nibbles in GGML's order.
fn split_rows_to_ggml(rows: SplitRows<'_>, first: usize, out: &mut [u8]) {
    let groups = rows.groups;
    for (i, block_row) in out.chunks_exact_mut(groups * (1 + MXFP4_GROUP_BYTES)).enumerate() {
        let p = (first + i) * rows.row_stride * groups;
        let nib = &rows.nibbles[p * MXFP4_GROUP_BYTES..(p + groups) * MXFP4_GROUP_BYTES];
        crate::mxfp4::hf_blocks_to_ggml(nib, &rows.scales[p..p + groups], block_row);
    }
}

/// One group's 16 bytes of nibbles from HF's order (byte j: value 2j low, 2j + 1 high) to GGML's
/// (byte j: value j low, j + 16 high): the low and high nibbles of bytes 0..8 interleaved are
/// values 0..16, those of bytes 8..16 values 16..32.
#[cfg(target_arch = "x86_64")]
pub(crate) fn pairs_to_halves(hf: [u8; 16]) -> [u8; 16] {
    crate::kernels::mxfp4_pairs_to_halves(hf)
}

/// See the x86-64 version; the scalar reference elsewhere.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn pairs_to_halves(hf: [u8; 16]) -> [u8; 16] {
    pairs_to_halves_ref(hf)
}

/// [`pairs_to_halves`] one nibble at a time.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn pairs_to_halves_ref(hf: [u8; 16]) -> [u8; 16] {
    let nibble = |v: usize| (hf[v / 2] >> (4 * (v % 2))) & 0x0F;
    std::array::from_fn(|j| nibble(j) | (nibble(j + 16) << 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibble_reorder_equals_the_scalar_one() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..1000 {
            let hf: [u8; 16] = std::array::from_fn(|_| {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (state >> 56) as u8
            });
            assert_eq!(pairs_to_halves(hf), pairs_to_halves_ref(hf), "{hf:?}");
        }
        // Value v holds v: GGML byte j is then j | (j + 16) << 4 (mod 16 in each nibble).
        let hf: [u8; 16] = std::array::from_fn(|j| (((2 * j) % 16) | (((2 * j + 1) % 16) << 4)) as u8);
        assert_eq!(pairs_to_halves(hf), std::array::from_fn(|j| ((j % 16) | (((j + 16) % 16) << 4)) as u8));
    }

    #[test]
    fn split_views_check_their_lengths() {
        let (nibbles, scales) = (vec![0u8; 3 * 2 * 16], vec![0u8; 3 * 2]);
        let m = Matrix::Mxfp4Split { nibbles: &nibbles, scales: &scales, row_stride: 1 };
        assert_eq!(m.check_shape(3, 64), Ok(2 * 17));
        assert!(matches!(m.check_shape(4, 64), Err(QuantError::ComponentLength { component: "nibbles", .. })));
        assert!(matches!(m.check_shape(3, 48), Err(QuantError::PartialBlockValues { .. })));
        // Every other row: rows 0 and 2 of 3.
        let half = Matrix::Mxfp4Split { nibbles: &nibbles, scales: &scales, row_stride: 2 };
        assert_eq!(half.check_shape(2, 64), Ok(2 * 17));
        assert!(half.check_shape(3, 64).is_err());
        // Row 1 of the odd half is physical row 3: past the end.
        let Matrix::Mxfp4Split { nibbles, scales, .. } = m.rows(1, 1, 64).unwrap() else { unreachable!() };
        let odd_half = Matrix::Mxfp4Split { nibbles, scales, row_stride: 2 };
        assert!(odd_half.check_shape(1, 64).is_ok());
        assert!(odd_half.rows(1, 1, 64).is_err());
        assert!(m.rows(usize::MAX, 1, 64).is_err());
    }
}
