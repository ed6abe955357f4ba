//! [`Weights`]: the LLaMA family's tensors as backend handles, still in their stored dtype, and
//! their Hugging Face names.

use std::sync::Arc;

use minerva_gguf::Gguf;

use crate::arch::registry::LayerNames;
use crate::backend::Backend;
use crate::config::Config;
use crate::error::Result;
use crate::source::TensorSource;

/// GGUF block-tensor suffix → Hugging Face module path (LLaMA, Mistral).
pub(crate) const LLAMA_LAYER_NAMES: LayerNames = &[
    ("attn_norm.weight", "input_layernorm.weight"),
    ("attn_q.weight", "self_attn.q_proj.weight"),
    ("attn_k.weight", "self_attn.k_proj.weight"),
    ("attn_v.weight", "self_attn.v_proj.weight"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
    ("ffn_norm.weight", "post_attention_layernorm.weight"),
    ("ffn_gate.weight", "mlp.gate_proj.weight"),
    ("ffn_up.weight", "mlp.up_proj.weight"),
    ("ffn_down.weight", "mlp.down_proj.weight"),
];

/// Phi-3's: Q, K and V in one `qkv_proj` (llama.cpp's `attn_qkv`), gate and up in one
/// `gate_up_proj` (llama.cpp keeps it whole as `ffn_up`, twice the rows).
pub(crate) const PHI3_LAYER_NAMES: LayerNames = &[
    ("attn_norm.weight", "input_layernorm.weight"),
    ("attn_qkv.weight", "self_attn.qkv_proj.weight"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
    ("ffn_norm.weight", "post_attention_layernorm.weight"),
    ("ffn_up.weight", "mlp.gate_up_proj.weight"),
    ("ffn_down.weight", "mlp.down_proj.weight"),
];

/// One transformer block's weights (GGUF names `blk.{i}.*`; Hugging Face `model.layers.{i}.*`).
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

impl<W> Weights<W> {
    /// Makes a handle for every tensor the LLaMA graph uses from a GGUF file (see [`Weights::load`]).
    pub fn from_gguf<B, D>(backend: &B, g: &Arc<Gguf<D>>, cfg: &Config) -> Result<Weights<W>>
    where
        B: Backend<Weight = W>,
        D: minerva_gguf::Backing + Send + Sync + 'static,
    {
        Weights::load(backend, &TensorSource::from_gguf(g)?, cfg)
    }

    /// Makes a handle for every tensor the LLaMA graph uses, checking each shape against `cfg`.
    /// A missing tensor or a wrong shape is an error naming the tensor as stored.
    ///
    /// Fused projections — `attn_qkv` (Phi-3 `qkv_proj`, rows `[q | k | v]`) and a `2·n_ff`-row
    /// `ffn_up` with no `ffn_gate` (Phi-3 `gate_up_proj`, rows `[gate | up]`) — are split into
    /// row blocks of the same bytes. No `output.weight` means tied embeddings.
    pub fn load<B>(backend: &B, src: &TensorSource, cfg: &Config) -> Result<Weights<W>>
    where
        B: Backend<Weight = W>,
    {
        let (e, q, kv, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.n_ff);
        let output = match src.contains("output.weight") {
            true => Some(src.weight(backend, "output.weight", &[cfg.vocab, e])?),
            false => None,
        };
        let layers = (0..cfg.n_layer)
            .map(|i| {
                let name = |suffix: &str| format!("blk.{i}.{suffix}");
                let w = |suffix: &str, shape: &[usize]| src.weight(backend, &name(suffix), shape);
                let (wq, wk, wv) = if src.contains(&name("attn_qkv.weight")) {
                    let [wq, wk, wv] = parts(src.weight_rows(backend, &name("attn_qkv.weight"), &[q, kv, kv], e)?);
                    (wq, wk, wv)
                } else {
                    (w("attn_q.weight", &[q, e])?, w("attn_k.weight", &[kv, e])?, w("attn_v.weight", &[kv, e])?)
                };
                let fused_up = !src.contains(&name("ffn_gate.weight"))
                    && src.shape(&name("ffn_up.weight")) == Some(&[2 * ff, e][..]);
                let (w_gate, w_up) = if fused_up {
                    let [gate, up] = parts(src.weight_rows(backend, &name("ffn_up.weight"), &[ff, ff], e)?);
                    (gate, up)
                } else {
                    (w("ffn_gate.weight", &[ff, e])?, w("ffn_up.weight", &[ff, e])?)
                };
                Ok(LayerWeights {
                    attn_norm: w("attn_norm.weight", &[e])?,
                    wq,
                    wk,
                    wv,
                    wo: w("attn_output.weight", &[e, q])?,
                    ffn_norm: w("ffn_norm.weight", &[e])?,
                    w_gate,
                    w_up,
                    w_down: w("ffn_down.weight", &[e, ff])?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Weights {
            token_embd: src.weight(backend, "token_embd.weight", &[cfg.vocab, e])?,
            output_norm: src.weight(backend, "output_norm.weight", &[e])?,
            output,
            layers,
        })
    }
}

/// The row blocks of a fused matrix as an array (`weight_rows` returns one per requested block).
fn parts<W, const N: usize>(blocks: Vec<W>) -> [W; N] {
    match blocks.try_into() {
        Ok(array) => array,
        Err(_) => unreachable!("weight_rows returns exactly one weight per row count"),
    }
}
