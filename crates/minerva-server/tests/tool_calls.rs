//! Tool calls over real HTTP on SmolLM2, whose template knows nothing of tools: the generic
//! format (tools described in a system message, the answer one JSON object) and, with the
//! `--tool-format` override, Hermes, Llama 3 and Mistral calls. Every call's arguments validate
//! against its function's schema (a JSON-schema validator checks), streamed calls arrive as
//! name-first `delta.tool_calls` that add up to the whole answer's call, and `tool_choice`
//! works in all four forms.

mod common;

use common::{chat, chunks, post, post_stream, start_with};
use minerva_generate::ToolFormat;
use minerva_server::EngineConfig;
use serde_json::{Value, json};

fn tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "get_weather", "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"enum": ["celsius", "fahrenheit"]}
            }, "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {
            "name": "get_time", "description": "Local time in a time zone",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 10}},
                "required": ["zone"], "additionalProperties": false}}}
    ])
}

async fn start_format(format: Option<ToolFormat>) -> common::TestServer {
    let engine = EngineConfig { tool_format: format, ..common::engine_config(2) };
    start_with(common::smollm2(), engine, common::quiet()).await
}

/// Checks every call of `message` (a non-streamed answer's message): an id, type `function`, an
/// allowed name and arguments valid under that function's schema. Returns the calls.
fn valid_calls(message: &Value, allowed: &[&str]) -> Vec<(String, String)> {
    let calls = message["tool_calls"].as_array().unwrap_or_else(|| panic!("no tool_calls: {message}"));
    assert!(!calls.is_empty());
    let tools = tools();
    calls
        .iter()
        .map(|c| {
            assert!(c["id"].as_str().unwrap().starts_with("call_"), "{c}");
            assert_eq!(c["type"], "function");
            let name = c["function"]["name"].as_str().unwrap();
            assert!(allowed.contains(&name), "{name} called: {message}");
            let args = c["function"]["arguments"].as_str().unwrap();
            let value: Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("{e}: {args:?}"));
            let schema = tools.as_array().unwrap().iter().find(|t| t["function"]["name"] == name).unwrap();
            let validator = jsonschema::validator_for(&schema["function"]["parameters"]).unwrap();
            let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{args} breaks {name}'s schema: {errors:?}");
            (name.to_string(), args.to_string())
        })
        .collect()
}

/// A stream's calls: each call's first delta carries `index`, `id`, `type` and the name, later
/// ones only argument text.
fn streamed_calls(events: &[String]) -> (Vec<(String, String)>, String, String) {
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut content = String::new();
    let mut finish = String::new();
    for chunk in chunks(events) {
        let Some(choice) = chunk["choices"].get(0) else { continue };
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish = reason.to_string();
        }
        content.push_str(choice["delta"]["content"].as_str().unwrap_or_default());
        for d in choice["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let index = d["index"].as_u64().unwrap() as usize;
            if let Some(name) = d["function"]["name"].as_str() {
                assert_eq!(index, calls.len(), "a new call's index: {d}");
                assert!(d["id"].as_str().unwrap().starts_with("call_") && d["type"] == "function", "{d}");
                calls.push((name.to_string(), String::new()));
            } else {
                assert!(d.get("id").is_none() && index + 1 == calls.len(), "argument text of the last call: {d}");
            }
            calls[index].1.push_str(d["function"]["arguments"].as_str().unwrap_or_default());
        }
    }
    (calls, content, finish)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_required_and_named_calls_validate_whole_and_streamed() {
    let server = start_format(None).await;
    // (Named, SmolLM2 repeats the same call without end when it may make several: one call.)
    for (choice, allowed, parallel) in [
        (json!("required"), vec!["get_weather", "get_time"], true),
        (json!({"type": "function", "function": {"name": "get_time"}}), vec!["get_time"], false),
    ] {
        let body = chat(
            "What is the weather in Paris?",
            json!({"tools": tools(), "tool_choice": choice, "parallel_tool_calls": parallel,
                   "max_tokens": 150, "temperature": 0}),
        );
        let (status, _, r) = post(&server.url, "/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["choices"][0]["finish_reason"], "tool_calls", "{r}");
        let message = &r["choices"][0]["message"];
        assert!(message["content"].is_null(), "{r}");
        let calls = valid_calls(message, &allowed);
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let (stream_calls, content, finish) =
            streamed_calls(&post_stream(&server.url, "/v1/chat/completions", &streamed).await);
        assert_eq!(stream_calls, calls, "the stream's calls are the answer's");
        assert_eq!((content.as_str(), finish.as_str()), ("", "tool_calls"));
    }
    // `parallel_tool_calls: false`: one call at most, even sampled.
    for seed in 0..3 {
        let body = chat(
            "Weather in Paris and in Rome, and the time in Tokyo?",
            json!({"tools": tools(), "tool_choice": "required", "parallel_tool_calls": false,
                   "max_tokens": 150, "temperature": 1.0, "seed": seed}),
        );
        let (status, _, r) = post(&server.url, "/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(valid_calls(&r["choices"][0]["message"], &["get_weather", "get_time"]).len(), 1, "{r}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_auto_answers_in_text_or_calls_and_none_hides_the_tools() {
    let server = start_format(None).await;
    let mut replies = 0;
    for (seed, ask) in [(0, "Say hello to Ann."), (1, "What is the weather in Paris?"), (2, "Tell me a joke.")] {
        let body = chat(ask, json!({"tools": tools(), "max_tokens": 120, "temperature": 0.7, "seed": seed}));
        let (status, _, r) = post(&server.url, "/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{r}");
        let choice = &r["choices"][0];
        if choice["message"]["tool_calls"].is_null() {
            // A reply: the text of `{"response": …}`, never the JSON around it.
            let text = choice["message"]["content"].as_str().unwrap();
            assert!(!text.contains("\"response\""), "{r}");
            assert!(["stop", "length"].contains(&choice["finish_reason"].as_str().unwrap()), "{r}");
            replies += 1;
        } else {
            assert_eq!(choice["finish_reason"], "tool_calls", "{r}");
            valid_calls(&choice["message"], &["get_weather", "get_time"]);
        }
    }
    // (Seeded: SmolLM2 answers these in text, so the reply's unwrapping is exercised.)
    assert!(replies > 0, "no text reply among three");
    // `none`: the prompt is the one without tools.
    let plain = chat("Say hello.", json!({"max_tokens": 1}));
    let none = chat("Say hello.", json!({"max_tokens": 1, "tools": tools(), "tool_choice": "none"}));
    let (_, _, a) = post(&server.url, "/v1/chat/completions", &plain).await;
    let (_, _, b) = post(&server.url, "/v1/chat/completions", &none).await;
    assert_eq!(a["usage"]["prompt_tokens"], b["usage"]["prompt_tokens"], "{a} {b}");
    let (_, _, c) =
        post(&server.url, "/v1/chat/completions", &chat("Say hello.", json!({"max_tokens": 1, "tools": tools()})))
            .await;
    assert!(c["usage"]["prompt_tokens"].as_u64() > a["usage"]["prompt_tokens"].as_u64(), "the tools are described");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_text_format_makes_required_calls_that_parse_and_validate() {
    for format in [ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral] {
        let server = start_format(Some(format)).await;
        let body = chat(
            "What is the weather in Paris?",
            json!({"tools": tools(), "tool_choice": "required", "max_tokens": 150, "temperature": 0}),
        );
        let (status, _, r) = post(&server.url, "/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{format:?}: {r}");
        assert_eq!(r["choices"][0]["finish_reason"], "tool_calls", "{format:?}: {r}");
        let calls = valid_calls(&r["choices"][0]["message"], &["get_weather", "get_time"]);
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let (stream_calls, _, finish) =
            streamed_calls(&post_stream(&server.url, "/v1/chat/completions", &streamed).await);
        assert_eq!((stream_calls, finish.as_str()), (calls, "tool_calls"), "{format:?}");
        // A conversation that carries the call and its result back answers (the template has
        // no tool role: both are written in the format as text).
        let convo = json!({
            "messages": [
                {"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
                {"role": "tool", "tool_call_id": "call_9", "content": "21 C, sunny"}
            ],
            "tools": tools(), "tool_choice": "none", "max_tokens": 8, "temperature": 0
        });
        let (status, _, r) = post(&server.url, "/v1/chat/completions", &convo).await;
        assert_eq!(status, 200, "{format:?}: {r}");
        assert!(r["choices"][0]["message"]["tool_calls"].is_null(), "{r}");
        server.shutdown().await.unwrap();
    }
}
