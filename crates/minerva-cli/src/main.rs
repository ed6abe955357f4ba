//! `minerva`: the command-line front end.
//!
//! Errors print one line on stderr naming the file and the problem, and exit with code 2.

mod bench;
mod bench_spec;
mod chat;
mod convert;
mod cpu_info;
mod device;
mod dump;
mod error;
mod inspect;
mod load;
mod model_file;
mod npy;
mod run;
mod score;
mod serve;
mod spec;
mod tokenize;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::CliError;

/// Minerva: inspect and run open-weight LLM checkpoints.
#[derive(Debug, Parser)]
#[command(name = "minerva", version, about)]
struct Cli {
    /// The GPU adapter for `--device wgpu`: the first whose name contains this (case-insensitive;
    /// default `MINERVA_ADAPTER`, else the most capable).
    #[arg(long, global = true, value_name = "NAME")]
    adapter: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a model file's metadata, tensor table and totals.
    Inspect {
        /// A GGUF file, a SafeTensors file or index, or a model directory.
        #[arg(required_unless_present = "device")]
        path: Option<PathBuf>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Describe the GPU adapter `--device wgpu` would use instead of a file.
        #[arg(long, conflicts_with = "path")]
        device: bool,
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
        #[command(flatten)]
        model: load::ModelArgs,
        /// Comma-separated token ids.
        #[arg(long, value_delimiter = ',', required_unless_present = "text", conflicts_with = "text")]
        tokens: Vec<u32>,
        /// A text file, tokenized with the model's tokenizer.
        #[arg(long, value_name = "FILE")]
        text: Option<PathBuf>,
        /// Cut the stream into windows of N tokens and score the second half of each.
        #[arg(long, value_name = "N")]
        ctx: Option<usize>,
        /// With --text: do not put BOS first in each window (by default it is, where the model's
        /// tokenizer adds BOS, as llama-perplexity does).
        #[arg(long, requires = "text")]
        no_bos: bool,
        /// Write the logits of every scored position as an f32 `.npy` (positions × vocab).
        #[arg(long, value_name = "LOGITS.npy")]
        out: Option<PathBuf>,
    },
    /// Generate text from a prompt, streamed to stdout.
    Run {
        #[command(flatten)]
        model: load::ModelArgs,
        /// The prompt.
        #[arg(long, short = 'p')]
        prompt: String,
        /// Wrap the prompt as a user message in the model's chat template.
        #[arg(long)]
        chat: bool,
        /// System message (with --chat).
        #[arg(long, requires = "chat")]
        system: Option<String>,
        #[command(flatten)]
        sampling: run::GenArgs,
    },
    /// Talk with the model: history, chat template, /reset, /system TEXT, /exit.
    Chat {
        #[command(flatten)]
        model: load::ModelArgs,
        /// System message.
        #[arg(long)]
        system: Option<String>,
        #[command(flatten)]
        sampling: run::GenArgs,
    },
    /// Print the token ids (and pieces) of a text, as llama.cpp's llama-tokenize does.
    Tokenize {
        /// A GGUF file, or a directory with tokenizer.json.
        path: PathBuf,
        /// The text.
        #[arg(long, required_unless_present = "file", conflicts_with = "file")]
        text: Option<String>,
        /// A file with the text.
        #[arg(long)]
        file: Option<PathBuf>,
        /// One `id -> 'piece'` line per token.
        #[arg(long)]
        pieces: bool,
        /// Print JSON: {"ids": [...], "pieces": [...]}.
        #[arg(long)]
        json: bool,
        /// Do not add BOS/EOS even where the model's metadata asks for them.
        #[arg(long)]
        no_bos: bool,
    },
    /// Serve the model over an OpenAI-compatible HTTP API with continuous batching.
    Serve {
        #[command(flatten)]
        model: load::ModelArgs,
        #[command(flatten)]
        serve: serve::ServeArgs,
    },
    /// Write a model in another format: GGUF ↔ Hugging Face SafeTensors ↔ MLX, tensor by tensor,
    /// with its tokenizer and chat template; lossless where the target holds the source's types.
    Convert {
        /// A GGUF file, a SafeTensors file or index, or a model directory (HF or MLX).
        src: PathBuf,
        /// The output format: gguf (one file), safetensors (a directory as save_pretrained writes
        /// it) or mlx (a directory as mlx-lm writes it).
        #[arg(long)]
        to: String,
        /// Quantize the weight matrices (GGUF output): one type for all (q8_0, q4_0, q4_1, q5_0,
        /// q5_1, q4_k, q5_k, q6_k, mxfp4; as `llama-quantize --pure`) or llama.cpp's q4_k_m /
        /// q5_k_m mixture; blocks bit-identical to llama-quantize's.
        #[arg(long, value_name = "TYPE")]
        quant: Option<String>,
        /// Float type of dequantized tensors (default bf16); given, float matrices are cast too.
        #[arg(long, value_name = "f32|f16|bf16")]
        dtype: Option<String>,
        /// MLX output: quantize the weight matrices (linear layers, embeddings, head) to MLX affine
        /// of this many bits in groups of 64, as `mlx_lm convert -q --q-bits N` (default 8;
        /// `none` keeps floats). GPT-OSS's MXFP4 experts stay MXFP4.
        #[arg(long, value_name = "2|3|4|5|6|8|none")]
        mlx_bits: Option<String>,
        /// Replace OUT if it exists.
        #[arg(long)]
        force: bool,
        /// The output GGUF file or directory.
        out: PathBuf,
    },
    /// Prefill and decode speed (tokens/s, median of repetitions), like llama.cpp's `llama-bench`.
    Bench {
        #[command(flatten)]
        model: load::ModelArgs,
        /// Prompt tokens for the prefill measurement (0 skips it).
        #[arg(short = 'p', long = "prompt", default_value_t = 512)]
        prompt: usize,
        /// Tokens for the decode measurement (0 skips it).
        #[arg(short = 'n', long = "gen", default_value_t = 128)]
        gen_tokens: usize,
        /// Repetitions of each measurement (after one warm-up run).
        #[arg(short = 'r', long = "reps", default_value_t = 5)]
        reps: usize,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// With --spec: a prompt (text file) to generate from, greedily, with and without
        /// speculation; repeatable.
        #[arg(long, value_name = "FILE")]
        prompt_file: Vec<PathBuf>,
        /// With --spec: wrap each prompt as a user message in the model's chat template.
        #[arg(long)]
        chat: bool,
        /// With --spec: the context size.
        #[arg(long, short = 'c', default_value_t = 4096)]
        ctx_size: usize,
        #[command(flatten)]
        spec: spec::SpecArgs,
        /// With --device wgpu: time every GPU kernel (timestamp queries) in one more prefill and
        /// up to 32 decode steps, and print per kernel its time, share, bytes moved and GB/s.
        #[arg(long)]
        profile: bool,
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
            let mut first = rendered.lines().next().unwrap_or("invalid arguments").to_string();
            // "the following required arguments were not provided:" lists them on indented lines.
            if first.ends_with(':') {
                let items: Vec<&str> =
                    rendered.lines().skip(1).take_while(|l| l.starts_with("  ")).map(str::trim).collect();
                first = format!("{first} {}", items.join(", "));
            }
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
    device::set_adapter(cli.adapter);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Inspect { path: Some(path), json, device: false } => inspect::run(&path, json, &mut out),
        Command::Inspect { json, .. } => device::inspect(json, &mut out),
        Command::Dump { path, tensor, output } => dump::run(&path, &tensor, &output),
        Command::Score { model, tokens, text, ctx, out: logits, no_bos } => {
            let text = text.map(|file| read_text(&file)).transpose()?;
            let opts = score::Options { ctx, out: logits.as_deref(), bos_per_window: !no_bos };
            score::run(&model, tokens, text.as_deref(), opts, &mut out)
        }
        Command::Run { model, prompt, chat, system, sampling } => {
            run::run(&model, &sampling, &prompt, chat, system.as_deref(), &mut out)
        }
        Command::Chat { model, system, sampling } => {
            chat::run(&model, &sampling, system, std::io::stdin().lock(), &mut out)
        }
        Command::Tokenize { path, text, file, pieces, json, no_bos } => {
            let text = match (text, file) {
                (Some(t), _) => t,
                (None, Some(f)) => read_text(&f)?,
                (None, None) => return Err(CliError::Usage("give --text TEXT or --file FILE".into())),
            };
            tokenize::run(&path, &text, pieces, json, no_bos, &mut out)
        }
        Command::Serve { model, serve } => serve::run(&model, &serve),
        Command::Convert { src, to, quant, dtype, mlx_bits, force, out: dest } => {
            convert::run(&convert::Args { src, to, quant, dtype, mlx_bits, force, out: dest }, &mut out)
        }
        Command::Bench { model, prompt, gen_tokens, reps, json, prompt_file, chat, ctx_size, spec, profile } => {
            let spec = match spec.kind()? {
                spec::SpecKind::None if !prompt_file.is_empty() || chat => {
                    return Err(CliError::Usage("--prompt-file and --chat measure --spec ngram|draft".into()));
                }
                spec::SpecKind::None => None,
                _ if prompt_file.is_empty() => {
                    return Err(CliError::Usage("--spec measures real prompts: give --prompt-file FILE".into()));
                }
                _ => Some(bench::SpecOptions { prompts: prompt_file, chat, args: spec, context: ctx_size }),
            };
            if profile && (model.device != device::Device::Wgpu || spec.is_some()) {
                return Err(CliError::Usage(
                    "--profile times GPU kernels: use it with --device wgpu, without --spec".into(),
                ));
            }
            if profile {
                device::request_timestamps();
            }
            let opts = bench::Options { prompt, gen_tokens, reps, json, spec, profile };
            bench::run(&model, &opts, &mut out)
        }
    }
}

fn read_text(path: &std::path::Path) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|e| CliError::Request { path: path.to_path_buf(), message: e.to_string() })
}
