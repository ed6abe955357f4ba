//! Loading a model for every model-running command (`run`, `chat`, `score`, `bench`): one
//! [`ModelArgs`] (a path, `--model` or `--hf`; `--device`, `--threads`, `--f32-activations`) and
//! one backend dispatch, [`with_model`], which opens the backend `--device` names, loads the model
//! onto it (a progress bar while a large file pages in or uploads) and hands it to a
//! [`ModelTask`], generic over the backend.
//!
//! ```text
//! ModelArgs ─► model_path (--hf: hf-hub cache) ─► with_model ─┬─ cpu:  CpuBackend (threads, f32) ─┐
//!                                                             └─ wgpu: WgpuBackend (upload bar) ───┴─► Loaded<B> ─► task.run
//! ```

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use minerva_core::DType;
use minerva_generate::Tokenizer;
use minerva_gguf::{Gguf, Mmap};
use minerva_model::{Backend, CpuBackend, Model, Repack, RepackMemory, SourceFormat};

use crate::device::Device;
use crate::error::CliError;

/// Where the model comes from and where it runs (every model-running command).
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// A GGUF model file, or a SafeTensors checkpoint (file, index or directory) with its
    /// `config.json` (and `tokenizer.json` to generate text); the same as --model.
    #[arg(value_name = "PATH", conflicts_with_all = ["model", "hf"])]
    pub path: Option<PathBuf>,
    /// A GGUF model file, or a SafeTensors checkpoint (file, index or directory) with its
    /// `config.json` and `tokenizer.json`.
    #[arg(long, short = 'm', value_name = "PATH", required_unless_present_any = ["hf", "path"], conflicts_with = "hf")]
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
    /// The KV cache's element type (llama.cpp's `--cache-type-k/v`): f16 halves f32's memory and
    /// the bandwidth of attention, q8_0 (CPU) nearly halves f16's; f32 is exact. Default: f16
    /// (f32 with --f32-activations, the reference mode).
    #[arg(long, value_enum, value_name = "TYPE")]
    pub kv_type: Option<KvType>,
    /// CPU: convert HF/MLX MXFP4 experts to GGML blocks at load (as much memory again as the
    /// experts) instead of reading them where they lie; faster decode where the CPU, not memory,
    /// bounds it (few cores).
    #[arg(long)]
    pub mxfp4_copies: bool,
    /// CPU: dequantize MLX affine matrices (mlx-lm's `convert -q`) to bf16 at load (twice the
    /// bytes of 8-bit codes) instead of reading them where they lie, a few rows at a time in cache
    /// (the same results bit for bit).
    #[arg(long)]
    pub mlx_affine_copies: bool,
    /// CPU: copy Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 and Q2_K…Q6_K matrices once, while
    /// loading, into groups of 16 interleaved rows multiplied with 8-bit activations as
    /// llama.cpp's (the file's pages are given back; faster prefill and decode; for the 32-value
    /// formats llama.cpp's accuracy rather than the i16 path's): `auto` where this CPU's
    /// repacked kernel for the format is the faster (AVX-512 VNNI; AVX-VNNI and AVX2 for the
    /// 32-value formats, Q2_K, Q3_K and Q6_K) and the format keeps its activations' precision (the
    /// K-quants) or the architecture lets its matrices take 8-bit activations (the LLaMA family and Gemma
    /// 3), `on` everywhere; `off` (default) reads every weight in place.
    #[arg(long, value_enum, value_name = "MODE", default_value_t)]
    pub repack: RepackMode,
    /// CPU, with --repack auto (refused with on and off): the most memory the repacked copies
    /// may take (e.g. 8GiB); the matrices past it stay in place. Default: half the memory
    /// available when the first is copied (the copies cannot be paged out as the file's pages
    /// can).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub repack_memory: Option<u64>,
}

/// A size in bytes: a number with an optional unit (K, M, G, T; KiB… or KB…, all powers of 1024).
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("unknown unit {unit:?} (use B, KiB, MiB, GiB or TiB)")),
    };
    let value: f64 = number.parse().map_err(|_| format!("{s:?} is not a size such as 2GiB"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!("{s:?} is not a size in range"));
    }
    Ok(bytes as u64)
}

/// `--repack`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RepackMode {
    /// Where this CPU's repacked kernel is the faster (AVX-512 VNNI; AVX-VNNI and AVX2 for the
    /// 32-value formats, Q2_K, Q3_K and Q6_K) and the format's activations keep their precision (the
    /// K-quants) or the architecture lets its matrices take 8-bit activations (the LLaMA family
    /// and Gemma 3).
    Auto,
    /// Every Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 and Q2_K…Q6_K matrix (GPT-OSS's experts too).
    On,
    /// None: zero-copy (i16 activations for the 32-value formats).
    #[default]
    Off,
}

impl RepackMode {
    fn mode(self) -> Repack {
        match self {
            RepackMode::Auto => Repack::Auto,
            RepackMode::On => Repack::On,
            RepackMode::Off => Repack::Off,
        }
    }
}

/// `--kv-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KvType {
    /// 4 bytes per value, exact.
    F32,
    /// 2 bytes per value, rounded to nearest.
    F16,
    /// 34 bytes per 32 values: 8-bit integers and an f16 scale per 32 (CPU only).
    #[value(name = "q8_0")]
    Q8_0,
}

impl KvType {
    fn dtype(self) -> DType {
        match self {
            KvType::F32 => DType::F32,
            KvType::F16 => DType::F16,
            KvType::Q8_0 => DType::Q8_0,
        }
    }
}

/// A loaded model.
pub struct Loaded<B: Backend> {
    /// The model file (for error messages).
    pub path: PathBuf,
    /// The model on its backend.
    pub model: Model<B>,
    /// The GPU adapter's description on `--device wgpu` (`run --stats` prints it).
    pub device: Option<String>,
    /// The parsed GGUF file, whose metadata holds the tokenizer (`None` for SafeTensors).
    gguf: Option<Arc<Gguf<Mmap>>>,
    /// A draft model for speculative decoding, on a backend of the same kind ([`with_models`]).
    pub draft: Option<Box<Loaded<B>>>,
}

impl<B: Backend> Loaded<B> {
    /// The model's tokenizer: from the GGUF metadata, or the `tokenizer.json` beside a
    /// SafeTensors checkpoint.
    pub fn tokenizer(&self) -> Result<Tokenizer, CliError> {
        let gen_err = |source| CliError::Generate { path: self.path.clone(), source };
        match &self.gguf {
            Some(gguf) => Tokenizer::from_gguf(gguf).map_err(gen_err),
            None => Tokenizer::from_dir(checkpoint_dir(&self.path)).map_err(gen_err),
        }
    }
}

/// What a command does with a loaded model, whichever backend it is on.
pub trait ModelTask {
    /// What the command returns.
    type Output;
    /// Runs the command on `loaded`.
    fn run<B: Backend>(self, loaded: Loaded<B>) -> Result<Self::Output, CliError>;
}

/// Runs `f` inside one pool of `--threads` threads (one per core by default; the calling thread
/// is one of them), which the backend then takes as its own: `f` gets the model arguments with
/// `path` resolved and `threads: None`, and the thread count. For commands whose own work beside
/// the model's (`bench`'s measurements, `score`'s log-probabilities) shares the backend's threads.
pub fn in_one_pool<R>(
    args: &ModelArgs,
    path: &Path,
    f: impl FnOnce(&ModelArgs, usize) -> Result<R, CliError>,
) -> Result<R, CliError> {
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let pool = minerva_quant::ComputePool::new(threads).map_err(|e| CliError::Request {
        path: path.to_path_buf(),
        message: format!("cannot start {threads} threads: {e}"),
    })?;
    let args = ModelArgs { path: Some(path.to_path_buf()), model: None, hf: None, threads: None, ..args.clone() };
    pool.install(|| f(&args, threads))
}

/// Opens the backend `args.device` names, loads the model onto it and runs `task`: the one
/// CPU/wgpu dispatch of the CLI.
pub fn with_model<T: ModelTask>(args: &ModelArgs, task: T) -> Result<T::Output, CliError> {
    with_models(args, None, task)
}

/// [`with_model`], with a draft model from `draft` loaded onto a second backend of the same kind
/// and settings ([`Loaded::draft`]).
pub fn with_models<T: ModelTask>(args: &ModelArgs, draft: Option<&Path>, task: T) -> Result<T::Output, CliError> {
    if args.repack_memory.is_some() && args.repack != RepackMode::Auto {
        return Err(CliError::Usage(
            "--repack-memory budgets --repack auto; `on` copies every matrix it can and `off` none".into(),
        ));
    }
    let path = model_path(args)?;
    match args.device {
        Device::Cpu => {
            let default = if args.f32_activations { KvType::F32 } else { KvType::F16 };
            let backend = |path: &Path| {
                let model_error = |source| CliError::Model { path: path.to_path_buf(), source };
                Ok::<_, CliError>(
                    CpuBackend::new(args.threads)
                        .and_then(|b| b.with_kv_dtype(args.kv_type.unwrap_or(default).dtype()))
                        .map_err(model_error)?
                        .with_f32_activations(args.f32_activations)
                        .with_mxfp4_copies(args.mxfp4_copies)
                        .with_mlx_affine_copies(args.mlx_affine_copies)
                        .with_repack(args.repack.mode())
                        .with_repack_memory(
                            args.repack_memory.map_or(RepackMemory::HalfAvailable, RepackMemory::Bytes),
                        ),
                )
            };
            let mut loaded = load(path.clone(), backend(&path)?)?;
            if let Some(draft) = draft {
                loaded.draft = Some(Box::new(load(draft.to_path_buf(), backend(draft)?)?));
            }
            task.run(loaded)
        }
        Device::Wgpu => {
            if args.kv_type == Some(KvType::Q8_0) {
                return Err(CliError::Usage(
                    "--kv-type q8_0 runs on the CPU only; use f16 or f32 with --device wgpu".into(),
                ));
            }
            let kv_dtype = args.kv_type.unwrap_or(KvType::F16).dtype();
            let (backend, bar) = crate::device::open_wgpu_with_progress(kv_dtype)?;
            let info = backend.info().to_string();
            let mut loaded = load(path, backend)?;
            drop(bar);
            if let Some(draft) = draft {
                let (backend, bar) = crate::device::open_wgpu_with_progress(kv_dtype)?;
                loaded.draft = Some(Box::new(load(draft.to_path_buf(), backend)?));
                drop(bar);
            }
            loaded.device = Some(info);
            task.run(loaded)
        }
    }
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

/// The model path from the positional PATH, `--model` or `--hf`.
pub fn model_path(args: &ModelArgs) -> Result<PathBuf, CliError> {
    match (&args.path, &args.model, &args.hf) {
        (Some(p), _, _) | (None, Some(p), _) => Ok(p.clone()),
        (None, None, Some(spec)) => resolve_hf(spec),
        (None, None, None) => Err(CliError::Usage("give a model PATH, --model PATH or --hf REPO:FILE".into())),
    }
}

/// The directory of a SafeTensors checkpoint path (itself, or the file's folder).
fn checkpoint_dir(path: &Path) -> &Path {
    if path.is_dir() { path } else { path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")) }
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

/// Opens a model onto `backend`: a GGUF file (parsed, paged in) or a SafeTensors checkpoint
/// ([`SourceFormat::detect`] decides).
fn load<B: Backend>(path: PathBuf, backend: B) -> Result<Loaded<B>, CliError> {
    let model_err = |source| CliError::Model { path: path.clone(), source };
    match SourceFormat::detect(&path) {
        SourceFormat::SafeTensors => {
            let model = Model::load(&path, backend).map_err(model_err)?;
            Ok(Loaded { path, model, device: None, gguf: None, draft: None })
        }
        SourceFormat::Gguf => {
            let gguf: Arc<Gguf<Mmap>> = Arc::new(Gguf::open(&path).map_err(CliError::gguf(&path))?);
            page_in(&path, gguf.bytes());
            let model = Model::from_gguf(gguf.clone(), backend).map_err(model_err)?;
            Ok(Loaded { path, model, device: None, gguf: Some(gguf), draft: None })
        }
    }
}

/// A tokenizer alone: from a GGUF file's metadata, or the `tokenizer.json` of a SafeTensors
/// checkpoint's directory.
pub fn tokenizer_only(path: &Path) -> Result<Tokenizer, CliError> {
    let gen_err = |source| CliError::Generate { path: path.to_path_buf(), source };
    match SourceFormat::detect(path) {
        SourceFormat::SafeTensors => Tokenizer::from_dir(checkpoint_dir(path)).map_err(gen_err),
        SourceFormat::Gguf => {
            let gguf = Gguf::open(path).map_err(CliError::gguf(path))?;
            Tokenizer::from_gguf(&gguf).map_err(gen_err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("2 parsecs").unwrap_err().contains("unknown unit"));
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("1e30").is_err());
    }
}
