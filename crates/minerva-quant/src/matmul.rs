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
//! Work is split over rows on the *current* [`ComputePool`](crate::ComputePool): call inside
//! [`ComputePool::install`](crate::ComputePool::install) to choose the thread count (a 1-thread
//! pool runs on the calling thread with no task splitting; without one, the process-wide pool).
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
//! let pool = minerva_quant::ComputePool::new(2)?;
//! pool.install(|| matvec(DType::Q8_0, &bytes, 2, 32, &x, &mut y))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::QuantError;
use crate::activation::{Activation, Buffers};
use crate::kernels::{self, MatKernel};
use crate::matrix::{Matrix, RowSource};
use crate::pool;
use crate::repack;
use crate::vector;
use minerva_core::DType;

/// The format activations are converted to for weights of `dtype`: `F32` (used as given) for
/// F32/F16/BF16, `Q8_0` for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/MXFP4, `Q8_K` for Q2_K…Q6_K; `None` for
/// dtypes without a matmul kernel.
pub fn activation_dtype(dtype: DType) -> Option<DType> {
    kernels::reference(dtype).activation
}

/// Whether [`matvec`]/[`matmul`] use a SIMD kernel for `dtype` on this CPU.
pub fn has_fast_matmul(dtype: DType) -> bool {
    kernels::cpu_kernels(dtype).matmul.is_some_and(|isa| isa != kernels::SCALAR)
}

/// Whether [`matmul_i16`] has i16-activation kernels for `dtype` (the 32-value block formats
/// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4); for other dtypes it is [`matmul`].
pub fn has_i16_matmul(dtype: DType) -> bool {
    kernels::reference(dtype).matmul_i16.is_some()
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
    run(Matrix::Blocks { dtype, bytes: weights }, kernels::selected(dtype).kernels.matmul, false, rows, cols, xs, n, ys)
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
    matmul_i16_matrix(Matrix::Blocks { dtype, bytes: weights }, rows, cols, xs, n, ys)
}

/// [`matmul_i16`] of any [`Matrix`]: a split MXFP4 matrix (HF's or MLX's layout, read in place)
/// gives the values its conversion to GGML blocks would.
pub fn matmul_i16_matrix(
    matrix: Matrix<'_>,
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) -> Result<(), QuantError> {
    let (kernel, i16) = i16_kernel(&kernels::selected(matrix.dtype()).kernels);
    run(matrix, kernel, i16, rows, cols, xs, n, ys)
}

/// A row's kernel for [`matmul_i16`] and whether it takes i16 activations: its i16 kernel where
/// the format has one ([`has_i16_matmul`]), else its [`matmul`] kernel.
fn i16_kernel(row: &kernels::Kernels) -> (Option<MatKernel>, bool) {
    if has_i16_matmul(row.dtype) { (row.matmul_i16, true) } else { (row.matmul, false) }
}

/// [`matmul`] (or, with `i16`, [`matmul_i16`]) with the kernels of one instruction set only:
/// `isa` is one of [`crate::detected_isas`] (`"scalar"` is [`matmul_ref`]); where that ISA has no
/// kernel for `dtype` the scalar one runs. For testing and benchmarking every path a CPU has
/// against the others; an ISA this CPU does not run is [`QuantError::UnknownIsa`].
#[allow(clippy::too_many_arguments)]
pub fn matmul_with_isa(
    isa: &str,
    i16: bool,
    dtype: DType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) -> Result<(), QuantError> {
    let row = kernels::isa_only(isa, dtype).ok_or_else(|| QuantError::UnknownIsa { isa: isa.to_string() })?;
    let (kernel, i16) = if i16 { i16_kernel(&row) } else { (row.matmul, false) };
    run(Matrix::Blocks { dtype, bytes: weights }, kernel, i16, rows, cols, xs, n, ys)
}

/// `ys = xs · Wᵀ` for repacked weights with the kernel of one instruction set only (`isa` as in
/// [`matmul_with_isa`]; `"scalar"` is the reference every ISA equals bit for bit).
pub fn matmul_repacked_with_isa(
    isa: &str,
    weights: &repack::Repacked,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) -> Result<(), QuantError> {
    let (rows, cols) = (weights.rows(), weights.cols());
    let row = kernels::isa_only(isa, weights.dtype()).ok_or_else(|| QuantError::UnknownIsa { isa: isa.to_string() })?;
    let matrix = weights.matrix();
    let row_bytes = check_shape(&matrix, rows, cols, xs.len(), n, ys.len())?;
    let kernel = Kernel::Repacked(repacked_kernel(&row)?);
    if rows == 0 || n == 0 || cols == 0 {
        ys.fill(0.0);
        return Ok(());
    }
    let acts = quantize_all(repack::activation_format(weights.dtype()), false, xs, cols, n);
    multiply_matrix(kernel, matrix, cols, rows, row_bytes, &acts, ys);
    Ok(())
}

/// One weight matrix of [`matmul_i16_each`]: `rows × cols` values and where its products go
/// (`n × rows`).
pub struct Product<'a> {
    /// `rows` rows of `cols` values.
    pub matrix: Matrix<'a>,
    /// Rows of `weights`: values per activation in `ys`.
    pub rows: usize,
    /// `n × rows` results, row `j` for activation `j`.
    pub ys: &'a mut [f32],
}

/// [`matmul_i16`] of each of `products` with the same `n` activation vectors `xs` (`n × cols`),
/// each vector quantized once per activation format rather than once per matrix (a layer's
/// query, key and value projections; its gate and up projections). Every product's values are
/// [`matmul_i16`]'s. Checks every shape before it computes anything.
pub fn matmul_i16_each(products: &mut [Product<'_>], cols: usize, xs: &[f32], n: usize) -> Result<(), QuantError> {
    for p in products.iter() {
        plan(p, cols, xs.len(), n)?;
    }
    if n == 0 {
        return Ok(());
    }
    if cols == 0 {
        products.iter_mut().for_each(|p| p.ys.fill(0.0));
        return Ok(());
    }
    // At most one set of activations per (format, i16) key, in `key_slot`'s places.
    let mut quantized: [Option<Quantized<'_>>; KEYS] = Default::default();
    for p in products.iter().filter(|p| p.rows > 0) {
        let (_, key, _) = plan(p, cols, xs.len(), n)?;
        quantized[key_slot(key)].get_or_insert_with(|| quantize_all(key.0, key.1, xs, cols, n));
    }
    let acts_for = |key| quantized[key_slot(key)].as_deref().unwrap_or_default();
    if n > 1 || pool::current_threads() == 1 {
        for p in products.iter_mut().filter(|p| p.rows > 0) {
            let (kernel, key, row_bytes) = plan(p, cols, xs.len(), n)?;
            multiply_matrix(kernel, p.matrix, cols, p.rows, row_bytes, acts_for(key), p.ys);
        }
        return Ok(());
    }
    // One activation on several threads: every product's tasks (as `multiply` splits each) in one
    // parallel loop, so that the threads meet once rather than once per product, and a thread
    // done with its share of one matrix starts on the next.
    let threads = pool::current_threads();
    let mut tasks: Vec<Task<'_>> = TASKS.take();
    for p in products.iter_mut().filter(|p| p.rows > 0) {
        let (kernel, key, row_bytes) = plan(p, cols, xs.len(), n)?;
        let acts = acts_for(key);
        match (kernel, p.matrix) {
            (Kernel::Repacked(kernel), Matrix::Repacked(view)) => {
                // Whole groups of 16 rows per task.
                let rows_per_task = rows_per_task(p.rows, row_bytes, threads).next_multiple_of(repack::GROUP_ROWS);
                for (t, ys) in p.ys.chunks_mut(rows_per_task).enumerate() {
                    tasks.push(Task::Repacked(kernel, view, t * rows_per_task, acts, ys));
                }
            }
            (Kernel::Blocks(kernel), matrix) => {
                let rows_per_task = rows_per_task(p.rows, row_bytes, threads);
                let source = matrix.source(cols);
                for (t, ys) in p.ys.chunks_mut(rows_per_task).enumerate() {
                    tasks.push(Task::Blocks(kernel, source, t * rows_per_task, row_bytes, acts, ys));
                }
            }
            (Kernel::Repacked(_), _) => unreachable!("a repacked kernel is planned for repacked matrices only"),
        }
    }
    pool::for_each_chunk_mut(&mut tasks, 1, |_, task| match &mut task[0] {
        Task::Blocks(kernel, source, first, row_bytes, acts, ys) => {
            source.apply(*kernel, *first, ys.len(), *row_bytes, acts, ys);
        }
        Task::Repacked(kernel, view, first, acts, ys) => repack::rows_into(*kernel, *view, *first, acts, ys),
    });
    TASKS.set(minerva_core::recycle_vec(tasks));
    Ok(())
}

/// One task of `matmul_i16_each`'s shared loop: a kernel, its matrix, its first row (and for
/// GGML rows their bytes per row), the activation and the rows' results (one per row).
enum Task<'a> {
    Blocks(MatKernel, RowSource<'a>, usize, usize, &'a [Activation<'a>], &'a mut [f32]),
    Repacked(repack::RepackedKernel, repack::RepackedView<'a>, usize, &'a [Activation<'a>], &'a mut [f32]),
}

thread_local! {
    /// `matmul_i16_each`'s task list, kept empty between calls for its allocation.
    static TASKS: std::cell::Cell<Vec<Task<'static>>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A product's kernel for [`matmul_i16_each`], its activations' (format, i16) key and its bytes per
/// row, or the error its shape or dtype gives.
fn plan(p: &Product<'_>, cols: usize, xs: usize, n: usize) -> Result<(Kernel, (DType, bool), usize), QuantError> {
    let row_bytes = check_shape(&p.matrix, p.rows, cols, xs, n, p.ys.len())?;
    let dtype = p.matrix.dtype();
    let row = &kernels::selected(dtype).kernels;
    if let Matrix::Repacked(_) = p.matrix {
        return Ok((Kernel::Repacked(repacked_kernel(row)?), (repack::activation_format(dtype), false), row_bytes));
    }
    let (kernel, i16) = i16_kernel(row);
    let (kernel, format) = kernel_and_format(dtype, kernel)?;
    Ok((Kernel::Blocks(kernel), (format, i16), row_bytes))
}

/// The kernel a product runs: block kernels over GGML rows, or a repacked layout's.
#[derive(Clone, Copy)]
enum Kernel {
    Blocks(MatKernel),
    Repacked(repack::RepackedKernel),
}

/// `row`'s repacked kernel, or [`QuantError::Unsupported`].
fn repacked_kernel(row: &kernels::Kernels) -> Result<repack::RepackedKernel, QuantError> {
    row.repacked.ok_or(QuantError::Unsupported { dtype: row.dtype, operation: "repacked matmul" })
}

/// `ys = acts · Wᵀ` with `kernel` over `matrix` (shapes checked by the caller).
fn multiply_matrix(
    kernel: Kernel,
    matrix: Matrix<'_>,
    cols: usize,
    rows: usize,
    row_bytes: usize,
    acts: &[Activation<'_>],
    ys: &mut [f32],
) {
    match (kernel, matrix) {
        (Kernel::Repacked(kernel), Matrix::Repacked(view)) => repack::multiply(kernel, view, acts, ys),
        (Kernel::Blocks(kernel), _) => multiply(kernel, matrix.source(cols), rows, row_bytes, acts, ys),
        (Kernel::Repacked(_), _) => unreachable!("a repacked kernel is planned for repacked matrices only"),
    }
}

/// The (format, i16) keys activations can have: [`activation_dtype`]'s three formats, with or
/// without i16, and Q8_1 (the repacked kernels' blocks).
const KEYS: usize = 8;

/// The place of a (format, i16) key among [`KEYS`].
fn key_slot((format, i16): (DType, bool)) -> usize {
    let f = match format {
        DType::F32 => 0,
        DType::Q8_0 => 1,
        DType::Q8_K => 2,
        DType::Q8_1 => 3,
        other => unreachable!("activations are F32, Q8_0, Q8_1 or Q8_K, not {other}"),
    };
    2 * f + usize::from(i16)
}

/// Rows per task when one activation's product with `rows` rows of `row_bytes` is shared out over
/// `threads` threads: several tasks per thread so that a slow (shared) core does not hold the
/// others up, each at least 16 KiB of weights so that claiming one costs little next to the
/// streaming, and of equal size (a multiple of the 4-row tiles) so that the threads finish
/// together.
fn rows_per_task(rows: usize, row_bytes: usize, threads: usize) -> usize {
    let tasks = (4 * threads).min((rows * row_bytes) >> 14).max(1);
    rows.div_ceil(tasks).next_multiple_of(4)
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
    let (kernel, i16) = i16_kernel(kernels::reference(dtype));
    run(Matrix::Blocks { dtype, bytes: weights }, kernel, i16, rows, cols, xs, n, ys)
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
    run(Matrix::Blocks { dtype, bytes: weights }, kernels::reference(dtype).matmul, false, rows, cols, xs, n, ys)
}

/// Checks every length against the shape; returns the bytes per weight row (in GGML's layout).
fn check_shape(
    matrix: &Matrix<'_>,
    rows: usize,
    cols: usize,
    xs: usize,
    n: usize,
    ys: usize,
) -> Result<usize, QuantError> {
    let row_bytes = matrix.check_shape(rows, cols)?;
    let dtype = matrix.dtype();
    let overflow = QuantError::ShapeOverflow { dtype, rows, cols, n };
    let expected = [("x", cols.checked_mul(n), xs, "values"), ("y", rows.checked_mul(n), ys, "values")];
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
    matrix: Matrix<'_>,
    kernel: Option<MatKernel>,
    i16: bool,
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) -> Result<(), QuantError> {
    let (kernel, act_dtype, i16) = match matrix {
        Matrix::Repacked(_) => {
            let dtype = matrix.dtype();
            (
                Kernel::Repacked(repacked_kernel(&kernels::selected(dtype).kernels)?),
                repack::activation_format(dtype),
                false,
            )
        }
        _ => {
            let (kernel, act_dtype) = kernel_and_format(matrix.dtype(), kernel)?;
            (Kernel::Blocks(kernel), act_dtype, i16)
        }
    };
    let row_bytes = check_shape(&matrix, rows, cols, xs.len(), n, ys.len())?;
    if rows == 0 || n == 0 {
        return Ok(());
    }
    if cols == 0 {
        ys.fill(0.0);
        return Ok(());
    }
    let acts = quantize_all(act_dtype, i16, xs, cols, n);
    multiply_matrix(kernel, matrix, cols, rows, row_bytes, &acts, ys);
    Ok(())
}

/// `kernel` and the format its activations are quantized to, or [`QuantError::Unsupported`].
fn kernel_and_format(dtype: DType, kernel: Option<MatKernel>) -> Result<(MatKernel, DType), QuantError> {
    match (kernel, activation_dtype(dtype)) {
        (Some(kernel), Some(format)) => Ok((kernel, format)),
        _ => Err(QuantError::Unsupported { dtype, operation: "matmul" }),
    }
}

/// The `n` vectors of `xs` (rows of `cols`) quantized to `format` (or i16), shared out over the
/// current pool's threads when there are several vectors.
fn quantize_all<'a>(format: DType, i16: bool, xs: &'a [f32], cols: usize, n: usize) -> Quantized<'a> {
    if n == 1 {
        return Quantized::One([Activation::quantize(format, i16, xs)]);
    }
    let mut acts: Vec<Activation<'a>> = ACTIVATIONS.take();
    let mut stock = BATCH_BUFFERS.take();
    acts.extend(xs.chunks_exact(cols).map(|x| Activation::holding(x, stock.pop().unwrap_or_default())));
    BATCH_BUFFERS.set(stock);
    if pool::current_threads() > 1 {
        pool::for_each_chunk_mut(&mut acts, 1, |_, act| act[0].quantize_in_place(format, i16));
    } else {
        acts.iter_mut().for_each(|act| act.quantize_in_place(format, i16));
    }
    Quantized::Many(acts)
}

/// The activations of one call: a decode's one inline, several in a vector whose allocation is
/// kept for the next call (a forward step allocates nothing here once warm).
enum Quantized<'a> {
    One([Activation<'a>; 1]),
    Many(Vec<Activation<'a>>),
}

impl<'a> std::ops::Deref for Quantized<'a> {
    type Target = [Activation<'a>];

    fn deref(&self) -> &[Activation<'a>] {
        match self {
            Quantized::One(one) => one,
            Quantized::Many(many) => many,
        }
    }
}

impl Drop for Quantized<'_> {
    fn drop(&mut self) {
        if let Quantized::Many(many) = self {
            let mut stock = BATCH_BUFFERS.take();
            stock.extend(many.iter_mut().map(Activation::take_buffers));
            BATCH_BUFFERS.set(stock);
            ACTIVATIONS.set(minerva_core::recycle_vec(std::mem::take(many)));
        }
    }
}

thread_local! {
    /// `quantize_all`'s vector of several activations, kept empty between calls.
    static ACTIVATIONS: std::cell::Cell<Vec<Activation<'static>>> = const { std::cell::Cell::new(Vec::new()) };
    /// The vectors of the rows of this thread's last batches, for its next (a prefill's rows take
    /// and give back theirs here, without `activation::FREE`'s lock). As many as the most
    /// rows of batches alive at once.
    static BATCH_BUFFERS: std::cell::Cell<Vec<Buffers>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `ys = acts · Wᵀ` (`ys` is `acts.len() × rows`) for non-empty shapes checked by the caller.
fn multiply(
    kernel: MatKernel,
    source: RowSource<'_>,
    rows: usize,
    row_bytes: usize,
    acts: &[Activation<'_>],
    ys: &mut [f32],
) {
    let (threads, n) = (pool::current_threads(), acts.len());
    // One activation, or one chunk of them: see `rows_per_task`.
    let rows_per_task = rows_per_task(rows, row_bytes, threads);
    if n > 1 {
        // A prefill, or a batch of decodes: tasks are (chunk of activations, block of weight
        // rows), their results going through a per-thread buffer straight into their tile of
        // `ys` (one block per thread count of 1: splitting its rows measured no faster), with no
        // `rows × n` buffer allocated per call. Claimed chunk by chunk rather than each task over
        // every chunk, so that a thread's tasks meet the same chunk in turn and a kernel can keep
        // its layout of it (`avx512_panel::LayoutKey`); in one loop, so that a thread done with a
        // chunk goes on to the next instead of waiting for the other threads at the end of each.
        // With several chunks, one block of rows per thread: the chunks, claimed in turn, keep
        // the threads evenly loaded, and quarter-size blocks measured slower (docs/benchmarks.md,
        // "One block of rows per thread in a prefill").
        let block_rows = match threads {
            1 => rows,
            _ if n > ACT_CHUNK => rows.div_ceil(threads).next_multiple_of(16),
            _ => rows_per_task,
        };
        pool::for_each_tile_mut(ys, rows, ACT_CHUNK, block_rows, |c, _, block| {
            let first = c * ACT_CHUNK;
            let chunk = &acts[first..(first + ACT_CHUNK).min(n)];
            chunk_into_columns(kernel, source, row_bytes, chunk, first, block);
        });
        return;
    }
    // One activation: results are `ys` itself.
    if threads == 1 || rows_per_task >= rows {
        source.apply(kernel, 0, rows, row_bytes, acts, ys);
    } else {
        pool::for_each_chunk_mut(ys, rows_per_task, |t, y| {
            source.apply(kernel, t * rows_per_task, y.len(), row_bytes, acts, y);
        });
    }
}

/// Activations per pass over a task's weight rows: a multiple of every tile's activation count;
/// 32 and 128 measured a little slower (docs/benchmarks.md).
const ACT_CHUNK: usize = 64;

/// `kernel` over the block's rows of `source` (`block.width()` rows) and one chunk of at most `ACT_CHUNK`
/// activations (`acts`, activations `first..` of the call), the results transposed into `block`
/// (its columns of `ys`, one row per activation): a kernel walks every activation for each group
/// of rows, so with a prefill's hundreds of activations (megabytes once quantized) each group
/// would stream them all from L3 again; a chunk stays in L2 while the task's rows pass over it.
/// Each (row, activation) pair's arithmetic is the same in any chunk, so results do not depend
/// on the chunking.
fn chunk_into_columns(
    kernel: MatKernel,
    source: RowSource<'_>,
    row_bytes: usize,
    acts: &[Activation<'_>],
    first: usize,
    mut block: pool::ColumnBlock<'_, f32>,
) {
    let (width, n, first_row) = (block.width(), acts.len(), block.first_column());
    let mut rows = block.rows_mut(first..first + n);
    let mut out: [&mut [f32]; ACT_CHUNK] = std::array::from_fn(|_| rows.next().unwrap_or_default());
    let out = &mut out[..n];
    CHUNK_OUT.with_borrow_mut(|buf| {
        // Not cleared: the kernel writes every value.
        buf.resize(width * n, 0.0);
        source.apply(kernel, first_row, width, row_bytes, acts, buf);
        // Transposed in 8 × 8 blocks (in SIMD) straight into each activation's row of `ys`.
        vector::transpose_into_rows(buf, width, n, 0, out);
    });
}

thread_local! {
    /// One chunk's row-major results (a task's rows × `ACT_CHUNK`), kept per thread: at prefill
    /// sizes a fresh buffer per call would be a `mmap` and `munmap` each time.
    static CHUNK_OUT: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
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

    /// Every field the kernels read, as bits.
    fn fields(act: &Activation<'_>) -> Vec<Vec<u64>> {
        let blocks = act.blocks.iter().flat_map(|b| {
            b.qs.iter().map(|&q| u64::from(q)).chain([
                u64::from(b.d.to_bits()),
                b.sum as u64,
                u64::from(b.ds.to_bits()),
            ])
        });
        vec![
            act.d.iter().map(|v| u64::from(v.to_bits())).collect(),
            act.qs.iter().map(|&v| u64::from(v)).collect(),
            act.sums.iter().map(|&v| v as u64).collect(),
            act.ds.iter().map(|v| u64::from(v.to_bits())).collect(),
            act.q16.iter().map(|&v| v as u64).collect(),
            act.bsums.iter().map(|&v| v as u64).collect(),
            blocks.collect(),
        ]
    }

    #[test]
    fn a_batch_in_the_last_batches_vectors_quantizes_as_fresh_activations() {
        // Batches of different formats, lengths and row counts one after another on this thread
        // (two alive at once, as `matmul_i16_each`'s keys are), each row against one activation
        // quantized alone: vectors left longer, or holding another format, must not show through.
        let values = |n: usize, seed: usize| -> Vec<f32> {
            (0..n).map(|i| ((i * 37 + seed * 101) % 211) as f32 / 17.0 - 6.0).collect()
        };
        let batches = [
            (DType::Q8_1, false, 512, 5),
            (DType::Q8_0, true, 256, 3),
            (DType::Q8_K, false, 768, 6),
            (DType::Q8_0, false, 256, 2),
        ];
        for (round, pair) in batches.windows(2).enumerate() {
            let xs: Vec<Vec<f32>> = pair.iter().map(|&(_, _, cols, n)| values(cols * n, round)).collect();
            let both: Vec<Quantized<'_>> = pair
                .iter()
                .zip(&xs)
                .map(|(&(format, i16, cols, n), xs)| quantize_all(format, i16, xs, cols, n))
                .collect();
            for (acts, (&(format, i16, cols, n), xs)) in both.iter().zip(pair.iter().zip(&xs)) {
                assert_eq!(acts.len(), n);
                for (act, x) in acts.iter().zip(xs.chunks_exact(cols)) {
                    assert_eq!(fields(act), fields(&Activation::quantize(format, i16, x)), "{format:?} i16 {i16}");
                }
            }
        }
    }
}
