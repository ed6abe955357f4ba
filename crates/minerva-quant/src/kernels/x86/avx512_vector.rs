//! f32 vector kernels on 16 lanes (AVX-512F) for attention: the dot products of one query with
//! many keys, the weighted sums of value rows for the query heads that share them, and softmax,
//! `e^x` (the gated activations' too) and the repacked kernels' 8-bit activation blocks with
//! the AVX2 kernels' results on twice the lanes.
//!
//! Memory safety does not rest on `unsafe` (slices and `bytemuck` unaligned loads); the caller
//! promises AVX2, FMA and AVX-512F (see `super::avx512_vector_kernels`).

use std::arch::x86_64::{
    __m256, __m256i, __m512, __m512d, __m512i, _CMP_GE_OQ, _CMP_GT_OQ, _CMP_LE_OQ, _CMP_LT_OQ, _CMP_NEQ_OQ, _CMP_ORD_Q,
    _CMP_UNORD_Q, _MM_FROUND_NO_EXC, _MM_FROUND_TO_NEAREST_INT, _mm_cvtph_ps, _mm_cvtps_ph, _mm_cvtss_f32, _mm_set_ss,
    _mm256_add_ps, _mm256_castpd_ps, _mm256_div_ps, _mm256_max_ps, _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps,
    _mm256_sub_ps, _mm512_add_epi32, _mm512_add_ps, _mm512_and_si512, _mm512_castpd_ps, _mm512_castps_pd,
    _mm512_castps_si512, _mm512_castps512_ps256, _mm512_castsi512_ps, _mm512_cmp_ps_mask, _mm512_cvtepi32_ps,
    _mm512_cvtph_ps, _mm512_cvtps_epi32, _mm512_cvtps_ph, _mm512_cvtsepi32_epi8, _mm512_cvttps_epi32, _mm512_div_ps,
    _mm512_extractf64x4_pd, _mm512_fmadd_ps, _mm512_fnmadd_ps, _mm512_mask_add_epi32, _mm512_mask_blend_ps,
    _mm512_mask_sub_epi32, _mm512_maskz_div_ps, _mm512_maskz_mov_epi32, _mm512_max_ps, _mm512_min_ps, _mm512_mul_ps,
    _mm512_reduce_add_epi32, _mm512_reduce_max_ps, _mm512_roundscale_ps, _mm512_set1_epi32, _mm512_set1_ps,
    _mm512_setzero_ps, _mm512_shuffle_f32x4, _mm512_slli_epi32, _mm512_srai_epi32, _mm512_sub_epi32, _mm512_sub_ps,
    _mm512_unpackhi_pd, _mm512_unpackhi_ps, _mm512_unpacklo_pd, _mm512_unpacklo_ps,
};

use bytemuck::{Pod, pod_read_unaligned};
use half::f16;

use crate::repack::ActBlock;
use half::slice::HalfFloatSliceExt;

use super::avx2_vector::{
    self, EXP_HORNER, EXP_MAX_ARG, EXP_MIN_ARG, LN2_HI, LN2_LO, exp_tail, exp8, load8, softmax_tail_exp,
    softmax_tail_max, sum_lanes,
};

#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn load16(values: &[f32]) -> __m512 {
    pod_read_unaligned::<__m512>(bytemuck::cast_slice(&values[..16]))
}

/// `x · row` for each row of `rows` (`rows.len() / x.len()` whole rows, `out` zero past them),
/// sixteen rows at a time: each row's 16 lanes take the 16-value chunks in order by FMA, then the
/// rows' lanes are summed side by side ([`sum_rows`]). Every row goes through the same operations
/// wherever it sits (a last group short of sixteen is filled with copies of its first row), so a
/// row's result depends on `x` and that row alone. Lengths that are not a multiple of 16 take
/// `avx2_vector::dots_f32` (the choice depends on the length only).
#[target_feature(enable = "avx2,fma,avx512f")]
pub(super) fn dots_f32(out: &mut [f32], x: &[f32], rows: &[f32]) {
    let len = x.len();
    if len == 0 || !len.is_multiple_of(16) {
        return avx2_vector::dots_f32(out, x, rows);
    }
    dots_rows(out, x, rows, |chunk| load16(chunk));
}

/// [`dots_f32`] over f16 rows, each chunk widened in its register (`vcvtph2ps`): bit for bit
/// [`dots_f32`] of the widened rows, without writing them anywhere. Lengths that are not a
/// multiple of 16 take `avx2_vector::dots_f16`, as [`dots_f32`] takes the AVX2 kernel.
#[target_feature(enable = "avx2,fma,avx512f,f16c")]
pub(super) fn dots_f16(out: &mut [f32], x: &[f32], rows: &[f16]) {
    let len = x.len();
    if len == 0 || !len.is_multiple_of(16) {
        return avx2_vector::dots_f16(out, x, rows);
    }
    dots_rows(out, x, rows, |chunk| widen16(chunk));
}

/// [`dots_f16`] for each query of `xs` into its `outs` entry, over the same f16 rows, bit for bit
/// (the same FMAs per row in the same order, and the same [`sum_rows`] lane), with each chunk of
/// a row widened once for up to four queries rather than once for each: `vcvtph2ps` on a 512-bit
/// register, not the FMAs, bounded a query at a time (the query heads sharing a KV head in a
/// decode step). Shapes [`dots_f16`] would hand to AVX2, or queries of other lengths than the
/// first's, go one query at a time.
#[target_feature(enable = "avx2,fma,avx512f,f16c")]
pub(super) fn dots_many_f16(outs: &mut [&mut [f32]], xs: &[&[f32]], rows: &[f16]) {
    let len = xs.first().map_or(0, |x| x.len());
    let out_len = outs.first().map_or(0, |o| o.len());
    let fits = len > 0
        && len.is_multiple_of(16)
        && outs.len() == xs.len()
        && xs.iter().all(|x| x.len() == len)
        && outs.iter().all(|o| o.len() == out_len);
    if !fits {
        for (out, x) in outs.iter_mut().zip(xs) {
            dots_f16(out, x, rows);
        }
        return;
    }
    for (outs, xs) in outs.chunks_mut(4).zip(xs.chunks(4)) {
        match xs.len() {
            4 => dots_shared::<4>(outs, xs, rows),
            3 => dots_shared::<3>(outs, xs, rows),
            2 => dots_shared::<2>(outs, xs, rows),
            _ => dots_f16(outs[0], xs[0], rows),
        }
    }
}

/// [`dots_many_f16`] for `Q` (≤ 4) queries of one length (a whole number of chunks) and outputs
/// of one length: four rows at a time, accumulator `4q + k` for query `q` and row `k`.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f,f16c")]
fn dots_shared<const Q: usize>(outs: &mut [&mut [f32]], xs: &[&[f32]], rows: &[f16]) {
    let len = xs[0].len();
    let written = outs[0].len().min(rows.len() / len);
    let x16: [&[[f32; 16]]; Q] = std::array::from_fn(|q| xs[q].as_chunks::<16>().0);
    let (rows16, _) = rows[..written * len].as_chunks::<16>();
    let chunks = len / 16;
    let four = |keys: [&[[f16; 16]]; 4]| {
        let mut acc = [_mm512_setzero_ps(); 16];
        for c in 0..chunks {
            let key: [__m512; 4] = std::array::from_fn(|k| widen16(&keys[k][c]));
            for (q, x) in x16.iter().enumerate() {
                let x = load16(&x[c]);
                for (k, &key) in key.iter().enumerate() {
                    acc[4 * q + k] = _mm512_fmadd_ps(x, key, acc[4 * q + k]);
                }
            }
        }
        let sums: [f32; 16] = bytemuck::cast(sum_rows(acc));
        sums
    };
    let mut first = 0;
    while first < written {
        let n = (written - first).min(4);
        let row = |k: usize| {
            // A last group short of four repeats its first row (its results are not written).
            let r = first + if k < n { k } else { 0 };
            &rows16[r * chunks..(r + 1) * chunks]
        };
        let sums = four(std::array::from_fn(row));
        for (q, out) in outs.iter_mut().enumerate() {
            out[first..first + n].copy_from_slice(&sums[4 * q..4 * q + n]);
        }
        first += n;
    }
    for out in outs.iter_mut() {
        out[written..].fill(0.0);
    }
}

/// [`dots_f32`] for a length that is a whole number of chunks, rows of `T` read by `load`.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn dots_rows<T: Pod>(out: &mut [f32], x: &[f32], rows: &[T], load: impl Fn(&[T; 16]) -> __m512 + Copy) {
    let len = x.len();
    let written = out.len().min(rows.len() / len);
    let (x16, _) = x.as_chunks::<16>();
    let (rows16, _) = rows[..written * len].as_chunks::<16>();
    // Head sizes of 64, 128 and 256 with the chunk count known to the compiler (no bounds check
    // per load); the same operations either way.
    match x16.len() {
        4 => dots_in::<4, T>(&mut out[..written], x16, rows16, load),
        8 => dots_in::<8, T>(&mut out[..written], x16, rows16, load),
        16 => dots_in::<16, T>(&mut out[..written], x16, rows16, load),
        chunks => {
            let mut first = 0;
            for (group, out) in rows16.chunks_exact(16 * chunks).zip(out.as_chunks_mut::<16>().0) {
                let keys: [&[[T; 16]]; 16] = std::array::from_fn(|k| &group[k * chunks..(k + 1) * chunks]);
                *out = bytemuck::cast(dots16(x16, &keys, load));
                first += 16;
            }
            if first < written {
                let last = &rows16[first * chunks..];
                let mut keys: [&[[T; 16]]; 16] = [&last[..chunks]; 16];
                for (k, row) in keys.iter_mut().zip(last.chunks_exact(chunks)) {
                    *k = row;
                }
                let sums: [f32; 16] = bytemuck::cast(dots16(x16, &keys, load));
                out[first..written].copy_from_slice(&sums[..written - first]);
            }
        }
    }
    out[written..].fill(0.0);
}

/// [`dots_rows`] over whole rows of `C` chunks (`out` one value per row of `rows16`).
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn dots_in<const C: usize, T: Pod>(
    out: &mut [f32],
    x16: &[[f32; 16]],
    rows16: &[[T; 16]],
    load: impl Fn(&[T; 16]) -> __m512 + Copy,
) {
    let x: &[[f32; 16]; C] = x16.try_into().expect("C chunks");
    let (rows, _) = rows16.as_chunks::<C>();
    let (groups, last) = rows.as_chunks::<16>();
    let (outs, last_out) = out.as_chunks_mut::<16>();
    for (group, out) in groups.iter().zip(outs) {
        *out = bytemuck::cast(dots16(x, &group.each_ref(), load));
    }
    if let Some(first) = last.first() {
        let mut keys: [&[[T; 16]; C]; 16] = [first; 16];
        for (k, row) in keys.iter_mut().zip(last) {
            *k = row;
        }
        let sums: [f32; 16] = bytemuck::cast(dots16(x, &keys, load));
        last_out.copy_from_slice(&sums[..last_out.len()]);
    }
}

/// Lane `k`: row `keys[k]`'s chunks (read by `load`) against `x`'s, by FMA in chunk order, then
/// its lanes summed ([`sum_rows`]).
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn dots16<T, R: AsRef<[[T; 16]]>>(x: &[[f32; 16]], keys: &[R; 16], load: impl Fn(&[T; 16]) -> __m512) -> __m512 {
    let mut acc = [_mm512_setzero_ps(); 16];
    for (c, x) in x.iter().enumerate() {
        let x = load16(x);
        for (acc, key) in acc.iter_mut().zip(keys) {
            *acc = _mm512_fmadd_ps(x, load(&key.as_ref()[c]), *acc);
        }
    }
    sum_rows(acc)
}

/// [`dots_f32`] of each query of `xs` with keys laid out by `crate::vector::transpose_keys`
/// (groups of 16 keys, dimension-major): `outs[q][i]` gets key `firsts[q] + i`. Bit for bit
/// [`dots16`]: lane `l` of a key's sum, the FMAs of dimensions `l, l + 16, …` in that order, is
/// here the vector of that lane's sums for a group's 16 keys, and [`sum_rows`]' tree over the lanes
/// becomes adds of whole vectors — no shuffles, and each group's values loaded once for four
/// queries. The caller promises queries of one length, a positive multiple of 16, and keys for
/// every query's range.
#[target_feature(enable = "avx2,fma,avx512f")]
pub(super) fn dots_transposed(outs: &mut [&mut [f32]], xs: &[&[f32]], firsts: &[usize], keys: &[f32]) {
    match xs.first().map_or(0, |x| x.len() / 16) {
        1 => transposed_in::<1>(outs, xs, firsts, keys),
        2 => transposed_in::<2>(outs, xs, firsts, keys),
        3 => transposed_in::<3>(outs, xs, firsts, keys),
        4 => transposed_in::<4>(outs, xs, firsts, keys),
        6 => transposed_in::<6>(outs, xs, firsts, keys),
        8 => transposed_in::<8>(outs, xs, firsts, keys),
        12 => transposed_in::<12>(outs, xs, firsts, keys),
        16 => transposed_in::<16>(outs, xs, firsts, keys),
        chunks => unreachable!("no transposed kernel for {chunks} chunks (TRANSPOSED_CHUNKS)"),
    }
}

/// The chunks per query [`dots_transposed`] has a kernel for (head sizes 16 to 256).
pub(super) const TRANSPOSED_CHUNKS: [usize; 8] = [1, 2, 3, 4, 6, 8, 12, 16];

/// Queries [`dots_transposed`] takes at once: their groups' values stay in L1 while they pass.
const TRANSPOSED_QUERIES: usize = 16;

/// [`dots_transposed`] for queries of `C` chunks, up to [`TRANSPOSED_QUERIES`] a pass over the
/// keys.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn transposed_in<const C: usize>(outs: &mut [&mut [f32]], xs: &[&[f32]], firsts: &[usize], keys: &[f32]) {
    // A group: C chunks of 16 dimensions, each dimension's 16 keys.
    let (lanes, _) = keys.as_chunks::<16>();
    let (chunks, _) = lanes.as_chunks::<16>();
    let (groups, _) = chunks.as_chunks::<C>();
    let batches =
        outs.chunks_mut(TRANSPOSED_QUERIES).zip(xs.chunks(TRANSPOSED_QUERIES)).zip(firsts.chunks(TRANSPOSED_QUERIES));
    for ((outs, xs), firsts) in batches {
        let n = xs.len();
        let x16: [&[[f32; 16]; C]; TRANSPOSED_QUERIES] = std::array::from_fn(|q| {
            let x = xs.get(q).unwrap_or(&xs[0]);
            x.as_chunks::<16>().0.try_into().expect("queries of C chunks")
        });
        let ranges: [std::ops::Range<usize>; TRANSPOSED_QUERIES] =
            std::array::from_fn(|q| if q < n { firsts[q]..firsts[q] + outs[q].len() } else { 0..0 });
        let Some(span) =
            ranges.iter().filter(|r| !r.is_empty()).cloned().reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
        else {
            continue;
        };
        let first_group = span.start / 16;
        for (g, group) in groups[..span.end.div_ceil(16)].iter().enumerate().skip(first_group) {
            let keys16 = 16 * g..16 * g + 16;
            let meets = |q: &usize| ranges[*q].start < keys16.end && keys16.start < ranges[*q].end;
            for first in (0..n).step_by(4) {
                let batch = first..(first + 4).min(n);
                if !batch.clone().any(|q| meets(&q)) {
                    continue;
                }
                // A short last batch repeats its first query (its sums are not written).
                let x = |q: usize| x16[if first + q < n { first + q } else { first }];
                let sums: [[f32; 16]; 4] = group_dots::<C>(std::array::from_fn(x), group).map(bytemuck::cast);
                for (q, sums) in batch.zip(&sums).filter(|(q, _)| meets(q)) {
                    let (lo, hi) = (ranges[q].start.max(keys16.start), ranges[q].end.min(keys16.end));
                    let out = &mut outs[q][lo - ranges[q].start..hi - ranges[q].start];
                    match <&mut [f32; 16]>::try_from(&mut *out) {
                        // The whole group: one fixed-size copy, not a `memcpy` call.
                        Ok(whole) => *whole = *sums,
                        Err(_) => out.copy_from_slice(&sums[lo - keys16.start..hi - keys16.start]),
                    }
                }
            }
        }
    }
}

/// Lane `k` of result `q`: `xs[q]` against key `k` of a transposed group (`group[c][l]` holds the
/// 16 keys' dimension `16c + l`), by [`dots16`]'s operations for that key: [`sum_rows`]' tree
/// over lanes, per quarter (l0 + l2) + (l1 + l3), then (q0 + q1) + (q2 + q3).
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn group_dots<const C: usize>(xs: [&[[f32; 16]; C]; 4], group: &[[[f32; 16]; 16]; C]) -> [__m512; 4] {
    let mut quarters = [[_mm512_setzero_ps(); 4]; 4];
    for (j, quarter) in quarters.iter_mut().enumerate() {
        let even = add4(lane_sums(&xs, group, 4 * j), lane_sums(&xs, group, 4 * j + 2));
        let odd = add4(lane_sums(&xs, group, 4 * j + 1), lane_sums(&xs, group, 4 * j + 3));
        *quarter = add4(even, odd);
    }
    add4(add4(quarters[0], quarters[1]), add4(quarters[2], quarters[3]))
}

/// Lane `l` of [`dots16`]'s accumulators for each key of a group and each query: chunk by
/// chunk, FMA from zero.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn lane_sums<const C: usize>(xs: &[&[[f32; 16]; C]; 4], group: &[[[f32; 16]; 16]; C], l: usize) -> [__m512; 4] {
    let mut acc = [_mm512_setzero_ps(); 4];
    for c in 0..C {
        let keys = load16(&group[c][l]);
        for (acc, x) in acc.iter_mut().zip(xs) {
            *acc = _mm512_fmadd_ps(_mm512_set1_ps(x[c][l]), keys, *acc);
        }
    }
    acc
}

/// Four vectors added lane by lane to four others.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn add4(a: [__m512; 4], b: [__m512; 4]) -> [__m512; 4] {
    [_mm512_add_ps(a[0], b[0]), _mm512_add_ps(a[1], b[1]), _mm512_add_ps(a[2], b[2]), _mm512_add_ps(a[3], b[3])]
}

/// 16 f16 values as f32 lanes (exact).
#[inline]
#[target_feature(enable = "avx2,fma,avx512f,f16c")]
fn widen16(values: &[f16; 16]) -> __m512 {
    _mm512_cvtph_ps(pod_read_unaligned::<__m256i>(bytemuck::cast_slice(values)))
}

/// Lane `k` of the result: the 16 lanes of `acc[k]` summed, the same way for every `k`: within
/// each 128-bit quarter `(l0 + l2) + (l1 + l3)`, then the quarters as `(q0 + q1) + (q2 + q3)`.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn sum_rows(acc: [__m512; 16]) -> __m512 {
    reduce_rows(acc, |a, b| _mm512_add_ps(a, b))
}

/// Lane `k` of the result: the 16 lanes of `rows[k]` combined by `op` in [`sum_rows`]' tree.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn reduce_rows(rows: [__m512; 16], op: impl Fn(__m512, __m512) -> __m512) -> __m512 {
    // Per quarter: unpacklo(a, b) = [a0, b0, a1, b1], unpackhi = [a2, b2, a3, b3]; combined they
    // hold a's and b's (l0 ∘ l2) and (l1 ∘ l3).
    let pairs: [__m512; 8] = std::array::from_fn(|i| {
        let (a, b) = (rows[2 * i], rows[2 * i + 1]);
        op(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b))
    });
    // As 64-bit pairs: per quarter, rows 4i..4i + 4 each with its quarter's result.
    let quads: [__m512; 4] = std::array::from_fn(|i| {
        let (a, b): (__m512d, __m512d) = (_mm512_castps_pd(pairs[2 * i]), _mm512_castps_pd(pairs[2 * i + 1]));
        op(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)))
    });
    // [x.q0, x.q2, y.q0, y.q2] ∘ [x.q1, x.q3, y.q1, y.q3], then the same across the two results.
    let halves = |x: __m512, y: __m512| {
        op(_mm512_shuffle_f32x4::<0b10_00_10_00>(x, y), _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y))
    };
    let (low, high) = (halves(quads[0], quads[1]), halves(quads[2], quads[3]));
    halves(low, high)
}

/// For each query `q`: `outs[q][i] += Σ_j weights[q][j]·rows[j·len + i]` (`len = outs[q].len()`,
/// over the whole rows `rows` holds for the weights): `axpy` of each row onto each output, with
/// the same roundings in the same order (a product, then a sum), so it equals the scalar loops
/// bit for bit. Up to four queries' 64 outputs stay in registers while the rows pass, so that
/// the sums of several queries overlap instead of each waiting on its own adds. Queries whose
/// outputs or weights differ in length from the first's go one at a time.
#[target_feature(enable = "avx2,fma,avx512f")]
pub(super) fn weighted_sums_add_f32(outs: &mut [&mut [f32]], weights: &[&[f32]], rows: &[f32]) {
    if !sums_fit(outs, weights) {
        for (out, weights) in outs.iter_mut().zip(weights) {
            avx2_vector::weighted_sum_add_f32(out, weights, rows);
        }
        return;
    }
    sums_of_rows(outs, weights, rows, |values| load16(values), |out, w, tail| avx2_vector::axpy_f32(out, w, tail));
}

/// [`weighted_sums_add_f32`] over f16 rows, each value widened in its register: bit for bit
/// [`weighted_sums_add_f32`] of the widened rows. Shapes it takes one query at a time go to
/// `avx2_vector::weighted_sum_add_f16`, as [`weighted_sums_add_f32`]'s go to the AVX2 kernel.
#[target_feature(enable = "avx2,fma,avx512f,f16c")]
pub(super) fn weighted_sums_add_f16(outs: &mut [&mut [f32]], weights: &[&[f32]], rows: &[f16]) {
    if !sums_fit(outs, weights) {
        for (out, weights) in outs.iter_mut().zip(weights) {
            avx2_vector::weighted_sum_add_f16(out, weights, rows);
        }
        return;
    }
    let axpy_tail = |out: &mut [f32], w: f32, tail: &[f16]| {
        let mut wide = [0.0f32; 64];
        tail.convert_to_f32_slice(&mut wide[..tail.len()]);
        avx2_vector::axpy_f32(out, w, &wide[..tail.len()]);
    };
    sums_of_rows(outs, weights, rows, |values| widen16(values), axpy_tail);
}

/// Whether [`sums_of_rows`] takes these queries: outputs of at least 64 values, every output and
/// every weight slice as long as the first, a weight slice per output.
fn sums_fit(outs: &[&mut [f32]], weights: &[&[f32]]) -> bool {
    let Some((len, count)) = outs.first().zip(weights.first()).map(|(out, w)| (out.len(), w.len())) else {
        return false;
    };
    len >= 64
        && outs.iter().all(|out| out.len() == len)
        && weights.iter().all(|w| w.len() == count)
        && weights.len() >= outs.len()
}

/// [`weighted_sums_add_f32`] for queries [`sums_fit`] takes, rows of `T` read 16 values at a time
/// by `load`; a row's values past the last whole 64 go through `axpy_tail`.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn sums_of_rows<T: Pod>(
    outs: &mut [&mut [f32]],
    weights: &[&[f32]],
    rows: &[T],
    load: impl Fn(&[T; 16]) -> __m512 + Copy,
    axpy_tail: impl Fn(&mut [f32], f32, &[T]) + Copy,
) {
    let (len, count) = (outs[0].len(), weights[0].len());
    let count = count.min(rows.len() / len);
    let rows = &rows[..count * len];
    let mut outs = &mut outs[..];
    let mut weights = &weights[..outs.len()];
    while !outs.is_empty() {
        let taken = match outs.len() {
            1 => sums::<1, T>(outs, weights, rows, len, load, axpy_tail),
            2 => sums::<2, T>(outs, weights, rows, len, load, axpy_tail),
            3 => sums::<3, T>(outs, weights, rows, len, load, axpy_tail),
            _ => sums::<4, T>(outs, weights, rows, len, load, axpy_tail),
        };
        (outs, weights) = (&mut outs[taken..], &weights[taken..]);
    }
}

/// [`sums_of_rows`] for the first `Q` queries (every weight slice at least as long as `rows` has
/// rows of `len`); returns `Q`.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn sums<const Q: usize, T: Pod>(
    outs: &mut [&mut [f32]],
    weights: &[&[f32]],
    rows: &[T],
    len: usize,
    load: impl Fn(&[T; 16]) -> __m512,
    axpy_tail: impl Fn(&mut [f32], f32, &[T]),
) -> usize {
    let count = rows.len() / len;
    let weights: [&[f32]; Q] = std::array::from_fn(|q| &weights[q][..count]);
    let wide = len / 64 * 64;
    for start in (0..wide).step_by(64) {
        let mut acc: [[__m512; 4]; Q] =
            std::array::from_fn(|q| std::array::from_fn(|k| load16(&outs[q][start + 16 * k..])));
        for (j, row) in rows.chunks_exact(len).enumerate() {
            let chunk: &[[T; 16]; 4] = row[start..start + 64].as_chunks::<16>().0.try_into().expect("64 values");
            let values: [__m512; 4] = std::array::from_fn(|k| load(&chunk[k]));
            for (acc, weights) in acc.iter_mut().zip(&weights) {
                let scale = _mm512_set1_ps(weights[j]);
                for (acc, v) in acc.iter_mut().zip(values) {
                    *acc = _mm512_add_ps(*acc, _mm512_mul_ps(scale, v));
                }
            }
        }
        for (acc, out) in acc.iter().zip(outs.iter_mut()) {
            let values: [f32; 64] = bytemuck::cast(*acc);
            out[start..start + 64].copy_from_slice(&values);
        }
    }
    if wide < len {
        for (out, weights) in outs.iter_mut().zip(weights) {
            for (&w, row) in weights.iter().zip(rows.chunks_exact(len)) {
                axpy_tail(&mut out[wide..], w, &row[wide..]);
            }
        }
    }
    Q
}

/// `avx2_vector::exp8`'s steps on 16 lanes (the same operations per lane, masks for its blends),
/// so each value's `e^x` is the same bits.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn exp16(x: __m512) -> __m512 {
    let clamped = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(EXP_MIN_ARG)), _mm512_set1_ps(EXP_MAX_ARG));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
        clamped,
        _mm512_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), clamped);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(1.0 / 5040.0);
    for c in EXP_HORNER {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let n = _mm512_cvtps_epi32(n);
    let half = _mm512_srai_epi32::<1>(n);
    let pow2 = |k: __m512i| _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(k, _mm512_set1_epi32(127))));
    let y = _mm512_mul_ps(_mm512_mul_ps(p, pow2(half)), pow2(_mm512_sub_epi32(n, half)));
    let above = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_set1_ps(EXP_MAX_ARG));
    let y = _mm512_mask_blend_ps(above, y, _mm512_set1_ps(f32::INFINITY));
    let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_MIN_ARG));
    let y = _mm512_mask_blend_ps(below, y, _mm512_setzero_ps());
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), y, x)
}

/// `avx2_vector::exp_f32` bit for bit, 16 values at a time (then its 8 and its padded tail).
#[target_feature(enable = "avx2,fma,avx512f")]
pub(super) fn exp_f32(xs: &mut [f32]) {
    let (x8, tail) = xs.as_chunks_mut::<8>();
    let (pairs, odd) = x8.as_chunks_mut::<2>();
    for pair in pairs {
        *pair = bytemuck::cast(exp16(load_pair(pair)));
    }
    for chunk in odd {
        *chunk = bytemuck::cast(exp8(load8(chunk)));
    }
    exp_tail(tail);
}

/// `avx2_vector::softmax_f32` bit for bit, twice the lanes: the same values scaled, the same
/// maximum (exact in any order), `e^x` by [`exp16`], and the total in the AVX2 kernel's 8 partial
/// sums in its order (a pair of 8-value chunks added as two vectors, low half first).
#[target_feature(enable = "avx2,fma,avx512f")]
pub(super) fn softmax_f32(xs: &mut [f32], scale: f32, sink: Option<f32>) {
    let (x8, tail) = xs.as_chunks_mut::<8>();
    let (pairs, odd) = x8.as_chunks_mut::<2>();
    // `max_ps(v, m)` keeps `m` where `v` is NaN, as `f32::max` ignores a NaN.
    let start = sink.unwrap_or(f32::NEG_INFINITY);
    let (factor, mut lanes_max) = (_mm512_set1_ps(scale), _mm512_set1_ps(start));
    for pair in pairs.iter_mut() {
        let v = _mm512_mul_ps(load_pair(pair), factor);
        *pair = bytemuck::cast(v);
        lanes_max = _mm512_max_ps(v, lanes_max);
    }
    let mut odd_max = _mm256_set1_ps(start);
    for chunk in odd.iter_mut() {
        let v = _mm256_mul_ps(load8(chunk), _mm256_set1_ps(scale));
        *chunk = bytemuck::cast(v);
        odd_max = _mm256_max_ps(v, odd_max);
    }
    let (wide, narrow): ([f32; 16], [f32; 8]) = (bytemuck::cast(lanes_max), bytemuck::cast(odd_max));
    let max = wide.iter().chain(&narrow).fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let max = softmax_tail_max(tail, scale, max);
    let shift = _mm512_set1_ps(max);
    let mut sums = _mm256_setzero_ps();
    for pair in pairs.iter_mut() {
        let e = exp16(_mm512_sub_ps(load_pair(pair), shift));
        *pair = bytemuck::cast(e);
        let (low, high): (__m256, __m256) =
            (_mm512_castps512_ps256(e), _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(e))));
        sums = _mm256_add_ps(_mm256_add_ps(sums, low), high);
    }
    for chunk in odd.iter_mut() {
        let e = exp8(_mm256_sub_ps(load8(chunk), _mm256_set1_ps(max)));
        *chunk = bytemuck::cast(e);
        sums = _mm256_add_ps(sums, e);
    }
    let total = softmax_tail_exp(tail, max, sink.map_or(0.0, |sink| (sink - max).exp()) + sum_lanes(sums));
    let divisor = _mm512_set1_ps(total);
    for pair in pairs.iter_mut() {
        *pair = bytemuck::cast(_mm512_div_ps(load_pair(pair), divisor));
    }
    for chunk in odd.iter_mut() {
        *chunk = bytemuck::cast(_mm256_div_ps(load8(chunk), _mm256_set1_ps(total)));
    }
    for x in tail.iter_mut() {
        *x /= total;
    }
}

/// Two 8-value chunks as one vector.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn load_pair(pair: &[[f32; 8]; 2]) -> __m512 {
    pod_read_unaligned::<__m512>(bytemuck::cast_slice(pair))
}

/// `repacked::quantize_q8_1` (so `crate::activation::quantize_act_blocks`) bit for bit, a block
/// in two vectors rather than four: the largest magnitude (NaN never wins: `maxps` returns its
/// second operand), `d = amax / 127`, the values times `1/d` clamped to the i8 range and rounded
/// half away from zero (truncated, then ±1 where the rest reaches ±0.5; NaN to 0), narrowed by
/// `vpmovsdb`, their sum, the scale rounded to f16. Sixteen blocks at a time have their maxima
/// and sums reduced side by side, a lane each ([`reduce_rows`]: exact in any order, no lane of a
/// maximum being NaN), and their scales worked out in one vector, rather than a block's
/// horizontal reductions and scalar steps one after another.
#[target_feature(enable = "avx2,fma,avx512f,f16c")]
pub(super) fn quantize_q8_1(x: &[f32], out: &mut [ActBlock]) {
    let (x_blocks, _) = x.as_chunks::<32>();
    let n = x_blocks.len().min(out.len());
    let (x16, x_rest) = x_blocks[..n].as_chunks::<16>();
    let (out16, out_rest) = out[..n].as_chunks_mut::<16>();
    for (x, out) in x16.iter().zip(out16) {
        let amax = reduce_rows(std::array::from_fn(|b| lanes_amax(&x[b])), |a, b| _mm512_max_ps(a, b));
        let scale = _mm512_div_ps(amax, _mm512_set1_ps(127.0));
        let nonzero = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(scale, _mm512_setzero_ps());
        let inverse: [f32; 16] = bytemuck::cast(_mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0), scale));
        let quant_sums: [__m512; 16] = std::array::from_fn(|b| {
            _mm512_castsi512_ps(quantize_block(&x[b], _mm512_set1_ps(inverse[b]), &mut out[b].qs))
        });
        let add = |a: __m512, b: __m512| {
            _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)))
        };
        let sums = _mm512_castps_si512(reduce_rows(quant_sums, add));
        // Rounded to f16 and back (`vcvtps2ph` to nearest even, as `f16::from_f32` rounds).
        let d = _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(scale));
        let ds = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sums));
        let (d, sums, ds): ([f32; 16], [i32; 16], [f32; 16]) =
            (bytemuck::cast(d), bytemuck::cast(sums), bytemuck::cast(ds));
        for (b, block) in out.iter_mut().enumerate() {
            (block.d, block.sum, block.ds, block.pad) = (d[b], sums[b], ds[b], 0);
        }
    }
    for (x, block) in x_rest.iter().zip(out_rest) {
        let scale = _mm512_reduce_max_ps(lanes_amax(x)) / 127.0;
        let inverse = _mm512_set1_ps(if scale == 0.0 { 0.0 } else { 1.0 / scale });
        block.sum = _mm512_reduce_add_epi32(quantize_block(x, inverse, &mut block.qs));
        let rounded_scale = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(scale));
        block.d = _mm_cvtss_f32(_mm_cvtph_ps(rounded_scale));
        block.ds = block.d * block.sum as f32;
        block.pad = 0;
    }
}

/// A block's magnitudes folded into 16 lanes (the block's largest in some lane; never NaN).
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn lanes_amax(x: &[f32; 32]) -> __m512 {
    let sign_off = _mm512_set1_epi32(0x7fff_ffff);
    let abs = |v: __m512| _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), sign_off));
    _mm512_max_ps(abs(load16(&x[16..])), _mm512_max_ps(abs(load16(&x[..16])), _mm512_setzero_ps()))
}

/// A block's values times `inverse`, clamped, rounded half away from zero (NaN to 0), narrowed
/// into `qs`; their 16 lane sums.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn quantize_block(x: &[f32; 32], inverse: __m512, qs: &mut [u8; 32]) -> __m512i {
    let (lowest, highest) = (_mm512_set1_ps(-128.0), _mm512_set1_ps(127.0));
    let one = _mm512_set1_epi32(1);
    let rounded = [load16(&x[..16]), load16(&x[16..])].map(|v| {
        let y = _mm512_min_ps(highest, _mm512_max_ps(lowest, _mm512_mul_ps(v, inverse)));
        let t = _mm512_cvttps_epi32(y);
        let rest = _mm512_sub_ps(y, _mm512_cvtepi32_ps(t));
        let t = _mm512_mask_add_epi32(t, _mm512_cmp_ps_mask::<_CMP_GE_OQ>(rest, _mm512_set1_ps(0.5)), t, one);
        let t = _mm512_mask_sub_epi32(t, _mm512_cmp_ps_mask::<_CMP_LE_OQ>(rest, _mm512_set1_ps(-0.5)), t, one);
        _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(y, y), t)
    });
    let bytes: [[u8; 16]; 2] = rounded.map(|r| bytemuck::cast(_mm512_cvtsepi32_epi8(r)));
    *qs = bytemuck::cast(bytes);
    _mm512_add_epi32(rounded[0], rounded[1])
}
