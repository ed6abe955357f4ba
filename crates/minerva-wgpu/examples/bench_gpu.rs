//! Prefill and decode speed of a GGUF model on the wgpu backend, with the CPU backend as the
//! reference measured in the same run.
//!
//! ```text
//! cargo run --release -p minerva-wgpu --example bench_gpu -- MODEL.gguf [--prompt N] [--decode N]
//!     [--bandwidth GB/s] [--batch N,N,...] [--profile] [--attention-split N] [--no-cpu] [--no-subgroups]
//!     [--no-block-decode] [--tiled-from N] [--tile 64x64|128x64|128x128] [--submit-every N]
//!     [--fuse|--no-fuse]
//! ```
//!
//! Prints tokens/s for a prefill of `--prompt` tokens (default 128) and `--decode` greedy steps
//! (default 32), and, given the device's memory bandwidth, decode's share of the roofline:
//! bytes touched per token (every weight once, the experts a token uses rather than all of them,
//! one embedding row, the KV cache up to the mean position) ÷ bandwidth. `--batch` decodes that
//! many sequences at once (aggregate tokens/s, against one sequence decoded the same way);
//! `--profile` times every kernel with timestamp queries in one more prefill and decode;
//! `--attention-split` sets the keys per decode-attention workgroup (default: 64 on a GPU);
//! `--no-block-decode` and `--tiled-from N` (0: never) choose the matrix kernels, to compare
//! them in one run (`WgpuOptions::block_decode`, `WgpuOptions::tiled_from`); `--tile` runs every
//! tiled product on one tile shape (`WgpuOptions::tile`; without it, chosen per product);
//! `--submit-every N`
//! submits a step in parts of N dispatches (0: whole steps; without it, the device's default,
//! 128 on a GPU); `--no-fuse` runs norms, SwiGLU / GeGLU and RoPE as kernels of their own,
//! `--fuse` folds them all into their consumers (`WgpuOptions::fuse`; without either, the
//! device's default). Set
//! `MINERVA_ADAPTER` to pick the GPU.

use std::time::Instant;

use minerva_model::{Backend, CpuBackend, Model, SequenceInput};
use minerva_wgpu::{KernelTime, TileShape, WgpuBackend, WgpuOptions, kernel_table};

#[derive(Clone)]
struct Args {
    model: String,
    prompt: usize,
    decode: usize,
    bandwidth: Option<f64>,
    batches: Vec<usize>,
    profile: bool,
    cpu: bool,
    subgroups: bool,
    attention_split: Option<usize>,
    block_decode: bool,
    tiled_from: usize,
    tile: Option<TileShape>,
    submit_every: Option<usize>,
    fuse: Option<bool>,
}

const USAGE: &str = "usage: bench_gpu MODEL.gguf [--prompt N] [--decode N] [--bandwidth GB/s] [--batch N,N,...] \
                     [--profile] [--attention-split N] [--no-cpu] [--no-subgroups] \
                     [--no-block-decode] [--tiled-from N] [--tile 64x64|128x64|128x128] [--submit-every N] \
                     [--fuse|--no-fuse]";

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut args = Args {
        model: String::new(),
        prompt: 128,
        decode: 32,
        bandwidth: None,
        batches: Vec::new(),
        profile: false,
        cpu: true,
        subgroups: true,
        attention_split: None,
        block_decode: true,
        tiled_from: minerva_wgpu::DEFAULT_TILED_FROM,
        tile: None,
        submit_every: None,
        fuse: None,
    };
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--prompt" => args.prompt = value("--prompt")?.parse().map_err(|e| format!("--prompt: {e}"))?,
            "--decode" => args.decode = value("--decode")?.parse().map_err(|e| format!("--decode: {e}"))?,
            "--bandwidth" => {
                args.bandwidth = Some(value("--bandwidth")?.parse().map_err(|e| format!("--bandwidth: {e}"))?)
            }
            "--batch" => {
                args.batches = value("--batch")?
                    .split(',')
                    .map(|n| n.trim().parse::<usize>().map_err(|e| format!("--batch {n:?}: {e}")))
                    .collect::<Result<_, _>>()?;
                if args.batches.contains(&0) {
                    return Err("--batch: sequences must be at least 1".into());
                }
            }
            "--profile" => args.profile = true,
            "--attention-split" => {
                let n = value("--attention-split")?.parse().map_err(|e| format!("--attention-split: {e}"))?;
                args.attention_split = Some(n);
            }
            "--no-cpu" => args.cpu = false,
            "--no-subgroups" => args.subgroups = false,
            "--no-block-decode" => args.block_decode = false,
            "--no-fuse" => args.fuse = Some(false),
            "--fuse" => args.fuse = Some(true),
            "--tiled-from" => {
                args.tiled_from = value("--tiled-from")?.parse().map_err(|e| format!("--tiled-from: {e}"))?
            }
            "--tile" => {
                let name = value("--tile")?;
                let tile = TileShape::ALL.into_iter().find(|t| t.name() == name);
                args.tile = Some(tile.ok_or(format!("--tile {name:?}: one of 64x64, 128x64, 128x128"))?);
            }
            "--submit-every" => {
                let n = value("--submit-every")?.parse().map_err(|e| format!("--submit-every: {e}"))?;
                args.submit_every = Some(n);
            }
            _ if args.model.is_empty() && !a.starts_with("--") => args.model = a,
            _ => return Err(format!("unexpected argument {a:?}")),
        }
    }
    if args.model.is_empty() || args.prompt == 0 || args.decode == 0 {
        return Err(USAGE.into());
    }
    Ok(args)
}

/// `n` token ids below `vocab`, different for each `seed`.
fn tokens(n: usize, vocab: u32, seed: u32) -> Vec<u32> {
    (0..n as u32).map(|i| (i.wrapping_mul(7919).wrapping_add(seed.wrapping_mul(104_729)) + 1) % vocab).collect()
}

/// (prefill tokens/s, decode tokens/s) of one run; `after_prefill` runs between the two, untimed.
fn run<B: Backend>(
    model: &Model<B>,
    prompt: usize,
    decode: usize,
    after_prefill: impl FnOnce(),
) -> Result<(f64, f64), minerva_model::ModelError> {
    let prompt_ids = tokens(prompt, model.config.vocab as u32, 0);
    let mut cache = model.new_cache(1, prompt + decode + 1)?;
    // Greedy as generation runs it: `forward_greedy` reads back one token id per step.
    let t = Instant::now();
    let mut next =
        model.forward_greedy(&mut cache, &[SequenceInput { tokens: &prompt_ids, start_pos: 0, slot: 0 }])?[0];
    let prefill = prompt as f64 / t.elapsed().as_secs_f64();
    after_prefill();
    let t = Instant::now();
    for step in 0..decode {
        let tokens = [next];
        let seq = SequenceInput { tokens: &tokens, start_pos: prompt + step, slot: 0 };
        next = model.forward_greedy(&mut cache, &[seq])?[0];
    }
    let decode = decode as f64 / t.elapsed().as_secs_f64().max(1e-9);
    Ok((prefill, decode))
}

/// Aggregate decode tokens/s of `n` sequences stepped together, each after its own 16-token prompt
/// (the prompts prefilled together first, untimed).
fn batched<B: Backend>(model: &Model<B>, n: usize, steps: usize) -> Result<f64, minerva_model::ModelError> {
    const PROMPT: usize = 16;
    let vocab = model.config.vocab as u32;
    let prompts: Vec<Vec<u32>> = (0..n).map(|s| tokens(PROMPT, vocab, s as u32 + 1)).collect();
    let mut cache = model.new_cache(n, PROMPT + steps + 2)?;
    let seqs: Vec<SequenceInput<'_>> =
        prompts.iter().enumerate().map(|(slot, p)| SequenceInput { tokens: p, start_pos: 0, slot }).collect();
    let mut next = model.forward_greedy(&mut cache, &seqs)?;
    // The first decode step is not timed: it compiles the pipelines of this batch size.
    let mut t = Instant::now();
    for step in 0..=steps {
        if step == 1 {
            t = Instant::now();
        }
        let ids: Vec<[u32; 1]> = next.iter().map(|&id| [id]).collect();
        let seqs: Vec<SequenceInput<'_>> = ids
            .iter()
            .enumerate()
            .map(|(slot, id)| SequenceInput { tokens: id, start_pos: PROMPT + step, slot })
            .collect();
        next = model.forward_greedy(&mut cache, &seqs)?;
    }
    Ok((n * steps) as f64 / t.elapsed().as_secs_f64().max(1e-9))
}

/// Bytes one decoded token reads from the model file: every tensor once, except one row of the
/// embedding table (unless it is also the output head) and, of stacked experts, the share a token
/// routes to (`expert_used_count / expert_count`).
fn weight_bytes_per_token(path: &str) -> Result<f64, Box<dyn std::error::Error>> {
    let gguf = minerva_gguf::Gguf::open(path)?;
    let count = |suffix: &str| -> Result<Option<f64>, minerva_gguf::GgufError> {
        Ok(gguf.get_arch(suffix)?.and_then(|v| v.to_u64()).map(|v| v as f64))
    };
    let expert_share = match (count("expert_used_count")?, count("expert_count")?) {
        (Some(used), Some(all)) if all > 0.0 => used / all,
        _ => 1.0,
    };
    let tied = gguf.tensor_info("output.weight").is_err();
    let mut total = 0.0;
    for t in gguf.tensors() {
        let bytes = t.bytes.len() as f64;
        total += if t.name == "token_embd.weight" && !tied {
            bytes / t.shape.first().copied().unwrap_or(1).max(1) as f64
        } else if t.name.contains("_exps") {
            bytes * expert_share
        } else {
            bytes
        };
    }
    Ok(total)
}

/// Prints the profiled kernels: time per `per` (a prefill, a token), share, dispatches per `per`.
fn print_kernels(title: &str, times: &[KernelTime], units: f64, per: &str, wall: f64) {
    let total: f64 = times.iter().map(|t| t.gpu.as_secs_f64()).sum();
    println!(
        "{title}: GPU {:.1} µs per {per} in kernels, {:.1} µs per {per} wall (profiled, a pass per dispatch)",
        total * 1e6 / units,
        wall * 1e6 / units
    );
    print!("{}", kernel_table(times, units, 14));
}

fn profile(gpu: &Model<WgpuBackend>, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    gpu.backend.set_profiling(true)?;
    gpu.backend.take_kernel_times();
    let steps = args.decode.min(32);
    let mut prefill_times = Vec::new();
    let (prefill, decode) = run(gpu, args.prompt, steps, || prefill_times = gpu.backend.take_kernel_times())?;
    let title = format!("profile, prefill of {}", args.prompt);
    print_kernels(&title, &prefill_times, 1.0, "prefill", args.prompt as f64 / prefill);
    let title = format!("profile, decode ({steps} steps)");
    print_kernels(&title, &gpu.backend.take_kernel_times(), steps as f64, "token", steps as f64 / decode);
    gpu.backend.set_profiling(false)?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    let bytes = std::fs::metadata(&args.model)?.len() as f64;
    let t = Instant::now();
    let mut options = WgpuOptions {
        subgroups: args.subgroups,
        profile: args.profile,
        block_decode: args.block_decode,
        tiled_from: args.tiled_from,
        tile: args.tile,
        submit_every: args.submit_every,
        fuse: args.fuse,
        ..WgpuOptions::default()
    };
    if let Some(split) = args.attention_split {
        options.attention_split = split;
    }
    let gpu = Model::load(&args.model, WgpuBackend::new(options)?)?;
    println!(
        "device: {} (subgroup kernels: {}, block decode: {}, tiled from {} rows, tiles: {}, fused: {:?})",
        gpu.backend.info().name,
        gpu.backend.uses_subgroups(),
        args.block_decode,
        args.tiled_from,
        args.tile.map_or("per product", TileShape::name),
        args.fuse
    );
    println!("model:  {} ({:.1} MiB), upload {:.2} s", args.model, bytes / (1 << 20) as f64, t.elapsed().as_secs_f64());
    let c = &gpu.config;
    // Per decoded token: the weights it touches, plus the KV cache (f16 on the GPU by default)
    // read up to the mean position, or the sliding window where the model has one (every layer
    // counted at the window: fewer bytes, a roofline no easier to reach).
    let weights = weight_bytes_per_token(&args.model)?;
    let mean_pos = (args.prompt + args.decode / 2) as f64;
    let context = c.sliding_window.map_or(mean_pos, |w| mean_pos.min(w as f64));
    let kv_bytes = 2.0 * (c.n_layer * c.n_head_kv * c.head_dim) as f64 * 2.0 * context;
    println!(
        "        touched per decoded token: {:.1} MiB of weights + {:.2} MiB of KV cache",
        weights / 1048576.0,
        kv_bytes / 1048576.0
    );
    // Warm-up (pipelines compile on first use), then the measured run.
    run(&gpu, 8, 2, || ())?;
    gpu.backend.take_record_stats();
    let (prefill, decode) = run(&gpu, args.prompt, args.decode, || ())?;
    let recorded = gpu.backend.take_record_stats();
    println!(
        "wgpu:   prefill {prefill:.1} tok/s ({} tokens), decode {decode:.2} tok/s ({} steps)",
        args.prompt, args.decode
    );
    // One prefill step and `decode` decode steps, all recording the same dispatches per layer.
    let steps = (args.decode + 1) as f64;
    println!(
        "        recording: {:.0} dispatches and {:.0} µs of CPU per step ({:.1} µs per dispatch), {} device \
         objects made",
        recorded.dispatches as f64 / steps,
        recorded.cpu.as_secs_f64() * 1e6 / steps,
        recorded.cpu.as_secs_f64() * 1e6 / recorded.dispatches.max(1) as f64,
        recorded.objects_created
    );
    if let Some(bw) = args.bandwidth {
        let roofline = bw * 1e9 / (weights + kv_bytes);
        println!("        decode roofline {roofline:.1} tok/s at {bw} GB/s: {:.1} % of it", 100.0 * decode / roofline);
    }
    if !args.batches.is_empty() {
        let one = batched(&gpu, 1, args.decode)?;
        println!("batched decode: 1 sequence {one:.1} tok/s");
        for &n in args.batches.iter().filter(|&&n| n > 1) {
            let all = batched(&gpu, n, args.decode)?;
            println!("                {n} sequences {all:.1} tok/s aggregate ({:.2}× one sequence)", all / one);
        }
    }
    if args.profile {
        profile(&gpu, &args)?;
    }
    if args.cpu {
        let cpu = Model::load(&args.model, CpuBackend::new(None)?)?;
        let (prefill, decode) = run(&cpu, args.prompt, args.decode, || ())?;
        println!("cpu:    prefill {prefill:.1} tok/s, decode {decode:.2} tok/s (same run, reference)");
    }
    Ok(())
}
