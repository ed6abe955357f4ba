//! Structured output: the request fields that constrain what is generated, as OpenAI, llama.cpp
//! and vLLM spell them, turned into one [`Grammar`].
//!
//! | field | from | grammar |
//! |---|---|---|
//! | `response_format: {"type": "json_object"}` | OpenAI | any JSON object |
//! | `response_format: {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}` | OpenAI | the schema |
//! | `json_schema` | llama.cpp | the schema |
//! | `grammar` | llama.cpp (Lark here; GBNF refused) | Lark |
//! | `structured_outputs: {"json" \| "regex" \| "choice" \| "grammar"}` | vLLM | schema, regex, choice, Lark |
//! | `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar` | vLLM (older) | the same |
//!
//! At most one may be given; each mistake is a 400 naming the field.

use minerva_generate::Grammar;
use serde::Deserialize;
use serde_json::Value;

use super::request::CommonParams;
use crate::error::ApiError;

/// `response_format`.
#[derive(Clone, Debug, Deserialize)]
pub struct ResponseFormat {
    /// `text`, `json_object` or `json_schema`.
    #[serde(rename = "type")]
    pub kind: String,
    /// With `json_schema`: the schema and its name.
    pub json_schema: Option<JsonSchemaFormat>,
}

/// `response_format.json_schema`.
#[derive(Clone, Debug, Deserialize)]
pub struct JsonSchemaFormat {
    /// The schema's name (required by OpenAI; accepted, unused).
    pub name: Option<String>,
    /// The JSON schema.
    pub schema: Option<Value>,
    /// OpenAI's strict mode: the output always follows the schema here, strict or not.
    pub strict: Option<bool>,
    /// What the schema is for (accepted, unused).
    pub description: Option<String>,
}

/// vLLM's `structured_outputs`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StructuredOutputs {
    /// A JSON schema (an object, or a string holding one).
    pub json: Option<Value>,
    /// A regular expression.
    pub regex: Option<String>,
    /// A list of texts, one of which is the output.
    pub choice: Option<Vec<String>>,
    /// A grammar (Lark).
    pub grammar: Option<String>,
    /// vLLM's `json_object: true`: any JSON object.
    pub json_object: Option<bool>,
}

/// A JSON schema given either as JSON or as a string holding JSON (vLLM accepts both).
fn schema_of(param: &str, v: &Value) -> Result<Grammar, ApiError> {
    match v {
        Value::String(text) => {
            let parsed: Value = serde_json::from_str(text)
                .map_err(|e| ApiError::invalid(param, format!("`{param}` is not a JSON schema: {e}")))?;
            schema_of(param, &parsed)
        }
        Value::Object(_) | Value::Bool(_) => Ok(Grammar::JsonSchema(v.clone())),
        _ => Err(ApiError::invalid(param, format!("`{param}` must be a JSON schema (an object)"))),
    }
}

/// The grammar `p` asks for, if any: `(field, grammar)`, the field named in later errors.
pub fn grammar_of(p: &CommonParams) -> Result<Option<(String, Grammar)>, ApiError> {
    let mut found: Vec<(String, Grammar)> = Vec::new();
    if let Some(f) = &p.response_format {
        match f.kind.as_str() {
            "text" => {}
            "json_object" => found.push(("response_format".into(), Grammar::JsonObject)),
            "json_schema" => {
                let param = "response_format.json_schema.schema";
                let schema = f.json_schema.as_ref().and_then(|s| s.schema.as_ref()).ok_or_else(|| {
                    ApiError::invalid(param, "`response_format` of type `json_schema` needs `json_schema.schema`")
                })?;
                found.push((param.into(), schema_of(param, schema)?));
            }
            other => {
                return Err(ApiError::invalid(
                    "response_format.type",
                    format!("`response_format.type` is `{other}`; it must be `text`, `json_object` or `json_schema`"),
                ));
            }
        }
    }
    if let Some(schema) = &p.json_schema {
        found.push(("json_schema".into(), schema_of("json_schema", schema)?));
    }
    if let Some(g) = &p.grammar {
        found.push(("grammar".into(), Grammar::Lark(g.clone())));
    }
    if let Some(s) = &p.guided_json {
        found.push(("guided_json".into(), schema_of("guided_json", s)?));
    }
    if let Some(r) = &p.guided_regex {
        found.push(("guided_regex".into(), Grammar::Regex(r.clone())));
    }
    if let Some(c) = &p.guided_choice {
        found.push(("guided_choice".into(), Grammar::Choice(c.clone())));
    }
    if let Some(g) = &p.guided_grammar {
        found.push(("guided_grammar".into(), Grammar::Lark(g.clone())));
    }
    if let Some(s) = &p.structured_outputs {
        let fields = [
            ("json", s.json.as_ref().map(|j| schema_of("structured_outputs.json", j)).transpose()?),
            ("regex", s.regex.clone().map(Grammar::Regex)),
            ("choice", s.choice.clone().map(Grammar::Choice)),
            ("grammar", s.grammar.clone().map(Grammar::Lark)),
            ("json_object", (s.json_object == Some(true)).then_some(Grammar::JsonObject)),
        ];
        for (name, grammar) in fields {
            if let Some(g) = grammar {
                found.push((format!("structured_outputs.{name}"), g));
            }
        }
    }
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|(name, _)| name.as_str()).collect();
        return Err(ApiError::invalid(
            &found[1].0,
            format!("give one output constraint, not several: {}", names.join(", ")),
        ));
    }
    Ok(found.pop())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(v: Value) -> CommonParams {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn each_spelling_gives_its_grammar() {
        let schema = serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let cases = [
            (serde_json::json!({"response_format": {"type": "json_object"}}), Grammar::JsonObject),
            (
                serde_json::json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
                Grammar::JsonSchema(schema.clone()),
            ),
            (serde_json::json!({"json_schema": schema}), Grammar::JsonSchema(schema.clone())),
            (serde_json::json!({"guided_json": schema.to_string()}), Grammar::JsonSchema(schema.clone())),
            (serde_json::json!({"guided_regex": "[0-9]+"}), Grammar::Regex("[0-9]+".into())),
            (serde_json::json!({"guided_choice": ["a", "b"]}), Grammar::Choice(vec!["a".into(), "b".into()])),
            (serde_json::json!({"grammar": "start: \"x\""}), Grammar::Lark("start: \"x\"".into())),
            (serde_json::json!({"structured_outputs": {"regex": "x+"}}), Grammar::Regex("x+".into())),
        ];
        for (body, want) in cases {
            assert_eq!(grammar_of(&params(body.clone())).unwrap().map(|g| g.1), Some(want), "{body}");
        }
        assert!(grammar_of(&params(serde_json::json!({"response_format": {"type": "text"}}))).unwrap().is_none());
    }

    #[test]
    fn mistakes_name_their_field() {
        for (body, field) in [
            (serde_json::json!({"response_format": {"type": "xml"}}), "response_format.type"),
            (serde_json::json!({"response_format": {"type": "json_schema"}}), "response_format.json_schema.schema"),
            (serde_json::json!({"guided_json": "{not json"}), "guided_json"),
            (serde_json::json!({"json_schema": 5}), "json_schema"),
            (serde_json::json!({"json_schema": {}, "guided_regex": "x"}), "guided_regex"),
        ] {
            let e = grammar_of(&params(body.clone())).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {e:?}");
        }
    }
}
