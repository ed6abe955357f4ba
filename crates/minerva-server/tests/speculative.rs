//! `minerva serve --spec ngram` over real HTTP, on SmolLM2: concurrent requests (greedy and
//! seeded sampling, chat and completions, streamed and whole, several choices) get exactly the
//! tokens a server without speculation gives them, drafts are made, kept and counted in
//! `/metrics`, a request's `speculative: false` turns drafting off for it, and a pool small enough
//! to preempt drafting sequences changes nothing either.
//!
//! SmolLM2 runs repacked (`--repack auto`, 8-bit activations): these identities must hold there too.

mod common;

use common::{engine_config, metric, post, post_stream, quiet, smollm2_repacked as smollm2, start_with};
use minerva_server::{EngineConfig, SpecConfig};
use serde_json::{Value, json};

/// Bytes of one KV block of SmolLM2 on the CPU in f32 (the test servers' cache type).
const BLOCK_BYTES: u64 = 2 * 30 * 3 * 64 * 32 * 4;

const SPEC: SpecConfig = SpecConfig { ngram_min: 1, ngram_max: 3, draft_max: 6, max_batch: 4 };

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

/// Every request at once on `config`'s server.
async fn answers(config: EngineConfig) -> (Vec<Vec<(String, String)>>, common::TestServer) {
    let server = start_with(smollm2(), config, quiet()).await;
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
    let plain_server = start_with(smollm2(), engine_config(8), quiet()).await;
    let mut plain = Vec::new();
    // One at a time on the plain server: nothing beside each request.
    for (path, body) in requests() {
        plain.push(answer(&plain_server.url, path, &body).await);
    }
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
