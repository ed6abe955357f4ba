//! [`Config`]: the hyper-parameters every architecture shares, read once for both file formats.
//!
//! A hyper-parameter has one [`Key`]: its GGUF suffix (`block_count`, read as `{arch}.block_count`)
//! and its `config.json` name (`num_hidden_layers`). [`Config::read`] reads the shared ones through
//! [`ConfigKeys`], which GGUF metadata ([`crate::gguf_keys::GgufKeys`]) and a `config.json`
//! ([`crate::hf_config::HfKeys`]) implement, so the checks and their messages exist once; an
//! architecture adds its feed-forward width and RoPE.

use crate::error::{ModelError, Result};
use crate::rope::RopeConfig;

/// The hyper-parameters of a transformer.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `general.architecture` or `config.json` `model_type` (`llama`, `mistral`, `phi3`,
    /// `qwen2`, `qwen3`, `gpt-oss`).
    pub arch: String,
    /// Transformer blocks (`{arch}.block_count`).
    pub n_layer: usize,
    /// Hidden size (`{arch}.embedding_length`).
    pub n_embd: usize,
    /// MLP inner size (`{arch}.feed_forward_length`; for GPT-OSS the expert width).
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
    /// How embeddings pool the hidden states (`{arch}.pooling_type`), when the file says.
    pub pooling: Option<crate::Pooling>,
}

impl Config {
    /// Width of the concatenated query heads.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of the concatenated key (or value) heads.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}

/// A hyper-parameter's name in each format; `""` where a format has no such key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Key {
    /// The GGUF suffix after `{arch}.`.
    pub gguf: &'static str,
    /// The `config.json` name.
    pub hf: &'static str,
}

impl Key {
    pub(crate) const N_LAYER: Key = Key { gguf: "block_count", hf: "num_hidden_layers" };
    pub(crate) const N_EMBD: Key = Key { gguf: "embedding_length", hf: "hidden_size" };
    pub(crate) const N_FF: Key = Key { gguf: "feed_forward_length", hf: "intermediate_size" };
    pub(crate) const N_HEAD: Key = Key { gguf: "attention.head_count", hf: "num_attention_heads" };
    pub(crate) const N_HEAD_KV: Key = Key { gguf: "attention.head_count_kv", hf: "num_key_value_heads" };
    pub(crate) const HEAD_DIM: Key = Key { gguf: "attention.key_length", hf: "head_dim" };
    pub(crate) const VALUE_DIM: Key = Key { gguf: "attention.value_length", hf: "" };
    pub(crate) const RMS_EPS: Key = Key { gguf: "attention.layer_norm_rms_epsilon", hf: "rms_norm_eps" };
    pub(crate) const CONTEXT: Key = Key { gguf: "context_length", hf: "max_position_embeddings" };
    pub(crate) const SLIDING_WINDOW: Key = Key { gguf: "attention.sliding_window", hf: "sliding_window" };
    pub(crate) const POOLING: Key = Key { gguf: "pooling_type", hf: "" };
}

/// Typed reads of hyper-parameters from one file format; errors name the key as stored.
pub(crate) trait ConfigKeys {
    /// The key's full name as messages print it (`llama.block_count`, `config.json:hidden_size`).
    fn name(&self, key: Key) -> String;
    /// A count, `None` when absent (or when the format has no such key).
    fn opt_count(&self, key: Key) -> Result<Option<usize>>;
    /// A positive finite number, `None` when absent.
    fn opt_f32(&self, key: Key) -> Result<Option<f32>>;
    /// The vocabulary size (GGUF: rows of `token_embd.weight`, checked against `n_embd`;
    /// `config.json`: `vocab_size`).
    fn vocab(&self, n_embd: usize) -> Result<usize>;

    /// A non-zero count that must be present.
    fn count(&self, key: Key) -> Result<usize> {
        match self.opt_count(key)? {
            None => Err(ModelError::MissingKey { key: self.name(key) }),
            Some(0) => Err(ModelError::BadKey { key: self.name(key), message: "must not be 0".into() }),
            Some(n) => Ok(n),
        }
    }

    /// A positive number that must be present.
    fn f32(&self, key: Key) -> Result<f32> {
        self.opt_f32(key)?.ok_or_else(|| ModelError::MissingKey { key: self.name(key) })
    }

    /// An error about `key`'s value.
    fn bad(&self, key: Key, message: String) -> ModelError {
        ModelError::BadKey { key: self.name(key), message }
    }
}

/// What an architecture assumes when a format leaves a shared key out.
pub(crate) struct Defaults {
    /// Trained context when `context_length` / `max_position_embeddings` is absent.
    pub context_length: usize,
    /// RMS-norm epsilon when absent (`None`: the key is required).
    pub rms_eps: Option<f32>,
}

impl Config {
    /// Reads the hyper-parameters every architecture stores under the same keys; `n_ff` is the
    /// architecture's (its key differs), `rope(head_dim, context_length)` its rotary embedding.
    ///
    /// Checks, naming the key: `head_count_kv` divides `head_count`; without `key_length`,
    /// `head_count` divides `embedding_length`; a `value_length` equals the key length.
    pub(crate) fn read(
        keys: &dyn ConfigKeys,
        arch: &str,
        n_ff: usize,
        defaults: Defaults,
        rope: impl FnOnce(usize, usize) -> Result<RopeConfig>,
    ) -> Result<Config> {
        let n_layer = keys.count(Key::N_LAYER)?;
        let n_embd = keys.count(Key::N_EMBD)?;
        let n_head = keys.count(Key::N_HEAD)?;
        let n_head_kv = keys.opt_count(Key::N_HEAD_KV)?.unwrap_or(n_head);
        if n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
            let message = format!("{n_head_kv} does not divide {} = {n_head}", keys.name(Key::N_HEAD));
            return Err(keys.bad(Key::N_HEAD_KV, message));
        }
        let head_dim = match keys.opt_count(Key::HEAD_DIM)? {
            Some(d) if d > 0 => d,
            _ if !n_embd.is_multiple_of(n_head) => {
                let message = format!("{n_head} does not divide {} = {n_embd}", keys.name(Key::N_EMBD));
                return Err(keys.bad(Key::N_HEAD, message));
            }
            _ => n_embd / n_head,
        };
        if let Some(v) = keys.opt_count(Key::VALUE_DIM)?
            && v != head_dim
        {
            let message = format!("{v} differs from the key length {head_dim}, which is not supported");
            return Err(keys.bad(Key::VALUE_DIM, message));
        }
        let rms_eps = match (keys.opt_f32(Key::RMS_EPS)?, defaults.rms_eps) {
            (Some(eps), _) | (None, Some(eps)) => eps,
            (None, None) => return Err(ModelError::MissingKey { key: keys.name(Key::RMS_EPS) }),
        };
        let context_length = keys.opt_count(Key::CONTEXT)?.unwrap_or(defaults.context_length).max(1);
        let rope = rope(head_dim, context_length)?;
        let vocab = keys.vocab(n_embd)?;
        let sliding_window = keys.opt_count(Key::SLIDING_WINDOW)?.filter(|&w| w > 0);
        let pooling = keys.opt_count(Key::POOLING)?.and_then(crate::Pooling::from_gguf_code);
        Ok(Config {
            arch: arch.to_string(),
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
            pooling,
        })
    }
}
