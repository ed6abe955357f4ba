//! `minerva_model::convert` on the tiny fixtures: round trips between GGUF, Hugging Face
//! SafeTensors and MLX that must be lossless (byte-identical files and tensors, identical
//! logits), quantizing on convert within the documented tolerance (docs/model.md, "Tolerances"),
//! and the refusals.

use std::path::{Path, PathBuf};

use minerva_core::DType;
use minerva_gguf::Gguf;
use minerva_model::convert::{ConvertError, ConvertOptions, Extras, Quant, Report, Target, convert};
use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};
use minerva_safetensors::Checkpoint;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn run(src: &Path, out: &Path, opts: &ConvertOptions) -> Result<Report, ConvertError> {
    convert(src, out, opts, &Extras::default(), &mut |_| {})
}

fn to(src: &Path, out: &Path, target: Target) -> Report {
    // Progress comes once per written tensor, counting up to the total.
    let mut seen = Vec::new();
    let report =
        convert(src, out, &ConvertOptions::new(target), &Extras::default(), &mut |p| seen.push((p.done, p.total)))
            .unwrap_or_else(|e| panic!("{} → {}: {e}", src.display(), out.display()));
    let total = seen.last().map_or(0, |s| s.1);
    assert!(total > 0 && seen.iter().enumerate().all(|(i, s)| *s == (i + 1, total)), "{seen:?}");
    report
}

/// Logits of every position of `tokens`, one prefill on the default (i16-activation) CPU path.
fn logits(path: &Path, tokens: &[u32]) -> Vec<f32> {
    let model =
        Model::load(path, CpuBackend::new(Some(2)).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut cache = model.new_cache(1, tokens.len()).unwrap();
    model.forward(&mut cache, &[SequenceInput { tokens, start_pos: 0, slot: 0 }], LogitsFor::All).unwrap().data
}

/// Every tensor's bytes by name.
fn tensors(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let ckpt = Checkpoint::open(dir).unwrap();
    let mut all: Vec<_> = ckpt.tensors().map(|t| (t.view.name.to_string(), t.view.bytes.to_vec())).collect();
    all.sort();
    all
}

fn values(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0; bytes.len() / dtype.info().block_bytes as usize];
    minerva_quant::dequantize(dtype, bytes, &mut out).unwrap();
    out
}

fn gguf_tensors(path: &Path) -> Vec<(String, DType, Vec<u8>)> {
    let g = Gguf::open(path).unwrap();
    g.tensors().map(|t| (t.name.to_string(), t.dtype, t.bytes.to_vec())).collect()
}

const GPT_OSS_TOKENS: [u32; 12] = [3, 17, 250, 9, 42, 42, 300, 5, 128, 64, 7, 199];

#[test]
fn gpt_oss_round_trips_through_all_three_layouts_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let hf = fixtures().join("gpt_oss/hf");
    let first = to(&hf, &p("a.gguf"), Target::Gguf);
    assert!(first.is_lossless(), "{}", first.summary());
    assert!(to(&p("a.gguf"), &p("hf"), Target::SafeTensors).is_lossless());
    assert!(to(&p("hf"), &p("mlx"), Target::Mlx).is_lossless());
    assert!(to(&p("mlx"), &p("b.gguf"), Target::Gguf).is_lossless());
    assert_eq!(std::fs::read(p("a.gguf")).unwrap(), std::fs::read(p("b.gguf")).unwrap(), "GGUF → HF → MLX → GGUF");

    // The HF copy holds the fixture's tensors: byte for byte where the dtype is the same (matrices,
    // MXFP4 `_blocks`/`_scales`), the same values where the GGUF widened a bf16 norm, bias, sink or
    // router to f32 (as llama.cpp stores them).
    let (source, copy) = (Checkpoint::open(&hf).unwrap(), Checkpoint::open(p("hf")).unwrap());
    assert_eq!(source.len(), copy.len());
    for a in source.tensors() {
        let name = a.view.name;
        let b = copy.tensor(name).unwrap_or_else(|| panic!("{name} missing after HF → GGUF → HF"));
        if a.view.dtype == b.view.dtype {
            assert!(a.view.bytes == b.view.bytes, "{name} differs after HF → GGUF → HF");
        } else {
            let vector = ["norm", "bias", "sinks", "router"].iter().any(|v| name.contains(v));
            assert!(vector, "{name} changed type");
            assert_eq!(values(a.view.dtype, a.view.bytes), values(b.view.dtype, b.view.bytes), "{name}");
        }
    }
    // MLX's mxfp4 experts are the HF blocks' bytes as u32 words.
    let mlx = Checkpoint::open(p("mlx")).unwrap();
    let hf_ckpt = Checkpoint::open(&hf).unwrap();
    let down_mlx = mlx.tensor("model.layers.1.mlp.experts.down_proj.weight").unwrap();
    let down_hf = hf_ckpt.tensor("model.layers.1.mlp.experts.down_proj_blocks").unwrap();
    assert_eq!(down_mlx.view.dtype, DType::U32);
    assert_eq!(down_mlx.view.bytes, down_hf.view.bytes);

    // Same weights, same logits, in every layout.
    let reference = logits(&hf, &GPT_OSS_TOKENS);
    for copy in ["a.gguf", "hf", "mlx", "b.gguf"] {
        assert_eq!(logits(&p(copy), &GPT_OSS_TOKENS), reference, "{copy}");
    }
}

#[test]
fn shards_and_index_as_save_pretrained_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sharded");
    let mut opts = ConvertOptions::new(Target::SafeTensors);
    opts.shard_bytes = 100_000;
    let gguf = fixtures().join("gpt_oss/gpt_oss.gguf");
    run(&gguf, &out, &opts).unwrap();
    let shards: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    assert!(shards.len() > 1, "{shards:?}");
    assert!(shards.iter().all(|n| n.starts_with("model-0000") && n.contains(&format!("-of-{:05}", shards.len()))));
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("model.safetensors.index.json")).unwrap()).unwrap();
    let sizes: u64 = shards.iter().map(|n| std::fs::metadata(out.join(n)).unwrap().len()).sum();
    let total = index["metadata"]["total_size"].as_u64().unwrap();
    assert!(total < sizes && total > sizes / 2, "total_size {total} counts tensor bytes of {sizes}");
    let single = dir.path().join("single");
    run(&gguf, &single, &ConvertOptions::new(Target::SafeTensors)).unwrap();
    assert_eq!(tensors(&out), tensors(&single));
    assert_eq!(logits(&out, &GPT_OSS_TOKENS), logits(&single, &GPT_OSS_TOKENS));
}

#[test]
fn gpt_oss_mlx_and_gguf_sources() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    // MLX's 8-bit affine matrices become the bf16 values the loader computes from them: the logits
    // stay those of the MLX file exactly, and the summary says what was dequantized.
    let mlx = fixtures().join("gpt_oss/mlx");
    let report = to(&mlx, &p("m.gguf"), Target::Gguf);
    assert!(!report.is_lossless() && report.mlx_affine_dequantized > 0, "{}", report.summary());
    assert_eq!(logits(&p("m.gguf"), &GPT_OSS_TOKENS), logits(&mlx, &GPT_OSS_TOKENS));
    to(&p("m.gguf"), &p("mlx"), Target::Mlx);
    let (a, b) = (Checkpoint::open(&mlx).unwrap(), Checkpoint::open(p("mlx")).unwrap());
    for name in ["model.layers.0.mlp.experts.gate_proj", "model.layers.2.mlp.experts.up_proj"] {
        for part in ["weight", "scales"] {
            let name = format!("{name}.{part}");
            assert_eq!(a.tensor(&name).unwrap().view.bytes, b.tensor(&name).unwrap().view.bytes, "{name}");
        }
    }

    // llama.cpp's Q8_0 matrices: f32 holds their values exactly, and quantizing those values back
    // to Q8_0 gives the stored blocks again (each block's largest value is ±127 steps).
    let gguf = fixtures().join("gpt_oss/gpt_oss.gguf");
    let mut f32_opts = ConvertOptions::new(Target::SafeTensors);
    f32_opts.dtype = Some(DType::F32);
    let report = run(&gguf, &p("hf"), &f32_opts).unwrap();
    assert_eq!(report.lossy.len(), 0, "{}", report.summary());
    assert!(report.widened.contains_key(&(DType::Q8_0, DType::F32)));
    let mut q8 = ConvertOptions::new(Target::Gguf);
    q8.quant = Some(Quant::Type(DType::Q8_0));
    run(&p("hf"), &p("back.gguf"), &q8).unwrap();
    assert_eq!(gguf_tensors(&gguf), gguf_tensors(&p("back.gguf")), "GGUF Q8_0 → HF f32 → GGUF Q8_0");
    // The default (bf16) is lossy for Q8_0 and says so.
    let report = to(&gguf, &p("hf-bf16"), Target::SafeTensors);
    // Embeddings, head and 4 attention matrices × 3 layers.
    assert_eq!(report.lossy.get(&(DType::Q8_0, DType::BF16)), Some(&14), "{}", report.summary());
    assert!(!report.is_lossless());
}

const LLAMA_TOKENS: [u32; 10] = [1, 5, 7, 9, 11, 13, 20, 30, 40, 50];

/// max |a − b| / max |b|.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
    diff / b.iter().map(|v| v.abs()).fold(0.0, f32::max)
}

/// `--quant q8_0` against the f32 SafeTensors: max relative error 4.0e-2 / 4.7e-2 / 5.1e-2 for
/// llama / mistral / phi3, all in the weights (f32 activations give the same; transformers on
/// gguf-py's Q8_0 of the same weights: 4.0056e-2 for llama) — these random tiny models amplify
/// weight noise. docs/model.md, "Tolerances".
const Q8_0_MAX: f32 = 6e-2;

/// Round trips of every architecture are `tests/registry.rs`'s; this is the lossy path.
#[test]
fn llama_family_quantizes_on_convert_within_tolerance() {
    for name in ["llama", "mistral", "phi3"] {
        let dir = tempfile::tempdir().unwrap();
        let p = |f: &str| dir.path().join(f);
        let hf = fixtures().join("model/tiny").join(name);
        let reference = logits(&hf, &LLAMA_TOKENS);
        let mut q8 = ConvertOptions::new(Target::Gguf);
        q8.quant = Some(Quant::Type(DType::Q8_0));
        let report = run(&hf, &p("q8.gguf"), &q8).unwrap();
        assert!(report.lossy.contains_key(&(DType::F32, DType::Q8_0)), "{}", report.summary());
        let g = Gguf::open(p("q8.gguf")).unwrap();
        assert_eq!(
            g.tensor("blk.0.attn_q.weight").or_else(|_| g.tensor("blk.0.attn_qkv.weight")).unwrap().dtype,
            DType::Q8_0
        );
        assert_eq!(g.tensor("blk.0.attn_norm.weight").unwrap().dtype, DType::F32, "vectors stay f32");
        let err = rel_err(&logits(&p("q8.gguf"), &LLAMA_TOKENS), &reference);
        println!("{name}: q8_0 vs f32 max relative error {err:e}");
        assert!(err <= Q8_0_MAX, "{name}: q8_0 {err}");
    }
}

#[test]
fn refusals_name_the_problem_and_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixtures().join("model/tiny/llama");
    let out = dir.path().join("out.gguf");
    std::fs::write(&out, b"precious").unwrap();
    let e = run(&src, &out, &ConvertOptions::new(Target::Gguf)).unwrap_err();
    assert!(matches!(e, ConvertError::OutputExists { .. }), "{e}");
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    let mut force = ConvertOptions::new(Target::Gguf);
    force.force = true;
    run(&src, &out, &force).unwrap();
    assert!(Gguf::open(&out).is_ok(), "--force replaced the file with a GGUF");

    let garbage = dir.path().join("garbage.gguf");
    std::fs::write(&garbage, b"GGUF\x03\0\0\0 not really").unwrap();
    let e = run(&garbage, &dir.path().join("x"), &ConvertOptions::new(Target::SafeTensors)).unwrap_err();
    assert!(matches!(e, ConvertError::Model(_)), "{e}");

    let mut quant_hf = ConvertOptions::new(Target::SafeTensors);
    quant_hf.quant = Some(Quant::Type(DType::Q8_0));
    let e = run(&src, &dir.path().join("y"), &quant_hf).unwrap_err();
    assert!(e.to_string().contains("--quant"), "{e}");
    let mut k_quant = ConvertOptions::new(Target::Gguf);
    k_quant.quant = Some(Quant::Type(DType::Q2_K));
    assert!(run(&src, &dir.path().join("z.gguf"), &k_quant).unwrap_err().to_string().contains("Q2_K"));
    assert!(Target::parse("onnx").is_none());

    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "no partial outputs: {left:?}");
}

/// `--to mlx` with 8-bit affine writes what `mlx_lm convert -q --q-bits 8` wrote from the same
/// HF GPT-OSS checkpoint (`fixtures/gpt_oss/mlx_lm`, made by mlx-lm 0.32.2): the same tensors,
/// dtypes, shapes and bytes — weight codes, scales and biases bit for bit `mx.quantize`'s, the
/// MXFP4 experts split into gate and up — and the same `quantization` entries (mlx-lm leaves out
/// the router's `mode`, which readers take as affine); Minerva then loads it with the logits of
/// mlx-lm's copy, exactly.
#[test]
fn mlx_output_quantizes_as_mlx_lm_does() {
    use minerva_model::convert::MlxQuant;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mlx");
    let mut opts = ConvertOptions::new(Target::Mlx);
    opts.mlx_quant = Some(MlxQuant::with_bits(8).unwrap());
    let report = run(&fixtures().join("gpt_oss/hf"), &out, &opts).unwrap();
    // Embeddings, head, and per layer q, k, v, o and the router.
    assert_eq!(report.mlx_affine_quantized, 2 + 3 * 5, "{}", report.summary());
    assert!(!report.is_lossless());
    let ours = Checkpoint::open(&out).unwrap();
    let theirs = Checkpoint::open(fixtures().join("gpt_oss/mlx_lm")).unwrap();
    let mut names: Vec<&str> = theirs.tensors().map(|t| t.view.name).collect();
    names.sort_unstable();
    let mut our_names: Vec<&str> = ours.tensors().map(|t| t.view.name).collect();
    our_names.sort_unstable();
    assert_eq!(our_names, names);
    for name in names {
        let (a, b) = (ours.tensor(name).unwrap().view, theirs.tensor(name).unwrap().view);
        assert_eq!((a.dtype, a.shape), (b.dtype, b.shape), "{name}");
        assert!(a.bytes == b.bytes, "{name}: bytes differ");
    }
    let with_mode = |q: &serde_json::Value| {
        let mut q = q.as_object().unwrap().clone();
        for entry in q.values_mut().filter_map(|v| v.as_object_mut()) {
            entry.entry("mode").or_insert("affine".into());
        }
        q
    };
    let quantization = |c: &Checkpoint| with_mode(&c.config().unwrap()["quantization"]);
    assert_eq!(quantization(&ours), quantization(&theirs));
    let tokens = [1, 7, 42, 99, 3];
    assert_eq!(logits(&out, &tokens), logits(&fixtures().join("gpt_oss/mlx_lm"), &tokens));
}

/// MLX to MLX with the same affine parameters copies the codes: mlx-lm's 8-bit checkpoint
/// converted `--to mlx` (8-bit, groups of 64, the default) is every tensor of the source byte for
/// byte — quantizing `mx.dequantize`'s values again need not give the same codes — and the
/// conversion is lossless.
#[test]
fn mlx_to_mlx_copies_the_affine_codes() {
    use minerva_model::convert::MlxQuant;
    let dir = tempfile::tempdir().unwrap();
    let (src, out) = (fixtures().join("gpt_oss/mlx_lm"), dir.path().join("mlx"));
    let mut opts = ConvertOptions::new(Target::Mlx);
    opts.mlx_quant = Some(MlxQuant::with_bits(8).unwrap());
    let report = run(&src, &out, &opts).unwrap();
    assert_eq!((report.mlx_affine_copied, report.mlx_affine_quantized), (2 + 3 * 5, 0), "{}", report.summary());
    assert!(report.is_lossless(), "{}", report.summary());
    let (ours, theirs) = (tensors(&out), tensors(&src));
    assert_eq!(ours.iter().map(|(n, _)| n).collect::<Vec<_>>(), theirs.iter().map(|(n, _)| n).collect::<Vec<_>>());
    for ((name, a), (_, b)) in ours.iter().zip(&theirs) {
        assert!(a == b, "{name}: bytes differ");
    }
    // Other parameters quantize again, from the values the codes give.
    opts.mlx_quant = Some(MlxQuant::with_bits(4).unwrap());
    let report = run(&src, &dir.path().join("mlx4"), &opts).unwrap();
    assert_eq!((report.mlx_affine_copied, report.mlx_affine_quantized), (0, 2 + 3 * 5), "{}", report.summary());
}
