//! A checkpoint: one or more shards, the JSON files beside them, and the logical tensor list.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use minerva_core::TensorView;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{Result, SafetensorsError};
use crate::logical::{self, LogicalEntry, LogicalTensor, StoredTensors};
use crate::shard::{Backing, Shard, open_shard, parse_shard};

/// The standard Hugging Face shard index name.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// A stored tensor: a zero-copy view plus where it lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor<'a> {
    /// Name, dtype, numpy-order shape and the bytes, borrowed from the shard's map.
    pub view: TensorView<'a>,
    /// The shard file holding it.
    pub shard: &'a Path,
    /// Absolute byte offset of its data in the shard file.
    pub offset: u64,
}

/// An opened SafeTensors checkpoint (one file or a sharded set), memory-mapped.
///
/// Opening reads only headers, the shard index and the small JSON files beside the weights; tensor
/// bytes are paged in by the OS when a caller reads a view.
pub struct Checkpoint {
    dir: Option<PathBuf>,
    shards: Vec<Shard>,
    /// `(shard, entry)` in shard order, then file-offset order.
    order: Vec<(usize, usize)>,
    by_name: HashMap<String, usize>,
    logical: Vec<LogicalEntry>,
    index_metadata: Option<Value>,
    config: Option<Value>,
    generation_config: Option<Value>,
    tokenizer_config: Option<Value>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("dir", &self.dir)
            .field("shards", &self.shard_paths().collect::<Vec<_>>())
            .field("tensors", &self.order.len())
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct IndexFile {
    #[serde(default)]
    metadata: Option<Value>,
    weight_map: BTreeMap<String, String>,
}

impl Checkpoint {
    /// Opens a checkpoint from a `.safetensors` file, a `*.safetensors.index.json` index, or a model
    /// directory. A directory is read as (first match wins): `model.safetensors.index.json` (or the
    /// one `*.safetensors.index.json`), `model.safetensors`, then every `*.safetensors` in name
    /// order, checking that `-0000i-of-0000N` sequences are complete. `config.json`,
    /// `generation_config.json` and `tokenizer_config.json` are read from the same directory.
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        let io = |source| SafetensorsError::Io { path: path.to_path_buf(), source };
        let meta = std::fs::metadata(path).map_err(io)?;
        let (dir, index, files) = if meta.is_dir() {
            let (index, files) = discover(path)?;
            (path.to_path_buf(), index, files)
        } else {
            let dir = path.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name.ends_with(".index.json") {
                (dir, Some(path.to_path_buf()), Vec::new())
            } else {
                (dir, None, vec![path.to_path_buf()])
            }
        };
        let configs = read_configs(&dir)?;
        let mut checkpoint = match index {
            Some(index) => Checkpoint::from_index(&index)?,
            None => {
                let shards = files.iter().map(|f| open_shard(f)).collect::<Result<Vec<_>>>()?;
                Checkpoint::assemble(shards, None)?
            }
        };
        checkpoint.dir = Some(dir);
        [checkpoint.config, checkpoint.generation_config, checkpoint.tokenizer_config] = configs;
        checkpoint.logical = logical::build(&checkpoint)?;
        Ok(checkpoint)
    }

    /// Parses one in-memory `.safetensors` file (no index, no config); `name` is used in errors.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Checkpoint> {
        let shard = parse_shard(name.into(), Backing::Owned(bytes))?;
        let mut checkpoint = Checkpoint::assemble(vec![shard], None)?;
        checkpoint.logical = logical::build(&checkpoint)?;
        Ok(checkpoint)
    }

    fn from_index(index: &Path) -> Result<Checkpoint> {
        let text = std::fs::read(index).map_err(|source| SafetensorsError::Io { path: index.to_path_buf(), source })?;
        let parsed: IndexFile = serde_json::from_slice(&text)
            .map_err(|source| SafetensorsError::MalformedIndex { index: index.to_path_buf(), source })?;
        let dir = index.parent().unwrap_or(Path::new("."));
        let names: BTreeSet<&str> = parsed.weight_map.values().map(String::as_str).collect();
        let mut paths = Vec::with_capacity(names.len());
        for name in names {
            let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\']);
            if !plain {
                return Err(SafetensorsError::InvalidShardName { index: index.to_path_buf(), shard: name.to_owned() });
            }
            let shard = dir.join(name);
            if !shard.is_file() {
                return Err(SafetensorsError::MissingShard { shard, named_by: index.to_path_buf() });
            }
            paths.push(shard);
        }
        let shards = paths.iter().map(|p| open_shard(p)).collect::<Result<Vec<_>>>()?;
        let checkpoint = Checkpoint::assemble(shards, parsed.metadata)?;
        for (name, file) in &parsed.weight_map {
            let holder = checkpoint.by_name.get(name).map(|&i| checkpoint.order[i].0);
            let wanted = dir.join(file);
            if holder.map(|s| &checkpoint.shards[s].path) != Some(&wanted) {
                return Err(SafetensorsError::TensorNotInShard {
                    index: index.to_path_buf(),
                    name: name.clone(),
                    shard: wanted,
                });
            }
        }
        Ok(checkpoint)
    }

    /// Builds the name table over parsed shards, rejecting names that occur twice.
    fn assemble(shards: Vec<Shard>, index_metadata: Option<Value>) -> Result<Checkpoint> {
        let mut order = Vec::new();
        let mut by_name = HashMap::new();
        for (s, shard) in shards.iter().enumerate() {
            for (e, entry) in shard.entries.iter().enumerate() {
                if let Some(&previous) = by_name.get(entry.name.as_str()) {
                    let (first, _): (usize, usize) = order[previous];
                    return Err(SafetensorsError::DuplicateTensor {
                        name: entry.name.clone(),
                        first: shards[first].path.clone(),
                        second: shard.path.clone(),
                    });
                }
                by_name.insert(entry.name.clone(), order.len());
                order.push((s, e));
            }
        }
        Ok(Checkpoint {
            dir: None,
            shards,
            order,
            by_name,
            logical: Vec::new(),
            index_metadata,
            config: None,
            generation_config: None,
            tokenizer_config: None,
        })
    }

    fn tensor_at(&self, i: usize) -> Tensor<'_> {
        let (s, e) = self.order[i];
        let shard = &self.shards[s];
        let entry = &shard.entries[e];
        Tensor {
            view: TensorView {
                name: &entry.name,
                dtype: entry.dtype,
                shape: &entry.shape,
                // Validated at parse time: begin <= end <= file length.
                bytes: &shard.bytes[entry.begin..entry.end],
            },
            shard: &shard.path,
            offset: entry.begin as u64,
        }
    }

    /// Every stored tensor, in shard order (shards sorted by file name), then file-offset order.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = Tensor<'_>> {
        (0..self.order.len()).map(|i| self.tensor_at(i))
    }

    /// The stored tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<Tensor<'_>> {
        self.by_name.get(name).map(|&i| self.tensor_at(i))
    }

    /// Number of stored tensors.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether the checkpoint stores no tensor.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Logical tensors: quantized component groups merged into one tensor with its true shape, every
    /// other stored tensor as [`crate::Encoding::Plain`]. Ordered by the position of the first component
    /// (`_blocks` / `.weight`) in [`Checkpoint::tensors`].
    pub fn logical_tensors(&self) -> impl ExactSizeIterator<Item = LogicalTensor<'_>> {
        self.logical.iter().map(|entry| entry.resolve(self))
    }

    /// The logical tensor named `name` (`X` for `X_blocks`/`X_scales`, `m.weight` for MLX).
    pub fn logical_tensor(&self, name: &str) -> Option<LogicalTensor<'_>> {
        self.logical.iter().find(|entry| entry.name == name).map(|entry| entry.resolve(self))
    }

    /// The shard files, in the order [`Checkpoint::tensors`] visits them.
    pub fn shard_paths(&self) -> impl ExactSizeIterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }

    /// The whole bytes (memory map) of shard `shard` (in [`Checkpoint::shard_paths`] order): a
    /// tensor's data is `shard_bytes(i)[offset..offset + len]`, so a consumer can keep one handle
    /// per shard instead of borrowing every tensor.
    pub fn shard_bytes(&self, shard: usize) -> Option<&[u8]> {
        self.shards.get(shard).map(|s| &*s.bytes)
    }

    /// Gives the pages of `range` (byte offsets into shard `shard`) back to the system where the
    /// shard is a memory map: after a reader copied tensors elsewhere (the CPU backend's repacked
    /// weights). The bytes read the same afterwards; an owned shard, or a shard or range out of
    /// bounds, is left as it is.
    pub fn release(&self, shard: usize, range: std::ops::Range<usize>) {
        if let Some(shard) = self.shards.get(shard) {
            shard.bytes.release(range);
        }
    }

    /// A shard's `__metadata__` (string → string), if it had one; empty otherwise.
    pub fn shard_metadata(&self, shard: usize) -> Option<&BTreeMap<String, String>> {
        self.shards.get(shard).map(|s| &s.metadata)
    }

    /// The directory the checkpoint (and its JSON files) came from; `None` for [`Checkpoint::from_bytes`].
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The shard index's `metadata` object (e.g. `total_size`), if the checkpoint has an index.
    pub fn index_metadata(&self) -> Option<&Value> {
        self.index_metadata.as_ref()
    }

    /// `config.json`, if present.
    pub fn config(&self) -> Option<&Value> {
        self.config.as_ref()
    }

    /// `generation_config.json`, if present.
    pub fn generation_config(&self) -> Option<&Value> {
        self.generation_config.as_ref()
    }

    /// `tokenizer_config.json`, if present.
    pub fn tokenizer_config(&self) -> Option<&Value> {
        self.tokenizer_config.as_ref()
    }
}

/// Finds the index (if any) or the shard files of a model directory.
fn discover(dir: &Path) -> Result<(Option<PathBuf>, Vec<PathBuf>)> {
    let io = |source| SafetensorsError::Io { path: dir.to_path_buf(), source };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if let Some(name) = entry.file_name().to_str()
            && entry.path().is_file()
        {
            names.push(name.to_owned());
        }
    }
    names.sort();
    if names.iter().any(|n| n == INDEX_FILE) {
        return Ok((Some(dir.join(INDEX_FILE)), Vec::new()));
    }
    if let Some(index) = names.iter().find(|n| n.ends_with(".safetensors.index.json")) {
        return Ok((Some(dir.join(index)), Vec::new()));
    }
    if names.iter().any(|n| n == "model.safetensors") {
        return Ok((None, vec![dir.join("model.safetensors")]));
    }
    let files: Vec<&String> = names.iter().filter(|n| n.ends_with(".safetensors")).collect();
    if files.is_empty() {
        return Err(SafetensorsError::NoSafetensors { dir: dir.to_path_buf() });
    }
    // Every `PREFIX-0000i-of-0000N.safetensors` sequence must be complete.
    for name in &files {
        if let Some((prefix, _, total, width)) = shard_number(name) {
            for i in 1..=total {
                let expected = format!("{prefix}-{i:0width$}-of-{total:0width$}.safetensors");
                if !names.contains(&expected) {
                    return Err(SafetensorsError::MissingShard { shard: dir.join(expected), named_by: dir.join(name) });
                }
            }
        }
    }
    Ok((None, files.into_iter().map(|n| dir.join(n)).collect()))
}

/// Splits `PREFIX-0000i-of-0000N.safetensors` into `(PREFIX, i, N, digits)` (equal digit widths).
fn shard_number(name: &str) -> Option<(&str, u32, u32, usize)> {
    let stem = name.strip_suffix(".safetensors")?;
    let (head, total) = stem.rsplit_once("-of-")?;
    let (prefix, index) = head.rsplit_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.len() == total.len() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(index) || !digits(total) {
        return None;
    }
    Some((prefix, index.parse().ok()?, total.parse().ok()?, total.len()))
}

/// Reads `config.json`, `generation_config.json` and `tokenizer_config.json` when present.
fn read_configs(dir: &Path) -> Result<[Option<Value>; 3]> {
    let read = |name: &str| -> Result<Option<Value>> {
        let path = dir.join(name);
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read(&path).map_err(|source| SafetensorsError::Io { path: path.clone(), source })?;
        let value =
            serde_json::from_slice(&text).map_err(|source| SafetensorsError::MalformedConfig { path, source })?;
        Ok(Some(value))
    };
    Ok([read("config.json")?, read("generation_config.json")?, read("tokenizer_config.json")?])
}

impl StoredTensors for Checkpoint {
    fn len(&self) -> usize {
        self.order.len()
    }

    fn view(&self, index: usize) -> TensorView<'_> {
        self.tensor_at(index).view
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    fn quantization(&self) -> Option<&Value> {
        self.config().and_then(|c| c.get("quantization"))
    }
}

#[cfg(test)]
mod tests {
    use super::shard_number;

    #[test]
    fn shard_numbers() {
        assert_eq!(shard_number("model-00002-of-00003.safetensors"), Some(("model", 2, 3, 5)));
        assert_eq!(shard_number("a-b-001-of-002.safetensors"), Some(("a-b", 1, 2, 3)));
        assert_eq!(shard_number("model-2-of-00003.safetensors"), None);
        assert_eq!(shard_number("model.safetensors"), None);
        assert_eq!(shard_number("model-00001-of-00002.bin"), None);
    }
}
