//! Chat templates render exactly as transformers' `apply_chat_template` renders them
//! (`fixtures/chat/make_chat_reference.py`): SmolLM2's own template and LLaMA-3.1, Mistral and
//! Phi-3 shaped ones, with tools, dates, `.strip()`, namespaces and `raise_exception`.

use std::path::PathBuf;

use minerva_generate::{ChatTemplate, Message, Tokenizer};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn templates_match_transformers() {
    let text = std::fs::read_to_string(root().join("fixtures/chat/chat_reference.json")).unwrap();
    // minijinja values keep the JSON's key order (tojson must reproduce it).
    let cases: Vec<minijinja::Value> = serde_json::from_str(&text).unwrap();
    assert!(cases.len() >= 12);
    for case in &cases {
        let field = |key: &str| case.get_attr(key).unwrap();
        let text = |key: &str| field(key).as_str().map(str::to_string);
        let name = text("name").unwrap();
        let template =
            ChatTemplate::new(&text("template").unwrap(), text("bos_token").unwrap(), text("eos_token").unwrap())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        let messages: Vec<Message> = field("messages")
            .try_iter()
            .unwrap()
            .map(|m| Message::new(m.get_attr("role").unwrap().to_string(), m.get_attr("content").unwrap().to_string()))
            .collect();
        let got = template.render(&messages, field("add_generation_prompt").is_true(), Some(&field("extra")));
        match (text("expected"), text("error")) {
            (Some(want), _) => assert_eq!(got.unwrap_or_else(|e| panic!("{name}: {e}")), want, "{name}"),
            (_, Some(err)) => {
                let got = got.expect_err(&name).to_string();
                assert_eq!(got, format!("chat template: {err}"), "{name}");
            }
            _ => panic!("{name}: neither expected nor error"),
        }
    }
}

#[test]
fn smollm2_template_from_the_gguf() {
    let g = minerva_gguf::Gguf::open(root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let t = ChatTemplate::from_tokenizer(&tok).unwrap();
    let out = t.render(&[Message::new("user", "Hi")], true, None).unwrap();
    assert_eq!(
        out,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    // The rendered prompt's control tokens become single ids.
    let ids = tok.encode(&out, true).unwrap();
    assert_eq!(ids[0], 1);
    assert_eq!(ids.iter().filter(|&&i| i == 2).count(), 2);
}
