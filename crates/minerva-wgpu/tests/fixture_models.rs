//! The committed tiny models on the wgpu backend against the CPU backend's f32 reference mode:
//! GPT-OSS in its three layouts (llama.cpp GGUF with MXFP4 experts, Hugging Face MXFP4
//! SafeTensors, MLX mxfp4 + 8-bit affine → bf16), the LLaMA, Mistral (sliding window) and
//! Phi-3 (fused QKV / gate-up, long-rope) SafeTensors checkpoints of `fixtures/model/tiny`, and
//! its Qwen 2 (QKV biases) and Qwen 3 (QK-norm) in SafeTensors and llama.cpp-converted GGUF.
//!
//! Each runs a 7-token prefill (every row's logits) and 32 greedy decode steps. Tolerance: logits
//! within 1e-4 · max |logit| at every step (f32 rounding of another summation order; measured
//! figures in docs/wgpu.md). Greedy tokens: the CPU's choice is fed to both backends (teacher
//! forcing), and the GPU's argmax must equal it at every step whose CPU top-2 margin exceeds the
//! tolerance. `Model::forward_greedy` runs alongside on its own caches: on the GPU (argmax kernel,
//! one id read back) it must equal the argmax of the GPU's logits, on the CPU (the trait's
//! default, a host argmax) the CPU's. Needs a wgpu adapter (lavapipe in CI) and fails without one.

mod common;

use std::path::{Path, PathBuf};

use common::{greedy_parity, top};
use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};
use minerva_wgpu::{WgpuBackend, WgpuOptions};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(path)
}

fn check(path: &str) {
    let cpu_backend = CpuBackend::new(Some(1)).unwrap().with_f32_activations(true);
    let cpu = Model::load(fixture(path), cpu_backend).unwrap();
    let gpu = Model::load(fixture(path), WgpuBackend::new(WgpuOptions::default()).expect("a wgpu adapter")).unwrap();
    let vocab = cpu.config.vocab as u32;
    let prompt: Vec<u32> = [1u32, 17, 250, 3, 99, 42, 7].iter().map(|t| t % vocab).collect();
    greedy_parity(path, &cpu, &gpu, &prompt, 1e-4);
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

#[test]
fn qwen2_safetensors() {
    check("model/tiny/qwen2");
}

#[test]
fn qwen2_gguf() {
    check("model/tiny/qwen2/model.gguf");
}

#[test]
fn qwen3_safetensors() {
    check("model/tiny/qwen3");
}

#[test]
fn qwen3_gguf() {
    check("model/tiny/qwen3/model.gguf");
}

#[test]
fn forward_greedy_of_a_batch_of_two_sequences() {
    // Two prompts of different lengths in one step, then a decode step of both: one id each.
    let gpu = Model::load(fixture("gpt_oss/gpt_oss.gguf"), WgpuBackend::new(WgpuOptions::default()).unwrap()).unwrap();
    let (a, b) = ([5u32, 9, 200, 31, 7], [44u32, 2, 18]);
    let (mut logits_cache, mut greedy_cache) = (gpu.new_cache(2, 8).unwrap(), gpu.new_cache(2, 8).unwrap());
    let mut steps = vec![(a.to_vec(), b.to_vec(), 0, 0)];
    let mut next = Vec::new();
    for step in 0..2 {
        let (ta, tb, sa, sb) = steps[step].clone();
        let batch = [
            SequenceInput { tokens: &ta, start_pos: sa, slot: 1 },
            SequenceInput { tokens: &tb, start_pos: sb, slot: 0 },
        ];
        let logits = gpu.forward(&mut logits_cache, &batch, LogitsFor::Last).unwrap();
        let want: Vec<u32> = (0..2).map(|r| top(logits.row(r)).0).collect();
        next = gpu.forward_greedy(&mut greedy_cache, &batch).unwrap();
        assert_eq!(next, want, "step {step}");
        steps.push((vec![next[0]], vec![next[1]], sa + ta.len(), sb + tb.len()));
    }
    assert_eq!(next.len(), 2);
}
