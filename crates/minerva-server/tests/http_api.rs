//! The OpenAI API over real HTTP on SmolLM2: response and stream shapes, sampling fields, stop
//! strings, logprobs, choices, tokenize/detokenize, models, health and metrics.

mod common;

use common::{chat, chunks, client, post, post_stream, start};
use minerva_generate::{ChatTemplate, GenerateOptions, Message, Sampler, SamplingParams, Session};
use serde_json::{Value, json};

/// What `minerva run --chat --temperature 0` generates, computed in-process with the generator.
fn run_greedy(prompt: &str, max_tokens: usize, chat: bool) -> String {
    let (model, tok) = common::smollm2()().unwrap();
    let ids = if chat {
        let text =
            ChatTemplate::from_tokenizer(&tok).unwrap().render(&[Message::new("user", prompt)], true, None).unwrap();
        tok.encode(&text, false).unwrap()
    } else {
        tok.encode(prompt, true).unwrap()
    };
    let mut session = Session::new(&model, &tok, 2048).unwrap();
    let options = GenerateOptions { max_tokens, ..GenerateOptions::default() };
    let mut text = String::new();
    session
        .generate_with(&ids, options, Sampler::new(SamplingParams::default()).unwrap(), |t| text.push_str(t))
        .unwrap();
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completion_has_openai_shape_and_equals_minerva_run() {
    let server = start(2).await;
    let question = "What is the capital of France?";
    let (status, _, body) =
        post(&server.url, "/v1/chat/completions", &chat(question, json!({"temperature": 0, "max_tokens": 24}))).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "smollm2");
    assert!(body["created"].as_u64().unwrap() > 1_700_000_000);
    assert!(body["system_fingerprint"].as_str().unwrap().starts_with("fp_"));
    let choice = &body["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    let text = choice["message"]["content"].as_str().unwrap();
    assert!(text.contains("Paris"), "{text}");
    assert_eq!(text, run_greedy(question, 24, true));
    let usage = &body["usage"];
    assert_eq!(
        usage["total_tokens"],
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    assert!(matches!(choice["finish_reason"].as_str(), Some("stop" | "length")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_completion_equals_minerva_run_without_chat() {
    let server = start(2).await;
    let prompt = "The three primary colors are";
    let (status, _, body) =
        post(&server.url, "/v1/completions", &json!({"prompt": prompt, "temperature": 0, "max_tokens": 16})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "text_completion");
    assert!(body["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(body["choices"][0]["text"].as_str().unwrap(), run_greedy(prompt, 16, false));
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["completion_tokens"], 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_stream_has_role_deltas_finish_usage_and_done() {
    let server = start(2).await;
    let body = chat(
        "Say hello.",
        json!({"temperature": 0, "max_tokens": 12, "stream": true, "stream_options": {"include_usage": true}}),
    );
    let events = post_stream(&server.url, "/v1/chat/completions", &body).await;
    let chunks = chunks(&events);
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(chunks.iter().all(|c| c["id"] == id && c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let finishes: Vec<&Value> =
        chunks.iter().filter(|c| c["choices"].get(0).is_some_and(|ch| !ch["finish_reason"].is_null())).collect();
    assert_eq!(finishes.len(), 1);
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"].as_array().unwrap().len(), 0);
    let streamed: String = chunks.iter().filter_map(|c| c["choices"].get(0)?["delta"]["content"].as_str()).collect();
    // The same request without streaming gives the same text and counts.
    let mut whole = body.clone();
    whole["stream"] = json!(false);
    whole.as_object_mut().unwrap().remove("stream_options");
    let (_, _, answer) = post(&server.url, "/v1/chat/completions", &whole).await;
    assert_eq!(streamed, answer["choices"][0]["message"]["content"].as_str().unwrap());
    for count in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(usage_chunk["usage"][count], answer["usage"][count]);
    }
    // The second request found the first's tokens in the cache.
    assert!(answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0);
    // After the role chunk, no chunk carries an empty content delta.
    assert!(chunks[1..].iter().all(|c| c["choices"].get(0).is_none_or(|ch| ch["delta"]["content"] != "")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_character_split_across_tokens_arrives_whole_in_one_delta() {
    let server = start(2).await;
    // SmolLM2 answers this in Japanese, each kana three bytes spread over byte tokens.
    let body = chat("Write the word 'hello' in Japanese.", json!({"temperature": 0, "max_tokens": 12}));
    let mut with_logprobs = body.clone();
    with_logprobs["logprobs"] = json!(true);
    let (status, _, whole) = post(&server.url, "/v1/chat/completions", &with_logprobs).await;
    assert_eq!(status, 200, "{whole}");
    let content = whole["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    // The test means something only if some token holds part of a character.
    let partial = whole["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            let bytes: Vec<u8> = t["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
            std::str::from_utf8(&bytes).is_err()
        })
        .count();
    assert!(partial >= 2, "no token splits a character: {whole}");
    let multibyte: Vec<char> = content.chars().filter(|c| c.len_utf8() > 1).collect();
    assert!(!multibyte.is_empty(), "{content:?}");
    assert!(!content.contains('\u{FFFD}'), "{content:?}");

    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    // `post_stream` decodes the whole byte stream strictly.
    let events = post_stream(&server.url, "/v1/chat/completions", &streaming).await;
    // The content deltas after the opening role chunk (whose content is "").
    let deltas: Vec<String> = chunks(&events)[1..]
        .iter()
        .filter_map(|c| c["choices"].get(0)?["delta"]["content"].as_str().map(String::from))
        .collect();
    assert_eq!(deltas.concat(), content);
    for delta in &deltas {
        assert!(!delta.is_empty() && !delta.contains('\u{FFFD}'), "{deltas:?}");
    }
    // Every multi-byte character of the answer is inside a delta, never cut between two.
    let whole_in_deltas: usize = deltas.iter().map(|d| d.chars().filter(|c| c.len_utf8() > 1).count()).sum();
    assert_eq!(whole_in_deltas, multibyte.len(), "{deltas:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_strings_end_generation_and_are_never_sent() {
    let server = start(2).await;
    let prompt = "Here is a list of fruits: apples, pears,";
    let (_, _, free) =
        post(&server.url, "/v1/completions", &json!({"prompt": prompt, "temperature": 0, "max_tokens": 40})).await;
    let free = free["choices"][0]["text"].as_str().unwrap().to_string();
    // A stop string taken from the middle of the free-running text: five characters, so it spans
    // a token boundary.
    let chars: Vec<(usize, char)> = free.char_indices().collect();
    assert!(chars.len() > 20, "{free:?}");
    let (from, to) = (chars[chars.len() / 3].0, chars[chars.len() / 3 + 5].0);
    let stop = &free[from..to];
    let at = free.find(stop).unwrap();
    let body = json!({"prompt": prompt, "temperature": 0, "max_tokens": 40, "stop": [stop, "never-there"]});
    let (_, _, stopped) = post(&server.url, "/v1/completions", &body).await;
    assert_eq!(stopped["choices"][0]["text"].as_str().unwrap(), &free[..at]);
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let events = post_stream(&server.url, "/v1/completions", &streaming).await;
    let text: String =
        chunks(&events).iter().filter_map(|c| c["choices"].get(0)?["text"].as_str().map(String::from)).collect();
    assert_eq!(text, &free[..at]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_seed_repeats_and_choices_share_the_prompt() {
    let server = start(4).await;
    let body = chat("Write a word.", json!({"temperature": 1.0, "seed": 42, "max_tokens": 12, "n": 3}));
    let (status, _, a) = post(&server.url, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{a}");
    let (_, _, b) = post(&server.url, "/v1/chat/completions", &body).await;
    let texts = |v: &Value| -> Vec<String> {
        v["choices"].as_array().unwrap().iter().map(|c| c["message"]["content"].as_str().unwrap().to_string()).collect()
    };
    let drawn = texts(&a);
    assert_eq!(drawn.len(), 3);
    assert_eq!(drawn, texts(&b));
    // Each choice draws on its own (seeds 42, 43, 44): no two are the same text.
    assert!(drawn[0] != drawn[1] && drawn[1] != drawn[2] && drawn[0] != drawn[2], "{drawn:?}");
    let indices: Vec<u64> = a["choices"].as_array().unwrap().iter().map(|c| c["index"].as_u64().unwrap()).collect();
    assert_eq!(indices, vec![0, 1, 2]);
    // The prompt counts once; completions add up over choices.
    let (_, _, one) = post(&server.url, "/v1/chat/completions", &chat("Write a word.", json!({"max_tokens": 1}))).await;
    assert_eq!(a["usage"]["prompt_tokens"], one["usage"]["prompt_tokens"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn choices_run_the_prompt_once_and_continue_from_its_cache() {
    let server = start(4).await;
    let greedy = chat("Name a planet.", json!({"temperature": 0, "max_tokens": 10}));
    let (_, _, single) = post(&server.url, "/v1/chat/completions", &greedy).await;
    let before = common::metric(&server.url, "minerva_batch_tokens_sum").await;
    let mut three = greedy.clone();
    three["n"] = json!(3);
    let (_, _, r) = post(&server.url, "/v1/chat/completions", &three).await;
    let after = common::metric(&server.url, "minerva_batch_tokens_sum").await;
    // Greedy choices from copied cache slots equal the single answer.
    for c in r["choices"].as_array().unwrap() {
        assert_eq!(c["message"]["content"], single["choices"][0]["message"]["content"]);
    }
    // The model ran the prompt once (but what the single answer left in the cache), then each
    // choice's tokens but the last (sampled, not run).
    let prompt = r["usage"]["prompt_tokens"].as_f64().unwrap();
    let cached = r["usage"]["prompt_tokens_details"]["cached_tokens"].as_f64().unwrap();
    let generated = r["usage"]["completion_tokens"].as_f64().unwrap();
    assert!(cached > 0.0, "{r}");
    assert_eq!(after - before, prompt - cached + generated - 3.0, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logprobs_are_log_probabilities_with_ranked_alternatives() {
    let server = start(2).await;
    let body = chat("Hi", json!({"temperature": 0, "max_tokens": 5, "logprobs": true, "top_logprobs": 3}));
    let (status, _, r) = post(&server.url, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{r}");
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len() as u64, r["usage"]["completion_tokens"].as_u64().unwrap());
    for entry in content {
        let lp = entry["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0);
        let top = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        // Greedy: the chosen token is the most likely one.
        assert_eq!(top[0]["token"], entry["token"]);
        assert!((top[0]["logprob"].as_f64().unwrap() - lp).abs() < 1e-6);
        assert!(top.windows(2).all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()));
        // A token of whole characters: its bytes are its text's.
        let bytes: Vec<u8> = entry["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
        assert_eq!(std::str::from_utf8(&bytes).ok(), entry["token"].as_str(), "{entry}");
    }
    let legacy = json!({"prompt": "Hello", "temperature": 0, "max_tokens": 3, "logprobs": 2});
    let (_, _, r) = post(&server.url, "/v1/completions", &legacy).await;
    let lp = &r["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 3);
    assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 2);
    assert_eq!(lp["text_offset"][0], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_detokenize_models_health_and_metrics() {
    let server = start(2).await;
    let (status, _, t) = post(&server.url, "/tokenize", &json!({"content": "Hello world", "with_pieces": true})).await;
    assert_eq!(status, 200);
    let ids: Vec<u64> = t["tokens"].as_array().unwrap().iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert_eq!(t["tokens"][0]["piece"], "Hello");
    let (_, _, d) = post(&server.url, "/detokenize", &json!({"tokens": ids})).await;
    assert_eq!(d["content"], "Hello world");
    let (status, _, plain) = post(&server.url, "/tokenize", &json!({"content": "Hello world"})).await;
    assert_eq!((status, plain["tokens"].as_array().unwrap().len()), (200, ids.len()));
    let models: Value = client().get(format!("{}/v1/models", server.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "smollm2");
    let health = client().get(format!("{}/health", server.url)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    post(&server.url, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 2, "temperature": 0})).await;
    let text = client().get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap();
    for name in [
        "minerva_http_requests_total{status=\"200\"}",
        "minerva_prompt_tokens_total",
        "minerva_completion_tokens_total",
        "minerva_running_sequences",
        "minerva_queued_requests",
        "minerva_batch_sequences_bucket",
        "minerva_time_to_first_token_seconds_bucket",
        "minerva_inter_token_latency_seconds_count",
    ] {
        assert!(text.contains(name), "{name} missing from\n{text}");
    }
    assert_eq!(common::metric(&server.url, "minerva_completion_tokens_total").await, 2.0);
}
