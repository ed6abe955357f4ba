//! Qwen 2 and Qwen 3 (`qwen2`, `qwen3`): one folder, because the two differ only inside the
//! attention block — Qwen 2 adds biases to the Q/K/V projections, Qwen 3 instead RMS-normalises
//! every query and key head before RoPE (and states `head_dim`, which need not be
//! `hidden_size / heads`). Everything else is the LLaMA block, whose weight loader and SwiGLU MLP
//! this graph reuses.
//!
//! As in Hugging Face's `modeling_qwen2.py` / `modeling_qwen3.py` and llama.cpp's
//! `qwen2.cpp` / `qwen3.cpp`:
//!
//! ```text
//! embed → for each layer:
//!     h = rms_norm(x)
//!     q, k, v = h·Wqᵀ (+ bq), h·Wkᵀ (+ bk), h·Wvᵀ (+ bv)     biases: Qwen 2
//!     q, k = rms_norm_heads(q), rms_norm_heads(k)          QK-norm: Qwen 3
//!     x += attention(rope(q), rope(k), v)·Woᵀ              NeoX RoPE, GQA, causal
//!     x += mlp(rms_norm(x))                                SwiGLU
//! → rms_norm → LM head (tied to the embeddings when `output.weight` is absent)
//! ```

pub(crate) mod config;
pub(crate) mod weights;

pub use weights::{QwenLayerWeights, QwenWeights};

use super::llama::weights::LLAMA_LAYER_NAMES;
use super::registry::{ArchSpec, ChatFormat, Graph};
use weights::QWEN_LAYER_NAMES;

/// Qwen 2 / 2.5: Q/K/V biases.
pub const QWEN2: ArchSpec = ArchSpec {
    name: "qwen2",
    gguf_names: &["qwen2"],
    hf_model_types: &["qwen2"],
    gguf_output: "qwen2",
    hf_output: "qwen2",
    hf_class: "Qwen2ForCausalLM",
    graph: Graph::Qwen,
    layer_names: &[QWEN_LAYER_NAMES, LLAMA_LAYER_NAMES],
    permutes_qk: false,
    norm_plus_one: false,
    hf_sliding_window: false,
    qk_norm: false,
    chat: ChatFormat::Qwen2ChatMl,
    synthetic_presets: &[],
    int8_activations: super::registry::Int8Activations::Nowhere,
    // `llama.cpp` (`src/models/qwen2.cpp`): 80 layers are 70B.
    llama_cpp_70b: |c| c.n_layer == 80,
};

/// Qwen 3 (dense): per-head Q/K norms, an explicit head dim.
pub const QWEN3: ArchSpec = ArchSpec {
    name: "qwen3",
    gguf_names: &["qwen3"],
    hf_model_types: &["qwen3"],
    gguf_output: "qwen3",
    hf_output: "qwen3",
    hf_class: "Qwen3ForCausalLM",
    qk_norm: true,
    chat: ChatFormat::Qwen3ChatMl,
    llama_cpp_70b: super::registry::never_70b,
    ..QWEN2
};

use super::block::{self, AttentionWeights, Stack};
use crate::backend::{Backend, Batch, Mask};
use crate::config::Config;
use crate::error::Result;

/// Runs the batch `tokens` (laid out by `batch`) through the model, filling `cache`, and returns
/// the final normed hidden states (`tokens.len() × n_embd`).
pub fn forward<B: Backend>(
    backend: &B,
    cfg: &Config,
    weights: &QwenWeights<B::Weight>,
    cache: &mut B::Cache,
    tokens: &[u32],
    batch: &Batch,
) -> Result<B::Tensor> {
    let base = &weights.base;
    let stack = Stack {
        token_embd: &base.token_embd,
        output_norm: &base.output_norm,
        layers: &base.layers,
        norms: |l| (&l.attn_norm, &l.ffn_norm),
    };
    block::residual_stack(
        backend,
        stack,
        cfg.rms_eps,
        tokens,
        |il, layer, h| {
            let extra = &weights.layers[il];
            let w = AttentionWeights {
                wq: &layer.wq,
                wk: &layer.wk,
                wv: &layer.wv,
                wo: &layer.wo,
                biases: extra.biases.each_ref().map(Option::as_ref),
                sinks: None,
                qk_norm: extra.qk_norm.as_ref().map(|n| n.each_ref()),
            };
            block::self_attention(backend, cfg, &w, h, cache, il, batch, Mask::Causal)
        },
        |layer, h| {
            let [gate, up] = backend.matmul_q_each([&layer.w_gate, &layer.w_up], h)?;
            backend.matmul_q(&layer.w_down, &backend.swiglu(&gate, &up)?)
        },
    )
}
