//! Tiny synthetic LLaMA and Mistral models (random weights in a mix of every dtype the kernels
//! read, written with `GgufWriter`): prefill logits and 32 greedy decode steps on the wgpu backend
//! against the CPU backend's f32 reference mode, with f32 KV caches on both sides (the f16 cache
//! is compared in `fixture_models.rs` and `smollm2.rs`).
//!
//! Tolerance: logits within 2e-4 · max |logit| at every step (lavapipe measures 4.3e-5 for the
//! LLaMA, 6.8e-6 for the Mistral: f32 rounding of another summation order). Greedy tokens: the CPU's choice is
//! fed to both backends (teacher forcing, so one disagreement cannot derail the rest), and the
//! GPU's argmax must equal it at every step whose CPU top-2 margin exceeds twice the logit
//! difference measured at that step (with random weights an exact near-tie is possible; rounding
//! may then pick either).
//! Needs a wgpu adapter (lavapipe in CI) and fails without one.

mod common;

use std::sync::Arc;

use common::{Rng, greedy_parity, weight_bytes};
use minerva_core::DType;
use minerva_gguf::{Gguf, GgufWriter};
use minerva_model::{CpuBackend, Model};
use minerva_wgpu::{WgpuBackend, WgpuOptions};

/// 2 layers, n_embd 256 (4 heads of 64, 2 KV heads), n_ff 512, vocab 300.
fn tiny(arch: &str, sliding_window: Option<u32>, seed: u64) -> Arc<Gguf<Vec<u8>>> {
    let (e, ff, vocab, heads, kv, hd) = (256usize, 512usize, 300usize, 4u32, 2u32, 64usize);
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", arch).unwrap();
    for (k, v) in [
        ("block_count", 2u32),
        ("embedding_length", e as u32),
        ("feed_forward_length", ff as u32),
        ("attention.head_count", heads),
        ("attention.head_count_kv", kv),
        ("context_length", 64),
    ] {
        w.add_metadata(format!("{arch}.{k}"), v).unwrap();
    }
    w.add_metadata(format!("{arch}.attention.layer_norm_rms_epsilon"), 1e-5f32).unwrap();
    if let Some(window) = sliding_window {
        w.add_metadata(format!("{arch}.attention.sliding_window"), window).unwrap();
    }
    let mut rng = Rng(seed);
    let (q, kvd) = (heads as usize * hd, kv as usize * hd);
    let mut tensors: Vec<(String, DType, Vec<usize>)> = vec![
        ("token_embd.weight".into(), DType::Q8_0, vec![vocab, e]),
        ("output_norm.weight".into(), DType::F32, vec![e]),
    ];
    if arch == "mistral" {
        // An untied head, in yet another dtype.
        tensors.push(("output.weight".into(), DType::BF16, vec![vocab, e]));
    }
    for i in 0..2 {
        for (name, dtype, shape) in [
            ("attn_norm", DType::F32, vec![e]),
            ("attn_q", DType::Q8_0, vec![q, e]),
            ("attn_k", DType::Q4_1, vec![kvd, e]),
            ("attn_v", DType::F16, vec![kvd, e]),
            ("attn_output", DType::Q4_0, vec![e, q]),
            ("ffn_norm", DType::F32, vec![e]),
            ("ffn_gate", DType::Q4_K, vec![ff, e]),
            ("ffn_up", DType::Q6_K, vec![ff, e]),
            ("ffn_down", DType::MXFP4, vec![e, ff]),
        ] {
            tensors.push((format!("blk.{i}.{name}.weight"), dtype, shape));
        }
    }
    for (name, dtype, shape) in tensors {
        let data = if shape.len() == 1 {
            (0..shape[0]).flat_map(|_| (1.0 + 0.2 * rng.f32()).to_le_bytes()).collect()
        } else {
            weight_bytes(&mut rng, dtype, shape[0], shape[1])
        };
        w.add_tensor(name, dtype, &shape, data).unwrap();
    }
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    Arc::new(Gguf::parse(bytes).unwrap())
}

fn check(arch: &str, sliding_window: Option<u32>, seed: u64) {
    let file = tiny(arch, sliding_window, seed);
    let cpu = Model::from_gguf(file.clone(), CpuBackend::new(Some(1)).unwrap().with_f32_activations(true)).unwrap();
    let options = WgpuOptions { kv_dtype: DType::F32, ..WgpuOptions::default() };
    let gpu = Model::from_gguf(file, WgpuBackend::new(options).expect("a wgpu adapter")).unwrap();
    assert_eq!(gpu.config.sliding_window, sliding_window.map(|w| w as usize));
    greedy_parity(arch, &cpu, &gpu, &[1, 17, 250, 3, 99, 42, 7], 2e-4);
}

#[test]
fn tiny_llama_matches_cpu_for_32_greedy_steps() {
    check("llama", None, 11);
}

#[test]
fn tiny_mistral_with_sliding_window_matches_cpu_for_32_greedy_steps() {
    // A window of 8 is shorter than the 39 positions the run reaches.
    check("mistral", Some(8), 12);
}
