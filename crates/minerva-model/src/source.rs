//! [`TensorSource`]: a model's stored tensors, from a GGUF file or a SafeTensors checkpoint, under
//! one naming scheme.
//!
//! Architectures ask for tensors by their llama.cpp (GGUF) names — `token_embd.weight`,
//! `blk.3.attn_q.weight` — and a SafeTensors source translates them to Hugging Face names
//! (`model.embed_tokens.weight`, `model.layers.3.self_attn.q_proj.weight`) with one table, so each
//! architecture maps names once. Errors name the tensor as it is stored in the file.
//!
//! ```text
//!  GGUF file ──────────┐                         ┌─► WeightSource { file: Arc<mmap>, byte range }
//!  SafeTensors shards ─┴─► TensorSource::get(gguf name) ─┤
//!                                                └─► rows(..): a row block of a fused matrix
//! ```
//!
//! A fused matrix (Phi-3's `qkv_proj` / `gate_up_proj`, GGUF `attn_qkv` / fused `ffn_up`) is split
//! into per-projection weights without copying: rows are contiguous in both formats (quantized
//! blocks run along a row), so a block of rows is a byte sub-range of the same map.

use std::collections::HashMap;
use std::io::Read;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use minerva_gguf::Gguf;
use minerva_safetensors::{Checkpoint, Encoding};

use crate::backend::{Backend, ByteSource, MlxAffineSource, WeightSource, mlx_affine_params};
use crate::error::{ModelError, Result};

/// Which file format the tensors come from (it decides names and the RoPE convention).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceFormat {
    /// A GGUF file: llama.cpp names, Q/K rows permuted for `llama` (normal RoPE).
    Gguf,
    /// A Hugging Face SafeTensors checkpoint: `model.layers.N.*` names, NeoX (`rotate_half`) RoPE.
    SafeTensors,
}

impl SourceFormat {
    /// The format of a model path, the one rule every command uses: a directory is a SafeTensors
    /// checkpoint; a file starting with the GGUF magic is GGUF whatever its name; a `.safetensors`
    /// file or a `.json` shard index is SafeTensors; anything else is read as GGUF (whose parser
    /// then says what is wrong with it).
    pub fn detect(path: &Path) -> SourceFormat {
        if path.is_dir() {
            return SourceFormat::SafeTensors;
        }
        if starts_with_gguf_magic(path) {
            return SourceFormat::Gguf;
        }
        match path.extension().and_then(|e| e.to_str()) {
            Some("safetensors" | "json") => SourceFormat::SafeTensors,
            _ => SourceFormat::Gguf,
        }
    }
}

fn starts_with_gguf_magic(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && magic == minerva_gguf::GGUF_MAGIC
}

/// One shard of a checkpoint as a [`ByteSource`]: the shard's memory map, kept alive by the `Arc`.
struct ShardBytes {
    checkpoint: Arc<Checkpoint>,
    shard: usize,
}

impl ByteSource for ShardBytes {
    fn bytes(&self) -> &[u8] {
        // The index was taken from the checkpoint's own shard list when this was built.
        self.checkpoint.shard_bytes(self.shard).unwrap_or_default()
    }

    fn release(&self, range: Range<usize>) {
        self.checkpoint.release(self.shard, range);
    }
}

/// Top-level GGUF names → Hugging Face names (every architecture).
const HF_GLOBAL_NAMES: &[(&str, &str)] = &[
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
];

/// The Hugging Face name of the tensor llama.cpp calls `gguf_name` in architecture `arch`; names
/// outside the table are returned unchanged.
pub fn hf_name(arch: &str, gguf_name: &str) -> String {
    if let Some((_, hf)) = HF_GLOBAL_NAMES.iter().find(|(g, _)| *g == gguf_name) {
        return (*hf).to_string();
    }
    let Some((layer, suffix)) = gguf_name.strip_prefix("blk.").and_then(|rest| rest.split_once('.')) else {
        return gguf_name.to_string();
    };
    match crate::arch::registry::find(arch).and_then(|a| a.hf_layer_name(suffix)) {
        Some(hf) => format!("model.layers.{layer}.{hf}"),
        None => gguf_name.to_string(),
    }
}

/// The llama.cpp name of the tensor Hugging Face calls `hf` in architecture `arch`, if the
/// architecture's table has it (the inverse of [`hf_name`]).
pub fn gguf_name(arch: &str, hf: &str) -> Option<String> {
    if let Some((g, _)) = HF_GLOBAL_NAMES.iter().find(|(_, h)| *h == hf) {
        return Some((*g).to_string());
    }
    let (layer, rest) = hf.strip_prefix("model.layers.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let spec = crate::arch::registry::find(arch)?;
    spec.gguf_layer_suffix(rest).map(|suffix| format!("blk.{layer}.{suffix}"))
}

/// A model's tensors by stored name, each a [`WeightSource`] over the shared map, or an
/// [`MlxAffineSource`] over its three components.
pub struct TensorSource {
    format: SourceFormat,
    arch: String,
    tensors: HashMap<String, WeightSource>,
    affine: HashMap<String, MlxAffineSource>,
}

impl TensorSource {
    /// Every tensor of a GGUF file.
    pub fn from_gguf<D>(gguf: &Arc<Gguf<D>>) -> Result<TensorSource>
    where
        D: minerva_gguf::Backing + Send + Sync + 'static,
    {
        let file: Arc<dyn ByteSource> = gguf.clone();
        let tensors = gguf
            .tensor_infos()
            .iter()
            .map(|info| {
                let source = WeightSource {
                    file: file.clone(),
                    name: info.name.clone(),
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    range: info.range.clone(),
                };
                (info.name.clone(), source)
            })
            .collect();
        let arch = gguf.architecture()?.to_string();
        Ok(TensorSource { format: SourceFormat::Gguf, arch, tensors, affine: HashMap::new() })
    }

    /// Every tensor of a SafeTensors checkpoint; `arch` is its `config.json` `model_type`. MLX
    /// affine matrices (mlx-lm's `convert -q`) are listed under their `.weight` name as
    /// [`MlxAffineSource`]s over their codes, scales and biases where they lie in the map (a
    /// backend dequantizes them or reads them in place: [`Backend::mlx_affine_weight`]); their
    /// scales and biases are not listed on their own.
    pub fn from_checkpoint(checkpoint: &Arc<Checkpoint>, arch: &str) -> Result<TensorSource> {
        let shard_index: HashMap<&Path, usize> = checkpoint.shard_paths().enumerate().map(|(i, p)| (p, i)).collect();
        let shards: Vec<Arc<dyn ByteSource>> = (0..checkpoint.shard_paths().len())
            .map(|shard| Arc::new(ShardBytes { checkpoint: checkpoint.clone(), shard }) as Arc<dyn ByteSource>)
            .collect();
        let mut tensors: HashMap<String, WeightSource> = checkpoint
            .tensors()
            .map(|t| {
                let start = t.offset as usize;
                let source = WeightSource {
                    file: shards[shard_index[t.shard]].clone(),
                    name: t.view.name.to_string(),
                    dtype: t.view.dtype,
                    shape: t.view.shape.to_vec(),
                    range: start..start + t.view.bytes.len(),
                };
                (t.view.name.to_string(), source)
            })
            .collect();
        let mut affine = HashMap::new();
        if checkpoint.config().is_some_and(|c| c.get("quantization").is_some()) {
            for lt in checkpoint.logical_tensors() {
                let Encoding::MlxAffine { weight, scales, biases, bits, group_size } = lt.encoding else { continue };
                let params = mlx_affine_params(bits, group_size, &scales);
                let mut part = |name: &str| {
                    let stored =
                        tensors.remove(name).ok_or_else(|| ModelError::MissingTensor { tensor: name.into() })?;
                    Ok::<_, ModelError>((stored.file, stored.range))
                };
                let ((weight_file, weight_range), (scales_file, scales_range), (biases_file, biases_range)) =
                    (part(weight.name)?, part(scales.name)?, part(biases.name)?);
                let source = MlxAffineSource {
                    weight: weight_file,
                    weight_range,
                    scales: scales_file,
                    scales_range,
                    biases: biases_file,
                    biases_range,
                    params,
                    name: lt.name.to_string(),
                    shape: lt.shape.to_vec(),
                };
                // Checked now, so that a malformed tensor is an error at open on every backend.
                source.matrix()?;
                affine.insert(weight.name.to_string(), source);
            }
        }
        Ok(TensorSource { format: SourceFormat::SafeTensors, arch: arch.to_string(), tensors, affine })
    }

    /// The file format.
    pub fn format(&self) -> SourceFormat {
        self.format
    }

    /// The name under which this source stores the tensor llama.cpp calls `gguf_name`.
    pub fn stored_name(&self, gguf_name: &str) -> String {
        match self.format {
            SourceFormat::Gguf => gguf_name.to_string(),
            SourceFormat::SafeTensors => hf_name(&self.arch, gguf_name),
        }
    }

    /// The tensor llama.cpp calls `gguf_name`, if stored.
    pub fn get(&self, gguf_name: &str) -> Option<&WeightSource> {
        self.tensors.get(&self.stored_name(gguf_name))
    }

    /// The MLX affine matrix llama.cpp calls `gguf_name`, if stored so.
    pub fn get_affine(&self, gguf_name: &str) -> Option<&MlxAffineSource> {
        self.affine.get(&self.stored_name(gguf_name))
    }

    /// The shape of the tensor llama.cpp calls `gguf_name`, if stored (in any encoding).
    pub fn shape(&self, gguf_name: &str) -> Option<&[usize]> {
        let plain = self.get(gguf_name).map(|t| &t.shape[..]);
        plain.or_else(|| self.get_affine(gguf_name).map(|t| &t.shape[..]))
    }

    /// Whether the tensor is stored (in any encoding).
    pub fn contains(&self, gguf_name: &str) -> bool {
        self.get(gguf_name).is_some() || self.get_affine(gguf_name).is_some()
    }

    /// The tensor `gguf_name`, which must exist with shape `expected`, stored as plain bytes (an
    /// MLX affine matrix is a [`ModelError::TensorEncoding`] here: [`TensorSource::weight`] loads
    /// those).
    pub fn require(&self, gguf_name: &str, expected: &[usize]) -> Result<&WeightSource> {
        if let Some(affine) = self.get_affine(gguf_name) {
            return Err(ModelError::TensorEncoding {
                tensor: affine.name.clone(),
                expected: "a plain tensor",
                found: "mlx-affine".into(),
            });
        }
        let source =
            self.get(gguf_name).ok_or_else(|| ModelError::MissingTensor { tensor: self.stored_name(gguf_name) })?;
        if source.shape != expected {
            return Err(ModelError::TensorShape {
                tensor: source.name.clone(),
                expected: expected.to_vec(),
                actual: source.shape.clone(),
            });
        }
        Ok(source)
    }

    /// Loads `gguf_name` (shape `expected`) onto `backend`.
    pub fn weight<B: Backend>(&self, backend: &B, gguf_name: &str, expected: &[usize]) -> Result<B::Weight> {
        if let Some(affine) = self.affine_with_shape(gguf_name, expected)? {
            return backend.mlx_affine_weight(affine.clone());
        }
        backend.weight(self.require(gguf_name, expected)?.clone())
    }

    /// The MLX affine matrix `gguf_name`, if stored so, checked to have shape `expected`.
    fn affine_with_shape(&self, gguf_name: &str, expected: &[usize]) -> Result<Option<&MlxAffineSource>> {
        let Some(affine) = self.get_affine(gguf_name) else { return Ok(None) };
        if affine.shape != expected {
            return Err(ModelError::TensorShape {
                tensor: affine.name.clone(),
                expected: expected.to_vec(),
                actual: affine.shape.clone(),
            });
        }
        Ok(Some(affine))
    }

    /// Splits the matrix `gguf_name` (`Σ row_counts × cols`) into consecutive row blocks of
    /// `row_counts` rows, each its own weight over the same bytes.
    pub fn weight_rows<B: Backend>(
        &self,
        backend: &B,
        gguf_name: &str,
        row_counts: &[usize],
        cols: usize,
    ) -> Result<Vec<B::Weight>> {
        let total: usize = row_counts.iter().sum();
        if let Some(affine) = self.affine_with_shape(gguf_name, &[total, cols])? {
            let mut first = 0;
            return row_counts
                .iter()
                .map(|&rows| {
                    let part = affine.rows(first, rows)?;
                    first += rows;
                    backend.mlx_affine_weight(part)
                })
                .collect();
        }
        let source = self.require(gguf_name, &[total, cols])?;
        let row_bytes = source.dtype.row_bytes(cols).ok_or_else(|| ModelError::TensorDType {
            tensor: source.name.clone(),
            dtype: source.dtype,
            usage: "splitting a fused matrix into rows",
        })?;
        let mut first = 0;
        row_counts
            .iter()
            .map(|&rows| {
                let range: Range<usize> =
                    source.range.start + first * row_bytes..source.range.start + (first + rows) * row_bytes;
                let part = WeightSource {
                    file: source.file.clone(),
                    name: format!("{}[rows {first}..{}]", source.name, first + rows),
                    dtype: source.dtype,
                    shape: vec![rows, cols],
                    range,
                };
                first += rows;
                backend.weight(part)
            })
            .collect()
    }
}
