//! The paged KV cache over real HTTP, on SmolLM2: a pool too small for every sequence preempts
//! the newest and runs it again without changing a token of what it streams; a request's choices
//! share their prompt's blocks; a conversation's second turn finds its first turn's blocks after
//! other requests ran in between.
//!
//! SmolLM2 runs repacked (`--repack auto`, 8-bit activations): these identities must hold there too.

mod common;

use common::{
    engine_config, post, post_stream, quiet, smollm2_repacked as smollm2, start_repacked as start, start_with,
};
use serde_json::{Value, json};

/// Bytes of one KV block of SmolLM2 on the CPU: 2 (keys, values) × 30 layers × 3 KV heads × 64
/// dims × 32 positions × 4 bytes (f32).
const BLOCK_BYTES: u64 = 2 * 30 * 3 * 64 * 32 * 4;

fn chat(prompt: &str, max_tokens: u64) -> Value {
    json!({"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": max_tokens})
}

/// The text of a streamed chat completion: its content deltas, in order.
fn streamed_text(events: &[String]) -> String {
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempted_sequences_stream_exactly_what_they_would_alone() {
    // Ten blocks (320 positions) for four sequences of about 40 + 96 tokens (five blocks each).
    let mut config = engine_config(4);
    config.ctx_size = Some(256);
    config.kv_memory = Some(10 * BLOCK_BYTES);
    let server = start_with(smollm2(), config, quiet()).await;
    let prompts = [
        "Tell me a long story about a lighthouse.",
        "Describe a city at night in detail.",
        "Explain how bread is made, step by step.",
        "Write about a journey across a desert.",
    ];
    let streams = prompts.map(|p| {
        let mut body = chat(p, 96);
        body["stream"] = json!(true);
        let url = server.url.clone();
        tokio::spawn(async move { post_stream(&url, "/v1/chat/completions", &body).await })
    });
    let mut texts = Vec::new();
    for s in streams {
        texts.push(streamed_text(&s.await.unwrap()));
    }
    let preemptions = common::metric(&server.url, "minerva_preemptions_total").await;
    assert!(preemptions >= 1.0, "no sequence was preempted: the test does not test preemption");

    // Each alone on a server with room for all: the same greedy text.
    let roomy = start(1).await;
    for (prompt, text) in prompts.iter().zip(&texts) {
        let (status, _, alone) = post(&roomy.url, "/v1/chat/completions", &chat(prompt, 96)).await;
        assert_eq!(status, 200, "{alone}");
        assert_eq!(alone["choices"][0]["message"]["content"].as_str().unwrap(), text, "{prompt}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn choices_share_their_prompts_blocks() {
    // A prompt of 225–256 tokens (eight blocks) and three choices of 20 tokens in a pool of 16:
    // each choice alone needs up to nine blocks, three copies 27; sharing the prompt's seven whole
    // blocks, at most 7 + 3 × 2 (its own copy of the partly filled eighth, and a ninth).
    let mut config = engine_config(4);
    config.ctx_size = Some(320);
    config.kv_memory = Some(16 * BLOCK_BYTES);
    let server = start_with(smollm2(), config, quiet()).await;
    let long = format!(
        "{} Which colour is the door?",
        "The old house on the hill has a green door and a red roof. ".repeat(14)
    );
    let (status, _, one) = post(&server.url, "/v1/chat/completions", &chat(&long, 20)).await;
    assert_eq!(status, 200, "{one}");
    let prompt_tokens = one["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!((225..=256).contains(&prompt_tokens), "{prompt_tokens} prompt tokens");
    let mut three = chat(&long, 20);
    three["n"] = json!(3);
    let (status, _, shared) = post(&server.url, "/v1/chat/completions", &three).await;
    assert_eq!(status, 200, "{shared}");
    for choice in shared["choices"].as_array().unwrap() {
        assert_eq!(choice["message"], one["choices"][0]["message"]);
    }
    assert_eq!(common::metric(&server.url, "minerva_preemptions_total").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_turn_finds_the_first_after_other_requests() {
    let server = start(2).await;
    let story = "A small boat carried letters between two islands every morning, and the sailor knew \
                 each sender by the colour of the envelope. ";
    let mut messages =
        vec![json!({"role": "user", "content": format!("{} Who sent the blue letters?", story.repeat(8))})];
    let turn = |messages: &Vec<Value>| json!({"messages": messages, "temperature": 0, "max_tokens": 10});
    let (_, _, first) = post(&server.url, "/v1/chat/completions", &turn(&messages)).await;
    let first_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    for other in ["Name three rivers.", "What is a prime number?", "Say hello in French."] {
        let (status, _, _) = post(&server.url, "/v1/chat/completions", &chat(other, 16)).await;
        assert_eq!(status, 200);
    }
    messages.push(json!({"role": "assistant", "content": first["choices"][0]["message"]["content"]}));
    messages.push(json!({"role": "user", "content": "And the red ones?"}));
    let (_, _, second) = post(&server.url, "/v1/chat/completions", &turn(&messages)).await;
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached >= first_prompt, "{cached} cached of a first prompt of {first_prompt}");
}
