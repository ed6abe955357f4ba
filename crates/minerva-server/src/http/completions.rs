//! `POST /v1/completions`: text in, text out, as `minerva run` without `--chat`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::Response;

use super::chat::{head, new_id};
use super::json::ApiJson;
use super::respond::{self, ChoiceResult, ChunkWriter};
use super::{AppState, Tokens, unix_now};
use crate::api::request::{CompletionRequest, Prompt};
use crate::api::response::{Completion, CompletionChoice, CompletionLogprobs, Usage};
use crate::api::{check_common, check_top_logprobs, fit_context};
use crate::engine::{Delta, Finish, GenerationRequest, TokenLogprob};
use crate::error::ApiError;

/// Most prompts in one request.
const MAX_PROMPTS: usize = 16;

/// `texts` tokenized (with BOS as the model adds it) on a blocking thread.
async fn encode_off_the_workers(
    info: &Arc<crate::engine::ModelInfo>,
    texts: Vec<String>,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let info = info.clone();
    let task = tokio::task::spawn_blocking(move || {
        texts
            .iter()
            .map(|t| info.tokenizer.encode(t, true).map_err(|e| ApiError::invalid("prompt", e.to_string())))
            .collect::<Result<Vec<_>, _>>()
    });
    task.await.map_err(|e| ApiError::internal(format!("tokenizing the prompt: {e}")))?
}

pub(crate) async fn handle(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let info = state.model()?;
    state.check_model(req.common.model.as_deref())?;
    req.refuse_unsupported()?;
    let vocab = info.tokenizer.vocab_size();
    let checked = check_common(&req.common, req.common.max_tokens, vocab, info.slots)?;
    let logprobs = req.logprobs.map(|t| check_top_logprobs("logprobs", Some(t))).transpose()?;
    let prompts: Vec<Vec<u32>> = match req.prompt {
        Prompt::Tokens(ids) => vec![ids],
        Prompt::TokenLists(lists) => lists,
        // Tokenizing runs on a blocking thread: long prompts take the async workers' time.
        Prompt::Text(t) => encode_off_the_workers(&info, vec![t]).await?,
        Prompt::Texts(ts) if ts.len() <= MAX_PROMPTS => encode_off_the_workers(&info, ts).await?,
        Prompt::Texts(ts) => vec![Vec::new(); ts.len()],
    };
    if prompts.is_empty() || prompts.len() > MAX_PROMPTS {
        return Err(ApiError::invalid("prompt", format!("give from 1 to {MAX_PROMPTS} prompts")));
    }
    for (i, p) in prompts.iter().enumerate() {
        if let Some(&bad) = p.iter().find(|&&t| t as usize >= vocab) {
            return Err(ApiError::invalid(
                "prompt",
                format!("prompt {i}: token {bad} is outside the vocabulary of {vocab}"),
            ));
        }
        if p.is_empty() {
            return Err(ApiError::invalid("prompt", format!("prompt {i} is empty")));
        }
    }
    let constraint = state.constraint(&info, &req.common).await?;
    let n = checked.n;
    let mut receivers = Vec::with_capacity(prompts.len());
    let mut prompt_tokens = 0;
    for p in &prompts {
        let max_tokens = fit_context(info.ctx_size, p.len(), checked.max_tokens)?;
        prompt_tokens += p.len();
        receivers.push(state.engine.submit(GenerationRequest {
            prompt: p.clone(),
            n,
            sampling: checked.sampling.clone(),
            max_tokens,
            stop: checked.stop.clone(),
            logprobs,
            output: crate::engine::OutputFormat::Plain,
            constraint: constraint.clone(),
            deadline: Instant::now() + state.config.request_timeout,
            speculative: req.common.speculative.unwrap_or(true),
        })?);
    }
    let choices = n * prompts.len();
    let events = respond::merge(receivers, n);
    let writer = CompletionWriter { id: new_id("cmpl-"), model: state.config.model_name.clone(), created: unix_now() };
    if checked.stream {
        return Ok(respond::sse(
            state.clone(),
            "/v1/completions",
            started,
            events,
            writer,
            choices,
            prompt_tokens,
            checked.include_usage,
        ));
    }
    let results = respond::collect(events, choices).await?;
    let completion_tokens = results.iter().map(|r| r.tokens).sum();
    let cached_tokens = results.iter().map(|r| r.cached).sum();
    let wants_logprobs = logprobs.is_some();
    let body = writer.completion(
        results.into_iter().enumerate().map(|(i, r)| choice(i, r, wants_logprobs)).collect(),
        Some(Some(Usage::new(prompt_tokens, completion_tokens, cached_tokens))),
    );
    Ok(respond::json_with_tokens(body, Tokens { prompt: prompt_tokens, completion: completion_tokens }))
}

/// The legacy logprobs of `tokens`, offsets counted from `offset` characters.
fn legacy_logprobs(tokens: Vec<TokenLogprob>, mut offset: usize) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for t in tokens {
        out.text_offset.push(offset);
        offset += t.token.chars().count();
        out.token_logprobs.push(t.logprob);
        out.top_logprobs.push(t.top.into_iter().map(|a| (a.token, serde_json::Value::from(a.logprob))).collect());
        out.tokens.push(t.token);
    }
    out
}

fn choice(index: usize, r: ChoiceResult, logprobs: bool) -> CompletionChoice {
    let finish_reason = Some(r.finish_reason());
    CompletionChoice {
        index,
        logprobs: logprobs.then(|| legacy_logprobs(r.logprobs, 0)),
        text: r.content,
        finish_reason,
    }
}

/// `text_completion` bodies and chunks.
struct CompletionWriter {
    id: String,
    model: String,
    created: u64,
}

impl CompletionWriter {
    fn completion(&self, choices: Vec<CompletionChoice>, usage: Option<Option<Usage>>) -> Completion {
        Completion { head: head(self.id.clone(), "text_completion", self.created, self.model.clone()), choices, usage }
    }

    fn chunk(&self, choices: Vec<CompletionChoice>, usage: Option<Option<Usage>>) -> serde_json::Value {
        serde_json::to_value(self.completion(choices, usage)).unwrap_or_default()
    }
}

impl ChunkWriter for CompletionWriter {
    fn opening(&mut self, _choices: usize) -> Vec<serde_json::Value> {
        Vec::new()
    }

    fn delta(&mut self, choice: usize, d: Delta) -> Option<serde_json::Value> {
        if d.content.is_empty() && d.logprobs.is_empty() {
            return None;
        }
        let logprobs = (!d.logprobs.is_empty()).then(|| legacy_logprobs(d.logprobs, 0));
        Some(self.chunk(vec![CompletionChoice { index: choice, text: d.content, logprobs, finish_reason: None }], None))
    }

    fn finish(&mut self, choice: usize, reason: Finish) -> serde_json::Value {
        let c = CompletionChoice {
            index: choice,
            text: String::new(),
            logprobs: None,
            finish_reason: Some(reason.as_str()),
        };
        self.chunk(vec![c], None)
    }

    fn usage(&mut self, usage: Usage) -> serde_json::Value {
        self.chunk(Vec::new(), Some(Some(usage)))
    }
}
