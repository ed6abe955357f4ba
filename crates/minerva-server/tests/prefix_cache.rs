//! A chat client re-sends the whole conversation each turn: the second turn starts from the
//! keys and values the first left in its slot, runs only the rest, and gives exactly the answer
//! (and log-probabilities) of a server that runs it all.
//!
//! SmolLM2 runs repacked (`--repack auto`, 8-bit activations): these identities must hold there too.

mod common;

use common::{post, start_repacked as start};
use serde_json::{Value, json};

/// A first turn of about 1,000 tokens.
fn first_turn() -> Vec<Value> {
    let story = "The lighthouse keeper counted the ships that passed each night and wrote their names in a \
                 blue notebook, one line for each, with the hour and the colour of the sky. ";
    vec![
        json!({"role": "system", "content": "You are a careful assistant."}),
        json!({"role": "user", "content": format!("{} What did the keeper write down?", story.repeat(26))}),
    ]
}

fn request(messages: &[Value]) -> Value {
    json!({"messages": messages, "temperature": 0, "max_tokens": 12, "logprobs": true, "top_logprobs": 3})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_turn_reuses_the_first_turns_cache_and_answers_the_same() {
    let server = start(2).await;
    let mut messages = first_turn();
    let (status, _, first) = post(&server.url, "/v1/chat/completions", &request(&messages)).await;
    assert_eq!(status, 200, "{first}");
    let first_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(first_prompt > 900, "{first_prompt}");
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    messages.push(json!({"role": "assistant", "content": first["choices"][0]["message"]["content"]}));
    messages.push(json!({"role": "user", "content": "And what colour was the sky?"}));
    let (_, _, second) = post(&server.url, "/v1/chat/completions", &request(&messages)).await;
    let prompt = second["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    // At least the whole first prompt comes from the cache: under a fifth of the second is run.
    assert!(cached >= first_prompt && (prompt - cached) * 5 <= prompt, "{cached} of {prompt} cached");
    assert_eq!(common::metric(&server.url, "minerva_prompt_cache_hits_total").await, 1.0);

    // A server that runs the whole second prompt gives the same tokens and log-probabilities.
    let fresh = start(2).await;
    let (_, _, uncached) = post(&fresh.url, "/v1/chat/completions", &request(&messages)).await;
    assert_eq!(uncached["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(second["choices"][0]["message"], uncached["choices"][0]["message"]);
    assert_eq!(second["choices"][0]["logprobs"], uncached["choices"][0]["logprobs"]);
}
