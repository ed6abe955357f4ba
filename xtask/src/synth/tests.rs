//! The tiny presets in every format load with `Model::load` and run to finite, varied logits;
//! the same seed gives the same file.

use std::path::Path;

use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput};

use super::{Options, parse_args, synth};

fn args(s: &str, out: &Path) -> Vec<String> {
    s.split_whitespace().map(String::from).chain([out.display().to_string()]).collect()
}

/// Loads `path` and runs a 20-token sequence (longer than GPT-OSS tiny's window of 8) through it.
fn run_model(path: &Path, vocab: usize) -> Vec<f32> {
    let model = Model::load(path, CpuBackend::new(Some(1)).unwrap()).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    assert_eq!(model.config.vocab, vocab);
    let tokens: Vec<u32> = (0..20).map(|i| (i * 37 % vocab) as u32).collect();
    let mut cache = model.new_cache(1, 32).unwrap();
    let seq = SequenceInput { tokens: &tokens, start_pos: 0, slot: 0 };
    let logits = model.forward(&mut cache, &[seq], LogitsFor::All).unwrap();
    let rows: Vec<&[f32]> = (0..tokens.len()).map(|i| logits.row(i)).collect();
    for (i, row) in rows.iter().enumerate() {
        assert!(row.iter().all(|v| v.is_finite()), "{path:?}: non-finite logits at position {i}");
        let (min, max) = row.iter().fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        // Random weights at σ 1/√n: logits spread by about one unit, not collapsed or exploding.
        assert!(max - min > 0.1 && max - min < 1e3, "{path:?}: logit range {min}..{max} at position {i}");
    }
    assert_ne!(rows[3], rows[15], "{path:?}: positions give the same logits");
    rows[19].to_vec()
}

#[test]
fn tiny_presets_load_and_run_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    for (spec, vocab) in [
        ("--arch gpt-oss --preset tiny --format gguf", 320),
        ("--arch gpt-oss --preset tiny --format safetensors", 320),
        ("--arch gpt-oss --preset tiny --format mlx", 320),
        ("--arch llama --preset tiny --format gguf --quant q4_0", 512),
        ("--arch llama --preset tiny --format gguf --quant q8_0", 512),
        ("--arch llama --preset tiny --format safetensors", 512),
    ] {
        let out = dir.path().join(spec.replace([' ', '-'], ""));
        let opts = parse_args(&args(spec, &out)).unwrap();
        let bytes = synth(&opts).unwrap();
        assert!(bytes > 0, "{spec}");
        run_model(&out, vocab);
    }
}

#[test]
fn shards_have_an_index_and_load_like_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let (one, sharded) = (dir.path().join("one"), dir.path().join("sharded"));
    let mut opts: Options = parse_args(&args("--arch gpt-oss --preset tiny --format mlx --seed 3", &one)).unwrap();
    synth(&opts).unwrap();
    opts.out = sharded.clone();
    opts.shard_bytes = 100_000;
    synth(&opts).unwrap();
    assert!(sharded.join("model.safetensors.index.json").exists());
    let shards = std::fs::read_dir(&sharded)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().to_string_lossy().contains("-of-"))
        .count();
    assert!(shards > 1, "{shards} shards");
    assert_eq!(run_model(&one, 320), run_model(&sharded, 320));
}

#[test]
fn same_seed_same_file_other_seed_other_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, seed: u64| {
        let out = dir.path().join(name);
        synth(&parse_args(&args(&format!("--arch llama --preset tiny --format gguf --seed {seed}"), &out)).unwrap())
            .unwrap();
        std::fs::read(out).unwrap()
    };
    let (a, b, c) = (file("a", 1), file("b", 1), file("c", 2));
    assert_eq!(a, b);
    assert_eq!(a.len(), c.len());
    assert_ne!(a, c);
}

#[test]
fn bad_arguments_are_one_clear_error() {
    let out = Path::new("unused");
    for (spec, expected) in [
        ("--arch gpt-oss --preset 8b --format gguf", "--preset 8b"),
        ("--arch llama --preset 8b --format gguf --quant q4_k", "--quant q4_k"),
        ("--arch gpt-oss --preset 20b --format gguf --quant q8_0", "only for --arch llama"),
        ("--arch llama --preset 1b --format mlx", "--format mlx"),
        ("--arch gpt-oss --preset 20b --format onnx", "--format onnx"),
        ("--arch gpt-oss --preset 20b --format gguf --seed x", "--seed"),
        ("--arch llama --preset tiny --format safetensors --vocab", "only for --format gguf"),
        ("--arch gpt-oss --preset tiny --format gguf --vocab", "needs the 20b preset"),
        // The architecture table answers: its names in both formats, and which rows have presets.
        (
            "--arch qwen3 --preset tiny --format gguf",
            "--arch qwen3: no synthetic presets (they exist for llama or gpt-oss)",
        ),
        ("--arch falcon --preset tiny --format gguf", "--arch falcon: llama or gpt-oss"),
        ("--arch gpt_oss --preset 1b --format gguf", "--preset 1b: gpt-oss has 20b, tiny"),
    ] {
        let err = parse_args(&args(spec, out)).unwrap_err().to_string();
        assert!(err.contains(expected), "{spec}: {err}");
    }
    assert!(parse_args(&["--arch".into()]).unwrap_err().to_string().contains("a value is required for '--arch"));
}

#[test]
fn vocab_writes_a_sentencepiece_tokenizer() {
    // The layout llama.cpp's SentencePiece vocabulary expects (its llama-perplexity and
    // llama-bench loaded such a file, by hand: llama.cpp is not built in CI).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny.gguf");
    synth(&parse_args(&args("--arch llama --preset tiny --format gguf --vocab", &out)).unwrap()).unwrap();
    let gguf = minerva_gguf::Gguf::open(&out).unwrap();
    let text = |key: &str| gguf.get(key).and_then(|v| v.as_str()).map(str::to_string);
    assert_eq!(text("tokenizer.ggml.model").as_deref(), Some("llama"));
    let array = |key: &str| gguf.get(key).and_then(|v| v.as_array()).unwrap_or_else(|| panic!("{key}"));
    let tokens: Vec<String> = array("tokenizer.ggml.tokens").strings().unwrap().map(str::to_string).collect();
    assert_eq!(tokens.len(), 512, "one token per row of the embedding");
    assert_eq!(&tokens[..4], ["<unk>", "<s>", "</s>", "<0x00>"]);
    assert_eq!((tokens[258].as_str(), tokens[259].as_str()), ("<0xFF>", "t259"));
    let types = array("tokenizer.ggml.token_type").to_i64_vec().unwrap();
    assert_eq!((types[0], types[1], types[3], types[258], types[259]), (2, 3, 6, 6, 1));
    assert_eq!(array("tokenizer.ggml.scores").len(), 512);
    assert_eq!(gguf.get("tokenizer.ggml.bos_token_id").and_then(|v| v.to_u64()), Some(1));
    // The weights are the same as without a tokenizer: the model still loads and runs.
    run_model(&out, 512);
}
