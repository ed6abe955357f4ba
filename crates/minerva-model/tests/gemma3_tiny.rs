//! Tiny random Gemma 3 models written by transformers (`fixtures/model/make_gemma3_reference.py`):
//! 7 layers (layer 5 global, the others a sliding window of 6), sequences of 20 and 13 tokens,
//! q width 64 ≠ hidden 32, GQA, QK-norm, tied head.
//!
//! * from SafeTensors (norms stored as `w`) and from the GGUF file llama.cpp's own converter wrote
//!   from the same directory (norms stored as `1 + w`, the layer pattern left to the reader),
//!   every position's logits match transformers' within 1e-4 relative in
//!   f32-activation mode;
//! * `gemma3_qscale` (SafeTensors only): `query_pre_attn_scalar` 40 ≠ head_dim 16, explicit
//!   `layer_types` alternating, local RoPE base 500, linear-scaled global RoPE: same bound;
//! * prefill then one-token decode equals one prefill, past the window;
//! * older config.json keys, GGUF `sliding_window_pattern` (count or booleans) and
//!   `rope.freq_base_swa`, and errors naming the key.

mod common;

use common::{prefill, reference, rel_err, tiny_dir};

use minerva_model::{CpuBackend, Gemma3Config, LogitsFor, Mask, Model, ModelWeights, RopeScaling, SequenceInput};

fn f32_backend() -> CpuBackend {
    CpuBackend::new(Some(2)).unwrap().with_f32_activations(true)
}

fn gemma_config(model: &Model<CpuBackend>) -> &Gemma3Config {
    match &model.weights {
        ModelWeights::Gemma3(m) => &m.0,
        _ => panic!("a gemma3 file loads the Gemma 3 graph"),
    }
}

fn check_against_transformers(name: &str, model: &Model<CpuBackend>) {
    for (tokens, expected) in reference(name) {
        let err = rel_err(&prefill(model, &tokens), &expected);
        eprintln!("{name} ({} tokens): max |Δ| / max |ref| = {err:.2e}", tokens.len());
        assert!(err < 1e-4, "{name}: relative error {err} on {} tokens", tokens.len());
    }
}

#[test]
fn safetensors_matches_transformers() {
    let model = Model::load(tiny_dir("gemma3"), f32_backend()).unwrap();
    check_against_transformers("gemma3", &model);
}

#[test]
fn gguf_from_llama_cpp_converter_matches_transformers() {
    let model = Model::load(tiny_dir("gemma3").join("model.gguf"), f32_backend()).unwrap();
    check_against_transformers("gemma3", &model);
}

#[test]
fn both_formats_read_the_same_layer_pattern_and_ropes() {
    let st = Model::load(tiny_dir("gemma3"), f32_backend()).unwrap();
    let gguf = Model::load(tiny_dir("gemma3").join("model.gguf"), f32_backend()).unwrap();
    for model in [&st, &gguf] {
        let cfg = gemma_config(model);
        let global: Vec<usize> = (0..7).filter(|&il| cfg.mask(il) == Mask::Causal).collect();
        assert_eq!(global, vec![5], "every 6th layer is global");
        assert_eq!(cfg.mask(0), Mask::SlidingWindow(6));
        assert_eq!((cfg.rope(0).base, cfg.rope(5).base), (10000.0, 1_000_000.0));
        assert_eq!(cfg.query_scale, 1.0);
        assert_eq!(cfg.embed_scale, 32f32.sqrt());
    }
    assert_eq!(st.config, gguf.config);
}

#[test]
fn query_pre_attn_scalar_layer_types_and_rope_parameters() {
    let model = Model::load(tiny_dir("gemma3_qscale"), f32_backend()).unwrap();
    let cfg = gemma_config(&model);
    assert_eq!(cfg.query_scale, (16.0f32 / 40.0).sqrt());
    assert_eq!((cfg.mask(0), cfg.mask(1)), (Mask::SlidingWindow(6), Mask::Causal));
    assert_eq!((cfg.rope(0).base, cfg.rope(1).base), (500.0, 20000.0));
    assert_eq!(cfg.rope(1).scaling, RopeScaling::Linear { factor: 2.0 });
    assert_eq!(cfg.rope(0).scaling, RopeScaling::None);
    check_against_transformers("gemma3_qscale", &model);
}

#[test]
fn prefill_then_decode_equals_one_prefill() {
    let model = Model::load(tiny_dir("gemma3").join("model.gguf"), f32_backend()).unwrap();
    let (tokens, _) = reference("gemma3").remove(0);
    let full = prefill(&model, &tokens);
    let vocab = model.config.vocab;
    let mut cache = model.new_cache(1, tokens.len()).unwrap();
    let first =
        model.forward(&mut cache, &[SequenceInput { tokens: &tokens[..3], start_pos: 0, slot: 0 }], LogitsFor::All);
    let mut stepped = first.unwrap().data;
    for (pos, token) in tokens.iter().enumerate().skip(3) {
        let step = [SequenceInput { tokens: std::slice::from_ref(token), start_pos: pos, slot: 0 }];
        stepped.extend(model.forward(&mut cache, &step, LogitsFor::Last).unwrap().data);
    }
    assert_eq!(stepped.len(), tokens.len() * vocab);
    assert_eq!(stepped, full, "decode past the window must equal the prefill");
}

#[test]
fn multimodal_config_reads_its_text_config() {
    let dir = tiny_dir("gemma3");
    let text: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    let wrapped = serde_json::json!({ "model_type": "gemma3", "text_config": text });
    let from_wrapped = Gemma3Config::from_hf_config(&wrapped).unwrap();
    assert_eq!(from_wrapped, Gemma3Config::from_hf_config(&text).unwrap());
    let missing = serde_json::json!({ "model_type": "gemma3" });
    let err = Gemma3Config::from_hf_config(&missing).unwrap_err().to_string();
    assert!(err.contains("config.json:text_config"), "{err}");
    let mut capped = text.clone();
    capped["final_logit_softcapping"] = serde_json::json!(30.0);
    let err = Gemma3Config::from_hf_config(&capped).unwrap_err().to_string();
    assert!(err.contains("final_logit_softcapping"), "{err}");
}

#[test]
fn older_config_keys_and_errors() {
    let dir = tiny_dir("gemma3");
    let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    // transformers 4.x wrote the bases at the top level, the pattern as a count, scaling in rope_scaling.
    let obj = json.as_object_mut().unwrap();
    obj.remove("rope_parameters");
    obj.remove("layer_types");
    obj.insert("rope_theta".into(), serde_json::json!(50000.0));
    obj.insert("rope_local_base_freq".into(), serde_json::json!(700.0));
    obj.insert("sliding_window_pattern".into(), serde_json::json!(2));
    obj.insert("rope_scaling".into(), serde_json::json!({"rope_type": "linear", "factor": 8.0}));
    let cfg = Gemma3Config::from_hf_config(&json).unwrap();
    assert_eq!((cfg.rope(0).base, cfg.rope(1).base), (700.0, 50000.0));
    assert_eq!(cfg.rope(1).scaling, RopeScaling::Linear { factor: 8.0 });
    assert_eq!(cfg.rope(0).scaling, RopeScaling::None);
    let global: Vec<usize> = (0..7).filter(|&il| cfg.mask(il) == Mask::Causal).collect();
    assert_eq!(global, vec![1, 3, 5]);

    let mut bad = json.clone();
    bad["hidden_activation"] = serde_json::json!("silu");
    let err = Gemma3Config::from_hf_config(&bad).unwrap_err().to_string();
    assert!(err.contains("config.json:hidden_activation"), "{err}");
    let mut bad = json.clone();
    bad["layer_types"] = serde_json::json!(["sliding_attention", "local"]);
    let err = Gemma3Config::from_hf_config(&bad).unwrap_err().to_string();
    assert!(err.contains("config.json:layer_types"), "{err}");
    let mut bad = json;
    bad["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 8.0});
    let err = Gemma3Config::from_hf_config(&bad).unwrap_err().to_string();
    assert!(err.contains("config.json:rope_scaling.rope_type"), "{err}");
}

/// The tiny GGUF rewritten with `extra` metadata (replacing keys of the same name).
fn tiny_gguf_with(extra: Vec<(&str, minerva_gguf::MetadataValue)>) -> Gemma3Config {
    let g = minerva_gguf::Gguf::open(tiny_dir("gemma3").join("model.gguf")).unwrap();
    let mut w = minerva_gguf::GgufWriter::new();
    for (key, value) in g.metadata() {
        if !extra.iter().any(|(k, _)| *k == key) {
            w.add_metadata(key, value.to_owned_value()).unwrap();
        }
    }
    for (key, value) in extra {
        w.add_metadata(key, value).unwrap();
    }
    for info in g.tensor_infos() {
        let view = g.tensor(&info.name).unwrap();
        w.add_tensor(info.name.clone(), info.dtype, &info.shape, view.bytes.to_vec()).unwrap();
    }
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    Gemma3Config::from_gguf(&minerva_gguf::Gguf::parse(bytes).unwrap()).unwrap()
}

#[test]
fn gguf_pattern_and_local_base_keys() {
    use minerva_gguf::{MetadataValue, ValueType};
    let cfg = tiny_gguf_with(vec![
        ("gemma3.attention.sliding_window_pattern", MetadataValue::U32(3)),
        ("gemma3.rope.freq_base_swa", MetadataValue::F32(123.0)),
    ]);
    let global: Vec<usize> = (0..7).filter(|&il| cfg.mask(il) == Mask::Causal).collect();
    assert_eq!(global, vec![2, 5]);
    assert_eq!((cfg.rope(0).base, cfg.rope(2).base), (123.0, 1_000_000.0));
    let flags = [true, false, false, true, true, true, false];
    let values = flags.iter().map(|&b| MetadataValue::Bool(b)).collect();
    let array = MetadataValue::Array { elem_type: ValueType::Bool, values };
    let cfg = tiny_gguf_with(vec![("gemma3.attention.sliding_window_pattern", array)]);
    let sliding: Vec<bool> = (0..7).map(|il| cfg.mask(il) != Mask::Causal).collect();
    assert_eq!(sliding, flags);
}
