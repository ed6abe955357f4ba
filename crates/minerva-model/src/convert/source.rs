//! [`SourceModel`]: a model file opened for conversion, its tensors listed under llama.cpp names in
//! GGUF's conventions — the one canonical form the writers start from:
//!
//! | | GGUF source | Hugging Face source | MLX source |
//! |---|---|---|---|
//! | names | as stored | `hf_name` inverted (`source::gguf_name`) | same as HF |
//! | LLaMA Q/K rows | as stored (permuted) | permuted as llama.cpp's converter does | same as HF |
//! | GPT-OSS experts | MXFP4 as stored | `_blocks`/`_scales` → GGML MXFP4, gate/up de-interleaved | mxfp4 → GGML MXFP4 |
//! | MLX affine | — | — | dequantized as `mx.dequantize` (the loader's values) |
//! | Gemma norms | `1 + w` as stored | `1 + w` in f32 (transformers' `1.0 + w.float()`) | same as HF |
//! | RoPE factor tensors | left to the config | — | — |
//!
//! Every step is lossless except MLX affine and, for a `w` finer than f32 holds at 1, the Gemma
//! shift (the report says which).

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use minerva_core::DType;
use minerva_gguf::{Gguf, Mmap};
use minerva_safetensors::{Checkpoint, Encoding};

use super::dtype::{permute_qk_rows, shift_norm};
use super::{ConvertError, Result, unsupported};
use crate::arch::GraphConfig;
use crate::arch::gemma3::Gemma3Config;
use crate::arch::gpt_oss::GptOssConfig;
use crate::arch::registry::{self, ArchSpec, Graph};
use crate::backend::mlx_affine_params;
use crate::config::Config;
use crate::error::ModelError;
use crate::source::{SourceFormat, gguf_name};

/// The source's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A llama.cpp GGUF file.
    Gguf,
    /// A Hugging Face SafeTensors checkpoint.
    Hf,
    /// An MLX checkpoint (`quantization` in config.json).
    Mlx,
}

/// The architecture's hyper-parameters, by graph.
#[derive(Clone, Debug)]
pub(crate) enum Family {
    /// LLaMA / Mistral / Phi-3 / Qwen (the shared config); `tied` when the LM head is the
    /// embedding matrix.
    Dense { config: Config, tied: bool },
    /// Gemma 3, with its layer pattern and RoPEs.
    Gemma3 { config: Box<Gemma3Config>, tied: bool },
    /// GPT-OSS.
    GptOss(Box<GptOssConfig>),
}

impl Family {
    /// The family of a graph's hyper-parameters; `tied` when the LM head is the embedding matrix
    /// (GPT-OSS has a head of its own).
    fn of(config: GraphConfig, tied: bool) -> Family {
        match config {
            GraphConfig::Llama(config) | GraphConfig::Qwen(config) => Family::Dense { config, tied },
            GraphConfig::Gemma3(config) => Family::Gemma3 { config, tied },
            GraphConfig::GptOss(config) => Family::GptOss(config),
        }
    }

    pub(crate) fn base(&self) -> &Config {
        match self {
            Family::Dense { config, .. } => config,
            Family::Gemma3 { config, .. } => &config.base,
            Family::GptOss(c) => &c.base,
        }
    }
}

/// An MLX affine tensor as stored: its parameters and its codes, scales and biases.
pub(crate) type StoredAffine<'a> = (minerva_quant::MlxAffine, [&'a [u8]; 3]);

/// Where a canonical tensor's bytes come from.
#[derive(Clone, Debug)]
enum Origin {
    /// Tensor `index` of the GGUF file, as stored.
    Gguf { index: usize },
    /// A plain or MLX-affine SafeTensors tensor; rows permuted over `permute_heads` heads (HF
    /// LLaMA Q/K → llama.cpp order); `plus_one`: a Gemma norm `w` read as f32 `1 + w`.
    Stored { stored: String, permute_heads: Option<usize>, plus_one: bool },
    /// HF MXFP4 `X_blocks`/`X_scales` as GGML blocks: every row, or (`part` 0/1) the even (gate)
    /// or odd (up) rows of an interleaved `gate_up_proj`.
    HfMxfp4 { stored: String, part: Option<usize> },
    /// The even (gate) or odd (up) elements of HF's interleaved `gate_up_proj_bias`.
    HfBias { stored: String, part: usize },
    /// MLX mxfp4 `m.weight`/`m.scales` as GGML blocks.
    MlxMxfp4 { stored: String },
}

/// One tensor in canonical form.
#[derive(Clone, Debug)]
pub(crate) struct CanonTensor {
    /// The llama.cpp name.
    pub name: String,
    /// The canonical dtype (a GGML type).
    pub dtype: DType,
    /// Numpy-order shape.
    pub shape: Vec<usize>,
    origin: Origin,
    mlx_affine: bool,
}

#[cfg(test)]
impl CanonTensor {
    /// A tensor of the GGUF file by `name` and `shape` (tests of the choices made per tensor).
    pub(crate) fn for_test(name: &str, dtype: DType, shape: &[usize]) -> CanonTensor {
        CanonTensor {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
            origin: Origin::Gguf { index: 0 },
            mlx_affine: false,
        }
    }
}

impl CanonTensor {
    /// Whether reading rearranges the stored bytes (Q/K rows, MXFP4 layout, gate/up split).
    pub(crate) fn repacked(&self) -> bool {
        match &self.origin {
            Origin::Gguf { .. } => false,
            Origin::Stored { permute_heads, .. } => permute_heads.is_some(),
            Origin::HfMxfp4 { .. } | Origin::HfBias { .. } | Origin::MlxMxfp4 { .. } => true,
        }
    }

    /// Whether the stored tensor is MLX affine, dequantized on reading.
    pub(crate) fn mlx_affine(&self) -> bool {
        self.mlx_affine
    }
}

/// A model opened for conversion.
pub struct SourceModel {
    /// The layout it was read from.
    pub layout: Layout,
    /// Its architecture's row of the table.
    pub spec: &'static ArchSpec,
    pub(crate) family: Family,
    pub(crate) tensors: Vec<CanonTensor>,
    gguf: Option<Arc<Gguf<Mmap>>>,
    ckpt: Option<Arc<Checkpoint>>,
}

/// The GGUF tensors that are configuration (RoPE factors), rebuilt from the config on output.
const CONFIG_TENSORS: &[&str] = &["rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"];

impl SourceModel {
    /// Opens anything [`crate::Model::load`] takes.
    pub fn open(path: &Path) -> Result<SourceModel> {
        match SourceFormat::detect(path) {
            SourceFormat::Gguf => SourceModel::open_gguf(path),
            SourceFormat::SafeTensors => SourceModel::open_checkpoint(path),
        }
    }

    fn open_gguf(path: &Path) -> Result<SourceModel> {
        let gguf = Arc::new(Gguf::open(path).map_err(ModelError::from)?);
        let arch = gguf.architecture().map_err(ModelError::from)?;
        let spec = registry::for_gguf(arch).ok_or_else(|| ModelError::UnsupportedArch { arch: arch.to_string() })?;
        let tied = gguf.tensor_info("output.weight").is_err();
        let family = Family::of(GraphConfig::from_gguf(spec, &gguf)?, tied);
        let tensors = gguf
            .tensor_infos()
            .iter()
            .enumerate()
            .filter(|(_, info)| !CONFIG_TENSORS.contains(&info.name.as_str()))
            .map(|(index, info)| CanonTensor {
                name: info.name.clone(),
                dtype: info.dtype,
                shape: info.shape.clone(),
                origin: Origin::Gguf { index },
                mlx_affine: false,
            })
            .collect();
        Ok(SourceModel { layout: Layout::Gguf, spec, family, tensors, gguf: Some(gguf), ckpt: None })
    }

    fn open_checkpoint(path: &Path) -> Result<SourceModel> {
        let ckpt = Arc::new(Checkpoint::open(path).map_err(ModelError::from)?);
        let json = ckpt.config().ok_or_else(|| ModelError::MissingConfig { path: path.display().to_string() })?;
        let mlx = json.get("quantization").is_some();
        let model_type = json.get("model_type").and_then(serde_json::Value::as_str);
        let spec = model_type
            .and_then(registry::for_hf)
            .ok_or_else(|| ModelError::UnsupportedArch { arch: model_type.unwrap_or("(no model_type)").to_string() })?;
        let tied = json.get("tie_word_embeddings").and_then(serde_json::Value::as_bool);
        // Gemma 3 ties its head unless told otherwise (transformers' default); the others do not.
        let tied = tied.unwrap_or(spec.graph == Graph::Gemma3 && ckpt.tensor("lm_head.weight").is_none());
        let family = Family::of(GraphConfig::from_hf(spec, json)?, tied);
        let gpt_oss = spec.graph == Graph::GptOss;
        let arch = spec.name;
        let mut tensors = Vec::new();
        for lt in ckpt.logical_tensors() {
            let shape = lt.shape.to_vec();
            if gpt_oss && let Some(experts) = gpt_oss_experts(lt.name, &lt.encoding, &shape)? {
                tensors.extend(experts);
                continue;
            }
            let name = gguf_name(arch, lt.name).ok_or_else(|| {
                unsupported(format!("tensor {}", lt.name), format!("no llama.cpp name for it in {arch}"))
            })?;
            let dtype = match lt.encoding {
                Encoding::Plain(view) => view.dtype,
                Encoding::MlxAffine { scales, .. } => scales.dtype,
                _ => return Err(unsupported(format!("tensor {}", lt.name), format!("{} here", lt.encoding.kind()))),
            };
            let c = family.base();
            let permute_heads = match name.rsplit_once('.').map(|(n, _)| n.rsplit('.').next()) {
                Some(Some("attn_q")) if spec.permutes_qk => Some(c.n_head),
                Some(Some("attn_k")) if spec.permutes_qk => Some(c.n_head_kv),
                _ => None,
            };
            let plus_one = spec.shifts_norm(&name);
            // A shifted norm is canonical in f32, as llama.cpp stores norms.
            let dtype = if plus_one { DType::F32 } else { dtype };
            let origin = Origin::Stored { stored: lt.name.to_string(), permute_heads, plus_one };
            let mlx_affine = matches!(lt.encoding, Encoding::MlxAffine { .. });
            tensors.push(CanonTensor { name, dtype, shape, origin, mlx_affine });
        }
        let layout = if mlx { Layout::Mlx } else { Layout::Hf };
        Ok(SourceModel { layout, spec, family, tensors, gguf: None, ckpt: Some(ckpt) })
    }

    /// The shared hyper-parameters.
    pub fn config(&self) -> &Config {
        self.family.base()
    }

    /// The GGUF file, for a GGUF source (its tokenizer keys).
    pub fn gguf(&self) -> Option<&Gguf<Mmap>> {
        self.gguf.as_deref()
    }

    /// The checkpoint, for a SafeTensors source (its config files).
    pub fn checkpoint(&self) -> Option<&Checkpoint> {
        self.ckpt.as_deref()
    }

    /// An MLX affine tensor's stored parameters and components (codes, scales, biases) as they
    /// lie, in the checkpoint's row order: what an MLX output with the same parameters copies
    /// rather than quantizing `mx.dequantize`'s values again (which need not give the same codes
    /// back). `None` for any other tensor, and for a Gemma norm (read shifted).
    pub(crate) fn stored_affine(&self, t: &CanonTensor) -> Result<Option<StoredAffine<'_>>> {
        let Origin::Stored { stored, plus_one: false, .. } = &t.origin else { return Ok(None) };
        if !t.mlx_affine {
            return Ok(None);
        }
        let lt = self.logical(stored)?;
        let Encoding::MlxAffine { weight, scales, biases, bits, group_size } = lt.encoding else { return Ok(None) };
        let params = mlx_affine_params(bits, group_size, &scales);
        Ok(Some((params, [weight.bytes, scales.bytes, biases.bytes])))
    }

    /// A canonical tensor's bytes: borrowed from the map where the stored bytes are canonical.
    pub(crate) fn read(&self, t: &CanonTensor) -> Result<Cow<'_, [u8]>> {
        let missing = |name: &str| ConvertError::Model(ModelError::MissingTensor { tensor: name.to_string() });
        let quant = |e| ConvertError::Quant { tensor: t.name.clone(), source: e };
        match &t.origin {
            Origin::Gguf { index } => {
                let gguf = self.gguf.as_ref().ok_or_else(|| missing(&t.name))?;
                let info = gguf.tensor_infos().get(*index).ok_or_else(|| missing(&t.name))?;
                Ok(Cow::Borrowed(gguf.tensor_bytes(info)))
            }
            Origin::Stored { stored, permute_heads, plus_one } => {
                let lt = self.logical(stored)?;
                let bytes = match lt.encoding {
                    Encoding::Plain(view) => Cow::Borrowed(view.bytes),
                    Encoding::MlxAffine { weight, scales, biases, bits, group_size } => {
                        let params = mlx_affine_params(bits, group_size, &scales);
                        let values: usize = lt.shape.iter().product();
                        let mut out = vec![0u8; values * scales.dtype.block_bytes()];
                        params
                            .dequantize_exact_to_bytes(weight.bytes, scales.bytes, biases.bytes, &mut out)
                            .map_err(quant)?;
                        Cow::Owned(out)
                    }
                    _ => return Err(missing(stored)),
                };
                if *plus_one {
                    let from = match lt.encoding {
                        Encoding::MlxAffine { scales, .. } => scales.dtype,
                        Encoding::Plain(view) => view.dtype,
                        _ => return Err(missing(stored)),
                    };
                    return Ok(Cow::Owned(shift_norm(&t.name, from, &bytes, 1.0)?.0));
                }
                match permute_heads {
                    Some(heads) => {
                        let rows = t.shape.first().copied().unwrap_or(0);
                        Ok(Cow::Owned(permute_qk_rows(&t.name, &bytes, rows, *heads, false)?))
                    }
                    None => Ok(bytes),
                }
            }
            Origin::HfMxfp4 { stored, part } => {
                let lt = self.logical(stored)?;
                let Encoding::HfMxfp4 { blocks, scales } = lt.encoding else { return Err(missing(stored)) };
                mxfp4_rows(&t.name, blocks.bytes, scales.bytes, *part, cols(t))
            }
            Origin::MlxMxfp4 { stored } => {
                let lt = self.logical(stored)?;
                let Encoding::MlxMxfp4 { weight, scales, .. } = lt.encoding else { return Err(missing(stored)) };
                mxfp4_rows(&t.name, weight.bytes, scales.bytes, None, cols(t))
            }
            Origin::HfBias { stored, part } => {
                let lt = self.logical(stored)?;
                let Encoding::Plain(view) = lt.encoding else { return Err(missing(stored)) };
                let size = view.dtype.info().block_bytes as usize;
                let elems = view.bytes.chunks_exact(size).skip(*part).step_by(2);
                Ok(Cow::Owned(elems.flatten().copied().collect()))
            }
        }
    }

    /// For a Gemma norm read from a checkpoint: the tensor as stored (`w`, its own dtype) and its
    /// bytes, so that a checkpoint output copies it instead of shifting twice. `None` for every
    /// other tensor.
    pub(crate) fn read_unshifted(&self, t: &CanonTensor) -> Result<Option<(CanonTensor, Cow<'_, [u8]>)>> {
        let Origin::Stored { stored, plus_one: true, .. } = &t.origin else { return Ok(None) };
        let dtype = match self.logical(stored)?.encoding {
            Encoding::Plain(view) => view.dtype,
            Encoding::MlxAffine { scales, .. } => scales.dtype,
            _ => return Ok(None),
        };
        let origin = Origin::Stored { stored: stored.clone(), permute_heads: None, plus_one: false };
        let unshifted = CanonTensor { dtype, origin, ..t.clone() };
        let bytes = self.read(&unshifted)?;
        Ok(Some((unshifted, bytes)))
    }

    /// For a Gemma norm read from a checkpoint: whether `1 + w` in f32 gives back every stored
    /// `w` (false when some `w` has bits below f32's precision at 1).
    pub(crate) fn shift_is_exact(&self, t: &CanonTensor) -> Result<bool> {
        let Origin::Stored { stored, plus_one: true, .. } = &t.origin else { return Ok(true) };
        let lt = self.logical(stored)?;
        let Encoding::Plain(view) = lt.encoding else { return Ok(false) };
        Ok(shift_norm(&t.name, view.dtype, view.bytes, 1.0)?.1)
    }

    fn logical(&self, name: &str) -> Result<minerva_safetensors::LogicalTensor<'_>> {
        self.ckpt
            .as_ref()
            .and_then(|c| c.logical_tensor(name))
            .ok_or_else(|| ConvertError::Model(ModelError::MissingTensor { tensor: name.to_string() }))
    }
}

fn cols(t: &CanonTensor) -> usize {
    t.shape.last().copied().unwrap_or(0)
}

/// HF / MLX MXFP4 (`blocks`: 16 bytes per 32 values, `scales`: one E8M0 byte per 32) → GGML MXFP4
/// blocks, every row or only those of parity `part`.
fn mxfp4_rows(
    name: &str,
    blocks: &[u8],
    scales: &[u8],
    part: Option<usize>,
    cols: usize,
) -> Result<Cow<'static, [u8]>> {
    let quant = |e| ConvertError::Quant { tensor: name.to_string(), source: e };
    let Some(part) = part else {
        let mut out = vec![0u8; scales.len() * 17];
        minerva_quant::hf_mxfp4_to_ggml(blocks, scales, &mut out).map_err(quant)?;
        return Ok(Cow::Owned(out));
    };
    let groups = cols / 32;
    if groups == 0 || !scales.len().is_multiple_of(groups) || blocks.len() != scales.len() * 16 {
        return Err(unsupported(name, format!("MXFP4 components do not hold rows of {cols} values")));
    }
    let rows = scales.len() / groups;
    let mut out = Vec::with_capacity(rows / 2 * groups * 17);
    let mut row = vec![0u8; groups * 17];
    for r in (part..rows).step_by(2) {
        let b = blocks.get(r * groups * 16..(r + 1) * groups * 16);
        let s = scales.get(r * groups..(r + 1) * groups);
        let (Some(b), Some(s)) = (b, s) else { break };
        minerva_quant::hf_mxfp4_to_ggml(b, s, &mut row).map_err(quant)?;
        out.extend_from_slice(&row);
    }
    Ok(Cow::Owned(out))
}

/// The llama.cpp tensors an HF / MLX GPT-OSS expert tensor holds, or `None` for a non-expert.
fn gpt_oss_experts(name: &str, encoding: &Encoding<'_>, shape: &[usize]) -> Result<Option<Vec<CanonTensor>>> {
    let Some((layer, rest)) = name.strip_prefix("model.layers.").and_then(|r| r.split_once(".mlp.experts.")) else {
        return Ok(None);
    };
    let bad = || unsupported(format!("tensor {name}"), "not a GPT-OSS expert tensor this converter knows");
    let p = |suffix: &str| format!("blk.{layer}.{suffix}");
    let stored = name.to_string();
    let tensor = |name: String, dtype: DType, shape: Vec<usize>, origin: Origin| CanonTensor {
        name,
        dtype,
        shape,
        origin,
        mlx_affine: false,
    };
    let halves = |shape: &[usize]| -> Result<Vec<usize>> {
        let mut s = shape.to_vec();
        match s.get_mut(1) {
            Some(rows) if rows.is_multiple_of(2) => *rows /= 2,
            _ => return Err(bad()),
        }
        Ok(s)
    };
    let bias_dtype = match encoding {
        Encoding::Plain(view) => Some(view.dtype),
        _ => None,
    };
    let out = match (rest, encoding) {
        ("gate_up_proj", Encoding::HfMxfp4 { .. }) => {
            let s = halves(shape)?;
            vec![
                tensor(
                    p("ffn_gate_exps.weight"),
                    DType::MXFP4,
                    s.clone(),
                    Origin::HfMxfp4 { stored: stored.clone(), part: Some(0) },
                ),
                tensor(p("ffn_up_exps.weight"), DType::MXFP4, s, Origin::HfMxfp4 { stored, part: Some(1) }),
            ]
        }
        ("down_proj", Encoding::HfMxfp4 { .. }) => {
            vec![tensor(
                p("ffn_down_exps.weight"),
                DType::MXFP4,
                shape.to_vec(),
                Origin::HfMxfp4 { stored, part: None },
            )]
        }
        ("gate_up_proj_bias", Encoding::Plain(_)) => {
            let (s, dtype) = (halves(shape)?, bias_dtype.ok_or_else(bad)?);
            vec![
                tensor(p("ffn_gate_exps.bias"), dtype, s.clone(), Origin::HfBias { stored: stored.clone(), part: 0 }),
                tensor(p("ffn_up_exps.bias"), dtype, s, Origin::HfBias { stored, part: 1 }),
            ]
        }
        ("down_proj_bias", Encoding::Plain(_)) => {
            let origin = Origin::Stored { stored, permute_heads: None, plus_one: false };
            vec![tensor(p("ffn_down_exps.bias"), bias_dtype.ok_or_else(bad)?, shape.to_vec(), origin)]
        }
        (mlx, Encoding::MlxMxfp4 { .. }) => {
            let proj = mlx.strip_suffix("_proj.weight").ok_or_else(bad)?;
            vec![tensor(
                p(&format!("ffn_{proj}_exps.weight")),
                DType::MXFP4,
                shape.to_vec(),
                Origin::MlxMxfp4 { stored },
            )]
        }
        (mlx, Encoding::Plain(view)) if mlx.ends_with("_proj.bias") => {
            let proj = mlx.strip_suffix("_proj.bias").ok_or_else(bad)?;
            let origin = Origin::Stored { stored, permute_heads: None, plus_one: false };
            vec![tensor(p(&format!("ffn_{proj}_exps.bias")), view.dtype, shape.to_vec(), origin)]
        }
        _ => return Err(bad()),
    };
    Ok(Some(out))
}
