//! Incremental pieces of JSON the call parser needs while a call is still being generated: where
//! a value ends, a call's leading `{"name": "…", "arguments": ` (so its arguments can stream),
//! and a string's characters decoded as they arrive.

use serde_json::Value;

/// Finds where one JSON value ends, character by character (strings and escapes respected).
#[derive(Clone, Debug, Default)]
pub(super) struct ValueEnd {
    depth: usize,
    in_string: bool,
    escaped: bool,
    started: bool,
}

impl ValueEnd {
    /// Adds `c`; true when it closes the value (a container's last bracket, or a top-level
    /// string's closing quote).
    pub(super) fn push(&mut self, c: char) -> bool {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if c == '\\' {
                self.escaped = true;
            } else if c == '"' {
                self.in_string = false;
                return self.depth == 0;
            }
            return false;
        }
        match c {
            '"' => {
                self.started = true;
                self.in_string = true;
            }
            '{' | '[' => {
                self.started = true;
                self.depth += 1;
            }
            '}' | ']' => {
                self.depth = self.depth.saturating_sub(1);
                return self.started && self.depth == 0;
            }
            _ => {}
        }
        false
    }
}

/// What the start of a call object says so far.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Header {
    /// Not enough text yet.
    Incomplete,
    /// Not `{"name": …, "arguments": ` in that order: parse the whole call when it ends.
    Other,
    /// The name, and the byte length of the header (the arguments' object starts after it).
    Found(String, usize),
}

/// Reads `{ "name" : "NAME" , "arguments" : ` (or `"parameters"`) at the start of `text`.
pub(super) fn call_header(text: &str) -> Header {
    let mut rest = text;
    let ws = |s: &mut &str| *s = s.trim_start();
    // `Some(true)`: matched; `Some(false)`: cannot match; `None`: text ends first.
    let literal = |s: &mut &str, lit: &str| -> Option<bool> {
        if s.len() < lit.len() {
            return if lit.starts_with(*s) { None } else { Some(false) };
        }
        if s.starts_with(lit) {
            *s = &s[lit.len()..];
            Some(true)
        } else {
            Some(false)
        }
    };
    macro_rules! expect {
        ($lit:expr) => {
            ws(&mut rest);
            match literal(&mut rest, $lit) {
                None => return Header::Incomplete,
                Some(false) => return Header::Other,
                Some(true) => {}
            }
        };
    }
    expect!("{");
    expect!("\"name\"");
    expect!(":");
    ws(&mut rest);
    if rest.is_empty() {
        return Header::Incomplete;
    }
    if !rest.starts_with('"') {
        return Header::Other;
    }
    let mut end = ValueEnd::default();
    let Some(len) = rest.char_indices().find(|&(_, c)| end.push(c)).map(|(i, _)| i + 1) else {
        return Header::Incomplete;
    };
    let Ok(name) = serde_json::from_str::<String>(&rest[..len]) else { return Header::Other };
    rest = &rest[len..];
    expect!(",");
    ws(&mut rest);
    let key = if rest.starts_with("\"p") { "\"parameters\"" } else { "\"arguments\"" };
    expect!(key);
    expect!(":");
    ws(&mut rest);
    if rest.is_empty() {
        return Header::Incomplete;
    }
    if !rest.starts_with('{') {
        return Header::Other;
    }
    Header::Found(name, text.len() - rest.len())
}

/// A whole call object: its name and its arguments as a JSON text (`arguments` or `parameters`;
/// an arguments string is taken as the JSON text it holds). `None` when it is not a call.
pub(super) fn parse_call(text: &str) -> Option<(String, String)> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let args = match v.get("arguments").or_else(|| v.get("parameters")) {
        None => "{}".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => serde_json::to_string(other).ok()?,
    };
    Some((name, args))
}

/// Decodes a JSON string's content as it arrives (the opening quote already read).
#[derive(Clone, Debug, Default)]
pub(super) struct StringDecoder {
    escape: Option<String>,
    high_surrogate: Option<u32>,
}

impl StringDecoder {
    /// Adds `c`, its decoded text (if any) to `out`: `Ok(true)` inside the string, `Ok(false)` at
    /// its closing quote, `Err(())` on an invalid escape.
    pub(super) fn push(&mut self, c: char, out: &mut String) -> Result<bool, ()> {
        if let Some(esc) = &mut self.escape {
            esc.push(c);
            if esc.len() == 1 {
                let simple = match c {
                    '"' => Some('"'),
                    '\\' => Some('\\'),
                    '/' => Some('/'),
                    'b' => Some('\u{8}'),
                    'f' => Some('\u{c}'),
                    'n' => Some('\n'),
                    'r' => Some('\r'),
                    't' => Some('\t'),
                    'u' => None,
                    _ => return Err(()),
                };
                if let Some(ch) = simple {
                    out.push(ch);
                    self.escape = None;
                }
                return Ok(true);
            }
            if esc.len() < 5 {
                return Ok(true);
            }
            let code = u32::from_str_radix(&esc[1..], 16).map_err(|_| ())?;
            self.escape = None;
            match (self.high_surrogate.take(), code) {
                (None, 0xD800..=0xDBFF) => self.high_surrogate = Some(code),
                (Some(high), 0xDC00..=0xDFFF) => {
                    out.push(char::from_u32(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00)).ok_or(())?)
                }
                (None, _) => out.push(char::from_u32(code).ok_or(())?),
                (Some(_), _) => return Err(()),
            }
            return Ok(true);
        }
        match c {
            '\\' => self.escape = Some(String::new()),
            '"' => return Ok(false),
            c => out.push(c),
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_end_respects_strings_and_escapes() {
        let text = r#"{"a": "}\"{", "b": [1, {"c": 2}]} tail"#;
        let mut end = ValueEnd::default();
        let at = text.char_indices().find(|&(_, c)| end.push(c)).map(|(i, _)| i);
        assert_eq!(at, Some(text.find(" tail").unwrap() - 1));
    }

    #[test]
    fn headers_are_read_as_far_as_the_text_goes() {
        assert_eq!(call_header(""), Header::Incomplete);
        assert_eq!(call_header("{\"na"), Header::Incomplete);
        assert_eq!(call_header("{\"name\": \"f\\\"x"), Header::Incomplete);
        assert_eq!(call_header("{\"arguments\": {}"), Header::Other);
        let text = "{ \"name\" : \"get_weather\",\n \"parameters\": {\"city\"";
        assert_eq!(call_header(text), Header::Found("get_weather".into(), text.find("{\"city").unwrap()));
        assert_eq!(call_header("{\"name\": \"f\", \"arguments\": \"{}\"}"), Header::Other);
    }

    #[test]
    fn whole_calls_take_either_key_and_string_arguments() {
        assert_eq!(parse_call(r#"{"arguments": {"a": 1}, "name": "f"}"#), Some(("f".into(), r#"{"a":1}"#.into())));
        assert_eq!(parse_call(r#"{"name": "f", "arguments": "{\"a\": 1}"}"#), Some(("f".into(), r#"{"a": 1}"#.into())));
        assert_eq!(parse_call(r#"{"name": "f"}"#), Some(("f".into(), "{}".into())));
        assert_eq!(parse_call(r#"{"nam": "f"}"#), None);
    }

    #[test]
    fn strings_decode_escapes_split_anywhere() {
        let json = r#"a\"b\\c\n\u00e9\ud83d\ude00""#;
        let mut d = StringDecoder::default();
        let mut out = String::new();
        let mut closed = false;
        for c in json.chars() {
            if !d.push(c, &mut out).unwrap() {
                closed = true;
            }
        }
        assert!(closed);
        assert_eq!(out, "a\"b\\c\né😀");
        assert!(StringDecoder::default().push('\\', &mut out).is_ok());
        let mut bad = StringDecoder::default();
        bad.push('\\', &mut out).unwrap();
        assert!(bad.push('q', &mut out).is_err());
    }
}
