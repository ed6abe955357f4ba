//! `tools` and `tool_choice`: the checks, and for Harmony (GPT-OSS) the grammar that makes
//! `"required"` and a named function a call that always parses with arguments valid under the
//! function's parameter schema.

use minerva_generate::{Grammar, constraint::prepare_json_schema};
use serde_json::Value;

use super::request::{ChatRequest, Tool};
use crate::error::ApiError;

/// What `tool_choice` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model may answer or call (the default with tools).
    Auto,
    /// The model answers in text; the tools are not shown to it.
    None,
    /// The model must call one of the tools.
    Required,
    /// The model must call this function.
    Named(String),
}

/// The request's tools (checked) and its `tool_choice`.
pub fn tool_choice(req: &ChatRequest) -> Result<ToolChoice, ApiError> {
    let tools = req.tools.as_deref().unwrap_or_default();
    for (i, t) in tools.iter().enumerate() {
        if let Some(p) = &t.function.parameters
            && !(p.is_object() && p.get("type").is_none_or(|ty| ty == "object"))
        {
            return Err(ApiError::invalid(
                format!("tools[{i}].function.parameters"),
                "a function's `parameters` must be a JSON schema of an object",
            ));
        }
        if t.function.name.is_empty()
            || !t.function.name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        {
            return Err(ApiError::invalid(
                format!("tools[{i}].function.name"),
                "a function's name must be letters, digits, `_`, `-` or `.`",
            ));
        }
    }
    let choice = match &req.tool_choice {
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("`tool_choice` is `{other}`; it must be `none`, `auto`, `required` or a function"),
                ));
            }
        },
        Some(v) => match v.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
            Some(name) if v.get("type").is_none_or(|t| t == "function") => {
                if !tools.iter().any(|t| t.function.name == name) {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        format!("`tool_choice` names `{name}`, which is not among `tools`"),
                    ));
                }
                ToolChoice::Named(name.to_string())
            }
            _ => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    "`tool_choice` must be a string or {\"type\": \"function\", \"function\": {\"name\": …}}",
                ));
            }
        },
    };
    if matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) && tools.is_empty() {
        return Err(ApiError::invalid("tool_choice", "`tool_choice` asks for a call but `tools` is empty"));
    }
    Ok(choice)
}

/// The Harmony grammar of a completion that must call one of `tools` (all, or the named one): an
/// optional analysis message, then `<|channel|>commentary to=functions.NAME <|constrain|>json
/// <|message|>ARGS<|call|>` with ARGS valid under the function's parameters.
pub fn harmony_call_grammar(tools: &[Tool], choice: &ToolChoice) -> Result<Option<Grammar>, ApiError> {
    let allowed: Vec<&Tool> = match choice {
        ToolChoice::Auto | ToolChoice::None => return Ok(None),
        ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Named(name) => tools.iter().filter(|t| &t.function.name == name).collect(),
    };
    let mut rules = vec![
        "start: analysis? call".to_string(),
        "analysis: <|channel|> \"analysis\" <|message|> TEXT <|end|> <|start|> \"assistant\"".to_string(),
        "TEXT: /(.|\\n)*/".to_string(),
    ];
    let mut calls = Vec::new();
    for (i, t) in allowed.iter().enumerate() {
        let schema = t.function.parameters.clone().unwrap_or_else(|| serde_json::json!({"type": "object"}));
        let schema = prepare_json_schema(&schema)
            .map_err(|e| ApiError::invalid("tools", format!("function `{}`: {e}", t.function.name)))?;
        let header =
            serde_json::to_string(&format!("commentary to=functions.{} ", t.function.name)).unwrap_or_default();
        rules
            .push(format!("call_{i}: <|channel|> {header} <|constrain|> \"json\" <|message|> %json {schema} <|call|>"));
        calls.push(format!("call_{i}"));
    }
    rules.push(format!("call: {}", calls.join(" | ")));
    Ok(Some(Grammar::Lark(rules.join("\n"))))
}
