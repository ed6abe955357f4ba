//! The LLaMA graph (also Mistral: the same blocks, with a sliding attention window).
//!
//! As in Hugging Face's `modeling_llama.py`:
//! embed → for each layer (RMS norm, attention with RoPE, residual, RMS norm, SwiGLU MLP,
//! residual) → RMS norm → LM head.

use crate::backend::{Backend, Batch, Mask};
use crate::config::Config;
use crate::error::Result;
use crate::weights::{LayerWeights, Weights};

/// Runs the batch `tokens` (laid out by `batch`) through the model, filling `cache`, and returns
/// the final normed hidden states (`tokens.len() × n_embd`), which the LM head
/// ([`Weights::head`]) turns into logits or greedy tokens.
pub fn forward<B: Backend>(
    backend: &B,
    cfg: &Config,
    weights: &Weights<B::Weight>,
    cache: &mut B::Cache,
    tokens: &[u32],
    batch: &Batch,
) -> Result<B::Tensor> {
    let mask = cfg.sliding_window.map_or(Mask::Causal, Mask::SlidingWindow);
    let mut x = backend.embed(&weights.token_embd, tokens)?;
    for (il, layer) in weights.layers.iter().enumerate() {
        let h = backend.rms_norm(&x, &layer.attn_norm, cfg.rms_eps)?;
        let attn = self_attention(backend, cfg, layer, &h, cache, il, batch, mask)?;
        backend.add(&mut x, &attn)?;
        let h = backend.rms_norm(&x, &layer.ffn_norm, cfg.rms_eps)?;
        let mlp = mlp(backend, layer, &h)?;
        backend.add(&mut x, &mlp)?;
    }
    backend.rms_norm(&x, &weights.output_norm, cfg.rms_eps)
}

#[allow(clippy::too_many_arguments)]
fn self_attention<B: Backend>(
    backend: &B,
    cfg: &Config,
    layer: &LayerWeights<B::Weight>,
    h: &B::Tensor,
    cache: &mut B::Cache,
    il: usize,
    batch: &Batch,
    mask: Mask,
) -> Result<B::Tensor> {
    let mut q = backend.matmul_q(&layer.wq, h)?;
    let mut k = backend.matmul_q(&layer.wk, h)?;
    let v = backend.matmul_q(&layer.wv, h)?;
    backend.rope(&mut q, cfg.n_head, &batch.positions, &cfg.rope)?;
    backend.rope(&mut k, cfg.n_head_kv, &batch.positions, &cfg.rope)?;
    let out = backend.attention(&q, &k, &v, cache, il, batch, mask)?;
    backend.matmul_q(&layer.wo, &out)
}

fn mlp<B: Backend>(backend: &B, layer: &LayerWeights<B::Weight>, h: &B::Tensor) -> Result<B::Tensor> {
    let gate = backend.matmul_q(&layer.w_gate, h)?;
    let up = backend.matmul_q(&layer.w_up, h)?;
    let act = backend.swiglu(&gate, &up)?;
    backend.matmul_q(&layer.w_down, &act)
}
