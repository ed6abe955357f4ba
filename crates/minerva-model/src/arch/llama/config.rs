//! The LLaMA family's [`Config`] (`llama`, `mistral`, `phi3`): from GGUF `{arch}.*` metadata or a
//! Hugging Face `config.json`. The shared keys are read by [`Config::read`]; this file adds the
//! feed-forward width, RoPE (scaling types, per-frequency factor tensors, long-rope) and the
//! family's own checks.

use minerva_gguf::Gguf;

use crate::arch::registry::Graph;
use crate::config::{Config, ConfigKeys, Defaults, Key};
use crate::error::{ModelError, Result};
use crate::gguf_keys::GgufKeys;
use crate::hf_config::HfKeys;
use crate::rope::{self, RopeConfig, RopeScaling, RopeStyle};

const ROPE_DIM: Key = Key { gguf: "rope.dimension_count", hf: "" };
const ROPE_BASE: Key = Key { gguf: "rope.freq_base", hf: "" };
const ROPE_FACTOR: Key = Key { gguf: "rope.scaling.factor", hf: "" };
const ROPE_ORIGINAL_CONTEXT: Key = Key { gguf: "rope.scaling.original_context_length", hf: "" };
const ROPE_ATTN_FACTOR: Key = Key { gguf: "rope.scaling.attn_factor", hf: "" };

/// The per-frequency factor vector `name` (`[rope_dim / 2]`, any float dtype), dequantized.
fn rope_factor_tensor<D: AsRef<[u8]>>(g: &Gguf<D>, name: &str, rope_dim: usize) -> Result<Vec<f32>> {
    let view = g.tensor(name)?;
    if view.shape != [rope_dim / 2] {
        return Err(ModelError::TensorShape {
            tensor: name.into(),
            expected: vec![rope_dim / 2],
            actual: view.shape.to_vec(),
        });
    }
    let mut factors = vec![0.0; rope_dim / 2];
    minerva_quant::dequantize(view.dtype, view.bytes, &mut factors)?;
    if let Some(bad) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        return Err(ModelError::BadTensor { tensor: name.into(), message: format!("factor {bad} is not positive") });
    }
    Ok(factors)
}

impl Config {
    /// Reads the configuration from a GGUF file's metadata and the shape of `token_embd.weight`.
    ///
    /// Errors name the missing or inconsistent key: `{arch}.attention.head_count` not dividing
    /// `{arch}.embedding_length` (when no `key_length` is given), `head_count_kv` not dividing
    /// `head_count`, an odd or oversized `rope.dimension_count`, an unknown `rope.scaling.type`.
    pub fn from_gguf<D: AsRef<[u8]>>(g: &Gguf<D>) -> Result<Config> {
        let keys = GgufKeys::new(g, Graph::Llama)?;
        let n_ff = keys.count(Key::N_FF)?;
        let defaults = Defaults { context_length: 4096, rms_eps: None };
        let arch = keys.arch.clone();
        Config::read(&keys, &arch, n_ff, defaults, |head_dim, context_length| {
            gguf_rope(&keys, head_dim, context_length)
        })
    }

    /// Reads a Hugging Face `config.json` (`model_type` `llama`, `mistral` or `phi3`). The
    /// vocabulary size comes from `vocab_size`; the loader checks it against the embeddings.
    ///
    /// HF checkpoints keep Q/K unpermuted, so RoPE is [`RopeStyle::NeoX`] (`rotate_half`).
    pub fn from_hf_config(json: &serde_json::Value) -> Result<Config> {
        let keys = HfKeys::new(json)?;
        let spec = keys.spec(Graph::Llama)?;
        let arch = spec.name;
        if let Some(act) = keys.get("hidden_act")
            && act.as_str() != Some("silu")
        {
            return Err(keys.bad_named("hidden_act", format!("{act} (supported: \"silu\")")));
        }
        keys.must_be_off("attention_bias")?;
        keys.must_be_off("mlp_bias")?;
        let n_ff = keys.count(Key::N_FF)?;
        let defaults = Defaults { context_length: 4096, rms_eps: None };
        let mut config = Config::read(&keys, arch, n_ff, defaults, |head_dim, context_length| {
            hf_rope(&keys, head_dim, context_length)
        })?;
        // Only Mistral and Phi-3 attend through a window.
        if !spec.hf_sliding_window {
            config.sliding_window = None;
        }
        Ok(config)
    }
}

/// RoPE from `{arch}.rope.*` keys and the factor tensors llama.cpp stores.
fn gguf_rope<D: AsRef<[u8]>>(keys: &GgufKeys<'_, D>, head_dim: usize, context_length: usize) -> Result<RopeConfig> {
    let g = keys.g;
    let rope_dim = keys.opt_count(ROPE_DIM)?.unwrap_or(head_dim);
    if rope_dim == 0 || !rope_dim.is_multiple_of(2) || rope_dim > head_dim {
        let message = format!("{rope_dim} must be even, non-zero and at most the head dim {head_dim}");
        return Err(keys.bad(ROPE_DIM, message));
    }
    let scaling = if g.tensor_info("rope_freqs.weight").is_ok() {
        RopeScaling::FreqFactors { factors: rope_factor_tensor(g, "rope_freqs.weight", rope_dim)? }
    } else if g.tensor_info("rope_factors_long.weight").is_ok() {
        let original_context = keys.count(ROPE_ORIGINAL_CONTEXT)?;
        let attn_factor = match keys.opt_f32(ROPE_ATTN_FACTOR)? {
            Some(f) => f,
            None => rope::longrope_attention_factor(context_length as f32 / original_context as f32, original_context),
        };
        RopeScaling::LongRope {
            short: rope_factor_tensor(g, "rope_factors_short.weight", rope_dim)?,
            long: rope_factor_tensor(g, "rope_factors_long.weight", rope_dim)?,
            original_context,
            attn_factor,
        }
    } else {
        match keys.opt_str("rope.scaling.type").as_deref() {
            None | Some("none") => RopeScaling::None,
            Some("linear") => RopeScaling::Linear { factor: keys.f32(ROPE_FACTOR)? },
            Some(other) => {
                return Err(ModelError::BadKey {
                    key: keys.key("rope.scaling.type"),
                    message: format!("unsupported scaling {other:?} (supported: none, linear, rope_freqs.weight)"),
                });
            }
        }
    };
    Ok(RopeConfig {
        // llama.cpp permutes Q/K of LLaMA and Mistral only; Phi-3 keeps Hugging Face's order.
        style: if keys.spec.permutes_qk { RopeStyle::Normal } else { RopeStyle::NeoX },
        base: keys.opt_f32(ROPE_BASE)?.unwrap_or(10000.0),
        dim: rope_dim,
        scaling,
    })
}

/// RoPE from `rope_parameters` (transformers ≥ 5) or `rope_scaling` (older files, `type` or
/// `rope_type`), `rope_theta` and `partial_rotary_factor`.
fn hf_rope(top: &HfKeys<'_>, head_dim: usize, context_length: usize) -> Result<RopeConfig> {
    let params = if top.has("rope_parameters") || !top.has("rope_scaling") {
        top.nested("rope_parameters", "rope_parameters.")?
    } else {
        top.nested("rope_scaling", "rope_scaling.")?
    };
    // Parameters may sit in the rope object (transformers ≥ 5) or at the top level (older files).
    let f32_param = |name: &str| -> Result<Option<f32>> {
        match params.opt_f32_named(name)? {
            Some(v) => Ok(Some(v)),
            None => top.opt_f32_named(name),
        }
    };
    let required = |name: &str| -> Result<f32> { f32_param(name)?.ok_or_else(|| params.missing(name)) };
    let base = f32_param("rope_theta")?.unwrap_or(10000.0);
    let partial = f32_param("partial_rotary_factor")?.unwrap_or(1.0);
    let dim = (head_dim as f64 * f64::from(partial)) as usize;
    if dim == 0 || !dim.is_multiple_of(2) || dim > head_dim {
        let message = format!("{partial} × head dim {head_dim} gives {dim} rotated dims");
        return Err(top.bad_named("partial_rotary_factor", message));
    }
    let rope_type = params.get("rope_type").or_else(|| params.get("type")).map(|v| v.as_str().unwrap_or("?"));
    // `original_max_position_embeddings`: top level first (transformers gives it priority for Phi-3).
    let original_context = || -> Result<usize> {
        let name = "original_max_position_embeddings";
        match top.opt_count_named(name)?.or(params.opt_count_named(name)?) {
            Some(n) if n > 0 => Ok(n),
            _ => Err(params.missing(name)),
        }
    };
    let scaling = match rope_type.unwrap_or("default") {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: required("factor")? },
        "llama3" => RopeScaling::FreqFactors {
            factors: rope::llama3_factors(
                base,
                dim,
                required("factor")?,
                required("low_freq_factor")?,
                required("high_freq_factor")?,
                original_context()?,
            ),
        },
        "longrope" | "su" => {
            let original = original_context()?;
            let factor = f32_param("factor")?.unwrap_or(context_length as f32 / original as f32);
            let attn_factor = match f32_param("attention_factor")? {
                Some(f) => f,
                None => rope::longrope_attention_factor(factor, original),
            };
            RopeScaling::LongRope {
                short: params.factor_list("short_factor", dim / 2)?,
                long: params.factor_list("long_factor", dim / 2)?,
                original_context: original,
                attn_factor,
            }
        }
        other => {
            let message = format!("{other:?} is not supported (default, linear, llama3, longrope)");
            return Err(params.bad_named("rope_type", message));
        }
    };
    Ok(RopeConfig { style: RopeStyle::NeoX, base, dim, scaling })
}
