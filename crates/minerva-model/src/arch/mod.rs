//! Architectures, one folder each (config from GGUF and `config.json`, weight names, forward),
//! and the table that describes them.
//!
//! ```text
//! arch/
//!   registry.rs   the table: one ArchSpec row per architecture (names, graph, tensor names,
//!                 converter conventions, chat format, presets), exported by each folder
//!   mod.rs        ModelWeights (one variant per graph), load (by the table's graph), forward, head
//!   block.rs      what the graphs share: the residual loop and self-attention
//!   llama/        LLaMA, Mistral, Phi-3: config.rs, weights.rs (HF names), mod.rs (forward)
//!   gpt_oss/      GPT-OSS: config.rs, weights.rs (GGUF / HF MXFP4 / MLX), mod.rs (forward)
//!   gemma3/       Gemma 3 (text): config.rs (local/global layers), weights.rs, mod.rs (forward)
//!   qwen/         Qwen 2 (QKV biases) and Qwen 3 (QK-norm): config.rs, weights.rs, mod.rs
//! ```
//!
//! Adding an architecture: a folder with the same three parts and its row in
//! [`registry::ARCHITECTURES`]; a new graph also needs a `ModelWeights` variant and one arm in each
//! `match` below. Shared hyper-parameter keys are read by [`crate::Config`]; tensors are looked up
//! by llama.cpp name through [`TensorSource`], which asks the row for their Hugging Face names.

mod block;
pub mod gemma3;
pub mod gpt_oss;
pub mod llama;
pub mod qwen;
pub mod registry;

use std::sync::Arc;

use minerva_gguf::Gguf;
use minerva_safetensors::Checkpoint;

use crate::backend::{Backend, Batch};
use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::source::TensorSource;
use gemma3::{Gemma3Config, Gemma3Weights};
use gpt_oss::{GptOssConfig, GptOssWeights};
use llama::Weights;
use qwen::QwenWeights;
pub use registry::{ARCHITECTURES, ArchSpec, ChatFormat, Graph, Int8Activations};

/// The weights of one of the architectures, which also picks the graph.
pub enum ModelWeights<W> {
    /// LLaMA / Mistral / Phi-3 (`arch/llama/`).
    Llama(Weights<W>),
    /// GPT-OSS (`arch/gpt_oss/`), with its MoE hyper-parameters.
    GptOss(Box<(GptOssConfig, GptOssWeights<W>)>),
    /// Gemma 3 (`arch/gemma3/`), with its local/global layer pattern.
    Gemma3(Box<(Gemma3Config, Gemma3Weights<W>)>),
    /// Qwen 2 / Qwen 3 (`arch/qwen/`).
    Qwen(QwenWeights<W>),
}

/// An architecture's hyper-parameters, as its graph's reader reads them from a GGUF file's
/// metadata or a checkpoint's `config.json`: the one place that picks the reader per graph
/// (loading and `convert` both ask it).
#[derive(Clone, Debug)]
pub(crate) enum GraphConfig {
    /// LLaMA / Mistral / Phi-3.
    Llama(Config),
    /// Qwen 2 / Qwen 3.
    Qwen(Config),
    /// Gemma 3, with its layer pattern and RoPEs.
    Gemma3(Box<Gemma3Config>),
    /// GPT-OSS, with its mixture's hyper-parameters.
    GptOss(Box<GptOssConfig>),
}

impl GraphConfig {
    /// The hyper-parameters of `spec`'s graph from a GGUF file's metadata.
    pub(crate) fn from_gguf<D: AsRef<[u8]>>(spec: &ArchSpec, gguf: &Gguf<D>) -> Result<GraphConfig> {
        Ok(match spec.graph {
            Graph::Llama => GraphConfig::Llama(Config::from_gguf(gguf)?),
            Graph::Qwen => GraphConfig::Qwen(qwen::config::from_gguf(gguf)?),
            Graph::Gemma3 => GraphConfig::Gemma3(Box::new(Gemma3Config::from_gguf(gguf)?)),
            Graph::GptOss => GraphConfig::GptOss(Box::new(GptOssConfig::from_gguf(gguf)?)),
        })
    }

    /// The hyper-parameters of `spec`'s graph from a checkpoint's `config.json`.
    pub(crate) fn from_hf(spec: &ArchSpec, json: &serde_json::Value) -> Result<GraphConfig> {
        Ok(match spec.graph {
            Graph::Llama => GraphConfig::Llama(Config::from_hf_config(json)?),
            Graph::Qwen => GraphConfig::Qwen(qwen::config::from_hf_config(json)?),
            Graph::Gemma3 => GraphConfig::Gemma3(Box::new(Gemma3Config::from_hf_config(json)?)),
            Graph::GptOss => GraphConfig::GptOss(Box::new(GptOssConfig::from_hf_config(json)?)),
        })
    }
}

/// Reads the config and loads every weight of a GGUF file.
pub(crate) fn load_gguf<B, D>(gguf: &Arc<Gguf<D>>, backend: &B) -> Result<(Config, ModelWeights<B::Weight>)>
where
    B: Backend,
    D: minerva_gguf::Backing + Send + Sync + 'static,
{
    let source = TensorSource::from_gguf(gguf)?;
    let arch = gguf.architecture()?;
    let spec = registry::for_gguf(arch).ok_or_else(|| ModelError::UnsupportedArch { arch: arch.to_string() })?;
    Ok(match GraphConfig::from_gguf(spec, gguf)? {
        GraphConfig::Gemma3(cfg) => {
            let weights = Gemma3Weights::load(backend, &source, &cfg)?;
            (cfg.base.clone(), ModelWeights::Gemma3(Box::new((*cfg, weights))))
        }
        GraphConfig::GptOss(cfg) => {
            let weights = GptOssWeights::load(backend, &source, &cfg)?;
            (cfg.base.clone(), ModelWeights::GptOss(Box::new((*cfg, weights))))
        }
        GraphConfig::Qwen(config) => {
            let weights = QwenWeights::load(backend, &source, &config)?;
            (config, ModelWeights::Qwen(weights))
        }
        GraphConfig::Llama(config) => {
            let weights = Weights::load(backend, &source, &config)?;
            (config, ModelWeights::Llama(weights))
        }
    })
}

/// Reads `config.json` and loads every weight of a SafeTensors checkpoint.
pub(crate) fn load_checkpoint<B: Backend>(
    checkpoint: &Arc<Checkpoint>,
    backend: &B,
) -> Result<(Config, ModelWeights<B::Weight>)> {
    let json = checkpoint.config().ok_or_else(|| ModelError::MissingConfig {
        path: checkpoint.dir().map_or_else(|| "checkpoint".into(), |d| d.display().to_string()),
    })?;
    let model_type = json.get("model_type").and_then(serde_json::Value::as_str);
    let spec = model_type
        .and_then(registry::for_hf)
        .ok_or_else(|| ModelError::UnsupportedArch { arch: model_type.unwrap_or("(no model_type)").to_string() })?;
    Ok(match GraphConfig::from_hf(spec, json)? {
        GraphConfig::Gemma3(cfg) => {
            let source = TensorSource::from_checkpoint(checkpoint, spec.name)?;
            let weights = Gemma3Weights::load(backend, &source, &cfg)?;
            (cfg.base.clone(), ModelWeights::Gemma3(Box::new((*cfg, weights))))
        }
        GraphConfig::GptOss(cfg) => {
            let weights = GptOssWeights::from_safetensors(backend, checkpoint, &cfg)?;
            (cfg.base.clone(), ModelWeights::GptOss(Box::new((*cfg, weights))))
        }
        GraphConfig::Qwen(config) => {
            let source = checkpoint_source(checkpoint, json, &config)?;
            let weights = QwenWeights::load(backend, &source, &config)?;
            (config, ModelWeights::Qwen(weights))
        }
        GraphConfig::Llama(config) => {
            let source = checkpoint_source(checkpoint, json, &config)?;
            let weights = Weights::load(backend, &source, &config)?;
            (config, ModelWeights::Llama(weights))
        }
    })
}

/// A checkpoint's tensors under llama.cpp names; an untied one (`tie_word_embeddings` false or
/// absent) must have its LM head.
fn checkpoint_source(checkpoint: &Arc<Checkpoint>, json: &serde_json::Value, config: &Config) -> Result<TensorSource> {
    let source = TensorSource::from_checkpoint(checkpoint, &config.arch)?;
    let tied = json.get("tie_word_embeddings").and_then(serde_json::Value::as_bool).unwrap_or(false);
    if !tied && !source.contains("output.weight") {
        return Err(ModelError::MissingTensor { tensor: source.stored_name("output.weight") });
    }
    Ok(source)
}

/// Runs the batch through the architecture's graph: the final normed hidden states.
pub(crate) fn forward<B: Backend>(
    backend: &B,
    config: &Config,
    weights: &ModelWeights<B::Weight>,
    cache: &mut B::Cache,
    tokens: &[u32],
    batch: &Batch,
) -> Result<B::Tensor> {
    match weights {
        ModelWeights::Llama(w) => llama::forward(backend, config, w, cache, tokens, batch),
        ModelWeights::GptOss(m) => gpt_oss::forward(backend, &m.0, &m.1, cache, tokens, batch),
        ModelWeights::Gemma3(m) => gemma3::forward(backend, &m.0, &m.1, cache, tokens, batch),
        ModelWeights::Qwen(w) => qwen::forward(backend, config, w, cache, tokens, batch),
    }
}

/// The LM head.
pub(crate) fn head<W>(weights: &ModelWeights<W>) -> &W {
    match weights {
        ModelWeights::Llama(w) => w.head(),
        ModelWeights::GptOss(m) => &m.1.output,
        ModelWeights::Gemma3(m) => m.1.head(),
        ModelWeights::Qwen(w) => w.head(),
    }
}
