//! Canonical tensors → one llama.cpp GGUF file: `{arch}.*` keys from the config (the keys
//! `convert_hf_to_gguf.py` writes and `Config::from_gguf` reads), RoPE factor tensors rebuilt from
//! the config, tensors in canonical order, header first and data streamed.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use minerva_core::DType;
use minerva_gguf::{GgufWriter, MetadataValue};

use super::dtype::{convert_bytes, output_dtypes, record, record_shift};
use super::mixture::Quant;
use super::source::{Family, Layout, SourceModel};
use super::{ConvertOptions, Extras, Progress, Report, Result, io_error, unsupported};
use crate::arch::gemma3::Gemma3Config;
use crate::arch::gemma3::config::default_pattern as default_gemma3_pattern;
use crate::arch::gpt_oss::{GptOssConfig, SWIGLU_ALPHA, SWIGLU_LIMIT};
use crate::config::Config;
use crate::rope::RopeScaling;

/// `general.file_type` (llama.cpp's `llama_ftype`) for a file whose matrices are mostly `dtype`.
fn file_type(dtype: DType, gpt_oss: bool) -> Option<u32> {
    Some(match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q4_0 => 2,
        DType::Q4_1 => 3,
        DType::Q8_0 if gpt_oss => 38,
        DType::Q8_0 => 7,
        DType::BF16 => 32,
        DType::MXFP4 => 38,
        _ => return None,
    })
}

/// GGUF metadata entries.
type Keys = Vec<(String, MetadataValue)>;
/// F32 tensors that carry configuration (RoPE factors), by name.
type ConfigTensors = Vec<(String, Vec<u8>)>;

fn count(n: usize) -> MetadataValue {
    MetadataValue::from(u32::try_from(n).unwrap_or(u32::MAX))
}

/// The shared `{arch}.*` keys.
fn base_keys(c: &Config, arch: &str) -> Vec<(String, MetadataValue)> {
    let k = |s: &str| format!("{arch}.{s}");
    let mut keys = vec![
        (k("block_count"), count(c.n_layer)),
        (k("context_length"), count(c.context_length)),
        (k("embedding_length"), count(c.n_embd)),
        (k("feed_forward_length"), count(c.n_ff)),
        (k("attention.head_count"), count(c.n_head)),
        (k("attention.head_count_kv"), count(c.n_head_kv)),
        (k("attention.key_length"), count(c.head_dim)),
        (k("attention.value_length"), count(c.head_dim)),
        (k("attention.layer_norm_rms_epsilon"), c.rms_eps.into()),
        (k("rope.freq_base"), c.rope.base.into()),
    ];
    if let Some(w) = c.sliding_window {
        keys.push((k("attention.sliding_window"), count(w)));
    }
    keys
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Keys of the LLaMA-block architectures (LLaMA, Mistral, Phi-3, Qwen) under the row's GGUF name
/// (`llama` for Mistral, as llama.cpp's converter writes it), and the RoPE factor tensors.
fn dense_keys(c: &Config, arch: &str) -> Result<(Keys, ConfigTensors)> {
    let mut keys = vec![("general.architecture".to_string(), MetadataValue::from(arch))];
    keys.extend(base_keys(c, arch));
    keys.push((format!("{arch}.rope.dimension_count"), count(c.rope.dim)));
    let mut tensors = Vec::new();
    match &c.rope.scaling {
        RopeScaling::None => {}
        RopeScaling::Linear { factor } => {
            keys.push((format!("{arch}.rope.scaling.type"), "linear".into()));
            keys.push((format!("{arch}.rope.scaling.factor"), (*factor).into()));
        }
        RopeScaling::FreqFactors { factors } => tensors.push(("rope_freqs.weight".into(), f32_bytes(factors))),
        RopeScaling::LongRope { short, long, original_context, attn_factor } => {
            keys.push((format!("{arch}.rope.scaling.original_context_length"), count(*original_context)));
            keys.push((format!("{arch}.rope.scaling.attn_factor"), (*attn_factor).into()));
            tensors.push(("rope_factors_long.weight".into(), f32_bytes(long)));
            tensors.push(("rope_factors_short.weight".into(), f32_bytes(short)));
        }
        other => return Err(unsupported("rope scaling", format!("{other:?} has no GGUF form for {arch}"))),
    }
    Ok((keys, tensors))
}

/// Gemma 3 keys, as llama.cpp's converter writes them (no `rope.dimension_count`), plus the
/// layer pattern when it is not the default every-6th-global one; refuses what GGUF cannot say.
fn gemma3_keys(g: &Gemma3Config, arch: &str) -> Result<Keys> {
    let c = &g.base;
    let k = |s: &str| format!("{arch}.{s}");
    // GGUF has no key for the query scale: readers take 1/√head_dim (1/√(n_embd/n_head) at 62 layers).
    let scalar = if c.n_layer == 62 { (c.n_embd / c.n_head).max(1) as f32 } else { c.head_dim as f32 };
    if (g.query_scale - (c.head_dim as f32 / scalar).sqrt()).abs() > 1e-6 {
        let pre = c.head_dim as f32 / (g.query_scale * g.query_scale);
        return Err(unsupported(
            format!("query_pre_attn_scalar {pre}"),
            format!("GGUF has no key for it (readers assume {scalar})"),
        ));
    }
    if g.local_rope.scaling != RopeScaling::None {
        return Err(unsupported("sliding_attention rope scaling", "GGUF scales only the global layers' RoPE"));
    }
    let mut keys = vec![("general.architecture".to_string(), MetadataValue::from(arch))];
    keys.extend(base_keys(c, arch));
    keys.push((k("rope.freq_base_swa"), g.local_rope.base.into()));
    match &c.rope.scaling {
        RopeScaling::None => {}
        RopeScaling::Linear { factor } => {
            keys.push((k("rope.scaling.type"), "linear".into()));
            keys.push((k("rope.scaling.factor"), (*factor).into()));
        }
        other => return Err(unsupported("rope scaling", format!("{other:?} has no GGUF form for gemma3"))),
    }
    if c.sliding_window.is_some() && g.sliding_layers != default_gemma3_pattern(c.n_layer) {
        let values = g.sliding_layers.iter().map(|&s| MetadataValue::Bool(s)).collect();
        let flags = MetadataValue::Array { elem_type: minerva_gguf::ValueType::Bool, values };
        keys.push((k("attention.sliding_window_pattern"), flags));
    }
    Ok(keys)
}

/// GPT-OSS keys; refuses what GGUF cannot say (llama.cpp fixes the SwiGLU constants, the even
/// sliding-layer pattern and YaRN without truncation).
fn gpt_oss_keys(g: &GptOssConfig, arch: &str) -> Result<Vec<(String, MetadataValue)>> {
    let c = &g.base;
    if g.swiglu_alpha != SWIGLU_ALPHA || g.swiglu_limit != SWIGLU_LIMIT {
        return Err(unsupported("swiglu_alpha / swiglu_limit", "GGUF has no key; llama.cpp uses 1.702 / 7.0"));
    }
    let even: Vec<bool> = (0..c.n_layer).map(|il| c.sliding_window.is_some() && il % 2 == 0).collect();
    if g.sliding_layers != even {
        return Err(unsupported("layer_types", "GGUF gpt-oss slides the window on even layers only"));
    }
    let k = |s: &str| format!("{arch}.{s}");
    let mut keys = vec![("general.architecture".to_string(), MetadataValue::from(arch))];
    keys.extend(base_keys(c, arch));
    keys.push((k("expert_count"), count(g.n_expert)));
    keys.push((k("expert_used_count"), count(g.n_expert_used)));
    keys.push((k("expert_feed_forward_length"), count(c.n_ff)));
    match &c.rope.scaling {
        RopeScaling::None => {}
        RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, truncate } => {
            if *truncate {
                return Err(unsupported("rope_scaling.truncate = true", "GGUF has no key for it (read back as false)"));
            }
            keys.push((k("rope.scaling.type"), "yarn".into()));
            keys.push((k("rope.scaling.factor"), (*factor).into()));
            keys.push((k("rope.scaling.original_context_length"), count(*original_context)));
            if *beta_fast != 32.0 || *beta_slow != 1.0 {
                keys.push((k("rope.scaling.yarn_beta_fast"), (*beta_fast).into()));
                keys.push((k("rope.scaling.yarn_beta_slow"), (*beta_slow).into()));
            }
        }
        other => return Err(unsupported("rope scaling", format!("{other:?} has no GGUF form for gpt-oss"))),
    }
    Ok(keys)
}

/// Writes `model` as a GGUF file at `path`.
pub(crate) fn write(
    model: &SourceModel,
    path: &Path,
    opts: &ConvertOptions,
    extras: &Extras,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Report> {
    let arch = model.spec.gguf_output;
    let (model_keys, config_tensors) = match &model.family {
        Family::Dense { config, .. } => dense_keys(config, arch)?,
        Family::Gemma3 { config, .. } => (gemma3_keys(config, arch)?, Vec::new()),
        Family::GptOss(g) => (gpt_oss_keys(g, arch)?, Vec::new()),
    };
    let gpt_oss = matches!(model.family, Family::GptOss(_));
    let out_dtypes = output_dtypes(model, opts)?;

    let mut w = GgufWriter::new();
    for (key, value) in model_keys {
        w.add_metadata(key, value)?;
    }
    // The source's descriptive `general.*` keys, then its tokenizer as stored; a SafeTensors
    // source's tokenizer comes translated in `extras`.
    if let Some(g) = model.gguf() {
        for (key, value) in g.metadata() {
            let descriptive = key.starts_with("general.")
                && !matches!(
                    key,
                    "general.architecture" | "general.file_type" | "general.alignment" | "general.quantization_version"
                );
            if descriptive || key.starts_with("tokenizer.") {
                w.add_metadata(key, value.to_owned_value())?;
            }
        }
    } else {
        for (key, value) in &extras.gguf_metadata {
            w.add_metadata(key.clone(), value.clone())?;
        }
    }
    // The matrices' most common type (by bytes) names the file type.
    let mut bytes_by_type: HashMap<DType, usize> = HashMap::new();
    for (t, dtype) in model.tensors.iter().zip(&out_dtypes) {
        if t.shape.len() >= 2 {
            let cols = t.shape.last().copied().unwrap_or(0);
            let rows = t.shape.iter().rev().skip(1).fold(1usize, |n, &d| n.saturating_mul(d));
            let bytes = dtype.row_bytes(cols).unwrap_or(0).saturating_mul(rows);
            let total = bytes_by_type.entry(*dtype).or_default();
            *total = total.saturating_add(bytes);
        }
    }
    let main = bytes_by_type.iter().max_by_key(|(_, b)| **b).map(|(d, _)| *d);
    if let Some(ft) = opts.quant.and_then(Quant::file_type).or_else(|| main.and_then(|d| file_type(d, gpt_oss))) {
        w.add_metadata("general.file_type", ft)?;
    }
    if out_dtypes.iter().any(|d| d.info().quantized) {
        w.add_metadata("general.quantization_version", 2u32)?;
    }
    for (name, bytes) in &config_tensors {
        w.add_tensor_info(name.as_str(), DType::F32, &[bytes.len() / 4])?;
    }
    for (t, dtype) in model.tensors.iter().zip(&out_dtypes) {
        w.add_tensor_info(t.name.as_str(), *dtype, &t.shape)?;
    }

    let file = std::fs::File::create(path).map_err(io_error(path))?;
    let mut data = w.write_header(std::io::BufWriter::with_capacity(1 << 20, file))?;
    let mut report = Report::default();
    let total = config_tensors.len() + model.tensors.len();
    for (done, (name, bytes)) in config_tensors.iter().enumerate() {
        data.write_chunk(bytes)?;
        report.bytes_written += bytes.len() as u64;
        progress(Progress { tensor: name, done: done + 1, total });
    }
    for (i, (t, dtype)) in model.tensors.iter().zip(&out_dtypes).enumerate() {
        let stored = model.read(t)?;
        let cols = t.shape.last().copied().unwrap_or(1);
        let bytes = convert_bytes(&t.name, t.dtype, *dtype, &stored, cols)?;
        data.write_chunk(&bytes)?;
        report.bytes_written += bytes.len() as u64;
        if model.spec.shifts_norm(&t.name) && model.layout != Layout::Gguf {
            record_shift(&mut report, model.shift_is_exact(t)?);
        } else {
            record(&mut report, t, *dtype, false);
        }
        progress(Progress { tensor: &t.name, done: config_tensors.len() + i + 1, total });
    }
    data.finish()?.flush().map_err(io_error(path))?;
    Ok(report)
}
