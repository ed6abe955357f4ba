//! Attention over one layer of the KV cache: `attention.wgsl` + `attention_reduce.wgsl`
//! (flash-decoding: keys split across workgroups, then a reduction) for decode steps, and
//! `attention_prefill.wgsl` (query blocks sharing key/value tiles, online softmax) for prefill.

use super::KvElem;
use crate::gpu::{Gpu, PipelineKey};

/// The attention's shape.
pub(crate) struct AttentionShape {
    pub rows: usize,
    pub n_head: usize,
    pub n_kv: usize,
    pub head_dim: usize,
    /// The cache's paging: positions per block, table entries per slot, blocks in the pool.
    pub paging: Paging,
    /// Keys per split (a workgroup's share of one query's positions).
    pub split_len: usize,
    /// The most positions any row sees.
    pub max_span: usize,
    /// 0: causal; else the sliding window.
    pub window: usize,
    /// Per-head sink logits (`n_head` f32), if any.
    pub sinks: Option<wgpu::Buffer>,
    /// A placeholder bound in `sinks`' place when there are none.
    pub no_sinks: wgpu::Buffer,
    /// How the cache stores keys and values.
    pub kv: KvElem,
}

/// How a cache's layer is paged (see `minerva_model::kv_blocks`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Paging {
    pub block_size: usize,
    pub per_slot: usize,
    pub blocks: usize,
}

/// The largest head dimension the kernel's accumulator holds (64 threads × 4).
pub(crate) const MAX_HEAD_DIM: usize = 256;

/// Records `out = softmax(q kᵀ / √d) v` for every (row, head), reading the cached keys/values
/// `kc`/`vc` at each row's slot from `info` through the slots' block `tables`; `part` is scratch of [`partial_len`] f32. The
/// reduction adds `s.sinks`' logit per head to every softmax when set.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    gpu: &Gpu,
    q: &wgpu::Buffer,
    kc: &wgpu::Buffer,
    vc: &wgpu::Buffer,
    info: &wgpu::Buffer,
    tables: &wgpu::Buffer,
    part: &wgpu::Buffer,
    out: &wgpu::Buffer,
    s: &AttentionShape,
) {
    let n_splits = splits(s);
    let scale = 1.0 / (s.head_dim as f32).sqrt();
    let params = [
        s.n_head as u32,
        s.n_kv as u32,
        s.head_dim as u32,
        n_splits as u32,
        s.split_len as u32,
        s.window as u32,
        scale.to_bits(),
        s.paging.block_size as u32,
        s.paging.per_slot as u32,
        s.paging.blocks as u32,
        0,
        0,
    ];
    let groups = [n_splits as u32, s.n_head as u32, s.rows as u32];
    let source = || s.kv.source(include_str!("attention.wgsl"));
    let key = match s.kv {
        KvElem::F32 => PipelineKey::named("attention").variant("f32"),
        KvElem::F16 => PipelineKey::named("attention").variant("f16"),
    };
    gpu.dispatch(key, source, &[q, kc, vc, info, part, tables], &params, groups);
    // Decode: each row its own sequence's cache.
    gpu.moved(s.rows as u64 * cache_bytes(s) + 4 * (s.rows * s.n_head * s.head_dim + partial_len(s)) as u64);
    let params = [s.n_head as u32, s.head_dim as u32, n_splits as u32, s.sinks.is_some() as u32];
    let source = || include_str!("attention_reduce.wgsl").to_string();
    let sinks = s.sinks.as_ref().unwrap_or(&s.no_sinks);
    gpu.dispatch(
        PipelineKey::named("attention_reduce"),
        source,
        &[part, out, sinks],
        &params,
        [s.n_head as u32, s.rows as u32, 1],
    );
}

fn splits(s: &AttentionShape) -> usize {
    s.max_span.div_ceil(s.split_len).max(1)
}

/// f32 values of scratch the first pass writes.
pub(crate) fn partial_len(s: &AttentionShape) -> usize {
    s.rows * s.n_head * splits(s) * (s.head_dim + 2)
}

/// Query rows per prefill workgroup (`QB` in `attention_prefill.wgsl`).
pub(crate) const PREFILL_ROWS: usize = 16;
/// The largest head dimension the prefill kernel's tiles hold.
pub(crate) const PREFILL_MAX_HEAD_DIM: usize = 128;
/// Workgroup memory the prefill kernel declares (queries, keys and values of 16 × 128, the keys
/// padded by a word a row, 16 × 16 scores): more than WebGPU's guaranteed 16 KiB, so devices with less use the split kernels.
pub(crate) const PREFILL_WORKGROUP_BYTES: usize = (3 * 2048 + 16 + 256) * 4;

/// Cuts every sequence's rows into blocks of up to [`PREFILL_ROWS`]: `(first row, rows, slot, 0)`.
pub(crate) fn prefill_blocks(batch: &minerva_model::Batch) -> Vec<u32> {
    let mut blocks = Vec::new();
    for seq in &batch.seqs {
        for first in seq.rows.clone().step_by(PREFILL_ROWS) {
            let rows = PREFILL_ROWS.min(seq.rows.end - first);
            blocks.extend([first as u32, rows as u32, seq.slot as u32, 0]);
        }
    }
    blocks
}

/// Records prefill attention for the query blocks in `blocks` (from [`prefill_blocks`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_prefill(
    gpu: &Gpu,
    q: &wgpu::Buffer,
    kc: &wgpu::Buffer,
    vc: &wgpu::Buffer,
    info: &wgpu::Buffer,
    blocks: &wgpu::Buffer,
    n_blocks: usize,
    tables: &wgpu::Buffer,
    out: &wgpu::Buffer,
    s: &AttentionShape,
) {
    let scale = 1.0 / (s.head_dim as f32).sqrt();
    let params = [
        s.n_head as u32,
        s.n_kv as u32,
        s.head_dim as u32,
        s.window as u32,
        scale.to_bits(),
        s.sinks.is_some() as u32,
        s.paging.block_size as u32,
        s.paging.per_slot as u32,
        s.paging.blocks as u32,
        0,
    ];
    let source = || s.kv.source(include_str!("attention_prefill.wgsl"));
    let groups = [n_blocks as u32, s.n_head as u32, 1];
    let sinks = s.sinks.as_ref().unwrap_or(&s.no_sinks);
    let key = match s.kv {
        KvElem::F32 => PipelineKey::named("attention_prefill").variant("f32"),
        KvElem::F16 => PipelineKey::named("attention_prefill").variant("f16"),
    };
    gpu.dispatch(key, source, &[q, kc, vc, info, blocks, out, sinks, tables], &params, groups);
    gpu.moved(cache_bytes(s) + 8 * (s.rows * s.n_head * s.head_dim) as u64);
}

/// The keys and values one sequence's attention reads: the longest span (the window where there
/// is one) of every KV head, once.
fn cache_bytes(s: &AttentionShape) -> u64 {
    let span = if s.window > 0 { s.max_span.min(s.window) } else { s.max_span };
    (2 * span * s.n_kv * s.head_dim * s.kv.bytes()) as u64
}
