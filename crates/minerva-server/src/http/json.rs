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

/// `bytes` as `T`, read straight from the bytes (no generic JSON value in between, so a large
/// body costs about its own size once), with the path of the field at fault on error.
/// Errors are `(path, error)`, the path `.` where no field is at fault.
fn read<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, (String, serde_json::Error)> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value =
        serde_path_to_error::deserialize::<_, T>(&mut de).map_err(|e| (e.path().to_string(), e.into_inner()))?;
    // Text after the value (`{…} trailing`) is an error too.
    de.end().map_err(|e| (".".to_string(), e))?;
    Ok(value)
}

/// Parses `bytes` as `T`, naming the field at fault.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let (mut path, inner) = match read::<T>(bytes) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    if inner.is_syntax() || inner.is_eof() {
        return Err(ApiError::bad_json(format!("invalid JSON body: {inner}")));
    }
    let message = format!("invalid JSON body: {inner}");
    if path == "." {
        // Fields of a `#[serde(flatten)]`ed struct lose their path: ask the shared part alone
        // (only on this error path).
        if let Err((p, _)) = read::<CommonParams>(bytes) {
            path = p;
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
