//! A server on a loopback port for the tests, over the real SmolLM2 (fetched by `cargo xtask
//! setup` into `models/`), and helpers to call it.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use minerva_generate::Tokenizer;
use minerva_model::{Backend, CpuBackend, Model, Repack};
use minerva_server::{EngineConfig, EngineHandle, Metrics, ServerConfig};
use serde_json::Value;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn real_model() -> PathBuf {
    let path = root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.exists(), "{} is missing: run `cargo xtask setup`", path.display());
    path
}

pub fn engine_config(parallel: usize) -> EngineConfig {
    EngineConfig {
        parallel,
        ctx_size: Some(2048),
        batch_tokens: 512,
        prefill_chunk: 64,
        max_queue: 16,
        kv_budget_bytes: 1 << 30,
        kv_memory: None,
        tool_format: None,
        speculation: None,
    }
}

/// A running server; dropping it shuts it down.
pub struct TestServer {
    pub url: String,
    pub metrics: Arc<Metrics>,
    pub engine: EngineHandle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Asks the server to shut down and waits for it.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take().unwrap().await.unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Starts a server whose engine loads with `load`, and waits until it is ready.
pub async fn start_with<B, L>(load: L, engine: EngineConfig, config: ServerConfig) -> TestServer
where
    B: Backend + 'static,
    L: FnOnce() -> Result<(Model<B>, Tokenizer), String> + Send + 'static,
{
    let metrics = Arc::new(Metrics::new());
    serve_engine(EngineHandle::spawn(load, engine, metrics.clone()), metrics, config).await
}

/// Serves `handle`'s engine on a loopback port, and waits until its model is ready.
pub async fn serve_engine(handle: EngineHandle, metrics: Arc<Metrics>, config: ServerConfig) -> TestServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(minerva_server::serve(listener, handle.clone(), metrics.clone(), config, async {
        let _ = stopped.await;
    }));
    // Up to a minute: a large vocabulary in f32 (Gemma 3's 262k) takes seconds on a debug build.
    for _ in 0..6000 {
        match handle.info() {
            Some(Ok(_)) => break,
            Some(Err(e)) => panic!("the model did not load: {e}"),
            None => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    TestServer { url, metrics, engine: handle, stop: Some(stop), task: Some(task) }
}

/// SmolLM2 on the CPU (2 threads), as `minerva serve` runs it by default (`--repack off`).
pub fn smollm2() -> impl FnOnce() -> Result<(Model<CpuBackend>, Tokenizer), String> + Send + 'static {
    smollm2_with(Repack::Off)
}

/// [`smollm2`] with its matrices repacked (`--repack auto`: 8-bit activations for the LLaMA
/// family), for the identity tests (batching, preemption, shared prefixes, speculation) to hold
/// with repacking on too.
pub fn smollm2_repacked() -> impl FnOnce() -> Result<(Model<CpuBackend>, Tokenizer), String> + Send + 'static {
    smollm2_with(Repack::Auto)
}

fn smollm2_with(repack: Repack) -> impl FnOnce() -> Result<(Model<CpuBackend>, Tokenizer), String> + Send + 'static {
    move || {
        let path = real_model();
        let gguf = minerva_gguf::Gguf::open(&path).map_err(|e| e.to_string())?;
        let tokenizer = Tokenizer::from_gguf(&gguf).map_err(|e| e.to_string())?;
        let backend = CpuBackend::new(Some(2)).map_err(|e| e.to_string())?.with_repack(repack);
        let model = Model::from_gguf(Arc::new(gguf), backend).map_err(|e| e.to_string())?;
        Ok((model, tokenizer))
    }
}

pub async fn start(parallel: usize) -> TestServer {
    start_with(smollm2(), engine_config(parallel), quiet()).await
}

/// [`start`] on [`smollm2_repacked`].
pub async fn start_repacked(parallel: usize) -> TestServer {
    start_with(smollm2_repacked(), engine_config(parallel), quiet()).await
}

pub fn quiet() -> ServerConfig {
    ServerConfig { model_name: "smollm2".into(), log_requests: false, ..ServerConfig::default() }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// POSTs `body`; returns status, headers and JSON.
pub async fn post(url: &str, path: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = client().post(format!("{url}{path}")).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    (status, headers, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// POSTs `body` and reads the SSE stream to its end: the `data:` payloads, `[DONE]` included.
pub async fn post_stream(url: &str, path: &str, body: &Value) -> Vec<String> {
    let r = client().post(format!("{url}{path}")).json(body).send().await.unwrap();
    assert_eq!(r.status(), 200, "stream refused");
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let mut stream = r.bytes_stream();
    // Bytes first, decoded once at the end: a network chunk may end inside a character, but the
    // stream as a whole must be valid UTF-8 (decoding chunk by chunk, lossily, would hide a
    // character the server split).
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        bytes.extend_from_slice(&chunk.unwrap());
    }
    let text = String::from_utf8(bytes).expect("the event stream is not valid UTF-8");
    text.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_string).collect()
}

/// The JSON chunks of a stream (everything before `[DONE]`), checking `[DONE]` ends it.
pub fn chunks(events: &[String]) -> Vec<Value> {
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect()
}

pub fn chat(content: &str, extra: Value) -> Value {
    let mut body = serde_json::json!({"messages": [{"role": "user", "content": content}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

/// A metric's value from the Prometheus text.
pub async fn metric(url: &str, name: &str) -> f64 {
    let text = client().get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
}
