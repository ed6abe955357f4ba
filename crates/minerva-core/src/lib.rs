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

/// `v`'s allocation, emptied, as a vector of another item type of the same size and alignment:
/// how a vector of items that borrow one call's data (their lifetime ends with the call) is kept
/// for the next call in safe code, so that a forward step's task lists allocate nothing once warm.
///
/// It rests on `Vec`'s in-place collection, an optimization rather than a promise: where it is
/// not applied the result is a new, empty vector (an allocation later, as without this), never a
/// wrong one. minerva-model's `tests/allocations.rs` counts a decode step's allocations.
///
/// ```
/// let names: Vec<&str> = vec!["a", "b"];
/// let capacity = names.capacity();
/// let kept: Vec<&'static str> = minerva_core::recycle_vec(names);
/// assert!(kept.is_empty());
/// assert_eq!(kept.capacity(), capacity);
/// ```
pub fn recycle_vec<A, B>(mut v: Vec<A>) -> Vec<B> {
    v.clear();
    v.into_iter().map(|_| unreachable!("the vector was cleared")).collect()
}

/// The README's example, compiled (and, unless marked `no_run`, run) as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
