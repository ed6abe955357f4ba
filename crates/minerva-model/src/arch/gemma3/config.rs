//! [`Gemma3Config`]: Gemma 3's hyper-parameters from GGUF `gemma3.*` keys (llama.cpp's names) or a
//! Hugging Face `config.json` (`Gemma3TextConfig`, `model_type` `gemma3_text`, or a `gemma3`
//! config whose `text_config` holds it). The shared keys are read by [`Config::read`]; this file
//! adds the local/global layer pattern with each kind's RoPE base, and the query scale.
//!
//! What the GGUF file leaves out, llama.cpp assumes (`src/models/gemma3.cpp`,
//! `llama-hparams.h`), and so do we: the sliding-window pattern (`attention.sliding_window_pattern`,
//! else every 6th layer global), the local RoPE base (`rope.freq_base_swa`, else 10000, unscaled)
//! and the query scale (`1/√head_dim`, or `1/√(n_embd/n_head)` for the 62-layer 27B, which is what
//! `query_pre_attn_scalar` says in that model's config).

use minerva_gguf::Gguf;
use serde_json::Value;

use crate::arch::registry::Graph;
use crate::backend::Mask;
use crate::config::{Config, ConfigKeys, Defaults, Key};
use crate::error::{ModelError, Result};
use crate::gguf_keys::GgufKeys;
use crate::hf_config::HfKeys;
use crate::rope::{RopeConfig, RopeScaling, RopeStyle};

/// llama.cpp's and transformers' default layer pattern: layers `5, 11, 17, …` are global.
pub const DEFAULT_PATTERN: usize = 6;
/// The RoPE base of the sliding (local) layers when the file names none.
pub const DEFAULT_LOCAL_BASE: f32 = 10000.0;
/// The RoPE base of the global layers when the file names none.
pub const DEFAULT_GLOBAL_BASE: f32 = 1_000_000.0;

const ROPE_BASE: Key = Key { gguf: "rope.freq_base", hf: "" };
const ROPE_BASE_SWA: Key = Key { gguf: "rope.freq_base_swa", hf: "" };
const ROPE_FACTOR: Key = Key { gguf: "rope.scaling.factor", hf: "" };
const SOFTCAP: Key = Key { gguf: "final_logit_softcapping", hf: "final_logit_softcapping" };

/// Gemma 3 hyper-parameters: the shared ones in [`Config`] (`rope` is the global layers' RoPE,
/// `sliding_window` the local layers' window) plus what Gemma adds.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma3Config {
    /// Shared hyper-parameters (`arch` = `gemma3`).
    pub base: Config,
    /// The RoPE of the sliding-window (local) layers.
    pub local_rope: RopeConfig,
    /// Whether each layer is a sliding-window (local) one.
    pub sliding_layers: Vec<bool>,
    /// `√(head_dim / query_pre_attn_scalar)`: what the queries are multiplied by on top of the
    /// attention's own `1/√head_dim` (1 when the two agree, as in every released Gemma 3 but 27B).
    pub query_scale: f32,
    /// `√n_embd`, the embeddings' scale.
    pub embed_scale: f32,
}

impl Gemma3Config {
    /// Reads `gemma3.*` metadata as llama.cpp's converter writes it. Errors name the key.
    pub fn from_gguf<D: AsRef<[u8]>>(g: &Gguf<D>) -> Result<Gemma3Config> {
        let keys = GgufKeys::new(g, Graph::Gemma3)?;
        if keys.opt_f32(SOFTCAP)?.is_some() {
            return Err(keys.bad(SOFTCAP, "final logit soft-capping is not supported".into()));
        }
        let n_ff = keys.count(Key::N_FF)?;
        let defaults = Defaults { context_length: 131072, rms_eps: Some(1e-6) };
        let base = Config::read(&keys, super::GEMMA3.name, n_ff, defaults, |head_dim, _| {
            let scaling = match keys.opt_str("rope.scaling.type").as_deref() {
                None | Some("none") => RopeScaling::None,
                Some("linear") => RopeScaling::Linear { factor: keys.f32(ROPE_FACTOR)? },
                Some(other) => {
                    return Err(ModelError::BadKey {
                        key: keys.key("rope.scaling.type"),
                        message: format!("unsupported scaling {other:?} for gemma3 (supported: none, linear)"),
                    });
                }
            };
            let base = keys.opt_f32(ROPE_BASE)?.unwrap_or(DEFAULT_GLOBAL_BASE);
            Ok(RopeConfig { style: RopeStyle::NeoX, base, dim: head_dim, scaling })
        })?;
        let local_base = keys.opt_f32(ROPE_BASE_SWA)?.unwrap_or(DEFAULT_LOCAL_BASE);
        let local_rope = RopeConfig { base: local_base, scaling: RopeScaling::None, ..base.rope.clone() };
        let sliding_layers = match base.sliding_window {
            None => vec![false; base.n_layer],
            Some(_) => gguf_pattern(&keys, base.n_layer)?,
        };
        // llama.cpp: 1/√head_dim, except the 27B (62 layers), whose queries are scaled by
        // 1/√(n_embd/n_head); the attention op divides by √head_dim already.
        let scalar = if base.n_layer == 62 { (base.n_embd / base.n_head).max(1) as f32 } else { base.head_dim as f32 };
        Ok(Gemma3Config {
            query_scale: (base.head_dim as f32 / scalar).sqrt(),
            embed_scale: (base.n_embd as f32).sqrt(),
            local_rope,
            sliding_layers,
            base,
        })
    }

    /// Reads a Hugging Face `config.json`: `model_type` `gemma3_text`, or `gemma3` (the
    /// multimodal config) whose `text_config` is read. Errors name the key.
    pub fn from_hf_config(json: &Value) -> Result<Gemma3Config> {
        let top = HfKeys::new(json)?;
        let spec = top.spec(Graph::Gemma3)?;
        // The text model's own type (`gemma3_text`) is read as it is; the multimodal config
        // (`gemma3`) holds the text model's in `text_config`.
        let keys = match top.model_type()? == spec.hf_output {
            true => top,
            false => match top.get("text_config") {
                Some(text @ Value::Object(_)) => HfKeys::new(text)?,
                _ => return Err(top.missing("text_config")),
            },
        };
        if let Some(act) = keys.get("hidden_activation").or_else(|| keys.get("hidden_act"))
            && act.as_str() != Some("gelu_pytorch_tanh")
        {
            return Err(keys.bad_named("hidden_activation", format!("{act} (supported: \"gelu_pytorch_tanh\")")));
        }
        keys.must_be_off("attention_bias")?;
        keys.must_be_off("use_bidirectional_attention")?;
        for name in ["final_logit_softcapping", "attn_logit_softcapping"] {
            if keys.has(name) {
                return Err(keys.bad_named(name, "soft-capping is not supported".into()));
            }
        }
        let n_ff = keys.count(Key::N_FF)?;
        let defaults = Defaults { context_length: 131072, rms_eps: Some(1e-6) };
        let rope = |name: &str, base: f32, head_dim: usize| hf_rope(&keys, name, base, head_dim);
        let base = Config::read(&keys, super::GEMMA3.name, n_ff, defaults, |head_dim, _| {
            rope("full_attention", DEFAULT_GLOBAL_BASE, head_dim)
        })?;
        let local_rope = rope("sliding_attention", DEFAULT_LOCAL_BASE, base.head_dim)?;
        let sliding_layers = hf_pattern(&keys, base.n_layer, base.sliding_window)?;
        let scalar = keys.opt_f32_named("query_pre_attn_scalar")?.unwrap_or(256.0);
        Ok(Gemma3Config {
            query_scale: (base.head_dim as f32 / scalar).sqrt(),
            embed_scale: (base.n_embd as f32).sqrt(),
            local_rope,
            sliding_layers,
            base,
        })
    }

    /// The attention mask of layer `il`.
    pub fn mask(&self, il: usize) -> Mask {
        match (self.sliding_layers.get(il), self.base.sliding_window) {
            (Some(true), Some(w)) => Mask::SlidingWindow(w),
            _ => Mask::Causal,
        }
    }

    /// The RoPE of layer `il`.
    pub fn rope(&self, il: usize) -> &RopeConfig {
        match self.sliding_layers.get(il) {
            Some(true) => &self.local_rope,
            _ => &self.base.rope,
        }
    }
}

/// The layer pattern a GGUF file without `attention.sliding_window_pattern` has: every 6th layer
/// global.
pub(crate) fn default_pattern(n_layer: usize) -> Vec<bool> {
    every_nth_global(n_layer, DEFAULT_PATTERN)
}

/// Layer `il` is local unless it is the last of each run of `pattern` (llama.cpp's
/// `set_swa_pattern`, transformers' `(i + 1) % pattern != 0`); a pattern of 0 makes all local.
fn every_nth_global(n_layer: usize, pattern: usize) -> Vec<bool> {
    (0..n_layer).map(|il| pattern == 0 || (il + 1) % pattern != 0).collect()
}

/// `gemma3.attention.sliding_window_pattern`: a list of booleans (one per layer) or a count;
/// absent, every 6th layer is global.
fn gguf_pattern<D: AsRef<[u8]>>(keys: &GgufKeys<'_, D>, n_layer: usize) -> Result<Vec<bool>> {
    let name = keys.key("attention.sliding_window_pattern");
    let Some(value) = keys.g.get(&name) else {
        return Ok(every_nth_global(n_layer, DEFAULT_PATTERN));
    };
    if let Some(n) = value.to_u64() {
        return Ok(every_nth_global(n_layer, n as usize));
    }
    let flags = value.as_array().and_then(|a| {
        a.iter()
            .map(|v| match v {
                minerva_gguf::Value::Bool(b) => Some(b),
                _ => None,
            })
            .collect::<Option<Vec<bool>>>()
    });
    match flags {
        Some(flags) if flags.len() == n_layer => Ok(flags),
        _ => Err(ModelError::BadKey {
            key: name,
            message: format!("expected a count or {n_layer} booleans, found {}", value.type_description()),
        }),
    }
}

/// `layer_types` (`sliding_attention` / `full_attention` per layer), else `sliding_window_pattern`
/// (default 6), as `Gemma3TextConfig` does.
fn hf_pattern(keys: &HfKeys<'_>, n_layer: usize, sliding_window: Option<usize>) -> Result<Vec<bool>> {
    let layers = match keys.get("layer_types") {
        None => every_nth_global(n_layer, keys.opt_count_named("sliding_window_pattern")?.unwrap_or(DEFAULT_PATTERN)),
        Some(Value::Array(types)) if types.len() == n_layer => types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(keys.bad_named(
                    "layer_types",
                    format!("unknown layer type {t} (expected sliding_attention or full_attention)"),
                )),
            })
            .collect::<Result<Vec<_>>>()?,
        Some(other) => {
            let message = format!("expected a list of {n_layer} layer types, found {other}");
            return Err(keys.bad_named("layer_types", message));
        }
    };
    if layers.iter().any(|&s| s) && sliding_window.is_none() {
        return Err(keys.bad_named("sliding_window", "missing, but some layers are sliding_attention".into()));
    }
    Ok(layers)
}

/// One layer kind's RoPE: `rope_parameters.{kind}` (transformers ≥ 5: `rope_theta`, `rope_type`
/// default or linear with `factor`); older configs: `rope_theta` (global), `rope_local_base_freq`
/// (local) and `rope_scaling` (global only).
fn hf_rope(top: &HfKeys<'_>, kind: &str, default_base: f32, head_dim: usize) -> Result<RopeConfig> {
    let global = kind == "full_attention";
    let outer = top.nested("rope_parameters", "rope_parameters.")?;
    let prefix = if global { "rope_parameters.full_attention." } else { "rope_parameters.sliding_attention." };
    // Absent, the local layers' parameters read as empty (defaults) and the global ones fall back
    // to `rope_scaling`.
    let params = match outer.has(kind) || !global {
        true => outer.nested(kind, prefix)?,
        false => top.nested("rope_scaling", "rope_scaling.")?,
    };
    let legacy_base = if global { "rope_theta" } else { "rope_local_base_freq" };
    let base = match params.opt_f32_named("rope_theta")? {
        Some(b) => b,
        None => top.opt_f32_named(legacy_base)?.unwrap_or(default_base),
    };
    let kind_name = params.get("rope_type").or_else(|| params.get("type")).and_then(Value::as_str);
    let scaling = match kind_name.unwrap_or("default") {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: params.f32_named("factor")? },
        other => {
            let message = format!("{other:?} is not supported for gemma3 (default, linear)");
            return Err(params.bad_named("rope_type", message));
        }
    };
    Ok(RopeConfig { style: RopeStyle::NeoX, base, dim: head_dim, scaling })
}
