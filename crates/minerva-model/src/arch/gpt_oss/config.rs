//! [`GptOssConfig`]: GPT-OSS's hyper-parameters from GGUF `gpt-oss.*` keys (llama.cpp's names)
//! or a Hugging Face `config.json`. The shared keys are read by [`Config::read`]; this file adds
//! the MoE, the sliding-window layer pattern and YaRN RoPE.

use minerva_gguf::Gguf;
use serde_json::Value;

use crate::arch::registry::Graph;
use crate::backend::{Mask, MoeParams};
use crate::config::{Config, ConfigKeys, Defaults, Key};
use crate::error::{ModelError, Result};
use crate::gguf_keys::GgufKeys;
use crate::hf_config::HfKeys;
use crate::rope::{RopeConfig, RopeScaling, RopeStyle};

/// GPT-OSS's fixed SwiGLU slope (OpenAI's `swiglu(alpha=1.702)`; transformers' `swiglu_alpha`).
pub const SWIGLU_ALPHA: f32 = 1.702;
/// GPT-OSS's SwiGLU clamp (`swiglu_limit`); llama.cpp has no key for it and uses 7.0.
pub const SWIGLU_LIMIT: f32 = 7.0;

const EXPERT_COUNT: Key = Key { gguf: "expert_count", hf: "num_local_experts" };
const EXPERT_USED: Key = Key { gguf: "expert_used_count", hf: "num_experts_per_tok" };
const EXPERT_FF: Key = Key { gguf: "expert_feed_forward_length", hf: "" };
const ROPE_BASE: Key = Key { gguf: "rope.freq_base", hf: "" };
const YARN_FACTOR: Key = Key { gguf: "rope.scaling.factor", hf: "" };
const YARN_ORIGINAL_CONTEXT: Key = Key { gguf: "rope.scaling.original_context_length", hf: "" };
const YARN_BETA_FAST: Key = Key { gguf: "rope.scaling.yarn_beta_fast", hf: "" };
const YARN_BETA_SLOW: Key = Key { gguf: "rope.scaling.yarn_beta_slow", hf: "" };

/// GPT-OSS hyper-parameters: the shared ones in [`Config`] (`n_ff` is the expert width, `rope`
/// NeoX with YaRN scaling, `sliding_window` the window of the sliding layers) plus the MoE.
#[derive(Clone, Debug, PartialEq)]
pub struct GptOssConfig {
    /// Shared hyper-parameters (`arch` = `gpt-oss`).
    pub base: Config,
    /// Experts per layer (`gpt-oss.expert_count`, `num_local_experts`).
    pub n_expert: usize,
    /// Experts per token (`gpt-oss.expert_used_count`, `num_experts_per_tok`).
    pub n_expert_used: usize,
    /// SwiGLU slope.
    pub swiglu_alpha: f32,
    /// SwiGLU clamp.
    pub swiglu_limit: f32,
    /// Whether each layer uses the sliding window (`layer_types`; llama.cpp: even layers).
    pub sliding_layers: Vec<bool>,
}

/// llama.cpp's gpt-oss pattern (`set_swa_pattern(2)`): the sliding window on layers 0, 2, 4, …
fn even_layers(n_layer: usize, sliding_window: Option<usize>) -> Vec<bool> {
    (0..n_layer).map(|il| sliding_window.is_some() && il % 2 == 0).collect()
}

impl GptOssConfig {
    /// Reads `gpt-oss.*` metadata as llama.cpp's converter writes it, and the vocabulary from
    /// `token_embd.weight`. Errors name the key.
    pub fn from_gguf<D: AsRef<[u8]>>(g: &Gguf<D>) -> Result<GptOssConfig> {
        let keys = GgufKeys::new(g, Graph::GptOss)?;
        let n_ff = match keys.opt_count(EXPERT_FF)? {
            Some(n) if n > 0 => n,
            _ => keys.count(Key::N_FF)?,
        };
        let defaults = Defaults { context_length: 4096, rms_eps: None };
        let base = Config::read(&keys, super::GPT_OSS.name, n_ff, defaults, |head_dim, _| {
            let scaling = match keys.opt_str("rope.scaling.type").as_deref() {
                None | Some("none") => RopeScaling::None,
                Some("yarn") => RopeScaling::Yarn {
                    factor: keys.f32(YARN_FACTOR)?,
                    original_context: keys
                        .opt_count(YARN_ORIGINAL_CONTEXT)?
                        .ok_or_else(|| ModelError::MissingKey { key: keys.name(YARN_ORIGINAL_CONTEXT) })?,
                    beta_fast: keys.opt_f32(YARN_BETA_FAST)?.unwrap_or(32.0),
                    beta_slow: keys.opt_f32(YARN_BETA_SLOW)?.unwrap_or(1.0),
                    // GGUF has no key for it; GPT-OSS is defined without truncation (OpenAI's
                    // reference, `truncate: false` in its config.json). llama.cpp truncates.
                    truncate: false,
                },
                Some(other) => {
                    return Err(ModelError::BadKey {
                        key: keys.key("rope.scaling.type"),
                        message: format!("unsupported scaling {other:?} for gpt-oss (supported: none, yarn)"),
                    });
                }
            };
            let base = keys.opt_f32(ROPE_BASE)?.unwrap_or(10000.0);
            Ok(RopeConfig { style: RopeStyle::NeoX, base, dim: head_dim, scaling })
        })?;
        let sliding_layers = even_layers(base.n_layer, base.sliding_window);
        GptOssConfig {
            n_expert: keys.count(EXPERT_COUNT)?,
            n_expert_used: keys.count(EXPERT_USED)?,
            swiglu_alpha: SWIGLU_ALPHA,
            swiglu_limit: SWIGLU_LIMIT,
            sliding_layers,
            base,
        }
        .checked(&keys)
    }

    /// Reads a Hugging Face `config.json` (`model_type` `gpt_oss`; transformers' names, with
    /// YaRN under `rope_scaling` or transformers 5's `rope_parameters`). Errors name the key.
    pub fn from_hf_config(json: &Value) -> Result<GptOssConfig> {
        let keys = HfKeys::new(json)?;
        keys.spec(Graph::GptOss)?;
        let n_ff = keys.count(Key::N_FF)?;
        let defaults = Defaults { context_length: 131072, rms_eps: Some(1e-5) };
        let base = Config::read(&keys, super::GPT_OSS.name, n_ff, defaults, |head_dim, _| hf_rope(&keys, head_dim))?;
        let n_expert_used = match keys.opt_count_named("num_experts_per_tok")? {
            Some(k) => k,
            None => keys.count_named("experts_per_token")?,
        };
        let sliding_layers = hf_sliding_layers(&keys, base.n_layer, base.sliding_window)?;
        GptOssConfig {
            n_expert: keys.count(EXPERT_COUNT)?,
            n_expert_used,
            swiglu_alpha: keys.opt_f32_named("swiglu_alpha")?.unwrap_or(SWIGLU_ALPHA),
            swiglu_limit: keys.opt_f32_named("swiglu_limit")?.unwrap_or(SWIGLU_LIMIT),
            sliding_layers,
            base,
        }
        .checked(&keys)
    }

    /// Cross-field checks; errors name the key in the file's format.
    fn checked(self, keys: &dyn ConfigKeys) -> Result<GptOssConfig> {
        let c = &self.base;
        if c.head_dim == 0 || !c.head_dim.is_multiple_of(2) {
            return Err(keys.bad(Key::HEAD_DIM, format!("head dim {} must be even and non-zero", c.head_dim)));
        }
        // Shapes are products of these; a config whose products overflow describes no file.
        let sizes = [
            c.n_head.checked_mul(c.head_dim),
            self.n_expert.checked_mul(c.n_ff).and_then(|n| n.checked_mul(c.n_embd)),
            c.vocab.checked_mul(c.n_embd),
        ];
        if sizes.iter().any(Option::is_none) {
            return Err(keys.bad(EXPERT_COUNT, "the tensor sizes these dimensions imply overflow".into()));
        }
        if self.n_expert_used == 0 || self.n_expert_used > self.n_expert {
            let message = format!("{} must be 1 ..= {} experts", self.n_expert_used, self.n_expert);
            return Err(keys.bad(EXPERT_USED, message));
        }
        Ok(self)
    }

    /// The attention mask of layer `il`.
    pub fn mask(&self, il: usize) -> Mask {
        match (self.sliding_layers.get(il), self.base.sliding_window) {
            (Some(true), Some(w)) => Mask::SlidingWindow(w),
            _ => Mask::Causal,
        }
    }

    /// The MoE parameters for [`crate::Backend::moe`].
    pub fn moe_params(&self) -> MoeParams {
        MoeParams {
            n_expert: self.n_expert,
            n_expert_used: self.n_expert_used,
            alpha: self.swiglu_alpha,
            limit: self.swiglu_limit,
        }
    }
}

/// YaRN from `rope_parameters` (transformers 5) or `rope_scaling`; `rope_theta` there or at the
/// top level (default 150000).
fn hf_rope(top: &HfKeys<'_>, head_dim: usize) -> Result<RopeConfig> {
    let params = match (top.has("rope_parameters"), top.has("rope_scaling")) {
        (true, _) => Some(top.nested("rope_parameters", "rope_parameters.")?),
        (false, true) => Some(top.nested("rope_scaling", "rope_scaling.")?),
        (false, false) => None,
    };
    let base = match params.filter(|p| p.has("rope_theta")) {
        Some(p) => p.f32_named("rope_theta")?,
        None => top.opt_f32_named("rope_theta")?.unwrap_or(150000.0),
    };
    let scaling = match params {
        None => RopeScaling::None,
        Some(p) => {
            let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str).unwrap_or("default");
            match kind {
                "default" => RopeScaling::None,
                "yarn" => RopeScaling::Yarn {
                    factor: p.f32_named("factor")?,
                    original_context: p.count_named("original_max_position_embeddings")?,
                    beta_fast: p.opt_f32_named("beta_fast")?.unwrap_or(32.0),
                    beta_slow: p.opt_f32_named("beta_slow")?.unwrap_or(1.0),
                    // transformers' default when the key is absent.
                    truncate: p.opt_bool("truncate")?.unwrap_or(true),
                },
                other => {
                    let message = format!("unsupported {other:?} for gpt_oss (supported: default, yarn)");
                    return Err(p.bad_named("rope_type", message));
                }
            }
        }
    };
    Ok(RopeConfig { style: RopeStyle::NeoX, base, dim: head_dim, scaling })
}

/// `layer_types` (`sliding_attention` / `full_attention` per layer), else llama.cpp's pattern.
fn hf_sliding_layers(keys: &HfKeys<'_>, n_layer: usize, sliding_window: Option<usize>) -> Result<Vec<bool>> {
    let sliding_layers = match keys.get("layer_types") {
        None => even_layers(n_layer, sliding_window),
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
    if sliding_layers.iter().any(|&s| s) && sliding_window.is_none() {
        let message = "missing, but layer_types has sliding_attention layers".into();
        return Err(keys.bad_named("sliding_window", message));
    }
    Ok(sliding_layers)
}
