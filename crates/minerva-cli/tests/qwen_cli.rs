//! `minerva run --chat` and `minerva chat` on the tiny Qwen 2 / Qwen 3 GGUF files
//! (`fixtures/model/tiny`), which carry no chat template: the prompt is the built-in ChatML
//! rendering (Qwen 2 with Qwen2.5's default system prompt, Qwen 3 without), where before both
//! failed for want of a template.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

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

#[test]
fn chat_answers_with_the_builtin_chatml() {
    for arch in ["qwen2", "qwen3"] {
        let path = root().join("fixtures/model/tiny").join(arch).join("model.gguf");
        let mut child = Command::new(env!("CARGO_BIN_EXE_minerva"))
            .args(["chat", "--temperature", "0", "--max-tokens", "2", "-m"])
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"the fox\n/exit\n").unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{arch}: {stderr}");
        // One answer line (piped stdin: no prompts on stdout).
        assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 1, "{arch}: {stderr}");
    }
}
