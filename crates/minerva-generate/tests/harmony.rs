//! Harmony rendering and completion parsing against `openai-harmony` 0.0.8 (OpenAI's library):
//! `fixtures/harmony/harmony_reference.json`, made by `fixtures/harmony/make_harmony_reference.py`.

use std::path::Path;

use minerva_generate::harmony::{
    Completion, FunctionDefinition, Message, ReasoningEffort, Role, SystemContent, developer_content, parse_completion,
    render_conversation, render_conversation_for_completion, render_function_tools,
};
use serde_json::Value;

fn reference() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/harmony/harmony_reference.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn text<'a>(m: &'a Value, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Value::as_str)
}

/// A message from the fixture's description (the schema the Python script reads too).
fn message(m: &Value) -> Message {
    let role = text(m, "role").unwrap();
    let mut msg = match role {
        "system" => {
            let mut s = SystemContent::default();
            if let Some(v) = text(m, "model_identity") {
                s.model_identity = v.into();
            }
            if let Some(v) = text(m, "knowledge_cutoff") {
                s.knowledge_cutoff = v.into();
            }
            s.conversation_start_date = text(m, "conversation_start_date").map(String::from);
            s.reasoning_effort = match text(m, "reasoning_effort") {
                Some("low") => ReasoningEffort::Low,
                Some("high") => ReasoningEffort::High,
                _ => ReasoningEffort::Medium,
            };
            s.function_tools = m.get("function_tools").and_then(Value::as_bool).unwrap_or(false);
            Message::system(&s)
        }
        "developer" => {
            let mut parts = Vec::new();
            if let Some(instructions) = text(m, "instructions") {
                parts.push(developer_content(instructions));
            }
            if let Some(tools) = m.get("tools").and_then(Value::as_array) {
                let defs: Vec<FunctionDefinition> = tools
                    .iter()
                    .map(|t| FunctionDefinition {
                        name: text(t, "name").unwrap().into(),
                        description: text(t, "description").unwrap().into(),
                        parameters: t.get("parameters").cloned(),
                    })
                    .collect();
                parts.push(render_function_tools(&defs));
            }
            Message::new(Role::Developer, parts.join("\n\n"))
        }
        "tool" => Message::new(Role::Tool(text(m, "name").unwrap().into()), text(m, "content").unwrap()),
        other => Message::new(Role::from_header_name(other), text(m, "content").unwrap()),
    };
    msg.channel = text(m, "channel").map(String::from);
    msg.recipient = text(m, "recipient").map(String::from);
    msg.content_type = text(m, "content_type").map(String::from);
    msg
}

#[test]
fn renders_conversations_as_openai_harmony_does() {
    let json = reference();
    let cases = json["render"].as_array().unwrap();
    assert!(cases.len() >= 7);
    for case in cases {
        let messages: Vec<Message> = case["messages"].as_array().unwrap().iter().map(message).collect();
        let got = match text(case, "next_role") {
            Some(role) => render_conversation_for_completion(&messages, &Role::from_header_name(role)),
            None => render_conversation(&messages),
        };
        assert_eq!(got, case["expected"].as_str().unwrap(), "case {}", case["name"]);
    }
}

#[test]
fn parses_completions_as_openai_harmony_does() {
    let json = reference();
    for case in json["parse"].as_array().unwrap() {
        let completion = case["completion"].as_str().unwrap();
        let parsed = parse_completion(completion, &Role::Assistant).unwrap();
        let expected = case["messages"].as_array().unwrap();
        assert_eq!(parsed.len(), expected.len(), "case {}", case["name"]);
        for (got, want) in parsed.iter().zip(expected) {
            let m = &got.message;
            assert!(got.finished, "case {}", case["name"]);
            assert_eq!(
                m.role.header_name(),
                text(want, "name").or(text(want, "role")).unwrap(),
                "case {}",
                case["name"]
            );
            assert_eq!(m.channel.as_deref(), text(want, "channel"), "case {}", case["name"]);
            assert_eq!(m.recipient.as_deref(), text(want, "recipient"), "case {}", case["name"]);
            assert_eq!(m.content_type.as_deref(), text(want, "content_type"), "case {}", case["name"]);
            assert_eq!(m.content, text(want, "content").unwrap(), "case {}", case["name"]);
        }
    }
}

#[test]
fn splits_a_completion_into_analysis_and_final() {
    let json = reference();
    let case = json["parse"].as_array().unwrap().iter().find(|c| c["name"] == "analysis_then_final").unwrap();
    let c = Completion::parse(case["completion"].as_str().unwrap()).unwrap();
    assert_eq!(c.analysis(), "User asks 2+2. Answer 4.");
    assert_eq!(c.final_text(), Some("2 + 2 = 4."));
    assert!(c.tool_call().is_none());
    let case = json["parse"].as_array().unwrap().iter().find(|c| c["name"] == "tool_call").unwrap();
    let c = Completion::parse(case["completion"].as_str().unwrap()).unwrap();
    assert_eq!(c.final_text(), None);
    assert_eq!(c.tool_call().and_then(|m| m.recipient.as_deref()), Some("functions.get_weather"));
}

#[test]
fn a_rendered_assistant_turn_parses_back() {
    // What the model generates after `<|start|>assistant` is the rendering minus that prefix.
    let turn = [
        Message::new(Role::Assistant, "Reasoning.").with_channel("analysis"),
        Message::new(Role::Assistant, "Answer.").with_channel("final"),
    ];
    let text: String = turn.iter().map(Message::render).collect();
    let completion = text.strip_prefix("<|start|>assistant").unwrap();
    let parsed: Vec<Message> =
        parse_completion(completion, &Role::Assistant).unwrap().into_iter().map(|p| p.message).collect();
    assert_eq!(parsed, turn);
}
