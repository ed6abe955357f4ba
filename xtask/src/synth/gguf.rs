//! GGUF output: llama.cpp's names, keys and tensor types, data streamed after the header.

use std::io::Write;

use anyhow::{Context, Result};
use minerva_core::DType;
use minerva_gguf::{GgufWriter, MetadataValue};
use minerva_model::synthetic::{gpt_oss_gguf_header, gpt_oss_gguf_tensors};

use super::{Arch, Elem, LlamaShape, Options, fill_for, rng::Rng, stream_tensor};

/// A tensor's name, type and shape (numpy order).
type TensorDecl = (String, DType, Vec<usize>);

/// Writes `opts.out` as one GGUF file; returns its size.
pub fn write(opts: &Options, rng: &mut Rng) -> Result<u64> {
    let (writer, tensors) = match opts.arch {
        Arch::GptOss(s) => (gpt_oss_gguf_header(&s, false), gpt_oss_gguf_tensors(&s)),
        Arch::Llama(s) => llama_header(&s, opts.quant)?,
    };
    let file = std::fs::File::create(&opts.out).with_context(|| format!("cannot create {}", opts.out.display()))?;
    let mut data = writer.write_header(std::io::BufWriter::with_capacity(1 << 20, file))?;
    let mut buf = Vec::new();
    for (name, dtype, shape) in &tensors {
        let fill = fill_for(name, *dtype, shape);
        stream_tensor(Elem::Ggml(*dtype), shape, fill, rng, &mut buf, |chunk| Ok(data.write_chunk(chunk)?))
            .with_context(|| format!("tensor {name}"))?;
    }
    data.finish()?.flush()?;
    Ok(std::fs::metadata(&opts.out)?.len())
}

/// A LLaMA GGUF header as llama.cpp's converter writes it (without tokenizer), every matrix in
/// `quant` as `llama-quantize --pure` makes them, norms F32.
fn llama_header(s: &LlamaShape, quant: DType) -> Result<(GgufWriter, Vec<TensorDecl>)> {
    let (q, kv) = (s.heads * s.head_dim(), s.kv_heads * s.head_dim());
    let mut tensors = vec![("token_embd.weight".to_string(), quant, vec![s.vocab, s.hidden])];
    for l in 0..s.layers {
        let mut t =
            |n: &str, dtype: DType, shape: &[usize]| tensors.push((format!("blk.{l}.{n}"), dtype, shape.to_vec()));
        t("attn_norm.weight", DType::F32, &[s.hidden]);
        t("attn_q.weight", quant, &[q, s.hidden]);
        t("attn_k.weight", quant, &[kv, s.hidden]);
        t("attn_v.weight", quant, &[kv, s.hidden]);
        t("attn_output.weight", quant, &[s.hidden, q]);
        t("ffn_norm.weight", DType::F32, &[s.hidden]);
        t("ffn_gate.weight", quant, &[s.ff, s.hidden]);
        t("ffn_up.weight", quant, &[s.ff, s.hidden]);
        t("ffn_down.weight", quant, &[s.hidden, s.ff]);
    }
    tensors.push(("output_norm.weight".to_string(), DType::F32, vec![s.hidden]));
    if !s.tied {
        tensors.push(("output.weight".to_string(), quant, vec![s.vocab, s.hidden]));
    }
    let count = |n: usize| MetadataValue::from(u32::try_from(n).unwrap_or(u32::MAX));
    let file_type: u32 = if quant == DType::Q8_0 { 7 } else { 2 };
    let meta: Vec<(&str, MetadataValue)> = vec![
        ("general.architecture", "llama".into()),
        ("general.name", "minerva synthetic llama".into()),
        ("general.file_type", file_type.into()),
        ("llama.block_count", count(s.layers)),
        ("llama.context_length", 131_072u32.into()),
        ("llama.embedding_length", count(s.hidden)),
        ("llama.feed_forward_length", count(s.ff)),
        ("llama.attention.head_count", count(s.heads)),
        ("llama.attention.head_count_kv", count(s.kv_heads)),
        ("llama.attention.layer_norm_rms_epsilon", 1e-5f32.into()),
        ("llama.rope.freq_base", 500_000f32.into()),
        ("llama.rope.dimension_count", count(s.head_dim())),
    ];
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.add_metadata(k, v)?;
    }
    for (name, dtype, shape) in &tensors {
        w.add_tensor_info(name.as_str(), *dtype, shape)?;
    }
    Ok((w, tensors))
}
