//! One choice being generated: its sampler, and the path from a sampled token id to the text a
//! client sees (whole UTF-8 characters, stop strings held back, Harmony channels apart).

use std::time::Instant;

use minerva_generate::{HarmonyOutput, OutputPiece, Sampler, StopText, TextStream, Tokenizer, ToolOutput};

use super::OutputFormat;

use crate::error::ApiError;

/// Why a choice ended, as OpenAI's `finish_reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// End of sequence, or a stop string.
    Stop,
    /// `max_tokens`, the context, or the request's time limit.
    Length,
    /// The model called a tool.
    ToolCalls,
}

impl Finish {
    /// `stop`, `length` or `tool_calls`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::ToolCalls => "tool_calls",
        }
    }
}

/// An alternative token at a position.
#[derive(Clone, Debug, PartialEq)]
pub struct TopLogprob {
    /// Its text (U+FFFD where the token holds part of a character).
    pub token: String,
    /// Its bytes, exactly (a part of a character too).
    pub bytes: Vec<u8>,
    /// Its log-probability.
    pub logprob: f32,
}

/// The log-probability of a generated token, with the most likely alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    /// The token's text (U+FFFD where the token holds part of a character).
    pub token: String,
    /// Its bytes, exactly (a part of a character too).
    pub bytes: Vec<u8>,
    /// Its log-probability under the model (before sampling settings).
    pub logprob: f32,
    /// The most likely tokens at this position, most likely first.
    pub top: Vec<TopLogprob>,
}

/// Part of a tool call: the first delta of a call carries its name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolDelta {
    /// Which call of the choice (0, 1, …).
    pub index: usize,
    /// The function's name (first delta of a call only).
    pub name: Option<String>,
    /// More of the JSON arguments.
    pub arguments: String,
}

/// New output of one choice.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Delta {
    /// Answer text (`content`).
    pub content: String,
    /// Reasoning text (Harmony `analysis`, `<think>`; sent as `reasoning_content`).
    pub reasoning: String,
    /// Tool-call pieces.
    pub tool_calls: Vec<ToolDelta>,
    /// Log-probabilities of the tokens this delta covers.
    pub logprobs: Vec<TokenLogprob>,
}

impl Delta {
    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.content.is_empty() && self.reasoning.is_empty() && self.tool_calls.is_empty() && self.logprobs.is_empty()
    }
}

/// Output state of one choice.
pub(super) struct Output {
    stream: TextStream,
    stop: StopText,
    split: Split,
    /// Tokens whose text went to the reasoning (the Responses API's `reasoning_tokens`).
    reasoning_tokens: usize,
}

/// How the text of a choice is split.
enum Split {
    Plain,
    Harmony(Box<HarmonyOutput>),
    Text(Box<ToolOutput>),
}

impl Output {
    pub(super) fn new(stop: Vec<String>, format: OutputFormat) -> Output {
        let split = match format {
            OutputFormat::Plain => Split::Plain,
            OutputFormat::Harmony => Split::Harmony(Box::new(HarmonyOutput::new())),
            OutputFormat::Split { tools, think } => Split::Text(Box::new(ToolOutput::new(tools, think))),
        };
        Output { stream: TextStream::new(), stop: StopText::new(stop), split, reasoning_tokens: 0 }
    }

    /// Adds answer text through the stop strings; `Some(Stop)` when one ended the choice.
    fn answer(&mut self, text: &str, delta: &mut Delta) -> Option<Finish> {
        let (ready, hit) = self.stop.push(text);
        delta.content.push_str(&ready);
        hit.then_some(Finish::Stop)
    }

    /// Routes split pieces into `delta`; `Some(Stop)` when a stop string in the answer ended it.
    fn pieces(&mut self, pieces: Vec<OutputPiece>, delta: &mut Delta) -> Option<Finish> {
        for piece in pieces {
            match piece {
                OutputPiece::Answer(text) => {
                    if let Some(finish) = self.answer(&text, delta) {
                        return Some(finish);
                    }
                }
                OutputPiece::Reasoning(text) => delta.reasoning.push_str(&text),
                OutputPiece::ToolCall { index, name } => {
                    delta.tool_calls.push(ToolDelta { index, name: Some(name), arguments: String::new() })
                }
                OutputPiece::ToolArguments { index, text } => match delta.tool_calls.last_mut() {
                    Some(call) if call.index == index => call.arguments.push_str(&text),
                    _ => delta.tool_calls.push(ToolDelta { index, name: None, arguments: text }),
                },
            }
        }
        None
    }

    /// Adds token `id` to `delta`; returns `Some(finish)` when a stop string or a Harmony tool
    /// call (`<|call|>`) ended the choice.
    pub(super) fn push(&mut self, tok: &Tokenizer, id: u32, delta: &mut Delta) -> Result<Option<Finish>, ApiError> {
        let reasoning_before = delta.reasoning.len();
        let finish = self.push_split(tok, id, delta);
        self.reasoning_tokens += usize::from(delta.reasoning.len() > reasoning_before);
        finish
    }

    /// Tokens whose text went to the reasoning so far.
    pub(super) fn reasoning_tokens(&self) -> usize {
        self.reasoning_tokens
    }

    fn push_split(&mut self, tok: &Tokenizer, id: u32, delta: &mut Delta) -> Result<Option<Finish>, ApiError> {
        let err = |e: minerva_generate::GenerateError| ApiError::internal(format!("detokenizing: {e}"));
        match &mut self.split {
            Split::Plain => Ok(match self.stream.push(tok, id).map_err(err)? {
                Some(text) => self.answer(&text, delta),
                None => None,
            }),
            Split::Harmony(harmony) => {
                let pieces = harmony.push(tok, id).map_err(err)?;
                let called = harmony.ended_in_call();
                let stopped = self.pieces(pieces, delta);
                Ok(stopped.or(called.then_some(Finish::ToolCalls)))
            }
            Split::Text(split) => {
                // Markers such as Mistral's `[TOOL_CALLS]` are special tokens, which the
                // detokenizer skips: with tools, the splitter reads their text (without, special
                // tokens stay out of the answer, as in a plain output).
                let text = if split.has_tools() && tok.is_special(id) && !tok.is_stop(id) {
                    tok.id_to_token(id)
                } else {
                    self.stream.push(tok, id).map_err(err)?
                };
                let pieces = match text {
                    Some(text) => split.push(&text),
                    None => return Ok(None),
                };
                Ok(self.pieces(pieces, delta))
            }
        }
    }

    /// Releases what is held back (a possible stop string's or marker's start) at the end.
    pub(super) fn flush(&mut self, delta: &mut Delta) {
        if let Split::Text(split) = &mut self.split {
            let pieces = split.finish();
            if self.pieces(pieces, delta).is_some() {
                return;
            }
        }
        delta.content.push_str(&self.stop.flush());
    }

    /// Whether the output is split as Harmony.
    pub(super) fn is_harmony(&self) -> bool {
        matches!(self.split, Split::Harmony(_))
    }

    /// Whether the choice called a tool.
    pub(super) fn called_tool(&self) -> bool {
        match &self.split {
            Split::Harmony(h) => h.tool_calls() > 0,
            Split::Text(t) => t.tool_calls() > 0,
            Split::Plain => false,
        }
    }
}

/// A choice being generated in a KV-cache slot.
pub(super) struct Sequence {
    /// The request it belongs to (index into the scheduler's requests).
    pub(super) request: u64,
    pub(super) choice: usize,
    /// When it was admitted (a counter): the newest is preempted first.
    pub(super) order: u64,
    /// Its cache slot (its block table's place), while it runs.
    pub(super) slot: usize,
    /// The KV blocks of its positions, in order (`blocks[i]`: positions `i·B..(i+1)·B`).
    pub(super) blocks: Vec<u32>,
    /// Leading blocks whose content the pool knows (`BlockPool::note_full`), and the content id
    /// of the last.
    pub(super) noted: (usize, u64),
    /// `blocks` changed since the backend's table was last set.
    pub(super) table_changed: bool,
    /// Prompt and generated ids: what the penalties see, and what the cache holds up to `fed`.
    pub(super) tokens: Vec<u32>,
    pub(super) prompt_len: usize,
    /// Tokens run as a prompt before it samples: `prompt_len`, or after a preemption every
    /// token it had (its cache is rebuilt, then it samples its next one).
    pub(super) prefill_to: usize,
    /// Tokens already run through the model (their keys and values in its blocks).
    pub(super) fed: usize,
    /// Prompt tokens the cache held from an earlier request (not run again).
    pub(super) cached: usize,
    pub(super) sampler: Sampler,
    /// The grammar its output is held to, if any: masks its logits before sampling.
    pub(super) constraint: Option<minerva_generate::Constraint>,
    pub(super) output: Output,
    pub(super) max_tokens: usize,
    pub(super) logprobs: Option<usize>,
    pub(super) deadline: Instant,
    pub(super) received: Instant,
    pub(super) last_token_at: Option<Instant>,
    /// A choice after the first of its request: it waits for choice 0's prefill and starts from
    /// its blocks, shared.
    pub(super) waits_for_leader: bool,
    /// Its drafter and the measurements that size its drafts, where it may speculate.
    pub(super) speculation: Option<minerva_generate::Speculation<'static>>,
    /// Drafted tokens at the end of `tokens` during a step (taken off before it samples).
    pub(super) drafted: usize,
}

impl Sequence {
    /// Tokens generated so far.
    pub(super) fn generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// Whether the whole prompt (or what a preemption left to run again) has been run.
    pub(super) fn prefilled(&self) -> bool {
        self.fed >= self.prefill_to
    }
}

/// `logprob` of `id` and the `top` most likely tokens, from raw logits.
pub(super) fn logprobs(tok: &Tokenizer, logits: &[f32], id: u32, top: usize) -> TokenLogprob {
    let max = logits.iter().copied().filter(|v| !v.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().filter(|v| !v.is_nan()).map(|&v| f64::from(v - max).exp()).sum();
    let log_z = f64::from(max) + sum.ln();
    let lp = |v: f32| (f64::from(v) - log_z) as f32;
    let mut best: Vec<u32> = Vec::with_capacity(top + 1);
    if top > 0 {
        // A running top-`top` list: one pass over the vocabulary.
        for (i, &v) in logits.iter().enumerate() {
            if v.is_nan() {
                continue;
            }
            let pos = best.partition_point(|&b| logits[b as usize] >= v);
            if pos < top {
                best.insert(pos, i as u32);
                best.truncate(top);
            }
        }
    }
    let bytes = |id: u32| tok.token_bytes().get(id).to_vec();
    TokenLogprob {
        token: tok.piece(id),
        bytes: bytes(id),
        logprob: logits.get(id as usize).map_or(f32::NEG_INFINITY, |&v| lp(v)),
        top: best
            .iter()
            .map(|&b| TopLogprob { token: tok.piece(b), bytes: bytes(b), logprob: lp(logits[b as usize]) })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiny GPT-OSS fixture's tokenizer: Harmony's special tokens, header words, ` wN` words
    /// (`fixtures/gpt_oss/make_harmony_tokenizer.py`).
    fn harmony_tokenizer() -> Tokenizer {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/gpt_oss/hf");
        Tokenizer::from_dir(&dir).unwrap()
    }

    fn ids(tok: &Tokenizer, pieces: &[&str]) -> Vec<u32> {
        pieces.iter().map(|p| tok.token_to_id(p).unwrap_or_else(|| panic!("{p}"))).collect()
    }

    fn run(tok: &Tokenizer, pieces: &[&str], stop: Vec<String>) -> (Delta, Option<Finish>) {
        let mut out = Output::new(stop, OutputFormat::Harmony);
        let mut all = Delta::default();
        for id in ids(tok, pieces) {
            let mut d = Delta::default();
            let finish = out.push(tok, id, &mut d).unwrap();
            all.content.push_str(&d.content);
            all.reasoning.push_str(&d.reasoning);
            all.tool_calls.extend(d.tool_calls);
            if finish.is_some() {
                return (all, finish);
            }
        }
        (all, None)
    }

    const ANALYSIS: [&str; 3] = ["<|channel|>", "analysis", "<|message|>"];
    const FINAL: [&str; 5] = ["<|start|>", "assistant", "<|channel|>", "final", "<|message|>"];

    #[test]
    fn harmony_reasoning_and_answer_go_apart() {
        let tok = harmony_tokenizer();
        let pieces =
            [&ANALYSIS[..], &[" w20", " w21", "<|end|>"], &FINAL[..], &[" w30", " w31", "<|return|>"]].concat();
        let (d, finish) = run(&tok, &pieces, Vec::new());
        assert_eq!((d.reasoning.as_str(), d.content.as_str(), finish), (" w20 w21", " w30 w31", None));
        // `<|end|>` is an end-of-turn token for other models, not for Harmony; `<|return|>` is.
        let [end, ret] = [ids(&tok, &["<|end|>"])[0], ids(&tok, &["<|return|>"])[0]];
        assert!(tok.is_stop(end) && !tok.ends_generation(end, true) && tok.ends_generation(end, false));
        assert!(tok.ends_generation(ret, true));
    }

    #[test]
    fn harmony_tool_calls_stream_name_then_arguments() {
        let tok = harmony_tokenizer();
        let pieces = [
            "<|channel|>",
            "commentary",
            " to=functions.lookup",
            " ",
            "<|constrain|>",
            "json",
            "<|message|>",
            "{\"q\":",
            " \"w\"}",
            "<|call|>",
        ];
        let (d, finish) = run(&tok, &pieces, Vec::new());
        assert_eq!(finish, Some(Finish::ToolCalls));
        assert_eq!(d.tool_calls[0].name.as_deref(), Some("lookup"));
        let args: String = d.tool_calls.iter().map(|c| c.arguments.as_str()).collect();
        assert_eq!(args, "{\"q\": \"w\"}");
        assert!(d.content.is_empty() && d.reasoning.is_empty());
    }

    #[test]
    fn harmony_stop_strings_apply_to_the_answer_only() {
        let tok = harmony_tokenizer();
        let pieces = [&ANALYSIS[..], &[" w20", " w21", "<|end|>"], &FINAL[..], &[" w20", " w21"]].concat();
        let (d, finish) = run(&tok, &pieces, vec![" w21".into()]);
        assert_eq!((d.reasoning.as_str(), d.content.as_str(), finish), (" w20 w21", " w20", Some(Finish::Stop)));
    }
}
