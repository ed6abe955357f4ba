//! The LLaMA graph (also Mistral: the same blocks, with a sliding attention window; and Phi-3,
//! whose fused projections are split at load).
//!
//! As in Hugging Face's `modeling_llama.py`:
//! embed → for each layer (RMS norm, attention with RoPE, residual, RMS norm, SwiGLU MLP,
//! residual) → RMS norm → LM head.
//!
//! `config.rs` reads [`Config`] from GGUF or `config.json`; `weights.rs` loads [`Weights`] and
//! names them for Hugging Face checkpoints.

pub(crate) mod config;
pub(crate) mod weights;

pub use weights::{LayerWeights, Weights};

use super::registry::{ArchSpec, ChatFormat, Graph};
use weights::{LLAMA_LAYER_NAMES, PHI3_LAYER_NAMES};

/// LLaMA (1–3.x, SmolLM, …).
pub const LLAMA: ArchSpec = ArchSpec {
    name: "llama",
    gguf_names: &["llama"],
    hf_model_types: &["llama"],
    gguf_output: "llama",
    hf_output: "llama",
    hf_class: "LlamaForCausalLM",
    graph: Graph::Llama,
    layer_names: &[LLAMA_LAYER_NAMES],
    permutes_qk: true,
    norm_plus_one: false,
    hf_sliding_window: false,
    qk_norm: false,
    chat: ChatFormat::Stored,
    synthetic_presets: &["8b", "1b", "135m", "tiny"],
    int8_activations: super::registry::Int8Activations::Everywhere,
    // `llama.cpp`: 80 layers are 65B with as many KV heads as heads, 70B with fewer.
    llama_cpp_70b: |c| c.n_layer == 80 && c.n_head != c.n_head_kv,
};

/// Mistral: LLaMA blocks with a sliding window; llama.cpp's converter writes it as `llama`.
pub const MISTRAL: ArchSpec = ArchSpec {
    name: "mistral",
    gguf_names: &["mistral"],
    hf_model_types: &["mistral"],
    gguf_output: "llama",
    hf_output: "mistral",
    hf_class: "MistralForCausalLM",
    hf_sliding_window: true,
    synthetic_presets: &[],
    int8_activations: super::registry::Int8Activations::Everywhere,
    // Written as `llama`, so llama.cpp sizes it as LLaMA.
    llama_cpp_70b: LLAMA.llama_cpp_70b,
    ..LLAMA
};

/// Phi-3: fused Q/K/V and gate/up projections, Q/K not permuted in GGUF.
pub const PHI3: ArchSpec = ArchSpec {
    name: "phi3",
    gguf_names: &["phi3"],
    hf_model_types: &["phi3"],
    gguf_output: "phi3",
    hf_output: "phi3",
    hf_class: "Phi3ForCausalLM",
    layer_names: &[PHI3_LAYER_NAMES],
    permutes_qk: false,
    hf_sliding_window: true,
    synthetic_presets: &[],
    int8_activations: super::registry::Int8Activations::Everywhere,
    llama_cpp_70b: super::registry::never_70b,
    ..LLAMA
};

use super::block::{self, AttentionWeights, Stack};
use crate::backend::{Backend, Batch, Mask};
use crate::config::Config;
use crate::error::Result;

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
    let stack = Stack {
        token_embd: &weights.token_embd,
        output_norm: &weights.output_norm,
        layers: &weights.layers,
        norms: |l| (&l.attn_norm, &l.ffn_norm),
    };
    block::residual_stack(
        backend,
        stack,
        cfg.rms_eps,
        tokens,
        |il, layer, h| {
            let w = AttentionWeights {
                wq: &layer.wq,
                wk: &layer.wk,
                wv: &layer.wv,
                wo: &layer.wo,
                biases: [None; 4],
                sinks: None,
                qk_norm: None,
            };
            block::self_attention(backend, cfg, &w, h, cache, il, batch, mask)
        },
        |layer, h| mlp(backend, layer, h),
    )
}

fn mlp<B: Backend>(backend: &B, layer: &LayerWeights<B::Weight>, h: &B::Tensor) -> Result<B::Tensor> {
    let [gate, up] = backend.matmul_q_each([&layer.w_gate, &layer.w_up], h)?;
    let act = backend.swiglu(&gate, &up)?;
    backend.matmul_q(&layer.w_down, &act)
}
