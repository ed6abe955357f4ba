//! Building a `tokenizer.json` (the `tokenizers` crate's own format) from GGUF metadata.
//!
//! GGUF stores a vocabulary, not a tokenizer: `tokenizer.ggml.tokens` / `scores` / `token_type` /
//! `merges`, and names the rest (`tokenizer.ggml.model`, `tokenizer.ggml.pre`). We rebuild the
//! pipeline that name stands for, the way transformers' GGUF loader does (our parity reference):
//!
//! ```text
//! model = gpt2   BPE(vocab, merges)            pre: Split(regex of `pre`, isolated) → ByteLevel
//!                                              dec: ByteLevel
//! model = llama  BPE(vocab, merges from scores, byte_fallback)
//!                                              pre: Metaspace("▁", prepend first|never)
//!                                              dec: Replace("▁"," ") → ByteFallback → Fuse → Strip(1 left)
//! added tokens:  token_type 3 (control) → special, 4 (user-defined) → added, not special
//! ```
//!
//! Building JSON and letting `tokenizers` deserialize it keeps one code path for GGUF files and
//! `tokenizer.json` checkpoints.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use crate::error::{GenerateError, Result};

/// GGUF token types (llama.cpp's `llama_token_type`).
pub const TOKEN_TYPE_CONTROL: i32 = 3;
/// A user-defined token: matched whole in text, but printed like any other.
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// The vocabulary as GGUF stores it.
pub struct GgufVocab<'a> {
    /// `tokenizer.ggml.model`.
    pub model: &'a str,
    /// `tokenizer.ggml.pre` (gpt2 only; absent means `default`).
    pub pre: Option<&'a str>,
    /// `tokenizer.ggml.tokens`.
    pub tokens: Vec<&'a str>,
    /// `tokenizer.ggml.scores` (llama only).
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`.
    pub token_type: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges` (gpt2; optional for llama, derived from scores when absent).
    pub merges: Option<Vec<&'a str>>,
    /// `tokenizer.ggml.add_space_prefix` (llama; default true).
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
}

/// GPT-2's split regex, what `ByteLevel(use_regex = true)` applies.
const GPT2_SPLIT: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// LLaMA-3's split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_LLAMA3`): digits in groups of up to three.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split: like LLaMA-3's but every digit alone.
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GPT-4o / o200k (GPT-OSS): case-aware words with contractions attached.
const GPT4O_SPLIT: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// The `tokenizer.ggml.pre` values we know, for the error message.
pub const SUPPORTED_PRE: &[&str] =
    &["default", "gpt2", "smollm", "llama-bpe", "llama3", "llama-v3", "qwen2", "deepseek-r1-qwen", "gpt-4o", "o200k"];

/// The pre-tokenizer for a byte-level vocabulary: the split regexes `pre` names, then the
/// byte-to-unicode mapping.
pub(crate) fn byte_level_pre_tokenizer(pre: &str) -> Result<Value> {
    let split =
        |regex: &str| json!({"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false});
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let steps = match pre {
        // GPT-2's own regex, inside ByteLevel (what transformers does for any unlisted `pre`).
        "default" | "gpt2" => vec![byte_level(true)],
        // SmolLM's tokenizer.json: every digit alone (`Digits(individual_digits)`), then GPT-2's
        // regex; llama.cpp's `smollm` pre-type is the same two splits.
        "smollm" => vec![split(r"\p{N}"), split(GPT2_SPLIT), byte_level(false)],
        "llama-bpe" | "llama3" | "llama-v3" => vec![split(LLAMA3_SPLIT), byte_level(false)],
        "qwen2" | "deepseek-r1-qwen" => vec![split(QWEN2_SPLIT), byte_level(false)],
        "gpt-4o" | "o200k" => vec![split(GPT4O_SPLIT), byte_level(false)],
        other => return Err(GenerateError::UnsupportedPre(other.to_string())),
    };
    Ok(json!({"type": "Sequence", "pretokenizers": steps}))
}

/// GPT-2's reversible byte → printable character map (`bytes_to_unicode`).
pub fn bytes_to_unicode() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        map[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\u{FFFD}');
            next += 1;
            c
        };
    }
    map
}

fn added_token(id: usize, content: &str, special: bool) -> Value {
    json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
           "normalized": false, "special": special})
}

/// The `tokenizer.json` document for a GGUF vocabulary.
pub fn tokenizer_json(v: &GgufVocab<'_>) -> Result<Value> {
    if let Some(types) = &v.token_type
        && types.len() != v.tokens.len()
    {
        return Err(GenerateError::Vocab(format!(
            "tokenizer.ggml.token_type has {} entries, tokenizer.ggml.tokens {}",
            types.len(),
            v.tokens.len()
        )));
    }
    let token_type = |i: usize| v.token_type.as_ref().map_or(1, |t| t[i]);
    match v.model {
        "gpt2" => {
            let pre = byte_level_pre_tokenizer(v.pre.unwrap_or("default"))?;
            let spelling = bytes_to_unicode();
            let alphabet: HashSet<char> = spelling.iter().copied().collect();
            // Tokens are stored in the byte alphabet already; one that is not (a mislabelled
            // special token) is respelled from its UTF-8 bytes, as transformers does.
            let spelled: Vec<String> = v
                .tokens
                .iter()
                .map(|t| {
                    if t.chars().all(|c| alphabet.contains(&c)) {
                        t.to_string()
                    } else {
                        t.bytes().map(|b| spelling[b as usize]).collect()
                    }
                })
                .collect();
            let vocab: serde_json::Map<String, Value> =
                spelled.iter().enumerate().map(|(i, t)| (t.clone(), json!(i))).collect();
            let merges = v.merges.as_ref().ok_or_else(|| {
                GenerateError::Vocab("tokenizer.ggml.model is gpt2 but tokenizer.ggml.merges is missing".into())
            })?;
            let merges = merges
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    m.split_once(' ')
                        .map(|(a, b)| json!([a, b]))
                        .ok_or_else(|| GenerateError::Vocab(format!("tokenizer.ggml.merges[{i}] {m:?} has no space")))
                })
                .collect::<Result<Vec<_>>>()?;
            let mut added = Vec::new();
            for (i, t) in v.tokens.iter().enumerate() {
                let ty = token_type(i);
                if ty == TOKEN_TYPE_CONTROL && t.chars().all(|c| alphabet.contains(&c)) {
                    added.push(added_token(i, t, true));
                } else if ty == TOKEN_TYPE_USER_DEFINED && vocab.contains_key(*t) {
                    added.push(added_token(i, t, false));
                }
            }
            Ok(json!({
                "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
                "normalizer": null, "pre_tokenizer": pre, "post_processor": null,
                "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
                "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                          "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                          "ignore_merges": false, "vocab": vocab, "merges": merges},
            }))
        }
        "llama" => {
            let vocab: HashMap<&str, usize> = v.tokens.iter().enumerate().map(|(i, t)| (*t, i)).collect();
            let merges: Vec<(String, String)> = match &v.merges {
                Some(m) => m
                    .iter()
                    .map(|m| m.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())))
                    .collect::<Option<_>>()
                    .ok_or_else(|| GenerateError::Vocab("a tokenizer.ggml.merges entry has no space".into()))?,
                None => {
                    let scores = v.scores.as_ref().ok_or_else(|| {
                        GenerateError::Vocab("tokenizer.ggml.model is llama but has neither merges nor scores".into())
                    })?;
                    if scores.len() != v.tokens.len() {
                        return Err(GenerateError::Vocab(format!(
                            "tokenizer.ggml.scores has {} entries, tokenizer.ggml.tokens {}",
                            scores.len(),
                            v.tokens.len()
                        )));
                    }
                    merges_from_scores(&v.tokens, scores, &vocab)
                }
            };
            let vocab_json: serde_json::Map<String, Value> =
                v.tokens.iter().enumerate().map(|(i, t)| (t.to_string(), json!(i))).collect();
            let mut added = Vec::new();
            for (i, t) in v.tokens.iter().enumerate() {
                let ty = token_type(i);
                if ty == TOKEN_TYPE_CONTROL || Some(i as u32) == v.unk {
                    added.push(added_token(i, t, true));
                } else if ty == TOKEN_TYPE_USER_DEFINED {
                    added.push(added_token(i, t, false));
                }
            }
            let prefix = v.add_space_prefix.unwrap_or(true);
            let mut decoders = vec![
                json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
                json!({"type": "ByteFallback"}),
                json!({"type": "Fuse"}),
            ];
            if prefix {
                decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
            }
            Ok(json!({
                "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
                "normalizer": null,
                "pre_tokenizer": {"type": "Metaspace", "replacement": "\u{2581}",
                                  "prepend_scheme": if prefix { "first" } else { "never" }, "split": false},
                "post_processor": null,
                "decoder": {"type": "Sequence", "decoders": decoders},
                "model": {"type": "BPE", "dropout": null, "unk_token": v.unk.map(|u| v.tokens[u as usize]),
                          "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": true,
                          "byte_fallback": true, "ignore_merges": false, "vocab": vocab_json,
                          "merges": merges.into_iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>()},
            }))
        }
        other => Err(GenerateError::UnsupportedModel(other.to_string())),
    }
}

/// Merges implied by a SentencePiece vocabulary: every split of a token into two tokens, ranked by
/// the merged token's score (best first), ties by the pieces' lengths — transformers'
/// `generate_merges`, whose order the reference tokenizer uses.
pub fn merges_from_scores(tokens: &[&str], scores: &[f32], vocab: &HashMap<&str, usize>) -> Vec<(String, String)> {
    let mut merges: Vec<(&str, &str, f32)> = Vec::new();
    // Python iterates a dict built from (token, score) pairs: a repeated token keeps its first
    // position and its last score.
    let mut last_score: HashMap<&str, f32> = HashMap::new();
    for (t, s) in tokens.iter().zip(scores) {
        last_score.insert(t, *s);
    }
    let mut seen = HashSet::new();
    for t in tokens {
        if !seen.insert(*t) {
            continue;
        }
        let score = last_score[t];
        let mut local: Vec<(&str, &str, f32)> = t
            .char_indices()
            .skip(1)
            .map(|(at, _)| t.split_at(at))
            .filter(|(l, r)| vocab.contains_key(l) && vocab.contains_key(r))
            .map(|(l, r)| (l, r, score))
            .collect();
        local.sort_by_key(|(l, r, _)| (vocab[l], vocab[r]));
        merges.extend(local);
    }
    // Stable sort, descending on (score, len(l), len(r)): equal keys keep their order, as
    // Python's `sorted(reverse=True)` does.
    merges.sort_by(|a, b| {
        let ka = (a.0.chars().count(), a.1.chars().count());
        let kb = (b.0.chars().count(), b.1.chars().count());
        b.2.total_cmp(&a.2).then(kb.cmp(&ka))
    });
    merges.into_iter().map(|(l, r, _)| (l.to_string(), r.to_string())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab<'a>(model: &'a str, pre: Option<&'a str>) -> GgufVocab<'a> {
        GgufVocab {
            model,
            pre,
            tokens: vec!["a", "b", "ab"],
            scores: Some(vec![0.0, 0.0, -1.0]),
            token_type: Some(vec![1, 1, 1]),
            merges: Some(vec!["a b"]),
            add_space_prefix: None,
            unk: None,
        }
    }

    #[test]
    fn unknown_names_are_typed_errors() {
        let e = tokenizer_json(&vocab("gpt2", Some("klingon"))).unwrap_err();
        assert!(matches!(&e, GenerateError::UnsupportedPre(p) if p == "klingon"), "{e}");
        assert!(e.to_string().contains("smollm"));
        let e = tokenizer_json(&vocab("rwkv", None)).unwrap_err();
        assert!(matches!(&e, GenerateError::UnsupportedModel(m) if m == "rwkv"), "{e}");
    }

    #[test]
    fn malformed_vocabularies_are_errors() {
        let mut v = vocab("gpt2", Some("smollm"));
        v.merges = Some(vec!["ab"]);
        assert!(tokenizer_json(&v).unwrap_err().to_string().contains("merges[0]"));
        let mut v = vocab("gpt2", None);
        v.token_type = Some(vec![1]);
        assert!(tokenizer_json(&v).unwrap_err().to_string().contains("token_type has 1 entries"));
        let mut v = vocab("llama", None);
        v.merges = None;
        v.scores = Some(vec![0.0]);
        assert!(tokenizer_json(&v).unwrap_err().to_string().contains("scores has 1 entries"));
    }

    #[test]
    fn merges_from_scores_rank_by_score_then_length() {
        // "ab" (score -1) and "abc" (score -2) from pieces; best score first.
        let tokens = ["a", "b", "c", "ab", "abc", "bc"];
        let scores = [0.0, 0.0, 0.0, -1.0, -2.0, -3.0];
        let vocab: HashMap<&str, usize> = tokens.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        let m = merges_from_scores(&tokens, &scores, &vocab);
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        // "abc" splits as "a"+"bc" (bc in vocab) and "ab"+"c"; sorted by the pieces' ids, then the
        // stable descending sort on (score, len(l), len(r)) puts "ab"+"c" (len 2) before "a"+"bc".
        assert_eq!(m, vec![pair("a", "b"), pair("ab", "c"), pair("a", "bc"), pair("b", "c")]);
    }

    #[test]
    fn byte_alphabet_is_a_bijection() {
        let map = bytes_to_unicode();
        let set: HashSet<char> = map.iter().copied().collect();
        assert_eq!(set.len(), 256);
        assert_eq!(map[b' ' as usize], '\u{120}');
        assert_eq!(map[b'A' as usize], 'A');
    }

    #[test]
    fn pre_tokenizer_regexes_split_as_their_models_do() {
        use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
        let text = "Hello world 12345 it's";
        let cases: [(&str, &[&str]); 5] = [
            ("default", &["Hello", " world", " 12345", " it", "'s"]),
            ("smollm", &["Hello", " world", " ", "1", "2", "3", "4", "5", " it", "'s"]),
            ("llama-bpe", &["Hello", " world", " ", "123", "45", " it", "'s"]),
            ("qwen2", &["Hello", " world", " ", "1", "2", "3", "4", "5", " it", "'s"]),
            ("gpt-4o", &["Hello", " world", " ", "123", "45", " it's"]),
        ];
        for (pre, want) in cases {
            let doc = tokenizer_json(&vocab("gpt2", Some(pre))).unwrap();
            let tok: tokenizers::Tokenizer = serde_json::from_value(doc).unwrap();
            let mut s = PreTokenizedString::from(text);
            tok.get_pre_tokenizer().unwrap().pre_tokenize(&mut s).unwrap();
            // Splits are in the byte-level alphabet: map back through the offsets.
            let got: Vec<&str> = s
                .get_splits(OffsetReferential::Original, OffsetType::Byte)
                .into_iter()
                .map(|(_, (a, b), _)| &text[a..b])
                .collect();
            assert_eq!(got, want, "pre {pre}");
        }
    }
}
