//! The engine: one thread that owns the model and a paged KV cache (a pool of blocks shared by
//! up to `parallel` sequences), and runs continuous batching over every request the HTTP side
//! submits.
//!
//! ```text
//! handlers ──submit(GenerationRequest)──► queue (≤ max_queue) ──admit: n slots, blocks for the prompt──┐
//!    ▲                                                                                                 ▼
//!    └──── SeqEvent (delta / finish / error) per choice ◄── sample each row ◄── one forward: every
//!                                                                  running sequence's next token +
//!                                                                  prompt chunks (≤ batch_tokens)
//! ```
//!
//! The HTTP side never touches the model: it renders and tokenizes prompts with the
//! [`ModelInfo`] the engine publishes once the model is loaded, and reads events from a channel.
//! A dropped receiver (the client went away) cancels the request at the next step.

mod blocks;
mod embed;
mod paging;
mod scheduler;
mod sequence;
mod sizing;
mod speculate;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use minerva_generate::{SamplingParams, Tokenizer};
use minerva_model::{Backend, Model};
use tokio::sync::mpsc as tokio_mpsc;

use crate::error::ApiError;
use crate::metrics::Metrics;

pub use embed::Embeddings;
pub use sequence::{Delta, Finish, TokenLogprob, ToolDelta, TopLogprob};

/// How a model's chat requests become prompts.
pub enum ChatFormat {
    /// The model's Jinja chat template.
    Template(Box<TemplateChat>),
    /// GPT-OSS's Harmony format (reasoning and tool calls in channels).
    Harmony,
    /// No chat template: only `/v1/completions` works.
    None,
}

/// A chat template and what it says about tools and reasoning.
pub struct TemplateChat {
    /// The compiled template.
    pub template: minerva_generate::ChatTemplate,
    /// Its source (what reasoning and tool markers it renders).
    pub source: String,
    /// How the model writes tool calls (from the template, or `--tool-format`).
    pub tool_format: minerva_generate::ToolFormat,
    /// The template renders `tools` itself; otherwise they are described in a system message.
    pub renders_tools: bool,
}

impl TemplateChat {
    /// `template` (from `source`), its tool format `override_format` or the one its markers show.
    pub fn new(
        template: minerva_generate::ChatTemplate,
        source: &str,
        override_format: Option<minerva_generate::ToolFormat>,
    ) -> TemplateChat {
        let detected = minerva_generate::ToolFormat::detect(Some(source));
        let tool_format = override_format.unwrap_or(detected);
        // A template renders the tools itself only in its own format.
        let renders_tools =
            tool_format == detected && tool_format != minerva_generate::ToolFormat::Generic && source.contains("tools");
        TemplateChat { template, source: source.to_string(), tool_format, renders_tools }
    }
}

/// How a choice's output is split for the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// All text is the answer.
    Plain,
    /// GPT-OSS's Harmony channels.
    Harmony,
    /// `<think>` reasoning and tool calls written as text.
    Split {
        /// The tool format, when the request has tools.
        tools: Option<minerva_generate::ToolFormat>,
        /// How the completion starts with respect to reasoning.
        think: minerva_generate::ThinkStart,
    },
}

/// What the HTTP side needs to know about the loaded model.
pub struct ModelInfo {
    /// The tokenizer (prompts are tokenized on the HTTP side, off the engine thread).
    pub tokenizer: Arc<Tokenizer>,
    /// How chat messages become a prompt.
    pub chat: ChatFormat,
    /// Positions per sequence.
    pub ctx_size: usize,
    /// Sequences decoded together.
    pub slots: usize,
    /// `general.architecture` / `model_type`.
    pub arch: String,
    /// How the context size was chosen (for the startup line).
    pub ctx_note: String,
    /// The KV cache's blocks, tokens and bytes (for the startup line).
    pub kv_note: String,
    /// Compiles structured-output grammars for this vocabulary.
    pub grammar: Arc<GrammarSlot>,
    /// Values per embedding (the hidden size).
    pub embedding_dim: usize,
    /// The model's own pooling for embeddings (GGUF `pooling_type`), if it has one.
    pub pooling: Option<minerva_model::Pooling>,
}

/// The model's [`minerva_generate::GrammarCompiler`], built once: on a thread of its own when the
/// model loads (150 ms for a 49k vocabulary, 1.7 s for 262k, release build), so start-up does not
/// wait for it, and by the first request that needs it if that comes sooner (it then waits for
/// the one build).
pub struct GrammarSlot {
    compiler: OnceLock<Result<Arc<minerva_generate::GrammarCompiler>, String>>,
    tokenizer: Arc<Tokenizer>,
    vocab: usize,
}

impl GrammarSlot {
    /// A slot for `tokenizer`'s vocabulary and logit rows of `vocab` entries; nothing built yet.
    pub fn new(tokenizer: Arc<Tokenizer>, vocab: usize) -> GrammarSlot {
        GrammarSlot { compiler: OnceLock::new(), tokenizer, vocab }
    }

    /// The compiler (built now if it is not yet), or why this vocabulary has none. Blocks while
    /// it is built: call it off the async workers.
    pub fn compiler(&self) -> Result<Arc<minerva_generate::GrammarCompiler>, String> {
        self.compiler
            .get_or_init(|| {
                minerva_generate::GrammarCompiler::new(&self.tokenizer, self.vocab)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
    }
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// KV-cache slots: sequences decoded together.
    pub parallel: usize,
    /// Positions per slot; `None`: the model's trained context, capped to fit memory.
    pub ctx_size: Option<usize>,
    /// Most tokens in one forward step (prompt chunks are cut to fit).
    pub batch_tokens: usize,
    /// Most prompt tokens in a step that also decodes running sequences: it bounds their
    /// inter-token latency while new prompts are prefilled in chunks.
    pub prefill_chunk: usize,
    /// Most requests waiting for a slot; more are refused with 503.
    pub max_queue: usize,
    /// Bytes the KV cache may take when `kv_memory` is not set: the pool then holds at most
    /// every slot at full context, and the context is capped so one sequence fits.
    pub kv_budget_bytes: u64,
    /// Bytes of the KV cache's block pool (`--kv-memory`), shared by every sequence.
    pub kv_memory: Option<u64>,
    /// The tool-call format, over the one found from the chat template (`--tool-format`).
    pub tool_format: Option<minerva_generate::ToolFormat>,
    /// Speculative decoding (`--spec ngram`, `--draft-model`); `None`: plain decoding.
    pub speculation: Option<SpecConfig>,
}

/// Server-wide speculative decoding: each decoding sequence drafts (from its own prompt and
/// output, or with the draft model) and the step verifies every draft; how many tokens each
/// sequence drafts is chosen for the whole step from the measured step times and acceptance
/// rates (`minerva_generate::BatchPlanner`), so drafting stops where the batch alone keeps the
/// hardware busy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecConfig {
    /// What drafts.
    pub drafter: SpecDrafter,
    /// Most tokens a sequence drafts per step (fewer where the measurements say so).
    pub draft_max: usize,
    /// Most decoding sequences in a step for drafts to be made, over the measured choice
    /// (`usize::MAX`: no bound).
    pub max_batch: usize,
    /// Draft `draft_max` tokens wherever the drafter has them (in steps of at most `max_batch`
    /// decoding sequences) instead of choosing by the measurements: for measuring and testing.
    pub fixed: bool,
}

/// The drafter of each sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecDrafter {
    /// Prompt lookup: n-grams of `min..=max` tokens.
    Ngram {
        /// Shortest n-gram looked up.
        min: usize,
        /// Longest n-gram looked up.
        max: usize,
    },
    /// The draft model loaded beside the model ([`Served::draft`]): each sequence keeps its own
    /// KV cache of it.
    DraftModel,
}

/// What the engine serves: the model, its tokenizer, and a draft model for speculative decoding
/// (with its tokenizer, which must spell every id as the model's does).
pub struct Served<B: Backend> {
    /// The model.
    pub model: Model<B>,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// The draft model of [`SpecDrafter::DraftModel`], on a backend of the same kind.
    pub draft: Option<(Model<B>, Tokenizer)>,
}

/// One generation request: a tokenized prompt and how to continue it, `n` times.
#[derive(Clone, Debug)]
pub struct GenerationRequest {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Independent choices (each in its own slot, sharing the prompt).
    pub n: usize,
    /// Sampling; choice `i` seeds its RNG with `seed + i`.
    pub sampling: SamplingParams,
    /// Most tokens per choice.
    pub max_tokens: usize,
    /// Stop strings (not returned).
    pub stop: Vec<String>,
    /// Return each token's log-probability and this many alternatives.
    pub logprobs: Option<usize>,
    /// How the output is split into answer, reasoning and tool calls.
    pub output: OutputFormat,
    /// Hold every choice's output to a grammar (each choice gets its own copy).
    pub constraint: Option<minerva_generate::Constraint>,
    /// When the request must end (`finish_reason: length`).
    pub deadline: Instant,
    /// Whether its choices may be decoded speculatively where the server speculates (the request's
    /// `speculative` field; greedy output is the same either way).
    pub speculative: bool,
}

/// What a choice's sequence reports, in order: deltas, then one finish (or an error).
#[derive(Clone, Debug)]
pub enum SeqEvent {
    /// New output of choice `choice`.
    Delta {
        /// The choice.
        choice: usize,
        /// Its new output.
        delta: Delta,
    },
    /// Choice `choice` ended.
    Finish {
        /// The choice.
        choice: usize,
        /// Why.
        reason: Finish,
        /// Tokens it generated.
        completion_tokens: usize,
        /// Those of them whose text went to the reasoning.
        reasoning_tokens: usize,
        /// Prompt tokens whose keys and values an earlier request left in its slot.
        cached_tokens: usize,
    },
    /// The request failed (every choice ends).
    Error(ApiError),
}

/// A submitted request's event stream.
pub type EventReceiver = tokio_mpsc::UnboundedReceiver<SeqEvent>;

/// What the handles send the engine thread.
pub(crate) enum Job {
    /// A generation request.
    Generate(Box<Submission>),
    /// An embedding request.
    Embed(embed::EmbedJob),
}

pub(crate) struct Submission {
    request: GenerationRequest,
    events: tokio_mpsc::UnboundedSender<SeqEvent>,
    received: Instant,
}

/// The engine's loop, waiting to be run on a thread with a model.
pub struct EngineRunner {
    config: EngineConfig,
    receive: mpsc::Receiver<Job>,
    shared: scheduler::Shared,
    alive: AliveGuard,
}

/// Clears the engine's "alive" flag when dropped: when the runner returns, unwinds from a panic,
/// or is dropped without running (its thread failed before the model loaded).
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl EngineRunner {
    /// Runs `load` on this thread, publishes the [`ModelInfo`] (or the error), then serves the
    /// handles' submissions until every handle is dropped.
    pub fn run<B, L>(self, load: L)
    where
        B: Backend,
        L: FnOnce() -> Result<(Model<B>, Tokenizer), String>,
    {
        self.run_served(|| load().map(|(model, tokenizer)| Served { model, tokenizer, draft: None }));
    }

    /// [`EngineRunner::run`] for a load that may bring a draft model too.
    pub fn run_served<B, L>(self, load: L)
    where
        B: Backend,
        L: FnOnce() -> Result<Served<B>, String>,
    {
        let EngineRunner { config, receive, shared, alive } = self;
        scheduler::run(load, config, receive, shared);
        drop(alive);
    }
}

/// The HTTP side's handle on the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    submit: mpsc::Sender<Job>,
    info: Arc<OnceLock<Result<Arc<ModelInfo>, String>>>,
    queued: Arc<AtomicUsize>,
    cancel_all: Arc<AtomicBool>,
    alive: Arc<AtomicBool>,
    max_queue: usize,
}

impl EngineHandle {
    /// Starts the engine thread: it runs `load`, publishes the [`ModelInfo`], then serves
    /// submissions until every handle is dropped.
    pub fn spawn<B, L>(load: L, config: EngineConfig, metrics: Arc<Metrics>) -> EngineHandle
    where
        B: Backend,
        L: FnOnce() -> Result<(Model<B>, Tokenizer), String> + Send + 'static,
    {
        EngineHandle::spawn_served(
            move || load().map(|(model, tokenizer)| Served { model, tokenizer, draft: None }),
            config,
            metrics,
        )
    }

    /// [`EngineHandle::spawn`] for a load that may bring a draft model too.
    pub fn spawn_served<B, L>(load: L, config: EngineConfig, metrics: Arc<Metrics>) -> EngineHandle
    where
        B: Backend,
        L: FnOnce() -> Result<Served<B>, String> + Send + 'static,
    {
        let (handle, runner) = EngineHandle::new(config, metrics);
        std::thread::Builder::new()
            .name("minerva-engine".into())
            .spawn(move || runner.run_served(load))
            .expect("the OS refused to start the engine thread");
        handle
    }

    /// A handle and the [`EngineRunner`] that serves it on a thread of the caller's choosing
    /// (one that loads the model itself, say).
    pub fn new(config: EngineConfig, metrics: Arc<Metrics>) -> (EngineHandle, EngineRunner) {
        let (submit, receive) = mpsc::channel();
        let info = Arc::new(OnceLock::new());
        let queued = Arc::new(AtomicUsize::new(0));
        let cancel_all = Arc::new(AtomicBool::new(false));
        let alive = Arc::new(AtomicBool::new(true));
        let handle = EngineHandle {
            submit,
            info: info.clone(),
            queued: queued.clone(),
            cancel_all: cancel_all.clone(),
            alive: alive.clone(),
            max_queue: config.max_queue,
        };
        let shared = scheduler::Shared { info, queued, cancel_all, metrics };
        (handle, EngineRunner { config, receive, shared, alive: AliveGuard(alive) })
    }

    /// Reports that the model could not be loaded (when no runner will).
    pub fn fail(&self, message: String) {
        let _ = self.info.set(Err(message));
    }

    /// The model, once loaded; `Err` with the message if loading failed.
    pub fn info(&self) -> Option<Result<Arc<ModelInfo>, String>> {
        self.info.get().cloned()
    }

    /// Whether the engine thread is still serving (false once it returned or panicked, or its
    /// runner was dropped unrun).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Requests waiting for a slot.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Queues `request`; its events arrive on the returned receiver. Refused with 503 when
    /// `max_queue` requests already wait.
    pub fn submit(&self, request: GenerationRequest) -> Result<EventReceiver, ApiError> {
        if self.cancel_all.load(Ordering::Relaxed) {
            return Err(ApiError::shutting_down());
        }
        if !self.is_alive() {
            return Err(ApiError::engine_stopped());
        }
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.max_queue {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(ApiError::overloaded(self.max_queue));
        }
        let (events, receiver) = tokio_mpsc::unbounded_channel();
        let submission = Submission { request, events, received: Instant::now() };
        if self.submit.send(Job::Generate(Box::new(submission))).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(ApiError::engine_stopped());
        }
        Ok(receiver)
    }

    /// Queues the embedding of `inputs` (token ids; each non-empty and within the context),
    /// pooled as `pooling`; the vectors arrive on the returned receiver. Embedding requests are
    /// bounded by the server's requests in flight, not by `max_queue`.
    pub fn embed(
        &self,
        inputs: Vec<Vec<u32>>,
        pooling: minerva_model::Pooling,
    ) -> Result<tokio::sync::oneshot::Receiver<Embeddings>, ApiError> {
        if self.cancel_all.load(Ordering::Relaxed) {
            return Err(ApiError::shutting_down());
        }
        if !self.is_alive() {
            return Err(ApiError::engine_stopped());
        }
        let (reply, receiver) = tokio::sync::oneshot::channel();
        let job = embed::EmbedJob { inputs, pooling, reply, done: Vec::new() };
        self.submit.send(Job::Embed(job)).map_err(|_| ApiError::engine_stopped())?;
        Ok(receiver)
    }

    /// Ends every running and waiting request with an error and refuses new ones (shutdown).
    pub fn cancel_all(&self) {
        self.cancel_all.store(true, Ordering::Release);
    }
}
