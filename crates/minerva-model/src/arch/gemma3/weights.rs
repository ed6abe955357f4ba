//! [`Gemma3Weights`]: Gemma 3's tensors as backend handles, and their Hugging Face names.
//!
//! Gemma's RMSNorm multiplies by `1 + w`. llama.cpp's converter stores `1 + w` in the GGUF file,
//! so its norm vectors are used as stored; a Hugging Face checkpoint stores `w`, so its norm
//! vectors (a few KiB) are read to f32 and shifted by one at load ([`ShiftedNorm`]).

use std::sync::Arc;

use minerva_core::DType;

use super::config::Gemma3Config;
use crate::arch::registry::LayerNames;
use crate::backend::{Backend, ByteSource, WeightSource};
use crate::error::{ModelError, Result};
use crate::source::{SourceFormat, TensorSource};

/// GGUF block-tensor suffix → Hugging Face module path.
pub(crate) const GEMMA3_LAYER_NAMES: LayerNames = &[
    ("attn_norm.weight", "input_layernorm.weight"),
    ("attn_q.weight", "self_attn.q_proj.weight"),
    ("attn_k.weight", "self_attn.k_proj.weight"),
    ("attn_v.weight", "self_attn.v_proj.weight"),
    ("attn_q_norm.weight", "self_attn.q_norm.weight"),
    ("attn_k_norm.weight", "self_attn.k_norm.weight"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
    ("post_attention_norm.weight", "post_attention_layernorm.weight"),
    ("ffn_norm.weight", "pre_feedforward_layernorm.weight"),
    ("ffn_gate.weight", "mlp.gate_proj.weight"),
    ("ffn_up.weight", "mlp.up_proj.weight"),
    ("ffn_down.weight", "mlp.down_proj.weight"),
    ("post_ffw_norm.weight", "post_feedforward_layernorm.weight"),
];

/// One Gemma 3 block's weights (GGUF names `blk.{i}.*`). Norm weights hold the factor the
/// normed values are multiplied by (`1 + w` of Hugging Face's parameter).
pub struct Gemma3Layer<W> {
    /// `attn_norm.weight` `[n_embd]`.
    pub attn_norm: W,
    /// `attn_q.weight` `[n_head·head_dim, n_embd]`.
    pub wq: W,
    /// `attn_k.weight` `[n_head_kv·head_dim, n_embd]`.
    pub wk: W,
    /// `attn_v.weight` `[n_head_kv·head_dim, n_embd]`.
    pub wv: W,
    /// `attn_q_norm.weight` `[head_dim]`, shared by every query head.
    pub q_norm: W,
    /// `attn_k_norm.weight` `[head_dim]`, shared by every key head.
    pub k_norm: W,
    /// `attn_output.weight` `[n_embd, n_head·head_dim]`.
    pub wo: W,
    /// `post_attention_norm.weight` `[n_embd]`: normalizes the attention's output.
    pub post_attn_norm: W,
    /// `ffn_norm.weight` `[n_embd]` (HF `pre_feedforward_layernorm`).
    pub ffn_norm: W,
    /// `ffn_gate.weight` `[n_ff, n_embd]`.
    pub w_gate: W,
    /// `ffn_up.weight` `[n_ff, n_embd]`.
    pub w_up: W,
    /// `ffn_down.weight` `[n_embd, n_ff]`.
    pub w_down: W,
    /// `post_ffw_norm.weight` `[n_embd]`: normalizes the MLP's output.
    pub post_ffn_norm: W,
}

/// All of a Gemma 3 model's weights.
pub struct Gemma3Weights<W> {
    /// `token_embd.weight` `[vocab, n_embd]`.
    pub token_embd: W,
    /// `output_norm.weight` `[n_embd]`.
    pub output_norm: W,
    /// `output.weight` when stored; Gemma 3 ties the head to the embeddings.
    pub output: Option<W>,
    /// The blocks.
    pub layers: Vec<Gemma3Layer<W>>,
}

impl<W> Gemma3Weights<W> {
    /// The LM head: `output.weight`, or the embeddings.
    pub fn head(&self) -> &W {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// Loads every tensor from `src` (GGUF or SafeTensors, llama.cpp names), checking shapes.
    pub(crate) fn load<B: Backend<Weight = W>>(backend: &B, src: &TensorSource, cfg: &Gemma3Config) -> Result<Self> {
        let c = &cfg.base;
        let (e, q, kv, ff, d) = (c.n_embd, c.q_dim(), c.kv_dim(), c.n_ff, c.head_dim);
        let norm = |name: &str, len: usize| norm_weight(backend, src, name, len);
        let output = match src.contains("output.weight") {
            true => Some(src.weight(backend, "output.weight", &[c.vocab, e])?),
            false => None,
        };
        let layers = (0..c.n_layer)
            .map(|i| {
                let name = |suffix: &str| format!("blk.{i}.{suffix}");
                let w = |suffix: &str, shape: &[usize]| src.weight(backend, &name(suffix), shape);
                Ok(Gemma3Layer {
                    attn_norm: norm(&name("attn_norm.weight"), e)?,
                    wq: w("attn_q.weight", &[q, e])?,
                    wk: w("attn_k.weight", &[kv, e])?,
                    wv: w("attn_v.weight", &[kv, e])?,
                    q_norm: norm(&name("attn_q_norm.weight"), d)?,
                    k_norm: norm(&name("attn_k_norm.weight"), d)?,
                    wo: w("attn_output.weight", &[e, q])?,
                    post_attn_norm: norm(&name("post_attention_norm.weight"), e)?,
                    ffn_norm: norm(&name("ffn_norm.weight"), e)?,
                    w_gate: w("ffn_gate.weight", &[ff, e])?,
                    w_up: w("ffn_up.weight", &[ff, e])?,
                    w_down: w("ffn_down.weight", &[e, ff])?,
                    post_ffn_norm: norm(&name("post_ffw_norm.weight"), e)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Gemma3Weights {
            token_embd: src.weight(backend, "token_embd.weight", &[c.vocab, e])?,
            output_norm: norm("output_norm.weight", e)?,
            output,
            layers,
        })
    }
}

/// A norm vector's factor `1 + w` as f32 bytes, owned (a Hugging Face norm shifted at load).
struct ShiftedNorm(Vec<u8>);

impl ByteSource for ShiftedNorm {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The norm vector `name` (`[len]`): as stored in GGUF (llama.cpp's converter stored `1 + w`),
/// `1 + w` from a Hugging Face checkpoint.
fn norm_weight<B: Backend>(backend: &B, src: &TensorSource, name: &str, len: usize) -> Result<B::Weight> {
    let stored = src.require(name, &[len])?;
    if src.format() == SourceFormat::Gguf {
        return backend.weight(stored.clone());
    }
    let bytes = stored.file.bytes().get(stored.range.clone()).ok_or_else(|| ModelError::BadTensor {
        tensor: stored.name.clone(),
        message: "byte range outside its file".into(),
    })?;
    let mut values = vec![0.0f32; len];
    minerva_quant::dequantize(stored.dtype, bytes, &mut values)?;
    let shifted: Vec<u8> = values.iter().flat_map(|w| (1.0 + w).to_le_bytes()).collect();
    let size = shifted.len();
    backend.weight(WeightSource {
        file: Arc::new(ShiftedNorm(shifted)),
        name: stored.name.clone(),
        dtype: DType::F32,
        shape: vec![len],
        range: 0..size,
    })
}
