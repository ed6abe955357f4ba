//! Bad GPT-OSS inputs are typed errors naming the key or tensor: the committed fixtures of
//! `fixtures/gpt_oss`, each with one thing broken (GGUF metadata or tensors rewritten with
//! `GgufWriter`; `config.json` edited in a copy of the SafeTensors directory).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use minerva_gguf::{Gguf, GgufWriter, MetadataValue};
use minerva_model::{CpuBackend, Model, ModelError};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/gpt_oss")
}

fn backend() -> CpuBackend {
    CpuBackend::new(Some(1)).unwrap()
}

/// The fixture GGUF with metadata `meta` overridden (`None` removes the key), tensor `skip` left
/// out and tensor `reshape` declared with another shape over the same bytes.
fn gguf_error(meta: &[(&str, Option<MetadataValue>)], skip: Option<&str>, reshape: Option<(&str, &[usize])>) -> String {
    let g = Gguf::open(fixtures().join("gpt_oss.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in g.metadata() {
        match meta.iter().find(|(k, _)| *k == key) {
            Some((_, None)) => {}
            Some((_, Some(v))) => w.add_metadata(key, v.clone()).unwrap(),
            None => w.add_metadata(key, value.to_owned_value()).unwrap(),
        }
    }
    for (key, value) in meta {
        if let Some(v) = value
            && g.get(key).is_none()
        {
            w.add_metadata(*key, v.clone()).unwrap();
        }
    }
    for t in g.tensors() {
        if skip == Some(t.name) {
            continue;
        }
        let shape = match reshape {
            Some((name, shape)) if name == t.name => shape.to_vec(),
            _ => t.shape.to_vec(),
        };
        w.add_tensor(t.name, t.dtype, &shape, t.bytes.to_vec()).unwrap();
    }
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    match Model::from_gguf(Arc::new(Gguf::parse(bytes).unwrap()), backend()) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn gguf_metadata_errors_name_the_key() {
    let err = gguf_error(&[("gpt-oss.expert_count", None)], None, None);
    assert_eq!(err, "missing metadata key gpt-oss.expert_count");
    let err = gguf_error(&[("gpt-oss.expert_used_count", Some(9u32.into()))], None, None);
    assert_eq!(err, "metadata key gpt-oss.expert_used_count: 9 must be 1 ..= 6 experts");
    let err = gguf_error(&[("gpt-oss.rope.scaling.type", Some("longrope".into()))], None, None);
    assert!(err.starts_with("metadata key gpt-oss.rope.scaling.type: unsupported scaling"), "{err}");
    let err = gguf_error(&[("gpt-oss.rope.scaling.factor", None)], None, None);
    assert_eq!(err, "missing metadata key gpt-oss.rope.scaling.factor");
    let err = gguf_error(&[("gpt-oss.attention.head_count_kv", Some(3u32.into()))], None, None);
    assert!(err.starts_with("metadata key gpt-oss.attention.head_count_kv: 3 does not divide"), "{err}");
    let err = gguf_error(&[("gpt-oss.attention.head_count_kv", Some(0u32.into()))], None, None);
    assert!(err.starts_with("metadata key gpt-oss.attention.head_count_kv: 0 does not divide"), "{err}");
}

#[test]
fn gguf_tensor_errors_name_the_tensor() {
    let err = gguf_error(&[], Some("blk.2.attn_sinks.weight"), None);
    assert_eq!(err, "missing tensor blk.2.attn_sinks.weight");
    let err = gguf_error(&[], Some("blk.0.ffn_gate_inp.bias"), None);
    assert_eq!(err, "missing tensor blk.0.ffn_gate_inp.bias");
    // Expert down projection declared transposed over the same bytes (intermediate ≠ hidden).
    let err = gguf_error(&[], None, Some(("blk.1.ffn_down_exps.weight", &[6, 96, 64])));
    assert_eq!(
        err,
        "tensor blk.1.ffn_down_exps.weight: shape [6, 96, 64] does not match the config, expected [6, 64, 96]"
    );
}

/// A copy of a SafeTensors fixture directory with its config.json changed by `edit`.
fn safetensors_error(layout: &str, edit: impl FnOnce(&mut Value)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let src = fixtures().join(layout);
    std::fs::copy(src.join("model.safetensors"), dir.path().join("model.safetensors")).unwrap();
    let mut config: Value = serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    if !config.is_null() {
        std::fs::write(dir.path().join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    }
    match Model::load(dir.path(), backend()) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn config_json_errors_name_the_key() {
    let err = safetensors_error("hf", |c| {
        c.as_object_mut().unwrap().remove("num_local_experts");
    });
    assert_eq!(err, "missing metadata key config.json:num_local_experts");
    let err = safetensors_error("hf", |c| c["rope_parameters"]["factor"] = "big".into());
    assert_eq!(err, "metadata key config.json:rope_parameters.factor: expected a positive number, found \"big\"");
    let err = safetensors_error("hf", |c| c["rope_parameters"]["rope_type"] = "dynamic".into());
    assert!(err.starts_with("metadata key config.json:rope_parameters.rope_type: unsupported \"dynamic\""), "{err}");
    let err = safetensors_error("hf", |c| c["layer_types"] = Value::Array(vec!["full_attention".into()]));
    assert!(err.starts_with("metadata key config.json:layer_types: expected a list of 3 layer types"), "{err}");
    let err = safetensors_error("mlx", |c| c["model_type"] = "llama4".into());
    assert!(err.starts_with("unsupported architecture \"llama4\""), "{err}");
    let err = safetensors_error("hf", |c| c["num_local_experts"] = (1u64 << 62).into());
    assert_eq!(err, "metadata key config.json:num_local_experts: the tensor sizes these dimensions imply overflow");
    let err = safetensors_error("hf", |c| *c = Value::Null);
    assert!(err.ends_with(": no config.json beside the SafeTensors weights"), "{err}");
}

#[test]
fn safetensors_tensor_errors_name_the_tensor() {
    // One layer more than the file holds.
    let err = safetensors_error("hf", |c| {
        c["num_hidden_layers"] = 4.into();
        c.as_object_mut().unwrap().remove("layer_types");
    });
    assert_eq!(err, "missing tensor model.layers.3.mlp.experts.down_proj");
    // Intermediate size swapped with the hidden size: the experts no longer fit.
    let err = safetensors_error("hf", |c| c["intermediate_size"] = 64.into());
    assert!(err.starts_with("tensor model.layers.0.mlp.experts.down_proj: shape [6, 64, 96]"), "{err}");
    // MLX without its quantization section is read as the HF layout, whose names it lacks.
    let err = safetensors_error("mlx", |c| {
        c.as_object_mut().unwrap().remove("quantization");
        c.as_object_mut().unwrap().remove("quantization_config");
    });
    assert_eq!(err, "missing tensor model.layers.0.mlp.experts.down_proj");
}

#[test]
fn device_sampling_is_a_typed_error_on_a_backend_without_it() {
    // The one optional op: the CPU backend says it does not sample, and a call anyway is an error
    // naming the op, not a panic.
    use minerva_core::DType;
    use minerva_model::backend::{Backend, ByteSource, DeviceSampling, WeightSource};
    struct Bytes(Vec<u8>);
    impl ByteSource for Bytes {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
    }
    let backend = CpuBackend::new(Some(1)).unwrap();
    assert!(!backend.samples_on_device());
    let values: Vec<u8> = (0..4 * 32).flat_map(|i| (i as f32 / 100.0).to_le_bytes()).collect();
    let len = values.len();
    let file = Arc::new(Bytes(values));
    let head = WeightSource { file, name: "head".into(), dtype: DType::F32, shape: vec![4, 32], range: 0..len };
    let head = backend.weight(head).unwrap();
    let x = backend.embed(&head, &[1]).unwrap();
    let params = DeviceSampling {
        temperature: 1.0,
        top_k: 1,
        top_p: 1.0,
        min_p: 0.0,
        repeat_penalty: 1.0,
        frequency_penalty: 0.0,
        presence_penalty: 0.0,
        adjust: Vec::new(),
        u: 0.5,
    };
    let err = backend.sample(&x, &head, &[0], &[params]).unwrap_err();
    assert!(matches!(err, ModelError::UnsupportedOp { op: "sample" }), "{err}");
    assert_eq!(err.to_string(), "operation sample is not supported by this backend");
}

#[test]
fn hf_config_reads_transformers_names_and_the_yarn_default() {
    use minerva_model::{GptOssConfig, Mask, RopeScaling, RopeStyle};
    let mut json: Value = serde_json::from_slice(&std::fs::read(fixtures().join("hf/config.json")).unwrap()).unwrap();
    let cfg = GptOssConfig::from_hf_config(&json).unwrap();
    assert_eq!((cfg.n_expert, cfg.n_expert_used, cfg.swiglu_limit, cfg.swiglu_alpha), (6, 2, 7.0, 1.702));
    assert_eq!((cfg.base.n_head, cfg.base.n_head_kv, cfg.base.head_dim, cfg.base.n_ff), (8, 2, 16, 96));
    assert_eq!(cfg.sliding_layers, [true, false, true]);
    assert_eq!((cfg.mask(0), cfg.mask(1)), (Mask::SlidingWindow(8), Mask::Causal));
    assert_eq!((cfg.base.rope.style, cfg.base.rope.base), (RopeStyle::NeoX, 150000.0));
    let yarn =
        RopeScaling::Yarn { factor: 32.0, original_context: 4096, beta_fast: 32.0, beta_slow: 1.0, truncate: false };
    assert_eq!(cfg.base.rope.scaling, yarn);
    // Without the key, transformers truncates the correction range; so do we.
    json["rope_parameters"].as_object_mut().unwrap().remove("truncate");
    let cfg = GptOssConfig::from_hf_config(&json).unwrap();
    assert!(matches!(cfg.base.rope.scaling, RopeScaling::Yarn { truncate: true, .. }));
    // The GGUF of the same model gives the same configuration.
    let g = Gguf::open(fixtures().join("gpt_oss.gguf")).unwrap();
    let from_gguf = GptOssConfig::from_gguf(&g).unwrap();
    let mut from_hf = GptOssConfig::from_hf_config(
        &serde_json::from_slice(&std::fs::read(fixtures().join("hf/config.json")).unwrap()).unwrap(),
    )
    .unwrap();
    from_hf.base.arch = from_gguf.base.arch.clone();
    assert_eq!(from_gguf, from_hf);
}
