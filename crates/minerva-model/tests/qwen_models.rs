//! Tiny random Qwen 2 (Q/K/V biases, untied head) and Qwen 3 (QK-norm, explicit head dim 16 over
//! hidden 32, tied embeddings) written by transformers (`fixtures/model/make_qwen_reference.py`)
//! as f32 SafeTensors, and the same checkpoints converted by llama.cpp's own
//! `convert_hf_to_gguf.py` (its `qwen2.*` / `qwen3.*` keys and tensor names):
//!
//! * both formats read the same [`Config`] (NeoX RoPE, base 1e6, no window);
//! * every position's logits in both formats match transformers' within 1e-4 relative
//!   (max |Δ| / max |reference|) with f32 activations: only summation order differs;
//! * prefill then one-token decode equals one prefill;
//! * a file missing a bias or a head norm, or asking for what the graph does not do (Qwen's
//!   sliding window, YaRN), is refused naming the tensor or key.

mod common;

use common::{prefill, reference, rel_err, tiny_dir};

use std::path::Path;
use std::sync::Arc;

use minerva_gguf::{Gguf, GgufWriter};
use minerva_model::{CpuBackend, LogitsFor, Model, ModelWeights, RopeScaling, RopeStyle, SequenceInput};
use serde_json::{Value, json};

const MODELS: [&str; 2] = ["qwen2", "qwen3"];

fn backend() -> CpuBackend {
    CpuBackend::new(None).unwrap().with_f32_activations(true)
}

fn load_safetensors(name: &str) -> Model<CpuBackend> {
    Model::load(tiny_dir(name), backend()).unwrap()
}

fn load_gguf(name: &str) -> Model<CpuBackend> {
    Model::load(tiny_dir(name).join("model.gguf"), backend()).unwrap()
}

#[test]
fn both_formats_read_the_same_config() {
    for name in MODELS {
        let (st, gguf) = (load_safetensors(name), load_gguf(name));
        assert_eq!(gguf.config, st.config, "{name}");
        let c = &st.config;
        assert_eq!(c.arch, name);
        assert_eq!((c.n_layer, c.n_embd, c.n_ff, c.n_head, c.n_head_kv, c.vocab), (2, 32, 64, 4, 2, 96));
        assert_eq!(c.rope.style, RopeStyle::NeoX);
        assert_eq!((c.rope.base, c.rope.dim, &c.rope.scaling), (1e6, c.head_dim, &RopeScaling::None));
        assert_eq!(c.sliding_window, None);
        assert_eq!(c.rms_eps, 1e-6);
        for model in [&st, &gguf] {
            let ModelWeights::Qwen(w) = &model.weights else { panic!("{name} loads the Qwen graph") };
            let layer = &w.layers[1];
            if name == "qwen2" {
                assert_eq!(c.head_dim, 8);
                assert!(w.base.output.is_some(), "qwen2: untied head");
                assert!(layer.biases[..3].iter().all(Option::is_some) && layer.biases[3].is_none());
                assert!(layer.qk_norm.is_none());
            } else {
                assert_eq!((c.head_dim, c.q_dim()), (16, 64), "qwen3: head_dim from the file, not 32 / 4");
                assert!(w.base.output.is_none(), "qwen3: tied embeddings");
                assert!(layer.biases.iter().all(Option::is_none));
                assert!(layer.qk_norm.is_some());
            }
        }
    }
}

#[test]
fn logits_match_transformers_in_both_formats() {
    for name in MODELS {
        for (format, model) in [("SafeTensors", load_safetensors(name)), ("GGUF", load_gguf(name))] {
            for (i, (tokens, expected)) in reference(name).iter().enumerate() {
                let err = rel_err(&prefill(&model, tokens), expected);
                println!("{name} {format} sequence {i} ({} tokens): max relative error {err:e}", tokens.len());
                assert!(err <= 1e-4, "{name} {format} sequence {i}: {err}");
            }
        }
    }
}

#[test]
fn prefill_then_decode_equals_one_prefill() {
    for name in MODELS {
        let model = load_gguf(name);
        let (tokens, _) = &reference(name)[1];
        let full = prefill(&model, tokens);
        let vocab = model.config.vocab;
        let mut cache = model.new_cache(1, tokens.len()).unwrap();
        let split = 5;
        let head = SequenceInput { tokens: &tokens[..split], start_pos: 0, slot: 0 };
        let first = model.forward(&mut cache, &[head], LogitsFor::Last).unwrap();
        let mut worst = rel_err(first.row(0), &full[(split - 1) * vocab..split * vocab]);
        for pos in split..tokens.len() {
            let step = SequenceInput { tokens: &tokens[pos..=pos], start_pos: pos, slot: 0 };
            let logits = model.forward(&mut cache, &[step], LogitsFor::Last).unwrap();
            worst = worst.max(rel_err(logits.row(0), &full[pos * vocab..(pos + 1) * vocab]));
        }
        println!("{name}: prefill + decode vs one prefill {worst:e}");
        assert!(worst <= 1e-6, "{name}: {worst}");
    }
}

/// The converted GGUF of `name` rewritten without the metadata keys and tensors in `skip`.
fn gguf_without(name: &str, skip: &[&str]) -> Arc<Gguf<Vec<u8>>> {
    let g = Gguf::open(tiny_dir(name).join("model.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in g.metadata() {
        if !skip.contains(&key) {
            w.add_metadata(key, value.to_owned_value()).unwrap();
        }
    }
    for info in g.tensor_infos() {
        if !skip.contains(&info.name.as_str()) {
            w.add_tensor(info.name.clone(), info.dtype, &info.shape, g.tensor(&info.name).unwrap().bytes.to_vec())
                .unwrap();
        }
    }
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    Arc::new(Gguf::parse(bytes).unwrap())
}

fn gguf_error(name: &str, skip: &[&str]) -> String {
    Model::from_gguf(gguf_without(name, skip), backend()).err().expect("should be refused").to_string()
}

#[test]
fn gguf_missing_a_bias_a_head_norm_or_a_key_is_refused() {
    assert_eq!(gguf_error("qwen2", &["blk.1.attn_k.bias"]), "missing tensor blk.1.attn_k.bias");
    assert_eq!(gguf_error("qwen3", &["blk.0.attn_q_norm.weight"]), "missing tensor blk.0.attn_q_norm.weight");
    assert_eq!(gguf_error("qwen3", &["qwen3.attention.head_count"]), "missing metadata key qwen3.attention.head_count");
    assert_eq!(
        gguf_error("qwen2", &["qwen2.attention.layer_norm_rms_epsilon"]),
        "missing metadata key qwen2.attention.layer_norm_rms_epsilon"
    );
    // Without key_length the head dim would be 32 / 4 = 8, which the norms' 16 values contradict.
    let err = gguf_error("qwen3", &["qwen3.attention.key_length", "qwen3.attention.value_length"]);
    assert!(err.starts_with("tensor blk.0.attn_q.weight: shape [64, 32]"), "{err}");
    // Leaving out the (untied) head of qwen2 makes it tied, as llama.cpp reads it: still loads.
    assert!(Model::from_gguf(gguf_without("qwen2", &["output.weight"]), backend()).is_ok());
}

/// A copy of the checkpoint `name` with its `config.json` edited.
fn edited_copy(name: &str, edit: impl FnOnce(&mut Value)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = tiny_dir(name);
    std::fs::copy(src.join("model.safetensors"), dir.path().join("model.safetensors")).unwrap();
    let mut config: Value = serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    dir
}

fn checkpoint_error(dir: &Path) -> String {
    Model::load(dir, backend()).err().expect("the checkpoint should be refused").to_string()
}

#[test]
fn config_json_asking_for_what_the_graph_lacks_is_refused() {
    let dir = edited_copy("qwen2", |c| {
        c["use_sliding_window"] = json!(true);
        c["sliding_window"] = json!(8);
    });
    assert_eq!(checkpoint_error(dir.path()), "metadata key config.json:use_sliding_window: true is not supported");
    let dir = edited_copy("qwen3", |c| c["rope_parameters"] = json!({"rope_type": "yarn", "factor": 4.0}));
    let err = checkpoint_error(dir.path());
    assert!(err.starts_with("metadata key config.json:rope_parameters.rope_type: \"yarn\" is not supported"), "{err}");
    let dir = edited_copy("qwen2", |c| c["tie_word_embeddings"] = json!(false));
    assert!(Model::load(dir.path(), backend()).is_ok(), "qwen2's head is stored");
    let dir = edited_copy("qwen3", |c| c["tie_word_embeddings"] = json!(false));
    assert_eq!(checkpoint_error(dir.path()), "missing tensor lm_head.weight");
    // Released Qwen 2.5 files name a window but leave it off: it must not apply.
    let dir = edited_copy("qwen2", |c| c["sliding_window"] = json!(4));
    let windowless = Model::load(dir.path(), backend()).unwrap();
    assert_eq!(windowless.config.sliding_window, None);
}
