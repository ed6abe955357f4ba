//! End-to-end tests of the `minerva` binary: the real model, gguf-py's values, and bad input.

mod common;

use common::{Npy, assert_one_line_error, minerva, os, real_model, root};

#[test]
fn inspect_shows_the_real_models_facts() {
    let out = minerva(&[os("inspect"), real_model().as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("architecture: llama"), "{text}");
    assert!(text.contains("metadata (33 keys):"));
    assert!(text.contains("tensors (272):"));
    assert!(text.contains("[49152 items]"));
    assert!(text.contains("token_embd.weight"));
}

#[test]
fn inspect_json_is_machine_readable() {
    let out = minerva(&[os("inspect"), real_model().as_os_str(), os("--json")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["architecture"], "llama");
    assert_eq!(report["metadata_count"], 33);
    assert_eq!(report["tensor_count"], 272);
    assert_eq!(report["metadata"].as_array().unwrap().len(), 33);
    assert_eq!(report["tensors"].as_array().unwrap().len(), 272);
    let tokens = report["metadata"].as_array().unwrap().iter().find(|m| m["key"] == "tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens["type"], "array of string");
    assert_eq!(tokens["value"]["len"], 49152);
    assert_eq!(tokens["value"]["first"][0], "<|endoftext|>");
    let eps =
        report["metadata"].as_array().unwrap().iter().find(|m| m["key"] == "llama.attention.layer_norm_rms_epsilon");
    assert_eq!(eps.unwrap()["value"].as_f64(), Some(1e-5));
    let embd = &report["tensors"][0];
    assert_eq!(embd["name"], "token_embd.weight");
    assert_eq!(embd["type"], "Q8_0");
    assert_eq!(embd["shape"], serde_json::json!([49152, 576]));
    assert_eq!(embd["bytes"], 49152 * 576 / 32 * 34);
    // Totals add up to the tensors and the parameter count.
    let totals = report["totals"].as_array().unwrap();
    let tensors: u64 = totals.iter().map(|t| t["tensors"].as_u64().unwrap()).sum();
    assert_eq!(tensors, 272);
    let params: u64 = totals.iter().map(|t| t["parameters"].as_u64().unwrap()).sum();
    assert_eq!(report["parameter_count"].as_u64(), Some(params));
    assert_eq!(params, 134_515_008);
}

#[test]
fn dump_of_an_f32_tensor_equals_gguf_py() {
    let dir = tempfile::tempdir().unwrap();
    for (tensor, fixture) in
        [("output_norm.weight", "smollm2_output_norm.npy"), ("blk.0.attn_norm.weight", "smollm2_blk0_attn_norm.npy")]
    {
        let out_path = dir.path().join(format!("{tensor}.npy"));
        let out = minerva(&[os("dump"), real_model().as_os_str(), os(tensor), os("-o"), out_path.as_os_str()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let npy = Npy::read(&out_path);
        let (shape, values) = (npy.shape.clone(), npy.values());
        let reference = Npy::read(&root().join("fixtures/gguf").join(fixture));
        let (ref_shape, ref_values) = (reference.shape.clone(), reference.values());
        assert_eq!(shape, ref_shape, "{tensor}");
        assert_eq!(shape, [576]);
        assert_eq!(values.len(), ref_values.len());
        for (i, (a, b)) in values.iter().zip(&ref_values).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{tensor}[{i}]: {a} vs gguf-py {b}");
        }
    }
}

#[test]
fn dump_writes_numpy_row_major_shape() {
    // A tensor with ne = [512, 6] must come out as shape (6, 512), row i holding ne[0]-contiguous values.
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    let mut w = minerva_gguf_writer();
    // Values exact in f16, each naming its own (row, column).
    let values: Vec<f32> = (0..6 * 512).map(|i| ((i / 512) * 100 + (i % 512) / 8) as f32).collect();
    let f16: Vec<u8> = values.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
    w.add_tensor("x", minerva_core::DType::F16, &[6, 512], f16).unwrap();
    w.write_to(std::fs::File::create(&model).unwrap()).unwrap();
    let npy = dir.path().join("x.npy");
    let out = minerva(&[os("dump"), model.as_os_str(), os("x"), os("-o"), npy.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dumped = Npy::read(&npy);
    let (shape, read) = (dumped.shape.clone(), dumped.values());
    assert_eq!(shape, [6, 512]);
    assert!(read == values, "row-major order lost: first values {:?}", &read[..8]);
}

fn minerva_gguf_writer() -> minerva_gguf::GgufWriter {
    let mut w = minerva_gguf::GgufWriter::new();
    w.add_metadata("general.architecture", "test").unwrap();
    w
}

#[test]
fn errors_are_one_line_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.gguf");
    assert_one_line_error(&minerva(&[os("inspect"), missing.as_os_str()]), "missing.gguf");

    let not_gguf = dir.path().join("notes.txt");
    std::fs::write(&not_gguf, "hello, world").unwrap();
    assert_one_line_error(&minerva(&[os("inspect"), not_gguf.as_os_str()]), "not a GGUF file");

    let truncated = dir.path().join("truncated.gguf");
    let real = std::fs::read(real_model()).unwrap();
    std::fs::write(&truncated, &real[..100_000]).unwrap();
    assert_one_line_error(&minerva(&[os("inspect"), truncated.as_os_str()]), "truncated.gguf");

    let header_only = dir.path().join("header_only.gguf");
    std::fs::write(&header_only, &real[..2_000_000]).unwrap();
    assert_one_line_error(&minerva(&[os("inspect"), header_only.as_os_str()]), "outside the file");

    assert_one_line_error(&minerva(&[os("inspect"), dir.path().as_os_str()]), "");

    let npy = dir.path().join("out.npy");
    let model = real_model();
    assert_one_line_error(
        &minerva(&[os("dump"), model.as_os_str(), os("no.such.tensor"), os("-o"), npy.as_os_str()]),
        "no tensor named \"no.such.tensor\"",
    );
    assert_one_line_error(
        &minerva(&[
            os("dump"),
            model.as_os_str(),
            os("output_norm.weight"),
            os("-o"),
            dir.path().join("no/such/dir.npy").as_os_str(),
        ]),
        "dir.npy",
    );
    assert_one_line_error(&minerva(&[os("inspect"), model.as_os_str(), os("--bogus")]), "--bogus");
    assert_one_line_error(&minerva(&[os("frobnicate")]), "frobnicate");
}
