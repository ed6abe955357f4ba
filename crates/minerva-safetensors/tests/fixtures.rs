//! The committed fixtures (fixtures/safetensors, made by make_safetensors_fixtures.py with the
//! official Python writer) against their manifest: names, dtypes, shapes, shards, sha256 of bytes,
//! logical shapes and encodings, and (via a test-only reference dequantizer) the dequantized values.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use minerva_core::TensorView;
use minerva_safetensors::{Checkpoint, Encoding};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/safetensors")
}

fn manifest() -> Value {
    serde_json::from_slice(&std::fs::read(fixtures().join("manifest.json")).unwrap()).unwrap()
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect()
}

#[test]
fn every_fixture_matches_the_manifest() {
    let manifest = manifest();
    let checkpoints = manifest.as_object().unwrap();
    assert_eq!(checkpoints.len(), 6);
    for (name, expected) in checkpoints {
        let ckpt = Checkpoint::open(fixtures().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let tensors = expected["tensors"].as_array().unwrap();
        assert_eq!(ckpt.len(), tensors.len(), "{name}");
        let ours: BTreeSet<&str> = ckpt.tensors().map(|t| t.view.name).collect();
        let theirs: BTreeSet<&str> = tensors.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(ours, theirs, "{name}");
        for t in tensors {
            let tname = t["name"].as_str().unwrap();
            let found = ckpt.tensor(tname).unwrap();
            assert_eq!(found.view.dtype.info().safetensors_name, t["dtype"].as_str(), "{name}/{tname}");
            assert_eq!(found.view.shape, usizes(&t["shape"]), "{name}/{tname}");
            assert_eq!(found.shard.file_name().unwrap().to_str(), t["shard"].as_str(), "{name}/{tname}");
            let digest = Sha256::digest(found.view.bytes);
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, t["sha256"].as_str().unwrap(), "{name}/{tname}");
        }
        // Logical tensors: the quantized ones the manifest lists, every other tensor plain.
        let logical = expected["logical"].as_array().unwrap();
        let components: usize = logical.iter().map(|l| l["components"].as_array().unwrap().len()).sum();
        assert_eq!(ckpt.logical_tensors().len(), tensors.len() - components + logical.len(), "{name}");
        for l in logical {
            let lname = l["name"].as_str().unwrap();
            let found = ckpt.logical_tensor(lname).unwrap_or_else(|| panic!("{name}: no logical {lname}"));
            assert_eq!(found.encoding.kind(), l["kind"].as_str().unwrap(), "{name}/{lname}");
            assert_eq!(found.shape, usizes(&l["shape"]), "{name}/{lname}");
            let names: Vec<&str> = found.encoding.components().iter().map(|c| c.name).collect();
            let expected: Vec<&str> = l["components"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
            assert_eq!(names, expected, "{name}/{lname}");
            let params = match found.encoding {
                Encoding::MlxAffine { bits, group_size, .. } => Some((bits, group_size)),
                Encoding::MlxMxfp4 { group_size, .. } => Some((4, group_size)),
                _ => None,
            };
            if let Some((bits, group_size)) = params {
                assert_eq!(u64::from(bits), l["bits"].as_u64().unwrap());
                assert_eq!(u64::from(group_size), l["group_size"].as_u64().unwrap());
            }
        }
    }
}

#[test]
fn all_dtypes_cover_the_official_vocabulary() {
    let ckpt = Checkpoint::open(fixtures().join("all_dtypes/model.safetensors")).unwrap();
    let dtypes: BTreeSet<&str> = ckpt.tensors().map(|t| t.view.dtype.info().safetensors_name.unwrap()).collect();
    for required in [
        "F64",
        "F32",
        "F16",
        "BF16",
        "F8_E4M3",
        "F8_E5M2",
        "F8_E8M0",
        "I64",
        "I32",
        "I16",
        "I8",
        "U8",
        "U16",
        "U32",
        "U64",
        "BOOL",
        "F4",
        "C64",
        "F8_E4M3FNUZ",
        "F8_E5M2FNUZ",
    ] {
        assert!(dtypes.contains(required), "{required} missing from the fixture");
    }
    // Every dtype the official crate can name maps to a row of the core table.
    for name in ["F6_E2M3", "F6_E3M2"].iter().chain(dtypes.iter()) {
        let official: safetensors::Dtype = serde_json::from_value(Value::from(*name)).unwrap();
        let ours = minerva_core::DType::from_safetensors_name(name).unwrap();
        assert_eq!(official.bitsize() * ours.block_elems(), 8 * ours.block_bytes(), "{name}");
    }
    assert_eq!(ckpt.shard_metadata(0).unwrap()["source"], "minerva fixtures");
    assert!(ckpt.config().is_none());
}

#[test]
fn shard_layouts_and_configs() {
    let ckpt = Checkpoint::open(fixtures().join("sharded_index")).unwrap();
    let shards: Vec<_> = ckpt.shard_paths().map(|p| p.file_name().unwrap().to_str().unwrap().to_owned()).collect();
    assert_eq!(
        shards,
        ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"]
    );
    // Stable order: shard by shard, then by offset; tensors() and the offsets agree.
    let order: Vec<_> = ckpt.tensors().map(|t| (t.shard.to_path_buf(), t.offset)).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    let total: usize = ckpt.tensors().map(|t| t.view.bytes.len()).sum();
    assert_eq!(ckpt.index_metadata().unwrap()["total_size"].as_u64(), Some(total as u64));
    assert_eq!(ckpt.config().unwrap()["num_hidden_layers"], 3);
    assert_eq!(ckpt.generation_config().unwrap()["eos_token_id"], 2);
    assert_eq!(ckpt.tokenizer_config().unwrap()["bos_token"], "<s>");

    // The index file itself, and one shard alone, open too.
    let via_index = Checkpoint::open(fixtures().join("sharded_index/model.safetensors.index.json")).unwrap();
    assert_eq!(via_index.len(), ckpt.len());
    let one = Checkpoint::open(fixtures().join("sharded_index/model-00002-of-00003.safetensors")).unwrap();
    assert_eq!(one.len(), 2);
    assert!(one.config().is_some());

    let noindex = Checkpoint::open(fixtures().join("sharded_noindex")).unwrap();
    assert_eq!(noindex.shard_paths().len(), 2);
    assert_eq!(noindex.len(), 4);
    assert!(noindex.index_metadata().is_none());
}

// ------------------------------------------------------------------------------------------------
// Test-only reference dequantizers (format-specs §4.3–4.4), used to check that the manifest's values
// agree with the stored components. The real kernels live in minerva-quant.

const FP4: [f32; 16] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];

/// HF MXFP4 bytes (`_blocks`, or MLX mxfp4 `weight` viewed as bytes): element 2j = low nibble.
fn ref_mxfp4(blocks: &[u8], scales: &[u8]) -> Vec<f32> {
    blocks
        .chunks_exact(16)
        .zip(scales)
        .flat_map(|(block, &s)| {
            let scale = 2f32.powi(i32::from(s) - 127);
            block.iter().flat_map(move |&b| [FP4[usize::from(b & 15)] * scale, FP4[usize::from(b >> 4)] * scale])
        })
        .collect()
}

/// MLX affine: `q` LSB-first in little-endian u32 words, `w = q*scale + bias` per group.
fn ref_affine(
    weight: TensorView<'_>,
    scales: TensorView<'_>,
    biases: TensorView<'_>,
    bits: u32,
    group: u32,
) -> Vec<f32> {
    let f16s = |v: TensorView<'_>| -> Vec<f32> {
        v.bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
    };
    let (scales, biases) = (f16s(scales), f16s(biases));
    let words_per_row = *weight.shape.last().unwrap();
    let cols = words_per_row * 32 / bits as usize;
    let words: Vec<u32> = weight.bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let mut out = Vec::new();
    for (r, row) in words.chunks_exact(words_per_row).enumerate() {
        for i in 0..cols {
            let bit = i * bits as usize;
            let lo = u64::from(row[bit / 32]);
            let hi = row.get(bit / 32 + 1).map_or(0, |&w| u64::from(w));
            let q = (((hi << 32) | lo) >> (bit % 32)) & ((1 << bits) - 1);
            let g = r * (cols / group as usize) + i / group as usize;
            out.push(q as f32 * scales[g] + biases[g]);
        }
    }
    out
}

#[test]
fn manifest_values_match_a_reference_dequantizer() {
    let manifest = manifest();
    let mut checked = 0;
    for (name, expected) in manifest.as_object().unwrap() {
        let ckpt = Checkpoint::open(fixtures().join(name)).unwrap();
        for l in expected["logical"].as_array().unwrap() {
            let t = ckpt.logical_tensor(l["name"].as_str().unwrap()).unwrap();
            let values = match t.encoding {
                Encoding::HfMxfp4 { blocks, scales } | Encoding::MlxMxfp4 { weight: blocks, scales, .. } => {
                    ref_mxfp4(blocks.bytes, scales.bytes)
                }
                Encoding::MlxAffine { weight, scales, biases, bits, group_size } => {
                    ref_affine(weight, scales, biases, bits, group_size)
                }
                Encoding::Plain(_) => panic!("{name}: quantized tensor seen as plain"),
            };
            let want: Vec<f32> = l["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
            assert_eq!(values.len(), t.shape.iter().product::<usize>());
            assert_eq!(values.len(), want.len());
            for (k, (a, b)) in values.iter().zip(&want).enumerate() {
                assert!(a.to_bits() == b.to_bits(), "{name}/{}[{k}]: {a} vs {b}", t.name);
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 2 + 3 + 2);
}
