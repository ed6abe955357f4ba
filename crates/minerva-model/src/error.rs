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
    #[error("unsupported architecture {arch:?} (supported: llama, mistral, phi3, gpt-oss)")]
    UnsupportedArch {
        /// The architecture as stored.
        arch: String,
    },
    /// A required metadata key is absent.
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
    /// A `config.json` entry is missing or unusable.
    #[error("config.json key {key}: {message}")]
    BadConfig {
        /// The key, e.g. `rope_scaling.factor`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// A forward request the model or cache cannot satisfy.
    #[error("invalid request: {0}")]
    Request(String),
}

impl From<minerva_safetensors::SafetensorsError> for ModelError {
    fn from(e: minerva_safetensors::SafetensorsError) -> ModelError {
        ModelError::Safetensors(Box::new(e))
    }
}

/// The crate's result type.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
