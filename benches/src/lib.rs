//! Shared helpers for the benchmarks: synthetic files with the shapes of real models.

pub mod synth;

use minerva_core::DType;
use minerva_gguf::{GgufWriter, MetadataValue};

/// The real model fetched by `cargo xtask setup`.
pub fn real_model_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// A writer holding the header of a GPT-OSS-20B GGUF as llama.cpp lays it out: 35 metadata keys
/// (a 201 088-token vocabulary with 446 189 merges among them) and 459 tensors at their real shapes
/// and types. Only the header is meant to be written; the data can be a sparse hole.
pub fn gpt_oss_20b_header() -> GgufWriter {
    const LAYERS: usize = 24;
    const HIDDEN: usize = 2880;
    const EXPERTS: usize = 32;
    const VOCAB: usize = 201_088;
    const MERGES: usize = 446_189;
    let (q_dim, kv_dim) = (64 * 64, 8 * 64);

    let mut w = GgufWriter::new();
    let mut meta = |k: &str, v: MetadataValue| w_add(&mut w, k, v);
    meta("general.architecture", "gpt-oss".into());
    meta("general.type", "model".into());
    meta("general.name", "Gpt Oss 20b".into());
    meta("general.basename", "gpt-oss".into());
    meta("general.size_label", "20B".into());
    meta("general.license", "apache-2.0".into());
    meta("general.quantization_version", 2u32.into());
    meta("general.file_type", 38u32.into());
    meta("gpt-oss.block_count", (LAYERS as u32).into());
    meta("gpt-oss.context_length", 131_072u32.into());
    meta("gpt-oss.embedding_length", (HIDDEN as u32).into());
    meta("gpt-oss.feed_forward_length", (HIDDEN as u32).into());
    meta("gpt-oss.attention.head_count", 64u32.into());
    meta("gpt-oss.attention.head_count_kv", 8u32.into());
    meta("gpt-oss.attention.key_length", 64u32.into());
    meta("gpt-oss.attention.value_length", 64u32.into());
    meta("gpt-oss.attention.sliding_window", 128u32.into());
    meta("gpt-oss.attention.layer_norm_rms_epsilon", 1e-5f32.into());
    meta("gpt-oss.rope.freq_base", 150_000f32.into());
    meta("gpt-oss.rope.scaling.type", "yarn".into());
    meta("gpt-oss.rope.scaling.factor", 32f32.into());
    meta("gpt-oss.rope.scaling.original_context_length", 4096u32.into());
    meta("gpt-oss.expert_count", (EXPERTS as u32).into());
    meta("gpt-oss.expert_used_count", 4u32.into());
    meta("gpt-oss.expert_feed_forward_length", (HIDDEN as u32).into());
    meta("tokenizer.ggml.model", "gpt2".into());
    meta("tokenizer.ggml.pre", "gpt-4o".into());
    meta("tokenizer.ggml.tokens", MetadataValue::strings((0..VOCAB).map(|i| format!("Ġtok{i:x}"))));
    meta("tokenizer.ggml.token_type", MetadataValue::i32s((0..VOCAB).map(|i| if i < 200_000 { 1 } else { 3 })));
    meta(
        "tokenizer.ggml.merges",
        MetadataValue::strings((0..MERGES).map(|i| format!("Ġa{:x} b{:x}", i % 977, i / 977))),
    );
    meta("tokenizer.ggml.bos_token_id", 199_998u32.into());
    meta("tokenizer.ggml.eos_token_id", 200_002u32.into());
    meta("tokenizer.ggml.padding_token_id", 199_999u32.into());
    meta("tokenizer.ggml.add_bos_token", false.into());
    meta("tokenizer.chat_template", "{# harmony template #}{% for m in messages %}{{ m.content }}{% endfor %}".into());

    let mut t = |name: &str, dtype: DType, shape: &[usize]| {
        w.add_tensor_info(name, dtype, shape).unwrap_or_else(|e| panic!("synthetic tensor {name}: {e}"));
    };
    t("token_embd.weight", DType::Q8_0, &[VOCAB, HIDDEN]);
    for l in 0..LAYERS {
        let p = |s: &str| format!("blk.{l}.{s}");
        t(&p("attn_norm.weight"), DType::F32, &[HIDDEN]);
        t(&p("attn_q.weight"), DType::Q8_0, &[q_dim, HIDDEN]);
        t(&p("attn_q.bias"), DType::F32, &[q_dim]);
        t(&p("attn_k.weight"), DType::Q8_0, &[kv_dim, HIDDEN]);
        t(&p("attn_k.bias"), DType::F32, &[kv_dim]);
        t(&p("attn_v.weight"), DType::Q8_0, &[kv_dim, HIDDEN]);
        t(&p("attn_v.bias"), DType::F32, &[kv_dim]);
        t(&p("attn_output.weight"), DType::Q8_0, &[HIDDEN, q_dim]);
        t(&p("attn_output.bias"), DType::F32, &[HIDDEN]);
        t(&p("attn_sinks.weight"), DType::F32, &[64]);
        t(&p("post_attention_norm.weight"), DType::F32, &[HIDDEN]);
        t(&p("ffn_gate_inp.weight"), DType::F32, &[EXPERTS, HIDDEN]);
        t(&p("ffn_gate_inp.bias"), DType::F32, &[EXPERTS]);
        for proj in ["gate", "up", "down"] {
            t(&p(&format!("ffn_{proj}_exps.weight")), DType::MXFP4, &[EXPERTS, HIDDEN, HIDDEN]);
            t(&p(&format!("ffn_{proj}_exps.bias")), DType::F32, &[EXPERTS, HIDDEN]);
        }
    }
    t("output_norm.weight", DType::F32, &[HIDDEN]);
    t("output.weight", DType::Q8_0, &[VOCAB, HIDDEN]);
    w
}

fn w_add(w: &mut GgufWriter, key: &str, value: MetadataValue) {
    w.add_metadata(key, value).unwrap_or_else(|e| panic!("synthetic key {key}: {e}"));
}

/// Writes `writer`'s header to `path` and extends the file to its full length as a sparse hole,
/// so a reader sees a complete file of the real size without the disk holding it.
pub fn write_sparse(writer: &GgufWriter, path: &std::path::Path) -> std::io::Result<u64> {
    let header = writer.header_bytes().map_err(std::io::Error::other)?;
    let len = writer.file_len().map_err(std::io::Error::other)?;
    std::fs::write(path, header)?;
    std::fs::OpenOptions::new().write(true).open(path)?.set_len(len)?;
    Ok(len)
}
