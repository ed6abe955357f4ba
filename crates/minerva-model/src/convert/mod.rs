//! `minerva convert`'s library: a model from any layout Minerva loads (GGUF file, Hugging Face
//! SafeTensors file / index / directory, MLX directory) written as another, tensor by tensor.
//!
//! ```text
//! source.rs   SourceModel: the config and every tensor under its llama.cpp name, in GGUF's
//!             conventions (Q/K rows permuted for LLaMA, GPT-OSS experts as GGML MXFP4 with gate
//!             and up apart): the canonical form both writers start from
//! dtype.rs    what each tensor becomes (kept, widened, dequantized, quantized) and the byte work
//! to_gguf.rs  config → `{arch}.*` keys, canonical tensors → one GGUF file
//! to_hf.rs    config → config.json, canonical tensors → Hugging Face / MLX names and layouts,
//!             5 GB shards + index
//! ```
//!
//! Every tensor is read, converted and written before the next one is touched, so memory stays
//! at about the largest tensor whatever the model size. The output is written under a temporary
//! name beside `OUT` and renamed at the end, so a half-written output never looks complete.
//! The tokenizer is the caller's (`minerva-generate` owns it): it hands GGUF keys or files in
//! [`Extras`]; a GGUF source's `tokenizer.*` keys are copied to a GGUF output as they are.

mod dtype;
mod mixture;
mod source;
mod to_gguf;
mod to_hf;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minerva_core::DType;
use minerva_gguf::MetadataValue;

use crate::error::ModelError;
pub use mixture::{QUANT_TYPES, Quant};
pub use source::{Layout, SourceModel};

/// What can go wrong converting; every variant names the file, tensor or option concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// Reading the source model failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The output exists and `--force` was not given.
    #[error("{path} exists (give --force to replace it)")]
    OutputExists {
        /// The output path.
        path: PathBuf,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The target format cannot express something the source holds.
    #[error("cannot convert {what}: {reason}")]
    Unsupported {
        /// The tensor, key or option.
        what: String,
        /// Why.
        reason: String,
    },
    /// Writing GGUF failed.
    #[error("writing GGUF: {0}")]
    Gguf(#[from] minerva_gguf::GgufError),
    /// Writing SafeTensors failed.
    #[error(transparent)]
    Safetensors(#[from] minerva_safetensors::SafetensorsError),
    /// A (de)quantization failed.
    #[error("tensor {tensor}: {source}")]
    Quant {
        /// The tensor.
        tensor: String,
        /// The kernel's error.
        source: minerva_quant::QuantError,
    },
}

/// The result type of this module.
pub type Result<T, E = ConvertError> = std::result::Result<T, E>;

pub(crate) fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ConvertError + '_ {
    move |source| ConvertError::Io { path: path.to_path_buf(), source }
}

fn unsupported(what: impl Into<String>, reason: impl Into<String>) -> ConvertError {
    ConvertError::Unsupported { what: what.into(), reason: reason.into() }
}

/// The output layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// One llama.cpp GGUF file.
    Gguf,
    /// A Hugging Face directory as `save_pretrained` writes it.
    SafeTensors,
    /// An MLX directory as mlx-lm writes it (GPT-OSS experts as MLX mxfp4).
    Mlx,
}

impl Target {
    /// `gguf`, `safetensors` (or `hf`) or `mlx`.
    pub fn parse(name: &str) -> Option<Target> {
        match name {
            "gguf" => Some(Target::Gguf),
            "safetensors" | "hf" => Some(Target::SafeTensors),
            "mlx" => Some(Target::Mlx),
            _ => None,
        }
    }
}

/// How to convert.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    /// The output layout.
    pub target: Target,
    /// Quantize the weight matrices (GGUF output only): one type of [`QUANT_TYPES`] for all, or
    /// llama.cpp's Q4_K_M / Q5_K_M mixture (`mixture.rs`). GPT-OSS's MXFP4 experts stay MXFP4.
    pub quant: Option<Quant>,
    /// The float type of dequantized tensors (default BF16, as Hugging Face ships); when given
    /// explicitly, float weight matrices are cast to it too.
    pub dtype: Option<DType>,
    /// Replace an existing output.
    pub force: bool,
    /// Largest SafeTensors shard in bytes (5 GB as `save_pretrained`).
    pub shard_bytes: u64,
    /// MLX output only: quantize the weight matrices (every 2-D `.weight` whose columns are whole
    /// groups: linear layers, embeddings, the head) to MLX affine as `mlx_lm convert -q` does,
    /// bit for bit `mx.quantize`; GPT-OSS's MXFP4 experts stay MXFP4. `None` writes floats.
    pub mlx_quant: Option<MlxQuant>,
}

/// MLX affine quantization of a conversion's output (`mlx_lm convert -q --q-bits B
/// --q-group-size G`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlxQuant {
    /// Bits per value: 2, 3, 4, 5, 6 or 8.
    pub bits: u32,
    /// Values per scale and bias: 32, 64 or 128.
    pub group_size: usize,
}

impl MlxQuant {
    /// `bits`-bit in mlx-lm's default groups of 64, or [`ConvertError::Unsupported`] for a width
    /// MLX does not have.
    pub fn with_bits(bits: u32) -> Result<MlxQuant> {
        let quant = MlxQuant { bits, group_size: 64 };
        minerva_quant::MlxAffine { bits, group_size: 64, scale_dtype: DType::BF16 }
            .validate()
            .map_err(|e| unsupported(format!("--mlx-bits {bits}"), e.to_string()))?;
        Ok(quant)
    }
}

impl ConvertOptions {
    /// Options for `target` with the defaults: no quantization, bf16 for dequantized tensors, no
    /// overwrite, 5 GB shards.
    pub fn new(target: Target) -> ConvertOptions {
        ConvertOptions { target, quant: None, dtype: None, force: false, shard_bytes: 5_000_000_000, mlx_quant: None }
    }
}

/// What the caller adds to the output: the tokenizer, which `minerva-generate` translates.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    /// GGUF keys (`tokenizer.ggml.*`, `tokenizer.chat_template`) for a GGUF output from a
    /// SafeTensors source.
    pub gguf_metadata: Vec<(String, MetadataValue)>,
    /// Files (`tokenizer.json`, `tokenizer_config.json`, `generation_config.json`) for a directory
    /// output.
    pub files: Vec<(String, Vec<u8>)>,
}

/// Progress, after each tensor.
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a> {
    /// The tensor just written (output name).
    pub tensor: &'a str,
    /// Tensors written so far.
    pub done: usize,
    /// Tensors to write.
    pub total: usize,
}

/// What happened to the tensors, for the one-line summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Tensors written byte for byte as stored.
    pub copied: usize,
    /// Tensors whose bytes were rearranged without changing a value (Q/K row order, MXFP4 nibble
    /// layout, gate/up interleaving).
    pub repacked: usize,
    /// Float tensors widened without loss (bf16/f16 → f32).
    pub widened: BTreeMap<(DType, DType), usize>,
    /// Tensors dequantized or narrowed (lossy), by (from, to).
    pub lossy: BTreeMap<(DType, DType), usize>,
    /// MLX affine tensors written as the float values `mx.dequantize` gives (the codes are gone).
    pub mlx_affine_dequantized: usize,
    /// Float matrices written MLX affine-quantized (`ConvertOptions::mlx_quant`).
    pub mlx_affine_quantized: usize,
    /// MLX affine matrices written to MLX with the same bits, group size and float type: codes,
    /// scales and biases byte for byte.
    pub mlx_affine_copied: usize,
    /// Gemma norm factors written shifted (`w` ↔ `1 + w`) such that shifting back restores them.
    pub shifted: usize,
    /// Gemma norm factors whose shift rounded some value (a `w` finer than f32 holds at 1).
    pub shift_rounded: usize,
    /// Bytes of tensor data written.
    pub bytes_written: u64,
}

impl Report {
    /// Whether every value of the source is in the output exactly.
    pub fn is_lossless(&self) -> bool {
        self.lossy.is_empty()
            && self.mlx_affine_dequantized == 0
            && self.mlx_affine_quantized == 0
            && self.shift_rounded == 0
    }

    /// One line: lossless, or which conversions lost precision.
    pub fn summary(&self) -> String {
        let pairs = |m: &BTreeMap<(DType, DType), usize>| {
            m.iter().map(|((a, b), n)| format!("{n} {a}→{b}")).collect::<Vec<_>>().join(", ")
        };
        let mut kept = format!("{} copied", self.copied);
        if self.repacked > 0 {
            kept += &format!(", {} repacked", self.repacked);
        }
        if !self.widened.is_empty() {
            kept += &format!(", widened {}", pairs(&self.widened));
        }
        if self.mlx_affine_copied > 0 {
            kept += &format!(", {} MLX affine codes copied", self.mlx_affine_copied);
        }
        if self.shifted > 0 {
            kept += &format!(", {} norms shifted exactly (w ↔ 1 + w)", self.shifted);
        }
        let mut lost = pairs(&self.lossy);
        let mut add = |what: String| {
            let sep = if lost.is_empty() { "" } else { ", " };
            lost += &format!("{sep}{what}");
        };
        if self.mlx_affine_dequantized > 0 {
            add(format!("{} MLX affine→float", self.mlx_affine_dequantized));
        }
        if self.mlx_affine_quantized > 0 {
            add(format!("{} float→MLX affine", self.mlx_affine_quantized));
        }
        if self.shift_rounded > 0 {
            add(format!("{} norms rounded by the w ↔ 1 + w shift", self.shift_rounded));
        }
        if self.is_lossless() { format!("lossless: {kept}") } else { format!("lossy: converted {lost} ({kept})") }
    }
}

/// Converts the model at `src` into `out` as `opts` says; returns what happened to the tensors.
pub fn convert(
    src: &Path,
    out: &Path,
    opts: &ConvertOptions,
    extras: &Extras,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Report> {
    if out.exists() && !opts.force {
        return Err(ConvertError::OutputExists { path: out.to_path_buf() });
    }
    if opts.quant.is_some() && opts.target != Target::Gguf {
        return Err(unsupported("--quant", "writes GGML block types, which only a GGUF output holds"));
    }
    if let Some(Quant::Type(q)) = opts.quant
        && !QUANT_TYPES.contains(&q)
    {
        let names: Vec<String> = QUANT_TYPES.iter().map(|d| d.to_string().to_lowercase()).collect();
        return Err(unsupported(format!("--quant {q}"), format!("minerva-quant writes {}", names.join(", "))));
    }
    if let Some(d) = opts.dtype
        && !matches!(d, DType::F32 | DType::F16 | DType::BF16)
    {
        return Err(unsupported(format!("--dtype {d}"), "f32, f16 or bf16"));
    }
    let model = SourceModel::open(src)?;
    let tmp = temp_path(out);
    remove_path(&tmp)?;
    let written = match opts.target {
        Target::Gguf => to_gguf::write(&model, &tmp, opts, extras, progress),
        Target::SafeTensors | Target::Mlx => to_hf::write(&model, &tmp, opts, extras, progress),
    };
    let report = match written {
        Ok(report) => report,
        Err(e) => {
            // Best effort: the error is the message, a leftover temporary file is not.
            let _ = remove_path(&tmp);
            return Err(e);
        }
    };
    if out.exists() {
        remove_path(out)?;
    }
    std::fs::rename(&tmp, out).map_err(io_error(out))?;
    Ok(report)
}

/// `OUT.partial` beside `OUT`: never mistaken for a finished model.
fn temp_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".partial");
    out.with_file_name(name)
}

fn remove_path(path: &Path) -> Result<()> {
    let result = if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else if path.exists() {
        std::fs::remove_file(path)
    } else {
        Ok(())
    };
    result.map_err(io_error(path))
}
