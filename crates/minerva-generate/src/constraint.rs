//! Constrained decoding: a [`Grammar`] (a JSON schema, any JSON object, Lark, a regular
//! expression, a list of choices) held over a sequence by masking, at each step, every token that
//! would leave it. The grammar engine is llguidance, the one llama.cpp, vLLM and mistral.rs embed.
//!
//! ```text
//! Tokenizer ─ every token's bytes (special tokens marked 0xFF), stop ids ─► TokTrie ─► ParserFactory
//!                                                     (once per model: GrammarCompiler)
//! Grammar ─ GrammarCompiler::compile ─► Constraint (one llguidance Matcher per sequence)
//! each step: Constraint::mask(logits) ─► the sampler's chain ─► Constraint::accept(id) ─► complete?
//! ```
//!
//! The mask comes first, so logit bias, penalties, top-k/p and temperature only ever choose among
//! tokens the grammar allows; end-of-sequence tokens are allowed exactly where the grammar may
//! end. A grammar that can go no further after a token is complete: the sequence ends there.
//!
//! A lazy constraint ([`GrammarCompiler::compile_lazy`]) leaves the output free until a trigger
//! text appears (`<tool_call>`), then holds the rest to the grammar from the trigger on — how a
//! model that may answer in text or call a tool gets a call that always parses.

use std::sync::Arc;

use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;

use crate::error::{GenerateError, Result};
use crate::tokenizer::Tokenizer;

/// Largest grammar or schema text accepted.
pub const MAX_GRAMMAR_BYTES: usize = 1 << 20;
/// Deepest nesting of objects and arrays accepted in a JSON schema.
pub const MAX_SCHEMA_DEPTH: usize = 64;
/// The whitespace JSON output may hold between two tokens of JSON: a newline and up to 24 spaces
/// or tabs of indentation, or up to 4 spaces or tabs. JSON allows any amount; a sampled answer
/// then drifts into whitespace until `max_tokens` cuts it (llama.cpp's schema grammars bound it
/// the same way).
pub const JSON_WHITESPACE: &str = r"(?:\n[ \t]{0,24}|[ \t]{1,4})";

/// The largest integer a JSON output holds where its schema sets no bound: 2^53 − 1, the range
/// every JSON parser represents exactly (I-JSON, RFC 7493). Unbounded, a model that starts
/// repeating a digit writes one until `max_tokens` (llama.cpp's schema grammars cap integers at
/// 16 digits for the same reason).
pub const JSON_INTEGER_LIMIT: i64 = (1 << 53) - 1;

/// Gives every `"type": "integer"` without a bound the [`JSON_INTEGER_LIMIT`] ones, in schema
/// positions only (never inside `enum`, `const`, `default` or `examples`, which are data).
fn bound_integers(v: &mut Value) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                let integer = match map.get("type") {
                    Some(Value::String(t)) => t == "integer",
                    Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                    _ => false,
                };
                if integer {
                    if !map.contains_key("maximum") && !map.contains_key("exclusiveMaximum") {
                        map.insert("maximum".into(), JSON_INTEGER_LIMIT.into());
                    }
                    if !map.contains_key("minimum") && !map.contains_key("exclusiveMinimum") {
                        map.insert("minimum".into(), (-JSON_INTEGER_LIMIT).into());
                    }
                }
                for (key, value) in map.iter_mut() {
                    if !matches!(key.as_str(), "enum" | "const" | "default" | "examples") {
                        stack.push(value);
                    }
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            _ => {}
        }
    }
}

/// `schema` as [`Grammar::JsonSchema`] compiles it: llguidance's JSON options (bounded
/// whitespace) added unless it sets its own, its integers bounded ([`JSON_INTEGER_LIMIT`]). For a
/// schema embedded in a Lark grammar (`%json {…}`) that should behave the same.
pub fn prepare_json_schema(schema: &Value) -> Result<Value> {
    let mut schema = match schema {
        Value::Bool(true) => serde_json::json!({}),
        Value::Bool(false) => return Err(grammar_err("the schema `false` allows no output")),
        other => other.clone(),
    };
    bound_integers(&mut schema);
    if let Value::Object(map) = &mut schema
        && !map.contains_key("x-guidance")
    {
        map.insert("x-guidance".into(), serde_json::json!({"whitespace_pattern": JSON_WHITESPACE}));
    }
    Ok(schema)
}

/// What a constrained output must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// Any JSON object.
    JsonObject,
    /// A JSON document valid under this JSON schema.
    JsonSchema(Value),
    /// A grammar in Lark syntax, as llguidance reads it (`%json {…}` embeds a schema).
    Lark(String),
    /// Text the whole of which matches this regular expression (Rust `regex` syntax).
    Regex(String),
    /// Exactly one of these texts.
    Choice(Vec<String>),
}

fn grammar_err(message: impl Into<String>) -> GenerateError {
    GenerateError::Grammar(message.into())
}

/// An llguidance error as one line: its first, which says what and where (the lines after it
/// quote the grammar around the place).
fn engine_err(e: impl std::fmt::Display) -> GenerateError {
    let text = e.to_string();
    if text.contains("NoExtensionBias") {
        // A vocabulary without every byte (word-level ones) can walk into text it cannot finish:
        // the mask allowed a token whose bytes fit, after which none does.
        return grammar_err("no token of the vocabulary can continue the output here");
    }
    grammar_err(text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("the grammar engine failed"))
}

/// Nesting depth of `v` (a scalar is 0).
fn depth(v: &Value) -> usize {
    // Iterative, so a hostile document cannot overflow the stack here.
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

impl Grammar {
    /// llguidance's form of the grammar, after the size and depth checks.
    fn to_llguidance(&self) -> Result<TopLevelGrammar> {
        let too_big = |what: &str, len: usize| {
            grammar_err(format!("the {what} is {len} bytes; at most {MAX_GRAMMAR_BYTES} are accepted"))
        };
        Ok(match self {
            Grammar::JsonObject => {
                TopLevelGrammar::from_json_schema(prepare_json_schema(&serde_json::json!({"type": "object"}))?)
            }
            Grammar::JsonSchema(schema) => {
                let len = schema.to_string().len();
                if len > MAX_GRAMMAR_BYTES {
                    return Err(too_big("schema", len));
                }
                if !(schema.is_object() || schema.is_boolean()) {
                    return Err(grammar_err("a JSON schema must be an object or a boolean"));
                }
                let d = depth(schema);
                if d > MAX_SCHEMA_DEPTH {
                    return Err(grammar_err(format!(
                        "the schema nests {d} levels deep; at most {MAX_SCHEMA_DEPTH} are accepted"
                    )));
                }
                TopLevelGrammar::from_json_schema(prepare_json_schema(schema)?)
            }
            Grammar::Lark(text) => {
                if text.len() > MAX_GRAMMAR_BYTES {
                    return Err(too_big("grammar", text.len()));
                }
                if text.contains("::=") {
                    return Err(grammar_err(
                        "this looks like a GBNF grammar (`::=`); write it in Lark syntax (`rule: …`, as llguidance reads it)",
                    ));
                }
                TopLevelGrammar::from_lark(text.clone())
            }
            Grammar::Regex(rx) => {
                if rx.len() > MAX_GRAMMAR_BYTES {
                    return Err(too_big("regular expression", rx.len()));
                }
                TopLevelGrammar::from_regex(rx)
            }
            Grammar::Choice(choices) => {
                if choices.is_empty() {
                    return Err(grammar_err("the list of choices is empty"));
                }
                let len: usize = choices.iter().map(String::len).sum();
                if len > MAX_GRAMMAR_BYTES {
                    return Err(too_big("list of choices", len));
                }
                // Lark reads string literals as JSON strings, so JSON quoting escapes each choice.
                let alternatives: Vec<String> =
                    choices.iter().map(|c| serde_json::to_string(c).unwrap_or_default()).collect();
                TopLevelGrammar::from_lark(format!("start: {}", alternatives.join(" | ")))
            }
        })
    }
}

/// Compiles grammars for one model's vocabulary: build it once per model and share it.
pub struct GrammarCompiler {
    factory: Arc<ParserFactory>,
    /// Logits per row (the model's vocabulary, which may exceed the tokenizer's).
    vocab: usize,
}

impl std::fmt::Debug for GrammarCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCompiler").field("vocab", &self.vocab).finish_non_exhaustive()
    }
}

impl GrammarCompiler {
    /// The compiler for `tokenizer`'s vocabulary, for logit rows of `logits` entries. Special
    /// tokens are never produced by text, only where a grammar names them or, for the stop
    /// tokens, where the grammar may end.
    pub fn new(tokenizer: &Tokenizer, logits: usize) -> Result<GrammarCompiler> {
        let table = tokenizer.token_bytes();
        let vocab = logits.max(table.len());
        let mut stops: Vec<u32> = tokenizer.stop_ids.clone();
        stops.retain(|&id| (id as usize) < table.len());
        if stops.is_empty() {
            return Err(grammar_err("the tokenizer has no end-of-sequence token to end a constrained output with"));
        }
        let mut words: Vec<Vec<u8>> = Vec::with_capacity(vocab);
        for id in 0..table.len() as u32 {
            let bytes = table.get(id);
            if tokenizer.is_special(id) || stops.contains(&id) {
                let mut marked = Vec::with_capacity(bytes.len() + 1);
                marked.push(TokTrie::SPECIAL_TOKEN_MARKER);
                marked.extend_from_slice(bytes);
                words.push(marked);
            } else {
                words.push(bytes.to_vec());
            }
        }
        // Rows past the tokenizer's vocabulary (padding) are never allowed.
        words.resize(vocab, Vec::new());
        let info = TokRxInfo::new(words.len() as u32, stops[0]);
        // TokTrie asserts its limits (token length, vocabulary size): a vocabulary past them is
        // an error here, not a panic in the caller.
        let trie = std::panic::catch_unwind(|| TokTrie::from(&info, &words).with_eos_tokens(&stops))
            .map_err(|_| grammar_err("the vocabulary does not fit llguidance's token trie"))?;
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(engine_err)?;
        factory.quiet();
        *factory.limits_mut() = ParserLimits { verbose_errors: false, ..ParserLimits::default() };
        Ok(GrammarCompiler { factory: Arc::new(factory), vocab })
    }

    /// Compiles `grammar` into a fresh [`Constraint`]; a grammar llguidance rejects, one over the
    /// size limits, or one that no text satisfies is a [`GenerateError::Grammar`] naming why.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint> {
        let parser = self.factory.create_parser(grammar.to_llguidance()?).map_err(engine_err)?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(engine_err(e));
        }
        // The first mask: a grammar nothing can satisfy fails here, before any token is spent.
        matcher.compute_mask().map_err(|_| grammar_err("no output can satisfy this grammar"))?;
        Ok(Constraint { matcher, vocab: self.vocab, complete: false, lazy: None, prepared: None })
    }

    /// Like [`GrammarCompiler::compile`], but the grammar applies only from the first occurrence
    /// of `trigger` in the output (with `anchored`, only an output that starts with it, after
    /// whitespace). With `includes_trigger` the grammar's text starts with the trigger (a tool
    /// call's `<tool_call>`); without, it starts after it (an answer after `</think>`).
    pub fn compile_lazy(
        &self,
        grammar: &Grammar,
        trigger: &str,
        anchored: bool,
        includes_trigger: bool,
    ) -> Result<Constraint> {
        if trigger.is_empty() {
            return Err(grammar_err("a lazy grammar needs a trigger text"));
        }
        let mut c = self.compile(grammar)?;
        c.lazy = Some(Lazy {
            trigger: trigger.as_bytes().to_vec(),
            anchored,
            includes_trigger,
            seen: Vec::new(),
            dead: false,
        });
        Ok(c)
    }
}

/// A lazy constraint still waiting for its trigger.
#[derive(Clone, Debug)]
struct Lazy {
    trigger: Vec<u8>,
    anchored: bool,
    includes_trigger: bool,
    /// Output bytes so far (special tokens as their text).
    seen: Vec<u8>,
    /// The trigger can no longer appear (an anchored one that did not start the output), or the
    /// text after it did not fit the grammar: the output stays free.
    dead: bool,
}

/// One sequence's grammar state; clone it for each sequence that starts from the same point.
#[derive(Clone)]
pub struct Constraint {
    matcher: Matcher,
    vocab: usize,
    complete: bool,
    /// Waiting for a trigger (see [`GrammarCompiler::compile_lazy`]).
    lazy: Option<Lazy>,
    /// The next step's mask, computed ahead ([`Constraint::prepare_mask`]).
    prepared: Option<llguidance::toktrie::SimpleVob>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").field("complete", &self.complete).finish_non_exhaustive()
    }
}

impl Constraint {
    /// Computes the next mask now, so that [`Constraint::mask`] only applies it: a server calls
    /// this on another thread while the forward pass that makes the logits runs.
    pub fn prepare_mask(&mut self) -> Result<()> {
        if self.lazy.is_none() && self.prepared.is_none() {
            self.prepared = Some(self.matcher.compute_mask_or_eos().map_err(engine_err)?);
        }
        Ok(())
    }

    /// Sets every logit the grammar does not allow next to −∞.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        if self.lazy.is_some() {
            return Ok(());
        }
        let mask = match self.prepared.take() {
            Some(mask) => mask,
            None => self.matcher.compute_mask_or_eos().map_err(engine_err)?,
        };
        let words = mask.as_slice();
        let allowed = self.vocab.min(mask.len());
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            let bits = words.get(w).copied().unwrap_or(0);
            if bits == u32::MAX && (w + 1) * 32 <= allowed {
                continue;
            }
            for (b, logit) in chunk.iter_mut().enumerate() {
                if w * 32 + b >= allowed || bits & (1 << b) == 0 {
                    *logit = f32::NEG_INFINITY;
                }
            }
        }
        Ok(())
    }

    /// Moves past token `id` (one the mask allowed); returns whether the grammar is now complete
    /// (no token may follow), so the sequence ends here.
    pub fn accept(&mut self, id: u32) -> Result<bool> {
        if self.lazy.is_some() {
            self.wait_for_trigger(id)?;
            return Ok(false);
        }
        self.prepared = None;
        if !self.complete {
            self.matcher.consume_token(id).map_err(engine_err)?;
            self.complete = self.matcher.is_stopped();
        }
        Ok(self.complete)
    }

    /// Whether the grammar is complete.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Whether the grammar holds the output now (a lazy one only after its trigger).
    pub fn is_active(&self) -> bool {
        self.lazy.is_none()
    }

    /// A lazy constraint's step: `id` joins the output seen; at the trigger the grammar starts,
    /// fed the output from the trigger on.
    fn wait_for_trigger(&mut self, id: u32) -> Result<()> {
        let env = self.matcher.tok_env().map_err(engine_err)?;
        let trie = env.tok_trie();
        let Some(lazy) = &mut self.lazy else { return Ok(()) };
        if lazy.dead {
            return Ok(());
        }
        let bytes = trie.token(id);
        let special = trie.is_special_token(id);
        let text = if special { &bytes[1..] } else { bytes };
        lazy.seen.extend_from_slice(text);
        let found = if lazy.anchored {
            let start = lazy.seen.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(lazy.seen.len());
            let rest = &lazy.seen[start..];
            if rest.starts_with(&lazy.trigger) {
                Some(start)
            } else {
                if !lazy.trigger.starts_with(rest) {
                    lazy.dead = true;
                }
                None
            }
        } else {
            lazy.seen.windows(lazy.trigger.len()).position(|w| w == lazy.trigger.as_slice())
        };
        let Some(at) = found else { return Ok(()) };
        // The token that completed the trigger is the trigger itself (a special token), or the
        // output from the trigger (or after it) on is spelled again in tokens for the grammar.
        let ids = match (lazy.includes_trigger, special && text == lazy.trigger.as_slice()) {
            (true, true) => vec![id],
            (false, true) => Vec::new(),
            (true, false) => trie.greedy_tokenize(&lazy.seen[at..]),
            (false, false) => {
                let after = &lazy.seen[at + lazy.trigger.len()..];
                let start = after.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(after.len());
                trie.greedy_tokenize(&after[start..])
            }
        };
        let mut active = self.matcher.clone();
        match active.consume_tokens(&ids) {
            Ok(()) if !active.is_error() => {
                self.matcher = active;
                self.complete = self.matcher.is_stopped();
                self.lazy = None;
            }
            // Text after the trigger, in the same token, that the grammar does not allow: the
            // output goes on free (it is parsed as text) rather than failing the request.
            _ => lazy.dead = true,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_nested_containers() {
        assert_eq!(depth(&serde_json::json!(1)), 0);
        assert_eq!(depth(&serde_json::json!({"a": [1, {"b": 2}]})), 3);
    }

    #[test]
    fn unbounded_integers_get_the_exact_json_range_and_data_is_left_alone() {
        let mut schema = serde_json::json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "m": {"type": ["integer", "null"], "maximum": 5},
                "type": {"const": {"type": "integer"}}
            }
        });
        bound_integers(&mut schema);
        assert_eq!(schema["properties"]["n"]["maximum"], JSON_INTEGER_LIMIT);
        assert_eq!(schema["properties"]["n"]["minimum"], -JSON_INTEGER_LIMIT);
        assert_eq!(schema["properties"]["m"]["maximum"], 5);
        assert_eq!(schema["properties"]["m"]["minimum"], -JSON_INTEGER_LIMIT);
        assert_eq!(schema["properties"]["type"]["const"], serde_json::json!({"type": "integer"}));
    }

    #[test]
    fn size_depth_and_gbnf_are_refused_before_compiling() {
        let mut deep = serde_json::json!({"type": "string"});
        for _ in 0..70 {
            deep = serde_json::json!({"type": "array", "items": deep});
        }
        let err = Grammar::JsonSchema(deep).to_llguidance().unwrap_err().to_string();
        assert!(err.contains("levels deep"), "{err}");
        let big = Grammar::Lark(format!("start: \"{}\"", "a".repeat(MAX_GRAMMAR_BYTES)));
        assert!(big.to_llguidance().unwrap_err().to_string().contains("bytes"));
        let gbnf = Grammar::Lark("root ::= \"yes\" | \"no\"".into());
        assert!(gbnf.to_llguidance().unwrap_err().to_string().contains("GBNF"));
        assert!(Grammar::Choice(Vec::new()).to_llguidance().is_err());
        assert!(Grammar::JsonSchema(serde_json::json!(3)).to_llguidance().is_err());
    }
}
