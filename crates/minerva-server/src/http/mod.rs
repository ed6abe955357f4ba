//! The router: routes, middleware (API key, CORS, body limit, panics, request log), and the small
//! handlers (`/health`, `/metrics`, `/v1/models`, `/tokenize`, `/detokenize`).

mod chat;
mod completions;
mod embeddings;
mod json;
mod respond;
mod responses;
mod ui;

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use crate::ServerConfig;
use crate::api::response::{ModelCard, ModelList};
use crate::api::tools::GrammarPlan;
use crate::engine::{EngineHandle, ModelInfo};
use crate::error::ApiError;
use crate::metrics::Metrics;
use json::ApiJson;

/// Longest a request's grammar may take to compile.
pub(crate) const GRAMMAR_COMPILE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What every handler shares.
pub(crate) struct AppState {
    pub(crate) engine: EngineHandle,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) config: ServerConfig,
    pub(crate) started: u64,
    /// API requests between arrival and their handler's response (bounded by `max_inflight`).
    pub(crate) inflight: std::sync::atomic::AtomicUsize,
    /// Stored responses of `/v1/responses`.
    pub(crate) responses: responses::ResponseStore,
}

type Shared = Arc<AppState>;

impl AppState {
    /// The loaded model, or 503 while it loads (or once the engine has stopped).
    pub(crate) fn model(&self) -> Result<Arc<ModelInfo>, ApiError> {
        match self.engine.info() {
            Some(Err(e)) => Err(ApiError::internal(format!("the model failed to load: {e}"))),
            _ if !self.engine.is_alive() => Err(ApiError::engine_stopped()),
            Some(Ok(info)) => Ok(info),
            None => Err(ApiError::loading()),
        }
    }

    /// The constraint a completion request's structured-output fields ask for (from its first
    /// token), compiled off the async workers within [`GRAMMAR_COMPILE_LIMIT`]; a grammar that
    /// cannot be used is a 400 naming its field, before any token is generated.
    pub(crate) async fn constraint(
        &self,
        info: &ModelInfo,
        params: &crate::api::request::CommonParams,
    ) -> Result<Option<minerva_generate::Constraint>, ApiError> {
        let Some((field, grammar)) = crate::api::structured::grammar_of(params)? else {
            return Ok(None);
        };
        self.compile(info, GrammarPlan { field, grammar, trigger: None }).await.map(Some)
    }

    /// Compiles `plan` on a blocking thread within [`GRAMMAR_COMPILE_LIMIT`]; its errors are
    /// 400s naming its field.
    pub(crate) async fn compile(
        &self,
        info: &ModelInfo,
        plan: GrammarPlan,
    ) -> Result<minerva_generate::Constraint, ApiError> {
        let slot = info.grammar.clone();
        let field = plan.field.clone();
        let task = tokio::task::spawn_blocking(move || {
            let compiler = slot.compiler().map_err(|why| {
                ApiError::unsupported(&plan.field, format!("structured output is not available for this model: {why}"))
            })?;
            match &plan.trigger {
                None => compiler.compile(&plan.grammar),
                Some((text, anchored, includes)) => compiler.compile_lazy(&plan.grammar, text, *anchored, *includes),
            }
            .map_err(|e| ApiError::invalid(&plan.field, e.to_string()))
        });
        match tokio::time::timeout(GRAMMAR_COMPILE_LIMIT, task).await {
            Err(_) => Err(ApiError::invalid(
                &field,
                format!("the grammar took longer than {} s to compile", GRAMMAR_COMPILE_LIMIT.as_secs()),
            )),
            Ok(Err(e)) => Err(ApiError::internal(format!("compiling the grammar: {e}"))),
            Ok(Ok(result)) => result,
        }
    }

    /// 404 unless `asked` is the served model (or absent).
    pub(crate) fn check_model(&self, asked: Option<&str>) -> Result<(), ApiError> {
        match asked {
            Some(name) if !name.is_empty() && name != self.config.model_name => {
                Err(ApiError::model_not_found(name, &self.config.model_name))
            }
            _ => Ok(()),
        }
    }
}

/// Unix seconds now.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Builds the whole application.
pub(crate) fn router(engine: EngineHandle, metrics: Arc<Metrics>, config: ServerConfig) -> Router {
    let body_limit = config.body_limit;
    // (`ServerConfig::check` refused invalid origins before this.) The requested headers are
    // allowed, whatever they are: the OpenAI JavaScript SDK sends `x-stainless-*` ones.
    let cors = (!config.cors_origins.is_empty()).then(|| {
        let origins = if config.cors_origins.iter().any(|o| o == "*") {
            AllowOrigin::any()
        } else {
            AllowOrigin::list(config.cors_origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
        };
        CorsLayer::new()
            .allow_origin(origins)
            .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
            .allow_headers(AllowHeaders::mirror_request())
    });
    let metrics_public = config.metrics_public;
    let responses = responses::ResponseStore::new(config.responses_store);
    let state: Shared =
        Arc::new(AppState { engine, metrics, config, started: unix_now(), inflight: Default::default(), responses });
    let metrics_route = Router::new().route("/metrics", get(metrics_text));
    let mut keyed = Router::new()
        .route("/v1/chat/completions", post(chat::handle))
        .route("/v1/completions", post(completions::handle))
        .route("/v1/embeddings", post(embeddings::handle))
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/{id}", get(responses::retrieve).delete(responses::delete))
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize));
    let mut open = Router::new().route("/health", get(health));
    if state.config.ui {
        open = open.merge(ui::routes());
    }
    if metrics_public {
        open = open.merge(metrics_route);
    } else {
        keyed = keyed.merge(metrics_route);
    }
    let keyed = keyed
        .route_layer(middleware::from_fn_with_state(state.clone(), require_key))
        .route_layer(middleware::from_fn_with_state(state.clone(), limit_inflight));
    let app = Router::new()
        .merge(keyed)
        .merge(open)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::Extension(json::BodyLimit(body_limit)))
        .layer(CatchPanicLayer::custom(|_panic: Box<dyn std::any::Any + Send>| {
            ApiError::internal("the server failed while handling this request").into_response()
        }))
        .layer(middleware::from_fn_with_state(state.clone(), log_and_count))
        .with_state(state);
    match cors {
        Some(cors) => app.layer(cors),
        None => app,
    }
}

/// Marks a response whose stream logs and counts itself when it ends.
#[derive(Clone, Copy)]
pub(crate) struct LoggedByStream;

/// Token counts a handler reports for the log line.
#[derive(Clone, Copy)]
pub(crate) struct Tokens {
    pub(crate) prompt: usize,
    pub(crate) completion: usize,
}

/// One line per request, `METHOD PATH STATUS [prompt=N completion=N] MS ms`, and the status counter.
async fn log_and_count(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    if response.extensions().get::<LoggedByStream>().is_none() {
        let tokens = response.extensions().get::<Tokens>().copied();
        finish_request(&state, method.as_str(), &path, response.status(), tokens, started);
    }
    response
}

/// Logs and counts a request that has ended.
pub(crate) fn finish_request(
    state: &AppState,
    method: &str,
    path: &str,
    status: StatusCode,
    tokens: Option<Tokens>,
    started: Instant,
) {
    state.metrics.count_request(status.as_u16());
    if state.config.log_requests {
        let tokens = tokens.map(|t| format!(" prompt={} completion={}", t.prompt, t.completion)).unwrap_or_default();
        let ms = started.elapsed().as_millis();
        eprintln!("{method} {path} {}{tokens} {ms} ms", status.as_u16());
    }
}

/// At most `max_inflight` API requests between arrival and response (reading and parsing the
/// body, prompting, queueing): more are answered 503 with `Retry-After` before their body is
/// read, so many large bodies at once cannot take the memory.
async fn limit_inflight(State(state): State<Shared>, request: Request, next: Next) -> Response {
    use std::sync::atomic::Ordering;
    let max = state.config.max_inflight;
    if state.inflight.fetch_add(1, Ordering::AcqRel) >= max {
        state.inflight.fetch_sub(1, Ordering::AcqRel);
        return ApiError::busy(max).into_response();
    }
    struct Release<'a>(&'a std::sync::atomic::AtomicUsize);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let _release = Release(&state.inflight);
    next.run(request).await
}

/// Every route but `/health` (and `/metrics` with `--metrics-public`) needs `Authorization:
/// Bearer KEY` when the server has a key: the scheme in any case, the key compared in constant
/// time.
async fn require_key(State(state): State<Shared>, request: Request, next: Next) -> Response {
    if let Some(key) = &state.config.api_key {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .unwrap_or_default();
        if !bool::from(given.as_bytes().ct_eq(key.as_bytes())) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

async fn no_route(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::no_route(method.as_str(), uri.path())
}

async fn wrong_method(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::wrong_method(method.as_str(), uri.path())
}

/// 200 `{"status": "ok"}` once the model is loaded, 503 before.
async fn health(State(state): State<Shared>) -> Response {
    match state.model() {
        Ok(_) => axum::Json(serde_json::json!({"status": "ok"})).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn metrics_text(State(state): State<Shared>) -> Response {
    let body = state.metrics.render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

async fn models(State(state): State<Shared>) -> axum::Json<ModelList> {
    axum::Json(ModelList {
        object: "list",
        data: vec![ModelCard {
            id: state.config.model_name.clone(),
            object: "model",
            created: state.started,
            owned_by: "minerva",
        }],
    })
}

/// `POST /tokenize`, as llama-server: `{"content", "add_special", "with_pieces"}`.
#[derive(Deserialize)]
struct TokenizeRequest {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default)]
    with_pieces: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
enum TokenOut {
    Id(u32),
    Piece { id: u32, piece: String },
}

async fn tokenize(State(state): State<Shared>, ApiJson(req): ApiJson<TokenizeRequest>) -> Result<Response, ApiError> {
    let info = state.model()?;
    let ids = info
        .tokenizer
        .encode(&req.content, req.add_special)
        .map_err(|e| ApiError::invalid("content", e.to_string()))?;
    let tokens: Vec<TokenOut> =
        ids.iter()
            .map(|&id| {
                if req.with_pieces { TokenOut::Piece { id, piece: info.tokenizer.piece(id) } } else { TokenOut::Id(id) }
            })
            .collect();
    Ok(axum::Json(serde_json::json!({ "tokens": tokens })).into_response())
}

/// `POST /detokenize`: `{"tokens": [ids]}` → `{"content"}`.
#[derive(Deserialize)]
struct DetokenizeRequest {
    tokens: Vec<u32>,
}

async fn detokenize(
    State(state): State<Shared>,
    ApiJson(req): ApiJson<DetokenizeRequest>,
) -> Result<Response, ApiError> {
    let info = state.model()?;
    let vocab = info.tokenizer.vocab_size();
    if let Some(i) = req.tokens.iter().position(|&t| t as usize >= vocab) {
        return Err(ApiError::invalid(
            format!("tokens[{i}]"),
            format!("token {} is outside the vocabulary of {vocab}", req.tokens[i]),
        ));
    }
    let content = info.tokenizer.decode(&req.tokens, false).map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
    Ok(axum::Json(serde_json::json!({ "content": content })).into_response())
}
