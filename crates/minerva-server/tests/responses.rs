//! `/v1/responses` over real HTTP on SmolLM2: the store (its bound, `store: false`, a dropped
//! earlier turn), typed stream events, and bad requests named by their Responses field. The
//! official client's checks are in fixtures/server/openai_responses_check.py (run by
//! minerva-cli's serve_cli test).

mod common;

use common::{client, engine_config, post, quiet, smollm2, start_with};
use minerva_server::ServerConfig;
use serde_json::{Value, json};

async fn get(url: &str, path: &str) -> (u16, Value) {
    let r = client().get(format!("{url}{path}")).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn ask(text: &str, extra: Value) -> Value {
    let mut body = json!({"input": text, "temperature": 0, "max_output_tokens": 4});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

async fn create(url: &str, body: &Value) -> Value {
    let (status, _, r) = post(url, "/v1/responses", body).await;
    assert_eq!(status, 200, "{r}");
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_keeps_the_most_recently_used_and_a_dropped_turn_is_a_404() {
    let config = ServerConfig { responses_store: 2, ..quiet() };
    let server = start_with(smollm2(), engine_config(2), config).await;
    let url = &server.url;
    let first = create(url, &ask("Hello.", json!({}))).await;
    let id1 = first["id"].as_str().unwrap();
    let other = create(url, &ask("Other.", json!({}))).await;
    // Continuing reads the first turn, so it is fresher than `other`, which the new response
    // pushes out of a store of two.
    let second = create(url, &ask("And then?", json!({"previous_response_id": id1}))).await;
    let id2 = second["id"].as_str().unwrap();
    assert_eq!(second["previous_response_id"], id1);
    let (status, _) = get(url, &format!("/v1/responses/{}", other["id"].as_str().unwrap())).await;
    assert_eq!(status, 404);
    let (status, got) = get(url, &format!("/v1/responses/{id2}")).await;
    assert_eq!((status, &got["output"]), (200, &second["output"]));
    // Now the first is the least recently used: a third response drops it, and the second,
    // which needs it to continue, is a 404 that names the missing turn.
    let third = create(url, &ask("Third.", json!({}))).await;
    let (status, _, err) = post(url, "/v1/responses", &ask("More.", json!({"previous_response_id": id2}))).await;
    assert_eq!(status, 404, "{err}");
    assert_eq!(err["error"]["param"], "previous_response_id");
    assert!(err["error"]["message"].as_str().unwrap().contains(id1), "{err}");
    // `store: false` keeps nothing, and does not push anything out.
    let unstored = create(url, &ask("Quiet.", json!({"store": false}))).await;
    assert_eq!(unstored["store"], false);
    let (status, _) = get(url, &format!("/v1/responses/{}", unstored["id"].as_str().unwrap())).await;
    assert_eq!(status, 404);
    let (status, _) = get(url, &format!("/v1/responses/{}", third["id"].as_str().unwrap())).await;
    assert_eq!(status, 200);
    server.shutdown().await.unwrap();

    let config = ServerConfig { responses_store: 0, ..quiet() };
    let server = start_with(smollm2(), engine_config(1), config).await;
    let kept = create(&server.url, &ask("Hello.", json!({}))).await;
    let (status, _) = get(&server.url, &format!("/v1/responses/{}", kept["id"].as_str().unwrap())).await;
    assert_eq!(status, 404, "a store of 0 keeps nothing");
    server.shutdown().await.unwrap();
}

/// `(event name, data)` of each server-sent event.
async fn events(url: &str, body: &Value) -> Vec<(String, Value)> {
    let r = client().post(format!("{url}/v1/responses")).json(body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).expect("an event without a name");
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).expect("an event without data");
            (name.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_events_are_named_numbered_and_end_in_the_whole_response() {
    let server = start_with(smollm2(), engine_config(2), quiet()).await;
    let body = ask("Name a color.", json!({"max_output_tokens": 12}));
    let whole = create(&server.url, &body).await;
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = events(&server.url, &streamed).await;
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str(), "{data}");
        assert_eq!(data["sequence_number"], i, "{data}");
    }
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..4],
        ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    );
    let n = names.len();
    assert_eq!(
        names[n - 4..],
        ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"]
    );
    let deltas: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    let last = &events[n - 1].1["response"];
    let text = |r: &Value| r["output"][0]["content"][0]["text"].as_str().unwrap().to_string();
    assert_eq!((deltas.clone(), text(last)), (text(&whole), text(&whole)));
    assert_eq!(
        (&last["status"], &last["incomplete_details"]["reason"]),
        (&json!("incomplete"), &json!("max_output_tokens"))
    );
    // (The prompt is cached the second time: only the cached count differs.)
    for key in ["input_tokens", "output_tokens", "total_tokens"] {
        assert_eq!(last["usage"][key], whole["usage"][key], "{key}");
    }
    assert_eq!(last["usage"]["input_tokens_details"]["cached_tokens"], 33);
    // The streamed response is stored as it ended.
    let (status, got) = get(&server.url, &format!("/v1/responses/{}", last["id"].as_str().unwrap())).await;
    assert_eq!((status, text(&got)), (200, deltas));
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_400s_named_by_their_responses_field() {
    let server = start_with(smollm2(), engine_config(1), quiet()).await;
    let many: serde_json::Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let cases = [
        (json!({"temperature": 0}), "input"),
        (json!({"input": [{"role": "assistant", "content": "Hi"}]}), "input"),
        (json!({"input": "x", "metadata": many}), "metadata"),
        (json!({"input": "x", "metadata": {"k": 3}}), "metadata.k"),
        (json!({"input": "x", "truncation": "auto"}), "truncation"),
        (json!({"input": "x", "max_output_tokens": 1_000_000}), "input"),
        (json!({"input": "x", "reasoning": {"effort": "extreme"}}), "reasoning.effort"),
        (json!({"input": "x", "tools": [{"type": "function", "name": "bad name"}]}), "tools[0].name"),
        (json!({"input": "x", "tool_choice": {"type": "function", "name": "nothing"}}), "tool_choice"),
        (json!({"input": [{"type": "function_call_output", "output": "x"}]}), "input[0].call_id"),
    ];
    for (body, param) in cases {
        let (status, _, err) = post(&server.url, "/v1/responses", &body).await;
        assert_eq!((status, err["error"]["param"].as_str()), (400, Some(param)), "{body}: {err}");
    }
    let (status, _, err) = post(&server.url, "/v1/responses", &json!({"input": "x", "model": "other"})).await;
    assert_eq!((status, &err["error"]["code"]), (404, &json!("model_not_found")));
    let (status, err) = get(&server.url, "/v1/responses/resp_0").await;
    assert_eq!((status, &err["error"]["type"]), (404, &json!("invalid_request_error")));
    server.shutdown().await.unwrap();
}
