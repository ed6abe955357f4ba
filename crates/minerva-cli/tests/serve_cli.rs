//! `minerva serve` as users run it: the startup line, the official `openai` Python client against
//! it, the same text as `minerva run`, the API key from the environment, SIGTERM, bad flags.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{assert_one_line_error, minerva, os, real_model, root};

/// A `minerva serve` child process on a free port.
struct Served {
    child: Child,
    url: String,
    startup: String,
    lines: mpsc::Receiver<String>,
}

impl Served {
    fn start(extra: &[&str], env: &[(&str, &str)]) -> Served {
        Served::start_model(&real_model(), extra, env)
    }

    fn start_model(model: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> Served {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_minerva"));
        cmd.args(["serve", "--port", "0", "-m"]).arg(model).args(extra);
        cmd.env_remove("MINERVA_API_KEY");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let (tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let startup = lines.recv_timeout(Duration::from_secs(60)).expect("no startup line");
        let url = startup.rsplit(' ').next().unwrap().to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{startup}");
        Served { child, url, startup, lines }
    }

    /// A raw HTTP/1.1 request; returns the whole response text.
    fn request(&self, method: &str, path: &str, headers: &[&str], body: &str) -> String {
        let address = self.url.trim_start_matches("http://");
        let mut s = TcpStream::connect(address).unwrap();
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
        for h in headers {
            head.push_str(h);
            head.push_str("\r\n");
        }
        head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()));
        s.write_all(head.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("minerva serve did not exit after SIGTERM");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_official_openai_client_works_against_minerva_serve() {
    let mut served = Served::start(&["--alias", "smollm2", "--parallel", "4", "--ctx-size", "2048"], &[]);
    assert!(
        served.startup.contains("model smollm2") && served.startup.contains("4 slots × 2048"),
        "{}",
        served.startup
    );
    assert!(served.startup.contains("on cpu ("), "{}", served.startup);
    let script = root().join("fixtures/server/openai_client_check.py");
    let out = Command::new("python3").arg(&script).args([&served.url, "smollm2"]).output().expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("12 passed, 0 failed"), "{stdout}");
    let script = root().join("fixtures/server/openai_responses_check.py");
    let out = Command::new("python3").arg(&script).args([&served.url, "smollm2"]).output().expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("6 passed, 0 failed"), "{stdout}");
    assert_eq!(served.terminate().code(), Some(0));
    // One log line per request: method, path, status, tokens, milliseconds.
    let log: Vec<String> = served.lines.try_iter().collect();
    let chat = log.iter().find(|l| l.starts_with("POST /v1/chat/completions 200 prompt=")).expect("no chat log line");
    assert!(chat.ends_with(" ms") && chat.contains(" completion="), "{chat}");
    assert!(log.iter().any(|l| l.starts_with("POST /v1/chat/completions 400 ")), "{log:?}");
}

/// The Responses API through the official client on the tiny GPT-OSS: Harmony's reasoning as
/// `reasoning` items, function calls, the conversation sent back and continued.
#[test]
fn the_official_client_s_responses_api_works_on_gpt_oss() {
    let mut served = Served::start_model(&root().join("fixtures/gpt_oss/hf"), &["--alias", "tiny"], &[]);
    let script = root().join("fixtures/server/openai_responses_check.py");
    let out = Command::new("python3").arg(&script).args([&served.url, "tiny", "--tiny"]).output().expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("5 passed, 0 failed"), "{stdout}");
    assert_eq!(served.terminate().code(), Some(0));
    let log: Vec<String> = served.lines.try_iter().collect();
    assert!(log.iter().any(|l| l.starts_with("POST /v1/responses 200 prompt=")), "{log:?}");
}

#[test]
fn serve_answers_what_minerva_run_answers() {
    let question = "Give me three tips for staying healthy.";
    let model = real_model();
    let run = minerva(&[
        os("run"),
        os("-m"),
        model.as_os_str(),
        os("--chat"),
        os("--temperature"),
        os("0"),
        os("--max-tokens"),
        os("40"),
        os("--prompt"),
        os(question),
    ]);
    assert!(run.status.success());
    let expected = String::from_utf8(run.stdout).unwrap();
    let served = Served::start(&[], &[("MINERVA_API_KEY", "k3y")]);
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": question}], "temperature": 0, "max_tokens": 40
    })
    .to_string();
    let refused = served.request("POST", "/v1/chat/completions", &[], &body);
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let answer = served.request("POST", "/v1/chat/completions", &["Authorization: Bearer k3y"], &body);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let json: serde_json::Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(format!("{}\n", json["choices"][0]["message"]["content"].as_str().unwrap()), expected);
    // `--repack auto` with no memory for its copies: every matrix read in place, as `run` read
    // them, so the same answer; the startup line says what was left in place.
    let budgeted = Served::start(&["--repack", "auto", "--repack-memory", "1KiB"], &[]);
    if minerva_quant::repacking_pays(minerva_core::DType::Q4_1) {
        assert!(budgeted.startup.contains(", 211 left in place for memory (92.0 MiB)"), "{}", budgeted.startup);
    }
    assert!(!budgeted.startup.contains("repacked"), "{}", budgeted.startup);
    let answer = budgeted.request("POST", "/v1/chat/completions", &[], &body);
    let json: serde_json::Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(format!("{}\n", json["choices"][0]["message"]["content"].as_str().unwrap()), expected);
    // With the model as its own draft model (`--draft-model`): the same answer, every draft kept.
    let drafting = Served::start(&["--draft-model", model.to_str().unwrap(), "--spec-fixed"], &[]);
    let answer = drafting.request("POST", "/v1/chat/completions", &[], &body);
    let json: serde_json::Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(format!("{}\n", json["choices"][0]["message"]["content"].as_str().unwrap()), expected);
    let metrics = drafting.request("GET", "/metrics", &[], "");
    let count = |name: &str| -> f64 {
        metrics.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok()).unwrap_or_else(|| panic!("{name}"))
    };
    let drafted = count("minerva_spec_drafted_tokens_total ");
    assert!(drafted > 0.0 && count("minerva_spec_accepted_tokens_total ") == drafted, "{metrics}");
}

#[test]
fn sigterm_lets_a_running_stream_finish_then_exits_zero() {
    let mut served = Served::start(&[], &[]);
    let address = served.url.trim_start_matches("http://").to_string();
    let body = r#"{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stream": true}"#;
    let mut s = TcpStream::connect(&address).unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut first = [0u8; 64];
    assert!(s.read(&mut first).unwrap() > 0);
    let status = served.terminate();
    let mut rest = String::new();
    s.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("\"finish_reason\":\"length\"") && rest.contains("data: [DONE]"), "{rest}");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn serve_refuses_bad_flags_and_models_in_one_line() {
    let model = real_model();
    let m = model.as_os_str();
    let out = minerva(&[os("serve"), os("-m"), m, os("--parallel"), os("0")]);
    assert_one_line_error(&out, "--parallel");
    let out = minerva(&[os("serve"), os("-m"), m, os("--ctx-size"), os("100000"), os("--port"), os("0")]);
    assert_one_line_error(&out, "larger than the model's trained context of 8192");
    let out = minerva(&[os("serve"), os("-m"), os("/nonexistent/model.gguf"), os("--port"), os("0")]);
    assert_one_line_error(&out, "/nonexistent/model.gguf");
    let out = minerva(&[os("serve"), os("-m"), m, os("--host"), os("256.0.0.1")]);
    assert_one_line_error(&out, "cannot listen on 256.0.0.1");
    let out = minerva(&[os("serve"), os("-m"), m, os("--tool-format"), os("xml")]);
    assert_one_line_error(&out, "unknown tool format `xml` (known: hermes, llama3, mistral, generic)");
    let out = minerva(&[os("serve"), os("-m"), m, os("--cors-origin"), os("app.example/path")]);
    assert_one_line_error(&out, "--cors-origin `app.example/path` is not an origin");
    let gemma = root().join("models/gemma-3-270m-q4_k_m.gguf");
    let out = minerva(&[os("serve"), os("-m"), m, os("--port"), os("0"), os("--draft-model"), gemma.as_os_str()]);
    assert_one_line_error(&out, "needs the same vocabulary");
    let out = minerva(&[os("serve"), os("-m"), m, os("--spec"), os("ngram"), os("--spec-max-batch"), os("0")]);
    assert_one_line_error(&out, "--spec-max-batch must be at least 1");
}

#[test]
fn gpt_oss_answers_and_reasoning_agree_between_run_and_serve() {
    // The tiny GPT-OSS that speaks Harmony (fixtures/gpt_oss/make_scripted_checkpoint.py), sampled
    // with a seed whose walk writes an analysis message, then two final ones: what `run --chat`
    // prints on stdout (the answer) and stderr (the reasoning) is what the server returns as
    // content and reasoning, and neither is empty.
    let model = root().join("fixtures/gpt_oss/scripted");
    let prompt = "w20 w21 w22 w23";
    let seed = "22";
    let run_chat = |extra: &[&str]| {
        let mut args = vec![os("run"), model.as_os_str(), os("--chat"), os("--temperature"), os("1")];
        args.extend(["--top-k", "0", "--top-p", "1", "--min-p", "0", "--seed", seed].map(os));
        args.extend([os("--max-tokens"), os("48"), os("--f32-activations"), os("--prompt"), os(prompt)]);
        args.extend(extra.iter().map(|a| os(a)));
        minerva(&args)
    };
    let run = run_chat(&[]);
    let stderr = String::from_utf8_lossy(&run.stderr).to_string();
    assert!(run.status.success(), "{stderr}");
    let stdout = String::from_utf8(run.stdout).unwrap();
    assert_eq!((stdout.as_str(), stderr.as_str()), ("{\"q\": \"w\"}{\"q\": \"w\"}\n", "{\"q\": \"w\"}\n"));
    let hidden = run_chat(&["--hide-reasoning"]);
    assert_eq!(String::from_utf8(hidden.stdout).unwrap(), stdout);
    assert!(hidden.stderr.is_empty(), "{}", String::from_utf8_lossy(&hidden.stderr));

    let served = Served::start_model(&model, &["--f32-activations"], &[]);
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": prompt}], "temperature": 1, "top_p": 1, "seed": 22, "max_tokens": 48
    })
    .to_string();
    let answer = served.request("POST", "/v1/chat/completions", &[], &body);
    let json: serde_json::Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let message = &json["choices"][0]["message"];
    assert_eq!(format!("{}\n", message["content"].as_str().unwrap_or_default()), stdout, "{json}");
    let reasoning = message["reasoning_content"].as_str().unwrap_or_default();
    assert_eq!(stderr.trim_end_matches('\n'), reasoning, "{json}");
}

/// The chat page at `/` in a real browser (headless chromium driven by selenium,
/// fixtures/ui/chat_page_check.py): streaming, stop, regenerate, edit, Markdown, `<script>` kept
/// as text, reload, conversations, keyboard, phone width, no other host, no console errors, and
/// the API key asked for by the page of a keyed server. Screenshots go to the test's temporary
/// directory (docs/images/ holds copies). `--no-ui` serves no page.
#[test]
fn the_chat_page_works_in_a_real_browser() {
    let served = Served::start(&["--alias", "smollm2", "--ctx-size", "2048"], &[]);
    let keyed =
        Served::start(&["--alias", "smollm2", "--parallel", "1", "--ctx-size", "512"], &[("MINERVA_API_KEY", "k3y")]);
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    let script = root().join("fixtures/ui/chat_page_check.py");
    let out = Command::new("python3")
        .arg(&script)
        .args([served.url.as_str(), "smollm2"])
        .arg(&shots)
        .args([keyed.url.as_str(), "k3y"])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("14 passed, 0 failed"), "{stdout}");
    for shot in ["chat-desktop.png", "chat-phone.png"] {
        let bytes = std::fs::read(shots.join(shot)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000, "{shot}");
    }
    let page = served.request("GET", "/", &[], "");
    assert!(page.starts_with("HTTP/1.1 200") && page.contains("content-security-policy: default-src 'none'"), "{page}");
    let keyed_page = keyed.request("GET", "/ui/app.js", &[], "");
    assert!(keyed_page.starts_with("HTTP/1.1 200"), "the page's files need no key: {keyed_page}");
    let headless = Served::start(&["--no-ui"], &[]);
    assert!(headless.request("GET", "/", &[], "").starts_with("HTTP/1.1 404"));
}
