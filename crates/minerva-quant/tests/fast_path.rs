//! The fast (SIMD) dequantizers equal the scalar reference **bit for bit** on arbitrary bytes —
//! random scales included, so NaN, inf and subnormal scales too. The one allowance: two NaNs
//! count as equal whatever their payloads (which NaN operand x86 propagates is not part of either
//! formula).

mod common;

use minerva_core::DType;
use minerva_quant::{CpuKernels, cpu_kernels, dequantize, dequantize_fast, dequantizer, has_fast_path};
use proptest::prelude::*;

#[cfg(target_arch = "x86_64")]
const FAST_TYPES: [DType; 6] = [DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::MXFP4, DType::Q4_K, DType::Q6_K];

#[test]
fn fast_paths_exist_where_the_cpu_has_avx2() {
    // The AVX2 part on x86-64 only (aarch64's counterpart is `main_formats_have_neon_kernels_on_aarch64`).
    #[cfg(target_arch = "x86_64")]
    if common::avx2_or_say_why_not("fast_paths_exist_where_the_cpu_has_avx2") {
        for dtype in FAST_TYPES {
            assert!(has_fast_path(dtype), "{dtype}");
        }
    }
    assert!(!has_fast_path(DType::Q3_K));
}

#[test]
fn cpu_kernels_name_the_instruction_set_of_each_entry() {
    let scalar = Some("scalar");
    let q3_k = cpu_kernels(DType::Q3_K);
    assert_eq!((q3_k.dequantize, q3_k.matmul_i16), (scalar, None));
    assert_eq!(cpu_kernels(DType::IQ2_XXS), CpuKernels { dequantize: None, matmul: None, matmul_i16: None });
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if common::avx2_or_say_why_not("cpu_kernels_name_the_instruction_set_of_each_entry") {
            let (avx2, fma) = (Some("avx2"), Some("avx2+fma+f16c"));
            let vnni = has!("avx512f") && has!("avx512bw") && has!("avx512vnni");
            let i16 = if vnni {
                Some("avx512+vnni")
            } else if has!("avxvnni") {
                Some("avx2+avxvnni")
            } else {
                fma
            };
            let want = CpuKernels { dequantize: avx2, matmul: fma, matmul_i16: i16 };
            assert_eq!(cpu_kernels(DType::Q4_0), want);
            assert_eq!(cpu_kernels(DType::Q5_0), CpuKernels { dequantize: scalar, ..want });
            let k = if vnni { Some("avx512+vnni") } else { fma };
            assert_eq!(cpu_kernels(DType::Q6_K), CpuKernels { matmul: k, matmul_i16: None, ..want });
            assert_eq!(q3_k, CpuKernels { dequantize: scalar, matmul: k, matmul_i16: None });
        }
    }
    eprintln!("Q4_0 on this CPU: {:?}", cpu_kernels(DType::Q4_0));
}

/// Every dtype with a dequantizer: whatever rows an instruction set adds to the kernel table are
/// tested here without editing this list (on a CPU without them, both sides are the reference).
fn dequantizable() -> Vec<DType> {
    DType::all().filter(|&d| dequantizer(d).is_some()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fast_equals_reference(
        dtype in prop::sample::select(dequantizable()),
        blocks in 0usize..6,
        seed_bytes in prop::collection::vec(any::<u8>(), 6 * 292 + 3),
        offset in 0usize..3,
    ) {
        // Start at a random offset: the fast path must not assume aligned blocks either.
        let len = blocks * dtype.block_bytes();
        let bytes = &seed_bytes[offset..offset + len.min(seed_bytes.len() - offset)];
        prop_assume!(bytes.len() == len);
        let n = blocks * dtype.block_elems();
        let (mut reference, mut fast) = (vec![0.0f32; n], vec![1.0f32; n]);
        dequantize(dtype, bytes, &mut reference).unwrap();
        dequantize_fast(dtype, bytes, &mut fast).unwrap();
        for (i, (r, f)) in reference.iter().zip(&fast).enumerate() {
            prop_assert!(r.to_bits() == f.to_bits() || (r.is_nan() && f.is_nan()),
                "{} value {}: reference {} fast {}", dtype, i, r, f);
        }
    }

    #[test]
    fn fast_rejects_what_the_reference_rejects(
        dtype in prop::sample::select(dequantizable()),
        len in 0usize..700,
        out_len in 0usize..700,
    ) {
        let bytes = vec![0x11u8; len];
        let (mut a, mut b) = (vec![0.0f32; out_len], vec![0.0f32; out_len]);
        prop_assert_eq!(dequantize(dtype, &bytes, &mut a), dequantize_fast(dtype, &bytes, &mut b));
    }
}
