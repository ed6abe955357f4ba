//! Token ids of the committed corpus equal transformers' tokenizer built from the same GGUF
//! (`fixtures/tokenizer/make_tokenizer_reference.py`), and decoding round-trips.

use std::path::PathBuf;

use minerva_generate::{TextStream, Tokenizer};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn load(fixture: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(root().join("fixtures/tokenizer").join(fixture)).expect("fixture");
    serde_json::from_str(&text).expect("fixture json")
}

fn smollm2() -> Tokenizer {
    let g = minerva_gguf::Gguf::open(root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf")).expect("real model");
    Tokenizer::from_gguf(&g).expect("tokenizer")
}

/// Compares our ids and decoded text with a reference file from the fixture scripts.
fn assert_matches_reference(tok: &Tokenizer, fixture: &str) {
    let reference = load(fixture);
    let texts = reference["texts"].as_array().unwrap();
    let ids = reference["ids"].as_array().unwrap();
    let decoded = reference["decoded"].as_array().unwrap();
    assert_eq!(texts.len(), ids.len());
    let mut mismatches = Vec::new();
    for ((text, want), want_text) in texts.iter().zip(ids).zip(decoded) {
        let text = text.as_str().unwrap();
        let want: Vec<u32> = want.as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let got = tok.encode(text, true).unwrap();
        if got != want {
            mismatches.push(format!("{text:?}:\n  ours   {got:?}\n  theirs {want:?}"));
        }
        assert_eq!(tok.decode(&got, false).unwrap(), want_text.as_str().unwrap(), "decode of {text:?}");
    }
    assert!(mismatches.is_empty(), "{} mismatches:\n{}", mismatches.len(), mismatches.join("\n"));
}

#[test]
fn smollm2_ids_match_transformers() {
    assert_matches_reference(&smollm2(), "smollm2_ids.json");
}

#[test]
fn sentencepiece_vocab_ids_match_transformers() {
    // A 400-piece SentencePiece BPE vocabulary with byte fallback (fixtures/tokenizer/make_spm_vocab.py).
    let g = minerva_gguf::Gguf::open(root().join("fixtures/tokenizer/spm_vocab.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    assert!(tok.add_bos);
    assert_eq!((tok.bos, tok.eos), (Some(1), Some(2)));
    assert_matches_reference(&tok, "spm_ids.json");
}

#[test]
fn smollm2_special_ids() {
    let tok = smollm2();
    assert_eq!(tok.bos, Some(1));
    assert_eq!(tok.eos, Some(2));
    assert!(!tok.add_bos);
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(2));
    // <|endoftext|> (0) and <|im_end|> (2) both end generation.
    assert!(tok.is_stop(0) && tok.is_stop(2) && !tok.is_stop(1));
    assert!(tok.chat_template.as_deref().unwrap().contains("<|im_start|>"));
}

#[test]
fn stream_emits_whole_characters_only() {
    let tok = smollm2();
    let text = "Emoji: 😀🚀 👩‍👧 日本語 naïve <|im_end|> end";
    let ids = tok.encode(text, false).unwrap();
    let mut stream = TextStream::new();
    let mut out = String::new();
    let mut held = 0;
    for &id in &ids {
        match stream.push(&tok, id).unwrap() {
            Some(piece) => {
                assert!(!piece.contains('\u{FFFD}'), "partial character in {piece:?}");
                out.push_str(&piece);
            }
            None => held += 1,
        }
    }
    // Multi-byte characters span several byte tokens here, so some steps must have held text back.
    assert!(held > 0);
    // Special tokens are skipped in the stream; everything else comes out exactly once.
    assert_eq!(out, tok.decode(&ids, true).unwrap());
    assert!(out.contains("😀🚀") && out.contains("日本語") && !out.contains("<|im_end|>"));
}

#[test]
fn tokenizer_json_directory_loads_with_its_config() {
    // Our SmolLM2 pipeline saved as tokenizer.json, with a tokenizer_config.json as HF ships it.
    let tok = smollm2();
    let dir = std::env::temp_dir().join(format!("minerva-tokdir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tok.inner().to_string(false).unwrap()).unwrap();
    let config = serde_json::json!({
        "bos_token": {"content": "<|im_start|>"}, "eos_token": "<|im_end|>", "add_bos_token": false,
        "chat_template": tok.chat_template.clone().unwrap(),
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    let from_dir = Tokenizer::from_dir(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!((from_dir.bos, from_dir.eos), (Some(1), Some(2)));
    assert_eq!(from_dir.chat_template, tok.chat_template);
    assert!(from_dir.is_stop(2) && from_dir.is_stop(0));
    assert_matches_reference(&from_dir, "smollm2_ids.json");
    // A directory without tokenizer.json names the file.
    let err = Tokenizer::from_dir(std::path::Path::new("/nonexistent")).unwrap_err().to_string();
    assert!(err.contains("/nonexistent/tokenizer.json"), "{err}");
}
