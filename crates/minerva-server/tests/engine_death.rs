//! An engine thread that dies leaves no server answering as if it were well: `/health` and every
//! request get 503 "the engine has stopped" (the CLI then exits non-zero), never a 200 or a
//! request that waits forever.

mod common;

use std::time::Duration;

use common::{chat, post};
use minerva_model::{CpuBackend, Model};
use minerva_server::{EngineHandle, Metrics};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_engine_answers_503_everywhere() {
    let metrics = Arc::new(Metrics::new());
    let load = || -> Result<(Model<CpuBackend>, minerva_generate::Tokenizer), String> {
        panic!("injected: the engine thread dies while loading");
    };
    let handle = EngineHandle::spawn(load, common::engine_config(1), metrics.clone());
    for _ in 0..200 {
        if !handle.is_alive() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!handle.is_alive(), "a panicked engine thread still counts as alive");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(minerva_server::serve(listener, handle, metrics, common::quiet(), async {
        let _ = stopped.await;
    }));
    let health = common::client().get(format!("{url}/health")).send().await.unwrap();
    assert_eq!(health.status(), 503);
    let body: serde_json::Value = health.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("engine has stopped"), "{body}");
    let (status, _, r) = post(&url, "/v1/chat/completions", &chat("hi", serde_json::json!({}))).await;
    assert_eq!(status, 503, "{r}");
    let (status, _, r) = post(&url, "/v1/completions", &serde_json::json!({"prompt": "hi"})).await;
    assert_eq!(status, 503, "{r}");
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
