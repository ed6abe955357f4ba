//! What the tiny-model tests share: the fixtures of `fixtures/model/tiny/<name>/` (written by
//! the `make_*_reference.py` scripts: `reference.json` with the token sequences, `logits.f32`
//! with transformers' logits), a prefill of every position, and the relative error measure.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};

use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};

/// `fixtures/model/tiny/<name>`.
pub fn tiny_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/model/tiny").join(name)
}

/// The token sequences and transformers' logits (positions × vocab per sequence).
pub fn reference(name: &str) -> Vec<(Vec<u32>, Vec<f32>)> {
    let dir = tiny_dir(name);
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let vocab = json["vocab"].as_u64().unwrap() as usize;
    let bytes = std::fs::read(dir.join("logits.f32")).unwrap();
    let mut logits = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let sequences: Vec<(Vec<u32>, Vec<f32>)> = json["sequences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|seq| {
            let tokens: Vec<u32> = seq.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
            let values: Vec<f32> = logits.by_ref().take(tokens.len() * vocab).collect();
            assert_eq!(values.len(), tokens.len() * vocab, "logits.f32 is short");
            (tokens, values)
        })
        .collect();
    assert!(logits.next().is_none(), "logits.f32 is longer than the sequences");
    sequences
}

/// Logits of every position of `tokens`, in one prefill.
pub fn prefill(model: &Model<CpuBackend>, tokens: &[u32]) -> Vec<f32> {
    let mut cache = model.new_cache(1, tokens.len()).unwrap();
    model.forward(&mut cache, &[SequenceInput { tokens, start_pos: 0, slot: 0 }], LogitsFor::All).unwrap().data
}

/// max |a − b| / max |b|.
pub fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
    diff / b.iter().map(|v| v.abs()).fold(0.0, f32::max)
}
