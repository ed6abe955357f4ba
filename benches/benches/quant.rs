//! Quantized kernels against the machine's memory bandwidth, all measured in one run.
//!
//! * `membw/sum_u64_{1,2}t` — sum of a 1 GiB `u64` buffer (≫ caches) on 1 and 2 threads: the
//!   read bandwidth a matvec can hope for. `membw/memcpy` — a 512 MiB copy (throughput counts the
//!   bytes copied once; the bus moves them twice, read + write).
//! * `dequantize/{ref,fast}/<dtype>` — 4 Mi values per call, throughput in bytes of quantized input.
//! * `matvec/<model shape>/<dtype>/{1,2}t` — `minerva_quant::matvec` at real shapes (rows × cols =
//!   out × in), throughput in weight bytes read per call. SmolLM2-135M: 576×1536 (ffn_down),
//!   1536×576 (ffn_up/gate), 49152×576 (output head); GPT-OSS-20B: 4096×2880 (attn q),
//!   2880×2880 (one MXFP4 expert), 201088×2880 (output head, Q8_0, 615 MB).
//! * `matmul64/…` — 64 activation vectors at once (prefill); `matmul_batch/<shape>/<dtype>/n{1..64}`
//!   — a batch of decodes, `matmul_i16` with 1 to 64 vectors (SmolLM2's Q4_1 layers, its Q8_0 head).
//! * `repacked/<shape>/<dtype>/n<N>/{zero-copy,repacked}` — repacked weights with Q8_0 activations
//!   against the zero-copy i16 kernels, 1 to 512 vectors.
//! * `mxfp4_split/<layout>/n<N>/{1,2}t` — MXFP4 decode (`matmul_i16_matrix`, 1 to 7 vectors) over
//!   8 GPT-OSS-20B gate/up experts (46080×2880, 70 MB, ≫ L2): GGML blocks (GGUF) against the same
//!   values where HF and MLX store them (`Matrix::Mxfp4Split`), whole and as HF's interleaved
//!   halves (`row_stride` 2), throughput in MXFP4 bytes read.
//! * `vector/{softmax,exp}/<isa>/n<N>` — attention's softmax of a row of N scores and the gated
//!   activations' `e^x`, with the f32 vector kernels this CPU selected (`vector::vector_isa`;
//!   `MINERVA_CPU_ISAS=avx2+fma+f16c,avx2` gives the AVX2 ones to compare), throughput in values.
//! * `vector/dots/{rows,transposed}/<isa>/hd<D>` — a prefill task's attention scores, 48 queries
//!   against a block of 128 keys of D values: `dots` query by query over the keys as rows, and
//!   the keys laid out by `transpose_keys` (counted in) for `dots_transposed`; throughput in
//!   scores.
//!
//! Weights are random bytes with finite scales (speed does not depend on the values), made once.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use minerva_core::DType;
use minerva_quant::ComputePool;
use minerva_quant::pool::for_each_chunk_mut;
use minerva_quant::{
    Matrix, Repacked, dequantize, dequantize_fast, detected_isas, matmul, matmul_i16, matmul_i16_matrix,
    matmul_with_isa, matvec,
};

/// Random weights of `dtype` for `values` values: xorshift bytes, scale fields made finite.
fn weights(dtype: DType, values: usize) -> Vec<u8> {
    let bytes = values / dtype.block_elems() * dtype.block_bytes();
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ bytes as u64;
    let mut out: Vec<u8> = Vec::with_capacity(bytes + 8);
    while out.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(bytes);
    // Floats: random sign and mantissa, exponent in 2^-8 .. 2^-1 (no subnormals: x86 takes a
    // slow microcode assist on them, which a first run of this bench measured for F32/BF16).
    match dtype {
        DType::F32 => {
            for v in out.chunks_exact_mut(4) {
                let bits = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                let bits = (bits & 0x807F_FFFF) | ((119 + (bits >> 23) % 8) << 23);
                v.copy_from_slice(&bits.to_le_bytes());
            }
            return out;
        }
        DType::F16 | DType::BF16 => {
            let (mantissa_bits, bias) = if dtype == DType::F16 { (10, 15) } else { (7, 127) };
            for v in out.chunks_exact_mut(2) {
                let bits = u16::from_le_bytes([v[0], v[1]]);
                let exponent = bias - 8 + (bits >> mantissa_bits) % 8;
                let bits = (bits & (0x8000 | ((1 << mantissa_bits) - 1))) | (exponent << mantissa_bits);
                v.copy_from_slice(&bits.to_le_bytes());
            }
            return out;
        }
        _ => {}
    }
    let scales: &[usize] = match dtype {
        DType::Q8_0 | DType::Q4_0 | DType::Q5_0 => &[0],
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q6_K => &[208],
        DType::Q3_K => &[108],
        DType::Q2_K => &[80, 82],
        _ => &[],
    };
    for block in out.chunks_exact_mut(dtype.block_bytes()) {
        for &at in scales {
            block[at + 1] &= 0x3B; // f16 high byte: |scale| < 1, finite
        }
        if dtype == DType::MXFP4 {
            block[0] = 120 + block[0] % 12;
        }
    }
    out
}

fn pools() -> [(usize, ComputePool); 2] {
    [1, 2].map(|t| (t, ComputePool::new(t).expect("pool")))
}

/// The wrapping sum of `buffer` in `tasks` chunks on `pool`: integer sums vectorize, so this is
/// bound by memory bandwidth.
fn parallel_sum(pool: &ComputePool, buffer: &[u64], tasks: usize) -> u64 {
    let chunk = buffer.len().div_ceil(tasks);
    let mut sums = vec![0u64; tasks];
    pool.install(|| {
        for_each_chunk_mut(&mut sums, 1, |i, sum| {
            let part = buffer.get(i * chunk..).unwrap_or_default();
            sum[0] = part.iter().take(chunk).fold(0u64, |s, &v| s.wrapping_add(v));
        })
    });
    sums.iter().fold(0u64, |s, &v| s.wrapping_add(v))
}

fn bench_bandwidth(c: &mut Criterion) {
    let mut group = c.benchmark_group("membw");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    let buffer: Vec<u64> = (0..(1u64 << 27)).collect(); // 1 GiB
    group.throughput(Throughput::Bytes(8 << 27));
    for (threads, pool) in pools() {
        group.bench_function(format!("sum_u64_{threads}t"), |b| b.iter(|| parallel_sum(&pool, &buffer, 4 * threads)));
    }
    drop(buffer);
    let src = vec![1u8; 512 << 20];
    let mut dst = vec![0u8; 512 << 20];
    group.throughput(Throughput::Bytes(512 << 20));
    group.bench_function("memcpy", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(dst[12345])
        })
    });
    group.finish();
}

const DEQUANT_FORMATS: [DType; 6] = [DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::MXFP4, DType::Q4_K, DType::Q6_K];

fn bench_dequantize(c: &mut Criterion) {
    let mut group = c.benchmark_group("dequantize");
    group.sample_size(10).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    let values = 4 << 20;
    let mut out = vec![0.0f32; values];
    for dtype in DEQUANT_FORMATS {
        let bytes = weights(dtype, values);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(BenchmarkId::new("ref", dtype), |b| {
            b.iter(|| dequantize(dtype, black_box(&bytes), &mut out).expect("dequantize"))
        });
        group.bench_function(BenchmarkId::new("fast", dtype), |b| {
            b.iter(|| dequantize_fast(dtype, black_box(&bytes), &mut out).expect("dequantize_fast"))
        });
    }
    group.finish();
}

/// (model/tensor label, rows, cols, formats).
const SHAPES: [(&str, usize, usize, &[DType]); 7] = [
    ("smollm2_576x1536", 576, 1536, &ALL),
    ("smollm2_1536x576", 1536, 576, &ALL),
    ("smollm2_49152x576", 49152, 576, &ALL),
    ("gptoss_4096x2880", 4096, 2880, &[DType::Q8_0, DType::BF16]),
    ("gptoss_2880x2880", 2880, 2880, &[DType::MXFP4]),
    ("gptoss_201088x2880", 201_088, 2880, &[DType::Q8_0]),
    ("gptoss_2880x4096", 2880, 4096, &[DType::Q4_K, DType::Q6_K]),
];

const ALL: [DType; 9] = [
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::MXFP4,
    DType::Q4_K,
    DType::Q6_K,
    DType::F16,
    DType::BF16,
    DType::F32,
];

fn bench_matvec(c: &mut Criterion) {
    let pools = pools();
    let mut group = c.benchmark_group("matvec");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    for (label, rows, cols, formats) in SHAPES {
        let x: Vec<f32> = (0..cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let mut y = vec![0.0f32; rows];
        // K-quants need cols to be whole 256-value super-blocks (576 and 2880 are not).
        for &dtype in formats.iter().filter(|d| cols.is_multiple_of(d.block_elems())) {
            let w = weights(dtype, rows * cols);
            group.throughput(Throughput::Bytes(w.len() as u64));
            for (threads, pool) in &pools {
                let id = BenchmarkId::new(format!("{label}/{dtype}"), format!("{threads}t"));
                group.bench_function(id, |b| {
                    b.iter(|| pool.install(|| matvec(dtype, black_box(&w), rows, cols, &x, &mut y)).expect("matvec"))
                });
            }
        }
    }
    group.finish();
}

/// `matvec` with i16 activations (`matmul_i16`, n = 1), the CPU backend's default for these
/// formats, on the shapes where it matters: an L3-resident layer and heads larger than L3; once
/// per instruction set this CPU has (`detected_isas`, the scalar reference left out), so each
/// ISA's kernels are compared in one run.
fn bench_matvec_i16(c: &mut Criterion) {
    let pools = pools();
    let mut group = c.benchmark_group("matvec_i16");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    let shapes: [(&str, usize, usize, DType); 4] = [
        ("smollm2_1536x576", 1536, 576, DType::Q4_1),
        ("smollm2_49152x576", 49152, 576, DType::Q8_0),
        ("gptoss_201088x2880", 201_088, 2880, DType::Q8_0),
        ("gptoss_2880x2880", 2880, 2880, DType::MXFP4),
    ];
    let isas: Vec<&str> = detected_isas().into_iter().filter(|&isa| isa != "scalar").collect();
    for (label, rows, cols, dtype) in shapes {
        let x: Vec<f32> = (0..cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let mut y = vec![0.0f32; rows];
        let w = weights(dtype, rows * cols);
        group.throughput(Throughput::Bytes(w.len() as u64));
        for (threads, pool) in &pools {
            for &isa in &isas {
                let id = BenchmarkId::new(format!("{label}/{dtype}/{isa}"), format!("{threads}t"));
                group.bench_function(id, |b| {
                    b.iter(|| {
                        pool.install(|| matmul_with_isa(isa, true, dtype, black_box(&w), rows, cols, &x, 1, &mut y))
                            .expect("matvec")
                    })
                });
            }
        }
    }
    group.finish();
}

/// Prefill: 64 activation vectors at once through the tile kernels (Q8_0 and i16 activations),
/// against 64 separate matvecs (each reading the weights again). Throughput = multiply-adds.
fn bench_matmul(c: &mut Criterion) {
    let pools = pools();
    let mut group = c.benchmark_group("matmul64");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    let n = 64;
    for (label, rows, cols, dtype) in
        [("smollm2_1536x576", 1536, 576, DType::Q4_1), ("smollm2_576x576", 576, 576, DType::Q8_0)]
    {
        let xs: Vec<f32> = (0..n * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let mut ys = vec![0.0f32; n * rows];
        let w = weights(dtype, rows * cols);
        group.throughput(Throughput::Elements((rows * cols * n) as u64));
        for (threads, pool) in &pools {
            let id = |kind: &str| BenchmarkId::new(format!("{label}/{dtype}/{kind}"), format!("{threads}t"));
            group.bench_function(id("tiles_q8"), |b| {
                b.iter(|| pool.install(|| matmul(dtype, black_box(&w), rows, cols, &xs, n, &mut ys)).expect("matmul"))
            });
            group.bench_function(id("tiles_i16"), |b| {
                b.iter(|| pool.install(|| matmul_i16(dtype, black_box(&w), rows, cols, &xs, n, &mut ys)).expect("i16"))
            });
            group.bench_function(id("matvec_x64"), |b| {
                b.iter(|| {
                    pool.install(|| {
                        for (x, y) in xs.chunks_exact(cols).zip(ys.chunks_exact_mut(rows)) {
                            matvec(dtype, black_box(&w), rows, cols, x, y).expect("matvec");
                        }
                    })
                })
            });
        }
    }
    group.finish();
}

/// A batch of decodes (serving several sequences at once): `matmul_i16` with 2 to 16 activation
/// vectors on SmolLM2 shapes, Q8_0. Throughput = multiply-adds.
fn bench_batch(c: &mut Criterion) {
    let pools = pools();
    let mut group = c.benchmark_group("matmul_batch");
    group.sample_size(10).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    let shapes = [
        ("dram_8192x8192", DType::Q4_1, 8192, 8192),
        ("dram_8192x8192", DType::Q8_0, 8192, 8192),
        ("smollm2_1536x576", DType::Q4_1, 1536, 576),
        ("smollm2_576x1536", DType::Q4_1, 576, 1536),
        ("smollm2_1536x576", DType::Q8_0, 1536, 576),
        ("smollm2_49152x576", DType::Q8_0, 49152, 576),
    ];
    for (label, dtype, rows, cols) in shapes {
        let w = weights(dtype, rows * cols);
        for n in [1, 2, 4, 8, 16, 32, 64] {
            let xs: Vec<f32> = (0..n * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
            let mut ys = vec![0.0f32; n * rows];
            group.throughput(Throughput::Elements((rows * cols * n) as u64));
            for (threads, pool) in &pools {
                let id = BenchmarkId::new(format!("{label}/{dtype}/n{n}"), format!("{threads}t"));
                group.bench_function(id, |b| {
                    b.iter(|| {
                        pool.install(|| matmul_i16(dtype, black_box(&w), rows, cols, &xs, n, &mut ys)).expect("i16")
                    })
                });
            }
        }
    }
    group.finish();
}

/// Repacked weights (16 rows interleaved, Q8_0 activations) against the zero-copy i16 kernels, at
/// a Q4_1 matrix larger than an L3 of 32 MiB (as a whole model's weights are, read from DRAM once
/// per step), SmolLM2's shapes, Llama 1B's and 8B's FFN (K-quants: within L3, and larger), one
/// GPT-OSS expert (MXFP4), Gemma 3 270M's tied Q8_0 head (178 MB of short rows: three quarters of
/// the bytes its decode step reads), from
/// one decode to a 512-token prefill: `repacked/<shape>/<dtype>/n<N>/
/// {zero-copy,repacked}/<threads>t`.
fn bench_repacked(c: &mut Criterion) {
    let pools: Vec<(usize, ComputePool)> =
        [1, 2].into_iter().map(|t| (t, ComputePool::new(t).expect("thread pool"))).collect();
    let mut group = c.benchmark_group("repacked");
    group.sample_size(10).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    let shapes = [
        ("dram_8192x8192", DType::Q4_1, 8192, 8192),
        ("dram_8192x8192", DType::Q8_0, 8192, 8192),
        ("smollm2_1536x576", DType::Q4_1, 1536, 576),
        ("smollm2_576x1536", DType::Q4_1, 576, 1536),
        ("smollm2_1536x576", DType::Q8_0, 1536, 576),
        ("smollm2_1536x576", DType::Q4_0, 1536, 576),
        ("smollm2_1536x576", DType::Q5_0, 1536, 576),
        ("llama1b_8192x2048", DType::Q5_K, 8192, 2048),
        ("llama1b_2048x8192", DType::Q6_K, 2048, 8192),
        ("llama8b_14336x4096", DType::Q4_K, 14336, 4096),
        ("llama8b_14336x4096", DType::Q5_K, 14336, 4096),
        ("llama1b_8192x2048", DType::Q3_K, 8192, 2048),
        ("llama8b_14336x4096", DType::Q3_K, 14336, 4096),
        ("llama8b_14336x4096", DType::Q2_K, 14336, 4096),
        ("llama8b_4096x14336", DType::Q6_K, 4096, 14336),
        ("gptoss_2880x2880", DType::MXFP4, 2880, 2880),
        ("gemma3_262144x640", DType::Q8_0, 262144, 640),
    ];
    for (label, dtype, rows, cols) in shapes {
        let w = weights(dtype, rows * cols);
        let packed = Repacked::new(dtype, &w, rows, cols).expect("repack");
        for n in [1, 8, 64, 512] {
            let xs: Vec<f32> = (0..n * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
            let mut ys = vec![0.0f32; n * rows];
            group.throughput(Throughput::Elements((rows * cols * n) as u64));
            for (threads, pool) in &pools {
                for (name, matrix) in
                    [("zero-copy", Matrix::Blocks { dtype, bytes: &w }), ("repacked", packed.matrix())]
                {
                    let id = BenchmarkId::new(format!("{label}/{dtype}/n{n}/{name}"), format!("{threads}t"));
                    group.bench_function(id, |b| {
                        b.iter(|| {
                            pool.install(|| matmul_i16_matrix(black_box(matrix), rows, cols, &xs, n, &mut ys))
                                .expect("product")
                        })
                    });
                }
            }
        }
    }
    group.finish();
}

/// MXFP4 in GGML blocks against the split layout, read in place (see the module docs).
fn bench_mxfp4_split(c: &mut Criterion) {
    let pools = pools();
    let mut group = c.benchmark_group("mxfp4_split");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    let (rows, cols) = (8 * 5760, 2880);
    let blocks = weights(DType::MXFP4, rows * cols);
    // The same bytes split: the scale bytes apart, the nibbles as they are (speed does not depend
    // on the nibbles' order).
    let groups = rows * cols / 32;
    let scales: Vec<u8> = blocks.chunks_exact(17).map(|b| b[0]).collect();
    let nibbles: Vec<u8> = blocks.chunks_exact(17).flat_map(|b| b[1..].to_vec()).collect();
    assert_eq!(scales.len(), groups);
    let layouts: [(&str, Matrix<'_>, usize); 3] = [
        ("gguf", Matrix::Blocks { dtype: DType::MXFP4, bytes: &blocks }, rows),
        ("split", Matrix::Mxfp4Split { nibbles: &nibbles, scales: &scales, row_stride: 1 }, rows),
        ("split_half", Matrix::Mxfp4Split { nibbles: &nibbles, scales: &scales, row_stride: 2 }, rows / 2),
    ];
    for n in [1, 2, 4, 7] {
        let xs: Vec<f32> = (0..n * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        for (threads, pool) in &pools {
            for (label, matrix, rows) in layouts {
                let mut ys = vec![0.0f32; n * rows];
                // Half the rows read half the bytes.
                group.throughput(Throughput::Bytes((rows * cols / 32 * 17) as u64));
                group.bench_function(BenchmarkId::new(format!("{label}/n{n}"), format!("{threads}t")), |b| {
                    b.iter(|| pool.install(|| matmul_i16_matrix(black_box(matrix), rows, cols, &xs, n, &mut ys)))
                });
            }
        }
    }
    group.finish();
}

fn bench_vector(c: &mut Criterion) {
    use minerva_quant::vector;
    let mut group = c.benchmark_group("vector");
    group.sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    let isa = vector::vector_isa();
    for n in [64, 512, 4096] {
        // Scores of a few units either side of zero, as attention's are before scaling.
        let scores: Vec<f32> = (0..n).map(|i| ((i * 37 % 211) as f32 / 53.0 - 2.0) * 3.0).collect();
        let mut work = scores.clone();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(format!("softmax/{isa}/n{n}"), |b| {
            b.iter(|| {
                work.copy_from_slice(&scores);
                vector::softmax(black_box(&mut work), 0.125, None);
                black_box(work[0])
            })
        });
        group.bench_function(format!("exp/{isa}/n{n}"), |b| {
            b.iter(|| {
                work.copy_from_slice(&scores);
                vector::exp(black_box(&mut work));
                black_box(work[0])
            })
        });
    }
    // One prefill task's block: 48 queries (16 rows × 3 heads of a KV head) against 128 keys.
    let (queries, keys) = (48, 128);
    for len in [64, 128, 256] {
        let rows: Vec<f32> = (0..keys * len).map(|i| (i * 37 % 211) as f32 / 53.0 - 2.0).collect();
        let xs: Vec<Vec<f32>> =
            (0..queries).map(|q| (0..len).map(|i| ((i * 53 + q * 29) % 97) as f32 / 11.0 - 4.4).collect()).collect();
        let x_refs: Vec<&[f32]> = xs.iter().map(|x| &x[..]).collect();
        let mut scores = vec![0.0f32; queries * keys];
        group.throughput(Throughput::Elements((queries * keys) as u64));
        group.bench_function(format!("dots/rows/{isa}/hd{len}"), |b| {
            b.iter(|| {
                for (out, x) in scores.chunks_exact_mut(keys).zip(&x_refs) {
                    vector::dots(out, x, black_box(&rows));
                }
                black_box(scores[0])
            })
        });
        let mut laid = vec![0.0f32; vector::transposed_keys_len(keys, len).expect("a small block")];
        let firsts = vec![0; queries];
        group.bench_function(format!("dots/transposed/{isa}/hd{len}"), |b| {
            b.iter(|| {
                vector::transpose_keys(black_box(&rows), len, &mut laid);
                let mut outs: Vec<&mut [f32]> = scores.chunks_exact_mut(keys).collect();
                vector::dots_transposed(&mut outs, &x_refs, &firsts, &laid);
                black_box(scores[0])
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_bandwidth,
    bench_dequantize,
    bench_matvec,
    bench_matvec_i16,
    bench_matmul,
    bench_batch,
    bench_repacked,
    bench_mxfp4_split,
    bench_vector
);
criterion_main!(benches);
