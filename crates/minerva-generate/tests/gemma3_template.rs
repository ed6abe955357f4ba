//! Gemma's chat template is built in for `gemma3` GGUF files, which carry none: the real Gemma 3
//! file gets it, and it renders a conversation exactly as Jinja2 set up like transformers does
//! (`fixtures/gemma3/llama_cpp_reference.json`, `chat`), and its text encodes to Gemma's turn
//! tokens.

use std::path::PathBuf;

use minerva_generate::{ChatTemplate, Message, Tokenizer};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn gemma3_gguf_gets_the_built_in_template() {
    let path = root().join("models/gemma-3-270m-q4_k_m.gguf");
    assert!(path.exists(), "{} is missing: run `cargo xtask setup`", path.display());
    let g = minerva_gguf::Gguf::open(&path).unwrap();
    assert!(g.get("tokenizer.chat_template").is_none(), "this file carries no template");
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let template = ChatTemplate::from_tokenizer(&tok).unwrap();
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("fixtures/gemma3/llama_cpp_reference.json")).unwrap())
            .unwrap();
    let chat = &reference["chat"];
    let messages: Vec<Message> = serde_json::from_value(chat["messages"].clone()).unwrap();
    let rendered = template.render(&messages, true, None).unwrap();
    assert_eq!(rendered, chat["rendered"].as_str().unwrap());
    // The rendered text starts with BOS and marks turns with single control tokens.
    let ids = tok.encode(&rendered, false).unwrap();
    let id = |text: &str| tok.inner().token_to_id(text).unwrap();
    assert_eq!(ids[..2], [id("<bos>"), id("<start_of_turn>")]);
    assert_eq!(ids.iter().filter(|&&t| t == id("<end_of_turn>")).count(), 3);
    assert!(tok.stop_ids.contains(&id("<end_of_turn>")), "the end of a turn stops generation");
}

#[test]
fn built_in_templates_by_architecture() {
    // The architecture table's names for Gemma 3 (GGUF, transformers' text and multimodal types).
    for arch in ["gemma3", "gemma3_text"] {
        assert_eq!(
            minerva_generate::template::builtin_template(arch),
            Some(minerva_generate::template::GEMMA_TEMPLATE)
        );
    }
    assert_eq!(minerva_generate::template::builtin_template("llama"), None);
    assert_eq!(minerva_generate::template::builtin_template("gemma2"), None, "no graph, no row, no template");
}
