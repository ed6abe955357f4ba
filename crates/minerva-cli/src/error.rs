//! The CLI's error: always names the file it concerns, prints as one line.

use std::path::PathBuf;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The model file could not be read or parsed.
    #[error("{path}: {source}")]
    Gguf {
        /// The model file.
        path: PathBuf,
        /// What is wrong with it.
        source: minerva_gguf::GgufError,
    },
    /// The SafeTensors checkpoint could not be read (its messages name the file).
    #[error("{0}")]
    Safetensors(#[from] minerva_safetensors::SafetensorsError),
    /// An output could not be written.
    #[error("{path}: {source}")]
    Output {
        /// The output file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The model could not be built or run.
    #[error("{path}: {source}")]
    Model {
        /// The model file.
        path: PathBuf,
        /// What went wrong.
        source: minerva_model::ModelError,
    },
    /// Tokenizing, templating or generating failed.
    #[error("{path}: {source}")]
    Generate {
        /// The model file.
        path: PathBuf,
        /// What went wrong.
        source: minerva_generate::GenerateError,
    },
    /// A command-line request that names no file (bad flag combination, --hf failures).
    #[error("{0}")]
    Usage(String),
    /// No GPU device could be opened (`--device wgpu`).
    #[error("--device wgpu: {0}")]
    Device(#[from] minerva_wgpu::WgpuError),
    /// `minerva convert` failed (its messages name the tensor, key or output).
    #[error("{path}: {source}")]
    Convert {
        /// The source model.
        path: PathBuf,
        /// What went wrong.
        source: Box<minerva_model::convert::ConvertError>,
    },
    /// A request the file cannot satisfy.
    #[error("{path}: {message}")]
    Request {
        /// The model file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl CliError {
    /// Wraps a parse error with the file it came from.
    pub fn gguf(path: &std::path::Path) -> impl FnOnce(minerva_gguf::GgufError) -> CliError + '_ {
        move |source| match source {
            // The reader's own I/O errors already name the path.
            minerva_gguf::GgufError::Io { path, source } => CliError::Output { path, source },
            source => CliError::Gguf { path: path.to_path_buf(), source },
        }
    }
}
