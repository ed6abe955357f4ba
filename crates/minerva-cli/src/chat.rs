//! `minerva chat`: an interactive conversation with the model's chat template.
//!
//! Lines from stdin are user turns; `/reset` forgets the conversation, `/system TEXT` sets the
//! system message (and resets), `/exit` or end of input quits. Answers stream to stdout; the `> `
//! prompt and notices go to stderr, and only when stdin is a terminal, so piped sessions print
//! just the answers. Ctrl-C during an answer stops that answer (`[interrupted]`); at the prompt it
//! quits. The KV cache is kept between turns, so each turn only runs its new tokens.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use minerva_generate::{Event, GenerateOptions, Message, Sampler, SamplingParams, Session};

use crate::error::CliError;
use minerva_model::Backend;

use crate::load::{self, Loaded, ModelArgs, ModelTask};
use crate::run::{GenArgs, ReasoningPrinter, chat_prompt, stats_line};

static GENERATING: AtomicBool = AtomicBool::new(false);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn install_ctrl_c() -> Result<(), CliError> {
    ctrlc::set_handler(|| {
        if GENERATING.load(Ordering::SeqCst) {
            INTERRUPTED.store(true, Ordering::SeqCst);
        } else {
            // At the prompt: leave like a shell does on Ctrl-C.
            eprintln!();
            std::process::exit(130);
        }
    })
    .map_err(|e| CliError::Usage(format!("cannot install the Ctrl-C handler: {e}")))
}

/// Runs the conversation loop over `input`.
pub fn run(
    model: &ModelArgs,
    sampling: &GenArgs,
    system: Option<String>,
    input: impl BufRead,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let params = sampling.sampling();
    Sampler::new(params.clone()).map_err(|e| CliError::Usage(e.to_string()))?;
    load::with_models(model, sampling.spec.draft_path()?, Converse { sampling, params, system, input, out })
}

/// The conversation, on whichever backend the model loaded onto.
struct Converse<'a, R, W> {
    sampling: &'a GenArgs,
    params: SamplingParams,
    system: Option<String>,
    input: R,
    out: &'a mut W,
}

impl<R: BufRead, W: Write> ModelTask for Converse<'_, R, W> {
    type Output = ();

    fn run<B: Backend>(self, loaded: Loaded<B>) -> Result<(), CliError> {
        converse(loaded, self.sampling, self.params, self.system, self.input, self.out)
    }
}

fn converse<B: Backend>(
    loaded: Loaded<B>,
    sampling: &GenArgs,
    params: SamplingParams,
    system: Option<String>,
    input: impl BufRead,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let gen_err = |source| CliError::Generate { path: loaded.path.clone(), source };
    let tok = &loaded.tokenizer()?;
    let harmony = minerva_generate::harmony::is_harmony_arch(&loaded.model.config.arch);
    if !harmony {
        // Fail before the first turn when the model has no template.
        minerva_generate::ChatTemplate::from_tokenizer(tok).map_err(gen_err)?;
    }
    // Compiled once; each answer starts from a fresh copy.
    let constraint = sampling.constraint(&loaded, tok, harmony)?;
    let mut session = Session::new(&loaded.model, tok, sampling.context(&loaded)).map_err(gen_err)?;
    session.set_speculation(sampling.spec.speculation(&loaded, tok, sampling.context(&loaded))?);
    install_ctrl_c()?;
    let interactive = std::io::stdin().is_terminal();
    let notice = |s: &str| {
        if interactive {
            eprintln!("{s}");
        }
    };
    let output_err = |source| CliError::Output { path: "<stdout>".into(), source };
    let mut system = system;
    let fresh = |system: &Option<String>| -> Vec<Message> {
        system.iter().map(|s| Message::new("system", s.clone())).collect()
    };
    let mut messages = fresh(&system);
    notice("minerva chat: /reset, /system TEXT, /exit; Ctrl-C stops an answer");
    let mut lines = input.lines();
    loop {
        if interactive {
            eprint!("> ");
        }
        let Some(line) = lines.next() else { break };
        let line = line.map_err(|source| CliError::Output { path: "<stdin>".into(), source })?;
        let line = line.trim_end_matches(['\r', '\n']);
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                messages = fresh(&system);
                session.reset();
                notice("(conversation reset)");
                continue;
            }
            cmd if cmd.starts_with("/system") => {
                let text = cmd["/system".len()..].trim();
                system = (!text.is_empty()).then(|| text.to_string());
                messages = fresh(&system);
                session.reset();
                notice("(system message set; conversation reset)");
                continue;
            }
            cmd if cmd.starts_with('/') => {
                eprintln!("unknown command {cmd}: /reset, /system TEXT, /exit");
                continue;
            }
            _ => {}
        }
        messages.push(Message::new("user", line));
        let prompt = chat_prompt(tok, &messages, harmony).and_then(|text| tok.encode(&text, false));
        let prompt = match prompt {
            Ok(p) => p,
            Err(e) => {
                eprintln!("minerva: {}: {e}", loaded.path.display());
                messages.pop();
                continue;
            }
        };
        let sampler = Sampler::new(params.clone()).map_err(gen_err)?;
        let options = GenerateOptions { harmony, constraint: constraint.clone(), ..sampling.options() };
        let generation = match session.generate(&prompt, options, sampler) {
            Ok(g) => g,
            Err(e) => {
                // Typically a conversation longer than the context: say so, keep going.
                eprintln!("minerva: {e} (try /reset)");
                messages.pop();
                continue;
            }
        };
        INTERRUPTED.store(false, Ordering::SeqCst);
        GENERATING.store(true, Ordering::SeqCst);
        let mut answer = String::new();
        let mut failure = None;
        let mut reasoning = ReasoningPrinter::new(sampling.hide_reasoning);
        for event in generation {
            if INTERRUPTED.load(Ordering::SeqCst) {
                eprint!(" [interrupted]");
                break;
            }
            match event {
                Ok(Event::Reasoning(t)) => reasoning.print(&t),
                Ok(Event::Text(t)) => {
                    reasoning.end();
                    answer.push_str(&t);
                    out.write_all(t.as_bytes()).and_then(|_| out.flush()).map_err(output_err)?;
                }
                Ok(Event::Done(summary)) => {
                    if sampling.stats {
                        eprintln!("{}", stats_line(&summary));
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        GENERATING.store(false, Ordering::SeqCst);
        writeln!(out).map_err(output_err)?;
        if let Some(e) = failure {
            return Err(gen_err(e));
        }
        messages.push(Message::new("assistant", answer));
    }
    Ok(())
}
