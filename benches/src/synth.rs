//! Synthetic LLaMA-family GGUF files at real shapes with random quantized weights, written
//! streaming (one 1 MiB chunk in memory at a time), for decode benchmarks of models we do not
//! have (`cargo xtask synth`). Every byte of tensor data is written (no sparse holes): decode speed
//! depends on the bytes really being in memory.
//!
//! Random block bytes would hold NaN/inf scales, so each block's f16 scale fields are overwritten
//! with small finite values; the quants stay random. The tokenizer is a stub (`vocab` byte tokens):
//! enough for `minerva bench` (token ids), not for text.

use std::io::Write;
use std::path::Path;

use minerva_core::DType;
use minerva_gguf::{GgufWriter, MetadataValue};

/// Shapes of a LLaMA-family preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaShape {
    /// Decoder blocks.
    pub layers: usize,
    /// Hidden size.
    pub hidden: usize,
    /// MLP size.
    pub ff: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Whether the LM head is the token embedding (no `output.weight`).
    pub tied: bool,
}

/// A preset by name: `8b` (Llama-3.1-8B), `1b` (Llama-3.2-1B), `tiny` (for tests).
pub fn llama_preset(name: &str) -> Option<LlamaShape> {
    Some(match name {
        "8b" => LlamaShape { layers: 32, hidden: 4096, ff: 14336, heads: 32, kv_heads: 8, vocab: 128_256, tied: false },
        "1b" => LlamaShape { layers: 16, hidden: 2048, ff: 8192, heads: 32, kv_heads: 8, vocab: 128_256, tied: true },
        "tiny" => LlamaShape { layers: 2, hidden: 128, ff: 256, heads: 4, kv_heads: 2, vocab: 512, tied: false },
        _ => return None,
    })
}

/// The (name, dtype, shape in numpy order) of every tensor, in file order.
fn llama_tensors(s: &LlamaShape, quant: DType) -> Vec<(String, DType, Vec<usize>)> {
    let head_dim = s.hidden / s.heads;
    let (q, kv) = (s.heads * head_dim, s.kv_heads * head_dim);
    let mut t = vec![("token_embd.weight".to_string(), quant, vec![s.vocab, s.hidden])];
    for l in 0..s.layers {
        let p = |n: &str| format!("blk.{l}.{n}.weight");
        t.push((p("attn_norm"), DType::F32, vec![s.hidden]));
        t.push((p("attn_q"), quant, vec![q, s.hidden]));
        t.push((p("attn_k"), quant, vec![kv, s.hidden]));
        t.push((p("attn_v"), quant, vec![kv, s.hidden]));
        t.push((p("attn_output"), quant, vec![s.hidden, q]));
        t.push((p("ffn_norm"), DType::F32, vec![s.hidden]));
        t.push((p("ffn_gate"), quant, vec![s.ff, s.hidden]));
        t.push((p("ffn_up"), quant, vec![s.ff, s.hidden]));
        t.push((p("ffn_down"), quant, vec![s.hidden, s.ff]));
    }
    t.push(("output_norm.weight".to_string(), DType::F32, vec![s.hidden]));
    if !s.tied {
        t.push(("output.weight".to_string(), quant, vec![s.vocab, s.hidden]));
    }
    t
}

/// Writes a synthetic LLaMA GGUF with weights in `quant` (Q4_0 or Q8_0) to `path`; returns its size.
pub fn write_llama_gguf(shape: &LlamaShape, quant: DType, path: &Path, seed: u64) -> std::io::Result<u64> {
    if !matches!(quant, DType::Q4_0 | DType::Q8_0) {
        return Err(std::io::Error::other(format!("--quant {quant}: only q4_0 and q8_0 are supported")));
    }
    let mut w = GgufWriter::new();
    let head_dim = (shape.hidden / shape.heads) as u32;
    let meta: Vec<(&str, MetadataValue)> = vec![
        ("general.architecture", "llama".into()),
        ("general.name", "minerva synthetic llama".into()),
        ("llama.block_count", (shape.layers as u32).into()),
        ("llama.context_length", 8192u32.into()),
        ("llama.embedding_length", (shape.hidden as u32).into()),
        ("llama.feed_forward_length", (shape.ff as u32).into()),
        ("llama.attention.head_count", (shape.heads as u32).into()),
        ("llama.attention.head_count_kv", (shape.kv_heads as u32).into()),
        ("llama.attention.layer_norm_rms_epsilon", 1e-5f32.into()),
        ("llama.rope.freq_base", 500_000f32.into()),
        ("llama.rope.dimension_count", head_dim.into()),
        ("tokenizer.ggml.model", "gpt2".into()),
        ("tokenizer.ggml.tokens", MetadataValue::strings((0..shape.vocab).map(|i| format!("t{i}")))),
    ];
    for (k, v) in meta {
        w.add_metadata(k, v).map_err(std::io::Error::other)?;
    }
    let tensors = llama_tensors(shape, quant);
    for (name, dtype, dims) in &tensors {
        w.add_tensor_info(name.as_str(), *dtype, dims).map_err(std::io::Error::other)?;
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut data = w.write_header(file).map_err(std::io::Error::other)?;
    let mut rng = seed | 1;
    let mut chunk = vec![0u8; 1 << 20];
    for (_, dtype, dims) in &tensors {
        let cols = *dims.last().expect("every tensor has a dimension");
        let rows: usize = dims[..dims.len() - 1].iter().product();
        let row_bytes = dtype.row_bytes(cols).ok_or_else(|| std::io::Error::other("cols not whole blocks"))?;
        let mut left = rows * row_bytes;
        // Whole blocks per chunk so that each chunk starts at a block boundary.
        let block = dtype.block_bytes();
        let per_chunk = chunk.len() / block * block;
        while left > 0 {
            let n = left.min(per_chunk);
            fill_random(*dtype, &mut chunk[..n], &mut rng);
            data.write_chunk(&chunk[..n]).map_err(std::io::Error::other)?;
            left -= n;
        }
    }
    let mut file = data.finish().map_err(std::io::Error::other)?;
    file.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

/// Random bytes of whole blocks of `dtype` with finite scales: F32 values in [-0.5, 0.5) near 1
/// for norms (1 ± 0.5), Q8_0/Q4_0 blocks with an f16 scale of 2⁻¹⁰…2⁻⁶.
fn fill_random(dtype: DType, out: &mut [u8], rng: &mut u64) {
    let mut next = || {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    for word in out.chunks_mut(8) {
        let bytes = next().to_le_bytes();
        word.copy_from_slice(&bytes[..word.len()]);
    }
    match dtype {
        DType::F32 => {
            for v in out.chunks_exact_mut(4) {
                let x = 0.5 + (next() >> 40) as f32 / (1u64 << 24) as f32;
                v.copy_from_slice(&x.to_le_bytes());
            }
        }
        _ => {
            for block in out.chunks_exact_mut(dtype.block_bytes()) {
                // f16 with exponent 5..9 (2^-10 .. 2^-6) and a random mantissa: finite, normal.
                let bits = (((5 + next() % 5) as u16) << 10) | (next() as u16 & 0x3FF);
                block[..2].copy_from_slice(&bits.to_le_bytes());
            }
        }
    }
}
