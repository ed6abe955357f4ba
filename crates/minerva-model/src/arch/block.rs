//! What the graphs share: the pre-norm residual loop and self-attention with RoPE.
//!
//! ```text
//! x = embed(tokens)
//! for each layer: x += attention(rms_norm(x)); x += ffn(rms_norm(x))
//! return rms_norm(x)
//! ```

use crate::backend::{Backend, Batch, Mask};
use crate::config::Config;
use crate::error::Result;

/// The weights the residual loop itself reads; the blocks' insides are the closures'.
pub(crate) struct Stack<'a, W, L> {
    /// `token_embd.weight`.
    pub token_embd: &'a W,
    /// `output_norm.weight`.
    pub output_norm: &'a W,
    /// The blocks.
    pub layers: &'a [L],
    /// Each block's `(attention norm, feed-forward norm)`.
    pub norms: fn(&L) -> (&W, &W),
}

/// Embeds `tokens`, runs every block as `x += attention(norm(x)); x += ffn(norm(x))` and returns
/// the final normed hidden states (`tokens.len() × n_embd`).
pub(crate) fn residual_stack<B: Backend, L>(
    backend: &B,
    stack: Stack<'_, B::Weight, L>,
    rms_eps: f32,
    tokens: &[u32],
    mut attention: impl FnMut(usize, &L, &B::Tensor) -> Result<B::Tensor>,
    mut ffn: impl FnMut(&L, &B::Tensor) -> Result<B::Tensor>,
) -> Result<B::Tensor> {
    let mut x = backend.embed(stack.token_embd, tokens)?;
    for (il, layer) in stack.layers.iter().enumerate() {
        let (attn_norm, ffn_norm) = (stack.norms)(layer);
        // Each normed `h` is dropped before `x` is written: a backend may compute `h` from `x`
        // only as a product reads it (the wgpu backend's deferred norm), and writing `x` while
        // `h` lives would make it keep a copy of `x`.
        let attn = attention(il, layer, &backend.rms_norm(&x, attn_norm, rms_eps)?)?;
        backend.add(&mut x, &attn)?;
        let out = ffn(layer, &backend.rms_norm(&x, ffn_norm, rms_eps)?)?;
        backend.add(&mut x, &out)?;
    }
    backend.rms_norm(&x, stack.output_norm, rms_eps)
}

/// A layer's attention projections, each with an optional bias, and optional per-head sinks.
pub(crate) struct AttentionWeights<'a, W> {
    pub wq: &'a W,
    pub wk: &'a W,
    pub wv: &'a W,
    pub wo: &'a W,
    /// `[bq, bk, bv, bo]`, each optional (GPT-OSS has all four, Qwen 2 the first three).
    pub biases: [Option<&'a W>; 4],
    /// One learned logit per query head (GPT-OSS).
    pub sinks: Option<&'a W>,
    /// `(q_norm, k_norm)`: RMS norms of each query and key head (`[head_dim]` each), applied
    /// between the projection and RoPE (Qwen 3, Gemma 3).
    pub qk_norm: Option<[&'a W; 2]>,
}

/// `o = attention(rope(norm_q(h·Wq + bq)), rope(norm_k(h·Wk + bk)), h·Wv + bv)·Wo + bo`, writing
/// the layer's keys and values into `cache`; the head norms only with `qk_norm`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn self_attention<B: Backend>(
    backend: &B,
    cfg: &Config,
    w: &AttentionWeights<'_, B::Weight>,
    h: &B::Tensor,
    cache: &mut B::Cache,
    il: usize,
    batch: &Batch,
    mask: Mask,
) -> Result<B::Tensor> {
    let [bq, bk, bv, bo] = w.biases;
    let [mut q, mut k, v] = backend.matmul_q_each_bias([w.wq, w.wk, w.wv], [bq, bk, bv], h)?;
    if let Some([q_norm, k_norm]) = w.qk_norm {
        backend.rms_norm_heads(&mut q, cfg.n_head, q_norm, cfg.rms_eps)?;
        backend.rms_norm_heads(&mut k, cfg.n_head_kv, k_norm, cfg.rms_eps)?;
    }
    backend.rope(&mut q, cfg.n_head, &batch.positions, &cfg.rope)?;
    backend.rope(&mut k, cfg.n_head_kv, &batch.positions, &cfg.rope)?;
    let out = match w.sinks {
        None => backend.attention(&q, &k, &v, cache, il, batch, mask)?,
        Some(sinks) => backend.attention_with_sinks(&q, &k, &v, cache, il, batch, mask, sinks)?,
    };
    backend.matmul_q_bias(w.wo, bo, &out)
}
