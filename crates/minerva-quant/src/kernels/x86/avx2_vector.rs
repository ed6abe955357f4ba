//! f32 vector kernels (attention's dot products and weighted sums, `exp` for softmax and the
//! gated activations), 8 lanes with FMA.

use std::arch::x86_64::*;

use bytemuck::pod_read_unaligned;
use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::kernels::widened;

/// Horizontal sum of 8 lanes.
#[target_feature(enable = "avx2,fma")]
pub(super) fn sum_lanes(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)))
}

/// `Σ a[i]·b[i]` over the common length, in four 8-lane partial sums.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let len = a.len().min(b.len());
    let (a, b) = (&a[..len], &b[..len]);
    let load = |s: &[f32]| pod_read_unaligned::<__m256>(bytemuck::cast_slice(&s[..8]));
    let mut acc = [_mm256_setzero_ps(); 4];
    let (a32, a_rest) = a.as_chunks::<32>();
    let (b32, b_rest) = b.as_chunks::<32>();
    for (x, y) in a32.iter().zip(b32) {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(load(&x[8 * k..]), load(&y[8 * k..]), *acc);
        }
    }
    let (a8, a_tail) = a_rest.as_chunks::<8>();
    let (b8, b_tail) = b_rest.as_chunks::<8>();
    for (x, y) in a8.iter().zip(b8) {
        acc[0] = _mm256_fmadd_ps(load(x), load(y), acc[0]);
    }
    let total = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    sum_lanes(total) + a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum::<f32>()
}

/// `x · row` for each row of `rows` (`rows.len() / x.len()` whole rows, `out` zero past them),
/// eight rows at a time: each row's 8 lanes take the 8-value chunks in order by FMA, the rows'
/// lanes are then summed side by side (`((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))`), and
/// the products of a tail of `len % 8` values, summed in order, are added last (when there is
/// one). Every row goes through the same operations wherever it sits (a last group short of eight
/// is filled with copies of `x`), so a row's result depends on `x` and that row alone. One key at
/// a time, the horizontal sum of `dot_f32` made a chain of dependent shuffles and adds per key
/// that cost more than its FMAs.
#[target_feature(enable = "avx2,fma")]
pub(super) fn dots_f32(out: &mut [f32], x: &[f32], rows: &[f32]) {
    let len = x.len();
    let written = rows.len().checked_div(len).map_or(0, |whole| out.len().min(whole));
    let (x8, x_tail) = x.as_chunks::<8>();
    let chunks = x8.len();
    let mut first = 0;
    if x_tail.is_empty() && len > 0 {
        // Whole groups of rows of whole chunks: row k's chunk c at `group[k * chunks + c]`.
        let (groups, _) = rows[..written * len].as_chunks::<8>();
        for (group, out) in groups.chunks_exact(8 * chunks).zip(out.as_chunks_mut::<8>().0) {
            // A plain loop: closures (`from_fn`, `map`) were not inlined into this function.
            let mut rows: [&[[f32; 8]]; 8] = [&[]; 8];
            for (row, chunks) in rows.iter_mut().zip(group.chunks_exact(chunks)) {
                *row = chunks;
            }
            *out = bytemuck::cast(dots8(x8, rows, |v| load8(v)));
            first += 8;
        }
    }
    for (group, out) in out[first..written].chunks_mut(8).enumerate() {
        let mut eight = [x; 8];
        for (k, row) in eight.iter_mut().zip(rows[(first + group * 8) * len..].chunks_exact(len)).take(out.len()) {
            *k = row;
        }
        let mut rows: [&[[f32; 8]]; 8] = [&[]; 8];
        for (chunks, row) in rows.iter_mut().zip(eight) {
            *chunks = row.as_chunks::<8>().0;
        }
        let mut sums: [f32; 8] = bytemuck::cast(dots8(x8, rows, |v| load8(v)));
        if !x_tail.is_empty() {
            for (sum, row) in sums.iter_mut().zip(eight) {
                *sum += row[8 * chunks..].iter().zip(x_tail).map(|(r, x)| r * x).sum::<f32>();
            }
        }
        out.copy_from_slice(&sums[..out.len()]);
    }
    out[written..].fill(0.0);
}

/// Lane `k`: row `k`'s chunks (the first `x8.len()` of `rows[k]`, read by `load`) against `x8`,
/// by FMA in chunk order, then its lanes summed (see [`dots_f32`]).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn dots8<T>(x8: &[[f32; 8]], rows: [&[[T; 8]]; 8], load: impl Fn(&[T; 8]) -> __m256) -> __m256 {
    // Cut to `x8`'s length once, so that the loop's indices need no checks (with a check per
    // row and chunk, the loop ran three times as many instructions as FMAs).
    let mut rows = rows;
    for row in &mut rows {
        *row = &row[..x8.len()];
    }
    let mut acc = [_mm256_setzero_ps(); 8];
    for (c, x) in x8.iter().enumerate() {
        let x = load8(x);
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(x, load(&rows[k][c]), *acc);
        }
    }
    sum_rows(acc)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn load8(values: &[f32; 8]) -> __m256 {
    pod_read_unaligned::<__m256>(bytemuck::cast_slice(values))
}

/// Lane `k` of the result: the 8 lanes of `acc[k]` summed as [`dots_f32`] says.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn sum_rows(acc: [__m256; 8]) -> __m256 {
    // hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3, a4+a5, a6+a7, b4+b5, b6+b7].
    let pairs: [__m256; 4] = [
        _mm256_hadd_ps(acc[0], acc[1]),
        _mm256_hadd_ps(acc[2], acc[3]),
        _mm256_hadd_ps(acc[4], acc[5]),
        _mm256_hadd_ps(acc[6], acc[7]),
    ];
    // Rows 0..4 (and 4..8): lanes 0..4 their sums of lanes 0..4, lanes 4..8 of lanes 4..8.
    let (first, second) = (_mm256_hadd_ps(pairs[0], pairs[1]), _mm256_hadd_ps(pairs[2], pairs[3]));
    _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(first, second), _mm256_permute2f128_ps::<0x31>(first, second))
}

/// `y[i] += a·x[i]` over the common length, rounded as the scalar loop rounds (a product, then a
/// sum: no fused multiply-add), so that it equals [`super::super::reference`]'s bit for bit.
#[target_feature(enable = "avx2,fma")]
pub(super) fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    let len = y.len().min(x.len());
    let (y, x) = (&mut y[..len], &x[..len]);
    let scale = _mm256_set1_ps(a);
    let (y8, y_tail) = y.as_chunks_mut::<8>();
    let (x8, x_tail) = x.as_chunks::<8>();
    for (yc, xc) in y8.iter_mut().zip(x8) {
        let xv = pod_read_unaligned::<__m256>(bytemuck::cast_slice(xc));
        let yv = pod_read_unaligned::<__m256>(bytemuck::cast_slice(&yc[..]));
        let sum: [f32; 8] = bytemuck::cast(_mm256_add_ps(yv, _mm256_mul_ps(scale, xv)));
        *yc = sum;
    }
    for (yv, xv) in y_tail.iter_mut().zip(x_tail) {
        *yv += a * xv;
    }
}

/// Above this, `e^x` is +∞ (ln(f32::MAX)).
pub(super) const EXP_MAX_ARG: f32 = 88.722_83;
/// Below this, `e^x` is +0 (under half the least subnormal).
pub(super) const EXP_MIN_ARG: f32 = -104.0;
/// ln 2 = LN2_HI + LN2_LO with LN2_HI's low 12 bits zero, so n·LN2_HI is exact for |n| < 2^12.
pub(super) const LN2_HI: f32 = 0.693_359_4;
pub(super) const LN2_LO: f32 = -2.121_944_4e-4;
/// `e^r`'s Taylor coefficients after the first, 1/7!, in Horner order.
pub(super) const EXP_HORNER: [f32; 7] = [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0];

/// `e^x` in 8 lanes: `2^n · e^r` with `n = round(x·log₂e)`, `r = x − n·ln 2` (ln 2 in two parts,
/// so `r` is exact to f32), `|r| ≤ ln 2 / 2`, `e^r` by its Taylor series to degree 7 (truncation
/// below 0.05 ulp), `2^n` applied as two powers of two so that results down to the subnormals
/// come out right. Above ln(f32::MAX) it is +∞, below −104 (e^x under half the least subnormal)
/// +0, NaN stays NaN. `avx512_vector::exp16` is the same steps on 16 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn exp8(x: __m256) -> __m256 {
    let clamped = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_MIN_ARG)), _mm256_set1_ps(EXP_MAX_ARG));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        clamped,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), clamped);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(1.0 / 5040.0);
    for c in EXP_HORNER {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    // 2^n = 2^half · 2^(n − half), each factor a normal f32 for n in −150..=128.
    let n = _mm256_cvtps_epi32(n);
    let half = _mm256_srai_epi32::<1>(n);
    let pow2 = |k: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(k, _mm256_set1_epi32(127))));
    let y = _mm256_mul_ps(_mm256_mul_ps(p, pow2(half)), pow2(_mm256_sub_epi32(n, half)));
    let y =
        _mm256_blendv_ps(y, _mm256_set1_ps(f32::INFINITY), _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(EXP_MAX_ARG)));
    let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_MIN_ARG)));
    _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x))
}

/// `x[i] = e^x[i]`, 8 lanes at a time; the last (< 8) values go through the same lanes, padded, so
/// a value's result does not depend on where in the slice it sits.
#[target_feature(enable = "avx2,fma")]
pub(super) fn exp_f32(xs: &mut [f32]) {
    let (x8, tail) = xs.as_chunks_mut::<8>();
    for chunk in x8 {
        *chunk = bytemuck::cast(exp8(load8(chunk)));
    }
    exp_tail(tail);
}

/// [`exp_f32`] of fewer than 8 values, padded to a vector.
#[target_feature(enable = "avx2,fma")]
pub(super) fn exp_tail(tail: &mut [f32]) {
    if !tail.is_empty() {
        let mut padded = [0.0f32; 8];
        padded[..tail.len()].copy_from_slice(tail);
        let out: [f32; 8] = bytemuck::cast(exp8(bytemuck::cast(padded)));
        tail.copy_from_slice(&out[..tail.len()]);
    }
}

/// `crate::vector::softmax` in 8 lanes: the scaling, the maximum and the division as the scalar
/// loops do them (the same values), `e^x` by [`exp8`] (the last < 8 values padded, as [`exp_f32`]
/// does), the total in 8 partial sums, value `8k + l` added to sum `l` in order of `k`.
/// `avx512_vector::softmax_f32` gives the same bits.
#[target_feature(enable = "avx2,fma")]
pub(super) fn softmax_f32(xs: &mut [f32], scale: f32, sink: Option<f32>) {
    let (x8, tail) = xs.as_chunks_mut::<8>();
    let factor = _mm256_set1_ps(scale);
    // `max_ps(v, m)` keeps `m` where `v` is NaN, as `f32::max` ignores a NaN.
    let mut lanes_max = _mm256_set1_ps(sink.unwrap_or(f32::NEG_INFINITY));
    for chunk in x8.iter_mut() {
        let v = _mm256_mul_ps(load8(chunk), factor);
        *chunk = bytemuck::cast(v);
        lanes_max = _mm256_max_ps(v, lanes_max);
    }
    let lanes: [f32; 8] = bytemuck::cast(lanes_max);
    let max = softmax_tail_max(tail, scale, lanes.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)));
    let shift = _mm256_set1_ps(max);
    let mut sums = _mm256_setzero_ps();
    for chunk in x8.iter_mut() {
        let e = exp8(_mm256_sub_ps(load8(chunk), shift));
        *chunk = bytemuck::cast(e);
        sums = _mm256_add_ps(sums, e);
    }
    let total = softmax_tail_exp(tail, max, sink.map_or(0.0, |sink| (sink - max).exp()) + sum_lanes(sums));
    let divisor = _mm256_set1_ps(total);
    for chunk in x8.iter_mut() {
        *chunk = bytemuck::cast(_mm256_div_ps(load8(chunk), divisor));
    }
    for x in tail.iter_mut() {
        *x /= total;
    }
}

/// The softmax tail (< 8 values past the whole vectors) scaled, and the maximum with the
/// vectors' maximum `max`.
#[inline]
pub(super) fn softmax_tail_max(tail: &mut [f32], scale: f32, mut max: f32) -> f32 {
    for x in tail.iter_mut() {
        *x *= scale;
        max = max.max(*x);
    }
    max
}

/// The softmax tail's `e^(x − max)` (padded through [`exp8`]), and `total` (the sink's and the
/// vectors' share) with the tail's values added in order.
#[target_feature(enable = "avx2,fma")]
pub(super) fn softmax_tail_exp(tail: &mut [f32], max: f32, mut total: f32) -> f32 {
    if !tail.is_empty() {
        for x in tail.iter_mut() {
            *x -= max;
        }
        exp_tail(tail);
        total += tail.iter().sum::<f32>();
    }
    total
}

/// `out[i] += Σ_j weights[j]·rows[j·len + i]` (`len = out.len()`, over the whole rows `rows`
/// holds for `weights`): [`axpy_f32`] of each row onto `out`, with the same roundings in the same
/// order, but 64 outputs at a time kept in registers while the rows pass, rather than loaded and
/// stored for every row (attention's probability-weighted sum of values).
#[target_feature(enable = "avx2,fma")]
pub(super) fn weighted_sum_add_f32(out: &mut [f32], weights: &[f32], rows: &[f32]) {
    sum_rows_of(out, weights, rows, |v| load8(v), |rest, w, tail| axpy_f32(rest, w, tail));
}

/// [`weighted_sum_add_f32`] for rows of `T`, 8 values read by `load`; a row's values past the
/// last whole 64 go through `axpy_tail`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn sum_rows_of<T: Copy>(
    out: &mut [f32],
    weights: &[f32],
    rows: &[T],
    load: impl Fn(&[T; 8]) -> __m256,
    axpy_tail: impl Fn(&mut [f32], f32, &[T]),
) {
    const WIDE: usize = 64;
    let len = out.len();
    if len == 0 {
        return;
    }
    let weights = &weights[..weights.len().min(rows.len() / len)];
    let (wide, rest) = out.as_chunks_mut::<WIDE>();
    for (c, out) in wide.iter_mut().enumerate() {
        let (outs, _) = out.as_chunks::<8>();
        let mut acc: [__m256; WIDE / 8] = std::array::from_fn(|k| load8(&outs[k]));
        for (j, &w) in weights.iter().enumerate() {
            let (row, _) = rows[j * len + c * WIDE..][..WIDE].as_chunks::<8>();
            let scale = _mm256_set1_ps(w);
            for (acc, values) in acc.iter_mut().zip(row) {
                *acc = _mm256_add_ps(*acc, _mm256_mul_ps(scale, load(values)));
            }
        }
        *out = bytemuck::cast(acc);
    }
    let start = len - rest.len();
    for (j, &w) in weights.iter().enumerate() {
        axpy_tail(rest, w, &rows[j * len + start..(j + 1) * len]);
    }
}

/// [`dots_f32`] over f16 rows, each chunk widened in its register (F16C): bit for bit
/// [`dots_f32`] of the widened rows. Lengths with a tail past whole chunks widen blocks of rows for
/// [`dots_f32`] instead.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dots_f16(out: &mut [f32], x: &[f32], rows: &[f16]) {
    let len = x.len();
    if len == 0 || !len.is_multiple_of(8) {
        return widened::dots_f16(|out, x, rows| dots_f32(out, x, rows), out, x, rows);
    }
    let written = out.len().min(rows.len() / len);
    let (x8, _) = x.as_chunks::<8>();
    let chunks = x8.len();
    let (rows8, _) = rows[..written * len].as_chunks::<8>();
    let whole = written / 8 * 8;
    for (group, out) in rows8[..whole * chunks].chunks_exact(8 * chunks).zip(out.as_chunks_mut::<8>().0) {
        let mut rows: [&[[f16; 8]]; 8] = [&[]; 8];
        for (row, chunks) in rows.iter_mut().zip(group.chunks_exact(chunks)) {
            *row = chunks;
        }
        *out = bytemuck::cast(dots8(x8, rows, |v| widen8(v)));
    }
    if whole < written {
        // A last group short of eight: its first row stands in for the missing ones.
        let last = &rows8[whole * chunks..];
        let mut rows: [&[[f16; 8]]; 8] = [&last[..chunks]; 8];
        for (row, chunks) in rows.iter_mut().zip(last.chunks_exact(chunks)) {
            *row = chunks;
        }
        let sums: [f32; 8] = bytemuck::cast(dots8(x8, rows, |v| widen8(v)));
        out[whole..written].copy_from_slice(&sums[..written - whole]);
    }
    out[written..].fill(0.0);
}

/// [`weighted_sum_add_f32`] over f16 rows, each chunk widened in its register (F16C): bit for bit
/// [`weighted_sum_add_f32`] of the widened rows.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn weighted_sum_add_f16(out: &mut [f32], weights: &[f32], rows: &[f16]) {
    let axpy_tail = |rest: &mut [f32], w: f32, tail: &[f16]| {
        let mut wide = [0.0f32; 64];
        tail.convert_to_f32_slice(&mut wide[..tail.len()]);
        axpy_f32(rest, w, &wide[..tail.len()]);
    };
    sum_rows_of(out, weights, rows, |v| widen8(v), axpy_tail);
}

/// 8 f16 values as f32 lanes (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen8(values: &[f16; 8]) -> __m256 {
    _mm256_cvtph_ps(pod_read_unaligned::<__m128i>(bytemuck::cast_slice(values)))
}

/// f16 values as f32 values 8 at a time (exact), rather than `half`'s call per 8 through the
/// stack: `out` gets the common length of the two.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn widen_f16(values: &[f16], out: &mut [f32]) {
    let n = values.len().min(out.len());
    let (values, out) = (&values[..n], &mut out[..n]);
    let (v8, v_tail) = values.as_chunks::<8>();
    let (o8, o_tail) = out.as_chunks_mut::<8>();
    for (v, o) in v8.iter().zip(o8) {
        *o = bytemuck::cast(widen8(v));
    }
    v_tail.convert_to_f32_slice(o_tail);
}

/// `super::super::reference::quantize_i16_blocks` in 8 lanes, bit for bit: the same `amax` (a
/// NaN lane never wins a `max`, as with `f32::max`), the same product `x · (1/d)`, rounded half
/// away from zero as `round_half_away` does (truncate, then ±1 where the remainder reaches ±0.5),
/// NaN products to 0 (what `as i32` makes of them).
#[target_feature(enable = "avx2,fma")]
pub(super) fn quantize_i16_blocks(x: &[f32], q: &mut [i16], d: &mut [f32], sums: &mut [i32]) {
    let (x_blocks, _) = x.as_chunks::<32>();
    let (q_blocks, _) = q.as_chunks_mut::<32>();
    for (((x, q), d), sum) in x_blocks.iter().zip(q_blocks).zip(d).zip(sums) {
        let v = block_values(x);
        let (scale, inverse) = crate::activation::i16_scale(largest_magnitude(&v));
        let inverse = _mm256_set1_ps(inverse);
        let rounded: [__m256i; 4] = std::array::from_fn(|k| round_half_away(_mm256_mul_ps(v[k], inverse)));
        for (k, pair) in rounded.chunks_exact(2).enumerate() {
            // `packs` interleaves the two vectors' 128-bit halves; the permute restores the order.
            let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(pair[0], pair[1]));
            q[16 * k..16 * k + 16].copy_from_slice(bytemuck::cast_slice(&[packed]));
        }
        *sum = lane_sum(&rounded);
        *d = scale;
    }
}

/// A block's 32 values in four vectors.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn block_values(x: &[f32; 32]) -> [__m256; 4] {
    std::array::from_fn(|k| pod_read_unaligned::<__m256>(bytemuck::cast_slice(&x[8 * k..8 * k + 8])))
}

/// The largest magnitude of a block's values: `maxps` returns its second operand where either is
/// NaN, so a NaN value never wins (as with `f32::max`).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn largest_magnitude(v: &[__m256; 4]) -> f32 {
    let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let mut amax = _mm256_setzero_ps();
    for &v in v {
        amax = _mm256_max_ps(_mm256_and_ps(v, magnitude), amax);
    }
    let quad = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps::<1>(amax));
    let pair = _mm_max_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_max_ss(pair, _mm_movehdup_ps(pair)))
}

/// `y` rounded half away from zero as `round_half_away` does (truncate, then ±1 where the
/// remainder reaches ±0.5), NaN to 0 (what `as i32` makes of it).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn round_half_away(y: __m256) -> __m256i {
    let t = _mm256_cvttps_epi32(y);
    let rest = _mm256_sub_ps(y, _mm256_cvtepi32_ps(t));
    let up = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GE_OQ>(rest, _mm256_set1_ps(0.5)));
    let down = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(rest, _mm256_set1_ps(-0.5)));
    let ordered = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_ORD_Q>(y, y));
    // `up`/`down` are −1 where set: t − up + down.
    _mm256_and_si256(_mm256_add_epi32(_mm256_sub_epi32(t, up), down), ordered)
}

/// The sum of the 32 i32 lanes of four vectors.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn lane_sum(v: &[__m256i; 4]) -> i32 {
    let total = _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3]));
    let quad = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256::<1>(total));
    let pair = _mm_add_epi32(quad, _mm_unpackhi_epi64(quad, quad));
    _mm_cvtsi128_si32(_mm_add_epi32(pair, _mm_shuffle_epi32::<0b01>(pair)))
}

/// `crate::activation::quantize_q8_k_blocks` (`quantize_row_q8_k_ref`) in 8 lanes, bit for bit:
/// the scale from the first value of the largest magnitude, sign kept (`iscale = −127 / max`),
/// each quant `min(127, round(iscale · x))` rounded half to even — `cvtps2dq` under the default
/// rounding mode, what ggml's `nearest_int` computes for |x| < 2²² — `d = 1 / iscale`, and the
/// sums of each 16 quants. A block holding a NaN or an infinity, or whose `iscale` overflows,
/// goes to the reference (whose `nearest_int` turns non-finite products into quants no
/// conversion instruction makes).
#[target_feature(enable = "avx2,fma")]
pub(super) fn quantize_q8_k_blocks(x: &[f32], qs: &mut [u8], d: &mut [f32], bsums: &mut [i16]) {
    let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let infinity = _mm256_set1_ps(f32::INFINITY);
    let (x_blocks, _) = x.as_chunks::<256>();
    let (q_blocks, _) = qs.as_chunks_mut::<256>();
    let (sum_blocks, _) = bsums.as_chunks_mut::<16>();
    for (((x, q), d), sums) in x_blocks.iter().zip(q_blocks).zip(d).zip(sum_blocks) {
        let (eights, _) = x.as_chunks::<8>();
        let load = |k: usize| pod_read_unaligned::<__m256>(bytemuck::cast_slice(&eights[k]));
        let (mut amax, mut unusual) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for k in 0..32 {
            let size = _mm256_and_ps(load(k), magnitude);
            amax = _mm256_max_ps(size, amax);
            // Not below infinity: an infinity or a NaN.
            unusual = _mm256_or_ps(unusual, _mm256_cmp_ps::<_CMP_NLT_UQ>(size, infinity));
        }
        let amax = {
            let quad = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps::<1>(amax));
            let pair = _mm_max_ps(quad, _mm_movehl_ps(quad, quad));
            _mm_cvtss_f32(_mm_max_ss(pair, _mm_movehdup_ps(pair)))
        };
        // A NaN or an infinity, or a largest magnitude so small that `iscale` overflows.
        if _mm256_movemask_ps(unusual) != 0 || (amax != 0.0 && !(127.0 / amax).is_finite()) {
            crate::activation::quantize_q8_k_blocks(x, q, std::slice::from_mut(d), sums);
            continue;
        }
        if amax == 0.0 {
            q.fill(0);
            sums.fill(0);
            *d = 0.0;
            continue;
        }
        // The first value of that magnitude (ggml's strict `>` keeps the earliest).
        let target = _mm256_set1_ps(amax);
        let first = (0..32)
            .find_map(|k| {
                let hits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_and_ps(load(k), magnitude), target));
                (hits != 0).then(|| 8 * k + hits.trailing_zeros() as usize)
            })
            .expect("the largest magnitude is one of the values");
        let iscale = -127.0 / x[first];
        let scale = _mm256_set1_ps(iscale);
        let highest = _mm256_set1_epi32(127);
        let quants: [__m256i; 32] =
            std::array::from_fn(|k| _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(scale, load(k))), highest));
        for (out, four) in q.chunks_exact_mut(32).zip(quants.chunks_exact(4)) {
            // i32 → i16 → i8 by saturating packs (the values fit), lanes put back in order.
            let words = [_mm256_packs_epi32(four[0], four[1]), _mm256_packs_epi32(four[2], four[3])];
            let bytes = _mm256_packs_epi16(words[0], words[1]);
            let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            out.copy_from_slice(bytemuck::cast_slice(&[ordered]));
        }
        let sixteens: [__m256i; 16] = std::array::from_fn(|g| _mm256_add_epi32(quants[2 * g], quants[2 * g + 1]));
        let totals = [lane_sums8(&sixteens[..8]), lane_sums8(&sixteens[8..])];
        let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(totals[0], totals[1]));
        sums.copy_from_slice(bytemuck::cast_slice(&[packed]));
        *d = 1.0 / iscale;
    }
}

/// The lane sums of eight vectors, lane k of the result = the sum of `v[k]`'s lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn lane_sums8(v: &[__m256i]) -> __m256i {
    // Each 128-bit half of `fours[i]` holds the sums of that half of v[4i..4i+4].
    let fours = [0, 4].map(|i| {
        let pairs = [_mm256_hadd_epi32(v[i], v[i + 1]), _mm256_hadd_epi32(v[i + 2], v[i + 3])];
        _mm256_hadd_epi32(pairs[0], pairs[1])
    });
    let low = _mm256_permute2x128_si256::<0x20>(fours[0], fours[1]);
    let high = _mm256_permute2x128_si256::<0x31>(fours[0], fours[1]);
    _mm256_add_epi32(low, high)
}

/// Columns `first_col..` of `src` (`rows × cols`) transposed into `dst` (`dst[k]`, at least
/// `rows` long, gets column `first_col + k`): `reference::vector_transpose_f32`, value for value,
/// in 8 × 8 blocks (`avx2_panel::transpose8`) down strips of 8 columns; the edges one value at a
/// time.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn transpose_f32(src: &[f32], rows: usize, cols: usize, first_col: usize, dst: &mut [&mut [f32]]) {
    let full_rows = rows / 8 * 8;
    // Each value's bits, moved as i32 lanes.
    let load = |s: &[f32]| pod_read_unaligned::<__m256i>(bytemuck::cast_slice(&s[..8]));
    for (s, strip) in dst.chunks_mut(8).enumerate() {
        let c0 = first_col + 8 * s;
        if strip.len() < 8 {
            // Fewer than 8 columns left.
            for (k, row) in strip.iter_mut().enumerate() {
                for (r, d) in row[..rows].iter_mut().enumerate() {
                    *d = src[r * cols + c0 + k];
                }
            }
            continue;
        }
        for r0 in (0..full_rows).step_by(8) {
            let v: [__m256i; 8] = std::array::from_fn(|i| load(&src[(r0 + i) * cols + c0..]));
            for (row, column) in strip.iter_mut().zip(super::avx2_panel::transpose8(v)) {
                let whole: &mut [f32; 8] = (&mut row[r0..r0 + 8]).try_into().expect("8 values");
                *whole = bytemuck::cast(column);
            }
        }
        for r in full_rows..rows {
            for (k, row) in strip.iter_mut().enumerate() {
                row[r] = src[r * cols + c0 + k];
            }
        }
    }
}
