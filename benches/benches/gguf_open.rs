//! How long opening a GGUF file takes: map + parse of header, metadata and tensor table.
//!
//! * `gguf_open/smollm2_q4_1` — the real model (33 keys, 272 tensors, 49 152 tokens).
//! * `gguf_open/gpt_oss_20b_header` — a synthetic file with GPT-OSS-20B's 35 keys (201 088 tokens,
//!   446 189 merges) and 459 tensors, its 13 GB of data a sparse hole. The old prototype took 1.89 s.
//! * `gguf_parse/smollm2_q4_1` — the real model parsed from bytes already in memory (no mmap, no
//!   page faults): the parser's own cost.

use criterion::{Criterion, criterion_group, criterion_main};
use minerva_benches::{gpt_oss_20b_header, real_model_path, write_sparse};
use minerva_gguf::Gguf;

fn bench_open(c: &mut Criterion) {
    let real = real_model_path();
    assert!(real.exists(), "{} is missing: run `cargo xtask setup`", real.display());
    let dir = tempfile::tempdir().expect("temp dir");
    let synthetic = dir.path().join("gpt-oss-20b-header.gguf");
    let writer = gpt_oss_20b_header();
    let len = write_sparse(&writer, &synthetic).expect("write synthetic file");
    let header = writer.header_bytes().expect("header");
    eprintln!("synthetic GPT-OSS-20B: {} header bytes, {len} bytes in all (sparse)", header.len());

    let mut group = c.benchmark_group("gguf_open");
    group.sample_size(20);
    group.bench_function("smollm2_q4_1", |b| {
        b.iter(|| {
            let g = Gguf::open(&real).expect("open");
            assert_eq!(g.tensor_count(), 272);
            g
        })
    });
    group.bench_function("gpt_oss_20b_header", |b| {
        b.iter(|| {
            let g = Gguf::open(&synthetic).expect("open");
            assert_eq!((g.tensor_count(), g.metadata_len()), (459, 35));
            g
        })
    });
    group.finish();

    // Parsing alone, over bytes already in memory (the header is all a parse reads).
    let real_bytes = std::fs::read(&real).expect("read real model");
    let mut group = c.benchmark_group("gguf_parse");
    group.sample_size(20);
    group.bench_function("smollm2_q4_1", |b| b.iter(|| Gguf::parse(&real_bytes[..]).expect("parse")));
    group.finish();
}

criterion_group!(benches, bench_open);
criterion_main!(benches);
