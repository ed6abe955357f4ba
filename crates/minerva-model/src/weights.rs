//! [`Weights`]: the model's tensors as backend handles, still in their stored dtype.

use std::sync::Arc;

use minerva_gguf::Gguf;

use crate::backend::{Backend, ByteSource, WeightSource};
use crate::config::Config;
use crate::error::{ModelError, Result};

/// One transformer block's weights (GGUF names `blk.{i}.*`).
pub struct LayerWeights<W> {
    /// `attn_norm.weight`: `[n_embd]`.
    pub attn_norm: W,
    /// `attn_q.weight`: `[n_head·head_dim, n_embd]`.
    pub wq: W,
    /// `attn_k.weight`: `[n_head_kv·head_dim, n_embd]`.
    pub wk: W,
    /// `attn_v.weight`: `[n_head_kv·head_dim, n_embd]`.
    pub wv: W,
    /// `attn_output.weight`: `[n_embd, n_head·head_dim]`.
    pub wo: W,
    /// `ffn_norm.weight`: `[n_embd]`.
    pub ffn_norm: W,
    /// `ffn_gate.weight`: `[n_ff, n_embd]`.
    pub w_gate: W,
    /// `ffn_up.weight`: `[n_ff, n_embd]`.
    pub w_up: W,
    /// `ffn_down.weight`: `[n_embd, n_ff]`.
    pub w_down: W,
}

/// All of a LLaMA-family model's weights.
pub struct Weights<W> {
    /// `token_embd.weight`: `[vocab, n_embd]`.
    pub token_embd: W,
    /// `output_norm.weight`: `[n_embd]`.
    pub output_norm: W,
    /// `output.weight` (`[vocab, n_embd]`), or `None` when the embeddings are tied.
    pub output: Option<W>,
    /// The blocks.
    pub layers: Vec<LayerWeights<W>>,
}

impl<W> Weights<W> {
    /// The LM head: `output.weight`, or the token embeddings when tied.
    pub fn head(&self) -> &W {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}

/// Looks up `name`, checks its shape, and hands its bytes to the backend.
fn load<B: Backend, D>(backend: &B, g: &Arc<Gguf<D>>, name: &str, expected: &[usize]) -> Result<B::Weight>
where
    D: AsRef<[u8]> + Send + Sync + 'static,
{
    let info = g.tensor_info(name).map_err(|_| ModelError::MissingTensor { tensor: name.to_string() })?;
    if info.shape != expected {
        return Err(ModelError::TensorShape {
            tensor: name.to_string(),
            expected: expected.to_vec(),
            actual: info.shape.clone(),
        });
    }
    let file: Arc<dyn ByteSource> = g.clone();
    backend.weight(WeightSource {
        file,
        name: name.to_string(),
        dtype: info.dtype,
        shape: info.shape.clone(),
        range: info.range.clone(),
    })
}

impl<W> Weights<W> {
    /// Makes a handle for every tensor the LLaMA graph uses, checking each shape against `cfg`.
    /// A missing tensor or a wrong shape is an error naming the tensor.
    pub fn from_gguf<B, D>(backend: &B, g: &Arc<Gguf<D>>, cfg: &Config) -> Result<Weights<W>>
    where
        B: Backend<Weight = W>,
        D: AsRef<[u8]> + Send + Sync + 'static,
    {
        let (e, q, kv, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.n_ff);
        let output = match g.tensor_info("output.weight") {
            Ok(_) => Some(load(backend, g, "output.weight", &[cfg.vocab, e])?),
            Err(_) => None,
        };
        let layers = (0..cfg.n_layer)
            .map(|i| {
                let w = |suffix: &str, shape: &[usize]| load(backend, g, &format!("blk.{i}.{suffix}"), shape);
                Ok(LayerWeights {
                    attn_norm: w("attn_norm.weight", &[e])?,
                    wq: w("attn_q.weight", &[q, e])?,
                    wk: w("attn_k.weight", &[kv, e])?,
                    wv: w("attn_v.weight", &[kv, e])?,
                    wo: w("attn_output.weight", &[e, q])?,
                    ffn_norm: w("ffn_norm.weight", &[e])?,
                    w_gate: w("ffn_gate.weight", &[ff, e])?,
                    w_up: w("ffn_up.weight", &[ff, e])?,
                    w_down: w("ffn_down.weight", &[e, ff])?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Weights {
            token_embd: load(backend, g, "token_embd.weight", &[cfg.vocab, e])?,
            output_norm: load(backend, g, "output_norm.weight", &[e])?,
            output,
            layers,
        })
    }
}
