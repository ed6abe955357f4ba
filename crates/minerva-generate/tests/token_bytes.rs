//! `Tokenizer::token_bytes`: the bytes of a text's tokens, laid end to end, are the text's bytes,
//! for byte-level BPE (SmolLM2) and SentencePiece with byte fallback (Gemma 3 and a small
//! vocabulary), tokens that hold part of a UTF-8 character included; a word-level
//! `tokenizer.json`'s tokens are their decoded text.

mod common;

use minerva_generate::Tokenizer;

fn texts() -> Vec<String> {
    let corpus: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(common::root().join("fixtures/tokenizer/corpus.json")).unwrap())
            .unwrap();
    let mut texts = corpus;
    texts.extend(["こんにちは、世界 👁️ café".to_string(), "tabs\tand\nnewlines  and  spaces".to_string()]);
    texts
}

/// The concatenated token bytes of every text; `space_prefix`: the vocabulary writes a space
/// before a text (SentencePiece's `add_space_prefix`), which its decoder strips again.
fn assert_bytes_concatenate(tok: &Tokenizer, space_prefix: bool) -> usize {
    let table = tok.token_bytes();
    assert_eq!(table.len(), tok.vocab_size());
    let mut partial = 0;
    for text in texts() {
        let ids = tok.encode(&text, false).unwrap();
        let mut bytes = Vec::new();
        for &id in &ids {
            let token = table.get(id);
            partial += usize::from(std::str::from_utf8(token).is_err());
            bytes.extend_from_slice(token);
        }
        // (Metaspace prepends its space only to a non-empty text that does not start with one.)
        let want =
            if space_prefix && !text.is_empty() && !text.starts_with(' ') { format!(" {text}") } else { text.clone() };
        assert_eq!(String::from_utf8_lossy(&bytes), want, "{ids:?}");
        assert_eq!(bytes, want.as_bytes());
    }
    partial
}

#[test]
fn byte_level_bpe_tokens_concatenate_to_the_text() {
    let tok = common::tokenizer_from_gguf("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    // The kana and the emoji are spelled with byte tokens that hold parts of characters.
    assert!(assert_bytes_concatenate(&tok, false) > 0);
    // Special tokens are their text.
    assert_eq!(tok.token_bytes().get(tok.eos.unwrap()), b"<|im_end|>");
    assert_eq!(tok.token_bytes().get(u32::MAX), b"");
}

#[test]
fn sentencepiece_tokens_concatenate_to_the_text() {
    // A 400-piece vocabulary whose byte fallback spells most characters byte by byte.
    let tok = common::tokenizer_from_gguf("fixtures/tokenizer/spm_vocab.gguf");
    assert!(assert_bytes_concatenate(&tok, true) > 0);
    let gemma = common::tokenizer_from_gguf("models/gemma-3-270m-q4_k_m.gguf");
    assert_bytes_concatenate(&gemma, false);
    assert_eq!(gemma.token_bytes().get(gemma.bos.unwrap()), b"<bos>");
}

#[test]
fn a_word_level_tokens_bytes_are_its_decoded_text() {
    // The tiny GPT-OSS fixture's tokenizer.json (word level, Harmony's special tokens).
    let tok = Tokenizer::from_dir(&common::root().join("fixtures/gpt_oss/hf")).unwrap();
    for id in 0..tok.vocab_size() as u32 {
        assert_eq!(tok.token_bytes().get(id), tok.decode(&[id], false).unwrap().as_bytes(), "token {id}");
    }
}
