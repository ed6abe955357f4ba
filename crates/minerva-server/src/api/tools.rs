//! `tools` and `tool_choice`: the checks, and the grammars that make `"required"` and a named
//! function a call that always parses with arguments valid under the function's parameter
//! schema — in Harmony (GPT-OSS) and in the text formats of [`minerva_generate::tools`], where
//! `"auto"` holds a call to the grammar once the model starts one.

use minerva_generate::tools::{CallMode, FunctionSpec, call_grammar};
use minerva_generate::{Grammar, ThinkStart, Tokenizer, ToolFormat, constraint::prepare_json_schema};
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

/// Lark rules of an optional Harmony analysis message (free reasoning) before the message a
/// grammar holds: `<|channel|>analysis<|message|>…<|end|><|start|>assistant`.
const HARMONY_ANALYSIS: &str =
    "analysis: <|channel|> \"analysis\" <|message|> TEXT <|end|> <|start|> \"assistant\"\nTEXT: /(.|\\n)*/";

/// The Harmony grammar of a completion that must call one of `tools` (all, or the named one): an
/// optional analysis message, then `<|channel|>commentary to=functions.NAME <|constrain|>json
/// <|message|>ARGS<|call|>` with ARGS valid under the function's parameters.
pub fn harmony_call_grammar(tools: &[Tool], choice: &ToolChoice) -> Result<Option<Grammar>, ApiError> {
    let allowed: Vec<&Tool> = match choice {
        ToolChoice::Auto | ToolChoice::None => return Ok(None),
        ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Named(name) => tools.iter().filter(|t| &t.function.name == name).collect(),
    };
    let mut rules = vec!["start: analysis? call".to_string(), HARMONY_ANALYSIS.to_string()];
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

/// The functions of `tools`.
pub fn specs(tools: &[Tool]) -> Vec<FunctionSpec> {
    tools
        .iter()
        .map(|t| FunctionSpec {
            name: t.function.name.clone(),
            description: t.function.description.clone(),
            parameters: t.function.parameters.clone(),
        })
        .collect()
}

/// A grammar to hold an output to, and from where.
#[derive(Clone, Debug)]
pub struct GrammarPlan {
    /// The request field it answers (named in errors).
    pub field: String,
    /// The grammar.
    pub grammar: Grammar,
    /// `Some((text, anchored, includes_trigger))`: it applies from `text` on
    /// ([`minerva_generate::GrammarCompiler::compile_lazy`]).
    pub trigger: Option<(String, bool, bool)>,
}

impl GrammarPlan {
    /// A grammar for a model that may open reasoning in its prompt (`think`): the grammar then
    /// waits for `</think>`, as the answer comes after the reasoning.
    pub fn after_reasoning(mut self, think: ThinkStart) -> GrammarPlan {
        if think == ThinkStart::Open && self.trigger.is_none() {
            self.trigger = Some(("</think>".into(), false, false));
        }
        self
    }
}

/// The call grammar of a text tool format for `choice` (`None` for `"none"`).
pub fn text_call_plan(
    format: ToolFormat,
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
    tok: &Tokenizer,
) -> Result<Option<GrammarPlan>, ApiError> {
    let mode = match choice {
        ToolChoice::None => return Ok(None),
        ToolChoice::Auto => CallMode::Auto,
        ToolChoice::Required => CallMode::Required,
        ToolChoice::Named(name) => CallMode::Named(name.clone()),
    };
    if tools.is_empty() {
        return Ok(None);
    }
    let special = |text: &str| tok.token_to_id(text).filter(|&id| tok.is_special(id));
    let g = call_grammar(format, &specs(tools), &mode, parallel, &special)
        .map_err(|e| ApiError::invalid("tools", e.to_string()))?;
    Ok(Some(GrammarPlan {
        field: "tools".into(),
        grammar: Grammar::Lark(g.lark),
        trigger: g.trigger.map(|(text, anchored)| (text, anchored, true)),
    }))
}

/// The Lark form of a structured-output grammar, to nest it in a larger grammar (Harmony's final
/// message); a Lark grammar of the user's cannot be nested.
fn lark_body(grammar: &Grammar) -> Result<String, String> {
    let json = |schema: &Value| prepare_json_schema(schema).map(|s| format!("%json {s}")).map_err(|e| e.to_string());
    match grammar {
        Grammar::JsonObject => json(&serde_json::json!({"type": "object"})),
        Grammar::JsonSchema(schema) => json(schema),
        Grammar::Choice(options) => {
            let options: Vec<String> = options.iter().map(|o| serde_json::to_string(o).unwrap_or_default()).collect();
            Ok(format!("({})", options.join(" | ")))
        }
        Grammar::Regex(re) => Ok(format!("/{}/", re.replace('/', "\\/"))),
        Grammar::Lark(_) => Err("a Lark grammar cannot be held to Harmony's final message; use a JSON schema, \
                                 a regular expression or choices"
            .into()),
    }
}

/// Harmony with an output format: optional reasoning, then a final message the grammar holds.
pub fn harmony_final_grammar(grammar: &Grammar) -> Result<Grammar, String> {
    let body = lark_body(grammar)?;
    Ok(Grammar::Lark(
        [
            "start: analysis? final".to_string(),
            HARMONY_ANALYSIS.to_string(),
            format!("final: <|channel|> \"final\" <|message|> {body} <|return|>"),
        ]
        .join("\n"),
    ))
}
