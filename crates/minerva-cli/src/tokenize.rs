//! `minerva tokenize`: a text's token ids (and pieces), as llama.cpp's `llama-tokenize` prints
//! them, to debug tokenizer mismatches.

use std::io::Write;
use std::path::Path;

use crate::error::CliError;
use crate::load;

/// Runs the command: `[1, 2, 3]`, or with `pieces` one `id -> 'piece'` line per token, or JSON.
pub fn run(
    path: &Path,
    text: &str,
    pieces: bool,
    json: bool,
    no_bos: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let tok = load::tokenizer_only(path)?;
    let ids = tok.encode(text, !no_bos).map_err(|source| CliError::Generate { path: path.to_path_buf(), source })?;
    let output_err = |source| CliError::Output { path: "<stdout>".into(), source };
    if json {
        let mut doc = serde_json::json!({ "ids": ids });
        if pieces {
            doc["pieces"] = ids.iter().map(|&id| tok.piece(id)).collect();
        }
        writeln!(out, "{doc}").map_err(output_err)?;
    } else if pieces {
        for &id in &ids {
            writeln!(out, "{id:>6} -> '{}'", tok.piece(id)).map_err(output_err)?;
        }
    } else {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        writeln!(out, "[{}]", list.join(", ")).map_err(output_err)?;
    }
    Ok(())
}

/// The tokens of `text` for `minerva score --text` (BOS first where the model adds it), and the
/// BOS id when the model adds one.
pub fn tokens_for_score(path: &Path, text: &str) -> Result<(Vec<u32>, Option<u32>), CliError> {
    let tok = load::tokenizer_only(path)?;
    let ids = tok.encode(text, true).map_err(|source| CliError::Generate { path: path.to_path_buf(), source })?;
    Ok((ids, tok.bos.filter(|_| tok.add_bos)))
}
