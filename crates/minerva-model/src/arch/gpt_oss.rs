//! The GPT-OSS graph, as OpenAI's reference computes it (`gpt_oss/torch/model.py`; transformers'
//! `modeling_gpt_oss.py` agrees to 3e-6 on the fixtures):
//!
//! ```text
//! embed → for each layer:
//!     h = rms_norm(x)
//!     q, k, v = h·Wqᵀ + bq, h·Wkᵀ + bk, h·Wvᵀ + bv        GQA, biases on every projection
//!     rope(q), rope(k)                                    NeoX halves, YaRN frequencies
//!     a = softmax([q·kᵀ/√d, sink_h]) · v                  learned sink logit per head; layers
//!                                                         0, 2, 4, … see the last `window` positions
//!     x += a·Woᵀ + bo
//!     h = rms_norm(x)
//!     x += moe(h, router = h·Wrᵀ + br)                    top-k, softmax over the k, OpenAI SwiGLU
//! → rms_norm → LM head
//! ```
//!
//! [`GptOssConfig`] comes from GGUF `gpt-oss.*` keys (llama.cpp's names) or from a Hugging Face
//! `config.json`; [`GptOssWeights`] from GGUF, HF SafeTensors (MXFP4 `_blocks`/`_scales`) or an
//! MLX checkpoint (`gpt_oss_weights.rs`).

use minerva_gguf::Gguf;
use serde_json::Value;

use crate::backend::{Backend, Batch, Mask, MoeExperts, MoeParams};
use crate::config::{AttentionDims, Config, RopeConfig, RopeScaling, RopeStyle, count, opt_count, opt_f32};
use crate::error::{ModelError, Result};

/// GPT-OSS's fixed SwiGLU slope (OpenAI's `swiglu(alpha=1.702)`; transformers' `swiglu_alpha`).
pub const SWIGLU_ALPHA: f32 = 1.702;
/// GPT-OSS's SwiGLU clamp (`swiglu_limit`); llama.cpp has no key for it and uses 7.0.
pub const SWIGLU_LIMIT: f32 = 7.0;

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

impl GptOssConfig {
    /// Reads `gpt-oss.*` metadata as llama.cpp's converter writes it, and the vocabulary from
    /// `token_embd.weight`. Errors name the key.
    pub fn from_gguf<D: AsRef<[u8]>>(g: &Gguf<D>) -> Result<GptOssConfig> {
        let arch = g.architecture()?.to_string();
        if arch != "gpt-oss" {
            return Err(ModelError::UnsupportedArch { arch });
        }
        let key = |suffix: &str| format!("gpt-oss.{suffix}");
        let n_layer = count(g, "block_count")?;
        let n_embd = count(g, "embedding_length")?;
        let n_ff = match opt_count(g, "expert_feed_forward_length")? {
            Some(n) if n > 0 => n,
            _ => count(g, "feed_forward_length")?,
        };
        let AttentionDims { n_head, n_head_kv, head_dim, rms_eps } = AttentionDims::from_gguf(g, n_embd)?;
        let context_length = opt_count(g, "context_length")?.unwrap_or(4096).max(1);
        let scaling = match g.get(&key("rope.scaling.type")).map(|v| v.as_str()) {
            None | Some(Some("none")) => RopeScaling::None,
            Some(Some("yarn")) => RopeScaling::Yarn {
                factor: opt_f32(g, "rope.scaling.factor")?
                    .ok_or_else(|| ModelError::MissingKey { key: key("rope.scaling.factor") })?,
                original_context: opt_count(g, "rope.scaling.original_context_length")?
                    .ok_or_else(|| ModelError::MissingKey { key: key("rope.scaling.original_context_length") })?,
                beta_fast: opt_f32(g, "rope.scaling.yarn_beta_fast")?.unwrap_or(32.0),
                beta_slow: opt_f32(g, "rope.scaling.yarn_beta_slow")?.unwrap_or(1.0),
                // GGUF has no key for it; GPT-OSS is defined without truncation (OpenAI's
                // reference, `truncate: false` in its config.json). llama.cpp truncates.
                truncate: false,
            },
            Some(other) => {
                return Err(ModelError::BadKey {
                    key: key("rope.scaling.type"),
                    message: format!("unsupported scaling {other:?} for gpt-oss (supported: none, yarn)"),
                });
            }
        };
        let rope = RopeConfig {
            style: RopeStyle::NeoX,
            base: opt_f32(g, "rope.freq_base")?.unwrap_or(10000.0),
            dim: head_dim,
            scaling,
        };
        let n_expert = count(g, "expert_count")?;
        let n_expert_used = count(g, "expert_used_count")?;
        let sliding_window = opt_count(g, "attention.sliding_window")?.filter(|&w| w > 0);
        let embd = g
            .tensor_info("token_embd.weight")
            .map_err(|_| ModelError::MissingTensor { tensor: "token_embd.weight".into() })?;
        let vocab = match embd.shape.as_slice() {
            [vocab, n] if *n == n_embd && *vocab > 0 => *vocab,
            actual => {
                return Err(ModelError::TensorShape {
                    tensor: "token_embd.weight".into(),
                    expected: vec![embd.shape.first().copied().unwrap_or(0), n_embd],
                    actual: actual.to_vec(),
                });
            }
        };
        let base = Config {
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
        };
        // llama.cpp's gpt-oss: set_swa_pattern(2), the sliding window on layers 0, 2, 4, ...
        let sliding_layers = (0..n_layer).map(|il| sliding_window.is_some() && il % 2 == 0).collect();
        GptOssConfig {
            base,
            n_expert,
            n_expert_used,
            swiglu_alpha: SWIGLU_ALPHA,
            swiglu_limit: SWIGLU_LIMIT,
            sliding_layers,
        }
        .checked(true)
    }

    /// Reads a Hugging Face `config.json` (`model_type` `gpt_oss`; transformers' names, with
    /// YaRN under `rope_scaling` or transformers 5's `rope_parameters`). Errors name the key.
    pub fn from_hf_config(cfg: &Value) -> Result<GptOssConfig> {
        let model_type = cfg.get("model_type").and_then(Value::as_str).unwrap_or("(none)");
        if model_type != "gpt_oss" {
            return Err(ModelError::UnsupportedArch { arch: model_type.to_string() });
        }
        let n_layer = hf_count(cfg, "num_hidden_layers")?;
        let n_embd = hf_count(cfg, "hidden_size")?;
        let n_head = hf_count(cfg, "num_attention_heads")?;
        let n_head_kv = hf_opt_count(cfg, "num_key_value_heads")?.unwrap_or(n_head);
        let head_dim = hf_opt_count(cfg, "head_dim")?.unwrap_or(n_embd / n_head.max(1));
        let rope_params = cfg.get("rope_parameters").or_else(|| cfg.get("rope_scaling")).filter(|v| !v.is_null());
        let rope_theta = match rope_params.and_then(|p| p.get("rope_theta")) {
            Some(_) => hf_f32(rope_params.unwrap_or(cfg), "rope_theta", "rope_parameters.")?,
            None => hf_opt_f32(cfg, "rope_theta", "")?.unwrap_or(150000.0),
        };
        let scaling = match rope_params {
            None => RopeScaling::None,
            Some(p) => {
                let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str).unwrap_or("default");
                let prefix = if cfg.get("rope_parameters").is_some() { "rope_parameters." } else { "rope_scaling." };
                match kind {
                    "default" => RopeScaling::None,
                    "yarn" => RopeScaling::Yarn {
                        factor: hf_f32(p, "factor", prefix)?,
                        original_context: hf_count(p, "original_max_position_embeddings")
                            .map_err(|e| prefixed(e, prefix))?,
                        beta_fast: hf_opt_f32(p, "beta_fast", prefix)?.unwrap_or(32.0),
                        beta_slow: hf_opt_f32(p, "beta_slow", prefix)?.unwrap_or(1.0),
                        // transformers' default when the key is absent.
                        truncate: match p.get("truncate") {
                            None => true,
                            Some(v) => v.as_bool().ok_or_else(|| ModelError::BadConfig {
                                key: format!("{prefix}truncate"),
                                message: format!("expected true or false, found {v}"),
                            })?,
                        },
                    },
                    other => {
                        return Err(ModelError::BadConfig {
                            key: format!("{prefix}rope_type"),
                            message: format!("unsupported {other:?} for gpt_oss (supported: default, yarn)"),
                        });
                    }
                }
            }
        };
        let sliding_window = hf_opt_count(cfg, "sliding_window")?.filter(|&w| w > 0);
        let sliding_layers = match cfg.get("layer_types").filter(|v| !v.is_null()) {
            None => (0..n_layer).map(|il| sliding_window.is_some() && il % 2 == 0).collect(),
            Some(Value::Array(types)) if types.len() == n_layer => types
                .iter()
                .map(|t| match t.as_str() {
                    Some("sliding_attention") => Ok(true),
                    Some("full_attention") => Ok(false),
                    _ => Err(ModelError::BadConfig {
                        key: "layer_types".into(),
                        message: format!("unknown layer type {t} (expected sliding_attention or full_attention)"),
                    }),
                })
                .collect::<Result<Vec<_>>>()?,
            Some(other) => {
                return Err(ModelError::BadConfig {
                    key: "layer_types".into(),
                    message: format!("expected a list of {n_layer} layer types, found {other}"),
                });
            }
        };
        if sliding_layers.iter().any(|&s| s) && sliding_window.is_none() {
            return Err(ModelError::BadConfig {
                key: "sliding_window".into(),
                message: "missing, but layer_types has sliding_attention layers".into(),
            });
        }
        let base = Config {
            arch: "gpt-oss".into(),
            n_layer,
            n_embd,
            n_ff: hf_count(cfg, "intermediate_size")?,
            n_head,
            n_head_kv,
            head_dim,
            rms_eps: hf_opt_f32(cfg, "rms_norm_eps", "")?.unwrap_or(1e-5),
            context_length: hf_opt_count(cfg, "max_position_embeddings")?.unwrap_or(131072).max(1),
            vocab: hf_count(cfg, "vocab_size")?,
            rope: RopeConfig { style: RopeStyle::NeoX, base: rope_theta, dim: head_dim, scaling },
            sliding_window,
        };
        let n_expert_used = match hf_opt_count(cfg, "num_experts_per_tok")? {
            Some(k) => k,
            None => hf_count(cfg, "experts_per_token")?,
        };
        GptOssConfig {
            base,
            n_expert: hf_count(cfg, "num_local_experts")?,
            n_expert_used,
            swiglu_alpha: hf_opt_f32(cfg, "swiglu_alpha", "")?.unwrap_or(SWIGLU_ALPHA),
            swiglu_limit: hf_opt_f32(cfg, "swiglu_limit", "")?.unwrap_or(SWIGLU_LIMIT),
            sliding_layers,
        }
        .checked(false)
    }

    /// Cross-field checks; errors name the GGUF key (`gguf`) or the config.json key.
    fn checked(self, gguf: bool) -> Result<GptOssConfig> {
        let c = &self.base;
        let bad = |gguf_key: &str, hf_key: &str, message: String| {
            Err(match gguf {
                true => ModelError::BadKey { key: format!("gpt-oss.{gguf_key}"), message },
                false => ModelError::BadConfig { key: hf_key.into(), message },
            })
        };
        if c.n_head_kv == 0 || !c.n_head.is_multiple_of(c.n_head_kv) {
            let message = format!("{} does not divide {} query heads", c.n_head_kv, c.n_head);
            return bad("attention.head_count_kv", "num_key_value_heads", message);
        }
        if c.head_dim == 0 || !c.head_dim.is_multiple_of(2) {
            return bad(
                "attention.key_length",
                "head_dim",
                format!("head dim {} must be even and non-zero", c.head_dim),
            );
        }
        // Shapes are products of these; a config whose products overflow describes no file.
        let sizes = [
            c.n_head.checked_mul(c.head_dim),
            self.n_expert.checked_mul(c.n_ff).and_then(|n| n.checked_mul(c.n_embd)),
            c.vocab.checked_mul(c.n_embd),
        ];
        if sizes.iter().any(Option::is_none) {
            let message = "the tensor sizes these dimensions imply overflow".to_string();
            return bad("expert_count", "num_local_experts", message);
        }
        if self.n_expert_used == 0 || self.n_expert_used > self.n_expert {
            let message = format!("{} must be 1 ..= {} experts", self.n_expert_used, self.n_expert);
            return bad("expert_used_count", "num_experts_per_tok", message);
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

    /// The MoE parameters for [`Backend::moe`].
    pub fn moe_params(&self) -> MoeParams {
        MoeParams {
            n_expert: self.n_expert,
            n_expert_used: self.n_expert_used,
            alpha: self.swiglu_alpha,
            limit: self.swiglu_limit,
        }
    }
}

fn prefixed(e: ModelError, prefix: &str) -> ModelError {
    match e {
        ModelError::BadConfig { key, message } => ModelError::BadConfig { key: format!("{prefix}{key}"), message },
        other => other,
    }
}

fn hf_opt_count(cfg: &Value, key: &str) -> Result<Option<usize>> {
    match cfg.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) => Ok(Some(n as usize)),
            None => Err(ModelError::BadConfig { key: key.into(), message: format!("expected a count, found {v}") }),
        },
    }
}

fn hf_count(cfg: &Value, key: &str) -> Result<usize> {
    match hf_opt_count(cfg, key)? {
        None => Err(ModelError::BadConfig { key: key.into(), message: "missing".into() }),
        Some(0) => Err(ModelError::BadConfig { key: key.into(), message: "must not be 0".into() }),
        Some(n) => Ok(n),
    }
}

fn hf_opt_f32(cfg: &Value, key: &str, prefix: &str) -> Result<Option<f32>> {
    match cfg.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x as f32)),
            _ => Err(ModelError::BadConfig {
                key: format!("{prefix}{key}"),
                message: format!("expected a positive number, found {v}"),
            }),
        },
    }
}

fn hf_f32(cfg: &Value, key: &str, prefix: &str) -> Result<f32> {
    hf_opt_f32(cfg, key, prefix)?
        .ok_or_else(|| ModelError::BadConfig { key: format!("{prefix}{key}"), message: "missing".into() })
}

/// One GPT-OSS block's weights (GGUF names `blk.{i}.*`).
pub struct GptOssLayer<W> {
    /// `attn_norm.weight` `[n_embd]`.
    pub attn_norm: W,
    /// `attn_q.weight` `[n_head·head_dim, n_embd]`.
    pub wq: W,
    /// `attn_q.bias`.
    pub bq: W,
    /// `attn_k.weight` `[n_head_kv·head_dim, n_embd]`.
    pub wk: W,
    /// `attn_k.bias`.
    pub bk: W,
    /// `attn_v.weight` `[n_head_kv·head_dim, n_embd]`.
    pub wv: W,
    /// `attn_v.bias`.
    pub bv: W,
    /// `attn_output.weight` `[n_embd, n_head·head_dim]`.
    pub wo: W,
    /// `attn_output.bias`.
    pub bo: W,
    /// `attn_sinks.weight` `[n_head]`.
    pub sinks: W,
    /// `post_attention_norm.weight` `[n_embd]`.
    pub ffn_norm: W,
    /// `ffn_gate_inp.weight` `[n_expert, n_embd]` (the router).
    pub router: W,
    /// `ffn_gate_inp.bias` `[n_expert]`.
    pub router_bias: W,
    /// `ffn_gate_exps.weight` `[n_expert, n_ff, n_embd]`.
    pub gate_exps: W,
    /// `ffn_gate_exps.bias` `[n_expert, n_ff]`.
    pub gate_bias: W,
    /// `ffn_up_exps.weight` `[n_expert, n_ff, n_embd]`.
    pub up_exps: W,
    /// `ffn_up_exps.bias` `[n_expert, n_ff]`.
    pub up_bias: W,
    /// `ffn_down_exps.weight` `[n_expert, n_embd, n_ff]`.
    pub down_exps: W,
    /// `ffn_down_exps.bias` `[n_expert, n_embd]`.
    pub down_bias: W,
}

/// All of a GPT-OSS model's weights.
pub struct GptOssWeights<W> {
    /// `token_embd.weight` `[vocab, n_embd]`.
    pub token_embd: W,
    /// `output_norm.weight` `[n_embd]`.
    pub output_norm: W,
    /// `output.weight` `[vocab, n_embd]` (GPT-OSS does not tie it to the embeddings).
    pub output: W,
    /// The blocks.
    pub layers: Vec<GptOssLayer<W>>,
}

/// Runs the batch `tokens` (laid out by `batch`) through the model, filling `cache`, and returns
/// the final normed hidden states (`tokens.len() × n_embd`), which the LM head
/// ([`GptOssWeights::output`]) turns into logits or greedy tokens.
pub fn forward<B: Backend>(
    backend: &B,
    cfg: &GptOssConfig,
    weights: &GptOssWeights<B::Weight>,
    cache: &mut B::Cache,
    tokens: &[u32],
    batch: &Batch,
) -> Result<B::Tensor> {
    let c = &cfg.base;
    let mut x = backend.embed(&weights.token_embd, tokens)?;
    for (il, layer) in weights.layers.iter().enumerate() {
        let h = backend.rms_norm(&x, &layer.attn_norm, c.rms_eps)?;
        let attn = self_attention(backend, cfg, layer, &h, cache, il, batch)?;
        backend.add(&mut x, &attn)?;
        let h = backend.rms_norm(&x, &layer.ffn_norm, c.rms_eps)?;
        let mut router_logits = backend.matmul_q(&layer.router, &h)?;
        backend.add_bias(&mut router_logits, &layer.router_bias)?;
        let experts = MoeExperts {
            gate: &layer.gate_exps,
            gate_bias: &layer.gate_bias,
            up: &layer.up_exps,
            up_bias: &layer.up_bias,
            down: &layer.down_exps,
            down_bias: &layer.down_bias,
        };
        let moe = backend.moe(&h, &router_logits, &experts, &cfg.moe_params())?;
        backend.add(&mut x, &moe)?;
    }
    backend.rms_norm(&x, &weights.output_norm, c.rms_eps)
}

fn self_attention<B: Backend>(
    backend: &B,
    cfg: &GptOssConfig,
    layer: &GptOssLayer<B::Weight>,
    h: &B::Tensor,
    cache: &mut B::Cache,
    il: usize,
    batch: &Batch,
) -> Result<B::Tensor> {
    let c = &cfg.base;
    let linear = |w: &B::Weight, b: &B::Weight| -> Result<B::Tensor> {
        let mut y = backend.matmul_q(w, h)?;
        backend.add_bias(&mut y, b)?;
        Ok(y)
    };
    let mut q = linear(&layer.wq, &layer.bq)?;
    let mut k = linear(&layer.wk, &layer.bk)?;
    let v = linear(&layer.wv, &layer.bv)?;
    backend.rope(&mut q, c.n_head, &batch.positions, &c.rope)?;
    backend.rope(&mut k, c.n_head_kv, &batch.positions, &c.rope)?;
    let out = backend.attention_with_sinks(&q, &k, &v, cache, il, batch, cfg.mask(il), &layer.sinks)?;
    let mut o = backend.matmul_q(&layer.wo, &out)?;
    backend.add_bias(&mut o, &layer.bo)?;
    Ok(o)
}
