//! Every file in `tests/fuzz_regressions/` gives the result stated for it here, without a panic.
//!
//! The directory holds the inputs the fuzzer (`fuzz/`, target `gguf_reader`) found to crash the
//! reader once, named `crash_*`, and hand-made malformed files (`fuzz/make_malformed.py`), one per
//! check of the reader. A file without an entry in [`EXPECTED`] fails the test, so a new crash
//! input cannot be dropped in without saying what it must now give.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use minerva_core::ShapeError;
use minerva_gguf::{Gguf, GgufError, MAX_ARRAY_DEPTH, Result, Value};

type Parsed<'a> = Result<Gguf<&'a [u8]>>;

/// Whether a parse result is the one expected of a file.
type Check = for<'a, 'b> fn(&'a Parsed<'b>) -> bool;

/// File name → what parsing it must give.
const EXPECTED: &[(&str, Check)] = &[
    // Found by the fuzzer (tmin-minimised). Tensor "\0GGUF", F32, ne = [0, 3.3e18, 2.3e11]: 0
    // elements, so it parsed, but `TensorView::element_count` multiplies outermost first and
    // overflowed (a panic with overflow checks, a wrong count without). Now a shape error.
    ("crash_zero_dim_hides_shape_overflow.gguf", |r| {
        matches!(
            r,
            Err(GgufError::Shape { source: ShapeError::Overflow { shape }, .. }) if shape.first() == Some(&0)
        )
    }),
    // Header.
    ("empty.gguf", |r| matches!(r, Err(GgufError::BadMagic { found }) if found.is_empty())),
    ("magic_only_3_bytes.gguf", |r| matches!(r, Err(GgufError::BadMagic { found }) if found == b"GGU")),
    ("bad_magic_ggml.gguf", |r| matches!(r, Err(GgufError::BadMagic { found }) if found == b"ggml")),
    ("version_1.gguf", |r| matches!(r, Err(GgufError::UnsupportedVersion { version: 1, hint }) if hint.contains("v1"))),
    ("version_4.gguf", |r| matches!(r, Err(GgufError::UnsupportedVersion { version: 4, .. }))),
    ("big_endian_v3.gguf", |r| matches!(r, Err(GgufError::BigEndian { version: 3 }))),
    ("truncated_header.gguf", |r| {
        matches!(r, Err(GgufError::Truncated { what: "metadata count", offset: 16, needed: 8, available: 3 }))
    }),
    // Counts that cannot fit in the bytes left.
    ("kv_count_u64_max.gguf", |r| {
        matches!(r, Err(GgufError::CountTooLarge { what: "metadata key", count: u64::MAX, offset: 16, .. }))
    }),
    ("tensor_count_u64_max.gguf", |r| {
        matches!(r, Err(GgufError::CountTooLarge { what: "tensor info", count: u64::MAX, offset: 8, .. }))
    }),
    ("key_len_u64_max.gguf", |r| {
        matches!(r, Err(GgufError::CountTooLarge { what: "string length", count: u64::MAX, offset: 24, .. }))
    }),
    ("string_value_len_past_end.gguf", |r| {
        matches!(r, Err(GgufError::CountTooLarge { what: "string length", count: 1000, available: 5, .. }))
    }),
    (
        "array_count_overflows_u64.gguf",
        |r| matches!(r, Err(GgufError::CountTooLarge { what: "array element", count, .. }) if *count == 1 << 61),
    ),
    ("string_array_cut_in_length.gguf", |r| {
        matches!(r, Err(GgufError::Truncated { what: "array string", needed: 8, available: 4, .. }))
    }),
    // A real model cut at 4 KiB: its token array claims 49 152 strings of at least 8 bytes each.
    ("smollm2_head4096.gguf", |r| {
        matches!(r, Err(GgufError::CountTooLarge { what: "array element", count: 49152, .. }))
    }),
    // Values.
    ("key_invalid_utf8.gguf", |r| matches!(r, Err(GgufError::InvalidUtf8 { what: "metadata key", offset: 32 }))),
    ("array_string_invalid_utf8.gguf", |r| matches!(r, Err(GgufError::InvalidUtf8 { what: "array string", .. }))),
    (
        "unknown_value_type_13.gguf",
        |r| matches!(r, Err(GgufError::UnknownValueType { key, type_id: 13, .. }) if key == "k"),
    ),
    (
        "unknown_array_elem_type.gguf",
        |r| matches!(r, Err(GgufError::UnknownValueType { key, type_id: u32::MAX, .. }) if key == "a"),
    ),
    ("scalar_value_truncated.gguf", |r| {
        matches!(r, Err(GgufError::Truncated { what: "metadata value", needed: 8, available: 3, .. }))
    }),
    ("arrays_nested_8_ok.gguf", |r| r.as_ref().is_ok_and(|g| nesting(g.get("deep")) == Some(MAX_ARRAY_DEPTH))),
    (
        "arrays_nested_9.gguf",
        |r| matches!(r, Err(GgufError::NestingTooDeep { key, max: MAX_ARRAY_DEPTH }) if key == "deep"),
    ),
    ("duplicate_key.gguf", |r| matches!(r, Err(GgufError::DuplicateKey { key }) if key == "k")),
    // Alignment.
    ("alignment_48.gguf", |r| matches!(r, Err(GgufError::BadAlignment { value: 48 }))),
    ("alignment_0.gguf", |r| matches!(r, Err(GgufError::BadAlignment { value: 0 }))),
    ("alignment_2_pow_32.gguf", |r| matches!(r, Err(GgufError::BadAlignment { value }) if *value == 1 << 32)),
    ("alignment_string.gguf", |r| {
        matches!(
            r,
            Err(GgufError::WrongType { key, found, .. }) if key == "general.alignment" && found == "string"
        )
    }),
    ("alignment_u8_64_ok.gguf", |r| {
        r.as_ref().is_ok_and(|g| g.alignment() == 64 && g.data_offset() == 128 && g.tensor("t").is_ok())
    }),
    // Tensor infos.
    ("tensor_5_dims.gguf", |r| matches!(r, Err(GgufError::TooManyDims { n_dims: 5, max: 4, .. }))),
    ("tensor_ggml_type_4.gguf", |r| matches!(r, Err(GgufError::UnknownGgmlType { type_id: 4, .. }))),
    ("tensor_name_invalid_utf8.gguf", |r| matches!(r, Err(GgufError::InvalidUtf8 { what: "tensor name", .. }))),
    ("tensor_q8_0_partial_block.gguf", |r| {
        matches!(r, Err(GgufError::Shape { source: ShapeError::PartialBlock { row_len: 48, block: 32, .. }, .. }))
    }),
    ("tensor_shape_overflow.gguf", |r| matches!(r, Err(GgufError::Shape { source: ShapeError::Overflow { .. }, .. }))),
    ("tensor_zero_dim_hides_overflow.gguf", |r| {
        matches!(
            r,
            Err(GgufError::Shape { tensor, source: ShapeError::Overflow { shape } })
                if tensor == "t" && shape == &[0, 1 << 32, 1 << 32]
        )
    }),
    ("tensor_misaligned.gguf", |r| matches!(r, Err(GgufError::Misaligned { offset: 4, alignment: 32, .. }))),
    ("tensor_past_end.gguf", |r| {
        matches!(
            r,
            Err(GgufError::OutOfBounds { start, end, file_len, .. }) if end - start == 32 && end > file_len
        )
    }),
    ("tensor_offset_overflow.gguf", |r| matches!(r, Err(GgufError::OutOfBounds { end: u64::MAX, .. }))),
    (
        "tensor_overlap.gguf",
        |r| matches!(r, Err(GgufError::Overlap { tensor, other }) if tensor == "b" && other == "a"),
    ),
    ("tensor_duplicate_name.gguf", |r| matches!(r, Err(GgufError::DuplicateTensor { tensor }) if tensor == "t")),
    ("tensor_table_truncated.gguf", |r| {
        matches!(r, Err(GgufError::Truncated { what: "tensor offset", needed: 8, available: 3, .. }))
    }),
    // Accepted edge cases.
    ("no_tensors_no_padding_ok.gguf", |r| {
        r.as_ref().is_ok_and(|g| g.tensor_count() == 0 && g.architecture().is_ok_and(|a| a == "llama"))
    }),
    ("version_2_ok.gguf", |r| {
        r.as_ref().is_ok_and(|g| g.version() == 2 && g.tensor("t").is_ok_and(|t| t.bytes.len() == 16))
    }),
    ("tensor_zero_size_ok.gguf", |r| {
        r.as_ref().is_ok_and(|g| {
            g.tensor("z").is_ok_and(|z| z.bytes.is_empty() && z.shape == [7, 0]) && g.tensor("t").is_ok()
        })
    }),
];

/// How deep `v`'s arrays nest (0 for a scalar), walking every element.
fn nesting(v: Option<Value<'_>>) -> Option<usize> {
    match v? {
        Value::Array(a) => Some(1 + a.iter().map(|e| nesting(Some(e)).unwrap_or(0)).max().unwrap_or(0)),
        _ => Some(0),
    }
}

/// Touches everything a parsed file hands out, as the fuzz target does.
fn exercise(g: &Gguf<&[u8]>) {
    for (key, value) in g.metadata() {
        let owned = value.to_owned_value();
        assert_eq!(owned.value_type(), value.value_type(), "{key}");
        if let Value::Array(a) = value {
            assert_eq!(a.iter().count(), a.len(), "{key}: array yields a different count than its length");
        }
    }
    for t in g.tensors() {
        let info = g.tensor_info(t.name).expect("a listed tensor is found by name");
        assert_eq!(t.bytes.len(), info.byte_len());
    }
}

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions")
}

#[test]
fn every_file_gives_its_expected_result() {
    let mut entries: Vec<_> = std::fs::read_dir(dir())
        .expect("tests/fuzz_regressions exists")
        .map(|e| e.expect("readable entry").path())
        .collect();
    entries.sort();
    assert!(!entries.is_empty());
    let mut failures = Vec::new();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).expect("UTF-8 file name").to_string();
        let bytes = std::fs::read(&path).expect("readable file");
        let Some((_, check)) = EXPECTED.iter().find(|(n, _)| *n == name) else {
            failures.push(format!("{name}: no entry in EXPECTED; say what it must give"));
            continue;
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let parsed = Gguf::parse(bytes.as_slice());
            match &parsed {
                Ok(g) => exercise(g),
                // The message is built from file contents: it must format too.
                Err(e) => assert!(!e.to_string().is_empty()),
            }
            (check(&parsed), format!("{parsed:?}"))
        }));
        match outcome {
            Ok((true, _)) => {}
            Ok((false, got)) => failures.push(format!("{name}: unexpected result {got}")),
            Err(_) => failures.push(format!("{name}: panicked")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_expectation_has_its_file() {
    for (name, _) in EXPECTED {
        assert!(dir().join(name).is_file(), "{name} is listed but missing from tests/fuzz_regressions");
    }
}

/// Cutting an accepted file anywhere before the end of its last tensor must give an error (the
/// header is cut, or a tensor no longer fits), never a panic.
#[test]
fn every_prefix_of_an_accepted_file_is_rejected() {
    for (name, _) in EXPECTED {
        let bytes = std::fs::read(dir().join(name)).expect("readable file");
        let Ok(g) = Gguf::parse(bytes.as_slice()) else { continue };
        let end = g.tensor_infos().iter().map(|t| t.range.end).max().unwrap_or(0);
        for len in 0..end {
            assert!(Gguf::parse(&bytes[..len]).is_err(), "{name} cut to {len} bytes still parses");
        }
    }
}
