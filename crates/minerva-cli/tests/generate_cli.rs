//! `minerva run`, `chat`, `tokenize` and `score --text` on the real model, and their one-line
//! errors.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_one_line_error, minerva, os, real_model, root};

fn run_ok(args: &[&str]) -> (String, String) {
    let model = real_model();
    let mut full: Vec<&std::ffi::OsStr> = vec![os(args[0]), os("-m"), model.as_os_str()];
    full.extend(args[1..].iter().map(|a| os(a)));
    let out = minerva(&full);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{args:?}: {stderr}");
    (String::from_utf8(out.stdout).unwrap(), stderr)
}

#[test]
fn run_chat_greedy_answers_and_reports_stats() {
    let (stdout, stderr) = run_ok(&[
        "run",
        "--prompt",
        "What is the capital of France?",
        "--chat",
        "--temperature",
        "0",
        "--max-tokens",
        "12",
        "--f32-activations",
        "--stats",
    ]);
    assert!(stdout.contains("The capital of France is Paris."), "{stdout:?}");
    assert!(stderr.contains("generated") && stderr.contains("tok/s") && stderr.contains("finish"), "{stderr}");
}

#[test]
fn run_with_a_seed_is_reproducible_and_honours_stop() {
    let args = ["run", "--prompt", "Once upon a time", "--seed", "42", "--max-tokens", "20", "--temperature", "0.9"];
    let (a, _) = run_ok(&args);
    let (b, _) = run_ok(&args);
    assert_eq!(a, b);
    assert!(a.trim().len() > 10, "{a:?}");
    // A stop string taken from that output ends the text just before it.
    let words: Vec<&str> = a.split_whitespace().collect();
    let stop = words[words.len() / 2];
    let mut stop_args = args.to_vec();
    stop_args.extend(["--stop", stop]);
    let (c, _) = run_ok(&stop_args);
    assert_eq!(c.trim_end_matches('\n'), &a[..a.find(stop).unwrap()]);
}

#[test]
fn tokenize_prints_ids_pieces_and_json() {
    let model = real_model();
    let text = "Hello world 日本";
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("fixtures/tokenizer/smollm2_ids.json")).unwrap()).unwrap();
    assert_eq!(reference["texts"][0], "Hello world");
    let out = minerva(&[os("tokenize"), model.as_os_str(), os("--text"), os("Hello world")]);
    assert!(out.status.success());
    let want: Vec<String> = reference["ids"][0].as_array().unwrap().iter().map(|v| v.to_string()).collect();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("[{}]", want.join(", ")));
    let out = minerva(&[os("tokenize"), model.as_os_str(), os("--text"), os(text), os("--pieces")]);
    let lines = String::from_utf8(out.stdout).unwrap();
    assert!(lines.lines().next().unwrap().ends_with("-> 'Hello'"), "{lines}");
    let out = minerva(&[os("tokenize"), model.as_os_str(), os("--text"), os(text), os("--json"), os("--pieces")]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ids"].as_array().unwrap().len(), doc["pieces"].as_array().unwrap().len());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.txt");
    std::fs::write(&file, text).unwrap();
    let from_file = minerva(&[os("tokenize"), model.as_os_str(), os("--file"), file.as_os_str(), os("--json")]);
    let doc2: serde_json::Value = serde_json::from_slice(&from_file.stdout).unwrap();
    assert_eq!(doc["ids"], doc2["ids"]);
}

#[test]
fn score_text_tokenizes_with_the_model_tokenizer() {
    let model = real_model();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.txt");
    std::fs::write(&file, "The quick brown fox jumps over the lazy dog.").unwrap();
    let by_text = minerva(&[os("score"), model.as_os_str(), os("--text"), file.as_os_str()]);
    assert!(by_text.status.success(), "{}", String::from_utf8_lossy(&by_text.stderr));
    let ids = minerva(&[os("tokenize"), model.as_os_str(), os("--file"), file.as_os_str(), os("--json")]);
    let doc: serde_json::Value = serde_json::from_slice(&ids.stdout).unwrap();
    let list: Vec<String> = doc["ids"].as_array().unwrap().iter().map(|v| v.to_string()).collect();
    let by_ids = minerva(&[os("score"), model.as_os_str(), os("--tokens"), os(&list.join(","))]);
    assert_eq!(by_text.stdout, by_ids.stdout);
    assert!(String::from_utf8_lossy(&by_text.stdout).starts_with("perplexity "));
}

#[test]
fn chat_through_stdin_keeps_history_and_commands() {
    let model = real_model();
    let mut child = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(["chat", "--temperature", "0", "--max-tokens", "12", "--f32-activations", "-m"])
        .arg(&model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = "What is the capital of France?\n\n/unknown\n/reset\n/system You are a helpful assistant.\nWhat is the capital of France?\n/exit\nnever read\n";
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Two answers, one line each (piped stdin: no prompts on stdout), both greedy and sensible.
    let answers: Vec<&str> = stdout.lines().collect();
    assert_eq!(answers.len(), 2, "{stdout:?}");
    assert!(answers.iter().all(|a| a.contains("Paris")), "{stdout:?}");
    assert!(stderr.contains("unknown command /unknown"), "{stderr}");
}

#[test]
fn ctrl_c_stops_the_answer_not_the_chat() {
    let model = real_model();
    let mut child = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(["chat", "--temperature", "0", "--ignore-eos", "--max-tokens", "100000", "-m"])
        .arg(&model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"Write a very long story about a dragon.\n").unwrap();
    stdin.flush().unwrap();
    // Wait for the answer to start streaming, then interrupt it.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 8];
    stdout.read_exact(&mut first).unwrap();
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let started = Instant::now();
    // The chat goes on after the interrupted answer: /exit ends it normally.
    stdin.write_all(b"/exit\n").unwrap();
    drop(stdin);
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("[interrupted]"), "{stderr}");
    // It stopped promptly, not at the 2048-token context end.
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn generation_errors_are_one_line() {
    let model = real_model();
    let m = model.as_os_str();
    let out = minerva(&[os("run"), os("-m"), m]);
    assert_one_line_error(&out, "required arguments were not provided: --prompt");
    let out = minerva(&[os("run"), os("-m"), m, os("-p"), os("hi"), os("--device"), os("tpu")]);
    assert_one_line_error(&out, "--device");
    let out = minerva(&[os("run"), os("-m"), m, os("-p"), os("hi"), os("--top-p"), os("0")]);
    assert_one_line_error(&out, "top-p");
    let long = "word ".repeat(50);
    let out = minerva(&[os("run"), os("-m"), m, os("-p"), os(&long), os("--ctx-size"), os("16")]);
    assert_one_line_error(&out, "context holds 16");
    let out = minerva(&[os("run"), os("-m"), os("/nonexistent/model.gguf"), os("-p"), os("hi")]);
    assert_one_line_error(&out, "/nonexistent/model.gguf");
    // Offline: the hf-hub download fails and says so.
    let out = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(["run", "--hf", "nobody/missing-model:model.gguf", "-p", "hi"])
        .env("HF_HOME", tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert_one_line_error(&out, "--hf nobody/missing-model:model.gguf");
    let out = minerva(&[os("run"), os("--hf"), os("nobody/missing-model"), os("-p"), os("hi")]);
    assert_one_line_error(&out, "REPO:FILE");
    // A GGUF without tokenizer metadata.
    let no_tok = root().join("fixtures/gguf/gguf_py_written.gguf");
    let out = minerva(&[os("tokenize"), no_tok.as_os_str(), os("--text"), os("hi")]);
    assert_one_line_error(&out, "tokenizer.ggml.model");
}

#[test]
fn run_holds_its_answer_to_a_json_schema_a_grammar_or_any_object() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("city.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
            "population": {"type": "integer", "minimum": 0}}, "required": ["city", "population"],
            "additionalProperties": false}"#,
    )
    .unwrap();
    let prompt = "Give the largest city of France and its population.";
    let (stdout, stderr) = run_ok(&[
        "run",
        "--chat",
        "--temperature",
        "0",
        "--max-tokens",
        "80",
        "--stats",
        "--prompt",
        prompt,
        "--json-schema",
        schema.to_str().unwrap(),
    ]);
    let answer: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout:?}"));
    let keys: Vec<&String> = answer.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["city", "population"]);
    assert!(answer["city"].as_str().unwrap().len() <= 20 && answer["population"].as_u64().is_some(), "{answer}");
    assert!(stderr.contains("finish stop (GrammarComplete)"), "{stderr}");
    let (stdout, _) = run_ok(&[
        "run",
        "--chat",
        "--temperature",
        "0.9",
        "--seed",
        "4",
        "--max-tokens",
        "120",
        "--prompt",
        prompt,
        "--json",
    ]);
    assert!(serde_json::from_str::<serde_json::Value>(stdout.trim()).unwrap().is_object(), "{stdout:?}");
    let lark = dir.path().join("answer.lark");
    std::fs::write(&lark, "start: \" \" (\"yes\" | \"no\")\n").unwrap();
    let (stdout, _) = run_ok(&[
        "run",
        "--temperature",
        "0",
        "--prompt",
        "Is Paris in France? Answer:",
        "--grammar",
        lark.to_str().unwrap(),
    ]);
    assert!(stdout == " yes\n" || stdout == " no\n", "{stdout:?}");
    // A bad schema or grammar is one line naming the file.
    let model = real_model();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"type": "frog"}"#).unwrap();
    for (flag, file, what) in [("--json-schema", &bad, "bad.json"), ("--grammar", &schema, "city.json")] {
        let out =
            minerva(&[os("run"), os("-m"), model.as_os_str(), os("--prompt"), os("x"), os(flag), file.as_os_str()]);
        assert_one_line_error(&out, what);
    }
}
