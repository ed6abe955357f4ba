//! Minerva's shared core: the facts every layer agrees on.
//!
//! * [`DType`] — every element type Minerva meets in a file (all GGML types, SafeTensors types), with
//!   its facts (file ids, block size, bytes per block) kept in **one table**, [`DTYPE_TABLE`].
//! * [`TensorView`] — a tensor as a format crate hands it to the kernels: name, dtype, numpy-order
//!   shape and a zero-copy byte slice borrowed from the file's memory map.
//!
//! This crate has no knowledge of any file format or kernel; the format crates (`minerva-gguf`,
//! `minerva-safetensors`) produce its types and the kernel crates consume them.

mod dtype;
mod tensor;

pub use dtype::{DTYPE_TABLE, DType, DTypeInfo};
pub use tensor::{ShapeError, TensorView, element_count};

/// The README's example, compiled (and, unless marked `no_run`, run) as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
