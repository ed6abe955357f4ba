//! What the test binaries of this crate share: the repository root and the real models' tokenizers.

#![allow(dead_code)]

use std::path::PathBuf;

use minerva_generate::Tokenizer;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tokenizer of a GGUF file under the repository root (`models/…` are fetched by
/// `cargo xtask setup`).
pub fn tokenizer_from_gguf(path: &str) -> Tokenizer {
    let path = root().join(path);
    assert!(path.exists(), "{} is missing: run `cargo xtask setup` (this test never skips)", path.display());
    Tokenizer::from_gguf(&minerva_gguf::Gguf::open(path).unwrap()).unwrap()
}
