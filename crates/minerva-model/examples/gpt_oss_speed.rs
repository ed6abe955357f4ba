//! Times a model on the CPU backend: open, a 128-token prefill (time to first token), 12 decode
//! steps, peak RSS, and — as the reference in the same run — the read bandwidth of 1 and THREADS
//! threads summing 1 GiB (decode is memory-bound: bytes read per token ÷ this is its limit).
//!
//! `cargo run --release -p minerva-model --example gpt_oss_speed -- MODEL [THREADS]`

use std::time::Instant;

use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput, argmax};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: gpt_oss_speed MODEL [THREADS]")?;
    let threads: usize = args.next().map_or(Ok(2), |t| t.parse())?;
    let t = Instant::now();
    let model = Model::load(&path, CpuBackend::new(Some(threads))?)?;
    println!("open: {:.3} s", t.elapsed().as_secs_f64());
    let vocab = model.config.vocab as u32;
    let prompt: Vec<u32> = (0..128u32).map(|i| i.wrapping_mul(7919) % vocab).collect();
    let mut cache = model.new_cache(1, 160)?;
    let t = Instant::now();
    let out =
        model.forward(&mut cache, &[SequenceInput { tokens: &prompt, start_pos: 0, slot: 0 }], LogitsFor::Last)?;
    println!("prefill 128 tokens (time to first token): {:.2} s", t.elapsed().as_secs_f64());
    let mut token = argmax(out.row(0));
    let mut times = Vec::new();
    for pos in 128..140 {
        let t = Instant::now();
        let step = SequenceInput { tokens: &[token], start_pos: pos, slot: 0 };
        let out = model.forward(&mut cache, &[step], LogitsFor::Last)?;
        times.push(t.elapsed().as_secs_f64());
        token = argmax(out.row(0));
    }
    times.sort_by(f64::total_cmp);
    println!("decode: median {:.3} s/token ({:.2} tokens/s) over {} steps", times[6], 1.0 / times[6], times.len());
    // Integer sums: LLVM vectorizes them, so this is bound by memory. (An f32 `sum()` is not: its
    // additions must stay in order, one per FP-add latency, and measured below the decode rate.)
    let buf = vec![1u64; 1 << 27];
    let mut bandwidth = Vec::new();
    for n in [1, threads] {
        let pool = minerva_quant::ComputePool::new(n)?;
        let mut rates: Vec<f64> = (0..5)
            .map(|_| {
                let t = Instant::now();
                let mut sums = vec![0u64; buf.len() >> 16];
                pool.install(|| {
                    minerva_quant::pool::for_each_chunk_mut(&mut sums, 1, |i, sum| {
                        sum[0] = buf[i << 16..][..1 << 16].iter().fold(0u64, |a, &x| a.wrapping_add(x));
                    })
                });
                let s: u64 = sums.iter().sum();
                assert_eq!(s, 1 << 27);
                (1u64 << 30) as f64 / t.elapsed().as_secs_f64() / 1e9
            })
            .collect();
        rates.sort_by(f64::total_cmp);
        bandwidth.push((n, rates[2]));
    }
    for (n, rate) in bandwidth {
        println!("read bandwidth ({n} thread(s), 1 GiB u64 sum): median of 5 {rate:.2} GB/s");
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in status.lines().filter(|l| l.starts_with("VmHWM")) {
        println!("peak RSS (incl. the 1 GiB buffer): {}", line.trim_start_matches("VmHWM:").trim());
    }
    Ok(())
}
