//! The engine thread's loop: admit waiting requests into free slots, run one forward step over
//! every running sequence, sample each, send the text, free finished slots.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use minerva_generate::{BatchPlanner, ChatTemplate, Sampler, SpacingClasses, Tokenizer};
use minerva_model::kv_blocks::KV_BLOCK_SIZE;
use minerva_model::{Backend, DeviceSampling, LogitsFor, MAX_DEVICE_TOP_K, Model, SequenceInput};
use tokio::sync::mpsc as tokio_mpsc;

use super::blocks::BlockPool;
use super::embed::{EmbedCache, EmbedJob};
use super::sequence::{Delta, Finish, Output, Sequence, logprobs};
use super::sizing::{Sizing, size_kv};
use super::speculate::check_draft;
use super::{
    ChatFormat, EngineConfig, GrammarSlot, Job, ModelInfo, SeqEvent, Served, SpecConfig, SpecDrafter, Submission,
    TemplateChat,
};
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

pub(super) struct Scheduler<B: Backend> {
    pub(super) model: Model<B>,
    pub(super) cache: B::Cache,
    pub(super) tokenizer: Arc<Tokenizer>,
    pub(super) ctx_size: usize,
    /// Speculative decoding, if the server speculates.
    pub(super) spec: Option<SpecConfig>,
    /// The draft model of [`super::SpecDrafter::DraftModel`], shared by the sequences' drafters.
    pub(super) draft: Option<Arc<Model<B>>>,
    /// The token classes prompt lookup matches by ([`super::SpecDrafter::Ngram`]), made once.
    pub(super) spacing: Option<SpacingClasses>,
    /// How many tokens each sequence drafts in a step, from the measured step times.
    pub(super) planner: BatchPlanner,
    /// Seconds the draft model takes per drafted token in steady drafting (moving average over
    /// every sequence's drafts that followed a draft; 0: not measured yet).
    pub(super) draft_token_secs: f64,
    pub(super) batch_tokens: usize,
    prefill_chunk: usize,
    pub(super) shared: Shared,
    waiting: VecDeque<Submission>,
    pub(super) running: Vec<Sequence>,
    /// Sequences preempted for blocks, oldest first: they run again before any new request.
    pub(super) preempted: VecDeque<Sequence>,
    requests: HashMap<u64, Request>,
    /// The KV cache's blocks.
    pub(super) pool: BlockPool,
    /// Cache slots (block tables) no sequence uses.
    pub(super) free_slots: Vec<usize>,
    next_request: u64,
    /// Admissions so far: each sequence's `order`.
    admitted: u64,
    /// Embedding requests, oldest first.
    pub(super) embeds: VecDeque<EmbedJob>,
    /// The scratch KV cache of embedding passes, once one has run.
    pub(super) embed_cache: Option<EmbedCache<B::Cache>>,
}

/// The engine thread's body.
pub(crate) fn run<B, L>(load: L, config: EngineConfig, receive: mpsc::Receiver<Job>, shared: Shared)
where
    B: Backend,
    L: FnOnce() -> Result<Served<B>, String>,
{
    let mut sched = match Scheduler::new(load, &config, shared) {
        Ok(s) => s,
        Err((shared, message)) => {
            let _ = shared.info.set(Err(message));
            return;
        }
    };
    loop {
        let idle = sched.running.is_empty() && sched.waiting.is_empty() && sched.preempted.is_empty();
        if idle && sched.embeds.is_empty() {
            // Idle: block until a request comes (or every handle is gone).
            match receive.recv() {
                Ok(job) => sched.take(job),
                Err(_) => return,
            }
        }
        while let Ok(job) = receive.try_recv() {
            sched.take(job);
        }
        if sched.shared.cancel_all.load(Ordering::Acquire) {
            sched.fail_all(&ApiError::shutting_down());
            sched.fail_embeds(&ApiError::shutting_down());
            continue;
        }
        sched.drop_abandoned();
        sched.admit();
        // One embedding pass between generation steps.
        sched.embed_step();
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

impl<B: Backend> Scheduler<B> {
    fn new<L>(load: L, config: &EngineConfig, shared: Shared) -> Result<Scheduler<B>, (Shared, String)>
    where
        L: FnOnce() -> Result<Served<B>, String>,
    {
        let Served { model, tokenizer, draft } = match load() {
            Ok(x) => x,
            Err(e) => return Err((shared, e)),
        };
        let draft = match check_draft(config.speculation, &tokenizer, draft) {
            Ok(d) => d,
            Err(e) => return Err((shared, e)),
        };
        let block_bytes = model.kv_block_bytes() as u64;
        let sizing = match size_kv(model.config.context_length, block_bytes, KV_BLOCK_SIZE, config) {
            Ok(x) => x,
            Err(e) => return Err((shared, e)),
        };
        let Sizing { blocks, ctx: ctx_size, ctx_note } = sizing;
        let cache = match model.new_paged_cache(config.parallel, ctx_size, blocks) {
            Ok(c) => c,
            Err(e) => return Err((shared, format!("cannot allocate the KV cache: {e}"))),
        };
        let kv_note = format!(
            "KV cache {} blocks × {KV_BLOCK_SIZE} = {} tokens, {} MiB",
            blocks,
            blocks * KV_BLOCK_SIZE,
            (blocks as u64 * block_bytes) >> 20
        );
        let arch = model.config.arch.clone();
        let chat = if minerva_generate::harmony::is_harmony_arch(&arch) {
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
        let info = ModelInfo {
            tokenizer: tokenizer.clone(),
            chat,
            ctx_size,
            slots: config.parallel,
            arch,
            ctx_note,
            kv_note,
            grammar,
            embedding_dim: model.config.n_embd,
            pooling: model.config.pooling,
        };
        let _ = shared.info.set(Ok(Arc::new(info)));
        let spacing = matches!(config.speculation, Some(SpecConfig { drafter: SpecDrafter::Ngram { .. }, .. }))
            .then(|| SpacingClasses::new(&tokenizer));
        Ok(Scheduler {
            model,
            cache,
            tokenizer,
            ctx_size,
            spec: config.speculation,
            draft,
            spacing,
            planner: BatchPlanner::new(config.batch_tokens.max(1)),
            draft_token_secs: 0.0,
            batch_tokens: config.batch_tokens.max(1),
            prefill_chunk: config.prefill_chunk.max(1),
            shared,
            waiting: VecDeque::new(),
            running: Vec::new(),
            preempted: VecDeque::new(),
            requests: HashMap::new(),
            pool: BlockPool::new(blocks, KV_BLOCK_SIZE),
            // Popped from the end: slot 0 first.
            free_slots: (0..config.parallel).rev().collect(),
            next_request: 0,
            admitted: 0,
            embeds: VecDeque::new(),
            embed_cache: None,
        })
    }

    fn take(&mut self, job: Job) {
        match job {
            Job::Generate(s) => self.waiting.push_back(*s),
            Job::Embed(e) => self.embeds.push_back(e),
        }
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
                        reasoning_tokens: 0,
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
            let mut i = 0;
            while i < self.running.len() {
                if self.running[i].request == id {
                    // Its blocks hold every token it ran.
                    let mut seq = self.running.swap_remove(i);
                    self.let_go(&mut seq);
                } else {
                    i += 1;
                }
            }
            self.preempted.retain(|s| s.request != id);
            self.shared.metrics.cancelled.inc();
        }
    }

    /// Resumes preempted sequences, then moves waiting requests, oldest first, into free slots
    /// (all `n` choices at once) while the KV pool has blocks for their prompts.
    fn admit(&mut self) {
        while let Some(seq) = self.preempted.front() {
            // Room for all it had, or nothing else runs (then it has the whole pool).
            if self.free_slots.is_empty() || !(self.running.is_empty() || self.fits(seq.tokens.len(), 0)) {
                break;
            }
            let (Some(mut seq), Some(slot)) = (self.preempted.pop_front(), self.free_slots.pop()) else { break };
            self.place(&mut seq, slot);
            self.running.push(seq);
        }
        while self.preempted.is_empty()
            && let Some(head) = self.waiting.front()
        {
            if head.request.n > self.free_slots.len() {
                break;
            }
            let found = self.pool.lookup(&head.request.prompt);
            let fits = self.running.is_empty() || self.fits(head.request.prompt.len(), found.whole.len());
            self.pool.release(&found.blocks());
            if !fits {
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
                let Some(slot) = self.free_slots.pop() else { break };
                self.admitted += 1;
                let mut seq = Sequence {
                    request: id,
                    choice,
                    order: self.admitted,
                    slot,
                    blocks: Vec::new(),
                    noted: (0, 0),
                    table_changed: true,
                    tokens: r.prompt.clone(),
                    prompt_len: r.prompt.len(),
                    prefill_to: r.prompt.len(),
                    fed: 0,
                    cached: 0,
                    sampler,
                    constraint: r.constraint.clone(),
                    output: Output::new(r.stop.clone(), r.output),
                    max_tokens: r.max_tokens,
                    logprobs: r.logprobs,
                    deadline: r.deadline,
                    received: s.received,
                    last_token_at: None,
                    waits_for_leader: choice > 0,
                    speculation: self.new_speculation(r),
                    drafted: 0,
                };
                // The other choices start from choice 0's blocks once it has run the prompt.
                if choice == 0 {
                    let reuse = self.place(&mut seq, slot);
                    seq.cached = reuse;
                    if reuse > 0 {
                        self.shared.metrics.prompt_cache_hits.inc();
                        self.shared.metrics.prompt_cached_tokens.inc_by(reuse as u64);
                    }
                }
                self.running.push(seq);
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

    /// Which tokens each running sequence runs next, as (index into `running`, count): decoding
    /// ones their one new token; prefilling ones the next chunk of their prompt, within what is
    /// left of the step's budget.
    fn plan(&self) -> Vec<(usize, usize)> {
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
                let chunk = (seq.prefill_to - seq.fed).min(budget);
                plan.push((i, chunk));
                budget -= chunk;
            }
        }
        plan
    }

    /// One forward step over every running sequence, then sampling and output.
    fn step(&mut self) -> Result<(), ApiError> {
        // Drafted tokens join their sequences' tokens, so the plan runs them.
        let drafted = self.draft_all();
        // Blocks for every new position, or fewer sequences (preempted) and a new plan.
        let plan = loop {
            let plan = self.plan();
            if plan.is_empty() || self.reserve(&plan)? {
                break plan;
            }
        };
        if plan.is_empty() {
            return Ok(());
        }
        // Sequences that get a token this step first: a prompt chunk that does not end its prompt
        // only fills the cache, and needs no row of the (vocabulary-wide) LM head.
        let (mut plan, rest): (Vec<_>, Vec<_>) = plan.into_iter().partition(|&(i, len)| {
            let seq = &self.running[i];
            seq.fed + len >= seq.prefill_to
        });
        let with_logits = plan.len();
        plan.extend(rest);
        // Draw on the device when the backend samples and every sequence getting a token can be
        // drawn there (no log-probabilities, no choices waiting on this logits row): one id read
        // back per sequence instead of the vocabulary's logits.
        let on_device = !drafted
            && self.model.samples_on_device()
            && plan[..with_logits].iter().all(|&(i, _)| self.device_eligible(i));
        let which = LogitsFor::LastOfFirst(with_logits);
        // A drafted sequence's rows: after its last token and after each drafted one.
        let tails: Vec<usize> =
            (0..plan.len()).map(|p| if p < with_logits { 1 + self.running[plan[p].0].drafted } else { 0 }).collect();
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
        let started = Instant::now();
        let mut forward = || -> Result<Drawn, ApiError> {
            Ok(if on_device {
                let ids = model
                    .forward_sample(cache, &inputs, which, &params)
                    .map_err(|e| ApiError::internal(format!("forward step: {e}")))?;
                Drawn::Tokens(ids)
            } else if drafted {
                let logits = model
                    .forward_tails(cache, &inputs, &tails)
                    .map_err(|e| ApiError::internal(format!("forward step: {e}")))?;
                Drawn::Logits(logits)
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
        // A step of decoding rows only (each sequence its last token and its draft): its time,
        // sampling and verification included, is that of its row count for the choice of
        // draft lengths.
        let decode_rows = (self.spec.is_some()
            && plan.iter().all(|&(i, len)| self.running[i].prefilled() && len == 1 + self.running[i].drafted))
        .then(|| plan.iter().map(|p| p.1).sum::<usize>());
        let mut finished: Vec<(usize, Finish)> = Vec::new();
        // Rows of the sequences that get tokens, in plan order: one each, 1 + k for a draft of k.
        let mut next_row = 0;
        for &(i, len) in &plan {
            self.running[i].fed += len;
            if !self.running[i].prefilled() {
                continue;
            }
            let drafted = self.running[i].drafted;
            let row = next_row;
            next_row += 1 + drafted;
            if drafted > 0 {
                self.verify_and_send(i, &mut rows[row..row + 1 + drafted], &mut finished)?;
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
        if let Some(rows) = decode_rows {
            self.planner.record_step(rows, started.elapsed().as_secs_f64());
        }
        self.note_written();
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

    /// The share of the KV pool's blocks that running sequences hold, for `/metrics`.
    fn note_kv_usage(&self) {
        let total = self.pool.len().max(1);
        self.shared.metrics.kv_cache_usage.set(self.pool.held() as f64 / total as f64);
    }

    /// Choice 0 of a request (at `leader`) has run its prompt: the request's other choices start
    /// from its blocks, shared (the partly filled last one is copied by the first to write to it),
    /// and sample their first token from the same logits.
    fn start_followers(
        &mut self,
        leader: usize,
        logits: &[f32],
        finished: &mut Vec<(usize, Finish)>,
    ) -> Result<(), ApiError> {
        let (request, blocks, noted, positions) = {
            let l = &self.running[leader];
            (l.request, l.blocks.clone(), l.noted, l.fed)
        };
        let followers: Vec<usize> = (0..self.running.len())
            .filter(|&j| self.running[j].request == request && self.running[j].waits_for_leader)
            .collect();
        for j in followers {
            for &b in &blocks {
                self.pool.share(b);
            }
            let seq = &mut self.running[j];
            seq.waits_for_leader = false;
            seq.blocks = blocks.clone();
            seq.noted = noted;
            seq.table_changed = true;
            seq.fed = positions;
            let mut row = logits.to_vec();
            self.sample_and_send(j, Pick::Logits(&mut row), finished)?;
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
    pub(super) fn sample_and_send(
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

    fn finish(&mut self, mut seq: Sequence, reason: Finish) {
        self.let_go(&mut seq);
        let Some(r) = self.requests.get_mut(&seq.request) else { return };
        let _ = r.events.send(SeqEvent::Finish {
            choice: seq.choice,
            reason,
            completion_tokens: seq.generated(),
            reasoning_tokens: seq.output.reasoning_tokens(),
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
        // A step failed part-way: what its blocks hold is unknown.
        for mut seq in std::mem::take(&mut self.running) {
            self.drop_blocks(&mut seq);
        }
        // Preempted sequences hold no blocks or slot; their requests were just ended.
        self.preempted.clear();
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
pub(super) enum Pick<'a> {
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
