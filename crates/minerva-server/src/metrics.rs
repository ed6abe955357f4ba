//! `GET /metrics`: Prometheus counters, gauges and histograms of the server and its engine.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The label of [`Metrics::requests`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// HTTP status code.
    pub status: u16,
}

/// Every metric, updated by the handlers and the engine thread.
pub struct Metrics {
    registry: Registry,
    /// The names Kubernetes' Gateway API Inference Extension and llm-d route on (vLLM's).
    vllm_registry: Registry,
    /// Fraction (0–1) of the KV cache's positions that running sequences hold.
    pub kv_cache_usage: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// HTTP requests answered, by status.
    pub requests: Family<RequestLabels, Counter>,
    /// Prompt tokens admitted.
    pub prompt_tokens: Counter,
    /// Tokens generated.
    pub completion_tokens: Counter,
    /// Requests ended because their client went away.
    pub cancelled: Counter,
    /// Sequences preempted (their KV blocks freed, to run again) when the pool ran out.
    pub preemptions: Counter,
    /// Tokens drafted for speculative decoding and run through the model to be verified.
    pub spec_drafted: Counter,
    /// Drafted tokens the model kept.
    pub spec_accepted: Counter,
    /// Requests that started from a prompt prefix kept in the KV cache.
    pub prompt_cache_hits: Counter,
    /// Prompt tokens not run again thanks to a cached prefix.
    pub prompt_cached_tokens: Counter,
    /// Sequences in KV-cache slots.
    pub running: Gauge,
    /// Requests waiting for a slot.
    pub queued: Gauge,
    /// Sequences per forward step.
    pub batch_sequences: Histogram,
    /// Tokens per forward step.
    pub batch_tokens: Histogram,
    /// From a request's arrival to its first token.
    pub time_to_first_token: Histogram,
    /// Between consecutive tokens of a sequence.
    pub inter_token_latency: Histogram,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Fresh metrics, all zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("minerva");
        let m = Metrics {
            requests: Family::default(),
            prompt_tokens: Counter::default(),
            completion_tokens: Counter::default(),
            cancelled: Counter::default(),
            preemptions: Counter::default(),
            spec_drafted: Counter::default(),
            spec_accepted: Counter::default(),
            prompt_cache_hits: Counter::default(),
            prompt_cached_tokens: Counter::default(),
            running: Gauge::default(),
            queued: Gauge::default(),
            batch_sequences: Histogram::new(exponential_buckets(1.0, 2.0, 8)),
            batch_tokens: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            // 1 ms … 65 s.
            time_to_first_token: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            // 1 ms … 4 s.
            inter_token_latency: Histogram::new(exponential_buckets(0.001, 2.0, 13)),
            registry: Registry::default(),
            vllm_registry: Registry::default(),
            kv_cache_usage: Gauge::default(),
        };
        let mut vllm_registry = Registry::default();
        vllm_registry.register("vllm:num_requests_running", "Requests running (as vLLM names it)", m.running.clone());
        vllm_registry.register("vllm:num_requests_waiting", "Requests waiting (as vLLM names it)", m.queued.clone());
        vllm_registry.register(
            "vllm:kv_cache_usage_perc",
            "Fraction of the KV cache in use, 0 to 1 (as vLLM names it)",
            m.kv_cache_usage.clone(),
        );
        registry.register("http_requests", "HTTP requests answered, by status", m.requests.clone());
        registry.register("prompt_tokens", "Prompt tokens admitted", m.prompt_tokens.clone());
        registry.register("completion_tokens", "Tokens generated", m.completion_tokens.clone());
        registry.register("cancelled_requests", "Requests ended because the client went away", m.cancelled.clone());
        registry.register(
            "preemptions",
            "Sequences preempted (KV blocks freed, run again) when the pool ran out",
            m.preemptions.clone(),
        );
        registry.register(
            "spec_drafted_tokens",
            "Tokens drafted for speculative decoding and verified by the model",
            m.spec_drafted.clone(),
        );
        registry.register("spec_accepted_tokens", "Drafted tokens the model kept", m.spec_accepted.clone());
        registry.register(
            "prompt_cache_hits",
            "Requests that reused a cached prompt prefix",
            m.prompt_cache_hits.clone(),
        );
        registry.register(
            "prompt_cached_tokens",
            "Prompt tokens not run again thanks to a cached prefix",
            m.prompt_cached_tokens.clone(),
        );
        registry.register("running_sequences", "Sequences in KV-cache slots", m.running.clone());
        registry.register("queued_requests", "Requests waiting for a slot", m.queued.clone());
        registry.register("batch_sequences", "Sequences per forward step", m.batch_sequences.clone());
        registry.register("batch_tokens", "Tokens per forward step", m.batch_tokens.clone());
        registry.register(
            "time_to_first_token_seconds",
            "From a request's arrival to its first token",
            m.time_to_first_token.clone(),
        );
        registry.register(
            "inter_token_latency_seconds",
            "Between consecutive tokens of a sequence",
            m.inter_token_latency.clone(),
        );
        registry.register(
            "kv_cache_usage_ratio",
            "Fraction of the KV cache's positions running sequences hold",
            m.kv_cache_usage.clone(),
        );
        Metrics { registry, vllm_registry, ..m }
    }

    /// Counts one answered request.
    pub fn count_request(&self, status: u16) {
        self.requests.get_or_create(&RequestLabels { status }).inc();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_registry(&mut out, &self.registry);
        let _ = prometheus_client::encoding::text::encode_registry(&mut out, &self.vllm_registry);
        let _ = prometheus_client::encoding::text::encode_eof(&mut out);
        out
    }
}
