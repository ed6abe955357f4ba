//! Greedy generation on SmolLM2 equals transformers' greedy continuation
//! (`fixtures/model/make_greedy_reference.py`: 32 tokens after each of the 6 reference prompts),
//! and seeded sampling is reproducible.

use std::path::PathBuf;

use minerva_generate::{Event, FinishReason, GenerateOptions, Sampler, SamplingParams, Session, Tokenizer};
use minerva_model::{CpuBackend, Model};

/// Default path: fewest greedy tokens (of 6 × 32) in the prefixes equal to transformers'.
const GREEDY_PREFIX_TOTAL: usize = 192;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn model_path() -> PathBuf {
    root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn load(f32_activations: bool) -> (Model<CpuBackend>, Tokenizer) {
    let backend = CpuBackend::new(None).unwrap().with_f32_activations(f32_activations);
    let model = Model::load(model_path(), backend).unwrap();
    let tok = Tokenizer::from_gguf(&minerva_gguf::Gguf::open(model_path()).unwrap()).unwrap();
    (model, tok)
}

fn reference() -> Vec<(Vec<u32>, Vec<u32>)> {
    let text = std::fs::read_to_string(root().join("fixtures/model/greedy_reference.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |a: &serde_json::Value| a.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
    v["prompts"].as_array().unwrap().iter().map(|p| (ids(&p["tokens"]), ids(&p["greedy"]))).collect()
}

/// Greedy ids after each reference prompt; a fresh session per prompt.
fn greedy_runs(model: &Model<CpuBackend>, tok: &Tokenizer, steps: usize) -> Vec<Vec<u32>> {
    let mut session = Session::new(model, tok, 256).unwrap();
    reference()
        .iter()
        .map(|(prompt, _)| {
            session.reset();
            let options = GenerateOptions { max_tokens: steps, ignore_eos: true, ..GenerateOptions::default() };
            let sampler = Sampler::new(SamplingParams::default()).unwrap();
            let summary = session.generate_with(prompt, options, sampler, |_| {}).unwrap();
            assert_eq!(summary.finish, FinishReason::MaxTokens);
            summary.tokens
        })
        .collect()
}

#[test]
fn plain_greedy_takes_the_argmax_path_with_the_same_tokens() {
    // A zero logit bias changes no logit but takes the sampler's path (full logits, host argmax):
    // both paths must give the same tokens.
    let (model, tok) = load(false);
    let (prompt, _) = &reference()[0];
    let run = |params: SamplingParams| {
        assert_eq!(params.is_plain_greedy(), params.logit_bias.is_empty());
        let mut session = Session::new(&model, &tok, 64).unwrap();
        let options = GenerateOptions { max_tokens: 16, ignore_eos: true, ..GenerateOptions::default() };
        session.generate_with(prompt, options, Sampler::new(params).unwrap(), |_| {}).unwrap().tokens
    };
    let plain = run(SamplingParams::default());
    let sampled = run(SamplingParams { logit_bias: vec![(0, 0.0)], ..SamplingParams::default() });
    assert_eq!(plain.len(), 16);
    assert_eq!(plain, sampled);
}

#[test]
fn greedy_matches_transformers_with_f32_activations() {
    let (model, tok) = load(true);
    let reference = reference();
    assert_eq!(reference.len(), 6);
    let ours = greedy_runs(&model, &tok, 32);
    for (i, ((_, want), got)) in reference.iter().zip(&ours).enumerate() {
        assert_eq!(want.len(), 32);
        assert_eq!(got, want, "prompt {i}: ours {:?} vs {:?}", tok.decode(got, false), tok.decode(want, false));
    }
}

#[test]
fn default_fast_path_agreement_is_reported() {
    // The default path quantizes activations to i16 per 32 values; it is not bit-exact, so this
    // counts the matching prefix per prompt (printed with --nocapture) and requires the total
    // (bound and measured figure: docs/model.md, "Tolerances").
    let (model, tok) = load(false);
    let ours = greedy_runs(&model, &tok, 32);
    let mut total = 0;
    for (i, ((_, want), got)) in reference().iter().zip(&ours).enumerate() {
        let prefix = want.iter().zip(got).take_while(|(a, b)| a == b).count();
        println!("prompt {i}: {prefix}/32 greedy tokens equal to transformers");
        assert!(prefix >= 1, "prompt {i}: first token differs");
        total += prefix;
    }
    println!("default (i16 activations) path: {total}/192 tokens in the matching prefixes");
    assert!(total >= GREEDY_PREFIX_TOTAL, "{total}/192 greedy tokens equal to transformers");
}

#[test]
fn seeded_sampling_is_reproducible_and_streams_text() {
    let (model, tok) = load(false);
    let prompt = tok.encode("<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n", true).unwrap();
    let run = |seed: u64| -> (String, Vec<u32>) {
        let mut session = Session::new(&model, &tok, 128).unwrap();
        let params = SamplingParams {
            temperature: 0.9,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            seed: Some(seed),
            ..Default::default()
        };
        let options = GenerateOptions { max_tokens: 24, ..GenerateOptions::default() };
        let mut text = String::new();
        let mut summary = None;
        for event in session.generate(&prompt, options, Sampler::new(params).unwrap()).unwrap() {
            match event.unwrap() {
                Event::Text(t) => text.push_str(&t),
                Event::Reasoning(r) => panic!("reasoning {r:?} from a model that does not speak Harmony"),
                Event::Done(s) => summary = Some(s),
            }
        }
        let s = summary.unwrap();
        assert_eq!(s.prompt_tokens, prompt.len());
        assert!(s.completion_tokens >= 1 && s.completion_tokens <= 24);
        assert!(s.prefill_tokens_per_s > 0.0);
        (text, s.tokens)
    };
    let (a, ids_a) = run(1234);
    let (b, ids_b) = run(1234);
    assert_eq!(ids_a, ids_b);
    assert_eq!(a, b);
    assert!(!a.is_empty());
    // The streamed text is the decoded tokens.
    assert_eq!(a, tok.decode(&ids_a, true).unwrap());
}

#[test]
fn context_limits() {
    let (model, tok) = load(false);
    let prompt: Vec<u32> = tok.encode("one two three four five six seven eight nine ten", false).unwrap();
    assert!(prompt.len() >= 10);
    let mut session = Session::new(&model, &tok, 8).unwrap();
    // Too long: an error, unless truncation is asked for.
    let greedy = || Sampler::new(SamplingParams::default()).unwrap();
    let err = session.generate(&prompt, GenerateOptions::default(), greedy()).err().unwrap().to_string();
    assert!(err.contains("context holds 8"), "{err}");
    let options = GenerateOptions { truncate_prompt: true, ignore_eos: true, ..GenerateOptions::default() };
    let s = session.generate_with(&prompt, options, greedy(), |_| {}).unwrap();
    assert_eq!(s.prompt_tokens, 6);
    // Generation stops when the context is full: 6 prompt + 2 generated tokens fill the 8
    // positions, and the logits of the last one still give a third token.
    assert_eq!(s.finish, FinishReason::ContextEnd);
    assert_eq!(s.finish.as_str(), "length");
    assert_eq!(s.completion_tokens, 3);
    // A context larger than the model's trained length is refused.
    assert!(Session::new(&model, &tok, 1 << 20).is_err());
}

#[test]
fn stop_strings_end_generation_unprinted_and_the_cache_prefix_is_reused() {
    let (model, tok) = load(false);
    let (prompt, _) = reference().swap_remove(0);
    let mut session = Session::new(&model, &tok, 256).unwrap();
    let greedy = || Sampler::new(SamplingParams::default()).unwrap();
    let options = GenerateOptions { max_tokens: 32, ignore_eos: true, ..Default::default() };
    let mut full = String::new();
    session.generate_with(&prompt, options.clone(), greedy(), |t| full.push_str(t)).unwrap();
    // A stop string from the middle of that continuation.
    let cut = full.char_indices().map(|(i, _)| i).nth(full.chars().count() / 2).unwrap();
    let stop: String = full[cut..].chars().take(4).collect();
    let options = GenerateOptions { stop: vec![stop.clone()], ..options };
    let mut text = String::new();
    let s = session.generate_with(&prompt, options, greedy(), |t| text.push_str(t)).unwrap();
    assert_eq!(s.finish, FinishReason::StopString);
    assert_eq!(text, full[..full.find(&stop).unwrap()]);
    // Same prompt again: only its last token was run, the rest came from the cache.
    assert_eq!(s.prefilled_tokens, 1);
}
