//! The server on the tiny random GPT-OSS (fixtures/gpt_oss/hf) with its tokenizer of Harmony's
//! special tokens: chat requests go through Harmony on both backends, the wgpu one on lavapipe,
//! and greedy answers agree between them.

mod common;

use std::path::Path;

use common::{post, start_with};
use minerva_generate::Tokenizer;
use minerva_model::{Backend, CpuBackend, Model};
use minerva_wgpu::{WgpuBackend, WgpuOptions};
use serde_json::{Value, json};

/// The tiny GPT-OSS checkpoint with its 320-token Harmony tokenizer
/// (`fixtures/gpt_oss/make_harmony_tokenizer.py`).
fn checkpoint() -> std::path::PathBuf {
    common::root().join("fixtures/gpt_oss/hf")
}

fn loader<B: Backend + 'static>(
    dir: &Path,
    backend: impl FnOnce() -> B + Send + 'static,
) -> impl FnOnce() -> Result<(Model<B>, Tokenizer), String> + Send + 'static {
    let dir = dir.to_path_buf();
    move || {
        let tokenizer = Tokenizer::from_dir(&dir).map_err(|e| e.to_string())?;
        let model = Model::load(&dir, backend()).map_err(|e| e.to_string())?;
        Ok((model, tokenizer))
    }
}

fn request(stream: bool) -> Value {
    json!({
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "w20 w21 w22"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "w30"},
        ],
        "tools": [{"type": "function", "function": {"name": "lookup", "description": "Looks up.", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}],
        "reasoning_effort": "low", "temperature": 0, "max_tokens": 16, "stream": stream,
    })
}

async fn answer<B: Backend + 'static>(
    load: impl FnOnce() -> Result<(Model<B>, Tokenizer), String> + Send + 'static,
) -> Value {
    let server = start_with(load, common::engine_config(2), common::quiet()).await;
    let (status, _, r) = post(&server.url, "/v1/chat/completions", &request(false)).await;
    assert_eq!(status, 200, "{r}");
    let events = common::post_stream(&server.url, "/v1/chat/completions", &request(true)).await;
    let chunks = common::chunks(&events);
    // The stream carries what the whole answer holds, channel by channel.
    let streamed = |key: &str| -> String {
        chunks.iter().filter_map(|c| c["choices"].get(0)?["delta"][key].as_str().map(String::from)).collect()
    };
    let message = &r["choices"][0]["message"];
    assert_eq!(streamed("content"), message["content"].as_str().unwrap_or_default());
    assert_eq!(streamed("reasoning_content"), message["reasoning_content"].as_str().unwrap_or_default());
    for text in [&message["content"], &message["reasoning_content"]] {
        assert!(!text.as_str().unwrap_or_default().contains("<|"), "Harmony markers leaked: {r}");
    }
    // Two greedy choices: the second continues from a copy of the first's cache slot, so its
    // tokens and their log-probabilities are the first's.
    let mut two = request(false);
    two["n"] = json!(2);
    two["logprobs"] = json!(true);
    let (status, _, both) = post(&server.url, "/v1/chat/completions", &two).await;
    assert_eq!(status, 200, "{both}");
    let lp = |i: usize| -> Vec<(String, f64)> {
        both["choices"][i]["logprobs"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["token"].as_str().unwrap().to_string(), t["logprob"].as_f64().unwrap()))
            .collect()
    };
    let (first, second) = (lp(0), lp(1));
    assert_eq!(first.len(), second.len(), "{both}");
    assert!(!first.is_empty());
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(a.0, b.0, "{both}");
        assert!((a.1 - b.1).abs() < 1e-4, "{both}");
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpt_oss_serves_through_harmony_on_cpu_and_wgpu_alike() {
    let dir = checkpoint();
    let cpu = answer(loader(&dir, || CpuBackend::new(Some(2)).unwrap().with_f32_activations(true))).await;
    let gpu = answer(loader(&dir, || WgpuBackend::new(WgpuOptions::default()).unwrap())).await;
    assert_eq!(cpu["choices"][0]["message"], gpu["choices"][0]["message"]);
    assert_eq!(cpu["usage"], gpu["usage"]);
    // The random weights' greedy walk ends with a stop token after 8 of its 16 tokens.
    assert_eq!(cpu["choices"][0]["finish_reason"], "stop", "{cpu}");
    assert_eq!(cpu["usage"]["completion_tokens"], 8, "{cpu}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harmony_prompt_is_openai_harmonys() {
    // The `function_tools` case of the openai-harmony fixture, asked as an OpenAI request.
    let reference: Value =
        serde_json::from_slice(&std::fs::read(common::root().join("fixtures/harmony/harmony_reference.json")).unwrap())
            .unwrap();
    let case = reference["render"].as_array().unwrap().iter().find(|c| c["name"] == "function_tools").unwrap();
    let tools: Vec<Value> = case["messages"][1]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| json!({"type": "function", "function": t}))
        .collect();
    let req: minerva_server::api::request::ChatRequest = serde_json::from_value(json!({
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}],
        "tools": tools,
    }))
    .unwrap();
    let prompt = minerva_server::prompt::render_harmony(&req, "2026-11-23").unwrap();
    assert_eq!(prompt, case["expected"].as_str().unwrap());
}

/// Seeded sampled requests on the GPU, two at a time (one batched step for both): drawn on the
/// device (one id per sequence read back) and sampled on the host from the read-back logits,
/// the answers are the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_answers_are_the_same_drawn_on_the_gpu_or_on_the_host() {
    let dir = checkpoint();
    let ask = |seed: u64| {
        json!({
            "messages": [{"role": "user", "content": "w20 w21 w22"}],
            "temperature": 0.9, "top_k": 40, "top_p": 0.95, "repetition_penalty": 1.1,
            "seed": seed, "max_tokens": 16,
        })
    };
    let mut answers = Vec::new();
    for device_sampling in [true, false] {
        let backend = move || WgpuBackend::new(WgpuOptions { device_sampling, ..WgpuOptions::default() }).unwrap();
        let server = start_with(loader(&dir, backend), common::engine_config(2), common::quiet()).await;
        let (a, b) = (ask(7), ask(8));
        let ((sa, _, ra), (sb, _, rb)) =
            tokio::join!(post(&server.url, "/v1/chat/completions", &a), post(&server.url, "/v1/chat/completions", &b));
        assert_eq!((sa, sb), (200, 200), "{ra} {rb}");
        answers.push((ra["choices"][0]["message"].clone(), rb["choices"][0]["message"].clone()));
    }
    assert_eq!(answers[0], answers[1]);
    assert_ne!(answers[0].0, answers[0].1, "different seeds, different answers: {:?}", answers[0]);
}

/// The tiny GPT-OSS that speaks Harmony (`fixtures/gpt_oss/make_scripted_checkpoint.py`): with
/// seed 0 its sampled walk goes straight to a call of `lookup`, which comes back as OpenAI tool
/// calls, whole and streamed (the id and name first, then the arguments), ending with
/// `tool_calls`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harmony_tool_call_comes_back_as_openai_tool_calls_whole_and_streamed() {
    let dir = common::root().join("fixtures/gpt_oss/scripted");
    let backend = || CpuBackend::new(Some(2)).unwrap().with_f32_activations(true);
    let server = start_with(loader(&dir, backend), common::engine_config(2), common::quiet()).await;
    let tools = json!([{"type": "function", "function": {"name": "lookup", "description": "Looks up.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]);
    let body = json!({
        "messages": [{"role": "user", "content": "w20 w21"}], "tools": tools,
        "temperature": 1, "top_p": 1, "seed": 0, "max_tokens": 48,
    });
    let (status, _, r) = post(&server.url, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{r}");
    let choice = &r["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{r}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap_or_else(|| panic!("no tool calls: {r}"));
    assert_eq!(calls.len(), 1, "{r}");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"), "{r}");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "lookup");
    assert_eq!(calls[0]["function"]["arguments"], r#"{"q": "w"}"#);
    assert!(choice["message"]["content"].is_null(), "{r}");

    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let chunks = common::chunks(&common::post_stream(&server.url, "/v1/chat/completions", &streaming).await);
    let deltas: Vec<&Value> =
        chunks.iter().filter_map(|c| c["choices"].get(0)?["delta"]["tool_calls"].as_array()).flatten().collect();
    assert!(deltas.len() >= 2, "the call came in one piece: {chunks:?}");
    assert!(deltas.iter().all(|d| d["index"] == 0), "{deltas:?}");
    // The first piece names the call; the rest only add arguments.
    assert!(deltas[0]["id"].as_str().unwrap().starts_with("call_"), "{deltas:?}");
    assert_eq!(deltas[0]["function"]["name"], "lookup");
    assert!(deltas[1..].iter().all(|d| d.get("id").is_none() && d["function"].get("name").is_none()), "{deltas:?}");
    let arguments: String = deltas.iter().filter_map(|d| d["function"]["arguments"].as_str()).collect();
    assert_eq!(arguments, r#"{"q": "w"}"#);
    let finishes: Vec<&str> = chunks.iter().filter_map(|c| c["choices"].get(0)?["finish_reason"].as_str()).collect();
    assert_eq!(finishes, ["tool_calls"]);
}

/// `tool_choice: "required"` or a named function on Harmony: the answer is held to a grammar of
/// a call, so the scripted model's walk that would write an analysis and then two final messages
/// (seed 22, as in `serve_cli.rs`) calls `lookup` instead, with arguments valid under its
/// parameters; the checks of `tools` and `tool_choice` are 400s naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_tool_choice_makes_the_harmony_answer_a_call() {
    let dir = common::root().join("fixtures/gpt_oss/scripted");
    let backend = || CpuBackend::new(Some(2)).unwrap().with_f32_activations(true);
    let server = start_with(loader(&dir, backend), common::engine_config(2), common::quiet()).await;
    let tools = json!([{"type": "function", "function": {"name": "lookup", "description": "Looks up.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string", "maxLength": 4}},
                       "required": ["q"], "additionalProperties": false}}}]);
    let ask = |choice: Value| {
        json!({"messages": [{"role": "user", "content": "w20 w21 w22 w23"}], "tools": tools,
               "tool_choice": choice, "temperature": 1, "top_p": 1, "seed": 22, "max_tokens": 48})
    };
    // Left to itself ("auto"), this walk answers: two final messages, the second closed by
    // `<|call|>` with no function named, which ends the completion without a call.
    let (_, _, free) = post(&server.url, "/v1/chat/completions", &ask(json!("auto"))).await;
    assert_eq!(free["choices"][0]["finish_reason"], "stop", "{free}");
    assert_eq!(free["choices"][0]["message"]["content"], r#"{"q": "w"}{"q": "w"}"#, "{free}");
    assert!(free["choices"][0]["message"]["tool_calls"].is_null(), "{free}");
    for choice in [json!("required"), json!({"type": "function", "function": {"name": "lookup"}})] {
        let (status, _, r) = post(&server.url, "/v1/chat/completions", &ask(choice.clone())).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["choices"][0]["finish_reason"], "tool_calls", "{choice}: {r}");
        let call = &r["choices"][0]["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "lookup", "{r}");
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"q": "w"}), "{r}");
    }
    let mut bad_tools = ask(json!("required"));
    bad_tools["tools"][0]["function"]["parameters"] = json!({"type": "string"});
    for (body, param) in [
        (ask(json!({"type": "function", "function": {"name": "missing"}})), "tool_choice"),
        (ask(json!("sometimes")), "tool_choice"),
        (json!({"messages": [{"role": "user", "content": "w20"}], "tool_choice": "required"}), "tool_choice"),
        (bad_tools, "tools[0].function.parameters"),
    ] {
        let (status, _, e) = post(&server.url, "/v1/chat/completions", &body).await;
        assert_eq!((status, e["error"]["param"].as_str()), (400, Some(param)), "{body}: {e}");
    }
}

/// An output format on Harmony holds the final message, not the reasoning: the scripted walk
/// that writes two final messages (seed 22) ends after one that matches the schema (or the
/// choice), its reasoning kept apart; a Lark grammar, which cannot be nested in the final
/// message, is a 400 naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_format_holds_the_harmony_final_message() {
    let dir = common::root().join("fixtures/gpt_oss/scripted");
    let backend = || CpuBackend::new(Some(2)).unwrap().with_f32_activations(true);
    let server = start_with(loader(&dir, backend), common::engine_config(2), common::quiet()).await;
    let ask = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "w20 w21 w22 w23"}],
                              "temperature": 1, "top_p": 1, "seed": 22, "max_tokens": 48});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let schema = json!({"type": "object", "properties": {"q": {"const": "w"}}, "required": ["q"],
                        "additionalProperties": false});
    let format = json!({"response_format": {"type": "json_schema", "json_schema": {"name": "q", "schema": schema}}});
    let (status, _, r) = post(&server.url, "/v1/chat/completions", &ask(format)).await;
    assert_eq!(status, 200, "{r}");
    let message = &r["choices"][0]["message"];
    assert_eq!(r["choices"][0]["finish_reason"], "stop", "{r}");
    let answer: Value = serde_json::from_str(message["content"].as_str().unwrap()).unwrap();
    assert_eq!(answer, json!({"q": "w"}), "{r}");
    assert!(!message["reasoning_content"].as_str().unwrap_or_default().is_empty(), "the reasoning stays: {r}");
    let (status, _, r) =
        post(&server.url, "/v1/chat/completions", &ask(json!({"guided_choice": [" w40", " w41"]}))).await;
    assert_eq!(status, 200, "{r}");
    let content = r["choices"][0]["message"]["content"].as_str().unwrap();
    assert!([" w40", " w41"].contains(&content), "{r}");
    let (status, _, e) = post(&server.url, "/v1/chat/completions", &ask(json!({"grammar": "start: \"x\""}))).await;
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("grammar")), "{e}");
    server.shutdown().await.unwrap();
}
