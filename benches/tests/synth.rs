//! The synthetic LLaMA writer: the tiny preset opens with our GGUF reader and runs through the
//! model (finite logits), and the file holds every byte of its tensors.

use minerva_benches::synth::{llama_preset, write_llama_gguf};
use minerva_core::DType;
use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};

#[test]
fn tiny_preset_opens_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let shape = llama_preset("tiny").unwrap();
    for quant in [DType::Q4_0, DType::Q8_0] {
        let path = dir.path().join(format!("tiny-{quant}.gguf"));
        let len = write_llama_gguf(&shape, quant, &path, 7).unwrap();
        let gguf = minerva_gguf::Gguf::open(&path).unwrap();
        let tensors: u64 = gguf.tensors().map(|t| t.bytes.len() as u64).sum();
        assert!(len >= tensors, "{len} bytes for {tensors} bytes of tensors");
        let model = Model::load(&path, CpuBackend::new(Some(1)).unwrap()).unwrap();
        assert_eq!((model.config.n_layer, model.config.n_embd, model.config.vocab), (2, 128, 512));
        let mut cache = model.new_cache(1, 16).unwrap();
        let tokens = [1u32, 5, 9, 300];
        let logits = model
            .forward(&mut cache, &[SequenceInput { tokens: &tokens, start_pos: 0, slot: 0 }], LogitsFor::Last)
            .unwrap();
        assert!(logits.row(0).iter().all(|v| v.is_finite()));
        // Random weights: the logits are not all equal.
        assert!(logits.row(0).iter().any(|&v| v != logits.row(0)[0]));
    }
    assert!(llama_preset("70b").is_none());
    let err = write_llama_gguf(&shape, DType::Q4_K, &dir.path().join("x.gguf"), 1).unwrap_err();
    assert!(err.to_string().contains("only q4_0 and q8_0"), "{err}");
}
