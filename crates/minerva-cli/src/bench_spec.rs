//! `minerva bench --spec …`: decode speed with speculative decoding against plain decoding of the
//! same binary in the same run, on real prompts (`--prompt-file`, repeatable), greedy, until EOS
//! or `-n` tokens. Each repetition runs both, alternating, so a noisy machine slows both alike;
//! the two outputs must be the same tokens (speculation does not change greedy output) or the
//! benchmark fails.

use std::path::PathBuf;

use minerva_generate::{GenerateOptions, Sampler, SamplingParams, Session, SpecStats, Summary};
use minerva_model::Backend;

use crate::bench::median;
use crate::error::CliError;
use crate::load::Loaded;
use crate::spec::SpecArgs;

/// The speculative benchmark's options.
pub struct SpecBench<'a> {
    /// Prompt files.
    pub prompts: &'a [PathBuf],
    /// Wrap each prompt as a user message in the model's chat template.
    pub chat: bool,
    /// Most tokens per generation.
    pub gen_tokens: usize,
    /// Measured repetitions (after one warm-up).
    pub reps: usize,
    /// The speculation.
    pub spec: &'a SpecArgs,
    /// Context size.
    pub context: usize,
}

/// One prompt's figures.
struct PromptFigures {
    name: String,
    prompt_tokens: usize,
    generated: usize,
    plain: Vec<f64>,
    spec: Vec<f64>,
    stats: SpecStats,
}

/// Runs the benchmark on `loaded`; returns the text (or JSON) to print and its pass-time table.
pub fn measure<B: Backend>(loaded: &Loaded<B>, bench: &SpecBench<'_>, json: bool) -> Result<String, CliError> {
    let gen_err = |source| CliError::Generate { path: loaded.path.clone(), source };
    let tok = loaded.tokenizer()?;
    let mut plain = Session::new(&loaded.model, &tok, bench.context).map_err(gen_err)?;
    let mut spec = Session::new(&loaded.model, &tok, bench.context).map_err(gen_err)?;
    spec.set_speculation(bench.spec.speculation(loaded, &tok, bench.context)?);
    let mut figures = Vec::new();
    for file in bench.prompts {
        let text = std::fs::read_to_string(file)
            .map_err(|e| CliError::Request { path: file.clone(), message: e.to_string() })?;
        let ids = if bench.chat {
            let messages = [minerva_generate::Message::new("user", text.trim_end())];
            let harmony = minerva_generate::harmony::is_harmony_arch(&loaded.model.config.arch);
            let rendered = crate::run::chat_prompt(&tok, &messages, harmony).map_err(gen_err)?;
            tok.encode(&rendered, false).map_err(gen_err)?
        } else {
            tok.encode(&text, true).map_err(gen_err)?
        };
        let name = file.file_stem().map_or_else(|| file.display().to_string(), |s| s.to_string_lossy().into_owned());
        let mut f = PromptFigures {
            name,
            prompt_tokens: ids.len(),
            generated: 0,
            plain: Vec::new(),
            spec: Vec::new(),
            stats: SpecStats::default(),
        };
        for rep in 0..=bench.reps {
            let run = |session: &mut Session<'_, B>| -> Result<Summary, CliError> {
                session.reset();
                let options = GenerateOptions { max_tokens: bench.gen_tokens, ..GenerateOptions::default() };
                let sampler = Sampler::new(SamplingParams::default()).map_err(gen_err)?;
                session.generate_with(&ids, options, sampler, |_| {}).map_err(gen_err)
            };
            let (a, b) = if rep % 2 == 0 {
                let a = run(&mut plain)?;
                (a, run(&mut spec)?)
            } else {
                let b = run(&mut spec)?;
                (run(&mut plain)?, b)
            };
            if a.tokens != b.tokens {
                return Err(CliError::Request {
                    path: file.clone(),
                    message: format!(
                        "speculative output differs from plain greedy output ({} and {} tokens): a bug, please report it",
                        b.tokens.len(),
                        a.tokens.len()
                    ),
                });
            }
            if rep > 0 {
                f.plain.push(a.decode_tokens_per_s);
                f.spec.push(b.decode_tokens_per_s);
                let s = b.speculation.unwrap_or_default();
                f.stats = SpecStats {
                    drafter: s.drafter,
                    passes: f.stats.passes + s.passes,
                    verify_passes: f.stats.verify_passes + s.verify_passes,
                    drafted: f.stats.drafted + s.drafted,
                    accepted: f.stats.accepted + s.accepted,
                };
                f.generated += b.completion_tokens;
            }
        }
        figures.push(f);
    }
    let passes: Vec<f64> = spec.speculation().map(|s| s.pass_seconds().to_vec()).unwrap_or_default();
    Ok(report(&mut figures, &passes, bench.reps, json))
}

fn report(figures: &mut [PromptFigures], passes: &[f64], reps: usize, json: bool) -> String {
    // Milliseconds of a pass of each measured row count.
    let pass_ms: Vec<(usize, f64)> =
        passes.iter().enumerate().filter(|(_, t)| **t > 0.0).map(|(rows, t)| (rows, t * 1e3)).collect();
    if json {
        let prompts: Vec<_> = figures
            .iter_mut()
            .map(|f| {
                let (plain, spec) = (median(&mut f.plain), median(&mut f.spec));
                serde_json::json!({
                    "prompt": f.name,
                    "prompt_tokens": f.prompt_tokens,
                    "generated_per_rep": f.generated / reps.max(1),
                    "plain_decode_tok_s": plain,
                    "spec_decode_tok_s": spec,
                    "ratio": spec.zip(plain).map(|(s, p)| s / p),
                    "drafter": f.stats.drafter,
                    "drafted": f.stats.drafted,
                    "accepted": f.stats.accepted,
                    "acceptance": f.stats.acceptance(),
                    "tokens_per_pass": f.generated as f64 / (f.stats.passes + reps) as f64,
                })
            })
            .collect();
        let passes: Vec<_> = pass_ms.iter().map(|(r, ms)| serde_json::json!({"rows": r, "ms": ms})).collect();
        return format!("{}\n", serde_json::json!({ "prompts": prompts, "pass_ms": passes }));
    }
    let mut text = String::from(
        "prompt                 tokens  out  plain tok/s   spec tok/s  ratio  kept/drafted  tokens/pass\n",
    );
    for f in figures.iter_mut() {
        let (plain, spec) = (median(&mut f.plain).unwrap_or(0.0), median(&mut f.spec).unwrap_or(0.0));
        text += &format!(
            "{:<22} {:>6} {:>4} {:>12.2} {:>12.2} {:>6.2} {:>6}/{:<6} {:>11.2}\n",
            f.name,
            f.prompt_tokens,
            f.generated / reps.max(1),
            plain,
            spec,
            spec / plain.max(f64::MIN_POSITIVE),
            f.stats.accepted,
            f.stats.drafted,
            // The prompt's pass gives each repetition's first token.
            f.generated as f64 / (f.stats.passes + reps) as f64
        );
    }
    let cells: Vec<String> = pass_ms.iter().map(|(r, ms)| format!("{r}: {ms:.1}")).collect();
    text += &format!("pass ms by rows  {}\n", cells.join("  "));
    text
}
