//! Property tests: whatever `GgufWriter` writes, `Gguf::parse` reads back identically.

use minerva_core::DType;
use minerva_gguf::{Gguf, GgufWriter, MetadataValue, ValueType};
use proptest::prelude::*;

/// Floats without NaN, so `PartialEq` on the values is meaningful (NaN bits are covered by the
/// fixed-bytes test below).
fn f32_no_nan() -> impl Strategy<Value = f32> {
    prop::num::f32::NORMAL | prop::num::f32::SUBNORMAL | prop::num::f32::ZERO | prop::num::f32::INFINITE
}

fn f64_no_nan() -> impl Strategy<Value = f64> {
    prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO | prop::num::f64::INFINITE
}

fn scalar() -> impl Strategy<Value = MetadataValue> {
    prop_oneof![
        any::<u8>().prop_map(MetadataValue::U8),
        any::<i8>().prop_map(MetadataValue::I8),
        any::<u16>().prop_map(MetadataValue::U16),
        any::<i16>().prop_map(MetadataValue::I16),
        any::<u32>().prop_map(MetadataValue::U32),
        any::<i32>().prop_map(MetadataValue::I32),
        f32_no_nan().prop_map(MetadataValue::F32),
        any::<bool>().prop_map(MetadataValue::Bool),
        ".{0,24}".prop_map(MetadataValue::String),
        any::<u64>().prop_map(MetadataValue::U64),
        any::<i64>().prop_map(MetadataValue::I64),
        f64_no_nan().prop_map(MetadataValue::F64),
    ]
}

/// An array of one element type, built by taking a scalar's type and generating more of it.
fn array_of(elem: MetadataValue, len: usize) -> BoxedStrategy<MetadataValue> {
    let elem_type = elem.value_type();
    prop::collection::vec(scalar(), len * 4)
        .prop_map(move |pool| {
            let values: Vec<MetadataValue> = pool.into_iter().filter(|v| v.value_type() == elem_type).collect();
            MetadataValue::Array { elem_type, values }
        })
        .boxed()
}

fn value() -> impl Strategy<Value = MetadataValue> {
    let leaf = prop_oneof![
        3 => scalar(),
        1 => (scalar(), 0usize..20).prop_flat_map(|(e, n)| array_of(e, n)),
    ];
    // Nested arrays: arrays whose elements are arrays of one inner type.
    leaf.prop_recursive(2, 64, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(|items| {
            let arrays: Vec<MetadataValue> = items.into_iter().filter(|v| v.value_type() == ValueType::Array).collect();
            MetadataValue::Array { elem_type: ValueType::Array, values: arrays }
        })
    })
}

const TENSOR_TYPES: [DType; 8] =
    [DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_1, DType::Q4_K, DType::MXFP4, DType::I32];

fn tensor() -> impl Strategy<Value = (DType, Vec<usize>, u8)> {
    (0..TENSOR_TYPES.len(), prop::collection::vec(1usize..4, 0..3), 1usize..3, any::<u8>()).prop_map(
        |(t, mut outer, blocks, seed)| {
            let dtype = TENSOR_TYPES[t];
            outer.push(blocks * dtype.block_elems());
            (dtype, outer, seed)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn writer_then_reader_round_trips(
        metadata in prop::collection::btree_map("[a-z_]{1,12}(\\.[a-z_]{1,8}){0,2}", value(), 0..12),
        tensors in prop::collection::vec(tensor(), 0..6),
        alignment_pow in prop::option::of(3u32..8),
    ) {
        let mut w = GgufWriter::new();
        if let Some(p) = alignment_pow {
            w.add_metadata("general.alignment", MetadataValue::U32(1 << p)).unwrap();
        }
        for (k, v) in &metadata {
            if k != "general.alignment" {
                w.add_metadata(k.clone(), v.clone()).unwrap();
            }
        }
        let mut expected = Vec::new();
        for (i, (dtype, shape, seed)) in tensors.iter().enumerate() {
            let len = dtype.row_bytes(*shape.last().unwrap()).unwrap() * shape[..shape.len() - 1].iter().product::<usize>();
            let data: Vec<u8> = (0..len).map(|j| (j as u8).wrapping_mul(31).wrapping_add(*seed)).collect();
            let name = format!("blk.{i}.weight");
            w.add_tensor(name.clone(), *dtype, shape, data.clone()).unwrap();
            expected.push((name, *dtype, shape.clone(), data));
        }
        let mut bytes = Vec::new();
        w.write_to(&mut bytes).unwrap();

        let gguf = Gguf::parse(&bytes[..]).unwrap();
        prop_assert_eq!(gguf.version(), 3);
        let alignment = alignment_pow.map_or(32, |p| 1u64 << p);
        prop_assert_eq!(gguf.alignment(), alignment);
        prop_assert_eq!(gguf.data_offset() as u64 % alignment, 0);
        let read: Vec<(String, MetadataValue)> =
            gguf.metadata().map(|(k, v)| (k.to_string(), v.to_owned_value())).collect();
        let mut written: Vec<(String, MetadataValue)> = Vec::new();
        if let Some(p) = alignment_pow {
            written.push(("general.alignment".into(), MetadataValue::U32(1 << p)));
        }
        written.extend(metadata.into_iter().filter(|(k, _)| k != "general.alignment"));
        prop_assert_eq!(read, written);

        prop_assert_eq!(gguf.tensor_count(), expected.len());
        for (view, (name, dtype, shape, data)) in gguf.tensors().zip(&expected) {
            prop_assert_eq!(view.name, name.as_str());
            prop_assert_eq!(view.dtype, *dtype);
            prop_assert_eq!(view.shape, shape.as_slice());
            prop_assert_eq!(view.bytes, data.as_slice());
            prop_assert_eq!(gguf.tensor(name).unwrap().bytes, data.as_slice());
        }
        for info in gguf.tensor_infos() {
            prop_assert_eq!(info.offset % alignment, 0);
        }
        prop_assert_eq!(bytes.len() as u64, w.file_len().unwrap());
    }

    #[test]
    fn streaming_in_chunks_equals_writing_at_once(chunk in 1usize..100, n in 1usize..5) {
        let mut at_once = GgufWriter::new();
        let mut declared = GgufWriter::new();
        let mut all = Vec::new();
        for i in 0..n {
            let data: Vec<u8> = (0..34 * (i + 1)).map(|j| (j * 7 + i) as u8).collect();
            at_once.add_tensor(format!("t{i}"), DType::Q8_0, &[32 * (i + 1)], data.clone()).unwrap();
            declared.add_tensor_info(format!("t{i}"), DType::Q8_0, &[32 * (i + 1)]).unwrap();
            all.extend(data);
        }
        let mut a = Vec::new();
        at_once.write_to(&mut a).unwrap();
        let mut stream = declared.write_header(Vec::new()).unwrap();
        for piece in all.chunks(chunk) {
            stream.write_chunk(piece).unwrap();
        }
        prop_assert_eq!(stream.finish().unwrap(), a);
    }
}

#[test]
fn nan_payloads_survive_bit_for_bit() {
    let mut w = GgufWriter::new();
    let nan32 = f32::from_bits(0x7fc0_1234);
    let nan64 = f64::from_bits(0x7ff8_0000_dead_beef);
    w.add_metadata("a.f32", nan32).unwrap();
    w.add_metadata("a.f64", nan64).unwrap();
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    let gguf = Gguf::parse(bytes).unwrap();
    assert!(matches!(gguf.get("a.f32"), Some(minerva_gguf::Value::F32(v)) if v.to_bits() == 0x7fc0_1234));
    assert!(matches!(gguf.get("a.f64"), Some(minerva_gguf::Value::F64(v)) if v.to_bits() == nan64.to_bits()));
}

#[test]
fn writer_rejects_what_gguf_cannot_hold() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", 1u32).unwrap();
    assert!(matches!(w.add_metadata("k", 2u32), Err(minerva_gguf::GgufError::DuplicateKey { .. })));
    let mixed = MetadataValue::Array {
        elem_type: ValueType::U32,
        values: vec![MetadataValue::U32(1), MetadataValue::String("x".into())],
    };
    assert!(matches!(w.add_metadata("m", mixed), Err(minerva_gguf::GgufError::MixedArray { .. })));
    assert!(matches!(w.add_metadata("general.alignment", 24u32), Err(minerva_gguf::GgufError::BadAlignment { .. })));
    assert!(matches!(w.add_tensor_info("q", DType::Q4_0, &[2, 48]), Err(minerva_gguf::GgufError::Shape { .. })));
    assert!(matches!(w.add_tensor_info("u", DType::U16, &[4]), Err(minerva_gguf::GgufError::UnsupportedDType { .. })));
    assert!(matches!(w.add_tensor("f", DType::F32, &[4], vec![0; 15]), Err(minerva_gguf::GgufError::InvalidInput(_))));
    // The failed add left no trace: the name is free again.
    w.add_tensor("f", DType::F32, &[4], vec![0; 16]).unwrap();
    w.add_tensor_info("later", DType::F32, &[2]).unwrap();
    assert!(matches!(w.write_to(Vec::new()), Err(minerva_gguf::GgufError::InvalidInput(_))));
}

#[test]
fn zero_size_tensors_need_no_data_when_streaming() {
    let mut w = GgufWriter::new();
    w.add_tensor_info("empty_first", DType::F32, &[0, 4]).unwrap();
    w.add_tensor_info("data", DType::F32, &[2]).unwrap();
    w.add_tensor_info("empty_last", DType::Q8_0, &[3, 0]).unwrap();
    let mut stream = w.write_header(Vec::new()).unwrap();
    stream.write_chunk(&[1; 8]).unwrap();
    let bytes = stream.finish().unwrap();
    let gguf = Gguf::parse(bytes).unwrap();
    assert_eq!(gguf.tensor("data").unwrap().bytes, &[1; 8]);
    assert_eq!(gguf.tensor("empty_last").unwrap().shape, &[3, 0]);
    assert!(gguf.tensor("empty_first").unwrap().bytes.is_empty());
    // A shape whose non-zero dimensions overflow is refused even though it holds no elements.
    assert!(matches!(
        GgufWriter::new().add_tensor_info("bad", DType::F32, &[usize::MAX / 2, 4, 0]),
        Err(minerva_gguf::GgufError::Shape { .. })
    ));
}

/// `Gguf::release` on a mapped file: the pages of a tensor's range leave the process, and every
/// byte of the file reads the same afterwards (faulted in again); ranges past the end, empty or
/// inside one page are ignored. A `Vec`-backed file keeps its bytes (release does nothing).
#[test]
fn released_pages_read_the_same_bytes_again() {
    let data: Vec<u8> = (0..34 * 1928u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let mut w = GgufWriter::new();
    w.add_tensor("t", DType::Q8_0, &[32 * 1928], data).unwrap();
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let mapped = Gguf::open(&path).unwrap();
    assert_eq!(mapped.bytes(), &bytes[..]);
    let len = bytes.len();
    for range in [0..len, 100..9000, 4096..8192, len..len + 10_000, 5..6, 0..0] {
        mapped.release(range);
        assert!(mapped.bytes() == &bytes[..], "after releasing");
    }
    let owned = Gguf::parse(bytes.clone()).unwrap();
    owned.release(0..len);
    assert!(owned.bytes() == &bytes[..]);
}
