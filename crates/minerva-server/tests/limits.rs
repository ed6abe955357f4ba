//! Connection and request limits: a connection that sends no request, or stops half-way through
//! its headers, is closed after the header timeout, while a response that streams for longer
//! than it is not cut; requests beyond `max_inflight` are 503 with `Retry-After` before their
//! body is read.

mod common;

use std::time::{Duration, Instant};

use common::{chunks, post, post_stream, start_with};
use minerva_server::ServerConfig;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the server closes the connection (or 10 s pass); how long that took.
async fn closed_after(stream: &mut TcpStream) -> Duration {
    let t = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return t.elapsed(),
            Ok(Ok(_)) => continue,
            Err(_) => panic!("the connection was still open after 10 s"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_are_closed_but_long_streams_are_not() {
    let config = ServerConfig { header_timeout: Duration::from_millis(400), ..common::quiet() };
    let server = start_with(common::smollm2(), common::engine_config(1), config).await;
    let address = server.url.trim_start_matches("http://").to_string();
    let mut idle = TcpStream::connect(&address).await.unwrap();
    let waited = closed_after(&mut idle).await;
    assert!(waited >= Duration::from_millis(300), "closed too soon: {waited:?}");
    let mut half = TcpStream::connect(&address).await.unwrap();
    half.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Ty").await.unwrap();
    closed_after(&mut half).await;
    // A stream that outlasts the header timeout several times over ends normally.
    let body = json!({"prompt": "Count to one hundred:", "max_tokens": 48, "temperature": 0, "stream": true,
                      "logit_bias": {"2": -100}});
    let t = Instant::now();
    let events = post_stream(&server.url, "/v1/completions", &body).await;
    let last = chunks(&events).into_iter().rev().find(|c| !c["choices"][0]["finish_reason"].is_null()).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length", "{events:?}");
    eprintln!("the stream took {:?}", t.elapsed());
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_max_inflight_are_refused_before_their_body() {
    let config = ServerConfig { max_inflight: 1, ..common::quiet() };
    let server = start_with(common::smollm2(), common::engine_config(1), config).await;
    let address = server.url.trim_start_matches("http://").to_string();
    // One request in flight: its body is still arriving.
    let body = br#"{"prompt": "Hi", "max_tokens": 1}"#;
    let mut slow = TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body[..5]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = common::client()
        .post(format!("{}/v1/completions", server.url))
        .json(&json!({"prompt": "Hi", "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let e: serde_json::Value = r.json().await.unwrap();
    assert!(e["error"]["message"].as_str().unwrap().contains("1 requests are in flight"), "{e}");
    // The first one completes; then there is room again.
    slow.write_all(&body[5..]).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("\"usage\"") {
        let n = tokio::time::timeout(Duration::from_secs(30), slow.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
    let (status, _, r) = post(&server.url, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 1})).await;
    assert_eq!(status, 200, "{r}");
    server.shutdown().await.unwrap();
}
