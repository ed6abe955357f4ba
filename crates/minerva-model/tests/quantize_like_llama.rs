//! `convert --quant` against llama.cpp's `llama-quantize` (b11312): every tensor of our output has
//! the type and the exact bytes llama-quantize wrote from the same input, compared through the
//! FNV-1a hash of each tensor's data committed in `fixtures/quant/llama_quantize.json` (written
//! by `fixtures/quant/make_llama_quantize_reference.sh`, which runs llama-quantize):
//!
//! * a random f32 LLaMA (8 layers, 256 wide, 768 MLP: every row a multiple of 256), written by
//!   [`write_f32_llama`] — `Q4_K_M`, `Q5_K_M` and `--pure` Q4_K, Q5_K, Q6_K, Q5_0, Q5_1;
//! * SmolLM2-135M Q4_1 (the project's model, 576-wide rows: llama.cpp's Q4_K → Q5_0 and
//!   Q6_K → Q8_0 fallbacks, a tied head) — `Q4_K_M` (llama-quantize `--allow-requantize`);
//! * a random f32 LLaMA of 80 layers with grouped KV heads, which llama.cpp takes for a 70B
//!   (64 wide, so every K-quant falls back: the 70B rule's Q5_K for `attn_v` shows as Q5_1
//!   where the others' Q4_K shows as Q5_0) — `Q4_K_M`.
//!
//! `MINERVA_WRITE_F32_LLAMA=PATH` and `MINERVA_WRITE_F32_LLAMA80=PATH` also save the random
//! models, for the script.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minerva_core::DType;
use minerva_gguf::{Gguf, GgufWriter, MetadataValue};
use minerva_model::convert::{ConvertOptions, Extras, Quant, Target, convert};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// FNV-1a, 64 bits (the script computes the same in Python).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// A small deterministic generator (xorshift64*), uniform in [0, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// The shape of a random LLaMA.
#[derive(Clone, Copy)]
struct Shape {
    layers: usize,
    hidden: usize,
    ff: usize,
    heads: usize,
    kv_heads: usize,
    vocab: usize,
}

/// 8 layers, every row a multiple of 256.
const SMALL: Shape = Shape { layers: 8, hidden: 256, ff: 768, heads: 4, kv_heads: 2, vocab: 256 };

/// 80 layers and grouped KV heads (llama.cpp's 70B), rows of 64 and 128.
const SEVENTY_B: Shape = Shape { layers: 80, hidden: 64, ff: 128, heads: 4, kv_heads: 2, vocab: 64 };

/// An f32 LLaMA GGUF with weights of uneven scale per row, a few outliers and some all-zero
/// blocks (what the quantizers' searches and special cases meet in real models).
fn write_f32_llama(path: &Path, shape: &Shape) {
    let Shape { layers, hidden, ff, heads, kv_heads, vocab } = *shape;
    let head_dim = hidden / heads;
    let mut w = GgufWriter::new();
    let meta: [(&str, MetadataValue); 11] = [
        ("general.architecture", "llama".into()),
        ("general.name", "random f32 llama".into()),
        ("llama.block_count", (layers as u32).into()),
        ("llama.context_length", 256u32.into()),
        ("llama.embedding_length", (hidden as u32).into()),
        ("llama.feed_forward_length", (ff as u32).into()),
        ("llama.attention.head_count", (heads as u32).into()),
        ("llama.attention.head_count_kv", (kv_heads as u32).into()),
        ("llama.rope.dimension_count", (head_dim as u32).into()),
        ("llama.attention.layer_norm_rms_epsilon", 1e-5f32.into()),
        ("general.file_type", 0u32.into()),
    ];
    for (k, v) in meta {
        w.add_metadata(k, v).unwrap();
    }
    let mut tensors: Vec<(String, Vec<usize>)> =
        vec![("token_embd.weight".into(), vec![vocab, hidden]), ("output_norm.weight".into(), vec![hidden])];
    tensors.push(("output.weight".into(), vec![vocab, hidden]));
    for l in 0..layers {
        let t = |s: &str, shape: Vec<usize>| (format!("blk.{l}.{s}"), shape);
        tensors.extend([
            t("attn_norm.weight", vec![hidden]),
            t("attn_q.weight", vec![hidden, hidden]),
            t("attn_k.weight", vec![kv_heads * head_dim, hidden]),
            t("attn_v.weight", vec![kv_heads * head_dim, hidden]),
            t("attn_output.weight", vec![hidden, hidden]),
            t("ffn_norm.weight", vec![hidden]),
            t("ffn_gate.weight", vec![ff, hidden]),
            t("ffn_up.weight", vec![ff, hidden]),
            t("ffn_down.weight", vec![hidden, ff]),
        ]);
    }
    for (name, shape) in &tensors {
        w.add_tensor_info(name.as_str(), DType::F32, shape).unwrap();
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut data = w.write_header(file).unwrap();
    for (name, shape) in &tensors {
        let cols = *shape.last().unwrap();
        let rows: usize = shape.iter().rev().skip(1).product();
        let mut values = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            let scale = 0.02 * (4.0 * rng.next()).exp2();
            for c in 0..cols {
                let v = if name.ends_with("norm.weight") {
                    1.0 + 0.2 * (rng.next() - 0.5)
                } else if r % 37 == 5 && c < 32 {
                    0.0
                } else {
                    let outlier = if rng.next() < 0.01 { 8.0 } else { 1.0 };
                    scale * outlier * (rng.next() + rng.next() + rng.next() - 1.5)
                };
                values.push(v);
            }
        }
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        data.write_chunk(&bytes).unwrap();
    }
    data.finish().unwrap();
}

/// Tensor name → (type, FNV-1a of its bytes as hex).
type Tensors = BTreeMap<String, (String, String)>;

/// The committed hashes: model → quantization → tensors.
fn reference() -> BTreeMap<String, BTreeMap<String, Tensors>> {
    let path = root().join("fixtures/quant/llama_quantize.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// Converts `src` with `quant` and checks every tensor against llama-quantize's.
fn check(src: &Path, quant: Quant, expected: &Tensors, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.gguf");
    let mut opts = ConvertOptions::new(Target::Gguf);
    opts.quant = Some(quant);
    convert(src, &out, &opts, &Extras::default(), &mut |_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
    let g = Gguf::open(&out).unwrap();
    let ours: Tensors =
        g.tensors().map(|t| (t.name.to_string(), (t.dtype.to_string(), format!("{:016x}", fnv1a(t.bytes))))).collect();
    assert_eq!(ours.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "{what}: tensor names");
    let mut mismatched = Vec::new();
    for (name, (dtype, hash)) in &ours {
        let (want_dtype, want_hash) = &expected[name];
        if dtype != want_dtype || hash != want_hash {
            mismatched.push(format!("{name}: {dtype} {hash}, llama-quantize {want_dtype} {want_hash}"));
        }
    }
    assert!(
        mismatched.is_empty(),
        "{what}: {} of {} tensors differ:\n{}",
        mismatched.len(),
        ours.len(),
        mismatched.join("\n")
    );
}

/// A random LLaMA of `shape` in a temporary folder (kept while the folder lives), also saved where
/// the environment variable `save_to` names (for the script).
fn random_llama(shape: &Shape, save_to: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("f32.gguf");
    write_f32_llama(&src, shape);
    if let Ok(save) = std::env::var(save_to) {
        std::fs::copy(&src, save).unwrap();
    }
    (dir, src)
}

#[test]
fn random_f32_llama_quantizes_as_llama_quantize_does() {
    let (_dir, src) = random_llama(&SMALL, "MINERVA_WRITE_F32_LLAMA");
    let reference = reference();
    let expected = &reference["f32_llama"];
    for (name, quant) in [
        ("Q4_K_M", Quant::Q4KM),
        ("Q5_K_M", Quant::Q5KM),
        ("Q4_K", Quant::Type(DType::Q4_K)),
        ("Q5_K", Quant::Type(DType::Q5_K)),
        ("Q6_K", Quant::Type(DType::Q6_K)),
        ("Q5_0", Quant::Type(DType::Q5_0)),
        ("Q5_1", Quant::Type(DType::Q5_1)),
    ] {
        check(&src, quant, &expected[name], name);
    }
    // The mixture's choices themselves, spelled out: ffn_down and attn_v of layers 0, 3, 6, 7 of 8
    // and the head get Q6_K, the rest Q4_K.
    let q6: Vec<&String> = expected["Q4_K_M"].iter().filter(|(_, (d, _))| d == "Q6_K").map(|(n, _)| n).collect();
    assert_eq!(q6.len(), 9, "{q6:?}");
}

#[test]
fn smollm2_q4_k_m_is_llama_quantize_s() {
    let model = root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    check(&model, Quant::Q4KM, &reference()["smollm2_q4_1"]["Q4_K_M"], "SmolLM2 Q4_K_M");
}

#[test]
fn an_80_layer_llama_gets_llama_quantize_s_70b_types() {
    let (_dir, src) = random_llama(&SEVENTY_B, "MINERVA_WRITE_F32_LLAMA80");
    let reference = reference();
    let expected = &reference["f32_llama80"]["Q4_K_M"];
    check(&src, Quant::Q4KM, expected, "80 layers Q4_K_M");
    // Spelled out: layer 11 of 80 is not a `more_bits` layer; its attn_v takes the 70B rule's
    // Q5_K (→ Q5_1 on 64-wide rows), its attn_k the mixture's Q4_K (→ Q5_0).
    let dtype = |name: &str| expected[name].0.as_str();
    assert_eq!((dtype("blk.11.attn_v.weight"), dtype("blk.11.attn_k.weight")), ("Q5_1", "Q5_0"));
}
