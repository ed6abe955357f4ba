//! Tool conversations (tools, assistant `tool_calls` with arguments as JSON strings, `tool`
//! results) through Qwen 2.5's chat template: the server's prompt equals transformers'
//! `apply_chat_template` rendering (`fixtures/chat/make_tool_reference.py`), character for
//! character.

mod common;

use minerva_generate::{ChatTemplate, ToolFormat};
use minerva_server::api::request::ChatRequest;
use minerva_server::engine::TemplateChat;
use serde_json::Value;

#[test]
fn hermes_tool_conversations_render_as_transformers_does() {
    let text = std::fs::read_to_string(common::root().join("fixtures/chat/tool_reference.json")).unwrap();
    let reference: Value = serde_json::from_str(&text).unwrap();
    let source = reference["template"].as_str().unwrap();
    let chat = TemplateChat::new(ChatTemplate::new(source, "", "<|im_end|>").unwrap(), source, None);
    assert_eq!(chat.tool_format, ToolFormat::Hermes);
    assert!(chat.renders_tools);
    let cases = reference["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 3);
    for case in cases {
        let req: ChatRequest = serde_json::from_value(case["request"].clone()).unwrap();
        let got = minerva_server::prompt::render_template(&chat, &req, true).unwrap();
        assert_eq!(got, case["expected"].as_str().unwrap(), "{}", case["name"]);
    }
}
