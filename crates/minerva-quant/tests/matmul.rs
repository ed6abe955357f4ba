//! `matvec` / `matmul`: the fast path against the scalar kernels and against plain f64 dot products
//! of dequantized values, at awkward sizes and thread counts; shape errors.

mod common;

use common::Rng;
use minerva_core::DType;
use minerva_quant::{
    Matrix, Product, QuantError, activation_dtype, dequantize, detected_isas, has_i16_matmul, matmul, matmul_i16,
    matmul_i16_each, matmul_i16_ref, matmul_ref, matmul_with_isa, matvec, matvec_ref, quantize,
};
use proptest::prelude::*;

const DTYPES: [DType; 14] = [
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::MXFP4,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::F16,
    DType::BF16,
    DType::F32,
];

/// Random weights: float formats from values in [-1, 1); block formats from random bytes with
/// their scale fields overwritten by finite, moderate scales (random bytes there could be NaN/inf).
fn random_weights(dtype: DType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    let values = rows * cols;
    match dtype {
        DType::F32 => return (0..values).flat_map(|_| rng.unit().to_le_bytes()).collect(),
        DType::F16 => return (0..values).flat_map(|_| half::f16::from_f32(rng.unit()).to_le_bytes()).collect(),
        DType::BF16 => return (0..values).flat_map(|_| half::bf16::from_f32(rng.unit()).to_le_bytes()).collect(),
        _ => {}
    }
    let block_bytes = dtype.block_bytes();
    let mut bytes: Vec<u8> = (0..values / dtype.block_elems() * block_bytes).map(|_| rng.next() as u8).collect();
    let scale_offsets: &[usize] = match dtype {
        DType::Q8_0 | DType::Q4_0 | DType::Q5_0 => &[0],
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q6_K => &[208],
        _ => &[],
    };
    for block in bytes.chunks_exact_mut(block_bytes) {
        for &at in scale_offsets {
            let scale = half::f16::from_f32(0.01 + 0.05 * rng.unit());
            block[at..at + 2].copy_from_slice(&scale.to_le_bytes());
        }
        if dtype == DType::MXFP4 {
            block[0] = 120 + (rng.next() % 12) as u8; // 2^-8 .. 2^3
        }
    }
    bytes
}

fn random_values(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed.wrapping_mul(31) | 1);
    (0..len).map(|_| 2.0 * rng.unit()).collect()
}

/// The activation as the kernels see it: quantized to Q8_0/Q8_K and dequantized (f32 weights'
/// activations are used as given).
fn quantized_activation(dtype: DType, x: &[f32]) -> Vec<f32> {
    let act = activation_dtype(dtype).expect("a matmul dtype");
    if act == DType::F32 {
        return x.to_vec();
    }
    let mut bytes = vec![0u8; x.len() / act.block_elems() * act.block_bytes()];
    quantize(act, x, &mut bytes).expect("quantize");
    let mut back = vec![0.0f32; x.len()];
    dequantize(act, &bytes, &mut back).expect("dequantize");
    back
}

fn pool(threads: usize) -> minerva_quant::ComputePool {
    minerva_quant::ComputePool::new(threads).expect("thread pool")
}

/// Checks `y` (n × rows) against f64 dot products of dequantized weight rows with `xs`
/// (`activation`: the vectors the kernels multiply by) within `tol(row, x, activation)`.
fn check(
    dtype: DType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    xs: &[f32],
    ys: &[f32],
    quantized_act: bool,
) -> Result<(), TestCaseError> {
    let mut w = vec![0.0f32; rows * cols];
    dequantize(dtype, weights, &mut w).expect("dequantize weights");
    let eps = f64::from(f32::EPSILON);
    let float_format = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
    for (x, y) in xs.chunks_exact(cols).zip(ys.chunks_exact(rows)) {
        let a = quantized_activation(dtype, x);
        let a = if quantized_act { &a } else { x };
        let a_abs: f64 = a.iter().map(|v| f64::from(v.abs())).sum();
        for (r, (row, &got)) in w.chunks_exact(cols).zip(y).enumerate() {
            let exact: f64 = row.iter().zip(a).map(|(&w, &a)| f64::from(w) * f64::from(a)).sum();
            let w_max = row.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())));
            let wa_abs: f64 = row.iter().zip(a).map(|(&w, &a)| f64::from((w * a).abs())).sum();
            // Float summation order. Float formats: the kernels sum cols f32 products in some order
            // (8 lanes x 4 accumulators, or sequentially), a rounding per step bounded by
            // eps·Σ|w·a|, so (cols + 4)·eps·Σ|w·a| bounds the difference from the exact sum.
            // Block formats: the integer sum per block is exact; the roundings are the scale
            // product d_w·d_a, the FMA per block, the min/offset term and the running f32 sum over
            // B ≤ cols/16 block terms, each bounded by eps·max|w|·Σ|a| up to the small factor 3
            // that |d·sc·q| + |dmin·m| ≤ 3·max|w| gives for K-quants. The reference's dequantized
            // weights are themselves rounded f32 (`factor·q - offset`: 2 roundings of that size).
            // Hence 4·(cols/16 + 16)·eps·max|w|·Σ|a|.
            let mut tol = if float_format {
                (cols as f64 + 4.0) * eps * wa_abs
            } else {
                4.0 * (cols as f64 / 16.0 + 16.0) * eps * w_max * a_abs
            };
            if !quantized_act && !float_format {
                // Against raw x: add the activation quantization error. Q8_0 stores d = amax/127 as
                // f16 (relative error ≤ 2^-11) and rounds x/d to the nearest integer, so
                // |x - d̂·q| ≤ d/2 + 127·2^-11·d ≈ 0.562·amax/127 < amax/200 per value; Q8_K keeps
                // d in f32 (≤ amax/254). The sum over a row is ≤ Σ|w_i|·amax(block of i)/200.
                let block = activation_dtype(dtype).expect("matmul dtype").block_elems();
                let amax = |i: usize| x[i / block * block..][..block].iter().fold(0.0f32, |m, v| m.max(v.abs()));
                tol += row.iter().enumerate().map(|(i, w)| f64::from(w.abs() * amax(i)) / 200.0).sum::<f64>();
            }
            prop_assert!(
                (f64::from(got) - exact).abs() <= tol + 1e-30,
                "{dtype} row {r}: got {got}, exact {exact}, tol {tol}"
            );
        }
    }
    Ok(())
}

fn shape_for(dtype: DType, cols_units: usize) -> usize {
    if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        // Any width: exercise tails of the 8- and 32-wide loops.
        cols_units * 13 + cols_units % 3
    } else {
        dtype.block_elems() * cols_units
    }
}

/// Checks the i16 products `ys` (n × rows) of the dequantized weights `w` (rows × cols) with `xs`
/// against f64 dot products: i16 activations keep a block's values to 1/30000 of its largest.
fn check_i16(dtype: DType, isa: &str, w: &[f32], cols: usize, xs: &[f32], ys: &[f32]) -> Result<(), TestCaseError> {
    let rows = w.len() / cols;
    for (x, y) in xs.chunks_exact(cols).zip(ys.chunks_exact(rows)) {
        let amax: Vec<f32> = x.chunks_exact(32).map(|b| b.iter().fold(0.0f32, |m, v| m.max(v.abs()))).collect();
        for (r, (row, &got)) in w.chunks_exact(cols).zip(y).enumerate() {
            let exact: f64 = row.iter().zip(x).map(|(&w, &x)| f64::from(w) * f64::from(x)).sum();
            let tol: f64 = row.iter().enumerate().map(|(i, w)| f64::from(w.abs() * amax[i / 32]) / 30000.0).sum();
            prop_assert!(
                (f64::from(got) - exact).abs() <= tol + 1e-30,
                "{dtype} {isa} i16 row {r}: got {got}, exact {exact}, tol {tol}"
            );
        }
    }
    Ok(())
}

/// MXFP4 scales at the ends of the E8M0 range (2^-128 and 2^-127 are f32 subnormals, which the
/// kernels that convert four exponents at once build differently from normal ones): each row's
/// blocks share one exponent, so a wrong scale cannot hide behind a larger block.
#[test]
fn mxfp4_scales_at_every_exponent_class_match_exact_dot_products() {
    let exponents = [0u8, 1, 2, 3, 100, 127, 128, 140, 0];
    let (rows, cols) = (exponents.len(), 96);
    let mut weights = random_weights(DType::MXFP4, rows, cols, 5);
    for (row, &e) in weights.chunks_exact_mut(cols / 32 * 17).zip(&exponents) {
        for block in row.chunks_exact_mut(17) {
            block[0] = e;
        }
    }
    let mut w = vec![0.0f32; rows * cols];
    dequantize(DType::MXFP4, &weights, &mut w).expect("dequantize");
    assert!(w[..cols].iter().any(|&v| v != 0.0 && v.abs() < f32::MIN_POSITIVE), "row 0 is subnormal");
    for n in [1, 2, 3, 5] {
        let xs = random_values(n * cols, 9 + n as u64);
        for isa in detected_isas() {
            let mut ys = vec![f32::NAN; n * rows];
            matmul_with_isa(isa, true, DType::MXFP4, &weights, rows, cols, &xs, n, &mut ys).expect("i16");
            check_i16(DType::MXFP4, isa, &w, cols, &xs, &ys).unwrap();
        }
    }
}

/// Every E8M0 byte (255 and the largest overflow f32, so results may be infinite or NaN), at
/// every place of a four-row group's two blocks and of an odd third block, through the wider ISAs'
/// i16 kernels at one activation (those this CPU runs): the AVX2 tiles' bits, NaN for NaN.
#[cfg(target_arch = "x86_64")]
#[test]
fn every_mxfp4_exponent_gives_the_avx2_bits() {
    if !common::avx2_or_say_why_not("every_mxfp4_exponent_gives_the_avx2_bits") {
        return;
    }
    let isas = detected_isas();
    assert!(isas.contains(&"avx2+fma+f16c"), "{isas:?}");
    let same =
        |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()));
    for blocks in [2, 3] {
        let (rows, cols) = (8, 32 * blocks);
        for first in (0..256).step_by(rows * blocks) {
            let mut weights = random_weights(DType::MXFP4, rows, cols, first as u64);
            for (r, row) in weights.chunks_exact_mut(blocks * 17).enumerate() {
                for (b, block) in row.chunks_exact_mut(17).enumerate() {
                    block[0] = ((first + r * blocks + b) % 256) as u8;
                }
            }
            let xs = random_values(cols, 41 + first as u64);
            let run = |isa: &str| {
                let mut ys = vec![f32::NAN; rows];
                matmul_with_isa(isa, true, DType::MXFP4, &weights, rows, cols, &xs, 1, &mut ys).expect(isa);
                ys
            };
            let want = run("avx2+fma+f16c");
            for isa in ["avx512+vnni", "avx2+avxvnni"].into_iter().filter(|isa| isas.contains(isa)) {
                assert!(same(&run(isa), &want), "{isa} exponents from {first} over {blocks} blocks");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn fast_and_reference_match_exact_dot_products(
        dtype_index in 0..DTYPES.len(),
        rows in 1usize..20,
        cols_units in 1usize..6,
        // Up to 40: past the tile kernels' widths and past the panel kernels' thresholds (8, 16).
        n in 1usize..40,
        threads in 1usize..4,
        seed in any::<u64>(),
    ) {
        let dtype = DTYPES[dtype_index];
        let cols = shape_for(dtype, cols_units);
        let weights = random_weights(dtype, rows, cols, seed);
        let xs = random_values(n * cols, seed);
        let mut fast = vec![f32::NAN; n * rows];
        let mut reference = vec![f32::NAN; n * rows];
        pool(threads).install(|| matmul(dtype, &weights, rows, cols, &xs, n, &mut fast)).expect("matmul");
        matmul_ref(dtype, &weights, rows, cols, &xs, n, &mut reference).expect("matmul_ref");
        check(dtype, &weights, rows, cols, &xs, &fast, true)?;
        check(dtype, &weights, rows, cols, &xs, &reference, true)?;
        check(dtype, &weights, rows, cols, &xs, &fast, false)?;
        // Each output is one kernel call on one row and one vector: neither the thread count nor
        // the batching changes a bit.
        let mut single = vec![f32::NAN; rows];
        for (x, y) in xs.chunks_exact(cols).zip(fast.chunks_exact(rows)) {
            matvec(dtype, &weights, rows, cols, x, &mut single).expect("matvec");
            prop_assert_eq!(&single[..], y);
        }
    }
}

#[test]
fn awkward_row_counts_and_threads_agree_bit_for_bit() {
    for dtype in DTYPES {
        for rows in [1, 3, 17, 130] {
            let cols = shape_for(dtype, 2);
            let weights = random_weights(dtype, rows, cols, 7 + rows as u64);
            let x = random_values(cols, 3);
            let mut one = vec![0.0f32; rows];
            pool(1).install(|| matvec(dtype, &weights, rows, cols, &x, &mut one)).expect("1 thread");
            for threads in [2, 3] {
                let mut many = vec![0.0f32; rows];
                pool(threads).install(|| matvec(dtype, &weights, rows, cols, &x, &mut many)).expect("threads");
                assert_eq!(one, many, "{dtype} rows {rows} threads {threads}");
            }
            let mut scalar = vec![0.0f32; rows];
            matvec_ref(dtype, &weights, rows, cols, &x, &mut scalar).expect("ref");
            for (a, b) in one.iter().zip(&scalar) {
                assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{dtype}: {a} vs {b}");
            }
        }
    }
}

/// A prefill's activations go through the kernels in chunks (`ACT_CHUNK` in matmul.rs): past a
/// chunk, with a remainder that is not a whole tile, on one and on several threads, every output
/// still equals that vector's own matvec bit for bit. With 300 rows of 8 blocks the weights are
/// split into blocks of rows that are not whole panels, whose results are transposed into their
/// columns of the output (`transpose_into_rows`, one slice per activation).
#[test]
fn many_activations_equal_one_vector_at_a_time() {
    // 150: a last chunk of 22; 69: of 5, fewer than the panel kernels take.
    let shapes = [(150, 37, 2), (69, 37, 2), (150, 300, 8)];
    for ((n, rows, units), (dtype, i16)) in shapes.into_iter().flat_map(|shape| {
        DTYPES.iter().map(|&d| (d, false)).chain(I16_DTYPES.iter().map(|&d| (d, true))).map(move |k| (shape, k))
    }) {
        let cols = shape_for(dtype, units);
        let weights = random_weights(dtype, rows, cols, 11);
        let xs = random_values(n * cols, 5);
        let run = |xs: &[f32], n: usize, ys: &mut [f32]| {
            if i16 {
                matmul_i16(dtype, &weights, rows, cols, xs, n, ys)
            } else {
                matmul(dtype, &weights, rows, cols, xs, n, ys)
            }
            .expect("matmul")
        };
        let mut single = vec![f32::NAN; n * rows];
        for (x, y) in xs.chunks_exact(cols).zip(single.chunks_exact_mut(rows)) {
            pool(1).install(|| run(x, 1, y));
        }
        for threads in [1, 2] {
            let mut batched = vec![f32::NAN; n * rows];
            pool(threads).install(|| run(&xs, n, &mut batched));
            assert!(batched == single, "{dtype} i16 {i16} n {n} threads {threads}");
        }
    }
}

/// The AVX-512 and AVX-VNNI kernels run the AVX2 kernels' arithmetic lane for lane: the same
/// results bit for bit (i16 activations for the 32-value formats; on AVX-512 also Q8_K for
/// Q2_K…Q6_K), over panels of 16 and of 8 rows with a partial last one and activation counts on
/// either side of the panels' thresholds (8 and 16), of their steps (8, 4 and 2 activations) and
/// of the chunks (64), and the decode tiles (1 to 3 activations, rows
/// in groups of 4 and a last single one; MXFP4 at one activation over 1 to 4 blocks).
#[test]
fn wider_kernels_equal_the_avx2_kernels_bit_for_bit() {
    let isas = detected_isas();
    for wide in ["avx512+vnni", "avx2+avxvnni"] {
        if !isas.contains(&wide) {
            eprintln!("no {wide} on this CPU: its kernels are not run here");
            continue;
        }
        let k_quants = [DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K];
        let cases = I16_DTYPES
            .iter()
            .map(|&d| (d, true))
            .chain(k_quants.into_iter().filter(|_| wide == "avx512+vnni").map(|d| (d, false)));
        for (dtype, i16) in cases {
            let (rows, cols) = (37, shape_for(dtype, 3));
            let weights = random_weights(dtype, rows, cols, 21);
            for n in [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 19, 70] {
                let xs = random_values(n * cols, 23 + n as u64);
                let [wide_ys, narrow] = [wide, "avx2+fma+f16c"].map(|isa| {
                    let mut ys = vec![f32::NAN; n * rows];
                    matmul_with_isa(isa, i16, dtype, &weights, rows, cols, &xs, n, &mut ys).expect(isa);
                    ys
                });
                assert!(wide_ys == narrow, "{wide} {dtype} n {n}");
            }
        }
        // One activation over 1, 2 and 4 blocks (above, 3): the AVX-512 MXFP4 decode steps two
        // blocks at a time, the odd one last.
        for blocks in [1, 2, 4] {
            let (rows, cols) = (13, 32 * blocks);
            let weights = random_weights(DType::MXFP4, rows, cols, 31 + blocks as u64);
            let xs = random_values(cols, 37);
            let [wide_ys, narrow] = [wide, "avx2+fma+f16c"].map(|isa| {
                let mut ys = vec![f32::NAN; rows];
                matmul_with_isa(isa, true, DType::MXFP4, &weights, rows, cols, &xs, 1, &mut ys).expect(isa);
                ys
            });
            assert!(wide_ys == narrow, "{wide} MXFP4 over {blocks} blocks");
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn main_formats_have_simd_kernels_on_avx2() {
    if common::avx2_or_say_why_not("main_formats_have_simd_kernels_on_avx2") {
        for dtype in [
            DType::Q8_0,
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::MXFP4,
            DType::Q2_K,
            DType::Q3_K,
            DType::Q4_K,
            DType::Q5_K,
            DType::Q6_K,
            DType::F16,
        ] {
            assert!(minerva_quant::has_fast_matmul(dtype), "{dtype}");
        }
    }
}

/// On aarch64 (run under qemu-user here, see docs/benchmarks.md), the model's i16 products of the
/// main 32-value formats run NEON kernels, and `every_detected_isa_matches_exact_dot_products`
/// checks them.
#[cfg(target_arch = "aarch64")]
#[test]
fn main_formats_have_neon_kernels_on_aarch64() {
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::MXFP4] {
        assert_eq!(minerva_quant::cpu_kernels(dtype).matmul_i16, Some("neon"), "{dtype}");
    }
    for dtype in [DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::F32, DType::F16, DType::BF16]
    {
        assert_eq!(minerva_quant::cpu_kernels(dtype).matmul, Some("neon"), "{dtype}");
    }
    // QEMU's default CPU has the dot-product extension (so CI runs both NEON ISAs).
    let expected: &[&str] = if std::arch::is_aarch64_feature_detected!("dotprod") {
        &["neon+dotprod", "neon", "scalar"]
    } else {
        &["neon", "scalar"]
    };
    assert_eq!(detected_isas(), expected);
}

/// The NEON K-quant kernels turn exact integer sums into f32 as the scalar kernels do and add them
/// in the same order: every output equals the reference's bit for bit, for groups of four
/// activations and a rest, one super-block or several, on one thread and on several.
#[cfg(target_arch = "aarch64")]
#[test]
fn neon_k_quants_equal_the_scalar_kernels_bit_for_bit() {
    for dtype in [DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K] {
        for (rows, cols) in [(1, 256), (5, 512), (9, 768)] {
            let weights = random_weights(dtype, rows, cols, rows as u64 + cols as u64);
            for n in [1, 3, 4, 6, 9] {
                let xs = random_values(n * cols, n as u64);
                let mut neon = vec![f32::NAN; n * rows];
                let mut scalar = vec![f32::NAN; n * rows];
                pool(2)
                    .install(|| matmul_with_isa("neon", false, dtype, &weights, rows, cols, &xs, n, &mut neon))
                    .expect("neon");
                matmul_with_isa("scalar", false, dtype, &weights, rows, cols, &xs, n, &mut scalar).expect("scalar");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&neon), bits(&scalar), "{dtype} {rows}x{cols}, {n} activations");
            }
        }
    }
}

#[test]
fn zero_activations_and_empty_shapes() {
    let weights = random_weights(DType::Q4_K, 3, 256, 1);
    let mut y = [1.0f32; 3];
    matvec(DType::Q4_K, &weights, 3, 256, &[0.0; 256], &mut y).expect("zeros");
    assert_eq!(y, [0.0; 3]);
    let mut y = [1.0f32; 2];
    matvec(DType::Q8_0, &[], 2, 0, &[], &mut y).expect("no columns");
    assert_eq!(y, [0.0; 2]);
    matvec(DType::Q8_0, &[], 0, 32, &[0.0; 32], &mut []).expect("no rows");
    matmul(DType::Q8_0, &[0; 34], 1, 32, &[], 0, &mut []).expect("no vectors");
}

#[test]
fn wrong_sizes_are_typed_errors() {
    let weights = random_weights(DType::Q4_0, 4, 64, 1);
    let x = [0.5f32; 64];
    let mut y = [0.0f32; 4];
    let operand = |operand, expected, actual, unit| QuantError::MatmulOperand {
        dtype: DType::Q4_0,
        operand,
        expected,
        actual,
        unit,
    };
    assert_eq!(matvec(DType::Q4_0, &weights[1..], 4, 64, &x, &mut y), Err(operand("weights", 144, 143, "bytes")));
    assert_eq!(matvec(DType::Q4_0, &weights, 4, 64, &x[1..], &mut y), Err(operand("x", 64, 63, "values")));
    assert_eq!(matvec(DType::Q4_0, &weights, 4, 64, &x, &mut y[1..]), Err(operand("y", 4, 3, "values")));
    assert_eq!(matvec(DType::Q4_0, &weights, 3, 64, &x, &mut y[1..]), Err(operand("weights", 108, 144, "bytes")));
    assert_eq!(
        matvec_ref(DType::Q4_0, &weights, 4, 48, &x, &mut y),
        Err(QuantError::PartialBlockValues { dtype: DType::Q4_0, len: 48, block_elems: 32 })
    );
    let mut ys = [0.0f32; 8];
    assert_eq!(matmul(DType::Q4_0, &weights, 4, 64, &x, 2, &mut ys), Err(operand("x", 128, 64, "values")));
    assert_eq!(matmul(DType::Q4_0, &weights, 4, 64, &[0.0; 128], 2, &mut ys[1..]), Err(operand("y", 8, 7, "values")));
    assert!(matches!(
        matmul(DType::Q4_0, &weights, usize::MAX / 2, 64, &x, 1, &mut y),
        Err(QuantError::ShapeOverflow { .. })
    ));
    for dtype in [DType::Q8_K, DType::I8, DType::IQ4_NL] {
        assert_eq!(matvec(dtype, &[], 0, 0, &[], &mut []), Err(QuantError::Unsupported { dtype, operation: "matmul" }));
    }
}

/// The 32-value block formats with i16-activation kernels.
const I16_DTYPES: [DType; 6] = [DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::MXFP4];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `matmul_i16` (fast and scalar) against f64 dot products of the dequantized weights with the
    /// *unquantized* activations. An i16 quant is off by at most half a step, amax/65534 of its
    /// block, so each output may be off by Σ|w|·amax(block)/65534 (bounded here by /30000, which
    /// also covers f32 rounding of sums of up to 160 values); Q8_0 activations would need /254.
    #[test]
    fn i16_activations_match_exact_dot_products(
        dtype_index in 0..I16_DTYPES.len(),
        rows in 1usize..20,
        cols_units in 1usize..6,
        // Up to 40: past the tile kernels' widths and past the panel kernels' thresholds (8, 16).
        n in 1usize..40,
        threads in 1usize..4,
        seed in any::<u64>(),
    ) {
        let dtype = I16_DTYPES[dtype_index];
        prop_assert!(has_i16_matmul(dtype));
        let cols = 32 * cols_units;
        let weights = random_weights(dtype, rows, cols, seed);
        let xs = random_values(n * cols, seed);
        let mut w = vec![0.0f32; rows * cols];
        dequantize(dtype, &weights, &mut w).expect("dequantize");
        let mut fast = vec![f32::NAN; n * rows];
        let mut reference = vec![f32::NAN; n * rows];
        pool(threads).install(|| matmul_i16(dtype, &weights, rows, cols, &xs, n, &mut fast)).expect("fast");
        matmul_i16_ref(dtype, &weights, rows, cols, &xs, n, &mut reference).expect("ref");
        for (j, x) in xs.chunks_exact(cols).enumerate() {
            let amax: Vec<f32> = x.chunks_exact(32).map(|b| b.iter().fold(0.0f32, |m, v| m.max(v.abs()))).collect();
            for (r, row) in w.chunks_exact(cols).enumerate() {
                let exact: f64 = row.iter().zip(x).map(|(&w, &x)| f64::from(w) * f64::from(x)).sum();
                let tol: f64 = row.iter().enumerate().map(|(i, w)| f64::from(w.abs() * amax[i / 32]) / 30000.0).sum();
                for (what, got) in [("fast", fast[j * rows + r]), ("ref", reference[j * rows + r])] {
                    prop_assert!(
                        (f64::from(got) - exact).abs() <= tol + 1e-30,
                        "{dtype} {what} row {r} act {j}: got {got}, exact {exact}, tol {tol}"
                    );
                }
            }
        }
        // Batching and threads do not change a bit (each output is one tile position).
        let mut single = vec![f32::NAN; rows];
        for (x, y) in xs.chunks_exact(cols).zip(fast.chunks_exact(rows)) {
            matmul_i16(dtype, &weights, rows, cols, x, 1, &mut single).expect("one vector");
            prop_assert_eq!(&single[..], y);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Every instruction set this CPU runs (`detected_isas`, the scalar reference included), not
    /// only the best one `matmul` picks: each ISA's kernels against exact dot products, for Q8_0 /
    /// Q8_K / f32 activations and, where the dtype has them, i16 activations.
    #[test]
    fn every_detected_isa_matches_exact_dot_products(
        dtype_index in 0..DTYPES.len(),
        rows in 1usize..12,
        cols_units in 1usize..5,
        n in 1usize..16,
        seed in any::<u64>(),
    ) {
        let dtype = DTYPES[dtype_index];
        let cols = shape_for(dtype, cols_units);
        let weights = random_weights(dtype, rows, cols, seed);
        let xs = random_values(n * cols, seed);
        let mut w = vec![0.0f32; rows * cols];
        dequantize(dtype, &weights, &mut w).expect("dequantize");
        for isa in detected_isas() {
            let mut ys = vec![f32::NAN; n * rows];
            matmul_with_isa(isa, false, dtype, &weights, rows, cols, &xs, n, &mut ys).expect("matmul_with_isa");
            check(dtype, &weights, rows, cols, &xs, &ys, true)?;
            if !has_i16_matmul(dtype) {
                continue;
            }
            matmul_with_isa(isa, true, dtype, &weights, rows, cols, &xs, n, &mut ys).expect("i16");
            check_i16(dtype, isa, &w, cols, &xs, &ys)?;
        }
    }
}

#[test]
fn isas_are_named_and_unknown_ones_are_errors() {
    let isas = detected_isas();
    assert_eq!(isas.last(), Some(&"scalar"));
    // The best detected ISA with a Q8_0 matmul kernel is the one `cpu_kernels` names.
    let best = minerva_quant::cpu_kernels(DType::Q8_0).matmul.expect("Q8_0 has a matmul");
    assert!(isas.contains(&best), "{best} not in {isas:?}");
    let mut y = [0.0f32; 1];
    let err = matmul_with_isa("sse9", false, DType::Q8_0, &[0; 34], 1, 32, &[0.0; 32], 1, &mut y).unwrap_err();
    assert_eq!(err, QuantError::UnknownIsa { isa: "sse9".into() });
    assert!(err.to_string().contains("scalar"), "{err}");
}

/// [`DTYPES`] and [`I16_DTYPES`] list every dtype the kernel table has a matmul (and an i16
/// matmul) for: a new row fails here until the tests above cover it.
#[test]
fn the_dtype_lists_cover_every_matmul_row() {
    let sorted = |mut v: Vec<DType>| {
        v.sort_by_key(|&d| d as usize);
        v
    };
    let with_matmul = DType::all().filter(|&d| activation_dtype(d).is_some()).collect();
    assert_eq!(sorted(DTYPES.to_vec()), sorted(with_matmul));
    assert_eq!(sorted(I16_DTYPES.to_vec()), sorted(DType::all().filter(|&d| has_i16_matmul(d)).collect()));
}

#[test]
fn i16_falls_back_to_q8_for_other_dtypes() {
    let (rows, cols) = (3, 256);
    let weights = random_weights(DType::Q4_K, rows, cols, 5);
    let x = random_values(cols, 9);
    let (mut a, mut b) = (vec![0.0f32; rows], vec![0.0f32; rows]);
    matmul_i16(DType::Q4_K, &weights, rows, cols, &x, 1, &mut a).expect("i16");
    matvec(DType::Q4_K, &weights, rows, cols, &x, &mut b).expect("q8");
    assert!(!has_i16_matmul(DType::Q4_K));
    assert_eq!(a, b);
}

/// Several matrices against the same activations, each activation format quantized once: every
/// product equals its own `matmul_i16` bit for bit, with i16, Q8_K and f32 activations mixed,
/// past a prefill chunk and on one or two threads (with one activation, all products' tasks in
/// one parallel loop: the last two matrices are large enough to be split into several tasks); a
/// wrong shape anywhere is an error before anything is written.
#[test]
fn products_of_the_same_activations_equal_their_own_matmuls() {
    let cols = 512;
    let dtypes = [DType::Q8_0, DType::Q4_K, DType::Q4_0, DType::F32, DType::Q6_K, DType::MXFP4, DType::Q8_0];
    let weights: Vec<(DType, usize, Vec<u8>)> = dtypes
        .iter()
        .enumerate()
        .map(|(i, &dtype)| {
            let rows = if i < 5 { 40 + 7 * i } else { 300 + 7 * i };
            (dtype, rows, random_weights(dtype, rows, cols, 31 + i as u64))
        })
        .collect();
    for n in [1, 3, 70] {
        let xs = random_values(n * cols, 17 + n as u64);
        for threads in [1, 2] {
            let mut outs: Vec<Vec<f32>> = weights.iter().map(|(_, rows, _)| vec![f32::NAN; n * rows]).collect();
            let mut products: Vec<Product<'_>> = weights
                .iter()
                .zip(outs.iter_mut())
                .map(|((dtype, rows, w), ys)| Product {
                    matrix: Matrix::Blocks { dtype: *dtype, bytes: w },
                    rows: *rows,
                    ys,
                })
                .collect();
            pool(threads).install(|| matmul_i16_each(&mut products, cols, &xs, n)).expect("products");
            for ((dtype, rows, w), got) in weights.iter().zip(&outs) {
                let mut alone = vec![f32::NAN; n * rows];
                pool(threads).install(|| matmul_i16(*dtype, w, *rows, cols, &xs, n, &mut alone)).expect("alone");
                assert!(got == &alone, "{dtype} n {n} threads {threads}");
            }
        }
    }
    let xs = random_values(2 * cols, 3);
    let (mut first, mut second) = (vec![f32::NAN; 2 * 40], vec![0.0f32; 2 * 47]);
    let mut products = [
        Product { matrix: Matrix::Blocks { dtype: DType::Q8_0, bytes: &weights[0].2 }, rows: 40, ys: &mut first },
        Product {
            matrix: Matrix::Blocks { dtype: DType::Q4_K, bytes: &weights[1].2 },
            rows: 47,
            ys: &mut second[..2 * 47 - 1],
        },
    ];
    assert!(matches!(
        matmul_i16_each(&mut products, cols, &xs, 2),
        Err(QuantError::MatmulOperand { operand: "y", .. })
    ));
    assert!(first.iter().all(|v| v.is_nan()), "nothing computed before the shapes were checked");
}
