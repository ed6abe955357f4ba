//! `xtask bench-run`: one format measured in its own process (so page cache, allocator and peak
//! RSS belong to it alone); prints one JSON [`Row`] on stdout and writes the prompt's logits.
//!
//! Memory comes from `/proc/self/status`: `VmHWM` (peak RSS) and `RssAnon` before and after the
//! open — anonymous pages the open added are weights the loader copied or converted rather than
//! mapped (a mapped file's pages count as `RssFile`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use minerva_model::{Backend, CpuBackend, LogitsFor, Model, SequenceInput};

use super::Row;

/// `xtask bench-run`'s arguments (set by the parent, not by hand).
#[derive(Debug, clap::Parser)]
#[command(name = "xtask bench-run", about = "Measure one model format (run by cargo xtask bench)")]
pub struct ChildArgs {
    /// The format's label.
    #[arg(long)]
    format: String,
    /// The model (GGUF file or directory).
    #[arg(long)]
    model: PathBuf,
    /// Where to write the prompt's logits (positions × vocab, f32 LE).
    #[arg(long)]
    logits: PathBuf,
    /// Prompt tokens.
    #[arg(long)]
    prompt: usize,
    /// Decoded tokens.
    #[arg(long = "gen")]
    gen_tokens: usize,
    /// CPU threads.
    #[arg(long)]
    threads: Option<usize>,
    /// `cpu` or `wgpu`.
    #[arg(long, default_value = "cpu")]
    device: String,
}

/// A `/proc/self/status` field in bytes (its value is in kB).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The model's files: the GGUF file, or every file of the directory.
fn files(model: &Path) -> Result<Vec<PathBuf>> {
    if model.is_file() {
        return Ok(vec![model.to_path_buf()]);
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(model).with_context(|| format!("cannot list {}", model.display()))? {
        let path = entry?.path();
        if path.is_file() {
            out.push(path);
        }
    }
    Ok(out)
}

/// Drops the files' pages from the page cache (after writing back any dirty ones, which
/// `DONTNEED` would otherwise keep), so the next open reads them from disk.
fn evict(files: &[PathBuf]) -> Result<()> {
    for path in files {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        file.sync_all().ok();
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed)
            .with_context(|| format!("posix_fadvise {}", path.display()))?;
    }
    Ok(())
}

/// Prompt ids: a fixed pseudo-random sequence over the vocabulary (the same in every process).
fn prompt_tokens(n: usize, vocab: usize) -> Vec<u32> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % vocab.max(1) as u64) as u32
        })
        .collect()
}

/// The median of `values` (not empty).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Measures one format and prints its row.
pub fn run_child(args: &ChildArgs) -> Result<()> {
    let row = match args.device.as_str() {
        "cpu" => measure(args, || CpuBackend::new(args.threads).context("CPU backend"))?,
        "wgpu" => measure(args, || {
            minerva_wgpu::WgpuBackend::new(minerva_wgpu::WgpuOptions::default()).context("--device wgpu")
        })?,
        other => bail!("--device {other}: cpu or wgpu"),
    };
    println!("{}", serde_json::to_string(&row)?);
    Ok(())
}

/// Measures one format on the backends `backend` makes (one per open). On a GPU backend
/// `copied_bytes` counts the host memory the upload left behind, not device memory.
fn measure<B: Backend>(args: &ChildArgs, backend: impl Fn() -> Result<B>) -> Result<Row> {
    let files = files(&args.model)?;
    let file_bytes = files.iter().map(|f| f.metadata().map_or(0, |m| m.len())).sum();
    evict(&files)?;

    // The backend (a GPU device) is made before the clock starts: the open is the model's.
    let first_backend = backend()?;
    let anon_before = status_bytes("RssAnon");
    let start = Instant::now();
    let model = Model::load(&args.model, first_backend).with_context(|| format!("{}", args.model.display()))?;
    let open_cold_ms = ms(start);
    let copied_bytes = status_bytes("RssAnon").saturating_sub(anon_before);

    let tokens = prompt_tokens(args.prompt, model.config.vocab);
    let mut cache = model.new_cache(1, args.prompt + args.gen_tokens)?;
    let logits =
        model.forward(&mut cache, &[SequenceInput { tokens: &tokens, start_pos: 0, slot: 0 }], LogitsFor::All)?;
    let vocab = model.config.vocab;
    let last = logits.data.get(logits.data.len().saturating_sub(vocab)..).unwrap_or_default();
    let mut next = minerva_model::argmax(last);
    let first_token_ms = ms(start);
    let bytes: Vec<u8> = logits.data.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&args.logits, bytes).with_context(|| format!("cannot write {}", args.logits.display()))?;

    // Decode: the median step, so that a step the machine took away from us does not count.
    let mut steps = Vec::with_capacity(args.gen_tokens);
    for i in 0..args.gen_tokens {
        let input = [next];
        let step = SequenceInput { tokens: &input, start_pos: args.prompt + i, slot: 0 };
        let t = Instant::now();
        next = model.forward_greedy(&mut cache, &[step])?.first().copied().unwrap_or(0);
        steps.push(t.elapsed().as_secs_f64());
    }
    let decode_tok_s = 1.0 / median(&mut steps);

    // Prefill, warm: the median of three runs when one takes under a second, else one run.
    let mut runs = Vec::new();
    while runs.len() < 3 && (runs.is_empty() || runs[0] < 1.0) {
        let mut cache = model.new_cache(1, args.prompt)?;
        let t = Instant::now();
        model.forward_greedy(&mut cache, &[SequenceInput { tokens: &tokens, start_pos: 0, slot: 0 }])?;
        runs.push(t.elapsed().as_secs_f64());
    }
    let prefill_tok_s = args.prompt as f64 / median(&mut runs);
    drop(cache);
    drop(model);

    let warm_backend = backend()?;
    let t = Instant::now();
    let model = Model::load(&args.model, warm_backend)?;
    let open_ms = ms(t);
    drop(model);

    Ok(Row {
        format: args.format.clone(),
        file_bytes,
        open_ms,
        open_cold_ms,
        first_token_ms,
        prefill_tok_s,
        decode_tok_s,
        peak_rss_bytes: status_bytes("VmHWM"),
        copied_bytes,
        max_abs_logit_diff: 0.0,
    })
}
