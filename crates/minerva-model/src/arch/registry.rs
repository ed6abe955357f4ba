//! The architecture table: what each architecture is, in one row — the names it answers to in
//! GGUF (`general.architecture`) and Hugging Face (`config.json` `model_type`), the graph it runs,
//! its tensor names in both formats, how llama.cpp's converter changes its tensors, its chat
//! format and its synthetic presets. Each `arch/<name>/` folder exports its rows; loading,
//! `convert`, the chat templates, the server and `xtask` ask this table, so no other place
//! matches an architecture's name.
//!
//! Adding an architecture: a folder (config, weights, graph), its [`ArchSpec`] row in
//! [`ARCHITECTURES`], and — for a new [`Graph`] — one arm where the crate matches on it
//! (`arch::load_*`, `arch::forward`, `convert`'s config writers). `tests/registry.rs` walks the
//! table: every row must load, convert both ways and round-trip.

use crate::config::Config;

/// The graph (and weights type) an architecture runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Graph {
    /// LLaMA blocks (`arch/llama/`): LLaMA, Mistral, Phi-3.
    Llama,
    /// LLaMA blocks with Q/K/V biases or per-head Q/K norms (`arch/qwen/`).
    Qwen,
    /// Gemma 3 (`arch/gemma3/`): sandwich norms, local/global layers, GeGLU.
    Gemma3,
    /// GPT-OSS (`arch/gpt_oss/`): MXFP4 experts, sinks, alternating windows.
    GptOss,
}

/// How a model of this architecture turns a conversation into a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChatFormat {
    /// The Jinja template stored with the model (GGUF `tokenizer.chat_template`,
    /// `tokenizer_config.json`); none built in.
    Stored,
    /// OpenAI's Harmony format (GPT-OSS), rendered by code rather than a template.
    Harmony,
    /// ChatML with Qwen 2.5's default system prompt, when the files carry no template.
    Qwen2ChatMl,
    /// ChatML without a default system prompt (Qwen 3), when the files carry no template.
    Qwen3ChatMl,
    /// Gemma's `<start_of_turn>` format, when the files carry no template.
    Gemma,
}

/// Which of a model's 32-value block matrices (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4) the CPU may multiply
/// with 8-bit (Q8_0) activations, as llama.cpp does, rather than i16 ones (`--repack auto`
/// repacks those; the K-quants take 8-bit activations either way): as many as stay within the
/// perplexity and greedy bounds against llama.cpp measured for the architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Int8Activations {
    /// Every one (LLaMA, Mistral, Phi-3, Gemma 3). Gemma 3 270M's perplexity on 14025 scored
    /// tokens (`fixtures/gemma3/licenses.txt`) is 0.002 % from llama.cpp's with 8-bit
    /// activations throughout and 0.047 % with i16 ones (docs/model.md); on 254 tokens the same
    /// two had looked 0.68 % and 0.21 % away, rounding alone.
    Everywhere,
    /// None (GPT-OSS: its experts' 5e-3 bound against the reference; with 8-bit activations,
    /// `--repack on`, its logits' median relative error is 3.7e-2 against i16's 1.3e-4,
    /// `tests/gpt_oss_reference.rs`; Qwen: not measured).
    Nowhere,
}

impl Int8Activations {
    /// Whether its matrices may take 8-bit activations.
    pub fn allows(self) -> bool {
        match self {
            Int8Activations::Everywhere => true,
            Int8Activations::Nowhere => false,
        }
    }
}

/// GGUF block-tensor suffix (`blk.N.{suffix}`) → Hugging Face module path (`model.layers.N.{path}`).
pub type LayerNames = &'static [(&'static str, &'static str)];

/// One architecture.
#[derive(Debug)]
pub struct ArchSpec {
    /// The name Minerva prints (`llama`, `gpt-oss`, …).
    pub name: &'static str,
    /// `general.architecture` values of GGUF files it loads.
    pub gguf_names: &'static [&'static str],
    /// `config.json` `model_type` values of checkpoints it loads.
    pub hf_model_types: &'static [&'static str],
    /// `general.architecture` a converted GGUF gets (llama.cpp writes Mistral as `llama`).
    pub gguf_output: &'static str,
    /// `model_type` a converted checkpoint gets.
    pub hf_output: &'static str,
    /// `architectures[0]` of a converted checkpoint.
    pub hf_class: &'static str,
    /// The graph it runs.
    pub graph: Graph,
    /// Its block tensors' names: tables searched in order, first match wins (the top-level
    /// tensors are shared by every architecture; GPT-OSS's experts are named by its converter).
    pub layer_names: &'static [LayerNames],
    /// GGUF files hold the Q/K rows permuted for adjacent-pair RoPE (llama.cpp's converter does
    /// so for LLaMA and Mistral only); a Hugging Face checkpoint holds `rotate_half` order.
    pub permutes_qk: bool,
    /// GGUF files hold RMS-norm factors as `1 + w` where Hugging Face holds `w` (Gemma).
    pub norm_plus_one: bool,
    /// Attention honours `sliding_window` from `config.json` (Mistral, Phi-3; LLaMA's config may
    /// carry the key without using it).
    pub hf_sliding_window: bool,
    /// Per-head Q/K RMS norms are required (Qwen 3); otherwise Q/K/V biases are (Qwen 2).
    pub qk_norm: bool,
    /// How it chats.
    pub chat: ChatFormat,
    /// `cargo xtask synth` / `bench` presets (random weights at real shapes); empty: none.
    pub synthetic_presets: &'static [&'static str],
    /// Which of its 32-value block matrices may be multiplied with 8-bit activations (the others
    /// keep i16 ones).
    pub int8_activations: Int8Activations,
    /// Whether llama.cpp takes a model of this architecture and shape for a 70B (its model type
    /// by layer count, `src/models/<arch>.cpp`), which `llama-quantize`'s K-quant mixtures give
    /// `attn_v` Q5_K where they would give Q4_K (`convert/mixture.rs`).
    pub llama_cpp_70b: fn(&Config) -> bool,
}

/// [`ArchSpec::llama_cpp_70b`] of the architectures llama.cpp never calls 70B.
pub fn never_70b(_: &Config) -> bool {
    false
}

impl ArchSpec {
    /// The Hugging Face path (after `model.layers.N.`) of the block tensor `blk.N.{suffix}`.
    pub fn hf_layer_name(&self, suffix: &str) -> Option<&'static str> {
        self.layer_names.iter().flat_map(|t| t.iter()).find(|(g, _)| *g == suffix).map(|(_, hf)| *hf)
    }

    /// The GGUF suffix of the block tensor Hugging Face calls `model.layers.N.{hf}`.
    pub fn gguf_layer_suffix(&self, hf: &str) -> Option<&'static str> {
        self.layer_names.iter().flat_map(|t| t.iter()).find(|(_, h)| *h == hf).map(|(g, _)| *g)
    }

    /// Whether the tensor llama.cpp calls `gguf_name` is an RMS-norm factor GGUF stores as `1 + w`
    /// (every `*norm.weight` of a `norm_plus_one` architecture).
    pub fn shifts_norm(&self, gguf_name: &str) -> bool {
        self.norm_plus_one && gguf_name.ends_with("norm.weight")
    }

    /// Whether `name` is one of its GGUF or Hugging Face names.
    pub fn answers_to(&self, name: &str) -> bool {
        self.gguf_names.contains(&name) || self.hf_model_types.contains(&name)
    }
}

/// Every architecture Minerva runs.
pub static ARCHITECTURES: &[&ArchSpec] = &[
    &super::llama::LLAMA,
    &super::llama::MISTRAL,
    &super::llama::PHI3,
    &super::qwen::QWEN2,
    &super::qwen::QWEN3,
    &super::gemma3::GEMMA3,
    &super::gpt_oss::GPT_OSS,
];

/// The architecture of a GGUF file's `general.architecture`.
pub fn for_gguf(name: &str) -> Option<&'static ArchSpec> {
    ARCHITECTURES.iter().copied().find(|a| a.gguf_names.contains(&name))
}

/// The architecture of a `config.json` `model_type`.
pub fn for_hf(model_type: &str) -> Option<&'static ArchSpec> {
    ARCHITECTURES.iter().copied().find(|a| a.hf_model_types.contains(&model_type))
}

/// The architecture named `name` in either format (or by its own name).
pub fn find(name: &str) -> Option<&'static ArchSpec> {
    ARCHITECTURES.iter().copied().find(|a| a.name == name || a.answers_to(name))
}

/// The architectures' names, comma-separated, for error messages.
pub fn supported_names() -> String {
    ARCHITECTURES.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_each_finds_its_row() {
        for (i, a) in ARCHITECTURES.iter().enumerate() {
            for name in a.gguf_names.iter().chain(a.hf_model_types).chain([&a.name]) {
                let found = find(name).unwrap_or_else(|| panic!("{name} not found"));
                assert!(std::ptr::eq(found, *a), "{name} finds {} instead of {}", found.name, a.name);
            }
            for b in &ARCHITECTURES[i + 1..] {
                let clash = a.gguf_names.iter().chain(a.hf_model_types).find(|n| b.answers_to(n));
                assert!(clash.is_none(), "{} and {} both answer to {clash:?}", a.name, b.name);
            }
            // What a conversion writes, the loader reads back as the same graph.
            let gguf = for_gguf(a.gguf_output).unwrap_or_else(|| panic!("{}: {}", a.name, a.gguf_output));
            let hf = for_hf(a.hf_output).unwrap_or_else(|| panic!("{}: {}", a.name, a.hf_output));
            assert_eq!((gguf.graph, hf.graph), (a.graph, a.graph), "{}", a.name);
        }
        assert!(find("gemma2").is_none() && for_hf("gpt-oss").is_none() && for_gguf("gpt_oss").is_none());
    }

    #[test]
    fn layer_names_are_a_bijection() {
        for a in ARCHITECTURES {
            for (g, hf) in a.layer_names.iter().flat_map(|t| t.iter()) {
                assert_eq!(a.hf_layer_name(g), Some(*hf), "{}: {g}", a.name);
                assert_eq!(a.gguf_layer_suffix(hf), Some(*g), "{}: {hf}", a.name);
            }
        }
    }

    /// llama.cpp's 70B: LLaMA (and Mistral, written as `llama`) with 80 layers and grouped KV
    /// heads, Qwen 2 with 80 layers; not a 65B (80 layers, as many KV heads as heads), not
    /// another layer count, not Qwen 3.
    #[test]
    fn llama_cpp_70b_as_llama_cpp_sizes_models() {
        let config = |model_type: &str, layers: usize, kv_heads: usize| {
            let json = serde_json::json!({
                "model_type": model_type, "num_hidden_layers": layers, "hidden_size": 8192,
                "intermediate_size": 28672, "num_attention_heads": 64, "num_key_value_heads": kv_heads,
                "vocab_size": 128256, "rms_norm_eps": 1e-5, "max_position_embeddings": 8192,
                "head_dim": 128,
            });
            let spec = ARCHITECTURES.iter().find(|a| a.answers_to(model_type)).expect("registered");
            let config = match spec.graph {
                Graph::Qwen => crate::arch::qwen::config::from_hf_config(&json),
                _ => Config::from_hf_config(&json),
            };
            (spec, config.expect("config"))
        };
        for (model_type, layers, kv_heads, want) in [
            ("llama", 80, 8, true),
            ("llama", 80, 64, false),
            ("llama", 32, 8, false),
            ("mistral", 80, 8, true),
            ("qwen2", 80, 8, true),
            ("qwen2", 80, 64, true),
            ("qwen2", 64, 8, false),
            ("qwen3", 80, 8, false),
        ] {
            let (spec, c) = config(model_type, layers, kv_heads);
            assert_eq!((spec.llama_cpp_70b)(&c), want, "{model_type} {layers} layers {kv_heads} KV heads");
        }
    }
}
