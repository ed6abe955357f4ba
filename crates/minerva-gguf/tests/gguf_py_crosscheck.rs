//! Cross-checks against llama.cpp's gguf-py (PyPI `gguf` 0.19), through committed fixtures so that
//! the tests need no Python.
//!
//! The fixtures live in `fixtures/gguf/` and are made by `fixtures/gguf/make_gguf_py_fixtures.py`
//! (see its header). They encode gguf-py's view of a file as JSON: gguf-py's type names, integers
//! as JSON integers, floats as their exact IEEE bits (`"0x3fc00000"`), arrays as
//! `{"elem_type", "items"}`. These tests encode our reader's (or writer's) view the same way and
//! compare field by field.
//!
//! * [`gguf_py_file_reads_identically`]: a file written by gguf-py's `GGUFWriter`, read by us.
//! * [`our_writer_output_matches_committed_and_gguf_py`]: a file written by our [`GgufWriter`],
//!   pinned byte for byte to `minerva_written.gguf` and read by gguf-py's `GGUFReader`. To
//!   regenerate after a deliberate change to the writer or the sample:
//!   `MINERVA_BLESS=1 cargo test -p minerva-gguf --test gguf_py_crosscheck our_writer` (writes the
//!   file instead of comparing), then `python3 fixtures/gguf/make_gguf_py_fixtures.py`.
//! * [`real_model_matches_gguf_py`]: SmolLM2-135M-Instruct Q4_1 (from `cargo xtask setup`).

use std::path::{Path, PathBuf};

use minerva_gguf::{DType, Gguf, GgufWriter, MetadataValue, Value, ValueType};
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> PathBuf {
    workspace_root().join("fixtures/gguf").join(name)
}

fn read_fixture(name: &str) -> Vec<u8> {
    let path = fixture(name);
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; regenerate with fixtures/gguf/make_gguf_py_fixtures.py", path.display()))
}

fn load_json(name: &str) -> Json {
    serde_json::from_slice(&read_fixture(name)).unwrap_or_else(|e| panic!("{name}: bad JSON: {e}"))
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// gguf-py's `GGUFValueType` name of a value type.
fn py_type(t: ValueType) -> &'static str {
    match t {
        ValueType::U8 => "UINT8",
        ValueType::I8 => "INT8",
        ValueType::U16 => "UINT16",
        ValueType::I16 => "INT16",
        ValueType::U32 => "UINT32",
        ValueType::I32 => "INT32",
        ValueType::F32 => "FLOAT32",
        ValueType::Bool => "BOOL",
        ValueType::String => "STRING",
        ValueType::Array => "ARRAY",
        ValueType::U64 => "UINT64",
        ValueType::I64 => "INT64",
        ValueType::F64 => "FLOAT64",
    }
}

/// A value in the fixtures' JSON encoding.
fn value_json(v: &MetadataValue) -> Json {
    match v {
        MetadataValue::U8(x) => json!(x),
        MetadataValue::I8(x) => json!(x),
        MetadataValue::U16(x) => json!(x),
        MetadataValue::I16(x) => json!(x),
        MetadataValue::U32(x) => json!(x),
        MetadataValue::I32(x) => json!(x),
        MetadataValue::U64(x) => json!(x),
        MetadataValue::I64(x) => json!(x),
        MetadataValue::F32(x) => json!(format!("0x{:08x}", x.to_bits())),
        MetadataValue::F64(x) => json!(format!("0x{:016x}", x.to_bits())),
        MetadataValue::Bool(x) => json!(x),
        MetadataValue::String(s) => json!(s),
        MetadataValue::Array { elem_type, values } => {
            json!({"elem_type": py_type(*elem_type), "items": values.iter().map(value_json).collect::<Vec<_>>()})
        }
    }
}

/// gguf-py's `ReaderField.types`: the value's type, then the chain along first elements (gguf-py
/// flattens nested arrays and records the types of the first element only; nothing for an empty
/// array).
fn py_types_chain(v: &MetadataValue) -> Vec<&'static str> {
    let mut chain = vec![py_type(v.value_type())];
    if let MetadataValue::Array { values, .. } = v
        && let Some(first) = values.first()
    {
        chain.extend(py_types_chain(first));
    }
    chain
}

fn kv_json(key: &str, v: &MetadataValue) -> Json {
    json!({"key": key, "type": py_type(v.value_type()), "gguf_py_types": py_types_chain(v), "value": value_json(v)})
}

/// One tensor as the fixtures describe it.
struct TensorFacts<'a> {
    name: &'a str,
    dtype: DType,
    /// numpy order.
    shape: Vec<usize>,
    /// Relative to the data section.
    offset: u64,
    data_offset: usize,
    bytes: &'a [u8],
}

impl TensorFacts<'_> {
    fn to_json(&self, with_n_elements: bool) -> Json {
        let ne: Vec<usize> = self.shape.iter().rev().copied().collect();
        let mut j = json!({
            "name": self.name,
            "type": self.dtype.name(),
            "ne": ne,
            "shape": self.shape,
            "n_bytes": self.bytes.len(),
            "offset": self.offset,
            "data_offset": self.data_offset as u64 + self.offset,
            "sha256": sha256_hex(self.bytes),
        });
        if with_n_elements {
            j["n_elements"] = json!(self.shape.iter().product::<usize>());
        }
        j
    }
}

fn tensor_facts<D: AsRef<[u8]>>(gguf: &Gguf<D>) -> Vec<TensorFacts<'_>> {
    gguf.tensor_infos()
        .iter()
        .map(|info| TensorFacts {
            name: &info.name,
            dtype: info.dtype,
            shape: info.shape.clone(),
            offset: info.offset,
            data_offset: gguf.data_offset(),
            bytes: gguf.tensor_bytes(info),
        })
        .collect()
}

fn arr<'j>(j: &'j Json, field: &str) -> &'j Vec<Json> {
    j[field].as_array().unwrap_or_else(|| panic!("fixture field {field:?} is not a list"))
}

/// Header fields of a fixture against our parse of `bytes`.
fn check_header<D: AsRef<[u8]>>(j: &Json, gguf: &Gguf<D>, with_file_hash: bool) {
    let bytes = gguf.bytes();
    assert_eq!(j["file_size"], json!(bytes.len()), "file size");
    if with_file_hash {
        assert_eq!(
            j["file_sha256"],
            json!(sha256_hex(bytes)),
            "the JSON describes another version of the file: rerun make_gguf_py_fixtures.py"
        );
    }
    assert_eq!(j["version"], json!(gguf.version()), "version");
    assert_eq!(j["alignment"], json!(gguf.alignment()), "alignment");
    assert_eq!(j["data_offset"], json!(gguf.data_offset()), "data offset");
    assert_eq!(j["kv_count"], json!(gguf.metadata_len()), "KV count");
    assert_eq!(j["tensor_count"], json!(gguf.tensor_count()), "tensor count");
    assert_eq!(arr(j, "kvs").len(), gguf.metadata_len(), "KVs listed");
    assert_eq!(arr(j, "tensors").len(), gguf.tensor_count(), "tensors listed");
}

/// Every KV (in order, with types and values) and every tensor of a full-dump fixture.
fn check_full_dump(j: &Json, kvs: &[(String, MetadataValue)], tensors: &[TensorFacts<'_>]) {
    let theirs = arr(j, "kvs");
    assert_eq!(theirs.len(), kvs.len(), "KV count");
    for (i, ((key, value), theirs)) in kvs.iter().zip(theirs).enumerate() {
        assert_eq!(kv_json(key, value), *theirs, "KV #{i} ({key})");
    }
    let theirs = arr(j, "tensors");
    assert_eq!(theirs.len(), tensors.len(), "tensor count");
    for (i, (t, theirs)) in tensors.iter().zip(theirs).enumerate() {
        let name = theirs["type"].as_str().unwrap_or_default();
        assert_eq!(DType::from_name(name), Some(t.dtype), "tensor #{i}: gguf-py's type {name:?}");
        assert_eq!(t.to_json(true), *theirs, "tensor #{i} ({})", t.name);
    }
}

#[test]
fn gguf_py_file_reads_identically() {
    let gguf = Gguf::parse(read_fixture("gguf_py_written.gguf")).expect("our reader rejects gguf-py's file");
    let j = load_json("gguf_py_written.json");
    check_header(&j, &gguf, true);
    assert_eq!(gguf.alignment(), 64, "custom general.alignment");

    let kvs: Vec<(String, MetadataValue)> = gguf.metadata().map(|(k, v)| (k.to_string(), v.to_owned_value())).collect();
    check_full_dump(&j, &kvs, &tensor_facts(&gguf));

    // A few through the typed accessors too.
    assert_eq!(gguf.architecture().unwrap(), "minerva-test");
    assert_eq!(gguf.get_u64("test.u64").unwrap(), u64::MAX);
    assert_eq!(gguf.get_i64("test.i64").unwrap(), i64::MIN);
    assert!(gguf.get_f32("test.f32.nan").unwrap().is_nan());
    assert!(gguf.get_bool("test.bool.true").unwrap());
    assert_eq!(gguf.get_str("test.string.empty").unwrap(), "");
    assert_eq!(gguf.get_str_array("test.arr.string").unwrap()[3], "🦀🚀");
    let nested = gguf.get_array("test.arr.nested").unwrap();
    assert_eq!((nested.elem_type(), nested.len()), (ValueType::Array, 4));
    let inner: Vec<Value<'_>> = nested.iter().collect();
    assert_eq!(inner[1].as_array().unwrap().strings().unwrap().collect::<Vec<_>>(), ["ä", "b"]);
    assert_eq!(gguf.tensor("bf16.mat").unwrap().dtype, DType::BF16);
}

// ------------------------------------------------------------------------------------------------
// Our writer
// ------------------------------------------------------------------------------------------------

/// Deterministic pseudo-random bytes (splitmix64 seeded by an FNV-1a hash of `label`).
fn prng_bytes(label: &str, n: usize) -> Vec<u8> {
    let mut state =
        label.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(n);
    out
}

fn arr_of(elem_type: ValueType, values: Vec<MetadataValue>) -> MetadataValue {
    MetadataValue::Array { elem_type, values }
}

/// The sample file's metadata: every value type, extremes, float specials, non-ASCII strings,
/// empty and nested arrays.
fn sample_metadata() -> Vec<(String, MetadataValue)> {
    use MetadataValue as M;
    let kv = |k: &str, v: MetadataValue| (k.to_string(), v);
    vec![
        kv("general.architecture", M::from("minerva-test")),
        kv("general.alignment", M::U32(64)),
        kv("test.u8", M::U8(u8::MAX)),
        kv("test.i8", M::I8(i8::MIN)),
        kv("test.u16", M::U16(u16::MAX)),
        kv("test.i16", M::I16(i16::MIN)),
        kv("test.u32", M::U32(u32::MAX)),
        kv("test.i32", M::I32(i32::MIN)),
        kv("test.f32", M::F32(std::f32::consts::PI)),
        kv("test.f32.neg_zero", M::F32(-0.0)),
        kv("test.f32.neg_inf", M::F32(f32::NEG_INFINITY)),
        kv("test.f32.nan_payload", M::F32(f32::from_bits(0x7fc0_1234))),
        kv("test.f32.signalling_nan", M::F32(f32::from_bits(0xff80_0001))),
        kv("test.f32.subnormal", M::F32(f32::from_bits(1))),
        kv("test.bool.true", M::Bool(true)),
        kv("test.bool.false", M::Bool(false)),
        kv("test.string", M::from("Minerva – naïve café, 日本語, Ελληνικά, 🦀👩‍💻")),
        kv("test.string.empty", M::from("")),
        kv("test.string.escapes", M::from("tab\tnewline\nquote\"backslash\\nul\0end")),
        kv("test.u64", M::U64(u64::MAX)),
        kv("test.i64", M::I64(i64::MIN)),
        kv("test.f64", M::F64(std::f64::consts::E)),
        kv("test.f64.nan_payload", M::F64(f64::from_bits(0x7ff8_0000_dead_beef))),
        kv("test.f64.max", M::F64(f64::MAX)),
        kv("test.arr.u8", arr_of(ValueType::U8, [0, 1, 127, 128, 255].map(M::U8).into())),
        kv("test.arr.i8", arr_of(ValueType::I8, [-128, -1, 0, 1, 127].map(M::I8).into())),
        kv("test.arr.u16", arr_of(ValueType::U16, [0, 1, u16::MAX].map(M::U16).into())),
        kv("test.arr.i16", arr_of(ValueType::I16, [i16::MIN, 0, i16::MAX].map(M::I16).into())),
        kv("test.arr.u32", arr_of(ValueType::U32, [0, 1, u32::MAX].map(M::U32).into())),
        kv("test.arr.i32", M::i32s([i32::MIN, -1, 0, i32::MAX])),
        kv("test.arr.f32", M::f32s([0.0, -0.0, 1.5, f32::INFINITY, f32::NAN, f32::from_bits(0x7f80_0001)])),
        kv("test.arr.bool", arr_of(ValueType::Bool, [true, false, true].map(M::Bool).into())),
        kv("test.arr.string", M::strings(["hello", "wörld", "日本語", "🦀🚀", "", "multi\nline", "ȧ̃"])),
        kv("test.arr.u64", arr_of(ValueType::U64, [0, 1, u64::MAX].map(M::U64).into())),
        kv("test.arr.i64", arr_of(ValueType::I64, [i64::MIN, -1, i64::MAX].map(M::I64).into())),
        kv(
            "test.arr.f64",
            arr_of(ValueType::F64, [0.1, -0.0, f64::NEG_INFINITY, f64::from_bits(1)].map(M::F64).into()),
        ),
        kv("test.arr.empty", arr_of(ValueType::U32, vec![])),
        kv(
            "test.arr.nested",
            arr_of(
                ValueType::Array,
                vec![
                    M::i32s([1, -2, 3]),
                    M::strings(["ä", "🦀"]),
                    M::f32s([]),
                    arr_of(
                        ValueType::Array,
                        vec![
                            arr_of(ValueType::Bool, vec![M::Bool(true)]),
                            arr_of(ValueType::U64, vec![M::U64(u64::MAX)]),
                        ],
                    ),
                ],
            ),
        ),
        kv("test.after_arrays", M::from("still in order")),
    ]
}

/// The sample file's tensors: (name, dtype, numpy shape); the bytes come from [`prng_bytes`].
const SAMPLE_TENSORS: &[(&str, DType, &[usize])] = &[
    ("f32.vec", DType::F32, &[7]),
    ("f32.4d", DType::F32, &[2, 3, 1, 5]),
    ("f16.mat", DType::F16, &[3, 8]),
    ("q8_0.mat", DType::Q8_0, &[2, 64]),
    ("q4_1.mat", DType::Q4_1, &[3, 32]),
    ("q4_1.3d", DType::Q4_1, &[2, 1, 64]),
    ("mxfp4.mat", DType::MXFP4, &[3, 64]),
    ("q6_k.mat", DType::Q6_K, &[2, 256]),
];

struct Sample {
    metadata: Vec<(String, MetadataValue)>,
    tensors: Vec<(&'static str, DType, Vec<usize>, Vec<u8>)>,
    header_len: usize,
    bytes: Vec<u8>,
}

fn build_sample() -> Sample {
    let metadata = sample_metadata();
    let mut w = GgufWriter::new();
    for (k, v) in &metadata {
        w.add_metadata(k.as_str(), v.clone()).unwrap();
    }
    let mut tensors = Vec::new();
    for &(name, dtype, shape) in SAMPLE_TENSORS {
        let n: usize = shape.iter().product();
        let len = n / dtype.block_elems() * dtype.block_bytes();
        let data = prng_bytes(name, len);
        w.add_tensor(name, dtype, shape, data.clone()).unwrap();
        tensors.push((name, dtype, shape.to_vec(), data));
    }
    let header_len = w.header_bytes().unwrap().len();
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    Sample { metadata, tensors, header_len, bytes }
}

fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()))
}

/// Builds the sample with our [`GgufWriter`], checks it is byte-identical to the committed
/// `fixtures/gguf/minerva_written.gguf`, and compares gguf-py's reading of that file
/// (`minerva_written.gguf-py.json`) with what was written.
///
/// With `MINERVA_BLESS=1` the test writes the committed file instead of comparing; then rerun
/// `python3 fixtures/gguf/make_gguf_py_fixtures.py` to refresh gguf-py's JSON.
#[test]
fn our_writer_output_matches_committed_and_gguf_py() {
    let sample = build_sample();
    let path = fixture("minerva_written.gguf");
    if std::env::var_os("MINERVA_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &sample.bytes).unwrap();
        eprintln!(
            "MINERVA_BLESS=1: wrote {} ({} bytes); now run python3 fixtures/gguf/make_gguf_py_fixtures.py",
            path.display(),
            sample.bytes.len()
        );
        return;
    }
    let committed = read_fixture("minerva_written.gguf");
    assert!(
        committed == sample.bytes,
        "the writer's output differs from the committed minerva_written.gguf ({} vs {} bytes, first \
         difference at byte {}); if the change is intended, regenerate with MINERVA_BLESS=1 and the \
         Python script (see this test's doc comment)",
        sample.bytes.len(),
        committed.len(),
        first_difference(&sample.bytes, &committed)
    );

    // Our reader gives back what was written.
    let gguf = Gguf::parse(committed).unwrap();
    let read: Vec<(String, MetadataValue)> =
        gguf.metadata().map(|(k, v)| (k.to_string(), v.to_owned_value())).collect();
    assert_eq!(read.len(), sample.metadata.len());
    for ((k, v), (rk, rv)) in sample.metadata.iter().zip(&read) {
        assert_eq!((k, value_json(v)), (rk, value_json(rv)), "our reader on our writer's {k}");
    }
    assert_eq!(gguf.data_offset(), sample.header_len);
    assert_eq!(gguf.alignment(), 64);

    // gguf-py's reading of the committed (= current) bytes agrees with what was written.
    let j = load_json("minerva_written.gguf-py.json");
    check_header(&j, &gguf, true);
    assert_eq!(j["version"], json!(3));
    assert_eq!(j["alignment"], json!(64));
    assert_eq!(j["data_offset"], json!(sample.header_len));
    let mut offset = 0u64;
    let tensors: Vec<TensorFacts<'_>> = sample
        .tensors
        .iter()
        .map(|(name, dtype, shape, data)| {
            let facts = TensorFacts {
                name,
                dtype: *dtype,
                shape: shape.clone(),
                offset,
                data_offset: sample.header_len,
                bytes: data,
            };
            offset = (offset + data.len() as u64).next_multiple_of(64);
            facts
        })
        .collect();
    check_full_dump(&j, &sample.metadata, &tensors);
}

// ------------------------------------------------------------------------------------------------
// The real model
// ------------------------------------------------------------------------------------------------

/// The little-endian encoding of a fixed-size value.
fn le_bytes(v: Value<'_>) -> Vec<u8> {
    match v {
        Value::U8(x) => vec![x],
        Value::I8(x) => x.to_le_bytes().to_vec(),
        Value::U16(x) => x.to_le_bytes().to_vec(),
        Value::I16(x) => x.to_le_bytes().to_vec(),
        Value::U32(x) => x.to_le_bytes().to_vec(),
        Value::I32(x) => x.to_le_bytes().to_vec(),
        Value::F32(x) => x.to_le_bytes().to_vec(),
        Value::Bool(x) => vec![u8::from(x)],
        Value::U64(x) => x.to_le_bytes().to_vec(),
        Value::I64(x) => x.to_le_bytes().to_vec(),
        Value::F64(x) => x.to_le_bytes().to_vec(),
        Value::String(_) | Value::Array(_) => panic!("not a fixed-size value: {v:?}"),
    }
}

/// A KV in the summary format of `smollm2_gguf_py.json`: scalars in full; arrays as element type,
/// length, first 5 items and a sha256 (of the strings joined by "\n", or of the little-endian
/// element bytes).
fn kv_summary_json(key: &str, v: Value<'_>) -> Json {
    let Value::Array(a) = v else {
        return json!({"key": key, "type": py_type(v.value_type()), "value": value_json(&v.to_owned_value())});
    };
    assert_ne!(a.elem_type(), ValueType::Array, "{key}: nested arrays are not summarised");
    let first: Vec<Json> = a.iter().take(5).map(|x| value_json(&x.to_owned_value())).collect();
    let hash = match a.strings() {
        Some(strings) => sha256_hex(strings.collect::<Vec<_>>().join("\n").as_bytes()),
        None => sha256_hex(&a.iter().flat_map(le_bytes).collect::<Vec<u8>>()),
    };
    json!({"key": key, "type": "ARRAY", "elem_type": py_type(a.elem_type()), "len": a.len(), "first": first, "sha256": hash})
}

/// A little-endian float32 `.npy` file (format 1.0–3.0): its shape and raw data bytes.
fn read_npy_f32(name: &str) -> (Vec<usize>, Vec<u8>) {
    let bytes = read_fixture(name);
    assert_eq!(&bytes[..6], b"\x93NUMPY", "{name}: not a .npy file");
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => (u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize, 12),
        v => panic!("{name}: unknown .npy version {v}"),
    };
    let header = std::str::from_utf8(&bytes[start..start + header_len]).unwrap();
    assert!(header.contains("'descr': '<f4'"), "{name}: not little-endian float32: {header}");
    assert!(header.contains("'fortran_order': False"), "{name}: {header}");
    let dims = header.split("'shape': (").nth(1).and_then(|s| s.split(')').next()).unwrap();
    let shape = dims.split(',').map(str::trim).filter(|d| !d.is_empty()).map(|d| d.parse().unwrap()).collect();
    (shape, bytes[start + header_len..].to_vec())
}

#[test]
fn real_model_matches_gguf_py() {
    let path = workspace_root().join("models").join(MODEL_FILE);
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask setup` to download it (this test never skips)",
        path.display()
    );
    let gguf = Gguf::open(&path).unwrap();
    let j = load_json("smollm2_gguf_py.json");
    check_header(&j, &gguf, false);
    assert_eq!(gguf.metadata_len(), 33, "KV count");
    assert_eq!(gguf.tensor_count(), 272, "tensor count");
    assert_eq!(gguf.architecture().unwrap(), "llama");
    assert_eq!(gguf.get_array("tokenizer.ggml.tokens").unwrap().len(), 49152);
    assert_eq!(gguf.alignment(), 32);

    for (i, ((key, value), theirs)) in gguf.metadata().zip(arr(&j, "kvs")).enumerate() {
        assert_eq!(kv_summary_json(key, value), *theirs, "KV #{i} ({key})");
    }
    for (i, (t, theirs)) in tensor_facts(&gguf).iter().zip(arr(&j, "tensors")).enumerate() {
        assert_eq!(t.to_json(false), *theirs, "tensor #{i} ({})", t.name);
    }

    // gguf-py's values of two F32 tensors, bit for bit.
    for (tensor, npy) in
        [("output_norm.weight", "smollm2_output_norm.npy"), ("blk.0.attn_norm.weight", "smollm2_blk0_attn_norm.npy")]
    {
        let view = gguf.tensor(tensor).unwrap();
        assert_eq!(view.dtype, DType::F32, "{tensor}");
        let (shape, data) = read_npy_f32(npy);
        assert_eq!(shape, view.shape, "{tensor}: shape");
        assert_eq!(data, view.bytes, "{tensor}: values");
    }
}
