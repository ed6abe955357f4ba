//! [`Model`]: a config, its weights on a backend, and the forward step over a batch of sequences.

use std::path::Path;
use std::sync::{Arc, Mutex};

use minerva_gguf::Gguf;
use minerva_safetensors::Checkpoint;

use crate::arch::{self, ModelWeights};
use crate::backend::{Backend, Batch, CacheShape, DeviceSampling, SeqSpan};
use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::kv_blocks::KV_BLOCK_SIZE;
use crate::source::SourceFormat;

/// One sequence of a forward batch: new tokens, the position of the first, and its cache slot.
/// Positions before `start_pos` must already be in the slot (from earlier calls).
#[derive(Clone, Copy, Debug)]
pub struct SequenceInput<'a> {
    /// The new tokens.
    pub tokens: &'a [u32],
    /// Position of `tokens[0]`.
    pub start_pos: usize,
    /// KV-cache slot.
    pub slot: usize,
}

/// Which positions' logits a forward step returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsFor {
    /// The last token of each sequence.
    Last,
    /// Every token.
    All,
    /// The last token of each of the batch's first `n` sequences (the others only fill their
    /// cache: a prompt chunk that does not end its prompt needs no logits).
    LastOfFirst(usize),
}

/// Logits read back from a forward step.
#[derive(Clone, Debug, PartialEq)]
pub struct Logits {
    /// Values per row.
    pub vocab: usize,
    /// Row-major values.
    pub data: Vec<f32>,
    /// For each row: (sequence index in the batch, position).
    pub rows: Vec<(usize, usize)>,
}

impl Logits {
    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.vocab..(i + 1) * self.vocab]
    }

    /// The natural log of the probability row `i` gives `token` (its log-softmax as llama.cpp's
    /// `perplexity` computes it: `e^(v - max)` in f32, summed in f64); `None` for a token outside
    /// the row.
    pub fn log_prob(&self, i: usize, token: u32) -> Option<f64> {
        let row = self.row(i);
        let logit = *row.get(token as usize)?;
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = row.iter().map(|&v| f64::from((v - max).exp())).sum();
        Some(f64::from(logit - max) - sum.ln())
    }

    /// [`Logits::log_prob`] of `tokens[j]` at row `first + j`, for each `j`: the rows shared out
    /// over the current pool's threads (`minerva_quant::pool`), each value the one call's.
    /// Scoring a 262144-token vocabulary row by row on one thread took about a tenth of Gemma 3's
    /// `minerva score`.
    ///
    /// # Panics
    ///
    /// If a row `first + j` is not in the logits.
    pub fn log_probs(&self, first: usize, tokens: &[u32]) -> Vec<Option<f64>> {
        /// Rows per task: each row is a pass over the vocabulary.
        const ROWS_PER_TASK: usize = 4;
        let mut out = vec![None; tokens.len()];
        minerva_quant::pool::for_each_chunk_mut(&mut out, ROWS_PER_TASK, |t, values| {
            for (j, value) in (t * ROWS_PER_TASK..).zip(values) {
                *value = self.log_prob(first + j, tokens[j]);
            }
        });
        out
    }
}

/// Final hidden states read back from a forward step (after the output norm, before the head).
#[derive(Clone, Debug, PartialEq)]
pub struct Hidden {
    /// Values per row (`n_embd`).
    pub dim: usize,
    /// Row-major values: every token of every sequence, in batch order.
    pub data: Vec<f32>,
    /// For each sequence of the batch, its rows.
    pub seqs: Vec<std::ops::Range<usize>>,
}

impl Hidden {
    /// The rows of sequence `i`, row-major.
    pub fn seq(&self, i: usize) -> &[f32] {
        let rows = &self.seqs[i];
        &self.data[rows.start * self.dim..rows.end * self.dim]
    }
}

/// A model on a backend.
pub struct Model<B: Backend> {
    /// Hyper-parameters (for GPT-OSS, the shared part of its [`GptOssConfig`]).
    pub config: Config,
    /// Weight handles.
    pub weights: ModelWeights<B::Weight>,
    /// The backend the ops run on.
    pub backend: B,
    /// The last step's layout vectors, emptied, for the next step to fill (none while a step
    /// runs: steps on other threads at the same time make their own).
    kept_step: Mutex<Option<Step>>,
}

impl<B: Backend> Model<B> {
    /// Opens (memory-maps) a model and loads it onto `backend`: a GGUF file, or a SafeTensors
    /// checkpoint (a `.safetensors` file, a `*.safetensors.index.json`, or a directory) with its
    /// `config.json`.
    pub fn load(path: impl AsRef<Path>, backend: B) -> Result<Model<B>> {
        let path = path.as_ref();
        match SourceFormat::detect(path) {
            SourceFormat::SafeTensors => Model::from_checkpoint(Arc::new(Checkpoint::open(path)?), backend),
            SourceFormat::Gguf => Model::from_gguf(Arc::new(Gguf::open(path)?), backend),
        }
    }

    /// Builds the model from a parsed GGUF file: config, then every weight (shapes checked).
    pub fn from_gguf<D>(gguf: Arc<Gguf<D>>, backend: B) -> Result<Model<B>>
    where
        D: minerva_gguf::Backing + Send + Sync + 'static,
    {
        let (config, weights) = arch::load_gguf(&gguf, &backend)?;
        Model::prepared(config, weights, backend)
    }

    /// Builds the model from an opened SafeTensors checkpoint and its `config.json`.
    ///
    /// GPT-OSS (`model_type = gpt_oss`) comes in the Hugging Face or the MLX layout. The LLaMA
    /// family's Hugging Face weights are used as stored (no Q/K permutation, NeoX RoPE); without
    /// `lm_head.weight` the embeddings are the head, which `tie_word_embeddings` must allow.
    pub fn from_checkpoint(checkpoint: Arc<Checkpoint>, backend: B) -> Result<Model<B>> {
        let (config, weights) = arch::load_checkpoint(&checkpoint, &backend)?;
        Model::prepared(config, weights, backend)
    }

    /// The model, after telling `backend` its architecture ([`Backend::prepare_for`]) and, where
    /// the backend copies weights at their first product, after one token through it on a cache
    /// of one position ([`Backend::makes_copies_at_first_product`]): the CPU's repacked copies are
    /// made while loading, each on the backend's pool, and only of the weights a forward pass
    /// multiplies by (not an untied embedding table, which is only looked up; a mixture's experts
    /// that the token was not routed to are copied at their first product).
    fn prepared(config: Config, weights: ModelWeights<B::Weight>, backend: B) -> Result<Model<B>> {
        if let Some(spec) = arch::registry::find(&config.arch) {
            backend.prepare_for(spec);
        }
        let model = Model { config, weights, backend, kept_step: Mutex::new(None) };
        if model.backend.makes_copies_at_first_product() {
            let mut cache = model.new_cache(1, 1)?;
            let token = [0];
            model.forward(&mut cache, &[SequenceInput { tokens: &token, start_pos: 0, slot: 0 }], LogitsFor::Last)?;
        }
        Ok(model)
    }

    /// A KV cache for `slots` sequences of up to `capacity` positions, each slot with its own
    /// blocks for all of them.
    pub fn new_cache(&self, slots: usize, capacity: usize) -> Result<B::Cache> {
        let c = &self.config;
        self.backend.new_cache(CacheShape::contiguous(slots, c.n_layer, c.n_head_kv, c.head_dim, capacity))
    }

    /// A paged KV cache: a pool of `blocks` blocks of [`KV_BLOCK_SIZE`] positions shared by
    /// `slots` sequences of up to `capacity` positions, each reading through the block table its
    /// owner gives it ([`Backend::set_blocks`]; empty until then unless the pool has every
    /// slot's blocks).
    pub fn new_paged_cache(&self, slots: usize, capacity: usize, blocks: usize) -> Result<B::Cache> {
        let c = &self.config;
        let shape =
            CacheShape { blocks, ..CacheShape::contiguous(slots, c.n_layer, c.n_head_kv, c.head_dim, capacity) };
        self.backend.new_cache(shape)
    }

    /// Bytes of keys and values one block of [`KV_BLOCK_SIZE`] positions holds in this backend's
    /// caches.
    pub fn kv_block_bytes(&self) -> usize {
        let c = &self.config;
        let per_layer = c.n_head_kv.saturating_mul(c.head_dim).saturating_mul(KV_BLOCK_SIZE);
        self.backend.kv_bytes(per_layer).saturating_mul(2 * c.n_layer)
    }

    /// Runs every sequence's new tokens in one pass (a prompt's prefill, or one decode token each),
    /// extending their cache slots, and returns the logits `which` asks for.
    pub fn forward(&self, cache: &mut B::Cache, batch: &[SequenceInput<'_>], which: LogitsFor) -> Result<Logits> {
        let step = self.step(batch, which)?;
        self.logits_of(cache, step)
    }

    /// [`Model::forward`] returning the logits of the last `tails[i]` positions of sequence `i`
    /// (0: none; its whole length at most), in batch order: a server verifying drafted tokens of
    /// some sequences while others decode one token or fill their cache with a prompt chunk.
    pub fn forward_tails(&self, cache: &mut B::Cache, batch: &[SequenceInput<'_>], tails: &[usize]) -> Result<Logits> {
        if tails.len() != batch.len() || batch.iter().zip(tails).any(|(s, &t)| t > s.tokens.len()) {
            let message =
                format!("{} tails for {} sequences, or a tail longer than its tokens", tails.len(), batch.len());
            return Err(ModelError::BadBatch { message });
        }
        let kept = self.kept_step.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut step = kept.unwrap_or_default();
        step.fill_rows(batch, |i, len| len - tails[i]..len)?;
        self.logits_of(cache, step)
    }

    /// Runs `step` and reads back its logit rows.
    fn logits_of(&self, cache: &mut B::Cache, step: Step) -> Result<Logits> {
        let x = self.hidden(cache, &step)?;
        let data = if step.logit_rows.is_empty() {
            Vec::new()
        } else {
            self.backend.logits(&x, self.head(), &step.logit_rows)?
        };
        let rows = step.rows.clone();
        self.keep(step);
        Ok(Logits { vocab: self.config.vocab, data, rows })
    }

    /// Runs every sequence's new tokens in one pass, extending their cache slots, and returns
    /// the final hidden state of every token (embeddings pool them; no logits are computed).
    pub fn forward_hidden(&self, cache: &mut B::Cache, batch: &[SequenceInput<'_>]) -> Result<Hidden> {
        let mut step = self.step(batch, LogitsFor::Last)?;
        let x = self.hidden(cache, &step)?;
        let all: Vec<usize> = (0..step.tokens.len()).collect();
        let data = self.backend.read_rows(&x, &all);
        let seqs = step.layout.seqs.iter().map(|s| s.rows.clone()).collect();
        step.logit_rows.clear();
        self.keep(step);
        Ok(Hidden { dim: self.config.n_embd, data: data?, seqs })
    }

    /// [`Model::forward`] followed by greedy decoding: the id of the largest logit (the lowest
    /// id on ties) of each sequence's last position, in batch order, through [`Backend::greedy`]
    /// (on a GPU backend only these ids are read back, not the vocabulary's logits).
    pub fn forward_greedy(&self, cache: &mut B::Cache, batch: &[SequenceInput<'_>]) -> Result<Vec<u32>> {
        self.forward_argmax(cache, batch, LogitsFor::Last)
    }

    /// [`Model::forward_greedy`] for the positions `which` asks for: with [`LogitsFor::All`],
    /// the argmax after every token (speculative decoding verifies a run of drafted tokens with
    /// it), in the order of [`Logits::rows`].
    pub fn forward_argmax(
        &self,
        cache: &mut B::Cache,
        batch: &[SequenceInput<'_>],
        which: LogitsFor,
    ) -> Result<Vec<u32>> {
        let step = self.step(batch, which)?;
        let x = self.hidden(cache, &step)?;
        let ids = self.backend.greedy(&x, self.head(), &step.logit_rows);
        self.keep(step);
        ids
    }

    /// One step, then a token drawn on the device for each sequence `which` asks logits of
    /// ([`LogitsFor::Last`] or [`LogitsFor::LastOfFirst`]), as its entry of `params` describes
    /// ([`Backend::sample`]). Only for backends that [`Model::samples_on_device`]; the others
    /// answer [`ModelError::UnsupportedOp`] before running anything.
    pub fn forward_sample(
        &self,
        cache: &mut B::Cache,
        batch: &[SequenceInput<'_>],
        which: LogitsFor,
        params: &[DeviceSampling],
    ) -> Result<Vec<u32>> {
        if !self.samples_on_device() {
            return Err(ModelError::UnsupportedOp { op: "sample" });
        }
        if which == LogitsFor::All {
            return Err(ModelError::BadBatch { message: "device sampling draws at the last row of a sequence".into() });
        }
        let step = self.step(batch, which)?;
        if params.len() != step.logit_rows.len() {
            let message = format!("{} sampling settings for {} sequences", params.len(), step.logit_rows.len());
            return Err(ModelError::BadBatch { message });
        }
        let x = self.hidden(cache, &step)?;
        let ids = self.backend.sample(&x, self.head(), &step.logit_rows, params);
        self.keep(step);
        ids
    }

    /// Whether [`Model::forward_sample`] runs on this model's backend.
    pub fn samples_on_device(&self) -> bool {
        self.backend.samples_on_device()
    }

    /// `batch` laid out for a step, in the kept vectors where there are some.
    fn step(&self, batch: &[SequenceInput<'_>], which: LogitsFor) -> Result<Step> {
        let kept = self.kept_step.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut step = kept.unwrap_or_default();
        step.fill(batch, which)?;
        Ok(step)
    }

    /// Keeps `step`'s vectors for the next step.
    fn keep(&self, step: Step) {
        *self.kept_step.lock().unwrap_or_else(|e| e.into_inner()) = Some(step);
    }

    /// The final normed hidden states of a step's rows.
    fn hidden(&self, cache: &mut B::Cache, step: &Step) -> Result<B::Tensor> {
        arch::forward(&self.backend, &self.config, &self.weights, cache, &step.tokens, &step.layout)
    }

    /// The LM head.
    fn head(&self) -> &B::Weight {
        arch::head(&self.weights)
    }
}

/// A batch laid out for one forward step.
#[derive(Default)]
struct Step {
    tokens: Vec<u32>,
    layout: Batch,
    /// Rows whose logits are wanted.
    logit_rows: Vec<usize>,
    /// (sequence, position) of each of those rows.
    rows: Vec<(usize, usize)>,
}

impl Step {
    /// Lays `batch` out in these vectors (their old contents dropped, their allocations kept).
    fn fill(&mut self, batch: &[SequenceInput<'_>], which: LogitsFor) -> Result<()> {
        self.fill_rows(batch, |i, len| match which {
            LogitsFor::Last => len - 1..len,
            LogitsFor::LastOfFirst(n) if i < n => len - 1..len,
            LogitsFor::LastOfFirst(_) => 0..0,
            LogitsFor::All => 0..len,
        })
    }

    /// [`Step::fill`] with the logit rows of sequence `i` (of `len` tokens) that `wanted` gives,
    /// as offsets into it.
    fn fill_rows(
        &mut self,
        batch: &[SequenceInput<'_>],
        wanted: impl Fn(usize, usize) -> std::ops::Range<usize>,
    ) -> Result<()> {
        let Step { tokens, layout, logit_rows, rows } = self;
        tokens.clear();
        layout.seqs.clear();
        layout.positions.clear();
        logit_rows.clear();
        rows.clear();
        for (i, seq) in batch.iter().enumerate() {
            if seq.tokens.is_empty() {
                return Err(ModelError::BadBatch { message: format!("sequence {i} has no tokens") });
            }
            if batch[..i].iter().any(|other| other.slot == seq.slot) {
                let message = format!("cache slot {} appears twice in one batch", seq.slot);
                return Err(ModelError::BadBatch { message });
            }
            let first = tokens.len();
            tokens.extend_from_slice(seq.tokens);
            let positions = seq.start_pos..seq.start_pos + seq.tokens.len();
            if positions.end > u32::MAX as usize {
                return Err(ModelError::BadBatch { message: format!("position {} is too large", positions.end) });
            }
            layout.positions.extend(positions.clone().map(|p| p as u32));
            layout.seqs.push(SeqSpan { rows: first..tokens.len(), start_pos: seq.start_pos, slot: seq.slot });
            for j in wanted(i, positions.len()) {
                logit_rows.push(first + j);
                rows.push((i, seq.start_pos + j));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Logits;

    /// `log_probs` on three threads gives each row the value `log_prob` gives it alone (bit for
    /// bit), from any first row, `None` for a token outside the vocabulary; the values are
    /// log-softmax's (`Σ e^v = 1` over a row).
    #[test]
    fn log_probs_on_many_threads_are_each_rows_log_prob() {
        let (vocab, rows) = (37, 23);
        let data = (0..vocab * rows).map(|i| ((i * 29 % 101) as f32 - 50.0) / 7.0).collect();
        let logits = Logits { vocab, data, rows: (0..rows).map(|r| (0, r)).collect() };
        let tokens: Vec<u32> = (0..rows as u32 - 2).map(|j| if j == 5 { vocab as u32 } else { j * 7 % 37 }).collect();
        let pool = minerva_quant::ComputePool::new(3).unwrap();
        let got = pool.install(|| logits.log_probs(2, &tokens));
        assert_eq!(got.len(), tokens.len());
        for (j, (&token, got)) in tokens.iter().zip(&got).enumerate() {
            assert_eq!(got.map(f64::to_bits), logits.log_prob(2 + j, token).map(f64::to_bits), "row {}", 2 + j);
            assert_eq!(got.is_none(), j == 5);
        }
        let total: f64 = (0..vocab as u32).map(|t| logits.log_prob(4, t).unwrap().exp()).sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
    }
}
