//! The Qwen 2 / Qwen 3 [`Config`]: from GGUF `qwen2.*` / `qwen3.*` metadata (as llama.cpp's
//! converter writes it) or a Hugging Face `config.json` (`model_type` `qwen2` / `qwen3`).
//!
//! The shared keys are read by [`Config::read`]; Qwen 3's explicit `head_dim`
//! (`qwen3.attention.key_length`) may differ from `hidden_size / num_attention_heads`. RoPE is
//! NeoX-style in both formats (llama.cpp's `LLAMA_ROPE_TYPE_NEOX`: the converter does not permute
//! Q/K). The sliding window is off: transformers applies `sliding_window` only with
//! `use_sliding_window`, which released Qwen models leave off and which we refuse, and llama.cpp
//! never applies it to these architectures.

use minerva_gguf::Gguf;

use crate::arch::registry::Graph;
use crate::config::{Config, ConfigKeys, Defaults, Key};
use crate::error::{ModelError, Result};
use crate::gguf_keys::GgufKeys;
use crate::hf_config::HfKeys;
use crate::rope::{RopeConfig, RopeScaling, RopeStyle};

const ROPE_DIM: Key = Key { gguf: "rope.dimension_count", hf: "" };
const ROPE_BASE: Key = Key { gguf: "rope.freq_base", hf: "" };
const ROPE_FACTOR: Key = Key { gguf: "rope.scaling.factor", hf: "" };

/// llama.cpp's and transformers' default RoPE base when a file names none.
const DEFAULT_ROPE_BASE: f32 = 10000.0;

/// Trained context when a file does not say (transformers' `Qwen2Config` default).
const DEFAULT_CONTEXT: usize = 32768;

/// Reads a Qwen configuration from a GGUF file's metadata and the shape of `token_embd.weight`.
///
/// Errors name the missing or inconsistent key; RoPE scaling other than `none` / `linear` (Qwen's
/// optional YaRN) is refused, naming `{arch}.rope.scaling.type`.
pub fn from_gguf<D: AsRef<[u8]>>(g: &Gguf<D>) -> Result<Config> {
    let keys = GgufKeys::new(g, Graph::Qwen)?;
    let n_ff = keys.count(Key::N_FF)?;
    let defaults = Defaults { context_length: DEFAULT_CONTEXT, rms_eps: None };
    let arch = keys.arch.clone();
    let mut config = Config::read(&keys, &arch, n_ff, defaults, |head_dim, _| {
        let dim = keys.opt_count(ROPE_DIM)?.unwrap_or(head_dim);
        if dim == 0 || !dim.is_multiple_of(2) || dim > head_dim {
            let message = format!("{dim} must be even, non-zero and at most the head dim {head_dim}");
            return Err(keys.bad(ROPE_DIM, message));
        }
        let scaling = match keys.opt_str("rope.scaling.type").as_deref() {
            None | Some("none") => RopeScaling::None,
            Some("linear") => RopeScaling::Linear { factor: keys.f32(ROPE_FACTOR)? },
            Some(other) => {
                return Err(ModelError::BadKey {
                    key: keys.key("rope.scaling.type"),
                    message: format!("unsupported scaling {other:?} (supported: none, linear)"),
                });
            }
        };
        let base = keys.opt_f32(ROPE_BASE)?.unwrap_or(DEFAULT_ROPE_BASE);
        Ok(RopeConfig { style: RopeStyle::NeoX, base, dim, scaling })
    })?;
    config.sliding_window = None;
    Ok(config)
}

/// Reads a Hugging Face `config.json` (`model_type` `qwen2` or `qwen3`). The vocabulary size comes
/// from `vocab_size`; the loader checks it against the embeddings.
pub fn from_hf_config(json: &serde_json::Value) -> Result<Config> {
    let keys = HfKeys::new(json)?;
    let arch = keys.spec(Graph::Qwen)?.name;
    if let Some(act) = keys.get("hidden_act")
        && act.as_str() != Some("silu")
    {
        return Err(keys.bad_named("hidden_act", format!("{act} (supported: \"silu\")")));
    }
    keys.must_be_off("use_sliding_window")?;
    let n_ff = keys.count(Key::N_FF)?;
    let defaults = Defaults { context_length: DEFAULT_CONTEXT, rms_eps: None };
    let mut config = Config::read(&keys, arch, n_ff, defaults, |head_dim, _| hf_rope(&keys, head_dim))?;
    config.sliding_window = None;
    Ok(config)
}

/// RoPE from `rope_parameters` (transformers ≥ 5) or `rope_scaling` (older files, whose
/// `rope_theta` sits at the top level): the default or linear scaling over every dimension.
fn hf_rope(top: &HfKeys<'_>, head_dim: usize) -> Result<RopeConfig> {
    let params = if top.has("rope_parameters") || !top.has("rope_scaling") {
        top.nested("rope_parameters", "rope_parameters.")?
    } else {
        top.nested("rope_scaling", "rope_scaling.")?
    };
    let base = match params.opt_f32_named("rope_theta")? {
        Some(base) => base,
        None => top.opt_f32_named("rope_theta")?.unwrap_or(DEFAULT_ROPE_BASE),
    };
    let rope_type = params.get("rope_type").or_else(|| params.get("type")).map(|v| v.as_str().unwrap_or("?"));
    let scaling = match rope_type.unwrap_or("default") {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: params.f32_named("factor")? },
        other => {
            let message = format!("{other:?} is not supported for Qwen (default, linear)");
            return Err(params.bad_named("rope_type", message));
        }
    };
    Ok(RopeConfig { style: RopeStyle::NeoX, base, dim: head_dim, scaling })
}
