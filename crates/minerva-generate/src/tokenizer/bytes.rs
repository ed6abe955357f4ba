//! [`TokenBytes`]: the exact bytes each token id stands for, so that the bytes of a generated
//! sequence are the concatenation of its tokens' bytes (OpenAI's logprob `bytes`; a constrained
//! decoder's token trie).
//!
//! Decoding one token through the `tokenizers` pipeline cannot give them: a byte token that holds
//! part of a UTF-8 character comes back as U+FFFD, and a SentencePiece decoder strips the space
//! that starts a sequence. So the bytes are read from the vocabulary entry, by the spelling its
//! decoder undoes:
//!
//! | decoder | entry | bytes |
//! |---|---|---|
//! | `ByteLevel` (GPT-2 BPE) | one char per byte, GPT-2's printable alphabet | the inverse of that alphabet |
//! | `ByteFallback` (SentencePiece) | `<0x41>`, or text with `▁` for spaces | the byte, or the text with `▁` → space |
//! | anything else (word level, …) | as the decoder writes a lone token | that text |
//!
//! Added tokens (special or not) are their content.

use serde_json::Value;

/// How a vocabulary spells bytes, read from its decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spelling {
    ByteLevel,
    SentencePiece,
    Decoded,
}

fn spelling(decoder: &Value) -> Spelling {
    let mut kinds = Vec::new();
    collect_types(decoder, &mut kinds);
    if kinds.contains(&"ByteLevel") {
        Spelling::ByteLevel
    } else if kinds.contains(&"ByteFallback") || kinds.contains(&"Metaspace") {
        Spelling::SentencePiece
    } else {
        Spelling::Decoded
    }
}

fn collect_types<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::String(kind)) = map.get("type") {
                out.push(kind);
            }
            map.values().for_each(|v| collect_types(v, out));
        }
        Value::Array(list) => list.iter().for_each(|v| collect_types(v, out)),
        _ => {}
    }
}

/// GPT-2's byte → char table (`bytes_to_unicode`): printable Latin-1 bytes are themselves, the
/// others are 256, 257, … in byte order. Returns the inverse, char → byte.
fn byte_level_inverse() -> std::collections::HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut next = 256u32;
    let mut map = std::collections::HashMap::with_capacity(256);
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or(char::REPLACEMENT_CHARACTER);
            next += 1;
            c
        };
        map.insert(c, b);
    }
    map
}

/// `<0xAB>` → 0xAB.
fn byte_fallback(entry: &str) -> Option<u8> {
    let hex = entry.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Every token's bytes, in one buffer.
#[derive(Clone, Debug, Default)]
pub struct TokenBytes {
    bytes: Vec<u8>,
    /// `ends[i]`: where token `i`'s bytes end in `bytes` (they start where `i - 1`'s end).
    ends: Vec<usize>,
}

impl TokenBytes {
    /// The table of `tokenizer`'s vocabulary (added tokens included).
    pub(crate) fn new(tokenizer: &tokenizers::Tokenizer) -> TokenBytes {
        let decoder = serde_json::to_value(tokenizer.get_decoder()).unwrap_or(Value::Null);
        let spelling = spelling(&decoder);
        let inverse = (spelling == Spelling::ByteLevel).then(byte_level_inverse);
        let added = tokenizer.get_added_tokens_decoder();
        let n = tokenizer.get_vocab_size(true);
        let mut table = TokenBytes { bytes: Vec::new(), ends: Vec::with_capacity(n) };
        for id in 0..n as u32 {
            if let Some(token) = added.get(&id) {
                table.bytes.extend_from_slice(token.content.as_bytes());
            } else if let Some(entry) = tokenizer.id_to_token(id) {
                match (spelling, &inverse) {
                    (Spelling::ByteLevel, Some(inverse)) => {
                        for c in entry.chars() {
                            match inverse.get(&c) {
                                Some(&b) => table.bytes.push(b),
                                None => table.bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                            }
                        }
                    }
                    (Spelling::SentencePiece, _) => match byte_fallback(&entry) {
                        Some(b) => table.bytes.push(b),
                        None => table.bytes.extend_from_slice(entry.replace('\u{2581}', " ").as_bytes()),
                    },
                    _ => {
                        let text = tokenizer.decode(&[id], false).unwrap_or_default();
                        table.bytes.extend_from_slice(text.as_bytes());
                    }
                }
            }
            table.ends.push(table.bytes.len());
        }
        table
    }

    /// The bytes of token `id` (empty outside the vocabulary).
    pub fn get(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match self.ends.get(i) {
            Some(&end) => &self.bytes[if i == 0 { 0 } else { self.ends[i - 1] }..end],
            None => &[],
        }
    }

    /// Tokens in the table.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_level_alphabet_is_a_bijection_with_gpt2s_known_letters() {
        let inverse = byte_level_inverse();
        assert_eq!(inverse.len(), 256);
        // GPT-2 spells a space Ġ (U+0120) and a newline Ċ (U+010A).
        assert_eq!(inverse[&'\u{0120}'], b' ');
        assert_eq!(inverse[&'\u{010A}'], b'\n');
        assert_eq!(inverse[&'a'], b'a');
        assert_eq!(inverse[&'\u{00E3}'], 0xE3);
    }

    #[test]
    fn byte_fallback_entries_are_two_hex_digits() {
        assert_eq!(byte_fallback("<0xE3>"), Some(0xE3));
        assert_eq!(byte_fallback("<0x0A>"), Some(b'\n'));
        assert_eq!(byte_fallback("<0xE>"), None);
        assert_eq!(byte_fallback("<0xZZ>"), None);
        assert_eq!(byte_fallback("hello"), None);
    }
}
