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
        Arch::GptOss(s) => (gpt_oss_gguf_header(&s, opts.vocab), gpt_oss_gguf_tensors(&s)),
        Arch::Llama(s) => llama_header(&s, opts.quant, opts.vocab)?,
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

/// A LLaMA GGUF header as llama.cpp's converter writes it (with `vocab`, a SentencePiece
/// tokenizer of `<unk>`, `<s>`, `</s>`, the 256 byte tokens and `t<i>` up to the preset's size),
/// every matrix in `quant` as `llama-quantize --pure` makes them, norms F32.
fn llama_header(s: &LlamaShape, quant: DType, vocab: bool) -> Result<(GgufWriter, Vec<TensorDecl>)> {
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
    if vocab {
        // SentencePiece token types: 1 normal, 2 unknown, 3 control, 6 byte.
        let token = |i: usize| match i {
            0 => ("<unk>".to_string(), 2),
            1 => ("<s>".to_string(), 3),
            2 => ("</s>".to_string(), 3),
            3..259 => (format!("<0x{:02X}>", i - 3), 6),
            _ => (format!("t{i}"), 1),
        };
        w.add_metadata("tokenizer.ggml.model", MetadataValue::from("llama"))?;
        w.add_metadata("tokenizer.ggml.tokens", MetadataValue::strings((0..s.vocab).map(|i| token(i).0)))?;
        w.add_metadata("tokenizer.ggml.scores", MetadataValue::f32s((0..s.vocab).map(|i| -(i as f32))))?;
        w.add_metadata("tokenizer.ggml.token_type", MetadataValue::i32s((0..s.vocab).map(|i| token(i).1)))?;
        w.add_metadata("tokenizer.ggml.bos_token_id", MetadataValue::from(1u32))?;
        w.add_metadata("tokenizer.ggml.eos_token_id", MetadataValue::from(2u32))?;
    }
    for (name, dtype, shape) in &tensors {
        w.add_tensor_info(name.as_str(), *dtype, shape)?;
    }
    Ok((w, tensors))
}
