//! Property tests: wrong sizes give typed errors (never panics), arbitrary bytes and values never
//! panic, MXFP4 converts losslessly both ways, MLX packing reads back what an independent packer
//! wrote, and quantization stays within its error bound. Case counts are kept moderate (the CI
//! machine is shared).

use minerva_core::DType;
use minerva_quant::{
    MlxAffine, QuantError, dequantize, dequantize_hf_mxfp4_ref, dequantize_row_mxfp4_ref, dequantize_row_q8_0_ref,
    ggml_mxfp4_to_hf, hf_mxfp4_to_ggml, quantize, quantize_row_q8_0_ref,
};
use proptest::prelude::*;

/// Every dtype with a reference dequantizer (MLX_A8 / MLX_A4: the GPU's blocks of MLX affine).
const DEQUANTIZABLE: [DType; 17] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::Q8_K,
    DType::MXFP4,
    DType::MLX_A8,
    DType::MLX_A4,
];
const QUANTIZABLE: [DType; 10] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::Q8_K,
    DType::MXFP4,
];

fn dequantizable() -> impl Strategy<Value = DType> {
    prop::sample::select(DEQUANTIZABLE.to_vec())
}

fn quantizable() -> impl Strategy<Value = DType> {
    prop::sample::select(QUANTIZABLE.to_vec())
}

/// Any f32, weighted towards the awkward ones.
fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => -1e4f32..1e4,
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        1 => Just(f32::NAN),
        1 => Just(f32::INFINITY),
        1 => Just(f32::NEG_INFINITY),
        1 => Just(f32::MAX),
        1 => Just(1e-40f32),
        2 => any::<f32>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Any byte string of any length: a typed error or a fully written output, never a panic.
    #[test]
    fn dequantize_any_bytes_is_ok_or_typed_error(
        dtype in dequantizable(),
        bytes in prop::collection::vec(any::<u8>(), 0..1200),
        out_delta in -40i64..40,
    ) {
        let whole = bytes.len() % dtype.block_bytes() == 0;
        let expected = bytes.len() / dtype.block_bytes() * dtype.block_elems();
        let out_len = (expected as i64 + out_delta).max(0) as usize;
        let mut out = vec![0.0f32; out_len];
        match dequantize(dtype, &bytes, &mut out) {
            Ok(()) => prop_assert!(whole && out_len == expected),
            Err(QuantError::PartialBlockBytes { dtype: d, len, block_bytes }) => {
                prop_assert!(!whole);
                prop_assert_eq!((d, len, block_bytes), (dtype, bytes.len(), dtype.block_bytes()));
            }
            Err(QuantError::OutputLength { dtype: d, expected: e, actual, unit }) => {
                prop_assert!(whole && out_len != expected);
                prop_assert_eq!((d, e, actual, unit), (dtype, expected, out_len, "values"));
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }

    /// Any values (NaN, inf, subnormal …) of any count: a typed error or written blocks.
    #[test]
    fn quantize_any_values_is_ok_or_typed_error(
        dtype in quantizable(),
        values in prop::collection::vec(any_f32(), 0..600),
        out_delta in -3i64..3,
    ) {
        let whole = values.len() % dtype.block_elems() == 0;
        let expected = values.len() / dtype.block_elems() * dtype.block_bytes();
        let out_len = (expected as i64 + out_delta).max(0) as usize;
        let mut out = vec![0u8; out_len];
        match quantize(dtype, &values, &mut out) {
            Ok(()) => prop_assert!(whole && out_len == expected),
            Err(QuantError::PartialBlockValues { dtype: d, len, .. }) => {
                prop_assert!(!whole);
                prop_assert_eq!((d, len), (dtype, values.len()));
            }
            Err(QuantError::OutputLength { unit, .. }) => {
                prop_assert!(whole && out_len != expected);
                prop_assert_eq!(unit, "bytes");
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
        // Whatever was written decodes without panicking.
        if out_len == expected && whole {
            let mut back = vec![0.0f32; values.len()];
            dequantize(dtype, &out, &mut back).unwrap();
        }
    }

    /// HF -> GGML -> HF and GGML -> HF -> GGML are the identity on arbitrary bytes, and the two
    /// readings agree on every value except where the formats are documented to differ.
    #[test]
    fn mxfp4_conversion_is_lossless_both_ways(
        groups in prop::collection::vec(
            (prop::array::uniform16(any::<u8>()),
             prop_oneof![Just(0u8), Just(1u8), Just(2u8), Just(127u8), Just(254u8), Just(255u8), any::<u8>()]),
            0..12),
    ) {
        let hf_blocks: Vec<u8> = groups.iter().flat_map(|(b, _)| *b).collect();
        let hf_scales: Vec<u8> = groups.iter().map(|(_, e)| *e).collect();
        let mut ggml = vec![0u8; groups.len() * 17];
        hf_mxfp4_to_ggml(&hf_blocks, &hf_scales, &mut ggml).unwrap();
        let (mut blocks_back, mut scales_back) = (vec![0u8; hf_blocks.len()], vec![0u8; hf_scales.len()]);
        ggml_mxfp4_to_hf(&ggml, &mut blocks_back, &mut scales_back).unwrap();
        prop_assert_eq!(&blocks_back, &hf_blocks);
        prop_assert_eq!(&scales_back, &hf_scales);

        // The other direction, starting from the GGML bytes (arbitrary, as GGML files may hold).
        let mut ggml_again = vec![0u8; ggml.len()];
        hf_mxfp4_to_ggml(&blocks_back, &scales_back, &mut ggml_again).unwrap();
        prop_assert_eq!(&ggml_again, &ggml);

        let n = groups.len() * 32;
        let (mut hf_values, mut ggml_values) = (vec![0.0f32; n], vec![0.0f32; n]);
        dequantize_hf_mxfp4_ref(&hf_blocks, &hf_scales, &mut hf_values).unwrap();
        dequantize_row_mxfp4_ref(&ggml, &mut ggml_values).unwrap();
        for (i, (h, g)) in hf_values.iter().zip(&ggml_values).enumerate() {
            if hf_scales[i / 32] != 255 {
                // Equal as numbers; the sign of zero may differ (HF −0, ggml +0 for nibble 8).
                prop_assert_eq!(h, g, "value {}", i);
            }
        }
    }

    /// Any GGML MXFP4 bytes convert to HF and back unchanged.
    #[test]
    fn ggml_mxfp4_bytes_round_trip(mut ggml in prop::collection::vec(any::<u8>(), 0..340)) {
        ggml.truncate(ggml.len() / 17 * 17);
        let groups = ggml.len() / 17;
        let (mut blocks, mut scales) = (vec![0u8; groups * 16], vec![0u8; groups]);
        ggml_mxfp4_to_hf(&ggml, &mut blocks, &mut scales).unwrap();
        let mut back = vec![0u8; ggml.len()];
        hf_mxfp4_to_ggml(&blocks, &scales, &mut back).unwrap();
        prop_assert_eq!(back, ggml);
    }

    /// MLX affine reads back, for every bit width, what an independent packer (a u128 bit
    /// accumulator, not the reader's byte-pair logic) wrote.
    #[test]
    fn mlx_affine_reads_an_independent_packer(
        bits in prop::sample::select(vec![2u32, 3, 4, 5, 6, 8]),
        group_size in prop::sample::select(vec![32usize, 64, 128]),
        groups in 1usize..4,
        seed in any::<u64>(),
    ) {
        let n = groups * group_size;
        let mask = (1u64 << bits) - 1;
        let quants: Vec<u64> = (0..n as u64)
            .map(|i| (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(i * 0x2545_F491)).rotate_left((i % 61) as u32) & mask)
            .collect();
        let mut packed = Vec::new();
        let (mut acc, mut acc_bits) = (0u128, 0u32);
        for &q in &quants {
            acc |= u128::from(q) << acc_bits;
            acc_bits += bits;
            while acc_bits >= 32 {
                packed.extend_from_slice(&(acc as u32).to_le_bytes());
                acc >>= 32;
                acc_bits -= 32;
            }
        }
        prop_assert_eq!(acc_bits, 0);
        let ones: Vec<u8> = (0..groups).flat_map(|_| 1.0f32.to_le_bytes()).collect();
        let zeros = vec![0u8; groups * 4];
        let params = MlxAffine { bits, group_size, scale_dtype: DType::F32 };
        let mut got = vec![0.0f32; n];
        params.dequantize_ref(&packed, &ones, &zeros, &mut got).unwrap();
        for (g, q) in got.iter().zip(&quants) {
            prop_assert_eq!(*g, *q as f32);
        }
    }

    /// MLX affine with wrong lengths or parameters: typed errors, never panics.
    #[test]
    fn mlx_affine_wrong_sizes_are_typed_errors(
        bits in 0u32..10,
        group_size in prop::sample::select(vec![0usize, 16, 32, 64, 100, 128, 256]),
        scale_dtype in prop::sample::select(vec![DType::F16, DType::BF16, DType::F32, DType::Q8_0]),
        n in 0usize..300,
        weight_len in 0usize..200,
        scales_len in 0usize..20,
        biases_len in 0usize..20,
    ) {
        let params = MlxAffine { bits, group_size, scale_dtype };
        let mut out = vec![0.0f32; n];
        let result = params.dequantize_ref(&vec![0xA5; weight_len], &vec![1; scales_len], &vec![2; biases_len], &mut out);
        let valid_params = params.validate().is_ok();
        if let Err(err) = result {
            let kind_ok = match err {
                QuantError::MlxParameters { .. } | QuantError::MlxScaleDType { .. } => !valid_params,
                QuantError::PartialGroupValues { len, .. } => valid_params && len == n,
                QuantError::ComponentLength { format, .. } => valid_params && format == "MLX affine",
                _ => false,
            };
            prop_assert!(kind_ok, "unexpected error {}", err);
        } else {
            prop_assert!(valid_params && n % group_size == 0);
        }
    }

    /// Q8_0 round trip: every value is within half a step (plus the f16 rounding of the scale).
    #[test]
    fn q8_0_round_trip_error_is_half_a_step(values in prop::collection::vec(-100.0f32..100.0, 32..=32)) {
        let mut block = [0u8; 34];
        quantize_row_q8_0_ref(&values, &mut block).unwrap();
        let mut back = [0.0f32; 32];
        dequantize_row_q8_0_ref(&block, &mut back).unwrap();
        let amax = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        // d is rounded to f16 (relative error 2^-11), which moves q*d by up to 127 * d * 2^-11.
        let step = amax / 127.0;
        let bound = step * 0.5 + amax * 2f32.powi(-11) + 1e-6;
        for (x, y) in values.iter().zip(&back) {
            prop_assert!((x - y).abs() <= bound, "{} -> {} (bound {})", x, y, bound);
        }
    }
}

#[test]
fn unsupported_dtypes_are_typed_errors_naming_the_dtype() {
    for dtype in DType::all().filter(|d| !DEQUANTIZABLE.contains(d)) {
        let bytes = vec![0u8; dtype.block_bytes()];
        let mut out = vec![0.0f32; dtype.block_elems()];
        let err = dequantize(dtype, &bytes, &mut out).unwrap_err();
        assert_eq!(err, QuantError::Unsupported { dtype, operation: "dequantize" });
        assert!(err.to_string().starts_with(dtype.name()), "{err}");
    }
    for dtype in DType::all().filter(|d| !QUANTIZABLE.contains(d)) {
        let values = vec![0.0f32; dtype.block_elems()];
        let mut out = vec![0u8; dtype.block_bytes()];
        let err = quantize(dtype, &values, &mut out).unwrap_err();
        assert_eq!(err, QuantError::Unsupported { dtype, operation: "quantize" });
    }
}
