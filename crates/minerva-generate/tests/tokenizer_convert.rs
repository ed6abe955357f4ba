//! The tokenizer across formats (`minerva convert`): SmolLM2's GGUF vocabulary → `tokenizer.json`
//! and `tokenizer_config.json` → GGUF keys again. Every step tokenizes the committed corpus exactly
//! as the source file does, and the second GGUF holds the source's vocabulary, merges, token
//! types, pre-tokenizer name, special ids and chat template.

use std::path::PathBuf;

use minerva_generate::Tokenizer;
use minerva_generate::tokenizer::convert::{files_from_gguf, gguf_metadata_from_dir};
use minerva_gguf::{Gguf, GgufWriter};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn corpus() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("fixtures/tokenizer/smollm2_ids.json")).expect("fixture");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
}

#[test]
fn smollm2_tokenizer_survives_gguf_to_files_to_gguf() {
    let source = Gguf::open(root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf")).expect("real model");
    let original = Tokenizer::from_gguf(&source).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = files_from_gguf(&source).unwrap();
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]);
    for (name, bytes) in &files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let from_files = Tokenizer::from_dir(dir.path()).unwrap();

    let keys = gguf_metadata_from_dir(dir.path()).unwrap();
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    for (k, v) in keys {
        w.add_metadata(k, v).unwrap();
    }
    let path = dir.path().join("again.gguf");
    w.write_to(std::fs::File::create(&path).unwrap()).unwrap();
    let again = Gguf::open(&path).unwrap();
    let from_again = Tokenizer::from_gguf(&again).unwrap();

    let texts = corpus();
    assert!(texts.len() >= 10);
    for text in &texts {
        let want = original.encode(text, true).unwrap();
        assert_eq!(from_files.encode(text, true).unwrap(), want, "tokenizer.json: {text:?}");
        assert_eq!(from_again.encode(text, true).unwrap(), want, "GGUF again: {text:?}");
    }
    for tok in [&from_files, &from_again] {
        assert_eq!((tok.bos, tok.eos, tok.add_bos), (original.bos, original.eos, original.add_bos));
        assert_eq!(tok.chat_template, original.chat_template);
    }
    for key in [
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.padding_token_id",
        "tokenizer.chat_template",
    ] {
        let owned = |g: &Gguf<_>| g.get(key).map(|v| format!("{:?}", v.to_owned_value()));
        assert_eq!(owned(&again), owned(&source), "{key}");
    }
    for key in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"] {
        assert_eq!(again.get_str_array(key).unwrap(), source.get_str_array(key).unwrap(), "{key}");
    }
    let types = |g: &Gguf<_>| g.get_array("tokenizer.ggml.token_type").unwrap().to_i32_vec().unwrap();
    assert_eq!(types(&again), types(&source));
}

/// SmolLM2's own tokenizer.json spells its pre-tokenizer as `Digits` + `ByteLevel(use_regex)`:
/// recognised as llama.cpp's `smollm`, and tokenizing the same.
#[test]
fn hugging_face_spelling_of_smollm_is_recognised() {
    let source = Gguf::open(root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf")).expect("real model");
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files_from_gguf(&source).unwrap() {
        let bytes = if name == "tokenizer.json" {
            let mut doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            doc["pre_tokenizer"] = serde_json::json!({"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]});
            serde_json::to_vec(&doc).unwrap()
        } else {
            bytes
        };
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let keys = gguf_metadata_from_dir(dir.path()).unwrap();
    let pre = keys.iter().find(|(k, _)| k == "tokenizer.ggml.pre").map(|(_, v)| format!("{v:?}"));
    assert_eq!(pre.as_deref(), Some("String(\"smollm\")"));
    let (hf, original) = (Tokenizer::from_dir(dir.path()).unwrap(), Tokenizer::from_gguf(&source).unwrap());
    for text in corpus() {
        assert_eq!(hf.encode(&text, false).unwrap(), original.encode(&text, false).unwrap(), "{text:?}");
    }
}

#[test]
fn tokenizers_gguf_cannot_hold_are_errors_naming_the_file() {
    // The tiny GPT-OSS fixture's tokenizer is word-level.
    let e = gguf_metadata_from_dir(&root().join("fixtures/gpt_oss/hf")).unwrap_err().to_string();
    assert!(e.contains("tokenizer.json") && e.contains("byte-level BPE"), "{e}");
    let none = gguf_metadata_from_dir(&root().join("fixtures/model/tiny/llama")).unwrap();
    assert!(none.is_empty(), "no tokenizer.json, no keys");
}
