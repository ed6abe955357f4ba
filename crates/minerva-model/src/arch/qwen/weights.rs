//! [`QwenWeights`]: the LLaMA tensors (loaded by [`llama::Weights::load`]) plus what Qwen adds to
//! each block: the Q/K/V projection biases of Qwen 2 and the per-head Q/K RMS norms of Qwen 3.

use crate::arch::llama::Weights;
use crate::arch::registry::LayerNames;
use crate::backend::Backend;
use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::source::TensorSource;

/// GGUF block-tensor suffix → Hugging Face module path, for the tensors LLaMA does not have.
pub(crate) const QWEN_LAYER_NAMES: LayerNames = &[
    ("attn_q.bias", "self_attn.q_proj.bias"),
    ("attn_k.bias", "self_attn.k_proj.bias"),
    ("attn_v.bias", "self_attn.v_proj.bias"),
    ("attn_output.bias", "self_attn.o_proj.bias"),
    ("attn_q_norm.weight", "self_attn.q_norm.weight"),
    ("attn_k_norm.weight", "self_attn.k_norm.weight"),
];

/// What a Qwen block adds to a LLaMA block.
pub struct QwenLayerWeights<W> {
    /// `attn_{q,k,v,output}.bias`, each present or not: Qwen 2 has the first three (`[q_dim]`,
    /// `[kv_dim]`, `[kv_dim]`); Qwen 3 none unless its `attention_bias` is on (all four).
    pub biases: [Option<W>; 4],
    /// `(attn_q_norm.weight, attn_k_norm.weight)`, `[head_dim]` each: Qwen 3.
    pub qk_norm: Option<[W; 2]>,
}

/// All of a Qwen model's weights.
pub struct QwenWeights<W> {
    /// Embeddings, norms, projections, MLP and the head (tied when `output.weight` is absent).
    pub base: Weights<W>,
    /// Each block's biases and head norms.
    pub layers: Vec<QwenLayerWeights<W>>,
}

impl<W> QwenWeights<W> {
    /// Makes a handle for every tensor the Qwen graph uses, checking each shape against `cfg`:
    /// Qwen 2 must have the Q/K/V biases, Qwen 3 the Q/K norms. A missing tensor or a wrong shape
    /// is an error naming the tensor as stored.
    pub fn load<B>(backend: &B, src: &TensorSource, cfg: &Config) -> Result<QwenWeights<W>>
    where
        B: Backend<Weight = W>,
    {
        let base = Weights::load(backend, src, cfg)?;
        let qwen3 = crate::arch::registry::find(&cfg.arch).is_some_and(|a| a.qk_norm);
        let layers = (0..cfg.n_layer)
            .map(|i| {
                let name = |suffix: &str| format!("blk.{i}.{suffix}");
                let bias = |suffix: &str, len: usize, required: bool| -> Result<Option<W>> {
                    let name = name(suffix);
                    match (src.contains(&name), required) {
                        (true, _) => Ok(Some(src.weight(backend, &name, &[len])?)),
                        (false, true) => Err(ModelError::MissingTensor { tensor: src.stored_name(&name) }),
                        (false, false) => Ok(None),
                    }
                };
                let biases = [
                    bias("attn_q.bias", cfg.q_dim(), !qwen3)?,
                    bias("attn_k.bias", cfg.kv_dim(), !qwen3)?,
                    bias("attn_v.bias", cfg.kv_dim(), !qwen3)?,
                    bias("attn_output.bias", cfg.n_embd, false)?,
                ];
                let qk_norm = match qwen3 {
                    true => Some([
                        src.weight(backend, &name("attn_q_norm.weight"), &[cfg.head_dim])?,
                        src.weight(backend, &name("attn_k_norm.weight"), &[cfg.head_dim])?,
                    ]),
                    false => None,
                };
                Ok(QwenLayerWeights { biases, qk_norm })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(QwenWeights { base, layers })
    }

    /// The LM head: `output.weight`, or the token embeddings when tied.
    pub fn head(&self) -> &W {
        self.base.head()
    }
}
