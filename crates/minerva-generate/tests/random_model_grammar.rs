//! A model with random weights, sampled hot, under a grammar: whatever its logits say, no answer
//! leaves the grammar — the mask alone keeps it inside. The tiny random GPT-OSS
//! (fixtures/gpt_oss/hf) with its 320-token word-level vocabulary, run as a plain completion.
//!
//! That vocabulary cannot spell every text (its words carry their leading space, and a lone
//! `" "` token exists), so a walk can take a token whose bytes fit the grammar and then find no
//! token to go on with: such a walk ends with the engine's named error, never with text outside
//! the grammar. Byte-level and byte-fallback vocabularies spell every byte and have no such ends.

mod common;

use minerva_generate::{FinishReason, GenerateOptions, Grammar, GrammarCompiler, Sampler, SamplingParams, Session};
use minerva_model::{CpuBackend, Model};

#[test]
fn random_weights_sampled_hot_never_leave_their_grammar() {
    let dir = common::root().join("fixtures/gpt_oss/hf");
    let tok = minerva_generate::Tokenizer::from_dir(&dir).unwrap();
    let model = Model::load(&dir, CpuBackend::new(Some(2)).unwrap()).unwrap();
    let compiler = GrammarCompiler::new(&tok, model.config.vocab).unwrap();
    let prompt = tok.encode(" w20 w21 w22", false).unwrap();
    let words = regex::Regex::new(r"^( w[3-6][0-9]){1,6}$").unwrap();
    let phrases = ["w40 w41", "w50", "w60 w61 w62"].map(|p| format!(" {p}"));
    let object = serde_json::json!({"type": "object", "properties": {"q": {"const": "w"}}, "required": ["q"]});
    type Check<'a> = Box<dyn Fn(&str) -> bool + 'a>;
    let cases: [(Grammar, Check<'_>); 3] = [
        (Grammar::Regex("( w[3-6][0-9]){1,6}".into()), Box::new(|t: &str| words.is_match(t))),
        (Grammar::Choice(phrases.to_vec()), Box::new(|t: &str| phrases.iter().any(|p| p == t))),
        (
            Grammar::JsonSchema(object),
            Box::new(|t: &str| {
                serde_json::from_str::<serde_json::Value>(t).ok() == Some(serde_json::json!({"q": "w"}))
            }),
        ),
    ];
    let mut session = Session::new(&model, &tok, 64).unwrap();
    for (grammar, valid) in cases {
        let constraint = compiler.compile(&grammar).unwrap();
        let mut whole = 0;
        for seed in 0..16 {
            let params = SamplingParams { temperature: 2.0, seed: Some(seed), ..SamplingParams::default() };
            let options =
                GenerateOptions { max_tokens: 16, constraint: Some(constraint.clone()), ..GenerateOptions::default() };
            let mut text = String::new();
            match session.generate_with(&prompt, options, Sampler::new(params).unwrap(), |t| text.push_str(t)) {
                Ok(summary) => {
                    assert!(valid(&text), "{grammar:?}, seed {seed}: {text:?}");
                    // Complete, or ended by a stop token the mask allowed where it may end.
                    assert!(
                        matches!(summary.finish, FinishReason::GrammarComplete | FinishReason::Eos),
                        "{grammar:?}, seed {seed}: {:?}",
                        summary.finish
                    );
                    whole += 1;
                }
                Err(e) => {
                    assert_eq!(e.to_string(), "grammar: no token of the vocabulary can continue the output here")
                }
            }
        }
        assert!(whole >= 4, "{grammar:?}: only {whole} of 16 walks finished");
    }
}
