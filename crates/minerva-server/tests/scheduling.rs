//! Continuous batching: batch invariance, cancellation on disconnect, the bounded queue, time
//! limits, a failing step, and shutdown.
//!
//! SmolLM2 runs repacked (`--repack auto`, 8-bit activations): these identities must hold there too.

mod common;

use std::time::{Duration, Instant};

use common::{client, metric, post, post_stream, start_repacked as start, start_with};
use futures_util::StreamExt;
use minerva_server::{EngineConfig, ServerConfig};
use serde_json::json;

fn story(i: usize) -> serde_json::Value {
    let places = ["Paris", "a forest", "space", "Tokyo", "a castle", "the sea", "a lab", "Rome"];
    json!({"prompt": format!("Story {i}: once upon a time in {}", places[i % 8]), "temperature": 0, "max_tokens": 24})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn greedy_text_is_the_same_alone_and_beside_fifteen_others() {
    let server = start(16).await;
    let mut alone = Vec::new();
    for i in 0..16 {
        let (_, _, r) = post(&server.url, "/v1/completions", &story(i)).await;
        alone.push(r["choices"][0]["text"].as_str().unwrap().to_string());
    }
    let together = futures_util::future::join_all((0..16).map(|i| {
        let url = server.url.clone();
        async move {
            let (_, _, r) = post(&url, "/v1/completions", &story(i)).await;
            r["choices"][0]["text"].as_str().unwrap().to_string()
        }
    }))
    .await;
    assert_eq!(alone, together);
    // They did run together: some step held more than eight sequences.
    let text = client().get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap();
    let below_9 = metric(&server.url, "minerva_batch_sequences_bucket{le=\"8.0\"}").await;
    let all = metric(&server.url, "minerva_batch_sequences_count").await;
    assert!(below_9 < all, "no step held more than 8 sequences:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_frees_its_slot() {
    let server = start(1).await;
    let body = json!({"prompt": "Count to one thousand:", "max_tokens": 1500, "temperature": 0, "stream": true});
    let r = client().post(format!("{}/v1/completions", server.url)).json(&body).send().await.unwrap();
    let mut stream = r.bytes_stream();
    let mut seen = 0;
    while seen < 3 {
        stream.next().await.unwrap().unwrap();
        seen += 1;
    }
    assert_eq!(metric(&server.url, "minerva_running_sequences").await, 1.0);
    drop(stream);
    let t = Instant::now();
    while metric(&server.url, "minerva_running_sequences").await != 0.0 {
        assert!(t.elapsed() < Duration::from_secs(5), "the sequence kept running");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metric(&server.url, "minerva_cancelled_requests_total").await, 1.0);
    let generated = metric(&server.url, "minerva_completion_tokens_total").await;
    assert!(generated < 1500.0, "{generated}");
    // The freed slot serves the next request.
    let (status, _, _) = post(&server.url, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 2})).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_queue_bound_requests_get_503_with_retry_after() {
    let engine = EngineConfig { max_queue: 1, ..common::engine_config(1) };
    let server = start_with(common::smollm2_repacked(), engine, common::quiet()).await;
    let long = json!({"prompt": "Count to one thousand:", "max_tokens": 1500, "temperature": 0, "stream": true});
    let running = client().post(format!("{}/v1/completions", server.url)).json(&long).send().await.unwrap();
    let mut running = running.bytes_stream();
    running.next().await.unwrap().unwrap();
    // The second waits for the slot (its headers come at once), the third is refused.
    let waiting = client().post(format!("{}/v1/completions", server.url)).json(&long).send().await.unwrap();
    assert_eq!(waiting.status(), 200);
    assert_eq!(server.engine.queued(), 1);
    let (status, headers, e) = post(&server.url, "/v1/completions", &json!({"prompt": "Hi"})).await;
    assert_eq!(status, 503, "{e}");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(e["error"]["code"], "server_overloaded");
    drop(waiting);
    drop(running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_time_limit_ends_with_length() {
    let config = ServerConfig { request_timeout: Duration::from_millis(300), ..common::quiet() };
    let server = start_with(common::smollm2_repacked(), common::engine_config(1), config).await;
    let t = Instant::now();
    let (status, _, r) = post(
        &server.url,
        "/v1/completions",
        &json!({"prompt": "Count to one thousand:", "max_tokens": 1500, "temperature": 0}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    assert!(r["usage"]["completion_tokens"].as_u64().unwrap() < 1500);
    assert!(t.elapsed() < Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_running_streams_finish() {
    let server = start(2).await;
    let url = server.url.clone();
    let body = json!({"prompt": "Hello", "max_tokens": 20, "temperature": 0, "stream": true});
    let stream = tokio::spawn(async move { post_stream(&url, "/v1/completions", &body).await });
    while metric(&server.url, "minerva_running_sequences").await == 0.0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let url = server.url.clone();
    server.shutdown().await.unwrap();
    let events = stream.await.unwrap();
    let chunks = common::chunks(&events);
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
    assert!(client().get(format!("{url}/health")).send().await.is_err(), "still accepting after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_prompt_is_prefilled_in_chunks_while_others_decode() {
    let engine = EngineConfig { prefill_chunk: 16, ..common::engine_config(2) };
    let server = start_with(common::smollm2_repacked(), engine, common::quiet()).await;
    // A short prompt decoding a long answer…
    let long_answer = json!({"prompt": "Count:", "max_tokens": 400, "temperature": 0, "stream": true});
    let running = client().post(format!("{}/v1/completions", server.url)).json(&long_answer).send().await.unwrap();
    let mut running = running.bytes_stream();
    running.next().await.unwrap().unwrap();
    // …while a 200-token prompt arrives.
    let prompt = "one two three four five six seven eight nine ten ".repeat(20);
    let (status, _, r) = post(&server.url, "/v1/completions", &json!({"prompt": prompt, "max_tokens": 2})).await;
    assert_eq!(status, 200, "{r}");
    assert!(r["usage"]["prompt_tokens"].as_u64().unwrap() >= 200, "{r}");
    drop(running);
    // No step ran more than 16 prompt tokens plus the one decoding sequence's token (the first
    // step, alone, ran the short prompt).
    let steps = metric(&server.url, "minerva_batch_tokens_count").await;
    let small = metric(&server.url, "minerva_batch_tokens_bucket{le=\"32.0\"}").await;
    assert_eq!(small, steps, "a step ran more than 32 tokens");
}
