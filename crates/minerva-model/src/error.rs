//! The crate's one error type.

use minerva_core::DType;

/// Everything that can go wrong building or running a model.
///
/// Variants name the metadata key or tensor they concern, so the message alone locates the problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The file could not be parsed, or a key has the wrong type.
    #[error(transparent)]
    Gguf(#[from] minerva_gguf::GgufError),
    /// A SafeTensors checkpoint could not be opened or parsed (boxed: its paths and JSON errors
    /// would make every `Result` of this crate large).
    #[error(transparent)]
    Safetensors(Box<minerva_safetensors::SafetensorsError>),
    /// `general.architecture` names a family this crate has no graph for.
    #[error("unsupported architecture {arch:?} (supported: {})", crate::arch::registry::supported_names())]
    UnsupportedArch {
        /// The architecture as stored.
        arch: String,
    },
    /// A required metadata key is absent (GGUF `{arch}.*`, or `config.json:<key>`).
    #[error("missing metadata key {key}")]
    MissingKey {
        /// The full key, e.g. `llama.block_count`.
        key: String,
    },
    /// A metadata value is present but unusable (zero, not dividing, unknown name, …).
    #[error("metadata key {key}: {message}")]
    BadKey {
        /// The full key.
        key: String,
        /// What is wrong with its value.
        message: String,
    },
    /// A required tensor is absent.
    #[error("missing tensor {tensor}")]
    MissingTensor {
        /// The tensor name, e.g. `blk.3.attn_q.weight`.
        tensor: String,
    },
    /// A tensor's shape does not match the configuration.
    #[error("tensor {tensor}: shape {actual:?} does not match the config, expected {expected:?}")]
    TensorShape {
        /// The tensor name.
        tensor: String,
        /// The shape the config implies (numpy order).
        expected: Vec<usize>,
        /// The stored shape (numpy order).
        actual: Vec<usize>,
    },
    /// A tensor's values are unusable (e.g. a non-positive RoPE factor).
    #[error("tensor {tensor}: {message}")]
    BadTensor {
        /// The tensor name.
        tensor: String,
        /// What is wrong with it.
        message: String,
    },
    /// A SafeTensors checkpoint without the `config.json` that describes it.
    #[error("{path}: no config.json beside the SafeTensors weights")]
    MissingConfig {
        /// The checkpoint path as given.
        path: String,
    },
    /// A tensor's dtype has no kernel for the op it is used in.
    #[error("tensor {tensor}: dtype {dtype} is not supported for {usage}")]
    TensorDType {
        /// The tensor name.
        tensor: String,
        /// Its dtype.
        dtype: DType,
        /// What it is used for.
        usage: &'static str,
    },
    /// A kernel refused its operands.
    #[error(transparent)]
    Quant(#[from] minerva_quant::QuantError),
    /// The backend does not implement an op the architecture needs.
    #[error("operation {op} is not supported by this backend")]
    UnsupportedOp {
        /// The op's name, e.g. `moe`.
        op: &'static str,
    },
    /// A forward batch the model or its cache cannot run: a sequence without tokens, a slot twice,
    /// a token outside the vocabulary, a position beyond the cache.
    #[error("invalid batch: {message}")]
    BadBatch {
        /// What is wrong with it.
        message: String,
    },
    /// An op's operands do not fit together (a graph or backend bug, not bad input).
    #[error("{op}: {message}")]
    BadOperands {
        /// The op, e.g. `attention`.
        op: &'static str,
        /// What does not fit.
        message: String,
    },
    /// A stored tensor is encoded in a way the loader cannot use where it is used.
    #[error("tensor {tensor}: expected {expected}, found {found}")]
    TensorEncoding {
        /// The tensor name.
        tensor: String,
        /// The encoding wanted, e.g. `a plain float tensor`.
        expected: &'static str,
        /// The encoding stored.
        found: String,
    },
    /// The machine cannot provide what was asked: threads, memory for a KV cache, a GPU binding
    /// large enough.
    #[error("{message}")]
    Resource {
        /// What could not be had.
        message: String,
    },
    /// A KV-cache element type the backend does not store.
    #[error("KV cache dtype {dtype} is not supported (f32, f16, q8_0)")]
    KvDType {
        /// The dtype asked for.
        dtype: DType,
    },
    /// The backend's device failed (GPU validation, out of memory, read-back).
    #[error("{message}")]
    Device {
        /// The device's message.
        message: String,
    },
}

impl From<minerva_safetensors::SafetensorsError> for ModelError {
    fn from(e: minerva_safetensors::SafetensorsError) -> ModelError {
        ModelError::Safetensors(Box::new(e))
    }
}

/// The crate's result type.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
