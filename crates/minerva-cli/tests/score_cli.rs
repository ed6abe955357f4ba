//! `minerva score` on the real model against the transformers reference
//! (`fixtures/model/llama_reference.json`, made by `fixtures/model/make_llama_reference.py`).

mod common;

use std::process::Output;

use common::{Npy, assert_one_line_error, minerva, real_model, root};

/// Largest relative perplexity difference from transformers on the reference prompt.
const SCORE_VS_REFERENCE: f64 = 3e-4;

/// The reference's longest prompt (76 tokens) and its perplexity.
fn reference_prompt() -> (String, f64) {
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("fixtures/model/llama_reference.json")).unwrap()).unwrap();
    let prompt = &json["prompts"][4];
    let tokens: Vec<String> = prompt["tokens"].as_array().unwrap().iter().map(|t| t.to_string()).collect();
    (tokens.join(","), prompt["ppl"].as_f64().unwrap())
}

fn perplexity(out: &Output) -> f64 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    stdout.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{stdout}"))
}

#[test]
fn score_matches_the_reference_and_writes_logits() {
    let model = real_model();
    let (tokens, ref_ppl) = reference_prompt();
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("logits.npy");
    let out = minerva(&[
        "score".as_ref(),
        model.as_os_str(),
        "--tokens".as_ref(),
        tokens.as_ref(),
        "--out".as_ref(),
        npy.as_os_str(),
    ]);
    let ppl = perplexity(&out);
    // The default path's i16 activations (bound and measured figure: docs/model.md, "Tolerances").
    let off = (ppl / ref_ppl - 1.0).abs();
    eprintln!("score: perplexity {ppl:.6} vs reference {ref_ppl:.6}: {:.4} %", off * 100.0);
    assert!(off < SCORE_VS_REFERENCE, "{ppl} vs {ref_ppl}");
    let logits = Npy::read(&npy);
    assert_eq!(logits.shape, [75, 49152]);
    assert_eq!(logits.data.len(), 75 * 49152 * 4);

    // Windows of 16: 4 whole windows, positions 8..15 of each scored.
    let out = minerva(&[
        "score".as_ref(),
        model.as_os_str(),
        "--tokens".as_ref(),
        tokens.as_ref(),
        "--ctx".as_ref(),
        "16".as_ref(),
        "--threads".as_ref(),
        "2".as_ref(),
    ]);
    let windowed = perplexity(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("over 28 scored tokens (4 window(s) of 16)"));
    assert!(windowed.is_finite() && windowed > 1.0);
}

#[test]
fn bad_requests_are_one_line_errors() {
    let model = real_model();
    for (tokens, what) in [("5", "need a window of at least 2 tokens"), ("1,99999", "token id 99999")] {
        let out = minerva(&["score".as_ref(), model.as_os_str(), "--tokens".as_ref(), tokens.as_ref()]);
        assert_one_line_error(&out, what);
    }
}
