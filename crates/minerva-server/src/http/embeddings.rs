//! `POST /v1/embeddings`: each input's final hidden states pooled (`--pooling`, else the
//! model's `pooling_type`, else mean) and L2-normalised, computed by the engine between
//! generation steps.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::json::ApiJson;
use super::{AppState, Tokens, respond};
use crate::engine::ModelInfo;
use crate::error::ApiError;
use minerva_model::Pooling;

/// Most inputs in one request (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// `input`: a text, several texts, token ids, or several lists of ids.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    /// One text.
    Text(String),
    /// Several texts.
    Texts(Vec<String>),
    /// One input as token ids.
    Tokens(Vec<u32>),
    /// Several inputs as token ids.
    TokenLists(Vec<Vec<u32>>),
}

/// `POST /v1/embeddings`.
#[derive(Clone, Debug, Deserialize)]
pub struct EmbeddingRequest {
    /// What to embed.
    pub input: EmbeddingInput,
    /// The model name (must be the served one, when given).
    pub model: Option<String>,
    /// `float` (the default) or `base64` (little-endian f32 bytes).
    pub encoding_format: Option<String>,
    /// Must equal the model's hidden size when given (no truncation).
    pub dimensions: Option<i64>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Serialize)]
struct EmbeddingOut {
    object: &'static str,
    index: usize,
    embedding: Vector,
}

#[derive(Serialize)]
struct EmbeddingUsage {
    prompt_tokens: usize,
    total_tokens: usize,
}

#[derive(Serialize)]
struct EmbeddingList {
    object: &'static str,
    data: Vec<EmbeddingOut>,
    model: String,
    usage: EmbeddingUsage,
}

/// Each input as token ids (texts with the model's BOS/EOS, as llama.cpp's `llama-embedding`),
/// checked: non-empty, in the vocabulary, within the context. Errors name `input` or `input[i]`.
fn tokenize(info: &ModelInfo, input: EmbeddingInput) -> Result<Vec<Vec<u32>>, ApiError> {
    let (lists, single) = match input {
        EmbeddingInput::Text(text) => (vec![Err(text)], true),
        EmbeddingInput::Texts(texts) => (texts.into_iter().map(Err).collect(), false),
        EmbeddingInput::Tokens(ids) => (vec![Ok(ids)], true),
        EmbeddingInput::TokenLists(lists) => (lists.into_iter().map(Ok).collect(), false),
    };
    if lists.is_empty() {
        return Err(ApiError::invalid("input", "`input` is an empty list"));
    }
    if lists.len() > MAX_INPUTS {
        return Err(ApiError::invalid("input", format!("{} inputs; at most {MAX_INPUTS} are allowed", lists.len())));
    }
    let vocab = info.tokenizer.vocab_size();
    lists
        .into_iter()
        .enumerate()
        .map(|(i, input)| {
            let param = if single { "input".to_string() } else { format!("input[{i}]") };
            let ids = match input {
                Err(text) => {
                    info.tokenizer.encode(&text, true).map_err(|e| ApiError::invalid(&param, e.to_string()))?
                }
                Ok(ids) => {
                    if let Some(&bad) = ids.iter().find(|&&t| t as usize >= vocab) {
                        let why = format!("token {bad} is outside the vocabulary of {vocab}");
                        return Err(ApiError::invalid(&param, why));
                    }
                    ids
                }
            };
            if ids.is_empty() {
                return Err(ApiError::invalid(&param, format!("`{param}` has no tokens to embed")));
            }
            if ids.len() > info.ctx_size {
                let why = format!(
                    "`{param}` is {} tokens, more than this server's context of {} tokens",
                    ids.len(),
                    info.ctx_size
                );
                return Err(ApiError { code: Some("context_length_exceeded"), ..ApiError::invalid(&param, why) });
            }
            Ok(ids)
        })
        .collect()
}

pub(crate) async fn handle(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<EmbeddingRequest>,
) -> Result<Response, ApiError> {
    let info = state.model()?;
    state.check_model(req.model.as_deref())?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            let why = format!("`encoding_format` is `{other}`; it must be float or base64");
            return Err(ApiError::invalid("encoding_format", why));
        }
    };
    if let Some(d) = req.dimensions
        && d != info.embedding_dim as i64
    {
        let why = format!("`dimensions` is {d}; this model's embeddings have {} (no truncation)", info.embedding_dim);
        return Err(ApiError::unsupported("dimensions", why));
    }
    let inputs = {
        let info = info.clone();
        let task = tokio::task::spawn_blocking(move || tokenize(&info, req.input));
        task.await.map_err(|e| ApiError::internal(format!("tokenizing the input: {e}")))??
    };
    let prompt_tokens = inputs.iter().map(Vec::len).sum();
    let pooling = state.config.pooling.or(info.pooling).unwrap_or(Pooling::Mean);
    let vectors = state.engine.embed(inputs, pooling)?.await.map_err(|_| ApiError::engine_stopped())??;
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Vector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                Vector::Float(v)
            };
            EmbeddingOut { object: "embedding", index, embedding }
        })
        .collect();
    let body = EmbeddingList {
        object: "list",
        data,
        model: state.config.model_name.clone(),
        usage: EmbeddingUsage { prompt_tokens, total_tokens: prompt_tokens },
    };
    Ok(respond::json_with_tokens(body, Tokens { prompt: prompt_tokens, completion: 0 }))
}
