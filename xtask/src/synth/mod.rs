//! `cargo xtask synth`: synthetic checkpoints with random weights at the real shapes and in the
//! real storage formats of models we cannot download here, for speed measurements and loader tests.
//!
//! ```text
//! cargo xtask synth --arch gpt-oss --preset 20b|tiny --format gguf|safetensors|mlx [--seed S] OUT
//! cargo xtask synth --arch llama --preset 8b|1b|135m|tiny --format gguf|safetensors [--quant q4_0|q8_0] [--seed S] OUT
//! (GGUF: [--vocab])
//! ```
//!
//! GGUF writes one file `OUT`; SafeTensors (Hugging Face layout) and MLX write a directory `OUT`
//! with `config.json` and `model.safetensors` (or 5 GB shards plus `model.safetensors.index.json`,
//! as the real checkpoints). No tokenizer (run the files with token ids: `minerva score --tokens`),
//! except GGUF with `--vocab`: a stand-in vocabulary so that llama.cpp's tools load the file.
//!
//! Every byte is generated and written chunk by chunk ([`CHUNK`]), so memory stays bounded whatever
//! the model size. The values are random but sane, so activations stay finite and the router spreads
//! tokens over experts as a trained model does:
//! * float matrices uniform with standard deviation 1/√(input size) (embeddings: 1), so each
//!   projection keeps the activations' scale; norm weights 1 ± 0.05; biases ±0.02·√3; sinks σ 1;
//! * Q8_0 / Q4_0 blocks: random quants, f16 scale chosen for that σ (± 25 % per block);
//! * MXFP4 (E2M1 codes, E8M0 scales): random codes, exponents 127 + log₂(σ / 2.93) ± 1 (2.93 is
//!   the RMS of a random E2M1 code), i.e. 119…121 for GPT-OSS-20B's 2880 inputs;
//! * MLX 8-bit affine: random codes, scale σ/73.9 and bias −127.5·scale (centred codes).

mod gguf;
mod rng;
mod safetensors;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use minerva_core::DType;
use minerva_model::arch::{ARCHITECTURES, Graph, registry};

pub use minerva_model::synthetic::{LlamaShape, gpt_oss_preset, llama_preset};
use rng::Rng;
pub use safetensors::MAX_SHARD;

/// Bytes generated and written at a time.
pub const CHUNK: usize = 4 << 20;

/// What to write.
#[derive(Clone, Debug)]
pub struct Options {
    /// The model.
    pub arch: Arch,
    /// The storage format.
    pub format: Format,
    /// Matrix type of LLaMA GGUF files (Q4_0 or Q8_0); GPT-OSS files use the real ones.
    pub quant: DType,
    /// Seed of the random weights.
    pub seed: u64,
    /// Output file (GGUF) or directory (SafeTensors, MLX).
    pub out: PathBuf,
    /// Largest SafeTensors shard (5 GB as `save_pretrained`; tests use less to make shards).
    pub shard_bytes: u64,
    /// GGUF: also write a stand-in tokenizer (a vocabulary of the preset's size), so that
    /// llama.cpp's tools load the file (they refuse one without `tokenizer.ggml.model`).
    pub vocab: bool,
}

/// A model architecture at a preset's shapes.
#[derive(Clone, Copy, Debug)]
pub enum Arch {
    /// GPT-OSS (MoE, MXFP4 experts).
    GptOss(minerva_model::synthetic::GptOssShape),
    /// LLaMA family (dense).
    Llama(LlamaShape),
}

/// Storage formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One llama.cpp GGUF file.
    Gguf,
    /// A Hugging Face SafeTensors directory.
    Safetensors,
    /// An mlx-community directory (MLX quantization).
    Mlx,
}

/// `cargo xtask synth`'s arguments (names checked against the presets in [`SynthArgs::options`],
/// so that a bad one is named with what exists).
#[derive(Debug, clap::Parser)]
#[command(
    name = "cargo xtask synth",
    about = "Write a synthetic checkpoint with random weights at a real model's shapes"
)]
pub struct SynthArgs {
    /// `gpt-oss` or `llama`.
    #[arg(long)]
    arch: String,
    /// `20b` or `tiny` (gpt-oss); `8b`, `1b` or `tiny` (llama).
    #[arg(long)]
    preset: String,
    /// `gguf`, `safetensors` (or `hf`) or `mlx` (gpt-oss only).
    #[arg(long)]
    format: String,
    /// Matrix type of a llama GGUF: `q4_0` (default) or `q8_0`.
    #[arg(long)]
    quant: Option<String>,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0x5EED)]
    seed: u64,
    /// GGUF: write a stand-in tokenizer too, so that llama.cpp's tools (llama-bench) load the
    /// file: GPT-OSS a GPT-4o-sized BPE vocabulary, LLaMA a SentencePiece one (byte tokens,
    /// then `t<i>`).
    #[arg(long)]
    vocab: bool,
    /// Output file (GGUF) or directory (SafeTensors, MLX).
    out: PathBuf,
}

/// The shapes of `--arch A --preset P`, by the architecture table's row for `A` (its
/// `synthetic_presets`; the graph picks the generator).
pub fn preset_arch(arch: &str, preset: &str) -> Result<Arch> {
    let with_presets = || {
        let rows = ARCHITECTURES.iter().filter(|a| !a.synthetic_presets.is_empty());
        rows.map(|a| a.name).collect::<Vec<_>>().join(" or ")
    };
    let spec = registry::find(arch).with_context(|| format!("--arch {arch}: {}", with_presets()))?;
    if !spec.synthetic_presets.contains(&preset) {
        match spec.synthetic_presets {
            [] => bail!("--arch {arch}: no synthetic presets (they exist for {})", with_presets()),
            names => bail!("--preset {preset}: {} has {}", spec.name, names.join(", ")),
        }
    }
    let missing = || anyhow::anyhow!("--preset {preset}: listed for {} but not defined", spec.name);
    Ok(match spec.graph {
        Graph::GptOss => Arch::GptOss(gpt_oss_preset(preset).ok_or_else(missing)?),
        _ => Arch::Llama(llama_preset(preset).ok_or_else(missing)?),
    })
}

/// Parses `synth`'s arguments (those after `synth`) into what to write (the tests' entry point;
/// `main` parses them as part of `cargo xtask`).
#[cfg(test)]
pub fn parse_args(args: &[String]) -> Result<Options> {
    let args =
        <SynthArgs as clap::Parser>::try_parse_from(std::iter::once("synth".to_string()).chain(args.iter().cloned()))?;
    args.options()
}

impl SynthArgs {
    /// What to write: the preset's shapes, the format and the matrix type.
    pub fn options(&self) -> Result<Options> {
        let SynthArgs { arch, preset, format, quant, seed, vocab, out } = self;
        let format = match format.as_str() {
            "gguf" => Format::Gguf,
            "safetensors" | "hf" => Format::Safetensors,
            "mlx" => Format::Mlx,
            f => bail!("--format {f}: gguf, safetensors or mlx"),
        };
        let arch = preset_arch(arch, preset)?;
        let quant = match (quant.as_deref(), arch, format) {
            (None, Arch::Llama(_), Format::Gguf) => DType::Q4_0,
            (Some("q4_0"), Arch::Llama(_), Format::Gguf) => DType::Q4_0,
            (Some("q8_0"), Arch::Llama(_), Format::Gguf) => DType::Q8_0,
            (Some(q), Arch::Llama(_), Format::Gguf) => bail!("--quant {q}: q4_0 or q8_0"),
            (Some(q), _, _) => {
                bail!("--quant {q}: only for --arch llama --format gguf (the other layouts have fixed types)")
            }
            (None, _, _) => DType::BF16,
        };
        if matches!((arch, format), (Arch::Llama(_), Format::Mlx)) {
            bail!("--arch llama --format mlx: not supported (MLX is written for gpt-oss only)");
        }
        if *vocab && format != Format::Gguf {
            bail!("--vocab: only for --format gguf (the other layouts carry no tokenizer here)");
        }
        // GPT-OSS's stand-in tokenizer has the real special tokens' ids (199 998 …).
        if let (true, Arch::GptOss(s)) = (*vocab, arch)
            && s.vocab <= 200_002
        {
            bail!("--vocab: the gpt-oss tokenizer needs the 20b preset's vocabulary ({} tokens here)", s.vocab);
        }
        Ok(Options { arch, format, quant, seed: *seed, out: out.clone(), shard_bytes: MAX_SHARD, vocab: *vocab })
    }
}

/// Writes the checkpoint `opts` describes; returns the bytes written.
pub fn synth(opts: &Options) -> Result<u64> {
    let mut rng = Rng::new(opts.seed);
    match opts.format {
        Format::Gguf => gguf::write(opts, &mut rng),
        Format::Safetensors | Format::Mlx => safetensors::write(opts, &mut rng),
    }
}

/// How a tensor's bytes are made.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fill {
    /// Floats uniform with this mean and standard deviation, in the tensor's float type.
    Float {
        /// Mean.
        mean: f32,
        /// Standard deviation.
        std: f32,
    },
    /// GGML Q8_0 / Q4_0 / MXFP4 blocks for values of this standard deviation.
    Blocks {
        /// Standard deviation of the dequantized values.
        std: f32,
    },
    /// Random bytes (MXFP4 codes, MLX packed quants).
    Bytes,
    /// E8M0 exponents for MXFP4 codes of this standard deviation.
    E8m0 {
        /// Standard deviation of the dequantized values.
        std: f32,
    },
    /// One value repeated.
    Const(f32),
}

/// Element types of the tensors written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// A GGML type (floats or blocks).
    Ggml(DType),
    /// Bytes (SafeTensors `U8`).
    U8,
    /// Little-endian u32 (SafeTensors `U32`).
    U32,
}

/// The standard deviation that keeps a projection's output at its input's scale.
fn matrix_std(inputs: usize) -> f32 {
    1.0 / (inputs as f32).sqrt()
}

/// The RMS of a uniformly random E2M1 code (values 0, ±0.5, …, ±6).
const E2M1_RMS: f32 = 2.926;

/// The E8M0 exponent for MXFP4 values of standard deviation `std`.
fn e8m0_centre(std: f32) -> u8 {
    (127.0 + (std / E2M1_RMS).log2()).round().clamp(2.0, 252.0) as u8
}

/// Fills `out` (whole units of `elem`) with the bytes `fill` asks for.
pub fn fill_bytes(elem: Elem, fill: Fill, rng: &mut Rng, out: &mut [u8]) {
    match fill {
        Fill::Bytes => rng.fill(out),
        Fill::E8m0 { std } => {
            let centre = e8m0_centre(std);
            for b in out {
                *b = centre - 1 + (rng.next() % 3) as u8;
            }
        }
        Fill::Float { .. } | Fill::Const(_) => {
            let Elem::Ggml(dt @ (DType::F32 | DType::F16 | DType::BF16)) = elem else {
                unreachable!("float fill for {elem:?}")
            };
            for v in out.chunks_exact_mut(dt.block_bytes()) {
                let x = match fill {
                    Fill::Float { mean, std } => mean + std * rng.uniform_unit(),
                    Fill::Const(c) => c,
                    _ => 0.0,
                };
                match dt {
                    DType::F32 => v.copy_from_slice(&x.to_le_bytes()),
                    DType::F16 => v.copy_from_slice(&half::f16::from_f32(x).to_le_bytes()),
                    _ => v.copy_from_slice(&half::bf16::from_f32(x).to_le_bytes()),
                }
            }
        }
        Fill::Blocks { std } => {
            let Elem::Ggml(dt) = elem else { unreachable!("block fill for {elem:?}") };
            rng.fill(out);
            for block in out.chunks_exact_mut(dt.block_bytes()) {
                // ±25 % per block, so blocks differ as trained ones do.
                let scale = std * (1.0 + 0.25 / 3f32.sqrt() * rng.uniform_unit());
                match dt {
                    // RMS of a uniform i8 quant ≈ 73.9, of a Q4_0 quant (q − 8, q in 0..16) ≈ 4.61.
                    DType::Q8_0 => block[..2].copy_from_slice(&half::f16::from_f32(scale / 73.9).to_le_bytes()),
                    DType::Q4_0 => block[..2].copy_from_slice(&half::f16::from_f32(scale / 4.61).to_le_bytes()),
                    DType::MXFP4 => block[0] = e8m0_centre(std) - 1 + (rng.next() % 3) as u8,
                    other => unreachable!("no random blocks for {other}"),
                }
            }
        }
    }
}

/// The bytes of one generation unit (a float, a block, a byte) and the tensor's total bytes.
fn sizes(elem: Elem, shape: &[usize]) -> Result<(usize, usize)> {
    let n: usize = shape.iter().product();
    Ok(match elem {
        Elem::U8 => (1, n),
        Elem::U32 => (4, 4 * n),
        Elem::Ggml(dt) => {
            let cols = *shape.last().context("a tensor without dimensions")?;
            let row = dt.row_bytes(cols).with_context(|| format!("{cols} columns are not whole {dt} blocks"))?;
            (dt.block_bytes(), row * (n / cols.max(1)))
        }
    })
}

/// Generates a tensor's bytes chunk by chunk and hands each chunk to `sink`.
pub fn stream_tensor(
    elem: Elem,
    shape: &[usize],
    fill: Fill,
    rng: &mut Rng,
    buf: &mut Vec<u8>,
    mut sink: impl FnMut(&[u8]) -> Result<()>,
) -> Result<u64> {
    let (unit, total) = sizes(elem, shape)?;
    // Whole units per chunk, so every chunk starts on a block boundary.
    let per_chunk = (CHUNK / unit).max(1) * unit;
    buf.resize(per_chunk, 0);
    let mut left = total;
    while left > 0 {
        let n = left.min(per_chunk);
        fill_bytes(elem, fill, rng, &mut buf[..n]);
        sink(&buf[..n])?;
        left -= n;
    }
    Ok(total as u64)
}

/// The fill of a float or GGML-block tensor by its role, from its name (GGUF or Hugging Face).
pub fn fill_for(name: &str, dtype: DType, shape: &[usize]) -> Fill {
    let std =
        if name.contains("embd") || name.contains("embed") { 1.0 } else { matrix_std(*shape.last().unwrap_or(&1)) };
    if name.contains("norm") {
        Fill::Float { mean: 1.0, std: 0.05 }
    } else if name.contains("sinks") {
        Fill::Float { mean: 0.0, std: 1.0 }
    } else if name.ends_with("bias") {
        Fill::Float { mean: 0.0, std: 0.02 }
    } else if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        Fill::Float { mean: 0.0, std }
    } else {
        Fill::Blocks { std }
    }
}
