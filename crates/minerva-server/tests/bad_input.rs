//! Every bad request is an OpenAI error body with the right status, naming the field; the server
//! keeps serving after each.

mod common;

use common::{chat, client, post, start, start_with};
use minerva_server::ServerConfig;
use serde_json::{Value, json};

fn assert_error(status: u16, body: &Value, want_status: u16, param: Option<&str>) {
    assert_eq!(status, want_status, "{body}");
    let e = &body["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert!(e["type"].is_string(), "{body}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{body}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_openai_errors_naming_the_field() {
    let server = start(2).await;
    let url = &server.url;
    let cases: Vec<(&str, Value, u16, Option<&str>)> = vec![
        ("/v1/chat/completions", json!({"model": "smollm2"}), 400, None),
        ("/v1/chat/completions", json!({"messages": "hi"}), 400, Some("messages")),
        ("/v1/chat/completions", json!({"messages": []}), 400, Some("messages")),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": 7}]}),
            400,
            Some("messages[0].content"),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            400,
            Some("messages[0].role"),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            400,
            Some("messages[0].content[0].type"),
        ),
        ("/v1/chat/completions", chat("x", json!({"temperature": -1})), 400, Some("temperature")),
        ("/v1/chat/completions", chat("x", json!({"temperature": "warm"})), 400, Some("temperature")),
        ("/v1/chat/completions", chat("x", json!({"max_tokens": -5})), 400, Some("max_tokens")),
        ("/v1/chat/completions", chat("x", json!({"max_completion_tokens": 0})), 400, Some("max_tokens")),
        ("/v1/chat/completions", chat("x", json!({"top_p": 0})), 400, Some("top_p")),
        ("/v1/chat/completions", chat("x", json!({"top_p": 1.01})), 400, Some("top_p")),
        ("/v1/chat/completions", chat("x", json!({"n": 20})), 400, Some("n")),
        ("/v1/chat/completions", chat("x", json!({"logprobs": true, "top_logprobs": 21})), 400, Some("top_logprobs")),
        ("/v1/chat/completions", chat("x", json!({"top_logprobs": 2})), 400, Some("top_logprobs")),
        (
            "/v1/chat/completions",
            chat("x", json!({"stream_options": {"include_usage": true}})),
            400,
            Some("stream_options"),
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"response_format": {"type": "json_schema", "json_schema": {}}})),
            400,
            Some("response_format.json_schema.schema"),
        ),
        (
            "/v1/chat/completions",
            chat(
                "x",
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]}),
            ),
            400,
            Some("tools[0].function.parameters"),
        ),
        ("/v1/chat/completions", chat("x", json!({"audio": {"voice": "alloy"}})), 400, Some("audio")),
        ("/v1/chat/completions", chat("x", json!({"model": "gpt-4o"})), 404, Some("model")),
        ("/v1/chat/completions", chat("x", json!({"max_tokens": 100000})), 400, Some("messages")),
        ("/v1/completions", json!({"prompt": [1, 2, 99999999]}), 400, Some("prompt")),
        ("/v1/completions", json!({"prompt": "x", "echo": true}), 400, Some("echo")),
        ("/v1/completions", json!({"prompt": "x", "best_of": 3}), 400, Some("best_of")),
        ("/v1/completions", json!({"prompt": "x", "logit_bias": {"50000000": 5}}), 400, Some("logit_bias.50000000")),
        ("/detokenize", json!({"tokens": [1, 999999]}), 400, Some("tokens[1]")),
    ];
    for (path, body, status, param) in cases {
        let (got, _, answer) = post(url, path, &body).await;
        assert_error(got, &answer, status, param);
    }
    let (_, _, e) = post(url, "/v1/chat/completions", &chat("x", json!({"max_tokens": 100000}))).await;
    assert_eq!(e["error"]["code"], "context_length_exceeded");
    assert!(e["error"]["message"].as_str().unwrap().contains("2048"), "{e}");
    // A stream too is refused before any event.
    let (got, _, e) =
        post(url, "/v1/chat/completions", &chat("x", json!({"max_tokens": 100000, "stream": true}))).await;
    assert_error(got, &e, 400, Some("messages"));

    // Not JSON at all, unknown paths, wrong methods.
    let r = client().post(format!("{url}/v1/chat/completions")).body("{not json").send().await.unwrap();
    let status = r.status().as_u16();
    assert_error(status, &r.json().await.unwrap(), 400, None);
    let r = client().get(format!("{url}/v1/nothing")).send().await.unwrap();
    let status = r.status().as_u16();
    assert_error(status, &r.json().await.unwrap(), 404, None);
    let r = client().get(format!("{url}/v1/chat/completions")).send().await.unwrap();
    let status = r.status().as_u16();
    assert_error(status, &r.json().await.unwrap(), 405, None);
    // Over the 8 MiB body limit.
    let big = format!("{{\"prompt\": \"{}\"}}", "a".repeat(9 << 20));
    let r = client()
        .post(format!("{url}/v1/completions"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    assert_error(status, &r.json().await.unwrap(), 413, None);
    // Unknown fields are ignored.
    let (status, _, ok) =
        post(url, "/v1/chat/completions", &chat("x", json!({"max_tokens": 1, "some_future_field": [1]}))).await;
    assert_eq!(status, 200, "{ok}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_guards_every_route_but_health() {
    let config = ServerConfig { api_key: Some("s3cret".into()), ..common::quiet() };
    let server = start_with(common::smollm2(), common::engine_config(1), config).await;
    let url = &server.url;
    let body = json!({"prompt": "Hi", "max_tokens": 1});
    for auth in [None, Some("Bearer wrong"), Some("s3cret"), Some("Bearer s3cre")] {
        let mut r = client().post(format!("{url}/v1/completions")).json(&body);
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        let e: Value = r.json().await.unwrap();
        assert_error(status, &e, 401, None);
        assert_eq!(e["error"]["type"], "authentication_error");
    }
    let r = client().get(format!("{url}/v1/models")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = client().post(format!("{url}/v1/completions")).bearer_auth("s3cret").json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(client().get(format!("{url}/health")).send().await.unwrap().status(), 200);
    // The tokenizer routes and the metrics too; the scheme in any case.
    for (path, body) in [("/tokenize", json!({"content": "hi"})), ("/detokenize", json!({"tokens": [1]}))] {
        let r = client().post(format!("{url}{path}")).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        let r = client().post(format!("{url}{path}")).header("authorization", "bearer s3cret").json(&body);
        assert_eq!(r.send().await.unwrap().status(), 200, "{path}");
    }
    assert_eq!(client().get(format!("{url}/metrics")).send().await.unwrap().status(), 401);
    let r = client().get(format!("{url}/metrics")).header("authorization", "BEARER s3cret").send().await.unwrap();
    assert_eq!(r.status(), 200);
    server.shutdown().await.unwrap();
    // `metrics_public` opens /metrics alone.
    let config = ServerConfig { api_key: Some("s3cret".into()), metrics_public: true, ..common::quiet() };
    let server = start_with(common::smollm2(), common::engine_config(1), config).await;
    assert_eq!(client().get(format!("{}/metrics", server.url)).send().await.unwrap().status(), 200);
    let r = client().post(format!("{}/tokenize", server.url)).json(&json!({"content": "hi"})).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_answers_preflights_for_listed_origins_only() {
    let config = ServerConfig { cors_origins: vec!["https://app.example".into()], ..common::quiet() };
    let server = start_with(common::smollm2(), common::engine_config(1), config).await;
    let preflight = |origin: &'static str| {
        client()
            .request(reqwest::Method::OPTIONS, format!("{}/v1/chat/completions", server.url))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization, content-type")
            .send()
    };
    let ok = preflight("https://app.example").await.unwrap();
    assert_eq!(ok.headers()["access-control-allow-origin"], "https://app.example");
    let other = preflight("https://evil.example").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
    server.shutdown().await.unwrap();
    // `*`: any origin, with whatever headers the page asks for (the OpenAI JS SDK's `x-stainless-*`).
    let config = ServerConfig { cors_origins: vec!["*".into()], ..common::quiet() };
    let server = start_with(common::smollm2(), common::engine_config(1), config).await;
    let r = client()
        .request(reqwest::Method::OPTIONS, format!("{}/v1/chat/completions", server.url))
        .header("origin", "https://any.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization, content-type, x-stainless-os, x-stainless-lang")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["access-control-allow-origin"], "*");
    let allowed = r.headers()["access-control-allow-headers"].to_str().unwrap().to_ascii_lowercase();
    assert!(allowed.contains("x-stainless-os") && allowed.contains("authorization"), "{allowed}");
    // Not an origin: refused before serving.
    for bad in ["app.example", "https://app.example/v1", "ftp://x", "https://"] {
        let config = ServerConfig { cors_origins: vec![bad.into()], ..common::quiet() };
        assert!(config.check().unwrap_err().contains(bad), "{bad}");
    }
    assert!(ServerConfig { cors_origins: vec!["http://localhost:3000".into()], ..common::quiet() }.check().is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_503_until_the_model_is_loaded() {
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let load = move || {
        let _ = wait.recv();
        common::smollm2()()
    };
    let metrics = std::sync::Arc::new(minerva_server::Metrics::new());
    let engine = minerva_server::EngineHandle::spawn(load, common::engine_config(1), metrics.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(minerva_server::serve(listener, engine.clone(), metrics, common::quiet(), std::future::pending()));
    let r = client().get(format!("{url}/health")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let (status, _, e) = post(&url, "/v1/completions", &json!({"prompt": "Hi"})).await;
    assert_error(status, &e, 503, None);
    release.send(()).unwrap();
    for _ in 0..500 {
        if client().get(format!("{url}/health")).send().await.unwrap().status() == 200 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never became healthy");
}
