//! `minerva bench`: our `llama-bench`. Prefill tokens/s over a `-p`-token prompt and decode
//! tokens/s over `-n` tokens, each the median of `-r` repetitions after one warm-up run.
//!
//! The measured work is what llama-bench measures for `pp` and `tg`: the prompt is `-p` token ids
//! (deterministic pseudo-random, as llama-bench uses random tokens) run as one forward pass into an
//! empty cache, returning the last position's logits; decode is `-n` one-token forward passes from
//! an empty cache, each returning its logits (no sampling: llama-bench feeds a fixed token too).
//! Loading the model is not timed.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use minerva_model::{Backend, LogitsFor, Model, SequenceInput, argmax};

use crate::cpu_info;
use crate::device::Device;
use crate::error::CliError;
use crate::load::{self, Loaded, ModelArgs, ModelTask};

/// The command's options besides the model.
pub struct Options {
    /// Prompt length (0 skips prefill).
    pub prompt: usize,
    /// Decoded tokens (0 skips decode).
    pub gen_tokens: usize,
    /// Repetitions of each measurement.
    pub reps: usize,
    /// One JSON object instead of text.
    pub json: bool,
    /// Speculative decoding against plain decoding on real prompts, instead of pp/tg.
    pub spec: Option<SpecOptions>,
    /// Time every GPU kernel in one more prefill and up to [`PROFILED_STEPS`] decode steps
    /// (`--device wgpu` only; checked by the caller).
    pub profile: bool,
}

/// Decode steps the profile times: enough to average out a step, few enough to stay quick with a
/// timed pass per dispatch.
pub const PROFILED_STEPS: usize = 32;

/// `bench --spec …`: what [`crate::bench_spec`] measures.
pub struct SpecOptions {
    /// Prompt files.
    pub prompts: Vec<std::path::PathBuf>,
    /// Wrap each prompt in the chat template.
    pub chat: bool,
    /// The speculation flags.
    pub args: crate::spec::SpecArgs,
    /// Context size.
    pub context: usize,
}

/// Runs the benchmark, printing its figures to `stdout`.
pub fn run(args: &ModelArgs, opts: &Options, stdout: &mut impl Write) -> Result<(), CliError> {
    let path = load::model_path(args)?;
    let request = |message: String| CliError::Request { path: path.clone(), message };
    if opts.reps == 0 {
        return Err(request("-r must be at least 1".to_string()));
    }
    if opts.prompt == 0 && opts.gen_tokens == 0 {
        return Err(request("nothing to measure: -p and -n are both 0".to_string()));
    }
    let draft = match &opts.spec {
        Some(spec) => spec.args.draft_path()?,
        None => None,
    };
    // The whole benchmark runs inside one pool, which the backend uses as the current pool.
    let text = load::in_one_pool(args, &path, |args, threads| {
        load::with_models(args, draft, Measure { opts, threads, device: args.device })
    })?;
    write!(stdout, "{text}").map_err(|source| CliError::Output { path: "<stdout>".into(), source })
}

/// The measurements, on whichever backend the model loaded onto; returns the text to print.
struct Measure<'a> {
    opts: &'a Options,
    threads: usize,
    device: Device,
}

impl ModelTask for Measure<'_> {
    type Output = String;

    fn run<B: Backend>(self, loaded: Loaded<B>) -> Result<String, CliError> {
        let Some(spec) = &self.opts.spec else {
            return measure_on(&loaded.path, &loaded.model, self.opts, self.threads, self.device);
        };
        let bench = crate::bench_spec::SpecBench {
            prompts: &spec.prompts,
            chat: spec.chat,
            gen_tokens: self.opts.gen_tokens,
            reps: self.opts.reps,
            spec: &spec.args,
            context: spec.context,
        };
        let table = crate::bench_spec::measure(&loaded, &bench, self.opts.json)?;
        if self.opts.json {
            return Ok(table);
        }
        Ok(MeasuredOn::new(&loaded.path, self.device)?.header(self.threads, self.opts.reps) + &table)
    }
}

fn measure_on<B: Backend>(
    path: &Path,
    model: &Model<B>,
    opts: &Options,
    threads: usize,
    device: Device,
) -> Result<String, CliError> {
    let request = |message: String| CliError::Request { path: path.to_path_buf(), message };
    let model_err = |source| CliError::Model { path: path.to_path_buf(), source };
    let vocab = model.config.vocab as u32;
    let capacity = opts.prompt.max(opts.gen_tokens).max(1);
    let context = model.config.context_length;
    if context > 0 && capacity > context {
        return Err(request(format!("-p/-n of {capacity} tokens exceed the model's context of {context}")));
    }
    let prompt = pseudo_random_tokens(opts.prompt, vocab);
    let mut cache = model.new_cache(1, capacity).map_err(model_err)?;

    let mut prefill = Vec::new();
    if opts.prompt > 0 {
        for rep in 0..=opts.reps {
            let secs = prefill_pass(model, &mut cache, &prompt).map_err(model_err)?;
            if rep > 0 {
                prefill.push(opts.prompt as f64 / secs);
            }
        }
    }
    let first_token = prompt.first().copied().unwrap_or(1 % vocab.max(1));
    let mut decode = Vec::new();
    if opts.gen_tokens > 0 {
        for rep in 0..=opts.reps {
            let secs = decode_steps(model, &mut cache, first_token, opts.gen_tokens).map_err(model_err)?;
            if rep > 0 {
                decode.push(opts.gen_tokens as f64 / secs);
            }
        }
    }
    let profile = match opts.profile {
        true => Some(profile_kernels(path, model, &mut cache, &prompt, first_token, opts.gen_tokens)?),
        false => None,
    };
    let (prefill_med, decode_med) = (median(&mut prefill), median(&mut decode));
    let on = MeasuredOn::new(path, device)?;
    let (repacked, repacked_bytes) = model.backend.repacked();
    let (declined, declined_bytes) = model.backend.repack_declined();
    if !opts.json {
        let mut text = on.header(threads, opts.reps);
        if repacked > 0 {
            let mib = repacked_bytes as f64 / (1 << 20) as f64;
            text += &format!("repacked {repacked} matrices, {mib:.1} MiB copied (8-bit activations)\n");
        }
        if declined > 0 {
            let mib = declined_bytes as f64 / (1 << 20) as f64;
            text += &format!(
                "left {declined} {} in place: {} ({mib:.1} MiB) would pass the repacking memory budget\n",
                if declined == 1 { "matrix" } else { "matrices" },
                if declined == 1 { "its copy" } else { "their copies" }
            );
        }
        if let Some(v) = prefill_med {
            text += &format!("prefill  pp{:<6} {v:>10.2} tok/s  (median; {})\n", opts.prompt, spread(&prefill));
        }
        if let Some(v) = decode_med {
            text += &format!("decode   tg{:<6} {v:>10.2} tok/s  (median; {})\n", opts.gen_tokens, spread(&decode));
        }
        if let Some(profile) = &profile {
            text += &profile.text();
        }
        return Ok(text);
    }
    Ok({
        let object = serde_json::json!({
            "model": on.name,
            "device": on.device,
            "threads": threads,
            "prompt_tokens": opts.prompt,
            "gen_tokens": opts.gen_tokens,
            "reps": opts.reps,
            "prefill_tok_s": prefill_med,
            "decode_tok_s": decode_med,
            "prefill_runs_tok_s": prefill,
            "decode_runs_tok_s": decode,
            "cpu": on.cpu,
            "cpu_features": on.features,
            "kernels": on.kernels,
            "vector_kernels": on.vectors,
            "repacked_matrices": repacked,
            "repacked_bytes": repacked_bytes,
            "repack_declined_matrices": declined,
            "repack_declined_bytes": declined_bytes,
            "profile": profile.as_ref().map(Profile::json),
        });
        format!("{object}\n")
    })
}

/// One prefill of `prompt` into an empty cache (slot 0), returning the last position's logits;
/// the seconds it took.
fn prefill_pass<B: Backend>(model: &Model<B>, cache: &mut B::Cache, prompt: &[u32]) -> minerva_model::Result<f64> {
    let start = Instant::now();
    let seq = SequenceInput { tokens: prompt, start_pos: 0, slot: 0 };
    model.forward(cache, &[seq], LogitsFor::Last)?;
    Ok(start.elapsed().as_secs_f64())
}

/// `steps` one-token forward passes from position 0, each fed the previous one's argmax; the
/// seconds they took.
fn decode_steps<B: Backend>(
    model: &Model<B>,
    cache: &mut B::Cache,
    first: u32,
    steps: usize,
) -> minerva_model::Result<f64> {
    let start = Instant::now();
    let mut token = first;
    for pos in 0..steps {
        let tokens = [token];
        let seq = SequenceInput { tokens: &tokens, start_pos: pos, slot: 0 };
        let logits = model.forward(cache, &[seq], LogitsFor::Last)?;
        // Feed the argmax back so that the work depends on the previous step, as in real
        // decoding (it costs a pass over the vocabulary, as sampling would).
        token = argmax(logits.row(0));
    }
    Ok(start.elapsed().as_secs_f64())
}

/// `bench --profile`: the GPU kernels' times in one prefill and in a decode.
struct Profile {
    prompt: usize,
    prefill: Vec<minerva_wgpu::KernelTime>,
    steps: usize,
    decode: Vec<minerva_wgpu::KernelTime>,
}

/// Runs one more prefill of `prompt` and up to [`PROFILED_STEPS`] decode steps with every
/// kernel timed (a pass per dispatch, so slower than the measured runs), on the wgpu backend.
fn profile_kernels<B: Backend>(
    path: &Path,
    model: &Model<B>,
    cache: &mut B::Cache,
    prompt: &[u32],
    first: u32,
    gen_tokens: usize,
) -> Result<Profile, CliError> {
    let Some(gpu) = (&model.backend as &dyn std::any::Any).downcast_ref::<minerva_wgpu::WgpuBackend>() else {
        return Err(CliError::Usage("--profile times GPU kernels: use it with --device wgpu".into()));
    };
    gpu.set_profiling(true)?;
    gpu.take_kernel_times();
    let steps = gen_tokens.min(PROFILED_STEPS);
    let timed = (|| {
        if !prompt.is_empty() {
            prefill_pass(model, cache, prompt)?;
        }
        let prefill = gpu.take_kernel_times();
        decode_steps(model, cache, first, steps)?;
        Ok((prefill, gpu.take_kernel_times()))
    })();
    gpu.set_profiling(false)?;
    let (prefill, decode) = timed.map_err(|source| CliError::Model { path: path.to_path_buf(), source })?;
    Ok(Profile { prompt: prompt.len(), prefill, steps, decode })
}

impl Profile {
    fn text(&self) -> String {
        let mut text = String::new();
        let mut table = |title: String, times: &[minerva_wgpu::KernelTime], units: usize, per: &str| {
            let total: f64 = times.iter().map(|t| t.gpu.as_secs_f64()).sum();
            let each = total * 1e6 / units.max(1) as f64;
            text += &format!("{title}: {each:.1} µs of GPU kernels per {per} (a timed pass per dispatch)\n");
            text += &minerva_wgpu::kernel_table(times, units.max(1) as f64, usize::MAX);
        };
        if self.prompt > 0 {
            table(format!("profile  prefill of {}", self.prompt), &self.prefill, 1, "prefill");
        }
        if self.steps > 0 {
            table(format!("profile  decode ({} steps)", self.steps), &self.decode, self.steps, "token");
        }
        text
    }

    fn json(&self) -> serde_json::Value {
        let kernels = |times: &[minerva_wgpu::KernelTime]| -> Vec<serde_json::Value> {
            times
                .iter()
                .map(|t| {
                    serde_json::json!({
                        "kernel": t.kernel,
                        "dispatches": t.dispatches,
                        "gpu_us": t.gpu.as_secs_f64() * 1e6,
                        "bytes": t.bytes,
                        "gb_s": t.gigabytes_per_second(),
                    })
                })
                .collect()
        };
        serde_json::json!({
            "prefill_tokens": self.prompt,
            "prefill": kernels(&self.prefill),
            "decode_steps": self.steps,
            "decode": kernels(&self.decode),
        })
    }
}

/// What figures were measured on: the model's file, the device, and on the CPU (which varies
/// from machine to machine) its model, features and the kernels each weight type ran.
struct MeasuredOn {
    name: String,
    device: String,
    cpu: String,
    features: Vec<&'static str>,
    kernels: Vec<String>,
    /// Attention's dot products, weighted sums and softmax, and `e^x` (CPU only).
    vectors: Option<&'static str>,
}

impl MeasuredOn {
    fn new(path: &Path, device: Device) -> Result<MeasuredOn, CliError> {
        let kernels: Vec<String> = match device {
            Device::Cpu => cpu_info::matrix_dtypes(path)?.into_iter().map(cpu_info::kernels_of).collect(),
            Device::Wgpu => Vec::new(),
        };
        Ok(MeasuredOn {
            name: path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned()),
            device: format!("{device:?}").to_lowercase(),
            cpu: cpu_info::cpu_model(),
            features: cpu_info::cpu_features(),
            kernels,
            vectors: matches!(device, Device::Cpu).then(minerva_quant::vector::vector_isa),
        })
    }

    /// The text output's first lines.
    fn header(&self, threads: usize, reps: usize) -> String {
        let mut text = format!("{}  device {}  threads {threads}  reps {reps}\n", self.name, self.device);
        text += &format!("cpu      {} ({})\n", self.cpu, self.features.join(" "));
        if !self.kernels.is_empty() {
            text += &format!("kernels  {}", self.kernels.join(" | "));
            text += &self.vectors.map(|isa| format!(" | f32 vectors: {isa}\n")).unwrap_or_else(|| "\n".into());
        }
        text
    }
}

/// `n` token ids in `0..vocab` from a fixed xorshift sequence (the same every run).
fn pseudo_random_tokens(n: usize, vocab: u32) -> Vec<u32> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % u64::from(vocab.max(1))) as u32
        })
        .collect()
}

/// The median (mean of the middle two for an even count); `None` when empty. Sorts `values`.
pub(crate) fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

fn spread(sorted: &[f64]) -> String {
    match (sorted.first(), sorted.last()) {
        (Some(lo), Some(hi)) => format!("min {lo:.2}, max {hi:.2}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn tokens_are_deterministic_and_in_range() {
        let a = pseudo_random_tokens(1000, 49152);
        assert_eq!(a, pseudo_random_tokens(1000, 49152));
        assert!(a.iter().all(|&t| t < 49152));
        // Not a constant stream: llama-bench's prompts are random too.
        assert!(a.windows(2).filter(|w| w[0] != w[1]).count() > 990);
    }
}
