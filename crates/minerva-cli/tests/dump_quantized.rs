//! `minerva dump` dequantizes every format minerva-quant reads to exactly gguf-py's values.

mod common;

use std::path::Path;

use common::{Npy, assert_one_line_error, minerva, real_model, root};
use minerva_core::DType;
use sha2::{Digest, Sha256};

fn dump(model: &Path, tensor: &str, dir: &Path) -> Npy {
    let out_path = dir.join("out.npy");
    let out = minerva(&["dump".as_ref(), model.as_os_str(), tensor.as_ref(), "-o".as_ref(), out_path.as_os_str()]);
    assert!(out.status.success(), "dump {tensor}: {}", String::from_utf8_lossy(&out.stderr));
    Npy::read(&out_path)
}

/// Golden blocks of every format (fixtures/quant, from gguf-py), put in a GGUF file by our writer
/// and dumped through the CLI: the values must be gguf-py's, bit for bit.
#[test]
fn every_format_dumps_to_gguf_py_values() {
    let fixtures = root().join("fixtures/quant");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures.join("manifest.json")).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("goldens.gguf");
    let mut w = minerva_gguf::GgufWriter::new();
    w.add_metadata("general.architecture", "test").unwrap();
    let mut expected = Vec::new();
    for case in manifest["dequantize"].as_array().unwrap() {
        let dtype = DType::from_name(case["dtype"].as_str().unwrap()).unwrap();
        if dtype.ggml_id().is_none() {
            continue;
        }
        let blocks = std::fs::read(fixtures.join(case["bytes"].as_str().unwrap())).unwrap();
        let values = std::fs::read(fixtures.join(case["values"].as_str().unwrap())).unwrap();
        let n_blocks = blocks.len() / dtype.block_bytes();
        // Two rows when the block count allows, so the numpy shape has an outer dimension.
        let rows = if n_blocks.is_multiple_of(2) { 2 } else { 1 };
        let shape = [rows, n_blocks / rows * dtype.block_elems()];
        w.add_tensor(format!("golden.{dtype}"), dtype, &shape, blocks).unwrap();
        expected.push((dtype, shape, values));
    }
    assert!(expected.len() >= 15, "the manifest should cover every format, got {}", expected.len());
    w.write_to(std::fs::File::create(&model).unwrap()).unwrap();

    for (dtype, shape, values) in expected {
        let npy = dump(&model, &format!("golden.{dtype}"), dir.path());
        assert_eq!(npy.shape, shape, "{dtype}");
        let data = &npy.data;
        assert_eq!(data.len(), values.len(), "{dtype}");
        let first_diff = data.chunks(4).zip(values.chunks(4)).position(|(a, b)| a != b);
        assert_eq!(first_diff, None, "{dtype}: value {first_diff:?} differs from gguf-py");
    }
}

/// Real-model tensors (Q8_0 embedding, Q4_1 projections, F32 norm) dump to the SHA-256 of gguf-py's
/// dequantized values (fixtures/gguf/make_smollm2_dequant_hashes.py).
#[test]
fn real_model_tensors_dump_to_gguf_py_values() {
    let model = real_model();
    let fixture: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("fixtures/gguf/smollm2_dequant_sha256.json")).unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tensors = fixture["tensors"].as_array().unwrap();
    assert!(tensors.iter().any(|t| t["type"] == "Q4_1") && tensors.iter().any(|t| t["type"] == "Q8_0"));
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let npy = dump(&model, name, dir.path());
        let data = &npy.data;
        let first = f32::from_le_bytes([data[0], data[1], data[2], data[3]]);
        // Compared as f32: serde_json's default float parsing may be 1 ulp off in f64.
        assert_eq!(Some(first), t["first"][0].as_f64().map(|v| v as f32), "{name}");
        let digest = format!("{:x}", Sha256::digest(&npy.data));
        assert_eq!(digest, t["f32_sha256"].as_str().unwrap(), "{name}: values differ from gguf-py's");
    }
}

#[test]
fn types_without_a_dequantizer_are_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("iq.gguf");
    let mut w = minerva_gguf::GgufWriter::new();
    w.add_tensor("iq", DType::IQ2_XXS, &[256], vec![0; 66]).unwrap();
    w.write_to(std::fs::File::create(&model).unwrap()).unwrap();
    let out_path = dir.path().join("out.npy");
    let out = minerva(&["dump".as_ref(), model.as_os_str(), "iq".as_ref(), "-o".as_ref(), out_path.as_os_str()]);
    assert_one_line_error(&out, "IQ2_XXS");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot dequantize"));
    assert!(!out_path.exists(), "no partial output for a refused tensor");
}
