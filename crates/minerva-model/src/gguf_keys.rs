//! [`GgufKeys`]: hyper-parameters from GGUF `{arch}.*` metadata, as llama.cpp's converter writes
//! them. Errors name the full key (`llama.attention.head_count`).

use minerva_gguf::Gguf;

use crate::arch::registry::{self, ArchSpec, Graph};
use crate::config::{ConfigKeys, Key};
use crate::error::{ModelError, Result};

/// A GGUF file's metadata under its `general.architecture`.
pub(crate) struct GgufKeys<'a, D: AsRef<[u8]>> {
    /// The file.
    pub g: &'a Gguf<D>,
    /// `general.architecture`.
    pub arch: String,
    /// Its row of the architecture table.
    pub spec: &'static ArchSpec,
}

impl<'a, D: AsRef<[u8]>> GgufKeys<'a, D> {
    /// The metadata of `g`, whose architecture must run `graph`.
    pub(crate) fn new(g: &'a Gguf<D>, graph: Graph) -> Result<GgufKeys<'a, D>> {
        let arch = g.architecture()?.to_string();
        match registry::for_gguf(&arch) {
            Some(spec) if spec.graph == graph => Ok(GgufKeys { g, arch, spec }),
            _ => Err(ModelError::UnsupportedArch { arch }),
        }
    }

    /// The full key of `suffix` (`{arch}.{suffix}`).
    pub(crate) fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    /// `{arch}.{suffix}` as a string, `None` when absent.
    pub(crate) fn opt_str(&self, suffix: &str) -> Option<String> {
        self.g.get(&self.key(suffix)).map(|v| v.as_str().unwrap_or("(not a string)").to_string())
    }
}

impl<D: AsRef<[u8]>> ConfigKeys for GgufKeys<'_, D> {
    fn name(&self, key: Key) -> String {
        self.key(key.gguf)
    }

    fn opt_count(&self, key: Key) -> Result<Option<usize>> {
        let name = self.name(key);
        match self.g.get(&name) {
            None => Ok(None),
            Some(v) => match v.to_u64() {
                Some(n) => Ok(Some(n as usize)),
                None => Err(ModelError::BadKey {
                    key: name,
                    message: format!("expected an integer, found {}", v.type_description()),
                }),
            },
        }
    }

    fn opt_f32(&self, key: Key) -> Result<Option<f32>> {
        let name = self.name(key);
        match self.g.get(&name) {
            None => Ok(None),
            Some(v) => match v.to_f64() {
                Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x as f32)),
                _ => Err(ModelError::BadKey { key: name, message: format!("expected a positive number, found {v:?}") }),
            },
        }
    }

    fn vocab(&self, n_embd: usize) -> Result<usize> {
        vocab_from_embeddings(self.g, n_embd)
    }
}

/// The vocabulary size: rows of `token_embd.weight`, which must be `[vocab, n_embd]`.
pub(crate) fn vocab_from_embeddings<D: AsRef<[u8]>>(g: &Gguf<D>, n_embd: usize) -> Result<usize> {
    let name = "token_embd.weight";
    let embd = g.tensor_info(name).map_err(|_| ModelError::MissingTensor { tensor: name.into() })?;
    match embd.shape.as_slice() {
        [vocab, n] if *n == n_embd && *vocab > 0 => Ok(*vocab),
        actual => Err(ModelError::TensorShape {
            tensor: name.into(),
            expected: vec![embd.shape.first().copied().unwrap_or(0), n_embd],
            actual: actual.to_vec(),
        }),
    }
}
