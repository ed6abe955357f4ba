//! The GPT-OSS graph, as OpenAI's reference computes it (`gpt_oss/torch/model.py`; transformers'
//! `modeling_gpt_oss.py` agrees to 3e-6 on the fixtures):
//!
//! ```text
//! embed → for each layer:
//!     h = rms_norm(x)
//!     q, k, v = h·Wqᵀ + bq, h·Wkᵀ + bk, h·Wvᵀ + bv        GQA, biases on every projection
//!     rope(q), rope(k)                                    NeoX halves, YaRN frequencies
//!     a = softmax([q·kᵀ/√d, sink_h]) · v                  learned sink logit per head; layers
//!                                                         0, 2, 4, … see the last `window` positions
//!     x += a·Woᵀ + bo
//!     h = rms_norm(x)
//!     x += moe(h, router = h·Wrᵀ + br)                    top-k, softmax over the k, OpenAI SwiGLU
//! → rms_norm → LM head
//! ```
//!
//! [`GptOssConfig`] comes from GGUF `gpt-oss.*` keys (llama.cpp's names) or from a Hugging Face
//! `config.json` (`config.rs`); [`GptOssWeights`] from GGUF, HF SafeTensors (MXFP4
//! `_blocks`/`_scales`) or an MLX checkpoint (`weights.rs`).

pub(crate) mod config;
pub(crate) mod weights;

pub use config::{GptOssConfig, SWIGLU_ALPHA, SWIGLU_LIMIT};

use super::registry::{ArchSpec, ChatFormat, Graph};

/// GPT-OSS (20B, 120B): the experts' names are its converter's (`convert/source.rs`).
pub const GPT_OSS: ArchSpec = ArchSpec {
    name: "gpt-oss",
    gguf_names: &["gpt-oss"],
    hf_model_types: &["gpt_oss"],
    gguf_output: "gpt-oss",
    hf_output: "gpt_oss",
    hf_class: "GptOssForCausalLM",
    graph: Graph::GptOss,
    layer_names: &[weights::GPT_OSS_LAYER_NAMES],
    permutes_qk: false,
    norm_plus_one: false,
    hf_sliding_window: true,
    qk_norm: false,
    chat: ChatFormat::Harmony,
    synthetic_presets: &["20b", "tiny"],
    int8_activations: super::registry::Int8Activations::Nowhere,
    llama_cpp_70b: super::registry::never_70b,
};

use super::block::{self, AttentionWeights, Stack};
use crate::backend::{Backend, Batch, MoeExperts};
use crate::error::Result;

/// One GPT-OSS block's weights (GGUF names `blk.{i}.*`).
pub struct GptOssLayer<W> {
    /// `attn_norm.weight` `[n_embd]`.
    pub attn_norm: W,
    /// `attn_q.weight` `[n_head·head_dim, n_embd]`.
    pub wq: W,
    /// `attn_q.bias`.
    pub bq: W,
    /// `attn_k.weight` `[n_head_kv·head_dim, n_embd]`.
    pub wk: W,
    /// `attn_k.bias`.
    pub bk: W,
    /// `attn_v.weight` `[n_head_kv·head_dim, n_embd]`.
    pub wv: W,
    /// `attn_v.bias`.
    pub bv: W,
    /// `attn_output.weight` `[n_embd, n_head·head_dim]`.
    pub wo: W,
    /// `attn_output.bias`.
    pub bo: W,
    /// `attn_sinks.weight` `[n_head]`.
    pub sinks: W,
    /// `post_attention_norm.weight` `[n_embd]`.
    pub ffn_norm: W,
    /// `ffn_gate_inp.weight` `[n_expert, n_embd]` (the router).
    pub router: W,
    /// `ffn_gate_inp.bias` `[n_expert]`.
    pub router_bias: W,
    /// `ffn_gate_exps.weight` `[n_expert, n_ff, n_embd]`.
    pub gate_exps: W,
    /// `ffn_gate_exps.bias` `[n_expert, n_ff]`.
    pub gate_bias: W,
    /// `ffn_up_exps.weight` `[n_expert, n_ff, n_embd]`.
    pub up_exps: W,
    /// `ffn_up_exps.bias` `[n_expert, n_ff]`.
    pub up_bias: W,
    /// `ffn_down_exps.weight` `[n_expert, n_embd, n_ff]`.
    pub down_exps: W,
    /// `ffn_down_exps.bias` `[n_expert, n_embd]`.
    pub down_bias: W,
}

/// All of a GPT-OSS model's weights.
pub struct GptOssWeights<W> {
    /// `token_embd.weight` `[vocab, n_embd]`.
    pub token_embd: W,
    /// `output_norm.weight` `[n_embd]`.
    pub output_norm: W,
    /// `output.weight` `[vocab, n_embd]` (GPT-OSS does not tie it to the embeddings).
    pub output: W,
    /// The blocks.
    pub layers: Vec<GptOssLayer<W>>,
}

/// Runs the batch `tokens` (laid out by `batch`) through the model, filling `cache`, and returns
/// the final normed hidden states (`tokens.len() × n_embd`), which the LM head
/// ([`GptOssWeights::output`]) turns into logits or greedy tokens.
pub fn forward<B: Backend>(
    backend: &B,
    cfg: &GptOssConfig,
    weights: &GptOssWeights<B::Weight>,
    cache: &mut B::Cache,
    tokens: &[u32],
    batch: &Batch,
) -> Result<B::Tensor> {
    let stack = Stack {
        token_embd: &weights.token_embd,
        output_norm: &weights.output_norm,
        layers: &weights.layers,
        norms: |l| (&l.attn_norm, &l.ffn_norm),
    };
    block::residual_stack(
        backend,
        stack,
        cfg.base.rms_eps,
        tokens,
        |il, layer, h| {
            let w = AttentionWeights {
                wq: &layer.wq,
                wk: &layer.wk,
                wv: &layer.wv,
                wo: &layer.wo,
                biases: [Some(&layer.bq), Some(&layer.bk), Some(&layer.bv), Some(&layer.bo)],
                sinks: Some(&layer.sinks),
                qk_norm: None,
            };
            block::self_attention(backend, &cfg.base, &w, h, cache, il, batch, cfg.mask(il))
        },
        |layer, h| {
            let router_logits = backend.matmul_q_bias(&layer.router, Some(&layer.router_bias), h)?;
            let experts = MoeExperts {
                gate: &layer.gate_exps,
                gate_bias: &layer.gate_bias,
                up: &layer.up_exps,
                up_bias: &layer.up_bias,
                down: &layer.down_exps,
                down_bias: &layer.down_bias,
            };
            backend.moe(h, &router_logits, &experts, &cfg.moe_params())
        },
    )
}
