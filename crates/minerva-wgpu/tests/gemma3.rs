//! Gemma 3 on the wgpu backend against the CPU backend's f32 reference mode (the same weights,
//! f32 activations):
//!
//! * the tiny random Gemma 3 (`fixtures/model/tiny/gemma3/model.gguf`, written by llama.cpp's
//!   converter: 7 layers, sliding window 6, 20 tokens): prefill logits of every position and 4
//!   decode steps past the window;
//! * the real Gemma 3 270M Q4_K_M (Q8_0 embeddings and tied head, Q5_0 / Q8_0 / Q4_K / Q6_K
//!   matrices, head_dim 256, one KV head): a short prompt and 4 greedy decode steps.
//!
//! Both with f32 KV caches (the f16 cache is compared in `smollm2.rs` and `fixture_models.rs`).
//! Tolerance: logits within 1e-4 · max |logit| and the same greedy token at every step (as for
//! SmolLM2). Needs a wgpu adapter (lavapipe in CI) and fails without one.

use std::path::Path;

use minerva_core::DType;
use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput, argmax};
use minerva_wgpu::{WgpuBackend, WgpuOptions};

#[track_caller]
fn assert_close(what: &str, cpu: &[f32], gpu: &[f32]) -> f32 {
    assert_eq!(cpu.len(), gpu.len());
    let scale = cpu.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let err = cpu.iter().zip(gpu).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= 1e-4 * scale, "{what}: max |Δlogit| {err} > 1e-4 × {scale}");
    err
}

/// Prefill of `prompt` (every position's logits) then `steps` greedy decode steps, on both.
fn parity(label: &str, path: &Path, prompt: &[u32], steps: usize) {
    let cpu = Model::load(path, CpuBackend::new(None).unwrap().with_f32_activations(true)).unwrap();
    let options = WgpuOptions { kv_dtype: DType::F32, ..WgpuOptions::default() };
    let gpu = Model::load(path, WgpuBackend::new(options).expect("a wgpu adapter")).unwrap();
    let capacity = prompt.len() + steps;
    let (mut cc, mut gc) = (cpu.new_cache(1, capacity).unwrap(), gpu.new_cache(1, capacity).unwrap());
    let seq = SequenceInput { tokens: prompt, start_pos: 0, slot: 0 };
    let want = cpu.forward(&mut cc, &[seq], LogitsFor::All).unwrap();
    let got = gpu.forward(&mut gc, &[seq], LogitsFor::All).unwrap();
    let err = assert_close(&format!("{label} prefill"), &want.data, &got.data);
    eprintln!("{label} prefill max |Δlogit| {err}");
    let mut next = argmax(want.row(prompt.len() - 1));
    assert_eq!(argmax(got.row(prompt.len() - 1)), next, "{label}: first greedy token");
    for step in 0..steps {
        let tokens = [next];
        let seq = SequenceInput { tokens: &tokens, start_pos: prompt.len() + step, slot: 0 };
        let want = cpu.forward(&mut cc, &[seq], LogitsFor::Last).unwrap();
        let got = gpu.forward(&mut gc, &[seq], LogitsFor::Last).unwrap();
        let err = assert_close(&format!("{label} decode step {step}"), &want.data, &got.data);
        eprintln!("{label} decode step {step}: token {next}, max |Δlogit| {err}");
        next = argmax(want.row(0));
        assert_eq!(argmax(got.row(0)), next, "{label}: greedy token at decode step {step}");
    }
}

#[test]
fn tiny_gemma3_matches_cpu_past_the_window() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/model/tiny/gemma3/model.gguf");
    // 20 in-vocabulary ids (the tokenizer has 96 pieces): longer than the window of 6.
    let prompt: Vec<u32> = (0..20).map(|i| 4 + (i * 37) % 92).collect();
    parity("tiny gemma3", &path, &prompt, 4);
}

#[test]
fn gemma3_270m_matches_cpu() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/gemma-3-270m-q4_k_m.gguf");
    assert!(path.exists(), "{} is missing: run `cargo xtask setup`", path.display());
    // "<bos>The capital of France is" (llama-tokenize).
    let prompt = [2u32, 818, 5279, 529, 7001, 563];
    parity("gemma3 270m", &path, &prompt, 4);
}
