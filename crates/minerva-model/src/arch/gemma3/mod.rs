//! The Gemma 3 graph (text), as transformers' `modeling_gemma3.py` computes it (llama.cpp's
//! `src/models/gemma3.cpp` agrees):
//!
//! ```text
//! x = embed(tokens) · √n_embd
//! for each layer:
//!     h = rms_norm(x)                                      every norm multiplies by (1 + w)
//!     q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ                        GQA, no biases
//!     q, k = rms_norm per head (q_norm, k_norm)            QK-norm over head_dim
//!     rope(q), rope(k)                                     NeoX; local layers base 10⁴, global 10⁶
//!     a = softmax(q·kᵀ / √query_pre_attn_scalar) · v       local layers: the last `window` positions
//!     x += rms_norm(a·Woᵀ)                                 post-attention norm
//!     h = rms_norm(x)
//!     x += rms_norm(down(gelu_tanh(h·Wgᵀ) ⊙ h·Wuᵀ))        GeGLU, post-feed-forward norm
//! → rms_norm → LM head (tied to the embeddings)
//! ```
//!
//! [`Gemma3Config`] comes from GGUF `gemma3.*` keys or a Hugging Face `config.json`
//! (`config.rs`); [`Gemma3Weights`] from either format (`weights.rs`, which also settles the
//! `1 + w` norm convention of each).

pub(crate) mod config;
pub(crate) mod weights;

pub use config::Gemma3Config;
pub use weights::{Gemma3Layer, Gemma3Weights};

use super::registry::{ArchSpec, ChatFormat, Graph};

/// Gemma 3 (text; the multimodal config's `text_config` too).
pub const GEMMA3: ArchSpec = ArchSpec {
    name: "gemma3",
    gguf_names: &["gemma3"],
    hf_model_types: &["gemma3_text", "gemma3"],
    gguf_output: "gemma3",
    hf_output: "gemma3_text",
    hf_class: "Gemma3ForCausalLM",
    graph: Graph::Gemma3,
    layer_names: &[weights::GEMMA3_LAYER_NAMES],
    permutes_qk: false,
    norm_plus_one: true,
    hf_sliding_window: true,
    qk_norm: true,
    chat: ChatFormat::Gemma,
    synthetic_presets: &[],
    int8_activations: super::registry::Int8Activations::Everywhere,
    llama_cpp_70b: super::registry::never_70b,
};

use crate::backend::{Backend, Batch};
use crate::error::Result;

/// Runs the batch `tokens` (laid out by `batch`) through the model, filling `cache`, and returns
/// the final normed hidden states (`tokens.len() × n_embd`), which the LM head
/// ([`Gemma3Weights::head`]) turns into logits or greedy tokens.
pub fn forward<B: Backend>(
    backend: &B,
    cfg: &Gemma3Config,
    weights: &Gemma3Weights<B::Weight>,
    cache: &mut B::Cache,
    tokens: &[u32],
    batch: &Batch,
) -> Result<B::Tensor> {
    let eps = cfg.base.rms_eps;
    let mut x = backend.embed(&weights.token_embd, tokens)?;
    backend.scale(&mut x, cfg.embed_scale)?;
    for (il, layer) in weights.layers.iter().enumerate() {
        // Each normed `h` is dropped before `x` is written (see `block::residual_stack`).
        let attn = attention(backend, cfg, layer, &backend.rms_norm(&x, &layer.attn_norm, eps)?, cache, il, batch)?;
        let attn = backend.rms_norm(&attn, &layer.post_attn_norm, eps)?;
        backend.add(&mut x, &attn)?;
        let [gate, up] =
            backend.matmul_q_each([&layer.w_gate, &layer.w_up], &backend.rms_norm(&x, &layer.ffn_norm, eps)?)?;
        let ffn = backend.matmul_q(&layer.w_down, &backend.geglu(&gate, &up)?)?;
        let ffn = backend.rms_norm(&ffn, &layer.post_ffn_norm, eps)?;
        backend.add(&mut x, &ffn)?;
    }
    backend.rms_norm(&x, &weights.output_norm, eps)
}

/// Self-attention of layer `il` with QK-norm, the layer's RoPE and mask, writing its keys and
/// values into `cache`; returns `a·Woᵀ`.
fn attention<B: Backend>(
    backend: &B,
    cfg: &Gemma3Config,
    layer: &Gemma3Layer<B::Weight>,
    h: &B::Tensor,
    cache: &mut B::Cache,
    il: usize,
    batch: &Batch,
) -> Result<B::Tensor> {
    let c = &cfg.base;
    let [mut q, mut k, v] = backend.matmul_q_each([&layer.wq, &layer.wk, &layer.wv], h)?;
    backend.rms_norm_heads(&mut q, c.n_head, &layer.q_norm, c.rms_eps)?;
    backend.rms_norm_heads(&mut k, c.n_head_kv, &layer.k_norm, c.rms_eps)?;
    let rope = cfg.rope(il);
    backend.rope(&mut q, c.n_head, &batch.positions, rope)?;
    backend.rope(&mut k, c.n_head_kv, &batch.positions, rope)?;
    // The attention op divides by √head_dim; Gemma divides by √query_pre_attn_scalar.
    if cfg.query_scale != 1.0 {
        backend.scale(&mut q, cfg.query_scale)?;
    }
    let out = backend.attention(&q, &k, &v, cache, il, batch, cfg.mask(il))?;
    backend.matmul_q(&layer.wo, &out)
}
