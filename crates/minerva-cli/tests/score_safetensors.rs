//! `minerva score` on a SafeTensors checkpoint directory: the tiny Phi-3 written by transformers
//! (`fixtures/model/make_tiny_reference.py`), whose `--out` logits equal transformers' within 1e-4
//! relative (f32 weights and activations), and a one-line error for a directory without weights.

mod common;

use common::{Npy, assert_one_line_error, minerva, os, root};

#[test]
fn score_reads_a_safetensors_directory() {
    let dir = root().join("fixtures/model/tiny/phi3");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let tokens: Vec<String> = json["sequences"][0].as_array().unwrap().iter().map(|t| t.to_string()).collect();
    let (n, vocab) = (tokens.len(), json["vocab"].as_u64().unwrap() as usize);
    let reference: Vec<f32> = std::fs::read(dir.join("logits.f32")).unwrap()[..n * vocab * 4]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let npy = tmp.path().join("logits.npy");
    let joined = tokens.join(",");
    // An f32 KV cache, as the reference computes.
    let args = [os("score"), dir.as_os_str(), os("--kv-type"), os("f32"), os("--tokens"), os(&joined)];
    let out = minerva(&[&args[..], &[os("--out"), npy.as_os_str()]].concat());
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("over {} scored tokens", n - 1)));
    let logits = Npy::read(&npy);
    assert_eq!(logits.shape, [n - 1, vocab]);
    let values = logits.values();
    let scale = reference.iter().map(|v| v.abs()).fold(0.0, f32::max);
    let worst = values.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max) / scale;
    assert!(worst <= 1e-4, "{worst}");

    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("config.json"), "{}").unwrap();
    let out = minerva(&[os("score"), empty.path().as_os_str(), os("--tokens"), os("1,2,3")]);
    assert_one_line_error(&out, "safetensors");
}
