//! OpenAI's request and response shapes, and the checks that turn a request into engine terms.

pub mod request;
pub mod response;
pub mod responses;
pub mod structured;
pub mod tools;

use minerva_generate::SamplingParams;

use crate::error::ApiError;
use request::CommonParams;

/// Most choices per request.
pub const MAX_N: usize = 8;
/// Most alternatives per position in `logprobs`.
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Most stop strings per request.
pub const MAX_STOP: usize = 16;

/// The checked sampling and limit fields of a request.
#[derive(Clone, Debug)]
pub struct Checked {
    /// Sampler settings (defaults as `minerva run`'s).
    pub sampling: SamplingParams,
    /// Choices.
    pub n: usize,
    /// The asked token limit, if any.
    pub max_tokens: Option<usize>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Stream the answer.
    pub stream: bool,
    /// Send a usage chunk at the end of the stream.
    pub include_usage: bool,
}

fn in_range(name: &str, v: Option<f32>, lo: f32, hi: f32, lo_open: bool) -> Result<Option<f32>, ApiError> {
    match v {
        Some(x) if !x.is_finite() || x > hi || x < lo || (lo_open && x == lo) => {
            let lower = if lo_open { "(" } else { "[" };
            Err(ApiError::invalid(name, format!("`{name}` is {x}; it must be in {lower}{lo}, {hi}]")))
        }
        _ => Ok(v),
    }
}

/// Checks `p`'s ranges and fills in defaults (those of `minerva run`: temperature 0.8, top-k 40,
/// top-p 0.95, min-p 0.05) for a model of `vocab` tokens served with `slots` slots.
pub fn check_common(
    p: &CommonParams,
    max_tokens: Option<i64>,
    vocab: usize,
    slots: usize,
) -> Result<Checked, ApiError> {
    let defaults = SamplingParams::default();
    let temperature = in_range("temperature", p.temperature, 0.0, 2.0, false)?.unwrap_or(0.8);
    let top_p = in_range("top_p", p.top_p, 0.0, 1.0, true)?.unwrap_or(0.95);
    let min_p = in_range("min_p", p.min_p, 0.0, 1.0, false)?.unwrap_or(0.05);
    let presence_penalty = in_range("presence_penalty", p.presence_penalty, -2.0, 2.0, false)?.unwrap_or(0.0);
    let frequency_penalty = in_range("frequency_penalty", p.frequency_penalty, -2.0, 2.0, false)?.unwrap_or(0.0);
    let repeat_penalty = in_range("repetition_penalty", p.repetition_penalty, 0.0, 10.0, true)?.unwrap_or(1.0);
    let top_k = match p.top_k {
        None => 40,
        Some(k) if k < 0 => return Err(ApiError::invalid("top_k", format!("`top_k` is {k}; it must be ≥ 0"))),
        Some(k) => usize::try_from(k).unwrap_or(usize::MAX),
    };
    let n = match p.n {
        None => 1,
        Some(n) if !(1..=MAX_N as i64).contains(&n) => {
            return Err(ApiError::invalid("n", format!("`n` is {n}; it must be from 1 to {MAX_N}")));
        }
        Some(n) => n as usize,
    };
    if n > slots {
        return Err(ApiError::invalid(
            "n",
            format!("`n` is {n} but this server decodes at most {slots} sequences at once"),
        ));
    }
    let max_tokens = match max_tokens {
        None => None,
        Some(m) if m < 1 => {
            return Err(ApiError::invalid("max_tokens", format!("`max_tokens` is {m}; it must be ≥ 1")));
        }
        Some(m) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
    };
    let mut logit_bias = Vec::new();
    for (key, &bias) in p.logit_bias.iter().flatten() {
        let param = format!("logit_bias.{key}");
        let id: u32 = key.parse().map_err(|_| ApiError::invalid(&param, format!("`{key}` is not a token id")))?;
        if id as usize >= vocab {
            return Err(ApiError::invalid(&param, format!("token {id} is outside the vocabulary of {vocab}")));
        }
        in_range(&param, Some(bias), -100.0, 100.0, false)?;
        logit_bias.push((id, bias));
    }
    logit_bias.sort_by_key(|b| b.0);
    let stop: Vec<String> = p.stop.clone().map(request::Stop::into_vec).unwrap_or_default();
    if stop.len() > MAX_STOP {
        return Err(ApiError::invalid("stop", format!("{} stop strings; at most {MAX_STOP} are allowed", stop.len())));
    }
    if p.stream_options.is_some() && !p.stream {
        return Err(ApiError::invalid("stream_options", "`stream_options` is only allowed with `stream: true`"));
    }
    let sampling = SamplingParams {
        temperature,
        top_k,
        top_p,
        min_p,
        repeat_penalty,
        frequency_penalty,
        presence_penalty,
        logit_bias,
        // A negative seed is a seed too: its bits.
        seed: p.seed.map(|s| s as u64),
        ..defaults
    };
    Ok(Checked {
        sampling,
        n,
        max_tokens,
        stop,
        stream: p.stream,
        include_usage: p.stream_options.as_ref().is_some_and(|o| o.include_usage),
    })
}

/// Checks `top_logprobs` (with `logprobs` on) and returns the alternatives to report.
pub fn check_top_logprobs(param: &str, top: Option<i64>) -> Result<usize, ApiError> {
    match top {
        None => Ok(0),
        Some(t) if !(0..=MAX_TOP_LOGPROBS as i64).contains(&t) => {
            Err(ApiError::invalid(param, format!("`{param}` is {t}; it must be from 0 to {MAX_TOP_LOGPROBS}")))
        }
        Some(t) => Ok(t as usize),
    }
}

/// The completion length: the asked one if prompt and completion fit `ctx`, else a 400; when
/// none was asked, whatever room the context leaves.
pub fn fit_context(ctx: usize, prompt: usize, asked: Option<usize>) -> Result<usize, ApiError> {
    match asked {
        Some(m) if prompt.saturating_add(m) > ctx => Err(ApiError::context_length(ctx, prompt, m)),
        Some(m) => Ok(m),
        None if prompt >= ctx => Err(ApiError::context_length(ctx, prompt, 1)),
        None => Ok(ctx - prompt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(json: serde_json::Value) -> CommonParams {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn defaults_are_minerva_runs() {
        let c = check_common(&common(serde_json::json!({})), None, 100, 4).unwrap();
        assert_eq!(
            (c.sampling.temperature, c.sampling.top_k, c.sampling.top_p, c.sampling.min_p),
            (0.8, 40, 0.95, 0.05)
        );
        assert_eq!((c.n, c.max_tokens, c.stream), (1, None, false));
    }

    #[test]
    fn out_of_range_fields_are_named() {
        let cases = [
            (serde_json::json!({"temperature": -0.5}), "temperature"),
            (serde_json::json!({"temperature": 2.5}), "temperature"),
            (serde_json::json!({"top_p": 0.0}), "top_p"),
            (serde_json::json!({"top_p": 1.5}), "top_p"),
            (serde_json::json!({"min_p": -1}), "min_p"),
            (serde_json::json!({"top_k": -1}), "top_k"),
            (serde_json::json!({"presence_penalty": 3}), "presence_penalty"),
            (serde_json::json!({"repetition_penalty": 0}), "repetition_penalty"),
            (serde_json::json!({"n": 0}), "n"),
            (serde_json::json!({"n": 9}), "n"),
            (serde_json::json!({"n": 5}), "n"),
            (serde_json::json!({"logit_bias": {"abc": 1}}), "logit_bias.abc"),
            (serde_json::json!({"logit_bias": {"100": 1}}), "logit_bias.100"),
            (serde_json::json!({"logit_bias": {"1": 101}}), "logit_bias.1"),
            (serde_json::json!({"stream_options": {"include_usage": true}}), "stream_options"),
        ];
        for (json, field) in cases {
            let err = check_common(&common(json.clone()), None, 100, 4).unwrap_err();
            assert_eq!(err.param.as_deref(), Some(field), "{json}");
            assert_eq!(err.status, 400);
        }
        let err = check_common(&common(serde_json::json!({})), Some(-3), 100, 4).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("max_tokens"));
        assert_eq!(check_top_logprobs("top_logprobs", Some(21)).unwrap_err().param.as_deref(), Some("top_logprobs"));
    }

    #[test]
    fn context_fit() {
        assert_eq!(fit_context(100, 30, Some(70)).unwrap(), 70);
        let err = fit_context(100, 30, Some(71)).unwrap_err();
        assert_eq!(err.code, Some("context_length_exceeded"));
        assert!(err.message.contains("100") && err.message.contains("101"), "{}", err.message);
        assert_eq!(fit_context(100, 30, None).unwrap(), 70);
        assert_eq!(fit_context(100, 100, None).unwrap_err().code, Some("context_length_exceeded"));
    }
}
