//! The server on the tiny Qwen 2 / Qwen 3 GGUF files (`fixtures/model/tiny`), which carry no chat
//! template: chat requests are prompted with the built-in ChatML, so the prompt's token count is
//! that of the built-in rendering of the request's messages. (One short message: the fixtures'
//! 48-piece vocabulary spells ChatML's markers letter by letter, and their context is 128.)

mod common;

use common::{post, start_with};
use minerva_generate::{ChatTemplate, Message, Tokenizer};
use minerva_model::{CpuBackend, Model};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_requests_use_the_builtin_chatml() {
    for arch in ["qwen2", "qwen3"] {
        let path = common::root().join("fixtures/model/tiny").join(arch).join("model.gguf");
        let tok = Tokenizer::from_gguf(&minerva_gguf::Gguf::open(&path).unwrap()).unwrap();
        let messages = [Message::new("user", "the fox")];
        let text = ChatTemplate::from_tokenizer(&tok).unwrap().render(&messages, true, None).unwrap();
        let want = tok.encode(&text, false).unwrap().len();
        let load = move || {
            let tokenizer = Tokenizer::from_gguf(&minerva_gguf::Gguf::open(&path).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
            let model = Model::load(&path, CpuBackend::new(Some(2)).unwrap()).map_err(|e| e.to_string())?;
            Ok((model, tokenizer))
        };
        let server = start_with(
            load,
            minerva_server::EngineConfig { ctx_size: Some(128), ..common::engine_config(1) },
            common::quiet(),
        )
        .await;
        let body: Vec<_> = messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect();
        let request = json!({"messages": body, "temperature": 0, "max_tokens": 2});
        let (status, _, r) = post(&server.url, "/v1/chat/completions", &request).await;
        assert_eq!(status, 200, "{arch}: {r}");
        assert_eq!(r["usage"]["prompt_tokens"].as_u64(), Some(want as u64), "{arch}: {r}");
        server.shutdown().await.unwrap();
    }
}

/// The server on the tiny `arch` GGUF (its whole 128-token context), `parallel` slots.
async fn start_tiny(arch: &str, parallel: usize) -> common::TestServer {
    let path = common::root().join("fixtures/model/tiny").join(arch).join("model.gguf");
    let load = move || {
        let tokenizer = Tokenizer::from_gguf(&minerva_gguf::Gguf::open(&path).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let model = Model::load(&path, CpuBackend::new(Some(2)).unwrap()).map_err(|e| e.to_string())?;
        Ok((model, tokenizer))
    };
    let engine = minerva_server::EngineConfig { ctx_size: Some(128), ..common::engine_config(parallel) };
    start_with(load, engine, common::quiet()).await
}

/// A random-weight model under a grammar, the strongest test of the mask: the tiny Qwen 2 / 3
/// (letters, digits and a space in their vocabulary), sampled at temperature 1.5 with several
/// seeds, answers every regular expression, choice list and Lark grammar exactly, and ends
/// because the grammar is complete (or may end), never by running out of tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_weights_under_a_grammar_give_valid_output() {
    let word = regex::Regex::new("^[a-z]{2,6}( [0-9]{1,3}){1,2}$").unwrap();
    let lark = regex::Regex::new("^(the|fox)( (the|fox)){0,3} [0-9]$").unwrap();
    for arch in ["qwen2", "qwen3"] {
        let server = start_tiny(arch, 2).await;
        for seed in 0..4 {
            let ask = |extra: Value| {
                let mut body = json!({"prompt": "the fox", "max_tokens": 24, "temperature": 1.5, "seed": seed});
                body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
                body
            };
            for (extra, valid) in [
                (json!({"guided_regex": "[a-z]{2,6}( [0-9]{1,3}){1,2}"}), &word),
                (json!({"grammar": "start: w (\" \" w)~0..3 \" \" /[0-9]/\nw: \"the\" | \"fox\""}), &lark),
            ] {
                let (status, _, r) = post(&server.url, "/v1/completions", &ask(extra.clone())).await;
                assert_eq!(status, 200, "{arch}: {r}");
                let text = r["choices"][0]["text"].as_str().unwrap();
                assert!(valid.is_match(text), "{arch} seed {seed} {extra}: {text:?}");
                assert_eq!(r["choices"][0]["finish_reason"], "stop", "{arch}: {r}");
            }
            let (_, _, r) =
                post(&server.url, "/v1/completions", &ask(json!({"guided_choice": ["brown dog", "the fox 42"]}))).await;
            let text = r["choices"][0]["text"].as_str().unwrap();
            assert!(["brown dog", "the fox 42"].contains(&text), "{arch}: {r}");
        }
        server.shutdown().await.unwrap();
    }
}

/// A failure in one sequence ends its own request only: on the tiny Qwen 2, a grammar whose
/// fifth word would need a character the vocabulary lacks (`!`) fails mid-generation, whole or
/// streamed (an error event, then `[DONE]`), while a greedy stream started before them and still
/// decoding when they fail finishes with the text it gives alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_that_fails_ends_only_its_own_request() {
    use futures_util::StreamExt;
    let server = start_tiny("qwen2", 3).await;
    // End of sequence banned, so the healthy request runs to its limit.
    let healthy = json!({"prompt": "the fox", "max_tokens": 120, "temperature": 0, "logit_bias": {"2": -100}});
    let (_, _, alone) = post(&server.url, "/v1/completions", &healthy).await;
    let doomed = json!({"prompt": "the fox", "max_tokens": 48, "temperature": 0, "grammar":
                        "start: w (\" \" w)~0..3 \"!\"\nw: \"the\" | \"fox\""});
    // Once alone first, so the grammar compiler is built before the timed part.
    let (status, _, _) = post(&server.url, "/v1/completions", &doomed).await;
    assert_eq!(status, 500);
    // The timing is the machine's: tried until one attempt had the failures land while the healthy
    // stream was decoding (every attempt must keep its text). On a 2-core machine running this
    // file's other tests beside it, about one attempt in seven overlaps (the first overlap came
    // at attempts 0–28 in 22 runs; 8 attempts failed a CI run): 64 leave a chance of about 1e-4.
    let mut overlapped = false;
    for attempt in 0..64 {
        let mut streamed = healthy.clone();
        streamed["stream"] = json!(true);
        // The healthy stream is read on its own task, which notes when its last chunk arrived.
        let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
        let url = server.url.clone();
        let reader = tokio::spawn(async move {
            let response = common::client().post(format!("{url}/v1/completions")).json(&streamed).send().await.unwrap();
            let mut body = response.bytes_stream();
            let mut text = String::new();
            let mut started_tx = Some(started_tx);
            while let Some(chunk) = body.next().await {
                text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
                if let Some(tx) = started_tx.take() {
                    let _ = tx.send(());
                }
            }
            (text, std::time::Instant::now())
        });
        started.await.unwrap();
        // It is decoding: now the failing requests.
        let mut doomed_stream = doomed.clone();
        doomed_stream["stream"] = json!(true);
        let (a, c) = tokio::join!(
            post(&server.url, "/v1/completions", &doomed),
            common::post_stream(&server.url, "/v1/completions", &doomed_stream),
        );
        let failed_at = std::time::Instant::now();
        let (status, _, failed) = a;
        assert_eq!(status, 500, "{failed}");
        assert!(failed["error"]["message"].as_str().unwrap().contains("no token of the vocabulary"), "{failed}");
        assert_eq!(c.last().map(String::as_str), Some("[DONE]"));
        let error: Value = serde_json::from_str(&c[c.len() - 2]).unwrap();
        assert!(error["error"]["message"].as_str().unwrap().contains("no token of the vocabulary"), "{c:?}");
        let (text, healthy_done) = reader.await.unwrap();
        overlapped = healthy_done > failed_at;
        let events: Vec<String> = text.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_string).collect();
        let together: String = common::chunks(&events)
            .iter()
            .filter_map(|c| c["choices"][0]["text"].as_str().map(str::to_string))
            .collect();
        assert_eq!(together, alone["choices"][0]["text"].as_str().unwrap(), "the healthy request changed");
        if overlapped {
            eprintln!("the failures landed while the healthy stream decoded at attempt {attempt}");
            break;
        }
    }
    assert!(overlapped, "in 64 attempts the healthy stream always ended before the failures");
    server.shutdown().await.unwrap();
}
