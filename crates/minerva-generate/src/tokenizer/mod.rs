//! [`Tokenizer`]: text ↔ token ids, built from GGUF metadata or a `tokenizer.json`, with the
//! special ids generation needs (BOS, EOS, end-of-turn) and a streaming decoder.

mod bytes;
pub mod convert;
pub mod gguf;

use std::path::Path;
use std::sync::{Arc, OnceLock};

use minerva_gguf::Gguf;

use crate::error::{GenerateError, Result};
use crate::template::builtin_template;
pub use bytes::TokenBytes;
pub use gguf::SUPPORTED_PRE;

/// Texts of control tokens that end a turn in common chat formats. llama.cpp treats these as
/// end-of-generation too when a file's `eos`/`eot` ids do not name them.
const END_OF_TURN_TEXTS: &[&str] =
    &["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|return|>", "<|eom_id|>"];

/// A tokenizer and the special tokens around it.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Beginning-of-sequence id.
    pub bos: Option<u32>,
    /// End-of-sequence id.
    pub eos: Option<u32>,
    /// Whether encoding a prompt prepends BOS (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// Whether encoding a prompt appends EOS.
    pub add_eos: bool,
    /// Ids that end generation: EOS, EOT/EOM, and control tokens with an end-of-turn text.
    pub stop_ids: Vec<u32>,
    /// The Jinja chat template the model ships, else the one built in for its architecture
    /// ([`crate::template::builtin_template`]), if any.
    pub chat_template: Option<String>,
    /// Every token's bytes, built on first use and shared by clones.
    token_bytes: Arc<OnceLock<TokenBytes>>,
    /// The ids of special added tokens, built on first use (the `tokenizers` crate hands out a
    /// copy of its whole added-token map per question).
    special_ids: Arc<OnceLock<std::collections::HashSet<u32>>>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("stop_ids", &self.stop_ids)
            .finish_non_exhaustive()
    }
}

fn opt_u32<D: AsRef<[u8]>>(g: &Gguf<D>, key: &str) -> Result<Option<u32>> {
    match g.get(key) {
        None => Ok(None),
        Some(_) => Ok(Some(g.get_u32(key)?)),
    }
}

fn opt_bool<D: AsRef<[u8]>>(g: &Gguf<D>, key: &str) -> Result<Option<bool>> {
    match g.get(key) {
        None => Ok(None),
        Some(_) => Ok(Some(g.get_bool(key)?)),
    }
}

/// `model_type` of the checkpoint's `config.json`, if the file exists and names one.
fn model_type(dir: &Path) -> Result<Option<String>> {
    let path = dir.join("config.json");
    if !path.exists() {
        return Ok(None);
    }
    let file_err = |message: String| GenerateError::File { path: path.clone(), message };
    let text = std::fs::read_to_string(&path).map_err(|e| file_err(e.to_string()))?;
    let config: serde_json::Value = serde_json::from_str(&text).map_err(|e| file_err(e.to_string()))?;
    Ok(config.get("model_type").and_then(|t| t.as_str()).map(str::to_string))
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file's `tokenizer.*` metadata describes.
    pub fn from_gguf<D: AsRef<[u8]>>(g: &Gguf<D>) -> Result<Tokenizer> {
        let model = g.get_str("tokenizer.ggml.model")?;
        let pre = match g.get("tokenizer.ggml.pre") {
            Some(_) => Some(g.get_str("tokenizer.ggml.pre")?),
            None => None,
        };
        let tokens = g.get_str_array("tokenizer.ggml.tokens")?;
        let array = |key: &str| -> Result<Option<minerva_gguf::ArrayValue<'_>>> {
            match g.get(key) {
                None => Ok(None),
                Some(_) => Ok(Some(g.get_array(key)?)),
            }
        };
        let bad = |key: &str| GenerateError::Vocab(format!("{key} has the wrong element type"));
        let scores = match array("tokenizer.ggml.scores")? {
            Some(a) => Some(a.to_f32_vec().ok_or_else(|| bad("tokenizer.ggml.scores"))?),
            None => None,
        };
        let token_type = match array("tokenizer.ggml.token_type")? {
            Some(a) => Some(a.to_i32_vec().ok_or_else(|| bad("tokenizer.ggml.token_type"))?),
            None => None,
        };
        let merges = match g.get("tokenizer.ggml.merges") {
            Some(_) => Some(g.get_str_array("tokenizer.ggml.merges")?),
            None => None,
        };
        let n = tokens.len();
        let id = |key: &str| -> Result<Option<u32>> {
            match opt_u32(g, key)? {
                Some(i) if i as usize >= n => {
                    Err(GenerateError::Vocab(format!("{key} = {i} is outside the vocabulary of {n} tokens")))
                }
                other => Ok(other),
            }
        };
        let unk = id("tokenizer.ggml.unknown_token_id")?;
        let vocab = gguf::GgufVocab {
            model,
            pre,
            tokens: tokens.clone(),
            scores,
            token_type: token_type.clone(),
            merges,
            add_space_prefix: opt_bool(g, "tokenizer.ggml.add_space_prefix")?,
            unk,
        };
        let doc = gguf::tokenizer_json(&vocab)?;
        let inner: tokenizers::Tokenizer =
            serde_json::from_value(doc).map_err(|e| GenerateError::Vocab(format!("building the tokenizer: {e}")))?;
        let bos = id("tokenizer.ggml.bos_token_id")?;
        let eos = id("tokenizer.ggml.eos_token_id")?;
        let mut stop_ids: Vec<u32> = eos.into_iter().collect();
        for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            stop_ids.extend(id(key)?);
        }
        if let Some(types) = &token_type {
            for (i, (t, ty)) in tokens.iter().zip(types).enumerate() {
                if *ty == gguf::TOKEN_TYPE_CONTROL && END_OF_TURN_TEXTS.contains(t) {
                    stop_ids.push(i as u32);
                }
            }
        }
        stop_ids.sort_unstable();
        stop_ids.dedup();
        // llama.cpp and transformers add BOS to a SentencePiece vocabulary that does not say otherwise.
        let add_bos = opt_bool(g, "tokenizer.ggml.add_bos_token")?.unwrap_or(model == "llama");
        let add_eos = opt_bool(g, "tokenizer.ggml.add_eos_token")?.unwrap_or(false);
        let chat_template = match g.get("tokenizer.chat_template") {
            Some(_) => Some(g.get_str("tokenizer.chat_template")?.to_string()),
            None => g.architecture().ok().and_then(builtin_template).map(str::to_string),
        };
        Ok(Tokenizer {
            inner,
            bos,
            eos,
            add_bos,
            add_eos,
            stop_ids,
            chat_template,
            token_bytes: Arc::default(),
            special_ids: Arc::default(),
        })
    }

    /// Loads `tokenizer.json` from a checkpoint directory, with `tokenizer_config.json` (chat
    /// template, BOS/EOS, add_bos) when present; without a template there or in
    /// `chat_template.jinja`, the one built in for `config.json`'s `model_type`.
    pub fn from_dir(dir: &Path) -> Result<Tokenizer> {
        let path = dir.join("tokenizer.json");
        let file_err = |path: &Path, message: String| GenerateError::File { path: path.to_path_buf(), message };
        let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| file_err(&path, e.to_string()))?;
        let mut tok = Tokenizer {
            inner,
            bos: None,
            eos: None,
            add_bos: false,
            add_eos: false,
            stop_ids: Vec::new(),
            chat_template: None,
            token_bytes: Arc::default(),
            special_ids: Arc::default(),
        };
        let config_path = dir.join("tokenizer_config.json");
        if config_path.exists() {
            let text = std::fs::read_to_string(&config_path).map_err(|e| file_err(&config_path, e.to_string()))?;
            let config: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| file_err(&config_path, e.to_string()))?;
            // Special tokens are a string or an AddedToken object `{"content": …}`.
            let token_of = |key: &str| -> Option<u32> {
                let v = config.get(key)?;
                let text = v.as_str().or_else(|| v.get("content")?.as_str())?;
                tok.inner.token_to_id(text)
            };
            tok.bos = token_of("bos_token");
            tok.eos = token_of("eos_token");
            tok.add_bos = config.get("add_bos_token").and_then(|v| v.as_bool()).unwrap_or(false);
            tok.add_eos = config.get("add_eos_token").and_then(|v| v.as_bool()).unwrap_or(false);
            tok.chat_template = match config.get("chat_template") {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                // A list of named templates: take "default".
                Some(serde_json::Value::Array(list)) => list
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                    .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
                _ => None,
            };
        }
        let template_path = dir.join("chat_template.jinja");
        if tok.chat_template.is_none() && template_path.exists() {
            tok.chat_template =
                Some(std::fs::read_to_string(&template_path).map_err(|e| file_err(&template_path, e.to_string()))?);
        }
        if tok.chat_template.is_none() {
            tok.chat_template = model_type(dir)?.as_deref().and_then(builtin_template).map(str::to_string);
        }
        tok.stop_ids.extend(tok.eos);
        for text in END_OF_TURN_TEXTS {
            if let Some(id) = tok.inner.token_to_id(text)
                && tok.is_special(id)
            {
                tok.stop_ids.push(id);
            }
        }
        tok.stop_ids.sort_unstable();
        tok.stop_ids.dedup();
        Ok(tok)
    }

    /// The `tokenizers` pipeline underneath.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Token ids of `text`. Special tokens written in the text (`<|im_start|>`) become their ids;
    /// with `add_special`, BOS/EOS are added as the model's metadata asks.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let enc = self.inner.encode_fast(text, false).map_err(GenerateError::tok)?;
        let mut ids = Vec::with_capacity(enc.len() + 2);
        if add_special && self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend_from_slice(enc.get_ids());
        if add_special && self.add_eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }

    /// The text of `ids`; special tokens are dropped when `skip_special`.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner.decode(ids, skip_special).map_err(GenerateError::tok)
    }

    /// The vocabulary entry of `id` as stored (byte-level spelling for GPT-2 vocabularies).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The text one token stands for on its own (a partial UTF-8 character shows as U+FFFD).
    pub fn piece(&self, id: u32) -> String {
        self.inner.decode(&[id], false).unwrap_or_default()
    }

    /// The bytes every token stands for: a token's bytes even where they are part of a UTF-8
    /// character, so a sequence's text is the concatenation of its tokens' bytes.
    pub fn token_bytes(&self) -> &TokenBytes {
        self.token_bytes.get_or_init(|| TokenBytes::new(&self.inner))
    }

    /// The id of a vocabulary entry.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Whether `id` is an added special (control) token.
    pub fn is_special(&self, id: u32) -> bool {
        let specials = self.special_ids.get_or_init(|| {
            self.inner.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect()
        });
        specials.contains(&id)
    }

    /// Whether `id` ends generation.
    pub fn is_stop(&self, id: u32) -> bool {
        self.stop_ids.contains(&id)
    }

    /// Whether `id` ends a completion, in Harmony (`harmony`) or not. In Harmony `<|return|>`
    /// and `<|call|>` do, but `<|end|>` only closes a message (the reasoning before the answer),
    /// though it is an end-of-turn token elsewhere (Phi-3).
    pub fn ends_generation(&self, id: u32, harmony: bool) -> bool {
        if !harmony {
            return self.is_stop(id);
        }
        match self.is_special(id).then(|| self.id_to_token(id)).flatten().as_deref() {
            Some("<|return|>" | "<|call|>") => true,
            Some("<|end|>") => false,
            _ => self.is_stop(id),
        }
    }

    /// The text of the BOS / EOS tokens (for chat templates).
    pub fn bos_text(&self) -> String {
        self.bos.and_then(|b| self.id_to_token(b)).unwrap_or_default()
    }

    /// See [`Tokenizer::bos_text`].
    pub fn eos_text(&self) -> String {
        self.eos.and_then(|b| self.id_to_token(b)).unwrap_or_default()
    }
}

/// Incremental detokenizer: [`TextStream::push`] returns new text only once it ends on a whole
/// UTF-8 character, so a character split over several byte tokens is printed once, whole.
/// Special tokens are skipped.
#[derive(Clone, Debug, Default)]
pub struct TextStream {
    ids: Vec<u32>,
    prefix: String,
    prefix_index: usize,
}

impl TextStream {
    /// An empty stream.
    pub fn new() -> TextStream {
        TextStream::default()
    }

    /// Adds one token; returns the text it completes, if any.
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<Option<String>> {
        // The tokenizers crate's own streaming step: it decodes a short window of recent ids and
        // returns what the new id adds to it, holding text that ends in a replacement character.
        tokenizers::tokenizer::step_decode_stream(
            &tokenizer.inner,
            vec![id],
            true,
            &mut self.ids,
            &mut self.prefix,
            &mut self.prefix_index,
        )
        .map_err(GenerateError::tok)
    }
}
