//! Tool calling for models that write calls as text: which format a model uses ([`ToolFormat`],
//! found from its chat template), how the tools are shown to a template that knows nothing of
//! them, the grammar that makes a call parse with valid arguments, and the parser that turns
//! the model's output back into text, reasoning and calls ([`ToolOutput`]).
//!
//! GPT-OSS's Harmony is the other tool format; it lives in [`crate::harmony`].

mod json;
mod output;

pub use output::{ThinkStart, ToolOutput};

use serde_json::Value;

use crate::constraint::prepare_json_schema;
use crate::error::{GenerateError, Result};

/// How a model writes a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ToolFormat {
    /// Hermes, Qwen 2.5 / Qwen 3: `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`.
    Hermes,
    /// Llama 3.1 / 3.2 / 3.3: the whole answer is `{"name": …, "parameters": {…}}`.
    Llama3,
    /// Mistral: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`.
    Mistral,
    /// Any other template: the tools are described in a system message and the answer is one
    /// JSON object, `{"tool_calls": [{"name": …, "arguments": {…}}]}` or `{"response": "…"}`
    /// (llama-server's generic format).
    Generic,
}

impl ToolFormat {
    /// The format a chat template writes calls in: found from the markers it renders.
    pub fn detect(template: Option<&str>) -> ToolFormat {
        let Some(t) = template else { return ToolFormat::Generic };
        if t.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if t.contains("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if t.contains("<|start_header_id|>") && t.contains("tools") {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// The name `--tool-format` takes.
    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "hermes",
            ToolFormat::Llama3 => "llama3",
            ToolFormat::Mistral => "mistral",
            ToolFormat::Generic => "generic",
        }
    }

    /// Every format, for `--tool-format`'s help and errors.
    pub const ALL: [ToolFormat; 4] = [ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral, ToolFormat::Generic];

    /// The text that starts a call when the model may also answer in text (the trigger of the
    /// call grammar), and whether it must be the answer's first text.
    fn trigger(self) -> (&'static str, bool) {
        match self {
            ToolFormat::Hermes => ("<tool_call>", false),
            ToolFormat::Llama3 => ("{", true),
            ToolFormat::Mistral => ("[TOOL_CALLS]", false),
            ToolFormat::Generic => ("{", true),
        }
    }
}

impl std::str::FromStr for ToolFormat {
    type Err = GenerateError;

    fn from_str(s: &str) -> Result<ToolFormat> {
        ToolFormat::ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| {
            let names: Vec<&str> = ToolFormat::ALL.iter().map(|f| f.name()).collect();
            GenerateError::Grammar(format!("unknown tool format `{s}` (known: {})", names.join(", ")))
        })
    }
}

/// A function the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionSpec {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// The JSON schema of its arguments (an object); `None` takes any object.
    pub parameters: Option<Value>,
}

impl FunctionSpec {
    /// The OpenAI tool object `{"type": "function", "function": {…}}` templates iterate over.
    pub fn to_tool_json(&self) -> Value {
        let mut function = serde_json::Map::new();
        function.insert("name".into(), Value::String(self.name.clone()));
        if let Some(d) = &self.description {
            function.insert("description".into(), Value::String(d.clone()));
        }
        if let Some(p) = &self.parameters {
            function.insert("parameters".into(), p.clone());
        }
        serde_json::json!({"type": "function", "function": Value::Object(function)})
    }
}

/// Which calls the grammar admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallMode {
    /// Text or calls: the call grammar starts at the format's trigger.
    Auto,
    /// At least one call, to any of the functions.
    Required,
    /// Calls to this function only.
    Named(String),
}

/// A call grammar and when it applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallGrammar {
    /// The grammar in llguidance's Lark syntax.
    pub lark: String,
    /// `Some((text, anchored))`: the grammar applies from the first occurrence of `text` in the
    /// output (only at its start when `anchored`), text before it being free; `None`: from the
    /// first token.
    pub trigger: Option<(String, bool)>,
}

/// `text` as a Lark terminal: a special token by id where the vocabulary has it as one (a
/// special token is never spelled by text), else a string literal.
fn terminal(text: &str, special_id: &dyn Fn(&str) -> Option<u32>) -> String {
    match special_id(text) {
        Some(id) => format!("<[{id}]>"),
        None => serde_json::to_string(text).unwrap_or_default(),
    }
}

/// The grammar of `format`'s calls to `functions` under `mode`; `parallel` admits more than one
/// call. `special_id` gives the id of a special token by its text.
pub fn call_grammar(
    format: ToolFormat,
    functions: &[FunctionSpec],
    mode: &CallMode,
    parallel: bool,
    special_id: &dyn Fn(&str) -> Option<u32>,
) -> Result<CallGrammar> {
    let allowed: Vec<&FunctionSpec> = match mode {
        CallMode::Named(name) => functions.iter().filter(|f| &f.name == name).collect(),
        _ => functions.iter().collect(),
    };
    if allowed.is_empty() {
        return Err(GenerateError::Grammar("no function to call".into()));
    }
    let args_key = if format == ToolFormat::Llama3 { "parameters" } else { "arguments" };
    let mut rules = Vec::new();
    let mut calls = Vec::new();
    for (i, f) in allowed.iter().enumerate() {
        let schema = f.parameters.clone().unwrap_or_else(|| serde_json::json!({"type": "object"}));
        let schema = prepare_json_schema(&schema).map_err(|e| match e {
            GenerateError::Grammar(m) => GenerateError::Grammar(format!("function `{}`: {m}", f.name)),
            other => other,
        })?;
        let head = serde_json::to_string(&format!(
            "{{\"name\": {}, \"{args_key}\": ",
            serde_json::to_string(&f.name).unwrap_or_default()
        ))
        .unwrap_or_default();
        rules.push(format!("call_{i}: {head} %json {schema} \"}}\""));
        calls.push(format!("call_{i}"));
    }
    rules.push(format!("call: {}", calls.join(" | ")));
    let more = |sep: &str, one: &str| if parallel { format!("{one} ({sep} {one})*") } else { one.to_string() };
    let start = match format {
        ToolFormat::Hermes => {
            let open = terminal("<tool_call>", special_id);
            let close = terminal("</tool_call>", special_id);
            rules.push(format!("tagged: {open} \"\\n\" call \"\\n\" {close}"));
            more("\"\\n\"", "tagged")
        }
        ToolFormat::Llama3 => more("\"; \"", "call"),
        ToolFormat::Mistral => {
            format!("{} \"[\" {} \"]\"", terminal("[TOOL_CALLS]", special_id), more("\", \"", "call"))
        }
        ToolFormat::Generic => {
            let calls = format!("\"{{\\\"tool_calls\\\": [\" {} \"]}}\"", more("\", \"", "call"));
            match mode {
                CallMode::Auto => {
                    rules.push(r#"reply: "{\"response\": " %json {"type": "string"} "}""#.to_string());
                    format!("{calls} | reply")
                }
                _ => calls,
            }
        }
    };
    rules.insert(0, format!("start: {start}"));
    // The generic format is one JSON object whether it calls or replies: constrained from the
    // first token. The others write text until the call starts.
    let trigger = match (mode, format) {
        (CallMode::Auto, ToolFormat::Generic) | (CallMode::Required | CallMode::Named(_), _) => None,
        (CallMode::Auto, f) => {
            let (text, anchored) = f.trigger();
            Some((text.to_string(), anchored))
        }
    };
    Ok(CallGrammar { lark: rules.join("\n"), trigger })
}

/// Earlier calls `(name, arguments)` as `format` writes them: how an assistant message's
/// `tool_calls` are shown to a template that does not render them itself.
pub fn format_calls(format: ToolFormat, calls: &[(String, Value)]) -> String {
    let object = |key: &str, (name, args): &(String, Value)| {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), Value::String(name.clone()));
        m.insert(key.into(), args.clone());
        serde_json::to_string(&Value::Object(m)).unwrap_or_default()
    };
    let list = |key: &str| calls.iter().map(|c| object(key, c)).collect::<Vec<_>>().join(", ");
    match format {
        ToolFormat::Hermes => calls
            .iter()
            .map(|c| format!("<tool_call>\n{}\n</tool_call>", object("arguments", c)))
            .collect::<Vec<_>>()
            .join("\n"),
        ToolFormat::Llama3 => calls.iter().map(|c| object("parameters", c)).collect::<Vec<_>>().join("; "),
        ToolFormat::Mistral => format!("[TOOL_CALLS][{}]", list("arguments")),
        ToolFormat::Generic => format!("{{\"tool_calls\": [{}]}}", list("arguments")),
    }
}

/// A tool's result as a user turn, for a template that has no tool role: in `format`'s words.
pub fn format_tool_result(format: ToolFormat, name: Option<&str>, content: &str) -> String {
    match format {
        ToolFormat::Hermes => format!("<tool_response>\n{content}\n</tool_response>"),
        _ => serde_json::json!({"tool_response": {"name": name, "content": content}}).to_string(),
    }
}

/// The system text that shows `functions` to a template that does not render `tools` itself,
/// in the words and syntax of `format`.
pub fn tools_system_prompt(format: ToolFormat, functions: &[FunctionSpec]) -> String {
    let list: Vec<String> =
        functions.iter().map(|f| serde_json::to_string(&f.to_tool_json()).unwrap_or_default()).collect();
    let list = list.join("\n");
    match format {
        ToolFormat::Hermes => format!(
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided \
             with function signatures within <tools></tools> XML tags:\n<tools>\n{list}\n</tools>\n\nFor each \
             function call, return a json object with function name and arguments within \
             <tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": \
             <args-json-object>}}\n</tool_call>"
        ),
        ToolFormat::Llama3 => format!(
            "You have access to the following functions. To call one, answer with only a JSON object \
             {{\"name\": function name, \"parameters\": object of argument names and values}}.\n\n{list}"
        ),
        ToolFormat::Mistral => format!(
            "You have access to the following tools:\n{list}\n\nTo call tools, answer [TOOL_CALLS] followed by \
             a JSON list of calls: [{{\"name\": function name, \"arguments\": object of arguments}}]."
        ),
        ToolFormat::Generic => format!(
            "You can call these tools:\n{list}\n\nAnswer with one JSON object: {{\"tool_calls\": [{{\"name\": \
             function name, \"arguments\": object of arguments}}]}} to call tools, or {{\"response\": your \
             reply as a string}} to answer the user directly."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> FunctionSpec {
        FunctionSpec {
            name: "get_weather".into(),
            description: Some("Weather in a city".into()),
            parameters: Some(serde_json::json!({
                "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]
            })),
        }
    }

    #[test]
    fn earlier_calls_are_written_as_each_format_parses_them() {
        let calls = [("f".to_string(), serde_json::json!({"a": 1})), ("g".to_string(), serde_json::json!({}))];
        for format in ToolFormat::ALL {
            let text = format_calls(format, &calls);
            let mut out = ToolOutput::new(Some(format), ThinkStart::Never);
            let mut pieces = out.push(&text);
            pieces.extend(out.finish());
            let names: Vec<&str> = pieces
                .iter()
                .filter_map(|p| match p {
                    crate::OutputPiece::ToolCall { name, .. } => Some(name.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(names, ["f", "g"], "{format:?}: {text}");
        }
    }

    #[test]
    fn formats_are_found_from_template_markers() {
        assert_eq!(ToolFormat::detect(Some("{{ '<tool_call>' }}")), ToolFormat::Hermes);
        assert_eq!(ToolFormat::detect(Some("[TOOL_CALLS] {{ x }}")), ToolFormat::Mistral);
        assert_eq!(ToolFormat::detect(Some("<|start_header_id|>{% if tools %}")), ToolFormat::Llama3);
        assert_eq!(ToolFormat::detect(Some("<|im_start|>")), ToolFormat::Generic);
        assert_eq!(ToolFormat::detect(None), ToolFormat::Generic);
        assert_eq!("mistral".parse::<ToolFormat>().unwrap(), ToolFormat::Mistral);
        assert!("xml".parse::<ToolFormat>().unwrap_err().to_string().contains("hermes, llama3, mistral, generic"));
    }

    #[test]
    fn grammars_name_special_tokens_by_id_and_lazy_ones_say_their_trigger() {
        let specials = |t: &str| (t == "[TOOL_CALLS]").then_some(7);
        let g = call_grammar(ToolFormat::Mistral, &[weather()], &CallMode::Auto, true, &specials).unwrap();
        assert!(g.lark.starts_with("start: <[7]> \"[\" call (\", \" call)* \"]\""), "{}", g.lark);
        assert_eq!(g.trigger, Some(("[TOOL_CALLS]".to_string(), false)));
        let none = |_: &str| None;
        let g = call_grammar(ToolFormat::Hermes, &[weather()], &CallMode::Required, false, &none).unwrap();
        assert!(g.lark.starts_with("start: tagged\n"), "{}", g.lark);
        assert!(g.lark.contains("tagged: \"<tool_call>\" \"\\n\" call \"\\n\" \"</tool_call>\""), "{}", g.lark);
        assert_eq!(g.trigger, None);
        let g = call_grammar(ToolFormat::Generic, &[weather()], &CallMode::Auto, false, &none).unwrap();
        assert!(g.lark.contains("| reply"), "{}", g.lark);
        assert_eq!(g.trigger, None);
        let err = call_grammar(ToolFormat::Hermes, &[weather()], &CallMode::Named("nope".into()), false, &none);
        assert!(err.is_err());
    }
}
