//! The shapes of real models and their GGUF tensor tables, for synthetic checkpoints: one place
//! for `cargo xtask synth` (random checkpoints at real shapes) and the benchmarks (a sparse
//! GPT-OSS-20B GGUF to open). GPT-OSS-20B's numbers are `openai/gpt-oss-20b`'s; the LLaMA ones are
//! Llama-3.1-8B's and Llama-3.2-1B's `config.json`.

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
    /// Whether the LM head is the token embedding (no `output.weight` / `lm_head.weight`).
    pub tied: bool,
}

impl LlamaShape {
    /// Dimensions per head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// A LLaMA preset by name: `8b` (Llama-3.1-8B), `1b` (Llama-3.2-1B), `135m` (SmolLM2-135M), `tiny`
/// (tests).
pub fn llama_preset(name: &str) -> Option<LlamaShape> {
    Some(match name {
        "8b" => LlamaShape { layers: 32, hidden: 4096, ff: 14336, heads: 32, kv_heads: 8, vocab: 128_256, tied: false },
        "1b" => LlamaShape { layers: 16, hidden: 2048, ff: 8192, heads: 32, kv_heads: 8, vocab: 128_256, tied: true },
        // SmolLM2-135M's shapes (head_dim 64): the real model's speed on a machine it can't reach.
        "135m" => LlamaShape { layers: 30, hidden: 576, ff: 1536, heads: 9, kv_heads: 3, vocab: 49_152, tied: true },
        "tiny" => LlamaShape { layers: 2, hidden: 128, ff: 256, heads: 4, kv_heads: 2, vocab: 512, tied: false },
        _ => return None,
    })
}

/// The shapes of a GPT-OSS model (the numbers llama.cpp's GGUF and `config.json` carry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GptOssShape {
    /// Decoder blocks.
    pub layers: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Expert MLP size (`intermediate_size`).
    pub ff: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Dimensions per head.
    pub head_dim: usize,
    /// Experts per layer.
    pub experts: usize,
    /// Experts used per token.
    pub experts_used: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Sliding window of the windowed (even) layers.
    pub window: usize,
}

impl GptOssShape {
    /// `openai/gpt-oss-20b`.
    pub const B20: GptOssShape = GptOssShape {
        layers: 24,
        hidden: 2880,
        ff: 2880,
        heads: 64,
        kv_heads: 8,
        head_dim: 64,
        experts: 32,
        experts_used: 4,
        vocab: 201_088,
        window: 128,
    };
}

/// Every tensor of a llama.cpp GPT-OSS GGUF in file order: (name, type, shape in numpy order),
/// with the types of the real 20B file (MXFP4 experts, Q8_0 matrices, F32 vectors).
pub fn gpt_oss_gguf_tensors(s: &GptOssShape) -> Vec<(String, DType, Vec<usize>)> {
    let (q_dim, kv_dim, e, ff, n_exp) = (s.heads * s.head_dim, s.kv_heads * s.head_dim, s.hidden, s.ff, s.experts);
    let mut out = vec![("token_embd.weight".to_string(), DType::Q8_0, vec![s.vocab, e])];
    let mut t = |name: String, dtype: DType, shape: &[usize]| out.push((name, dtype, shape.to_vec()));
    for l in 0..s.layers {
        let p = |s: &str| format!("blk.{l}.{s}");
        t(p("attn_norm.weight"), DType::F32, &[e]);
        t(p("attn_q.weight"), DType::Q8_0, &[q_dim, e]);
        t(p("attn_q.bias"), DType::F32, &[q_dim]);
        t(p("attn_k.weight"), DType::Q8_0, &[kv_dim, e]);
        t(p("attn_k.bias"), DType::F32, &[kv_dim]);
        t(p("attn_v.weight"), DType::Q8_0, &[kv_dim, e]);
        t(p("attn_v.bias"), DType::F32, &[kv_dim]);
        t(p("attn_output.weight"), DType::Q8_0, &[e, q_dim]);
        t(p("attn_output.bias"), DType::F32, &[e]);
        t(p("attn_sinks.weight"), DType::F32, &[s.heads]);
        t(p("post_attention_norm.weight"), DType::F32, &[e]);
        t(p("ffn_gate_inp.weight"), DType::F32, &[n_exp, e]);
        t(p("ffn_gate_inp.bias"), DType::F32, &[n_exp]);
        for (proj, rows, cols) in [("gate", ff, e), ("up", ff, e), ("down", e, ff)] {
            t(p(&format!("ffn_{proj}_exps.weight")), DType::MXFP4, &[n_exp, rows, cols]);
            t(p(&format!("ffn_{proj}_exps.bias")), DType::F32, &[n_exp, rows]);
        }
    }
    t("output_norm.weight".to_string(), DType::F32, &[e]);
    t("output.weight".to_string(), DType::Q8_0, &[s.vocab, e]);
    out
}

/// A writer holding the header of a GPT-OSS GGUF as llama.cpp lays it out: the model keys, with
/// `tokenizer` a GPT-4o-sized stand-in tokenizer (`vocab` tokens, 446 189 merges as in the real
/// file), and every tensor of [`gpt_oss_gguf_tensors`] declared.
pub fn gpt_oss_gguf_header(s: &GptOssShape, tokenizer: bool) -> GgufWriter {
    const MERGES: usize = 446_189;
    let count = |n: usize| MetadataValue::from(u32::try_from(n).unwrap_or(u32::MAX));
    let mut w = GgufWriter::new();
    let mut meta = |k: &str, v: MetadataValue| w_add(&mut w, k, v);
    meta("general.architecture", crate::arch::gpt_oss::GPT_OSS.gguf_output.into());
    meta("general.type", "model".into());
    meta("general.name", "Gpt Oss 20b".into());
    meta("general.basename", "gpt-oss".into());
    meta("general.size_label", "20B".into());
    meta("general.license", "apache-2.0".into());
    meta("general.quantization_version", 2u32.into());
    meta("general.file_type", 38u32.into());
    meta("gpt-oss.block_count", count(s.layers));
    meta("gpt-oss.context_length", 131_072u32.into());
    meta("gpt-oss.embedding_length", count(s.hidden));
    meta("gpt-oss.feed_forward_length", count(s.ff));
    meta("gpt-oss.attention.head_count", count(s.heads));
    meta("gpt-oss.attention.head_count_kv", count(s.kv_heads));
    meta("gpt-oss.attention.key_length", count(s.head_dim));
    meta("gpt-oss.attention.value_length", count(s.head_dim));
    meta("gpt-oss.attention.sliding_window", count(s.window));
    meta("gpt-oss.attention.layer_norm_rms_epsilon", 1e-5f32.into());
    meta("gpt-oss.rope.freq_base", 150_000f32.into());
    meta("gpt-oss.rope.scaling.type", "yarn".into());
    meta("gpt-oss.rope.scaling.factor", 32f32.into());
    meta("gpt-oss.rope.scaling.original_context_length", 4096u32.into());
    meta("gpt-oss.expert_count", count(s.experts));
    meta("gpt-oss.expert_used_count", count(s.experts_used));
    meta("gpt-oss.expert_feed_forward_length", count(s.ff));
    if tokenizer {
        let vocab = s.vocab;
        meta("tokenizer.ggml.model", "gpt2".into());
        meta("tokenizer.ggml.pre", "gpt-4o".into());
        meta("tokenizer.ggml.tokens", MetadataValue::strings((0..vocab).map(|i| format!("Ġtok{i:x}"))));
        meta("tokenizer.ggml.token_type", MetadataValue::i32s((0..vocab).map(|i| if i < 200_000 { 1 } else { 3 })));
        meta(
            "tokenizer.ggml.merges",
            MetadataValue::strings((0..MERGES).map(|i| format!("Ġa{:x} b{:x}", i % 977, i / 977))),
        );
        meta("tokenizer.ggml.bos_token_id", 199_998u32.into());
        meta("tokenizer.ggml.eos_token_id", 200_002u32.into());
        meta("tokenizer.ggml.padding_token_id", 199_999u32.into());
        meta("tokenizer.ggml.add_bos_token", false.into());
        meta(
            "tokenizer.chat_template",
            "{# harmony template #}{% for m in messages %}{{ m.content }}{% endfor %}".into(),
        );
    }
    for (name, dtype, shape) in gpt_oss_gguf_tensors(s) {
        w.add_tensor_info(&name, dtype, &shape).unwrap_or_else(|e| panic!("synthetic tensor {name}: {e}"));
    }
    w
}

fn w_add(w: &mut GgufWriter, key: &str, value: MetadataValue) {
    w.add_metadata(key, value).unwrap_or_else(|e| panic!("synthetic key {key}: {e}"));
}

/// A GPT-OSS preset by name: `20b` (openai/gpt-oss-20b), `tiny` (tests: the fixture's shapes,
/// intermediate ≠ hidden so swapped dimensions fail).
pub fn gpt_oss_preset(name: &str) -> Option<GptOssShape> {
    Some(match name {
        "20b" => GptOssShape::B20,
        "tiny" => GptOssShape {
            layers: 3,
            hidden: 64,
            ff: 96,
            heads: 8,
            kv_heads: 2,
            head_dim: 16,
            experts: 6,
            experts_used: 2,
            vocab: 320,
            window: 8,
        },
        _ => return None,
    })
}
