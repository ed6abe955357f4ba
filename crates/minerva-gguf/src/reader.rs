//! Parsing: header, metadata, tensor infos, validation.
//!
//! ```text
//! offset 0   u32 magic "GGUF" · u32 version (2|3) · u64 tensor_count · u64 metadata_kv_count
//!            metadata_kv_count × { string key · u32 value_type · value }
//!            tensor_count      × { string name · u32 n_dims · u64 ne[n_dims] · u32 ggml_type · u64 offset }
//!            zero padding to general.alignment (default 32)
//! data_start tensor bytes; each tensor at data_start + offset (offset % alignment == 0)
//!
//! string = u64 len · len bytes of UTF-8        array = u32 elem_type · u64 count · count × value
//! ```
//! Every read is bounds-checked against the bytes that remain; every count is checked against the
//! smallest size its elements could take before anything is allocated for it.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use memmap2::Mmap;
use minerva_core::{DType, TensorView, element_count};

use crate::value::{ArrayValue, MetadataValue, Value, ValueType, decode_value};
use crate::{GgufError, Result};

/// The magic bytes at offset 0.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Deepest nesting of arrays the reader accepts; deeper input is rejected, not recursed into.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// A tensor's entry in the file's tensor table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Name as stored.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dimensions in ggml order (`ne[0]` is the contiguous row), as stored.
    pub ne: Vec<u64>,
    /// Dimensions in numpy order (outermost first): `ne` reversed.
    pub shape: Vec<usize>,
    /// Offset within the data section, as stored.
    pub offset: u64,
    /// Number of elements.
    pub element_count: usize,
    /// Absolute byte range in the file.
    pub range: Range<usize>,
}

impl TensorInfo {
    /// Bytes the tensor occupies (excluding alignment padding).
    pub fn byte_len(&self) -> usize {
        self.range.len()
    }
}

#[derive(Clone, Debug)]
enum StoredValue {
    /// Scalars and strings, decoded at parse time.
    Inline(MetadataValue),
    /// Arrays stay encoded in the file and are decoded on access.
    Array { elem_type: ValueType, len: usize, range: Range<usize> },
}

#[derive(Clone, Debug)]
struct MetadataEntry {
    key: String,
    value: StoredValue,
}

/// A parsed GGUF file over its bytes `D`: a memory map ([`Gguf::open`]), a slice or a `Vec`.
///
/// Parsing reads the header, metadata and tensor table only; tensor bytes are handed out as
/// slices of `D` and, for a map, paged in by the OS when first touched.
pub struct Gguf<D> {
    data: D,
    version: u32,
    alignment: u64,
    data_offset: usize,
    metadata: Vec<MetadataEntry>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl<D> std::fmt::Debug for Gguf<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gguf")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl Gguf<Mmap> {
    /// Memory-maps and parses the file at `path`. Only the header pages are read.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf<Mmap>> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.to_path_buf(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        #[allow(unsafe_code)]
        // SAFETY: the map is read-only and lives inside the returned value. Like every mmap-based
        // reader (safetensors, candle, llama.cpp), we rely on no one truncating or rewriting the
        // file while it is mapped; a copy-in reader would cost a full read of multi-GB files.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        advise_huge_pages(&map);
        Gguf::parse(map)
    }
}

/// The bytes a [`Gguf`] reads: a memory map, a `Vec` or a slice, and whether pages of them can be
/// given back once a reader has copied what it needed ([`Gguf::release`]).
pub trait Backing: AsRef<[u8]> {
    /// Lets the system drop the pages of `range` (byte offsets into the whole file) from this
    /// process's memory; the bytes read the same afterwards. The default does nothing (memory
    /// the process owns cannot be given back without losing it).
    fn release(&self, range: Range<usize>) {
        let _ = range;
    }
}

impl Backing for Vec<u8> {}
impl Backing for &[u8] {}
impl Backing for Box<[u8]> {}

impl Backing for Mmap {
    /// `MADV_DONTNEED` on the whole pages inside `range`: they leave the resident set, and a later
    /// read maps them again from the page cache or the file. Ranges outside the map are ignored.
    fn release(&self, range: Range<usize>) {
        let page = 4096;
        let (start, end) = (range.start.next_multiple_of(page), range.end.min(self.len()) / page * page);
        if start < end {
            #[allow(unsafe_code)]
            // SAFETY: the map is read-only (`Mmap`, never `MmapMut`) of a file: dropping its pages
            // discards nothing, and every reference into them stays valid, reading the same bytes
            // when next touched (faulted in again from the file, as on first touch). The range is
            // whole pages inside the map.
            let _ = unsafe { self.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
        }
    }
}

/// Asks Linux to read the file into the page cache in 2 MiB folios where it reads it for this
/// map, and to map them as huge pages: decode streams the weights, and with 4 KiB pages a core
/// read them at about two thirds of the rate (docs/benchmarks-history.md, "Huge pages for the model's
/// mapping"). Only advice: pages already cached keep their size, and a refusal changes nothing.
#[cfg(target_os = "linux")]
fn advise_huge_pages(map: &Mmap) {
    let _ = map.advise(memmap2::Advice::HugePage);
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_map: &Mmap) {}

impl<D: Backing> Gguf<D> {
    /// Gives the pages of `range` (byte offsets into the file) back to the system where the
    /// bytes are a memory map ([`Backing::release`]): after a reader copied tensors elsewhere.
    pub fn release(&self, range: Range<usize>) {
        self.data.release(range);
    }
}

impl<D: AsRef<[u8]>> Gguf<D> {
    /// Parses the GGUF file held in `data`.
    pub fn parse(data: D) -> Result<Gguf<D>> {
        let bytes = data.as_ref();
        let mut cur = Cursor { data: bytes, pos: 0 };

        let magic =
            cur.take(4, "magic").map_err(|_| GgufError::BadMagic { found: bytes[..bytes.len().min(4)].to_vec() })?;
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic { found: magic.to_vec() });
        }
        let version = cur.u32("version")?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(GgufError::UnsupportedVersion {
                    version,
                    hint: "; v1 files use 32-bit counts: re-convert the model with a current llama.cpp",
                });
            }
            v if v & 0xffff == 0 && matches!(v.swap_bytes(), 1..=3) => {
                return Err(GgufError::BigEndian { version: v.swap_bytes() });
            }
            _ => return Err(GgufError::UnsupportedVersion { version, hint: "" }),
        }

        let count_at = cur.pos;
        let tensor_count = cur.u64("tensor count")?;
        let kv_count = cur.u64("metadata count")?;
        // The smallest encodings: a KV is a key length, a type and a 1-byte value; a tensor info a
        // name length, n_dims, type and offset. Counts that could not fit are rejected before any
        // allocation sized by them.
        cur.check_count(kv_count, 8 + 4 + 1, "metadata key", count_at as u64 + 8)?;
        let kv_count = kv_count as usize;
        let mut metadata = Vec::with_capacity(kv_count);
        let mut key_index = HashMap::with_capacity(kv_count);
        for _ in 0..kv_count {
            let key = cur.string("metadata key")?.to_string();
            let ty = cur.value_type("metadata value type", &key)?;
            let value = read_stored_value(&mut cur, ty, &key)?;
            if key_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(GgufError::DuplicateKey { key });
            }
            metadata.push(MetadataEntry { key, value });
        }

        let infos_at = cur.pos;
        let mut gguf = Gguf {
            data,
            version,
            alignment: DEFAULT_ALIGNMENT,
            data_offset: 0,
            metadata,
            key_index,
            tensors: Vec::new(),
            tensor_index: HashMap::new(),
        };
        gguf.alignment = gguf.read_alignment()?;

        let bytes = gguf.data.as_ref();
        let mut cur = Cursor { data: bytes, pos: infos_at };
        cur.check_count(tensor_count, 8 + 4 + 4 + 8, "tensor info", count_at as u64)?;
        let tensor_count = tensor_count as usize;
        let mut raw = Vec::with_capacity(tensor_count);
        for _ in 0..tensor_count {
            raw.push(read_tensor_info(&mut cur)?);
        }
        // Data starts at the next multiple of the alignment; with no tensors the padding may be
        // missing at the end of the file.
        let data_offset = align_up(cur.pos as u64, gguf.alignment)
            .and_then(|o| usize::try_from(o).ok())
            .ok_or(GgufError::BadAlignment { value: gguf.alignment })?;
        let (tensors, tensor_index) = validate_tensors(raw, data_offset, gguf.alignment, bytes.len())?;
        gguf.data_offset = data_offset;
        gguf.tensors = tensors;
        gguf.tensor_index = tensor_index;
        Ok(gguf)
    }

    fn read_alignment(&self) -> Result<u64> {
        let Some(value) = self.get("general.alignment") else {
            return Ok(DEFAULT_ALIGNMENT);
        };
        let alignment = value.to_u64().ok_or_else(|| GgufError::WrongType {
            key: "general.alignment".into(),
            expected: "u32",
            found: value.type_description(),
        })?;
        if alignment == 0 || !alignment.is_power_of_two() || alignment > u64::from(u32::MAX) {
            return Err(GgufError::BadAlignment { value: alignment });
        }
        Ok(alignment)
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.data.as_ref()
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of tensor data (`general.alignment`, or 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the tensor data section.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// Number of metadata entries.
    pub fn metadata_len(&self) -> usize {
        self.metadata.len()
    }

    /// Metadata entries in file order.
    pub fn metadata(&self) -> impl ExactSizeIterator<Item = (&str, Value<'_>)> {
        self.metadata.iter().map(|e| (e.key.as_str(), self.view(&e.value)))
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<Value<'_>> {
        self.key_index.get(key).map(|&i| self.view(&self.metadata[i].value))
    }

    fn view<'s>(&'s self, value: &'s StoredValue) -> Value<'s> {
        match value {
            StoredValue::Inline(v) => inline_view(v),
            StoredValue::Array { elem_type, len, range } => {
                Value::Array(ArrayValue { elem_type: *elem_type, len: *len, bytes: &self.data.as_ref()[range.clone()] })
            }
        }
    }

    /// The value of `key`, or [`GgufError::MissingKey`].
    pub fn require(&self, key: &str) -> Result<Value<'_>> {
        self.get(key).ok_or_else(|| GgufError::MissingKey { key: key.to_string() })
    }

    fn typed<'s, T>(
        &'s self,
        key: &str,
        expected: &'static str,
        convert: impl FnOnce(Value<'s>) -> Option<T>,
    ) -> Result<T> {
        let value = self.require(key)?;
        convert(value).ok_or_else(|| GgufError::WrongType {
            key: key.to_string(),
            expected,
            found: value.type_description(),
        })
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.typed(key, "string", |v| v.as_str())
    }

    /// An unsigned integer of any width (writers use u32 and u64 for counts interchangeably).
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.typed(key, "unsigned integer", |v| v.to_u64())
    }

    /// An unsigned integer that fits in `u32`.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.typed(key, "u32", |v| v.to_u64().and_then(|x| u32::try_from(x).ok()))
    }

    /// A signed integer of any width.
    pub fn get_i64(&self, key: &str) -> Result<i64> {
        self.typed(key, "integer", |v| v.to_i64())
    }

    /// A float (f32 or f64; f64 is narrowed).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.typed(key, "f32", |v| match v {
            Value::F32(x) => Some(x),
            Value::F64(x) => Some(x as f32),
            _ => None,
        })
    }

    /// A boolean.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.typed(key, "bool", |v| match v {
            Value::Bool(b) => Some(b),
            _ => None,
        })
    }

    /// An array.
    pub fn get_array(&self, key: &str) -> Result<ArrayValue<'_>> {
        self.typed(key, "array", |v| v.as_array())
    }

    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.typed(key, "array of string", |v| v.as_array()?.strings().map(Iterator::collect))
    }

    /// `general.architecture`, e.g. `"llama"` or `"gpt-oss"`.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    /// The architecture-prefixed key `{arch}.{suffix}`, e.g. `arch_key("block_count")` →
    /// `"llama.block_count"`.
    pub fn arch_key(&self, suffix: &str) -> Result<String> {
        Ok(format!("{}.{suffix}", self.architecture()?))
    }

    /// The value of the architecture-prefixed key `{arch}.{suffix}`, if present.
    pub fn get_arch(&self, suffix: &str) -> Result<Option<Value<'_>>> {
        Ok(self.get(&self.arch_key(suffix)?))
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// Tensor table entries in file order.
    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The table entry of tensor `name`.
    pub fn tensor_info(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor_index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| GgufError::TensorNotFound { tensor: name.to_string() })
    }

    /// Tensor `name` as a zero-copy view.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        self.tensor_info(name).map(|info| self.view_of(info))
    }

    /// Every tensor as a zero-copy view, in file order.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = TensorView<'_>> {
        self.tensors.iter().map(|info| self.view_of(info))
    }

    /// The bytes of the tensor described by `info` (which must come from this file).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        // Ranges were validated against the file length in `parse`; `get` keeps a foreign `info`
        // from panicking.
        self.data.as_ref().get(info.range.clone()).unwrap_or_default()
    }

    fn view_of<'s>(&'s self, info: &'s TensorInfo) -> TensorView<'s> {
        TensorView { name: &info.name, dtype: info.dtype, shape: &info.shape, bytes: self.tensor_bytes(info) }
    }
}

fn inline_view(v: &MetadataValue) -> Value<'_> {
    match v {
        MetadataValue::U8(x) => Value::U8(*x),
        MetadataValue::I8(x) => Value::I8(*x),
        MetadataValue::U16(x) => Value::U16(*x),
        MetadataValue::I16(x) => Value::I16(*x),
        MetadataValue::U32(x) => Value::U32(*x),
        MetadataValue::I32(x) => Value::I32(*x),
        MetadataValue::F32(x) => Value::F32(*x),
        MetadataValue::Bool(x) => Value::Bool(*x),
        MetadataValue::String(s) => Value::String(s),
        MetadataValue::U64(x) => Value::U64(*x),
        MetadataValue::I64(x) => Value::I64(*x),
        MetadataValue::F64(x) => Value::F64(*x),
        // Arrays are never stored inline.
        MetadataValue::Array { .. } => Value::Array(ArrayValue { elem_type: ValueType::U8, len: 0, bytes: &[] }),
    }
}

/// Rounds `offset` up to a multiple of `alignment` (a power of two).
pub(crate) fn align_up(offset: u64, alignment: u64) -> Option<u64> {
    offset.checked_add(alignment - 1).map(|o| o & !(alignment - 1))
}

struct RawTensor {
    name: String,
    ne: Vec<u64>,
    dtype: DType,
    offset: u64,
}

fn read_tensor_info(cur: &mut Cursor<'_>) -> Result<RawTensor> {
    let name = cur.string("tensor name")?.to_string();
    let n_dims = cur.u32("tensor n_dims")?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::TooManyDims { tensor: name, n_dims, max: MAX_DIMS });
    }
    let mut ne = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        ne.push(cur.u64("tensor dimension")?);
    }
    let type_id = cur.u32("tensor type")?;
    let dtype =
        DType::from_ggml_id(type_id).ok_or_else(|| GgufError::UnknownGgmlType { tensor: name.clone(), type_id })?;
    let offset = cur.u64("tensor offset")?;
    Ok(RawTensor { name, ne, dtype, offset })
}

type TensorTable = (Vec<TensorInfo>, HashMap<String, usize>);

fn validate_tensors(raw: Vec<RawTensor>, data_offset: usize, alignment: u64, file_len: usize) -> Result<TensorTable> {
    let mut tensors = Vec::with_capacity(raw.len());
    let mut index = HashMap::with_capacity(raw.len());
    for t in raw {
        let row_len = t.ne.first().copied().unwrap_or(1);
        let (element_count, byte_len) = element_count(t.dtype, &t.ne, row_len)
            .map_err(|source| GgufError::Shape { tensor: t.name.clone(), source })?;
        if t.offset % alignment != 0 {
            return Err(GgufError::Misaligned { tensor: t.name, offset: t.offset, alignment });
        }
        let start = (data_offset as u64).checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(byte_len as u64));
        let (Some(start), Some(end)) = (start, end) else {
            return Err(GgufError::OutOfBounds {
                tensor: t.name,
                start: t.offset,
                end: u64::MAX,
                file_len: file_len as u64,
            });
        };
        if end > file_len as u64 {
            return Err(GgufError::OutOfBounds { tensor: t.name, start, end, file_len: file_len as u64 });
        }
        // Both fit in usize: they are at most file_len.
        let range = start as usize..end as usize;
        let shape = t.ne.iter().rev().map(|&d| d as usize).collect();
        if index.insert(t.name.clone(), tensors.len()).is_some() {
            return Err(GgufError::DuplicateTensor { tensor: t.name });
        }
        tensors.push(TensorInfo {
            name: t.name,
            dtype: t.dtype,
            ne: t.ne,
            shape,
            offset: t.offset,
            element_count,
            range,
        });
    }
    // Overlap: sort the non-empty ranges by start and compare neighbours.
    let mut order: Vec<usize> = (0..tensors.len()).filter(|&i| !tensors[i].range.is_empty()).collect();
    order.sort_by_key(|&i| tensors[i].range.start);
    for pair in order.windows(2) {
        let (a, b) = (&tensors[pair[0]], &tensors[pair[1]]);
        if b.range.start < a.range.end {
            return Err(GgufError::Overlap { tensor: b.name.clone(), other: a.name.clone() });
        }
    }
    Ok((tensors, index))
}

fn read_stored_value(cur: &mut Cursor<'_>, ty: ValueType, key: &str) -> Result<StoredValue> {
    Ok(match ty {
        ValueType::Array => {
            let elem_type = cur.value_type("array element type", key)?;
            let count_at = cur.pos;
            let len = cur.u64("array length")?;
            let start = cur.pos;
            skip_array_elems(cur, elem_type, len, count_at, key, 1)?;
            StoredValue::Array { elem_type, len: len as usize, range: start..cur.pos }
        }
        ValueType::String => StoredValue::Inline(MetadataValue::String(cur.string("string value")?.to_string())),
        scalar => {
            let size = scalar.fixed_size().unwrap_or(0);
            let at = cur.pos;
            let bytes = cur.take(size, "metadata value")?;
            let (value, _) = decode_value(bytes, scalar).ok_or(GgufError::Truncated {
                what: "metadata value",
                offset: at as u64,
                needed: size as u64,
                available: 0,
            })?;
            StoredValue::Inline(value.to_owned_value())
        }
    })
}

/// Walks `len` elements of `elem_type`, validating them, without allocating per element.
fn skip_array_elems(
    cur: &mut Cursor<'_>,
    elem_type: ValueType,
    len: u64,
    count_at: usize,
    key: &str,
    depth: usize,
) -> Result<()> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::NestingTooDeep { key: key.to_string(), max: MAX_ARRAY_DEPTH });
    }
    cur.check_count(len, elem_type.min_size(), "array element", count_at as u64)?;
    match elem_type {
        ValueType::String => {
            for _ in 0..len {
                cur.string("array string")?;
            }
        }
        ValueType::Array => {
            for _ in 0..len {
                let inner = cur.value_type("array element type", key)?;
                let inner_count_at = cur.pos;
                let inner_len = cur.u64("array length")?;
                skip_array_elems(cur, inner, inner_len, inner_count_at, key, depth + 1)?;
            }
        }
        ValueType::Bool => {
            // check_count bounded len by the bytes left, so it fits in usize.
            let bytes = cur.take(len as usize, "bool array")?;
            let _ = bytes; // Any non-zero byte reads as true, as in gguf-py.
        }
        fixed => {
            let size = fixed.fixed_size().unwrap_or(1);
            cur.take(len as usize * size, "array data")?;
        }
    }
    Ok(())
}

/// A bounds-checked little-endian reader over the file's bytes.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what,
                offset: self.pos as u64,
                needed: n as u64,
                available: self.remaining() as u64,
            });
        }
        let bytes = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    /// A value type tag; an unknown one is an error naming the key it belongs to.
    fn value_type(&mut self, what: &'static str, key: &str) -> Result<ValueType> {
        let at = self.pos;
        let type_id = self.u32(what)?;
        ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.to_string(),
            type_id,
            offset: at as u64,
        })
    }

    fn string(&mut self, what: &'static str) -> Result<&'a str> {
        let len_at = self.pos;
        let len = self.u64(what)?;
        if len > self.remaining() as u64 {
            return Err(GgufError::CountTooLarge {
                what: "string length",
                count: len,
                offset: len_at as u64,
                available: self.remaining() as u64,
            });
        }
        let at = self.pos;
        let bytes = self.take(len as usize, what)?;
        std::str::from_utf8(bytes).map_err(|_| GgufError::InvalidUtf8 { what, offset: at as u64 })
    }

    /// Rejects `count` items of at least `min_size` bytes each when they cannot fit in what is left.
    fn check_count(&self, count: u64, min_size: usize, what: &'static str, offset: u64) -> Result<()> {
        let fits = count.checked_mul(min_size as u64).is_some_and(|bytes| bytes <= self.remaining() as u64);
        if fits {
            Ok(())
        } else {
            Err(GgufError::CountTooLarge { what, count, offset, available: self.remaining() as u64 })
        }
    }
}
