//! The preset shapes. GPT-OSS-20B's come from `minerva_benches` (shared with the GGUF-open
//! benchmark); the LLaMA ones are Llama-3.1-8B's and Llama-3.2-1B's `config.json`.

use minerva_benches::GptOssShape;

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

/// A LLaMA preset by name: `8b` (Llama-3.1-8B), `1b` (Llama-3.2-1B), `tiny` (tests).
pub fn llama_preset(name: &str) -> Option<LlamaShape> {
    Some(match name {
        "8b" => LlamaShape { layers: 32, hidden: 4096, ff: 14336, heads: 32, kv_heads: 8, vocab: 128_256, tied: false },
        "1b" => LlamaShape { layers: 16, hidden: 2048, ff: 8192, heads: 32, kv_heads: 8, vocab: 128_256, tied: true },
        "tiny" => LlamaShape { layers: 2, hidden: 128, ff: 256, heads: 4, kv_heads: 2, vocab: 512, tied: false },
        _ => return None,
    })
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
