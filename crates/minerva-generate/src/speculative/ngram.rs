//! Prompt lookup: drafts copied from earlier in the text.

use std::collections::HashMap;
use std::sync::Arc;

use super::Drafter;
use crate::error::{GenerateError, Result};
use crate::tokenizer::Tokenizer;

/// Prompt-lookup drafting: the continuation of the most recent earlier occurrence of the last `n`
/// tokens (the longest `n` from `max` down to `min` that occurs) in the prompt and the generated
/// text; where the continuation reaches the end of a text that ends in a loop (its last tokens
/// twice), the loop continued. No second model; the best case is output that quotes its
/// input (edits, extraction, code) or repeats itself.
///
/// With [`SpacingClasses`] ([`NgramDrafter::with_spacing_classes`]), where the longest match by
/// ids is one token or none, two tokens also match where their texts differ only in leading
/// spaces: a value quoted from the prompt starts after a space there (`Email: margaret…`, ` marg`)
/// and after a quote in a JSON answer (`"margaret…`, `marg`), so its first tokens differ, and
/// without this the lookup found another occurrence of the one token that matched (the name's
/// `aret`, not the address's), or nothing. The draft is the occurrence's own tokens.
#[derive(Clone, Debug)]
pub struct NgramDrafter {
    min: usize,
    max: usize,
    /// The length of the last draft's match (0: none).
    matched: usize,
    /// Token classes matched instead of ids, if any.
    classes: Option<SpacingClasses>,
}

impl NgramDrafter {
    /// The longest n-gram looked up.
    pub const MAX_N: usize = 32;

    /// Matches of `min..=max` tokens (`1 ≤ min ≤ max ≤` [`NgramDrafter::MAX_N`]), of the same ids.
    pub fn new(min: usize, max: usize) -> Result<NgramDrafter> {
        if min == 0 || min > max || max > Self::MAX_N {
            return Err(GenerateError::Request(format!(
                "n-gram sizes {min}..{max}: need 1 ≤ min ≤ max ≤ {}",
                Self::MAX_N
            )));
        }
        Ok(NgramDrafter { min, max, matched: 0, classes: None })
    }

    /// Matches tokens of the same class of `classes` rather than of the same id.
    pub fn with_spacing_classes(self, classes: SpacingClasses) -> NgramDrafter {
        NgramDrafter { classes: Some(classes), ..self }
    }
}

impl Drafter for NgramDrafter {
    fn name(&self) -> &'static str {
        "ngram"
    }

    fn kind(&self) -> usize {
        self.matched
    }

    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()> {
        let len = history.len();
        self.matched = 0;
        if max == 0 || len < 2 {
            return Ok(());
        }
        let exact = self.longest_match(history, |id| id);
        // A match of one token by ids is the weakest evidence; where one by classes is longer,
        // it decides. Longer matches by ids stand (code quotes its input exactly, and a match
        // by classes there found other, worse occurrences).
        let found = match (&self.classes, exact) {
            (Some(classes), None | Some((1, _))) => {
                let spaced = self.longest_match(history, |id| classes.class(id));
                if spaced.map(|(n, _)| n) > exact.map(|(n, _)| n) { spaced } else { exact }
            }
            _ => exact,
        };
        let Some((n, end)) = found else { return Ok(()) };
        // Past the end of the text, the text since the match repeated (copied as LZ77 copies,
        // overlapping what it writes) — but only where the text already ends with it twice, a
        // loop the model is caught in (a run of one token, a line said again): then a draft runs
        // as far as allowed rather than one period a pass. A match a few tokens back by chance
        // would draft a long false period.
        let period = len - 1 - end;
        let looping = len >= 2 * period && history[len - 2 * period..len - period] == history[len - period..];
        let reach = if looping { max } else { max.min(len - end - 1) };
        let start = out.len();
        self.matched = n;
        for src in end + 1..end + 1 + reach {
            let token = if src < len { history[src] } else { out[start + src - len] };
            out.push(token);
        }
        Ok(())
    }
}

impl NgramDrafter {
    /// The longest match (`min..=max` tokens, compared by `key`) of the text's last tokens in the
    /// text before them, most recent first: (its length, the index of its last token), which
    /// leaves a token after it.
    fn longest_match(&self, history: &[u32], key: impl Fn(u32) -> u32) -> Option<(usize, usize)> {
        let len = history.len();
        for n in (self.min..=self.max.min(len - 1)).rev() {
            let suffix = &history[len - n..];
            let last = key(suffix[n - 1]);
            for end in (n - 1..len - 1).rev() {
                if key(history[end]) == last
                    && history[end + 1 - n..=end].iter().zip(suffix).all(|(&a, &b)| key(a) == key(b))
                {
                    return Some((n, end));
                }
            }
        }
        None
    }
}

/// A vocabulary's tokens grouped by their bytes without leading spaces (` marg` with `marg`),
/// for [`NgramDrafter::with_spacing_classes`]. A token of spaces only, or of no bytes, is a class
/// of its own, as is every special token (their bytes are their names); case is kept, since an
/// answer that changes it (a name, then an address made of it) quotes another span.
#[derive(Clone, Debug)]
pub struct SpacingClasses {
    /// `of[id]`: the least id with the same bytes once their leading spaces are dropped.
    of: Arc<[u32]>,
}

impl SpacingClasses {
    /// The classes of `tokenizer`'s vocabulary.
    pub fn new(tokenizer: &Tokenizer) -> SpacingClasses {
        let bytes = tokenizer.token_bytes();
        Self::from_bytes((0..bytes.len()).map(|id| bytes.get(id as u32)))
    }

    /// The classes of the tokens whose bytes `tokens` gives, in id order.
    pub fn from_bytes<'a>(tokens: impl IntoIterator<Item = &'a [u8]>) -> SpacingClasses {
        let mut first: HashMap<&'a [u8], u32> = HashMap::new();
        let of = tokens
            .into_iter()
            .enumerate()
            .map(|(id, bytes)| {
                let id = u32::try_from(id).unwrap_or(u32::MAX);
                let spaces = bytes.iter().take_while(|&&b| b == b' ').count();
                if spaces == bytes.len() {
                    return id;
                }
                *first.entry(&bytes[spaces..]).or_insert(id)
            })
            .collect();
        SpacingClasses { of }
    }

    /// The class of `id` (an id past the vocabulary is its own).
    pub fn class(&self, id: u32) -> u32 {
        self.of.get(id as usize).copied().unwrap_or(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_drop_leading_spaces_only() {
        let tokens: [&[u8]; 8] = [b" marg", b"marg", b"Marg", b" ", b"  ", b"", b"  marg", b"\nmarg"];
        let c = SpacingClasses::from_bytes(tokens);
        assert_eq!([c.class(0), c.class(1), c.class(6)], [0, 0, 0]);
        // Case, other whitespace, spaces alone and empty tokens stay apart.
        assert_eq!([c.class(2), c.class(3), c.class(4), c.class(5), c.class(7)], [2, 3, 4, 5, 7]);
        assert_eq!(c.class(100), 100);
    }

    #[test]
    fn a_quoted_value_is_found_under_its_other_spacing() {
        // 0 " marg", 1 "marg", 2 "aret", 3 ".", 4 "ok", 5 " Ok", 6 "\"", 7 " Marg", 8 "Marg".
        let tokens: [&[u8]; 9] = [b" marg", b"marg", b"aret", b".", b"ok", b" Ok", b"\"", b" Marg", b"Marg"];
        let classes = SpacingClasses::from_bytes(tokens);
        // The prompt quotes " Marg" "aret" " Ok" and " marg" "aret" "." "ok"; the answer has
        // written "Marg" "aret" " Ok" "\"" "marg" "aret".
        let history = [7, 2, 5, 0, 2, 3, 4, 6, 8, 2, 5, 6, 1, 2];
        let mut out = Vec::new();
        let mut exact = NgramDrafter::new(1, 4).unwrap();
        exact.draft(&history, 2, &mut out).unwrap();
        // By ids, the last "aret" is the latest occurrence's: the name's " Ok".
        assert_eq!((out.as_slice(), exact.kind()), (&[5, 6][..], 1));
        out.clear();
        let mut spaced = NgramDrafter::new(1, 4).unwrap().with_spacing_classes(classes);
        spaced.draft(&history, 2, &mut out).unwrap();
        // By classes, "marg" "aret" matches the prompt's " marg" "aret": its "." "ok".
        assert_eq!((out.as_slice(), spaced.kind()), (&[3, 4][..], 2));
    }

    #[test]
    fn a_match_of_two_ids_stands_over_a_longer_one_by_classes() {
        // 0 " a", 1 "a", 2 "b", 3 "c", 4 "X", 5 "Y".
        let tokens: [&[u8]; 6] = [b" a", b"a", b"b", b"c", b"X", b"Y"];
        let classes = SpacingClasses::from_bytes(tokens);
        // "a" "b" "c" ends the text: " a" "b" "c" (then "X") matches it by classes, three tokens;
        // the later "b" "c" (then "Y") by ids, two.
        let history = [0, 2, 3, 4, 2, 3, 5, 1, 2, 3];
        let mut out = Vec::new();
        let mut drafter = NgramDrafter::new(1, 4).unwrap().with_spacing_classes(classes);
        drafter.draft(&history, 2, &mut out).unwrap();
        assert_eq!((out.as_slice(), drafter.kind()), (&[5, 1][..], 2));
    }
}
