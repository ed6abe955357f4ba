//! Helpers shared by the fuzz targets: walking every value the reader hands out, comparing what
//! was read with what was written, and rebuilding a [`GgufWriter`] from a parsed file.

use minerva_gguf::{Gguf, GgufWriter, MetadataValue, Value};

/// Alignment above which a round trip is skipped: the writer pads the header (and every tensor)
/// to it, so a fuzzed `general.alignment = 2^31` would make the *writer* allocate gigabytes for
/// a file the reader legitimately accepted in a few bytes.
pub const MAX_ROUNDTRIP_ALIGNMENT: u64 = 1 << 16;
/// Largest file a round trip will write, for the same reason (many tensors × padding).
pub const MAX_ROUNDTRIP_LEN: u64 = 64 << 20;

/// Decodes every element of `v`, recursing into nested arrays, and checks that an array yields
/// exactly the number of elements it declares: the reader validated the bytes, so iteration must
/// neither stop early nor run over. Returns the number of values visited.
pub fn walk(v: Value<'_>) -> usize {
    let _ = v.value_type();
    let _ = v.type_description();
    let _ = (v.to_u64(), v.to_i64(), v.to_f64(), v.as_str());
    let Value::Array(a) = v else { return 1 };
    let mut n = 1;
    let mut seen = 0;
    for elem in a.iter() {
        assert_eq!(elem.value_type(), a.elem_type(), "array element of the wrong type");
        n += walk(elem);
        seen += 1;
    }
    assert_eq!(seen, a.len(), "array iteration yielded a different count than its length");
    assert_eq!(a.is_empty(), seen == 0);
    if let Some(strings) = a.strings() {
        assert_eq!(strings.count(), a.len(), "string array lost elements");
    }
    if let Some(f) = a.to_f32_vec() {
        assert_eq!(f.len(), a.len());
    }
    if let Some(i) = a.to_i32_vec() {
        assert_eq!(i.len(), a.len());
    }
    let _ = (a.to_i64_vec(), a.to_u64_vec(), format!("{a:?}"));
    n
}

/// Bit-exact equality (so NaN equals the same NaN, and -0.0 differs from 0.0).
pub fn same_value(a: &MetadataValue, b: &MetadataValue) -> bool {
    use MetadataValue as M;
    match (a, b) {
        (M::F32(x), M::F32(y)) => x.to_bits() == y.to_bits(),
        (M::F64(x), M::F64(y)) => x.to_bits() == y.to_bits(),
        (M::Array { elem_type: ta, values: va }, M::Array { elem_type: tb, values: vb }) => {
            ta == tb && va.len() == vb.len() && va.iter().zip(vb).all(|(x, y)| same_value(x, y))
        }
        (M::Array { .. }, _) | (_, M::Array { .. }) | (M::F32(_), _) | (M::F64(_), _) => false,
        _ => a == b,
    }
}

/// Rebuilds a writer holding `gguf`'s metadata and tensors, or `None` when the copy would be
/// unreasonably large to write (see [`MAX_ROUNDTRIP_ALIGNMENT`]).
pub fn rebuild<D: AsRef<[u8]>>(gguf: &Gguf<D>) -> Option<GgufWriter> {
    if gguf.alignment() > MAX_ROUNDTRIP_ALIGNMENT {
        return None;
    }
    let mut w = GgufWriter::new();
    for (key, value) in gguf.metadata() {
        // The reader accepts any integer type for the alignment; the writer insists on u32.
        let value = if key == "general.alignment" {
            MetadataValue::U32(u32::try_from(gguf.alignment()).ok()?)
        } else {
            value.to_owned_value()
        };
        w.add_metadata(key, value).expect("metadata that was read must be writable");
    }
    for t in gguf.tensors() {
        w.add_tensor(t.name, t.dtype, t.shape, t.bytes.to_vec()).expect("a tensor that was read must be writable");
    }
    (w.file_len().ok()? <= MAX_ROUNDTRIP_LEN).then_some(w)
}

/// Asserts that `b` holds the same metadata (in order, bit-exact) and tensors (names, dtypes,
/// shapes, bytes, in order) as `a`. Tensor offsets may differ: the writer packs tensors densely.
pub fn assert_same_content<A: AsRef<[u8]>, B: AsRef<[u8]>>(a: &Gguf<A>, b: &Gguf<B>) {
    assert_eq!(a.metadata_len(), b.metadata_len());
    for ((ka, va), (kb, vb)) in a.metadata().zip(b.metadata()) {
        assert_eq!(ka, kb);
        if ka == "general.alignment" {
            assert_eq!(va.to_u64(), vb.to_u64());
        } else {
            assert!(same_value(&va.to_owned_value(), &vb.to_owned_value()), "value of {ka:?} changed");
        }
    }
    assert_eq!(a.alignment(), b.alignment());
    assert_eq!(a.tensor_count(), b.tensor_count());
    for (ta, tb) in a.tensors().zip(b.tensors()) {
        assert_eq!((ta.name, ta.dtype, ta.shape), (tb.name, tb.dtype, tb.shape));
        assert!(ta.bytes == tb.bytes, "bytes of tensor {:?} changed", ta.name);
    }
}
