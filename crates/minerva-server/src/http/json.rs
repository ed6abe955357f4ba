//! [`ApiJson`]: a JSON body whose every failure is an OpenAI error naming the field.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

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
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = format!("invalid JSON body: {inner}");
        if path == "." || inner.is_syntax() || inner.is_eof() {
            ApiError::bad_json(message)
        } else {
            ApiError::invalid(path, message)
        }
    })?;
    de.end().map_err(|e| ApiError::bad_json(format!("invalid JSON body: {e}")))?;
    Ok(value)
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
