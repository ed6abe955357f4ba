//! `minerva run`: one prompt in, generated text streamed to stdout (`--stats` summary on stderr).

use std::io::Write;

use std::io::IsTerminal;

use minerva_generate::harmony::{self, SystemContent};
use minerva_generate::{ChatTemplate, Event, GenerateOptions, Message, Sampler, SamplingParams, Session, Summary};

use crate::error::CliError;
use minerva_model::Backend;

use crate::load::{self, Loaded, ModelArgs, ModelTask};

/// Sampling and length flags (shared by `run` and `chat`). Defaults are llama.cpp's.
#[derive(Debug, Clone, clap::Args)]
pub struct GenArgs {
    /// Most tokens to generate.
    #[arg(long, short = 'n', default_value_t = 256)]
    pub max_tokens: usize,
    /// Temperature; 0 is greedy decoding.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Keep the K most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Nucleus sampling: keep tokens up to this cumulative probability (1: all).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens below this fraction of the most likely token's probability (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty over the last --repeat-last-n tokens (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the penalties look back over.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Frequency penalty (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Presence penalty (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Logit bias `ID=BIAS` (`ID=-inf` bans a token); repeatable.
    #[arg(long, value_name = "ID=BIAS", value_parser = parse_bias)]
    pub logit_bias: Vec<(u32, f32)>,
    /// RNG seed; the same seed and settings give the same text.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop when this text appears (not printed); repeatable.
    #[arg(long, value_name = "TEXT")]
    pub stop: Vec<String>,
    /// Context size in tokens (at most the model's trained context).
    #[arg(long, short = 'c', default_value_t = 2048)]
    pub ctx_size: usize,
    /// Drop the oldest prompt tokens when the prompt does not fit the context.
    #[arg(long)]
    pub truncate: bool,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print a summary (tokens, finish reason, time to first token, tokens/s) to stderr.
    #[arg(long)]
    pub stats: bool,
    /// GPT-OSS: do not show the reasoning (shown dimmed on stderr otherwise).
    #[arg(long)]
    pub hide_reasoning: bool,
    /// Hold the output to the JSON schema in FILE (constrained decoding).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["grammar", "json"])]
    pub json_schema: Option<std::path::PathBuf>,
    /// Hold the output to the grammar in FILE, in Lark syntax as llguidance reads it.
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    pub grammar: Option<std::path::PathBuf>,
    /// Hold the output to a JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub spec: crate::spec::SpecArgs,
}

fn parse_bias(s: &str) -> Result<(u32, f32), String> {
    let (id, bias) = s.split_once('=').ok_or_else(|| format!("{s:?} is not ID=BIAS"))?;
    let id = id.trim().parse().map_err(|_| format!("{id:?} is not a token id"))?;
    let bias = match bias.trim() {
        "-inf" => f32::NEG_INFINITY,
        b => b.parse().map_err(|_| format!("{b:?} is not a number"))?,
    };
    Ok((id, bias))
}

impl GenArgs {
    /// The sampler settings.
    pub fn sampling(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            penalty_last_n: self.repeat_last_n,
            logit_bias: self.logit_bias.clone(),
            seed: self.seed,
        }
    }

    /// The generation limits.
    pub fn options(&self) -> GenerateOptions {
        GenerateOptions {
            max_tokens: self.max_tokens,
            stop: self.stop.clone(),
            truncate_prompt: self.truncate,
            ignore_eos: self.ignore_eos,
            harmony: false,
            constraint: None,
        }
    }

    /// The grammar the output is held to (`--json-schema`, `--grammar`, `--json`), compiled for
    /// `loaded`'s vocabulary; clone it for each generation.
    pub fn constraint<B: Backend>(
        &self,
        loaded: &Loaded<B>,
        tok: &minerva_generate::Tokenizer,
        harmony: bool,
    ) -> Result<Option<minerva_generate::Constraint>, CliError> {
        use minerva_generate::{Grammar, GrammarCompiler};
        let read = |path: &std::path::Path| {
            std::fs::read_to_string(path).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
        };
        let (source, grammar) = match (&self.json_schema, &self.grammar, self.json) {
            (Some(path), _, _) => {
                let schema = serde_json::from_str(&read(path)?)
                    .map_err(|e| CliError::Usage(format!("{}: not JSON: {e}", path.display())))?;
                (path.display().to_string(), Grammar::JsonSchema(schema))
            }
            (None, Some(path), _) => (path.display().to_string(), Grammar::Lark(read(path)?)),
            (None, None, true) => ("--json".to_string(), Grammar::JsonObject),
            (None, None, false) => return Ok(None),
        };
        if harmony {
            return Err(CliError::Usage(format!(
                "{source}: constrained output is not yet supported for Harmony (GPT-OSS) chats"
            )));
        }
        let compiled = GrammarCompiler::new(tok, loaded.model.config.vocab).and_then(|c| c.compile(&grammar));
        compiled.map(Some).map_err(|e| CliError::Usage(format!("{source}: {e}")))
    }

    /// The context size, capped at the model's trained context.
    pub fn context<B: Backend>(&self, loaded: &Loaded<B>) -> usize {
        let trained = loaded.model.config.context_length;
        if trained > 0 { self.ctx_size.min(trained) } else { self.ctx_size }
    }
}

/// One line of statistics for `--stats`.
pub fn stats_line(s: &Summary) -> String {
    let spec = s.speculation.map(|stats| format!(" | {}", crate::spec::stats_words(&stats, s.completion_tokens)));
    let line = format!(
        "prompt {} tokens ({} run) | generated {} tokens | finish {} ({:?}) | first token {:.3} s | prefill {:.1} tok/s | decode {:.1} tok/s",
        s.prompt_tokens,
        s.prefilled_tokens,
        s.completion_tokens,
        s.finish.as_str(),
        s.finish,
        s.time_to_first_token.as_secs_f64(),
        s.prefill_tokens_per_s,
        s.decode_tokens_per_s
    );
    line + spec.as_deref().unwrap_or("")
}

/// Runs the command.
pub fn run(
    model: &ModelArgs,
    sampling: &GenArgs,
    prompt: &str,
    chat: bool,
    system: Option<&str>,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let sampler = Sampler::new(sampling.sampling()).map_err(|e| CliError::Usage(e.to_string()))?;
    let draft = sampling.spec.draft_path()?;
    load::with_models(model, draft, Generate { sampling, sampler, prompt, chat, system, out })
}

/// One generation, on whichever backend the model loaded onto.
struct Generate<'a, W> {
    sampling: &'a GenArgs,
    sampler: Sampler,
    prompt: &'a str,
    chat: bool,
    system: Option<&'a str>,
    out: &'a mut W,
}

impl<W: Write> ModelTask for Generate<'_, W> {
    type Output = ();

    fn run<B: Backend>(self, loaded: Loaded<B>) -> Result<(), CliError> {
        if self.sampling.stats
            && let Some(device) = &loaded.device
        {
            eprintln!("{device}");
        }
        generate(loaded, self.sampling, self.sampler, self.prompt, self.chat, self.system, self.out)
    }
}

fn generate<B: Backend>(
    loaded: Loaded<B>,
    sampling: &GenArgs,
    sampler: Sampler,
    prompt: &str,
    chat: bool,
    system: Option<&str>,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let gen_err = |source| CliError::Generate { path: loaded.path.clone(), source };
    let tok = &loaded.tokenizer()?;
    let harmony = chat && harmony::is_harmony_arch(&loaded.model.config.arch);
    let ids = if chat {
        let mut messages = Vec::new();
        if let Some(system) = system {
            messages.push(Message::new("system", system));
        }
        messages.push(Message::new("user", prompt));
        let text = chat_prompt(tok, &messages, harmony).map_err(gen_err)?;
        // The template writes BOS and the other specials itself.
        tok.encode(&text, false).map_err(gen_err)?
    } else {
        tok.encode(prompt, true).map_err(gen_err)?
    };
    let constraint = sampling.constraint(&loaded, tok, harmony)?;
    let mut session = Session::new(&loaded.model, tok, sampling.context(&loaded)).map_err(gen_err)?;
    session.set_speculation(sampling.spec.speculation(&loaded, tok, sampling.context(&loaded))?);
    let options = GenerateOptions { harmony, constraint, ..sampling.options() };
    let output_err = |source| CliError::Output { path: "<stdout>".into(), source };
    let mut reasoning = ReasoningPrinter::new(sampling.hide_reasoning);
    let mut summary = None;
    for event in session.generate(&ids, options, sampler).map_err(gen_err)? {
        match event.map_err(gen_err)? {
            Event::Text(text) => {
                reasoning.end();
                out.write_all(text.as_bytes()).and_then(|_| out.flush()).map_err(output_err)?;
            }
            Event::Reasoning(text) => reasoning.print(&text),
            Event::Done(s) => summary = Some(s),
        }
    }
    reasoning.end();
    writeln!(out).map_err(output_err)?;
    if sampling.stats
        && let Some(summary) = summary
    {
        eprintln!("{}", stats_line(&summary));
    }
    Ok(())
}

/// The prompt text of a chat: Harmony for GPT-OSS, else the model's chat template.
pub fn chat_prompt(
    tok: &minerva_generate::Tokenizer,
    messages: &[Message],
    harmony: bool,
) -> Result<String, minerva_generate::GenerateError> {
    if harmony {
        let today = minerva_generate::template::strftime(
            "%Y-%m-%d",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64),
        );
        let system = SystemContent { conversation_start_date: Some(today), ..SystemContent::default() };
        return Ok(harmony::chat_prompt(messages, &system));
    }
    ChatTemplate::from_tokenizer(tok)?.render(messages, true, None)
}

/// Shows a model's reasoning apart from its answer: on stderr, dimmed on a terminal.
pub struct ReasoningPrinter {
    hide: bool,
    dim: bool,
    open: bool,
}

impl ReasoningPrinter {
    /// A printer; `hide` drops the reasoning.
    pub fn new(hide: bool) -> ReasoningPrinter {
        ReasoningPrinter { hide, dim: std::io::stderr().is_terminal(), open: false }
    }

    /// Prints more reasoning.
    pub fn print(&mut self, text: &str) {
        if self.hide {
            return;
        }
        let mut err = std::io::stderr().lock();
        if !self.open && self.dim {
            let _ = err.write_all(b"\x1b[2m");
        }
        self.open = true;
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
    }

    /// Ends the reasoning shown so far (before the answer).
    pub fn end(&mut self) {
        if self.open {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(if self.dim { b"\x1b[0m\n" } else { b"\n" });
            let _ = err.flush();
            self.open = false;
        }
    }
}
