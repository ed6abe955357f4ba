//! The crate's one error type.

use std::path::PathBuf;

use minerva_core::{DType, ShapeError};

use crate::ValueType;

/// Everything that can be wrong with a GGUF file or a request made of it.
///
/// Variants carry the byte offset, metadata key or tensor name they concern, so the message alone
/// locates the problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Writing failed.
    #[error("write failed: {0}")]
    Write(#[from] std::io::Error),
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The first (up to) four bytes.
        found: Vec<u8>,
    },
    /// A version this reader does not handle.
    #[error("unsupported GGUF version {version} (this reader handles v2 and v3{hint})")]
    UnsupportedVersion {
        /// The version field as read (little-endian).
        version: u32,
        /// Extra advice, e.g. for v1.
        hint: &'static str,
    },
    /// The file is big-endian.
    #[error("big-endian GGUF (version {version} byte-swapped) is not supported; convert it to little-endian")]
    BigEndian {
        /// The version after swapping bytes.
        version: u32,
    },
    /// The file ends in the middle of something.
    #[error("truncated file: {what} at byte {offset} needs {needed} bytes but only {available} remain")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// A count (keys, tensors, array elements, string bytes) that the file cannot possibly hold.
    #[error("{what} count {count} at byte {offset} cannot fit in the {available} bytes left")]
    CountTooLarge {
        /// What is counted.
        what: &'static str,
        /// The count as read.
        count: u64,
        /// Where it was read.
        offset: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// A string that is not UTF-8.
    #[error("{what} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// What the string is (key, value, tensor name).
        what: &'static str,
        /// Where its bytes start.
        offset: u64,
    },
    /// A metadata value type id outside 0..=12.
    #[error("metadata key {key:?}: unknown value type {type_id} at byte {offset}")]
    UnknownValueType {
        /// The key.
        key: String,
        /// The type id as read.
        type_id: u32,
        /// Where it was read.
        offset: u64,
    },
    /// Arrays nested deeper than this reader allows.
    #[error("metadata key {key:?}: arrays nested deeper than {max} levels")]
    NestingTooDeep {
        /// The key.
        key: String,
        /// The limit.
        max: usize,
    },
    /// The same metadata key twice.
    #[error("metadata key {key:?} appears twice")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A key that is needed is absent.
    #[error("metadata key {key:?} is missing")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A key holds another type than the one asked for.
    #[error("metadata key {key:?} is {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// What the caller wanted.
        expected: &'static str,
        /// What the file holds.
        found: String,
    },
    /// `general.alignment` is zero, not a power of two, or not a u32.
    #[error("general.alignment = {value} is not a power of two")]
    BadAlignment {
        /// The value as read.
        value: u64,
    },
    /// A tensor with more dimensions than ggml supports.
    #[error("tensor {tensor:?}: {n_dims} dimensions (at most {max} allowed)")]
    TooManyDims {
        /// The tensor.
        tensor: String,
        /// Its dimension count.
        n_dims: u32,
        /// The limit.
        max: usize,
    },
    /// A `ggml_type` id the dtype table does not know.
    #[error("tensor {tensor:?}: unknown ggml type id {type_id}")]
    UnknownGgmlType {
        /// The tensor.
        tensor: String,
        /// The id as read.
        type_id: u32,
    },
    /// A shape that overflows or does not fill whole blocks.
    #[error("tensor {tensor:?}: {source}")]
    Shape {
        /// The tensor.
        tensor: String,
        /// The shape problem.
        source: ShapeError,
    },
    /// A tensor offset that is not a multiple of the alignment.
    #[error("tensor {tensor:?}: offset {offset} is not a multiple of the alignment {alignment}")]
    Misaligned {
        /// The tensor.
        tensor: String,
        /// Its offset within the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor whose bytes extend past the end of the file.
    #[error("tensor {tensor:?}: bytes {start}..{end} lie outside the file ({file_len} bytes)")]
    OutOfBounds {
        /// The tensor.
        tensor: String,
        /// Absolute start.
        start: u64,
        /// Absolute end.
        end: u64,
        /// The file's length.
        file_len: u64,
    },
    /// Two tensors share bytes.
    #[error("tensor {tensor:?} overlaps tensor {other:?}")]
    Overlap {
        /// The later tensor.
        tensor: String,
        /// The one it overlaps.
        other: String,
    },
    /// The same tensor name twice.
    #[error("tensor {tensor:?} appears twice")]
    DuplicateTensor {
        /// The name.
        tensor: String,
    },
    /// A tensor that is not in the file.
    #[error("no tensor named {tensor:?}")]
    TensorNotFound {
        /// The name asked for.
        tensor: String,
    },
    /// A dtype that cannot be used for the operation asked.
    #[error("tensor {tensor:?}: {dtype} is not supported for {operation}")]
    UnsupportedDType {
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: DType,
        /// What was attempted.
        operation: &'static str,
    },
    /// The writer was given something GGUF cannot store.
    #[error("cannot write: {0}")]
    InvalidInput(String),
    /// An array whose elements are not all of one type.
    #[error("array elements must share one type: found {first:?} and {other:?}")]
    MixedArray {
        /// The first element's type.
        first: ValueType,
        /// A different one.
        other: ValueType,
    },
}

/// Shorthand for this crate's results.
pub type Result<T, E = GgufError> = std::result::Result<T, E>;
