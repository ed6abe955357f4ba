//! `minerva run --chat` on the tiny Qwen 2 / Qwen 3 GGUF files (`fixtures/model/tiny`), which carry
//! no chat template: the prompt is the built-in ChatML rendering (Qwen 2 with Qwen2.5's default
//! system prompt, Qwen 3 without), where before `--chat` failed for want of a template.

mod common;

use common::{minerva, os, root};
use minerva_generate::{ChatTemplate, Message, Tokenizer};

#[test]
fn run_chat_uses_the_builtin_chatml() {
    for arch in ["qwen2", "qwen3"] {
        let path = root().join("fixtures/model/tiny").join(arch).join("model.gguf");
        let tok = Tokenizer::from_gguf(&minerva_gguf::Gguf::open(&path).unwrap()).unwrap();
        let template = ChatTemplate::from_tokenizer(&tok).unwrap();
        for system in [None, Some("Be brief.")] {
            let mut messages: Vec<Message> = system.map(|s| Message::new("system", s)).into_iter().collect();
            messages.push(Message::new("user", "Hi"));
            let text = template.render(&messages, true, None).unwrap();
            assert_eq!(text.contains("You are Qwen"), arch == "qwen2" && system.is_none(), "{arch}: {text:?}");
            let want = tok.encode(&text, false).unwrap().len();
            let mut args = vec![os("run"), os("-m"), path.as_os_str(), os("--prompt"), os("Hi"), os("--chat")];
            if let Some(system) = system {
                args.extend([os("--system"), os(system)]);
            }
            args.extend(["--max-tokens", "2", "--temperature", "0", "--stats"].map(os));
            let out = minerva(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{arch}: {stderr}");
            assert!(stderr.contains(&format!("prompt {want} tokens")), "{arch} {system:?}: {stderr}");
        }
    }
}
