//! The f16 and Q8_0 KV caches on the real model (SmolLM2-135M Q4_1): prefill then one-token
//! decode equals one prefill exactly (both read the same rounded keys and values), and, with f32
//! activations, the logits differ from the f32 cache's by the rounding of keys/values only.
//!
//! Bounds (and the figures they were set from: docs/model.md, "Tolerances"): decode vs prefill as
//! `kv_cache.rs`; f16 or Q8_0 vs f32 cache with f32 activations, max |Δlogit| and the same top-1
//! everywhere but near ties.

use std::path::Path;

use minerva_core::DType;
use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};

fn real_model(kv: DType, f32_activations: bool) -> Model<CpuBackend> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.exists(), "{} is missing: run `cargo xtask setup` (this test never skips)", path.display());
    let backend = CpuBackend::new(None).unwrap().with_f32_activations(f32_activations);
    Model::load(&path, backend.with_kv_dtype(kv).unwrap()).unwrap()
}

/// The first prompt of `fixtures/model/llama_reference.json` (47 tokens of real text).
fn prompt() -> Vec<u32> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/model/llama_reference.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    json["prompts"][0]["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn argmax(row: &[f32]) -> usize {
    minerva_model::argmax(row) as usize
}

fn all_logits(model: &Model<CpuBackend>, tokens: &[u32]) -> minerva_model::Logits {
    let mut cache = model.new_cache(1, tokens.len()).unwrap();
    model.forward(&mut cache, &[SequenceInput { tokens, start_pos: 0, slot: 0 }], LogitsFor::All).unwrap()
}

#[test]
fn f16_cache_decode_equals_prefill_and_stays_close_to_f32() {
    // SmolLM2: 30 layers × 3 KV heads × 64 dims, keys and values, 2 bytes each.
    let positions = prompt().len().next_multiple_of(32);
    check(DType::F16, 2 * 30 * 3 * positions * 64 * 2, 0.05);
}

#[test]
fn q8_0_cache_decode_equals_prefill_and_stays_close_to_f32() {
    // Two blocks of 32 values (34 bytes each) per head and position.
    let positions = prompt().len().next_multiple_of(32);
    check(DType::Q8_0, 2 * 30 * 3 * positions * 2 * 34, 1.5);
}

/// Decode equals prefill on a `kv` cache of `bytes`, and its logits (with f32 activations) are
/// within `bound` of an f32 cache's, with the same top-1 but at near ties.
fn check(kv: DType, bytes: usize, bound: f32) {
    let tokens = prompt();
    let model = real_model(kv, false);
    let full = all_logits(&model, &tokens);

    let mut cache = model.new_cache(1, tokens.len()).unwrap();
    assert_eq!(cache.dtype(), kv);
    // Whole blocks of 32 positions.
    assert_eq!(cache.byte_len(), bytes);
    let split = 8;
    let head = SequenceInput { tokens: &tokens[..split], start_pos: 0, slot: 0 };
    let first = model.forward(&mut cache, &[head], LogitsFor::Last).unwrap();
    let mut worst = max_diff(first.row(0), full.row(split - 1));
    for pos in split..tokens.len() {
        let step = SequenceInput { tokens: &tokens[pos..=pos], start_pos: pos, slot: 0 };
        worst = worst.max(max_diff(model.forward(&mut cache, &[step], LogitsFor::Last).unwrap().row(0), full.row(pos)));
    }
    println!("{kv} cache: prefill + decode vs one prefill: max |Δlogit| {worst:e}");
    assert_eq!(worst, 0.0, "prefill + decode must equal one prefill");

    let rounded = all_logits(&real_model(kv, true), &tokens);
    let exact = all_logits(&real_model(DType::F32, true), &tokens);
    let n = tokens.len();
    let delta = (0..n).map(|i| max_diff(rounded.row(i), exact.row(i))).fold(0.0, f32::max);
    let same_top1 = (0..n).filter(|&i| argmax(rounded.row(i)) == argmax(exact.row(i))).count();
    println!(
        "{kv} vs f32 KV cache (f32 activations), {n} positions: max |Δlogit| {delta:e}, same top-1 {same_top1}/{n}"
    );
    assert!(delta > 0.0, "the {kv} cache must actually round");
    assert!(delta <= bound, "{delta}");
    // A different top-1 is allowed only at a near tie: where the exact logits of the two choices
    // are closer than twice the rounding's error at that position.
    for i in (0..n).filter(|&i| argmax(rounded.row(i)) != argmax(exact.row(i))) {
        let (a, b) = (argmax(rounded.row(i)), argmax(exact.row(i)));
        let margin = exact.row(i)[b] - exact.row(i)[a];
        let error = max_diff(rounded.row(i), exact.row(i));
        println!("position {i}: top-1 {a} vs {b}, exact margin {margin:e}, error {error:e}");
        assert!(margin <= 2.0 * error, "position {i}: margin {margin} is no near tie (error {error})");
    }
    assert!(same_top1 + 1 >= n, "{same_top1}/{n}");
}
