//! Speculative decoding from the command line on the real model: `run`, `chat` and `bench` with
//! `--spec ngram` and `--draft-model` give plain greedy decoding's text, `--stats` says what was
//! drafted and kept, and wrong flags are one-line errors.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{assert_one_line_error, minerva, os, real_model, root};

const EDIT: &str = "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog near the river \
                    bank every morning.";

fn run(extra: &[&str]) -> std::process::Output {
    let model = real_model();
    let mut args: Vec<&std::ffi::OsStr> = vec![os("run"), model.as_os_str()];
    let common = ["--prompt", EDIT, "--chat", "--temperature", "0", "--max-tokens", "40", "--threads", "2"];
    args.extend(common.iter().map(|a| os(a)));
    args.extend(extra.iter().map(|a| os(a)));
    minerva(&args)
}

fn ok(out: &std::process::Output) -> (String, String) {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8(out.stdout.clone()).unwrap(), stderr)
}

/// "spec NAME: A of D drafted kept" from a `--stats` line.
fn kept_and_drafted(stderr: &str, name: &str) -> (usize, usize) {
    let at = stderr.find(&format!("spec {name}: ")).unwrap_or_else(|| panic!("no spec stats in {stderr}"));
    let words: Vec<&str> = stderr[at..].split_whitespace().collect();
    (words[2].parse().unwrap(), words[4].parse().unwrap())
}

#[test]
fn run_with_ngram_and_draft_model_speculation_prints_plain_greedy_text() {
    let (plain, _) = ok(&run(&["--stats"]));
    assert!(plain.contains("quick brown fox"), "{plain}");
    let (ngram, stderr) = ok(&run(&["--stats", "--spec", "ngram"]));
    assert_eq!(ngram, plain);
    let (kept, drafted) = kept_and_drafted(&stderr, "ngram");
    assert!(kept >= 6 && drafted >= kept, "{stderr}");
    assert!(stderr.contains("tokens per pass"), "{stderr}");
    // The model as its own draft: every drafted token is kept.
    let model = real_model();
    let model = model.to_str().unwrap();
    let (drafted_text, stderr) =
        ok(&run(&["--stats", "--draft-model", model, "--spec-draft-max", "3", "--spec-fixed"]));
    assert_eq!(drafted_text, plain);
    let (kept, drafted) = kept_and_drafted(&stderr, "draft-model");
    assert!(drafted >= 5 && kept == drafted, "{stderr}");
}

#[test]
fn chat_with_speculation_answers_as_without() {
    let model = real_model();
    let chat = |extra: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_minerva"))
            .args(["chat", "--temperature", "0", "--max-tokens", "24", "--threads", "2", "-m"])
            .arg(&model)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let input = format!("{EDIT}\nNow repeat it once more.\n/exit\n");
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let plain = chat(&[]);
    assert_eq!(plain.lines().count(), 2, "{plain:?}");
    assert_eq!(chat(&["--spec", "ngram", "--spec-ngram-min", "1"]), plain);
}

#[test]
fn bench_spec_measures_both_and_checks_they_agree() {
    let model = real_model();
    let prompt = root().join("benches/speculative/code_rename.txt");
    let out = minerva(&[
        os("bench"),
        model.as_os_str(),
        os("--spec"),
        os("ngram"),
        os("--chat"),
        os("--prompt-file"),
        prompt.as_os_str(),
        os("-n"),
        os("24"),
        os("-r"),
        os("1"),
        os("--threads"),
        os("2"),
        os("--json"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let p = &json["prompts"][0];
    assert_eq!(p["prompt"], "code_rename");
    for key in ["plain_decode_tok_s", "spec_decode_tok_s", "ratio", "tokens_per_pass"] {
        assert!(p[key].as_f64().is_some_and(|v| v.is_finite() && v > 0.0), "{key}: {json}");
    }
    assert!(p["accepted"].as_u64().unwrap() > 0, "{json}");
    // Verifying passes were timed, none longer than a draft of --spec-draft-max (32) and its
    // token.
    let rows: Vec<u64> = json["pass_ms"].as_array().unwrap().iter().map(|r| r["rows"].as_u64().unwrap()).collect();
    assert!(rows.iter().any(|&r| r > 1) && rows.iter().all(|&r| (1..=33).contains(&r)), "{json}");
}

#[test]
fn speculation_flag_errors_are_one_line() {
    let gemma = root().join("models/gemma-3-270m-q4_k_m.gguf");
    assert!(gemma.exists(), "{} is missing: run `cargo xtask setup`", gemma.display());
    let out = run(&["--draft-model", gemma.to_str().unwrap()]);
    assert_one_line_error(&out, "needs the same vocabulary");
    assert_one_line_error(&run(&["--spec", "draft"]), "--spec draft needs --draft-model");
    let model = real_model();
    assert_one_line_error(&run(&["--spec", "ngram", "--draft-model", model.to_str().unwrap()]), "--spec ngram");
    assert_one_line_error(&run(&["--spec", "ngram", "--spec-ngram-min", "0"]), "n-gram sizes 0..4");
    assert_one_line_error(&run(&["--spec", "ngram", "--spec-ngram-min", "5"]), "n-gram sizes 5..4");
    assert_one_line_error(&run(&["--spec", "ngram", "--spec-draft-max", "0"]), "draft length 0");
    assert_one_line_error(&run(&["--draft-model", "/nonexistent/draft.gguf"]), "/nonexistent/draft.gguf");
    let bench = |extra: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec![os("bench"), model.as_os_str()];
        args.extend(extra.iter().map(|a| os(a)));
        minerva(&args)
    };
    assert_one_line_error(&bench(&["--spec", "ngram"]), "--prompt-file");
    assert_one_line_error(&bench(&["--chat"]), "--spec ngram|draft");
    let missing = bench(&["--spec", "ngram", "--prompt-file", "/nonexistent/prompt.txt"]);
    assert_one_line_error(&missing, "/nonexistent/prompt.txt");
}
