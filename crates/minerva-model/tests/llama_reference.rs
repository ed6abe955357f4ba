//! The CPU backend's logits on the real SmolLM2-135M-Instruct Q4_1 against Hugging Face
//! transformers (f32 weights dequantized from the same GGUF, f32 activations), from
//! `fixtures/model/make_llama_reference.py`.
//!
//! Two modes, two tolerances (bounds and the figures they were set from: docs/model.md,
//! "Tolerances"):
//! * f32 activations ([`CpuBackend::with_f32_activations`]) compute what transformers computes, up
//!   to f32 summation order.
//! * the default path quantizes activations before every matmul: to i16 (f32 scale per 32 values)
//!   for the 32-value block formats, which all of this model's matrices are.

use std::path::{Path, PathBuf};

use minerva_model::{Backend, CpuBackend, LogitsFor, Model, Repack, RepackMemory, SequenceInput};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn real_model(f32_activations: bool) -> Model<CpuBackend> {
    let path = root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.exists(), "{} is missing: run `cargo xtask setup` (this test never skips)", path.display());
    Model::load(&path, CpuBackend::new(None).unwrap().with_f32_activations(f32_activations)).unwrap()
}

fn reference() -> (Vec<Value>, Vec<f32>) {
    let dir = root().join("fixtures/model");
    let json: Value = serde_json::from_slice(&std::fs::read(dir.join("llama_reference.json")).unwrap()).unwrap();
    let last: Vec<f32> = std::fs::read(dir.join("llama_last_logits.f32"))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (json["prompts"].as_array().unwrap().clone(), last)
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

fn log_softmax_at(row: &[f32], id: usize) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    row[id] as f64 - max - sum.ln()
}

/// Agreement with the reference over every prompt.
struct Stats {
    top1: f64,
    worst_ppl: f64,
    max_delta: f32,
}

fn compare(f32_activations: bool) -> Stats {
    let model = real_model(f32_activations);
    assert_eq!((model.config.n_layer, model.config.n_embd, model.config.vocab), (30, 576, 49152));
    let (prompts, last) = reference();
    let vocab = model.config.vocab;
    let mut cache = model.new_cache(1, 128).unwrap();
    let (mut agree, mut positions, mut max_delta) = (0usize, 0usize, 0f32);
    let mut max_last_delta = 0f32;
    let (mut worst_ppl, mut total_nll, mut total_ref_nll, mut scored) = (0f64, 0f64, 0f64, 0usize);
    for (p, prompt) in prompts.iter().enumerate() {
        let tokens = ids(&prompt["tokens"]);
        let seq = SequenceInput { tokens: &tokens, start_pos: 0, slot: 0 };
        let logits = model.forward(&mut cache, &[seq], LogitsFor::All).unwrap();
        assert_eq!(logits.rows.len(), tokens.len());
        let mut nll = 0.0;
        for (i, (ref_ids, ref_vals)) in
            prompt["top5_ids"].as_array().unwrap().iter().zip(prompt["top5_logits"].as_array().unwrap()).enumerate()
        {
            let row = logits.row(i);
            let ref_ids = ids(ref_ids);
            let argmax = (0..vocab).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
            agree += usize::from(argmax as u32 == ref_ids[0]);
            positions += 1;
            for (&id, v) in ref_ids.iter().zip(ref_vals.as_array().unwrap()) {
                max_delta = max_delta.max((row[id as usize] - v.as_f64().unwrap() as f32).abs());
            }
            if i + 1 < tokens.len() {
                nll -= log_softmax_at(row, tokens[i + 1] as usize);
            }
        }
        let ppl = (nll / (tokens.len() - 1) as f64).exp();
        let ref_ppl = prompt["ppl"].as_f64().unwrap();
        let rel = (ppl / ref_ppl - 1.0).abs();
        let last_row = logits.row(tokens.len() - 1);
        let delta =
            last_row.iter().zip(&last[p * vocab..(p + 1) * vocab]).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        max_last_delta = max_last_delta.max(delta);
        println!(
            "prompt {p}: {} tokens, ppl {ppl:.4} vs {ref_ppl:.4} ({:+.3} %)",
            tokens.len(),
            (ppl / ref_ppl - 1.0) * 100.0
        );
        worst_ppl = worst_ppl.max(rel);
        total_nll += nll;
        total_ref_nll += ref_ppl.ln() * (tokens.len() - 1) as f64;
        scored += tokens.len() - 1;
    }
    let rate = agree as f64 / positions as f64;
    let all = ((total_nll - total_ref_nll) / scored as f64).exp() - 1.0;
    println!("f32 activations: {f32_activations}");
    println!("top-1 agreement {agree}/{positions} = {:.2} %", rate * 100.0);
    println!("perplexity: worst prompt {:.3} %, all prompts {:+.3} %", worst_ppl * 100.0, all * 100.0);
    println!(
        "max |Δlogit|: {max_delta:.4} over the reference top-5 of every position, {max_last_delta:.4} over full last rows"
    );
    Stats { top1: rate, worst_ppl, max_delta: max_delta.max(max_last_delta) }
}

#[test]
fn f32_activations_match_transformers() {
    let s = compare(true);
    assert_eq!(s.top1, 1.0);
    assert!(s.worst_ppl < 1e-5, "perplexity off by {}", s.worst_ppl);
    assert!(s.max_delta < 3e-4, "max |Δlogit| {}", s.max_delta);
}

#[test]
fn quantized_activations_stay_close_to_transformers() {
    let s = compare(false);
    assert_eq!(s.top1, 1.0, "top-1 agreement");
    assert!(s.worst_ppl < 3e-4, "perplexity off by {}", s.worst_ppl);
    assert!(s.max_delta < 0.008, "max |Δlogit| {}", s.max_delta);
}

/// Repacking's copies are made while the model loads (one token through it), not in the first
/// request's time: right after `Model::load`, every matrix SmolLM2 multiplies by — 30 layers × 7
/// and the head, which is the embedding table (tied) — is copied, 96,436,224 bytes; none without
/// repacking or in the f32 reference mode (which repacks nothing).
#[test]
fn repacked_copies_are_made_at_load() {
    let path = root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let loaded = |backend: CpuBackend| Model::load(&path, backend).unwrap().backend.repacked();
    let backend = || CpuBackend::new(None).unwrap();
    assert_eq!(loaded(backend().with_repack(Repack::On)), (211, 96_436_224));
    assert_eq!(loaded(backend()), (0, 0));
    assert_eq!(loaded(backend().with_repack(Repack::On).with_f32_activations(true)), (0, 0));
}

/// `auto`'s copies stay within their memory budget: matrix by matrix, in the order the warm-up
/// token reaches them, a copy that would pass it is not made and the matrix is read in place
/// (counted as declined, with the bytes its copy would have taken); `on` copies regardless.
#[test]
fn auto_repacks_within_its_memory_budget() {
    let path = root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let load = |repack: Repack, memory: u64| {
        let backend =
            CpuBackend::new(None).unwrap().with_repack(repack).with_repack_memory(RepackMemory::Bytes(memory));
        let model = Model::load(&path, backend).unwrap();
        (model.backend.repacked(), model.backend.repack_declined())
    };
    // What `auto` copies on this CPU with room for everything (AVX2 or AVX-512: every matrix).
    let (all, none_declined) = load(Repack::Auto, u64::MAX);
    assert_eq!(none_declined, (0, 0));
    assert!(all.0 > 0, "auto repacks nothing on this CPU: the budget is not exercised");
    // No room: every one of those matrices declined, with the bytes of its copy.
    assert_eq!(load(Repack::Auto, 1), ((0, 0), all));
    // Room for half: some copied, within it, the rest declined; together what `auto` copies.
    let half = all.1 as u64 / 2;
    let (made, declined) = load(Repack::Auto, half);
    assert!(made.0 > 0 && declined.0 > 0, "{made:?} copied, {declined:?} declined");
    assert!(made.1 as u64 <= half, "{} bytes copied past a budget of {half}", made.1);
    assert_eq!((made.0 + declined.0, made.1 + declined.1), all);
    // `on` was asked for whatever the copies cost.
    assert_eq!(load(Repack::On, 1), ((211, 96_436_224), (0, 0)));
}
