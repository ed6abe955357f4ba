//! The KV cache on the real model: a prefill followed by one-token decode steps gives the logits of
//! one full prefill, and a batch of two sequences gives each sequence's own logits.
//!
//! Tolerance 1e-5: every row's activations are quantized and multiplied independently of the other
//! rows, and attention sums over the same cached positions in the same order, so the two paths
//! compute the same numbers (measured: identical).

use std::path::Path;

use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};

fn real_model() -> Model<CpuBackend> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.exists(), "{} is missing: run `cargo xtask setup` (this test never skips)", path.display());
    Model::load(&path, CpuBackend::new(None).unwrap()).unwrap()
}

const PROMPT: [u32; 12] = [504, 2365, 282, 260, 6627, 20046, 30497, 800, 14713, 28, 3933, 351];

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn prefill_then_decode_equals_one_prefill() {
    let model = real_model();
    let mut cache = model.new_cache(1, 32).unwrap();
    let full =
        model.forward(&mut cache, &[SequenceInput { tokens: &PROMPT, start_pos: 0, slot: 0 }], LogitsFor::All).unwrap();

    let mut cache = model.new_cache(1, 32).unwrap();
    let split = 5;
    let head = SequenceInput { tokens: &PROMPT[..split], start_pos: 0, slot: 0 };
    let first = model.forward(&mut cache, &[head], LogitsFor::Last).unwrap();
    let mut worst = max_diff(first.row(0), full.row(split - 1));
    for pos in split..PROMPT.len() {
        let step = SequenceInput { tokens: &PROMPT[pos..=pos], start_pos: pos, slot: 0 };
        let logits = model.forward(&mut cache, &[step], LogitsFor::Last).unwrap();
        assert_eq!(logits.rows, vec![(0, pos)]);
        worst = worst.max(max_diff(logits.row(0), full.row(pos)));
    }
    println!("prefill + decode vs one prefill: max |Δlogit| {worst:e}");
    assert!(worst <= 1e-5, "{worst}");
}

#[test]
fn a_batch_of_two_sequences_equals_each_alone() {
    let model = real_model();
    let (a, b) = (&PROMPT[..7], &PROMPT[3..]);
    let mut cache = model.new_cache(2, 16).unwrap();
    let batch =
        [SequenceInput { tokens: a, start_pos: 0, slot: 1 }, SequenceInput { tokens: b, start_pos: 0, slot: 0 }];
    let both = model.forward(&mut cache, &batch, LogitsFor::Last).unwrap();
    assert_eq!(both.rows, vec![(0, 6), (1, 8)]);
    for (i, tokens) in [a, b].into_iter().enumerate() {
        let mut alone = model.new_cache(1, 16).unwrap();
        let seq = SequenceInput { tokens, start_pos: 0, slot: 0 };
        let logits = model.forward(&mut alone, &[seq], LogitsFor::Last).unwrap();
        assert!(max_diff(both.row(i), logits.row(0)) <= 1e-5);
    }
    // Decode one more token for each sequence in one batch.
    let step = [
        SequenceInput { tokens: &[28], start_pos: 7, slot: 1 },
        SequenceInput { tokens: &[28], start_pos: 9, slot: 0 },
    ];
    let next = model.forward(&mut cache, &step, LogitsFor::Last).unwrap();
    let mut alone = model.new_cache(1, 16).unwrap();
    let extended: Vec<u32> = a.iter().copied().chain([28]).collect();
    let reference = model
        .forward(&mut alone, &[SequenceInput { tokens: &extended, start_pos: 0, slot: 0 }], LogitsFor::Last)
        .unwrap();
    assert!(max_diff(next.row(0), reference.row(0)) <= 1e-5);
}

#[test]
fn requests_beyond_the_cache_are_errors() {
    let model = real_model();
    let mut cache = model.new_cache(1, 4).unwrap();
    let err =
        model.forward(&mut cache, &[SequenceInput { tokens: &PROMPT[..5], start_pos: 0, slot: 0 }], LogitsFor::Last);
    assert!(err.unwrap_err().to_string().contains("beyond the KV cache"));
    let err = model.forward(&mut cache, &[SequenceInput { tokens: &[1], start_pos: 0, slot: 3 }], LogitsFor::Last);
    assert!(err.unwrap_err().to_string().contains("slot 3"));
    let err = model.forward(&mut cache, &[SequenceInput { tokens: &[49152], start_pos: 0, slot: 0 }], LogitsFor::Last);
    assert!(err.unwrap_err().to_string().contains("token id 49152"));
}
