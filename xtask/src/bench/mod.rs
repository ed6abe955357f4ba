//! `cargo xtask bench`: the same weights in GGUF, Hugging Face SafeTensors and MLX, each opened and
//! run in a fresh process, side by side.
//!
//! ```text
//! cargo xtask bench [--arch gpt-oss|llama] [--preset tiny|1b|8b|20b] [--formats gguf,safetensors,mlx]
//!                   [--device cpu|wgpu] [--threads T] [--prompt 128] [--gen 64] [--json FILE] [--plot FILE.svg] [--work DIR]
//! ```
//!
//! 1. `cargo xtask synth` writes the preset's random weights once, in the Hugging Face layout
//!    (bf16, GPT-OSS experts MXFP4), under `--work`;
//! 2. `minerva convert` (the library) writes them as GGUF, and the GGUF as MLX — every conversion
//!    lossless, so every format holds the same values (cached in `--work`); the SafeTensors row
//!    runs the written HF checkpoint itself;
//! 3. for each format (on `--device cpu` or `wgpu`) a child process (`xtask bench-run`, [`child`]) evicts the files' pages
//!    (`posix_fadvise(DONTNEED)`), opens the model (cold), prefills `--prompt` random tokens and
//!    samples one (time to first token), decodes `--gen` tokens, prefills again warm, re-opens
//!    warm, and reports peak RSS and the anonymous memory the open added (`copied_bytes`: weights
//!    the loader copied or converted instead of mapping);
//! 4. the table (stdout), `--json`, `--plot` (SVG bars, [`plot`]); the largest |Δlogit| of each
//!    format against the GGUF row over every prompt position must be ≤ 1e-3, else the bench fails.

mod child;
mod plot;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use minerva_core::DType;
use minerva_model::convert::{ConvertOptions, Extras, Target, convert};
use serde::{Deserialize, Serialize};

pub use child::{ChildArgs, run_child};

use crate::synth::{self, Arch, Format};

/// Largest |Δlogit| allowed between formats holding the same weights.
pub const MAX_LOGIT_DIFF: f32 = 1e-3;

/// `cargo xtask bench`'s arguments.
#[derive(Debug, clap::Parser)]
#[command(name = "cargo xtask bench", about = "Compare GGUF, SafeTensors and MLX on the same weights")]
pub struct BenchArgs {
    /// `gpt-oss` or `llama`.
    #[arg(long, default_value = "gpt-oss")]
    arch: String,
    /// `tiny` (default), `1b` / `8b` (llama) or `20b` (gpt-oss).
    #[arg(long, default_value = "tiny")]
    preset: String,
    /// Formats to run, comma-separated.
    #[arg(long, default_value = "gguf,safetensors,mlx", value_delimiter = ',')]
    formats: Vec<String>,
    /// `cpu` or `wgpu` (the adapter `MINERVA_ADAPTER` names, else the most capable).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// CPU threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Prompt tokens.
    #[arg(long, default_value_t = 128)]
    prompt: usize,
    /// Decoded tokens.
    #[arg(long = "gen", default_value_t = 64)]
    gen_tokens: usize,
    /// Write the rows as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw the rows as an SVG bar chart.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Where the weights are written and cached (default `target/xtask-bench`).
    #[arg(long, value_name = "DIR")]
    work: Option<PathBuf>,
}

/// One format's measurements (the `--json` row).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// `gguf`, `safetensors` or `mlx`.
    pub format: String,
    /// Bytes of the model's files.
    pub file_bytes: u64,
    /// Opening with the pages in the page cache.
    pub open_ms: f64,
    /// Opening after `posix_fadvise(DONTNEED)` on every file.
    pub open_cold_ms: f64,
    /// Cold open + prefill of the prompt + the first sampled token.
    pub first_token_ms: f64,
    /// Prompt tokens per second (warm; median of 3 runs when one takes under a second).
    pub prefill_tok_s: f64,
    /// Decoded tokens per second (1 / the median step).
    pub decode_tok_s: f64,
    /// Peak resident memory of the process.
    pub peak_rss_bytes: u64,
    /// Anonymous memory the open added: weights copied or converted rather than mapped.
    pub copied_bytes: u64,
    /// Largest |Δlogit| against the GGUF row over every prompt position.
    pub max_abs_logit_diff: f32,
}

/// The `--json` document.
#[derive(Debug, Serialize)]
struct Report<'a> {
    arch: &'a str,
    preset: &'a str,
    threads: Option<usize>,
    prompt: usize,
    gen_tokens: usize,
    rows: &'a [Row],
}

/// The preset's weights in `format` under `dir`, converted (and cached) as the module says.
fn prepare(args: &BenchArgs, arch: Arch, dir: &Path, format: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let source = dir.join("source");
    if !source.exists() {
        let partial = dir.join("source.partial");
        if partial.exists() {
            std::fs::remove_dir_all(&partial)?;
        }
        let opts = synth::Options {
            arch,
            format: Format::Safetensors,
            quant: DType::BF16,
            seed: 0x5EED,
            out: partial.clone(),
            shard_bytes: synth::MAX_SHARD,
            vocab: false,
        };
        eprintln!("xtask bench: writing the {} {} weights …", args.arch, args.preset);
        synth::synth(&opts)?;
        std::fs::rename(&partial, &source)?;
    }
    let gguf = dir.join("model.gguf");
    let convert_to = |src: &Path, out: &Path, target: Target| -> Result<()> {
        if out.exists() {
            return Ok(());
        }
        let report = convert(src, out, &ConvertOptions::new(target), &Extras::default(), &mut |_| {})
            .with_context(|| format!("converting {} to {}", src.display(), out.display()))?;
        ensure!(report.is_lossless(), "{}: {}", out.display(), report.summary());
        eprintln!("xtask bench: {}: {}", out.display(), report.summary());
        Ok(())
    };
    convert_to(&source, &gguf, Target::Gguf)?;
    match format {
        "gguf" => Ok(gguf),
        // The HF checkpoint as written: one copy fewer on disk (20b: 14 GB).
        "safetensors" | "hf" => Ok(source),
        "mlx" => {
            let mlx = dir.join("mlx");
            convert_to(&gguf, &mlx, Target::Mlx)?;
            Ok(mlx)
        }
        other => bail!("--formats {other}: gguf, safetensors or mlx"),
    }
}

/// Runs one format in a fresh process.
fn measure(args: &BenchArgs, format: &str, model: &Path, logits: &Path) -> Result<Row> {
    let exe = std::env::current_exe().context("cannot find the xtask binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("bench-run").arg("--format").arg(format).arg("--model").arg(model).arg("--logits").arg(logits);
    cmd.args(["--prompt", &args.prompt.to_string(), "--gen", &args.gen_tokens.to_string()]);
    cmd.args(["--device", &args.device]);
    if let Some(t) = args.threads {
        cmd.args(["--threads", &t.to_string()]);
    }
    let out = cmd.output().context("cannot start xtask bench-run")?;
    if !out.status.success() {
        bail!("{format}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("{format}: bench-run printed no row"))
}

fn read_f32s(path: &Path) -> Result<Vec<f32>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// The table printed on stdout.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| format | file MB | open cold ms | open warm ms | first token ms | prefill tok/s | decode tok/s | peak RSS MB | copied MB | max |Δlogit| |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        s += &format!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1e} |\n",
            r.format,
            mb(r.file_bytes),
            r.open_cold_ms,
            r.open_ms,
            r.first_token_ms,
            r.prefill_tok_s,
            r.decode_tok_s,
            mb(r.peak_rss_bytes),
            mb(r.copied_bytes),
            r.max_abs_logit_diff
        );
    }
    s
}

/// `cargo xtask bench`.
pub fn run(args: &BenchArgs, root: &Path) -> Result<()> {
    if !matches!(args.device.as_str(), "cpu" | "wgpu") {
        bail!("--device {}: cpu or wgpu", args.device);
    }
    let arch = synth::preset_arch(&args.arch, &args.preset)?;
    ensure!(args.prompt > 0 && args.gen_tokens > 0, "--prompt and --gen must be positive");
    let work = args.work.clone().unwrap_or_else(|| root.join("target/xtask-bench"));
    let dir = work.join(format!("{}-{}", args.arch, args.preset));
    // The GGUF row is the reference for the logits; it runs first even when not asked for.
    let mut formats: Vec<&str> = vec!["gguf"];
    formats.extend(args.formats.iter().map(String::as_str).filter(|f| *f != "gguf"));
    let mut rows = Vec::new();
    let mut reference: Option<Vec<f32>> = None;
    for format in formats {
        let model = prepare(args, arch, &dir, format)?;
        let logits_path = dir.join(format!("logits-{format}.f32"));
        let mut row = measure(args, format, &model, &logits_path)?;
        let logits = read_f32s(&logits_path)?;
        row.max_abs_logit_diff = match &reference {
            None => 0.0,
            Some(r) => {
                ensure!(r.len() == logits.len(), "{format}: {} logits, GGUF {}", logits.len(), r.len());
                r.iter().zip(&logits).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
            }
        };
        if reference.is_none() {
            reference = Some(logits);
        }
        if format != "gguf" || args.formats.iter().any(|f| f == "gguf") {
            rows.push(row);
        }
    }
    print!("{}", table(&rows));
    if let Some(path) = &args.json {
        let report = Report {
            arch: &args.arch,
            preset: &args.preset,
            threads: args.threads,
            prompt: args.prompt,
            gen_tokens: args.gen_tokens,
            rows: &rows,
        };
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        plot::svg(path, &format!("{} {}", args.arch, args.preset), &rows)?;
    }
    if let Some(bad) = rows.iter().find(|r| r.max_abs_logit_diff > MAX_LOGIT_DIFF) {
        bail!("{}: max |Δlogit| {} against GGUF exceeds {MAX_LOGIT_DIFF}", bad.format, bad.max_abs_logit_diff);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn prepared_formats_hold_the_same_weights_and_render() {
        let work = tempfile::tempdir().unwrap();
        let args = BenchArgs::try_parse_from(["bench", "--work", work.path().to_str().unwrap()]).unwrap();
        let arch = Arch::GptOss(synth::gpt_oss_preset("tiny").unwrap());
        let dir = work.path().join("gpt-oss-tiny");
        let paths: Vec<PathBuf> =
            ["gguf", "safetensors", "mlx"].iter().map(|f| prepare(&args, arch, &dir, f).unwrap()).collect();
        assert!(
            paths[0].is_file() && paths[1].join("model.safetensors").exists() && paths[2].join("config.json").exists()
        );
        let stamp = std::fs::metadata(&paths[0]).unwrap().modified().unwrap();
        prepare(&args, arch, &dir, "gguf").unwrap();
        assert_eq!(std::fs::metadata(&paths[0]).unwrap().modified().unwrap(), stamp, "cached, not rewritten");

        let tokens = [1u32, 2, 3, 200, 5];
        let logits = |p: &Path| {
            let model = minerva_model::Model::load(p, minerva_model::CpuBackend::new(Some(1)).unwrap()).unwrap();
            let mut cache = model.new_cache(1, tokens.len()).unwrap();
            let input = minerva_model::SequenceInput { tokens: &tokens, start_pos: 0, slot: 0 };
            model.forward(&mut cache, &[input], minerva_model::LogitsFor::All).unwrap().data
        };
        let reference = logits(&paths[0]);
        for p in &paths[1..] {
            assert_eq!(logits(p), reference, "{}", p.display());
        }

        let row = |format: &str, copied: u64| Row {
            format: format.into(),
            file_bytes: 400_000,
            open_ms: 0.2,
            open_cold_ms: 0.6,
            first_token_ms: 11.0,
            prefill_tok_s: 2e4,
            decode_tok_s: 1e4,
            peak_rss_bytes: 6_000_000,
            copied_bytes: copied,
            max_abs_logit_diff: 0.0,
        };
        let rows = [row("gguf", 0), row("mlx", 300_000)];
        let text = table(&rows);
        assert_eq!(text.lines().count(), 4);
        assert!(text.contains("| mlx | 0.4 | 0.6 | 0.2 | 11.0 | 20000.0 | 10000.00 | 6.0 | 0.3 | 0.0e0 |"), "{text}");
        let svg = work.path().join("plot.svg");
        plot::svg(&svg, "gpt-oss tiny", &rows).unwrap();
        let drawn = std::fs::read_to_string(&svg).unwrap();
        assert!(drawn.starts_with("<svg") && drawn.contains("mlx") && drawn.contains("decode tok/s"));
    }
}
