//! [`Config`]: the hyper-parameters of a LLaMA-family model, read from GGUF `{arch}.*` metadata.

use minerva_gguf::Gguf;

use crate::error::{ModelError, Result};
use crate::rope;

/// How rotary embeddings pair up the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)`: llama.cpp's mode 0, used for `llama` GGUF files (whose
    /// converter permuted the Q/K rows so that this equals Hugging Face's `rotate_half`).
    Normal,
    /// Half-split pairs `(i, i + d/2)`: GPT-NeoX / Hugging Face `rotate_half` on unpermuted weights.
    NeoX,
}

/// Position scaling of the rotary frequencies (formulas in [`crate::rope`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RopeScaling {
    /// Positions used as they are.
    None,
    /// Positions divided by `factor` (`{arch}.rope.scaling.type = linear`).
    Linear {
        /// The scaling factor.
        factor: f32,
    },
    /// Per-frequency divisors (LLaMA-3 scaling), stored by llama.cpp's converter as the
    /// `rope_freqs.weight` tensor: θᵢ is divided by `factors[i]`.
    FreqFactors {
        /// One divisor per rotated pair (`rope_dim / 2`).
        factors: Vec<f32>,
    },
    /// Phi-3 long-rope: θᵢ divided by `short[i]`, or by `long[i]` in a forward step reaching
    /// beyond `original_context` positions; cos/sin multiplied by `attn_factor`. GGUF stores the
    /// factors as `rope_factors_short.weight` / `rope_factors_long.weight`.
    LongRope {
        /// Divisors for short contexts (`rope_dim / 2`).
        short: Vec<f32>,
        /// Divisors for long contexts (`rope_dim / 2`).
        long: Vec<f32>,
        /// The pre-training context (`original_max_position_embeddings`).
        original_context: usize,
        /// Multiplier of cos and sin (`attention_factor`).
        attn_factor: f32,
    },
    /// YaRN (GPT-OSS): per-frequency blend of interpolated (`θ / factor`) and extrapolated
    /// (`θ`) frequencies over a linear ramp between two correction dimensions, and cos/sin scaled
    /// by the attention factor `0.1·ln(factor) + 1`. See [`crate::yarn`].
    Yarn {
        /// Context extension factor (`rope_scaling.factor`).
        factor: f32,
        /// Trained context before extension (`original_max_position_embeddings`).
        original_context: usize,
        /// Rotations at which frequencies stop being extrapolated (`beta_fast`, 32).
        beta_fast: f32,
        /// Rotations below which frequencies are fully interpolated (`beta_slow`, 1).
        beta_slow: f32,
        /// Floor/ceil the correction dimensions (transformers' default when the key is absent;
        /// OpenAI's reference does not, and GPT-OSS's config says `false`).
        truncate: bool,
    },
}

/// Rotary position embedding parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    /// Pairing of dimensions.
    pub style: RopeStyle,
    /// Base of the geometric frequency series (`{arch}.rope.freq_base`, default 10000).
    pub base: f32,
    /// Rotated dimensions per head (`{arch}.rope.dimension_count`, default the head dim).
    pub dim: usize,
    /// Position scaling.
    pub scaling: RopeScaling,
}

/// The hyper-parameters of a LLaMA-family model.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `general.architecture` or `config.json` `model_type` (`llama`, `mistral`, `phi3`).
    pub arch: String,
    /// Transformer blocks (`{arch}.block_count`).
    pub n_layer: usize,
    /// Hidden size (`{arch}.embedding_length`).
    pub n_embd: usize,
    /// MLP inner size (`{arch}.feed_forward_length`).
    pub n_ff: usize,
    /// Query heads (`{arch}.attention.head_count`).
    pub n_head: usize,
    /// Key/value heads (`{arch}.attention.head_count_kv`, default `n_head`).
    pub n_head_kv: usize,
    /// Dimensions per head (`{arch}.attention.key_length`, default `n_embd / n_head`).
    pub head_dim: usize,
    /// RMS-norm epsilon (`{arch}.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// Trained context length (`{arch}.context_length`).
    pub context_length: usize,
    /// Vocabulary size (rows of `token_embd.weight`).
    pub vocab: usize,
    /// Rotary embedding.
    pub rope: RopeConfig,
    /// Attention window (`{arch}.attention.sliding_window`, `config.json` `sliding_window`), if
    /// the model uses one.
    pub sliding_window: Option<usize>,
}

/// Reads `{arch}.{suffix}` as a count; `None` if absent.
pub(crate) fn opt_count<D: AsRef<[u8]>>(g: &Gguf<D>, suffix: &str) -> Result<Option<usize>> {
    let key = g.arch_key(suffix)?;
    match g.get(&key) {
        None => Ok(None),
        Some(v) => match v.to_u64() {
            Some(n) => Ok(Some(n as usize)),
            None => {
                Err(ModelError::BadKey { key, message: format!("expected an integer, found {}", v.type_description()) })
            }
        },
    }
}

/// Reads `{arch}.{suffix}` as a non-zero count.
pub(crate) fn count<D: AsRef<[u8]>>(g: &Gguf<D>, suffix: &str) -> Result<usize> {
    let key = g.arch_key(suffix)?;
    match opt_count(g, suffix)? {
        None => Err(ModelError::MissingKey { key }),
        Some(0) => Err(ModelError::BadKey { key, message: "must not be 0".into() }),
        Some(n) => Ok(n),
    }
}

pub(crate) fn opt_f32<D: AsRef<[u8]>>(g: &Gguf<D>, suffix: &str) -> Result<Option<f32>> {
    let key = g.arch_key(suffix)?;
    match g.get(&key) {
        None => Ok(None),
        Some(v) => match v.to_f64() {
            Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x as f32)),
            _ => Err(ModelError::BadKey { key, message: format!("expected a positive number, found {v:?}") }),
        },
    }
}

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

/// The attention shape every architecture reads from GGUF the same way: `{arch}.attention.*`.
pub(crate) struct AttentionDims {
    pub(crate) n_head: usize,
    pub(crate) n_head_kv: usize,
    pub(crate) head_dim: usize,
    pub(crate) rms_eps: f32,
}

impl AttentionDims {
    /// Reads head counts, head size and the RMS-norm epsilon, checking that `head_count_kv`
    /// divides `head_count`, that `head_count` divides `n_embd` when no `key_length` is given, and
    /// that `value_length` (if any) equals the key length. Errors name the key.
    pub(crate) fn from_gguf<D: AsRef<[u8]>>(g: &Gguf<D>, n_embd: usize) -> Result<AttentionDims> {
        let arch = g.architecture()?;
        let key = |suffix: &str| format!("{arch}.{suffix}");
        let n_head = count(g, "attention.head_count")?;
        let n_head_kv = match opt_count(g, "attention.head_count_kv")? {
            None => n_head,
            Some(kv) if kv == 0 || !n_head.is_multiple_of(kv) => {
                return Err(ModelError::BadKey {
                    key: key("attention.head_count_kv"),
                    message: format!("{kv} does not divide {} = {n_head}", key("attention.head_count")),
                });
            }
            Some(kv) => kv,
        };
        let head_dim = match opt_count(g, "attention.key_length")? {
            Some(d) if d > 0 => d,
            _ if !n_embd.is_multiple_of(n_head) => {
                return Err(ModelError::BadKey {
                    key: key("attention.head_count"),
                    message: format!("{n_head} does not divide {} = {n_embd}", key("embedding_length")),
                });
            }
            _ => n_embd / n_head,
        };
        if let Some(v) = opt_count(g, "attention.value_length")?
            && v != head_dim
        {
            return Err(ModelError::BadKey {
                key: key("attention.value_length"),
                message: format!("{v} differs from the key length {head_dim}, which is not supported"),
            });
        }
        let rms_eps = opt_f32(g, "attention.layer_norm_rms_epsilon")?
            .ok_or_else(|| ModelError::MissingKey { key: key("attention.layer_norm_rms_epsilon") })?;
        Ok(AttentionDims { n_head, n_head_kv, head_dim, rms_eps })
    }
}

impl Config {
    /// Reads the configuration from a GGUF file's metadata and the shape of `token_embd.weight`.
    ///
    /// Errors name the missing or inconsistent key: `{arch}.attention.head_count` not dividing
    /// `{arch}.embedding_length` (when no `key_length` is given), `head_count_kv` not dividing
    /// `head_count`, an odd or oversized `rope.dimension_count`, an unknown `rope.scaling.type`.
    pub fn from_gguf<D: AsRef<[u8]>>(g: &Gguf<D>) -> Result<Config> {
        let arch = g.architecture()?.to_string();
        if !matches!(arch.as_str(), "llama" | "mistral" | "phi3") {
            return Err(ModelError::UnsupportedArch { arch });
        }
        let key = |suffix: &str| format!("{arch}.{suffix}");
        let n_layer = count(g, "block_count")?;
        let n_embd = count(g, "embedding_length")?;
        let n_ff = count(g, "feed_forward_length")?;
        let AttentionDims { n_head, n_head_kv, head_dim, rms_eps } = AttentionDims::from_gguf(g, n_embd)?;
        let rope_dim = opt_count(g, "rope.dimension_count")?.unwrap_or(head_dim);
        if rope_dim == 0 || !rope_dim.is_multiple_of(2) || rope_dim > head_dim {
            return Err(ModelError::BadKey {
                key: key("rope.dimension_count"),
                message: format!("{rope_dim} must be even, non-zero and at most the head dim {head_dim}"),
            });
        }
        let scaling_type = g.get(&key("rope.scaling.type")).map(|v| v.as_str().unwrap_or("(not a string)").to_string());
        let context_length = opt_count(g, "context_length")?.unwrap_or(4096).max(1);
        let scaling = if g.tensor_info("rope_freqs.weight").is_ok() {
            RopeScaling::FreqFactors { factors: rope_factor_tensor(g, "rope_freqs.weight", rope_dim)? }
        } else if g.tensor_info("rope_factors_long.weight").is_ok() {
            let original_context = count(g, "rope.scaling.original_context_length")?;
            let attn_factor = match opt_f32(g, "rope.scaling.attn_factor")? {
                Some(f) => f,
                None => {
                    rope::longrope_attention_factor(context_length as f32 / original_context as f32, original_context)
                }
            };
            RopeScaling::LongRope {
                short: rope_factor_tensor(g, "rope_factors_short.weight", rope_dim)?,
                long: rope_factor_tensor(g, "rope_factors_long.weight", rope_dim)?,
                original_context,
                attn_factor,
            }
        } else {
            match scaling_type.as_deref() {
                None | Some("none") => RopeScaling::None,
                Some("linear") => {
                    let factor = opt_f32(g, "rope.scaling.factor")?
                        .ok_or_else(|| ModelError::MissingKey { key: key("rope.scaling.factor") })?;
                    RopeScaling::Linear { factor }
                }
                Some(other) => {
                    return Err(ModelError::BadKey {
                        key: key("rope.scaling.type"),
                        message: format!("unsupported scaling {other:?} (supported: none, linear, rope_freqs.weight)"),
                    });
                }
            }
        };
        let rope = RopeConfig {
            // llama.cpp permutes Q/K of `llama` checkpoints only; Phi-3 keeps Hugging Face's order.
            style: if arch == "phi3" { RopeStyle::NeoX } else { RopeStyle::Normal },
            base: opt_f32(g, "rope.freq_base")?.unwrap_or(10000.0),
            dim: rope_dim,
            scaling,
        };
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
        let sliding_window = opt_count(g, "attention.sliding_window")?.filter(|&w| w > 0);
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

    /// Width of the concatenated query heads.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of the concatenated key (or value) heads.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}
