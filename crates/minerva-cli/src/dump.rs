//! `minerva dump`: one tensor, dequantized to f32, as `.npy`.
//!
//! Values are produced and written a chunk of blocks (or groups) at a time, so memory stays bounded
//! whatever the tensor's size (a GPT-OSS expert tensor is 2 GB of f32 once dequantized).

use std::io::Write;
use std::path::Path;

use minerva_core::TensorView;
use minerva_quant::{MlxAffine, QuantError};
use minerva_safetensors::{Checkpoint, Encoding};

use crate::error::CliError;
use crate::model_file::ModelFile;
use crate::npy;

/// Values produced per step.
const VALUES_PER_CHUNK: usize = 1 << 20;

/// Runs `minerva dump PATH TENSOR -o OUTPUT`.
pub fn run(path: &Path, tensor: &str, output: &Path) -> Result<(), CliError> {
    let model = ModelFile::open(path)?;
    let source = match &model {
        ModelFile::Gguf(gguf) => Source::Plain(gguf.tensor(tensor).map_err(CliError::gguf(path))?),
        ModelFile::Safetensors(checkpoint) => safetensors_source(path, checkpoint, tensor)?,
    };
    let refuse = |message: String| CliError::Request { path: path.to_path_buf(), message };
    if let Source::Plain(view) = &source
        && minerva_quant::dequantizer(view.dtype).is_none()
    {
        return Err(refuse(format!("tensor {tensor:?} is {}, which minerva cannot dequantize yet", view.dtype)));
    }
    let out_err = |source| CliError::Output { path: output.to_path_buf(), source };
    let file = std::fs::File::create(output).map_err(out_err)?;
    let mut w = std::io::BufWriter::new(file);
    npy::write_f32_header(&mut w, source.shape()).map_err(out_err)?;
    source.write_values(&mut w).map_err(|e| match e {
        DumpError::Io(e) => out_err(e),
        DumpError::Quant(e) => refuse(format!("tensor {tensor:?}: {e}")),
    })?;
    w.flush().map_err(out_err)
}

fn safetensors_source<'a>(path: &Path, checkpoint: &'a Checkpoint, name: &str) -> Result<Source<'a>, CliError> {
    let logical = checkpoint.logical_tensor(name);
    let plain = checkpoint.tensor(name).map(|t| t.view);
    let not_found = || CliError::Request { path: path.to_path_buf(), message: format!("no tensor named {name:?}") };
    let Some(logical) = logical else {
        return plain.map(Source::Plain).ok_or_else(not_found);
    };
    Ok(match logical.encoding {
        Encoding::Plain(view) => Source::Plain(view),
        Encoding::HfMxfp4 { blocks, scales } => Source::Mxfp4 { shape: logical.shape, blocks, scales, mlx: false },
        Encoding::MlxMxfp4 { weight, scales, .. } => {
            Source::Mxfp4 { shape: logical.shape, blocks: weight, scales, mlx: true }
        }
        Encoding::MlxAffine { weight, scales, biases, bits, group_size } => Source::MlxAffine {
            shape: logical.shape,
            weight,
            scales,
            biases,
            params: MlxAffine { bits, group_size: group_size as usize, scale_dtype: scales.dtype },
        },
    })
}

/// Where a dumped tensor's values come from.
enum Source<'a> {
    /// One stored tensor of a dtype minerva-quant reads.
    Plain(TensorView<'a>),
    /// MXFP4 as separate blocks (16 bytes per 32 values) and E8M0 scales: HF `_blocks`/`_scales`
    /// or MLX's mxfp4 mode (the same bytes, viewed as u32 words).
    Mxfp4 { shape: &'a [usize], blocks: TensorView<'a>, scales: TensorView<'a>, mlx: bool },
    /// MLX affine: packed u32 weight, per-group scales and biases.
    MlxAffine {
        shape: &'a [usize],
        weight: TensorView<'a>,
        scales: TensorView<'a>,
        biases: TensorView<'a>,
        params: MlxAffine,
    },
}

enum DumpError {
    Io(std::io::Error),
    Quant(QuantError),
}

impl Source<'_> {
    fn shape(&self) -> &[usize] {
        match self {
            Source::Plain(view) => view.shape,
            Source::Mxfp4 { shape, .. } | Source::MlxAffine { shape, .. } => shape,
        }
    }

    /// Dequantizes chunk by chunk, in row-major order, into `w`.
    fn write_values(&self, w: &mut impl Write) -> Result<(), DumpError> {
        let mut values = Vec::new();
        let mut emit = |values: &[f32]| npy::write_values(&mut *w, values).map_err(DumpError::Io);
        match self {
            Source::Plain(view) => {
                let (block_bytes, block_elems) = (view.dtype.block_bytes(), view.dtype.block_elems());
                let blocks_per_chunk = (VALUES_PER_CHUNK / block_elems).max(1);
                for chunk in view.bytes.chunks(blocks_per_chunk * block_bytes) {
                    values.resize(chunk.len() / block_bytes * block_elems, 0.0);
                    minerva_quant::dequantize_fast(view.dtype, chunk, &mut values).map_err(DumpError::Quant)?;
                    emit(&values)?;
                }
            }
            Source::Mxfp4 { blocks, scales, mlx, .. } => {
                // One scale byte and 16 block bytes per 32 values.
                let groups_per_chunk = VALUES_PER_CHUNK / 32;
                for (b, s) in blocks.bytes.chunks(groups_per_chunk * 16).zip(scales.bytes.chunks(groups_per_chunk)) {
                    values.resize(s.len() * 32, 0.0);
                    let dequantize = if *mlx {
                        minerva_quant::dequantize_mlx_mxfp4_ref
                    } else {
                        minerva_quant::dequantize_hf_mxfp4_ref
                    };
                    dequantize(b, s, &mut values).map_err(DumpError::Quant)?;
                    emit(&values)?;
                }
                check_consumed(blocks.bytes.len() / 16, scales.bytes.len())?;
            }
            Source::MlxAffine { weight, scales, biases, params, .. } => {
                let group = params.group_size;
                let weight_bytes_per_group = group * params.bits as usize / 8;
                let scale_bytes = params.scale_dtype.block_bytes();
                let groups_per_chunk = (VALUES_PER_CHUNK / group).max(1);
                let chunks = weight
                    .bytes
                    .chunks(groups_per_chunk * weight_bytes_per_group)
                    .zip(scales.bytes.chunks(groups_per_chunk * scale_bytes))
                    .zip(biases.bytes.chunks(groups_per_chunk * scale_bytes));
                for ((wq, s), b) in chunks {
                    values.resize(s.len() / scale_bytes * group, 0.0);
                    params.dequantize_ref(wq, s, b, &mut values).map_err(DumpError::Quant)?;
                    emit(&values)?;
                }
                check_consumed(weight.bytes.len() / weight_bytes_per_group.max(1), scales.bytes.len() / scale_bytes)?;
            }
        }
        Ok(())
    }
}

/// The component sizes were validated when the checkpoint was opened; this guards the zip above
/// against silently stopping early should they ever disagree.
fn check_consumed(groups_in_weight: usize, groups_in_scales: usize) -> Result<(), DumpError> {
    if groups_in_weight == groups_in_scales {
        Ok(())
    } else {
        Err(DumpError::Quant(QuantError::ComponentLength {
            format: "packed tensor",
            component: "scales",
            expected: groups_in_weight,
            actual: groups_in_scales,
            unit: "groups",
        }))
    }
}
