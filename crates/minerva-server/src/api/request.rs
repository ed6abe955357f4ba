//! The request bodies of `/v1/chat/completions` and `/v1/completions`, as OpenAI defines them.
//!
//! Unknown fields are ignored (clients send many); a known field this server cannot honour is a
//! 400 naming it ([`ChatRequest::refuse_unsupported`]), never silently dropped.

use std::collections::HashMap;

use serde::Deserialize;

use super::structured::{ResponseFormat, StructuredOutputs};
use crate::error::ApiError;

/// `stop`: one string or a list.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl Stop {
    /// The strings.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// `stream_options`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and empty `choices`) before `[DONE]`.
    #[serde(default)]
    pub include_usage: bool,
}

/// The sampling and limit fields both endpoints share.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CommonParams {
    /// The model name (must be the served one, when given).
    pub model: Option<String>,
    /// Most tokens to generate.
    pub max_tokens: Option<i64>,
    /// Softmax temperature, 0 to 2 (0: greedy). Default 1.
    pub temperature: Option<f32>,
    /// Nucleus sampling mass, in (0, 1].
    pub top_p: Option<f32>,
    /// Keep the k most likely tokens (0: all).
    pub top_k: Option<i64>,
    /// Drop tokens less likely than this fraction of the most likely one's probability.
    pub min_p: Option<f32>,
    /// Seed for reproducible sampling.
    pub seed: Option<i64>,
    /// Stop strings.
    pub stop: Option<Stop>,
    /// -2 to 2: lowers the logits of tokens that already appeared.
    pub presence_penalty: Option<f32>,
    /// -2 to 2: lowers the logits of tokens by how often they appeared.
    pub frequency_penalty: Option<f32>,
    /// > 0: llama.cpp's repetition penalty (1 is off).
    pub repetition_penalty: Option<f32>,
    /// Token id (as a string) → bias added to its logit, -100 to 100.
    pub logit_bias: Option<HashMap<String, f32>>,
    /// Choices to generate (1 to 8).
    pub n: Option<i64>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// OpenAI's `user` (accepted, unused).
    pub user: Option<String>,
    /// Output format: `text`, `json_object` or `json_schema` ([`super::structured`]).
    pub response_format: Option<ResponseFormat>,
    /// llama.cpp's JSON schema for the output.
    pub json_schema: Option<serde_json::Value>,
    /// llama.cpp's grammar field (Lark syntax here).
    pub grammar: Option<String>,
    /// vLLM's structured outputs.
    pub structured_outputs: Option<StructuredOutputs>,
    /// vLLM's older JSON-schema field.
    pub guided_json: Option<serde_json::Value>,
    /// vLLM's older regular-expression field.
    pub guided_regex: Option<String>,
    /// vLLM's older list-of-choices field.
    pub guided_choice: Option<Vec<String>>,
    /// vLLM's older grammar field.
    pub guided_grammar: Option<String>,
    /// `false` turns speculative decoding off for this request where the server speculates
    /// (`minerva serve --spec ngram`); greedy output is the same either way.
    pub speculative: Option<bool>,
}

/// One part of a message's content list.
#[derive(Clone, Debug, Deserialize)]
pub struct ContentPart {
    /// `text` (no other kind is supported).
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    pub text: Option<String>,
}

/// A message's `content`: a string or a list of parts.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Parts (only `text` parts are supported).
    Parts(Vec<ContentPart>),
}

/// A function a tool call names.
#[derive(Clone, Debug, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// Its arguments as a JSON string.
    #[serde(default)]
    pub arguments: String,
}

/// A tool call in an earlier assistant message.
#[derive(Clone, Debug, Deserialize)]
pub struct ToolCall {
    /// The call's id.
    pub id: Option<String>,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The function and its arguments.
    pub function: FunctionCall,
}

/// One chat message.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text (absent or null for an assistant message that only calls tools).
    pub content: Option<Content>,
    /// A participant name (accepted, unused).
    pub name: Option<String>,
    /// An assistant message's tool calls.
    pub tool_calls: Option<Vec<ToolCall>>,
    /// A tool message's call id.
    pub tool_call_id: Option<String>,
    /// An assistant message's earlier reasoning (Harmony `analysis`), if the client sends it back.
    pub reasoning_content: Option<String>,
}

/// A tool definition: `{"type": "function", "function": {"name", "description", "parameters"}}`.
#[derive(Clone, Debug, Deserialize)]
pub struct Tool {
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function.
    pub function: FunctionDef,
}

/// A function a model may call.
#[derive(Clone, Debug, Deserialize)]
pub struct FunctionDef {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// A JSON schema of its arguments.
    pub parameters: Option<serde_json::Value>,
}

/// `POST /v1/chat/completions`.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Sampling and limits.
    #[serde(flatten)]
    pub common: CommonParams,
    /// The newer name of `max_tokens` (wins when both are given).
    pub max_completion_tokens: Option<i64>,
    /// Return the log-probability of each generated token.
    #[serde(default)]
    pub logprobs: bool,
    /// With `logprobs`: the most likely alternatives per position (0 to 20).
    pub top_logprobs: Option<i64>,
    /// GPT-OSS: `low`, `medium` or `high`.
    pub reasoning_effort: Option<String>,
    /// Functions the model may call.
    pub tools: Option<Vec<Tool>>,
    /// `auto`, `none`, `required` or a named function.
    pub tool_choice: Option<serde_json::Value>,
    /// Whether the model may make more than one call (default true).
    pub parallel_tool_calls: Option<bool>,
    /// The legacy form of `tools` (not supported).
    pub functions: Option<serde_json::Value>,
    /// Audio output (not supported).
    pub audio: Option<serde_json::Value>,
    /// Output modalities; only `text` is supported.
    pub modalities: Option<Vec<String>>,
    /// Predicted output (not supported).
    pub prediction: Option<serde_json::Value>,
    /// Web search (not supported).
    pub web_search_options: Option<serde_json::Value>,
}

/// `prompt` of `/v1/completions`: text, several texts, token ids, or several lists of ids.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// One text.
    Text(String),
    /// Several texts (one completion each).
    Texts(Vec<String>),
    /// One prompt as token ids.
    Tokens(Vec<u32>),
    /// Several prompts as token ids.
    TokenLists(Vec<Vec<u32>>),
}

/// `POST /v1/completions`.
#[derive(Clone, Debug, Deserialize)]
pub struct CompletionRequest {
    /// The prompt(s).
    pub prompt: Prompt,
    /// Sampling and limits.
    #[serde(flatten)]
    pub common: CommonParams,
    /// Log-probabilities of the `logprobs` most likely tokens per position (0 to 20).
    pub logprobs: Option<i64>,
    /// Return the prompt before the completion (only `false` is supported).
    #[serde(default)]
    pub echo: bool,
    /// Text after the completion (not supported).
    pub suffix: Option<String>,
    /// Server-side candidates (only 1 is supported).
    pub best_of: Option<i64>,
}

impl ChatRequest {
    /// 400 for every field this server knows but cannot honour.
    pub fn refuse_unsupported(&self) -> Result<(), ApiError> {
        if let Some(tools) = &self.tools
            && let Some(i) = tools.iter().position(|t| t.kind != "function")
        {
            return Err(ApiError::unsupported(&format!("tools[{i}].type"), "only `function` tools are supported"));
        }
        for (field, present) in [
            ("functions", self.functions.is_some()),
            ("audio", self.audio.is_some()),
            ("prediction", self.prediction.is_some()),
            ("web_search_options", self.web_search_options.is_some()),
        ] {
            if present {
                return Err(ApiError::unsupported(field, format!("`{field}` is not supported by this server")));
            }
        }
        if let Some(m) = &self.modalities
            && m.iter().any(|m| m != "text")
        {
            return Err(ApiError::unsupported("modalities", "only the `text` modality is supported"));
        }
        Ok(())
    }
}

impl CompletionRequest {
    /// 400 for every field this server knows but cannot honour.
    pub fn refuse_unsupported(&self) -> Result<(), ApiError> {
        if self.echo {
            return Err(ApiError::unsupported("echo", "`echo` is not supported by this server"));
        }
        if self.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::unsupported("suffix", "`suffix` (insertion) is not supported by this server"));
        }
        if self.best_of.is_some_and(|b| b != 1) {
            return Err(ApiError::unsupported("best_of", "only `best_of: 1` is supported"));
        }
        Ok(())
    }
}
