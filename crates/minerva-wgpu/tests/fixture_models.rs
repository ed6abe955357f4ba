//! The committed tiny models on the wgpu backend against the CPU backend's f32 reference mode:
//! GPT-OSS in its three layouts (llama.cpp GGUF with MXFP4 experts, Hugging Face MXFP4
//! SafeTensors, MLX mxfp4 + 8-bit affine — ours and mlx-lm's, whose embeddings and router are
//! affine too — uploaded as `MLX_A8` blocks the kernels dequantize as `mx.dequantize`), the LLaMA, Mistral (sliding window) and
//! Phi-3 (fused QKV / gate-up, long-rope) SafeTensors checkpoints of `fixtures/model/tiny`, and
//! its Qwen 2 (QKV biases) and Qwen 3 (QK-norm) in SafeTensors and llama.cpp-converted GGUF.
//!
//! Each runs with the GPU's default f16 KV cache against a CPU with an f16 cache, and two of them
//! also with f32 caches on both sides. Both round keys and values to the nearest f16, but from f32
//! values that differ in their last bits (another summation order), so now and then a cached value
//! rounds the other way: one f16 step, 2⁻¹⁰ of it. With f16 caches the logit tolerance is
//! therefore 1e-3 · max |logit| (measured: up to 1.4e-4).
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
use minerva_core::DType;
use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};
use minerva_wgpu::{WgpuBackend, WgpuOptions};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(path)
}

fn check(path: &str) {
    check_with(path, DType::F16);
}

fn check_with(path: &str, kv_dtype: DType) {
    let cpu_backend = CpuBackend::new(Some(1)).unwrap().with_f32_activations(true).with_kv_dtype(kv_dtype).unwrap();
    let cpu = Model::load(fixture(path), cpu_backend).unwrap();
    let options = WgpuOptions { kv_dtype, ..WgpuOptions::default() };
    let gpu = Model::load(fixture(path), WgpuBackend::new(options).expect("a wgpu adapter")).unwrap();
    assert_eq!(gpu.new_cache(1, 4).unwrap().dtype(), kv_dtype);
    let vocab = cpu.config.vocab as u32;
    let prompt: Vec<u32> = [1u32, 17, 250, 3, 99, 42, 7].iter().map(|t| t % vocab).collect();
    let tolerance = if kv_dtype == DType::F16 { 1e-3 } else { 1e-4 };
    greedy_parity(path, &cpu, &gpu, &prompt, tolerance);
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
fn gpt_oss_mlx_lm() {
    check("gpt_oss/mlx_lm");
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
fn gpt_oss_gguf_f32_cache() {
    check_with("gpt_oss/gpt_oss.gguf", DType::F32);
}

#[test]
fn mistral_safetensors_f32_cache() {
    check_with("model/tiny/mistral", DType::F32);
}

#[test]
fn other_cache_dtypes_are_errors() {
    let err = WgpuBackend::new(WgpuOptions { kv_dtype: DType::Q8_0, ..WgpuOptions::default() }).err().unwrap();
    assert_eq!(err.to_string(), "the GPU KV cache holds F16 or F32, not Q8_0");
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

/// `Model::forward_hidden` (embeddings read back through `Backend::read_rows`) on the GPU equals
/// the CPU's f32 reference, for a batch of two sequences of different lengths, row for row, and
/// both backends give each sequence's rows in batch order.
#[test]
fn forward_hidden_of_a_batch_equals_the_cpu() {
    for path in ["model/tiny/llama", "gpt_oss/gpt_oss.gguf"] {
        let cpu_backend =
            CpuBackend::new(Some(1)).unwrap().with_f32_activations(true).with_kv_dtype(DType::F32).unwrap();
        let cpu = Model::load(fixture(path), cpu_backend).unwrap();
        let options = WgpuOptions { kv_dtype: DType::F32, ..WgpuOptions::default() };
        let gpu = Model::load(fixture(path), WgpuBackend::new(options).expect("a wgpu adapter")).unwrap();
        let vocab = cpu.config.vocab as u32;
        let a: Vec<u32> = [1u32, 17, 250, 3, 99].iter().map(|t| t % vocab).collect();
        let b: Vec<u32> = [42u32, 7, 8].iter().map(|t| t % vocab).collect();
        let batch =
            [SequenceInput { tokens: &a, start_pos: 0, slot: 0 }, SequenceInput { tokens: &b, start_pos: 0, slot: 1 }];
        let want = cpu.forward_hidden(&mut cpu.new_cache(2, 8).unwrap(), &batch).unwrap();
        let got = gpu.forward_hidden(&mut gpu.new_cache(2, 8).unwrap(), &batch).unwrap();
        assert_eq!((got.dim, &got.seqs), (cpu.config.n_embd, &vec![0..5, 5..8]), "{path}");
        assert_eq!(got.data.len(), 8 * got.dim, "{path}");
        let scale = want.data.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got.data.iter().zip(&want.data).fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        assert!(worst <= 1e-4 * scale, "{path}: max |Δ| {worst} of max |x| {scale}");
        // The second sequence alone gives its rows of the batch (rows do not affect each other).
        let alone = [SequenceInput { tokens: &b, start_pos: 0, slot: 0 }];
        let b_alone = cpu.forward_hidden(&mut cpu.new_cache(1, 8).unwrap(), &alone).unwrap();
        assert_eq!(b_alone.seq(0), want.seq(1), "{path}");
    }
}
