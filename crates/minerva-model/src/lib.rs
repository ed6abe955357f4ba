//! Minerva's model graphs over a coarse backend interface, and the CPU backend.
//!
//! ```text
//! GGUF (mmap)         ─► Config::from_gguf       {arch}.* metadata     (errors name the key)
//! SafeTensors (mmap)  ─► Config::from_hf_config  config.json
//!                     ─► TensorSource            llama.cpp names (→ HF names for SafeTensors)
//!                     ─► Weights::load           one Backend::Weight per tensor, still quantized
//!                     ─► arch::llama::forward    embed → blocks (norm, attn, +, norm, MLP, +) → norm → head
//!                                                calls only Backend ops on Backend::Tensor handles
//! ```
//!
//! * [`arch`] — one folder per architecture (config from GGUF and `config.json`, weight names,
//!   graph) and the registry that picks one for a file.
//! * [`Config`] — the shared hyper-parameters, read once for both formats (`config.rs`); RoPE
//!   configuration and scaling formulas in [`rope`].
//! * [`checks`] — the operand checks and the RoPE table every backend shares.
//! * [`TensorSource`] — GGUF or SafeTensors tensors under llama.cpp names; fused Phi-3 projections
//!   split into row blocks of the same bytes.
//! * [`GptOssConfig`] adds GPT-OSS's MoE, from `gpt-oss.*` keys or a `config.json`.
//! * Qwen 2 / Qwen 3 ([`arch::qwen`]): LLaMA blocks plus Q/K/V biases (Qwen 2) or per-head
//!   Q/K RMS norms (Qwen 3, `Backend::rms_norm_heads`), from GGUF or Hugging Face SafeTensors.
//! * GPT-OSS ([`arch::gpt_oss`]): MXFP4 experts (`Backend::moe`), attention sinks, biases, the
//!   sliding window on alternating layers and YaRN RoPE, from GGUF, Hugging Face or MLX
//!   SafeTensors ([`Model::load`] takes a file or a directory).
//! * [`Weights`] — handles of the stored (quantized) tensors; the CPU backend's handles are byte
//!   ranges of the memory map, so resident memory is the file plus the KV cache and activations.
//! * [`Backend`] — coarse ops: `embed`, `rms_norm`, `rms_norm_heads` (QK-norm), `matmul_q`, `rope`
//!   (normal / NeoX, linear or per-frequency scaling), `attention` (writes the layer's K/V into the cache, causal or sliding
//!   window), `add`, `swiglu`, and `logits`, the only op that reads back to the host. A GPU
//!   backend can record every op of a step into one submission.
//! * [`CpuBackend`] — minerva-quant's fused quantized kernels (activations quantized on the fly:
//!   i16 for the 32-value block formats, Q8_K for the K-quants), a `ComputePool` over rows/heads; KV cache
//!   in f32 or f16, `[slot][layer][kv_head][pos][head_dim]`.
//! * [`Model::forward`] — a batch of [`SequenceInput`]s (tokens, start position, cache slot): a
//!   whole prompt is one pass (matmul over all its tokens), a decode step one token (matvec).
//!
//! RoPE: llama.cpp's converter permutes the Q/K rows of `llama` checkpoints, so GGUF weights use
//! the *normal* (adjacent-pair) rotation, which then equals Hugging Face's `rotate_half` (NeoX) on
//! the original weights that SafeTensors holds. `tests/llama_reference.rs` checks the logits
//! against transformers; `tests/tiny_models.rs` checks one model in both formats.
//!
//! ```no_run
//! use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};
//!
//! let model = Model::load("models/SmolLM2-135M-Instruct.Q4_1.gguf", CpuBackend::new(None)?)?;
//! let mut cache = model.new_cache(1, 256)?;
//! let prompt = [1u32, 2, 3];
//! let logits = model.forward(&mut cache, &[SequenceInput { tokens: &prompt, start_pos: 0, slot: 0 }], LogitsFor::Last)?;
//! assert_eq!(logits.row(0).len(), model.config.vocab);
//! # Ok::<(), minerva_model::ModelError>(())
//! ```

pub mod arch;
pub mod backend;
pub mod checks;
pub mod config;
pub mod convert;
pub mod cpu;
pub mod embedding;
mod error;
mod gguf_keys;
mod hf_config;
pub mod kv_blocks;
mod model;
mod owned;
pub mod rope;
pub mod source;
pub mod synthetic;

pub mod yarn;

pub use arch::ModelWeights;
pub use arch::gemma3::{Gemma3Config, Gemma3Layer, Gemma3Weights};
pub use arch::gpt_oss::{GptOssConfig, GptOssLayer, GptOssWeights};
pub use arch::llama::{LayerWeights, Weights};
pub use backend::{
    Backend, Batch, ByteSource, CacheShape, DeviceSampling, MAX_DEVICE_TOP_K, Mask, MlxAffineSource, MoeExperts,
    MoeParams, SeqSpan, WeightSource, argmax,
};
pub use config::Config;
pub use cpu::{CpuBackend, CpuCache, CpuTensor, CpuWeight, Repack, RepackMemory};
pub use embedding::Pooling;
pub use error::{ModelError, Result};
pub use model::{Hidden, Logits, LogitsFor, Model, SequenceInput};
pub use rope::{RopeConfig, RopeScaling, RopeStyle};
pub use source::{SourceFormat, TensorSource};

/// The README's example, compiled (and, unless marked `no_run`, run) as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
