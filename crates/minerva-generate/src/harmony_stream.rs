//! [`HarmonyStream`]: a Harmony completion split into channels while it is generated.
//!
//! [`crate::harmony::parse_completion`] splits a finished completion; a server streaming
//! `reasoning_content` apart from `content`, or a terminal dimming the reasoning, needs the same
//! split token by token. The generator hands special tokens over as such ([`HarmonyStream::special`])
//! and everything else as text ([`HarmonyStream::text`]), so a literal `<|end|>` typed inside a
//! message is text, never a marker.
//!
//! ```text
//! (prompt ends in <|start|>assistant)
//! header ─<|message|>─► content ─<|end|>─► between ─<|start|>─► header …
//!                          └─<|return|> / <|call|>─► done
//! ```

use crate::error::Result;
use crate::harmony::{CALL, CHANNEL, END, MESSAGE, Message, RETURN, Role, START, parse_header};
use crate::tokenizer::{TextStream, Tokenizer};

/// What a piece of a Harmony completion turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HarmonyEvent {
    /// A message's header is complete: its channel, recipient (`functions.get_weather` for a tool
    /// call) and content type are known.
    Start(Message),
    /// Content of the current message (whose header came in the last [`HarmonyEvent::Start`]).
    Text(String),
    /// The current message ended; `call` when it ended with `<|call|>` (a tool call).
    End {
        /// Ended by `<|call|>`.
        call: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Reading a header (the first one's role was in the prompt).
    Header { text: String, first: bool },
    /// Inside a message's content.
    Content,
    /// After `<|end|>`, waiting for `<|start|>`.
    Between,
}

/// The incremental Harmony splitter; see the module docs.
#[derive(Clone, Debug)]
pub struct HarmonyStream {
    state: State,
    current: Option<Message>,
}

impl Default for HarmonyStream {
    fn default() -> HarmonyStream {
        HarmonyStream::new()
    }
}

impl HarmonyStream {
    /// A stream for a completion that continues a prompt ending in `<|start|>assistant`.
    pub fn new() -> HarmonyStream {
        HarmonyStream { state: State::Header { text: String::new(), first: true }, current: None }
    }

    /// The message being generated, if its header is complete.
    pub fn current(&self) -> Option<&Message> {
        self.current.as_ref()
    }

    /// A special token's text (`<|channel|>`, `<|message|>`, `<|end|>`, …).
    pub fn special(&mut self, token: &str) -> Vec<HarmonyEvent> {
        match (&mut self.state, token) {
            (State::Header { text, first }, MESSAGE) => {
                let role = first.then_some(&Role::Assistant);
                let message = parse_header(text, role);
                self.current = Some(message.clone());
                self.state = State::Content;
                vec![HarmonyEvent::Start(message)]
            }
            (State::Header { text, .. }, _) if token != START => {
                // `<|channel|>`, `<|constrain|>`: part of the header's text.
                if token != CHANNEL && !text.is_empty() && !text.ends_with(' ') {
                    text.push(' ');
                }
                text.push_str(token);
                Vec::new()
            }
            (State::Content, END | RETURN | CALL) => {
                self.state = State::Between;
                vec![HarmonyEvent::End { call: token == CALL }]
            }
            (_, START) => {
                self.state = State::Header { text: String::new(), first: false };
                Vec::new()
            }
            // Any other special inside content or between messages carries no text.
            _ => Vec::new(),
        }
    }

    /// Ordinary text.
    pub fn text(&mut self, piece: &str) -> Vec<HarmonyEvent> {
        match &mut self.state {
            State::Header { text, .. } => {
                text.push_str(piece);
                Vec::new()
            }
            State::Content => vec![HarmonyEvent::Text(piece.to_string())],
            // Text outside any message breaks the format; keep it rather than lose output, as
            // content of a message with no channel.
            State::Between => {
                let message = Message::new(Role::Assistant, "");
                self.current = Some(message.clone());
                self.state = State::Content;
                vec![HarmonyEvent::Start(message), HarmonyEvent::Text(piece.to_string())]
            }
        }
    }
}

/// A piece of a completion by where it belongs: answer, reasoning or tool call (Harmony's channels
/// and the text tool formats of [`crate::tools`] alike).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputPiece {
    /// Text of the answer (`final`, or `commentary` addressed to the user).
    Answer(String),
    /// Reasoning (`analysis`).
    Reasoning(String),
    /// A tool call starts: `functions.{name}`, the choice's call number `index`.
    ToolCall {
        /// Which call of the completion (0, 1, …).
        index: usize,
        /// The function's name (without `functions.`).
        name: String,
    },
    /// More JSON arguments of call `index`.
    ToolArguments {
        /// Which call.
        index: usize,
        /// The text.
        text: String,
    },
}

/// Token ids → [`OutputPiece`]s: the detokenizer, the [`HarmonyStream`] and the routing of each
/// message by its channel and recipient, as the generator and the server both need them.
#[derive(Clone, Debug, Default)]
pub struct HarmonyOutput {
    text: TextStream,
    stream: HarmonyStream,
    route: Option<Route>,
    tool_calls: usize,
    called: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Answer,
    Reasoning,
    Tool,
}

impl HarmonyOutput {
    /// An empty output (the prompt ended in `<|start|>assistant`).
    pub fn new() -> HarmonyOutput {
        HarmonyOutput::default()
    }

    /// Adds token `id`; returns what it adds.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<Vec<OutputPiece>> {
        let events = if tok.is_special(id) {
            self.stream.special(&tok.id_to_token(id).unwrap_or_default())
        } else {
            match self.text.push(tok, id)? {
                Some(text) => self.stream.text(&text),
                None => Vec::new(),
            }
        };
        let mut out = Vec::new();
        for event in events {
            match event {
                HarmonyEvent::Start(m) => {
                    let tool = m.recipient.as_deref().and_then(|r| r.strip_prefix("functions."));
                    self.route = Some(match (tool, m.channel.as_deref()) {
                        (Some(name), _) => {
                            out.push(OutputPiece::ToolCall { index: self.tool_calls, name: name.to_string() });
                            self.tool_calls += 1;
                            Route::Tool
                        }
                        (None, Some("analysis")) => Route::Reasoning,
                        _ => Route::Answer,
                    });
                }
                HarmonyEvent::Text(text) => out.push(match self.route {
                    Some(Route::Reasoning) => OutputPiece::Reasoning(text),
                    Some(Route::Tool) => OutputPiece::ToolArguments { index: self.tool_calls - 1, text },
                    _ => OutputPiece::Answer(text),
                }),
                // `<|call|>` makes a tool call only of a message to a function; closing an
                // answer or reasoning it just ends the completion.
                HarmonyEvent::End { call } => self.called |= call && matches!(self.route, Some(Route::Tool)),
            }
        }
        Ok(out)
    }

    /// Whether a message to a function ended with `<|call|>`: the completion is a tool call.
    pub fn ended_in_call(&self) -> bool {
        self.called
    }

    /// Tool calls started so far.
    pub fn tool_calls(&self) -> usize {
        self.tool_calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harmony::Completion;

    /// Feeds a completion split into specials and text pieces, collecting the events.
    fn feed(pieces: &[&str]) -> Vec<HarmonyEvent> {
        let specials = [START, CHANNEL, MESSAGE, END, RETURN, CALL, "<|constrain|>"];
        let mut s = HarmonyStream::new();
        pieces.iter().flat_map(|p| if specials.contains(p) { s.special(p) } else { s.text(p) }).collect()
    }

    #[test]
    fn channels_stream_apart_and_agree_with_the_whole_parse() {
        let pieces = [
            "<|channel|>",
            "analysis",
            "<|message|>",
            "Let me",
            " think",
            "<|end|>",
            "<|start|>",
            "assistant",
            "<|channel|>",
            "final",
            "<|message|>",
            "The answer",
            " is 4.",
            "<|return|>",
        ];
        let events = feed(&pieces);
        let starts: Vec<Option<&str>> = events
            .iter()
            .filter_map(|e| match e {
                HarmonyEvent::Start(m) => Some(m.channel.as_deref()),
                _ => None,
            })
            .collect();
        assert_eq!(starts, vec![Some("analysis"), Some("final")]);
        let texts: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                HarmonyEvent::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, vec!["Let me", " think", "The answer", " is 4."]);
        let whole = Completion::parse(&pieces.concat()).unwrap();
        assert_eq!(whole.analysis(), "Let me think");
        assert_eq!(whole.final_text(), Some("The answer is 4."));
    }

    #[test]
    fn a_tool_call_has_its_recipient_and_ends_with_call() {
        let events = feed(&[
            "<|channel|>",
            "commentary to=functions.get_weather",
            " ",
            "<|constrain|>",
            "json",
            "<|message|>",
            "{\"city\":",
            "\"Paris\"}",
            "<|call|>",
        ]);
        let HarmonyEvent::Start(m) = &events[0] else { panic!("{events:?}") };
        assert_eq!(m.channel.as_deref(), Some("commentary"));
        assert_eq!(m.recipient.as_deref(), Some("functions.get_weather"));
        assert_eq!(m.content_type.as_deref(), Some("<|constrain|>json"));
        assert_eq!(events.last(), Some(&HarmonyEvent::End { call: true }));
    }

    #[test]
    fn marker_text_inside_content_is_text() {
        let mut s = HarmonyStream::new();
        s.special(CHANNEL);
        s.text("final");
        s.special(MESSAGE);
        assert_eq!(s.text("a literal <|end|>"), vec![HarmonyEvent::Text("a literal <|end|>".into())]);
        assert_eq!(s.current().and_then(|m| m.channel.as_deref()), Some("final"));
    }
}
