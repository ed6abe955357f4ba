//! A step that panics or fails ends the requests in it with a 500 and the server keeps serving.

mod common;

use std::sync::Arc;

use common::{post, start_with};
use minerva_generate::Tokenizer;
use minerva_model::{
    Backend, Batch, CacheShape, CpuBackend, CpuCache, CpuTensor, CpuWeight, Mask, Model, MoeExperts, MoeParams,
    RopeConfig, WeightSource,
};
use serde_json::json;

/// The CPU backend, except that embedding token [`POISON`] panics.
struct PanickyBackend(CpuBackend);

const POISON: u32 = 4242;

impl Backend for PanickyBackend {
    type Tensor = CpuTensor;
    type Weight = CpuWeight;
    type Cache = CpuCache;

    fn weight(&self, source: WeightSource) -> minerva_model::Result<CpuWeight> {
        self.0.weight(source)
    }
    fn new_cache(&self, shape: CacheShape) -> minerva_model::Result<CpuCache> {
        self.0.new_cache(shape)
    }
    fn set_blocks(&self, cache: &mut CpuCache, slot: usize, blocks: &[u32]) -> minerva_model::Result<()> {
        self.0.set_blocks(cache, slot, blocks)
    }
    fn copy_blocks(&self, cache: &mut CpuCache, pairs: &[(u32, u32)]) -> minerva_model::Result<()> {
        self.0.copy_blocks(cache, pairs)
    }
    fn embed(&self, table: &CpuWeight, tokens: &[u32]) -> minerva_model::Result<CpuTensor> {
        assert!(!tokens.contains(&POISON), "poisoned token");
        self.0.embed(table, tokens)
    }
    fn rms_norm(&self, x: &CpuTensor, w: &CpuWeight, eps: f32) -> minerva_model::Result<CpuTensor> {
        self.0.rms_norm(x, w, eps)
    }
    fn matmul_q(&self, w: &CpuWeight, x: &CpuTensor) -> minerva_model::Result<CpuTensor> {
        self.0.matmul_q(w, x)
    }
    fn rope(
        &self,
        x: &mut CpuTensor,
        n_heads: usize,
        positions: &[u32],
        rope: &RopeConfig,
    ) -> minerva_model::Result<()> {
        self.0.rope(x, n_heads, positions, rope)
    }
    fn attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        cache: &mut CpuCache,
        layer: usize,
        batch: &Batch,
        mask: Mask,
    ) -> minerva_model::Result<CpuTensor> {
        self.0.attention(q, k, v, cache, layer, batch, mask)
    }
    fn add(&self, x: &mut CpuTensor, y: &CpuTensor) -> minerva_model::Result<()> {
        self.0.add(x, y)
    }
    fn swiglu(&self, gate: &CpuTensor, up: &CpuTensor) -> minerva_model::Result<CpuTensor> {
        self.0.swiglu(gate, up)
    }
    fn logits(&self, x: &CpuTensor, head: &CpuWeight, rows: &[usize]) -> minerva_model::Result<Vec<f32>> {
        self.0.logits(x, head, rows)
    }
    fn read_rows(&self, x: &CpuTensor, rows: &[usize]) -> minerva_model::Result<Vec<f32>> {
        self.0.read_rows(x, rows)
    }
    fn rms_norm_heads(&self, x: &mut CpuTensor, n_heads: usize, w: &CpuWeight, eps: f32) -> minerva_model::Result<()> {
        self.0.rms_norm_heads(x, n_heads, w, eps)
    }
    fn add_bias(&self, x: &mut CpuTensor, bias: &CpuWeight) -> minerva_model::Result<()> {
        self.0.add_bias(x, bias)
    }
    fn scale(&self, x: &mut CpuTensor, factor: f32) -> minerva_model::Result<()> {
        self.0.scale(x, factor)
    }
    fn geglu(&self, gate: &CpuTensor, up: &CpuTensor) -> minerva_model::Result<CpuTensor> {
        self.0.geglu(gate, up)
    }
    #[allow(clippy::too_many_arguments)]
    fn attention_with_sinks(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        cache: &mut CpuCache,
        layer: usize,
        batch: &Batch,
        mask: Mask,
        sinks: &CpuWeight,
    ) -> minerva_model::Result<CpuTensor> {
        self.0.attention_with_sinks(q, k, v, cache, layer, batch, mask, sinks)
    }
    fn moe(
        &self,
        x: &CpuTensor,
        router_logits: &CpuTensor,
        experts: &MoeExperts<'_, CpuWeight>,
        params: &MoeParams,
    ) -> minerva_model::Result<CpuTensor> {
        self.0.moe(x, router_logits, experts, params)
    }
}

/// SmolLM2 on the [`PanickyBackend`].
fn panicky_smollm2() -> Result<(Model<PanickyBackend>, Tokenizer), String> {
    let path = common::real_model();
    let gguf = minerva_gguf::Gguf::open(&path).map_err(|e| e.to_string())?;
    let tokenizer = Tokenizer::from_gguf(&gguf).map_err(|e| e.to_string())?;
    let backend = PanickyBackend(CpuBackend::new(Some(2)).map_err(|e| e.to_string())?);
    let model = Model::from_gguf(Arc::new(gguf), backend).map_err(|e| e.to_string())?;
    Ok((model, tokenizer))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_step_is_a_500_and_the_server_goes_on() {
    let server = start_with(panicky_smollm2, common::engine_config(2), common::quiet()).await;
    let (status, _, e) =
        post(&server.url, "/v1/completions", &json!({"prompt": [1, POISON, 2], "max_tokens": 3})).await;
    assert_eq!(status, 500, "{e}");
    assert_eq!(e["error"]["type"], "server_error");
    assert!(e["error"]["message"].as_str().unwrap().contains("poisoned token"), "{e}");
    let (status, _, ok) = post(&server.url, "/v1/completions", &json!({"prompt": "Hello", "max_tokens": 3})).await;
    assert_eq!(status, 200, "{ok}");
    assert_eq!(ok["usage"]["completion_tokens"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_the_stream_started_is_an_error_event_then_done() {
    let server = start_with(panicky_smollm2, common::engine_config(2), common::quiet()).await;
    let body = json!({"prompt": [1, POISON, 2], "max_tokens": 3, "stream": true});
    let events = common::post_stream(&server.url, "/v1/completions", &body).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    let error: serde_json::Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(error["error"]["type"], "server_error", "{events:?}");
}
