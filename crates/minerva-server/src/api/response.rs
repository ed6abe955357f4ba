//! Response bodies and stream chunks in OpenAI's shapes.

use serde::Serialize;

/// The fields every response and chunk starts with.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Head {
    /// `chatcmpl-…` or `cmpl-…`.
    pub id: String,
    /// `chat.completion`, `chat.completion.chunk` or `text_completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The served model's name.
    pub model: String,
    /// This build of the server.
    pub system_fingerprint: String,
}

/// Token counts of a request.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens (once, however many choices).
    pub prompt_tokens: usize,
    /// Generated tokens, all choices.
    pub completion_tokens: usize,
    /// The sum.
    pub total_tokens: usize,
    /// How the prompt was run.
    pub prompt_tokens_details: PromptTokensDetails,
}

/// `usage.prompt_tokens_details`.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose keys and values an earlier request left in the cache (not run again).
    pub cached_tokens: usize,
}

impl Usage {
    /// Usage from the counts.
    pub fn new(prompt_tokens: usize, completion_tokens: usize, cached_tokens: usize) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }
}

/// A function called by the model.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FunctionCallOut {
    /// The function's name (absent in later stream deltas).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its arguments (JSON text, streamed in pieces).
    pub arguments: String,
}

/// A tool call of an answer (or a piece of one in a stream).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ToolCallOut {
    /// Which call (streams only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// The call's id (first piece only, in streams).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `function` (first piece only, in streams).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// The function.
    pub function: FunctionCallOut,
}

/// An alternative at a position of chat `logprobs`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TopLogprobOut {
    /// Token text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its UTF-8 bytes.
    pub bytes: Vec<u8>,
}

/// A generated token in chat `logprobs.content`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TokenLogprobOut {
    /// Token text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its UTF-8 bytes.
    pub bytes: Vec<u8>,
    /// The most likely tokens at this position.
    pub top_logprobs: Vec<TopLogprobOut>,
}

/// Chat `logprobs`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ChatLogprobs {
    /// One entry per generated token.
    pub content: Vec<TokenLogprobOut>,
}

/// The answer of a chat choice.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AssistantMessage {
    /// `assistant`.
    pub role: &'static str,
    /// The answer (null when the choice only calls tools).
    pub content: Option<String>,
    /// The reasoning (Harmony `analysis`), when there was any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls, when the model made any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
}

/// One choice of a chat completion.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ChatChoice {
    /// Its index.
    pub index: usize,
    /// The answer.
    pub message: AssistantMessage,
    /// Token log-probabilities, when asked.
    pub logprobs: Option<ChatLogprobs>,
    /// `stop`, `length` or `tool_calls`.
    pub finish_reason: &'static str,
}

/// `chat.completion`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ChatCompletion {
    /// Id, object type, time, model.
    #[serde(flatten)]
    pub head: Head,
    /// The choices.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
}

/// The `delta` of a chat stream chunk.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ChatDelta {
    /// `assistant`, in each choice's first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// More answer text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// More reasoning text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool-call pieces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
}

/// One choice of a chat stream chunk.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ChatChunkChoice {
    /// Its index.
    pub index: usize,
    /// What is new.
    pub delta: ChatDelta,
    /// Log-probabilities of the tokens in this delta, when asked.
    pub logprobs: Option<ChatLogprobs>,
    /// Set in the choice's last chunk.
    pub finish_reason: Option<&'static str>,
}

/// `chat.completion.chunk`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ChatChunk {
    /// Id (the same on every chunk of a stream), object type, time, model.
    #[serde(flatten)]
    pub head: Head,
    /// Choices with news (empty in the usage chunk).
    pub choices: Vec<ChatChunkChoice>,
    /// Set in the last chunk when `stream_options.include_usage`; null before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// Legacy completions `logprobs`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CompletionLogprobs {
    /// Token texts.
    pub tokens: Vec<String>,
    /// Their log-probabilities.
    pub token_logprobs: Vec<f32>,
    /// Per position: token text → log-probability of the most likely tokens.
    pub top_logprobs: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Character offset of each token in the choice's text.
    pub text_offset: Vec<usize>,
}

/// One choice of a text completion (or of a stream chunk).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CompletionChoice {
    /// Its index.
    pub index: usize,
    /// The text (in a stream: what is new).
    pub text: String,
    /// Token log-probabilities, when asked.
    pub logprobs: Option<CompletionLogprobs>,
    /// Set at the end.
    pub finish_reason: Option<&'static str>,
}

/// `text_completion` (also each chunk of its stream).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Completion {
    /// Id (the same on every chunk of a stream), object type, time, model.
    #[serde(flatten)]
    pub head: Head,
    /// The choices.
    pub choices: Vec<CompletionChoice>,
    /// Token counts (the whole response; in a stream, the usage chunk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// `GET /v1/models`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    /// The one served model.
    pub data: Vec<ModelCard>,
}

/// One model of [`ModelList`].
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ModelCard {
    /// Its name.
    pub id: String,
    /// `model`.
    pub object: &'static str,
    /// Unix seconds (server start).
    pub created: u64,
    /// `minerva`.
    pub owned_by: &'static str,
}
