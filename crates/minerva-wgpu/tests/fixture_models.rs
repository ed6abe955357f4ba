//! The committed tiny models on the wgpu backend against the CPU backend's f32 reference mode:
//! GPT-OSS in its three layouts (llama.cpp GGUF with MXFP4 experts, Hugging Face MXFP4
//! SafeTensors, MLX mxfp4 + 8-bit affine → bf16) and the LLaMA, Mistral (sliding window) and
//! Phi-3 (fused QKV / gate-up, long-rope) SafeTensors checkpoints of `fixtures/model/tiny`.
//!
//! Each runs a 7-token prefill (every row's logits) and 32 greedy decode steps. Tolerance: logits
//! within 1e-4 · max |logit| at every step (f32 rounding of another summation order; measured
//! figures in docs/wgpu.md). Greedy tokens: the CPU's choice is fed to both backends (teacher
//! forcing), and the GPU's argmax must equal it at every step whose CPU top-2 margin exceeds the
//! tolerance. Needs a wgpu adapter (lavapipe in CI) and fails without one.

use std::path::{Path, PathBuf};

use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};
use minerva_wgpu::{WgpuBackend, WgpuOptions};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(path)
}

/// (index of the max, margin to the runner-up).
fn top(row: &[f32]) -> (u32, f32) {
    let best = row.iter().enumerate().fold(0, |b, (i, &v)| if v > row[b] { i } else { b });
    let second = row.iter().enumerate().filter(|&(i, _)| i != best).fold(f32::NEG_INFINITY, |m, (_, &v)| m.max(v));
    (best as u32, row[best] - second)
}

fn check(path: &str) {
    let cpu_backend = CpuBackend::new(Some(1)).unwrap().with_f32_activations(true);
    let cpu = Model::load(fixture(path), cpu_backend).unwrap();
    let gpu = Model::load(fixture(path), WgpuBackend::new(WgpuOptions::default()).expect("a wgpu adapter")).unwrap();
    let vocab = cpu.config.vocab as u32;
    let prompt: Vec<u32> = [1u32, 17, 250, 3, 99, 42, 7].iter().map(|t| t % vocab).collect();
    let steps = 32;
    let capacity = prompt.len() + steps;
    let (mut cc, mut gc) = (cpu.new_cache(1, capacity).unwrap(), gpu.new_cache(1, capacity).unwrap());
    let mut tokens = prompt.clone();
    let (mut start, mut near_ties, mut worst) = (0, 0, 0.0f32);
    for step in 0..=steps {
        let seq = SequenceInput { tokens: &tokens[start..], start_pos: start, slot: 0 };
        let which = if step == 0 { LogitsFor::All } else { LogitsFor::Last };
        let want = cpu.forward(&mut cc, &[seq], which).unwrap();
        let got = gpu.forward(&mut gc, &[seq], which).unwrap();
        let scale = want.data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = want.data.iter().zip(&got.data).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        let tol = 1e-4 * scale;
        assert!(err <= tol, "{path} step {step}: max |Δlogit| {err} > 1e-4 × {scale}");
        worst = worst.max(err / scale);
        let last = want.rows.len() - 1;
        let (next, margin) = top(want.row(last));
        if margin > tol {
            assert_eq!(top(got.row(last)).0, next, "{path}: greedy token at step {step}");
        } else {
            near_ties += 1;
        }
        start = tokens.len();
        tokens.push(next);
    }
    eprintln!("{path}: worst |Δlogit| / max |logit| {worst:.2e}, {near_ties} near-ties, tokens {tokens:?}");
    assert!(near_ties <= 2, "{path}: {near_ties} of {steps} steps were near-ties");
}

#[test]
fn gpt_oss_gguf() {
    check("gpt_oss/gpt_oss.gguf");
}

#[test]
fn gpt_oss_hf() {
    check("gpt_oss/hf");
}

#[test]
fn gpt_oss_mlx() {
    check("gpt_oss/mlx");
}

#[test]
fn llama_safetensors() {
    check("model/tiny/llama");
}

#[test]
fn mistral_safetensors() {
    check("model/tiny/mistral");
}

#[test]
fn phi3_safetensors() {
    check("model/tiny/phi3");
}
