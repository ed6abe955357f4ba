//! The grammar mask against the vocabulary itself: for byte-level BPE (SmolLM2) and SentencePiece
//! with byte fallback (Gemma 3), the tokens a regex allows are exactly those whose bytes can
//! continue it; special tokens never, stop tokens only where the grammar may end; a grammar is
//! complete where nothing may follow; a greedy walk under a schema gives valid JSON.

mod common;

use minerva_generate::{Grammar, GrammarCompiler, Tokenizer};

/// The ids a fresh mask leaves finite.
fn allowed(mask: &[f32]) -> Vec<u32> {
    mask.iter().enumerate().filter(|(_, l)| l.is_finite()).map(|(i, _)| i as u32).collect()
}

fn check_digits(tok: &Tokenizer) {
    let vocab = tok.vocab_size() + 7; // padded logit rows are never allowed
    let compiler = GrammarCompiler::new(tok, vocab).unwrap();
    let mut c = compiler.compile(&Grammar::Regex("[0-9]{1,6}".into())).unwrap();
    let mut logits = vec![0.0f32; vocab];
    c.mask(&mut logits).unwrap();
    let table = tok.token_bytes();
    let digits = |id: u32| {
        let b = table.get(id);
        !b.is_empty() && b.len() <= 6 && b.iter().all(u8::is_ascii_digit) && !tok.is_special(id)
    };
    let want: Vec<u32> = (0..tok.vocab_size() as u32).filter(|&id| digits(id)).collect();
    assert!(!want.is_empty());
    assert_eq!(allowed(&logits), want);
    // After "1", more digits or the end: stop tokens are allowed now.
    let one = (0..tok.vocab_size() as u32).find(|&id| table.get(id) == b"1").unwrap();
    assert!(!c.accept(one).unwrap());
    let mut logits = vec![0.0f32; vocab];
    c.mask(&mut logits).unwrap();
    let now = allowed(&logits);
    for &stop in &tok.stop_ids {
        assert!(now.contains(&stop), "stop token {stop} not allowed where the regex may end");
    }
    assert!(now.iter().all(|&id| tok.stop_ids.contains(&id) || (digits(id) && table.get(id).len() <= 5)));
    // Six digits in all: complete, nothing may follow.
    let five = (0..tok.vocab_size() as u32).filter(|&id| table.get(id) == b"2").collect::<Vec<_>>()[0];
    for _ in 0..4 {
        assert!(!c.accept(five).unwrap());
    }
    assert!(c.accept(five).unwrap(), "six digits complete [0-9]{{1,6}}");
    assert!(c.is_complete());
}

#[test]
fn a_regex_allows_exactly_the_tokens_that_continue_it() {
    check_digits(&common::tokenizer_from_gguf("models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    check_digits(&common::tokenizer_from_gguf("models/gemma-3-270m-q4_k_m.gguf"));
}

#[test]
fn choices_and_special_tokens() {
    let tok = common::tokenizer_from_gguf("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    // A Lark grammar may name a special token; text never produces one.
    let lark = Grammar::Lark("start: \"ok\" <|im_end|>".into());
    let mut c = compiler.compile(&lark).unwrap();
    let ok = tok.encode("ok", false).unwrap();
    assert_eq!(ok.len(), 1);
    assert!(!c.accept(ok[0]).unwrap());
    let mut logits = vec![0.0f32; tok.vocab_size()];
    c.mask(&mut logits).unwrap();
    let im_end = tok.token_to_id("<|im_end|>").unwrap();
    assert_eq!(allowed(&logits), [im_end]);
    // A choice: the first token of each, nothing else.
    let mut c = compiler.compile(&Grammar::Choice(vec!["yes".into(), "no".into()])).unwrap();
    let mut logits = vec![0.0f32; tok.vocab_size()];
    c.mask(&mut logits).unwrap();
    let table = tok.token_bytes();
    for id in allowed(&logits) {
        let b = table.get(id);
        assert!(b"yes".starts_with(b) || b"no".starts_with(b), "{:?}", String::from_utf8_lossy(b));
    }
    // Grammars that cannot be used are errors that say why.
    for (grammar, words) in [
        (Grammar::JsonSchema(serde_json::json!({"type": "integer", "minimum": 5, "maximum": 1})), ""),
        (Grammar::Lark("start: missing".into()), ""),
        (Grammar::Lark("start: <|no_such_token|>".into()), "no_such_token"),
        (Grammar::JsonSchema(serde_json::json!(false)), "allows no output"),
    ] {
        let e = compiler.compile(&grammar).unwrap_err().to_string();
        assert!(e.starts_with("grammar: ") && e.contains(words), "{grammar:?}: {e}");
    }
}
