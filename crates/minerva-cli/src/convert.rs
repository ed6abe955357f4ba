//! `minerva convert SRC --to gguf|safetensors|mlx [--quant TYPE] [--dtype T] [--mlx-bits N] [--force] OUT`: the
//! weights through `minerva_model::convert`, the tokenizer through
//! `minerva_generate::tokenizer::convert`; a progress bar on a terminal and one summary line.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use minerva_core::DType;
use minerva_generate::tokenizer::convert as tokenizer;
use minerva_model::SourceFormat;
use minerva_model::convert::{ConvertOptions, Extras, MlxQuant, Progress, QUANT_TYPES, Quant, Target, convert};

use crate::error::CliError;

/// The command's arguments.
pub struct Args {
    pub src: PathBuf,
    pub to: String,
    pub quant: Option<String>,
    pub dtype: Option<String>,
    pub mlx_bits: Option<String>,
    pub force: bool,
    pub out: PathBuf,
}

fn parse_dtype(flag: &str, name: &str, allowed: &[DType]) -> Result<DType, CliError> {
    DType::from_name(&name.to_ascii_uppercase()).filter(|d| allowed.contains(d)).ok_or_else(|| {
        let names: Vec<String> = allowed.iter().map(|d| d.to_string().to_ascii_lowercase()).collect();
        CliError::Usage(format!("{flag} {name}: expected one of {}", names.join(", ")))
    })
}

/// The directory of a SafeTensors source (a file's parent).
fn checkpoint_dir(src: &Path) -> PathBuf {
    if src.is_dir() { src.to_path_buf() } else { src.parent().map(Path::to_path_buf).unwrap_or_default() }
}

/// The tokenizer in the form the target wants.
fn extras(src: &Path, target: Target) -> Result<Extras, CliError> {
    let generate = |source| CliError::Generate { path: src.to_path_buf(), source };
    let mut extras = Extras::default();
    match (SourceFormat::detect(src), target) {
        (SourceFormat::Gguf, Target::Gguf) => {} // the keys are copied as stored
        (SourceFormat::Gguf, _) => {
            let g = minerva_gguf::Gguf::open(src).map_err(CliError::gguf(src))?;
            extras.files = tokenizer::files_from_gguf(&g).map_err(generate)?;
        }
        (SourceFormat::SafeTensors, Target::Gguf) => {
            // GGUF holds byte-level BPE and SentencePiece vocabularies only; the weights are still
            // worth converting without one (run them with token ids), so this is a warning.
            match tokenizer::gguf_metadata_from_dir(&checkpoint_dir(src)) {
                Ok(keys) => extras.gguf_metadata = keys,
                Err(e) => eprintln!("minerva: warning: tokenizer not converted: {e}"),
            }
        }
        (SourceFormat::SafeTensors, _) => {
            extras.files = tokenizer::files_from_dir(&checkpoint_dir(src)).map_err(generate)?;
        }
    }
    Ok(extras)
}

/// Runs the conversion and prints the summary line.
pub fn run(args: &Args, out: &mut dyn Write) -> Result<(), CliError> {
    let target = Target::parse(&args.to)
        .ok_or_else(|| CliError::Usage(format!("--to {}: expected gguf, safetensors or mlx", args.to)))?;
    let mut opts = ConvertOptions::new(target);
    opts.force = args.force;
    opts.quant = args
        .quant
        .as_deref()
        .map(|q| {
            Quant::parse(q).ok_or_else(|| {
                let mut names: Vec<String> = QUANT_TYPES.iter().map(|d| d.to_string().to_ascii_lowercase()).collect();
                names.extend(["q4_k_m".into(), "q5_k_m".into()]);
                CliError::Usage(format!("--quant {q}: expected one of {}", names.join(", ")))
            })
        })
        .transpose()?;
    opts.dtype =
        args.dtype.as_deref().map(|d| parse_dtype("--dtype", d, &[DType::F32, DType::F16, DType::BF16])).transpose()?;
    opts.mlx_quant = match (target, args.mlx_bits.as_deref()) {
        (Target::Mlx, None) => Some(MlxQuant::with_bits(8).map_err(|e| CliError::Usage(e.to_string()))?),
        (Target::Mlx, Some("none")) => None,
        (Target::Mlx, Some(bits)) => {
            let usage = || CliError::Usage(format!("--mlx-bits {bits}: expected 2, 3, 4, 5, 6, 8 or none"));
            let bits: u32 = bits.parse().map_err(|_| usage())?;
            Some(MlxQuant::with_bits(bits).map_err(|_| usage())?)
        }
        (_, Some(bits)) => {
            return Err(CliError::Usage(format!("--mlx-bits {bits}: only for --to mlx (GGUF output takes --quant)")));
        }
        (_, None) => None,
    };
    if args.out.exists() && !args.force {
        return Err(CliError::Usage(format!("{} exists (give --force to replace it)", args.out.display())));
    }
    let extras = extras(&args.src, target)?;
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} tensors {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let start = Instant::now();
    let mut on_progress = |p: Progress<'_>| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(p.tensor.to_string());
    };
    let report = convert(&args.src, &args.out, &opts, &extras, &mut on_progress)
        .map_err(|e| CliError::Convert { path: args.src.clone(), source: Box::new(e) })?;
    bar.finish_and_clear();
    let write_err = |source| CliError::Output { path: PathBuf::from("stdout"), source };
    writeln!(
        out,
        "{}: {} ({:.1} MB of tensors in {:.1} s)",
        args.out.display(),
        report.summary(),
        report.bytes_written as f64 / 1e6,
        start.elapsed().as_secs_f64()
    )
    .map_err(write_err)
}
