//! SafeTensors output: the Hugging Face layout (`openai/gpt-oss-20b`: MXFP4 experts as
//! `_blocks`/`_scales`, the rest bf16; LLaMA: all bf16) and the MLX layout
//! (`mlx-community/gpt-oss-20b-MXFP4-Q8`: MXFP4 experts, 8-bit affine matrices), with `config.json`.
//!
//! ```text
//! model.safetensors (or model-0000i-of-0000N.safetensors, ≤ 5 GB each, + model.safetensors.index.json)
//! ┌──────────┬───────────────────────────────┬──────────────────────────────┐
//! │ u64 LE n │ JSON header, n bytes          │ tensor data, in header order │
//! │          │ (space-padded to 8)           │ (offsets relative to here)   │
//! └──────────┴───────────────────────────────┴──────────────────────────────┘
//! ```

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use minerva_core::DType;
use minerva_model::synthetic::GptOssShape;
use serde_json::{Map, Value, json};

use super::Fill::Const;
use super::{Arch, Elem, Fill, Format, LlamaShape, Options, fill_for, matrix_std, rng::Rng, sizes, stream_tensor};

/// The shard size `save_pretrained` uses (`max_shard_size="5GB"`).
pub const MAX_SHARD: u64 = 5_000_000_000;

/// One tensor to write.
struct Spec {
    name: String,
    elem: Elem,
    shape: Vec<usize>,
    fill: Fill,
}

impl Spec {
    /// A bf16 tensor filled by its role.
    fn bf16(name: String, shape: &[usize]) -> Spec {
        let fill = fill_for(&name, DType::BF16, shape);
        Spec { name, elem: Elem::Ggml(DType::BF16), shape: shape.to_vec(), fill }
    }

    fn bytes(&self) -> Result<u64> {
        Ok(sizes(self.elem, &self.shape)?.1 as u64)
    }

    fn dtype_name(&self) -> &'static str {
        match self.elem {
            Elem::U8 => "U8",
            Elem::U32 => "U32",
            Elem::Ggml(DType::F32) => "F32",
            Elem::Ggml(DType::F16) => "F16",
            _ => "BF16",
        }
    }
}

/// Writes `opts.out` as a checkpoint directory; returns the bytes of tensor files written.
pub fn write(opts: &Options, rng: &mut Rng) -> Result<u64> {
    let (specs, config) = match (opts.arch, opts.format) {
        (Arch::GptOss(s), Format::Mlx) => (gpt_oss_mlx(&s), gpt_oss_config(&s, true)),
        (Arch::GptOss(s), _) => (gpt_oss_hf(&s), gpt_oss_config(&s, false)),
        (Arch::Llama(s), _) => (llama_hf(&s), llama_config(&s)),
    };
    let dir = &opts.out;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config)?)?;

    // Consecutive tensors into shards of at most MAX_SHARD bytes.
    let mut shards: Vec<Vec<&Spec>> = vec![Vec::new()];
    let mut size = 0;
    for spec in &specs {
        let b = spec.bytes()?;
        if size + b > opts.shard_bytes && !shards.last().is_some_and(Vec::is_empty) {
            shards.push(Vec::new());
            size = 0;
        }
        size += b;
        if let Some(shard) = shards.last_mut() {
            shard.push(spec);
        }
    }
    let n = shards.len();
    let file_name = |i: usize| {
        if n == 1 { "model.safetensors".to_string() } else { format!("model-{:05}-of-{n:05}.safetensors", i + 1) }
    };
    let metadata = if opts.format == Format::Mlx { "mlx" } else { "pt" };
    let (mut total, mut weight_map) = (0u64, Map::new());
    for (i, shard) in shards.iter().enumerate() {
        let name = file_name(i);
        total += write_shard(&dir.join(&name), shard, metadata, rng)?;
        for spec in shard {
            weight_map.insert(spec.name.clone(), Value::String(name.clone()));
        }
    }
    if n > 1 {
        let data: u64 = specs.iter().map(Spec::bytes).sum::<Result<u64>>()?;
        let index = json!({ "metadata": { "total_size": data }, "weight_map": weight_map });
        std::fs::write(dir.join("model.safetensors.index.json"), serde_json::to_string_pretty(&index)?)?;
    }
    Ok(total)
}

/// Writes one `.safetensors` file; returns its size.
fn write_shard(path: &Path, specs: &[&Spec], metadata: &str, rng: &mut Rng) -> Result<u64> {
    let mut header = Map::new();
    header.insert("__metadata__".into(), json!({ "format": metadata }));
    let mut offset = 0u64;
    for spec in specs {
        let end = offset + spec.bytes()?;
        header.insert(
            spec.name.clone(),
            json!({ "dtype": spec.dtype_name(), "shape": spec.shape, "data_offsets": [offset, end] }),
        );
        offset = end;
    }
    let mut json = serde_json::to_vec(&header)?;
    json.resize(json.len().next_multiple_of(8), b' ');
    let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    out.write_all(&(json.len() as u64).to_le_bytes())?;
    out.write_all(&json)?;
    let mut buf = Vec::new();
    for spec in specs {
        stream_tensor(spec.elem, &spec.shape, spec.fill, rng, &mut buf, |chunk| Ok(out.write_all(chunk)?))
            .with_context(|| format!("tensor {}", spec.name))?;
    }
    out.flush()?;
    Ok(8 + json.len() as u64 + offset)
}

/// `(prefix, rows, cols)` of each attention projection.
fn attn_projections(s: &GptOssShape) -> [(&'static str, usize, usize); 4] {
    let (q, kv, e) = (s.heads * s.head_dim, s.kv_heads * s.head_dim, s.hidden);
    [("q_proj", q, e), ("k_proj", kv, e), ("v_proj", kv, e), ("o_proj", e, q)]
}

/// openai/gpt-oss-20b's tensors.
fn gpt_oss_hf(s: &GptOssShape) -> Vec<Spec> {
    let (e, ff, n_exp) = (s.hidden, s.ff, s.experts);
    let mut t = vec![Spec::bf16("model.embed_tokens.weight".into(), &[s.vocab, e])];
    for l in 0..s.layers {
        let p = |n: &str| format!("model.layers.{l}.{n}");
        t.push(Spec::bf16(p("input_layernorm.weight"), &[e]));
        for (proj, rows, cols) in attn_projections(s) {
            t.push(Spec::bf16(p(&format!("self_attn.{proj}.weight")), &[rows, cols]));
            t.push(Spec::bf16(p(&format!("self_attn.{proj}.bias")), &[rows]));
        }
        t.push(Spec::bf16(p("self_attn.sinks"), &[s.heads]));
        t.push(Spec::bf16(p("post_attention_layernorm.weight"), &[e]));
        t.push(Spec::bf16(p("mlp.router.weight"), &[n_exp, e]));
        t.push(Spec::bf16(p("mlp.router.bias"), &[n_exp]));
        for (proj, rows, cols) in [("gate_up_proj", 2 * ff, e), ("down_proj", e, ff)] {
            let base = p(&format!("mlp.experts.{proj}"));
            let (blocks, scales) = ([n_exp, rows, cols / 32, 16], [n_exp, rows, cols / 32]);
            t.push(Spec { name: format!("{base}_blocks"), elem: Elem::U8, shape: blocks.into(), fill: Fill::Bytes });
            let fill = Fill::E8m0 { std: matrix_std(cols) };
            t.push(Spec { name: format!("{base}_scales"), elem: Elem::U8, shape: scales.into(), fill });
            t.push(Spec::bf16(format!("{base}_bias"), &[n_exp, rows]));
        }
    }
    t.push(Spec::bf16("model.norm.weight".into(), &[e]));
    t.push(Spec::bf16("lm_head.weight".into(), &[s.vocab, e]));
    t
}

/// An MLX 8-bit affine matrix (group 64): packed codes, bf16 scales and biases that centre them.
fn mlx_affine(t: &mut Vec<Spec>, base: &str, rows: usize, cols: usize, std: f32) {
    let scale = std / 73.9;
    let groups = [rows, cols / 64];
    t.push(Spec { name: format!("{base}.weight"), elem: Elem::U32, shape: vec![rows, cols / 4], fill: Fill::Bytes });
    t.push(Spec {
        name: format!("{base}.scales"),
        elem: Elem::Ggml(DType::BF16),
        shape: groups.into(),
        fill: Const(scale),
    });
    let fill = Const(-127.5 * scale);
    t.push(Spec { name: format!("{base}.biases"), elem: Elem::Ggml(DType::BF16), shape: groups.into(), fill });
}

/// mlx-community/gpt-oss-20b-MXFP4-Q8's tensors (names after mlx-lm's sanitize).
fn gpt_oss_mlx(s: &GptOssShape) -> Vec<Spec> {
    let (e, ff, n_exp) = (s.hidden, s.ff, s.experts);
    let mut t = Vec::new();
    mlx_affine(&mut t, "model.embed_tokens", s.vocab, e, 1.0);
    for l in 0..s.layers {
        let p = |n: &str| format!("model.layers.{l}.{n}");
        t.push(Spec::bf16(p("input_layernorm.weight"), &[e]));
        for (proj, rows, cols) in attn_projections(s) {
            mlx_affine(&mut t, &p(&format!("self_attn.{proj}")), rows, cols, matrix_std(cols));
            t.push(Spec::bf16(p(&format!("self_attn.{proj}.bias")), &[rows]));
        }
        t.push(Spec::bf16(p("self_attn.sinks"), &[s.heads]));
        t.push(Spec::bf16(p("post_attention_layernorm.weight"), &[e]));
        mlx_affine(&mut t, &p("mlp.router"), n_exp, e, matrix_std(e));
        t.push(Spec::bf16(p("mlp.router.bias"), &[n_exp]));
        for (proj, rows, cols) in [("gate_proj", ff, e), ("up_proj", ff, e), ("down_proj", e, ff)] {
            let base = p(&format!("mlp.experts.{proj}"));
            let (weight, scales) = ([n_exp, rows, cols / 8], [n_exp, rows, cols / 32]);
            t.push(Spec { name: format!("{base}.weight"), elem: Elem::U32, shape: weight.into(), fill: Fill::Bytes });
            let fill = Fill::E8m0 { std: matrix_std(cols) };
            t.push(Spec { name: format!("{base}.scales"), elem: Elem::U8, shape: scales.into(), fill });
            t.push(Spec::bf16(format!("{base}.bias"), &[n_exp, rows]));
        }
    }
    t.push(Spec::bf16("model.norm.weight".into(), &[e]));
    mlx_affine(&mut t, "lm_head", s.vocab, e, matrix_std(e));
    t
}

/// config.json of openai/gpt-oss-20b (MXFP4 `quantization_config`), or of the MLX conversion
/// (a `quantization` section: 8-bit affine by default, `mxfp4` for each expert module).
fn gpt_oss_config(s: &GptOssShape, mlx: bool) -> Value {
    let rope = json!({
        "beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
        "rope_type": "yarn", "truncate": false
    });
    let layer_types: Vec<&str> =
        (0..s.layers).map(|l| if l % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
    let mut cfg = json!({
        "architectures": ["GptOssForCausalLM"],
        "model_type": minerva_model::arch::gpt_oss::GPT_OSS.hf_output,
        "attention_bias": true,
        "head_dim": s.head_dim,
        "hidden_size": s.hidden,
        "intermediate_size": s.ff,
        "layer_types": layer_types,
        "max_position_embeddings": 131072,
        "num_attention_heads": s.heads,
        "num_experts_per_tok": s.experts_used,
        "num_hidden_layers": s.layers,
        "num_key_value_heads": s.kv_heads,
        "num_local_experts": s.experts,
        "rms_norm_eps": 1e-5,
        "rope_scaling": rope,
        "rope_theta": 150000.0,
        "sliding_window": s.window,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": false,
        "vocab_size": s.vocab,
    });
    let quant = if mlx {
        let mut q = json!({ "group_size": 64, "bits": 8 });
        for l in 0..s.layers {
            for proj in ["gate_proj", "up_proj", "down_proj"] {
                q[format!("model.layers.{l}.mlp.experts.{proj}")] =
                    json!({ "group_size": 32, "bits": 4, "mode": "mxfp4" });
            }
        }
        cfg["quantization"] = q.clone();
        q
    } else {
        json!({
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
            "quant_method": "mxfp4"
        })
    };
    cfg["quantization_config"] = quant;
    cfg
}

/// A Llama-3 checkpoint's tensors, all bf16.
fn llama_hf(s: &LlamaShape) -> Vec<Spec> {
    let (e, ff) = (s.hidden, s.ff);
    let (q, kv) = (s.heads * s.head_dim(), s.kv_heads * s.head_dim());
    let mut t = vec![Spec::bf16("model.embed_tokens.weight".into(), &[s.vocab, e])];
    for l in 0..s.layers {
        let p = |n: &str| format!("model.layers.{l}.{n}");
        t.push(Spec::bf16(p("input_layernorm.weight"), &[e]));
        for (proj, rows, cols) in [("q_proj", q, e), ("k_proj", kv, e), ("v_proj", kv, e), ("o_proj", e, q)] {
            t.push(Spec::bf16(p(&format!("self_attn.{proj}.weight")), &[rows, cols]));
        }
        t.push(Spec::bf16(p("post_attention_layernorm.weight"), &[e]));
        for (proj, rows, cols) in [("gate_proj", ff, e), ("up_proj", ff, e), ("down_proj", e, ff)] {
            t.push(Spec::bf16(p(&format!("mlp.{proj}.weight")), &[rows, cols]));
        }
    }
    t.push(Spec::bf16("model.norm.weight".into(), &[e]));
    if !s.tied {
        t.push(Spec::bf16("lm_head.weight".into(), &[s.vocab, e]));
    }
    t
}

/// A Llama-3 config.json (no RoPE scaling section: the GGUF presets carry none either).
fn llama_config(s: &LlamaShape) -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": s.hidden,
        "intermediate_size": s.ff,
        "max_position_embeddings": 131072,
        "num_attention_heads": s.heads,
        "num_hidden_layers": s.layers,
        "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim(),
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": s.tied,
        "torch_dtype": "bfloat16",
        "vocab_size": s.vocab,
    })
}
