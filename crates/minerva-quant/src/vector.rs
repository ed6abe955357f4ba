//! f32 vector kernels for the parts of a forward pass that are not matrix products over weights:
//! attention's query · key dot products and its probability-weighted sums of values, and `e^x` for
//! softmax and the gated activations.
//!
//! [`dot`], [`dots`], [`axpy`], [`weighted_sum`] and [`exp`] use the best instruction set this
//! CPU has (AVX2 + FMA on x86-64, detected once; [`vector_isa`] names it), [`dot_ref`] and
//! [`axpy_ref`] the scalar loops. Both work over the common length of their operands. The fast [`dot`] sums in a
//! different order than [`dot_ref`], so the two agree to f32 rounding, not bit for bit; [`axpy`]
//! equals [`axpy_ref`] bit for bit (no fused multiply-add: it moved a near tie of SmolLM2's top-1
//! against transformers).
//!
//! ```
//! let (a, b) = ([1.0f32, 2.0, 3.0], [4.0f32, 5.0, 6.0]);
//! assert_eq!(minerva_quant::vector::dot(&a, &b), 32.0);
//! let mut y = [1.0f32; 3];
//! minerva_quant::vector::axpy(&mut y, 2.0, &a);
//! assert_eq!(y, [3.0, 5.0, 7.0]);
//! ```

use crate::kernels;

/// `Σ a[i]·b[i]` over the common length.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    (kernels::vector_kernels().dot)(a, b)
}

/// `out[j] = x · rows[j·len..(j + 1)·len]` with `len = x.len()`, over as many whole rows as
/// `rows` holds for `out` (zeros past them): attention's query against its keys, several keys at
/// a time. Within the same bound of the exact sum as [`dot`], but in an order of its own; a row's
/// value depends only on `x` and that row (not on where it sits or on its neighbours), so
/// attention over keys split into blocks gives each key the score it gets in one call.
pub fn dots(out: &mut [f32], x: &[f32], rows: &[f32]) {
    (kernels::vector_kernels().dots)(out, x, rows)
}

/// [`dots`] over rows of f16 values (an f16 KV cache's keys where they lie): bit for bit [`dots`]
/// of the rows widened to f32 (widening is exact), without writing the widened rows anywhere —
/// with AVX-512 and F16C each chunk is widened in its register; elsewhere a block of rows at a
/// time on the stack.
///
/// ```
/// use half::f16;
/// let keys: Vec<f16> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|&v| f16::from_f32(v)).collect();
/// let mut scores = [0.0f32; 2];
/// minerva_quant::vector::dots_f16(&mut scores, &[1.0, 1.0], &keys);
/// assert_eq!(scores, [3.0, 7.0]);
/// ```
pub fn dots_f16(out: &mut [f32], x: &[f32], rows: &[half::f16]) {
    (kernels::vector_kernels().dots_f16)(out, x, rows)
}

/// [`dots_f16`] of each query of `xs` into its entry of `outs`, over the same rows: bit for bit
/// those calls, in one where the kernels do better with the queries together (AVX-512 with
/// F16C widens each chunk of a row once for up to four queries: the query heads that share a KV
/// head).
///
/// ```
/// use half::f16;
/// let keys: Vec<f16> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|&v| f16::from_f32(v)).collect();
/// let (mut a, mut b) = ([0.0f32; 2], [0.0f32; 2]);
/// minerva_quant::vector::dots_many_f16(&mut [&mut a, &mut b], &[&[1.0, 1.0], &[1.0, 0.0]], &keys);
/// assert_eq!((a, b), ([3.0, 7.0], [1.0, 3.0]));
/// ```
pub fn dots_many_f16(outs: &mut [&mut [f32]], xs: &[&[f32]], rows: &[half::f16]) {
    let kernels = kernels::vector_kernels();
    match kernels.dots_many_f16 {
        Some(dots_many) => dots_many(outs, xs, rows),
        None => {
            for (out, x) in outs.iter_mut().zip(xs) {
                (kernels.dots_f16)(out, x, rows);
            }
        }
    }
}

/// Keys per group of [`transpose_keys`]' layout.
pub const KEY_GROUP: usize = 16;

/// Values [`transpose_keys`] writes for `rows` keys of `len` values: whole groups of
/// [`KEY_GROUP`], or `None` if that overflows `usize`.
pub fn transposed_keys_len(rows: usize, len: usize) -> Option<usize> {
    rows.div_ceil(KEY_GROUP).checked_mul(KEY_GROUP)?.checked_mul(len)
}

/// The whole rows of `rows` (keys of `len` values) as [`dots_transposed`] reads them: groups of
/// [`KEY_GROUP`] keys, each dimension-major — value `d` of key `k` of group `g` at
/// `(g·len + d)·16 + k` — and a last group's missing keys zeros.
///
/// ```
/// let keys = [1.0f32, 2.0, 3.0, 4.0]; // two keys of two values
/// let mut laid = vec![f32::NAN; minerva_quant::vector::transposed_keys_len(2, 2).unwrap()];
/// minerva_quant::vector::transpose_keys(&keys, 2, &mut laid);
/// assert_eq!((&laid[..3], laid[15], &laid[16..19]), (&[1.0, 3.0, 0.0][..], 0.0, &[2.0, 4.0, 0.0][..]));
/// ```
///
/// # Panics
///
/// If `out` is shorter than [`transposed_keys_len`] of those rows.
pub fn transpose_keys(rows: &[f32], len: usize, out: &mut [f32]) {
    if len == 0 {
        return;
    }
    let kernel = kernels::vector_kernels().transpose;
    let count = rows.len() / len;
    let needed = transposed_keys_len(count, len).expect("a length that fits in the slice");
    for (keys, laid) in rows[..count * len].chunks(KEY_GROUP * len).zip(out[..needed].chunks_exact_mut(KEY_GROUP * len))
    {
        let n = keys.len() / len;
        if n < KEY_GROUP {
            laid.fill(0.0);
        }
        let (dims, _) = laid.as_chunks_mut::<KEY_GROUP>();
        // Up to 16 dimensions a call: the transpose kernel's rows are one dimension's keys.
        for (strip, dims) in dims.chunks_mut(16).enumerate() {
            let count = dims.len();
            let mut dst: [&mut [f32]; 16] = Default::default();
            for (dst, dim) in dst.iter_mut().zip(dims.iter_mut()) {
                *dst = &mut dim[..n];
            }
            kernel(keys, n, len, 16 * strip, &mut dst[..count]);
        }
    }
}

/// Whether [`dots_transposed`] has a kernel of its own on this CPU for queries of `len` values
/// (AVX-512F, `len` 16, 32, 48, 64, 96, 128, 192 or 256); elsewhere it takes each key back out of
/// the layout, which only a test wants.
pub fn has_dots_transposed(len: usize) -> bool {
    kernels::vector_kernels().dots_transposed.is_some_and(|kernel| kernel.fits(len))
}

/// For each query `q`: `outs[q][i] = xs[q] · key firsts[q] + i` over keys laid out by
/// [`transpose_keys`], bit for bit [`dots`] of `xs[q]` with that key as a row: attention's scores
/// for many queries against one block of keys, where [`dots`]' per-key sum of lanes would cost
/// more than the products (the queries of a prefill). Keys past those laid out give zeros, as
/// [`dots`] does past its rows.
///
/// ```
/// use minerva_quant::vector::{dots, dots_transposed, transpose_keys, transposed_keys_len};
/// let keys: Vec<f32> = (0..5 * 16).map(|i| (i % 7) as f32 - 3.0).collect(); // 5 keys of 16
/// let mut laid = vec![0.0; transposed_keys_len(5, 16).unwrap()];
/// transpose_keys(&keys, 16, &mut laid);
/// let x = [0.5f32; 16];
/// let (mut scores, mut expected) = ([0.0f32; 3], [0.0f32; 3]);
/// dots_transposed(&mut [&mut scores], &[&x], &[2], &laid); // keys 2, 3, 4
/// dots(&mut expected, &x, &keys[2 * 16..]);
/// assert_eq!(scores, expected);
/// ```
///
/// # Panics
///
/// If `outs`, `xs` and `firsts` differ in length.
pub fn dots_transposed(outs: &mut [&mut [f32]], xs: &[&[f32]], firsts: &[usize], keys: &[f32]) {
    assert!(outs.len() == xs.len() && xs.len() == firsts.len(), "one output and one first key per query");
    let Some(len) = xs.first().map(|x| x.len()) else { return };
    let groups = KEY_GROUP.checked_mul(len).and_then(|group| keys.len().checked_div(group)).unwrap_or(0);
    let laid = groups * KEY_GROUP;
    // Every query within the keys laid out, of one length, and a kernel for it; or key by key.
    let within =
        outs.iter().zip(firsts).all(|(out, &first)| first.checked_add(out.len()).is_some_and(|end| end <= laid));
    match kernels::vector_kernels().dots_transposed {
        Some(kernel) if within && kernel.fits(len) && xs.iter().all(|x| x.len() == len) => {
            (kernel.dots)(outs, xs, firsts, keys)
        }
        _ => {
            let dots = kernels::vector_kernels().dots;
            for ((out, x), &first) in outs.iter_mut().zip(xs).zip(firsts) {
                let len = x.len();
                let mut key = vec![0.0f32; len];
                for (i, score) in out.iter_mut().enumerate() {
                    let k = first.saturating_add(i);
                    if k >= laid || len == 0 {
                        *score = 0.0;
                        continue;
                    }
                    let group = &keys[k / KEY_GROUP * KEY_GROUP * len..][..KEY_GROUP * len];
                    for (d, value) in key.iter_mut().enumerate() {
                        *value = group[d * KEY_GROUP + k % KEY_GROUP];
                    }
                    dots(std::slice::from_mut(score), x, &key);
                }
            }
        }
    }
}

/// `out[i] = values[i]` as f32 (exact) over the common length: an f16 KV cache's block of keys or
/// values widened for the kernels that read f32 (with F16C 8 values an instruction).
pub fn widen_f16(values: &[half::f16], out: &mut [f32]) {
    (kernels::vector_kernels().widen_f16)(values, out)
}

/// Asks the CPU to start loading `values` into its L2 cache (x86-64: `prefetcht1` per cache line;
/// elsewhere nothing): a hint that changes no result, for data the caller reads soon from places
/// too scattered for the hardware prefetcher to guess (a paged KV cache's next block).
pub fn prefetch<T: bytemuck::NoUninit>(values: &[T]) {
    #[cfg(target_arch = "x86_64")]
    kernels::prefetch_l2(bytemuck::cast_slice(values));
    #[cfg(not(target_arch = "x86_64"))]
    let _ = values;
}

/// Whether [`dots_f16`] and [`weighted_sums_add_f16`] widen f16 values in registers on this CPU
/// (AVX2 or AVX-512 with F16C). Where they do not, each call widens its rows into a buffer, so a
/// caller that reads the same rows for several queries does better to widen them once itself.
pub fn f16_in_registers() -> bool {
    kernels::vector_kernels().f16_in_registers
}

/// `y[i] += a·x[i]` over the common length.
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    (kernels::vector_kernels().axpy)(y, a, x)
}

/// `x[i] = e^x[i]`. With AVX2 + FMA a polynomial kernel, within 2 ulp of the exact value for
/// results above `f32::MIN_POSITIVE`; +∞ above ln(`f32::MAX`), 0 far below, NaN kept. A value's
/// result does not depend on its position or the slice's length.
pub fn exp(xs: &mut [f32]) {
    (kernels::vector_kernels().exp)(xs)
}

/// `out[i] = Σ_j weights[j]·rows[j·len + i]` with `len = out.len()`, over as many whole rows as
/// `rows` holds for `weights`: bit for bit [`axpy`] of each row in turn onto zeros (attention's
/// probability-weighted sum of values), faster, as the outputs stay in registers.
pub fn weighted_sum(out: &mut [f32], weights: &[f32], rows: &[f32]) {
    out.fill(0.0);
    weighted_sum_add(out, weights, rows)
}

/// [`weighted_sum`] added onto `out`: bit for bit [`axpy`] of each row in turn onto `out`, so a
/// sum over many rows may be taken a block of rows at a time (attention over a block of keys
/// that stays in cache while several queries meet it) with the roundings of one pass.
pub fn weighted_sum_add(out: &mut [f32], weights: &[f32], rows: &[f32]) {
    (kernels::vector_kernels().weighted_sum_add)(out, weights, rows)
}

/// [`weighted_sum_add`] for several queries over the same rows: `outs[q]` gets `weights[q]`'s sum
/// (every `outs[q]` as long as the first). Bit for bit the same as one call per query, faster
/// with AVX-512, where the queries' sums overlap (attention's query heads that share a KV head).
pub fn weighted_sums_add(outs: &mut [&mut [f32]], weights: &[&[f32]], rows: &[f32]) {
    (kernels::vector_kernels().weighted_sums_add)(outs, weights, rows)
}

/// [`weighted_sums_add`] over rows of f16 values (an f16 KV cache's values where they lie): bit
/// for bit [`weighted_sums_add`] of the rows widened to f32, without writing them anywhere.
pub fn weighted_sums_add_f16(outs: &mut [&mut [f32]], weights: &[&[f32]], rows: &[half::f16]) {
    (kernels::vector_kernels().weighted_sums_add_f16)(outs, weights, rows)
}

/// [`weighted_sums_add`] with the scalar loops.
pub fn weighted_sums_add_ref(outs: &mut [&mut [f32]], weights: &[&[f32]], rows: &[f32]) {
    (kernels::SCALAR_VECTOR.weighted_sums_add)(outs, weights, rows)
}

/// Softmax of `scale · xs[i]` in place; `sink`, if any, is one more logit in the total whose
/// probability is not written (attention sinks). With AVX2 + FMA: [`exp`]'s polynomial and the
/// total summed in 8 lanes, so it agrees with [`softmax_ref`] to a few ulp, not bit for bit.
///
/// ```
/// let mut p = [1.0f32, 2.0, 3.0];
/// minerva_quant::vector::softmax(&mut p, 1.0, None);
/// assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6 && p[2] > p[1] && p[1] > p[0]);
/// ```
pub fn softmax(xs: &mut [f32], scale: f32, sink: Option<f32>) {
    (kernels::vector_kernels().softmax)(xs, scale, sink)
}

/// Columns `first_col..` of `src` (`rows × cols`, row-major) transposed into `dst`: one row of
/// `rows` values per column, as many columns as `dst` holds (`dst.len() / rows`).
///
/// ```
/// let src = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2 × 3
/// let mut dst = [0.0f32; 6];
/// minerva_quant::vector::transpose(&src, 2, 3, 0, &mut dst);
/// assert_eq!(dst, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
/// ```
pub fn transpose(src: &[f32], rows: usize, cols: usize, first_col: usize, dst: &mut [f32]) {
    contiguous(kernels::vector_kernels().transpose, src, rows, cols, first_col, dst)
}

/// [`transpose`] into rows that need not be contiguous: `dst[k]` (at least `rows` long; only its
/// first `rows` values are written) gets column `first_col + k` of `src`. Each activation's row
/// of a block of a matmul's output, for example, lies in its own part of the output.
///
/// ```
/// let src = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2 × 3
/// let (mut a, mut b) = ([0.0f32; 3], [0.0f32; 2]);
/// minerva_quant::vector::transpose_into_rows(&src, 2, 3, 1, &mut [&mut a, &mut b]);
/// assert_eq!((a, b), ([2.0, 5.0, 0.0], [3.0, 6.0]));
/// ```
///
/// # Panics
///
/// If `dst` has more rows than `src` has columns from `first_col`, or a row shorter than `rows`.
pub fn transpose_into_rows(src: &[f32], rows: usize, cols: usize, first_col: usize, dst: &mut [&mut [f32]]) {
    (kernels::vector_kernels().transpose)(src, rows, cols, first_col, dst)
}

/// [`transpose`] one value at a time (in square tiles).
pub fn transpose_ref(src: &[f32], rows: usize, cols: usize, first_col: usize, dst: &mut [f32]) {
    contiguous(kernels::SCALAR_VECTOR.transpose, src, rows, cols, first_col, dst)
}

/// [`transpose_into_rows`] one value at a time (in square tiles).
pub fn transpose_into_rows_ref(src: &[f32], rows: usize, cols: usize, first_col: usize, dst: &mut [&mut [f32]]) {
    (kernels::SCALAR_VECTOR.transpose)(src, rows, cols, first_col, dst)
}

/// A transpose kernel into contiguous `dst`, handed its rows 16 at a time (no allocation).
fn contiguous(kernel: kernels::TransposeFn, src: &[f32], rows: usize, cols: usize, first_col: usize, dst: &mut [f32]) {
    const GROUP: usize = 16;
    if rows == 0 {
        return;
    }
    let whole = dst.len() / rows * rows;
    for (g, group) in dst[..whole].chunks_mut(GROUP * rows).enumerate() {
        let count = group.len() / rows;
        let mut parts = group.chunks_exact_mut(rows);
        let mut slices: [&mut [f32]; GROUP] = std::array::from_fn(|_| parts.next().unwrap_or_default());
        kernel(src, rows, cols, first_col + GROUP * g, &mut slices[..count]);
    }
}

/// [`softmax`] with the scalar loops and libm's `exp`.
pub fn softmax_ref(xs: &mut [f32], scale: f32, sink: Option<f32>) {
    (kernels::SCALAR_VECTOR.softmax)(xs, scale, sink)
}

/// [`weighted_sum`] with the scalar loops.
pub fn weighted_sum_ref(out: &mut [f32], weights: &[f32], rows: &[f32]) {
    out.fill(0.0);
    weighted_sum_add_ref(out, weights, rows)
}

/// [`weighted_sum_add`] with the scalar loops.
pub fn weighted_sum_add_ref(out: &mut [f32], weights: &[f32], rows: &[f32]) {
    (kernels::SCALAR_VECTOR.weighted_sum_add)(out, weights, rows)
}

/// [`exp`] with libm, one value at a time.
pub fn exp_ref(xs: &mut [f32]) {
    (kernels::SCALAR_VECTOR.exp)(xs)
}

/// [`dot`] with the scalar loop (summed in order).
pub fn dot_ref(a: &[f32], b: &[f32]) -> f32 {
    (kernels::SCALAR_VECTOR.dot)(a, b)
}

/// [`axpy`] with the scalar loop.
pub fn axpy_ref(y: &mut [f32], a: f32, x: &[f32]) {
    (kernels::SCALAR_VECTOR.axpy)(y, a, x)
}

/// The instruction set [`dot`], [`axpy`] and [`exp`] use on this CPU (`"scalar"` without SIMD).
pub fn vector_isa() -> &'static str {
    kernels::vector_kernels().isa
}
