//! `/v1/embeddings` over real HTTP: against llama.cpp's `llama-embedding` (b11312) on SmolLM2
//! with each pooling, against an exact float64 computation on Gemma 3 (where llama.cpp's 8-bit
//! activations leave it about 1e-3 of cosine from exact), and the request's forms and mistakes.
//! References: fixtures/embeddings/make_llama_embedding_reference.py and
//! make_gemma3_f64_reference.py.

mod common;

use std::sync::Arc;

use base64::Engine as _;
use common::{client, engine_config, post, post_stream, quiet, root, smollm2, start_with};
use minerva_generate::Tokenizer;
use minerva_gguf::DType;
use minerva_model::{CpuBackend, Model, Pooling};
use minerva_server::ServerConfig;
use serde_json::{Value, json};

fn reference(file: &str) -> Value {
    let text = std::fs::read_to_string(root().join("fixtures/embeddings").join(file)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn vectors(v: &Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|row| row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// The vectors and `usage.prompt_tokens` of `body`.
async fn embed(url: &str, body: &Value) -> (Vec<Vec<f32>>, u64) {
    let (status, _, r) = post(url, "/v1/embeddings", body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["object"], "list");
    let data = r["data"].as_array().unwrap();
    for (i, d) in data.iter().enumerate() {
        assert_eq!((d["object"].as_str(), d["index"].as_u64()), (Some("embedding"), Some(i as u64)));
    }
    let vectors = data.iter().map(|d| d["embedding"].clone()).collect::<Vec<_>>();
    (vectors_of(&vectors), r["usage"]["prompt_tokens"].as_u64().unwrap())
}

fn vectors_of(values: &[Value]) -> Vec<Vec<f32>> {
    vectors(&Value::Array(values.to_vec()))
}

/// Each cosine of `got` against `want`, checked against `floor`; returns the smallest.
fn check(what: &str, got: &[Vec<f32>], want: &[Vec<f32>], floor: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}");
    let cosines: Vec<f64> = got.iter().zip(want).map(|(g, w)| cosine(g, w)).collect();
    for (i, (c, g)) in cosines.iter().zip(got).enumerate() {
        let norm = g.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{what} input {i}: norm {norm}");
        assert!(*c >= floor, "{what} input {i}: cosine {c:.6} < {floor} ({cosines:?})");
    }
    cosines.into_iter().fold(1.0, f64::min)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smollm2_embeddings_match_llama_cpp_with_every_pooling() {
    let reference = reference("llama_cpp.json");
    let inputs = reference["inputs"].clone();
    for pooling in [Pooling::Mean, Pooling::Last, Pooling::Cls] {
        let config = ServerConfig { pooling: Some(pooling), ..quiet() };
        let server = start_with(smollm2(), engine_config(2), config).await;
        let (got, tokens) = embed(&server.url, &json!({"input": inputs})).await;
        let want = vectors(&reference["models"]["smollm2"]["poolings"][pooling.as_str()]);
        check(&format!("smollm2 {pooling}"), &got, &want, 0.999);
        // The same texts' ids, as /tokenize gives them with the model's specials.
        let mut expected = 0;
        for text in inputs.as_array().unwrap() {
            let (_, _, t) = post(&server.url, "/tokenize", &json!({"content": text, "add_special": true})).await;
            expected += t["tokens"].as_array().unwrap().len() as u64;
        }
        assert_eq!(tokens, expected);
        server.shutdown().await.unwrap();
    }
}

fn gemma(f32_activations: bool) -> impl FnOnce() -> Result<(Model<CpuBackend>, Tokenizer), String> + Send + 'static {
    move || {
        let path = root().join("models/gemma-3-270m-q4_k_m.gguf");
        let gguf = minerva_gguf::Gguf::open(&path).map_err(|e| e.to_string())?;
        let tokenizer = Tokenizer::from_gguf(&gguf).map_err(|e| e.to_string())?;
        let mut backend = CpuBackend::new(Some(2)).map_err(|e| e.to_string())?.with_f32_activations(f32_activations);
        if f32_activations {
            backend = backend.with_kv_dtype(DType::F32).map_err(|e| e.to_string())?;
        }
        let model = Model::from_gguf(Arc::new(gguf), backend).map_err(|e| e.to_string())?;
        Ok((model, tokenizer))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemma3_embeddings_are_exact_in_f32_and_near_llama_cpp() {
    let exact = reference("gemma3_f64.json");
    let llama = reference("llama_cpp.json");
    let ids = exact["ids"].clone();
    let expected_tokens: u64 = ids.as_array().unwrap().iter().map(|l| l.as_array().unwrap().len() as u64).sum();
    // (Cls pools Gemma's BOS, the same for every input; SmolLM2 checks it. Each server loads
    // the 262k-token vocabulary, so two poolings in f32 and one on the default path.)
    for (pooling, f32_activations) in [(Pooling::Mean, true), (Pooling::Last, true), (Pooling::Mean, false)] {
        let want = vectors(&exact["poolings"][pooling.as_str()]);
        let from_llama = vectors(&llama["models"]["gemma3"]["poolings"][pooling.as_str()]);
        let config = ServerConfig { pooling: Some(pooling), ..quiet() };
        let server = start_with(gemma(f32_activations), engine_config(1), config).await;
        let (got, tokens) = embed(&server.url, &json!({"input": exact["inputs"]})).await;
        assert_eq!(tokens, expected_tokens, "the texts tokenize to the stored ids");
        if f32_activations {
            // f32 activations and KV: the float64 computation to 5 nines. llama.cpp is itself
            // 0.9992–0.9996 from it with mean pooling and 0.9982–0.9988 with last-token pooling
            // (measured), so it is held to 0.999 and 0.998.
            check(&format!("gemma3 {pooling} f32 vs exact"), &got, &want, 0.99999);
            let floor = if pooling == Pooling::Mean { 0.999 } else { 0.998 };
            check(&format!("gemma3 {pooling} f32 vs llama.cpp"), &got, &from_llama, floor);
        } else {
            // The default (16-bit activation) path: 0.9995–0.9998 of exact for mean, measured.
            check(&format!("gemma3 {pooling} default vs exact"), &got, &want, 0.999);
        }
        // Token ids in, the same vectors out.
        let (by_ids, _) = embed(&server.url, &json!({"input": ids})).await;
        assert_eq!(by_ids, got);
        server.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_input_form_gives_the_same_vectors_beside_a_running_generation() {
    let server = start_with(smollm2(), engine_config(2), quiet()).await;
    let url = &server.url;
    let texts = ["The cat sat on the mat.", "A longer sentence about retrieval and vectors.", "Hi"];
    let (batched, _) = embed(url, &json!({"input": texts})).await;
    // One at a time, each the same as in the batch, to the bit (rows do not affect each other).
    for (i, text) in texts.iter().enumerate() {
        let (alone, _) = embed(url, &json!({"input": text, "encoding_format": "float"})).await;
        assert_eq!(alone[0], batched[i], "input {i}");
    }
    // base64: the same f32 values, little-endian.
    let (status, _, r) = post(url, "/v1/embeddings", &json!({"input": texts, "encoding_format": "base64"})).await;
    assert_eq!(status, 200);
    for (i, d) in r["data"].as_array().unwrap().iter().enumerate() {
        let bytes = base64::engine::general_purpose::STANDARD.decode(d["embedding"].as_str().unwrap()).unwrap();
        let values: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(values, batched[i]);
    }
    // While a chat answer streams, embeddings run between its steps and the answer is the one it
    // gives alone.
    let chat = json!({"messages": [{"role": "user", "content": "Count from one to twenty."}], "temperature": 0,
                      "max_tokens": 48, "stream": true});
    let alone = post_stream(url, "/v1/chat/completions", &chat).await;
    let streaming = tokio::spawn({
        let (url, chat) = (url.clone(), chat.clone());
        async move { post_stream(&url, "/v1/chat/completions", &chat).await }
    });
    let mut during = Vec::new();
    for _ in 0..4 {
        during.push(embed(url, &json!({"input": texts})).await.0);
    }
    let beside = streaming.await.unwrap();
    let text = |events: &[String]| -> String {
        common::chunks(events)
            .iter()
            .filter_map(|c| c["choices"].get(0)?["delta"]["content"].as_str().map(String::from))
            .collect()
    };
    assert_eq!(text(&beside), text(&alone));
    assert!(during.iter().all(|d| *d == batched));
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_embedding_requests_are_400s_naming_the_field() {
    let config = ServerConfig { ..quiet() };
    let server =
        start_with(smollm2(), minerva_server::EngineConfig { ctx_size: Some(64), ..engine_config(1) }, config).await;
    let long = "word ".repeat(100);
    let cases = [
        (json!({"input": []}), "input", None),
        (json!({"input": ["fine", ""]}), "input[1]", None),
        (json!({"input": long}), "input", Some("context_length_exceeded")),
        (json!({"input": ["ok", long]}), "input[1]", Some("context_length_exceeded")),
        (json!({"input": [[1, 2], [99999999]]}), "input[1]", None),
        (json!({"input": "x", "encoding_format": "hex"}), "encoding_format", None),
        (json!({"input": "x", "dimensions": 128}), "dimensions", Some("unsupported_parameter")),
    ];
    for (body, param, code) in cases {
        let (status, _, err) = post(&server.url, "/v1/embeddings", &body).await;
        assert_eq!((status, err["error"]["param"].as_str()), (400, Some(param)), "{body}: {err}");
        assert_eq!(err["error"]["code"].as_str(), code, "{body}: {err}");
    }
    let (status, _, _) = post(&server.url, "/v1/embeddings", &json!({"input": "x", "dimensions": 576})).await;
    assert_eq!(status, 200, "the model's own size is accepted");
    let r = client().post(format!("{}/v1/embeddings", server.url)).body("{\"input\": 3}").send().await.unwrap();
    assert_eq!(r.status(), 400);
    server.shutdown().await.unwrap();
}
