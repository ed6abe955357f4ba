//! Speculative decoding gives the tokens of plain decoding, for every architecture in the
//! table (its tiny random-weight fixture), on the CPU and on wgpu (lavapipe in CI), with every
//! kind of draft: prompt lookup (n-gram), a draft model (the target itself, which must have every
//! draft accepted, and a different random model), and scripted drafts that are right up to a
//! planted error — over many prompts, draft lengths 1–8, and endings by EOS, stop strings,
//! `max_tokens` and the context's end inside a draft; and seeded sampling gives plain sampling's
//! tokens too, whose distribution is the target's (a chi-square test against the exact
//! probabilities).

mod common;

use std::path::PathBuf;

use minerva_generate::{
    DraftModel, Drafter, Event, FinishReason, GenerateOptions, NgramDrafter, Result, Sampler, SamplingParams, Session,
    SpecStats, Speculation, Summary, Tokenizer,
};
use minerva_model::arch::ARCHITECTURES;
use minerva_model::{Backend, CpuBackend, LogitsFor, Model, SequenceInput};

/// Each architecture's tiny fixture checkpoint (as `minerva-model`'s `tests/registry.rs` finds it).
fn fixture(name: &str) -> PathBuf {
    let tiny = common::root().join("fixtures/model/tiny").join(name);
    if tiny.is_dir() { tiny } else { common::root().join("fixtures").join(name.replace('-', "_")).join("hf") }
}

/// SmolLM2's tokenizer reads the 96-token fixtures' ids (its EOS ids 0 and 2 among them); the
/// GPT-OSS fixture has its own.
fn tokenizer_for(name: &str) -> Tokenizer {
    if name == "gpt-oss" {
        Tokenizer::from_dir(&fixture(name)).unwrap()
    } else {
        common::tokenizer_from_gguf("models/SmolLM2-135M-Instruct.Q4_1.gguf")
    }
}

fn cpu_model(name: &str) -> Model<CpuBackend> {
    Model::load(fixture(name), CpuBackend::new(Some(1)).unwrap()).unwrap()
}

/// Prompts of a vocabulary's ids: some with repeats for the n-gram drafter to find.
fn prompts(vocab: u32) -> Vec<Vec<u32>> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % u64::from(vocab - 3)) as u32 + 3
    };
    let mut out = Vec::new();
    for len in [3usize, 9, 17] {
        let p: Vec<u32> = (0..len).map(|_| next()).collect();
        let mut repeated = p.clone();
        repeated.extend_from_slice(&p);
        out.push(p);
        out.push(repeated);
    }
    out
}

/// The text, tokens and finish of one generation.
#[derive(Debug, PartialEq)]
struct Output {
    text: String,
    tokens: Vec<u32>,
    finish: FinishReason,
}

fn generate<B: Backend>(
    session: &mut Session<'_, B>,
    prompt: &[u32],
    options: &GenerateOptions,
    params: &SamplingParams,
) -> (Output, Summary) {
    session.reset();
    let mut text = String::new();
    for event in session.generate(prompt, options.clone(), Sampler::new(params.clone()).unwrap()).unwrap() {
        match event.unwrap() {
            Event::Text(t) | Event::Reasoning(t) => text += &t,
            Event::Done(summary) => {
                let output = Output { text, tokens: summary.tokens.clone(), finish: summary.finish };
                return (output, summary);
            }
        }
    }
    panic!("no summary")
}

/// Drafts the continuation a plain run produced, with the token at every `wrong_every`-th
/// position of the sequence changed: right up to a planted error, then nothing (the history has
/// left the script).
struct Scripted {
    script: Vec<u32>,
    wrong_every: usize,
    vocab: u32,
}

impl Drafter for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()> {
        if history.len() > self.script.len() || self.script[..history.len()] != *history {
            return Ok(());
        }
        for (at, &t) in self.script.iter().enumerate().skip(history.len()).take(max) {
            out.push(if at % self.wrong_every == 0 { (t + 1) % self.vocab } else { t });
        }
        Ok(())
    }
}

/// What a set of runs met, so the test can show it covered every ending and kept and refused
/// drafts.
#[derive(Default)]
struct Seen {
    finishes: Vec<FinishReason>,
    drafted: usize,
    accepted: usize,
    runs: usize,
    /// Runs whose drafts reached past the end of sequence.
    past_end: usize,
}

impl Seen {
    fn note(&mut self, finish: FinishReason, stats: Option<SpecStats>) {
        let stats = stats.expect("a speculating session reports its statistics");
        self.finishes.push(finish);
        self.drafted += stats.drafted;
        self.accepted += stats.accepted;
        self.runs += 1;
    }
}

/// Every prompt × ending × drafter of one model: the speculating session's output equals plain
/// greedy decoding's.
fn check_model<B: Backend>(
    name: &str,
    model: &Model<B>,
    draft: Option<&Model<B>>,
    only_prompt: Option<usize>,
    sampled_too: bool,
    seen: &mut Seen,
) {
    let tok = tokenizer_for(name);
    let vocab = model.config.vocab as u32;
    let greedy = SamplingParams::default();
    let trained = model.config.context_length;
    let context = if trained > 0 { trained.min(96) } else { 96 };
    let mut plain = Session::new(model, &tok, context).unwrap();
    for (p, prompt) in prompts(vocab).iter().enumerate().filter(|(p, _)| only_prompt.is_none_or(|only| only == *p)) {
        let endings = [
            GenerateOptions { max_tokens: 40, ignore_eos: true, ..GenerateOptions::default() },
            GenerateOptions { max_tokens: 40, ..GenerateOptions::default() },
            GenerateOptions { max_tokens: 1 + p % 3, ignore_eos: true, ..GenerateOptions::default() },
            // Up to the context's end.
            GenerateOptions { max_tokens: 200, ignore_eos: true, ..GenerateOptions::default() },
        ];
        // Sampled with a seed: the same draws as plain sampling, so the same text too.
        let sampled =
            SamplingParams { temperature: 0.8, top_k: 20, top_p: 0.95, seed: Some(7 + p as u64), ..greedy.clone() };
        let settings: &[&SamplingParams] = if sampled_too { &[&greedy, &sampled] } else { &[&greedy] };
        for ((e, options), params) in endings.iter().enumerate().flat_map(|e| settings.iter().map(move |p| (e, *p))) {
            let (reference, _) = generate(&mut plain, prompt, options, params);
            let mut cases = vec![(options.clone(), reference)];
            // A stop string from the middle of the text.
            let chars: Vec<char> = cases[0].1.text.chars().collect();
            if e == 0 && chars.len() > 8 {
                let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
                let options = GenerateOptions { stop: vec![stop], ..options.clone() };
                let (reference, _) = generate(&mut plain, prompt, &options, params);
                cases.push((options, reference));
            }
            for (options, reference) in cases {
                let mut script = prompt.clone();
                script.extend_from_slice(&reference.tokens);
                let k = 1 + (p + e) % 8;
                let mut drafters: Vec<(Box<dyn Drafter + '_>, bool)> = vec![
                    (Box::new(NgramDrafter::new(1, 3).unwrap()), false),
                    (Box::new(Scripted { script: script.clone(), wrong_every: 3 + p % 5, vocab }), false),
                    (Box::new(Scripted { script, wrong_every: usize::MAX, vocab }), true),
                    // The model drafts greedily: as its own draft, every token is kept when greedy.
                    (Box::new(DraftModel::new(model, context).unwrap()), params.is_greedy()),
                ];
                if let Some(draft) = draft {
                    drafters.push((Box::new(DraftModel::new(draft, context).unwrap()), false));
                }
                for (drafter, all_kept) in drafters {
                    let drafter_name = drafter.name();
                    let mut session = Session::new(model, &tok, context).unwrap();
                    session.set_speculation(Some(Speculation::fixed(drafter, k).unwrap()));
                    let (output, summary) = generate(&mut session, prompt, &options, params);
                    let what = format!("{name}: prompt {p}, ending {e}, k {k}, {drafter_name}, {params:?}");
                    assert_eq!(output, reference, "{what}");
                    let stats = summary.speculation.unwrap();
                    // Long-rope (Phi-3) rotates a step's rows by its largest position, so a draft
                    // model that runs the tokens in other steps than the target can disagree.
                    if all_kept && (drafter_name != "draft-model" || model.config.rope.step_dependent_from().is_none())
                    {
                        assert_eq!(stats.accepted, stats.drafted, "{what}: {stats:?}");
                    }
                    seen.note(summary.finish, Some(stats));
                }
                // A draft that runs past the end of sequence (the model's own greedy tokens after
                // it, as prompt lookup copies a quoted turn's end and the next turn's markers) is
                // cut after the end: no drafted token is one that could not be emitted.
                if reference.finish == FinishReason::Eos && params.is_greedy() && k > 1 {
                    let past = GenerateOptions {
                        max_tokens: reference.tokens.len() + 8,
                        ignore_eos: true,
                        ..GenerateOptions::default()
                    };
                    let (beyond, _) = generate(&mut plain, prompt, &past, params);
                    let mut script = prompt.clone();
                    script.extend_from_slice(&beyond.tokens);
                    let drafter = Scripted { script, wrong_every: usize::MAX, vocab };
                    let mut session = Session::new(model, &tok, context).unwrap();
                    session.set_speculation(Some(Speculation::fixed(Box::new(drafter), k).unwrap()));
                    let (output, summary) = generate(&mut session, prompt, &options, params);
                    let what = format!("{name}: prompt {p}, k {k}, drafts past the end");
                    assert_eq!(output, reference, "{what}");
                    let stats = summary.speculation.unwrap();
                    assert_eq!(stats.accepted, stats.drafted, "{what}: {stats:?}");
                    assert!(stats.drafted <= reference.tokens.len() + 1, "{what}: {stats:?}");
                    seen.past_end += 1;
                }
            }
        }
    }
}

#[test]
fn speculation_gives_plain_decodings_tokens_for_every_architecture() {
    let mut seen = Seen::default();
    for spec in ARCHITECTURES {
        let model = cpu_model(spec.name);
        // A different random model of the same vocabulary drafts for the LLaMA-family ones.
        let other = (spec.name != "gpt-oss" && spec.name != "llama").then(|| cpu_model("llama"));
        check_model(spec.name, &model, other.as_ref(), None, true, &mut seen);
    }
    for finish in [FinishReason::Eos, FinishReason::StopString, FinishReason::MaxTokens, FinishReason::ContextEnd] {
        assert!(seen.finishes.contains(&finish), "no run ended by {finish:?}");
    }
    // Drafts were both kept and refused, in numbers.
    assert!(seen.accepted > 1000 && seen.drafted > seen.accepted + 1000, "{} of {}", seen.accepted, seen.drafted);
    assert!(seen.past_end >= 5, "{} runs drafted past the end of sequence", seen.past_end);
}

#[test]
fn speculation_gives_plain_decodings_tokens_on_wgpu() {
    let open =
        || minerva_wgpu::WgpuBackend::new(minerva_wgpu::WgpuOptions::default()).expect("a wgpu adapter (lavapipe)");
    let mut seen = Seen::default();
    // One prompt (repeated within itself) of one model: lavapipe runs a step in milliseconds.
    // Greedy only: plain sampling draws on the device, which sums probabilities in f32 where the
    // host (verifying drafts from the logits) uses f64, so a draw within ~1e-4 of a boundary of
    // the distribution may fall on the neighbouring token (tests/device_sampling.rs).
    let model = Model::load(fixture("gemma3"), open()).unwrap();
    check_model("gemma3", &model, None, Some(1), false, &mut seen);
    assert!(seen.accepted > 100, "{} of {} drafted tokens kept", seen.accepted, seen.drafted);
}

/// Penalties and a logit bias take the sampler's greedy path (host logits), not the argmax one.
#[test]
fn penalized_greedy_with_speculation_equals_penalized_greedy() {
    let model = cpu_model("qwen3");
    let tok = tokenizer_for("qwen3");
    let params = SamplingParams {
        repeat_penalty: 1.3,
        frequency_penalty: 0.2,
        logit_bias: vec![(7, -2.0)],
        ..SamplingParams::default()
    };
    assert!(params.is_greedy() && !params.is_plain_greedy());
    let options = GenerateOptions { max_tokens: 40, ignore_eos: true, ..GenerateOptions::default() };
    let mut plain = Session::new(&model, &tok, 96).unwrap();
    let mut kept = 0;
    for prompt in prompts(96) {
        let (reference, _) = generate(&mut plain, &prompt, &options, &params);
        for k in [1, 4] {
            let mut session = Session::new(&model, &tok, 96).unwrap();
            let mut script = prompt.clone();
            script.extend_from_slice(&reference.tokens);
            let drafter = Scripted { script, wrong_every: 5, vocab: 96 };
            session.set_speculation(Some(Speculation::fixed(Box::new(drafter), k).unwrap()));
            let (output, summary) = generate(&mut session, &prompt, &options, &params);
            assert_eq!(output, reference, "k {k}");
            kept += summary.speculation.unwrap().accepted;
        }
    }
    assert!(kept > 50, "{kept}");
}

/// The adaptive choice still gives plain greedy's tokens, and a chat session's drafter carries
/// over between turns.
#[test]
fn adaptive_speculation_equals_greedy_across_turns() {
    let model = cpu_model("mistral");
    let tok = tokenizer_for("mistral");
    let greedy = SamplingParams::default();
    let options = GenerateOptions { max_tokens: 30, ignore_eos: true, ..GenerateOptions::default() };
    let mut plain = Session::new(&model, &tok, 128).unwrap();
    let mut session = Session::new(&model, &tok, 128).unwrap();
    let drafter = NgramDrafter::new(1, 4).unwrap();
    session.set_speculation(Some(Speculation::adaptive(Box::new(drafter), 6).unwrap()));
    let mut conversation = Vec::new();
    for prompt in prompts(96).into_iter().take(3) {
        conversation.extend_from_slice(&prompt);
        // Both sessions keep their caches: the second turn reuses the first's positions.
        let run = |s: &mut Session<'_, CpuBackend>| {
            let mut text = String::new();
            let summary = s
                .generate_with(&conversation, options.clone(), Sampler::new(greedy.clone()).unwrap(), |t| text += t)
                .unwrap();
            (text, summary)
        };
        let (text, reference) = run(&mut plain);
        let (spec_text, summary) = run(&mut session);
        assert_eq!((spec_text, &summary.tokens), (text, &reference.tokens));
        assert!(summary.prefilled_tokens < conversation.len() || conversation.len() == prompt.len());
        assert!(summary.speculation.is_some());
        conversation.extend_from_slice(&reference.tokens);
    }
}

/// Sampling with a seed gives plain sampling's text with speculation too, drafts fixed or
/// adaptive (whose lengths follow measured times, so they differ from run to run).
#[test]
fn seeded_sampling_with_speculation_is_plain_sampling() {
    let model = cpu_model("llama");
    let tok = tokenizer_for("llama");
    // Peaked enough for drafts to be kept often, spread enough to draw different tokens.
    let params = SamplingParams { temperature: 0.4, top_k: 20, seed: Some(11), ..SamplingParams::default() };
    let options = GenerateOptions { max_tokens: 40, ignore_eos: true, ..GenerateOptions::default() };
    let run = |spec: Option<Speculation<'static>>| {
        let mut session = Session::new(&model, &tok, 128).unwrap();
        session.set_speculation(spec);
        prompts(96).iter().map(|p| generate(&mut session, p, &options, &params)).collect::<Vec<_>>()
    };
    let plain: Vec<Output> = run(None).into_iter().map(|(o, _)| o).collect();
    let ngram = || Box::new(NgramDrafter::new(1, 2).unwrap());
    for (spec, fixed) in
        [(Speculation::fixed(ngram(), 4).unwrap(), true), (Speculation::adaptive(ngram(), 6).unwrap(), false)]
    {
        let runs = run(Some(spec));
        let kept: usize = runs.iter().map(|(_, s)| s.speculation.unwrap().accepted).sum();
        // Fixed drafts keep the same tokens every run (19); adaptive ones depend on timings.
        assert!(!fixed || kept > 10, "{kept} drafted tokens kept");
        assert_eq!(runs.into_iter().map(|(o, _)| o).collect::<Vec<_>>(), plain);
    }
    // Different seeds differ somewhere (the test would pass for a sampler that ignored them).
    let other = SamplingParams { seed: Some(12), ..params.clone() };
    let mut session = Session::new(&model, &tok, 128).unwrap();
    let differs = prompts(96).iter().zip(&plain).any(|(p, out)| generate(&mut session, p, &options, &other).0 != *out);
    assert!(differs);
}

/// The sampling distribution of three tokens with speculation is the target's: the first three
/// tokens of 6000 seeded four-token generations with top-k 4 (64 possible sequences), drafts of
/// two fixed tokens after the first (kept or refused at both positions), against the exact probability of each sequence computed from the
/// model's logits. Pearson's chi-square over the 64 cells (63 degrees of freedom; cells expected
/// under 5 merged) must stay below 103.4, the 0.1 % critical value. With the seeds fixed the test
/// is deterministic; a verifier that kept a refused draft, or drew its replacement from a
/// distribution other than the target's, gives a chi-square in the hundreds.
#[test]
fn sampled_speculation_follows_the_target_distribution() {
    let model = cpu_model("llama");
    let tok = tokenizer_for("llama");
    let prompt = [20u32, 31, 44, 20, 31];
    let params = SamplingParams { temperature: 1.0, top_k: 4, ..SamplingParams::default() };

    // The exact distribution of each position given the tokens before it.
    let probabilities = |tokens: &[u32]| -> Vec<(u32, f64)> {
        let mut cache = model.new_cache(1, 16).unwrap();
        let seq = SequenceInput { tokens, start_pos: 0, slot: 0 };
        let mut logits = model.forward(&mut cache, &[seq], LogitsFor::Last).unwrap().data;
        let sampler = Sampler::new(params.clone()).unwrap();
        match sampler.distribution(&mut logits, tokens) {
            minerva_generate::Distribution::Probabilities(c) => c.iter().map(|c| (c.id, f64::from(c.logit))).collect(),
            other => panic!("{other:?}"),
        }
    };
    let mut expected: Vec<(Vec<u32>, f64)> = Vec::new();
    for (a, pa) in probabilities(&prompt) {
        let ctx_a: Vec<u32> = prompt.iter().copied().chain([a]).collect();
        for (b, pb) in probabilities(&ctx_a) {
            let ctx_b: Vec<u32> = ctx_a.iter().copied().chain([b]).collect();
            for (c, pc) in probabilities(&ctx_b) {
                expected.push((vec![a, b, c], pa * pb * pc));
            }
        }
    }
    // Draft the second most likely second token and the most likely third after it: both kept
    // and refused often.
    let first = probabilities(&prompt)[0].0;
    let ctx: Vec<u32> = prompt.iter().copied().chain([first]).collect();
    let second = probabilities(&ctx)[1].0;
    let ctx2: Vec<u32> = ctx.iter().copied().chain([second]).collect();
    let third = probabilities(&ctx2)[0].0;

    struct Fixed(Vec<u32>);
    impl Drafter for Fixed {
        fn name(&self) -> &'static str {
            "fixed"
        }
        fn draft(&mut self, _: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()> {
            out.extend(self.0.iter().take(max));
            Ok(())
        }
    }
    let draws = 6000;
    let mut counts = std::collections::HashMap::<Vec<u32>, usize>::new();
    let mut session = Session::new(&model, &tok, 16).unwrap();
    session.set_speculation(Some(Speculation::fixed(Box::new(Fixed(vec![second, third])), 2).unwrap()));
    let (mut drafted, mut accepted) = (0, 0);
    for seed in 0..draws {
        let options = GenerateOptions { max_tokens: 4, ignore_eos: true, ..GenerateOptions::default() };
        let params = SamplingParams { seed: Some(seed as u64), ..params.clone() };
        let (output, summary) = generate(&mut session, &prompt, &options, &params);
        let stats = summary.speculation.unwrap();
        drafted += stats.drafted;
        accepted += stats.accepted;
        *counts.entry(output.tokens[..3].to_vec()).or_default() += 1;
    }
    assert_eq!(counts.values().sum::<usize>(), draws);
    assert!(counts.keys().all(|k| expected.iter().any(|(e, _)| e == k)), "a sequence outside top-k");
    assert!(accepted > 500 && drafted > accepted + 1000, "{accepted} of {drafted}");
    let (mut chi2, mut pooled_obs, mut pooled_exp) = (0.0, 0.0, 0.0);
    for (tokens, p) in &expected {
        let e = p * draws as f64;
        let o = *counts.get(tokens).unwrap_or(&0) as f64;
        if e < 5.0 {
            pooled_obs += o;
            pooled_exp += e;
        } else {
            chi2 += (o - e) * (o - e) / e;
        }
    }
    if pooled_exp > 0.0 {
        chi2 += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp;
    }
    eprintln!("chi-square {chi2:.1} over {} cells; {accepted} of {drafted} drafted tokens kept", expected.len());
    assert!(chi2 < 103.4, "chi-square {chi2:.1} over {} cells", expected.len());
}

/// SmolLM2: prompt lookup over a request that quotes its input keeps many drafts, and the
/// output is plain greedy's, adaptive and fixed.
#[test]
fn smollm2_ngram_speculation_equals_greedy() {
    let path = common::root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let model = Model::load(&path, CpuBackend::new(None).unwrap()).unwrap();
    let tok = common::tokenizer_from_gguf("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let text = "<|im_start|>user\nRepeat this sentence exactly: The quick brown fox jumps over the lazy dog \
                near the river bank every morning.<|im_end|>\n<|im_start|>assistant\n";
    let prompt = tok.encode(text, false).unwrap();
    let options = GenerateOptions { max_tokens: 32, ..GenerateOptions::default() };
    let greedy = SamplingParams::default();
    let mut plain = Session::new(&model, &tok, 256).unwrap();
    let (reference, _) = generate(&mut plain, &prompt, &options, &greedy);
    assert!(reference.text.contains("quick brown fox"), "{}", reference.text);
    for spec in [
        Speculation::fixed(Box::new(NgramDrafter::new(1, 3).unwrap()), 5).unwrap(),
        Speculation::adaptive(Box::new(NgramDrafter::new(2, 4).unwrap()), 8).unwrap(),
    ] {
        let mut session = Session::new(&model, &tok, 256).unwrap();
        session.set_speculation(Some(spec));
        let (output, summary) = generate(&mut session, &prompt, &options, &greedy);
        assert_eq!(output, reference);
        let stats = summary.speculation.unwrap();
        assert!(stats.accepted >= 6, "{stats:?} {}", output.text);
        assert!(stats.passes < summary.completion_tokens, "{stats:?}");
    }
}
