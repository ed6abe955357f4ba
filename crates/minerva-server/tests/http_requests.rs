//! Request features over real HTTP on SmolLM2 that change what is generated or when it stops:
//! several prompts in one `/v1/completions` request, streamed choices (`n` > 1), penalties and
//! `logit_bias`, a client that leaves a non-streamed request, and the shutdown grace period
//! running out.

mod common;

use std::time::{Duration, Instant};

use common::{chat, chunks, client, metric, post, post_stream, start, start_with};
use minerva_generate::{GenerateOptions, Sampler, SamplingParams, Session};
use minerva_server::ServerConfig;
use serde_json::{Value, json};

/// What the generator gives in-process for `prompt` (BOS added, as `/v1/completions` does) with
/// `params`.
fn generate(prompt: &str, max_tokens: usize, params: SamplingParams) -> String {
    let (model, tok) = common::smollm2()().unwrap();
    let ids = tok.encode(prompt, true).unwrap();
    let mut session = Session::new(&model, &tok, 2048).unwrap();
    let options = GenerateOptions { max_tokens, ..GenerateOptions::default() };
    let mut text = String::new();
    session.generate_with(&ids, options, Sampler::new(params).unwrap(), |t| text.push_str(t)).unwrap();
    text
}

fn text_of(r: &Value, choice: usize) -> String {
    r["choices"][choice]["text"].as_str().unwrap_or_else(|| panic!("no text in choice {choice}: {r}")).to_string()
}

/// Each streamed choice's text, by index, and each one's finish reasons.
fn streamed_by_choice(chunks: &[Value], key: &str, choices: usize) -> (Vec<String>, Vec<Vec<String>>) {
    let mut texts = vec![String::new(); choices];
    let mut finishes = vec![Vec::new(); choices];
    for c in chunks {
        for choice in c["choices"].as_array().unwrap() {
            let i = choice["index"].as_u64().unwrap() as usize;
            let piece = match key {
                "text" => &choice["text"],
                _ => &choice["delta"][key],
            };
            texts[i].push_str(piece.as_str().unwrap_or_default());
            if let Some(reason) = choice["finish_reason"].as_str() {
                finishes[i].push(reason.to_string());
            }
        }
    }
    (texts, finishes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_prompts_in_one_completion_request_each_answer_as_alone() {
    let server = start(4).await;
    let prompts = ["The three primary colors are", "Once upon a time, a dragon"];
    let mut alone = Vec::new();
    let mut prompt_tokens = 0;
    for p in prompts {
        let (status, _, r) =
            post(&server.url, "/v1/completions", &json!({"prompt": p, "temperature": 0, "max_tokens": 10})).await;
        assert_eq!(status, 200, "{r}");
        alone.push(text_of(&r, 0));
        prompt_tokens += r["usage"]["prompt_tokens"].as_u64().unwrap();
    }
    assert_ne!(alone[0], alone[1]);
    // Two prompts × two greedy choices: choice index = prompt × n + choice.
    let body = json!({"prompt": prompts, "temperature": 0, "max_tokens": 10, "n": 2});
    let (status, _, r) = post(&server.url, "/v1/completions", &body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["choices"].as_array().unwrap().len(), 4, "{r}");
    for (index, want) in [&alone[0], &alone[0], &alone[1], &alone[1]].into_iter().enumerate() {
        assert_eq!(r["choices"][index]["index"], index, "{r}");
        assert_eq!(&text_of(&r, index), want, "choice {index}: {r}");
        assert_eq!(r["choices"][index]["finish_reason"], "length", "{r}");
    }
    assert_eq!(r["usage"]["prompt_tokens"], prompt_tokens, "{r}");
    assert_eq!(r["usage"]["completion_tokens"], 40, "{r}");
    // Streamed, each index carries its own prompt's text and ends once.
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let events = post_stream(&server.url, "/v1/completions", &streaming).await;
    let (texts, finishes) = streamed_by_choice(&chunks(&events), "text", 4);
    assert_eq!(texts, [&alone[0], &alone[0], &alone[1], &alone[1]].map(String::clone));
    assert!(finishes.iter().all(|f| f == &["length"]), "{finishes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_choices_each_arrive_whole_under_their_index() {
    let server = start(4).await;
    let body = chat("Write a word.", json!({"temperature": 1.0, "seed": 7, "max_tokens": 12, "n": 3}));
    let (status, _, whole) = post(&server.url, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{whole}");
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let events = post_stream(&server.url, "/v1/chat/completions", &streaming).await;
    let chunks = chunks(&events);
    // One role chunk per choice opens the stream.
    let roles: Vec<u64> = chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().unwrap().iter())
        .filter(|ch| ch["delta"]["role"] == "assistant")
        .map(|ch| ch["index"].as_u64().unwrap())
        .collect();
    assert_eq!(roles, [0, 1, 2]);
    let (texts, finishes) = streamed_by_choice(&chunks, "content", 3);
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(text, whole["choices"][i]["message"]["content"].as_str().unwrap(), "choice {i}");
        assert_eq!(finishes[i], [whole["choices"][i]["finish_reason"].as_str().unwrap()], "choice {i}");
    }
    // Sampled choices are different draws.
    assert!(texts[0] != texts[1] && texts[1] != texts[2] && texts[0] != texts[2], "{texts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn penalties_and_logit_bias_change_the_text_as_the_sampler_does() {
    let server = start(2).await;
    let prompt = "Repeat after me: red red red red red red red red";
    let ask = |extra: Value| {
        let mut body = json!({"prompt": prompt, "temperature": 0, "max_tokens": 12});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let (_, _, plain) = post(&server.url, "/v1/completions", &ask(json!({}))).await;
    let plain = text_of(&plain, 0);
    assert_eq!(plain, generate(prompt, 12, SamplingParams::default()));
    let penalised = [
        // Small enough that once per token (presence) would not do what once per occurrence does.
        (json!({"frequency_penalty": 0.5}), SamplingParams { frequency_penalty: 0.5, ..SamplingParams::default() }),
        (json!({"presence_penalty": 2.0}), SamplingParams { presence_penalty: 2.0, ..SamplingParams::default() }),
        (json!({"repetition_penalty": 1.8}), SamplingParams { repeat_penalty: 1.8, ..SamplingParams::default() }),
    ];
    for (fields, params) in penalised {
        let (status, _, r) = post(&server.url, "/v1/completions", &ask(fields.clone())).await;
        assert_eq!(status, 200, "{r}");
        let text = text_of(&r, 0);
        assert_ne!(text, plain, "{fields} changed nothing");
        assert_eq!(text, generate(prompt, 12, params), "{fields}");
    }
    // +100 on one token makes it the only answer; -100 on the plain answer's first token moves it.
    let (_, _, t) = post(&server.url, "/tokenize", &json!({"content": " blue"})).await;
    let blue = t["tokens"].as_array().unwrap();
    assert_eq!(blue.len(), 1, "{t}");
    let (_, _, r) = post(&server.url, "/v1/completions", &ask(json!({"logit_bias": {blue[0].to_string(): 100}}))).await;
    assert_eq!(text_of(&r, 0), " blue".repeat(12));
    let (_, _, r) =
        post(&server.url, "/v1/completions", &ask(json!({"max_tokens": 1, "logprobs": 0, "temperature": 0}))).await;
    let first = r["choices"][0]["logprobs"]["tokens"][0].as_str().unwrap().to_string();
    let (_, _, t) = post(&server.url, "/tokenize", &json!({"content": first, "add_special": false})).await;
    let first_id = t["tokens"][0].as_u64().unwrap() as u32;
    assert_eq!(t["tokens"].as_array().unwrap().len(), 1, "{t}");
    let (_, _, r) =
        post(&server.url, "/v1/completions", &ask(json!({"logit_bias": {first_id.to_string(): -100}}))).await;
    let banned = text_of(&r, 0);
    assert!(!banned.starts_with(&first), "{banned:?} still starts with {first:?}");
    let params = SamplingParams { logit_bias: vec![(first_id, -100.0)], ..SamplingParams::default() };
    assert_eq!(banned, generate(prompt, 12, params));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_a_non_streamed_request_frees_its_slot() {
    let server = start(1).await;
    let url = server.url.clone();
    let waiting = tokio::spawn(async move {
        let body = json!({"prompt": "Count to one thousand:", "max_tokens": 1500, "temperature": 0});
        client().post(format!("{url}/v1/completions")).json(&body).send().await
    });
    let t = Instant::now();
    while metric(&server.url, "minerva_running_sequences").await != 1.0 {
        assert!(t.elapsed() < Duration::from_secs(20), "the request never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The names llm-d and the Gateway API Inference Extension route on, beside ours.
    assert_eq!(metric(&server.url, "vllm:num_requests_running").await, 1.0);
    assert_eq!(metric(&server.url, "vllm:num_requests_waiting").await, 0.0);
    // (It counts positions already run: after the first step.)
    let t = Instant::now();
    let mut usage = 0.0;
    while usage == 0.0 {
        assert!(t.elapsed() < Duration::from_secs(20), "the KV cache stayed empty");
        usage = metric(&server.url, "vllm:kv_cache_usage_perc").await;
    }
    assert!(usage > 0.0 && usage < 1.0, "{usage}");
    assert!(metric(&server.url, "minerva_kv_cache_usage_ratio").await >= usage, "it only grows while one runs");
    // Dropping the task drops the connection while the answer is being generated.
    waiting.abort();
    let t = Instant::now();
    while metric(&server.url, "minerva_running_sequences").await != 0.0 {
        assert!(t.elapsed() < Duration::from_secs(5), "the sequence kept running");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metric(&server.url, "minerva_cancelled_requests_total").await, 1.0);
    assert_eq!(metric(&server.url, "vllm:num_requests_running").await, 0.0);
    assert!(metric(&server.url, "minerva_completion_tokens_total").await < 1500.0);
    let (status, _, r) = post(&server.url, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 2})).await;
    assert_eq!(status, 200, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_still_running_when_the_grace_period_ends_gets_an_error_then_done() {
    let config = ServerConfig { shutdown_grace: Duration::from_millis(300), ..common::quiet() };
    let server = start_with(common::smollm2(), common::engine_config(1), config).await;
    let url = server.url.clone();
    let body = json!({"prompt": "Count to one thousand:", "max_tokens": 1500, "temperature": 0, "stream": true});
    let stream = tokio::spawn(async move { post_stream(&url, "/v1/completions", &body).await });
    while metric(&server.url, "minerva_running_sequences").await == 0.0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let t = Instant::now();
    server.shutdown().await.unwrap();
    // The server returned soon after the grace period, not after 1500 tokens.
    assert!(t.elapsed() < Duration::from_secs(10), "shutdown took {:?}", t.elapsed());
    let events = stream.await.unwrap();
    let chunks = chunks(&events);
    let (last, text) = chunks.split_last().unwrap();
    assert_eq!(last["error"]["type"], "unavailable_error", "{last}");
    assert!(text.iter().all(|c| c["choices"][0]["finish_reason"].is_null()), "a choice finished: {chunks:?}");
    let generated: String = text.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
    assert!(!generated.is_empty());
}
