//! Attention over the KV cache (f32 or f16).
//!
//! A task takes a few rows of the batch and the query heads that share one KV head, and goes
//! through that head's keys, then its values, a block at a time: a block is read from the cache
//! once per task and stays in L1 (or L2) while every query of the task meets it, instead of once
//! per query from further out. An f16 block is read in place by tasks of few queries (decode)
//! where the kernels widen each chunk in a register (AVX2 or AVX-512 with F16C), and widened into
//! a buffer first by tasks of many (prefill), whose queries would otherwise each widen it again,
//! and wherever the kernels would widen it per call. The heads of one row share their
//! window, so their dot products go through a block of keys together (`vector::dots_many_f16`:
//! with AVX-512 each f16 chunk widened once for up to four heads) and their weighted sums through
//! a block of values (`vector::weighted_sums_add`). Where a task has many queries and the CPU a
//! kernel for it (AVX-512), its block of keys is laid out 16 keys at a time dimension-major
//! (`vector::transpose_keys`) and every query of the task meets it there
//! (`vector::dots_transposed`: the same bits as `dots`, without its per-key sum of lanes). Each
//! query's scores and weighted sum come out as they would for that query alone (the same `dot`
//! per key, the values added key by key in order), so results do not depend on how rows and heads
//! were grouped into tasks: decode and prefill agree bit for bit.

use std::cell::RefCell;
use std::ops::Range;

use half::f16;
use half::slice::HalfFloatSliceExt;
use minerva_core::DType;
use minerva_quant::pool::ColumnBlock;
use minerva_quant::{pool, vector};

use super::{CpuCache, CpuTensor, KvData, LineAligned};
use crate::backend::{Batch, Mask};
use crate::checks;
use crate::error::Result;

/// Most rows per task: a task's keys and values are read from the cache once for all of its
/// rows (times the query heads sharing their KV head).
const MAX_ROWS_PER_TASK: usize = 16;

/// Scores a task may hold at once (its queries times their windows), so that long contexts
/// take fewer rows per task rather than a scratch of hundreds of MiB.
const MAX_TASK_SCORES: usize = 1 << 20;

/// Most query heads whose weighted sums go through a block of values in one call.
const MAX_HEADS_PER_SUM: usize = 8;

/// Queries of a task from which an f16 block is widened into a buffer once, rather than in each
/// query's loads (decode's few queries per block read it in place).
const WIDEN_FROM_QUERIES: usize = 16;

/// Bytes of keys (or values) per block: at most an L1 of 48 KiB beside the queries, and enough
/// keys per call that the calls' own costs stay small (16 KiB measured slower, 64 KiB no faster).
const BLOCK_BYTES: usize = 32 * 1024;

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
    cache.tables.check_batch(batch)?;
    // Store this step's keys and values.
    for seq in &batch.seqs {
        for r in seq.rows.clone() {
            let pos = batch.positions[r] as usize;
            for h in 0..s.n_head_kv {
                let at = cache.index(seq.slot, layer, h, pos);
                cache.k.store(at, &k.data[r * kv_dim + h * hd..][..hd]);
                cache.v.store(at, &v.data[r * kv_dim + h * hd..][..hd]);
            }
        }
    }
    if n_head == 0 {
        // No heads (no query columns): nothing to attend, and no group to split into tasks.
        return Ok(CpuTensor::for_output(rows, q.cols));
    }
    let window = |r: usize| {
        let pos = batch.positions[r] as usize;
        let lo = match mask {
            Mask::Causal => 0,
            Mask::SlidingWindow(w) => (pos + 1).saturating_sub(w),
        };
        lo..pos + 1
    };
    let longest = (0..rows).map(|r| window(r).len()).max().unwrap_or(0);
    let plan = Plan::new(rows, n_head, s.n_head_kv, longest, pool::current_threads());
    let job = Job { q, cache: &*cache, layer, hd, scale: 1.0 / (hd as f32).sqrt(), sinks, window: &window };
    // Each task writes its queries' outputs in place: its rows' columns of its heads, a tile
    // (task `t` is tile `t`: row blocks one after another, each across its groups of heads).
    let mut out = CpuTensor::for_output(rows, q.cols);
    let tile_cols = plan.heads_per_task * hd;
    pool::for_each_tile_mut(&mut out.data, q.cols, plan.rows_per_task, tile_cols, |g, i, mut out| {
        let (task_rows, heads) = plan.task(g * plan.tiles_per_row_block() + i);
        debug_assert!(task_rows == out.rows() && heads.start * hd == out.first_column());
        let kv_head = heads.start / plan.group;
        // A task's rows may cross from one sequence into the next: one run per sequence.
        let mut first = task_rows.start;
        while first < task_rows.end {
            let (slot, seq_end) = sequence_of(batch, first);
            let end = seq_end.min(task_rows.end);
            let run = Run { slot, kv_head, rows: first..end, heads: heads.clone() };
            SCRATCH.with_borrow_mut(|scratch| job.attend(scratch, &run, &mut out));
            first = end;
        }
    });
    Ok(out)
}

/// The slot of the sequence holding row `r` and the end of its rows (`checks::attention` saw
/// that the sequences cover the batch).
fn sequence_of(batch: &Batch, r: usize) -> (usize, usize) {
    batch.seqs.iter().find(|seq| seq.rows.contains(&r)).map_or((0, r + 1), |seq| (seq.slot, seq.rows.end))
}

/// How a call's queries are split into tasks: `rows_per_task` rows by `heads_per_task` query
/// heads of one KV head's group, tasks numbered row block by row block, then by head.
#[derive(Clone, Copy, Debug)]
struct Plan {
    rows: usize,
    n_head_kv: usize,
    group: usize,
    rows_per_task: usize,
    heads_per_task: usize,
}

impl Plan {
    /// As many rows per task as keep four tasks per thread (so that the causal mask's uneven
    /// tasks still spread; one thread needs no spreading), the whole group of heads unless that
    /// leaves too few tasks (decode on several threads).
    fn new(rows: usize, n_head: usize, n_head_kv: usize, longest: usize, threads: usize) -> Self {
        let group = n_head / n_head_kv.max(1);
        let wanted = if threads > 1 { 4 * threads } else { 1 };
        let rows_per_task = MAX_ROWS_PER_TASK.min(rows.next_power_of_two());
        let mut plan = Plan { rows, n_head_kv, group, rows_per_task, heads_per_task: group };
        let unfit = |plan: &Plan| plan.tasks() < wanted || plan.task_queries() * longest > MAX_TASK_SCORES;
        while plan.rows_per_task > 1 && unfit(&plan) {
            plan.rows_per_task /= 2;
        }
        if unfit(&plan) {
            plan.heads_per_task = 1;
        }
        plan
    }

    fn tasks(&self) -> usize {
        self.rows.div_ceil(self.rows_per_task) * self.tiles_per_row_block()
    }

    /// Tasks per block of rows: one per group of heads.
    fn tiles_per_row_block(&self) -> usize {
        self.n_head_kv * (self.group / self.heads_per_task)
    }

    fn task_queries(&self) -> usize {
        self.rows_per_task * self.heads_per_task
    }

    /// Task `t`'s rows and query heads.
    fn task(&self, t: usize) -> (Range<usize>, Range<usize>) {
        let per_row_block = self.tiles_per_row_block();
        let first_row = t / per_row_block * self.rows_per_task;
        let first_head = t % per_row_block * self.heads_per_task;
        (first_row..(first_row + self.rows_per_task).min(self.rows), first_head..first_head + self.heads_per_task)
    }
}

/// What every task of one attention call shares.
struct Job<'a, W> {
    q: &'a CpuTensor,
    cache: &'a CpuCache,
    layer: usize,
    hd: usize,
    scale: f32,
    sinks: Option<&'a [f32]>,
    /// The positions row `r` attends to.
    window: &'a W,
}

/// Rows of one sequence and the query heads (of one KV head) a task attends for.
struct Run {
    slot: usize,
    kv_head: usize,
    rows: Range<usize>,
    heads: Range<usize>,
}

impl<W: Fn(usize) -> Range<usize>> Job<'_, W> {
    /// The run's outputs into its rows of `out` (its heads' columns, a head after another).
    fn attend(&self, scratch: &mut Scratch, run: &Run, out: &mut ColumnBlock<'_, f32>) {
        let hd = self.hd;
        out.rows_mut(run.rows.clone()).for_each(|row| row.fill(0.0));
        if hd == 0 {
            return;
        }
        let Scratch { keys, values, laid, scores, starts } = scratch;
        // Query `i` (row `i / heads`, head `i % heads`) keeps its scores at `starts[i]..`.
        starts.clear();
        let mut total = 0;
        for r in run.rows.clone() {
            for _ in run.heads.clone() {
                starts.push(total);
                total += (self.window)(r).len();
            }
        }
        // Not cleared: every score of a window is written before it is read.
        scores.resize(total, 0.0);
        let span = run.rows.clone().map(self.window).reduce(|a, b| a.start.min(b.start)..a.end.max(b.end));
        let Some(span) = span else { return };
        let block = (BLOCK_BYTES / (4 * hd.max(1))).max(1);
        // Many queries per block, or kernels without f16 loads of their own: widen an f16 block
        // once rather than in every query's loads (or every call).
        let widen = run.rows.len() * run.heads.len() >= WIDEN_FROM_QUERIES || !vector::f16_in_registers();
        // Many queries per block: the block's keys laid out 16 at a time dimension-major, where
        // this CPU has a kernel that sums a key's lanes as whole vectors (the same bits).
        let transposed = widen && vector::has_dots_transposed(hd);
        // The window's positions in runs that lie one after another in the cache, at most a
        // block's worth each: (positions, element offset of the first).
        let runs = || {
            self.cache
                .tables
                .runs(run.slot, span.clone(), block)
                .map(|(positions, b, at)| (positions, self.cache.offset(self.layer, run.kv_head, b) + at * hd))
        };
        let heads = run.heads.len();
        // Each run is asked for (into L2) while the one before it is computed: the runs of a
        // paged cache lie apart, each a few KiB, too short for the hardware prefetcher to find
        // before the kernels wait on it. The first key run is asked for whole here, the first
        // value run while the last key run is computed.
        let elements = |(positions, base): &(Range<usize>, usize)| *base..base + positions.len() * hd;
        let mut key_runs = runs().peekable();
        if let Some(first) = key_runs.peek() {
            self.cache.k.prefetch(elements(first));
        }
        while let Some((positions, base)) = key_runs.next() {
            match key_runs.peek() {
                Some(next) => self.cache.k.prefetch(elements(next)),
                None => runs().take(1).for_each(|first| self.cache.v.prefetch(elements(&first))),
            }
            let (from, to) = (positions.start, positions.end);
            if transposed {
                let block = self.cache.k.load(base..base + (to - from) * hd, keys);
                laid.resize(vector::transposed_keys_len(to - from, hd).expect("a block of keys in memory"));
                vector::transpose_keys(block, hd, laid);
                self.transposed_dots(run, &mut scores[..total], laid, from..to);
                continue;
            }
            let keys = self.cache.k.rows(base..base + (to - from) * hd, keys, widen);
            // A row's heads share its window: their scores lie side by side, a window's length
            // each, and go through the block of keys together.
            for (ri, r) in run.rows.clone().enumerate() {
                let w = (self.window)(r);
                let (a, e) = (w.start.max(from), w.end.min(to));
                if a >= e {
                    continue;
                }
                let row_scores = &mut scores[starts[ri * heads]..][..heads * w.len()];
                let queries = &self.q.data[r * self.q.cols..][run.heads.start * hd..run.heads.end * hd];
                for (row_scores, queries) in
                    row_scores.chunks_mut(MAX_HEADS_PER_SUM * w.len()).zip(queries.chunks(MAX_HEADS_PER_SUM * hd))
                {
                    let mut outs: [&mut [f32]; MAX_HEADS_PER_SUM] = std::array::from_fn(|_| Default::default());
                    let mut xs: [&[f32]; MAX_HEADS_PER_SUM] = [&[]; MAX_HEADS_PER_SUM];
                    let pairs = row_scores.chunks_exact_mut(w.len()).zip(queries.chunks_exact(hd));
                    for ((out, x), (scores, query)) in outs.iter_mut().zip(&mut xs).zip(pairs) {
                        (*out, *x) = (&mut scores[a - w.start..e - w.start], query);
                    }
                    let m = queries.len() / hd;
                    keys.dots_many(&mut outs[..m], &xs[..m], (a - from) * hd..(e - from) * hd);
                }
            }
        }
        for (i, &at) in starts.iter().enumerate() {
            let end = starts.get(i + 1).copied().unwrap_or(total);
            let h = run.heads.start + i % run.heads.len();
            // A sink is one more score in the softmax whose value row is zero: it only adds to the total.
            vector::softmax(&mut scores[at..end], self.scale, self.sinks.map(|sinks| sinks[h]));
        }
        let mut value_runs = runs().peekable();
        while let Some((positions, base)) = value_runs.next() {
            if let Some(next) = value_runs.peek() {
                self.cache.v.prefetch(elements(next));
            }
            let (from, to) = (positions.start, positions.end);
            let values = self.cache.v.rows(base..base + (to - from) * hd, values, widen);
            // A row's heads share its window: their sums go through the block together.
            for (ri, r) in run.rows.clone().enumerate() {
                let w = (self.window)(r);
                let (a, e) = (w.start.max(from), w.end.min(to));
                if a >= e {
                    continue;
                }
                let (in_window, in_block) = (a - w.start..e - w.start, a - from..e - from);
                let mut row_out = out.row_mut(r).chunks_exact_mut(hd);
                for starts in starts[ri * heads..(ri + 1) * heads].chunks(MAX_HEADS_PER_SUM) {
                    let mut outs: [&mut [f32]; MAX_HEADS_PER_SUM] = std::array::from_fn(|_| Default::default());
                    let mut weights: [&[f32]; MAX_HEADS_PER_SUM] = [&[]; MAX_HEADS_PER_SUM];
                    for ((out, weights), &at) in outs.iter_mut().zip(&mut weights).zip(starts) {
                        *out = row_out.next().expect("one output per head");
                        *weights = &scores[at + in_window.start..at + in_window.end];
                    }
                    let m = starts.len();
                    values.weighted_sums_add(&mut outs[..m], &weights[..m], in_block.start * hd..in_block.end * hd);
                }
            }
        }
    }

    /// Every query of the run against the keys at `positions`, laid out by
    /// `vector::transpose_keys`, into its scores (`scores`: the run's, query after query).
    fn transposed_dots(&self, run: &Run, scores: &mut [f32], laid: &[f32], positions: Range<usize>) {
        const BATCH: usize = 16;
        let hd = self.hd;
        let mut outs: [&mut [f32]; BATCH] = Default::default();
        let mut xs: [&[f32]; BATCH] = [&[]; BATCH];
        let mut firsts = [0usize; BATCH];
        let mut n = 0;
        let mut rest = scores;
        for r in run.rows.clone() {
            let w = (self.window)(r);
            let (a, e) = (w.start.max(positions.start), w.end.min(positions.end));
            for h in run.heads.clone() {
                let (mine, after) = std::mem::take(&mut rest).split_at_mut(w.len());
                rest = after;
                if a >= e {
                    continue;
                }
                outs[n] = &mut mine[a - w.start..e - w.start];
                xs[n] = &self.q.data[r * self.q.cols + h * hd..][..hd];
                firsts[n] = a - positions.start;
                n += 1;
                if n == BATCH {
                    vector::dots_transposed(&mut outs, &xs, &firsts, laid);
                    n = 0;
                }
            }
        }
        vector::dots_transposed(&mut outs[..n], &xs[..n], &firsts[..n], laid);
    }
}

/// Per-thread buffers for the scores and for widening an f16 cache: allocating them per task
/// cost ~20 % of decode time at 512 positions (each is above malloc's mmap threshold).
#[derive(Default)]
struct Scratch {
    keys: LineAligned<f32>,
    values: LineAligned<f32>,
    /// A block of keys laid out by `vector::transpose_keys`.
    laid: LineAligned<f32>,
    scores: Vec<f32>,
    /// Where each query's scores start in `scores`.
    starts: Vec<usize>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// A block of cached keys or values, in the element type the vector kernels take.
enum KvRows<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl KvRows<'_> {
    /// `vector::dots` of each query of `xs` with the rows at element offsets `part` of the
    /// block, into its entry of `outs`.
    fn dots_many(&self, outs: &mut [&mut [f32]], xs: &[&[f32]], part: Range<usize>) {
        match self {
            KvRows::F32(rows) => {
                for (out, x) in outs.iter_mut().zip(xs) {
                    vector::dots(out, x, &rows[part.clone()]);
                }
            }
            KvRows::F16(rows) => vector::dots_many_f16(outs, xs, &rows[part]),
        }
    }

    /// `vector::weighted_sums_add` over the rows at element offsets `part` of the block.
    fn weighted_sums_add(&self, outs: &mut [&mut [f32]], weights: &[&[f32]], part: Range<usize>) {
        match self {
            KvRows::F32(rows) => vector::weighted_sums_add(outs, weights, &rows[part]),
            KvRows::F16(rows) => vector::weighted_sums_add_f16(outs, weights, &rows[part]),
        }
    }
}

impl KvData {
    /// Writes `values` at element offset `at`.
    fn store(&mut self, at: usize, values: &[f32]) {
        match self {
            KvData::F32(data) => data[at..at + values.len()].copy_from_slice(values),
            KvData::F16(data) => data[at..at + values.len()].convert_from_f32_slice(values),
            KvData::Q8_0(data) => {
                let bytes = &mut data[at / 32 * 34..(at + values.len()) / 32 * 34];
                minerva_quant::quantize(DType::Q8_0, values, bytes).expect("whole Q8_0 blocks of a head");
            }
        }
    }

    /// Elements `range` as the vector kernels read them: borrowed from an f32 cache; from an f16
    /// one borrowed (the kernels widen in registers: widening every block into `buf` first cost a
    /// decode step of 8 sequences 14 % of its time) unless `widen`, then widened into `buf`;
    /// dequantized into `buf` from a Q8_0 one.
    fn rows<'a>(&'a self, range: Range<usize>, buf: &'a mut LineAligned<f32>, widen: bool) -> KvRows<'a> {
        match self {
            KvData::F32(data) => KvRows::F32(&data[range]),
            KvData::F16(data) if !widen => KvRows::F16(&data[range]),
            KvData::F16(_) | KvData::Q8_0(_) => KvRows::F32(self.load(range, buf)),
        }
    }

    /// Asks for elements `range` to be loaded into L2 (`vector::prefetch`).
    fn prefetch(&self, range: Range<usize>) {
        match self {
            KvData::F32(data) => vector::prefetch(&data[range]),
            KvData::F16(data) => vector::prefetch(&data[range]),
            KvData::Q8_0(data) => vector::prefetch(&data[range.start / 32 * 34..range.end / 32 * 34]),
        }
    }

    /// Elements `range` as f32: borrowed from an f32 cache, widened into `buf` from an f16 one,
    /// dequantized into it from a Q8_0 one.
    fn load<'a>(&'a self, range: Range<usize>, buf: &'a mut LineAligned<f32>) -> &'a [f32] {
        match self {
            KvData::F32(data) => &data[range],
            KvData::F16(data) => {
                buf.resize(range.len());
                vector::widen_f16(&data[range], buf);
                buf
            }
            KvData::Q8_0(data) => {
                buf.resize(range.len());
                let bytes = &data[range.start / 32 * 34..range.end / 32 * 34];
                minerva_quant::dequantize_fast(DType::Q8_0, bytes, buf).expect("whole Q8_0 blocks of a head");
                buf
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use minerva_core::DType;
    use minerva_quant::{ComputePool, vector};

    use super::super::{CpuCache, CpuTensor, KvData, LineAligned};
    use super::attention;
    use crate::backend::{Batch, CacheShape, Mask, SeqSpan};
    use crate::kv_blocks::BlockTables;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 + seed * 11) % 101) as f32 / 25.0 - 2.0).collect()
    }

    fn tensor(rows: usize, cols: usize, seed: usize) -> CpuTensor {
        CpuTensor { data: values(rows * cols, seed), rows, cols }
    }

    /// Each (row, head) alone: its whole window's scores, softmax, weighted sum.
    fn one_query_at_a_time(
        q: &CpuTensor,
        cache: &CpuCache,
        batch: &Batch,
        mask: Mask,
        sinks: Option<&[f32]>,
    ) -> Vec<f32> {
        let s = cache.shape;
        let (hd, n_head) = (s.head_dim, q.cols / s.head_dim);
        let mut out = vec![0.0f32; q.data.len()];
        for seq in &batch.seqs {
            for r in seq.rows.clone() {
                let pos = batch.positions[r] as usize;
                let lo = match mask {
                    Mask::Causal => 0,
                    Mask::SlidingWindow(w) => (pos + 1).saturating_sub(w),
                };
                for h in 0..n_head {
                    // The window's keys and values gathered position by position through the table.
                    let (mut keys, mut vals) = (Vec::new(), Vec::new());
                    for p in lo..=pos {
                        let at = cache.index(seq.slot, 0, h / (n_head / s.n_head_kv), p);
                        let (mut kb, mut vb) = (LineAligned::default(), LineAligned::default());
                        keys.extend_from_slice(cache.k.load(at..at + hd, &mut kb));
                        vals.extend_from_slice(cache.v.load(at..at + hd, &mut vb));
                    }
                    let mut scores = vec![0.0f32; pos + 1 - lo];
                    vector::dots(&mut scores, &q.data[(r * n_head + h) * hd..][..hd], &keys);
                    vector::softmax(&mut scores, 1.0 / (hd as f32).sqrt(), sinks.map(|s| s[h]));
                    vector::weighted_sum(&mut out[(r * n_head + h) * hd..][..hd], &scores, &vals);
                }
            }
        }
        out
    }

    /// A cache of no KV heads passes the shape checks with zero-column operands; attention then
    /// has nothing to do and returns zero columns rather than dividing by the empty head group.
    #[test]
    fn no_heads_attend_to_nothing() {
        let shape = CacheShape::contiguous(1, 1, 0, 8, 4);
        let (k, v) = (KvData::zeros(DType::F32, 0).unwrap(), KvData::zeros(DType::F32, 0).unwrap());
        let mut cache = CpuCache { shape, tables: BlockTables::contiguous(&shape).unwrap(), k, v };
        let batch = Batch { seqs: vec![SeqSpan { rows: 0..2, start_pos: 0, slot: 0 }], positions: vec![0, 1] };
        let empty = tensor(2, 0, 0);
        let out = attention(&empty, &empty, &empty, &mut cache, 0, &batch, Mask::Causal, None).unwrap();
        assert_eq!((out.rows, out.cols, out.data.len()), (2, 0, 0));
    }

    /// Two sequences (the second resuming at position 5) in one batch, their positions in blocks
    /// of 4 whose ids jump about (so a window reads as several runs), with every grouping of
    /// rows and heads into tasks that 1, 3 and 16 threads lead to, an f32 and an f16 cache (an f16
    /// block read in place by tasks of few queries, widened first by tasks of many), head
    /// sizes with and without a tail past whole 8-value chunks, causal and sliding masks, with
    /// and without sinks: every query's output equals its attention computed alone, bit for bit.
    #[test]
    fn tasks_of_any_shape_give_each_query_its_own_attention_bit_for_bit() {
        for (hd, dtype, threads) in [
            (64, DType::F32, 1),
            (12, DType::F32, 3),
            (64, DType::F16, 16),
            (12, DType::F16, 1),
            (64, DType::F16, 1),
            (12, DType::F16, 16),
        ] {
            for (mask, with_sinks) in [(Mask::Causal, false), (Mask::SlidingWindow(7), true), (Mask::Causal, true)] {
                let (n_head, n_head_kv) = (6, 2);
                let shape = CacheShape {
                    slots: 2,
                    n_layer: 1,
                    n_head_kv,
                    head_dim: hd,
                    capacity: 40,
                    block_size: 4,
                    blocks: 20,
                };
                let zeros = || KvData::zeros(dtype, shape.pool_values().unwrap()).unwrap();
                let mut tables = BlockTables::contiguous(&shape).unwrap();
                tables.set(0, &[7, 8, 9, 3, 4, 0, 19, 18, 12, 13]).unwrap();
                tables.set(1, &[1, 2, 5, 6, 10, 11, 14, 15, 16, 17]).unwrap();
                let mut cache = CpuCache { shape, tables, k: zeros(), v: zeros() };
                let sinks: Vec<f32> = (0..n_head).map(|h| h as f32 * 0.3 - 1.0).collect();
                let sinks = with_sinks.then_some(&sinks[..]);
                let pool = ComputePool::new(threads).unwrap();
                let step = |cache: &mut CpuCache, batch: &Batch, seed: usize| {
                    let rows = batch.n_tokens();
                    let q = tensor(rows, n_head * hd, seed);
                    let (k, v) = (tensor(rows, n_head_kv * hd, seed + 1), tensor(rows, n_head_kv * hd, seed + 2));
                    let got = pool.install(|| attention(&q, &k, &v, cache, 0, batch, mask, sinks)).unwrap();
                    assert_eq!(
                        got.data,
                        one_query_at_a_time(&q, cache, batch, mask, sinks),
                        "{hd} {dtype:?} {threads} {mask:?}"
                    );
                };
                let first =
                    Batch { seqs: vec![SeqSpan { rows: 0..5, start_pos: 0, slot: 1 }], positions: (0..5).collect() };
                step(&mut cache, &first, 1);
                let seqs = vec![
                    SeqSpan { rows: 0..21, start_pos: 0, slot: 0 },
                    SeqSpan { rows: 21..34, start_pos: 5, slot: 1 },
                ];
                let both = Batch { seqs, positions: (0..21).chain(5..18).collect() };
                step(&mut cache, &both, 4);
                let decode = Batch { seqs: vec![SeqSpan { rows: 0..1, start_pos: 21, slot: 0 }], positions: vec![21] };
                step(&mut cache, &decode, 7);
            }
        }
    }
}
