//! `minerva score`: the perplexity of a token stream under a model.
//!
//! Without `--ctx` the whole stream is one window and every position but the last is scored (its
//! logits predict the next token). With `--ctx N` the stream is cut into whole windows of N tokens
//! (a partial last window is dropped) and, as llama.cpp's `perplexity` tool does, only the second
//! half of each window is scored, so every scored token has at least N/2 tokens of context. A
//! `--text` stream has BOS in place of each window's first token where the model's tokenizer
//! adds BOS (llama-perplexity does the same), so every window starts as the model was trained.

use std::io::{BufWriter, Write};
use std::path::Path;

use minerva_model::{Backend, LogitsFor, SequenceInput};

use crate::error::CliError;
use crate::load::{self, Loaded, ModelArgs, ModelTask};
use crate::npy;

/// The command's options besides the model and tokens.
pub struct Options<'a> {
    /// Window length.
    pub ctx: Option<usize>,
    /// Where to write the scored positions' logits.
    pub out: Option<&'a Path>,
    /// With a text: BOS in place of each window's first token, where the tokenizer adds BOS.
    pub bos_per_window: bool,
}

/// Runs the command, printing the perplexity to `stdout`. The tokens are `tokens`, or `text`
/// tokenized with the model's tokenizer.
pub fn run(
    args: &ModelArgs,
    tokens: Vec<u32>,
    text: Option<&str>,
    opts: Options<'_>,
    stdout: &mut impl Write,
) -> Result<(), CliError> {
    let path = load::model_path(args)?;
    let (mut tokens, bos) = match text {
        Some(text) => crate::tokenize::tokens_for_score(&path, text)?,
        None => (tokens, None),
    };
    let ctx = opts.ctx.unwrap_or(tokens.len());
    // With --ctx the second half of each window is scored (as llama-perplexity does): a window
    // of 2 would score nothing.
    let shortest = if opts.ctx.is_some() { 3 } else { 2 };
    if ctx < shortest || tokens.len() < ctx {
        let message = format!("need a window of at least {shortest} tokens: {} tokens, --ctx {ctx}", tokens.len());
        return Err(CliError::Request { path, message });
    }
    let bos = bos.filter(|_| opts.bos_per_window);
    if let Some(bos) = bos {
        for window in tokens.chunks_exact_mut(ctx) {
            window[0] = bos;
        }
    }
    // The whole command runs in one pool of `--threads` threads, which the backend takes as its
    // own and the log-probabilities share (on any device).
    let task = Score { tokens: &tokens, ctx, opts: &opts, bos_first: bos.is_some(), stdout };
    load::in_one_pool(args, &path, |args, _| load::with_model(args, task))
}

/// The scoring, on whichever backend the model loaded onto.
struct Score<'a, W> {
    tokens: &'a [u32],
    ctx: usize,
    opts: &'a Options<'a>,
    /// Each window starts with BOS (said in the output).
    bos_first: bool,
    stdout: &'a mut W,
}

impl<W: Write> ModelTask for Score<'_, W> {
    type Output = ();

    fn run<B: Backend>(self, loaded: Loaded<B>) -> Result<(), CliError> {
        let how = if self.bos_first { ", BOS first in each" } else { "" };
        score(&loaded.path, &loaded.model, self.tokens, self.ctx, self.opts, how, self.stdout)
    }
}

fn score<B: Backend>(
    path: &Path,
    model: &minerva_model::Model<B>,
    tokens: &[u32],
    ctx: usize,
    opts: &Options<'_>,
    how: &str,
    stdout: &mut impl Write,
) -> Result<(), CliError> {
    let model_err = |source| CliError::Model { path: path.to_path_buf(), source };
    let vocab = model.config.vocab;
    let first = if opts.ctx.is_some() { ctx / 2 } else { 0 };
    let windows = tokens.len() / ctx;
    let scored = windows * (ctx - 1 - first);
    let mut writer = match opts.out {
        None => None,
        Some(out) => {
            let io = |source| CliError::Output { path: out.to_path_buf(), source };
            let mut w = BufWriter::new(std::fs::File::create(out).map_err(io)?);
            npy::write_f32_header(&mut w, &[scored, vocab]).map_err(io)?;
            Some((w, io))
        }
    };
    let mut cache = model.new_cache(1, ctx).map_err(model_err)?;
    let mut nll = 0.0f64;
    let vocab_err = |token: u32| CliError::Request {
        path: path.to_path_buf(),
        message: format!("token id {token} is outside the model's vocabulary of {vocab}"),
    };
    // The unscored first part of a window fills the cache without logits and the rest continues
    // from it: a row's logits do not depend on the rows run beside it, so this equals one pass
    // over the window at half the LM head's work (a 262144-token head is most of Gemma's). Not
    // for long-rope models whose window reaches the switch position: their rotation depends on a
    // pass's largest position, so the window runs whole (as llama-perplexity runs it).
    let split = first > 0 && model.config.rope.step_dependent_from().is_none_or(|switch| ctx <= switch);
    let (run_from, run_to) = if split { (first, ctx - 1) } else { (0, ctx) };
    for window in tokens.chunks_exact(ctx) {
        if run_from > 0 {
            let seq = SequenceInput { tokens: &window[..run_from], start_pos: 0, slot: 0 };
            model.forward(&mut cache, &[seq], LogitsFor::LastOfFirst(0)).map_err(model_err)?;
        }
        let seq = SequenceInput { tokens: &window[run_from..run_to], start_pos: run_from, slot: 0 };
        let logits = model.forward(&mut cache, &[seq], LogitsFor::All).map_err(model_err)?;
        let next = &window[first + 1..];
        // Summed in order, whichever threads computed them.
        for (i, (log_prob, &next)) in logits.log_probs(first - run_from, next).into_iter().zip(next).enumerate() {
            nll -= log_prob.ok_or_else(|| vocab_err(next))?;
            if let Some((w, io)) = &mut writer {
                npy::write_values(&mut *w, logits.row(first - run_from + i)).map_err(*io)?;
            }
        }
    }
    if let Some((mut w, io)) = writer {
        w.flush().map_err(io)?;
    }
    let ppl = (nll / scored as f64).exp();
    let _ = writeln!(stdout, "perplexity {ppl:.6} over {scored} scored tokens ({windows} window(s) of {ctx}{how})");
    Ok(())
}
