//! Repacked weights (`Repacked`, 16 rows interleaved, Q8_0 activations, Q8_K for the K-quants):
//! the layout gives back the bytes it was made from; every detected ISA's kernel equals the
//! scalar reference bit for bit at any number of activations and threads; the reference is the
//! 8-bit-activation product llama.cpp computes, to f32 rounding; a row's result does not depend on its company; the
//! products route through `matmul_i16_each` and `matmul_i16_matrix`; bad shapes are errors.

mod common;

use common::Rng;
use minerva_core::DType;
use minerva_quant::{
    ComputePool, GROUP_ROWS, Matrix, Product, QuantError, Repacked, detected_isas, is_repackable, matmul_i16_each,
    matmul_i16_matrix, matmul_ref, matmul_repacked_with_isa,
};

const DTYPES: [DType; 11] = [
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
];

/// `cols` rounded up to whole blocks of `dtype` (the K-quants' 256 values).
fn whole(dtype: DType, cols: usize) -> usize {
    cols.next_multiple_of(dtype.block_elems())
}

/// Random blocks with finite scales (and minimums) of either sign; every quant byte random, so
/// Q8_0's include -128 (and Q5's fifth bits every pattern). MXFP4's exponents lie around a
/// scale of 2^-9, but every third row's are 0..3 (the scales 2^-128, 2^-127: subnormal).
fn random_weights(dtype: DType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    let block_bytes = dtype.block_bytes();
    let mut bytes: Vec<u8> = (0..rows * cols / dtype.block_elems() * block_bytes).map(|_| rng.next() as u8).collect();
    let fields: &[usize] = match dtype {
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q6_K => &[208],
        DType::Q3_K => &[108],
        DType::Q2_K => &[80, 82],
        _ => &[0],
    };
    let blocks_per_row = cols / dtype.block_elems();
    for (i, block) in bytes.chunks_exact_mut(block_bytes).enumerate() {
        if dtype == DType::MXFP4 {
            // Every third row's exponents all 0..3, so its results are made of subnormal scales.
            let e = rng.next() as u8;
            block[0] = if (i / blocks_per_row) % 3 == 1 { e % 3 } else { 116 + e % 8 };
            continue;
        }
        for &at in fields {
            block[at..at + 2].copy_from_slice(&half::f16::from_f32(0.05 * rng.unit()).to_le_bytes());
        }
    }
    bytes
}

fn random_values(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed.wrapping_mul(31) | 1);
    (0..len).map(|_| 3.0 * rng.unit()).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn the_layout_gives_back_the_bytes_it_was_made_from() {
    for dtype in DTYPES {
        for (rows, cols) in [(1, 32), (15, 64), (16, 96), (17, 32), (40, 576)] {
            let cols = whole(dtype, cols);
            let w = random_weights(dtype, rows, cols, (rows * cols) as u64);
            let packed = Repacked::new(dtype, &w, rows, cols).unwrap();
            // The rows' bytes, whole groups; Q3_K's, Q4_K's and Q5_K's scales unpacked add 64
            // bytes per super-block of a group.
            let extra = if matches!(dtype, DType::Q3_K | DType::Q4_K | DType::Q5_K) { 64 * cols / 256 } else { 0 };
            assert_eq!(
                packed.len_bytes(),
                (rows.div_ceil(GROUP_ROWS) * (GROUP_ROWS * w.len() / rows + extra)).next_multiple_of(64)
            );
            let mut back = vec![0u8; w.len()];
            packed.to_ggml_blocks(&mut back).unwrap();
            assert!(back == w, "{dtype} {rows}×{cols}");
            let (mut a, mut b) = (vec![0.0f32; rows * cols], vec![0.0f32; rows * cols]);
            packed.matrix().dequantize(rows, cols, &mut a).unwrap();
            Matrix::Blocks { dtype, bytes: &w }.dequantize(rows, cols, &mut b).unwrap();
            assert_eq!(bits(&a), bits(&b));
        }
    }
}

#[test]
fn every_isa_equals_the_scalar_kernel_bit_for_bit() {
    for dtype in DTYPES {
        let (rows, cols) = (40, whole(dtype, 320));
        let w = random_weights(dtype, rows, cols, 7);
        let packed = Repacked::new(dtype, &w, rows, cols).unwrap();
        // 1..=7, 14: every count of a kernel's last pass (AVX-512 8 + 6, AVX2 4 + 3); 16, 33,
        // 70: AMX's tiles of sixteen activations with none, one and six left over.
        for n in [1, 2, 3, 4, 5, 6, 7, 9, 14, 16, 33, 70] {
            let xs = random_values(n * cols, n as u64);
            let mut want = vec![0.0f32; n * rows];
            matmul_repacked_with_isa("scalar", &packed, &xs, n, &mut want).unwrap();
            for isa in detected_isas() {
                for threads in [1, 2] {
                    let mut got = vec![f32::NAN; n * rows];
                    ComputePool::new(threads)
                        .unwrap()
                        .install(|| matmul_repacked_with_isa(isa, &packed, &xs, n, &mut got))
                        .unwrap();
                    assert_eq!(bits(&got), bits(&want), "{dtype} {isa} n={n} threads={threads}");
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        assert!(detected_isas().contains(&"avx2+fma+f16c"));
        for dtype in DTYPES {
            assert!(minerva_quant::repacked_kernel_isa(dtype).is_some_and(|isa| isa.contains("avx")), "{dtype}");
        }
    }
    // Where the CPU has AMX-INT8 (CPUID leaf 7: EDX bits 24, 25), Linux grants tile data on
    // request and the AMX kernels take every repacked format.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    if core::arch::x86_64::__cpuid_count(7, 0).edx & (3 << 24) == 3 << 24 {
        for dtype in DTYPES {
            assert_eq!(minerva_quant::repacked_kernel_isa(dtype), Some("amx+avx512"), "{dtype}");
        }
    }
    // NEON (the aarch64 baseline) has kernels for every repacked format, with `sdot` where the
    // dot-product extension is there (QEMU's default CPU has it: CI tests both).
    #[cfg(target_arch = "aarch64")]
    for dtype in &DTYPES {
        let dotprod = std::arch::is_aarch64_feature_detected!("dotprod");
        let want = if dotprod { "neon+dotprod" } else { "neon" };
        assert_eq!(minerva_quant::repacked_kernel_isa(*dtype), Some(want), "{dtype}");
        assert!(detected_isas().contains(&"neon"));
    }
}

/// `--repack auto`'s question, as the kernel table's rows mark it: AVX-512 VNNI's kernels pay for
/// every format (and AMX's), AVX-VNNI's and AVX2's for all but Q4_K and Q5_K (Q2_K's and Q3_K's too), NEON's
/// (never timed) and the scalar reference for none.
#[test]
fn repacking_pays_where_the_rows_were_measured_to() {
    for dtype in DTYPES {
        let isa = minerva_quant::repacked_kernel_isa(dtype).expect("every format has a repacked kernel");
        let want = match isa {
            // MXFP4's kernels are not marked: no architecture lets MXFP4 matrices take 8-bit
            // activations (GPT-OSS keeps i16), so `auto` would not use them; `--repack on` does.
            _ if dtype == DType::MXFP4 => false,
            "avx512+vnni" | "amx+avx512" => true,
            "avx2+avxvnni" | "avx2+fma+f16c" => !matches!(dtype, DType::Q4_K | DType::Q5_K),
            _ => false,
        };
        assert_eq!(minerva_quant::repacking_pays(dtype), want, "{dtype} on {isa}");
    }
    for dtype in [DType::F32, DType::BF16] {
        assert!(!minerva_quant::repacking_pays(dtype), "{dtype} has no repacked layout");
    }
}

/// The scalar reference against llama.cpp's product with Q8_0 activations (`matmul_ref`): the
/// same integer sums per block, summed in f32 in another order, so within a few ulps of the sum
/// of magnitudes.
#[test]
fn the_reference_is_the_q8_0_activation_product() {
    for dtype in DTYPES {
        let (rows, cols, n) = (33, 512, 3);
        let w = random_weights(dtype, rows, cols, 11);
        let packed = Repacked::new(dtype, &w, rows, cols).unwrap();
        let xs = random_values(n * cols, 5);
        let (mut got, mut want) = (vec![0.0f32; n * rows], vec![0.0f32; n * rows]);
        matmul_repacked_with_isa("scalar", &packed, &xs, n, &mut got).unwrap();
        matmul_ref(dtype, &w, rows, cols, &xs, n, &mut want).unwrap();
        let mut values = vec![0.0f32; rows * cols];
        Matrix::Blocks { dtype, bytes: &w }.dequantize(rows, cols, &mut values).unwrap();
        for j in 0..n {
            for r in 0..rows {
                let x = &xs[j * cols..(j + 1) * cols];
                let magnitude: f32 = values[r * cols..(r + 1) * cols].iter().zip(x).map(|(w, x)| (w * x).abs()).sum();
                let (g, w) = (got[j * rows + r], want[j * rows + r]);
                assert!((g - w).abs() <= 4e-6 * magnitude, "{dtype} row {r} act {j}: {g} vs {w} (Σ|w·x| {magnitude})");
            }
        }
    }
}

#[test]
fn a_rows_result_does_not_depend_on_its_company() {
    for dtype in DTYPES {
        let (rows, cols) = (48, whole(dtype, 128));
        let w = random_weights(dtype, rows, cols, 3);
        let packed = Repacked::new(dtype, &w, rows, cols).unwrap();
        let n = 67;
        let xs = random_values(n * cols, 9);
        let mut all = vec![0.0f32; n * rows];
        ComputePool::new(2)
            .unwrap()
            .install(|| matmul_i16_matrix(packed.matrix(), rows, cols, &xs, n, &mut all))
            .unwrap();
        for j in [0, 5, 66] {
            let mut one = vec![0.0f32; rows];
            matmul_i16_matrix(packed.matrix(), rows, cols, &xs[j * cols..(j + 1) * cols], 1, &mut one).unwrap();
            assert_eq!(bits(&one), bits(&all[j * rows..(j + 1) * rows]), "{dtype} activation {j}");
        }
        // Mixed with a block matrix in one call: each product as alone.
        let other = random_weights(DType::Q8_0, 20, cols, 4);
        let (mut a, mut b) = (vec![0.0f32; 2 * rows], vec![0.0f32; 2 * 20]);
        let mut products = [
            Product { matrix: packed.matrix(), rows, ys: &mut a },
            Product { matrix: Matrix::Blocks { dtype: DType::Q8_0, bytes: &other }, rows: 20, ys: &mut b },
        ];
        matmul_i16_each(&mut products, cols, &xs[..2 * cols], 2).unwrap();
        assert_eq!(bits(&a), bits(&all[..2 * rows]));
        let mut alone = vec![0.0f32; 2 * 20];
        matmul_i16_matrix(
            Matrix::Blocks { dtype: DType::Q8_0, bytes: &other },
            20,
            cols,
            &xs[..2 * cols],
            2,
            &mut alone,
        )
        .unwrap();
        assert_eq!(bits(&b), bits(&alone));
        // One activation on two threads: every product's tasks share one loop.
        let (mut a1, mut b1) = (vec![0.0f32; rows], vec![0.0f32; 20]);
        let mut products = [
            Product { matrix: packed.matrix(), rows, ys: &mut a1 },
            Product { matrix: Matrix::Blocks { dtype: DType::Q8_0, bytes: &other }, rows: 20, ys: &mut b1 },
        ];
        ComputePool::new(2).unwrap().install(|| matmul_i16_each(&mut products, cols, &xs[..cols], 1)).unwrap();
        assert_eq!(bits(&a1), bits(&all[..rows]), "{dtype}: one activation, shared loop");
        assert_eq!(bits(&b1), bits(&alone[..20]));
    }
}

#[test]
fn bad_shapes_and_dtypes_are_errors() {
    assert!(!is_repackable(DType::BF16) && is_repackable(DType::Q4_1) && is_repackable(DType::MXFP4));
    let w = random_weights(DType::Q8_0, 20, 64, 1);
    assert!(matches!(Repacked::new(DType::BF16, &w, 1, 256), Err(QuantError::Unsupported { .. })));
    assert!(matches!(Repacked::new(DType::Q4_K, &w, 2, 128), Err(QuantError::PartialBlockValues { .. })));
    assert!(matches!(Repacked::new(DType::Q8_0, &w, 21, 64), Err(QuantError::MatmulOperand { .. })));
    assert!(matches!(Repacked::new(DType::Q8_0, &w, 20, 48), Err(QuantError::PartialBlockValues { .. })));
    let packed = Repacked::new(DType::Q8_0, &w, 20, 64).unwrap();
    let mut y = vec![0.0f32; 20];
    // The matrix knows its shape: another is refused, not misread.
    assert!(matmul_i16_matrix(packed.matrix(), 10, 128, &[0.0; 128], 1, &mut y[..10]).is_err());
    assert!(matmul_i16_matrix(packed.matrix(), 20, 64, &[0.0; 63], 1, &mut y).is_err());
    // Whole groups only.
    assert!(packed.matrix().rows(16, 4, 64).is_ok());
    assert!(packed.matrix().rows(8, 8, 64).is_err());
    assert!(packed.matrix().rows(16, 5, 64).is_err());
    assert!(matches!(
        matmul_repacked_with_isa("no-such-isa", &packed, &[0.0; 64], 1, &mut y),
        Err(QuantError::UnknownIsa { .. })
    ));
}
