//! Times a model on the CPU backend: open, a 128-token prefill (time to first token), 12 decode
//! steps, peak RSS, and — as the reference in the same run — the read bandwidth of 1 and THREADS
//! threads summing 1 GiB of anonymous memory (with small pages, and with huge pages asked for) and
//! 1 GiB of the model's own mapped file (decode is memory-bound: bytes read per token ÷ the rate of
//! the memory it reads is its limit). For a GGUF file, also the same sum over the very tensors a
//! decode token reads, and decode's share of that bound.
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
    // Two sources: 1 GiB of fresh anonymous memory, and 1 GiB of the model's own file mapped as
    // the loader maps it (page cache), which is what decode reads. On a shared VM the two have
    // differed by a quarter either way from one run to the next (docs/benchmarks.md).
    let buf = vec![1u64; 1 << 27];
    // The same with huge pages asked for before it is written, as the loader's converted tensors
    // and repacked matrices are (`minerva_quant::StreamedBytes`): the reading that bounds HF and
    // MLX decode where Linux grants them (small pages where it refuses, as the loader's would be).
    let mut huge = minerva_quant::StreamedBytes::zeroed(8 << 27).ok_or("cannot allocate 1 GiB")?;
    huge.fill(1);
    let huge_words: &[u64] = bytemuck::cast_slice(&huge[..]);
    let file = largest_file(std::path::Path::new(&path))?;
    let mapped = std::fs::File::open(&file)?;
    // SAFETY: the mapping is only read, and benchmark checkpoints are not written while they run.
    #[allow(unsafe_code)]
    let mapped = unsafe { memmap2::Mmap::map(&mapped)? };
    let gib = 1usize << 30;
    let from = mapped.len().saturating_sub(gib) / 2 / 8 * 8;
    let mapped_words: &[u64] = bytemuck::cast_slice(&mapped[from..(from + gib).min(mapped.len()) / 8 * 8]);
    let mut rows = Vec::new();
    for n in [1, threads] {
        let pool = minerva_quant::ComputePool::new(n)?;
        let anonymous = median_sum_rate(&pool, &buf);
        let anonymous_huge = median_sum_rate(&pool, huge_words);
        let file_rate = median_sum_rate(&pool, mapped_words);
        rows.push((n, anonymous, anonymous_huge, file_rate));
    }
    for (n, anonymous, anonymous_huge, file_rate) in rows {
        println!(
            "read bandwidth ({n} thread(s), u64 sum, median of 5): anonymous 1 GiB {anonymous:.2} GB/s, \
             with huge pages {anonymous_huge:.2} GB/s, the model's mapping ({}) {file_rate:.2} GB/s",
            file.display()
        );
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in status.lines().filter(|l| l.starts_with("VmHWM")) {
        println!("peak RSS (incl. the two 1 GiB buffers): {}", line.trim_start_matches("VmHWM:").trim());
    }
    // Last: it maps the whole file once more, which would count in the peak RSS above.
    if let Ok(gguf) = minerva_gguf::Gguf::open(&path) {
        token_bytes_bound(&gguf, threads, times[6])?;
    }
    Ok(())
}

/// The read bound of a GGUF decode step measured on the bytes it reads: the same u64 sum over
/// every tensor but the embedding table (one row of it is read; all of it where it is also the
/// head) and over the experts' tensors,
/// of which a token reads `expert_used_count / expert_count`. On a VM the file's cached pages need
/// not all read at one rate (docs/benchmarks.md, run 15), so 1 GiB of the file stands for the
/// bytes decode reads only approximately.
fn token_bytes_bound(
    gguf: &minerva_gguf::Gguf<memmap2::Mmap>,
    threads: usize,
    decode: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let used = gguf.get_arch("expert_used_count")?.and_then(|v| v.to_u64()).unwrap_or(0);
    let count = gguf.get_arch("expert_count")?.and_then(|v| v.to_u64()).unwrap_or(0);
    let (mut dense, mut experts) = (Vec::new(), Vec::new());
    for info in gguf.tensor_infos() {
        let words: &[u64] = bytemuck::cast_slice(&gguf.bytes()[info.range.start..info.range.end / 8 * 8]);
        // One row of the embedding table is read, unless it is also the head (tied weights).
        if info.name == "token_embd.weight" && gguf.tensor_info("output.weight").is_ok() {
            continue;
        }
        if info.name.contains("_exps") { experts.push(words) } else { dense.push(words) }
    }
    let pool = minerva_quant::ComputePool::new(threads)?;
    let (dense_bytes, dense_time) = median_sum_time(&pool, &dense);
    let (expert_bytes, expert_time) = median_sum_time(&pool, &experts);
    let share = if count > 0 { used as f64 / count as f64 } else { 0.0 };
    let bytes = dense_bytes + share * expert_bytes;
    let bound = dense_time + share * expert_time;
    println!(
        "bytes a decode token reads ({threads} thread(s), u64 sum over those tensors, median of 5): \
         {:.3} GB (every tensor but an untied token_embd, {used}/{count} of the experts') in {bound:.4} s = {:.2} GB/s; \
         decode at {:.0} % of that bound",
        bytes / 1e9,
        bytes / bound / 1e9,
        100.0 * bound / decode
    );
    Ok(())
}

/// Bytes and median seconds (of 5) of a wrapping u64 sum over every slice of `parts` on `pool`
/// (chunks of 64 Ki words, all parts in one parallel loop).
fn median_sum_time(pool: &minerva_quant::ComputePool, parts: &[&[u64]]) -> (f64, f64) {
    let chunks: Vec<&[u64]> = parts.iter().flat_map(|p| p.chunks(1 << 16)).collect();
    let bytes = parts.iter().map(|p| p.len() * 8).sum::<usize>() as f64;
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let mut sums = vec![0u64; chunks.len()];
            pool.install(|| {
                minerva_quant::pool::for_each_chunk_mut(&mut sums, 1, |i, sum| {
                    sum[0] = chunks[i].iter().fold(0u64, |a, &x| a.wrapping_add(x));
                })
            });
            std::hint::black_box(sums.iter().fold(0u64, |a, &x| a.wrapping_add(x)));
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (bytes, times[2])
}

/// GB/s of a wrapping u64 sum over `words` on `pool`, median of 5 (chunks of 64 Ki words).
fn median_sum_rate(pool: &minerva_quant::ComputePool, words: &[u64]) -> f64 {
    let (bytes, seconds) = median_sum_time(pool, &[words]);
    bytes / seconds / 1e9
}

/// The model's largest file: `path` itself, or the largest file in the directory `path`.
fn largest_file(path: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let mut best: Option<(u64, std::path::PathBuf)> = None;
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let len = entry.metadata()?.len();
        if best.as_ref().is_none_or(|(l, _)| len > *l) {
            best = Some((len, entry.path()));
        }
    }
    best.map(|(_, p)| p).ok_or_else(|| std::io::Error::other("an empty model directory"))
}
