//! Walks the architecture table (`minerva_model::arch::ARCHITECTURES`): every row has a fixture
//! checkpoint written by someone else's code (transformers, or OpenAI's script for GPT-OSS), and
//! every row's checkpoint
//!
//! * loads, and converts Hugging Face → GGUF → Hugging Face → GGUF losslessly: the two GGUF files
//!   byte-identical, the Hugging Face copy holding the fixture's values under the fixture's names;
//!   Hugging Face → MLX → Hugging Face losslessly;
//! * gives the same logits from every copy: the Hugging Face and MLX copies exactly the fixture's,
//!   the GGUF within [`GGUF_VS_HF`] (summation order; LLaMA's permuted Q/K run the adjacent-pair
//!   RoPE).
//!
//! Gemma's GGUF norms are `1 + w` where the checkpoint has `w`: the fixture's random `w` have bits
//! below f32's precision at 1, so the first step rounds them (as llama.cpp's converter does) and
//! the report must say so — and say nothing else; the copies' norms then differ from the
//! fixture's by at most half an ulp of `1 + w`, and their logits by [`GGUF_VS_HF`];
//! * where llama.cpp's own `convert_hf_to_gguf.py` wrote a GGUF of the same checkpoint
//!   (`model.gguf` beside it), ours holds the same tensors byte for byte and reads the same
//!   config, and converting llama.cpp's file back gives the fixture's tensors.
//!
//! A row added without a fixture fails the first test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minerva_core::DType;
use minerva_gguf::Gguf;
use minerva_model::arch::{ARCHITECTURES, ArchSpec};
use minerva_model::convert::{ConvertOptions, Extras, Report, Target, convert};
use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};
use minerva_safetensors::Checkpoint;

/// GGUF against SafeTensors: summation order only (`tests/tiny_models.rs` measures ≤ 9e-7).
const GGUF_VS_HF: f32 = 1e-5;

/// Tokens every fixture's vocabulary (96 and up) holds.
const TOKENS: [u32; 12] = [3, 17, 50, 9, 42, 42, 80, 5, 60, 64, 7, 19];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Each row's fixture directory.
fn fixture(spec: &ArchSpec) -> PathBuf {
    let tiny = fixtures().join("model/tiny").join(spec.name);
    if tiny.is_dir() {
        return tiny;
    }
    let by_name = fixtures().join(spec.name.replace('-', "_")).join("hf");
    assert!(by_name.is_dir(), "{}: no fixture (fixtures/model/tiny/{0} or {})", spec.name, by_name.display());
    by_name
}

fn convert_to(src: &Path, out: &Path, target: Target) -> Report {
    convert(src, out, &ConvertOptions::new(target), &Extras::default(), &mut |_| {})
        .unwrap_or_else(|e| panic!("{} → {}: {e}", src.display(), out.display()))
}

fn to(src: &Path, out: &Path, target: Target) {
    let report = convert_to(src, out, target);
    assert!(report.is_lossless(), "{} → {}: {}", src.display(), out.display(), report.summary());
}

/// A checkpoint → GGUF: lossless, or for a `1 + w` row only the shift's rounding.
fn to_gguf(spec: &ArchSpec, src: &Path, out: &Path) {
    let report = convert_to(src, out, Target::Gguf);
    let shift_only = spec.norm_plus_one && report.lossy.is_empty() && report.mlx_affine_dequantized == 0;
    assert!(report.is_lossless() || shift_only, "{}: {}", spec.name, report.summary());
}

/// Whether two checkpoints hold the same tensors: equal, or for a `1 + w` row's norms within half
/// an ulp of `1 + w`.
fn same_checkpoint(spec: &ArchSpec, a: &Path, b: &Path) {
    let (a, b) = (hf_values(a), hf_values(b));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "{}: names", spec.name);
    for (name, (dtype, bits, bytes)) in &a {
        let (other_dtype, other_bits, other_bytes) = &b[name];
        assert_eq!((dtype, bytes), (other_dtype, other_bytes), "{}: {name}", spec.name);
        if spec.norm_plus_one && name.ends_with("norm.weight") {
            for (x, y) in bits.iter().zip(other_bits).map(|(x, y)| (f32::from_bits(*x), f32::from_bits(*y))) {
                assert!(
                    (x - y).abs() <= f32::EPSILON / 2.0 * (1.0 + y).abs().max(1.0),
                    "{}: {name} {x} vs {y}",
                    spec.name
                );
            }
        } else {
            assert!(bits == other_bits, "{}: {name} values differ", spec.name);
        }
    }
}

fn logits(path: &Path) -> Vec<f32> {
    let model =
        Model::load(path, CpuBackend::new(Some(2)).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut cache = model.new_cache(1, TOKENS.len()).unwrap();
    let batch = [SequenceInput { tokens: &TOKENS, start_pos: 0, slot: 0 }];
    model.forward(&mut cache, &batch, LogitsFor::All).unwrap().data
}

fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
    diff / b.iter().map(|v| v.abs()).fold(0.0, f32::max)
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

/// One stored tensor: a non-float one's dtype, a float one's values as f32 bits, a non-float one's
/// bytes.
type Stored = (Option<DType>, Vec<u32>, Vec<u8>);

/// A checkpoint's tensors by name: float tensors as their f32 bit patterns (a bf16 norm widened
/// to f32 on the way through GGUF compares equal), the others as dtype and bytes.
fn hf_values(dir: &Path) -> BTreeMap<String, Stored> {
    let ckpt = Checkpoint::open(dir).unwrap();
    ckpt.tensors()
        .map(|t| {
            let v = &t.view;
            let entry = if is_float(v.dtype) {
                let mut values = vec![0.0f32; v.bytes.len() / v.dtype.block_bytes()];
                minerva_quant::dequantize(v.dtype, v.bytes, &mut values).unwrap();
                (None, values.iter().map(|x| x.to_bits()).collect(), Vec::new())
            } else {
                (Some(v.dtype), Vec::new(), v.bytes.to_vec())
            };
            (v.name.to_string(), entry)
        })
        .collect()
}

fn gguf_tensors(path: &Path) -> BTreeMap<String, (DType, Vec<usize>, Vec<u8>)> {
    let g = Gguf::open(path).unwrap();
    g.tensors().map(|t| (t.name.to_string(), (t.dtype, t.shape.to_vec(), t.bytes.to_vec()))).collect()
}

#[test]
fn every_architecture_loads_converts_both_ways_and_round_trips() {
    assert!(ARCHITECTURES.len() >= 7, "the table lost rows");
    for spec in ARCHITECTURES {
        let hf = fixture(spec);
        let dir = tempfile::tempdir().unwrap();
        let p = |f: &str| dir.path().join(f);
        to_gguf(spec, &hf, &p("a.gguf"));
        to(&p("a.gguf"), &p("hf"), Target::SafeTensors);
        to(&p("hf"), &p("b.gguf"), Target::Gguf);
        to(&hf, &p("mlx"), Target::Mlx);
        let name = spec.name;
        assert_eq!(
            std::fs::read(p("a.gguf")).unwrap(),
            std::fs::read(p("b.gguf")).unwrap(),
            "{name}: GGUF → HF → GGUF"
        );
        same_checkpoint(spec, &p("hf"), &hf);
        to(&p("mlx"), &p("hf2"), Target::SafeTensors);
        assert!(hf_values(&p("hf2")) == hf_values(&hf), "{name}: HF → MLX → HF");
        // The written files name this row, and read back as it.
        let arch = Gguf::open(p("a.gguf")).unwrap().architecture().unwrap().to_string();
        assert_eq!(arch, spec.gguf_output, "{name}");
        let config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(p("hf").join("config.json")).unwrap()).unwrap();
        assert_eq!(config["architectures"][0], spec.hf_class, "{name}");
        // A scaled RoPE is also spelled the pre-transformers-5 way (`rope_scaling` with `type`),
        // which mlx-lm and older transformers read.
        let kind = &config["rope_parameters"]["rope_type"];
        if kind.is_string() && kind != "default" {
            assert_eq!(&config["rope_scaling"]["type"], kind, "{name}: rope_scaling");
        }

        let reference = logits(&hf);
        let copy = logits(&p("hf"));
        match spec.norm_plus_one {
            false => assert_eq!(copy, reference, "{name}: HF copy"),
            true => assert!(rel_err(&copy, &reference) <= GGUF_VS_HF, "{name}: HF copy"),
        }
        assert_eq!(logits(&p("mlx")), reference, "{name}: MLX copy");
        let err = rel_err(&logits(&p("a.gguf")), &reference);
        assert!(err <= GGUF_VS_HF, "{name}: GGUF vs SafeTensors {err}");
        eprintln!("{name}: round trips exact, GGUF vs HF {err:.1e}");
    }
}

#[test]
fn our_gguf_is_what_llama_cpp_converter_writes() {
    let mut compared = Vec::new();
    for spec in ARCHITECTURES {
        let hf = fixture(spec);
        let theirs = hf.join("model.gguf");
        if !theirs.exists() {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let ours = dir.path().join("ours.gguf");
        to_gguf(spec, &hf, &ours);
        let (a, b) = (gguf_tensors(&ours), gguf_tensors(&theirs));
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "{}: tensor names", spec.name);
        for (tensor, ours) in &a {
            assert!(ours == &b[tensor], "{}: {tensor} differs from llama.cpp's", spec.name);
        }
        let backend = || CpuBackend::new(Some(1)).unwrap();
        let (c1, c2) = (Model::load(&ours, backend()).unwrap().config, Model::load(&theirs, backend()).unwrap().config);
        assert_eq!(c1, c2, "{}: config", spec.name);
        // llama.cpp's file converted back is the fixture.
        to(&theirs, &dir.path().join("back"), Target::SafeTensors);
        same_checkpoint(spec, &dir.path().join("back"), &hf);
        compared.push(spec.name);
    }
    assert_eq!(compared, ["qwen2", "qwen3", "gemma3"], "the rows with llama.cpp-written fixtures");
}

#[test]
fn gemma3_settings_gguf_cannot_hold_are_refused_and_kept_through_checkpoints() {
    // `query_pre_attn_scalar` 40 ≠ head_dim 16, alternating layer types, local RoPE base 500 and a
    // linear-scaled global RoPE (`make_gemma3_reference.py`).
    let src = fixtures().join("model/tiny/gemma3_qscale");
    let dir = tempfile::tempdir().unwrap();
    let err =
        convert(&src, &dir.path().join("q.gguf"), &ConvertOptions::new(Target::Gguf), &Extras::default(), &mut |_| {})
            .unwrap_err()
            .to_string();
    assert!(err.contains("query_pre_attn_scalar 40"), "{err}");
    let backend = || CpuBackend::new(Some(1)).unwrap();
    let gemma = |path: &Path| match Model::load(path, backend()).unwrap().weights {
        minerva_model::ModelWeights::Gemma3(m) => m.0,
        _ => panic!("{} is Gemma 3", path.display()),
    };
    // With the query scale GGUF assumes, the rest goes through GGUF and back: the layer pattern
    // as `sliding_window_pattern`, the local base as `rope.freq_base_swa`, the global scaling as
    // `rope.scaling.*`, and a config.json generated from them.
    let copy = dir.path().join("scalar16");
    std::fs::create_dir(&copy).unwrap();
    for file in ["model.safetensors", "config.json"] {
        std::fs::copy(src.join(file), copy.join(file)).unwrap();
    }
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(copy.join("config.json")).unwrap()).unwrap();
    json["query_pre_attn_scalar"] = serde_json::json!(16);
    std::fs::write(copy.join("config.json"), json.to_string()).unwrap();
    let spec = minerva_model::arch::registry::find("gemma3").unwrap();
    to_gguf(spec, &copy, &dir.path().join("q.gguf"));
    to(&dir.path().join("q.gguf"), &dir.path().join("hf"), Target::SafeTensors);
    let expected = gemma(&copy);
    assert!(expected.sliding_layers.iter().any(|&s| !s) && expected.local_rope.base == 500.0, "{expected:?}");
    assert_eq!(gemma(&dir.path().join("q.gguf")), expected, "read from the GGUF");
    assert_eq!(gemma(&dir.path().join("hf")), expected, "read from the generated config.json");
    let err = rel_err(&logits(&dir.path().join("hf")), &logits(&copy));
    assert!(err <= GGUF_VS_HF, "{err}");
}

/// Logits of an 8-bit MLX copy (groups of 32: every matrix of these tiny models quantizes) against
/// the float fixture's, largest |Δ| over the largest |logit|: 8-bit codes move each weight by up to
/// half a step of its group's range over 255, and these random models amplify it (a plain bf16
/// copy is already 0.7–2.4 % off). Measured: 1.6–9.5 % for the dense rows, 17 % for GPT-OSS
/// (bf16 scales; 8.9 % with f32 ones). A wrong row order or a lost tensor is off by the logits'
/// whole size.
const MLX_8BIT_VS_FLOAT: f32 = 0.25;

/// Every row converts to MLX 8-bit affine (`--mlx-bits 8`), every weight matrix quantized, and
/// loads: with exactly the logits of its own dequantized copy (MLX → HF: `mx.dequantize`'s values,
/// which the loader computes too), and within [`MLX_8BIT_VS_FLOAT`] of the float fixture's.
#[test]
fn every_architecture_converts_to_8_bit_mlx_and_loads() {
    use minerva_model::convert::MlxQuant;
    for spec in ARCHITECTURES {
        let hf = fixture(spec);
        let dir = tempfile::tempdir().unwrap();
        let p = |f: &str| dir.path().join(f);
        let mut opts = ConvertOptions::new(Target::Mlx);
        opts.mlx_quant = Some(MlxQuant { bits: 8, group_size: 32 });
        let report = convert(&hf, &p("mlx8"), &opts, &Extras::default(), &mut |_| {}).unwrap();
        let matrices = hf_values(&hf).keys().filter(|n| n.ends_with(".weight")).count();
        let ckpt = Checkpoint::open(&hf).unwrap();
        let two_d = ckpt.logical_tensors().filter(|t| t.shape.len() == 2 && t.name.ends_with(".weight")).count();
        assert!(two_d > 0 && two_d < matrices, "{}", spec.name);
        assert_eq!(report.mlx_affine_quantized, two_d, "{}: {}", spec.name, report.summary());
        let quantized = logits(&p("mlx8"));
        convert_to(&p("mlx8"), &p("dequantized"), Target::SafeTensors);
        assert_eq!(quantized, logits(&p("dequantized")), "{}: MLX 8-bit vs its dequantized copy", spec.name);
        let err = rel_err(&quantized, &logits(&hf));
        eprintln!("{}: MLX 8-bit vs float {err:.1e}", spec.name);
        assert!(err <= MLX_8BIT_VS_FLOAT, "{}: MLX 8-bit vs float {err}", spec.name);
    }
}
