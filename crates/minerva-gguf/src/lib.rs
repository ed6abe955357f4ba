//! A GGUF reader and writer.
//!
//! * **Zero-copy**: [`Gguf::open`] memory-maps a file and parses its header, metadata and tensor
//!   table; tensors are `&[u8]` slices of the map ([`minerva_core::TensorView`]) paged in on first
//!   use. [`Gguf::parse`] does the same over any byte container (`&[u8]`, `Vec<u8>`).
//! * **Validated**: truncation, absurd counts, invalid UTF-8, unknown types, misaligned,
//!   overlapping or out-of-bounds tensors and shape overflows are [`GgufError`]s carrying the byte
//!   offset, key or tensor name. Nothing is allocated on the strength of a count the file cannot
//!   hold. The reader is fuzzed (`fuzz/` at the workspace root).
//! * **Lazy arrays**: a tokenizer's 200 000 strings are validated once and decoded only when read.
//! * **Complete type table**: every GGML type, quantized or not, comes from
//!   [`minerva_core::DTYPE_TABLE`]; a type the kernels cannot run is still listed.
//! * [`GgufWriter`] writes v3 files, in memory or streaming tensor data in bounded memory.
//!
//! ```no_run
//! use minerva_gguf::Gguf;
//!
//! let gguf = Gguf::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! println!("{} layers", gguf.get_u64(&gguf.arch_key("block_count")?)?);
//! for t in gguf.tensors() {
//!     println!("{} {} {:?} {} bytes", t.name, t.dtype, t.shape, t.bytes.len());
//! }
//! # Ok::<(), minerva_gguf::GgufError>(())
//! ```

mod error;
mod reader;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use memmap2::Mmap;
pub use minerva_core::{DType, TensorView};
pub use reader::{Backing, DEFAULT_ALIGNMENT, GGUF_MAGIC, Gguf, MAX_ARRAY_DEPTH, MAX_DIMS, TensorInfo};
pub use value::{ArrayIter, ArrayValue, MetadataValue, Value, ValueType};
pub use writer::{GgufWriter, TensorDataWriter, WRITE_VERSION};

/// The README's example, compiled (and, unless marked `no_run`, run) as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
