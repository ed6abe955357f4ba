//! A zero-copy SafeTensors checkpoint reader.
//!
//! [`Checkpoint::open`] takes a `.safetensors` file, a `model.safetensors.index.json`, or a model
//! directory (index, `model.safetensors`, or `-0000i-of-0000N` shards without an index). Every shard
//! is memory-mapped and only its header is parsed; each tensor is a [`minerva_core::TensorView`]
//! borrowing the map (dtype from the core table, numpy-order shape).
//!
//! Headers are validated completely at open time, with errors naming the file and tensor
//! ([`SafetensorsError`]): header length past the end of the file, malformed JSON, unknown dtypes,
//! offsets out of range, overlapping tensors, gaps or trailing bytes, dtype × shape ≠ byte length,
//! shards the index names but that are missing, tensors missing from their shard or present twice.
//! The header is parsed here (serde_json) rather than by the official `safetensors` crate, whose
//! errors do not name the offending tensor; the official crate is the tests' oracle instead: every
//! malformed file the tests build must be rejected by both readers, and the dtype vocabulary is
//! checked against its `Dtype`. The rules are the official ones (tensors tile the data section).
//!
//! Quantized checkpoints are also seen as [`LogicalTensor`]s with their true shape: HF GPT-OSS MXFP4
//! `_blocks`/`_scales` pairs and MLX affine / mxfp4 `weight`/`scales`(/`biases`) triples, with bit
//! widths and group sizes from `config.json`'s `quantization` section (per-module overrides
//! included). Dequantization belongs to `minerva-quant`.

mod checkpoint;
mod error;
mod logical;
mod shard;
mod writer;

pub use checkpoint::{Checkpoint, INDEX_FILE, Tensor};
pub use error::{Result, SafetensorsError};
pub use logical::{Encoding, LogicalTensor};
pub use writer::{SafetensorsWriter, TensorDataWriter};

/// The README's example, compiled (and, unless marked `no_run`, run) as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
