//! The generation layer's error type.

/// Why a tokenizer, template or generation step failed. Messages name the key, file or token.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// A GGUF metadata key the tokenizer needs is missing or has the wrong type.
    #[error("tokenizer metadata: {0}")]
    Metadata(#[from] minerva_gguf::GgufError),
    /// `tokenizer.ggml.model` names a tokenizer kind we cannot build.
    #[error("unsupported tokenizer.ggml.model {0:?} (supported: gpt2, llama)")]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer whose split regex we do not know.
    #[error("unsupported tokenizer.ggml.pre {0:?} (supported: {list})", list = crate::tokenizer::SUPPORTED_PRE.join(", "))]
    UnsupportedPre(String),
    /// The vocabulary metadata is inconsistent (lengths, ids out of range, a malformed merge).
    #[error("tokenizer metadata: {0}")]
    Vocab(String),
    /// A `tokenizer.json` / `tokenizer_config.json` could not be read or parsed.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The `tokenizers` crate failed to encode or decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template did not compile or render.
    #[error("chat template: {0}")]
    Template(String),
    /// The model has no chat template.
    #[error("the model has no chat template (tokenizer.chat_template)")]
    NoTemplate,
    /// A request that cannot be served (prompt longer than the context, bad sampler option).
    #[error("{0}")]
    Request(String),
    /// A grammar or JSON schema for constrained decoding was refused (too large, malformed,
    /// unsupported, or satisfied by no output), or a step of it failed.
    #[error("grammar: {0}")]
    Grammar(String),
    /// The model failed during a forward step.
    #[error("model: {0}")]
    Model(#[from] minerva_model::ModelError),
}

/// `Result` with [`GenerateError`].
pub type Result<T> = std::result::Result<T, GenerateError>;

impl GenerateError {
    pub(crate) fn tok(e: impl std::fmt::Display) -> GenerateError {
        GenerateError::Tokenizer(e.to_string())
    }
}
