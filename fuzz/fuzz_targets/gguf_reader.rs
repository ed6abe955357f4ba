//! Parses arbitrary bytes as GGUF. Whatever the input, `Gguf::parse` must return (no panic, no
//! out-of-bounds read, no allocation the input cannot justify); when it returns `Ok`, every
//! accessor must work on the result and the file must survive a write/read round trip.

#![no_main]

use libfuzzer_sys::fuzz_target;
use minerva_fuzz::{assert_same_content, rebuild, walk};
use minerva_gguf::Gguf;

/// Keys the engine reads, so the typed getters also run on real key names.
const KEYS: &[&str] = &[
    "general.architecture",
    "general.alignment",
    "general.name",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "",
];
const ARCH_SUFFIXES: &[&str] = &["block_count", "context_length", "embedding_length", "attention.head_count"];

fuzz_target!(|data: &[u8]| {
    let gguf = match Gguf::parse(data) {
        Ok(gguf) => gguf,
        Err(e) => {
            // Messages are built from file contents (keys, names, offsets): format them too.
            let _ = (e.to_string(), format!("{e:?}"));
            return;
        }
    };
    let _ = format!("{gguf:?}");
    assert!(matches!(gguf.version(), 2 | 3));
    let alignment = gguf.alignment();
    assert!(alignment.is_power_of_two());
    assert_eq!(gguf.data_offset() as u64 % alignment, 0);
    assert_eq!(gguf.bytes().len(), data.len());

    // Metadata: every value, every array element, nested arrays included, and every typed getter
    // on every key (each either converts or reports `WrongType`).
    assert_eq!(gguf.metadata().len(), gguf.metadata_len());
    let mut keys = Vec::with_capacity(gguf.metadata_len());
    for (key, value) in gguf.metadata() {
        walk(value);
        let _ = value.to_owned_value();
        keys.push(key);
    }
    for key in keys.iter().copied().chain(KEYS.iter().copied()) {
        let present = gguf.get(key).is_some();
        assert_eq!(gguf.require(key).is_ok(), present);
        let _ = gguf.get_str(key).map(str::len);
        let _ = gguf.get_u64(key);
        let _ = gguf.get_u32(key);
        let _ = gguf.get_i64(key);
        let _ = gguf.get_f32(key);
        let _ = gguf.get_bool(key);
        if let Ok(a) = gguf.get_array(key) {
            walk(minerva_gguf::Value::Array(a));
        }
        if let Ok(strings) = gguf.get_str_array(key) {
            assert_eq!(Some(strings.len()), gguf.get_array(key).ok().map(|a| a.len()));
        }
        if let Err(e) = gguf.get_u64(key) {
            let _ = e.to_string();
        }
    }
    if gguf.architecture().is_ok() {
        for suffix in ARCH_SUFFIXES {
            let key = gguf.arch_key(suffix).expect("architecture is present");
            let _ = gguf.get_u64(&key);
            let _ = gguf.get_arch(suffix).expect("architecture is present");
        }
    } else {
        assert!(gguf.arch_key("block_count").is_err());
    }

    // Tensors: views, lookups by name, and the invariants parse promised.
    assert_eq!(gguf.tensors().len(), gguf.tensor_count());
    let mut total = 0usize;
    for (view, info) in gguf.tensors().zip(gguf.tensor_infos()) {
        assert_eq!(view.bytes.len(), info.byte_len());
        assert!(info.range.end <= data.len());
        assert_eq!(info.offset % alignment, 0);
        assert_eq!(view.element_count(), info.element_count);
        assert_eq!(view.shape.len(), info.ne.len());
        let _ = view.row_len();
        assert_eq!(gguf.tensor_info(view.name).expect("listed tensor must be found"), info);
        let again = gguf.tensor(view.name).expect("listed tensor must be found");
        assert!(std::ptr::eq(again.bytes, view.bytes));
        assert_eq!(gguf.tensor_bytes(info), view.bytes);
        total += view.bytes.len();
    }
    assert!(total <= data.len(), "tensors overlap: {total} bytes of tensors in a {}-byte file", data.len());
    assert!(gguf.tensor("\u{0}no such tensor").is_err() || gguf.tensor_info("\u{0}no such tensor").is_ok());

    // Round trip: what was read must be writable, and read back the same.
    if let Some(writer) = rebuild(&gguf) {
        let mut out = Vec::new();
        writer.write_to(&mut out).expect("writing to a Vec cannot fail");
        let back = Gguf::parse(out.as_slice()).expect("the writer's output must parse");
        assert_same_content(&gguf, &back);
    }
});
