//! The crate's one error type.

use std::path::PathBuf;

use minerva_core::{DType, ShapeError};

/// Everything that can be wrong with a SafeTensors checkpoint.
///
/// Variants carry the file and the tensor name (or byte offset) they concern, so the message alone
/// locates the problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SafetensorsError {
    /// A file could not be opened, mapped, read or listed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A directory holds no `.safetensors` file and no shard index.
    #[error("{dir}: no .safetensors file or model.safetensors.index.json")]
    NoSafetensors {
        /// The directory.
        dir: PathBuf,
    },
    /// The file is shorter than the 8-byte header length.
    #[error("{file}: {len} bytes is too short for a SafeTensors header length (8 bytes)")]
    TooShort {
        /// The file.
        file: PathBuf,
        /// Its length.
        len: u64,
    },
    /// The declared header length runs past the end of the file.
    #[error("{file}: header length {header_len} exceeds the {available} bytes after the length field")]
    HeaderTooLarge {
        /// The file.
        file: PathBuf,
        /// The declared length (first 8 bytes, little-endian).
        header_len: u64,
        /// Bytes the file has after the length field.
        available: u64,
    },
    /// The header is not UTF-8.
    #[error("{file}: header is not valid UTF-8 (bad byte at file offset {offset})")]
    HeaderNotUtf8 {
        /// The file.
        file: PathBuf,
        /// File offset of the first invalid byte.
        offset: u64,
    },
    /// The header is not a JSON object.
    #[error("{file}: malformed header JSON: {source}")]
    MalformedHeader {
        /// The file.
        file: PathBuf,
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// A header entry is not `{dtype, shape, data_offsets}` (or `__metadata__` is not string → string).
    #[error("{file}: malformed header entry {name:?}: {source}")]
    MalformedEntry {
        /// The file.
        file: PathBuf,
        /// The tensor name (or `__metadata__`).
        name: String,
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// A dtype string the core dtype table does not know.
    #[error("{file}: tensor {name:?} has unknown dtype {dtype:?}")]
    UnknownDType {
        /// The file.
        file: PathBuf,
        /// The tensor.
        name: String,
        /// The dtype string as written.
        dtype: String,
    },
    /// A shape whose size overflows or does not fill whole bytes (sub-byte dtypes).
    #[error("{file}: tensor {name:?}: {source}")]
    Shape {
        /// The file.
        file: PathBuf,
        /// The tensor.
        name: String,
        /// The size problem.
        source: ShapeError,
    },
    /// `data_offsets` run backwards or past the end of the data section.
    #[error("{file}: tensor {name:?} data_offsets [{begin}, {end}) are outside the {data_len}-byte data section")]
    OffsetsOutOfRange {
        /// The file.
        file: PathBuf,
        /// The tensor.
        name: String,
        /// Start, relative to the data section.
        begin: u64,
        /// End (exclusive).
        end: u64,
        /// Size of the data section.
        data_len: u64,
    },
    /// dtype × shape does not match the byte range.
    #[error("{file}: tensor {name:?} is {dtype} {shape:?} = {expected} bytes but data_offsets span {actual}")]
    ByteLength {
        /// The file.
        file: PathBuf,
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: DType,
        /// Its shape.
        shape: Vec<usize>,
        /// Bytes dtype × shape needs.
        expected: u64,
        /// Bytes the offsets span.
        actual: u64,
    },
    /// Two tensors share bytes.
    #[error("{file}: tensors {first:?} and {second:?} overlap at data offset {offset}")]
    Overlap {
        /// The file.
        file: PathBuf,
        /// The tensor that starts first.
        first: String,
        /// The tensor that starts inside it.
        second: String,
        /// Where `second` starts (relative to the data section).
        offset: u64,
    },
    /// Unused bytes between tensors (or before the first one).
    #[error("{file}: {gap} unused bytes before tensor {name:?} at data offset {offset}")]
    Gap {
        /// The file.
        file: PathBuf,
        /// The tensor after the gap.
        name: String,
        /// Where it starts (relative to the data section).
        offset: u64,
        /// Length of the gap.
        gap: u64,
    },
    /// Bytes after the last tensor.
    #[error("{file}: {trailing} bytes after the last tensor's data (data ends at {end} of {data_len})")]
    TrailingBytes {
        /// The file.
        file: PathBuf,
        /// End of the last tensor (relative to the data section).
        end: u64,
        /// Size of the data section.
        data_len: u64,
        /// `data_len - end`.
        trailing: u64,
    },
    /// `model.safetensors.index.json` is not `{weight_map: {tensor: file}}`.
    #[error("{index}: malformed shard index: {source}")]
    MalformedIndex {
        /// The index file.
        index: PathBuf,
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// The index names a shard that is not a plain file name (path separators, `..`, empty).
    #[error("{index}: shard name {shard:?} is not a plain file name")]
    InvalidShardName {
        /// The index file.
        index: PathBuf,
        /// The name as written.
        shard: String,
    },
    /// A shard file named by the index or by the `-0000i-of-0000N` sequence does not exist.
    #[error("shard {shard} is missing (named by {named_by})")]
    MissingShard {
        /// The expected shard path.
        shard: PathBuf,
        /// The index file, or the sibling shard whose name implies it.
        named_by: PathBuf,
    },
    /// The index says a tensor lives in a shard that does not have it.
    #[error("{index}: tensor {name:?} is mapped to {shard} but that shard has no such tensor")]
    TensorNotInShard {
        /// The index file.
        index: PathBuf,
        /// The tensor.
        name: String,
        /// The shard it is mapped to.
        shard: PathBuf,
    },
    /// The same tensor name appears in two shards.
    #[error("tensor {name:?} appears in both {first} and {second}")]
    DuplicateTensor {
        /// The tensor.
        name: String,
        /// The first shard holding it.
        first: PathBuf,
        /// The second.
        second: PathBuf,
    },
    /// `config.json`, `generation_config.json` or `tokenizer_config.json` is not JSON.
    #[error("{path}: malformed JSON: {source}")]
    MalformedConfig {
        /// The file.
        path: PathBuf,
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// A quantized tensor lacks a component (`X_blocks` without `X_scales`, affine `m.biases`, …).
    #[error("quantized tensor {name:?} ({kind}) has no {missing:?}")]
    MissingComponent {
        /// The logical tensor.
        name: String,
        /// Its encoding.
        kind: &'static str,
        /// The component tensor that is absent.
        missing: String,
    },
    /// A component has the wrong dtype.
    #[error("quantized tensor {name:?} ({kind}): component {component:?} is {found}, expected {expected}")]
    ComponentDType {
        /// The logical tensor.
        name: String,
        /// Its encoding.
        kind: &'static str,
        /// The component tensor.
        component: String,
        /// Its dtype.
        found: DType,
        /// What the encoding requires.
        expected: &'static str,
    },
    /// A component's shape does not fit the others (or the bit width / group size).
    #[error("quantized tensor {name:?} ({kind}): component {component:?} has shape {found:?}, expected {expected}")]
    ComponentShape {
        /// The logical tensor.
        name: String,
        /// Its encoding.
        kind: &'static str,
        /// The component tensor.
        component: String,
        /// Its shape.
        found: Vec<usize>,
        /// What the encoding requires, in words.
        expected: String,
    },
    /// `config.json`'s `quantization` section is unusable for a module.
    #[error("config.json quantization for {module:?}: {reason}")]
    QuantConfig {
        /// The module path (`""` for the top-level defaults).
        module: String,
        /// What is wrong.
        reason: String,
    },
    /// [`crate::SafetensorsWriter`] was given something a SafeTensors file cannot hold, or its
    /// tensor data did not match what was declared.
    #[error("writing SafeTensors: tensor {name:?}: {reason}")]
    Write {
        /// The tensor concerned (`""` for the file as a whole).
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Writing the output failed.
    #[error("writing SafeTensors: {0}")]
    WriteIo(#[from] std::io::Error),
}

/// Shorthand for results of this crate.
pub type Result<T, E = SafetensorsError> = std::result::Result<T, E>;
