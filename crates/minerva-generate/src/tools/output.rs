//! [`ToolOutput`]: a completion in a text tool format split, as it is generated, into reasoning
//! (`<think>…</think>`), answer text and tool calls (name first, then argument fragments).

use super::ToolFormat;
use super::json::{Header, StringDecoder, ValueEnd, call_header, parse_call};
use crate::harmony_stream::OutputPiece;

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// Where a completion starts with respect to reasoning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThinkStart {
    /// The template does not think: all text is the answer.
    Never,
    /// The completion may open with `<think>` (Qwen 3).
    MayOpen,
    /// The prompt ended inside `<think>` (DeepSeek-R1 distills): reasoning until `</think>`.
    Open,
}

impl ThinkStart {
    /// How a completion of `prompt` rendered by `template` starts.
    pub fn of(template: Option<&str>, prompt: &str) -> ThinkStart {
        if prompt.trim_end().ends_with(THINK_OPEN) {
            ThinkStart::Open
        } else if template.is_some_and(|t| t.contains(THINK_CLOSE)) {
            ThinkStart::MayOpen
        } else {
            ThinkStart::Never
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Think {
    /// Reading what may be `<think>` (leading whitespace allowed).
    Opening,
    Inside,
    /// Dropping the whitespace after `</think>`.
    Closed,
    Done,
}

/// One call object being read.
#[derive(Clone, Debug, Default)]
struct CallReader {
    /// Its number among the choice's calls.
    index: usize,
    /// Its name went out (as a [`OutputPiece::ToolCall`]).
    named: bool,
    text: String,
    end: ValueEnd,
    /// Streaming its arguments (the header was read): where the arguments end.
    streaming: Option<ValueEnd>,
    args_done: bool,
    header_other: bool,
}

#[derive(Clone, Debug)]
enum Mode {
    /// Before the first non-space character (formats whose call must open the answer).
    Start,
    /// Answer text, watching for the format's call marker.
    Text,
    /// Answer text to the end.
    Plain,
    /// Whitespace, then `want` (`[` after `[TOOL_CALLS]`, `{` of a next call, …).
    Expect {
        want: &'static str,
        got: usize,
        then: Next,
    },
    Call(CallReader),
    /// After a call in a list: `,` for another or `]` to close it.
    ListSep,
    /// After a Llama 3 call: `;` for another, else text.
    Llama3Sep,
    /// The generic format's object: reading up to its first value.
    GenericHead(String),
    /// The generic `response` string.
    Response(StringDecoder),
    /// A generic object of another shape: read whole, then parsed.
    Whole(String, ValueEnd),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    Call,
    Text,
    /// The generic object's closing `}`, then nothing more.
    Plain,
}

/// The incremental splitter; see the module docs. Feed it the completion's text with special
/// tokens spelled out (`[TOOL_CALLS]` is one in Mistral's vocabulary).
#[derive(Clone, Debug)]
pub struct ToolOutput {
    format: Option<ToolFormat>,
    think: Think,
    /// Text held back: a possible marker's start.
    held: String,
    mode: Mode,
    calls: usize,
}

impl ToolOutput {
    /// A splitter for `format` (`None`: no tools, only reasoning split off).
    pub fn new(format: Option<ToolFormat>, think: ThinkStart) -> ToolOutput {
        let think = match think {
            ThinkStart::Never => Think::Done,
            ThinkStart::MayOpen => Think::Opening,
            ThinkStart::Open => Think::Inside,
        };
        let mode = match format {
            Some(ToolFormat::Llama3 | ToolFormat::Generic) => Mode::Start,
            Some(_) => Mode::Text,
            None => Mode::Plain,
        };
        ToolOutput { format, think, held: String::new(), mode, calls: 0 }
    }

    /// Whether it looks for tool calls (else only reasoning is split off).
    pub fn has_tools(&self) -> bool {
        self.format.is_some()
    }

    /// Tool calls read whole so far.
    pub fn tool_calls(&self) -> usize {
        self.calls
    }

    /// Adds generated text; returns what it adds.
    pub fn push(&mut self, text: &str) -> Vec<OutputPiece> {
        let mut out = Vec::new();
        for c in text.chars() {
            self.char(c, &mut out);
        }
        out
    }

    /// The end of the completion: text held back as a possible marker is released, and a call
    /// that never found its streaming header is parsed whole (or given back as text).
    pub fn finish(&mut self) -> Vec<OutputPiece> {
        let mut out = Vec::new();
        let held = std::mem::take(&mut self.held);
        match self.think {
            Think::Opening | Think::Closed => self.think = Think::Done,
            Think::Inside => {
                if !held.is_empty() {
                    out.push(OutputPiece::Reasoning(held.clone()));
                }
                return out;
            }
            Think::Done => {}
        }
        if self.calls == 0 || !held.trim().is_empty() {
            push_answer(&mut out, &held);
        }
        match std::mem::replace(&mut self.mode, Mode::Plain) {
            Mode::Call(reader) if reader.streaming.is_none() => push_answer(&mut out, &reader.text),
            Mode::GenericHead(text) | Mode::Whole(text, _) => self.whole_generic(&text, &mut out),
            _ => {}
        }
        out
    }

    fn char(&mut self, c: char, out: &mut Vec<OutputPiece>) {
        match self.think {
            Think::Done => self.tool_char(c, out),
            Think::Opening => {
                self.held.push(c);
                let t = self.held.trim_start();
                if t == THINK_OPEN {
                    self.held.clear();
                    self.think = Think::Inside;
                } else if !THINK_OPEN.starts_with(t) {
                    self.think = Think::Done;
                    for c in std::mem::take(&mut self.held).chars() {
                        self.tool_char(c, out);
                    }
                }
            }
            Think::Inside => {
                self.held.push(c);
                if let Some(reasoning) = self.held.strip_suffix(THINK_CLOSE) {
                    push_reasoning(out, reasoning);
                    self.held.clear();
                    self.think = Think::Closed;
                } else {
                    let keep = partial_suffix(&self.held, THINK_CLOSE);
                    let ready = self.held.len() - keep;
                    if ready > 0 {
                        push_reasoning(out, &self.held[..ready]);
                        self.held.drain(..ready);
                    }
                }
            }
            Think::Closed => {
                if !c.is_whitespace() {
                    self.think = Think::Done;
                    self.tool_char(c, out);
                }
            }
        }
    }

    /// A call object starts with the `{` just read.
    fn start_call(&mut self) {
        let mut reader = CallReader { index: self.calls, ..CallReader::default() };
        reader.text.push('{');
        reader.end.push('{');
        self.mode = Mode::Call(reader);
    }

    fn tool_char(&mut self, c: char, out: &mut Vec<OutputPiece>) {
        let mut decoded = String::new();
        let format = self.format.unwrap_or(ToolFormat::Generic);
        match &mut self.mode {
            Mode::Plain => push_answer(out, c.encode_utf8(&mut [0; 4])),
            Mode::Start => {
                if c.is_whitespace() {
                    return;
                }
                match (c, format) {
                    ('{', ToolFormat::Llama3) => self.start_call(),
                    ('{', _) => self.mode = Mode::GenericHead("{".into()),
                    _ => {
                        self.mode = Mode::Plain;
                        push_answer(out, c.encode_utf8(&mut [0; 4]));
                    }
                }
            }
            Mode::Text => {
                let marker = if format == ToolFormat::Mistral { "[TOOL_CALLS]" } else { "<tool_call>" };
                self.held.push(c);
                if let Some(before) = self.held.strip_suffix(marker) {
                    // Space between calls is not an answer.
                    push_answer(out, if self.calls > 0 { before.trim_end() } else { before });
                    self.held.clear();
                    self.mode = match format {
                        ToolFormat::Mistral => Mode::Expect { want: "[", got: 0, then: Next::Call },
                        _ => Mode::Expect { want: "{", got: 0, then: Next::Call },
                    };
                } else {
                    let mut ready = self.held.len() - partial_suffix(&self.held, marker);
                    if self.calls > 0 {
                        // After a call, space is held until text or another call follows.
                        ready = self.held[..ready].trim_end().len();
                    }
                    push_answer(out, &self.held[..ready]);
                    self.held.drain(..ready);
                }
            }
            Mode::Expect { want, got, then } => {
                if *got == 0 && c.is_whitespace() {
                    return;
                }
                if want[*got..].starts_with(c) {
                    *got += c.len_utf8();
                    if *got == want.len() {
                        let (want, then) = (*want, *then);
                        match then {
                            // The `{` just read opens the call.
                            Next::Call if want == "{" => self.start_call(),
                            Next::Call => self.mode = Mode::Expect { want: "{", got: 0, then: Next::Call },
                            Next::Text => self.mode = Mode::Text,
                            Next::Plain => self.mode = Mode::Plain,
                        }
                    }
                } else {
                    // Not the format after all: the rest is text.
                    push_answer(out, &want[..*got]);
                    push_answer(out, c.encode_utf8(&mut [0; 4]));
                    self.mode = Mode::Plain;
                }
            }
            Mode::Call(reader) => {
                let done = reader.push(c, out);
                if reader.named {
                    self.calls = reader.index + 1;
                }
                if let Some(done) = done {
                    match done {
                        Some(()) => {}
                        None => {
                            // Not a call: give the text back.
                            push_answer(out, &reader.text);
                            self.mode = Mode::Plain;
                            return;
                        }
                    }
                    self.mode = match format {
                        ToolFormat::Hermes => Mode::Expect { want: "</tool_call>", got: 0, then: Next::Text },
                        ToolFormat::Llama3 => Mode::Llama3Sep,
                        ToolFormat::Mistral | ToolFormat::Generic => Mode::ListSep,
                    };
                }
            }
            Mode::ListSep => match c {
                c if c.is_whitespace() => {}
                ',' => self.mode = Mode::Expect { want: "{", got: 0, then: Next::Call },
                ']' if format == ToolFormat::Generic => {
                    self.mode = Mode::Expect { want: "}", got: 0, then: Next::Plain }
                }
                ']' => self.mode = Mode::Text,
                c => {
                    push_answer(out, c.encode_utf8(&mut [0; 4]));
                    self.mode = Mode::Plain;
                }
            },
            Mode::Llama3Sep => match c {
                c if c.is_whitespace() => {}
                ';' => self.mode = Mode::Expect { want: "{", got: 0, then: Next::Call },
                c => {
                    push_answer(out, c.encode_utf8(&mut [0; 4]));
                    self.mode = Mode::Plain;
                }
            },
            Mode::GenericHead(text) => {
                text.push(c);
                let squeezed: String = text.chars().filter(|c| !c.is_whitespace()).collect();
                if squeezed == "{\"tool_calls\":[" {
                    self.mode = Mode::Expect { want: "{", got: 0, then: Next::Call };
                } else if squeezed == "{\"response\":\"" {
                    self.mode = Mode::Response(StringDecoder::default());
                } else if !"{\"tool_calls\":[".starts_with(&squeezed) && !"{\"response\":\"".starts_with(&squeezed) {
                    let mut end = ValueEnd::default();
                    let text = std::mem::take(text);
                    let closed = text.chars().fold(false, |_, c| end.push(c));
                    if closed {
                        self.whole_generic(&text, out);
                        self.mode = Mode::Plain;
                    } else {
                        self.mode = Mode::Whole(text, end);
                    }
                }
            }
            Mode::Response(decoder) => match decoder.push(c, &mut decoded) {
                Ok(true) => push_answer(out, &decoded),
                Ok(false) => self.mode = Mode::Expect { want: "}", got: 0, then: Next::Plain },
                Err(()) => {
                    push_answer(out, c.encode_utf8(&mut [0; 4]));
                    self.mode = Mode::Plain;
                }
            },
            Mode::Whole(text, end) => {
                text.push(c);
                if end.push(c) {
                    let text = std::mem::take(text);
                    self.mode = Mode::Plain;
                    self.whole_generic(&text, out);
                }
            }
        }
    }

    /// A whole generic object: its calls, its response, or (another shape) its text.
    fn whole_generic(&mut self, text: &str, out: &mut Vec<OutputPiece>) {
        let v: Option<serde_json::Value> = serde_json::from_str(text).ok();
        let calls = v.as_ref().and_then(|v| v.get("tool_calls")).and_then(|c| c.as_array());
        let response = v.as_ref().and_then(|v| v.get("response")).and_then(|r| r.as_str());
        if let Some(calls) = calls {
            let parsed: Vec<(String, String)> =
                calls.iter().filter_map(|c| parse_call(&serde_json::to_string(c).unwrap_or_default())).collect();
            if parsed.len() == calls.len() {
                for (name, arguments) in parsed {
                    out.push(OutputPiece::ToolCall { index: self.calls, name });
                    out.push(OutputPiece::ToolArguments { index: self.calls, text: arguments });
                    self.calls += 1;
                }
                return;
            }
        }
        match response {
            Some(r) => push_answer(out, r),
            None => push_answer(out, text),
        }
    }
}

impl CallReader {
    /// Adds `c` of call number `index`. `Some(Some(()))` when the object closed as a call,
    /// `Some(None)` when it closed but is no call, `None` while it is open.
    fn push(&mut self, c: char, out: &mut Vec<OutputPiece>) -> Option<Option<()>> {
        let index = self.index;
        self.text.push(c);
        let closed = self.end.push(c);
        if let Some(args) = &mut self.streaming {
            if !self.args_done {
                if args.push(c) {
                    self.args_done = true;
                }
                push_arguments(out, index, c);
            }
        } else if !self.header_other {
            match call_header(&self.text) {
                Header::Incomplete => {}
                Header::Other => self.header_other = true,
                Header::Found(name, len) => {
                    out.push(OutputPiece::ToolCall { index, name });
                    self.named = true;
                    let mut args = ValueEnd::default();
                    let start = self.text[len..].to_string();
                    for c in start.chars() {
                        if args.push(c) {
                            self.args_done = true;
                        }
                        push_arguments(out, index, c);
                    }
                    self.streaming = Some(args);
                }
            }
        }
        if !closed {
            return None;
        }
        if self.streaming.is_some() {
            return Some(Some(()));
        }
        match parse_call(&self.text) {
            Some((name, arguments)) => {
                out.push(OutputPiece::ToolCall { index, name });
                out.push(OutputPiece::ToolArguments { index, text: arguments });
                self.named = true;
                Some(Some(()))
            }
            None => Some(None),
        }
    }
}

fn push_arguments(out: &mut Vec<OutputPiece>, index: usize, c: char) {
    if let Some(OutputPiece::ToolArguments { index: i, text }) = out.last_mut()
        && *i == index
    {
        text.push(c);
        return;
    }
    out.push(OutputPiece::ToolArguments { index, text: c.to_string() });
}

fn push_reasoning(out: &mut Vec<OutputPiece>, text: &str) {
    push_text(out, text, true);
}

fn push_answer(out: &mut Vec<OutputPiece>, text: &str) {
    push_text(out, text, false);
}

/// Appends `text` as answer (or `reasoning`), to the last piece when it is of the same kind.
fn push_text(out: &mut Vec<OutputPiece>, text: &str, reasoning: bool) {
    if text.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(OutputPiece::Reasoning(last)) if reasoning => last.push_str(text),
        Some(OutputPiece::Answer(last)) if !reasoning => last.push_str(text),
        _ if reasoning => out.push(OutputPiece::Reasoning(text.to_string())),
        _ => out.push(OutputPiece::Answer(text.to_string())),
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `marker`.
fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}
