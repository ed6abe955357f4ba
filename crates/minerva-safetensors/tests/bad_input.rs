//! Malformed files and checkpoints: one test per error variant, each a typed error (never a panic),
//! and for single files the official `safetensors` crate (the oracle) must reject them too.

use std::path::Path;

use minerva_safetensors::{Checkpoint, SafetensorsError as E};
use serde_json::{Value, json};

/// A `.safetensors` file from a raw header string and data section.
fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A valid file: tensors `(name, dtype, shape, bytes)` laid out contiguously in the given order.
fn file(tensors: &[(&str, &str, &[u64], Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(name.to_string(), json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}));
    }
    raw_file(&Value::Object(header).to_string(), &data)
}

/// Parses `bytes` with both readers; both must reject it. Returns our error.
fn reject(bytes: Vec<u8>) -> E {
    let official = safetensors::SafeTensors::read_metadata(&bytes);
    assert!(official.is_err(), "the official crate accepts a file we expect to reject");
    match Checkpoint::from_bytes("bad.safetensors", bytes) {
        Ok(_) => panic!("accepted a malformed file"),
        Err(e) => {
            // Every message names the file.
            assert!(e.to_string().contains("bad.safetensors"), "{e}");
            e
        }
    }
}

fn open_err(path: &Path) -> E {
    match Checkpoint::open(path) {
        Ok(_) => panic!("opened a malformed checkpoint at {}", path.display()),
        Err(e) => e,
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

#[test]
fn valid_helper_file_is_accepted_by_both() {
    let bytes = file(&[("a", "F32", &[2], vec![0; 8]), ("b", "U8", &[3], vec![1, 2, 3])]);
    assert!(safetensors::SafeTensors::read_metadata(&bytes).is_ok());
    let ckpt = Checkpoint::from_bytes("ok.safetensors", bytes).unwrap();
    let names: Vec<_> = ckpt.tensors().map(|t| t.view.name).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(ckpt.tensor("b").unwrap().view.bytes, [1, 2, 3]);
}

#[test]
fn too_short() {
    assert!(matches!(reject(vec![1, 0, 0]), E::TooShort { len: 3, .. }));
}

#[test]
fn header_longer_than_file() {
    let mut bytes = raw_file("{}", &[]);
    bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(reject(bytes), E::HeaderTooLarge { header_len: u64::MAX, available: 2, .. }));
}

#[test]
fn header_not_utf8() {
    let mut bytes = raw_file("{\"a\" }", &[]);
    bytes[10] = 0xff;
    assert!(matches!(reject(bytes), E::HeaderNotUtf8 { offset: 10, .. }));
}

#[test]
fn malformed_json() {
    assert!(matches!(reject(raw_file("{\"a\": {", &[])), E::MalformedHeader { .. }));
    assert!(matches!(reject(raw_file("[1, 2]", &[])), E::MalformedHeader { .. }));
}

#[test]
fn malformed_entry() {
    let e = reject(raw_file(r#"{"w": {"dtype": "F32", "shape": [1]}}"#, &[0; 4]));
    assert!(matches!(&e, E::MalformedEntry { name, .. } if name == "w"), "{e}");
    let e = reject(raw_file(r#"{"__metadata__": {"k": 1}}"#, &[]));
    assert!(matches!(&e, E::MalformedEntry { name, .. } if name == "__metadata__"), "{e}");
}

#[test]
fn unknown_dtype() {
    let e = reject(file(&[("w", "F7", &[1], vec![0])]));
    assert!(matches!(&e, E::UnknownDType { name, dtype, .. } if name == "w" && dtype == "F7"), "{e}");
}

#[test]
fn offsets_out_of_range() {
    let e = reject(raw_file(r#"{"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}"#, &[0; 2]));
    assert!(matches!(&e, E::OffsetsOutOfRange { name, end: 4, data_len: 2, .. } if name == "w"), "{e}");
    let e = reject(raw_file(r#"{"w": {"dtype": "U8", "shape": [0], "data_offsets": [2, 1]}}"#, &[0; 2]));
    assert!(matches!(e, E::OffsetsOutOfRange { begin: 2, end: 1, .. }));
    let huge = format!(r#"{{"w": {{"dtype": "U8", "shape": [1], "data_offsets": [{}, {}]}}}}"#, u64::MAX - 1, u64::MAX);
    assert!(matches!(reject(raw_file(&huge, &[0])), E::OffsetsOutOfRange { .. }));
}

#[test]
fn byte_length_mismatch() {
    let e = reject(raw_file(r#"{"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}"#, &[0; 12]));
    assert!(matches!(&e, E::ByteLength { name, expected: 16, actual: 12, .. } if name == "w"), "{e}");
}

#[test]
fn shape_overflow_and_partial_bytes() {
    let big = format!(r#"{{"w": {{"dtype": "F32", "shape": [{}, 4], "data_offsets": [0, 4]}}}}"#, u64::MAX / 2);
    let e = reject(raw_file(&big, &[0; 4]));
    assert!(matches!(&e, E::Shape { name, source: minerva_core::ShapeError::Overflow { .. }, .. } if name == "w"));
    // Three F4 elements are 12 bits: not whole bytes.
    let e = reject(raw_file(r#"{"w": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}"#, &[0; 2]));
    assert!(matches!(e, E::Shape { source: minerva_core::ShapeError::PartialBlock { .. }, .. }));
}

#[test]
fn overlapping_tensors() {
    let header = r#"{"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                     "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}"#;
    let e = reject(raw_file(header, &[0; 6]));
    assert!(matches!(&e, E::Overlap { first, second, offset: 2, .. } if first == "a" && second == "b"), "{e}");
}

#[test]
fn gap_between_tensors() {
    let header = r#"{"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                     "b": {"dtype": "U8", "shape": [2], "data_offsets": [3, 5]}}"#;
    let e = reject(raw_file(header, &[0; 5]));
    assert!(matches!(&e, E::Gap { name, offset: 3, gap: 1, .. } if name == "b"), "{e}");
}

#[test]
fn trailing_bytes() {
    let mut bytes = file(&[("a", "U8", &[2], vec![0; 2])]);
    bytes.push(7);
    assert!(matches!(reject(bytes), E::TrailingBytes { end: 2, data_len: 3, trailing: 1, .. }));
}

#[test]
fn every_truncation_of_a_fixture_is_an_error() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/safetensors/all_dtypes/model.safetensors");
    let bytes = std::fs::read(path).unwrap();
    for len in 0..bytes.len() {
        let cut = bytes[..len].to_vec();
        assert!(safetensors::SafeTensors::read_metadata(&cut).is_err());
        assert!(Checkpoint::from_bytes("cut.safetensors", cut).is_err(), "truncation to {len} accepted");
    }
}

fn index(dir: &Path, map: Value) {
    write(dir, "model.safetensors.index.json", json!({"metadata": {}, "weight_map": map}).to_string().as_bytes());
}

#[test]
fn index_names_a_missing_shard() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.safetensors", &file(&[("x", "U8", &[1], vec![0])]));
    index(dir.path(), json!({"x": "a.safetensors", "y": "b.safetensors"}));
    let e = open_err(dir.path());
    assert!(matches!(&e, E::MissingShard { shard, .. } if shard.ends_with("b.safetensors")), "{e}");
}

#[test]
fn index_names_a_tensor_its_shard_lacks() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.safetensors", &file(&[("x", "U8", &[1], vec![0])]));
    write(dir.path(), "b.safetensors", &file(&[("y", "U8", &[1], vec![0])]));
    index(dir.path(), json!({"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}));
    let e = open_err(dir.path());
    assert!(matches!(&e, E::TensorNotInShard { name, shard, .. } if name == "y" && shard.ends_with("a.safetensors")));
}

#[test]
fn same_tensor_in_two_shards() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.safetensors", &file(&[("x", "U8", &[1], vec![0])]));
    write(dir.path(), "b.safetensors", &file(&[("x", "U8", &[1], vec![1]), ("y", "U8", &[1], vec![0])]));
    index(dir.path(), json!({"x": "a.safetensors", "y": "b.safetensors"}));
    let e = open_err(dir.path());
    assert!(matches!(&e, E::DuplicateTensor { name, .. } if name == "x"), "{e}");
}

#[test]
fn index_shard_name_with_a_path() {
    let dir = tempfile::tempdir().unwrap();
    index(dir.path(), json!({"x": "../a.safetensors"}));
    assert!(matches!(open_err(dir.path()), E::InvalidShardName { .. }));
}

#[test]
fn malformed_index() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "model.safetensors.index.json", b"{\"weight_map\": [1]}");
    assert!(matches!(open_err(dir.path()), E::MalformedIndex { .. }));
}

#[test]
fn incomplete_shard_sequence_without_index() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "model-00001-of-00003.safetensors", &file(&[("x", "U8", &[1], vec![0])]));
    write(dir.path(), "model-00003-of-00003.safetensors", &file(&[("y", "U8", &[1], vec![0])]));
    let e = open_err(dir.path());
    assert!(matches!(&e, E::MissingShard { shard, .. } if shard.ends_with("model-00002-of-00003.safetensors")));
}

#[test]
fn empty_directory_and_missing_path() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(open_err(dir.path()), E::NoSafetensors { .. }));
    assert!(matches!(open_err(&dir.path().join("nope.safetensors")), E::Io { .. }));
}

#[test]
fn malformed_config() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "model.safetensors", &file(&[("x", "U8", &[1], vec![0])]));
    write(dir.path(), "generation_config.json", b"{oops");
    let e = open_err(dir.path());
    assert!(matches!(&e, E::MalformedConfig { path, .. } if path.ends_with("generation_config.json")));
}

fn blocks(shape: &[u64]) -> Vec<u8> {
    vec![0; shape.iter().product::<u64>() as usize]
}

#[test]
fn blocks_without_scales() {
    let e = Checkpoint::from_bytes("m.safetensors", file(&[("w_blocks", "U8", &[2, 1, 16], blocks(&[2, 1, 16]))]));
    assert!(matches!(e, Err(E::MissingComponent { name, missing, .. }) if name == "w" && missing == "w_scales"));
}

#[test]
fn blocks_and_scales_with_mismatched_shapes() {
    let bytes =
        file(&[("w_blocks", "U8", &[2, 1, 16], blocks(&[2, 1, 16])), ("w_scales", "U8", &[2, 2], blocks(&[2, 2]))]);
    let e = Checkpoint::from_bytes("m.safetensors", bytes);
    assert!(matches!(e, Err(E::ComponentShape { component, .. }) if component == "w_scales"));
    let bytes =
        file(&[("w_blocks", "U8", &[2, 1, 8], blocks(&[2, 1, 8])), ("w_scales", "U8", &[2, 1], blocks(&[2, 1]))]);
    let e = Checkpoint::from_bytes("m.safetensors", bytes);
    assert!(matches!(e, Err(E::ComponentShape { component, .. }) if component == "w_blocks"));
    let bytes =
        file(&[("w_blocks", "I8", &[2, 1, 16], blocks(&[2, 1, 16])), ("w_scales", "U8", &[2, 1], blocks(&[2, 1]))]);
    let e = Checkpoint::from_bytes("m.safetensors", bytes);
    assert!(matches!(e, Err(E::ComponentDType { component, .. }) if component == "w_blocks"));
}

/// An MLX-style directory: `m.weight` u32 [4, 8] (64 4-bit elements per row) with the given scales
/// and biases, and `config.json`'s quantization section.
fn mlx_dir(quant: Value, scales_shape: &[u64], biases: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let n = scales_shape.iter().product::<u64>() as usize;
    let mut tensors: Vec<(&str, &str, &[u64], Vec<u8>)> =
        vec![("m.weight", "U32", &[4, 8], vec![0; 128]), ("m.scales", "F16", scales_shape, vec![0; 2 * n])];
    if biases {
        tensors.push(("m.biases", "F16", scales_shape, vec![0; 2 * n]));
    }
    write(dir.path(), "model.safetensors", &file(&tensors));
    write(dir.path(), "config.json", json!({"quantization": quant}).to_string().as_bytes());
    dir
}

#[test]
fn mlx_affine_checks() {
    let ok = mlx_dir(json!({"bits": 4, "group_size": 32}), &[4, 2], true);
    let ckpt = Checkpoint::open(ok.path()).unwrap();
    assert_eq!(ckpt.logical_tensor("m.weight").unwrap().shape, [4, 64]);

    let e = open_err(mlx_dir(json!({"bits": 4, "group_size": 32}), &[4, 2], false).path());
    assert!(matches!(e, E::MissingComponent { missing, .. } if missing == "m.biases"));
    let e = open_err(mlx_dir(json!({"bits": 4, "group_size": 64}), &[4, 2], true).path());
    assert!(matches!(e, E::ComponentShape { component, .. } if component == "m.scales"));
    // A per-module override changes the expected shapes: 8-bit → 32 elements per row, one group.
    let m8 = json!({"bits": 4, "group_size": 32, "m": {"bits": 8, "group_size": 32}});
    let e = open_err(mlx_dir(m8.clone(), &[4, 2], true).path());
    assert!(matches!(e, E::ComponentShape { .. }));
    let ok = mlx_dir(m8, &[4, 1], true);
    assert_eq!(Checkpoint::open(ok.path()).unwrap().logical_tensor("m.weight").unwrap().shape, [4, 32]);
    // A key the override leaves out is MLX's `to_quantized` default, not the top level's (as
    // `nn.quantize` passes the entry alone): groups of 64, which 32 elements per row cannot fill.
    let e = open_err(mlx_dir(json!({"bits": 4, "group_size": 32, "m": {"bits": 8}}), &[4, 1], true).path());
    assert!(matches!(&e, E::ComponentShape { expected, .. } if expected.contains("multiple of 64")), "{e:?}");
    // `false` leaves a module unquantized: three plain tensors.
    let plain = mlx_dir(json!({"bits": 4, "group_size": 32, "m": false}), &[4, 2], true);
    let ckpt = Checkpoint::open(plain.path()).unwrap();
    assert!(ckpt.logical_tensors().all(|t| t.encoding.kind() == "plain"));
}

#[test]
fn mlx_quant_config_errors() {
    for quant in [
        json!({"bits": 4, "group_size": 32, "mode": "nvfp4"}),
        json!({"bits": 7, "group_size": 32}),
        json!({"bits": "4"}),
        json!({"bits": 4, "group_size": 0}),
        json!({"bits": 4, "group_size": 64, "mode": "mxfp4"}),
        json!({"bits": 4, "group_size": 32, "m": 3}),
        json!(5),
    ] {
        let e = open_err(mlx_dir(quant.clone(), &[4, 2], true).path());
        assert!(matches!(e, E::QuantConfig { .. }), "{quant}: {e}");
    }
}
