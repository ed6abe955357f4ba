//! Chat templates render exactly as transformers' `apply_chat_template` renders them
//! (`fixtures/chat/make_chat_reference.py`): SmolLM2's own template and LLaMA-3.1, Mistral and
//! Phi-3 shaped ones, with tools, dates, `.strip()`, namespaces and `raise_exception`.

use std::path::PathBuf;

use minerva_generate::template::builtin_template;
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

/// One Qwen2.5-Instruct rendering of `fixtures/model/make_qwen_reference.py`.
struct QwenCase {
    name: String,
    messages: Vec<Message>,
    add_generation_prompt: bool,
    expected: String,
}

/// The Qwen2.5-Instruct template and its renderings.
fn qwen_reference() -> (String, Vec<QwenCase>) {
    let text = std::fs::read_to_string(root().join("fixtures/chat/qwen_chat_reference.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| QwenCase {
            name: c["name"].as_str().unwrap().to_string(),
            messages: c["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
                .collect(),
            add_generation_prompt: c["add_generation_prompt"].as_bool().unwrap(),
            expected: c["expected"].as_str().unwrap().to_string(),
        })
        .collect();
    (json["template"].as_str().unwrap().to_string(), cases)
}

const QWEN_DEFAULT_SYSTEM: &str =
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n";

#[test]
fn builtin_qwen_chatml_renders_as_qwen25() {
    let (qwen25, cases) = qwen_reference();
    assert_eq!(cases.len(), 6);
    let qwen25 = ChatTemplate::new(&qwen25, "", "").unwrap();
    let qwen2 = ChatTemplate::new(builtin_template("qwen2").unwrap(), "", "").unwrap();
    let qwen3 = ChatTemplate::new(builtin_template("qwen3").unwrap(), "", "").unwrap();
    for QwenCase { name, messages, add_generation_prompt, expected } in &cases {
        let render = |t: &ChatTemplate| t.render(messages, *add_generation_prompt, None).unwrap();
        // Qwen2.5's own template through our engine, and the built-in qwen2 ChatML.
        assert_eq!(&render(&qwen25), expected, "{name}: Qwen2.5's template");
        assert_eq!(&render(&qwen2), expected, "{name}: built-in qwen2");
        // Qwen 3's template is the same ChatML without the default system prompt.
        let qwen3_expected = match messages[0].role.as_str() {
            "system" => expected.clone(),
            _ => expected.strip_prefix(QWEN_DEFAULT_SYSTEM).expect("Qwen2.5 adds its system prompt").to_string(),
        };
        assert_eq!(render(&qwen3), qwen3_expected, "{name}: built-in qwen3");
    }
    assert_eq!(builtin_template("llama"), None);
}

#[test]
fn qwen_files_without_a_template_get_the_builtin() {
    for arch in ["qwen2", "qwen3"] {
        let dir = root().join("fixtures/model/tiny").join(arch);
        let g = minerva_gguf::Gguf::open(dir.join("model.gguf")).unwrap();
        assert!(g.get("tokenizer.chat_template").is_none(), "the converted fixture carries no template");
        let tok = Tokenizer::from_gguf(&g).unwrap();
        assert_eq!(tok.chat_template.as_deref(), builtin_template(arch), "{arch} GGUF");
        // A checkpoint directory: its config.json's model_type picks the template.
        let ckpt = tempfile::tempdir().unwrap();
        std::fs::copy(dir.join("config.json"), ckpt.path().join("config.json")).unwrap();
        std::fs::write(ckpt.path().join("tokenizer.json"), tok.inner().to_string(false).unwrap()).unwrap();
        let from_dir = Tokenizer::from_dir(ckpt.path()).unwrap();
        assert_eq!(from_dir.chat_template.as_deref(), builtin_template(arch), "{arch} checkpoint");
    }
    // A template the file carries wins over the built-in.
    let ckpt = tempfile::tempdir().unwrap();
    let dir = root().join("fixtures/model/tiny/qwen2");
    std::fs::copy(dir.join("config.json"), ckpt.path().join("config.json")).unwrap();
    let g = minerva_gguf::Gguf::open(dir.join("model.gguf")).unwrap();
    let json = Tokenizer::from_gguf(&g).unwrap().inner().to_string(false).unwrap();
    std::fs::write(ckpt.path().join("tokenizer.json"), json).unwrap();
    std::fs::write(ckpt.path().join("chat_template.jinja"), "{{ messages[0].content }}").unwrap();
    assert_eq!(Tokenizer::from_dir(ckpt.path()).unwrap().chat_template.as_deref(), Some("{{ messages[0].content }}"));
}
