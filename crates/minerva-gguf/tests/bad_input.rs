//! Malformed files give the typed error that names the problem — never a panic or a huge
//! allocation. Files are built byte by byte, since the writer refuses to produce them.

use minerva_gguf::{Gguf, GgufError, GgufWriter, MetadataValue};

/// A hand-rolled GGUF encoder that will write anything, valid or not.
#[derive(Default)]
struct Raw {
    version: u32,
    kvs: Vec<u8>,
    kv_count: u64,
    infos: Vec<u8>,
    tensor_count: u64,
    data: Vec<u8>,
    alignment: usize,
}

fn string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

impl Raw {
    fn new() -> Raw {
        Raw { version: 3, alignment: 32, ..Raw::default() }
    }

    /// A KV whose value bytes (after the type tag) are given raw.
    fn kv(mut self, key: &[u8], type_id: u32, value: &[u8]) -> Raw {
        string(&mut self.kvs, key);
        self.kvs.extend_from_slice(&type_id.to_le_bytes());
        self.kvs.extend_from_slice(value);
        self.kv_count += 1;
        self
    }

    fn tensor(mut self, name: &[u8], ne: &[u64], type_id: u32, offset: u64) -> Raw {
        string(&mut self.infos, name);
        self.infos.extend_from_slice(&(ne.len() as u32).to_le_bytes());
        for d in ne {
            self.infos.extend_from_slice(&d.to_le_bytes());
        }
        self.infos.extend_from_slice(&type_id.to_le_bytes());
        self.infos.extend_from_slice(&offset.to_le_bytes());
        self.tensor_count += 1;
        self
    }

    fn data(mut self, n: usize) -> Raw {
        self.data = vec![0x5a; n];
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.tensor_count.to_le_bytes());
        out.extend_from_slice(&self.kv_count.to_le_bytes());
        out.extend_from_slice(&self.kvs);
        out.extend_from_slice(&self.infos);
        out.resize(out.len().next_multiple_of(self.alignment), 0);
        out.extend_from_slice(&self.data);
        out
    }

    fn parse(&self) -> Result<(), GgufError> {
        Gguf::parse(self.bytes()).map(|_| ())
    }
}

fn u32v(v: u32) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

#[test]
fn a_hand_built_file_is_valid() {
    // The builder itself must make valid files, or the failures below would prove nothing.
    let raw = Raw::new()
        .kv(b"general.architecture", 8, &[&5u64.to_le_bytes()[..], b"llama"].concat())
        .tensor(b"a", &[8], 0, 0)
        .tensor(b"b", &[32, 2], 8, 32)
        .data(32 + 68);
    let gguf = Gguf::parse(raw.bytes()).unwrap();
    assert_eq!(gguf.architecture().unwrap(), "llama");
    assert_eq!(gguf.tensor("b").unwrap().bytes.len(), 68);
}

#[test]
fn wrong_magic_and_empty_files() {
    assert!(matches!(Gguf::parse(&b""[..]), Err(GgufError::BadMagic { .. })));
    assert!(matches!(Gguf::parse(&b"GG"[..]), Err(GgufError::BadMagic { .. })));
    let mut bytes = Raw::new().bytes();
    bytes[..4].copy_from_slice(b"GGML");
    let err = Gguf::parse(bytes).unwrap_err();
    assert!(matches!(err, GgufError::BadMagic { .. }));
    assert!(err.to_string().contains("not a GGUF file"));
}

#[test]
fn versions_other_than_2_and_3_are_refused() {
    let mut raw = Raw::new();
    raw.version = 2;
    raw.parse().unwrap();
    raw.version = 1;
    let err = raw.parse().unwrap_err();
    assert!(matches!(err, GgufError::UnsupportedVersion { version: 1, .. }));
    assert!(err.to_string().contains("v1"), "{err}");
    raw.version = 4;
    assert!(matches!(raw.parse(), Err(GgufError::UnsupportedVersion { version: 4, .. })));
    raw.version = 3u32.swap_bytes();
    assert!(matches!(raw.parse(), Err(GgufError::BigEndian { version: 3 })));
}

#[test]
fn every_truncation_is_an_error() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    w.add_metadata("tokenizer.ggml.tokens", MetadataValue::strings(["a", "bb", "ccc"])).unwrap();
    w.add_metadata(
        "x.nested",
        MetadataValue::Array {
            elem_type: minerva_gguf::ValueType::Array,
            values: vec![MetadataValue::i32s([1, 2]), MetadataValue::f32s([0.5])],
        },
    )
    .unwrap();
    w.add_tensor("t", minerva_core::DType::Q8_0, &[2, 32], vec![1; 68]).unwrap();
    let mut full = Vec::new();
    w.write_to(&mut full).unwrap();
    Gguf::parse(&full[..]).unwrap();
    // Every prefix that cuts the header or the tensor's bytes must fail.
    let last_needed = Gguf::parse(&full[..]).unwrap().tensor_infos()[0].range.end;
    for len in 0..last_needed {
        let result = Gguf::parse(&full[..len]);
        assert!(result.is_err(), "prefix of {len} bytes parsed");
    }
}

#[test]
fn counts_larger_than_the_file_are_refused_before_allocating() {
    let mut bytes = Raw::new().bytes();
    bytes[16..24].copy_from_slice(&u64::MAX.to_le_bytes()); // metadata_kv_count
    assert!(matches!(Gguf::parse(bytes), Err(GgufError::CountTooLarge { what: "metadata key", .. })));

    let mut bytes = Raw::new().bytes();
    bytes[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes()); // tensor_count
    assert!(matches!(Gguf::parse(bytes), Err(GgufError::CountTooLarge { what: "tensor info", .. })));

    // A string claiming 2^60 bytes.
    let raw = Raw::new().kv(b"k", 8, &(1u64 << 60).to_le_bytes());
    assert!(matches!(raw.parse(), Err(GgufError::CountTooLarge { what: "string length", .. })));

    // An array of u64::MAX strings.
    let value = [u32v(8), u64::MAX.to_le_bytes().to_vec()].concat();
    let raw = Raw::new().kv(b"k", 9, &value);
    assert!(matches!(raw.parse(), Err(GgufError::CountTooLarge { what: "array element", .. })));

    // An array of 2^61 u64s: count × 8 overflows.
    let value = [u32v(10), (1u64 << 61).to_le_bytes().to_vec()].concat();
    assert!(matches!(Raw::new().kv(b"k", 9, &value).parse(), Err(GgufError::CountTooLarge { .. })));
}

#[test]
fn invalid_utf8_is_refused_with_its_offset() {
    let err = Raw::new().kv(b"bad\xff", 4, &u32v(1)).parse().unwrap_err();
    assert!(matches!(err, GgufError::InvalidUtf8 { what: "metadata key", offset: 32 }), "{err:?}");
    let value = [2u64.to_le_bytes().to_vec(), vec![0xc3, 0x28]].concat();
    assert!(matches!(Raw::new().kv(b"k", 8, &value).parse(), Err(GgufError::InvalidUtf8 { .. })));
    let err = Raw::new().tensor(b"\xfe", &[1], 0, 0).data(4).parse().unwrap_err();
    assert!(matches!(err, GgufError::InvalidUtf8 { what: "tensor name", .. }));
}

#[test]
fn unknown_types_are_refused() {
    assert!(matches!(Raw::new().kv(b"k", 13, &u32v(0)).parse(), Err(GgufError::UnknownValueType { type_id: 13, .. })));
    let value = [u32v(99), 1u64.to_le_bytes().to_vec()].concat();
    assert!(matches!(Raw::new().kv(b"k", 9, &value).parse(), Err(GgufError::UnknownValueType { type_id: 99, .. })));
    // ggml type 4 was removed from ggml; its size is unknown, so the tensor cannot be located.
    let err = Raw::new().tensor(b"w", &[32], 4, 0).data(64).parse().unwrap_err();
    assert!(matches!(err, GgufError::UnknownGgmlType { type_id: 4, .. }));
    assert!(err.to_string().contains("\"w\""));
}

#[test]
fn deep_nesting_is_refused_not_recursed() {
    // 10 000 nested one-element arrays: would blow the stack if followed.
    let mut value = Vec::new();
    for _ in 0..10_000 {
        value.extend(u32v(9));
        value.extend(1u64.to_le_bytes());
    }
    value.extend(u32v(4));
    value.extend(0u64.to_le_bytes());
    let raw = Raw::new().kv(b"deep", 9, &value);
    assert!(matches!(raw.parse(), Err(GgufError::NestingTooDeep { .. })));
}

#[test]
fn duplicates_are_refused() {
    let raw = Raw::new().kv(b"k", 4, &u32v(1)).kv(b"k", 4, &u32v(2));
    assert!(matches!(raw.parse(), Err(GgufError::DuplicateKey { .. })));
    let raw = Raw::new().tensor(b"t", &[8], 0, 0).tensor(b"t", &[8], 0, 32).data(64);
    assert!(matches!(raw.parse(), Err(GgufError::DuplicateTensor { .. })));
}

#[test]
fn bad_alignment_is_refused() {
    for bad in [0u32, 3, 48] {
        let raw = Raw::new().kv(b"general.alignment", 4, &u32v(bad));
        assert!(matches!(raw.parse(), Err(GgufError::BadAlignment { .. })), "alignment {bad}");
    }
    let raw = Raw::new().kv(b"general.alignment", 8, &[&1u64.to_le_bytes()[..], b"x"].concat());
    assert!(matches!(raw.parse(), Err(GgufError::WrongType { .. })));
}

#[test]
fn tensor_tables_that_lie_are_refused() {
    let too_many_dims = Raw::new().tensor(b"t", &[1, 1, 1, 1, 1], 0, 0).data(32);
    assert!(matches!(too_many_dims.parse(), Err(GgufError::TooManyDims { n_dims: 5, .. })));

    let overflow = Raw::new().tensor(b"t", &[u64::MAX / 2, 4], 0, 0);
    assert!(matches!(overflow.parse(), Err(GgufError::Shape { .. })));

    let partial_block = Raw::new().tensor(b"t", &[48], 8, 0).data(64);
    assert!(matches!(partial_block.parse(), Err(GgufError::Shape { .. })));

    let out_of_bounds = Raw::new().tensor(b"t", &[8], 0, 0).data(31);
    assert!(matches!(out_of_bounds.parse(), Err(GgufError::OutOfBounds { .. })));

    let offset_overflow = Raw::new().tensor(b"t", &[8], 0, u64::MAX - 31);
    assert!(matches!(offset_overflow.parse(), Err(GgufError::OutOfBounds { .. })));

    let misaligned = Raw::new().tensor(b"t", &[8], 0, 4).data(64);
    assert!(matches!(misaligned.parse(), Err(GgufError::Misaligned { offset: 4, alignment: 32, .. })));

    // a = 16 f32 = bytes 0..64, b = 8 f32 at 32..64: they share 32 bytes.
    let overlap = Raw::new().tensor(b"a", &[16], 0, 0).tensor(b"b", &[8], 0, 32).data(96);
    let err = overlap.parse().unwrap_err();
    assert!(matches!(&err, GgufError::Overlap { tensor, other } if tensor == "b" && other == "a"), "{err:?}");
    // Adjacent is fine.
    Raw::new().tensor(b"a", &[8], 0, 0).tensor(b"b", &[8], 0, 32).data(64).parse().unwrap();
}

#[test]
fn typed_access_errors_name_the_key() {
    let raw = Raw::new().kv(b"llama.block_count", 4, &u32v(30));
    let gguf = Gguf::parse(raw.bytes()).unwrap();
    let err = gguf.get_str("llama.block_count").unwrap_err();
    assert!(matches!(err, GgufError::WrongType { expected: "string", .. }));
    assert!(err.to_string().contains("llama.block_count"));
    assert!(matches!(gguf.get_u32("nope"), Err(GgufError::MissingKey { .. })));
    assert!(matches!(gguf.architecture(), Err(GgufError::MissingKey { .. })));
    assert!(matches!(gguf.tensor("x"), Err(GgufError::TensorNotFound { .. })));
    assert_eq!(gguf.get_u64("llama.block_count").unwrap(), 30);
}
