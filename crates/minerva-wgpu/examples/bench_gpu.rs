//! Prefill and decode speed of a GGUF model on the wgpu backend, with the CPU backend as the
//! reference measured in the same run.
//!
//! ```text
//! cargo run --release -p minerva-wgpu --example bench_gpu -- MODEL.gguf [--prompt N] [--decode N]
//!     [--bandwidth GB/s] [--no-cpu] [--no-subgroups]
//! ```
//!
//! Prints tokens/s for a prefill of `--prompt` tokens (default 128) and `--decode` greedy steps
//! (default 32), and, given the device's memory bandwidth, decode's share of the roofline:
//! (weight bytes + KV bytes read per token) / bandwidth. Set `MINERVA_ADAPTER` to pick the GPU.

use std::time::Instant;

use minerva_model::{Backend, CpuBackend, Model, SequenceInput};
use minerva_wgpu::{WgpuBackend, WgpuOptions};

struct Args {
    model: String,
    prompt: usize,
    decode: usize,
    bandwidth: Option<f64>,
    cpu: bool,
    subgroups: bool,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut args = Args { model: String::new(), prompt: 128, decode: 32, bandwidth: None, cpu: true, subgroups: true };
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--prompt" => args.prompt = value("--prompt")?.parse().map_err(|e| format!("--prompt: {e}"))?,
            "--decode" => args.decode = value("--decode")?.parse().map_err(|e| format!("--decode: {e}"))?,
            "--bandwidth" => {
                args.bandwidth = Some(value("--bandwidth")?.parse().map_err(|e| format!("--bandwidth: {e}"))?)
            }
            "--no-cpu" => args.cpu = false,
            "--no-subgroups" => args.subgroups = false,
            _ if args.model.is_empty() && !a.starts_with("--") => args.model = a,
            _ => return Err(format!("unexpected argument {a:?}")),
        }
    }
    if args.model.is_empty() || args.prompt == 0 {
        return Err(
            "usage: bench_gpu MODEL.gguf [--prompt N] [--decode N] [--bandwidth GB/s] [--no-cpu] [--no-subgroups]"
                .into(),
        );
    }
    Ok(args)
}

/// (prefill tokens/s, decode tokens/s) of one run.
fn run<B: Backend>(model: &Model<B>, args: &Args) -> Result<(f64, f64), minerva_model::ModelError> {
    let vocab = model.config.vocab as u32;
    let prompt: Vec<u32> = (0..args.prompt as u32).map(|i| (i * 7919 + 1) % vocab).collect();
    let mut cache = model.new_cache(1, args.prompt + args.decode + 1)?;
    // Greedy as generation runs it: `forward_greedy` reads back one token id per step.
    let t = Instant::now();
    let mut next = model.forward_greedy(&mut cache, &[SequenceInput { tokens: &prompt, start_pos: 0, slot: 0 }])?[0];
    let prefill = args.prompt as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for step in 0..args.decode {
        let tokens = [next];
        let seq = SequenceInput { tokens: &tokens, start_pos: args.prompt + step, slot: 0 };
        next = model.forward_greedy(&mut cache, &[seq])?[0];
    }
    let decode = args.decode as f64 / t.elapsed().as_secs_f64().max(1e-9);
    Ok((prefill, decode))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    let bytes = std::fs::metadata(&args.model)?.len() as f64;
    let t = Instant::now();
    let options = WgpuOptions { subgroups: args.subgroups, ..WgpuOptions::default() };
    let gpu = Model::load(&args.model, WgpuBackend::new(options)?)?;
    println!("device: {} (subgroup kernels: {})", gpu.backend.info().name, gpu.backend.uses_subgroups());
    println!("model:  {} ({:.1} MiB), upload {:.2} s", args.model, bytes / (1 << 20) as f64, t.elapsed().as_secs_f64());
    let c = &gpu.config;
    // Per decoded token: every weight once, plus the KV cache read up to the mean position.
    let mean_pos = (args.prompt + args.decode / 2) as f64;
    let kv_bytes = 2.0 * (c.n_layer * c.n_head_kv * c.head_dim) as f64 * 4.0 * mean_pos;
    // Warm-up (pipelines compile on first use), then the measured run.
    run(&gpu, &Args { prompt: 8, decode: 2, ..parse()? })?;
    gpu.backend.take_record_stats();
    let (prefill, decode) = run(&gpu, &args)?;
    let recorded = gpu.backend.take_record_stats();
    println!(
        "wgpu:   prefill {prefill:.1} tok/s ({} tokens), decode {decode:.2} tok/s ({} steps)",
        args.prompt, args.decode
    );
    // One prefill step and `decode` decode steps, all recording the same dispatches per layer.
    let steps = (args.decode + 1) as f64;
    println!(
        "        recording: {:.0} dispatches and {:.0} µs of CPU per step ({:.1} µs per dispatch)",
        recorded.dispatches as f64 / steps,
        recorded.cpu.as_secs_f64() * 1e6 / steps,
        recorded.cpu.as_secs_f64() * 1e6 / recorded.dispatches.max(1) as f64
    );
    if let Some(bw) = args.bandwidth {
        let roofline = bw * 1e9 / (bytes + kv_bytes);
        println!("        decode roofline {roofline:.1} tok/s at {bw} GB/s: {:.1} % of it", 100.0 * decode / roofline);
    }
    if args.cpu {
        let cpu = Model::load(&args.model, CpuBackend::new(None)?)?;
        let (prefill, decode) = run(&cpu, &args)?;
        println!("cpu:    prefill {prefill:.1} tok/s, decode {decode:.2} tok/s (same run, reference)");
    }
    Ok(())
}
