//! Attention over the KV cache (f32 or f16): one task per (query row, head).
//!
//! An f16 cache is widened to f32 per task (the head's window of keys and values) before the dot
//! products, so both caches share one f32 inner loop.

use std::cell::RefCell;

use half::slice::HalfFloatSliceExt;
use minerva_quant::{pool, vector};

use super::{CpuCache, CpuTensor, KvData};
use crate::backend::{Batch, Mask};
use crate::checks;
use crate::error::Result;

/// See [`crate::Backend::attention`]; with `sinks` (one logit per query head),
/// [`crate::Backend::attention_with_sinks`].
#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    q: &CpuTensor,
    k: &CpuTensor,
    v: &CpuTensor,
    cache: &mut CpuCache,
    layer: usize,
    batch: &Batch,
    mask: Mask,
    sinks: Option<&[f32]>,
) -> Result<CpuTensor> {
    let s = cache.shape;
    let hd = s.head_dim;
    let kv_dim = s.n_head_kv * hd;
    let rows = batch.n_tokens();
    let shape = |t: &CpuTensor| (t.rows, t.cols);
    let n_head = checks::attention(shape(q), shape(k), shape(v), &s, layer, batch, sinks.map(<[f32]>::len))?;
    let group = n_head / s.n_head_kv;
    // The slot of every row; then store this step's keys and values.
    let mut slot_of = vec![0usize; rows];
    for seq in &batch.seqs {
        for r in seq.rows.clone() {
            slot_of[r] = seq.slot;
            let pos = batch.positions[r] as usize;
            for h in 0..s.n_head_kv {
                let at = cache.index(seq.slot, layer, h, pos);
                cache.k.store(at, &k.data[r * kv_dim + h * hd..][..hd]);
                cache.v.store(at, &v.data[r * kv_dim + h * hd..][..hd]);
            }
        }
    }
    let scale = 1.0 / (hd as f32).sqrt();
    // Each (row, head) is one weighted sum, which writes all its values.
    let mut out = CpuTensor::for_output(rows, q.cols);
    let cache = &*cache;
    let attend = |scratch: &mut Scratch, i: usize, out: &mut [f32]| {
        let (r, h) = (i / n_head, i % n_head);
        let pos = batch.positions[r] as usize;
        let lo = match mask {
            Mask::Causal => 0,
            Mask::SlidingWindow(w) => (pos + 1).saturating_sub(w),
        };
        let base = cache.index(slot_of[r], layer, h / group, 0);
        let window = base + lo * hd..base + (pos + 1) * hd;
        let Scratch { keys, values, scores } = scratch;
        let (keys, values) = (cache.k.load(window.clone(), keys), cache.v.load(window, values));
        let query = &q.data[i * hd..(i + 1) * hd];
        // Not cleared: `dots` writes every score.
        scores.resize(keys.len() / hd, 0.0);
        vector::dots(scores, query, keys);
        // A sink is one more score in the softmax whose value row is zero: it only adds to the total.
        vector::softmax(scores, scale, sinks.map(|sinks| sinks[h]));
        vector::weighted_sum(out, scores, values);
    };
    pool::for_each_chunk_mut(&mut out.data, hd, |i, out| SCRATCH.with_borrow_mut(|scratch| attend(scratch, i, out)));
    Ok(out)
}

/// Per-thread buffers for the scores and for widening an f16 cache: allocating them per task
/// cost ~20 % of decode time at 512 positions (each is above malloc's mmap threshold).
#[derive(Default)]
struct Scratch {
    keys: Vec<f32>,
    values: Vec<f32>,
    scores: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

impl KvData {
    /// Writes `values` at element offset `at`.
    fn store(&mut self, at: usize, values: &[f32]) {
        match self {
            KvData::F32(data) => data[at..at + values.len()].copy_from_slice(values),
            KvData::F16(data) => data[at..at + values.len()].convert_from_f32_slice(values),
        }
    }

    /// Elements `range` as f32: borrowed from an f32 cache, widened into `buf` from an f16 one.
    fn load<'a>(&'a self, range: std::ops::Range<usize>, buf: &'a mut Vec<f32>) -> &'a [f32] {
        match self {
            KvData::F32(data) => &data[range],
            KvData::F16(data) => {
                buf.resize(range.len(), 0.0);
                data[range].convert_to_f32_slice(buf);
                buf
            }
        }
    }
}
