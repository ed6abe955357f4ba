//! Bad configurations are typed errors naming the key or tensor; a tiny synthetic LLaMA (F32
//! weights, built with `GgufWriter`) loads and runs.

use std::sync::Arc;

use minerva_core::DType;
use minerva_gguf::{Gguf, GgufWriter};
use minerva_model::{Config, CpuBackend, LogitsFor, Model, ModelError, RopeScaling, SequenceInput};

/// Tweaks applied to the tiny model: metadata overrides (`None` removes the key), and tensors
/// left out or given another shape.
#[derive(Default)]
struct Tweaks<'a> {
    meta: Vec<(&'a str, Option<u32>)>,
    skip_tensor: Option<&'a str>,
    reshape: Option<(&'a str, Vec<usize>)>,
    extra_meta: Vec<(&'a str, &'a str)>,
}

fn tiny(t: Tweaks<'_>) -> Arc<Gguf<Vec<u8>>> {
    let (e, ff, vocab, heads, kv) = (64usize, 96usize, 40usize, 4u32, 2u32);
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    let mut meta: Vec<(&str, Option<u32>)> = vec![
        ("llama.block_count", Some(2)),
        ("llama.embedding_length", Some(e as u32)),
        ("llama.feed_forward_length", Some(ff as u32)),
        ("llama.attention.head_count", Some(heads)),
        ("llama.attention.head_count_kv", Some(kv)),
        ("llama.context_length", Some(64)),
    ];
    for (k, v) in &t.meta {
        match meta.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = *v,
            None => meta.push((k, *v)),
        }
    }
    for (k, v) in meta {
        if let Some(v) = v {
            w.add_metadata(k, v).unwrap();
        }
    }
    for (k, v) in t.extra_meta {
        w.add_metadata(k, v).unwrap();
    }
    w.add_metadata("llama.attention.layer_norm_rms_epsilon", 1e-5f32).unwrap();
    let hd = e / heads as usize;
    let (q, kvd) = (e, kv as usize * hd);
    let mut tensors: Vec<(String, Vec<usize>)> =
        vec![("token_embd.weight".into(), vec![vocab, e]), ("output_norm.weight".into(), vec![e])];
    for i in 0..2 {
        for (name, shape) in [
            ("attn_norm", vec![e]),
            ("attn_q", vec![q, e]),
            ("attn_k", vec![kvd, e]),
            ("attn_v", vec![kvd, e]),
            ("attn_output", vec![e, q]),
            ("ffn_norm", vec![e]),
            ("ffn_gate", vec![ff, e]),
            ("ffn_up", vec![ff, e]),
            ("ffn_down", vec![e, ff]),
        ] {
            tensors.push((format!("blk.{i}.{name}.weight"), shape));
        }
    }
    let mut seed = 1u32;
    for (name, mut shape) in tensors {
        if t.skip_tensor == Some(name.as_str()) {
            continue;
        }
        if let Some((n, s)) = &t.reshape
            && *n == name
        {
            shape = s.clone();
        }
        let count: usize = shape.iter().product();
        let data: Vec<u8> = (0..count)
            .flat_map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let v = if shape.len() == 1 { 1.0 } else { (seed >> 8) as f32 / (1 << 24) as f32 - 0.5 };
                v.to_le_bytes()
            })
            .collect();
        w.add_tensor(name, DType::F32, &shape, data).unwrap();
    }
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    Arc::new(Gguf::parse(bytes).unwrap())
}

fn load(t: Tweaks<'_>) -> Result<Model<CpuBackend>, ModelError> {
    Model::from_gguf(tiny(t), CpuBackend::new(Some(1)).unwrap())
}

fn error(t: Tweaks<'_>) -> String {
    match load(t) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn tiny_model_loads_and_decodes_like_it_prefills() {
    let model = load(Tweaks::default()).unwrap();
    let c: &Config = &model.config;
    assert_eq!((c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.vocab), (2, 64, 4, 2, 16, 40));
    assert_eq!(c.rope.scaling, RopeScaling::None);
    let tokens = [3u32, 7, 1, 39, 12];
    let mut cache = model.new_cache(1, 8).unwrap();
    let full =
        model.forward(&mut cache, &[SequenceInput { tokens: &tokens, start_pos: 0, slot: 0 }], LogitsFor::All).unwrap();
    let mut cache = model.new_cache(1, 8).unwrap();
    for (pos, t) in tokens.iter().enumerate() {
        let step =
            model.forward(&mut cache, &[SequenceInput { tokens: &[*t], start_pos: pos, slot: 0 }], LogitsFor::Last);
        let step = step.unwrap();
        let diff = step.row(0).iter().zip(full.row(pos)).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(diff <= 1e-5, "position {pos}: {diff}");
    }
}

#[test]
fn missing_key_is_named() {
    let msg = error(Tweaks { meta: vec![("llama.block_count", None)], ..Default::default() });
    assert_eq!(msg, "missing metadata key llama.block_count");
}

#[test]
fn head_count_must_divide_hidden_size() {
    let msg = error(Tweaks { meta: vec![("llama.attention.head_count", Some(6))], ..Default::default() });
    assert!(msg.contains("llama.attention.head_count: 6 does not divide llama.embedding_length = 64"), "{msg}");
    let msg = error(Tweaks { meta: vec![("llama.attention.head_count_kv", Some(3))], ..Default::default() });
    assert!(msg.contains("llama.attention.head_count_kv: 3 does not divide"), "{msg}");
}

#[test]
fn zero_count_is_named() {
    let msg = error(Tweaks { meta: vec![("llama.embedding_length", Some(0))], ..Default::default() });
    assert_eq!(msg, "metadata key llama.embedding_length: must not be 0");
}

#[test]
fn tensor_problems_name_the_tensor() {
    let msg = error(Tweaks { skip_tensor: Some("blk.1.ffn_up.weight"), ..Default::default() });
    assert_eq!(msg, "missing tensor blk.1.ffn_up.weight");
    let msg = error(Tweaks { reshape: Some(("blk.0.attn_k.weight", vec![64, 64])), ..Default::default() });
    assert_eq!(msg, "tensor blk.0.attn_k.weight: shape [64, 64] does not match the config, expected [32, 64]");
}

#[test]
fn unknown_rope_scaling_and_arch_are_named() {
    let msg = error(Tweaks { extra_meta: vec![("llama.rope.scaling.type", "yarn")], ..Default::default() });
    assert!(msg.starts_with("metadata key llama.rope.scaling.type: unsupported scaling \"yarn\""), "{msg}");
    let msg = error(Tweaks { extra_meta: vec![("llama.rope.scaling.type", "linear")], ..Default::default() });
    assert_eq!(msg, "missing metadata key llama.rope.scaling.factor");
}
