//! `minerva score` on the tiny GPT-OSS fixtures (`fixtures/gpt_oss`, made by
//! `make_gpt_oss_reference.py`) in all three layouts: a GGUF file, and the Hugging Face and MLX
//! SafeTensors directories. Each run's perplexity is checked against the one the transformers
//! reference logits give for the same tokens.

mod common;

use common::{Npy, assert_one_line_error, minerva, os, perplexity_in, root};

/// Per mode (extra flags): largest relative perplexity difference from the reference and largest
/// |Δlogit|, any layout (measured figures: docs/model.md, "Tolerances"). With f32 activations the
/// logits differ from transformers' by f32 summation order only (≤ 3.1e-5 measured, bound 1e-4);
/// the perplexity then moves by the mean of such differences over 20 positions, 0.4–1.3e-6
/// measured across layouts and attention's summation orders, hence 2e-6.
const MODES: [(&[&str], f64, f32); 2] = [(&[], 1e-4, 5e-3), (&["--f32-activations"], 2e-6, 1e-4)];

/// The first reference sequence (21 tokens) and the reference logits of its positions.
fn reference(layout: &str) -> (Vec<u32>, Vec<f32>) {
    let dir = root().join("fixtures/gpt_oss");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let seq: Vec<u32> = json["sequences"][0].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
    let file = json["layouts"][layout]["logits"].as_str().unwrap();
    let values: Vec<f32> = std::fs::read(dir.join(file))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let vocab = json["config"]["vocab_size"].as_u64().unwrap() as usize;
    (seq.clone(), values[..seq.len() * vocab].to_vec())
}

fn perplexity(tokens: &[u32], logits: &[f32]) -> f64 {
    let vocab = logits.len() / tokens.len();
    let nll: f64 = (0..tokens.len() - 1)
        .map(|j| {
            let row = &logits[j * vocab..(j + 1) * vocab];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
            max + sum.ln() - row[tokens[j + 1] as usize] as f64
        })
        .sum();
    (nll / (tokens.len() - 1) as f64).exp()
}

#[test]
fn score_runs_the_tiny_gpt_oss_in_every_layout() {
    for (layout, path) in [("gguf", "gpt_oss.gguf"), ("hf", "hf"), ("mlx", "mlx")] {
        for (flags, ppl_bound, logit_bound) in MODES {
            let (tokens, ref_logits) = reference(layout);
            let ref_ppl = perplexity(&tokens, &ref_logits);
            let model = root().join("fixtures/gpt_oss").join(path);
            let dir = tempfile::tempdir().unwrap();
            let npy = dir.path().join("logits.npy");
            let list = tokens.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            // An f32 KV cache, as the reference computes.
            let mut args = vec![os("score"), model.as_os_str(), os("--kv-type"), os("f32")];
            args.extend([os("--tokens"), os(&list), os("--out"), npy.as_os_str()]);
            args.extend(flags.iter().map(|f| os(f)));
            let out = minerva(&args);
            assert!(out.status.success(), "{layout}: {}", String::from_utf8_lossy(&out.stderr));
            let ppl = perplexity_in(&String::from_utf8_lossy(&out.stdout));
            let off = (ppl / ref_ppl - 1.0).abs();
            let logits = Npy::read(&npy);
            assert_eq!(logits.shape, [tokens.len() - 1, 320], "{layout}");
            let values = logits.values();
            let got = perplexity(&tokens, &[values.clone(), vec![0.0; 320]].concat());
            assert!(
                (got / ppl - 1.0).abs() < 1e-4,
                "{layout}: the written logits give perplexity {got}, printed {ppl}"
            );
            let max_diff = values.iter().zip(&ref_logits).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            eprintln!(
                "{layout} {flags:?}: perplexity {ppl:.4}, reference {ref_ppl:.4}: {:.4} %, max |Δlogit| {max_diff:.2e}",
                off * 100.0
            );
            assert!(off < ppl_bound, "{layout} {flags:?}: perplexity {ppl} vs reference {ref_ppl}");
            assert!(max_diff <= logit_bound, "{layout} {flags:?}: max |Δlogit| {max_diff}");
            for (row, reference) in values.chunks_exact(320).zip(ref_logits.chunks_exact(320)) {
                assert_eq!(minerva_model::argmax(row), minerva_model::argmax(reference), "{layout} {flags:?}");
            }
        }
    }
}

#[test]
fn a_broken_gpt_oss_config_is_one_line_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let src = root().join("fixtures/gpt_oss/hf");
    std::fs::copy(src.join("model.safetensors"), dir.path().join("model.safetensors")).unwrap();
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    config["num_experts_per_tok"] = 0.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let out = minerva(&[os("score"), dir.path().as_os_str(), os("--tokens"), os("1,2,3")]);
    assert_one_line_error(&out, "config.json:num_experts_per_tok");
}

/// `--mlx-affine-copies` (MLX's 8-bit affine matrices dequantized at load) gives the logits of
/// the default, which reads them where they lie, bit for bit, for both MLX fixtures.
#[test]
fn mlx_affine_copies_give_the_in_place_logits() {
    let (tokens, _) = reference("mlx");
    let list = tokens.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    for path in ["mlx", "mlx_lm"] {
        let model = root().join("fixtures/gpt_oss").join(path);
        let dir = tempfile::tempdir().unwrap();
        let logits = |extra: &[&str], name: &str| {
            let npy = dir.path().join(name);
            let mut args =
                vec![os("score"), model.as_os_str(), os("--tokens"), os(&list), os("--out"), npy.as_os_str()];
            args.extend(extra.iter().map(|f| os(f)));
            let out = minerva(&args);
            assert!(out.status.success(), "{path}: {}", String::from_utf8_lossy(&out.stderr));
            std::fs::read(npy).unwrap()
        };
        assert_eq!(logits(&[], "in_place.npy"), logits(&["--mlx-affine-copies"], "copies.npy"), "{path}");
    }
}
