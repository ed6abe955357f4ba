//! [`Session`] and [`Generation`]: prompt ids in, a stream of [`Event`]s out, over any
//! [`Backend`].
//!
//! ```text
//! Session { model, tokenizer, KV cache, ids in the cache }
//!   generate(prompt) ─► prefill (only the part after the prefix already cached) ─► logits
//!     loop: sample ─► EOS/EOT? ─► TextStream (whole UTF-8 chars) ─► StopText (hold back a
//!           possible stop-string prefix) ─► Event::Text ─► max tokens / context end? ─► forward 1
//!   ─► Event::Done(Summary { finish, token counts, time to first token, prefill/decode tok/s })
//! ```
//!
//! A chat keeps one session: each turn's prompt re-renders the whole conversation, and only the
//! tokens after the longest prefix already in the cache are run again.
//!
//! Plain greedy decoding (temperature 0, no bias, no penalty) asks the model for the argmax only
//! ([`Model::forward_greedy`]): a GPU backend then reads back one token id per step instead of
//! the vocabulary's logits.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use minerva_model::{Backend, DeviceSampling, LogitsFor, Model, SequenceInput};

use crate::error::{GenerateError, Result};
use crate::harmony_stream::{HarmonyOutput, OutputPiece};
use crate::sampler::Sampler;
use crate::speculative::{self, SpecStats, Speculation};
use crate::tokenizer::{TextStream, Tokenizer};

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// The model produced an end-of-sequence / end-of-turn token.
    Eos,
    /// A stop string appeared in the text (it is not printed).
    StopString,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The grammar of a constrained generation allows no further token.
    GrammarComplete,
    /// The context (KV cache) is full.
    ContextEnd,
}

impl FinishReason {
    /// The OpenAI-style name: `stop` (EOS or a stop string) or `length` (token or context limit).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Eos | FinishReason::StopString | FinishReason::GrammarComplete => "stop",
            FinishReason::MaxTokens | FinishReason::ContextEnd => "length",
        }
    }
}

/// What a finished generation reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Why it ended.
    pub finish: FinishReason,
    /// Prompt tokens (after truncation).
    pub prompt_tokens: usize,
    /// Prompt tokens that were run (the rest were reused from the cache).
    pub prefilled_tokens: usize,
    /// Generated tokens, the final EOS excluded.
    pub completion_tokens: usize,
    /// The generated ids (EOS excluded).
    pub tokens: Vec<u32>,
    /// From the call to the first sampled token (prefill included).
    pub time_to_first_token: Duration,
    /// Prefilled tokens per second.
    pub prefill_tokens_per_s: f64,
    /// Decode steps per second (tokens after the first).
    pub decode_tokens_per_s: f64,
    /// What speculative decoding did, where the session speculates
    /// ([`Session::set_speculation`]) and the generation is unconstrained.
    pub speculation: Option<SpecStats>,
}

/// One item of a generation stream.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// New text (whole characters; never part of a stop string).
    Text(String),
    /// New reasoning (Harmony `analysis`, and tool calls written as `[call NAME] ARGS`), apart
    /// from the answer.
    Reasoning(String),
    /// The end, with the summary. Always the last event.
    Done(Summary),
}

/// Limits of one generation.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// At most this many tokens are generated.
    pub max_tokens: usize,
    /// Texts that end generation when they appear in the output; they are not printed.
    pub stop: Vec<String>,
    /// Drop the oldest prompt tokens (keeping a leading BOS) when the prompt does not fit the
    /// context, instead of failing.
    pub truncate_prompt: bool,
    /// Keep going past EOS/EOT tokens (for tests and benchmarks).
    pub ignore_eos: bool,
    /// The completion is Harmony (GPT-OSS): reasoning comes as [`Event::Reasoning`], the answer
    /// as [`Event::Text`], and `<|end|>` between them does not end generation.
    pub harmony: bool,
    /// Hold the output to a grammar ([`crate::GrammarCompiler::compile`]): each step's logits are
    /// masked to what it allows, and generation ends where it is complete.
    pub constraint: Option<crate::Constraint>,
}

impl Default for GenerateOptions {
    fn default() -> GenerateOptions {
        GenerateOptions {
            max_tokens: 256,
            stop: Vec::new(),
            truncate_prompt: false,
            ignore_eos: false,
            harmony: false,
            constraint: None,
        }
    }
}

/// A model, its tokenizer and one KV-cache slot, reused across generations.
pub struct Session<'m, B: Backend> {
    model: &'m Model<B>,
    tokenizer: &'m Tokenizer,
    cache: B::Cache,
    capacity: usize,
    /// The ids whose keys/values are in the cache, in order.
    cached: Vec<u32>,
    /// Drafts and verifies tokens when set (lent to each [`Generation`] while it runs).
    speculation: Option<Speculation<'m>>,
}

impl<'m, B: Backend> Session<'m, B> {
    /// A session with a context of `context` positions (at most the model's trained length).
    pub fn new(model: &'m Model<B>, tokenizer: &'m Tokenizer, context: usize) -> Result<Session<'m, B>> {
        let trained = model.config.context_length;
        if context < 2 {
            return Err(GenerateError::Request(format!("context size {context} is too small")));
        }
        if trained > 0 && context > trained {
            return Err(GenerateError::Request(format!(
                "context size {context} is larger than the model's trained context of {trained}"
            )));
        }
        let cache = model.new_cache(1, context)?;
        Ok(Session { model, tokenizer, cache, capacity: context, cached: Vec::new(), speculation: None })
    }

    /// Speculative decoding for this session's unconstrained generations (`None`: plain decoding).
    /// Greedy output is the same as without it; see [`crate::speculative`].
    pub fn set_speculation(&mut self, speculation: Option<Speculation<'m>>) {
        self.speculation = speculation;
    }

    /// The session's speculation, if it speculates (between generations).
    pub fn speculation(&self) -> Option<&Speculation<'m>> {
        self.speculation.as_ref()
    }

    /// The context size.
    pub fn context(&self) -> usize {
        self.capacity
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &'m Tokenizer {
        self.tokenizer
    }

    /// Forgets the cached conversation.
    pub fn reset(&mut self) {
        self.cached.clear();
    }

    /// Starts generating after `prompt` (token ids, BOS included if wanted). The returned
    /// iterator runs the model lazily: the prefill happens on the first `next()`.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        options: GenerateOptions,
        sampler: Sampler,
    ) -> Result<Generation<'_, 'm, B>> {
        let mut prompt = prompt.to_vec();
        if prompt.is_empty() {
            match self.tokenizer.bos {
                Some(bos) => prompt.push(bos),
                None => return Err(GenerateError::Request("the prompt is empty".into())),
            }
        }
        if prompt.len() >= self.capacity {
            if !options.truncate_prompt {
                return Err(GenerateError::Request(format!(
                    "the prompt is {} tokens but the context holds {} (use a larger context or truncation)",
                    prompt.len(),
                    self.capacity
                )));
            }
            // Keep the newest tokens, and a leading BOS, leaving room for a quarter of the context.
            let keep = (self.capacity * 3 / 4).max(1);
            let head = usize::from(self.tokenizer.bos.is_some() && prompt.first() == self.tokenizer.bos.as_ref());
            let tail = prompt.len() - (keep - head.min(keep - 1));
            let mut kept: Vec<u32> = prompt[..head.min(keep - 1)].to_vec();
            kept.extend_from_slice(&prompt[tail..]);
            prompt = kept;
        }
        let stop = StopText::new(options.stop.clone());
        let harmony = options.harmony.then(HarmonyOutput::new);
        // Constrained output masks each step's logits on the host: drafts are not verified
        // against a grammar, so it decodes plainly.
        let speculation = if options.constraint.is_none() { self.speculation.take() } else { None };
        let speculation = speculation.map(|mut s| {
            s.start();
            s
        });
        Ok(Generation {
            speculation,
            ready: VecDeque::new(),
            harmony,
            session: self,
            options,
            sampler,
            prompt_len: prompt.len(),
            history: prompt,
            stream: TextStream::new(),
            stop,
            generated: Vec::new(),
            queue: VecDeque::new(),
            started: Instant::now(),
            first_token: None,
            prefilled: 0,
            prefill_time: Duration::ZERO,
            pending: None,
            done: false,
        })
    }

    /// The callback form of [`Session::generate`]: `on_text` gets each piece of text; returns the
    /// summary.
    pub fn generate_with(
        &mut self,
        prompt: &[u32],
        options: GenerateOptions,
        sampler: Sampler,
        mut on_text: impl FnMut(&str),
    ) -> Result<Summary> {
        for event in self.generate(prompt, options, sampler)? {
            match event? {
                Event::Text(t) => on_text(&t),
                Event::Reasoning(_) => {}
                Event::Done(summary) => return Ok(summary),
            }
        }
        Err(GenerateError::Request("generation ended without a summary".into()))
    }

    /// Runs `tokens` at the end of the cache and returns what `ask` wants of the last position:
    /// its logits, or the next token itself (the argmax from [`Model::forward_greedy`], or a draw
    /// from [`Model::forward_sample`]).
    fn forward(&mut self, tokens: &[u32], ask: Ask) -> Result<Next> {
        let seq = SequenceInput { tokens, start_pos: self.cached.len(), slot: 0 };
        let next = match ask {
            Ask::Argmax => Next::Token(self.model.forward_greedy(&mut self.cache, &[seq])?[0]),
            Ask::Sample(plan) => {
                Next::Token(self.model.forward_sample(&mut self.cache, &[seq], LogitsFor::Last, &[plan])?[0])
            }
            Ask::Logits => Next::Logits(self.model.forward(&mut self.cache, &[seq], LogitsFor::Last)?.data),
        };
        self.cached.extend_from_slice(tokens);
        Ok(next)
    }

    /// Runs `tokens` at the end of the cache and returns the next token after each of them: the
    /// argmax where `argmax` is set, else drawn by `sampler` verifying `tokens[1..]` as a draft
    /// ([`speculative::verify_draft`]). Keeps the positions up to the last accepted token.
    fn verify(
        &mut self,
        tokens: &[u32],
        argmax: bool,
        sampler: &mut Sampler,
        history: &[u32],
    ) -> Result<speculative::Verdict> {
        let start = self.cached.len();
        let seq = SequenceInput { tokens, start_pos: start, slot: 0 };
        let draft = &tokens[1..];
        let verdict = if argmax {
            let ids = self.model.forward_argmax(&mut self.cache, &[seq], LogitsFor::All)?;
            speculative::verify_greedy(draft, &ids)
        } else {
            let logits = self.model.forward(&mut self.cache, &[seq], LogitsFor::All)?;
            speculative::verify_draft(sampler, draft, |i| logits.row(i).to_vec(), history)
        };
        self.cached.extend_from_slice(&tokens[..1 + verdict.accepted]);
        Ok(verdict)
    }
}

/// What a forward step is asked for.
enum Ask {
    /// The argmax (plain greedy decoding).
    Argmax,
    /// A token drawn on the device.
    Sample(DeviceSampling),
    /// The logits, sampled on the host.
    Logits,
}

/// What a forward step left for the next token: the logits to sample from, or the token itself.
enum Next {
    Logits(Vec<f32>),
    Token(u32),
}

/// An iterator of [`Event`]s; see [`Session::generate`]. Dropping it early stops generation
/// (the session keeps what was cached).
pub struct Generation<'s, 'm, B: Backend> {
    session: &'s mut Session<'m, B>,
    options: GenerateOptions,
    sampler: Sampler,
    prompt_len: usize,
    /// Prompt and generated ids (what the penalties see).
    history: Vec<u32>,
    stream: TextStream,
    stop: StopText,
    /// The Harmony splitter, when the completion is Harmony.
    harmony: Option<HarmonyOutput>,
    generated: Vec<u32>,
    queue: VecDeque<Event>,
    started: Instant,
    first_token: Option<Instant>,
    prefilled: usize,
    prefill_time: Duration,
    pending: Option<Next>,
    done: bool,
    /// The session's speculation, lent for this generation.
    speculation: Option<Speculation<'m>>,
    /// Tokens a verified draft gave, to emit before anything runs: all but the last are already
    /// in the cache.
    ready: VecDeque<u32>,
}

impl<'m, B: Backend> Drop for Generation<'_, 'm, B> {
    fn drop(&mut self) {
        if let Some(speculation) = self.speculation.take() {
            self.session.speculation = Some(speculation);
        }
    }
}

impl<B: Backend> Generation<'_, '_, B> {
    /// What the next step should return: the argmax for plain greedy decoding, a device draw where
    /// the backend samples (taking the draw from the sampler's RNG now, as sampling the logits
    /// later would), else the logits.
    /// A constrained generation always takes the logits: the mask is applied on the host.
    fn ask(sampler: &mut Sampler, model: &Model<B>, history: &[u32], constrained: bool) -> Ask {
        if constrained {
            return Ask::Logits;
        }
        if sampler.params().is_plain_greedy() {
            return Ask::Argmax;
        }
        if model.samples_on_device()
            && let Some(plan) = sampler.device_sampling(history)
        {
            return Ask::Sample(plan);
        }
        Ask::Logits
    }

    fn prefill(&mut self) -> Result<Next> {
        let s = &mut *self.session;
        // Reuse the longest cached prefix, but always run at least the last prompt token.
        let common = s.cached.iter().zip(&self.history).take_while(|(a, b)| a == b).count();
        let reuse = common.min(self.history.len() - 1);
        s.cached.truncate(reuse);
        let t = Instant::now();
        let ask = Self::ask(&mut self.sampler, s.model, &self.history, self.options.constraint.is_some());
        let next = s.forward(&self.history[reuse..], ask)?;
        self.prefill_time = t.elapsed();
        self.prefilled = self.history.len() - reuse;
        Ok(next)
    }

    fn finish(&mut self, finish: FinishReason) {
        if finish != FinishReason::StopString {
            let rest = self.stop.flush();
            if !rest.is_empty() {
                self.queue.push_back(Event::Text(rest));
            }
        }
        let first = self.first_token.unwrap_or_else(Instant::now);
        let decode_steps = self.generated.len().saturating_sub(1) as f64;
        let decode_time = first.elapsed().as_secs_f64();
        let summary = Summary {
            finish,
            prompt_tokens: self.prompt_len,
            prefilled_tokens: self.prefilled,
            completion_tokens: self.generated.len(),
            tokens: self.generated.clone(),
            time_to_first_token: first.duration_since(self.started),
            prefill_tokens_per_s: self.prefilled as f64 / self.prefill_time.as_secs_f64().max(1e-9),
            decode_tokens_per_s: if decode_steps > 0.0 { decode_steps / decode_time.max(1e-9) } else { 0.0 },
            speculation: self.speculation.as_ref().map(|s| s.stats),
        };
        self.queue.push_back(Event::Done(summary));
        self.done = true;
    }

    /// One step: sample a token from the pending logits, queue its text, run it if more are needed.
    fn step(&mut self) -> Result<()> {
        let id = match self.ready.pop_front() {
            Some(id) => id,
            None => {
                let pending = match self.pending.take() {
                    Some(p) => p,
                    None => self.prefill()?,
                };
                if self.options.max_tokens == 0 {
                    self.finish(FinishReason::MaxTokens);
                    return Ok(());
                }
                match pending {
                    Next::Logits(mut logits) => {
                        if let Some(constraint) = &mut self.options.constraint {
                            constraint.mask(&mut logits)?;
                        }
                        self.sampler.sample(&mut logits, &self.history)
                    }
                    Next::Token(id) => id,
                }
            }
        };
        if self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
        let tok = self.session.tokenizer;
        if !self.options.ignore_eos && tok.ends_generation(id, self.options.harmony) {
            self.finish(FinishReason::Eos);
            return Ok(());
        }
        self.generated.push(id);
        self.history.push(id);
        let answer = match &mut self.harmony {
            None => self.stream.push(tok, id)?.into_iter().collect(),
            Some(harmony) => {
                let mut answer = Vec::new();
                for piece in harmony.push(tok, id)? {
                    match piece {
                        OutputPiece::Answer(text) => answer.push(text),
                        OutputPiece::Reasoning(text) | OutputPiece::ToolArguments { text, .. } => {
                            self.queue.push_back(Event::Reasoning(text))
                        }
                        OutputPiece::ToolCall { name, .. } => {
                            self.queue.push_back(Event::Reasoning(format!("\n[call {name}] ")))
                        }
                    }
                }
                answer
            }
        };
        for text in answer {
            let (ready, hit) = self.stop.push(&text);
            if !ready.is_empty() {
                self.queue.push_back(Event::Text(ready));
            }
            if hit {
                self.finish(FinishReason::StopString);
                return Ok(());
            }
        }
        let complete = match &mut self.options.constraint {
            Some(constraint) => constraint.accept(id)?,
            None => false,
        };
        if complete {
            self.finish(FinishReason::GrammarComplete);
        } else if self.generated.len() >= self.options.max_tokens {
            self.finish(FinishReason::MaxTokens);
        } else if !self.ready.is_empty() {
            // A verified draft's next token is known, and `id` is in the cache.
        } else if self.session.cached.len() >= self.session.capacity {
            // Every position holds a token: the one just sampled has no room to be run.
            self.finish(FinishReason::ContextEnd);
        } else {
            self.advance(id)?;
        }
        Ok(())
    }

    /// Runs `id` (just emitted, not yet in the cache): with a draft after it where the session
    /// speculates and the drafter has one, else alone.
    fn advance(&mut self, id: u32) -> Result<()> {
        let Some(mut spec) = self.speculation.take() else {
            let constrained = self.options.constraint.is_some();
            let ask = Self::ask(&mut self.sampler, self.session.model, &self.history, constrained);
            self.pending = Some(self.session.forward(&[id], ask)?);
            return Ok(());
        };
        let result = self.advance_speculating(id, &mut spec);
        self.speculation = Some(spec);
        result
    }

    fn advance_speculating(&mut self, id: u32, spec: &mut Speculation<'_>) -> Result<()> {
        let started = Instant::now();
        let s = &mut *self.session;
        // Positions after `id`'s, and tokens wanted after the pass's own next token.
        let room = speculative::draft_room(&s.model.config, s.cached.len(), s.capacity);
        let wanted = self.options.max_tokens - self.generated.len() - 1;
        spec.draft(&self.history, room.min(wanted), s.model.config.vocab)?;
        if !self.options.ignore_eos {
            spec.end_at(|t| s.tokenizer.ends_generation(t, self.options.harmony));
        }
        if spec.drafted().is_empty() {
            let ask = Self::ask(&mut self.sampler, s.model, &self.history, self.options.constraint.is_some());
            self.pending = Some(s.forward(&[id], ask)?);
            spec.record_pass(1, started.elapsed().as_secs_f64());
            return Ok(());
        }
        let mut tokens = Vec::with_capacity(1 + spec.drafted().len());
        tokens.push(id);
        tokens.extend_from_slice(spec.drafted());
        let argmax = self.sampler.params().is_plain_greedy();
        let verified = s.verify(&tokens, argmax, &mut self.sampler, &self.history)?;
        self.ready.extend(&spec.drafted()[..verified.accepted]);
        self.ready.push_back(verified.next);
        spec.record_pass(tokens.len(), started.elapsed().as_secs_f64());
        spec.record_verdict(tokens.len() - 1, verified.accepted);
        Ok(())
    }
}

impl<B: Backend> Iterator for Generation<'_, '_, B> {
    type Item = Result<Event>;

    fn next(&mut self) -> Option<Result<Event>> {
        loop {
            if let Some(e) = self.queue.pop_front() {
                return Some(Ok(e));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.step() {
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}

/// Holds back text that may be the start of a stop string, so stop strings split across tokens
/// are found and never printed.
#[derive(Clone, Debug, Default)]
pub struct StopText {
    stops: Vec<String>,
    pending: String,
}

impl StopText {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> StopText {
        StopText { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), pending: String::new() }
    }

    /// Adds `text`; returns the text that is safe to print and whether a stop string was found
    /// (the text before it is returned, the rest dropped).
    pub fn push(&mut self, text: &str) -> (String, bool) {
        self.pending.push_str(text);
        if let Some(at) = self.stops.iter().filter_map(|s| self.pending.find(s.as_str())).min() {
            let out = self.pending[..at].to_string();
            self.pending.clear();
            return (out, true);
        }
        // The earliest position from which the rest could still grow into a stop string.
        let hold = self
            .pending
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&self.pending[i..])))
            .unwrap_or(self.pending.len());
        let out = self.pending[..hold].to_string();
        self.pending.drain(..hold);
        (out, false)
    }

    /// The held-back text (at the end of generation).
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_across_pieces() {
        let mut s = StopText::new(vec!["</end>".into(), "STOP".into()]);
        assert_eq!(s.push("Hello <"), ("Hello ".to_string(), false));
        assert_eq!(s.push("/e"), (String::new(), false));
        // Not a stop string after all: the held text comes out.
        assert_eq!(s.push("x>"), ("</ex>".to_string(), false));
        assert_eq!(s.push("a ST"), ("a ".to_string(), false));
        assert_eq!(s.push("OP and more"), (String::new(), true));
    }

    #[test]
    fn stop_text_flushes_and_ignores_empty() {
        let mut s = StopText::new(vec![String::new(), "ab".into()]);
        assert_eq!(s.push("xa"), ("x".to_string(), false));
        assert_eq!(s.flush(), "a");
        let mut none = StopText::new(Vec::new());
        assert_eq!(none.push("anything"), ("anything".to_string(), false));
    }

    #[test]
    fn finish_reason_names() {
        assert_eq!(FinishReason::Eos.as_str(), "stop");
        assert_eq!(FinishReason::StopString.as_str(), "stop");
        assert_eq!(FinishReason::MaxTokens.as_str(), "length");
        assert_eq!(FinishReason::ContextEnd.as_str(), "length");
    }
}
