//! The f32 vector kernels against their scalar loops, at every length around the SIMD widths.

use minerva_quant::vector::{
    axpy, axpy_ref, dot, dot_ref, dots, dots_transposed, exp, exp_ref, softmax, softmax_ref, transpose,
    transpose_into_rows, transpose_into_rows_ref, transpose_keys, transpose_ref, transposed_keys_len, vector_isa,
    weighted_sum, weighted_sum_add, weighted_sum_add_ref, weighted_sum_ref, widen_f16,
};
use proptest::prelude::*;

proptest! {
    #[test]
    fn dot_matches_the_scalar_sum(values in prop::collection::vec((-4.0f32..4.0, -4.0f32..4.0), 0..300)) {
        let (a, b): (Vec<f32>, Vec<f32>) = values.into_iter().unzip();
        let fast = dot(&a, &b);
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
        let magnitude: f64 = a.iter().zip(&b).map(|(x, y)| f64::from((x * y).abs())).sum();
        // Both orders of summation are within n·ε·Σ|a·b| of the exact sum.
        let bound = a.len() as f64 * f64::from(f32::EPSILON) * magnitude + 1e-30;
        prop_assert!((f64::from(fast) - exact).abs() <= bound, "{} ({}): {fast} vs {exact}", vector_isa(), a.len());
        prop_assert!((f64::from(dot_ref(&a, &b)) - exact).abs() <= bound);
    }

    #[test]
    fn axpy_equals_the_scalar_loop(values in prop::collection::vec((-4.0f32..4.0, -4.0f32..4.0), 0..100), a in -2.0f32..2.0) {
        let (x, y0): (Vec<f32>, Vec<f32>) = values.into_iter().unzip();
        let (mut fast, mut reference) = (y0.clone(), y0.clone());
        axpy(&mut fast, a, &x);
        axpy_ref(&mut reference, a, &x);
        prop_assert_eq!(fast, reference, "{}", vector_isa());
    }
}

/// `count` rows of `len` values in −4·|seed|..4·|seed|, spread over a hundred levels.
fn sample_rows(count: usize, len: usize, seed: f32) -> Vec<f32> {
    (0..count * len).map(|i| seed * ((i * 37 % 101) as f32 - 50.0) / 7.0).collect()
}

/// `start` plus `weights[j]·row j` for each whole row, by the scalar `axpy` in row order.
fn axpy_row_by_row(mut start: Vec<f32>, weights: &[f32], rows: &[f32]) -> Vec<f32> {
    for (&w, row) in weights.iter().zip(rows.chunks_exact(start.len().max(1))) {
        axpy_ref(&mut start, w, row);
    }
    start
}

proptest! {
    /// `weighted_sum` is `axpy` of each row in turn onto zeros, bit for bit, with outputs past the
    /// 64-wide passes, and rows cut short by the length of `rows`.
    #[test]
    fn weighted_sum_equals_axpy_row_by_row(
        len in 0usize..150,
        weights in prop::collection::vec(-2.0f32..2.0, 0..12),
        short in 0usize..2,
        seed in -4.0f32..4.0,
    ) {
        let rows = sample_rows(weights.len().saturating_sub(short), len, seed);
        let expected = axpy_row_by_row(vec![0.0f32; len], &weights, &rows);
        let (mut fast, mut reference) = (vec![f32::NAN; len], vec![f32::NAN; len]);
        weighted_sum(&mut fast, &weights, &rows);
        weighted_sum_ref(&mut reference, &weights, &rows);
        prop_assert_eq!(&fast, &expected, "{}", vector_isa());
        prop_assert_eq!(&reference, &expected);
    }

    /// `weighted_sum_add` is `axpy` of each row in turn onto what `out` held, bit for bit, so that
    /// a sum taken over two blocks of rows equals the sum over all of them in one call.
    #[test]
    fn weighted_sum_add_equals_axpy_onto_the_start_and_splits_by_rows(
        len in 1usize..150,
        weights in prop::collection::vec(-2.0f32..2.0, 0..12),
        split in 0usize..12,
        seed in -4.0f32..4.0,
        start in -3.0f32..3.0,
    ) {
        let rows = sample_rows(weights.len(), len, seed);
        let begin: Vec<f32> = (0..len).map(|i| start * ((i * 29 % 13) as f32 - 6.0)).collect();
        let expected = axpy_row_by_row(begin.clone(), &weights, &rows);
        let (mut whole, mut reference, mut split_sum) = (begin.clone(), begin.clone(), begin);
        weighted_sum_add(&mut whole, &weights, &rows);
        weighted_sum_add_ref(&mut reference, &weights, &rows);
        let split = split.min(weights.len());
        weighted_sum_add(&mut split_sum, &weights[..split], &rows[..split * len]);
        weighted_sum_add(&mut split_sum, &weights[split..], &rows[split * len..]);
        prop_assert_eq!(&whole, &expected, "{}", vector_isa());
        prop_assert_eq!(&reference, &expected);
        prop_assert_eq!(&split_sum, &expected, "{} split at {}", vector_isa(), split);
    }
}

proptest! {
    /// `dots` gives each whole row the same value wherever it sits (alone, or after any number
    /// of other rows: attention's scores do not depend on how keys were grouped), within
    /// `len·ε·Σ|x·r|` of the exact sum; outputs past the rows are zero.
    #[test]
    fn dots_give_each_row_one_value_wherever_it_sits(
        len in 0usize..150,
        n in 0usize..20,
        short in 0usize..2,
        skip in 0usize..20,
        seed in -4.0f32..4.0,
    ) {
        let x: Vec<f32> = (0..len).map(|i| ((i * 53 % 97) as f32 - 48.0) / 11.0).collect();
        let whole = n.saturating_sub(short);
        let rows = sample_rows(whole, len, seed);
        let mut out = vec![f32::NAN; n];
        dots(&mut out, &x, &rows);
        let skip = skip.min(whole);
        let mut later = vec![f32::NAN; n - skip];
        dots(&mut later, &x, &rows[skip * len..]);
        for (j, &got) in out.iter().enumerate() {
            let Some(row) = rows.get(j * len..(j + 1) * len).filter(|_| j < whole && len > 0) else {
                prop_assert_eq!(got.to_bits(), 0.0f32.to_bits(), "{} row {} past the rows", vector_isa(), j);
                continue;
            };
            let mut alone = [f32::NAN];
            dots(&mut alone, &x, row);
            prop_assert_eq!(got.to_bits(), alone[0].to_bits(), "{} row {} of {} (len {}) alone", vector_isa(), j, n, len);
            if j >= skip {
                prop_assert_eq!(got.to_bits(), later[j - skip].to_bits(), "{} row {} after {} skipped", vector_isa(), j, skip);
            }
            let exact: f64 = x.iter().zip(row).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            let magnitude: f64 = x.iter().zip(row).map(|(a, b)| f64::from((a * b).abs())).sum();
            let bound = len as f64 * f64::from(f32::EPSILON) * magnitude + 1e-30;
            prop_assert!((f64::from(got) - exact).abs() <= bound, "{} row {}: {} vs {}", vector_isa(), j, got, exact);
        }
    }
}

proptest! {
    /// `dots_transposed` over keys laid out by `transpose_keys` gives each query and key the bits
    /// `dots` gives that key as a row: head sizes its kernel takes (4, 8 and 16 chunks and others)
    /// and ones it leaves to the key-by-key path, up to 20 queries (past one pass of 16, batches
    /// of four and a short one), each over its own range of keys (empty, inside one group, across
    /// groups, into the zeros of a last short group), and keys past those laid out as zeros.
    #[test]
    fn dots_transposed_equal_dots_key_by_key(
        len in prop::sample::select(vec![16usize, 32, 48, 64, 96, 128, 192, 256, 8, 24, 80]),
        keys in 1usize..70,
        queries in prop::collection::vec((0usize..80, 0usize..40), 1..20),
        seed in -4.0f32..4.0,
    ) {
        let rows = sample_rows(keys, len, seed);
        let mut laid = vec![f32::NAN; transposed_keys_len(keys, len).unwrap()];
        transpose_keys(&rows, len, &mut laid);
        let xs: Vec<Vec<f32>> =
            (0..queries.len()).map(|q| (0..len).map(|i| ((i * 53 + q * 29) % 97) as f32 / 11.0 - 4.4).collect()).collect();
        let laid_keys = keys.div_ceil(16) * 16;
        let firsts: Vec<usize> = queries.iter().map(|&(first, _)| first.min(laid_keys)).collect();
        let mut outs: Vec<Vec<f32>> = queries.iter().zip(&firsts).map(|(&(_, n), &f)| vec![f32::NAN; n.min(laid_keys - f)]).collect();
        let mut out_refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| &mut o[..]).collect();
        let x_refs: Vec<&[f32]> = xs.iter().map(|x| &x[..]).collect();
        dots_transposed(&mut out_refs, &x_refs, &firsts, &laid);
        for (q, (out, &first)) in outs.iter().zip(&firsts).enumerate() {
            for (i, &got) in out.iter().enumerate() {
                let k = first + i;
                let want = match rows.get(k * len..(k + 1) * len).filter(|_| k < keys) {
                    Some(row) => {
                        let mut alone = [f32::NAN];
                        dots(&mut alone, &xs[q], row);
                        alone[0]
                    }
                    None => dots_of_zeros(&xs[q]),
                };
                prop_assert_eq!(got.to_bits(), want.to_bits(), "{} len {} query {} key {}", vector_isa(), len, q, k);
            }
        }
    }
}

/// What `dots` gives a key of zeros (a last group's padding): zero, of the sign its sums give.
fn dots_of_zeros(x: &[f32]) -> f32 {
    let mut alone = [f32::NAN];
    dots(&mut alone, x, &vec![0.0; x.len()]);
    alone[0]
}

#[test]
fn widen_f16_is_exact_over_the_common_length() {
    use half::f16;
    let values: Vec<f16> =
        (0..70).map(|i| f16::from_f32(i as f32 * 0.37 - 9.0)).chain([f16::NAN, f16::INFINITY, f16::NEG_ZERO]).collect();
    for n in [0, 1, 7, 8, 15, 16, 17, 33, 73] {
        let mut out = vec![f32::NAN; n + 2];
        widen_f16(&values[..n], &mut out);
        for (got, want) in out[..n].iter().zip(&values[..n]) {
            assert_eq!(got.to_bits(), want.to_f32().to_bits(), "{}: {n} values", vector_isa());
        }
        assert!(out[n..].iter().all(|v| v.is_nan()), "past the values: untouched");
    }
}

/// `exp` and `exp_ref` within `ulps` units in the last place of f64's `exp`, for results in f32's
/// normal range.
fn check_exp(xs: &[f32], ulps: f64) -> Result<(), TestCaseError> {
    let (mut fast, mut reference) = (xs.to_vec(), xs.to_vec());
    exp(&mut fast);
    exp_ref(&mut reference);
    for ((&x, &f), &r) in xs.iter().zip(&fast).zip(&reference) {
        let exact = f64::from(x).exp();
        let ulp = exact * f64::from(f32::EPSILON);
        for (what, got) in [("fast", f), ("ref", r)] {
            prop_assert!(
                (f64::from(got) - exact).abs() <= ulps * ulp,
                "{what} ({}) exp({x}) = {got}, exact {exact}",
                vector_isa()
            );
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn exp_is_within_2_ulp_over_the_normal_range(xs in prop::collection::vec(-87.3f32..88.7, 0..40)) {
        check_exp(&xs, 2.0)?;
    }

    #[test]
    fn exp_is_within_2_ulp_where_softmax_and_silu_use_it(xs in prop::collection::vec(-20.0f32..20.0, 0..40)) {
        check_exp(&xs, 2.0)?;
    }

    /// The same value gives the same result wherever it sits (the batch invariance of whatever
    /// uses it: softmax rows and activations of any length).
    #[test]
    fn exp_does_not_depend_on_position(x in -90.0f32..90.0, len in 1usize..20, at in 0usize..20) {
        let at = at % len;
        let mut xs: Vec<f32> = (0..len).map(|i| i as f32 - 7.5).collect();
        xs[at] = x;
        let mut alone = [x];
        exp(&mut xs);
        exp(&mut alone);
        prop_assert_eq!(xs[at].to_bits(), alone[0].to_bits());
    }
}

#[test]
fn exp_edges() {
    let mut xs = [0.0, f32::NEG_INFINITY, f32::INFINITY, f32::NAN, -200.0, 100.0, 88.72, -103.0, -87.0];
    exp(&mut xs);
    assert_eq!(xs[0], 1.0);
    assert_eq!(xs[1], 0.0);
    assert_eq!(xs[2], f32::INFINITY);
    assert!(xs[3].is_nan());
    assert_eq!(xs[4], 0.0);
    assert_eq!(xs[5], f32::INFINITY);
    assert!(xs[6].is_finite() && (f64::from(xs[6]) / f64::from(88.72f32).exp() - 1.0).abs() < 3e-7);
    // Subnormal results: within one subnormal step (2^-149) of the exact value.
    assert!((f64::from(xs[7]) - f64::from(-103.0f32).exp()).abs() <= 2f64.powi(-149));
    assert!((f64::from(xs[8]) / (-87.0f64).exp() - 1.0).abs() < 3e-7);
}

#[test]
fn lengths_may_differ_and_be_empty() {
    assert_eq!(dot(&[], &[1.0]), 0.0);
    assert_eq!(dot(&[2.0; 20], &[3.0; 17]), 17.0 * 6.0);
    let mut y = vec![1.0f32; 9];
    axpy(&mut y, 2.0, &[1.0; 40]);
    assert_eq!(y, vec![3.0; 9]);
}

#[cfg(target_arch = "aarch64")]
#[test]
fn aarch64_machines_use_the_neon_kernels() {
    assert_eq!(vector_isa(), "neon");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_machines_use_the_simd_kernels() {
    let avx2 = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
    if avx2 && std::arch::is_x86_feature_detected!("avx512f") {
        assert_eq!(vector_isa(), "avx512f+avx2+fma");
    } else if avx2 {
        assert_eq!(vector_isa(), "avx2+fma");
    } else {
        assert_eq!(vector_isa(), "scalar");
    }
}

proptest! {
    /// `softmax` against the scalar loops (libm `exp`, the total summed in order): each probability
    /// within the two kernels' `exp` (2 ulp) and summation-order differences of the reference's,
    /// at every length around the 8 lanes, with and without a sink, and both sum to 1 with it.
    #[test]
    fn softmax_matches_the_scalar_loops(
        logits in prop::collection::vec(-30.0f32..30.0, 0..70),
        scale in 0.05f32..2.0,
        sink in prop::option::of(-30.0f32..30.0),
    ) {
        let (mut fast, mut reference) = (logits.clone(), logits.clone());
        softmax(&mut fast, scale, sink);
        softmax_ref(&mut reference, scale, sink);
        let tol = 1e-6 + 4.0 * logits.len() as f32 * f32::EPSILON;
        for (i, (f, r)) in fast.iter().zip(&reference).enumerate() {
            prop_assert!((f - r).abs() <= tol * r.max(1e-30), "{} {i}: {f} vs {r}", vector_isa());
        }
        if !logits.is_empty() {
            let sink_p = sink.map_or(0.0, |sink| {
                let max = logits.iter().map(|x| x * scale).fold(sink, f32::max);
                let total: f32 = logits.iter().map(|x| (x * scale - max).exp()).sum::<f32>() + (sink - max).exp();
                (sink - max).exp() / total
            });
            let sum: f32 = fast.iter().sum::<f32>() + sink_p;
            prop_assert!((sum - 1.0).abs() < 1e-4, "{sum}");
        }
    }
}

/// A NaN logit poisons the total, so every probability is NaN in both kernels (none panics, and
/// no lane keeps a finite value the scalar loop would not).
#[test]
fn a_nan_logit_makes_every_probability_nan() {
    for len in [3, 9, 17] {
        let mut logits: Vec<f32> = (0..len).map(|i| i as f32 / 4.0).collect();
        logits[len - 2] = f32::NAN;
        let (mut fast, mut reference) = (logits.clone(), logits);
        softmax(&mut fast, 1.0, Some(0.5));
        softmax_ref(&mut reference, 1.0, Some(0.5));
        assert!(fast.iter().chain(&reference).all(|p| p.is_nan()), "{len}: {fast:?} {reference:?}");
    }
}

/// The transpose (SIMD where the CPU has it, in 8 × 8 blocks) and its scalar reference move every
/// value to its place: whole blocks, ragged edges on both sides, and column ranges starting off a
/// block boundary, as a task of a threaded transpose asks for.
#[test]
fn transpose_moves_each_value_to_its_column_row() {
    for (rows, cols) in [(1, 1), (3, 17), (8, 8), (16, 16), (33, 5), (40, 70), (64, 72), (9, 64)] {
        let src: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
        for first in [0, cols / 3, cols - 1] {
            let count = cols - first;
            let (mut fast, mut reference) = (vec![f32::NAN; count * rows], vec![f32::NAN; count * rows]);
            transpose(&src, rows, cols, first, &mut fast);
            transpose_ref(&src, rows, cols, first, &mut reference);
            for c in first..cols {
                for r in 0..rows {
                    let at = (c - first) * rows + r;
                    assert_eq!(fast[at], src[r * cols + c], "{rows}x{cols} from {first}: ({r}, {c})");
                    assert_eq!(reference[at], src[r * cols + c], "reference {rows}x{cols} from {first}: ({r}, {c})");
                }
            }
            // Into separate rows, each longer than `rows`: the values past `rows` stay as they were.
            for into_rows in [transpose_into_rows, transpose_into_rows_ref] {
                let mut rows_out: Vec<Vec<f32>> = (0..count).map(|k| vec![-1.0 - k as f32; rows + 3]).collect();
                let mut slices: Vec<&mut [f32]> = rows_out.iter_mut().map(|r| &mut r[..]).collect();
                into_rows(&src, rows, cols, first, &mut slices);
                for (k, row) in rows_out.iter().enumerate() {
                    let want: Vec<f32> = (0..rows).map(|r| src[r * cols + first + k]).collect();
                    assert_eq!(row[..rows], want[..], "{rows}x{cols} from {first}: row {k}");
                    assert_eq!(row[rows..], [-1.0 - k as f32; 3], "{rows}x{cols} from {first}: past row {k}");
                }
            }
        }
    }
}
