//! The tokenizer across formats, for `minerva convert`: GGUF `tokenizer.ggml.*` /
//! `tokenizer.chat_template` ↔ `tokenizer.json` + `tokenizer_config.json` (+
//! `generation_config.json`), so a converted model tokenizes and chats as its source.
//!
//! * GGUF → files: the `tokenizer.json` [`Tokenizer::from_gguf`] builds (the pipeline transformers'
//!   GGUF loader builds too), serialized; BOS/EOS, `add_bos_token` and the chat template in
//!   `tokenizer_config.json`; the ids in `generation_config.json`.
//! * files → GGUF: byte-level BPE only (`tokenizer.ggml.model = gpt2`): the vocabulary in id order,
//!   merges, token types (special added tokens control, other added tokens user-defined), and
//!   `tokenizer.ggml.pre` = the name whose pre-tokenizer (`gguf::byte_level_pre_tokenizer`) equals
//!   the file's — the inverse of the table that reads it, so the round trip is exact. A
//!   pre-tokenizer outside that table is an error naming it rather than a silent guess.

use std::path::Path;

use minerva_gguf::{Gguf, MetadataValue};
use serde_json::{Value, json};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;

use super::Tokenizer;
use super::gguf::{SUPPORTED_PRE, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED, byte_level_pre_tokenizer};
use crate::error::{GenerateError, Result};

/// Normal token type (llama.cpp's `LLAMA_TOKEN_TYPE_NORMAL`).
const TOKEN_TYPE_NORMAL: i32 = 1;

fn to_json(value: &Value) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(value).map_err(|e| GenerateError::Vocab(format!("writing JSON: {e}")))
}

/// `tokenizer.json`, `tokenizer_config.json` and `generation_config.json` for a GGUF file's
/// tokenizer; empty when the file has none (`tokenizer.ggml.model` absent).
pub fn files_from_gguf<D: AsRef<[u8]>>(g: &Gguf<D>) -> Result<Vec<(String, Vec<u8>)>> {
    if g.get("tokenizer.ggml.model").is_none() {
        return Ok(Vec::new());
    }
    let tok = Tokenizer::from_gguf(g)?;
    let json = tok.inner().to_string(true).map_err(|e| GenerateError::Vocab(format!("writing tokenizer.json: {e}")))?;
    let text = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i));
    let mut config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": tok.add_bos,
        "add_eos_token": tok.add_eos,
        "bos_token": text(tok.bos),
        "eos_token": text(tok.eos),
        "clean_up_tokenization_spaces": false,
    });
    for (key, name) in
        [("tokenizer.ggml.unknown_token_id", "unk_token"), ("tokenizer.ggml.padding_token_id", "pad_token")]
    {
        if g.get(key).is_some() {
            let id = g.get_u32(key).map_err(|e| GenerateError::Vocab(e.to_string()))?;
            config[name] = json!(text(Some(id)));
        }
    }
    if let Some(template) = &tok.chat_template {
        config["chat_template"] = json!(template);
    }
    let generation = json!({ "bos_token_id": tok.bos, "eos_token_id": tok.eos });
    Ok(vec![
        ("tokenizer.json".into(), json.into_bytes()),
        ("tokenizer_config.json".into(), to_json(&config)?),
        ("generation_config.json".into(), to_json(&generation)?),
    ])
}

/// A GGUF pre-tokenizer name and one JSON form of it.
type Spelling = (&'static str, fn() -> Value);

/// Pre-tokenizers that Hugging Face checkpoints spell differently from the pipeline
/// `byte_level_pre_tokenizer` builds for the same GGUF name, but that split text the same way.
const HF_SPELLINGS: &[Spelling] = &[
    // GPT-2's regex inside ByteLevel itself (`use_regex`), without a Sequence around it.
    ("gpt2", || json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})),
    // SmolLM's tokenizer.json: digits one by one, then ByteLevel with GPT-2's regex.
    ("smollm", || {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]})
    }),
];

/// A pre-tokenizer in the `tokenizers` crate's own serialization (so that equal pipelines compare
/// equal whatever optional fields the JSON spelled out).
fn canonical_pre(value: &Value) -> Option<Value> {
    let parsed: PreTokenizerWrapper = serde_json::from_value(value.clone()).ok()?;
    serde_json::to_value(parsed).ok()
}

/// GGUF `tokenizer.*` keys for the `tokenizer.json` (and `tokenizer_config.json`,
/// `chat_template.jinja`) in `dir`; empty when `dir` has no `tokenizer.json`.
pub fn gguf_metadata_from_dir(dir: &Path) -> Result<Vec<(String, MetadataValue)>> {
    let path = dir.join("tokenizer.json");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let file_err = |message: String| GenerateError::File { path: path.clone(), message };
    let text = std::fs::read_to_string(&path).map_err(|e| file_err(e.to_string()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| file_err(e.to_string()))?;
    let model = &doc["model"];
    if model["type"] != "BPE" || model["byte_fallback"] == true {
        return Err(file_err("only byte-level BPE tokenizers (GGUF model gpt2) are converted to GGUF".into()));
    }
    let pre = canonical_pre(&doc["pre_tokenizer"]);
    let matches = |candidate: Value| pre.is_some() && canonical_pre(&candidate) == pre;
    let pre_name = SUPPORTED_PRE
        .iter()
        .copied()
        .find(|name| byte_level_pre_tokenizer(name).is_ok_and(&matches))
        .or_else(|| HF_SPELLINGS.iter().find(|(_, spelling)| matches(spelling())).map(|(name, _)| *name))
        .ok_or_else(|| file_err(format!("pre-tokenizer matches none of the GGUF pre types {SUPPORTED_PRE:?}")))?;

    // Tokens in id order: the BPE vocabulary, then added tokens.
    let vocab = model["vocab"].as_object().ok_or_else(|| file_err("model.vocab is not an object".into()))?;
    let mut tokens: Vec<Option<String>> = Vec::new();
    let mut types: Vec<i32> = Vec::new();
    let mut place = |id: u64, token: &str, ty: i32| -> Result<()> {
        let id = usize::try_from(id).ok().filter(|&i| i < 1 << 24).ok_or_else(|| file_err(format!("token id {id}")))?;
        if tokens.len() <= id {
            tokens.resize(id + 1, None);
            types.resize(id + 1, TOKEN_TYPE_NORMAL);
        }
        tokens[id] = Some(token.to_string());
        types[id] = ty;
        Ok(())
    };
    for (token, id) in vocab {
        place(id.as_u64().ok_or_else(|| file_err(format!("vocab id of {token:?}")))?, token, TOKEN_TYPE_NORMAL)?;
    }
    for added in doc["added_tokens"].as_array().into_iter().flatten() {
        let (Some(id), Some(content)) = (added["id"].as_u64(), added["content"].as_str()) else {
            return Err(file_err(format!("malformed added token {added}")));
        };
        let ty = if added["special"] == true { TOKEN_TYPE_CONTROL } else { TOKEN_TYPE_USER_DEFINED };
        place(id, content, ty)?;
    }
    let tokens: Vec<String> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.ok_or_else(|| file_err(format!("no token has id {i}"))))
        .collect::<Result<_>>()?;
    let merges = model["merges"]
        .as_array()
        .ok_or_else(|| file_err("model.merges is not a list".into()))?
        .iter()
        .map(|m| match m {
            Value::String(s) => Some(s.clone()),
            Value::Array(pair) => Some(format!("{} {}", pair.first()?.as_str()?, pair.get(1)?.as_str()?)),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| file_err("a merge is neither \"a b\" nor [a, b]".into()))?;

    let mut keys: Vec<(String, MetadataValue)> = vec![
        ("tokenizer.ggml.model".into(), "gpt2".into()),
        ("tokenizer.ggml.pre".into(), (*pre_name).into()),
        ("tokenizer.ggml.tokens".into(), MetadataValue::strings(tokens.iter().cloned())),
        ("tokenizer.ggml.token_type".into(), MetadataValue::i32s(types)),
        ("tokenizer.ggml.merges".into(), MetadataValue::strings(merges)),
    ];
    let tok = Tokenizer::from_dir(dir)?;
    if let Some(bos) = tok.bos {
        keys.push(("tokenizer.ggml.bos_token_id".into(), bos.into()));
    }
    if let Some(eos) = tok.eos {
        keys.push(("tokenizer.ggml.eos_token_id".into(), eos.into()));
    }
    // Unknown and padding tokens: `Tokenizer` does not keep them, tokenizer_config.json names them.
    let config_path = dir.join("tokenizer_config.json");
    if let Ok(text) = std::fs::read_to_string(&config_path) {
        let config: Value = serde_json::from_str(&text)
            .map_err(|e| GenerateError::File { path: config_path.clone(), message: e.to_string() })?;
        for (name, key) in
            [("unk_token", "tokenizer.ggml.unknown_token_id"), ("pad_token", "tokenizer.ggml.padding_token_id")]
        {
            let content = config.get(name).and_then(|v| v.as_str().or_else(|| v.get("content")?.as_str()));
            if let Some(id) = content.and_then(|c| tok.token_to_id(c)) {
                keys.push((key.into(), id.into()));
            }
        }
    }
    keys.push(("tokenizer.ggml.add_bos_token".into(), tok.add_bos.into()));
    keys.push(("tokenizer.ggml.add_eos_token".into(), tok.add_eos.into()));
    if let Some(template) = tok.chat_template {
        keys.push(("tokenizer.chat_template".into(), template.into()));
    }
    Ok(keys)
}

/// The tokenizer files of a checkpoint directory, copied as they are (SafeTensors → SafeTensors).
pub fn files_from_dir(dir: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for name in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "chat_template.jinja",
        "special_tokens_map.json",
    ] {
        let path = dir.join(name);
        if path.exists() {
            let bytes =
                std::fs::read(&path).map_err(|e| GenerateError::File { path: path.clone(), message: e.to_string() })?;
            files.push((name.to_string(), bytes));
        }
    }
    Ok(files)
}
