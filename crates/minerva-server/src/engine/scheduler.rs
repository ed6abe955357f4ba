//! The engine thread's loop: admit waiting requests into free slots, run one forward step over
//! every running sequence, sample each, send the text, free finished slots.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use minerva_generate::{ChatTemplate, Sampler, Tokenizer};
use minerva_model::{Backend, DeviceSampling, LogitsFor, MAX_DEVICE_TOP_K, Model, SequenceInput};
use tokio::sync::mpsc as tokio_mpsc;

use super::sequence::{Delta, Finish, Output, Sequence, logprobs};
use super::slots::Slots;
use super::{ChatFormat, EngineConfig, GrammarSlot, ModelInfo, SeqEvent, Submission, TemplateChat};
use crate::error::ApiError;
use crate::metrics::Metrics;

/// What the engine thread shares with the handles.
pub(crate) struct Shared {
    pub(crate) info: Arc<OnceLock<Result<Arc<ModelInfo>, String>>>,
    pub(crate) queued: Arc<AtomicUsize>,
    pub(crate) cancel_all: Arc<AtomicBool>,
    pub(crate) metrics: Arc<Metrics>,
}

/// A request with choices still running.
struct Request {
    events: tokio_mpsc::UnboundedSender<SeqEvent>,
    live_choices: usize,
}

struct Scheduler<B: Backend> {
    model: Model<B>,
    cache: B::Cache,
    tokenizer: Arc<Tokenizer>,
    ctx_size: usize,
    batch_tokens: usize,
    prefill_chunk: usize,
    shared: Shared,
    waiting: VecDeque<Submission>,
    running: Vec<Sequence>,
    requests: HashMap<u64, Request>,
    slots: Slots,
    next_request: u64,
    /// The backend copies cache slots, so choices share their prompt's prefill.
    share_prompt: bool,
}

/// The engine thread's body.
pub(crate) fn run<B, L>(load: L, config: EngineConfig, receive: mpsc::Receiver<Submission>, shared: Shared)
where
    B: Backend,
    L: FnOnce() -> Result<(Model<B>, Tokenizer), String>,
{
    let mut sched = match Scheduler::new(load, &config, shared) {
        Ok(s) => s,
        Err((shared, message)) => {
            let _ = shared.info.set(Err(message));
            return;
        }
    };
    loop {
        if sched.running.is_empty() && sched.waiting.is_empty() {
            // Idle: block until a request comes (or every handle is gone).
            match receive.recv() {
                Ok(s) => sched.waiting.push_back(s),
                Err(_) => return,
            }
        }
        while let Ok(s) = receive.try_recv() {
            sched.waiting.push_back(s);
        }
        if sched.shared.cancel_all.load(Ordering::Acquire) {
            sched.fail_all(&ApiError::shutting_down());
            continue;
        }
        sched.drop_abandoned();
        sched.admit();
        if sched.running.is_empty() {
            continue;
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| sched.step())) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => sched.fail_running(&e),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                sched.fail_running(&ApiError::internal(format!("the engine failed during a step: {what}")));
            }
        }
    }
}

/// Picks the context size: the one asked for, or the model's trained context capped so the KV
/// cache of every slot fits the budget. Returns it with a note for the startup line.
fn choose_ctx(trained: usize, bytes_per_position: u64, config: &EngineConfig) -> Result<(usize, String), String> {
    let trained_or_default = if trained > 0 { trained } else { 4096 };
    if let Some(ctx) = config.ctx_size {
        if trained > 0 && ctx > trained {
            return Err(format!("--ctx-size {ctx} is larger than the model's trained context of {trained}"));
        }
        if ctx < 2 {
            return Err(format!("--ctx-size {ctx} is too small"));
        }
        return Ok((ctx, "as asked".into()));
    }
    let per_slot = bytes_per_position.max(1) * config.parallel as u64;
    let fits = (config.kv_budget_bytes / per_slot) as usize;
    if fits >= trained_or_default {
        return Ok((trained_or_default, "the model's trained context".into()));
    }
    if fits < 256 {
        return Err(format!(
            "the KV cache of {} slots does not fit in memory even at 256 positions; use fewer --parallel slots",
            config.parallel
        ));
    }
    let ctx = fits / 256 * 256;
    Ok((ctx, format!("capped from {trained_or_default} so the KV cache of all slots fits memory")))
}

impl<B: Backend> Scheduler<B> {
    fn new<L>(load: L, config: &EngineConfig, shared: Shared) -> Result<Scheduler<B>, (Shared, String)>
    where
        L: FnOnce() -> Result<(Model<B>, Tokenizer), String>,
    {
        let (model, tokenizer) = match load() {
            Ok(x) => x,
            Err(e) => return Err((shared, e)),
        };
        let c = &model.config;
        // f32 keys and values: the largest a backend's cache holds per position.
        let bytes_per_position = (c.n_layer * c.n_head_kv * c.head_dim * 2 * 4) as u64;
        let (ctx_size, ctx_note) = match choose_ctx(c.context_length, bytes_per_position, config) {
            Ok(x) => x,
            Err(e) => return Err((shared, e)),
        };
        let cache = match model.new_cache(config.parallel, ctx_size) {
            Ok(c) => c,
            Err(e) => return Err((shared, format!("cannot allocate the KV cache: {e}"))),
        };
        let arch = model.config.arch.clone();
        let chat = if arch == "gpt-oss" || arch == "gpt_oss" {
            ChatFormat::Harmony
        } else if let Some(source) = &tokenizer.chat_template {
            match ChatTemplate::from_tokenizer(&tokenizer) {
                Ok(t) => ChatFormat::Template(Box::new(TemplateChat::new(t, source, config.tool_format))),
                Err(e) => return Err((shared, format!("the model's chat template: {e}"))),
            }
        } else {
            ChatFormat::None
        };
        let tokenizer = Arc::new(tokenizer);
        // Once per model, shared by every request's grammar; built beside start-up.
        let grammar = Arc::new(GrammarSlot::new(tokenizer.clone(), model.config.vocab));
        let building = grammar.clone();
        let _ = std::thread::Builder::new().name("minerva-grammar".into()).spawn(move || building.compiler());
        let info =
            ModelInfo { tokenizer: tokenizer.clone(), chat, ctx_size, slots: config.parallel, arch, ctx_note, grammar };
        let _ = shared.info.set(Ok(Arc::new(info)));
        Ok(Scheduler {
            model,
            cache,
            tokenizer,
            ctx_size,
            batch_tokens: config.batch_tokens.max(1),
            prefill_chunk: config.prefill_chunk.max(1),
            shared,
            waiting: VecDeque::new(),
            running: Vec::new(),
            requests: HashMap::new(),
            slots: Slots::new(config.parallel),
            next_request: 0,
            share_prompt: true,
        })
    }

    /// Ends requests whose client went away or whose time ran out before they got a slot.
    fn drop_abandoned(&mut self) {
        let now = Instant::now();
        let before = self.waiting.len();
        self.waiting.retain(|s| {
            if s.events.is_closed() {
                return false;
            }
            if now >= s.request.deadline {
                for choice in 0..s.request.n {
                    let _ = s.events.send(SeqEvent::Finish {
                        choice,
                        reason: Finish::Length,
                        completion_tokens: 0,
                        cached_tokens: 0,
                    });
                }
                return false;
            }
            true
        });
        self.shared.queued.fetch_sub(before - self.waiting.len(), Ordering::AcqRel);
        let gone: Vec<u64> = self.requests.iter().filter(|(_, r)| r.events.is_closed()).map(|(&id, _)| id).collect();
        for id in gone {
            self.requests.remove(&id);
            for seq in self.running.iter().filter(|s| s.request == id) {
                // Its cache holds every token it ran.
                self.slots.give_back(seq.slot, &seq.tokens[..seq.fed]);
            }
            self.running.retain(|s| s.request != id);
            self.shared.metrics.cancelled.inc();
        }
    }

    /// Moves waiting requests, oldest first, into free slots (all `n` choices at once).
    fn admit(&mut self) {
        while let Some(head) = self.waiting.front() {
            if head.request.n > self.slots.free() {
                break;
            }
            let Some(s) = self.waiting.pop_front() else { break };
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            let id = self.next_request;
            self.next_request += 1;
            let r = &s.request;
            self.shared.metrics.prompt_tokens.inc_by(r.prompt.len() as u64);
            for choice in 0..r.n {
                let mut params = r.sampling.clone();
                params.seed = params.seed.map(|seed| seed.wrapping_add(choice as u64));
                let sampler = match Sampler::new(params) {
                    Ok(sampler) => sampler,
                    Err(e) => {
                        let _ = s.events.send(SeqEvent::Error(ApiError::invalid("sampling", e.to_string())));
                        break;
                    }
                };
                let Some((slot, cached)) = self.slots.take(&r.prompt) else { break };
                // Run at least the prompt's last token: its logits give the first new one.
                let reuse = if choice == 0 { cached.min(r.prompt.len() - 1) } else { 0 };
                if reuse > 0 {
                    self.shared.metrics.prompt_cache_hits.inc();
                    self.shared.metrics.prompt_cached_tokens.inc_by(reuse as u64);
                }
                self.running.push(Sequence {
                    request: id,
                    choice,
                    slot,
                    tokens: r.prompt.clone(),
                    prompt_len: r.prompt.len(),
                    fed: reuse,
                    cached: reuse,
                    sampler,
                    constraint: r.constraint.clone(),
                    output: Output::new(r.stop.clone(), r.output),
                    max_tokens: r.max_tokens,
                    logprobs: r.logprobs,
                    deadline: r.deadline,
                    received: s.received,
                    last_token_at: None,
                    waits_for_leader: choice > 0 && self.share_prompt,
                });
            }
            let live = self.running.iter().filter(|q| q.request == id).count();
            if live == 0 {
                continue;
            }
            self.requests.insert(id, Request { events: s.events, live_choices: live });
        }
        self.shared.metrics.running.set(self.running.len() as i64);
        self.shared.metrics.queued.set(self.shared.queued.load(Ordering::Relaxed) as i64);
    }

    /// One forward step over every running sequence, then sampling and output.
    fn step(&mut self) -> Result<(), ApiError> {
        // Which tokens each sequence runs: decoding ones their one new token; prefilling ones
        // the next chunk of their prompt, within what is left of the step's budget.
        let mut budget = self.batch_tokens;
        let mut plan: Vec<(usize, usize)> = Vec::new(); // (index into running, tokens to run)
        for (i, seq) in self.running.iter().enumerate() {
            if seq.prefilled() {
                plan.push((i, seq.tokens.len() - seq.fed));
                budget = budget.saturating_sub(1);
            }
        }
        if !plan.is_empty() {
            // Sequences are decoding: prefill in small chunks so their next token is not late.
            budget = budget.min(self.prefill_chunk);
        }
        for (i, seq) in self.running.iter().enumerate() {
            if !seq.prefilled() && !seq.waits_for_leader && budget > 0 {
                let chunk = (seq.prompt_len - seq.fed).min(budget);
                plan.push((i, chunk));
                budget -= chunk;
            }
        }
        // Sequences that get a token this step first: a prompt chunk that does not end its prompt
        // only fills the cache, and needs no row of the (vocabulary-wide) LM head.
        let (mut plan, rest): (Vec<_>, Vec<_>) = plan.into_iter().partition(|&(i, len)| {
            let seq = &self.running[i];
            seq.fed + len >= seq.prompt_len
        });
        let with_logits = plan.len();
        plan.extend(rest);
        // Draw on the device when the backend samples and every sequence getting a token can be
        // drawn there (no log-probabilities, no choices waiting on this logits row): one id read
        // back per sequence instead of the vocabulary's logits.
        let on_device =
            self.model.samples_on_device() && plan[..with_logits].iter().all(|&(i, _)| self.device_eligible(i));
        let which = LogitsFor::LastOfFirst(with_logits);
        let params: Vec<DeviceSampling> = if on_device {
            plan[..with_logits]
                .iter()
                .filter_map(|&(i, _)| {
                    let seq = &mut self.running[i];
                    seq.sampler.device_sampling(&seq.tokens)
                })
                .collect()
        } else {
            Vec::new()
        };
        // The grammar masks of the rows sampled this step are computed on another thread while the
        // forward pass runs (they depend only on the tokens so far), so constrained rows add
        // little to a step's time where a core is free.
        let mut masks: Vec<(usize, minerva_generate::Constraint)> = plan[..with_logits]
            .iter()
            .filter_map(|&(i, _)| self.running[i].constraint.take().map(|c| (i, c)))
            .collect();
        let inputs: Vec<SequenceInput<'_>> = plan
            .iter()
            .map(|&(i, len)| {
                let seq = &self.running[i];
                SequenceInput { tokens: &seq.tokens[seq.fed..seq.fed + len], start_pos: seq.fed, slot: seq.slot }
            })
            .collect();
        self.shared.metrics.batch_sequences.observe(inputs.len() as f64);
        self.shared.metrics.batch_tokens.observe(plan.iter().map(|p| p.1).sum::<usize>() as f64);
        let (model, cache) = (&self.model, &mut self.cache);
        let mut forward = || -> Result<Drawn, ApiError> {
            Ok(if on_device {
                let ids = model
                    .forward_sample(cache, &inputs, which, &params)
                    .map_err(|e| ApiError::internal(format!("forward step: {e}")))?;
                Drawn::Tokens(ids)
            } else {
                let logits = model
                    .forward(cache, &inputs, which)
                    .map_err(|e| ApiError::internal(format!("forward step: {e}")))?;
                Drawn::Logits(logits)
            })
        };
        let drawn = if masks.is_empty() {
            forward()
        } else {
            std::thread::scope(|scope| {
                let ahead = scope.spawn(|| {
                    for (_, c) in masks.iter_mut() {
                        // An error here shows again when the mask is applied, for that row only.
                        let _ = c.prepare_mask();
                    }
                });
                let drawn = forward();
                let _ = ahead.join();
                drawn
            })
        };
        let mut drawn = match drawn {
            Ok(d) => d,
            Err(e) => {
                drop(inputs);
                for (i, c) in masks {
                    self.running[i].constraint = Some(c);
                }
                return Err(e);
            }
        };
        let mut rows: Vec<Pick<'_>> = match drawn {
            Drawn::Tokens(ref ids) => ids.iter().map(|&id| Pick::Token(id)).collect(),
            Drawn::Logits(ref mut logits) => {
                let vocab = logits.vocab.max(1);
                logits.data.chunks_exact_mut(vocab).map(Pick::Logits).collect()
            }
        };
        drop(inputs);
        for (i, c) in masks {
            self.running[i].constraint = Some(c);
        }
        let mut finished: Vec<(usize, Finish)> = Vec::new();
        for (row, &(i, len)) in plan.iter().enumerate() {
            self.running[i].fed += len;
            if !self.running[i].prefilled() {
                continue;
            }
            let pick = std::mem::replace(&mut rows[row], Pick::Token(0));
            if let Pick::Logits(logits_row) = &pick
                && self.running[i].generated() == 0
                && self.running[i].choice == 0
            {
                self.start_followers(i, logits_row, &mut finished)?;
            }
            self.sample_and_send(i, pick, &mut finished)?;
        }
        // Remove finished sequences, highest index first so the others keep theirs.
        finished.sort_by_key(|f| std::cmp::Reverse(f.0));
        for (i, finish) in finished {
            let seq = self.running.swap_remove(i);
            self.finish(seq, finish);
        }
        self.shared.metrics.running.set(self.running.len() as i64);
        self.note_kv_usage();
        Ok(())
    }

    /// The share of the cache's positions the running sequences hold, for `/metrics`.
    fn note_kv_usage(&self) {
        let held: usize = self.running.iter().map(|s| s.fed).sum();
        let total = (self.slots.len() * self.ctx_size).max(1);
        self.shared.metrics.kv_cache_usage.set(held as f64 / total as f64);
    }

    /// Choice 0 of a request (at `leader`) has run its prompt: the request's other choices start
    /// from a copy of its cache slot and sample their first token from the same logits.
    fn start_followers(
        &mut self,
        leader: usize,
        logits: &[f32],
        finished: &mut Vec<(usize, Finish)>,
    ) -> Result<(), ApiError> {
        let (request, from, positions) = {
            let l = &self.running[leader];
            (l.request, l.slot, l.fed)
        };
        let followers: Vec<usize> = (0..self.running.len())
            .filter(|&j| self.running[j].request == request && self.running[j].waits_for_leader)
            .collect();
        for j in followers {
            self.running[j].waits_for_leader = false;
            match self.model.backend.copy_slot(&mut self.cache, from, self.running[j].slot, positions) {
                Ok(()) => {
                    self.running[j].fed = positions;
                    let mut row = logits.to_vec();
                    self.sample_and_send(j, Pick::Logits(&mut row), finished)?;
                }
                // This backend cannot copy slots: the follower runs the prompt itself.
                Err(minerva_model::ModelError::UnsupportedOp { .. }) => self.share_prompt = false,
                Err(e) => return Err(ApiError::internal(format!("copying a cache slot: {e}"))),
            }
        }
        Ok(())
    }

    /// Whether the sequence at `i` can take its next token from the device: no log-probabilities
    /// wanted, no other choice of its request waiting to sample from the same logits, and a
    /// top-k the device sampler holds.
    fn device_eligible(&self, i: usize) -> bool {
        let seq = &self.running[i];
        let leads = seq.choice == 0
            && seq.generated() == 0
            && self.running.iter().any(|s| s.request == seq.request && s.waits_for_leader);
        let params = seq.sampler.params();
        seq.logprobs.is_none()
            && seq.constraint.is_none()
            && !leads
            && (params.is_greedy() || (1..=MAX_DEVICE_TOP_K).contains(&params.top_k))
    }

    /// Takes the next token of the sequence at `i` (sampling its logits, or as drawn on the
    /// device), sends its output, and notes it in `finished` when it ended.
    fn sample_and_send(
        &mut self,
        i: usize,
        pick: Pick<'_>,
        finished: &mut Vec<(usize, Finish)>,
    ) -> Result<(), ApiError> {
        let seq = &mut self.running[i];
        let mut delta = Delta::default();
        let (finish, id) = match sample_one(seq, &self.tokenizer, pick, &mut delta, self.ctx_size) {
            Ok(x) => x,
            Err(e) => {
                // This sequence's failure (its grammar, its text) ends its request only.
                if let Some(r) = self.requests.get(&seq.request) {
                    let _ = r.events.send(SeqEvent::Error(e));
                }
                finished.push((i, Finish::Stop));
                return Ok(());
            }
        };
        let now = Instant::now();
        match seq.last_token_at {
            None => self.shared.metrics.time_to_first_token.observe((now - seq.received).as_secs_f64()),
            Some(t) => self.shared.metrics.inter_token_latency.observe((now - t).as_secs_f64()),
        }
        seq.last_token_at = Some(now);
        if id.is_some() {
            self.shared.metrics.completion_tokens.inc();
        }
        if let Some(finish) = finish {
            seq.output.flush(&mut delta);
            finished.push((i, finish));
        }
        if !delta.is_empty()
            && let Some(r) = self.requests.get(&seq.request)
        {
            let _ = r.events.send(SeqEvent::Delta { choice: seq.choice, delta });
        }
        Ok(())
    }

    fn finish(&mut self, seq: Sequence, reason: Finish) {
        self.slots.give_back(seq.slot, &seq.tokens[..seq.fed]);
        let Some(r) = self.requests.get_mut(&seq.request) else { return };
        let _ = r.events.send(SeqEvent::Finish {
            choice: seq.choice,
            reason,
            completion_tokens: seq.generated(),
            cached_tokens: seq.cached,
        });
        r.live_choices -= 1;
        if r.live_choices == 0 {
            self.requests.remove(&seq.request);
        }
    }

    /// Ends every running request with `error` (their slots are freed; waiting ones stay).
    fn fail_running(&mut self, error: &ApiError) {
        for (_, r) in self.requests.drain() {
            let _ = r.events.send(SeqEvent::Error(error.clone()));
        }
        // A step failed part-way: what the slots hold is unknown.
        for seq in self.running.drain(..) {
            self.slots.give_back_empty(seq.slot);
        }
        self.shared.metrics.running.set(0);
        self.shared.metrics.kv_cache_usage.set(0.0);
    }

    /// Ends every running and waiting request with `error`.
    fn fail_all(&mut self, error: &ApiError) {
        self.fail_running(error);
        let waiting = self.waiting.len();
        for s in self.waiting.drain(..) {
            let _ = s.events.send(SeqEvent::Error(error.clone()));
        }
        self.shared.queued.fetch_sub(waiting, Ordering::AcqRel);
    }
}

/// What a step's forward pass returned: the logits of the rows that get a token, or the tokens
/// the device drew for them.
enum Drawn {
    Logits(minerva_model::Logits),
    Tokens(Vec<u32>),
}

/// A sequence's next token: its logits row to sample from, or the token the device drew.
enum Pick<'a> {
    Logits(&'a mut [f32]),
    Token(u32),
}

fn constraint_failed(e: minerva_generate::GenerateError) -> ApiError {
    ApiError::internal(format!("the output constraint failed: {e}"))
}

/// Takes the next token of `seq` (sampled from its logits row, or drawn on the device), adds its
/// output to `delta`, and says whether the choice ended. Returns the token, unless it was an
/// end-of-sequence token.
fn sample_one(
    seq: &mut Sequence,
    tok: &Tokenizer,
    pick: Pick<'_>,
    delta: &mut Delta,
    ctx_size: usize,
) -> Result<(Option<Finish>, Option<u32>), ApiError> {
    let id = match pick {
        Pick::Token(id) => id,
        Pick::Logits(logits) => {
            // Log-probabilities are the model's, before penalties and temperature reshape the row.
            let raw = seq.logprobs.map(|_| logits.to_vec());
            if let Some(constraint) = &mut seq.constraint {
                constraint.mask(logits).map_err(constraint_failed)?;
            }
            let id = seq.sampler.sample(logits, &seq.tokens);
            if let (Some(top), Some(raw)) = (seq.logprobs, raw) {
                delta.logprobs.push(logprobs(tok, &raw, id, top));
            }
            id
        }
    };
    if tok.ends_generation(id, seq.output.is_harmony()) {
        // Harmony's `<|call|>` / `<|return|>` also close a message.
        let ended = seq.output.push(tok, id, delta)?;
        let reason =
            if ended == Some(Finish::ToolCalls) || seq.output.called_tool() { Finish::ToolCalls } else { Finish::Stop };
        return Ok((Some(reason), None));
    }
    seq.tokens.push(id);
    let complete = match &mut seq.constraint {
        Some(constraint) => constraint.accept(id).map_err(constraint_failed)?,
        None => false,
    };
    if let Some(finish) = seq.output.push(tok, id, delta)? {
        return Ok((Some(finish), Some(id)));
    }
    if complete {
        // The grammar allows nothing more: the constrained output is whole.
        let reason = if seq.output.called_tool() { Finish::ToolCalls } else { Finish::Stop };
        return Ok((Some(reason), Some(id)));
    }
    let finish = if seq.generated() >= seq.max_tokens || seq.tokens.len() >= ctx_size || Instant::now() >= seq.deadline
    {
        Some(Finish::Length)
    } else {
        None
    };
    Ok((finish, Some(id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(parallel: usize, ctx: Option<usize>, budget: u64) -> EngineConfig {
        EngineConfig {
            parallel,
            ctx_size: ctx,
            batch_tokens: 512,
            prefill_chunk: 64,
            max_queue: 8,
            kv_budget_bytes: budget,
            tool_format: None,
        }
    }

    #[test]
    fn context_is_the_trained_one_when_it_fits() {
        let (ctx, note) = choose_ctx(8192, 1000, &config(4, None, 1 << 40)).unwrap();
        assert_eq!((ctx, note.as_str()), (8192, "the model's trained context"));
    }

    #[test]
    fn context_is_capped_to_the_memory_budget() {
        // 4 slots × 1000 bytes per position within 10 MB: 2500 positions, rounded down to 2304.
        let (ctx, note) = choose_ctx(131072, 1000, &config(4, None, 10_000_000)).unwrap();
        assert_eq!(ctx, 2304);
        assert!(note.contains("capped from 131072"), "{note}");
        assert!(choose_ctx(131072, 1000, &config(4, None, 100_000)).unwrap_err().contains("fewer --parallel"));
    }

    #[test]
    fn an_asked_context_is_checked_against_the_trained_one() {
        assert_eq!(choose_ctx(2048, 1000, &config(2, Some(1024), 0)).unwrap().0, 1024);
        let err = choose_ctx(2048, 1000, &config(2, Some(4096), 0)).unwrap_err();
        assert_eq!(err, "--ctx-size 4096 is larger than the model's trained context of 2048");
    }
}
