//! The Harmony chat format of GPT-OSS, as OpenAI's `openai-harmony` library renders and parses it.
//!
//! ```text
//! <|start|>system<|message|>{identity}\nKnowledge cutoff: {cutoff}\n[Current date: {date}\n]\n
//!     Reasoning: {effort}\n\n# Valid channels: analysis, commentary, final. Channel must be
//!     included for every message.<|end|>
//! <|start|>developer<|message|># Instructions\n\n{instructions}<|end|>
//! <|start|>user<|message|>{text}<|end|>
//! <|start|>assistant<|channel|>analysis<|message|>{reasoning}<|end|>        (dropped once a final follows)
//! <|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json<|message|>{args}<|call|>
//! <|start|>functions.f<|channel|>commentary<|message|>{result}<|end|>
//! <|start|>assistant<|channel|>final<|message|>{answer}<|end|>
//! <|start|>assistant                                                        (the completion prompt)
//! ```
//!
//! A completion continues after the prompt's `<|start|>assistant`: `<|channel|>analysis<|message|>…
//! <|end|><|start|>assistant<|channel|>final<|message|>…<|return|>`. [`parse_completion`] splits it
//! into [`Message`]s; [`Completion`] gathers the `analysis` and `final` text.
//!
//! Tool *definitions* (the `# Tools` sections of the system and developer messages) are not
//! rendered yet; tool calls and results are.

use std::fmt::Write as _;

/// Special tokens, as text.
pub const START: &str = "<|start|>";
/// Ends a header and starts the content.
pub const MESSAGE: &str = "<|message|>";
/// Introduces the channel in a header.
pub const CHANNEL: &str = "<|channel|>";
/// Ends a message.
pub const END: &str = "<|end|>";
/// Ends the assistant's final message of a completion.
pub const RETURN: &str = "<|return|>";
/// Ends an assistant message addressed to a tool.
pub const CALL: &str = "<|call|>";

/// Errors splitting a completion.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HarmonyError {
    /// A message header never reaches `<|message|>`.
    #[error("harmony completion: message header at byte {offset} has no <|message|>")]
    UnterminatedHeader {
        /// Byte offset of the header in the completion.
        offset: usize,
    },
    /// Text between messages that is not `<|start|>`.
    #[error("harmony completion: expected <|start|> at byte {offset}, found {found:?}")]
    ExpectedStart {
        /// Byte offset in the completion.
        offset: usize,
        /// Up to 20 characters found there.
        found: String,
    },
}

/// Who wrote a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// The system prompt (model identity, dates, reasoning effort, channels).
    System,
    /// Developer instructions.
    Developer,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool's result; the header names the tool (e.g. `functions.get_weather`).
    Tool(String),
}

impl Role {
    /// The name in a header.
    pub fn header_name(&self) -> &str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool(name) => name,
        }
    }

    /// The role a header name stands for (any other name is a tool's).
    pub fn from_header_name(name: &str) -> Role {
        match name {
            "system" => Role::System,
            "developer" => Role::Developer,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            tool => Role::Tool(tool.to_string()),
        }
    }
}

/// How long the model should reason (`Reasoning: …` in the system message).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReasoningEffort {
    /// `low`.
    Low,
    /// `medium` (the library's default).
    #[default]
    Medium,
    /// `high`.
    High,
}

impl ReasoningEffort {
    /// The word in the system message.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// The system message's fields, with `openai-harmony`'s defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemContent {
    /// First line.
    pub model_identity: String,
    /// `Knowledge cutoff: …`.
    pub knowledge_cutoff: String,
    /// `Current date: …`, if given.
    pub conversation_start_date: Option<String>,
    /// `Reasoning: …`.
    pub reasoning_effort: ReasoningEffort,
    /// `# Valid channels: …`.
    pub valid_channels: Vec<String>,
    /// The developer message defines function tools: the model is told to call them on the
    /// `commentary` channel.
    pub function_tools: bool,
}

impl Default for SystemContent {
    fn default() -> SystemContent {
        SystemContent {
            model_identity: "You are ChatGPT, a large language model trained by OpenAI.".into(),
            knowledge_cutoff: "2024-06".into(),
            conversation_start_date: None,
            reasoning_effort: ReasoningEffort::Medium,
            valid_channels: ["analysis", "commentary", "final"].map(String::from).to_vec(),
            function_tools: false,
        }
    }
}

impl SystemContent {
    /// The message text.
    pub fn render(&self) -> String {
        let mut s = format!("{}\nKnowledge cutoff: {}\n", self.model_identity, self.knowledge_cutoff);
        if let Some(date) = &self.conversation_start_date {
            let _ = writeln!(s, "Current date: {date}");
        }
        let _ = write!(s, "\nReasoning: {}", self.reasoning_effort.as_str());
        if !self.valid_channels.is_empty() {
            let _ = write!(
                s,
                "\n\n# Valid channels: {}. Channel must be included for every message.",
                self.valid_channels.join(", ")
            );
            if self.function_tools {
                s.push_str("\nCalls to these tools must go to the commentary channel: 'functions'.");
            }
        }
        s
    }
}

/// The developer message's text: `# Instructions\n\n{instructions}`.
pub fn developer_content(instructions: &str) -> String {
    format!("# Instructions\n\n{instructions}")
}

/// Whether a model of architecture `arch` (`general.architecture` or `model_type`) chats in
/// Harmony.
pub fn is_harmony_arch(arch: &str) -> bool {
    minerva_model::arch::registry::find(arch).is_some_and(|a| a.chat == minerva_model::arch::ChatFormat::Harmony)
}

/// The Harmony prompt of a plain chat (`minerva run --chat`, `minerva chat`): `system` and
/// `developer` messages become the developer instructions, `user` messages the user's, and
/// `assistant` messages earlier answers (`final`); it ends in `<|start|>assistant`.
pub fn chat_prompt(messages: &[crate::Message], system: &SystemContent) -> String {
    let instructions: Vec<&str> =
        messages.iter().filter(|m| m.role == "system" || m.role == "developer").map(|m| m.content.as_str()).collect();
    let mut out = vec![Message::system(system)];
    if !instructions.is_empty() {
        out.push(Message::developer(&instructions.join("\n\n")));
    }
    for m in messages {
        match m.role.as_str() {
            "system" | "developer" => {}
            "assistant" => out.push(Message::new(Role::Assistant, m.content.clone()).with_channel("final")),
            other => out.push(Message::new(Role::from_header_name(other), m.content.clone())),
        }
    }
    render_conversation_for_completion(&out, &Role::Assistant)
}

/// A function the model may call, as an OpenAI `tools` entry describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionDefinition {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// A JSON schema of its arguments (`None`: it takes none).
    pub parameters: Option<serde_json::Value>,
}

/// The developer message's `# Tools` section for function tools: each function as a TypeScript
/// type in `namespace functions`, as `openai-harmony` renders it.
pub fn render_function_tools(functions: &[FunctionDefinition]) -> String {
    let mut s = String::from("# Tools\n\n## functions\n\nnamespace functions {\n\n");
    for f in functions {
        for line in f.description.lines() {
            let _ = writeln!(s, "// {line}");
        }
        match &f.parameters {
            Some(schema) if schema.get("properties").is_some() => {
                let _ = writeln!(s, "type {} = (_: {{", f.name);
                render_properties(&mut s, schema);
                s.push_str("}) => any;\n\n");
            }
            _ => {
                let _ = writeln!(s, "type {} = () => any;\n", f.name);
            }
        }
    }
    s.push_str("} // namespace functions");
    s
}

/// One `name?: type, // default: …` line per property of an object schema.
fn render_properties(s: &mut String, schema: &serde_json::Value) {
    let required: Vec<&str> =
        schema.get("required").and_then(|r| r.as_array()).into_iter().flatten().filter_map(|v| v.as_str()).collect();
    let Some(props) = schema.get("properties").and_then(|p| p.as_object()) else { return };
    for (name, prop) in props {
        if let Some(d) = prop.get("description").and_then(|d| d.as_str()) {
            for line in d.lines() {
                let _ = writeln!(s, "// {line}");
            }
        }
        let optional = if required.contains(&name.as_str()) { "" } else { "?" };
        let _ = write!(s, "{name}{optional}: {},", type_script(prop));
        if let Some(default) = prop.get("default") {
            let shown = default.as_str().map_or_else(|| default.to_string(), str::to_string);
            let _ = write!(s, " // default: {shown}");
        }
        s.push('\n');
    }
}

/// A JSON schema as a TypeScript type.
fn type_script(schema: &serde_json::Value) -> String {
    if let Some(options) = schema.get("enum").and_then(|e| e.as_array()) {
        return options.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(" | ");
    }
    match schema.get("type").and_then(|t| t.as_str()) {
        Some("string") => "string".into(),
        Some("integer" | "number") => "number".into(),
        Some("boolean") => "boolean".into(),
        Some("null") => "null".into(),
        Some("array") => match schema.get("items") {
            Some(items) => format!("{}[]", type_script(items)),
            None => "any[]".into(),
        },
        Some("object") if schema.get("properties").is_some() => {
            let mut s = String::from("{\n");
            render_properties(&mut s, schema);
            s.push('}');
            s
        }
        Some("object") => "object".into(),
        _ => "any".into(),
    }
}

/// One message: header fields and text content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Its author.
    pub role: Role,
    /// `analysis`, `commentary` or `final` (assistant and tool messages).
    pub channel: Option<String>,
    /// Addressee of a tool call (`functions.get_weather`): ` to=…` in the header.
    pub recipient: Option<String>,
    /// Content type after the channel, e.g. `<|constrain|>json`.
    pub content_type: Option<String>,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message with no channel, recipient or content type.
    pub fn new(role: Role, content: impl Into<String>) -> Message {
        Message { role, channel: None, recipient: None, content_type: None, content: content.into() }
    }

    /// The system message.
    pub fn system(content: &SystemContent) -> Message {
        Message::new(Role::System, content.render())
    }

    /// The developer message with `instructions`.
    pub fn developer(instructions: &str) -> Message {
        Message::new(Role::Developer, developer_content(instructions))
    }

    /// The same message on `channel`.
    pub fn with_channel(mut self, channel: impl Into<String>) -> Message {
        self.channel = Some(channel.into());
        self
    }

    /// The same message addressed to `recipient`.
    pub fn with_recipient(mut self, recipient: impl Into<String>) -> Message {
        self.recipient = Some(recipient.into());
        self
    }

    /// The same message with a content type.
    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Message {
        self.content_type = Some(content_type.into());
        self
    }

    /// `<|start|>{header}<|message|>{content}{end}`: the end is `<|call|>` for an assistant message
    /// addressed to a tool, `<|end|>` otherwise.
    pub fn render(&self) -> String {
        let mut s = format!("{START}{}", self.role.header_name());
        if let Some(to) = self.recipient.as_ref().filter(|_| !matches!(self.role, Role::Tool(_))) {
            let _ = write!(s, " to={to}");
        }
        if let Some(channel) = &self.channel {
            let _ = write!(s, "{CHANNEL}{channel}");
        }
        if let Some(ct) = &self.content_type {
            let _ = write!(s, " {ct}");
        }
        let end = if self.role == Role::Assistant && self.recipient.is_some() { CALL } else { END };
        let _ = write!(s, "{MESSAGE}{}{end}", self.content);
        s
    }
}

/// The conversation as text. As `openai-harmony` does by default, assistant `analysis` messages
/// before the last assistant `final` message are dropped: earlier turns' reasoning is not shown
/// to the model again.
pub fn render_conversation(messages: &[Message]) -> String {
    let last_final = messages.iter().rposition(|m| m.role == Role::Assistant && m.channel.as_deref() == Some("final"));
    messages
        .iter()
        .enumerate()
        .filter(|(i, m)| {
            let old_analysis = m.role == Role::Assistant && m.channel.as_deref() == Some("analysis");
            !(old_analysis && last_final.is_some_and(|f| *i < f))
        })
        .map(|(_, m)| m.render())
        .collect()
}

/// The prompt for the next message by `next`: the conversation, then `<|start|>{next}`.
pub fn render_conversation_for_completion(messages: &[Message], next: &Role) -> String {
    format!("{}{START}{}", render_conversation(messages), next.header_name())
}

/// A parsed completion message: the [`Message`] and whether its end token was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedMessage {
    /// The message.
    pub message: Message,
    /// `false` when the text stopped inside the content (generation cut off).
    pub finished: bool,
}

/// Splits `completion` — the text generated after a prompt ending in `<|start|>{role}` — into
/// messages. The first message's header holds no role (it was in the prompt); later ones start
/// with `<|start|>`. A completion that stops inside a message's content yields it unfinished.
pub fn parse_completion(completion: &str, role: &Role) -> Result<Vec<ParsedMessage>, HarmonyError> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut first = true;
    while at < completion.len() {
        let rest = &completion[at..];
        let header_start = if first {
            at
        } else if let Some(stripped) = rest.strip_prefix(START) {
            completion.len() - stripped.len()
        } else {
            return Err(HarmonyError::ExpectedStart { offset: at, found: rest.chars().take(20).collect() });
        };
        let header_len = completion[header_start..]
            .find(MESSAGE)
            .ok_or(HarmonyError::UnterminatedHeader { offset: header_start })?;
        let header = &completion[header_start..header_start + header_len];
        let body_start = header_start + header_len + MESSAGE.len();
        let body = &completion[body_start..];
        let (content, end_len) = [END, RETURN, CALL]
            .iter()
            .filter_map(|end| body.find(end).map(|i| (i, end.len())))
            .min()
            .map_or((body, None), |(i, len)| (&body[..i], Some(len)));
        let mut message = parse_header(header, if first { Some(role) } else { None });
        message.content = content.to_string();
        out.push(ParsedMessage { message, finished: end_len.is_some() });
        at = body_start + content.len() + end_len.unwrap_or(0);
        first = false;
    }
    Ok(out)
}

/// `{role}[ to=R]<|channel|>{channel}[ to=R][ {content type}]`, the role given for the first
/// message of a completion.
pub(crate) fn parse_header(header: &str, role: Option<&Role>) -> Message {
    let (before, after) = match header.split_once(CHANNEL) {
        Some((b, a)) => (b, Some(a)),
        None => (header, None),
    };
    let mut words = before.split_whitespace().peekable();
    let role = match role {
        Some(r) => r.clone(),
        None => match words.peek() {
            Some(w) if !w.starts_with("to=") => Role::from_header_name(words.next().unwrap_or_default()),
            _ => Role::Assistant,
        },
    };
    let mut message = Message::new(role, "");
    let mut rest: Vec<&str> = Vec::new();
    for w in words {
        rest.push(w);
    }
    if let Some(after) = after {
        let mut words = after.split_whitespace();
        message.channel = words.next().map(String::from);
        rest.extend(words);
    }
    let mut content_type = Vec::new();
    for w in rest {
        match w.strip_prefix("to=") {
            Some(to) => message.recipient = Some(to.to_string()),
            None => content_type.push(w),
        }
    }
    if !content_type.is_empty() {
        message.content_type = Some(content_type.join(" "));
    }
    message
}

/// A completion split by channel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// Every message, in order.
    pub messages: Vec<ParsedMessage>,
}

impl Completion {
    /// Parses an assistant completion (see [`parse_completion`]).
    pub fn parse(completion: &str) -> Result<Completion, HarmonyError> {
        Ok(Completion { messages: parse_completion(completion, &Role::Assistant)? })
    }

    /// The contents of the messages on `channel`, joined by newlines.
    pub fn channel_text(&self, channel: &str) -> String {
        let parts: Vec<&str> = self
            .messages
            .iter()
            .filter(|m| m.message.channel.as_deref() == Some(channel))
            .map(|m| m.message.content.as_str())
            .collect();
        parts.join("\n")
    }

    /// The reasoning (`analysis` channel).
    pub fn analysis(&self) -> String {
        self.channel_text("analysis")
    }

    /// The answer: the last `final` message, if the completion has one.
    pub fn final_text(&self) -> Option<&str> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.message.channel.as_deref() == Some("final"))
            .map(|m| m.message.content.as_str())
    }

    /// The tool call (an assistant message with a recipient), if the completion ends in one.
    pub fn tool_call(&self) -> Option<&Message> {
        self.messages.last().map(|m| &m.message).filter(|m| m.recipient.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_off_completion_keeps_its_partial_message() {
        let c = Completion::parse(
            "<|channel|>analysis<|message|>Let me think<|end|><|start|>assistant<|channel|>final<|message|>The ans",
        )
        .unwrap();
        assert_eq!(c.analysis(), "Let me think");
        assert_eq!(c.final_text(), Some("The ans"));
        assert!(c.messages[0].finished && !c.messages[1].finished);
    }

    #[test]
    fn malformed_completions_are_errors_with_offsets() {
        let err = Completion::parse("<|channel|>final").unwrap_err();
        assert_eq!(err, HarmonyError::UnterminatedHeader { offset: 0 });
        let err = Completion::parse("<|channel|>final<|message|>x<|end|>junk").unwrap_err();
        assert_eq!(err, HarmonyError::ExpectedStart { offset: 35, found: "junk".into() });
        assert_eq!(err.to_string(), "harmony completion: expected <|start|> at byte 35, found \"junk\"");
    }
}
