//! Shared helpers for the benchmarks: synthetic files with the shapes of real models (the shapes
//! and tensor tables themselves are `minerva_model::synthetic`'s, shared with `cargo xtask synth`).

use minerva_gguf::GgufWriter;
use minerva_model::synthetic::{GptOssShape, gpt_oss_gguf_header};

/// The real model fetched by `cargo xtask setup`.
pub fn real_model_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// A writer holding the header of a GPT-OSS-20B GGUF as llama.cpp lays it out: 35 metadata keys
/// (a 201 088-token vocabulary with 446 189 merges among them) and 459 tensors at their real shapes
/// and types. Only the header is meant to be written; the data can be a sparse hole.
pub fn gpt_oss_20b_header() -> GgufWriter {
    gpt_oss_gguf_header(&GptOssShape::B20, true)
}

/// Writes `writer`'s header to `path` and extends the file to its full length as a sparse hole,
/// so a reader sees a complete file of the real size without the disk holding it.
pub fn write_sparse(writer: &GgufWriter, path: &std::path::Path) -> std::io::Result<u64> {
    let header = writer.header_bytes().map_err(std::io::Error::other)?;
    let len = writer.file_len().map_err(std::io::Error::other)?;
    std::fs::write(path, header)?;
    std::fs::OpenOptions::new().write(true).open(path)?.set_len(len)?;
    Ok(len)
}
