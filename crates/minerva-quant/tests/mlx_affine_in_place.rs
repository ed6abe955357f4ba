//! MLX affine matrices read where they lie (`Matrix::MlxAffine`): every product equals the product
//! on their dequantized copy in the scales' float type (`MlxAffine::dequantize_exact_to_bytes`,
//! what a loader would otherwise keep), bit for bit — every bit width and group size MLX has,
//! bf16, f16 and f32 scales, whole matrices and row ranges, at one activation and at a prefill's,
//! on one and two threads, alone and among other products. Malformed views are errors.

mod common;

use common::Rng;
use minerva_core::DType;
use minerva_quant::{
    ComputePool, Matrix, MlxAffine, Product, QuantError, matmul_i16, matmul_i16_each, matmul_i16_matrix,
};

/// Codes, scales and biases of `rows × cols` values: random codes, scales and biases of either
/// sign around 2^-6, as `scale_dtype`'s bytes.
fn affine(params: MlxAffine, rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut rng = Rng(seed | 1);
    let weight = (0..rows * cols * params.bits as usize / 8).map(|_| rng.next() as u8).collect();
    let groups = rows * cols / params.group_size;
    let mut float = |magnitude: f32| {
        let v = ((rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * magnitude;
        match params.scale_dtype {
            DType::BF16 => half::bf16::from_f32(v).to_le_bytes().to_vec(),
            DType::F16 => half::f16::from_f32(v).to_le_bytes().to_vec(),
            _ => v.to_le_bytes().to_vec(),
        }
    };
    let scales = (0..groups).flat_map(|_| float(0.03)).collect();
    let biases = (0..groups).flat_map(|_| float(0.5)).collect();
    (weight, scales, biases)
}

fn activations(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed | 1);
    (0..len).map(|_| (rng.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).collect()
}

fn pool(threads: usize) -> ComputePool {
    ComputePool::new(threads).expect("thread pool")
}

/// The matrix's values as its float type's rows, as a loader converts them.
fn dequantized(matrix: Matrix<'_>, rows: usize, cols: usize) -> Vec<u8> {
    let mut out = vec![0u8; rows * cols * matrix.dtype().block_bytes()];
    matrix.to_ggml_blocks(rows, cols, &mut out).expect("dequantize");
    out
}

#[test]
fn products_in_place_equal_products_on_the_dequantized_copy() {
    // 37 rows: two staged chunks of 16 and a partial one; 70 activations: past a prefill chunk.
    let (rows, cols) = (37, 256);
    for (bits, group_size, scale_dtype) in [
        (8, 64, DType::BF16),
        (4, 64, DType::BF16),
        (8, 32, DType::BF16),
        (4, 128, DType::BF16),
        (2, 32, DType::BF16),
        (3, 64, DType::BF16),
        (5, 32, DType::F16),
        (6, 128, DType::F32),
        (8, 64, DType::F16),
    ] {
        let params = MlxAffine { bits, group_size, scale_dtype };
        let (weight, scales, biases) = affine(params, rows, cols, bits as u64 * 31 + group_size as u64);
        let whole = Matrix::MlxAffine { weight: &weight, scales: &scales, biases: &biases, params };
        for (first, count) in [(0, rows), (5, 20), (36, 1)] {
            let matrix = whole.rows(first, count, cols).expect("rows");
            let copy = dequantized(matrix, count, cols);
            for n in [1, 3, 70] {
                let xs = activations(n * cols, 11 + n as u64);
                for threads in [1, 2] {
                    let mut in_place = vec![f32::NAN; n * count];
                    let mut converted = vec![f32::NAN; n * count];
                    pool(threads)
                        .install(|| matmul_i16_matrix(matrix, count, cols, &xs, n, &mut in_place))
                        .expect("in place");
                    pool(threads)
                        .install(|| matmul_i16(scale_dtype, &copy, count, cols, &xs, n, &mut converted))
                        .expect("converted");
                    assert!(in_place.iter().all(|v| v.is_finite()), "{params:?}");
                    let at = format!("{params:?} rows {first}+{count} n {n} threads {threads}");
                    assert!(in_place == converted, "{at}");
                }
            }
        }
    }
}

#[test]
fn in_place_products_mix_with_block_products() {
    let (rows, cols, n) = (48, 128, 2);
    let params = MlxAffine { bits: 8, group_size: 64, scale_dtype: DType::BF16 };
    let (weight, scales, biases) = affine(params, rows, cols, 5);
    let matrix = Matrix::MlxAffine { weight: &weight, scales: &scales, biases: &biases, params };
    let copy = dequantized(matrix, rows, cols);
    let q8: Vec<u8> = {
        let values = activations(rows * cols, 9);
        let mut out = vec![0u8; DType::Q8_0.row_bytes(cols).unwrap() * rows];
        minerva_quant::quantize(DType::Q8_0, &values, &mut out).expect("q8_0");
        out
    };
    let xs = activations(n * cols, 3);
    for threads in [1, 2] {
        for n in [1, n] {
            let xs = &xs[..n * cols];
            let (mut affine_ys, mut block_ys) = (vec![0.0; n * rows], vec![0.0; n * rows]);
            let mut products = [
                Product { matrix, rows, ys: &mut affine_ys },
                Product { matrix: Matrix::Blocks { dtype: DType::Q8_0, bytes: &q8 }, rows, ys: &mut block_ys },
            ];
            pool(threads).install(|| matmul_i16_each(&mut products, cols, xs, n)).expect("each");
            let (mut alone_affine, mut alone_block) = (vec![0.0; n * rows], vec![0.0; n * rows]);
            pool(threads).install(|| matmul_i16(DType::BF16, &copy, rows, cols, xs, n, &mut alone_affine)).unwrap();
            pool(threads).install(|| matmul_i16(DType::Q8_0, &q8, rows, cols, xs, n, &mut alone_block)).unwrap();
            assert!(affine_ys == alone_affine, "threads {threads} n {n}");
            assert!(block_ys == alone_block, "threads {threads} n {n}");
        }
    }
}

#[test]
fn dequantization_in_place_equals_mx_dequantize() {
    let (rows, cols) = (5, 128);
    let params = MlxAffine { bits: 4, group_size: 32, scale_dtype: DType::BF16 };
    let (weight, scales, biases) = affine(params, rows, cols, 17);
    let matrix = Matrix::MlxAffine { weight: &weight, scales: &scales, biases: &biases, params };
    let mut values = vec![0.0; rows * cols];
    matrix.dequantize(rows, cols, &mut values).expect("dequantize");
    let mut exact = vec![0.0; rows * cols];
    params.dequantize_exact(&weight, &scales, &biases, &mut exact).expect("exact");
    assert_eq!(values, exact);
}

#[test]
fn malformed_views_are_errors() {
    let params = MlxAffine { bits: 8, group_size: 64, scale_dtype: DType::BF16 };
    let (rows, cols) = (4, 128);
    let (weight, scales, biases) = affine(params, rows, cols, 23);
    let matrix = Matrix::MlxAffine { weight: &weight, scales: &scales, biases: &biases, params };
    let xs = activations(cols, 1);
    let mut ys = vec![0.0; rows + 1];
    // One row more than the codes hold.
    let err = matmul_i16_matrix(matrix, rows + 1, cols, &xs, 1, &mut ys).unwrap_err();
    assert!(matches!(err, QuantError::ComponentLength { component: "weight", .. }), "{err}");
    // Scales a group short.
    let short = Matrix::MlxAffine { weight: &weight, scales: &scales[2..], biases: &biases, params };
    let err = matmul_i16_matrix(short, rows, cols, &xs, 1, &mut ys[..rows]).unwrap_err();
    assert!(matches!(err, QuantError::ComponentLength { component: "scales", .. }), "{err}");
    // Columns that are not whole groups, bits MLX does not have, rows past the end.
    assert!(matches!(matrix.rows(0, 1, 96), Err(QuantError::PartialGroupValues { .. })));
    let seven = MlxAffine { bits: 7, ..params };
    let seven = Matrix::MlxAffine { weight: &weight, scales: &scales, biases: &biases, params: seven };
    assert!(matches!(seven.check_shape(rows, cols), Err(QuantError::MlxParameters { .. })));
    assert!(matrix.rows(3, 2, cols).is_err());
    assert!(matrix.rows(usize::MAX, 2, cols).is_err());
}

/// The GPU's block form (`MLX_A8`, `MLX_A4`: each 32 values with their group's scale and bias)
/// holds exactly `mx.dequantize`'s values, for every group size; other layouts have none.
#[test]
fn blocks_hold_mx_dequantize_values() {
    let (rows, cols) = (3, 256);
    for (bits, dtype) in [(8, DType::MLX_A8), (4, DType::MLX_A4)] {
        for group_size in [32, 64, 128] {
            let params = MlxAffine { bits, group_size, scale_dtype: DType::BF16 };
            assert_eq!(params.block_dtype(), Some(dtype));
            let (weight, scales, biases) = affine(params, rows, cols, 41 + group_size as u64);
            let mut blocks = vec![0u8; DType::row_bytes(dtype, cols).unwrap() * rows];
            params.to_blocks(&weight, &scales, &biases, &mut blocks).expect("blocks");
            let mut from_blocks = vec![0.0; rows * cols];
            minerva_quant::dequantize(dtype, &blocks, &mut from_blocks).expect("dequantize blocks");
            let mut exact = vec![0.0; rows * cols];
            params.dequantize_exact(&weight, &scales, &biases, &mut exact).expect("exact");
            assert_eq!(from_blocks, exact, "{bits} bits, groups of {group_size}");
            let err = params.to_blocks(&weight, &scales, &biases, &mut blocks[1..]).unwrap_err();
            assert!(matches!(err, QuantError::PartialBlockBytes { .. }), "{err}");
        }
    }
    for params in [
        MlxAffine { bits: 8, group_size: 64, scale_dtype: DType::F16 },
        MlxAffine { bits: 6, group_size: 64, scale_dtype: DType::BF16 },
    ] {
        assert_eq!(params.block_dtype(), None);
        let err = params.to_blocks(&[], &[], &[], &mut []).unwrap_err();
        assert!(matches!(err, QuantError::Unsupported { .. }), "{err}");
    }
}
