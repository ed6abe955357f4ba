//! Canonical tensors → a Hugging Face (`save_pretrained`) or MLX (mlx-lm) directory:
//! `config.json`, `model.safetensors` or 5 GB shards + `model.safetensors.index.json`, and the
//! caller's tokenizer files.
//!
//! | canonical | Hugging Face | MLX |
//! |---|---|---|
//! | LLaMA `attn_q` / `attn_k` | rows un-permuted (`rotate_half` order) | same |
//! | GPT-OSS `ffn_{gate,up}_exps.weight` | one `gate_up_proj_{blocks,scales}`, rows interleaved | `experts.{gate,up}_proj.{weight,scales}` (u32 / u8) |
//! | GPT-OSS `ffn_down_exps.weight` | `down_proj_{blocks,scales}` | `experts.down_proj.{weight,scales}` |
//! | GPT-OSS expert biases | `gate_up_proj_bias` (interleaved), `down_proj_bias` | `experts.*_proj.bias` |
//! | weight matrices, `--mlx-bits` | — | `{module}.{weight,scales,biases}`: `mx.quantize`'s affine (u32 / float / float) |
//! | everything else | `hf_name` | same |

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use minerva_core::DType;
use minerva_safetensors::SafetensorsWriter;
use serde_json::{Map, Value, json};

use super::dtype::{convert_bytes, is_float, output_dtype, permute_qk_rows, record, record_shift, shift_norm};
use super::source::{CanonTensor, Family, SourceModel};
use super::{ConvertError, ConvertOptions, Extras, MlxQuant, Progress, Report, Result, Target, io_error, unsupported};
use crate::arch::gemma3::Gemma3Config;
use crate::arch::gpt_oss::GptOssConfig;
use crate::arch::registry::{ARCHITECTURES, ArchSpec, Graph};
use crate::config::Config;
use crate::rope::{RopeConfig, RopeScaling, llama3_factors};
use crate::source::hf_name;

/// One unit of output: one or two canonical tensors → one or two stored tensors.
enum Item<'m> {
    /// A tensor under its HF name, in `dtype`, rows un-permuted over `permute_heads` heads;
    /// `minus_one`: a Gemma norm factor `1 + w` written as `w` (f32).
    Single { t: &'m CanonTensor, name: String, dtype: DType, permute_heads: Option<usize>, minus_one: bool },
    /// GGML MXFP4 experts → HF `{base}_blocks` + `_scales`, or MLX `{base}.weight` + `.scales`.
    Mxfp4 { t: &'m CanonTensor, base: String, mlx: bool },
    /// GGML MXFP4 gate and up experts → one HF `gate_up_proj`, rows interleaved (gate even).
    GateUp { gate: &'m CanonTensor, up: &'m CanonTensor, base: String },
    /// Gate and up expert biases → HF's interleaved `gate_up_proj_bias`.
    BiasPair { gate: &'m CanonTensor, up: &'m CanonTensor, name: String },
    /// A float matrix → MLX affine `{base}.weight` (u32), `.scales` and `.biases` (`dtype`), as
    /// `mx.quantize` writes the matrix once in `dtype`, rows un-permuted over `permute_heads`.
    Affine { t: &'m CanonTensor, base: String, dtype: DType, permute_heads: Option<usize>, quant: MlxQuant },
}

type Decl = (String, DType, Vec<usize>);

fn mxfp4_decls(base: &str, shape: &[usize], mlx: bool) -> Result<Vec<Decl>> {
    let (cols, lead) = match shape.split_last() {
        Some((&c, lead)) if c.is_multiple_of(32) => (c, lead.to_vec()),
        _ => return Err(unsupported(base, format!("MXFP4 shape {shape:?}"))),
    };
    let with = |tail: &[usize]| lead.iter().chain(tail).copied().collect::<Vec<_>>();
    Ok(if mlx {
        vec![
            (format!("{base}.weight"), DType::U32, with(&[cols / 8])),
            (format!("{base}.scales"), DType::U8, with(&[cols / 32])),
        ]
    } else {
        vec![
            (format!("{base}_blocks"), DType::U8, with(&[cols / 32, 16])),
            (format!("{base}_scales"), DType::U8, with(&[cols / 32])),
        ]
    })
}

impl Item<'_> {
    /// The stored tensors this item writes, in order.
    fn decls(&self) -> Result<Vec<Decl>> {
        Ok(match self {
            Item::Single { t, name, dtype, .. } => vec![(name.clone(), *dtype, t.shape.clone())],
            Item::Mxfp4 { t, base, mlx } => mxfp4_decls(base, &t.shape, *mlx)?,
            Item::GateUp { gate, base, .. } => mxfp4_decls(base, &doubled_rows(gate)?, false)?,
            Item::BiasPair { gate, name, .. } => vec![(name.clone(), gate.dtype, doubled_rows(gate)?)],
            Item::Affine { t, base, dtype, quant, .. } => {
                let (rows, cols) = (t.shape[0], t.shape[1]);
                let groups = vec![rows, cols / quant.group_size];
                vec![
                    (format!("{base}.weight"), DType::U32, vec![rows, cols * quant.bits as usize / 32]),
                    (format!("{base}.scales"), *dtype, groups.clone()),
                    (format!("{base}.biases"), *dtype, groups),
                ]
            }
        })
    }
}

/// The shape of HF's fused gate/up tensor: the gate tensor's, with twice the rows (dimension 1).
fn doubled_rows(gate: &CanonTensor) -> Result<Vec<usize>> {
    let mut shape = gate.shape.clone();
    match shape.get_mut(1).and_then(|rows| rows.checked_mul(2).map(|d| (rows, d))) {
        Some((rows, doubled)) => *rows = doubled,
        None => {
            return Err(unsupported(
                format!("tensor {}", gate.name),
                format!("shape {:?} is not [experts, rows, …]", gate.shape),
            ));
        }
    }
    Ok(shape)
}

/// Bytes of a tensor of `dtype` and `shape` (saturating: a size that overflows fails later, when
/// the writer checks it).
fn byte_size(dtype: DType, shape: &[usize]) -> u64 {
    let cols = shape.last().copied().unwrap_or(1);
    let rows = shape.iter().rev().skip(1).fold(1usize, |n, &d| n.saturating_mul(d));
    dtype.row_bytes(cols).unwrap_or(0).saturating_mul(rows) as u64
}

/// Splits `t` (an expert tensor `blk.L.ffn_{proj}_exps.{kind}`) into (layer, proj, kind).
fn expert_parts(name: &str) -> Option<(&str, &str, &str)> {
    let (layer, rest) = name.strip_prefix("blk.")?.split_once(".ffn_")?;
    let (proj, kind) = rest.split_once("_exps.")?;
    Some((layer, proj, kind))
}

/// The output plan: every canonical tensor in one item.
fn plan<'m>(model: &'m SourceModel, opts: &ConvertOptions) -> Result<Vec<Item<'m>>> {
    let mlx = opts.target == Target::Mlx;
    let c = model.config();
    let spec = model.spec;
    let find = |name: &str| model.tensors.iter().find(|t| t.name == name);
    let mut items = Vec::new();
    for t in &model.tensors {
        if let Some((layer, proj, kind)) = expert_parts(&t.name)
            && matches!(model.family, Family::GptOss(_))
        {
            let base = format!("model.layers.{layer}.mlp.experts.");
            let missing = || unsupported(format!("tensor {}", t.name), "its gate/up partner is missing");
            let item = match (mlx, proj, kind) {
                (true, _, "weight") => Item::Mxfp4 { t, base: format!("{base}{proj}_proj"), mlx },
                (true, _, _) => Item::Single {
                    t,
                    name: format!("{base}{proj}_proj.bias"),
                    dtype: t.dtype,
                    permute_heads: None,
                    minus_one: false,
                },
                (false, "down", "weight") => Item::Mxfp4 { t, base: format!("{base}down_proj"), mlx },
                (false, "down", _) => Item::Single {
                    t,
                    name: format!("{base}down_proj_bias"),
                    dtype: t.dtype,
                    permute_heads: None,
                    minus_one: false,
                },
                (false, "up", _) => continue, // written with its gate
                (false, "gate", "weight") => Item::GateUp {
                    gate: t,
                    up: find(&format!("blk.{layer}.ffn_up_exps.weight")).ok_or_else(missing)?,
                    base: format!("{base}gate_up_proj"),
                },
                (false, "gate", _) => Item::BiasPair {
                    gate: t,
                    up: find(&format!("blk.{layer}.ffn_up_exps.bias")).ok_or_else(missing)?,
                    name: format!("{base}gate_up_proj_bias"),
                },
                _ => return Err(unsupported(format!("tensor {}", t.name), "not a GPT-OSS expert tensor")),
            };
            if let Item::Mxfp4 { t, .. } | Item::GateUp { gate: t, .. } = &item
                && t.dtype != DType::MXFP4
            {
                return Err(unsupported(format!("tensor {}", t.name), format!("{} experts (MXFP4 expected)", t.dtype)));
            }
            items.push(item);
            continue;
        }
        let name = hf_name(spec.name, &t.name);
        if name == t.name {
            let reason = format!("no Hugging Face name for it in {}", spec.name);
            return Err(unsupported(format!("tensor {}", t.name), reason));
        }
        let permute_heads = match t.name.rsplit('.').nth(1) {
            Some("attn_q") if spec.permutes_qk => Some(c.n_head),
            Some("attn_k") if spec.permutes_qk => Some(c.n_head_kv),
            _ => None,
        };
        let minus_one = spec.shifts_norm(&t.name);
        let dtype = output_dtype(t, None, opts)?;
        // mlx-lm quantizes the linear and embedding layers whose rows are whole groups.
        let affine = opts.mlx_quant.filter(|q| {
            mlx && t.shape.len() == 2 && t.shape[1].is_multiple_of(q.group_size) && !minus_one && is_float(dtype)
        });
        match (affine, name.strip_suffix(".weight")) {
            (Some(quant), Some(base)) => {
                items.push(Item::Affine { t, base: base.to_string(), dtype, permute_heads, quant });
            }
            _ => items.push(Item::Single { t, name, dtype, permute_heads, minus_one }),
        }
    }
    Ok(items)
}

/// Writes `model` as a directory at `dir`.
pub(crate) fn write(
    model: &SourceModel,
    dir: &Path,
    opts: &ConvertOptions,
    extras: &Extras,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Report> {
    let items = plan(model, opts)?;
    let decls = items.iter().map(Item::decls).collect::<Result<Vec<_>>>()?;
    let size = |d: &Decl| byte_size(d.1, &d.2);
    // Consecutive items into shards of at most `shard_bytes`.
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    let mut shard_size = 0u64;
    for (i, d) in decls.iter().enumerate() {
        let bytes: u64 = d.iter().map(size).sum();
        if shard_size + bytes > opts.shard_bytes && shards.last().is_some_and(|s| !s.is_empty()) {
            shards.push(Vec::new());
            shard_size = 0;
        }
        shard_size += bytes;
        if let Some(s) = shards.last_mut() {
            s.push(i);
        }
    }
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let n = shards.len();
    let file_name = |i: usize| {
        if n == 1 { "model.safetensors".to_string() } else { format!("model-{:05}-of-{n:05}.safetensors", i + 1) }
    };
    let mut report = Report::default();
    let mut weight_map = Map::new();
    let (mut done, total) = (0, items.len());
    for (si, shard) in shards.iter().enumerate() {
        let mut w = SafetensorsWriter::new();
        w.add_metadata("format", if opts.target == Target::Mlx { "mlx" } else { "pt" });
        for &i in shard {
            for (name, dtype, shape) in &decls[i] {
                w.add_tensor(name.clone(), *dtype, shape)?;
                weight_map.insert(name.clone(), Value::String(file_name(si)));
            }
        }
        let path = dir.join(file_name(si));
        let file = std::fs::File::create(&path).map_err(io_error(&path))?;
        let mut data = w.write_header(std::io::BufWriter::with_capacity(1 << 20, file))?;
        for &i in shard {
            for bytes in item_bytes(model, &items[i], &mut report)? {
                report.bytes_written += bytes.len() as u64;
                data.write_chunk(&bytes)?;
            }
            done += 1;
            progress(Progress { tensor: &decls[i][0].0, done, total });
        }
        data.finish()?.flush().map_err(io_error(&path))?;
    }
    if n > 1 {
        let total_size: u64 = decls.iter().flatten().map(size).sum();
        let index = json!({ "metadata": { "total_size": total_size }, "weight_map": weight_map });
        write_json(&dir.join(minerva_safetensors::INDEX_FILE), &index)?;
    }
    let main_dtype =
        decls.iter().flatten().find(|d| d.2.len() >= 2 && matches!(d.1, DType::F32 | DType::F16 | DType::BF16));
    let affine: Vec<(&str, MlxQuant)> = items
        .iter()
        .filter_map(|item| match item {
            Item::Affine { base, quant, .. } => Some((base.as_str(), *quant)),
            _ => None,
        })
        .collect();
    let config = config_json(model, opts.target, main_dtype.map(|d| d.1), &affine)?;
    write_json(&dir.join("config.json"), &config)?;
    for (name, bytes) in &extras.files {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(io_error(&path))?;
    }
    Ok(report)
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    let text =
        serde_json::to_string_pretty(value).map_err(|e| unsupported(path.display().to_string(), e.to_string()))?;
    std::fs::write(path, text + "\n").map_err(io_error(path))
}

/// A quantizer's error on `t` as the converter's.
fn quant_error(t: &CanonTensor) -> impl FnOnce(minerva_quant::QuantError) -> ConvertError {
    let tensor = t.name.clone();
    move |source| ConvertError::Quant { tensor, source }
}

/// The stored bytes of one item, in declaration order.
fn item_bytes<'m>(model: &'m SourceModel, item: &Item<'m>, report: &mut Report) -> Result<Vec<Cow<'m, [u8]>>> {
    let quant = |t: &CanonTensor| {
        let tensor = t.name.clone();
        move |source| ConvertError::Quant { tensor, source }
    };
    let to_hf = |t: &CanonTensor, ggml: &[u8]| -> Result<Vec<Cow<'m, [u8]>>> {
        let groups = ggml.len() / 17;
        let (mut blocks, mut scales) = (vec![0u8; groups * 16], vec![0u8; groups]);
        minerva_quant::ggml_mxfp4_to_hf(ggml, &mut blocks, &mut scales).map_err(quant(t))?;
        Ok(vec![Cow::Owned(blocks), Cow::Owned(scales)])
    };
    Ok(match item {
        Item::Single { t, dtype, minus_one: true, .. } => {
            let cols = t.shape.last().copied().unwrap_or(1);
            // From a checkpoint, the stored `w` as it is (widened to f32 as the canonical form
            // is); from GGUF, `1 + w` shifted back.
            if let Some((stored, w)) = model.read_unshifted(t)? {
                record(report, &stored, *dtype, false);
                return Ok(vec![Cow::Owned(convert_bytes(&t.name, stored.dtype, *dtype, &w, cols)?.into_owned())]);
            }
            let (shifted, exact) = shift_norm(&t.name, t.dtype, &model.read(t)?, -1.0)?;
            record_shift(report, exact);
            vec![Cow::Owned(convert_bytes(&t.name, DType::F32, *dtype, &shifted, cols)?.into_owned())]
        }
        Item::Single { t, dtype, permute_heads, .. } => {
            let stored = model.read(t)?;
            let cols = t.shape.last().copied().unwrap_or(1);
            let converted = if t.dtype == *dtype {
                stored
            } else {
                Cow::Owned(convert_bytes(&t.name, t.dtype, *dtype, &stored, cols)?.into_owned())
            };
            record(report, t, *dtype, permute_heads.is_some());
            match permute_heads {
                Some(h) => {
                    let rows = t.shape.first().copied().unwrap_or(0);
                    vec![Cow::Owned(permute_qk_rows(&t.name, &converted, rows, *h, true)?)]
                }
                None => vec![converted],
            }
        }
        Item::Mxfp4 { t, .. } => {
            record(report, t, DType::MXFP4, true);
            to_hf(t, &model.read(t)?)?
        }
        Item::GateUp { gate, up, .. } => {
            let (g, u) = (model.read(gate)?, model.read(up)?);
            let cols = gate.shape.last().copied().unwrap_or(0);
            let row = DType::MXFP4.row_bytes(cols).filter(|&r| r > 0 && g.len() == u.len() && g.len() % r == 0);
            let row =
                row.ok_or_else(|| unsupported(format!("tensor {}", gate.name), "gate and up experts differ in size"))?;
            let mut interleaved = Vec::with_capacity(2 * g.len());
            for (gr, ur) in g.chunks_exact(row).zip(u.chunks_exact(row)) {
                interleaved.extend_from_slice(gr);
                interleaved.extend_from_slice(ur);
            }
            record(report, gate, DType::MXFP4, true);
            record(report, up, DType::MXFP4, true);
            to_hf(gate, &interleaved)?
        }
        Item::BiasPair { gate, up, .. } => {
            let (g, u) = (model.read(gate)?, model.read(up)?);
            let size = gate.dtype.info().block_bytes as usize;
            if gate.dtype != up.dtype || g.len() != u.len() {
                return Err(unsupported(format!("tensor {}", gate.name), "gate and up biases differ"));
            }
            let mut interleaved = Vec::with_capacity(2 * g.len());
            for (a, b) in g.chunks_exact(size).zip(u.chunks_exact(size)) {
                interleaved.extend_from_slice(a);
                interleaved.extend_from_slice(b);
            }
            record(report, gate, gate.dtype, true);
            record(report, up, up.dtype, true);
            vec![Cow::Owned(interleaved)]
        }
        Item::Affine { t, dtype, permute_heads, quant, .. } => {
            let wanted =
                minerva_quant::MlxAffine { bits: quant.bits, group_size: quant.group_size, scale_dtype: *dtype };
            if let Some((stored, parts)) = model.stored_affine(t)?
                && stored == wanted
            {
                // MLX with the same parameters: the codes as they are (in the checkpoint's row
                // order, which the output's is).
                report.mlx_affine_copied += 1;
                return Ok(parts.into_iter().map(Cow::Borrowed).collect());
            }
            let (rows, cols) = (t.shape[0], t.shape[1]);
            // The matrix as MLX holds it before quantizing: in the output float type.
            let stored = model.read(t)?;
            let mut typed = convert_bytes(&t.name, t.dtype, *dtype, &stored, cols)?.into_owned();
            if let Some(h) = permute_heads {
                typed = permute_qk_rows(&t.name, &typed, rows, *h, true)?;
            }
            let mut values = vec![0.0f32; rows * cols];
            minerva_quant::dequantize(*dtype, &typed, &mut values).map_err(quant_error(t))?;
            let params =
                minerva_quant::MlxAffine { bits: quant.bits, group_size: quant.group_size, scale_dtype: *dtype };
            let groups = rows * cols / quant.group_size;
            let width = dtype.info().block_bytes as usize;
            let mut weight = vec![0u8; rows * cols * quant.bits as usize / 8];
            let (mut scales, mut biases) = (vec![0u8; groups * width], vec![0u8; groups * width]);
            params.quantize(&values, &mut weight, &mut scales, &mut biases).map_err(quant_error(t))?;
            if t.mlx_affine() {
                report.mlx_affine_dequantized += 1;
            }
            report.mlx_affine_quantized += 1;
            vec![Cow::Owned(weight), Cow::Owned(scales), Cow::Owned(biases)]
        }
    })
}

/// `torch_dtype` names.
fn torch_dtype(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float32",
        DType::F16 => "float16",
        _ => "bfloat16",
    }
}

/// `(factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)` whose LLaMA-3
/// formula gives exactly `factors` (a GGUF keeps only the result, `rope_freqs.weight`); the
/// candidates are the values Meta's and others' checkpoints use.
fn llama3_params(rope: &RopeConfig, factors: &[f32]) -> Option<(f32, f32, f32, usize)> {
    let factor = factors.iter().copied().fold(1.0f32, f32::max);
    // Meta's values (1, 4, 8192) first: small models can match several sets exactly.
    for low in [1.0f32, 2.0, 4.0] {
        for high in [4.0f32, 2.0, 8.0, 16.0] {
            for original in (4..=20).rev().map(|p| 1usize << p) {
                if high > low && llama3_factors(rope.base, rope.dim, factor, low, high, original) == factors {
                    return Some((factor, low, high, original));
                }
            }
        }
    }
    None
}

/// `rope_parameters` for a RoPE config (transformers 5's form, which Minerva reads first).
fn rope_parameters(c: &Config) -> Result<Value> {
    let mut p = json!({ "rope_theta": c.rope.base, "rope_type": "default" });
    match &c.rope.scaling {
        RopeScaling::None => {}
        RopeScaling::Linear { factor } => {
            p = json!({ "rope_theta": c.rope.base, "rope_type": "linear", "factor": factor })
        }
        RopeScaling::FreqFactors { factors } => {
            let (factor, low, high, original) = llama3_params(&c.rope, factors).ok_or_else(|| {
                unsupported("rope_freqs.weight", "these factors are not LLaMA-3's formula for any usual parameters")
            })?;
            p = json!({ "rope_theta": c.rope.base, "rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                        "high_freq_factor": high, "original_max_position_embeddings": original });
        }
        RopeScaling::LongRope { short, long, original_context, attn_factor } => {
            p = json!({ "rope_theta": c.rope.base, "rope_type": "longrope", "short_factor": short, "long_factor": long,
                        "original_max_position_embeddings": original_context, "attention_factor": attn_factor,
                        "factor": c.context_length as f32 / *original_context as f32 });
        }
        RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, truncate } => {
            p = json!({ "rope_theta": c.rope.base, "rope_type": "yarn", "factor": factor, "beta_fast": beta_fast,
                        "beta_slow": beta_slow, "original_max_position_embeddings": original_context,
                        "truncate": truncate });
        }
    }
    Ok(p)
}

/// The keys every architecture shares.
fn base_config(c: &Config) -> Result<Map<String, Value>> {
    let mut m = Map::new();
    m.insert("hidden_size".into(), json!(c.n_embd));
    m.insert("intermediate_size".into(), json!(c.n_ff));
    m.insert("num_hidden_layers".into(), json!(c.n_layer));
    m.insert("num_attention_heads".into(), json!(c.n_head));
    m.insert("num_key_value_heads".into(), json!(c.n_head_kv));
    m.insert("head_dim".into(), json!(c.head_dim));
    m.insert("rms_norm_eps".into(), json!(c.rms_eps));
    m.insert("max_position_embeddings".into(), json!(c.context_length));
    m.insert("vocab_size".into(), json!(c.vocab));
    m.insert("hidden_act".into(), json!("silu"));
    m.insert("rope_theta".into(), json!(c.rope.base));
    m.insert("rope_parameters".into(), rope_parameters(c)?);
    // Readers older than transformers 5 (mlx-lm among them) take the scaling from `rope_scaling`,
    // its kind from `type`, and the base from `rope_theta` only.
    if c.rope.scaling != RopeScaling::None {
        let mut legacy = rope_parameters(c)?;
        if let Some(kind) = legacy.get("rope_type").cloned() {
            legacy["type"] = kind;
        }
        m.insert("rope_scaling".into(), legacy);
    }
    if c.rope.dim != c.head_dim {
        m.insert("partial_rotary_factor".into(), json!(c.rope.dim as f32 / c.head_dim as f32));
    }
    if let RopeScaling::LongRope { original_context, .. } = c.rope.scaling {
        m.insert("original_max_position_embeddings".into(), json!(original_context));
    }
    Ok(m)
}

fn gpt_oss_config(spec: &ArchSpec, g: &GptOssConfig, target: Target) -> Result<Map<String, Value>> {
    let c = &g.base;
    let mut m = base_config(c)?;
    identify(&mut m, spec, false);
    m.insert("attention_bias".into(), json!(true));
    let layer_types: Vec<&str> =
        g.sliding_layers.iter().map(|&s| if s { "sliding_attention" } else { "full_attention" }).collect();
    m.insert("layer_types".into(), json!(layer_types));
    m.insert("num_local_experts".into(), json!(g.n_expert));
    m.insert("num_experts_per_tok".into(), json!(g.n_expert_used));
    m.insert("sliding_window".into(), json!(c.sliding_window));
    m.insert("swiglu_limit".into(), json!(g.swiglu_limit));
    m.insert("swiglu_alpha".into(), json!(g.swiglu_alpha));
    if target == Target::Mlx {
        // Only the experts have `.scales`, so only they are quantized (mlx-lm and Minerva both
        // quantize a module exactly when its scales are stored).
        let q = json!({ "group_size": 32, "bits": 4, "mode": "mxfp4" });
        m.insert("quantization".into(), q.clone());
        m.insert("quantization_config".into(), q);
    } else {
        let not_converted = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"];
        m.insert(
            "quantization_config".into(),
            json!({ "quant_method": "mxfp4", "modules_to_not_convert": not_converted }),
        );
    }
    Ok(m)
}

/// The config of the LLaMA-block architectures (LLaMA, Mistral, Phi-3, Qwen).
fn dense_config(model: &SourceModel, c: &Config, tied: bool) -> Result<Map<String, Value>> {
    // llama.cpp writes Mistral as `llama`: a window on a row that ignores windows means the row
    // of the same graph and Q/K order that honours one.
    let mut spec = model.spec;
    if c.sliding_window.is_some() && !spec.hf_sliding_window {
        let windowed = ARCHITECTURES
            .iter()
            .find(|a| a.graph == spec.graph && a.hf_sliding_window && a.permutes_qk == spec.permutes_qk);
        spec = windowed.copied().unwrap_or(spec);
    }
    let mut m = base_config(c)?;
    identify(&mut m, spec, tied);
    match spec.graph {
        Graph::Qwen => {
            m.insert("use_sliding_window".into(), json!(false));
            if spec.qk_norm {
                let biased = model.tensors.iter().any(|t| t.name.ends_with("attn_q.bias"));
                m.insert("attention_bias".into(), json!(biased));
            }
        }
        _ => {
            m.insert("attention_bias".into(), json!(false));
            m.insert("mlp_bias".into(), json!(false));
        }
    }
    if spec.hf_sliding_window {
        m.insert("sliding_window".into(), json!(c.sliding_window));
    }
    Ok(m)
}

/// `architectures`, `model_type` and `tie_word_embeddings`.
fn identify(m: &mut Map<String, Value>, spec: &ArchSpec, tied: bool) {
    m.insert("architectures".into(), json!([spec.hf_class]));
    m.insert("model_type".into(), json!(spec.hf_output));
    m.insert("tie_word_embeddings".into(), json!(tied));
}

/// `Gemma3TextConfig`: both layer kinds' RoPE (transformers 5's nested `rope_parameters` and the
/// older `rope_theta` / `rope_local_base_freq`), the layer pattern and the query scale.
fn gemma3_config(spec: &ArchSpec, g: &Gemma3Config, tied: bool) -> Result<Map<String, Value>> {
    let c = &g.base;
    let mut m = base_config(c)?;
    identify(&mut m, spec, tied);
    m.insert("hidden_act".into(), json!("gelu_pytorch_tanh"));
    m.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
    m.insert("attention_bias".into(), json!(false));
    let local = match g.local_rope.scaling {
        RopeScaling::None => json!({ "rope_type": "default", "rope_theta": g.local_rope.base }),
        _ => return Err(unsupported("sliding_attention rope scaling", "Gemma 3 scales only the global layers")),
    };
    m.insert("rope_parameters".into(), json!({ "full_attention": rope_parameters(c)?, "sliding_attention": local }));
    m.insert("rope_local_base_freq".into(), json!(g.local_rope.base));
    let layer_types: Vec<&str> =
        g.sliding_layers.iter().map(|&s| if s { "sliding_attention" } else { "full_attention" }).collect();
    m.insert("layer_types".into(), json!(layer_types));
    m.insert("sliding_window".into(), json!(c.sliding_window));
    // Released configs say a whole number (256, 168), and transformers' `Gemma3TextConfig` types it
    // `int`; the config keeps only its square root.
    let scalar = c.head_dim as f32 / (g.query_scale * g.query_scale);
    let scalar = match (scalar - scalar.round()).abs() < 1e-3 {
        true => json!(scalar.round() as i64),
        false => json!(scalar),
    };
    m.insert("query_pre_attn_scalar".into(), scalar);
    Ok(m)
}

/// `config.json`: the keys Minerva and transformers read, generated from the config; a
/// SafeTensors source's other keys (token ids, …) are kept.
///
/// `affine`: the modules written MLX affine-quantized, in `quantization` as mlx-lm writes it — at
/// the top for a dense model, one entry per module beside GPT-OSS's top-level `mxfp4`.
fn config_json(
    model: &SourceModel,
    target: Target,
    dtype: Option<DType>,
    affine: &[(&str, MlxQuant)],
) -> Result<Value> {
    let generated = match &model.family {
        Family::Dense { config, tied } => dense_config(model, config, *tied)?,
        Family::Gemma3 { config, tied } => gemma3_config(model.spec, config, *tied)?,
        Family::GptOss(g) => gpt_oss_config(model.spec, g, target)?,
    };
    let mut m = match model.checkpoint().and_then(|c| c.config()) {
        Some(Value::Object(source)) => source.clone(),
        _ => Map::new(),
    };
    for key in ["quantization", "quantization_config", "rope_scaling", "torch_dtype"] {
        m.remove(key);
    }
    m.extend(generated);
    m.insert("dtype".into(), json!(torch_dtype(dtype.unwrap_or(DType::BF16))));
    if let Some(&(_, quant)) = affine.first() {
        let entry = json!({ "group_size": quant.group_size, "bits": quant.bits, "mode": "affine" });
        let q = match m.get("quantization") {
            // GPT-OSS: its experts are the top-level mode; every affine module says so itself.
            Some(Value::Object(top)) => {
                let mut q = top.clone();
                q.extend(affine.iter().map(|(module, _)| (module.to_string(), entry.clone())));
                Value::Object(q)
            }
            _ => entry,
        };
        m.insert("quantization".into(), q.clone());
        m.insert("quantization_config".into(), q);
    }
    Ok(Value::Object(m))
}
