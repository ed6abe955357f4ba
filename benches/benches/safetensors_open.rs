//! Opening a sharded SafeTensors checkpoint, against reading its bytes, in the same run.
//!
//! A synthetic 3-shard checkpoint (3 × 43 BF16 tensors of 1024 × 4096, 1.08 GB of non-zero data,
//! with `model.safetensors.index.json`) is written once into a temp dir, streamed in 1 MiB chunks.
//! The files were just written, so all three measurements read from the page cache:
//!
//! * `safetensors_open/open_headers` — `Checkpoint::open` on the directory: index, three maps,
//!   three headers; no tensor byte is touched.
//! * `safetensors_open/open_touch_pages` — open, then read one byte per 4096 of every tensor (every
//!   page faulted in through the maps).
//! * `safetensors_open/fs_read` — `std::fs::read` of the three shards (a copy into fresh buffers).

use std::hint::black_box;
use std::io::Write;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use minerva_safetensors::Checkpoint;
use serde_json::{Map, Value, json};

const SHARDS: usize = 3;
const TENSORS_PER_SHARD: usize = 43;
const ROWS: usize = 1024;
const COLS: usize = 4096;
const TENSOR_BYTES: usize = ROWS * COLS * 2;

/// Writes the checkpoint into `dir`; returns its data bytes. Memory use is one 1 MiB chunk.
fn write_checkpoint(dir: &Path) -> std::io::Result<u64> {
    let mut weight_map = Map::new();
    let mut chunk = vec![0u8; 1 << 20];
    let mut total = 0u64;
    for s in 0..SHARDS {
        let shard = format!("model-{:05}-of-{SHARDS:05}.safetensors", s + 1);
        let mut header = Map::new();
        for t in 0..TENSORS_PER_SHARD {
            let name = format!("model.layers.{}.mlp.w{t}.weight", s);
            let begin = t * TENSOR_BYTES;
            header.insert(
                name.clone(),
                json!({"dtype": "BF16", "shape": [ROWS, COLS], "data_offsets": [begin, begin + TENSOR_BYTES]}),
            );
            weight_map.insert(name, Value::from(shard.clone()));
        }
        let mut header = Value::Object(header).to_string().into_bytes();
        header.resize(header.len().next_multiple_of(8), b' ');
        let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join(&shard))?);
        out.write_all(&(header.len() as u64).to_le_bytes())?;
        out.write_all(&header)?;
        for c in 0..TENSORS_PER_SHARD * TENSOR_BYTES / chunk.len() {
            // Cheap non-zero filler, different per chunk, so no page is a hole.
            chunk.iter_mut().enumerate().for_each(|(i, b)| *b = (i ^ c ^ s) as u8 | 1);
            out.write_all(&chunk)?;
        }
        out.into_inner()?.sync_all()?;
        total += (TENSORS_PER_SHARD * TENSOR_BYTES) as u64;
    }
    let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string())?;
    Ok(total)
}

fn bench_open(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let total = write_checkpoint(dir.path()).expect("write synthetic checkpoint");
    eprintln!("synthetic checkpoint: {SHARDS} shards, {} tensors, {total} data bytes", SHARDS * TENSORS_PER_SHARD);
    let shard_paths: Vec<_> =
        Checkpoint::open(dir.path()).expect("open").shard_paths().map(Path::to_path_buf).collect();

    let mut group = c.benchmark_group("safetensors_open");
    group.sample_size(10);
    group.bench_function("open_headers", |b| {
        b.iter(|| {
            let ckpt = Checkpoint::open(dir.path()).expect("open");
            assert_eq!(ckpt.len(), SHARDS * TENSORS_PER_SHARD);
            ckpt
        })
    });
    group.bench_function("open_touch_pages", |b| {
        b.iter(|| {
            let ckpt = Checkpoint::open(dir.path()).expect("open");
            let mut sum = 0u64;
            for t in ckpt.tensors() {
                sum += t.view.bytes.iter().step_by(4096).map(|&b| u64::from(b)).sum::<u64>();
            }
            black_box(sum)
        })
    });
    group.bench_function("fs_read", |b| {
        b.iter(|| {
            let mut len = 0;
            for path in &shard_paths {
                len += black_box(std::fs::read(path).expect("read")).len();
            }
            len
        })
    });
    group.finish();
}

criterion_group!(benches, bench_open);
criterion_main!(benches);
