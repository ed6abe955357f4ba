//! MXFP4 read where HF and MLX store it (`Matrix::Mxfp4Split`): every product equals the product
//! of the same values converted to GGML blocks (`hf_mxfp4_to_ggml`), bit for bit, for whole
//! matrices, every other row (HF's interleaved gate/up rows) and row ranges, at one to eight
//! activations (up to seven read in place where the CPU has the kernel, more staged as GGML
//! blocks) and at a prefill's, on one and two threads, alone and among other products; its
//! dequantization equals the reference's.

mod common;

use common::Rng;
use minerva_core::DType;
use minerva_quant::{
    ComputePool, Matrix, Product, QuantError, dequantize_hf_mxfp4_ref, hf_mxfp4_to_ggml, matmul_i16, matmul_i16_each,
    matmul_i16_matrix,
};

/// HF `_blocks` / `_scales` for `rows × cols` values: random nibbles, scales 2^-8 … 2^3 (finite).
fn hf_pair(rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let mut rng = Rng(seed | 1);
    let groups = rows * cols / 32;
    let nibbles = (0..groups * 16).map(|_| rng.next() as u8).collect();
    let scales = (0..groups).map(|_| 119 + (rng.next() % 12) as u8).collect();
    (nibbles, scales)
}

fn activations(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed | 1);
    (0..len).map(|_| (rng.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).collect()
}

/// Rows `first, first + stride, …` (`count` of them) of an HF pair, as GGML MXFP4 blocks.
fn ggml_rows(nibbles: &[u8], scales: &[u8], cols: usize, first: usize, stride: usize, count: usize) -> Vec<u8> {
    let groups = cols / 32;
    let mut out = vec![0u8; count * groups * 17];
    for (i, row) in out.chunks_exact_mut(groups * 17).enumerate() {
        let p = (first + i * stride) * groups;
        hf_mxfp4_to_ggml(&nibbles[p * 16..(p + groups) * 16], &scales[p..p + groups], row).expect("convert");
    }
    out
}

fn pool(threads: usize) -> ComputePool {
    ComputePool::new(threads).expect("thread pool")
}

#[test]
fn split_products_equal_converted_products() {
    // 70 activations: past one prefill chunk of 64; 301 physical rows: an odd half for stride 2.
    let (physical, cols) = (301, 256);
    let (nibbles, scales) = hf_pair(physical, cols, 7);
    for (first, stride) in [(0, 1), (0, 2), (1, 2), (37, 1)] {
        let rows = (physical - first).div_ceil(stride);
        // A view starting at physical row `first`, as a loader picks one half of interleaved rows.
        let groups = cols / 32;
        let (nibbles_from, scales_from) = (&nibbles[first * groups * 16..], &scales[first * groups..]);
        let matrix = Matrix::Mxfp4Split { nibbles: nibbles_from, scales: scales_from, row_stride: stride };
        let converted = ggml_rows(&nibbles, &scales, cols, first, stride, rows);
        for n in [1, 2, 3, 4, 7, 8, 70] {
            let xs = activations(n * cols, 11 + n as u64);
            for threads in [1, 2] {
                let mut split = vec![f32::NAN; n * rows];
                let mut ggml = vec![f32::NAN; n * rows];
                pool(threads).install(|| matmul_i16_matrix(matrix, rows, cols, &xs, n, &mut split)).expect("split");
                pool(threads)
                    .install(|| matmul_i16(DType::MXFP4, &converted, rows, cols, &xs, n, &mut ggml))
                    .expect("ggml");
                assert!(split.iter().all(|v| v.is_finite()));
                assert!(split == ggml, "first {first} stride {stride} n {n} threads {threads}");
            }
        }
    }
}

#[test]
fn split_products_mix_with_block_products() {
    let cols = 512;
    let (nibbles, scales) = hf_pair(2 * 300, cols, 3);
    let gate = Matrix::Mxfp4Split { nibbles: &nibbles, scales: &scales, row_stride: 2 };
    let up = Matrix::Mxfp4Split { nibbles: &nibbles[cols / 2..], scales: &scales[cols / 32..], row_stride: 2 };
    let q8 = vec![0x11u8; 40 * cols / 32 * 34];
    let xs = activations(cols, 5);
    for threads in [1, 2] {
        let (mut g, mut u, mut q) = (vec![0.0; 300], vec![0.0; 300], vec![0.0; 40]);
        let mut products = [
            Product { matrix: gate, rows: 300, ys: &mut g },
            Product { matrix: Matrix::Blocks { dtype: DType::Q8_0, bytes: &q8 }, rows: 40, ys: &mut q },
            Product { matrix: up, rows: 300, ys: &mut u },
        ];
        pool(threads).install(|| matmul_i16_each(&mut products, cols, &xs, 1)).expect("products");
        for (offset, got) in [(0, &g), (1, &u)] {
            let mut alone = vec![0.0; 300];
            let converted = ggml_rows(&nibbles, &scales, cols, offset, 2, 300);
            matmul_i16(DType::MXFP4, &converted, 300, cols, &xs, 1, &mut alone).expect("alone");
            assert!(got == &alone, "half {offset} threads {threads}");
        }
        let mut alone = vec![0.0; 40];
        matmul_i16(DType::Q8_0, &q8, 40, cols, &xs, 1, &mut alone).expect("q8");
        assert_eq!(q, alone);
    }
}

#[test]
fn split_dequantization_and_row_views_match_the_reference() {
    let (physical, cols) = (9, 64);
    let (nibbles, scales) = hf_pair(physical, cols, 13);
    let mut all = vec![0.0; physical * cols];
    dequantize_hf_mxfp4_ref(&nibbles, &scales, &mut all).expect("reference");
    let halves = Matrix::Mxfp4Split { nibbles: &nibbles, scales: &scales, row_stride: 2 };
    // Rows 2..6 of a stride-2 view are physical rows 4, 6, 8, 10: past the 9 rows.
    assert!(matches!(halves.rows(2, 4, cols), Err(QuantError::ComponentLength { .. })));
    assert!(halves.rows(2, 3, cols).is_ok());
    assert!(halves.rows(usize::MAX / 2, 1, cols).is_err());
    let view = halves.rows(1, 2, cols).expect("rows");
    let mut got = vec![0.0; 2 * cols];
    view.dequantize(2, cols, &mut got).expect("dequantize");
    let expected: Vec<f32> = [2, 4].iter().flat_map(|&p| all[p * cols..(p + 1) * cols].to_vec()).collect();
    assert_eq!(got, expected);
    let mut short = vec![0.0; cols];
    assert!(view.dequantize(2, cols, &mut short).is_err());
    // Converted to GGML blocks: llama.cpp's conversion of the same rows.
    let mut blocks = vec![0u8; 2 * 2 * 17];
    view.to_ggml_blocks(2, cols, &mut blocks).expect("convert");
    assert_eq!(blocks, ggml_rows(&nibbles, &scales, cols, 2, 2, 2));
    assert!(view.to_ggml_blocks(2, cols, &mut blocks[1..]).is_err());
}

/// Every E8M0 exponent (subnormal scales, 2^127, the NaN byte 255) at one to seven activations:
/// the split tiles scale each block as the GGML kernels do, bit for bit (NaN for NaN).
#[test]
fn every_exponent_gives_the_converted_bits() {
    let (rows, cols) = (64, 128);
    let (nibbles, mut scales) = hf_pair(rows, cols, 21);
    for (i, scale) in scales.iter_mut().enumerate() {
        *scale = (i % 256) as u8;
    }
    let converted = ggml_rows(&nibbles, &scales, cols, 0, 1, rows);
    let matrix = Matrix::Mxfp4Split { nibbles: &nibbles, scales: &scales, row_stride: 1 };
    let bits = |v: &[f32]| v.iter().map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() }).collect::<Vec<_>>();
    for n in 1..=7 {
        let xs = activations(n * cols, 31 + n as u64);
        let (mut split, mut ggml) = (vec![0.0; n * rows], vec![0.0; n * rows]);
        matmul_i16_matrix(matrix, rows, cols, &xs, n, &mut split).expect("split");
        matmul_i16(DType::MXFP4, &converted, rows, cols, &xs, n, &mut ggml).expect("ggml");
        assert!(split.iter().any(|v| !v.is_finite()) && split.iter().any(|v| v.is_finite() && *v != 0.0));
        assert_eq!(bits(&split), bits(&ggml), "n {n}");
    }
}
