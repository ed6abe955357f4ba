//! The chat page at `/`: three files compiled into the binary, served with a content security
//! policy that lets the page load only its own files and talk only to this server (no CDN, no
//! inline script, no other host).

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const MARKDOWN_JS: &str = include_str!("../ui/markdown.js");
const APP_CSS: &str = include_str!("../ui/app.css");

/// The page may load its own scripts and styles and fetch from this origin; nothing else.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `/` and `/ui/*`: open without the API key (the page asks for it and sends it to the API).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", INDEX) }))
        .route("/ui/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
        .route("/ui/markdown.js", get(|| async { asset("text/javascript; charset=utf-8", MARKDOWN_JS) }))
        .route("/ui/app.css", get(|| async { asset("text/css; charset=utf-8", APP_CSS) }))
}
