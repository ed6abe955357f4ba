//! Builds a GGUF file from fuzzer-chosen metadata and tensors with `GgufWriter` (in one call, and
//! again streamed in fuzzer-chosen chunks), then reads it back: the two outputs must be identical
//! and the reader must return exactly what was written, or `NestingTooDeep` for arrays nested
//! beyond `MAX_ARRAY_DEPTH`. This reaches deep into valid files, where `gguf_reader`'s mutations
//! of raw bytes rarely stay.

#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use minerva_fuzz::{assert_same_content, same_value};
use minerva_gguf::{DType, Gguf, GgufError, GgufWriter, MAX_ARRAY_DEPTH, MAX_DIMS, MetadataValue, ValueType};

fn value_type(u: &mut Unstructured<'_>, allow_array: bool) -> Result<ValueType> {
    let top = if allow_array { 12 } else { 11 };
    let id = u.int_in_range(0..=top)?;
    // Skip the array tag (9) when arrays are not allowed.
    let id = if !allow_array && id >= 9 { id + 1 } else { id };
    Ok(ValueType::from_id(id).expect("ids 0..=12 are all defined"))
}

/// A value of type `ty`; `level` is the nesting level an array built here would have (1 at the
/// top). Arrays stop one level past the reader's limit, so both sides of it are exercised.
fn value(u: &mut Unstructured<'_>, ty: ValueType, level: usize) -> Result<MetadataValue> {
    use MetadataValue as M;
    Ok(match ty {
        ValueType::U8 => M::U8(u.arbitrary()?),
        ValueType::I8 => M::I8(u.arbitrary()?),
        ValueType::U16 => M::U16(u.arbitrary()?),
        ValueType::I16 => M::I16(u.arbitrary()?),
        ValueType::U32 => M::U32(u.arbitrary()?),
        ValueType::I32 => M::I32(u.arbitrary()?),
        ValueType::F32 => M::F32(u.arbitrary()?),
        ValueType::Bool => M::Bool(u.arbitrary()?),
        ValueType::String => M::String(u.arbitrary()?),
        ValueType::U64 => M::U64(u.arbitrary()?),
        ValueType::I64 => M::I64(u.arbitrary()?),
        ValueType::F64 => M::F64(u.arbitrary()?),
        ValueType::Array => {
            let elem_type = value_type(u, level <= MAX_ARRAY_DEPTH)?;
            let n = u.int_in_range(0..=6)?;
            let values = (0..n).map(|_| value(u, elem_type, level + 1)).collect::<Result<_>>()?;
            M::Array { elem_type, values }
        }
    })
}

/// Array nesting of `v`: 0 for a scalar, 1 + the deepest element for an array.
fn nesting(v: &MetadataValue) -> usize {
    match v {
        MetadataValue::Array { values, .. } => 1 + values.iter().map(nesting).max().unwrap_or(0),
        _ => 0,
    }
}

struct Tensor {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
}

fn tensor(u: &mut Unstructured<'_>) -> Result<Tensor> {
    let name = u.arbitrary()?;
    let dtypes: Vec<DType> = DType::all().filter(|d| d.ggml_id().is_some()).collect();
    let dtype = *u.choose(&dtypes)?;
    let n_dims = u.int_in_range(0..=MAX_DIMS)?;
    let mut shape: Vec<usize> = (0..n_dims).map(|_| u.int_in_range(0..=3)).collect::<Result<_>>()?;
    if let Some(row) = shape.last_mut() {
        *row = dtype.block_elems() * u.int_in_range(0..=3)?;
    } else if dtype.block_elems() != 1 {
        // A scalar of a block type is a partial block: the writer rightly refuses it.
        shape.push(dtype.block_elems());
    }
    let elements: usize = shape.iter().product();
    let len = elements / dtype.block_elems() * dtype.block_bytes();
    let mut data = u.bytes(len.min(u.len()))?.to_vec();
    data.resize(len, 0xa5);
    Ok(Tensor { name, dtype, shape, data })
}

fn write_streamed(w: &GgufWriter, u: &mut Unstructured<'_>, tensors: &[Tensor]) -> Vec<u8> {
    let mut out = w.write_header(Vec::new()).expect("header of a valid writer");
    let all: Vec<u8> = tensors.iter().flat_map(|t| t.data.iter().copied()).collect();
    let mut rest = all.as_slice();
    while !rest.is_empty() {
        let n = u.int_in_range(1..=rest.len()).unwrap_or(rest.len());
        out.write_chunk(&rest[..n]).expect("chunks of the declared data");
        rest = &rest[n..];
    }
    // Zero-byte tensors after the last byte are completed only by a (empty) write of their own.
    while out.next_tensor().is_some() {
        out.write_tensor(&[]).expect("only zero-byte tensors are left");
    }
    out.finish().expect("every tensor was written")
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let mut w = GgufWriter::new();
    let mut metadata: Vec<(String, MetadataValue)> = Vec::new();
    let mut tensors: Vec<Tensor> = Vec::new();

    if u.arbitrary::<bool>().unwrap_or(false) {
        let a = 1u32 << u.int_in_range(0..=8).unwrap_or(5);
        w.add_metadata("general.alignment", a).expect("a power-of-two u32 alignment");
        metadata.push(("general.alignment".into(), MetadataValue::U32(a)));
    }
    let n_kv = u.int_in_range(0..=8).unwrap_or(0);
    for _ in 0..n_kv {
        let Ok(key) = u.arbitrary::<String>() else { break };
        let Ok(ty) = value_type(&mut u, true) else { break };
        let Ok(v) = value(&mut u, ty, 1) else { break };
        match w.add_metadata(key.clone(), v.clone()) {
            Ok(()) => metadata.push((key, v)),
            Err(GgufError::DuplicateKey { .. }) => {}
            Err(GgufError::InvalidInput(_) | GgufError::BadAlignment { .. }) if key == "general.alignment" => {}
            Err(e) => panic!("add_metadata({key:?}) failed: {e}"),
        }
    }
    let n_tensors = u.int_in_range(0..=6).unwrap_or(0);
    for _ in 0..n_tensors {
        let Ok(t) = tensor(&mut u) else { break };
        match w.add_tensor(t.name.clone(), t.dtype, &t.shape, t.data.clone()) {
            Ok(()) => tensors.push(t),
            Err(GgufError::DuplicateTensor { .. }) => {}
            Err(e) => panic!("add_tensor({:?}, {}, {:?}) failed: {e}", t.name, t.dtype, t.shape),
        }
    }

    let mut bytes = Vec::new();
    w.write_to(&mut bytes).expect("writing to a Vec cannot fail");
    assert_eq!(w.file_len().expect("valid writer") as usize, bytes.len());
    assert_eq!(write_streamed(&w, &mut u, &tensors), bytes, "streamed output differs from write_to");

    let too_deep = metadata.iter().find(|(_, v)| nesting(v) > MAX_ARRAY_DEPTH);
    let gguf = match (Gguf::parse(bytes.as_slice()), too_deep) {
        (Err(GgufError::NestingTooDeep { key, max }), Some((deep, _))) => {
            assert_eq!((&key, max), (deep, MAX_ARRAY_DEPTH));
            return;
        }
        (Ok(gguf), None) => gguf,
        (result, deep) => panic!("parse gave {result:?}; arrays too deep under {deep:?}"),
    };

    assert_eq!(gguf.version(), 3);
    assert_eq!(gguf.data_offset(), w.header_bytes().expect("valid writer").len());
    assert_eq!(gguf.metadata_len(), metadata.len());
    for ((key, value), (want_key, want)) in gguf.metadata().zip(&metadata) {
        assert_eq!(key, want_key);
        assert!(same_value(&value.to_owned_value(), want), "{key:?}: read {value:?}, wrote {want:?}");
    }
    assert_eq!(gguf.tensor_count(), tensors.len());
    for (view, want) in gguf.tensors().zip(&tensors) {
        assert_eq!((view.name, view.dtype, view.shape), (want.name.as_str(), want.dtype, want.shape.as_slice()));
        assert!(view.bytes == want.data.as_slice(), "bytes of {:?} changed", want.name);
    }
    // And a second generation is the same file.
    let again = minerva_fuzz::rebuild(&gguf).expect("small alignment and size");
    let mut bytes2 = Vec::new();
    again.write_to(&mut bytes2).expect("writing to a Vec cannot fail");
    assert!(bytes2 == bytes, "rewriting what was read changed the file");
    assert_same_content(&gguf, &Gguf::parse(bytes2).expect("parses"));
});
