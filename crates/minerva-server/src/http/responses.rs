//! `POST /v1/responses`, `GET /v1/responses/{id}` and `DELETE /v1/responses/{id}`.
//!
//! A response runs as a chat request ([`super::chat::start`]); one [`Builder`] turns the engine's
//! deltas into output items and the typed stream events, so a streamed response and a whole one
//! hold the same items. Stored responses ([`ResponseStore`]) keep their own turn and a link to
//! the response they continue: a conversation costs memory linear in its length, and
//! `previous_response_id` walks the links back.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};

use super::chat::{self, new_id};
use super::json::ApiJson;
use super::respond::{self, ChoiceResult, Events, StreamLog};
use super::{AppState, LoggedByStream, Tokens, unix_now};
use crate::api::request::ChatMessage;
use crate::api::responses::{
    IncompleteDetails, InputTokensDetails, OutputContent, OutputItem, OutputTokensDetails, ResponseError,
    ResponseObject, ResponseUsage, ResponsesRequest, rename_param,
};
use crate::engine::{Delta, Finish, SeqEvent};
use crate::error::ApiError;

/// Most links `previous_response_id` follows back (a conversation of this many turns).
const MAX_TURNS: usize = 4096;

/// A stored response: itself, the messages of its turn (its input and its output), and the
/// response it continued.
#[derive(Clone)]
struct Stored {
    response: ResponseObject,
    turn: Vec<ChatMessage>,
    previous: Option<String>,
}

/// Responses kept for `previous_response_id` and `GET /v1/responses/{id}`: the last `capacity`
/// used (an LRU; a conversation that goes on keeps its earlier turns fresh), in memory, lost on
/// restart.
pub(crate) struct ResponseStore {
    entries: Option<Mutex<lru::LruCache<String, Stored>>>,
}

impl ResponseStore {
    /// A store of `capacity` responses (0: none is kept).
    pub(crate) fn new(capacity: usize) -> ResponseStore {
        ResponseStore { entries: std::num::NonZeroUsize::new(capacity).map(|c| Mutex::new(lru::LruCache::new(c))) }
    }

    fn lock(&self) -> Option<std::sync::MutexGuard<'_, lru::LruCache<String, Stored>>> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.entries.as_ref().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn put(&self, response: ResponseObject, turn: Vec<ChatMessage>) {
        if let Some(mut entries) = self.lock() {
            let previous = response.previous_response_id.clone();
            entries.put(response.id.clone(), Stored { response, turn, previous });
        }
    }

    fn get(&self, id: &str) -> Option<ResponseObject> {
        self.lock()?.get(id).map(|s| s.response.clone())
    }

    fn remove(&self, id: &str) -> bool {
        self.lock().is_some_and(|mut e| e.pop(id).is_some())
    }

    /// The conversation `id` ends: every turn from the first response on.
    fn conversation(&self, id: &str) -> Result<Vec<ChatMessage>, ApiError> {
        let missing = |which: &str| {
            ApiError::not_found(
                Some("previous_response_id"),
                format!(
                    "Response with id '{which}' not found: it was never stored (`store: false`), or was \
                     dropped from this server's store of recent responses (--responses-store), or the server \
                     restarted."
                ),
            )
        };
        let Some(mut entries) = self.lock() else { return Err(missing(id)) };
        let mut turns = Vec::new();
        let mut next = Some(id.to_string());
        while let Some(at) = next {
            if turns.len() == MAX_TURNS {
                return Err(ApiError::invalid(
                    "previous_response_id",
                    format!("the conversation is longer than {MAX_TURNS} responses"),
                ));
            }
            let stored = entries.get(&at).ok_or_else(|| missing(&at))?;
            turns.push(stored.turn.clone());
            next = stored.previous.clone();
        }
        Ok(turns.into_iter().rev().flatten().collect())
    }
}

/// `POST /v1/responses`.
pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<ResponsesRequest>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    req.refuse_unsupported()?;
    let earlier = match &req.previous_response_id {
        Some(id) => state.responses.conversation(id)?,
        None => Vec::new(),
    };
    let (chat_request, mut turn) = req.to_chat(earlier)?;
    let run = chat::start(&state, chat_request).await.map_err(rename_param)?;
    let sampling = (run.checked.sampling.temperature, run.checked.sampling.top_p);
    let response = ResponseObject::start(new_id("resp_"), unix_now(), state.config.model_name.clone(), &req, sampling);
    let mut builder = Builder { response, sequence: 0, open: None, calls: Vec::new() };
    let prompt_tokens = run.prompt_tokens;
    if run.checked.stream {
        return Ok(stream(state.clone(), started, run.events, builder, turn, prompt_tokens));
    }
    let result = respond::collect(run.events, 1).await?.pop().unwrap_or_default();
    let completion = result.tokens;
    builder.whole(result, prompt_tokens);
    let response = builder.response;
    if response.store {
        turn.extend(response.as_messages());
        state.responses.put(response.clone(), turn);
    }
    Ok(respond::json_with_tokens(response, Tokens { prompt: prompt_tokens, completion }))
}

/// `GET /v1/responses/{id}`.
pub(crate) async fn retrieve(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Response, ApiError> {
    match state.responses.get(&id) {
        Some(response) => Ok(axum::Json(response).into_response()),
        None => Err(ApiError::not_found(None, format!("Response with id '{id}' not found."))),
    }
}

/// `DELETE /v1/responses/{id}`.
pub(crate) async fn delete(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Response, ApiError> {
    if state.responses.remove(&id) {
        Ok(axum::Json(json!({"id": id, "object": "response.deleted", "deleted": true})).into_response())
    } else {
        Err(ApiError::not_found(None, format!("Response with id '{id}' not found.")))
    }
}

/// Builds a response's output from the engine's deltas, and the stream events that say so.
struct Builder {
    response: ResponseObject,
    /// The next event's `sequence_number`.
    sequence: u64,
    /// The output index of the item being written.
    open: Option<usize>,
    /// (the engine's tool-call index, its output index) of each call.
    calls: Vec<(usize, usize)>,
}

/// A stream event: its type and its body (with `type` and `sequence_number`).
type Emitted = (&'static str, Value);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Message,
}

impl Builder {
    fn emit(&mut self, out: &mut Vec<Emitted>, kind: &'static str, mut body: Value) {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        out.push((kind, body));
    }

    fn snapshot(&self) -> Value {
        serde_json::to_value(&self.response).unwrap_or_default()
    }

    /// `response.created` and `response.in_progress`.
    fn opening(&mut self) -> Vec<Emitted> {
        let mut out = Vec::new();
        for kind in ["response.created", "response.in_progress"] {
            let body = json!({"response": self.snapshot()});
            self.emit(&mut out, kind, body);
        }
        out
    }

    fn item_at(&self, index: usize) -> Value {
        serde_json::to_value(&self.response.output[index]).unwrap_or_default()
    }

    /// Opens a reasoning or message item unless one of that kind is being written.
    fn open_text(&mut self, kind: Kind, out: &mut Vec<Emitted>) -> usize {
        if let Some(index) = self.open {
            let same = matches!(
                (&self.response.output[index], kind),
                (OutputItem::Reasoning { .. }, Kind::Reasoning) | (OutputItem::Message { .. }, Kind::Message)
            );
            if same {
                return index;
            }
            self.close(out, "completed");
        }
        let (item, part) = match kind {
            Kind::Reasoning => (
                OutputItem::Reasoning {
                    id: new_id("rs_"),
                    summary: Vec::new(),
                    content: Vec::new(),
                    status: "in_progress",
                },
                OutputContent::Reasoning { text: String::new() },
            ),
            Kind::Message => (
                OutputItem::Message {
                    id: new_id("msg_"),
                    role: "assistant",
                    content: Vec::new(),
                    status: "in_progress",
                },
                OutputContent::Text { text: String::new(), annotations: Vec::new() },
            ),
        };
        let index = self.response.output.len();
        let item_id = item.id().to_string();
        self.response.output.push(item);
        let body = json!({"output_index": index, "item": self.item_at(index)});
        self.emit(out, "response.output_item.added", body);
        let body = json!({"item_id": item_id, "output_index": index, "content_index": 0, "part": part});
        self.emit(out, "response.content_part.added", body);
        if let OutputItem::Reasoning { content, .. } | OutputItem::Message { content, .. } =
            &mut self.response.output[index]
        {
            content.push(part);
        }
        self.open = Some(index);
        index
    }

    fn add_text(&mut self, kind: Kind, text: String, out: &mut Vec<Emitted>) {
        let index = self.open_text(kind, out);
        let item = &mut self.response.output[index];
        let item_id = item.id().to_string();
        if let OutputItem::Reasoning { content, .. } | OutputItem::Message { content, .. } = item
            && let Some(part) = content.first_mut()
        {
            part.text_mut().push_str(&text);
        }
        let base = json!({"item_id": item_id, "output_index": index, "content_index": 0, "delta": text});
        match kind {
            Kind::Reasoning => self.emit(out, "response.reasoning_text.delta", base),
            Kind::Message => {
                let mut body = base;
                body["logprobs"] = json!([]);
                self.emit(out, "response.output_text.delta", body)
            }
        }
    }

    /// Ends the item being written with `status`.
    fn close(&mut self, out: &mut Vec<Emitted>, status: &'static str) {
        let Some(index) = self.open.take() else { return };
        self.response.output[index].set_status(status);
        let item = self.response.output[index].clone();
        let item_id = item.id().to_string();
        match &item {
            OutputItem::Reasoning { content, .. } | OutputItem::Message { content, .. } => {
                let part = content
                    .first()
                    .cloned()
                    .unwrap_or(OutputContent::Text { text: String::new(), annotations: Vec::new() });
                let text = part.text().to_string();
                let mut body = json!({"item_id": item_id, "output_index": index, "content_index": 0, "text": text});
                let kind = if matches!(item, OutputItem::Reasoning { .. }) {
                    "response.reasoning_text.done"
                } else {
                    body["logprobs"] = json!([]);
                    "response.output_text.done"
                };
                self.emit(out, kind, body);
                let body = json!({"item_id": item_id, "output_index": index, "content_index": 0, "part": part});
                self.emit(out, "response.content_part.done", body);
            }
            OutputItem::FunctionCall { name, arguments, .. } => {
                let body = json!({"item_id": item_id, "output_index": index, "name": name, "arguments": arguments});
                self.emit(out, "response.function_call_arguments.done", body);
            }
        }
        let body = json!({"output_index": index, "item": self.item_at(index)});
        self.emit(out, "response.output_item.done", body);
    }

    fn delta(&mut self, d: Delta) -> Vec<Emitted> {
        let mut out = Vec::new();
        if !d.reasoning.is_empty() {
            self.add_text(Kind::Reasoning, d.reasoning, &mut out);
        }
        if !d.content.is_empty() {
            self.add_text(Kind::Message, d.content, &mut out);
        }
        for call in d.tool_calls {
            if let Some(name) = call.name {
                self.close(&mut out, "completed");
                let index = self.response.output.len();
                self.response.output.push(OutputItem::FunctionCall {
                    id: new_id("fc_"),
                    call_id: new_id("call_"),
                    name,
                    arguments: String::new(),
                    status: "in_progress",
                });
                self.calls.push((call.index, index));
                self.open = Some(index);
                let body = json!({"output_index": index, "item": self.item_at(index)});
                self.emit(&mut out, "response.output_item.added", body);
            }
            let Some(&(_, index)) = self.calls.iter().rev().find(|(i, _)| *i == call.index) else { continue };
            if call.arguments.is_empty() {
                continue;
            }
            let item_id = self.response.output[index].id().to_string();
            if let OutputItem::FunctionCall { arguments, .. } = &mut self.response.output[index] {
                arguments.push_str(&call.arguments);
            }
            let body = json!({"item_id": item_id, "output_index": index, "delta": call.arguments});
            self.emit(&mut out, "response.function_call_arguments.delta", body);
        }
        out
    }

    /// Ends the response: the open item closes, an answer without text or calls gets an empty
    /// message, and the status and usage are set; then `response.completed` (or `.incomplete`).
    fn finish(&mut self, reason: Finish, usage: ResponseUsage) -> Vec<Emitted> {
        let mut out = Vec::new();
        let incomplete = reason == Finish::Length;
        let answered = self.response.output.iter().any(|i| !matches!(i, OutputItem::Reasoning { .. }));
        if !answered {
            self.open_text(Kind::Message, &mut out);
        }
        self.close(&mut out, if incomplete { "incomplete" } else { "completed" });
        self.response.usage = Some(usage);
        let kind = if incomplete {
            self.response.status = "incomplete";
            self.response.incomplete_details = Some(IncompleteDetails { reason: "max_output_tokens" });
            "response.incomplete"
        } else {
            self.response.status = "completed";
            "response.completed"
        };
        let body = json!({"response": self.snapshot()});
        self.emit(&mut out, kind, body);
        out
    }

    /// Ends the response as failed: `response.failed` (with the error in the response), then
    /// the `error` event.
    fn fail(&mut self, e: &ApiError) -> Vec<Emitted> {
        let mut out = Vec::new();
        self.close(&mut out, "incomplete");
        self.response.status = "failed";
        let code = e.code.unwrap_or(e.kind).to_string();
        self.response.error = Some(ResponseError { code: code.clone(), message: e.message.clone() });
        let body = json!({"response": self.snapshot()});
        self.emit(&mut out, "response.failed", body);
        let body = json!({"code": code, "message": e.message, "param": e.param});
        self.emit(&mut out, "error", body);
        out
    }

    /// The whole response from one choice's collected output.
    fn whole(&mut self, r: ChoiceResult, prompt_tokens: usize) {
        let usage = usage(prompt_tokens, r.tokens, r.reasoning_tokens, r.cached);
        let delta = Delta {
            content: r.content.clone(),
            reasoning: r.reasoning.clone(),
            tool_calls: r
                .tool_calls
                .iter()
                .enumerate()
                .map(|(index, (name, arguments))| crate::engine::ToolDelta {
                    index,
                    name: Some(name.clone()),
                    arguments: arguments.clone(),
                })
                .collect(),
            logprobs: Vec::new(),
        };
        self.delta(delta);
        self.finish(r.finish.unwrap_or(Finish::Length), usage);
    }
}

fn usage(prompt: usize, output: usize, reasoning: usize, cached: usize) -> ResponseUsage {
    ResponseUsage {
        input_tokens: prompt,
        input_tokens_details: InputTokensDetails { cached_tokens: cached },
        output_tokens: output,
        output_tokens_details: OutputTokensDetails { reasoning_tokens: reasoning },
        total_tokens: prompt + output,
    }
}

fn event((kind, body): Emitted) -> Event {
    Event::default().event(kind).data(body.to_string())
}

struct StreamState {
    events: Events,
    builder: Builder,
    queue: VecDeque<Event>,
    done: bool,
    turn: Vec<ChatMessage>,
    log: StreamLog,
}

/// The typed server-sent events of a streamed response; it is stored when it completes.
fn stream(
    state: Arc<AppState>,
    started: Instant,
    events: Events,
    mut builder: Builder,
    turn: Vec<ChatMessage>,
    prompt_tokens: usize,
) -> Response {
    let queue = builder.opening().into_iter().map(event).collect();
    let log =
        StreamLog { state, path: "/v1/responses", started, tokens: Tokens { prompt: prompt_tokens, completion: 0 } };
    let st = StreamState { events, builder, queue, done: false, turn, log };
    let body = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(e) = st.queue.pop_front() {
                return Some((Ok::<Event, Infallible>(e), st));
            }
            if st.done {
                return None;
            }
            let emitted = match st.events.next().await {
                Some(SeqEvent::Delta { delta, .. }) => st.builder.delta(delta),
                Some(SeqEvent::Finish { reason, completion_tokens, reasoning_tokens, cached_tokens, .. }) => {
                    st.log.tokens.completion = completion_tokens;
                    let usage = usage(st.log.tokens.prompt, completion_tokens, reasoning_tokens, cached_tokens);
                    let emitted = st.builder.finish(reason, usage);
                    if st.builder.response.store {
                        let mut turn = std::mem::take(&mut st.turn);
                        turn.extend(st.builder.response.as_messages());
                        st.log.state.responses.put(st.builder.response.clone(), turn);
                    }
                    st.done = true;
                    emitted
                }
                Some(SeqEvent::Error(e)) => {
                    st.done = true;
                    st.builder.fail(&e)
                }
                None => {
                    // The engine dropped the request without finishing it (shutdown).
                    st.done = true;
                    st.builder.fail(&ApiError::shutting_down())
                }
            };
            st.queue.extend(emitted.into_iter().map(event));
        }
    });
    let mut response = Sse::new(body).keep_alive(KeepAlive::default()).into_response();
    response.extensions_mut().insert(LoggedByStream);
    response
}
