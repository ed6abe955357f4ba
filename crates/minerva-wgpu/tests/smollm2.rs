//! Model level: SmolLM2-135M (Q4_1 GGUF) on the wgpu backend against the CPU backend in its f32
//! reference mode (the same dequantized weights, f32 activations), on a short prompt, with f32 KV
//! caches on both sides and with f16 caches on both sides (the GPU's default).
//!
//! Tolerance: logits within 1e-4 · max |logit| with f32 caches (f32 rounding of another summation
//! order, accumulated over 30 layers; lavapipe measures 2.5e-5 on logits of magnitude ~20);
//! 3e-3 with f16 caches: a key or value computed in another order now and then rounds to the
//! neighbouring f16 (2⁻¹⁰ away), ~10 times per token over 30 layers, and the difference grows
//! through the layers (lavapipe measures up to 1.15e-3). The bound is what the f16 cache itself
//! costs on the CPU against an f32 cache (0.042 on logits of ~18, 2.3e-3: minerva-model's
//! `tests/kv_f16.rs`), so the GPU's f16 cache never moves logits by more than using an f16 cache
//! at all does. The same greedy token at every step. Needs a wgpu adapter (lavapipe in CI) and
//! fails without one.

use minerva_core::DType;
use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};
use minerva_wgpu::{WgpuBackend, WgpuOptions};

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf");

fn argmax(row: &[f32]) -> u32 {
    row.iter().enumerate().fold(0, |b, (i, &v)| if v > row[b] { i } else { b }) as u32
}

#[track_caller]
fn assert_close(what: &str, cpu: &[f32], gpu: &[f32], rel_tol: f32) -> f32 {
    let scale = cpu.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let err = cpu.iter().zip(gpu).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= rel_tol * scale, "{what}: max |Δlogit| {err} > {rel_tol} × {scale}");
    err
}

#[test]
fn smollm2_logits_and_greedy_tokens_match_cpu_f32_cache() {
    check(DType::F32, 1e-4);
}

#[test]
fn smollm2_logits_and_greedy_tokens_match_cpu_f16_cache() {
    check(DType::F16, 3e-3);
}

fn check(kv_dtype: DType, rel_tol: f32) {
    let cpu_backend = CpuBackend::new(None).unwrap().with_f32_activations(true).with_kv_dtype(kv_dtype).unwrap();
    let cpu = Model::load(MODEL, cpu_backend).unwrap();
    let options = WgpuOptions { kv_dtype, ..WgpuOptions::default() };
    let gpu = Model::load(MODEL, WgpuBackend::new(options).expect("a wgpu adapter")).unwrap();
    // Arbitrary in-vocabulary ids, starting with the BOS token.
    let prompt = [1u32, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47];
    let (mut cc, mut gc) = (cpu.new_cache(1, 32).unwrap(), gpu.new_cache(1, 32).unwrap());
    let seq = SequenceInput { tokens: &prompt, start_pos: 0, slot: 0 };
    let want = cpu.forward(&mut cc, &[seq], LogitsFor::All).unwrap();
    let got = gpu.forward(&mut gc, &[seq], LogitsFor::All).unwrap();
    let err = assert_close("prefill", &want.data, &got.data, rel_tol);
    eprintln!("prefill max |Δlogit| {err}");
    let mut next = argmax(want.row(prompt.len() - 1));
    assert_eq!(argmax(got.row(prompt.len() - 1)), next, "first greedy token");
    for step in 0..4 {
        let tokens = [next];
        let seq = SequenceInput { tokens: &tokens, start_pos: prompt.len() + step, slot: 0 };
        let want = cpu.forward(&mut cc, &[seq], LogitsFor::Last).unwrap();
        let got = gpu.forward(&mut gc, &[seq], LogitsFor::Last).unwrap();
        let err = assert_close(&format!("decode step {step}"), &want.data, &got.data, rel_tol);
        eprintln!("decode step {step}: token {next}, max |Δlogit| {err}");
        next = argmax(want.row(0));
        assert_eq!(argmax(got.row(0)), next, "greedy token at decode step {step}");
    }
}
