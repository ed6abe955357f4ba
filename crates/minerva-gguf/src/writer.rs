//! Writing GGUF v3 files, in memory or streaming.
//!
//! A file is declared first (metadata, then each tensor's name, dtype and shape) so the header can
//! be written before any tensor data exists; the data then streams in declaration order, which
//! keeps memory bounded when a multi-GB checkpoint is synthesised or converted.

use std::collections::HashSet;
use std::io::Write;

use minerva_core::{DType, element_count};

use crate::reader::{DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS, align_up};
use crate::value::{MetadataValue, encode_str};
use crate::{GgufError, Result};

/// The GGUF version this writer produces.
pub const WRITE_VERSION: u32 = 3;

#[derive(Clone, Debug)]
struct DeclaredTensor {
    name: String,
    dtype: DType,
    /// ggml order (innermost first).
    ne: Vec<u64>,
    byte_len: usize,
    offset: u64,
    data: Option<Vec<u8>>,
}

/// Builds a GGUF v3 file.
///
/// ```
/// use minerva_gguf::{Gguf, GgufWriter};
/// use minerva_core::DType;
///
/// let mut w = GgufWriter::new();
/// w.add_metadata("general.architecture", "llama")?;
/// w.add_tensor("norm.weight", DType::F32, &[4], [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect())?;
/// let mut bytes = Vec::new();
/// w.write_to(&mut bytes)?;
///
/// let gguf = Gguf::parse(bytes)?;
/// assert_eq!(gguf.architecture()?, "llama");
/// assert_eq!(gguf.tensor("norm.weight")?.shape, &[4]);
/// # Ok::<(), minerva_gguf::GgufError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetadataValue)>,
    keys: HashSet<String>,
    tensors: Vec<DeclaredTensor>,
    names: HashSet<String>,
    alignment: Option<u64>,
    data_len: u64,
}

impl GgufWriter {
    /// An empty file.
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    fn alignment(&self) -> u64 {
        self.alignment.unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Adds a metadata entry. Keys must be unique; `general.alignment` must be a power-of-two u32
    /// and be set before any tensor is declared.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: impl Into<MetadataValue>) -> Result<()> {
        let key = key.into();
        let value = value.into();
        if self.keys.contains(&key) {
            return Err(GgufError::DuplicateKey { key });
        }
        value.encode(&mut Vec::new())?; // rejects mixed arrays now rather than at write time
        if key == "general.alignment" {
            let MetadataValue::U32(a) = value else {
                return Err(GgufError::InvalidInput("general.alignment must be a u32".into()));
            };
            if a == 0 || !a.is_power_of_two() {
                return Err(GgufError::BadAlignment { value: a.into() });
            }
            if !self.tensors.is_empty() {
                return Err(GgufError::InvalidInput("set general.alignment before declaring tensors".into()));
            }
            self.alignment = Some(a.into());
        }
        self.keys.insert(key.clone());
        self.metadata.push((key, value));
        Ok(())
    }

    /// Declares a tensor whose data will be streamed later with [`GgufWriter::write_header`].
    /// `shape` is in numpy order (outermost first).
    pub fn add_tensor_info(&mut self, name: impl Into<String>, dtype: DType, shape: &[usize]) -> Result<()> {
        let name = name.into();
        if self.names.contains(&name) {
            return Err(GgufError::DuplicateTensor { tensor: name });
        }
        if dtype.ggml_id().is_none() {
            return Err(GgufError::UnsupportedDType { tensor: name, dtype, operation: "GGUF storage" });
        }
        if shape.len() > MAX_DIMS {
            return Err(GgufError::TooManyDims { tensor: name, n_dims: shape.len() as u32, max: MAX_DIMS });
        }
        let ne: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let row_len = ne.first().copied().unwrap_or(1);
        let (_, byte_len) =
            element_count(dtype, &ne, row_len).map_err(|source| GgufError::Shape { tensor: name.clone(), source })?;
        let offset = self.data_len;
        self.data_len = align_up(offset + byte_len as u64, self.alignment())
            .ok_or_else(|| GgufError::InvalidInput("tensor data exceeds 2^64 bytes".into()))?;
        self.names.insert(name.clone());
        self.tensors.push(DeclaredTensor { name, dtype, ne, byte_len, offset, data: None });
        Ok(())
    }

    /// Declares a tensor and gives its data now. `data` must be exactly the tensor's stored size.
    pub fn add_tensor(&mut self, name: impl Into<String>, dtype: DType, shape: &[usize], data: Vec<u8>) -> Result<()> {
        let name = name.into();
        self.add_tensor_info(name.clone(), dtype, shape)?;
        let declared = self.tensors.last_mut().ok_or_else(|| GgufError::InvalidInput("no tensor".into()))?;
        if data.len() != declared.byte_len {
            let expected = declared.byte_len;
            self.tensors.pop();
            self.names.remove(&name);
            return Err(GgufError::InvalidInput(format!(
                "tensor {name:?}: {} bytes given, {dtype} {shape:?} takes {expected}",
                data.len()
            )));
        }
        declared.data = Some(data);
        Ok(())
    }

    /// The encoded header: magic, counts, metadata, tensor infos and padding up to the data.
    pub fn header_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&WRITE_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            encode_str(key, &mut out);
            out.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            value.encode(&mut out)?;
        }
        for t in &self.tensors {
            encode_str(&t.name, &mut out);
            out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
            for d in &t.ne {
                out.extend_from_slice(&d.to_le_bytes());
            }
            let id = t.dtype.ggml_id().unwrap_or_default(); // checked in add_tensor_info
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&t.offset.to_le_bytes());
        }
        let padded = align_up(out.len() as u64, self.alignment()).unwrap_or(out.len() as u64);
        out.resize(padded as usize, 0);
        Ok(out)
    }

    /// Total file size once every tensor is written.
    pub fn file_len(&self) -> Result<u64> {
        Ok(self.header_bytes()?.len() as u64 + self.data_len)
    }

    /// Writes the header and returns a [`TensorDataWriter`] that takes the tensors' bytes in
    /// declaration order.
    pub fn write_header<W: Write>(&self, mut w: W) -> Result<TensorDataWriter<'_, W>> {
        w.write_all(&self.header_bytes()?)?;
        Ok(TensorDataWriter { writer: self, out: w, next: 0, written: 0 })
    }

    /// Writes the whole file; every tensor must have been given its data with
    /// [`GgufWriter::add_tensor`].
    pub fn write_to<W: Write>(&self, w: W) -> Result<()> {
        let mut data = self.write_header(w)?;
        for t in &self.tensors {
            let bytes = t
                .data
                .as_deref()
                .ok_or_else(|| GgufError::InvalidInput(format!("tensor {:?} was declared without data", t.name)))?;
            data.write_tensor(bytes)?;
        }
        data.finish()?;
        Ok(())
    }
}

/// Streams tensor data after [`GgufWriter::write_header`]: tensors in declaration order, each in
/// one or more chunks, padding inserted between them.
#[derive(Debug)]
pub struct TensorDataWriter<'w, W: Write> {
    writer: &'w GgufWriter,
    out: W,
    /// Index of the tensor being written.
    next: usize,
    /// Bytes of that tensor written so far.
    written: usize,
}

impl<W: Write> TensorDataWriter<'_, W> {
    /// The name of the tensor whose bytes are expected next, if any remain.
    pub fn next_tensor(&self) -> Option<&str> {
        self.writer.tensors.get(self.next).map(|t| t.name.as_str())
    }

    /// Writes the next tensor's bytes in full.
    pub fn write_tensor(&mut self, bytes: &[u8]) -> Result<()> {
        self.write_chunk(bytes)?;
        if self.written != 0 {
            let name = self.next_tensor().unwrap_or_default().to_string();
            return Err(GgufError::InvalidInput(format!("tensor {name:?}: data shorter than its declared size")));
        }
        Ok(())
    }

    /// Writes part of the current tensor's bytes; the tensor is complete when its declared size has
    /// been written, and the next chunk starts the next tensor.
    pub fn write_chunk(&mut self, mut bytes: &[u8]) -> Result<()> {
        loop {
            self.skip_empty_tensors();
            let Some(t) = self.writer.tensors.get(self.next) else {
                if bytes.is_empty() {
                    return Ok(());
                }
                return Err(GgufError::InvalidInput("more tensor data than declared".into()));
            };
            let want = t.byte_len - self.written;
            let n = want.min(bytes.len());
            self.out.write_all(&bytes[..n])?;
            self.written += n;
            bytes = &bytes[n..];
            if self.written == t.byte_len {
                let end = t.offset + t.byte_len as u64;
                let pad = align_up(end, self.writer.alignment()).unwrap_or(end) - end;
                self.out.write_all(&vec![0u8; pad as usize])?;
                self.next += 1;
                self.written = 0;
            }
            if bytes.is_empty() {
                return Ok(());
            }
        }
    }

    /// Zero-byte tensors (a zero dimension) have nothing to write: step over them.
    fn skip_empty_tensors(&mut self) {
        while self.written == 0 && self.writer.tensors.get(self.next).is_some_and(|t| t.byte_len == 0) {
            self.next += 1;
        }
    }

    /// Checks every declared tensor was written, flushes, and returns the output.
    pub fn finish(mut self) -> Result<W> {
        self.skip_empty_tensors();
        if let Some(name) = self.next_tensor() {
            return Err(GgufError::InvalidInput(format!("tensor {name:?} was not written")));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}
