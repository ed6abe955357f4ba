//! Embedding jobs on the engine thread: between generation steps, the engine runs the next few
//! inputs of the oldest job through the model in one forward pass (as many as fit
//! `batch_tokens`, at least one) in a scratch KV cache of its own, pools each input's final
//! hidden states and answers when the job's last input is done. Generation goes on between these
//! passes, so a long embedding request does not stall running streams for more than one pass.

use std::panic::AssertUnwindSafe;

use minerva_model::{Backend, Pooling, SequenceInput};
use tokio::sync::oneshot;

use super::scheduler::Scheduler;
use crate::error::ApiError;

/// Most inputs in one embedding pass (the scratch cache holds this many sequences at most).
pub(crate) const MAX_EMBED_BATCH: usize = 16;

/// The pooled, L2-normalised vectors of a job's inputs, in order.
pub type Embeddings = Result<Vec<Vec<f32>>, ApiError>;

/// One `/v1/embeddings` request: its inputs as token ids (each non-empty, within the context).
pub(crate) struct EmbedJob {
    pub(crate) inputs: Vec<Vec<u32>>,
    pub(crate) pooling: Pooling,
    pub(crate) reply: oneshot::Sender<Embeddings>,
    /// The vectors of the inputs done so far.
    pub(crate) done: Vec<Vec<f32>>,
}

/// The scratch KV cache of embedding passes: `slots` sequences of `capacity` positions, grown
/// when a pass needs more.
pub(super) struct EmbedCache<C> {
    cache: C,
    slots: usize,
    capacity: usize,
}

impl<B: Backend> Scheduler<B> {
    /// Runs one embedding pass of the oldest job (dropping jobs whose client is gone) and answers
    /// it when it is complete or fails.
    pub(super) fn embed_step(&mut self) {
        while self.embeds.front().is_some_and(|j| j.reply.is_closed()) {
            self.embeds.pop_front();
        }
        let Some(job) = self.embeds.front_mut() else { return };
        let start = job.done.len();
        let mut end = start;
        let mut tokens = 0;
        while end < job.inputs.len()
            && end - start < MAX_EMBED_BATCH
            && (end == start || tokens + job.inputs[end].len() <= self.batch_tokens)
        {
            tokens += job.inputs[end].len();
            end += 1;
        }
        let inputs = &job.inputs[start..end];
        let longest = inputs.iter().map(Vec::len).max().unwrap_or(1);
        // Room in steps of 256 positions (at most the context), so passes of similar lengths
        // reuse one cache.
        let capacity = longest.div_ceil(256).saturating_mul(256).min(self.ctx_size).max(longest);
        let fits = self.embed_cache.as_ref().is_some_and(|c| c.slots >= inputs.len() && c.capacity >= capacity);
        if !fits {
            let slots = self.embed_cache.as_ref().map_or(0, |c| c.slots).max(inputs.len());
            let capacity = self.embed_cache.as_ref().map_or(0, |c| c.capacity).max(capacity);
            self.embed_cache = None;
            match self.model.new_cache(slots, capacity) {
                Ok(cache) => self.embed_cache = Some(EmbedCache { cache, slots, capacity }),
                Err(e) => {
                    let job = self.embeds.pop_front().expect("the job just looked at");
                    let _ = job.reply.send(Err(ApiError::internal(format!("allocating the embedding cache: {e}"))));
                    return;
                }
            }
        }
        let cache = &mut self.embed_cache.as_mut().expect("allocated above").cache;
        let batch: Vec<SequenceInput<'_>> =
            inputs.iter().enumerate().map(|(slot, tokens)| SequenceInput { tokens, start_pos: 0, slot }).collect();
        let model = &self.model;
        let hidden = match std::panic::catch_unwind(AssertUnwindSafe(|| model.forward_hidden(cache, &batch))) {
            Ok(Ok(h)) => Ok(h),
            Ok(Err(e)) => Err(ApiError::internal(format!("the embedding pass failed: {e}"))),
            Err(_) => Err(ApiError::internal("the engine failed during an embedding pass")),
        };
        let pooled = hidden.and_then(|h| {
            (0..inputs.len())
                .map(|i| {
                    job.pooling
                        .pool(h.seq(i), inputs[i].len(), h.dim)
                        .ok_or_else(|| ApiError::internal("the embedding pass returned the wrong shape"))
                })
                .collect::<Result<Vec<_>, _>>()
        });
        match pooled {
            Ok(vectors) => {
                job.done.extend(vectors);
                if job.done.len() == job.inputs.len() {
                    let job = self.embeds.pop_front().expect("the job just run");
                    let _ = job.reply.send(Ok(job.done));
                }
            }
            Err(e) => {
                let job = self.embeds.pop_front().expect("the job just run");
                let _ = job.reply.send(Err(e));
            }
        }
    }

    /// Answers every waiting embedding job with `error` (shutdown).
    pub(super) fn fail_embeds(&mut self, error: &ApiError) {
        for job in self.embeds.drain(..) {
            let _ = job.reply.send(Err(error.clone()));
        }
    }
}
