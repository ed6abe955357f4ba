//! Our reference (de)quantizers against values other people's code computed, **bit for bit**.
//!
//! The fixtures come from `fixtures/quant/make_quant_goldens.py` (see `manifest.json` for which
//! generator made each file): gguf-py 0.19's `gguf.quants` for the GGML types, numpy
//! transcriptions of ggml's C for Q8_K (gguf-py has none), of transformers' MXFP4 formula for the
//! HF layout (checked there against MLX 0.32.4 and gguf-py), and of MLX's affine formula (checked
//! there against MLX 0.32.4 itself). NaNs compare equal to NaNs whatever their payload: 0 × inf
//! makes a NaN whose sign bit depends on the CPU, not on the formula.

use std::path::PathBuf;

use minerva_core::DType;
use minerva_quant::{
    MlxAffine, dequantize, dequantize_hf_mxfp4_ref, dequantize_mlx_mxfp4_ref, ggml_mxfp4_to_hf, hf_mxfp4_to_ggml,
    quantize,
};
use serde_json::Value;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/quant")
}

fn read(name: &str) -> Vec<u8> {
    let path = fixture_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn manifest() -> Value {
    serde_json::from_slice(&read("manifest.json")).expect("manifest.json parses")
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

/// Part `name` of a multi-part fixture: `[offset, len]` into `blob`.
fn part<'a>(blob: &'a [u8], parts: &Value, name: &str) -> &'a [u8] {
    let offset = parts[name][0].as_u64().unwrap() as usize;
    let len = parts[name][1].as_u64().unwrap() as usize;
    &blob[offset..offset + len]
}

/// Panics with the first few differing indices unless `got` and `want` have the same bits (or
/// are both NaN).
fn assert_same_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let differing: Vec<_> = (0..got.len())
        .filter(|&i| got[i].to_bits() != want[i].to_bits() && !(got[i].is_nan() && want[i].is_nan()))
        .collect();
    assert!(
        differing.is_empty(),
        "{what}: {} of {} values differ; first: {:?}",
        differing.len(),
        got.len(),
        differing.iter().take(5).map(|&i| (i, got[i], want[i])).collect::<Vec<_>>()
    );
}

fn dtype_of(entry: &Value) -> DType {
    let name = entry["dtype"].as_str().unwrap();
    DType::from_name(name).unwrap_or_else(|| panic!("unknown dtype {name}"))
}

#[test]
fn dequantize_matches_gguf_py_bitwise() {
    let manifest = manifest();
    let entries = manifest["dequantize"].as_array().unwrap();
    assert_eq!(entries.len(), 15, "every GGML type in scope plus F32/F16/BF16");
    for entry in entries {
        let dtype = dtype_of(entry);
        let bytes = read(entry["bytes"].as_str().unwrap());
        let want = f32s(&read(entry["values"].as_str().unwrap()));
        let mut got = vec![0.0f32; want.len()];
        dequantize(dtype, &bytes, &mut got).unwrap();
        assert_same_bits(dtype.name(), &got, &want);

        // The same bytes at an odd address: the reference must not need aligned blocks.
        let mut shifted = vec![0u8; bytes.len() + 1];
        shifted[1..].copy_from_slice(&bytes);
        got.fill(0.0);
        dequantize(dtype, &shifted[1..], &mut got).unwrap();
        assert_same_bits(&format!("{dtype} at an odd address"), &got, &want);
    }
}

#[test]
fn quantize_matches_gguf_py_bytewise() {
    let manifest = manifest();
    let entries = manifest["quantize"].as_array().unwrap();
    assert_eq!(entries.len(), 5, "Q8_0, Q4_0, Q4_1, MXFP4, Q8_K");
    for entry in entries {
        let dtype = dtype_of(entry);
        let values = f32s(&read(entry["values"].as_str().unwrap()));
        let want = read(entry["bytes"].as_str().unwrap());
        let mut got = vec![0u8; want.len()];
        quantize(dtype, &values, &mut got).unwrap();
        let block_bytes = dtype.block_bytes();
        let differing: Vec<_> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
        assert!(
            differing.is_empty(),
            "{dtype}: {} bytes differ; first (block, byte in block, got, want): {:?}",
            differing.len(),
            differing.iter().take(5).map(|&i| (i / block_bytes, i % block_bytes, got[i], want[i])).collect::<Vec<_>>()
        );
    }
}

#[test]
fn hf_mxfp4_matches_transformers_formula_and_converts_like_llama_cpp() {
    let manifest = manifest();
    let hf = &manifest["hf_mxfp4"];
    let blob = read(hf["file"].as_str().unwrap());
    let parts = &hf["parts"];
    let (blocks, scales) = (part(&blob, parts, "blocks"), part(&blob, parts, "scales"));
    let want = f32s(part(&blob, parts, "values"));
    let want_ggml = part(&blob, parts, "ggml");

    let mut got = vec![0.0f32; want.len()];
    dequantize_hf_mxfp4_ref(blocks, scales, &mut got).unwrap();
    assert_same_bits("HF MXFP4", &got, &want);
    got.fill(0.0);
    dequantize_mlx_mxfp4_ref(blocks, scales, &mut got).unwrap();
    assert_same_bits("MLX mxfp4", &got, &want);

    let mut ggml = vec![0u8; want_ggml.len()];
    hf_mxfp4_to_ggml(blocks, scales, &mut ggml).unwrap();
    assert_eq!(ggml, want_ggml, "HF -> GGML conversion");

    let (mut blocks_back, mut scales_back) = (vec![0u8; blocks.len()], vec![0u8; scales.len()]);
    ggml_mxfp4_to_hf(&ggml, &mut blocks_back, &mut scales_back).unwrap();
    assert_eq!((&blocks_back[..], &scales_back[..]), (blocks, scales), "GGML -> HF conversion");
}

#[test]
fn mlx_affine_matches_mlx_bitwise() {
    let manifest = manifest();
    let mlx = &manifest["mlx_affine"];
    let blob = read(mlx["file"].as_str().unwrap());
    let cases = mlx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6 * 3 * 3, "bits x group sizes x scale dtypes");
    for case in cases {
        let params = MlxAffine {
            bits: case["bits"].as_u64().unwrap() as u32,
            group_size: case["group_size"].as_u64().unwrap() as usize,
            scale_dtype: DType::from_name(case["scale_dtype"].as_str().unwrap()).unwrap(),
        };
        let parts = &case["parts"];
        let want = f32s(part(&blob, parts, "values"));
        let mut got = vec![0.0f32; want.len()];
        params
            .dequantize_ref(
                part(&blob, parts, "weight"),
                part(&blob, parts, "scales"),
                part(&blob, parts, "biases"),
                &mut got,
            )
            .unwrap();
        assert_same_bits(&format!("{params:?}"), &got, &want);
    }
}

/// `MlxAffine::quantize` against `mx.quantize` (`make_mlx_quantize_golden.py`): weight words,
/// scales and biases bit for bit, every width for bf16 and 4/8 bits for f16 and f32, group sizes
/// 32/64/128, with constant, zero and edge-rounds-to-zero groups.
#[test]
fn mlx_affine_quantization_matches_mlx_bitwise() {
    let golden: Value = serde_json::from_slice(&read("mlx_quantize.json")).unwrap();
    let blob = read(golden["file"].as_str().unwrap());
    let cases = golden["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6 * 3 + 2 * 2 * 3, "bf16 widths + f16/f32 at 4 and 8 bits, x group sizes");
    let span = |case: &Value, name: &str| {
        let at = case[name].as_array().unwrap();
        let (offset, len) = (at[0].as_u64().unwrap() as usize, at[1].as_u64().unwrap() as usize);
        blob[offset..offset + len].to_vec()
    };
    for case in cases {
        let params = MlxAffine {
            bits: case["bits"].as_u64().unwrap() as u32,
            group_size: case["group_size"].as_u64().unwrap() as usize,
            scale_dtype: DType::from_name(case["dtype"].as_str().unwrap()).unwrap(),
        };
        let values = f32s(&span(case, "input_f32"));
        let (want_weight, want_scales, want_biases) =
            (span(case, "weight"), span(case, "scales"), span(case, "biases"));
        let (mut weight, mut scales, mut biases) =
            (vec![0xAA; want_weight.len()], vec![0xAA; want_scales.len()], vec![0xAA; want_biases.len()]);
        params.quantize(&values, &mut weight, &mut scales, &mut biases).unwrap();
        assert_eq!(scales, want_scales, "{params:?} scales");
        assert_eq!(biases, want_biases, "{params:?} biases");
        assert_eq!(weight, want_weight, "{params:?} weight");
        let mut short = vec![0u8; weight.len() - 1];
        assert!(params.quantize(&values, &mut short, &mut scales, &mut biases).is_err());
    }
}
