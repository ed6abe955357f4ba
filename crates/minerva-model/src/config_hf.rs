//! [`Config::from_hf_config`]: the `config.json` of a Hugging Face LLaMA, Mistral or Phi-3 checkpoint.
//!
//! Keys as transformers writes them (`hidden_size`, `num_key_value_heads`, …). RoPE parameters come
//! from `rope_parameters` (transformers ≥ 5) or from `rope_theta` + `rope_scaling` (older files,
//! `type` or `rope_type`). Errors name the key as `config.json:<key>`.

use serde_json::{Map, Value};

use crate::config::{Config, RopeConfig, RopeScaling, RopeStyle};
use crate::error::{ModelError, Result};
use crate::rope;

fn key(name: &str) -> String {
    format!("config.json:{name}")
}

/// `obj[name]`, treating JSON `null` as absent (transformers writes `"head_dim": null`).
fn get<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn opt_count(obj: &Map<String, Value>, name: &str) -> Result<Option<usize>> {
    match get(obj, name) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) => Ok(Some(n as usize)),
            None => Err(ModelError::BadKey { key: key(name), message: format!("expected a count, found {v}") }),
        },
    }
}

fn count(obj: &Map<String, Value>, name: &str) -> Result<usize> {
    match opt_count(obj, name)? {
        None => Err(ModelError::MissingKey { key: key(name) }),
        Some(0) => Err(ModelError::BadKey { key: key(name), message: "must not be 0".into() }),
        Some(n) => Ok(n),
    }
}

fn opt_f32(obj: &Map<String, Value>, name: &str) -> Result<Option<f32>> {
    match get(obj, name) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x as f32)),
            _ => Err(ModelError::BadKey { key: key(name), message: format!("expected a positive number, found {v}") }),
        },
    }
}

fn req_f32(obj: &Map<String, Value>, name: &str) -> Result<f32> {
    opt_f32(obj, name)?.ok_or_else(|| ModelError::MissingKey { key: key(name) })
}

/// A list of `len` positive numbers (long-rope factors).
fn factor_list(obj: &Map<String, Value>, name: &str, len: usize) -> Result<Vec<f32>> {
    let v = get(obj, name).ok_or_else(|| ModelError::MissingKey { key: key(name) })?;
    let values: Option<Vec<f32>> = v
        .as_array()
        .map(|a| a.iter().map(|x| x.as_f64().filter(|x| x.is_finite() && *x > 0.0).map(|x| x as f32)).collect())
        .unwrap_or(None);
    match values {
        Some(values) if values.len() == len => Ok(values),
        _ => Err(ModelError::BadKey {
            key: key(name),
            message: format!("expected {len} positive numbers (one per rotated pair)"),
        }),
    }
}

/// Rejects a boolean option that our graphs do not implement when it is on.
fn must_be_off(obj: &Map<String, Value>, name: &str) -> Result<()> {
    if get(obj, name).and_then(Value::as_bool) == Some(true) {
        return Err(ModelError::BadKey { key: key(name), message: "true is not supported".into() });
    }
    Ok(())
}

impl Config {
    /// Reads a Hugging Face `config.json` (`model_type` `llama`, `mistral` or `phi3`). The
    /// vocabulary size comes from `vocab_size`; the loader checks it against the embeddings.
    ///
    /// HF checkpoints keep Q/K unpermuted, so RoPE is [`RopeStyle::NeoX`] (`rotate_half`).
    pub fn from_hf_config(json: &Value) -> Result<Config> {
        let obj =
            json.as_object().ok_or_else(|| ModelError::BadKey { key: key(""), message: "not a JSON object".into() })?;
        let arch = get(obj, "model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| ModelError::MissingKey { key: key("model_type") })?
            .to_string();
        if !matches!(arch.as_str(), "llama" | "mistral" | "phi3") {
            return Err(ModelError::UnsupportedArch { arch });
        }
        if let Some(act) = get(obj, "hidden_act")
            && act.as_str() != Some("silu")
        {
            return Err(ModelError::BadKey { key: key("hidden_act"), message: format!("{act} (supported: \"silu\")") });
        }
        must_be_off(obj, "attention_bias")?;
        must_be_off(obj, "mlp_bias")?;
        let n_embd = count(obj, "hidden_size")?;
        let n_ff = count(obj, "intermediate_size")?;
        let n_layer = count(obj, "num_hidden_layers")?;
        let n_head = count(obj, "num_attention_heads")?;
        let n_head_kv = opt_count(obj, "num_key_value_heads")?.unwrap_or(n_head);
        if n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
            return Err(ModelError::BadKey {
                key: key("num_key_value_heads"),
                message: format!("{n_head_kv} does not divide {} = {n_head}", key("num_attention_heads")),
            });
        }
        let head_dim = match opt_count(obj, "head_dim")? {
            Some(d) if d > 0 => d,
            _ if !n_embd.is_multiple_of(n_head) => {
                return Err(ModelError::BadKey {
                    key: key("num_attention_heads"),
                    message: format!("{n_head} does not divide {} = {n_embd}", key("hidden_size")),
                });
            }
            _ => n_embd / n_head,
        };
        let rms_eps = req_f32(obj, "rms_norm_eps")?;
        let vocab = count(obj, "vocab_size")?;
        let context_length = opt_count(obj, "max_position_embeddings")?.unwrap_or(4096).max(1);
        let rope = rope_config(obj, head_dim, context_length)?;
        let sliding_window = match arch.as_str() {
            "mistral" | "phi3" => opt_count(obj, "sliding_window")?.filter(|&w| w > 0),
            _ => None,
        };
        Ok(Config {
            arch,
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            rms_eps,
            context_length,
            vocab,
            rope,
            sliding_window,
        })
    }
}

/// RoPE from `rope_parameters` / `rope_scaling` / `rope_theta` / `partial_rotary_factor`.
fn rope_config(obj: &Map<String, Value>, head_dim: usize, context_length: usize) -> Result<RopeConfig> {
    let (params_key, params) = match (get(obj, "rope_parameters"), get(obj, "rope_scaling")) {
        (Some(p), _) => ("rope_parameters", p),
        (None, Some(p)) => ("rope_scaling", p),
        (None, None) => ("rope_parameters", &Value::Null),
    };
    let empty = Map::new();
    let params = match params {
        Value::Null => &empty,
        Value::Object(map) => map,
        other => {
            return Err(ModelError::BadKey {
                key: key(params_key),
                message: format!("expected an object, found {other}"),
            });
        }
    };
    let pkey = |name: &str| format!("{params_key}.{name}");
    // Parameters may sit in the rope object (transformers ≥ 5) or at the top level (older files).
    let f32_param = |name: &str| -> Result<Option<f32>> {
        match opt_f32(params, name).map_err(|_| bad(&pkey(name), "expected a positive number"))? {
            Some(v) => Ok(Some(v)),
            None => opt_f32(obj, name),
        }
    };
    let base = f32_param("rope_theta")?.unwrap_or(10000.0);
    let partial = f32_param("partial_rotary_factor")?.unwrap_or(1.0);
    let dim = (head_dim as f64 * f64::from(partial)) as usize;
    if dim == 0 || !dim.is_multiple_of(2) || dim > head_dim {
        return Err(bad("partial_rotary_factor", &format!("{partial} × head dim {head_dim} gives {dim} rotated dims")));
    }
    let rope_type = get(params, "rope_type").or_else(|| get(params, "type")).map(|v| v.as_str().unwrap_or("?"));
    let scaling = match rope_type.unwrap_or("default") {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: required(f32_param("factor")?, &pkey("factor"))? },
        "llama3" => {
            let original = original_context(params, obj, &pkey)?;
            RopeScaling::FreqFactors {
                factors: rope::llama3_factors(
                    base,
                    dim,
                    required(f32_param("factor")?, &pkey("factor"))?,
                    required(f32_param("low_freq_factor")?, &pkey("low_freq_factor"))?,
                    required(f32_param("high_freq_factor")?, &pkey("high_freq_factor"))?,
                    original,
                ),
            }
        }
        "longrope" | "su" => {
            let original = original_context(params, obj, &pkey)?;
            let factor = f32_param("factor")?.unwrap_or(context_length as f32 / original as f32);
            let attn_factor = match f32_param("attention_factor")? {
                Some(f) => f,
                None => rope::longrope_attention_factor(factor, original),
            };
            RopeScaling::LongRope {
                short: factor_list(params, "short_factor", dim / 2).map_err(|e| rename(e, &pkey("short_factor")))?,
                long: factor_list(params, "long_factor", dim / 2).map_err(|e| rename(e, &pkey("long_factor")))?,
                original_context: original,
                attn_factor,
            }
        }
        other => {
            return Err(bad(
                &pkey("rope_type"),
                &format!("{other:?} is not supported (default, linear, llama3, longrope)"),
            ));
        }
    };
    Ok(RopeConfig { style: RopeStyle::NeoX, base, dim, scaling })
}

/// `original_max_position_embeddings`: top level first (transformers gives it priority for Phi-3).
fn original_context(
    params: &Map<String, Value>,
    obj: &Map<String, Value>,
    pkey: &dyn Fn(&str) -> String,
) -> Result<usize> {
    let name = "original_max_position_embeddings";
    match opt_count(obj, name)?.or(opt_count(params, name).map_err(|e| rename(e, &pkey(name)))?) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(ModelError::MissingKey { key: key(&pkey(name)) }),
    }
}

fn bad(name: &str, message: &str) -> ModelError {
    ModelError::BadKey { key: key(name), message: message.to_string() }
}

fn required(v: Option<f32>, name: &str) -> Result<f32> {
    v.ok_or_else(|| ModelError::MissingKey { key: key(name) })
}

/// Puts the full dotted key (`rope_parameters.short_factor`) into an error about a nested key.
fn rename(e: ModelError, name: &str) -> ModelError {
    match e {
        ModelError::BadKey { message, .. } => ModelError::BadKey { key: key(name), message },
        ModelError::MissingKey { .. } => ModelError::MissingKey { key: key(name) },
        other => other,
    }
}
