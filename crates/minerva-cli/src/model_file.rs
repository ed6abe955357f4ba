//! Opening a model path in whichever format it is.

use std::io::Read;
use std::path::Path;

use minerva_gguf::{Gguf, Mmap};
use minerva_safetensors::Checkpoint;

use crate::error::CliError;

/// A model file or checkpoint directory, opened (headers parsed, data mapped, nothing read).
pub enum ModelFile {
    /// A GGUF file.
    Gguf(Gguf<Mmap>),
    /// A SafeTensors file, shard index or model directory.
    Safetensors(Checkpoint),
}

impl ModelFile {
    /// Opens `path`: a directory, a `.safetensors` file or a `*.index.json` is SafeTensors; a file
    /// starting with the GGUF magic is GGUF; anything else is reported as not GGUF.
    pub fn open(path: &Path) -> Result<ModelFile, CliError> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let safetensors_name = name.ends_with(".safetensors") || name.ends_with(".index.json");
        if path.is_dir() || (safetensors_name && !starts_with_gguf_magic(path)) {
            return Ok(ModelFile::Safetensors(Checkpoint::open(path)?));
        }
        Gguf::open(path).map(ModelFile::Gguf).map_err(CliError::gguf(path))
    }
}

fn starts_with_gguf_magic(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && magic == minerva_gguf::GGUF_MAGIC
}
