//! [`SafetensorsWriter`]: a `.safetensors` file written in bounded memory — the header first (every
//! tensor declared with its dtype and shape), then each tensor's bytes streamed in declaration
//! order, as [`minerva_gguf`'s writer](https://docs.rs/minerva-gguf) does for GGUF.
//!
//! ```text
//! ┌──────────┬──────────────────────────────────────────┬──────────────────────────────┐
//! │ u64 LE n │ JSON header, n bytes, space-padded to 8  │ tensor data, in header order │
//! └──────────┴──────────────────────────────────────────┴──────────────────────────────┘
//! ```
//!
//! The header lists tensors in declaration order with consecutive `data_offsets`, and
//! `__metadata__` holds string pairs (`{"format": "pt"}` as `save_pretrained` writes). Sizes are
//! computed with checked arithmetic; a tensor's data must be exactly its declared size.

use std::collections::BTreeMap;
use std::io::Write;

use minerva_core::DType;
use serde_json::{Map, Value, json};

use crate::error::{Result, SafetensorsError};

/// One declared tensor.
#[derive(Clone, Debug)]
struct Declared {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    byte_len: usize,
}

/// Collects a file's metadata and tensor declarations, then writes the header.
#[derive(Clone, Debug, Default)]
pub struct SafetensorsWriter {
    metadata: BTreeMap<String, String>,
    tensors: Vec<Declared>,
}

fn write_error(name: &str, reason: impl Into<String>) -> SafetensorsError {
    SafetensorsError::Write { name: name.to_string(), reason: reason.into() }
}

impl SafetensorsWriter {
    /// An empty file.
    pub fn new() -> SafetensorsWriter {
        SafetensorsWriter::default()
    }

    /// Sets a `__metadata__` entry.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.metadata.insert(key.into(), value.into());
    }

    /// Declares the next tensor. Its dtype must have a SafeTensors name and its byte size must not
    /// overflow; names must be unique.
    pub fn add_tensor(&mut self, name: impl Into<String>, dtype: DType, shape: &[usize]) -> Result<()> {
        let name = name.into();
        if name == "__metadata__" || self.tensors.iter().any(|t| t.name == name) {
            return Err(write_error(&name, "declared twice (or named __metadata__)"));
        }
        if dtype.info().safetensors_name.is_none() {
            return Err(write_error(&name, format!("{dtype} has no SafeTensors dtype")));
        }
        let elems = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        let byte_len = elems
            .and_then(|n| n.checked_mul(dtype.info().block_bytes as usize))
            .map(|b| b / dtype.info().block_elems as usize)
            .ok_or_else(|| write_error(&name, format!("shape {shape:?} overflows")))?;
        self.tensors.push(Declared { name, dtype, shape: shape.to_vec(), byte_len });
        Ok(())
    }

    /// Bytes of tensor data declared so far.
    pub fn data_len(&self) -> u64 {
        self.tensors.iter().map(|t| t.byte_len as u64).sum()
    }

    /// The 8-byte length and the padded JSON header.
    pub fn header_bytes(&self) -> Result<Vec<u8>> {
        let mut header = Map::new();
        if !self.metadata.is_empty() {
            header.insert("__metadata__".into(), json!(self.metadata));
        }
        let mut offset = 0usize;
        for t in &self.tensors {
            let end = offset.checked_add(t.byte_len).ok_or_else(|| write_error(&t.name, "data offsets overflow"))?;
            let dtype = t.dtype.info().safetensors_name.unwrap_or("?");
            header.insert(t.name.clone(), json!({ "dtype": dtype, "shape": t.shape, "data_offsets": [offset, end] }));
            offset = end;
        }
        let mut json = serde_json::to_vec(&Value::Object(header)).map_err(|e| write_error("", e.to_string()))?;
        json.resize(json.len().next_multiple_of(8), b' ');
        let mut out = Vec::with_capacity(8 + json.len());
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&json);
        Ok(out)
    }

    /// The whole file's size.
    pub fn file_len(&self) -> Result<u64> {
        Ok(self.header_bytes()?.len() as u64 + self.data_len())
    }

    /// Writes the header and returns the writer for the tensor data.
    pub fn write_header<W: Write>(&self, mut out: W) -> Result<TensorDataWriter<'_, W>> {
        out.write_all(&self.header_bytes()?)?;
        Ok(TensorDataWriter { writer: self, out, next: 0, written: 0 })
    }
}

/// Streams tensor data after [`SafetensorsWriter::write_header`], tensors in declaration order.
#[derive(Debug)]
pub struct TensorDataWriter<'w, W: Write> {
    writer: &'w SafetensorsWriter,
    out: W,
    next: usize,
    written: usize,
}

impl<W: Write> TensorDataWriter<'_, W> {
    /// The tensor whose bytes are expected next.
    pub fn next_tensor(&self) -> Option<&str> {
        self.writer.tensors.get(self.next).map(|t| t.name.as_str())
    }

    /// Writes part of the current tensor's bytes; a chunk may run on into the next tensors.
    pub fn write_chunk(&mut self, mut bytes: &[u8]) -> Result<()> {
        loop {
            while self.written == 0 && self.writer.tensors.get(self.next).is_some_and(|t| t.byte_len == 0) {
                self.next += 1;
            }
            let Some(t) = self.writer.tensors.get(self.next) else {
                if bytes.is_empty() {
                    return Ok(());
                }
                return Err(write_error("", "more tensor data than declared"));
            };
            let n = (t.byte_len - self.written).min(bytes.len());
            let (now, rest) = bytes.split_at(n);
            self.out.write_all(now)?;
            self.written += n;
            bytes = rest;
            if self.written == t.byte_len {
                self.next += 1;
                self.written = 0;
            }
            if bytes.is_empty() {
                return Ok(());
            }
        }
    }

    /// Checks every declared tensor was written in full, flushes and returns the output.
    pub fn finish(mut self) -> Result<W> {
        while self.written == 0 && self.writer.tensors.get(self.next).is_some_and(|t| t.byte_len == 0) {
            self.next += 1;
        }
        if let Some(name) = self.next_tensor() {
            return Err(write_error(name, "not written in full"));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Checkpoint;

    #[test]
    fn written_files_read_back() {
        let mut w = SafetensorsWriter::new();
        w.add_metadata("format", "pt");
        w.add_tensor("a", DType::F32, &[2, 3]).unwrap();
        w.add_tensor("empty", DType::BF16, &[0]).unwrap();
        w.add_tensor("b", DType::BF16, &[5]).unwrap();
        let a: Vec<u8> = (0..24).collect();
        let b: Vec<u8> = (100..110).collect();
        let mut data = w.write_header(Vec::new()).unwrap();
        // Chunks that straddle tensors.
        data.write_chunk(&a[..10]).unwrap();
        let rest: Vec<u8> = a[10..].iter().chain(&b).copied().collect();
        data.write_chunk(&rest).unwrap();
        let bytes = data.finish().unwrap();
        assert_eq!(bytes.len() as u64, w.file_len().unwrap());
        let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        assert_eq!(header_len % 8, 0, "header padded to 8 bytes");
        let ckpt = Checkpoint::from_bytes("t.safetensors", bytes).unwrap();
        assert_eq!(ckpt.tensor("a").unwrap().view.bytes, &a[..]);
        assert_eq!(ckpt.tensor("b").unwrap().view.bytes, &b[..]);
        assert_eq!(ckpt.tensor("b").unwrap().view.shape, [5]);
        assert_eq!(ckpt.shard_metadata(0).unwrap()["format"], "pt");
    }

    #[test]
    fn mismatches_are_errors() {
        let mut w = SafetensorsWriter::new();
        w.add_tensor("a", DType::F16, &[2]).unwrap();
        assert!(w.add_tensor("a", DType::F16, &[2]).is_err());
        assert!(w.add_tensor("q", DType::Q4_0, &[32]).unwrap_err().to_string().contains("Q4_0"));
        assert!(w.add_tensor("huge", DType::F32, &[usize::MAX, 2]).is_err());
        let mut data = w.write_header(Vec::new()).unwrap();
        assert!(data.write_chunk(&[0; 5]).is_err(), "5 bytes for a 4-byte tensor");
        let data = w.write_header(Vec::new()).unwrap();
        assert!(data.finish().unwrap_err().to_string().contains("\"a\""));
    }
}
