//! `<think>` reasoning over HTTP: SmolLM2 served with a chat template that opens `<think>` in the
//! generation prompt (as DeepSeek-R1 distills do) returns what it writes as `reasoning_content`,
//! never as `content`, whole and streamed alike; an output format then waits for `</think>`.

mod common;

use common::{chat, chunks, post, post_stream, start_with};
use serde_json::json;

/// SmolLM2's ChatML, with the assistant turn opened by `<think>\n`.
const THINKING_CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + \
    message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n<think>\n' }}{% endif %}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_after_an_opened_think_is_reasoning_content() {
    let load = || {
        let (model, mut tokenizer) = common::smollm2()()?;
        tokenizer.chat_template = Some(THINKING_CHATML.to_string());
        Ok((model, tokenizer))
    };
    let server = start_with(load, common::engine_config(2), common::quiet()).await;
    let body = chat("What is 2 + 2?", json!({"max_tokens": 12, "temperature": 0}));
    let (status, _, r) = post(&server.url, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{r}");
    let message = &r["choices"][0]["message"];
    let reasoning = message["reasoning_content"].as_str().unwrap_or_else(|| panic!("no reasoning: {r}"));
    assert!(!reasoning.trim().is_empty(), "{r}");
    assert_eq!(message["content"], "", "nothing after </think> is the answer: {r}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let mut streamed_reasoning = String::new();
    for chunk in chunks(&post_stream(&server.url, "/v1/chat/completions", &streamed).await) {
        let delta = &chunk["choices"][0]["delta"];
        assert!(delta["content"].as_str().unwrap_or_default().is_empty(), "answer text in {chunk}");
        streamed_reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or_default());
    }
    assert_eq!(streamed_reasoning, reasoning);
    // An output format waits for the reasoning to close: the reasoning is the same text.
    let constrained = chat(
        "What is 2 + 2?",
        json!({"max_tokens": 12, "temperature": 0,
                                                    "response_format": {"type": "json_object"}}),
    );
    let (status, _, c) = post(&server.url, "/v1/chat/completions", &constrained).await;
    assert_eq!(status, 200, "{c}");
    assert_eq!(c["choices"][0]["message"]["reasoning_content"].as_str(), Some(reasoning), "{c}");
    server.shutdown().await.unwrap();
}
