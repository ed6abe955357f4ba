//! `config.json` reading and RoPE scaling.
//!
//! RoPE: inverse frequencies and attention factors computed by transformers'
//! `ROPE_INIT_FUNCTIONS` (`fixtures/model/rope_scaling.json`, from `make_tiny_reference.py`) for
//! LLaMA-3 (Llama-3.1 parameters), linear, and Phi-3 long-rope below and above the original
//! context, against [`minerva_model::rope::inv_freq`] on the config we read from the same JSON —
//! in the transformers-5 form (`rope_parameters`) and in the older form (`rope_theta` +
//! `rope_scaling`) real checkpoints carry. Tolerance 1e-6 relative: both compute in f32/f64 from
//! the same formula.
//!
//! Errors: a bad config names the key (`config.json:num_key_value_heads`, …).

use std::path::Path;

use minerva_model::{Config, ModelError, RopeScaling, rope};
use serde_json::{Value, json};

fn cases() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/model/rope_scaling.json");
    let json: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    json["cases"].as_array().unwrap().clone()
}

/// The transformers-4 spelling of a config: `rope_theta` at the top, the rest in `rope_scaling`
/// under `type` (as Phi-3's files have it) or `rope_type` (Llama-3.1's).
fn old_style(config: &Value) -> Value {
    let mut config = config.clone();
    let obj = config.as_object_mut().unwrap();
    let mut params = obj.remove("rope_parameters").unwrap();
    let params = params.as_object_mut().unwrap();
    obj.insert("rope_theta".into(), params.remove("rope_theta").unwrap());
    let kind = params.remove("rope_type").unwrap();
    params.remove("partial_rotary_factor");
    if kind == "longrope" {
        params.insert("type".into(), kind);
    } else if kind != "default" {
        params.insert("rope_type".into(), kind);
    }
    obj.insert("rope_scaling".into(), Value::Object(params.clone()));
    config
}

#[test]
fn inverse_frequencies_match_transformers() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let expected: Vec<f32> =
            case["inv_freq"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        let seq_len = case["seq_len"].as_u64().unwrap_or(1) as u32;
        for (form, config) in
            [("rope_parameters", case["config"].clone()), ("rope_scaling", old_style(&case["config"]))]
        {
            let cfg = Config::from_hf_config(&config).unwrap_or_else(|e| panic!("{name} ({form}): {e}"));
            let (inv_freq, attn) = rope::inv_freq(&cfg.rope, seq_len - 1);
            assert_eq!(inv_freq.len(), expected.len(), "{name}");
            let worst = inv_freq.iter().zip(&expected).map(|(a, b)| ((a - b) / b).abs()).fold(0.0, f32::max);
            println!("{name} ({form}): max relative error {worst:e}, attention factor {attn}");
            assert!(worst <= 1e-6, "{name} ({form}): {worst}");
            let want = case["attention_factor"].as_f64().unwrap() as f32;
            assert!((attn - want).abs() <= 1e-6, "{name}: attention factor {attn} vs {want}");
        }
    }
}

#[test]
fn llama3_factors_span_all_three_bands() {
    // Llama-3.1: base 500000, 128 dims, factor 8, bands at 8192/4 and 8192/1 positions.
    let f = rope::llama3_factors(500000.0, 128, 8.0, 1.0, 4.0, 8192);
    assert_eq!(f[0], 1.0, "the highest frequency is kept");
    assert_eq!(f[63], 8.0, "the lowest frequency is divided by the factor");
    assert!(f.iter().any(|&x| x > 1.0 && x < 8.0), "some frequencies are interpolated");
    assert!(f.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn longrope_switches_to_the_long_factors_past_the_original_context() {
    let config = cases().into_iter().find(|c| c["name"] == "longrope_long").unwrap()["config"].clone();
    let cfg = Config::from_hf_config(&config).unwrap();
    let RopeScaling::LongRope { original_context, .. } = cfg.rope.scaling else { panic!() };
    let (short, _) = rope::inv_freq(&cfg.rope, original_context as u32 - 1);
    let (long, _) = rope::inv_freq(&cfg.rope, original_context as u32);
    assert_eq!(short[0], long[0], "both factor lists start at 1");
    assert!(long[10] < short[10]);
}

fn tiny() -> Value {
    json!({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "vocab_size": 100,
        "max_position_embeddings": 256, "rope_theta": 10000.0, "hidden_act": "silu"
    })
}

fn error_with(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
    let mut config = tiny();
    edit(config.as_object_mut().unwrap());
    match Config::from_hf_config(&config) {
        Ok(cfg) => panic!("accepted: {cfg:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_plain_config_reads() {
    let cfg = Config::from_hf_config(&tiny()).unwrap();
    assert_eq!((cfg.n_embd, cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.vocab), (64, 4, 2, 16, 100));
    assert_eq!(cfg.rope.scaling, RopeScaling::None);
    assert_eq!(cfg.sliding_window, None, "llama has no window even if a key says so");
}

#[test]
fn bad_configs_name_the_key() {
    let cases: Vec<(String, &str)> = vec![
        (error_with(|c| drop(c.remove("hidden_size"))), "missing metadata key config.json:hidden_size"),
        (error_with(|c| drop(c.insert("num_key_value_heads".into(), json!(3)))), "config.json:num_key_value_heads: 3"),
        (error_with(|c| drop(c.insert("num_attention_heads".into(), json!(6)))), "config.json:num_attention_heads"),
        (error_with(|c| drop(c.insert("hidden_act".into(), json!("gelu")))), "config.json:hidden_act"),
        (error_with(|c| drop(c.insert("attention_bias".into(), json!(true)))), "config.json:attention_bias"),
        (error_with(|c| drop(c.insert("model_type".into(), json!("gemma")))), "unsupported architecture \"gemma\""),
        (error_with(|c| drop(c.insert("rms_norm_eps".into(), json!("small")))), "config.json:rms_norm_eps"),
        (
            error_with(|c| drop(c.insert("rope_scaling".into(), json!({"rope_type": "dynamic", "factor": 2.0})))),
            "config.json:rope_scaling.rope_type",
        ),
        (
            error_with(|c| drop(c.insert("rope_scaling".into(), json!({"rope_type": "linear"})))),
            "missing metadata key config.json:rope_scaling.factor",
        ),
        (
            error_with(|c| {
                c.insert("model_type".into(), json!("phi3"));
                c.insert("original_max_position_embeddings".into(), json!(64));
                c.insert(
                    "rope_scaling".into(),
                    json!({"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}),
                );
            }),
            "config.json:rope_scaling.short_factor: expected 8 positive numbers",
        ),
    ];
    for (message, wanted) in cases {
        assert!(message.contains(wanted), "{message:?} should mention {wanted:?}");
    }
}

/// A copy of a tiny fixture checkpoint with its config.json edited.
fn edited_copy(name: &str, edit: impl FnOnce(&mut Value)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/model/tiny").join(name);
    std::fs::copy(src.join("model.safetensors"), dir.path().join("model.safetensors")).unwrap();
    let mut config: Value = serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    dir
}

fn load_error(dir: &Path) -> ModelError {
    let backend = minerva_model::CpuBackend::new(None).unwrap();
    minerva_model::Model::load(dir, backend).err().expect("the checkpoint should be refused")
}

#[test]
fn loader_errors_name_the_stored_tensor() {
    let dir = edited_copy("llama", |c| c["tie_word_embeddings"] = json!(false));
    assert_eq!(load_error(dir.path()).to_string(), "missing tensor lm_head.weight");
    let dir = edited_copy("mistral", |c| c["intermediate_size"] = json!(48));
    let err = load_error(dir.path()).to_string();
    assert!(err.starts_with("tensor model.layers.0.mlp.") && err.contains("expected [48, 32]"), "{err}");
    let dir = edited_copy("phi3", |c| c["num_key_value_heads"] = json!(4));
    let err = load_error(dir.path()).to_string();
    assert!(err.starts_with("tensor model.layers.0.self_attn.qkv_proj.weight: shape [64, 32]"), "{err}");
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    assert!(load_error(dir.path()).to_string().contains("no config.json"));
}

/// The shapes of real `config.json` files (transformers 4.x spelling): Llama-3.1-8B, Mistral-7B-v0.1,
/// Phi-3-mini-4k and Phi-3-mini-128k (its 48 long-rope factors replaced by made-up values).
#[test]
fn real_world_configs_read() {
    let llama31 = json!({
        "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
        "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
        "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256
    });
    let cfg = Config::from_hf_config(&llama31).unwrap();
    assert_eq!((cfg.n_layer, cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_ff), (32, 32, 8, 128, 14336));
    assert_eq!((cfg.rope.base, cfg.rope.dim, cfg.context_length), (500000.0, 128, 131072));
    let RopeScaling::FreqFactors { factors } = &cfg.rope.scaling else { panic!("{:?}", cfg.rope.scaling) };
    assert_eq!(factors, &rope::llama3_factors(500000.0, 128, 8.0, 1.0, 4.0, 8192));

    let mistral = json!({
        "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
        "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
        "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "sliding_window": 4096, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32000
    });
    let cfg = Config::from_hf_config(&mistral).unwrap();
    assert_eq!((cfg.sliding_window, cfg.rope.scaling.clone()), (Some(4096), RopeScaling::None));

    let phi3_4k = json!({
        "architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0,
        "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
        "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
        "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0,
        "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16", "attention_bias": false, "vocab_size": 32064
    });
    let cfg = Config::from_hf_config(&phi3_4k).unwrap();
    assert_eq!((cfg.head_dim, cfg.sliding_window, cfg.rope.scaling.clone()), (96, Some(2047), RopeScaling::None));

    let mut phi3_128k = phi3_4k.clone();
    phi3_128k["max_position_embeddings"] = json!(131072);
    phi3_128k["sliding_window"] = json!(262144);
    let short: Vec<f64> = (0..48).map(|i| 1.0 + f64::from(i) * 0.01).collect();
    let long: Vec<f64> = (0..48).map(|i| 1.0 + f64::from(i) * 1.5).collect();
    phi3_128k["rope_scaling"] = json!({"type": "longrope", "short_factor": short, "long_factor": long});
    let cfg = Config::from_hf_config(&phi3_128k).unwrap();
    let RopeScaling::LongRope { short: s, long: l, original_context, attn_factor } = &cfg.rope.scaling else {
        panic!("{:?}", cfg.rope.scaling)
    };
    assert_eq!((s.len(), l.len(), *original_context), (48, 48, 4096));
    // 131072 / 4096 = 32: √(1 + ln 32 / ln 4096) (transformers' default attention factor).
    assert!((attn_factor - 1.190_238_1).abs() < 1e-6, "{attn_factor}");
}
