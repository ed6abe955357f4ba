//! [`ChatTemplate`]: a model's Jinja chat template rendered with minijinja, set up the way
//! transformers' `apply_chat_template` sets up Jinja2 (our parity reference).
//!
//! * `trim_blocks` and `lstrip_blocks` on, as transformers' environment has them;
//! * Python string/dict methods (`.strip()`, `.startswith()`, `.items()`, …) from minijinja-contrib's
//!   pycompat layer; `break`/`continue` (loop controls);
//! * globals `raise_exception(msg)` (fails the render with `msg`), `strftime_now(fmt)`, and a
//!   `tojson` filter formatted like Python's `json.dumps` (`", "` / `": "` separators, no ASCII or
//!   HTML escaping), as transformers defines it;
//! * context `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, plus any extra
//!   variables (`tools`, `date_string`, …).

use std::collections::BTreeMap;

pub use minijinja::value::Value;
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, ErrorKind};
use serde::Serialize;

use crate::error::{GenerateError, Result};
use minerva_model::arch::ChatFormat;

/// One chat message, with the fields tool-calling templates read (absent fields are undefined
/// in the template, as in transformers).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, …
    pub role: String,
    /// The text.
    pub content: String,
    /// An assistant message's calls: `{"id", "type": "function", "function": {"name",
    /// "arguments"}}` with `arguments` an object (as transformers passes them to templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A `tool` message: the function's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant message's reasoning (templates that think render or drop it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message { role: role.into(), content: content.into(), ..Message::default() }
    }
}

/// A compiled chat template with the model's BOS/EOS texts.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// BOS token text, exposed to the template as `bos_token`.
    pub bos_token: String,
    /// EOS token text, exposed as `eos_token`.
    pub eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("bos_token", &self.bos_token).finish_non_exhaustive()
    }
}

fn template_error(e: minijinja::Error) -> GenerateError {
    // raise_exception's message is the error's detail; other errors keep minijinja's position info.
    if e.kind() == ErrorKind::InvalidOperation
        && let Some(detail) = e.detail()
        && let Some(msg) = detail.strip_prefix("raise_exception: ")
    {
        return GenerateError::Template(msg.to_string());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    GenerateError::Template(text)
}

impl ChatTemplate {
    /// Compiles `source`.
    pub fn new(source: &str, bos_token: impl Into<String>, eos_token: impl Into<String>) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {msg}")))
        });
        env.add_function("strftime_now", |fmt: String| {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            strftime(&fmt, secs)
        });
        env.add_filter("tojson", |v: Value, kwargs: Kwargs| -> std::result::Result<Value, minijinja::Error> {
            let indent: Option<usize> = kwargs.get("indent")?;
            // transformers' tojson accepts these too; ensure_ascii/sort_keys default to off.
            let _: Option<bool> = kwargs.get("ensure_ascii")?;
            kwargs.assert_all_used()?;
            let mut out = String::new();
            to_python_json(&v, indent, 0, &mut out)?;
            Ok(Value::from_safe_string(out))
        });
        env.add_template_owned("chat", source.to_string()).map_err(template_error)?;
        Ok(ChatTemplate { env, bos_token: bos_token.into(), eos_token: eos_token.into() })
    }

    /// The template a tokenizer carries, with its BOS/EOS texts.
    pub fn from_tokenizer(tok: &crate::Tokenizer) -> Result<ChatTemplate> {
        let source = tok.chat_template.as_deref().ok_or(GenerateError::NoTemplate)?;
        ChatTemplate::new(source, tok.bos_text(), tok.eos_text())
    }

    /// Renders `messages`; `extra` adds variables: a map such as `{"tools": […], "date_string": …}`
    /// (parse JSON with `serde_json::from_str::<minijinja::Value>` to keep its key order, which
    /// `tojson` reproduces).
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool, extra: Option<&Value>) -> Result<String> {
        let mut ctx: BTreeMap<String, Value> = BTreeMap::new();
        if let Some(extra) = extra {
            for key in extra.try_iter().map_err(template_error)? {
                let value = extra.get_item(&key).map_err(template_error)?;
                ctx.insert(key.as_str().map(str::to_string).unwrap_or_else(|| key.to_string()), value);
            }
        }
        ctx.insert("messages".into(), Value::from_serialize(messages));
        ctx.insert("add_generation_prompt".into(), Value::from(add_generation_prompt));
        ctx.entry("bos_token".into()).or_insert_with(|| Value::from(self.bos_token.clone()));
        ctx.entry("eos_token".into()).or_insert_with(|| Value::from(self.eos_token.clone()));
        let template = self.env.get_template("chat").map_err(template_error)?;
        template.render(Value::from(ctx)).map_err(template_error)
    }
}

/// Gemma's chat template (Google's, as `google/gemma-3-*-it` ship it in `tokenizer_config.json`).
pub const GEMMA_TEMPLATE: &str = include_str!("templates/gemma.jinja");

/// ChatML as the Qwen chat templates render a conversation of plain messages: an optional system
/// turn, `<|im_start|>{role}\n{content}<|im_end|>\n` per message, consecutive `tool` messages
/// gathered into one user turn of `<tool_response>` blocks, and `<|im_start|>assistant\n` as the
/// generation prompt. Prefixed with a `default_system` for Qwen 2.5's behaviour.
macro_rules! chatml_body {
    () => {
        r#"{%- if messages and messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- elif default_system is defined %}
    {{- '<|im_start|>system\n' + default_system + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- elif not (message.role == 'system' and loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#
    };
}

/// Qwen 2 (as Qwen2.5-Instruct): ChatML with Qwen's default system prompt when none is given.
const QWEN2_CHATML: &str = concat!(
    "{%- set default_system = 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' %}\n",
    chatml_body!()
);

/// Qwen 3: ChatML without a default system prompt.
const QWEN3_CHATML: &str = chatml_body!();

/// The chat template built in for architecture `arch` (GGUF `general.architecture` or
/// `config.json` `model_type`, looked up in the architecture table), used when a model's files
/// carry none — llama.cpp has such templates built in too. `None` for architectures without one.
pub fn builtin_template(arch: &str) -> Option<&'static str> {
    match minerva_model::arch::registry::find(arch)?.chat {
        ChatFormat::Qwen2ChatMl => Some(QWEN2_CHATML),
        ChatFormat::Qwen3ChatMl => Some(QWEN3_CHATML),
        ChatFormat::Gemma => Some(GEMMA_TEMPLATE),
        _ => None,
    }
}

/// Python `json.dumps(v, ensure_ascii=False, indent=indent)` of a template value.
fn to_python_json(
    v: &Value,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) -> std::result::Result<(), minijinja::Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Ok(i) = i64::try_from(v.clone()) {
                out.push_str(&i.to_string());
            } else {
                let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                // Python prints floats with a fractional part or exponent, never as an integer.
                let s = format!("{f:?}");
                out.push_str(&s);
            }
        }
        ValueKind::String => {
            out.push_str(&serde_json::to_string(v.as_str().unwrap_or_default()).unwrap_or_default());
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                to_python_json(item, indent, depth + 1, out)?;
            }
            if !items.is_empty() {
                newline(out, depth);
            }
            out.push(']');
        }
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                let k = key.as_str().map(str::to_string).unwrap_or_else(|| key.to_string());
                out.push_str(&serde_json::to_string(&k).unwrap_or_default());
                out.push_str(": ");
                to_python_json(&v.get_item(key)?, indent, depth + 1, out)?;
            }
            if !keys.is_empty() {
                newline(out, depth);
            }
            out.push('}');
        }
        _ => out.push_str(&serde_json::to_string(&v.to_string()).unwrap_or_default()),
    }
    Ok(())
}

/// A `strftime` for UTC seconds since the epoch: `%d %m %Y %y %b %B %a %A %H %M %S %j %%`, the
/// codes chat templates use for "today's date".
pub fn strftime(fmt: &str, secs: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    // 1970-01-01 was a Thursday (index 3 with Monday = 0).
    let weekday = (days + 3).rem_euclid(7) as usize;
    let yday = days - days_from_civil(y, 1, 1) + 1;
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('b') => out.push_str(&MONTHS[m as usize - 1][..3]),
            Some('B') => out.push_str(MONTHS[m as usize - 1]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_known_dates() {
        // 2024-07-26 00:00:00 UTC = 1721952000 (a Friday).
        assert_eq!(strftime("%d %b %Y", 1_721_952_000), "26 Jul 2024");
        assert_eq!(strftime("%A %B %d, %y %j", 1_721_952_000), "Friday July 26, 24 208");
        assert_eq!(strftime("%Y-%m-%d %H:%M:%S %%", 0), "1970-01-01 00:00:00 %");
        assert_eq!(strftime("%Y-%m-%d %H:%M:%S", 951_827_696), "2000-02-29 12:34:56");
    }

    #[test]
    fn tojson_is_python_style() {
        let t = ChatTemplate::new("{{ x | tojson }}|{{ x | tojson(indent=2) }}", "", "").unwrap();
        let extra: Value = serde_json::from_str(r#"{"x": {"a": [1, 2.5, "é<"], "b": null, "c": true}}"#).unwrap();
        let out = t.render(&[], false, Some(&extra)).unwrap();
        assert_eq!(
            out,
            "{\"a\": [1, 2.5, \"é<\"], \"b\": null, \"c\": true}|{\n  \"a\": [\n    1,\n    2.5,\n    \"é<\"\n  ],\n  \"b\": null,\n  \"c\": true\n}"
        );
    }

    #[test]
    fn raise_exception_is_the_error_message() {
        let t = ChatTemplate::new("{{ raise_exception('roles must alternate') }}", "", "").unwrap();
        let err = t.render(&[], false, None).unwrap_err().to_string();
        assert_eq!(err, "chat template: roles must alternate");
    }
}
