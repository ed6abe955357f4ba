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

#[test]
fn smollm2_ids_match_transformers() {
    let tok = smollm2();
    let reference = load("smollm2_ids.json");
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
