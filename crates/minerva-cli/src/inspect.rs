//! `minerva inspect`: metadata, tensor table, totals per type, file and parameter counts.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use minerva_gguf::{Gguf, Value};
use serde::Serialize;
use serde_json::json;

use crate::error::CliError;

/// Arrays longer than this are summarised as their length and first items.
const ARRAY_PREVIEW: usize = 8;
/// Strings longer than this are cut in the text report (the JSON keeps them whole).
const TEXT_PREVIEW: usize = 96;

#[derive(Serialize)]
struct Report {
    file: String,
    file_bytes: u64,
    format: &'static str,
    version: u32,
    alignment: u64,
    data_offset: usize,
    architecture: Option<String>,
    metadata_count: usize,
    metadata: Vec<MetadataRow>,
    tensor_count: usize,
    tensors: Vec<TensorRow>,
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
    let gguf = Gguf::open(path).map_err(CliError::gguf(path))?;
    let report = build(path, &gguf);
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

fn build<D: AsRef<[u8]>>(path: &Path, gguf: &Gguf<D>) -> Report {
    let metadata = gguf
        .metadata()
        .map(|(key, value)| MetadataRow { key: key.to_string(), ty: value.type_description(), value: to_json(&value) })
        .collect();
    let mut totals: BTreeMap<String, TypeTotal> = BTreeMap::new();
    let tensors: Vec<TensorRow> = gguf
        .tensor_infos()
        .iter()
        .map(|t| {
            let total = totals.entry(t.dtype.name().to_string()).or_insert_with(|| TypeTotal {
                dtype: t.dtype.name().to_string(),
                tensors: 0,
                parameters: 0,
                bytes: 0,
            });
            total.tensors += 1;
            total.parameters += t.element_count as u64;
            total.bytes += t.byte_len() as u64;
            TensorRow {
                name: t.name.clone(),
                dtype: t.dtype.name().to_string(),
                shape: t.shape.clone(),
                bytes: t.byte_len(),
                offset: t.range.start,
            }
        })
        .collect();
    let totals: Vec<TypeTotal> = totals.into_values().collect();
    Report {
        file: path.display().to_string(),
        file_bytes: gguf.bytes().len() as u64,
        format: "gguf",
        version: gguf.version(),
        alignment: gguf.alignment(),
        data_offset: gguf.data_offset(),
        architecture: gguf.architecture().ok().map(str::to_string),
        metadata_count: gguf.metadata_len(),
        metadata,
        tensor_count: tensors.len(),
        parameter_count: totals.iter().map(|t| t.parameters).sum(),
        tensor_bytes: totals.iter().map(|t| t.bytes).sum(),
        tensors,
        totals,
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
    writeln!(
        out,
        "format:       GGUF v{}, alignment {}, tensor data at byte {}",
        r.version, r.alignment, r.data_offset
    )?;
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
