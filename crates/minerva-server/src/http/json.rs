//! [`ApiJson`]: a JSON body whose every failure is an OpenAI error naming the field.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::api::request::CommonParams;
use crate::error::ApiError;

/// A request body parsed as `T`: invalid JSON or a field of the wrong type is a 400 naming the
/// field (`messages[0].content`), a body over the limit a 413.
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<ApiJson<T>, ApiError> {
        let limit = request.extensions().get::<BodyLimit>().map(|l| l.0);
        let bytes = Bytes::from_request(request, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large(limit.unwrap_or(8 << 20))
            } else {
                ApiError::bad_json(format!("cannot read the request body: {}", e.body_text()))
            }
        })?;
        parse(&bytes).map(ApiJson)
    }
}

/// The body limit, for the 413 message.
#[derive(Clone, Copy)]
pub(crate) struct BodyLimit(pub(crate) usize);

/// Parses `bytes` as `T`, naming the field at fault.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_json(format!("invalid JSON body: {e}")))?;
    let error = match serde_path_to_error::deserialize::<_, T>(&value) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let mut path = error.path().to_string();
    let message = format!("invalid JSON body: {}", error.into_inner());
    if path == "." {
        // Fields of a `#[serde(flatten)]`ed struct lose their path: ask the shared part alone.
        if let Err(e) = serde_path_to_error::deserialize::<_, CommonParams>(&value) {
            path = e.path().to_string();
        }
    }
    if path == "." { Err(ApiError::bad_json(message)) } else { Err(ApiError::invalid(path, message)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::request::ChatRequest;

    #[test]
    fn errors_name_the_field() {
        let err = parse::<ChatRequest>(br#"{"messages": [{"role": "user", "content": 5}]}"#).err().unwrap();
        assert_eq!(err.param.as_deref(), Some("messages[0].content"), "{err:?}");
        let err = parse::<ChatRequest>(br#"{"messages": [], "temperature": "hot"}"#).err().unwrap();
        assert_eq!(err.param.as_deref(), Some("temperature"), "{err:?}");
        let err = parse::<ChatRequest>(br#"{"model": "x"}"#).err().unwrap();
        assert!(err.message.contains("missing field `messages`"), "{err:?}");
        let err = parse::<ChatRequest>(br#"{"messages": [] "#).err().unwrap();
        assert_eq!((err.status, err.param.as_deref()), (StatusCode::BAD_REQUEST, None));
        assert!(parse::<ChatRequest>(br#"{"messages": []} trailing"#).is_err());
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let req = parse::<ChatRequest>(br#"{"messages": [], "some_new_field": {"x": 1}, "store": true}"#).unwrap();
        assert!(req.messages.is_empty());
    }
}
