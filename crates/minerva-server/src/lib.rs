//! Minerva's OpenAI-compatible server: `/v1/chat/completions`, `/v1/completions` (streaming or
//! not), `/v1/models`, `/tokenize`, `/detokenize`, `/health` and `/metrics`, over one model with
//! continuous batching.
//!
//! ```text
//! axum router (auth, CORS, body limit, panics → 500, one log line per request)
//!   └─ handlers: check the request, render + tokenize the prompt, submit
//!        └─ EngineHandle ──► engine thread: Model<B> + KV cache of `parallel` slots,
//!                            one forward step over every running sequence at a time
//! ```
//!
//! The README's example starts a server on SmolLM2.

pub mod api;
pub mod engine;
pub mod error;
mod http;
pub mod metrics;
pub mod prompt;

/// The README's example, compiled as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use engine::{
    EngineConfig, EngineHandle, EngineRunner, GenerationRequest, ModelInfo, SeqEvent, Served, SpecConfig, SpecDrafter,
};
pub use error::ApiError;
pub use metrics::Metrics;

/// HTTP-side settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The name `/v1/models` lists and requests may ask for.
    pub model_name: String,
    /// With a key, every route but `/health` needs `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// `/metrics` stays open with a key (for scrapers).
    pub metrics_public: bool,
    /// Browser origins allowed by CORS (`*`: any; none: no CORS headers).
    pub cors_origins: Vec<String>,
    /// Longest a request may run; then it ends with `finish_reason: length`.
    pub request_timeout: Duration,
    /// How long running requests may take to finish after a shutdown signal.
    pub shutdown_grace: Duration,
    /// Largest request body.
    pub body_limit: usize,
    /// Print one line per request on stderr.
    pub log_requests: bool,
    /// Longest wait for a request's headers, an idle keep-alive connection's next request
    /// included: then the connection is closed.
    pub header_timeout: Duration,
    /// Most requests being read, parsed and prompted at once (before the engine's queue); more
    /// are answered 503 with `Retry-After`.
    pub max_inflight: usize,
    /// Responses of `/v1/responses` kept for `previous_response_id` and `GET` (the most recently
    /// used; 0: none), in memory, lost on restart.
    pub responses_store: usize,
    /// How `/v1/embeddings` pools hidden states (`--pooling`); `None`: the model's
    /// `pooling_type`, else mean.
    pub pooling: Option<minerva_model::Pooling>,
    /// Serve the chat page at `/` (`--no-ui` turns it off).
    pub ui: bool,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            model_name: "model".into(),
            api_key: None,
            metrics_public: false,
            cors_origins: Vec::new(),
            request_timeout: Duration::from_secs(600),
            shutdown_grace: Duration::from_secs(10),
            body_limit: 8 << 20,
            log_requests: true,
            header_timeout: Duration::from_secs(30),
            max_inflight: 256,
            responses_store: 256,
            pooling: None,
            ui: true,
        }
    }
}

impl ServerConfig {
    /// Why this configuration cannot serve, if it cannot: a CORS origin that is neither `*` nor
    /// `scheme://host[:port]`.
    pub fn check(&self) -> Result<(), String> {
        for origin in &self.cors_origins {
            if origin == "*" {
                continue;
            }
            let host = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://"));
            let valid = host.is_some_and(|h| {
                !h.is_empty()
                    && h.chars().all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c))
                    && axum::http::HeaderValue::from_str(origin).is_ok()
            });
            if !valid {
                return Err(format!(
                    "--cors-origin `{origin}` is not an origin: give `*` or scheme://host[:port], \
                     e.g. https://app.example.com"
                ));
            }
        }
        Ok(())
    }
}

/// Serves the API on `listener` until `shutdown` resolves; then stops accepting, lets running
/// requests finish within [`ServerConfig::shutdown_grace`], cancels what is left and returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    engine: EngineHandle,
    metrics: Arc<Metrics>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    config.check().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let grace = config.shutdown_grace;
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(config.header_timeout).keep_alive(true);
    let app = http::router(engine.clone(), metrics, config);
    let connections = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    // Out of file descriptors and the like: wait, then accept again.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let service = hyper_util::service::TowerToHyperService::new(app.clone());
                let connection = http1.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                let connection = connections.watch(connection);
                tokio::spawn(async move {
                    let _ = connection.await;
                });
            }
            () = &mut shutdown => break,
        }
    }
    // Stop accepting; running requests get the grace period, then are ended: their streams close
    // and the connections with them, so the shutdown completes.
    let cancel = tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        engine.cancel_all();
    });
    connections.shutdown().await;
    cancel.abort();
    Ok(())
}
