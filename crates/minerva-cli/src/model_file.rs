//! Opening a model path in whichever format it is.

use std::path::Path;

use minerva_gguf::{Gguf, Mmap};
use minerva_model::SourceFormat;
use minerva_safetensors::Checkpoint;

use crate::error::CliError;

/// A model file or checkpoint directory, opened (headers parsed, data mapped, nothing read).
pub enum ModelFile {
    /// A GGUF file.
    Gguf(Gguf<Mmap>),
    /// A SafeTensors file, shard index or model directory.
    Safetensors(Box<Checkpoint>),
}

impl ModelFile {
    /// Opens `path` in the format [`SourceFormat::detect`] gives it (a file that is neither is
    /// reported as not GGUF).
    pub fn open(path: &Path) -> Result<ModelFile, CliError> {
        match SourceFormat::detect(path) {
            SourceFormat::SafeTensors => Ok(ModelFile::Safetensors(Box::new(Checkpoint::open(path)?))),
            SourceFormat::Gguf => Gguf::open(path).map(ModelFile::Gguf).map_err(CliError::gguf(path)),
        }
    }
}
