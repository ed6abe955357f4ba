//! `minerva`: the command-line front end.
//!
//! Errors print one line on stderr naming the file and the problem, and exit with code 2.

mod bench;
mod dump;
mod error;
mod inspect;
mod model_file;
mod npy;
mod score;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::CliError;

/// Minerva: inspect and run open-weight LLM checkpoints.
#[derive(Debug, Parser)]
#[command(name = "minerva", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a model file's metadata, tensor table and totals.
    Inspect {
        /// A GGUF file, a SafeTensors file or index, or a model directory.
        path: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write one tensor's values, dequantized to f32, as a numpy `.npy` file.
    Dump {
        /// A GGUF file, a SafeTensors file or index, or a model directory.
        path: PathBuf,
        /// The tensor's name (see `minerva inspect`); for SafeTensors also a logical quantized
        /// tensor (`…gate_up_proj` for `…gate_up_proj_blocks` + `_scales`, an MLX `….weight`).
        tensor: String,
        /// Output `.npy` file.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Perplexity of a token stream (as llama.cpp's `perplexity` tool with `--ctx`).
    Score {
        /// A GGUF model file (LLaMA family).
        path: PathBuf,
        /// Comma-separated token ids.
        #[arg(long, value_delimiter = ',', required = true)]
        tokens: Vec<u32>,
        /// Cut the stream into windows of N tokens and score the second half of each.
        #[arg(long, value_name = "N")]
        ctx: Option<usize>,
        /// Write the logits of every scored position as an f32 `.npy` (positions × vocab).
        #[arg(long, value_name = "LOGITS.npy")]
        out: Option<PathBuf>,
        /// Worker threads (default: one per core).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Prefill and decode speed (tokens/s, median of repetitions), like llama.cpp's `llama-bench`.
    Bench {
        /// A GGUF model file (LLaMA family).
        path: PathBuf,
        /// Prompt tokens for the prefill measurement (0 skips it).
        #[arg(short = 'p', long = "prompt", default_value_t = 512)]
        prompt: usize,
        /// Tokens for the decode measurement (0 skips it).
        #[arg(short = 'n', long = "gen", default_value_t = 128)]
        gen_tokens: usize,
        /// Repetitions of each measurement (after one warm-up run).
        #[arg(short = 'r', long = "reps", default_value_t = 5)]
        reps: usize,
        /// Worker threads (default: one per core).
        #[arg(long)]
        threads: Option<usize>,
        /// Device to run on.
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                // Help and version are not errors: print them whole.
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // One line: clap's first line ("error: …") plus the pointer to --help.
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            eprintln!("minerva: {} (see `minerva --help`)", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("minerva: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<(), CliError> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Inspect { path, json } => inspect::run(&path, json, &mut out),
        Command::Dump { path, tensor, output } => dump::run(&path, &tensor, &output),
        Command::Score { path, tokens, ctx, out: logits, threads } => {
            score::run(&path, &tokens, score::Options { ctx, out: logits.as_deref(), threads }, &mut out)
        }
        Command::Bench { path, prompt, gen_tokens, reps, threads, device, json } => {
            let opts = bench::Options { prompt, gen_tokens, reps, threads, device, json };
            bench::run(&path, &opts, &mut out)
        }
    }
}
