//! `minerva inspect`: metadata, tensor table, totals per type, file and parameter counts.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use minerva_core::DType;
use minerva_gguf::{Gguf, Value};
use minerva_safetensors::{Checkpoint, Encoding};
use serde::Serialize;
use serde_json::json;

use crate::error::CliError;
use crate::model_file::ModelFile;

/// Arrays longer than this are summarised as their length and first items.
const ARRAY_PREVIEW: usize = 8;
/// Strings longer than this are cut in the text report (the JSON keeps them whole).
const TEXT_PREVIEW: usize = 96;

#[derive(Serialize)]
struct Report {
    file: String,
    file_bytes: u64,
    format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alignment: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data_offset: Option<usize>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    shards: Vec<String>,
    architecture: Option<String>,
    metadata_count: usize,
    metadata: Vec<MetadataRow>,
    tensor_count: usize,
    tensors: Vec<TensorRow>,
    /// Quantized tensors stored as several (blocks + scales, weight + scales + biases).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    logical_tensors: Vec<LogicalRow>,
    totals: Vec<TypeTotal>,
    parameter_count: u64,
    tensor_bytes: u64,
}

#[derive(Serialize)]
struct MetadataRow {
    key: String,
    #[serde(rename = "type")]
    ty: String,
    value: serde_json::Value,
}

#[derive(Serialize)]
struct TensorRow {
    name: String,
    #[serde(rename = "type")]
    dtype: String,
    shape: Vec<usize>,
    bytes: usize,
    offset: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    shard: Option<String>,
}

#[derive(Serialize)]
struct LogicalRow {
    name: String,
    kind: &'static str,
    shape: Vec<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bits: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group_size: Option<u32>,
    components: Vec<String>,
}

#[derive(Serialize)]
struct TypeTotal {
    #[serde(rename = "type")]
    dtype: String,
    tensors: usize,
    parameters: u64,
    bytes: u64,
}

/// Runs `minerva inspect PATH [--json]`, writing the report to `out`.
pub fn run(path: &Path, as_json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let report = match ModelFile::open(path)? {
        ModelFile::Gguf(gguf) => build_gguf(path, &gguf),
        ModelFile::Safetensors(checkpoint) => build_safetensors(path, &checkpoint),
    };
    let written = if as_json {
        serde_json::to_writer_pretty(&mut *out, &report).map_err(std::io::Error::other).and_then(|()| writeln!(out))
    } else {
        write_text(&report, out)
    };
    match written {
        // A closed pipe (`minerva inspect … | head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|source| CliError::Output { path: "<stdout>".into(), source }),
    }
}

fn build_gguf<D: AsRef<[u8]>>(path: &Path, gguf: &Gguf<D>) -> Report {
    let metadata = gguf
        .metadata()
        .map(|(key, value)| MetadataRow { key: key.to_string(), ty: value.type_description(), value: to_json(&value) })
        .collect();
    let tensors: Vec<TensorRow> = gguf
        .tensor_infos()
        .iter()
        .map(|t| TensorRow {
            name: t.name.clone(),
            dtype: t.dtype.name().to_string(),
            shape: t.shape.clone(),
            bytes: t.byte_len(),
            offset: t.range.start,
            shard: None,
        })
        .collect();
    let totals = totals_per_type(gguf.tensor_infos().iter().map(|t| (t.dtype, t.element_count, t.byte_len())));
    Report {
        file: path.display().to_string(),
        file_bytes: gguf.bytes().len() as u64,
        format: "gguf",
        version: Some(gguf.version()),
        alignment: Some(gguf.alignment()),
        data_offset: Some(gguf.data_offset()),
        shards: Vec::new(),
        architecture: gguf.architecture().ok().map(str::to_string),
        metadata_count: gguf.metadata_len(),
        metadata,
        tensor_count: tensors.len(),
        parameter_count: totals.iter().map(|t| t.parameters).sum(),
        tensor_bytes: totals.iter().map(|t| t.bytes).sum(),
        tensors,
        logical_tensors: Vec::new(),
        totals,
    }
}

fn build_safetensors(path: &Path, checkpoint: &Checkpoint) -> Report {
    // Metadata: the shards' `__metadata__` strings, then config.json's top-level keys.
    let mut metadata: Vec<MetadataRow> = Vec::new();
    for i in 0..checkpoint.shard_paths().len() {
        for (key, value) in checkpoint.shard_metadata(i).into_iter().flatten() {
            if !metadata.iter().any(|m| &m.key == key) {
                metadata.push(MetadataRow { key: key.clone(), ty: "string".into(), value: json!(value) });
            }
        }
    }
    if let Some(serde_json::Value::Object(config)) = checkpoint.config() {
        for (key, value) in config {
            metadata.push(MetadataRow {
                key: format!("config.{key}"),
                ty: json_type(value).into(),
                value: value.clone(),
            });
        }
    }
    let tensors: Vec<TensorRow> = checkpoint
        .tensors()
        .map(|t| TensorRow {
            name: t.view.name.to_string(),
            dtype: t.view.dtype.name().to_string(),
            shape: t.view.shape.to_vec(),
            bytes: t.view.bytes.len(),
            offset: t.offset as usize,
            shard: t.shard.file_name().map(|n| n.to_string_lossy().into_owned()),
        })
        .collect();
    let logical_tensors: Vec<LogicalRow> = checkpoint
        .logical_tensors()
        .filter(|l| !matches!(l.encoding, Encoding::Plain(_)))
        .map(|l| {
            let (bits, group_size) = match l.encoding {
                Encoding::MlxAffine { bits, group_size, .. } => (Some(bits), Some(group_size)),
                Encoding::MlxMxfp4 { group_size, .. } => (Some(4), Some(group_size)),
                Encoding::HfMxfp4 { .. } => (Some(4), Some(32)),
                Encoding::Plain(_) => (None, None),
            };
            LogicalRow {
                name: l.name.to_string(),
                kind: l.encoding.kind(),
                shape: l.shape.to_vec(),
                bits,
                group_size,
                components: l.encoding.components().iter().map(|c| c.name.to_string()).collect(),
            }
        })
        .collect();
    let totals =
        totals_per_type(checkpoint.tensors().map(|t| (t.view.dtype, t.view.element_count(), t.view.bytes.len())));
    let architecture = checkpoint.config().and_then(|c| {
        c.get("model_type")
            .and_then(|t| t.as_str())
            .or_else(|| c.get("architectures")?.get(0)?.as_str())
            .map(str::to_string)
    });
    let shard_bytes = checkpoint.shard_paths().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
    Report {
        file: path.display().to_string(),
        file_bytes: shard_bytes,
        format: "safetensors",
        version: None,
        alignment: None,
        data_offset: None,
        shards: checkpoint.shard_paths().map(|p| p.display().to_string()).collect(),
        architecture,
        metadata_count: metadata.len(),
        metadata,
        tensor_count: tensors.len(),
        // Parameters count logical values: a packed MXFP4 pair is its dequantized shape.
        parameter_count: checkpoint.logical_tensors().map(|l| l.shape.iter().product::<usize>() as u64).sum(),
        tensor_bytes: totals.iter().map(|t| t.bytes).sum(),
        tensors,
        logical_tensors,
        totals,
    }
}

fn totals_per_type(tensors: impl Iterator<Item = (DType, usize, usize)>) -> Vec<TypeTotal> {
    let mut totals: BTreeMap<&'static str, TypeTotal> = BTreeMap::new();
    for (dtype, elements, bytes) in tensors {
        let total = totals.entry(dtype.name()).or_insert_with(|| TypeTotal {
            dtype: dtype.name().to_string(),
            tensors: 0,
            parameters: 0,
            bytes: 0,
        });
        total.tensors += 1;
        total.parameters += elements as u64;
        total.bytes += bytes as u64;
    }
    totals.into_values().collect()
}

fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// A value as JSON; arrays longer than [`ARRAY_PREVIEW`] become `{len, first: [...]}`.
fn to_json(value: &Value<'_>) -> serde_json::Value {
    match *value {
        Value::U8(v) => json!(v),
        Value::I8(v) => json!(v),
        Value::U16(v) => json!(v),
        Value::I16(v) => json!(v),
        Value::U32(v) => json!(v),
        Value::I32(v) => json!(v),
        // Through the f32's shortest decimal form, so 1e-5f32 shows as 1e-5, not 9.99999974737875e-6;
        // the f64 read back from that text narrows to the same f32.
        Value::F32(v) => json!(v.to_string().parse::<f64>().unwrap_or(f64::from(v))),
        Value::Bool(v) => json!(v),
        Value::String(s) => json!(s),
        Value::U64(v) => json!(v),
        Value::I64(v) => json!(v),
        Value::F64(v) => json!(v),
        Value::Array(a) => {
            let items: Vec<serde_json::Value> = a.iter().take(ARRAY_PREVIEW).map(|v| to_json(&v)).collect();
            if a.len() <= ARRAY_PREVIEW {
                serde_json::Value::Array(items)
            } else {
                json!({ "len": a.len(), "first": items })
            }
        }
    }
}

fn write_text(r: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "file:         {} ({})", r.file, human_bytes(r.file_bytes))?;
    match (r.version, r.alignment, r.data_offset) {
        (Some(version), Some(alignment), Some(data)) => {
            writeln!(out, "format:       GGUF v{version}, alignment {alignment}, tensor data at byte {data}")?
        }
        _ => writeln!(out, "format:       SafeTensors, {} shard(s)", r.shards.len())?,
    }
    for shard in &r.shards {
        writeln!(out, "  shard       {shard}")?;
    }
    writeln!(out, "architecture: {}", r.architecture.as_deref().unwrap_or("(none)"))?;
    writeln!(
        out,
        "parameters:   {} ({}) in {} tensors, {} of tensor data",
        r.parameter_count,
        human_count(r.parameter_count),
        r.tensor_count,
        human_bytes(r.tensor_bytes)
    )?;

    writeln!(out, "\nmetadata ({} keys):", r.metadata_count)?;
    let key_width = r.metadata.iter().map(|m| m.key.len()).max().unwrap_or(0);
    let type_width = r.metadata.iter().map(|m| m.ty.len()).max().unwrap_or(0);
    for m in &r.metadata {
        writeln!(out, "  {:key_width$}  {:type_width$}  {}", m.key, m.ty, text_value(&m.value))?;
    }

    writeln!(out, "\ntensors ({}):", r.tensor_count)?;
    let name_width = r.tensors.iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
    writeln!(out, "  {:name_width$}  {:7}  {:>20}  {:>12}  {:>12}", "name", "type", "shape", "bytes", "offset")?;
    for t in &r.tensors {
        writeln!(
            out,
            "  {:name_width$}  {:7}  {:>20}  {:>12}  {:>12}",
            t.name,
            t.dtype,
            format!("{:?}", t.shape),
            t.bytes,
            t.offset
        )?;
    }

    if !r.logical_tensors.is_empty() {
        writeln!(out, "\nquantized logical tensors ({}):", r.logical_tensors.len())?;
        for l in &r.logical_tensors {
            let bits = l.bits.map(|b| format!(" {b}-bit")).unwrap_or_default();
            let group = l.group_size.map(|g| format!(" group {g}")).unwrap_or_default();
            writeln!(out, "  {}  {}{bits}{group}  {:?}  from {}", l.name, l.kind, l.shape, l.components.join(" + "))?;
        }
    }

    writeln!(out, "\ntotals per type:")?;
    writeln!(out, "  {:7}  {:>7}  {:>14}  {:>14}", "type", "tensors", "parameters", "bytes")?;
    for t in &r.totals {
        writeln!(out, "  {:7}  {:>7}  {:>14}  {:>14}", t.dtype, t.tensors, t.parameters, t.bytes)?;
    }
    Ok(())
}

fn text_value(v: &serde_json::Value) -> String {
    let s = match v {
        serde_json::Value::Object(o) => match (o.get("len"), o.get("first")) {
            (Some(len), Some(first)) => format!("[{len} items] {first} …"),
            _ => v.to_string(),
        },
        other => other.to_string(),
    };
    if s.chars().count() > TEXT_PREVIEW {
        let cut: String = s.chars().take(TEXT_PREVIEW).collect();
        format!("{cut}… ({} chars)", s.chars().count())
    } else {
        s
    }
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{value:.2} {}", UNITS[unit]) }
}

fn human_count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1} K", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} M", n as f64 / 1e6),
        _ => format!("{:.2} B", n as f64 / 1e9),
    }
}
