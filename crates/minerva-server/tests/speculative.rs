//! `minerva serve --spec ngram` and `--draft-model` over real HTTP, on SmolLM2: concurrent
//! requests (greedy and seeded sampling, chat and completions, streamed and whole, several
//! choices) get exactly the tokens a server without speculation gives them, drafts are made, kept
//! and counted in `/metrics`, a request's `speculative: false` turns drafting off for it, and a
//! pool small enough to preempt drafting sequences changes nothing either; drafts fixed in length
//! (counted) and chosen by the measured step times. Draft models: SmolLM2 itself (every greedy
//! draft kept) and its first layers alone (a different model of the same vocabulary, whose drafts
//! are mostly refused); one of another vocabulary is refused at start.
//!
//! SmolLM2 runs repacked (`--repack auto`, 8-bit activations): these identities must hold there too.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{engine_config, metric, post, post_stream, quiet, real_model, smollm2_repacked as smollm2, start_with};
use minerva_generate::Tokenizer;
use minerva_gguf::{Gguf, GgufWriter, MetadataValue};
use minerva_model::{CpuBackend, Model, Repack};
use minerva_server::{EngineConfig, EngineHandle, Metrics, Served, SpecConfig, SpecDrafter};
use serde_json::{Value, json};

/// Bytes of one KV block of SmolLM2 on the CPU in f32 (the test servers' cache type).
const BLOCK_BYTES: u64 = 2 * 30 * 3 * 64 * 32 * 4;

/// Drafts of a fixed length, so that how many are made and kept does not depend on step times.
const SPEC: SpecConfig =
    SpecConfig { drafter: SpecDrafter::Ngram { min: 1, max: 3 }, draft_max: 6, max_batch: 4, fixed: true };
/// Drafts chosen by the measured step times, as `minerva serve --spec ngram` chooses them.
const ADAPTIVE: SpecConfig = SpecConfig { fixed: false, max_batch: usize::MAX, ..SPEC };
const DRAFT_MODEL: SpecConfig = SpecConfig { drafter: SpecDrafter::DraftModel, draft_max: 4, ..SPEC };

/// Requests whose answers quote their prompts (drafts kept) and ones that do not.
fn requests() -> Vec<(&'static str, Value)> {
    let chat = |content: &str, extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": content}], "max_tokens": 48, "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let edit = "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog near the river bank.";
    vec![
        ("/v1/chat/completions", chat(edit, json!({}))),
        (
            "/v1/chat/completions",
            chat("Copy this list: apples, pears, plums, cherries, figs.", json!({"stream": true})),
        ),
        ("/v1/chat/completions", chat(edit, json!({"temperature": 0.7, "seed": 5, "n": 2}))),
        ("/v1/chat/completions", chat("Write a poem about the sea.", json!({"temperature": 0.9, "seed": 9}))),
        (
            "/v1/completions",
            json!({"prompt": "one two three four five one two three four five one two", "max_tokens": 24, "temperature": 0}),
        ),
        ("/v1/chat/completions", chat("Name three colours.", json!({"stop": ["three"], "max_tokens": 30}))),
    ]
}

/// Each choice's text (streamed ones joined from their deltas), with its finish reason.
async fn answer(url: &str, path: &str, body: &Value) -> Vec<(String, String)> {
    if body["stream"] == json!(true) {
        let events = post_stream(url, path, body).await;
        let mut text = String::new();
        let mut finish = String::new();
        for e in &events[..events.len() - 1] {
            let chunk: Value = serde_json::from_str(e).unwrap();
            if let Some(t) = chunk["choices"][0]["delta"]["content"].as_str() {
                text += t;
            }
            if let Some(f) = chunk["choices"][0]["finish_reason"].as_str() {
                finish = f.to_string();
            }
        }
        return vec![(text, finish)];
    }
    let (status, _, v) = post(url, path, body).await;
    assert_eq!(status, 200, "{v}");
    v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let text = c["message"]["content"].as_str().or(c["text"].as_str()).unwrap().to_string();
            (text, c["finish_reason"].as_str().unwrap().to_string())
        })
        .collect()
}

/// Every request's answers from a server without speculation, one request at a time (nothing
/// beside each), and the server.
async fn plain_answers() -> (Vec<Vec<(String, String)>>, common::TestServer) {
    let server = start_with(smollm2(), engine_config(8), quiet()).await;
    let mut plain = Vec::new();
    for (path, body) in requests() {
        plain.push(answer(&server.url, path, &body).await);
    }
    (plain, server)
}

/// Every request at once on `config`'s server.
async fn answers(config: EngineConfig) -> (Vec<Vec<(String, String)>>, common::TestServer) {
    answers_on(start_with(smollm2(), config, quiet()).await).await
}

/// Every request at once on `server`.
async fn answers_on(server: common::TestServer) -> (Vec<Vec<(String, String)>>, common::TestServer) {
    let tasks: Vec<_> = requests()
        .into_iter()
        .map(|(path, body)| {
            let url = server.url.clone();
            tokio::spawn(async move { answer(&url, path, &body).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    (out, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speculating_server_answers_as_a_plain_one() {
    let (plain, plain_server) = plain_answers().await;
    let (concurrent, speculating) = answers(EngineConfig { speculation: Some(SPEC), ..engine_config(8) }).await;
    assert_eq!(concurrent, plain);
    let drafted = metric(&speculating.url, "minerva_spec_drafted_tokens_total").await;
    let kept = metric(&speculating.url, "minerva_spec_accepted_tokens_total").await;
    assert!(kept >= 10.0 && drafted >= kept, "{kept} of {drafted} drafted tokens kept");
    assert_eq!(metric(&plain_server.url, "minerva_spec_drafted_tokens_total").await, 0.0);

    // `speculative: false`: no drafts for that request, the same answer.
    let (path, mut body) = requests().remove(0);
    body["speculative"] = json!(false);
    assert_eq!(answer(&speculating.url, path, &body).await, plain[0]);
    assert_eq!(metric(&speculating.url, "minerva_spec_drafted_tokens_total").await, drafted);

    // The measured choice of drafts (no bound on the batch): the same answers. The first steps
    // draft, with nothing measured yet.
    let (adaptive, adaptive_server) = answers(EngineConfig { speculation: Some(ADAPTIVE), ..engine_config(8) }).await;
    assert_eq!(adaptive, plain);
    assert!(metric(&adaptive_server.url, "minerva_spec_drafted_tokens_total").await > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempting_drafting_sequences_changes_no_token() {
    // Eight blocks for seven sequences of up to ~40 + 48 tokens: the newest are preempted, some
    // while they hold drafted tokens.
    let small = EngineConfig {
        speculation: Some(SPEC),
        ctx_size: Some(256),
        kv_memory: Some(8 * BLOCK_BYTES),
        ..engine_config(6)
    };
    let (squeezed, server) = answers(small).await;
    let preemptions = metric(&server.url, "minerva_preemptions_total").await;
    assert!(metric(&server.url, "minerva_spec_accepted_tokens_total").await > 0.0);
    assert!(preemptions >= 1.0, "no preemption: the test does not test it");
    let (roomy, _) = answers(engine_config(6)).await;
    assert_eq!(squeezed, roomy);
}

/// SmolLM2's first `layers` layers as a GGUF of their own (the rest of the file as it is): a
/// smaller model of the same vocabulary, written once per test run.
fn smollm2_first_layers(layers: u32) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("smollm2-first-{layers}-layers.gguf"));
    let source = Gguf::open(real_model()).unwrap();
    let mut out = GgufWriter::new();
    for (key, value) in source.metadata() {
        let value = if key == "llama.block_count" { MetadataValue::from(layers) } else { value.to_owned_value() };
        out.add_metadata(key, value).unwrap();
    }
    for t in source.tensor_infos() {
        let layer = t.name.strip_prefix("blk.").and_then(|r| r.split('.').next()?.parse::<u32>().ok());
        if layer.is_none_or(|l| l < layers) {
            out.add_tensor(t.name.clone(), t.dtype, &t.shape, source.tensor_bytes(t).to_vec()).unwrap();
        }
    }
    // Written beside and renamed, so tests running at once never read half a file.
    let partial = path.with_extension(format!("{}.partial", std::process::id()));
    out.write_to(std::io::BufWriter::new(std::fs::File::create(&partial).unwrap())).unwrap();
    std::fs::rename(&partial, &path).unwrap();
    path
}

/// SmolLM2 (repacked) served with the GGUF at `draft` as its draft model, and that file's
/// tokenizer.
fn smollm2_drafted_by(draft: PathBuf) -> impl FnOnce() -> Result<Served<CpuBackend>, String> + Send + 'static {
    move || {
        let (model, tokenizer) = smollm2()()?;
        let gguf = Gguf::open(&draft).map_err(|e| e.to_string())?;
        let draft_tokenizer = Tokenizer::from_gguf(&gguf).map_err(|e| e.to_string())?;
        let backend = CpuBackend::new(Some(2)).map_err(|e| e.to_string())?.with_repack(Repack::Auto);
        let draft_model = Model::from_gguf(Arc::new(gguf), backend).map_err(|e| e.to_string())?;
        Ok(Served { model, tokenizer, draft: Some((draft_model, draft_tokenizer)) })
    }
}

/// A server over `load`, as [`common::start_with`] starts one.
async fn start_served(
    load: impl FnOnce() -> Result<Served<CpuBackend>, String> + Send + 'static,
    config: EngineConfig,
) -> common::TestServer {
    let metrics = Arc::new(Metrics::new());
    common::serve_engine(EngineHandle::spawn_served(load, config, metrics.clone()), metrics, quiet()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draft_model_servers_answer_as_a_plain_one() {
    let (plain, _plain_server) = plain_answers().await;
    let config = EngineConfig { speculation: Some(DRAFT_MODEL), ..engine_config(8) };

    // SmolLM2 drafting for itself: the same answers, and every greedy draft kept. Drafts of 32,
    // longer than the answers that end by their end of sequence.
    let long = EngineConfig { speculation: Some(SpecConfig { draft_max: 32, ..DRAFT_MODEL }), ..config.clone() };
    let itself = start_served(smollm2_drafted_by(real_model()), long).await;
    let greedy = requests().into_iter().filter(|(_, b)| b["temperature"] == json!(0) && b["stop"].is_null());
    let mut ended = 0;
    for (path, body) in greedy {
        let before = metric(&itself.url, "minerva_spec_drafted_tokens_total").await;
        let kept_before = metric(&itself.url, "minerva_spec_accepted_tokens_total").await;
        assert_eq!(answer(&itself.url, path, &body).await, plain[requests().iter().position(|r| r.1 == body).unwrap()]);
        let drafted = metric(&itself.url, "minerva_spec_drafted_tokens_total").await - before;
        let kept = metric(&itself.url, "minerva_spec_accepted_tokens_total").await - kept_before;
        assert!(drafted > 0.0 && kept == drafted, "{kept} of {drafted} drafted tokens kept by the model itself");
        // The draft model drafts on past the end of sequence; drafts are cut after it, so no
        // drafted token goes beyond the answer (the first token comes from the prefill).
        if body["stream"] == json!(true) {
            continue;
        }
        let (status, _, whole) = post(&itself.url, path, &body).await;
        assert_eq!(status, 200, "{whole}");
        if whole["choices"][0]["finish_reason"] == json!("stop") {
            let completion = whole["usage"]["completion_tokens"].as_f64().unwrap();
            assert!(drafted <= completion, "{drafted} drafted tokens for a {completion}-token answer");
            ended += 1;
        }
    }
    assert!(ended >= 1, "no greedy answer ended by its end of sequence: the test does not test it");
    let (concurrent, _) = answers_on(itself).await;
    assert_eq!(concurrent, plain);

    // Its first 24 of 30 layers: drafts kept and refused, answers unchanged.
    let first = start_served(smollm2_drafted_by(smollm2_first_layers(24)), config).await;
    let (concurrent, first) = answers_on(first).await;
    assert_eq!(concurrent, plain);
    let drafted = metric(&first.url, "minerva_spec_drafted_tokens_total").await;
    let kept = metric(&first.url, "minerva_spec_accepted_tokens_total").await;
    assert!(kept > 0.0 && drafted > kept, "{kept} of {drafted} drafted tokens kept by a smaller model");
}

/// The error `engine` reports for its start.
fn load_error(engine: EngineHandle) -> String {
    loop {
        match engine.info() {
            Some(Ok(_)) => panic!("the engine started"),
            Some(Err(message)) => return message,
            None if !engine.is_alive() => panic!("the engine thread stopped without a word"),
            None => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

#[test]
fn a_draft_model_of_another_vocabulary_is_refused_at_start() {
    // The tiny GPT-OSS fixture: its own (Harmony) vocabulary.
    let other = common::root().join("fixtures/gpt_oss/hf");
    let load = move || {
        let (model, tokenizer) = smollm2()()?;
        let backend = CpuBackend::new(Some(1)).map_err(|e| e.to_string())?;
        let draft = Model::load(&other, backend).map_err(|e| e.to_string())?;
        let draft_tokenizer = Tokenizer::from_dir(&other).map_err(|e| e.to_string())?;
        Ok(Served { model, tokenizer, draft: Some((draft, draft_tokenizer)) })
    };
    let config = EngineConfig { speculation: Some(DRAFT_MODEL), ..engine_config(2) };
    let message = load_error(EngineHandle::spawn_served(load, config, Arc::new(Metrics::new())));
    assert!(message.starts_with("the draft model:") && message.contains("same vocabulary"), "{message}");
    // Asking for a draft model without loading one is refused too.
    let config = EngineConfig { speculation: Some(DRAFT_MODEL), ..engine_config(2) };
    let message = load_error(EngineHandle::spawn(smollm2(), config, Arc::new(Metrics::new())));
    assert!(message.contains("no draft model was loaded"), "{message}");
}
