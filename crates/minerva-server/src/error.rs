//! [`ApiError`]: every failure a client can see, as OpenAI's error body with its HTTP status.
//!
//! ```json
//! {"error": {"message": "…", "type": "invalid_request_error", "param": "temperature", "code": null}}
//! ```

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answered to a client: status, OpenAI `type`, message, and the offending field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// OpenAI's `error.type` (`invalid_request_error`, `authentication_error`, …).
    pub kind: &'static str,
    /// Human-readable message.
    pub message: String,
    /// The request field at fault (`messages[1].content`), if one is.
    pub param: Option<String>,
    /// A machine-readable code (`context_length_exceeded`, `model_not_found`, …).
    pub code: Option<&'static str>,
    /// Seconds after which a retry may succeed (sent as `Retry-After`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, kind, message: message.into(), param: None, code: None, retry_after: None }
    }

    /// 400: the request is malformed or asks for something out of range.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.into()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }

    /// 400 for a request body that is not valid JSON or does not match the schema.
    pub fn bad_json(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400: a field this server knows but cannot honour.
    pub fn unsupported(param: &str, message: impl Into<String>) -> ApiError {
        ApiError { code: Some("unsupported_parameter"), ..ApiError::invalid(param, message) }
    }

    /// 400 `context_length_exceeded`: the prompt and its completion do not fit the context.
    pub fn context_length(context: usize, prompt: usize, completion: usize) -> ApiError {
        let message = format!(
            "This model's maximum context length is {context} tokens. However, you requested {} tokens \
             ({prompt} in the prompt, {completion} for the completion). Please reduce the prompt or the \
             completion length.",
            prompt + completion
        );
        ApiError { code: Some("context_length_exceeded"), ..ApiError::invalid("messages", message) }
    }

    /// 401: missing or wrong API key.
    pub fn unauthorized() -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "Incorrect or missing API key: send it as `Authorization: Bearer KEY`.",
            )
        }
    }

    /// 404 for a stored object (a response) that is not, or no longer, kept.
    pub fn not_found(param: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError {
            param: param.map(String::from),
            ..ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
        }
    }

    /// 404 for a model name this server does not serve.
    pub fn model_not_found(name: &str, served: &str) -> ApiError {
        ApiError {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("The model `{name}` does not exist; this server serves `{served}`."),
            )
        }
    }

    /// 404 for an unknown path.
    pub fn no_route(method: &str, path: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", format!("Unknown request URL: {method} {path}."))
    }

    /// 405 for a known path asked with the wrong method.
    pub fn wrong_method(method: &str, path: &str) -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("Method {method} is not allowed for {path}."),
        )
    }

    /// 413: the body is over the limit.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("The request body is larger than the limit of {limit} bytes."),
        )
    }

    /// 503: the model is still loading.
    pub fn loading() -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable_error", "Loading model")
        }
    }

    /// 503: the queue of waiting requests is full.
    pub fn overloaded(max_queue: usize) -> ApiError {
        ApiError {
            retry_after: Some(1),
            code: Some("server_overloaded"),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable_error",
                format!("The server is busy: {max_queue} requests are already waiting. Retry later."),
            )
        }
    }

    /// 503: the server is shutting down.
    pub fn shutting_down() -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable_error", "The server is shutting down.")
    }

    /// 503: `max_inflight` requests are already being read or prepared.
    pub fn busy(max_inflight: usize) -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable_error",
                format!("The server is busy: {max_inflight} requests are in flight; retry shortly."),
            )
        }
    }

    /// 503: the engine thread has stopped (it failed); the process is exiting.
    pub fn engine_stopped() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable_error",
            "The engine has stopped; this server can no longer answer.",
        )
    }

    /// 500.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The JSON body, `{"error": {…}}`.
    pub fn body(&self) -> serde_json::Value {
        #[derive(Serialize)]
        struct Inner<'a> {
            message: &'a str,
            #[serde(rename = "type")]
            kind: &'a str,
            param: Option<&'a str>,
            code: Option<&'a str>,
        }
        serde_json::json!({ "error": Inner {
            message: &self.message,
            kind: self.kind,
            param: self.param.as_deref(),
            code: self.code,
        } })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
