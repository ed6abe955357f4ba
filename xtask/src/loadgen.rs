//! `cargo xtask loadgen`: streaming chat requests against any OpenAI-compatible server, at each
//! concurrency level in turn, and what users feel: aggregate output tokens/s, requests/s, time to
//! first token and inter-token latency (p50 / p99), errors.
//!
//! Each level sends `--requests` requests with distinct prompts from `concurrency` client
//! threads (each sends its next request when the last one ends). A token is a streamed content
//! chunk; the server's `usage` (asked with `stream_options.include_usage`) counts them when it
//! sends one.
//!
//! As a soak: many levels of short requests over keep-alive (`--concurrency 8,8,8,8`), some of
//! them cancelled by the client after their first token (`--cancel-every`), and the server's
//! resident memory read after each level (`--server-pid`): it should stay flat.

use std::io::BufRead;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// `cargo xtask loadgen` flags.
#[derive(Debug, clap::Args)]
pub struct LoadgenArgs {
    /// The server's base URL (`http://127.0.0.1:8080`).
    #[arg(long)]
    pub url: String,
    /// Concurrent clients, one level after another.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    pub concurrency: Vec<usize>,
    /// Requests per level.
    #[arg(long, default_value_t = 16)]
    pub requests: usize,
    /// Approximate prompt length in words (about a token each).
    #[arg(long, default_value_t = 64)]
    pub prompt_tokens: usize,
    /// `max_tokens` of each request.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// The `model` field (servers that check it need the served name).
    #[arg(long)]
    pub model: Option<String>,
    /// Also write the rows as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Send this header with a distinct value per request (`s<level>-<index>`), as a chat client
    /// names its conversation, so a load balancer can route each conversation to one replica.
    #[arg(long, value_name = "NAME")]
    pub session_header: Option<String>,
    /// Every N-th request of a level disconnects after its first token, as a client that goes
    /// away (counted as cancelled, not as an error).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub cancel_every: Option<u64>,
    /// The server's process id (on this machine): its resident memory is read after each level.
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
    /// A JSON object whose fields are added to every request (`'{"response_format": {"type":
    /// "json_object"}}'` measures constrained decoding).
    #[arg(long, value_name = "JSON", value_parser = parse_extra)]
    pub extra: Option<serde_json::Map<String, serde_json::Value>>,
    /// Send this text (after a line naming the request, so prompts stay distinct) instead of the
    /// generated story prompt: a workload of one kind, such as `benches/speculative`'s edits.
    #[arg(long, value_name = "FILE", value_parser = read_prompt)]
    pub prompt_file: Option<String>,
}

fn read_prompt(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
}

fn parse_extra(s: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str(s) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err("--extra must be a JSON object".into()),
        Err(e) => Err(format!("--extra is not JSON: {e}")),
    }
}

/// What one request saw.
#[derive(Clone, Debug, Default, PartialEq)]
struct Sample {
    /// From sending to the first content chunk.
    ttft: Option<Duration>,
    /// Between consecutive content chunks.
    gaps: Vec<Duration>,
    tokens: usize,
    error: Option<String>,
    /// The client went away after the first token (`--cancel-every`).
    cancelled: bool,
}

/// One concurrency level's figures.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Row {
    concurrency: usize,
    requests: usize,
    errors: usize,
    cancelled: usize,
    output_tokens: usize,
    wall_s: f64,
    output_tok_s: f64,
    requests_s: f64,
    ttft_p50_ms: f64,
    ttft_p99_ms: f64,
    itl_p50_ms: f64,
    itl_p99_ms: f64,
    /// The server's resident memory after the level (`--server-pid`).
    rss_mib: Option<f64>,
}

/// Runs every level and prints the table.
pub fn run(args: &LoadgenArgs) -> Result<()> {
    if args.requests == 0 || args.concurrency.contains(&0) {
        bail!("--requests and every --concurrency level must be at least 1");
    }
    let endpoint = format!("{}/v1/chat/completions", args.url.trim_end_matches('/'));
    let mut rows = Vec::new();
    for &concurrency in &args.concurrency {
        let mut row = level(&endpoint, args, concurrency);
        row.rss_mib = args.server_pid.and_then(resident_mib);
        eprintln!(
            "xtask loadgen: {concurrency} clients: {:.1} tok/s, TTFT p50 {:.0} ms, ITL p50 {:.1} ms, {} errors",
            row.output_tok_s, row.ttft_p50_ms, row.itl_p50_ms, row.errors
        );
        rows.push(row);
    }
    println!(
        "| clients | requests | errors | cancelled | output tok/s | req/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | server RSS MiB |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let rss = r.rss_mib.map_or_else(|| "—".to_string(), |m| format!("{m:.0}"));
        println!(
            "| {} | {} | {} | {} | {:.1} | {:.2} | {:.0} / {:.0} | {:.1} / {:.1} | {rss} |",
            r.concurrency,
            r.requests,
            r.errors,
            r.cancelled,
            r.output_tok_s,
            r.requests_s,
            r.ttft_p50_ms,
            r.ttft_p99_ms,
            r.itl_p50_ms,
            r.itl_p99_ms
        );
    }
    if let Some(path) = &args.json {
        let json = serde_json::json!({ "url": args.url, "max_tokens": args.max_tokens, "rows": rows });
        std::fs::write(path, format!("{json:#}\n")).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// The resident memory of process `pid` in MiB (`VmRSS` of `/proc/PID/status`), if readable.
fn resident_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib / 1024.0)
}

/// A prompt of about `words` words, distinct for each (level, index): a server's prefix cache
/// finds nothing of one level's prompts in another's.
fn prompt(level: usize, index: usize, words: usize) -> String {
    const TEXT: &str =
        "the quick brown fox jumps over a lazy dog while seven bright stars watch quietly from far above";
    let body: Vec<&str> = TEXT.split(' ').cycle().take(words.saturating_sub(9)).collect();
    format!("Request {level}-{index}. Continue this story in your own words: {}", body.join(" "))
}

fn level(endpoint: &str, args: &LoadgenArgs, concurrency: usize) -> Row {
    let next = AtomicUsize::new(0);
    let samples = Mutex::new(Vec::with_capacity(args.requests));
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(600)).build();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..concurrency {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= args.requests {
                        break;
                    }
                    let sample = one(&agent, endpoint, args, concurrency, i);
                    samples.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(sample);
                }
            });
        }
    });
    let wall = start.elapsed().as_secs_f64();
    let samples = samples.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    for (i, error) in samples.iter().filter_map(|s| s.error.as_deref()).enumerate() {
        eprintln!("xtask loadgen: {concurrency} clients: error {}: {error}", i + 1);
    }
    summarize(concurrency, &samples, wall)
}

fn one(agent: &ureq::Agent, endpoint: &str, args: &LoadgenArgs, concurrency: usize, index: usize) -> Sample {
    let mut body = serde_json::json!({
        "messages": [{"role": "user", "content": match &args.prompt_file {
            Some(text) => format!("Request {concurrency}-{index}.\n{}", text.trim_end()),
            None => prompt(concurrency, index, args.prompt_tokens),
        }}],
        "max_tokens": args.max_tokens, "temperature": 0, "stream": true,
        "stream_options": {"include_usage": true},
    });
    if let Some(model) = &args.model {
        body["model"] = model.clone().into();
    }
    if let (Some(extra), Some(fields)) = (&args.extra, body.as_object_mut()) {
        fields.extend(extra.clone());
    }
    let mut request = agent.post(endpoint).set("Content-Type", "application/json");
    if let Some(name) = &args.session_header {
        request = request.set(name, &format!("s{concurrency}-{index}"));
    }
    let sent = Instant::now();
    let response = match request.send_string(&body.to_string()) {
        Ok(r) => r,
        Err(e) => return Sample { error: Some(e.to_string()), ..Sample::default() },
    };
    let cancel = args.cancel_every.is_some_and(|n| (index as u64 + 1).is_multiple_of(n));
    read_stream(std::io::BufReader::new(response.into_reader()), sent, cancel)
}

/// Reads an SSE chat stream: content chunk times, the usage count, an error event. With
/// `cancel`, stops after the first content chunk (the connection is then dropped unread).
fn read_stream(reader: impl BufRead, sent: Instant, cancel: bool) -> Sample {
    let mut sample = Sample::default();
    let mut last: Option<Instant> = None;
    let mut chunks = 0;
    let mut usage = None;
    let mut done = false;
    for line in reader.lines() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                sample.error = Some(e.to_string());
                break;
            }
        };
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data == "[DONE]" {
            done = true;
            break;
        }
        let Ok(event) = serde_json::from_str::<serde_json::Value>(data) else { continue };
        if let Some(e) = event.get("error") {
            sample.error = Some(e.to_string());
            break;
        }
        if let Some(n) = event.pointer("/usage/completion_tokens").and_then(serde_json::Value::as_u64) {
            usage = Some(n as usize);
        }
        let has_content = event["choices"].as_array().is_some_and(|choices| {
            choices.iter().any(|c| c.pointer("/delta/content").and_then(|v| v.as_str()).is_some_and(|s| !s.is_empty()))
        });
        if has_content {
            let now = Instant::now();
            match last {
                None => sample.ttft = Some(now - sent),
                Some(t) => sample.gaps.push(now - t),
            }
            last = Some(now);
            chunks += 1;
            if cancel {
                sample.cancelled = true;
                sample.tokens = 1;
                return sample;
            }
        }
    }
    if !done && sample.error.is_none() {
        // A replica that dies mid-stream closes the connection without the closing event.
        sample.error = Some(format!("stream ended after {chunks} chunks without [DONE]"));
    }
    sample.tokens = usage.unwrap_or(chunks);
    sample
}

/// The `q` quantile (nearest rank) of sorted `values`, in milliseconds.
fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1000.0
}

fn summarize(concurrency: usize, samples: &[Sample], wall_s: f64) -> Row {
    let ok: Vec<&Sample> = samples.iter().filter(|s| s.error.is_none() && !s.cancelled).collect();
    let cancelled = samples.iter().filter(|s| s.error.is_none() && s.cancelled).count();
    let mut ttft: Vec<Duration> = ok.iter().filter_map(|s| s.ttft).collect();
    let mut gaps: Vec<Duration> = ok.iter().flat_map(|s| s.gaps.iter().copied()).collect();
    ttft.sort();
    gaps.sort();
    let output_tokens: usize = ok.iter().map(|s| s.tokens).sum();
    Row {
        concurrency,
        requests: samples.len(),
        errors: samples.len() - ok.len() - cancelled,
        cancelled,
        output_tokens,
        wall_s,
        output_tok_s: output_tokens as f64 / wall_s.max(1e-9),
        requests_s: ok.len() as f64 / wall_s.max(1e-9),
        ttft_p50_ms: quantile_ms(&ttft, 0.5),
        ttft_p99_ms: quantile_ms(&ttft, 0.99),
        itl_p50_ms: quantile_ms(&gaps, 0.5),
        itl_p99_ms: quantile_ms(&gaps, 0.99),
        rss_mib: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_gives_first_token_gaps_and_the_usage_count() {
        let stream = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
                      data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n\
                      data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n\
                      data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
                      data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\n\
                      data: [DONE]\n\n";
        let s = read_stream(stream.as_bytes(), Instant::now(), false);
        assert!(s.ttft.is_some() && s.error.is_none());
        assert_eq!((s.gaps.len(), s.tokens), (1, 3));
        let broken =
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"boom\"}}\n\n";
        let s = read_stream(broken.as_bytes(), Instant::now(), false);
        assert!(s.error.as_deref().is_some_and(|e| e.contains("boom")));
        // Without usage, content chunks count.
        assert_eq!(s.tokens, 1);
        let cut = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
        let s = read_stream(cut.as_bytes(), Instant::now(), false);
        assert_eq!(s.error.as_deref(), Some("stream ended after 1 chunks without [DONE]"));
        // A cancelling client stops at the first token: neither an error nor a whole answer.
        let s = read_stream(stream.as_bytes(), Instant::now(), true);
        assert!(s.cancelled && s.error.is_none() && s.gaps.is_empty());
    }

    #[test]
    fn quantiles_and_rates() {
        let ms = |v: u64| Duration::from_millis(v);
        let sorted: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!((quantile_ms(&sorted, 0.5), quantile_ms(&sorted, 0.99)), (50.0, 99.0));
        assert_eq!(quantile_ms(&[ms(7)], 0.99), 7.0);
        let samples = [
            Sample { ttft: Some(ms(10)), gaps: vec![ms(2), ms(4)], tokens: 3, ..Sample::default() },
            Sample { ttft: Some(ms(30)), gaps: vec![ms(6)], tokens: 2, ..Sample::default() },
            Sample { error: Some("refused".into()), ..Sample::default() },
            Sample { ttft: Some(ms(1)), tokens: 1, cancelled: true, ..Sample::default() },
        ];
        let row = summarize(2, &samples, 0.5);
        assert_eq!((row.requests, row.errors, row.cancelled, row.output_tokens), (4, 1, 1, 5));
        assert_eq!((row.output_tok_s, row.requests_s), (10.0, 4.0));
        assert_eq!((row.ttft_p50_ms, row.itl_p50_ms, row.itl_p99_ms), (10.0, 4.0, 6.0));
    }

    #[test]
    fn prompts_differ_and_have_about_the_asked_length() {
        assert_ne!(prompt(1, 1, 64), prompt(1, 2, 64));
        assert_ne!(prompt(1, 1, 64), prompt(2, 1, 64));
        assert_eq!(prompt(1, 3, 64).split(' ').count(), 64);
    }
}
