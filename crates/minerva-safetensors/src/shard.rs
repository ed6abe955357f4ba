//! One `.safetensors` file: header parsing and validation over a memory map.
//!
//! Layout (huggingface/safetensors README "Format"): `u64` little-endian header length `N`, an
//! `N`-byte UTF-8 JSON object `{name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__":
//! {str: str}}`, then the data section; offsets are relative to its start. Like the official crate,
//! tensors must tile the data section exactly: no overlap, no gap, nothing after the last one.

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Deref;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use minerva_core::{DType, ShapeError, element_count};
use serde::Deserialize;

use crate::error::{Result, SafetensorsError};

/// The bytes of a shard: a read-only map of the file, or an owned buffer.
pub(crate) enum Backing {
    Map(Mmap),
    Owned(Vec<u8>),
}

impl Deref for Backing {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Backing::Map(map) => map,
            Backing::Owned(bytes) => bytes,
        }
    }
}

impl Backing {
    /// `MADV_DONTNEED` on the whole pages inside `range` of a map: they leave the resident set,
    /// and a later read maps them again from the page cache or the file (as `minerva-gguf`'s
    /// mapped files do). An owned buffer keeps its bytes; ranges outside the map are ignored.
    pub(crate) fn release(&self, range: std::ops::Range<usize>) {
        let Backing::Map(map) = self else { return };
        let page = 4096;
        let (start, end) = (range.start.next_multiple_of(page), range.end.min(map.len()) / page * page);
        if start < end {
            #[allow(unsafe_code)]
            // SAFETY: the map is read-only (`Mmap`, never `MmapMut`) of a file: dropping its pages
            // discards nothing, and every reference into them stays valid, reading the same bytes
            // when next touched (faulted in again from the file, as on first touch). The range is
            // whole pages inside the map.
            let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
        }
    }
}

/// One validated tensor entry. `begin..end` are absolute file offsets, checked to lie in the file.
pub(crate) struct Entry {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub begin: usize,
    pub end: usize,
}

/// A parsed shard: its tensors sorted by offset.
pub(crate) struct Shard {
    pub path: PathBuf,
    pub bytes: Backing,
    pub metadata: BTreeMap<String, String>,
    pub entries: Vec<Entry>,
}

/// A header entry as written.
#[derive(Deserialize)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// Maps and parses `path` (reads the header only; tensor bytes are paged in on first use).
pub(crate) fn open_shard(path: &Path) -> Result<Shard> {
    let io = |source| SafetensorsError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io)?;
    #[allow(unsafe_code)]
    // SAFETY: the map is read-only and lives inside the returned value. Like every mmap-based
    // reader (safetensors, candle, llama.cpp), we rely on no one truncating or rewriting the file
    // while it is mapped; a copy-in reader would cost a full read of multi-GB checkpoints.
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    advise_huge_pages(&map);
    parse_shard(path.to_path_buf(), Backing::Map(map))
}

/// Asks Linux to read the shard into the page cache in 2 MiB folios where it reads it for this
/// map, and to map them as huge pages: decode streams the weights, which 4 KiB pages slow
/// (docs/benchmarks-history.md, "Huge pages for the model's mapping"). Only advice: pages already cached
/// keep their size, and a refusal changes nothing.
#[cfg(target_os = "linux")]
fn advise_huge_pages(map: &Mmap) {
    let _ = map.advise(memmap2::Advice::HugePage);
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_map: &Mmap) {}

/// Parses and validates the header of `bytes` (a whole `.safetensors` file named `path`).
pub(crate) fn parse_shard(path: PathBuf, bytes: Backing) -> Result<Shard> {
    let file_len = bytes.len() as u64;
    let Some(len_field) = bytes.get(..8) else {
        return Err(SafetensorsError::TooShort { file: path, len: file_len });
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(len_field);
    let header_len = u64::from_le_bytes(le);
    let available = file_len - 8;
    if header_len > available {
        return Err(SafetensorsError::HeaderTooLarge { file: path, header_len, available });
    }
    // header_len <= file length, so it fits in usize.
    let data_start = 8 + header_len as usize;
    let Some(header) = bytes.get(8..data_start) else {
        return Err(SafetensorsError::HeaderTooLarge { file: path, header_len, available });
    };
    let header = match std::str::from_utf8(header) {
        Ok(text) => text,
        Err(e) => return Err(SafetensorsError::HeaderNotUtf8 { file: path, offset: 8 + e.valid_up_to() as u64 }),
    };
    let object: serde_json::Map<String, serde_json::Value> = match serde_json::from_str(header) {
        Ok(object) => object,
        Err(source) => return Err(SafetensorsError::MalformedHeader { file: path, source }),
    };
    let data_len = (bytes.len() - data_start) as u64;

    let mut metadata = BTreeMap::new();
    let mut entries = Vec::with_capacity(object.len());
    for (name, value) in object {
        if name == "__metadata__" {
            metadata = BTreeMap::deserialize(value).map_err(|source| SafetensorsError::MalformedEntry {
                file: path.clone(),
                name,
                source,
            })?;
            continue;
        }
        let raw = match RawEntry::deserialize(value) {
            Ok(raw) => raw,
            Err(source) => return Err(SafetensorsError::MalformedEntry { file: path, name, source }),
        };
        entries.push(validate_entry(&path, name, raw, data_start, data_len)?);
    }

    // Tensors must tile the data section: sort by (begin, end) and walk.
    entries.sort_by_key(|e| (e.begin, e.end));
    let mut cursor = data_start;
    let mut previous: Option<&str> = None;
    for entry in &entries {
        let offset = (entry.begin - data_start) as u64;
        if entry.begin < cursor {
            let first = previous.unwrap_or_default().to_owned();
            return Err(SafetensorsError::Overlap { file: path, first, second: entry.name.clone(), offset });
        }
        if entry.begin > cursor {
            let gap = (entry.begin - cursor) as u64;
            return Err(SafetensorsError::Gap { file: path, name: entry.name.clone(), offset, gap });
        }
        cursor = entry.end;
        previous = Some(&entry.name);
    }
    if cursor != bytes.len() {
        let end = (cursor - data_start) as u64;
        return Err(SafetensorsError::TrailingBytes { file: path, end, data_len, trailing: data_len - end });
    }
    Ok(Shard { path, bytes, metadata, entries })
}

/// Checks one entry's dtype, shape and offsets; returns it with absolute offsets.
fn validate_entry(path: &Path, name: String, raw: RawEntry, data_start: usize, data_len: u64) -> Result<Entry> {
    let file = || path.to_path_buf();
    let Some(dtype) = DType::from_safetensors_name(&raw.dtype) else {
        return Err(SafetensorsError::UnknownDType { file: file(), name, dtype: raw.dtype });
    };
    let shape_error = |name: String, source| SafetensorsError::Shape { file: file(), name, source };
    let overflow = || ShapeError::Overflow { shape: raw.shape.clone() };
    let mut shape = Vec::with_capacity(raw.shape.len());
    let mut elements: u64 = 1;
    for &d in &raw.shape {
        shape.push(usize::try_from(d).map_err(|_| shape_error(name.clone(), overflow()))?);
        elements = elements.checked_mul(d).ok_or_else(|| shape_error(name.clone(), overflow()))?;
    }
    // Whole bytes over the whole tensor (as the official crate checks bits % 8), not per row.
    let (_, nbytes) = element_count(dtype, &raw.shape, elements).map_err(|e| shape_error(name.clone(), e))?;

    let [begin, end] = raw.data_offsets;
    if begin > end || end > data_len {
        return Err(SafetensorsError::OffsetsOutOfRange { file: file(), name, begin, end, data_len });
    }
    if end - begin != nbytes as u64 {
        let (expected, actual) = (nbytes as u64, end - begin);
        return Err(SafetensorsError::ByteLength { file: file(), name, dtype, shape, expected, actual });
    }
    // end <= data_len, so both fit in usize and inside the file.
    Ok(Entry { name, dtype, shape, begin: data_start + begin as usize, end: data_start + end as usize })
}
