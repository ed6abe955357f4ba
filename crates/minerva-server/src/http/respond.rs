//! From engine events to what the client gets: a whole response, or server-sent events.
//!
//! Both endpoints share this: the events of every submitted prompt are merged (choice indices
//! offset by `n` per prompt), then either gathered per choice ([`collect`]) or written as chunks
//! by an endpoint's [`ChunkWriter`] ([`sse`]): its opening chunks, one per delta, one with each
//! choice's `finish_reason`, the usage chunk when asked, then `data: [DONE]`. An error after the
//! stream has started is sent as an `{"error": …}` event, then `[DONE]`.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream, StreamExt};

use super::{AppState, LoggedByStream, Tokens, finish_request};
use crate::api::response::Usage;
use crate::engine::{Delta, EventReceiver, Finish, SeqEvent, TokenLogprob};
use crate::error::ApiError;

pub(crate) type Events = Pin<Box<dyn Stream<Item = SeqEvent> + Send>>;

/// The events of all `receivers` (one per prompt, `n` choices each) as one stream, choice
/// indices made global.
pub(crate) fn merge(receivers: Vec<EventReceiver>, n: usize) -> Events {
    let streams = receivers.into_iter().enumerate().map(|(i, rx)| {
        let offset = i * n;
        stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) })
            .map(move |e| match e {
                SeqEvent::Delta { choice, delta } => SeqEvent::Delta { choice: choice + offset, delta },
                SeqEvent::Finish { choice, reason, completion_tokens, reasoning_tokens, cached_tokens } => {
                    SeqEvent::Finish {
                        choice: choice + offset,
                        reason,
                        completion_tokens,
                        reasoning_tokens,
                        cached_tokens,
                    }
                }
                other => other,
            })
            .boxed()
    });
    Box::pin(stream::select_all(streams))
}

/// Everything one choice produced.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChoiceResult {
    pub(crate) content: String,
    pub(crate) reasoning: String,
    /// (name, arguments) of each tool call.
    pub(crate) tool_calls: Vec<(String, String)>,
    pub(crate) logprobs: Vec<TokenLogprob>,
    pub(crate) finish: Option<Finish>,
    pub(crate) tokens: usize,
    /// Those of them whose text went to the reasoning.
    pub(crate) reasoning_tokens: usize,
    /// Prompt tokens the KV cache already held (the prefix cache).
    pub(crate) cached: usize,
}

impl ChoiceResult {
    fn add(&mut self, delta: Delta) {
        self.content.push_str(&delta.content);
        self.reasoning.push_str(&delta.reasoning);
        for call in delta.tool_calls {
            match call.name {
                Some(name) => self.tool_calls.push((name, call.arguments)),
                None => {
                    if let Some(last) = self.tool_calls.last_mut() {
                        last.1.push_str(&call.arguments);
                    }
                }
            }
        }
        self.logprobs.extend(delta.logprobs);
    }

    /// The finish reason (a choice ended by the server's end is `length`).
    pub(crate) fn finish_reason(&self) -> &'static str {
        self.finish.unwrap_or(Finish::Length).as_str()
    }
}

/// Gathers every choice's output; the first error fails the whole request.
pub(crate) async fn collect(mut events: Events, choices: usize) -> Result<Vec<ChoiceResult>, ApiError> {
    let mut out = vec![ChoiceResult::default(); choices];
    while let Some(event) = events.next().await {
        match event {
            SeqEvent::Delta { choice, delta } => out[choice].add(delta),
            SeqEvent::Finish { choice, reason, completion_tokens, reasoning_tokens, cached_tokens } => {
                out[choice].finish = Some(reason);
                out[choice].tokens = completion_tokens;
                out[choice].reasoning_tokens = reasoning_tokens;
                out[choice].cached = cached_tokens;
            }
            SeqEvent::Error(e) => return Err(e),
        }
    }
    Ok(out)
}

/// How an endpoint writes its stream chunks (JSON values, one per SSE event).
pub(crate) trait ChunkWriter: Send + 'static {
    /// Chunks before any output (the chat role chunks).
    fn opening(&mut self, choices: usize) -> Vec<serde_json::Value>;
    /// A chunk for new output of `choice`.
    fn delta(&mut self, choice: usize, delta: Delta) -> Option<serde_json::Value>;
    /// The chunk that ends `choice`.
    fn finish(&mut self, choice: usize, reason: Finish) -> serde_json::Value;
    /// The usage chunk.
    fn usage(&mut self, usage: Usage) -> serde_json::Value;
}

/// Logs and counts a streamed request when its stream ends or is dropped (client gone).
pub(crate) struct StreamLog {
    pub(crate) state: Arc<AppState>,
    pub(crate) path: &'static str,
    pub(crate) started: Instant,
    pub(crate) tokens: Tokens,
}

impl Drop for StreamLog {
    fn drop(&mut self) {
        finish_request(&self.state, "POST", self.path, StatusCode::OK, Some(self.tokens), self.started);
    }
}

struct SseState<W> {
    events: Events,
    writer: W,
    queue: std::collections::VecDeque<Event>,
    open: usize,
    /// Prompt tokens the choices' slots already held.
    cached: usize,
    include_usage: bool,
    done: bool,
    log: StreamLog,
}

pub(crate) fn data(value: &serde_json::Value) -> Event {
    Event::default().data(value.to_string())
}

/// The SSE response for `events` of `choices` choices, written by `writer`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sse<W: ChunkWriter>(
    state: Arc<AppState>,
    path: &'static str,
    started: Instant,
    events: Events,
    mut writer: W,
    choices: usize,
    prompt_tokens: usize,
    include_usage: bool,
) -> Response {
    let queue = writer.opening(choices).iter().map(data).collect();
    let log = StreamLog { state, path, started, tokens: Tokens { prompt: prompt_tokens, completion: 0 } };
    let st = SseState { events, writer, queue, open: choices, cached: 0, include_usage, done: false, log };
    let body = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(event) = st.queue.pop_front() {
                return Some((Ok::<Event, Infallible>(event), st));
            }
            if st.done {
                return None;
            }
            match st.events.next().await {
                Some(SeqEvent::Delta { choice, delta }) => {
                    if let Some(chunk) = st.writer.delta(choice, delta) {
                        st.queue.push_back(data(&chunk));
                    }
                }
                Some(SeqEvent::Finish { choice, reason, completion_tokens, cached_tokens, .. }) => {
                    st.log.tokens.completion += completion_tokens;
                    st.cached += cached_tokens;
                    st.queue.push_back(data(&st.writer.finish(choice, reason)));
                    st.open = st.open.saturating_sub(1);
                }
                Some(SeqEvent::Error(e)) => {
                    st.queue.push_back(data(&e.body()));
                    st.queue.push_back(Event::default().data("[DONE]"));
                    st.done = true;
                }
                None => {
                    if st.open > 0 {
                        // The engine dropped the request without finishing it (shutdown).
                        st.queue.push_back(data(&ApiError::shutting_down().body()));
                    } else if st.include_usage {
                        let usage = Usage::new(st.log.tokens.prompt, st.log.tokens.completion, st.cached);
                        st.queue.push_back(data(&st.writer.usage(usage)));
                    }
                    st.queue.push_back(Event::default().data("[DONE]"));
                    st.done = true;
                }
            }
        }
    });
    let mut response = Sse::new(body).keep_alive(KeepAlive::default()).into_response();
    response.extensions_mut().insert(LoggedByStream);
    response
}

/// A complete (non-stream) JSON response with its token counts for the log line.
pub(crate) fn json_with_tokens(body: impl serde::Serialize, tokens: Tokens) -> Response {
    let mut response = axum::Json(body).into_response();
    response.extensions_mut().insert(tokens);
    response
}
