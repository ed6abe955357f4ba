//! Resolving and loading a model for the generation commands: `--model PATH` or `--hf REPO[:FILE]`,
//! a progress bar while a large file pages in, the tokenizer, and the backend (`--device`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use minerva_generate::Tokenizer;
use minerva_gguf::{Gguf, Mmap};
use minerva_model::{Backend, CpuBackend, Model};

use crate::device::Device;
use crate::error::CliError;

/// Where the model comes from (shared by `run`, `chat`).
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// A GGUF model file, or a SafeTensors checkpoint (file, index or directory) with its
    /// `config.json` and `tokenizer.json`.
    #[arg(long, short = 'm', value_name = "PATH", required_unless_present = "hf", conflicts_with = "hf")]
    pub model: Option<PathBuf>,
    /// A model in the Hugging Face cache (`REPO:FILE`, e.g. `HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:model.gguf`);
    /// downloaded when missing and online.
    #[arg(long, value_name = "REPO[:FILE]")]
    pub hf: Option<String>,
    /// Where the model runs.
    #[arg(long, value_enum, default_value_t)]
    pub device: Device,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Reference mode on the CPU: f32 activations in every matmul (slower; what transformers computes).
    #[arg(long)]
    pub f32_activations: bool,
}

/// A loaded model and its tokenizer.
pub struct Loaded<B: Backend> {
    /// The model file (for error messages).
    pub path: PathBuf,
    /// The model on its backend.
    pub model: Model<B>,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
}

/// Resolves `--hf REPO[:FILE]` through the hf-hub cache, downloading when not cached.
pub fn resolve_hf(spec: &str) -> Result<PathBuf, CliError> {
    let (repo, file) = spec.split_once(':').ok_or_else(|| {
        CliError::Usage(format!("--hf {spec}: give the file too, as REPO:FILE (e.g. {spec}:model-q4_0.gguf)"))
    })?;
    if repo.is_empty() || file.is_empty() {
        return Err(CliError::Usage(format!("--hf {spec}: expected REPO:FILE")));
    }
    let cache = hf_hub::Cache::from_env();
    if let Some(path) = cache.model(repo.to_string()).get(file) {
        return Ok(path);
    }
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_progress(std::io::stderr().is_terminal())
        .build()
        .map_err(|e| CliError::Usage(format!("--hf {spec}: {}", first_line(&e.to_string()))))?;
    api.model(repo.to_string()).get(file).map_err(|e| {
        CliError::Usage(format!(
            "--hf {spec}: not in the Hugging Face cache ({}) and the download failed: {}",
            cache.path().display(),
            first_line(&e.to_string())
        ))
    })
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// The model path from `--model` or `--hf`.
pub fn model_path(args: &ModelArgs) -> Result<PathBuf, CliError> {
    match (&args.model, &args.hf) {
        (Some(p), _) => Ok(p.clone()),
        (None, Some(spec)) => resolve_hf(spec),
        (None, None) => Err(CliError::Usage("give --model PATH or --hf REPO:FILE".into())),
    }
}

/// Touches every page of the mapping so the first tokens do not wait on disk, with a progress
/// bar on a terminal. Small files are left to page in on demand.
fn page_in(path: &Path, bytes: &[u8]) {
    const BIG: usize = 512 << 20;
    if bytes.len() < BIG {
        return;
    }
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(bytes.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(format!("loading {}", path.file_name().unwrap_or_default().to_string_lossy()));
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut sum = 0u8;
    for chunk in bytes.chunks(16 << 20) {
        // One byte per 4 KiB page faults the page in.
        sum = chunk.iter().step_by(4096).fold(sum, |a, &b| a.wrapping_add(b));
        bar.inc(chunk.len() as u64);
    }
    std::hint::black_box(sum);
    bar.finish_and_clear();
}

/// The CPU backend `args` ask for (threads, reference mode).
pub fn cpu_backend(args: &ModelArgs) -> Result<CpuBackend, CliError> {
    let backend = CpuBackend::new(args.threads)
        .map_err(|source| CliError::Model { path: args.model.clone().unwrap_or_default(), source })?;
    Ok(backend.with_f32_activations(args.f32_activations))
}

/// Opens a model onto `backend`: a GGUF file (parsed, paged in, tokenizer from its metadata) or a
/// SafeTensors checkpoint (tokenizer from the `tokenizer.json` beside it).
pub fn load<B: Backend>(args: &ModelArgs, backend: B) -> Result<Loaded<B>, CliError> {
    let path = model_path(args)?;
    let model_err = |source| CliError::Model { path: path.clone(), source };
    let gen_err = |source| CliError::Generate { path: path.clone(), source };
    let is_safetensors = path.is_dir() || path.extension().is_some_and(|e| e == "safetensors" || e == "json");
    if is_safetensors {
        let dir = if path.is_dir() { path.as_path() } else { path.parent().unwrap_or(Path::new(".")) };
        let tokenizer = Tokenizer::from_dir(dir).map_err(gen_err)?;
        let model = Model::load(&path, backend).map_err(model_err)?;
        return Ok(Loaded { path, model, tokenizer });
    }
    let gguf: Gguf<Mmap> = Gguf::open(&path).map_err(CliError::gguf(&path))?;
    page_in(&path, gguf.bytes());
    let tokenizer = Tokenizer::from_gguf(&gguf).map_err(gen_err)?;
    let model = Model::from_gguf(Arc::new(gguf), backend).map_err(model_err)?;
    Ok(Loaded { path, model, tokenizer })
}

/// A tokenizer alone: from a GGUF file's metadata, or a directory's `tokenizer.json`.
pub fn tokenizer_only(path: &Path) -> Result<Tokenizer, CliError> {
    let gen_err = |source| CliError::Generate { path: path.to_path_buf(), source };
    if path.is_dir() {
        return Tokenizer::from_dir(path).map_err(gen_err);
    }
    let gguf = Gguf::open(path).map_err(CliError::gguf(path))?;
    Tokenizer::from_gguf(&gguf).map_err(gen_err)
}
