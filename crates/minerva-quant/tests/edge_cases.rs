//! Hand-written edge cases whose expected values follow from the format definitions alone:
//! zero / negative-zero / subnormal scales, every E8M0 extreme with every nibble, and all-zero /
//! all-one bit patterns.

use half::f16;
use minerva_core::DType;
use minerva_quant::mxfp4::{FP4_E2M1_VALUES, e8m0_to_f32};
use minerva_quant::{
    QuantError, dequantize, dequantize_hf_mxfp4_ref, dequantize_row_mxfp4_ref, ggml_mxfp4_to_hf, hf_mxfp4_to_ggml,
};

fn decode(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![f32::NAN; bytes.len() / dtype.block_bytes() * dtype.block_elems()];
    dequantize(dtype, bytes, &mut out).unwrap();
    out
}

/// A block of `dtype` filled with `fill`, with f16 `scale` written at every offset in `at`.
fn block_with(dtype: DType, fill: u8, scale: u16, at: &[usize]) -> Vec<u8> {
    let mut block = vec![fill; dtype.block_bytes()];
    for &offset in at {
        block[offset..offset + 2].copy_from_slice(&scale.to_le_bytes());
    }
    block
}

/// Offsets of every f16 field (scales and minimums) per type, from ggml-common.h.
const F16_FIELDS: [(DType, &[usize]); 10] = [
    (DType::Q8_0, &[0]),
    (DType::Q4_0, &[0]),
    (DType::Q4_1, &[0, 2]),
    (DType::Q5_0, &[0]),
    (DType::Q5_1, &[0, 2]),
    (DType::Q2_K, &[80, 82]),
    (DType::Q3_K, &[108]),
    (DType::Q4_K, &[0, 2]),
    (DType::Q5_K, &[0, 2]),
    (DType::Q6_K, &[208]),
];

#[test]
fn zero_and_negative_zero_scales_give_zeros() {
    for (dtype, fields) in F16_FIELDS {
        for scale in [0x0000u16, 0x8000] {
            for fill in [0x00u8, 0x5A, 0xFF] {
                let values = decode(dtype, &block_with(dtype, fill, scale, fields));
                assert!(values.iter().all(|&v| v == 0.0), "{dtype} scale {scale:#x} fill {fill:#x}");
            }
        }
    }
}

#[test]
fn subnormal_scales_multiply_exactly() {
    // Products of an f16 subnormal and a small integer are exact in f32, so f64 arithmetic
    // predicts every bit.
    for scale in [0x0001u16, 0x8001, 0x03FF, 0x8200] {
        let d = f64::from(f16::from_bits(scale).to_f32());
        let q8 = decode(DType::Q8_0, &block_with(DType::Q8_0, 0x81, scale, &[0]));
        assert!(q8.iter().all(|&v| v == (d * -127.0) as f32), "Q8_0 {scale:#x}");
        let q4 = decode(DType::Q4_0, &block_with(DType::Q4_0, 0x0F, scale, &[0]));
        assert_eq!(&q4[..16], &[(d * 7.0) as f32; 16], "Q4_0 low nibbles {scale:#x}");
        assert_eq!(&q4[16..], &[(d * -8.0) as f32; 16], "Q4_0 high nibbles {scale:#x}");
    }
}

#[test]
fn all_zero_and_all_one_bits_hit_the_quant_extremes() {
    let one = 0x3C00u16; // f16 1.0
    let q4_0 = |fill| decode(DType::Q4_0, &block_with(DType::Q4_0, fill, one, &[0]));
    assert!(q4_0(0x00).iter().all(|&v| v == -8.0));
    assert!(q4_0(0xFF).iter().all(|&v| v == 7.0));
    let q4_1 = |fill| decode(DType::Q4_1, &block_with(DType::Q4_1, fill, one, &[0, 2]));
    assert!(q4_1(0x00).iter().all(|&v| v == 1.0)); // 0 * d + m
    assert!(q4_1(0xFF).iter().all(|&v| v == 16.0)); // 15 * d + m
    let q5_0 = |fill| decode(DType::Q5_0, &block_with(DType::Q5_0, fill, one, &[0]));
    assert!(q5_0(0x00).iter().all(|&v| v == -16.0));
    assert!(q5_0(0xFF).iter().all(|&v| v == 15.0));
    let q5_1 = |fill| decode(DType::Q5_1, &block_with(DType::Q5_1, fill, one, &[0, 2]));
    assert!(q5_1(0xFF).iter().all(|&v| v == 32.0)); // 31 * d + m
    // Q2_K all ones: scale 15, min 15, q 3 -> 15*3 - 15.
    let q2_k = decode(DType::Q2_K, &block_with(DType::Q2_K, 0xFF, one, &[80, 82]));
    assert!(q2_k.iter().all(|&v| v == 30.0));
    // Q3_K all ones: scale 63-32 = 31, q = 3 (mask bit set: no -4). All zeros: scale -32, q -4.
    let q3_k = |fill| decode(DType::Q3_K, &block_with(DType::Q3_K, fill, one, &[108]));
    assert!(q3_k(0xFF).iter().all(|&v| v == 93.0));
    assert!(q3_k(0x00).iter().all(|&v| v == 128.0));
    // Q4_K all ones: scale 63, min 63, q 15 -> 63*15 - 63; Q5_K: q 31 -> 63*31 - 63.
    let q4_k = decode(DType::Q4_K, &block_with(DType::Q4_K, 0xFF, one, &[0, 2]));
    assert!(q4_k.iter().all(|&v| v == 882.0));
    let q5_k = decode(DType::Q5_K, &block_with(DType::Q5_K, 0xFF, one, &[0, 2]));
    assert!(q5_k.iter().all(|&v| v == 1890.0));
    // Q6_K all ones: scales are i8 -1, q = 63 - 32 = 31. All zeros: scale 0.
    let q6_k = |fill| decode(DType::Q6_K, &block_with(DType::Q6_K, fill, one, &[208]));
    assert!(q6_k(0xFF).iter().all(|&v| v == -31.0));
    assert!(q6_k(0x00).iter().all(|&v| v == 0.0));
}

/// The E8M0 bytes worth testing with every nibble: both subnormal scales, 1.0, the largest
/// finite scales and the OCP NaN encoding.
const E8M0_EXTREMES: [u8; 7] = [0, 1, 2, 127, 128, 254, 255];

#[test]
fn ggml_mxfp4_every_nibble_at_every_extreme_exponent() {
    for e in E8M0_EXTREMES {
        // Nibbles 0..16 in the low halves, 15..=0 in the high halves.
        let mut block = vec![e];
        block.extend((0..16u8).map(|n| n | ((15 - n) << 4)));
        let values = decode(DType::MXFP4, &block);
        for (i, &v) in values.iter().enumerate() {
            let nibble = if i < 16 { i } else { 15 - (i - 16) };
            let doubled = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12][nibble];
            // ggml: doubled value times 2^(e-128), exact in f64, rounded (to inf) once.
            let want = (f64::from(doubled) * 2f64.powi(i32::from(e) - 128)) as f32;
            assert_eq!(v.to_bits(), want.to_bits(), "e {e} nibble {nibble}");
        }
    }
}

#[test]
fn hf_mxfp4_every_nibble_at_every_extreme_exponent() {
    for e in E8M0_EXTREMES {
        let blocks: Vec<u8> = (0..16u8).map(|k| (2 * k % 16) | (((2 * k + 1) % 16) << 4)).collect();
        let mut values = [0.0f32; 32];
        dequantize_hf_mxfp4_ref(&blocks, &[e], &mut values).unwrap();
        for (i, &v) in values.iter().enumerate() {
            let fp4 = FP4_E2M1_VALUES[i % 16];
            if e == 255 {
                // Scale +inf (as MLX and torch compute it): ±0 → NaN, the rest ±inf.
                if fp4 == 0.0 {
                    assert!(v.is_nan(), "e 255 nibble {i}");
                } else {
                    assert_eq!(v, fp4 * f32::INFINITY, "e 255 nibble {i}");
                }
                continue;
            }
            let want = (f64::from(fp4) * 2f64.powi(i32::from(e) - 127)) as f32;
            assert_eq!(v.to_bits(), want.to_bits(), "e {e} value {i}");
        }
    }
    assert_eq!(e8m0_to_f32(0).to_bits(), 0x0040_0000);
    assert_eq!(e8m0_to_f32(127), 1.0);
    assert_eq!(e8m0_to_f32(255), f32::INFINITY);
}

#[test]
fn mxfp4_conversion_of_known_bytes() {
    // HF: value 2j = low nibble, 2j+1 = high nibble. Values 0..32 carry nibble v % 16.
    let hf: Vec<u8> = (0..16u8).map(|j| ((2 * j) % 16) | (((2 * j + 1) % 16) << 4)).collect();
    let mut ggml = [0u8; 17];
    hf_mxfp4_to_ggml(&hf, &[200], &mut ggml).unwrap();
    // GGML: byte j = value j (low) | value j+16 (high); value v has nibble v % 16.
    let want: Vec<u8> = std::iter::once(200).chain((0..16u8).map(|j| j | (j << 4))).collect();
    assert_eq!(&ggml[..], &want[..]);
    let (mut blocks, mut scales) = ([0u8; 16], [0u8; 1]);
    ggml_mxfp4_to_hf(&ggml, &mut blocks, &mut scales).unwrap();
    assert_eq!((&blocks[..], scales[0]), (&hf[..], 200));

    let mut from_hf = [0.0f32; 32];
    let mut from_ggml = [0.0f32; 32];
    dequantize_hf_mxfp4_ref(&hf, &[200], &mut from_hf).unwrap();
    dequantize_row_mxfp4_ref(&ggml, &mut from_ggml).unwrap();
    assert_eq!(from_hf, from_ggml);
}

#[test]
fn mxfp4_pair_length_errors_name_the_component() {
    let mut out = [0.0f32; 32];
    let err = dequantize_hf_mxfp4_ref(&[0; 15], &[0], &mut out).unwrap_err();
    assert!(matches!(err, QuantError::PartialGroupBytes { component: "blocks", len: 15, .. }));
    let err = dequantize_hf_mxfp4_ref(&[0; 16], &[0, 0], &mut out).unwrap_err();
    assert!(matches!(err, QuantError::ComponentLength { component: "scales", expected: 1, .. }));
    let err = dequantize_hf_mxfp4_ref(&[0; 16], &[0], &mut out[..31]).unwrap_err();
    assert!(matches!(err, QuantError::ComponentLength { component: "output", actual: 31, .. }));
    let err = hf_mxfp4_to_ggml(&[0; 16], &[0], &mut [0u8; 16]).unwrap_err();
    assert!(matches!(err, QuantError::ComponentLength { component: "output", expected: 17, .. }));
    let err = ggml_mxfp4_to_hf(&[0; 18], &mut [0u8; 16], &mut [0u8; 1]).unwrap_err();
    assert!(matches!(err, QuantError::PartialBlockBytes { dtype: DType::MXFP4, len: 18, .. }));
}
