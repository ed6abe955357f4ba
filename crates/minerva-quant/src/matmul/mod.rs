//! Fused quantized matrix × vector (decode) and matrix × small matrix (prefill) products that never
//! materialise dequantized weights.
//!
//! The weights are `rows` rows of `cols` values of `dtype`, row-major, each row whole blocks (as a
//! GGUF tensor of shape `[cols, rows]` stores them). Activations are quantized on the fly the way
//! llama.cpp does it ([`activation_dtype`]): to Q8_0 for the 32-value block formats, to Q8_K for
//! the K-quants, and used as f32 for F32/F16/BF16 weights. Each block's dot product is then an
//! integer sum (AVX2 `maddubs`/`madd` on x86-64) scaled once per block in f32.
//!
//! * [`matvec`] / [`matmul`] — the fastest kernel this CPU has (AVX2+FMA+F16C where detected at run
//!   time, the scalar kernels otherwise).
//! * [`matvec_ref`] / [`matmul_ref`] — always the scalar kernels (same activation quantization).
//!
//! Work is split over rows with rayon in the *current* pool: call inside
//! [`rayon::ThreadPool::install`] to choose the thread count (a 1-thread pool runs on the calling
//! thread with no task splitting).
//!
//! ```
//! use minerva_core::DType;
//! use minerva_quant::{matvec, quantize};
//!
//! // Two rows of 32 weights, quantized to Q8_0; y = W·x.
//! let w: Vec<f32> = (0..64).map(|i| if i < 32 { 1.0 } else { -0.5 }).collect();
//! let mut bytes = vec![0u8; 2 * 34];
//! quantize(DType::Q8_0, &w, &mut bytes)?;
//! let x = vec![1.0f32; 32];
//! let mut y = [0.0f32; 2];
//! matvec(DType::Q8_0, &bytes, 2, 32, &x, &mut y)?;
//! // Close, not exact: the weight scale 1/127 is stored as f16.
//! assert!((y[0] - 32.0).abs() < 0.01 && (y[1] + 16.0).abs() < 0.01);
//!
//! let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
//! pool.install(|| matvec(DType::Q8_0, &bytes, 2, 32, &x, &mut y))?;
//! # Ok::<(), minerva_quant::QuantError>(())
//! ```

mod ref_;

use half::f16;
use minerva_core::DType;
use rayon::prelude::*;

use crate::{QuantError, quantize_row_q8_0_ref, quantize_row_q8_k_ref};

/// One activation vector as the dot kernels read it.
///
/// For F32/F16/BF16 weights only `x` is used; for the others `qs` holds the quantized values
/// (i8 bit patterns), `d` one scale per activation block, and `sums` the sums of the quants: one
/// per 32-value block for Q8_0, Q8_K's `bsums` (one per 16 values) for Q8_K. For Q8_0, `ds`
/// holds `d · sum` per block (what a weight block's minimum multiplies, as in llama.cpp's Q8_1).
pub(crate) struct Activation<'a> {
    pub(crate) x: &'a [f32],
    pub(crate) d: Vec<f32>,
    pub(crate) qs: Vec<u8>,
    pub(crate) sums: Vec<i32>,
    pub(crate) ds: Vec<f32>,
    pub(crate) q16: Vec<i16>,
}

/// A row kernel: the dot product of one weight row (whole blocks) with one activation whose
/// length matches. Kernels zip whole blocks, so a mismatch could only shorten the sum, never read
/// out of bounds; the public functions check every length first.
pub(crate) type DotKernel = fn(&[u8], &Activation<'_>) -> f32;

/// A tile kernel: every row of `weights` (whole rows of `row_bytes`) against every activation,
/// written row-major into `out` (rows × activations). It reads each weight block once for several
/// activations and each activation block once for several rows.
pub(crate) type TileKernel = fn(&[u8], usize, &[Activation<'_>], &mut [f32]);

/// The kernel [`run`] uses: a tile kernel where there is one, else a dot kernel per (row, activation).
#[derive(Clone, Copy)]
enum Kernel {
    Dot(DotKernel),
    Tile(TileKernel),
}

impl Kernel {
    fn apply(self, weights: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
        match self {
            Kernel::Tile(tile) => tile(weights, row_bytes, acts, out),
            Kernel::Dot(dot) => {
                for (y_row, w_row) in out.chunks_exact_mut(acts.len()).zip(weights.chunks_exact(row_bytes)) {
                    for (y, act) in y_row.iter_mut().zip(acts) {
                        *y = dot(w_row, act);
                    }
                }
            }
        }
    }
}

/// The format activations are converted to for weights of `dtype`: `F32` (used as given) for
/// F32/F16/BF16, `Q8_0` for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/MXFP4, `Q8_K` for Q2_K…Q6_K; `None` for
/// dtypes without a matmul kernel.
pub fn activation_dtype(dtype: DType) -> Option<DType> {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => Some(DType::F32),
        DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0 | DType::MXFP4 => Some(DType::Q8_0),
        DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K => Some(DType::Q8_K),
        _ => None,
    }
}

/// Whether [`matvec`]/[`matmul`] use a SIMD kernel for `dtype` on this CPU.
pub fn has_fast_matmul(dtype: DType) -> bool {
    fast_kernel(dtype, false).is_some()
}

/// Whether [`matmul_i16`] has i16-activation kernels for `dtype` (the 32-value block formats
/// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4); for other dtypes it is [`matmul`].
pub fn has_i16_matmul(dtype: DType) -> bool {
    ref_::kernel_i16(dtype).is_some()
}

fn fast_kernel(dtype: DType, wide: bool) -> Option<Kernel> {
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = crate::x86::avx2_tile_kernel(dtype, wide) {
        return Some(Kernel::Tile(kernel));
    }
    if wide {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = crate::x86::avx2_dot_kernel(dtype) {
        return Some(Kernel::Dot(kernel));
    }
    let _ = dtype;
    None
}

/// `y = W·x`: `weights` is `rows × cols` of `dtype` (row-major, whole blocks per row), `x` holds
/// `cols` values and `y` gets `rows`. Wrong lengths, or `cols` not a whole number of blocks, are
/// a [`QuantError`].
pub fn matvec(
    dtype: DType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), QuantError> {
    matmul(dtype, weights, rows, cols, x, 1, y)
}

/// `Y = X·Wᵀ` for `n` activation vectors: `xs` is `n × cols` row-major, `ys` gets `n × rows`
/// (row `j` is `W·xs[j]`). Each weight row is read from memory once for all `n` vectors.
pub fn matmul(
    dtype: DType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) -> Result<(), QuantError> {
    let kernel = fast_kernel(dtype, false).or_else(|| ref_::kernel(dtype).map(Kernel::Dot));
    run(dtype, kernel, false, weights, rows, cols, xs, n, ys)
}

/// [`matmul`] with activations quantized to **i16** (one f32 scale per 32 values) instead of
/// Q8_0, for the 32-value block formats ([`has_i16_matmul`]); other dtypes go to [`matmul`].
///
/// Q8_0 activations lose about 2⁻⁸ of each block's largest value per element, which is what
/// moves a small model's top-1 choice on near ties (SmolLM2: 97.9 % agreement with an f32
/// reference); i16 loses 2⁻¹⁶, as good as f32 for these weights, for about the same work per
/// block (two `madd` instead of `maddubs` + `madd`) and twice the activation bytes, which stay in
/// cache.
pub fn matmul_i16(
    dtype: DType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) -> Result<(), QuantError> {
    if !has_i16_matmul(dtype) {
        return matmul(dtype, weights, rows, cols, xs, n, ys);
    }
    let kernel = fast_kernel(dtype, true).or_else(|| ref_::kernel_i16(dtype).map(Kernel::Dot));
    run(dtype, kernel, true, weights, rows, cols, xs, n, ys)
}

/// [`matmul_i16`] with the scalar kernels only.
pub fn matmul_i16_ref(
    dtype: DType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) -> Result<(), QuantError> {
    if !has_i16_matmul(dtype) {
        return matmul_ref(dtype, weights, rows, cols, xs, n, ys);
    }
    run(dtype, ref_::kernel_i16(dtype).map(Kernel::Dot), true, weights, rows, cols, xs, n, ys)
}

/// [`matvec`] with the scalar kernels only.
pub fn matvec_ref(
    dtype: DType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), QuantError> {
    matmul_ref(dtype, weights, rows, cols, x, 1, y)
}

/// [`matmul`] with the scalar kernels only.
pub fn matmul_ref(
    dtype: DType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) -> Result<(), QuantError> {
    run(dtype, ref_::kernel(dtype).map(Kernel::Dot), false, weights, rows, cols, xs, n, ys)
}

/// Checks every length against the shape; returns the bytes per weight row.
fn check_shape(
    dtype: DType,
    weights: usize,
    rows: usize,
    cols: usize,
    xs: usize,
    n: usize,
    ys: usize,
) -> Result<usize, QuantError> {
    let block_elems = dtype.block_elems();
    if !cols.is_multiple_of(block_elems) {
        return Err(QuantError::PartialBlockValues { dtype, len: cols, block_elems });
    }
    let overflow = QuantError::ShapeOverflow { dtype, rows, cols, n };
    let row_bytes = (cols / block_elems).checked_mul(dtype.block_bytes()).ok_or(overflow.clone())?;
    let expected = [
        ("weights", row_bytes.checked_mul(rows), weights, "bytes"),
        ("x", cols.checked_mul(n), xs, "values"),
        ("y", rows.checked_mul(n), ys, "values"),
    ];
    for (operand, expected, actual, unit) in expected {
        let expected = expected.ok_or(overflow.clone())?;
        if expected != actual {
            return Err(QuantError::MatmulOperand { dtype, operand, expected, actual, unit });
        }
    }
    Ok(row_bytes)
}

#[allow(clippy::too_many_arguments)]
fn run(
    dtype: DType,
    kernel: Option<Kernel>,
    wide: bool,
    weights: &[u8],
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) -> Result<(), QuantError> {
    let (Some(kernel), Some(act_dtype)) = (kernel, activation_dtype(dtype)) else {
        return Err(QuantError::Unsupported { dtype, operation: "matmul" });
    };
    let row_bytes = check_shape(dtype, weights.len(), rows, cols, xs.len(), n, ys.len())?;
    if rows == 0 || n == 0 {
        return Ok(());
    }
    if cols == 0 {
        ys.fill(0.0);
        return Ok(());
    }
    let threads = rayon::current_num_threads();
    let acts: Vec<Activation<'_>> = if threads > 1 && n > 1 {
        xs.par_chunks_exact(cols).map(|x| quantize_activation(act_dtype, wide, x)).collect()
    } else {
        xs.chunks_exact(cols).map(|x| quantize_activation(act_dtype, wide, x)).collect()
    };
    // Several tasks per thread so that a slow (shared) core does not hold the others up, but each
    // at least 64 KiB of weights so that splitting costs little next to the streaming.
    let rows_per_task = rows.div_ceil(4 * threads).max((64 << 10) / row_bytes).max(1);
    let one_task = |(y, w): (&mut [f32], &[u8])| kernel.apply(w, row_bytes, &acts, y);
    // Results come out row-major (rows × n); n = 1 writes `ys` directly, otherwise transpose.
    let mut transposed = if n == 1 { Vec::new() } else { vec![0.0f32; rows * n] };
    let out: &mut [f32] = if n == 1 { &mut *ys } else { &mut transposed };
    if threads == 1 || rows_per_task >= rows {
        one_task((out, weights));
    } else {
        out.par_chunks_mut(rows_per_task * n).zip(weights.par_chunks(rows_per_task * row_bytes)).for_each(one_task);
    }
    if n > 1 {
        for (r, row) in transposed.chunks_exact(n).enumerate() {
            for (j, &v) in row.iter().enumerate() {
                ys[j * rows + r] = v;
            }
        }
    }
    Ok(())
}

/// Quantizes one activation vector (a whole number of activation blocks: checked by the caller,
/// since every weight block size is a multiple of its activation block size). `wide` (only with
/// `act_dtype` Q8_0): i16 quants instead, `d = amax / 32767` kept in f32.
fn quantize_activation(act_dtype: DType, wide: bool, x: &[f32]) -> Activation<'_> {
    let mut act = Activation { x, d: Vec::new(), qs: Vec::new(), sums: Vec::new(), ds: Vec::new(), q16: Vec::new() };
    if act_dtype == DType::F32 {
        return act;
    }
    if wide {
        act.q16.reserve(x.len());
        for block in x.chunks_exact(32) {
            let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = amax / 32767.0;
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            let start = act.q16.len();
            act.q16.extend(block.iter().map(|v| (v * id).round() as i16));
            let sum: i32 = act.q16[start..].iter().map(|&q| i32::from(q)).sum();
            act.d.push(d);
            act.sums.push(sum);
            act.ds.push(d * sum as f32);
        }
        return act;
    }
    let block_elems = act_dtype.block_elems();
    let block_bytes = act_dtype.block_bytes();
    let blocks = x.len() / block_elems;
    let mut bytes = vec![0u8; blocks * block_bytes];
    act.qs.reserve(x.len());
    if act_dtype == DType::Q8_0 {
        quantize_row_q8_0_ref(x, &mut bytes).expect("whole Q8_0 blocks, checked by the caller");
        for block in bytes.chunks_exact(block_bytes) {
            let (d, sum) = (
                f16::from_le_bytes([block[0], block[1]]).to_f32(),
                block[2..].iter().map(|&q| i32::from(q as i8)).sum(),
            );
            act.d.push(d);
            act.qs.extend_from_slice(&block[2..]);
            act.sums.push(sum);
            act.ds.push(d * sum as f32);
        }
    } else {
        quantize_row_q8_k_ref(x, &mut bytes).expect("whole Q8_K blocks, checked by the caller");
        for block in bytes.chunks_exact(block_bytes) {
            act.d.push(f32::from_le_bytes([block[0], block[1], block[2], block[3]]));
            act.qs.extend_from_slice(&block[4..260]);
            act.sums.extend(block[260..].chunks_exact(2).map(|s| i32::from(i16::from_le_bytes([s[0], s[1]]))));
        }
    }
    act
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_errors_name_the_operand() {
        let w = vec![0u8; 2 * 34];
        let mut y = [0.0f32; 2];
        assert_eq!(
            matvec(DType::Q8_0, &w, 2, 32, &[0.0; 31], &mut y),
            Err(QuantError::MatmulOperand {
                dtype: DType::Q8_0,
                operand: "x",
                expected: 32,
                actual: 31,
                unit: "values"
            })
        );
        assert_eq!(
            matvec(DType::Q8_0, &w, 2, 48, &[0.0; 48], &mut y),
            Err(QuantError::PartialBlockValues { dtype: DType::Q8_0, len: 48, block_elems: 32 })
        );
        assert!(matches!(
            matvec(DType::Q8_0, &w, usize::MAX, 64, &[0.0; 64], &mut y),
            Err(QuantError::ShapeOverflow { .. })
        ));
        assert!(matches!(matvec(DType::Q8_K, &w, 2, 256, &[0.0; 256], &mut y), Err(QuantError::Unsupported { .. })));
    }
}
