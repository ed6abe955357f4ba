//! The Responses API (`POST /v1/responses`) as OpenAI defines it: the request, its translation
//! into a chat request (the conversation as messages, so every model's chat template, tool format
//! and grammar serve it unchanged), and the response object and its output items.
//!
//! `input` is a string or a list of items: messages (`input_text` / `output_text` parts),
//! `reasoning`, `function_call` and `function_call_output` items — the shapes the response's own
//! `output` holds, so a client may send them back. Every mistake is a 400 naming the field, as in
//! `input[2].call_id`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::request::{
    ChatMessage, ChatRequest, CommonParams, Content, FunctionCall, FunctionDef, Stop, Tool, ToolCall,
};
use super::structured::{JsonSchemaFormat, ResponseFormat};
use crate::error::ApiError;

/// `reasoning`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ReasoningParam {
    /// `low`, `medium` or `high` (GPT-OSS's reasoning effort).
    pub effort: Option<String>,
    /// A reasoning summary (not produced: the reasoning itself is returned).
    pub summary: Option<String>,
}

/// `text.format`: `{"type": "text" | "json_object" | "json_schema", "name", "schema", "strict"}`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct TextFormat {
    /// `text`, `json_object` or `json_schema`.
    #[serde(rename = "type")]
    pub kind: String,
    /// With `json_schema`: its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// With `json_schema`: the schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// With `json_schema`: strict mode (the output always follows the schema here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// With `json_schema`: what it is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `text`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct TextParam {
    /// The output format.
    pub format: Option<TextFormat>,
}

/// `POST /v1/responses`.
#[derive(Clone, Debug, Deserialize)]
pub struct ResponsesRequest {
    /// The model name (must be the served one, when given).
    pub model: Option<String>,
    /// A user message, or a list of items.
    pub input: Option<Value>,
    /// A developer (system) message put first; not carried over by `previous_response_id`.
    pub instructions: Option<String>,
    /// Most tokens to generate, reasoning included.
    pub max_output_tokens: Option<i64>,
    /// Softmax temperature, 0 to 2.
    pub temperature: Option<f32>,
    /// Nucleus sampling mass.
    pub top_p: Option<f32>,
    /// Keep the k most likely tokens (vLLM's extension).
    pub top_k: Option<i64>,
    /// Minimum relative probability (vLLM's extension).
    pub min_p: Option<f32>,
    /// Seed for reproducible sampling (vLLM's extension).
    pub seed: Option<i64>,
    /// Stop strings (vLLM's extension).
    pub stop: Option<Stop>,
    /// -2 to 2 (vLLM's extension).
    pub presence_penalty: Option<f32>,
    /// -2 to 2 (vLLM's extension).
    pub frequency_penalty: Option<f32>,
    /// GPT-OSS's reasoning effort.
    pub reasoning: Option<ReasoningParam>,
    /// Function tools: `{"type": "function", "name", "description", "parameters", "strict"}`.
    pub tools: Option<Vec<Value>>,
    /// `auto`, `none`, `required` or `{"type": "function", "name"}`.
    pub tool_choice: Option<Value>,
    /// Whether the model may make more than one call (default true).
    pub parallel_tool_calls: Option<bool>,
    /// The output format.
    pub text: Option<TextParam>,
    /// Stream typed server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Keep the response for `previous_response_id` and `GET /v1/responses/{id}` (default true).
    pub store: Option<bool>,
    /// Continue the conversation of a stored response.
    pub previous_response_id: Option<String>,
    /// Up to 16 string pairs, returned with the response.
    pub metadata: Option<serde_json::Map<String, Value>>,
    /// OpenAI's `user` (accepted, unused).
    pub user: Option<String>,
    /// `disabled` (the default) or `auto` (not supported: a long conversation is a 400).
    pub truncation: Option<String>,
    /// Run in the background (not supported).
    pub background: Option<bool>,
    /// Extra output to include (not supported).
    pub include: Option<Vec<String>>,
    /// A conversation object (not supported; use `previous_response_id`).
    pub conversation: Option<Value>,
    /// A stored prompt template (not supported).
    pub prompt: Option<Value>,
    /// Log-probabilities (not supported on this endpoint; chat completions has them).
    pub top_logprobs: Option<i64>,
    /// `false` turns speculative decoding off for this request.
    pub speculative: Option<bool>,
}

/// A function tool as the Responses API spells it (flat, unlike chat's `{"function": {…}}`).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct FunctionTool {
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its name.
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON schema of its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// Strict mode (calls always follow the schema here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

fn invalid(param: impl Into<String>, why: impl Into<String>) -> ApiError {
    ApiError::invalid(param, why)
}

fn str_field<'a>(item: &'a Value, at: &str, key: &str) -> Result<&'a str, ApiError> {
    item.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{at}.{key}"), format!("`{at}.{key}` must be a string")))
}

/// The text of a message's `content`: a string, or `input_text` / `output_text` / `text` parts
/// joined; other parts (images, files, audio) are refused.
fn content_text(content: &Value, at: &str) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let here = format!("{at}.content[{j}]");
                match part.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text" | "text" | "reasoning_text" | "summary_text") => {
                        text.push_str(str_field(part, &here, "text")?)
                    }
                    Some("refusal") => text.push_str(str_field(part, &here, "refusal")?),
                    Some(other) => {
                        return Err(ApiError::unsupported(
                            &format!("{here}.type"),
                            format!("`{other}` content is not supported by this server (text only)"),
                        ));
                    }
                    None => return Err(invalid(format!("{here}.type"), "a content part needs a `type`")),
                }
            }
            Ok(text)
        }
        _ => Err(invalid(format!("{at}.content"), "`content` must be a string or a list of parts")),
    }
}

fn message(role: &str, content: Option<String>) -> ChatMessage {
    ChatMessage {
        role: role.into(),
        content: content.map(Content::Text),
        name: None,
        tool_calls: None,
        tool_call_id: None,
        reasoning_content: None,
    }
}

/// `input` as chat messages: a string is one user message; items become messages, consecutive
/// function calls one assistant message with those calls, a reasoning item the next assistant
/// message's reasoning.
pub fn input_messages(input: &Value) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match input {
        Value::String(text) => return Ok(vec![message("user", Some(text.clone()))]),
        Value::Array(items) => items,
        _ => return Err(invalid("input", "`input` must be a string or a list of items")),
    };
    let mut messages: Vec<ChatMessage> = Vec::new();
    let mut reasoning: Option<String> = None;
    // Whether the last message is an assistant turn still open to more items (calls).
    let mut assistant_open = false;
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        if !item.is_object() {
            return Err(invalid(at, "an input item must be an object"));
        }
        let kind = match item.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            None if item.get("role").is_some() => "message",
            _ => return Err(invalid(format!("{at}.type"), "an input item needs a `type` (or a `role`)")),
        };
        match kind {
            "message" => {
                let role = str_field(item, &at, "role")?;
                if !matches!(role, "user" | "system" | "developer" | "assistant") {
                    return Err(invalid(
                        format!("{at}.role"),
                        format!("unknown role `{role}`; expected user, system, developer or assistant"),
                    ));
                }
                let content = item.get("content").ok_or_else(|| invalid(format!("{at}.content"), "missing"))?;
                let mut m = message(role, Some(content_text(content, &at)?));
                if role == "assistant" {
                    m.reasoning_content = reasoning.take();
                }
                assistant_open = role == "assistant";
                messages.push(m);
            }
            "reasoning" => {
                let text = match (item.get("content"), item.get("summary")) {
                    (Some(c @ Value::Array(parts)), _) if !parts.is_empty() => content_text(c, &at)?,
                    (_, Some(summary @ Value::Array(_))) => content_text(summary, &at)?,
                    _ => String::new(),
                };
                reasoning.get_or_insert_default().push_str(&text);
                assistant_open = false;
            }
            "function_call" => {
                let call = ToolCall {
                    id: Some(str_field(item, &at, "call_id")?.to_string()),
                    kind: Some("function".into()),
                    function: FunctionCall {
                        name: str_field(item, &at, "name")?.to_string(),
                        arguments: str_field(item, &at, "arguments")?.to_string(),
                    },
                };
                match messages.last_mut() {
                    Some(last) if assistant_open => last.tool_calls.get_or_insert_default().push(call),
                    _ => {
                        let mut m = message("assistant", None);
                        m.reasoning_content = reasoning.take();
                        m.tool_calls = Some(vec![call]);
                        messages.push(m);
                        assistant_open = true;
                    }
                }
            }
            "function_call_output" => {
                let output = item.get("output").ok_or_else(|| invalid(format!("{at}.output"), "missing"))?;
                let mut m = message("tool", Some(content_text(output, &format!("{at}.output"))?));
                m.tool_call_id = Some(str_field(item, &at, "call_id")?.to_string());
                messages.push(m);
                assistant_open = false;
            }
            other => {
                return Err(ApiError::unsupported(
                    &format!("{at}.type"),
                    format!(
                        "`{other}` items are not supported by this server (message, reasoning, function_call, \
                         function_call_output)"
                    ),
                ));
            }
        }
    }
    Ok(messages)
}

/// The request's function tools, checked, in chat's shape.
pub fn chat_tools(tools: &[Value]) -> Result<Vec<Tool>, ApiError> {
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let kind = t.get("type").and_then(Value::as_str).unwrap_or_default();
            if kind != "function" {
                return Err(ApiError::unsupported(
                    &format!("tools[{i}].type"),
                    format!("`{kind}` tools are not supported by this server (only `function`)"),
                ));
            }
            let f: FunctionTool = serde_json::from_value(t.clone())
                .map_err(|e| invalid(format!("tools[{i}]"), format!("not a function tool: {e}")))?;
            Ok(Tool {
                kind: f.kind,
                function: FunctionDef { name: f.name, description: f.description, parameters: f.parameters },
            })
        })
        .collect()
}

/// `tool_choice` in chat's shape: `{"type": "function", "name"}` becomes
/// `{"type": "function", "function": {"name"}}`.
fn chat_tool_choice(choice: &Value) -> Value {
    match choice.get("name") {
        Some(name) if choice.get("type").and_then(Value::as_str) == Some("function") => {
            serde_json::json!({"type": "function", "function": {"name": name}})
        }
        _ => choice.clone(),
    }
}

impl ResponsesRequest {
    /// 400 for every field this server knows but cannot honour.
    pub fn refuse_unsupported(&self) -> Result<(), ApiError> {
        for (field, present) in [
            ("background", self.background == Some(true)),
            ("conversation", self.conversation.is_some()),
            ("prompt", self.prompt.is_some()),
            ("top_logprobs", self.top_logprobs.is_some_and(|t| t > 0)),
            ("truncation", self.truncation.as_deref().is_some_and(|t| t != "disabled")),
            ("include", self.include.as_deref().is_some_and(|i| !i.is_empty())),
        ] {
            if present {
                return Err(ApiError::unsupported(field, format!("`{field}` is not supported by this server")));
            }
        }
        if let Some(effort) = self.reasoning.as_ref().and_then(|r| r.effort.as_deref())
            && !matches!(effort, "low" | "medium" | "high")
        {
            return Err(invalid(
                "reasoning.effort",
                format!("`reasoning.effort` is `{effort}`; it must be low, medium or high"),
            ));
        }
        if let Some(m) = &self.metadata {
            if m.len() > 16 {
                return Err(invalid("metadata", format!("{} metadata keys; at most 16 are allowed", m.len())));
            }
            if let Some((k, _)) = m.iter().find(|(k, v)| k.len() > 64 || v.as_str().is_none_or(|v| v.len() > 512)) {
                return Err(invalid(
                    format!("metadata.{k}"),
                    "metadata keys are at most 64 characters, values strings of at most 512",
                ));
            }
        }
        Ok(())
    }

    /// The chat request this response runs as: `instructions` (a developer message), then
    /// `earlier` (the stored conversation of `previous_response_id`), then `input`'s messages.
    /// Returns it and `input`'s messages (the turn to store with the response).
    pub fn to_chat(&self, earlier: Vec<ChatMessage>) -> Result<(ChatRequest, Vec<ChatMessage>), ApiError> {
        let input = self.input.as_ref().ok_or_else(|| invalid("input", "`input` is required"))?;
        let input = input_messages(input)?;
        let mut messages = Vec::with_capacity(earlier.len() + input.len() + 1);
        if let Some(instructions) = &self.instructions {
            messages.push(message("developer", Some(instructions.clone())));
        }
        messages.extend(earlier);
        messages.extend(input.iter().cloned());
        if !messages.iter().any(|m| m.role == "user") {
            return Err(invalid("input", "the conversation needs a user message"));
        }
        let response_format = self.text.as_ref().and_then(|t| t.format.as_ref()).map(|f| ResponseFormat {
            kind: f.kind.clone(),
            json_schema: (f.kind == "json_schema").then(|| JsonSchemaFormat {
                name: f.name.clone(),
                schema: f.schema.clone(),
                strict: f.strict,
                description: f.description.clone(),
            }),
        });
        let tools = self.tools.as_deref().map(chat_tools).transpose()?;
        let common = CommonParams {
            model: self.model.clone(),
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            seed: self.seed,
            stop: self.stop.clone(),
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            stream: self.stream,
            response_format,
            speculative: self.speculative,
            ..CommonParams::default()
        };
        let chat = ChatRequest {
            messages,
            common,
            max_completion_tokens: self.max_output_tokens,
            logprobs: false,
            top_logprobs: None,
            reasoning_effort: self.reasoning.as_ref().and_then(|r| r.effort.clone()),
            tools,
            tool_choice: self.tool_choice.as_ref().map(chat_tool_choice),
            parallel_tool_calls: self.parallel_tool_calls,
            functions: None,
            audio: None,
            modalities: None,
            prediction: None,
            web_search_options: None,
        };
        Ok((chat, input))
    }
}

/// Chat's names for the fields a Responses request spells otherwise, in an error's `param` and
/// message.
pub fn rename_param(mut e: ApiError) -> ApiError {
    let rename = |text: &str| {
        text.replace("response_format.json_schema.", "text.format.")
            .replace("response_format", "text.format")
            .replace(".function.", ".")
            .replace("reasoning_effort", "reasoning.effort")
    };
    e.param = e.param.map(|p| match p.as_str() {
        "max_tokens" | "max_completion_tokens" => "max_output_tokens".to_string(),
        "messages" => "input".to_string(),
        _ => rename(&p),
    });
    e.message = rename(&e.message).replace("`max_tokens`", "`max_output_tokens`");
    e
}

/// `usage`.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ResponseUsage {
    /// Prompt tokens.
    pub input_tokens: usize,
    /// How the prompt was run.
    pub input_tokens_details: InputTokensDetails,
    /// Generated tokens, reasoning included.
    pub output_tokens: usize,
    /// How many of them were reasoning.
    pub output_tokens_details: OutputTokensDetails,
    /// The sum.
    pub total_tokens: usize,
}

/// `usage.input_tokens_details`.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct InputTokensDetails {
    /// Prompt tokens the KV cache already held.
    pub cached_tokens: usize,
}

/// `usage.output_tokens_details`.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct OutputTokensDetails {
    /// Tokens whose text went to the reasoning.
    pub reasoning_tokens: usize,
}

/// A content part of an output item.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type")]
pub enum OutputContent {
    /// Answer text.
    #[serde(rename = "output_text")]
    Text {
        /// The text.
        text: String,
        /// Always empty (no citations).
        annotations: Vec<Value>,
    },
    /// Reasoning text.
    #[serde(rename = "reasoning_text")]
    Reasoning {
        /// The text.
        text: String,
    },
}

impl OutputContent {
    /// Its text.
    pub fn text(&self) -> &str {
        match self {
            OutputContent::Text { text, .. } | OutputContent::Reasoning { text } => text,
        }
    }

    /// Its text, to add to.
    pub fn text_mut(&mut self) -> &mut String {
        match self {
            OutputContent::Text { text, .. } | OutputContent::Reasoning { text } => text,
        }
    }
}

/// An output item.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type")]
pub enum OutputItem {
    /// Reasoning (GPT-OSS's analysis channel, `<think>` text).
    #[serde(rename = "reasoning")]
    Reasoning {
        /// `rs_…`.
        id: String,
        /// Always empty: the reasoning itself is in `content`.
        summary: Vec<Value>,
        /// One `reasoning_text` part.
        content: Vec<OutputContent>,
        /// `in_progress`, `completed` or `incomplete`.
        status: &'static str,
    },
    /// The answer.
    #[serde(rename = "message")]
    Message {
        /// `msg_…`.
        id: String,
        /// `assistant`.
        role: &'static str,
        /// One `output_text` part.
        content: Vec<OutputContent>,
        /// `in_progress`, `completed` or `incomplete`.
        status: &'static str,
    },
    /// A call of a function tool.
    #[serde(rename = "function_call")]
    FunctionCall {
        /// `fc_…`.
        id: String,
        /// `call_…`: the id its `function_call_output` names.
        call_id: String,
        /// The function.
        name: String,
        /// Its arguments, a JSON string.
        arguments: String,
        /// `in_progress`, `completed` or `incomplete`.
        status: &'static str,
    },
}

impl OutputItem {
    /// Its id.
    pub fn id(&self) -> &str {
        match self {
            OutputItem::Reasoning { id, .. } | OutputItem::Message { id, .. } | OutputItem::FunctionCall { id, .. } => {
                id
            }
        }
    }

    /// Sets its status.
    pub fn set_status(&mut self, to: &'static str) {
        match self {
            OutputItem::Reasoning { status, .. }
            | OutputItem::Message { status, .. }
            | OutputItem::FunctionCall { status, .. } => *status = to,
        }
    }
}

/// `incomplete_details`.
#[derive(Clone, Debug, Serialize)]
pub struct IncompleteDetails {
    /// `max_output_tokens`.
    pub reason: &'static str,
}

/// `error` of a failed response.
#[derive(Clone, Debug, Serialize)]
pub struct ResponseError {
    /// The error's code (its type when it has none).
    pub code: String,
    /// What went wrong.
    pub message: String,
}

/// `x` as the f64 of its shortest decimal form (0.95, not 0.949999988079071, in JSON).
fn decimal(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

/// The response object (`"object": "response"`).
#[derive(Clone, Debug, Serialize)]
pub struct ResponseObject {
    /// `resp_…`.
    pub id: String,
    /// `response`.
    pub object: &'static str,
    /// Unix seconds.
    pub created_at: u64,
    /// `in_progress`, `completed`, `incomplete` or `failed`.
    pub status: &'static str,
    /// Why it is incomplete.
    pub incomplete_details: Option<IncompleteDetails>,
    /// Why it failed.
    pub error: Option<ResponseError>,
    /// The request's instructions.
    pub instructions: Option<String>,
    /// The request's limit.
    pub max_output_tokens: Option<i64>,
    /// The served model's name.
    pub model: String,
    /// What the model produced, in order.
    pub output: Vec<OutputItem>,
    /// Whether several calls were allowed.
    pub parallel_tool_calls: bool,
    /// The response this one continues.
    pub previous_response_id: Option<String>,
    /// The reasoning settings.
    pub reasoning: ReasoningParam,
    /// Whether it is stored.
    pub store: bool,
    /// The temperature used.
    pub temperature: f64,
    /// The output format.
    pub text: TextParam,
    /// The tool choice asked for.
    pub tool_choice: Value,
    /// The tools offered.
    pub tools: Vec<Value>,
    /// The nucleus mass used.
    pub top_p: f64,
    /// `disabled`.
    pub truncation: &'static str,
    /// Token counts (absent until it ends).
    pub usage: Option<ResponseUsage>,
    /// The request's `user`.
    pub user: Option<String>,
    /// The request's metadata.
    pub metadata: serde_json::Map<String, Value>,
    /// Never run in the background here.
    pub background: bool,
}

impl ResponseObject {
    /// The response `req` starts, `in_progress` with no output, echoing its settings.
    pub fn start(id: String, created_at: u64, model: String, req: &ResponsesRequest, sampling: (f32, f32)) -> Self {
        ResponseObject {
            id,
            object: "response",
            created_at,
            status: "in_progress",
            incomplete_details: None,
            error: None,
            instructions: req.instructions.clone(),
            max_output_tokens: req.max_output_tokens,
            model,
            output: Vec::new(),
            parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
            previous_response_id: req.previous_response_id.clone(),
            reasoning: req.reasoning.clone().unwrap_or_default(),
            store: req.store.unwrap_or(true),
            temperature: decimal(sampling.0),
            text: req.text.clone().unwrap_or(TextParam {
                format: Some(TextFormat {
                    kind: "text".into(),
                    name: None,
                    schema: None,
                    strict: None,
                    description: None,
                }),
            }),
            tool_choice: req.tool_choice.clone().unwrap_or_else(|| Value::String("auto".into())),
            tools: req.tools.clone().unwrap_or_default(),
            top_p: decimal(sampling.1),
            truncation: "disabled",
            usage: None,
            user: req.user.clone(),
            metadata: req.metadata.clone().unwrap_or_default(),
            background: false,
        }
    }

    /// The assistant turn its output adds to a conversation (for `previous_response_id`).
    pub fn as_messages(&self) -> Vec<ChatMessage> {
        let mut turn = message("assistant", None);
        for item in &self.output {
            match item {
                OutputItem::Reasoning { content, .. } => {
                    let text: String = content.iter().map(OutputContent::text).collect();
                    turn.reasoning_content.get_or_insert_default().push_str(&text);
                }
                OutputItem::Message { content, .. } => {
                    let text: String = content.iter().map(OutputContent::text).collect();
                    turn.content = Some(Content::Text(text));
                }
                OutputItem::FunctionCall { call_id, name, arguments, .. } => {
                    turn.tool_calls.get_or_insert_default().push(ToolCall {
                        id: Some(call_id.clone()),
                        kind: Some("function".into()),
                        function: FunctionCall { name: name.clone(), arguments: arguments.clone() },
                    })
                }
            }
        }
        vec![turn]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roles(messages: &[ChatMessage]) -> Vec<&str> {
        messages.iter().map(|m| m.role.as_str()).collect()
    }

    #[test]
    fn a_string_is_one_user_message() {
        let m = input_messages(&json!("Hi")).unwrap();
        assert_eq!(roles(&m), ["user"]);
        assert!(matches!(&m[0].content, Some(Content::Text(t)) if t == "Hi"));
    }

    #[test]
    fn output_items_sent_back_become_one_assistant_turn() {
        let input = json!([
            {"role": "user", "content": [{"type": "input_text", "text": "Weather "}, {"type": "input_text", "text": "in Paris?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need the tool."}]},
            {"type": "function_call", "call_id": "call_a", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call", "call_id": "call_b", "name": "time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_a", "output": "18 C"},
            {"type": "function_call_output", "call_id": "call_b", "output": "noon"},
        ]);
        let m = input_messages(&input).unwrap();
        assert_eq!(roles(&m), ["user", "assistant", "tool", "tool"]);
        assert!(matches!(&m[0].content, Some(Content::Text(t)) if t == "Weather in Paris?"));
        let calls = m[1].tool_calls.as_ref().unwrap();
        assert_eq!(calls.iter().map(|c| c.function.name.as_str()).collect::<Vec<_>>(), ["weather", "time"]);
        assert_eq!(m[1].reasoning_content.as_deref(), Some("Need the tool."));
        assert_eq!(m[2].tool_call_id.as_deref(), Some("call_a"));
        assert!(matches!(&m[3].content, Some(Content::Text(t)) if t == "noon"));
    }

    #[test]
    fn bad_items_are_400s_naming_the_field() {
        let cases = [
            (json!(3), "input"),
            (json!([5]), "input[0]"),
            (json!([{"content": "x"}]), "input[0].type"),
            (json!([{"role": "robot", "content": "x"}]), "input[0].role"),
            (
                json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
                "input[0].content[0].type",
            ),
            (
                json!([{"role": "user", "content": "a"}, {"type": "function_call", "name": "f", "arguments": "{}"}]),
                "input[1].call_id",
            ),
            (json!([{"type": "function_call_output", "call_id": "c"}]), "input[0].output"),
            (json!([{"type": "item_reference", "id": "msg_1"}]), "input[0].type"),
        ];
        for (input, param) in cases {
            let err = input_messages(&input).unwrap_err();
            assert_eq!(err.param.as_deref(), Some(param), "{input}");
            assert_eq!(err.status, 400);
        }
    }

    #[test]
    fn the_chat_request_carries_every_setting() {
        let req: ResponsesRequest = serde_json::from_value(json!({
            "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 9, "temperature": 0.5,
            "reasoning": {"effort": "low"}, "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": false
        }))
        .unwrap();
        let (chat, turn) = req.to_chat(vec![message("user", Some("Before".into()))]).unwrap();
        assert_eq!(roles(&chat.messages), ["developer", "user", "user"]);
        assert_eq!(roles(&turn), ["user"]);
        assert_eq!((chat.max_completion_tokens, chat.common.temperature), (Some(9), Some(0.5)));
        assert_eq!(chat.reasoning_effort.as_deref(), Some("low"));
        let format = chat.common.response_format.unwrap();
        assert_eq!(format.json_schema.unwrap().schema, Some(json!({"type": "object"})));
        assert_eq!(chat.tools.unwrap()[0].function.name, "f");
        assert_eq!(chat.tool_choice, Some(json!({"type": "function", "function": {"name": "f"}})));
        assert_eq!(chat.parallel_tool_calls, Some(false));
        let web: ResponsesRequest =
            serde_json::from_value(json!({"input": "Hi", "tools": [{"type": "web_search"}]})).unwrap();
        assert_eq!(web.to_chat(Vec::new()).unwrap_err().param.as_deref(), Some("tools[0].type"));
    }
}
