//! `POST /v1/chat/completions`.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::Response;

use super::json::ApiJson;
use super::respond::{self, ChoiceResult, ChunkWriter};
use super::{AppState, Tokens, unix_now};
use crate::api::request::ChatRequest;
use crate::api::response::{
    AssistantMessage, ChatChoice, ChatChunk, ChatChunkChoice, ChatCompletion, ChatDelta, ChatLogprobs, FunctionCallOut,
    Head, TokenLogprobOut, ToolCallOut, TopLogprobOut, Usage,
};
use crate::api::tools::{GrammarPlan, ToolChoice};
use crate::api::{check_common, check_top_logprobs, fit_context, tools};
use crate::engine::{ChatFormat, Delta, Finish, GenerationRequest, ModelInfo, OutputFormat, TokenLogprob};
use crate::error::ApiError;
use crate::prompt;
use minerva_generate::ThinkStart;

/// A fresh id with `prefix` (`chatcmpl-`, `cmpl-`, `call_`): 24 hex digits from the process's
/// random hasher keys.
pub(crate) fn new_id(prefix: &str) -> String {
    let a = RandomState::new().hash_one(Instant::now());
    let b = RandomState::new().hash_one(a);
    format!("{prefix}{:016x}{:08x}", a, b as u32)
}

/// The fields every response and chunk starts with; `system_fingerprint` names this build.
pub(crate) fn head(id: String, object: &'static str, created: u64, model: String) -> Head {
    Head { id, object, created, model, system_fingerprint: format!("fp_minerva_{}", env!("CARGO_PKG_VERSION")) }
}

/// Today's date (UTC) for Harmony's system message.
fn today() -> String {
    minerva_generate::template::strftime("%Y-%m-%d", unix_now() as i64)
}

pub(crate) async fn handle(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let run = start(&state, req).await?;
    let (n, prompt_tokens) = (run.n, run.prompt_tokens);
    let id = new_id("chatcmpl-");
    let model = state.config.model_name.clone();
    if run.checked.stream {
        let writer = ChatWriter { id, model, created: unix_now(), tool_calls: vec![0; n] };
        return Ok(respond::sse(
            state.clone(),
            "/v1/chat/completions",
            started,
            run.events,
            writer,
            n,
            prompt_tokens,
            run.checked.include_usage,
        ));
    }
    let results = respond::collect(run.events, n).await?;
    let completion_tokens = results.iter().map(|r| r.tokens).sum();
    let cached_tokens = results.iter().map(|r| r.cached).sum();
    let logprobs = run.logprobs.is_some();
    let body = ChatCompletion {
        head: head(id, "chat.completion", unix_now(), model),
        choices: results.into_iter().enumerate().map(|(index, r)| choice(index, r, logprobs)).collect(),
        usage: Usage::new(prompt_tokens, completion_tokens, cached_tokens),
    };
    Ok(respond::json_with_tokens(body, Tokens { prompt: prompt_tokens, completion: completion_tokens }))
}

/// A chat request checked, prompted and submitted to the engine.
pub(crate) struct Started {
    /// The engine's events for its choices.
    pub(crate) events: respond::Events,
    /// Its checked sampling and limit fields.
    pub(crate) checked: crate::api::Checked,
    /// Choices.
    pub(crate) n: usize,
    /// Tokens in the prompt.
    pub(crate) prompt_tokens: usize,
    /// The alternatives per position when log-probabilities were asked for.
    pub(crate) logprobs: Option<usize>,
}

/// Checks `req`, renders and tokenizes its prompt, compiles its grammar and submits it: what
/// `/v1/chat/completions` and `/v1/responses` share.
pub(crate) async fn start(state: &AppState, req: ChatRequest) -> Result<Started, ApiError> {
    let info = state.model()?;
    state.check_model(req.common.model.as_deref())?;
    req.refuse_unsupported()?;
    let tool_choice = tools::tool_choice(&req)?;
    let max_tokens = req.max_completion_tokens.or(req.common.max_tokens);
    let checked = check_common(&req.common, max_tokens, info.tokenizer.vocab_size(), info.slots)?;
    let speculative = req.common.speculative.unwrap_or(true);
    let logprobs = match (req.logprobs, req.top_logprobs) {
        (true, top) => Some(check_top_logprobs("top_logprobs", top)?),
        (false, Some(_)) => return Err(ApiError::invalid("top_logprobs", "`top_logprobs` needs `logprobs: true`")),
        (false, None) => None,
    };
    let tools_on = req.tools.as_deref().is_some_and(|t| !t.is_empty()) && tool_choice != ToolChoice::None;
    let structured = crate::api::structured::grammar_of(&req.common)?;
    if let (true, Some((param, _))) = (tools_on, &structured) {
        return Err(ApiError::invalid(
            param.clone(),
            "give `tools` (with a `tool_choice` other than `none`) or an output format, not both",
        ));
    }
    let (ids, output, plan) = {
        let info = info.clone();
        let task = tokio::task::spawn_blocking(move || prepare(&info, &req, &tool_choice, tools_on, structured));
        task.await.map_err(|e| ApiError::internal(format!("preparing the prompt: {e}")))??
    };
    let max_tokens = fit_context(info.ctx_size, ids.len(), checked.max_tokens)?;
    let constraint = match plan {
        Some(plan) => Some(state.compile(&info, plan).await?),
        None => None,
    };
    let prompt_tokens = ids.len();
    let n = checked.n;
    let events = state.engine.submit(GenerationRequest {
        constraint,
        prompt: ids,
        n,
        sampling: checked.sampling.clone(),
        max_tokens,
        stop: checked.stop.clone(),
        logprobs,
        output,
        deadline: Instant::now() + state.config.request_timeout,
        speculative,
    })?;
    Ok(Started { events: respond::merge(vec![events], n), checked, n, prompt_tokens, logprobs })
}

/// The request's prompt ids, how its output is split, and the grammar it is held to: templating
/// and tokenizing, which [`handle`] runs on a blocking thread (a long conversation takes
/// milliseconds the async workers should not spend).
fn prepare(
    info: &ModelInfo,
    req: &ChatRequest,
    tool_choice: &ToolChoice,
    tools_on: bool,
    structured: Option<(String, minerva_generate::Grammar)>,
) -> Result<(Vec<u32>, OutputFormat, Option<GrammarPlan>), ApiError> {
    let tools = req.tools.as_deref().unwrap_or_default();
    let (text, output, plan) = match &info.chat {
        ChatFormat::Template(chat) => {
            let text = prompt::render_template(chat, req, tools_on)?;
            let think = ThinkStart::of(Some(&chat.source), &text);
            let format = tools_on.then_some(chat.tool_format);
            let plan = match structured {
                Some((field, grammar)) => Some(GrammarPlan { field, grammar, trigger: None }),
                None => tools::text_call_plan(
                    chat.tool_format,
                    tools,
                    tool_choice,
                    req.parallel_tool_calls.unwrap_or(true),
                    &info.tokenizer,
                )?,
            };
            (text, OutputFormat::Split { tools: format, think }, plan.map(|p| p.after_reasoning(think)))
        }
        ChatFormat::Harmony => {
            let text = prompt::render_harmony(req, &today())?;
            let plan = match (tools::harmony_call_grammar(tools, tool_choice)?, structured) {
                (Some(grammar), _) => Some(GrammarPlan { field: "tool_choice".into(), grammar, trigger: None }),
                (None, Some((field, grammar))) => {
                    let grammar =
                        tools::harmony_final_grammar(&grammar).map_err(|why| ApiError::invalid(field.clone(), why))?;
                    Some(GrammarPlan { field, grammar, trigger: None })
                }
                (None, None) => None,
            };
            (text, OutputFormat::Harmony, plan)
        }
        ChatFormat::None => {
            return Err(ApiError::invalid(
                "messages",
                "this model has no chat template; use /v1/completions with a prompt",
            ));
        }
    };
    // The template writes BOS and the other specials itself (as `minerva run --chat`).
    let ids = info.tokenizer.encode(&text, false).map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    Ok((ids, output, plan))
}

fn logprob_out(t: TokenLogprob) -> TokenLogprobOut {
    TokenLogprobOut {
        bytes: t.bytes,
        token: t.token,
        logprob: t.logprob,
        top_logprobs: t
            .top
            .into_iter()
            .map(|a| TopLogprobOut { bytes: a.bytes, token: a.token, logprob: a.logprob })
            .collect(),
    }
}

fn choice(index: usize, r: ChoiceResult, logprobs: bool) -> ChatChoice {
    let finish_reason = r.finish_reason();
    let tool_calls = (!r.tool_calls.is_empty()).then(|| {
        r.tool_calls
            .into_iter()
            .map(|(name, arguments)| ToolCallOut {
                index: None,
                id: Some(new_id("call_")),
                kind: Some("function"),
                function: FunctionCallOut { name: Some(name), arguments },
            })
            .collect()
    });
    ChatChoice {
        index,
        message: AssistantMessage {
            role: "assistant",
            content: (tool_calls.is_none() || !r.content.is_empty()).then_some(r.content),
            reasoning_content: (!r.reasoning.is_empty()).then_some(r.reasoning),
            tool_calls,
        },
        logprobs: logprobs.then(|| ChatLogprobs { content: r.logprobs.into_iter().map(logprob_out).collect() }),
        finish_reason,
    }
}

/// `chat.completion.chunk`s.
struct ChatWriter {
    id: String,
    model: String,
    created: u64,
    /// Tool calls started per choice (their stream `index`).
    tool_calls: Vec<usize>,
}

impl ChatWriter {
    fn chunk(&self, choices: Vec<ChatChunkChoice>, usage: Option<Option<Usage>>) -> serde_json::Value {
        let head = head(self.id.clone(), "chat.completion.chunk", self.created, self.model.clone());
        let chunk = ChatChunk { head, choices, usage };
        serde_json::to_value(chunk).unwrap_or_default()
    }
}

impl ChunkWriter for ChatWriter {
    fn opening(&mut self, choices: usize) -> Vec<serde_json::Value> {
        (0..choices)
            .map(|index| {
                let delta = ChatDelta { role: Some("assistant"), content: Some(String::new()), ..ChatDelta::default() };
                self.chunk(vec![ChatChunkChoice { index, delta, logprobs: None, finish_reason: None }], None)
            })
            .collect()
    }

    fn delta(&mut self, choice: usize, d: Delta) -> Option<serde_json::Value> {
        let has_logprobs = !d.logprobs.is_empty();
        let tool_calls: Vec<ToolCallOut> = d
            .tool_calls
            .into_iter()
            .map(|call| {
                let first = call.name.is_some();
                if first {
                    self.tool_calls[choice] += 1;
                }
                ToolCallOut {
                    index: Some(call.index),
                    id: first.then(|| new_id("call_")),
                    kind: first.then_some("function"),
                    function: FunctionCallOut { name: call.name, arguments: call.arguments },
                }
            })
            .collect();
        let delta = ChatDelta {
            role: None,
            content: (!d.content.is_empty()).then_some(d.content),
            reasoning_content: (!d.reasoning.is_empty()).then_some(d.reasoning),
            tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
        };
        if delta == ChatDelta::default() && !has_logprobs {
            return None;
        }
        let logprobs =
            has_logprobs.then(|| ChatLogprobs { content: d.logprobs.into_iter().map(logprob_out).collect() });
        Some(self.chunk(vec![ChatChunkChoice { index: choice, delta, logprobs, finish_reason: None }], None))
    }

    fn finish(&mut self, choice: usize, reason: Finish) -> serde_json::Value {
        let c = ChatChunkChoice {
            index: choice,
            delta: ChatDelta::default(),
            logprobs: None,
            finish_reason: Some(reason.as_str()),
        };
        self.chunk(vec![c], None)
    }

    fn usage(&mut self, usage: Usage) -> serde_json::Value {
        self.chunk(Vec::new(), Some(Some(usage)))
    }
}
