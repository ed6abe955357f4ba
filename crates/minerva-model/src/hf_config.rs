//! [`HfKeys`]: the one reader of a Hugging Face `config.json`, shared by every architecture.
//!
//! Keys as transformers writes them (`hidden_size`, `num_key_value_heads`, …); JSON `null` counts
//! as absent (transformers writes `"head_dim": null`). Errors are the same variants as GGUF's
//! ([`ModelError::MissingKey`], [`ModelError::BadKey`]) and name the key as
//! `config.json:<key>`, nested ones with their path (`config.json:rope_parameters.factor`).

use serde_json::{Map, Value};

use crate::arch::registry::{self, ArchSpec, Graph};
use crate::config::{ConfigKeys, Key};
use crate::error::{ModelError, Result};

/// A `config.json` object (or one of its nested objects, named by `prefix`).
#[derive(Clone, Copy)]
pub(crate) struct HfKeys<'a> {
    obj: &'a Map<String, Value>,
    /// `""` at the top level, `"rope_parameters."` inside that object.
    prefix: &'a str,
}

static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl<'a> HfKeys<'a> {
    /// The top level of `json`, which must be an object.
    pub(crate) fn new(json: &'a Value) -> Result<HfKeys<'a>> {
        let obj = json
            .as_object()
            .ok_or_else(|| ModelError::BadKey { key: "config.json:".into(), message: "not a JSON object".into() })?;
        Ok(HfKeys { obj, prefix: "" })
    }

    /// `model_type`, which must be present.
    pub(crate) fn model_type(&self) -> Result<&'a str> {
        self.get("model_type").and_then(Value::as_str).ok_or_else(|| self.missing("model_type"))
    }

    /// The row of the architecture table `model_type` names, which must run `graph`.
    pub(crate) fn spec(&self, graph: Graph) -> Result<&'static ArchSpec> {
        let model_type = self.model_type()?;
        match registry::for_hf(model_type) {
            Some(spec) if spec.graph == graph => Ok(spec),
            _ => Err(ModelError::UnsupportedArch { arch: model_type.to_string() }),
        }
    }

    /// The nested object `name` (`prefix` is its dotted path with a trailing dot, as errors print
    /// it); an absent or `null` one reads as empty.
    pub(crate) fn nested(&self, name: &str, prefix: &'a str) -> Result<HfKeys<'a>> {
        match self.get(name) {
            None => Ok(HfKeys { obj: &EMPTY, prefix }),
            Some(Value::Object(obj)) => Ok(HfKeys { obj, prefix }),
            Some(other) => Err(self.bad_named(name, format!("expected an object, found {other}"))),
        }
    }

    /// The full key of `name` as messages print it.
    pub(crate) fn key(&self, name: &str) -> String {
        format!("config.json:{}{name}", self.prefix)
    }

    /// `obj[name]`, `None` when absent or `null`.
    pub(crate) fn get(&self, name: &str) -> Option<&'a Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    /// Whether `name` is present (not `null`).
    pub(crate) fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// A missing-key error for `name`.
    pub(crate) fn missing(&self, name: &str) -> ModelError {
        ModelError::MissingKey { key: self.key(name) }
    }

    /// A bad-value error for `name`.
    pub(crate) fn bad_named(&self, name: &str, message: String) -> ModelError {
        ModelError::BadKey { key: self.key(name), message }
    }

    /// A count, `None` when absent.
    pub(crate) fn opt_count_named(&self, name: &str) -> Result<Option<usize>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) => Ok(Some(n as usize)),
                None => Err(self.bad_named(name, format!("expected a count, found {v}"))),
            },
        }
    }

    /// A non-zero count that must be present.
    pub(crate) fn count_named(&self, name: &str) -> Result<usize> {
        match self.opt_count_named(name)? {
            None => Err(self.missing(name)),
            Some(0) => Err(self.bad_named(name, "must not be 0".into())),
            Some(n) => Ok(n),
        }
    }

    /// A positive finite number, `None` when absent.
    pub(crate) fn opt_f32_named(&self, name: &str) -> Result<Option<f32>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x as f32)),
                _ => Err(self.bad_named(name, format!("expected a positive number, found {v}"))),
            },
        }
    }

    /// A positive number that must be present.
    pub(crate) fn f32_named(&self, name: &str) -> Result<f32> {
        self.opt_f32_named(name)?.ok_or_else(|| self.missing(name))
    }

    /// A boolean, `None` when absent.
    pub(crate) fn opt_bool(&self, name: &str) -> Result<Option<bool>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => {
                v.as_bool().map(Some).ok_or_else(|| self.bad_named(name, format!("expected true or false, found {v}")))
            }
        }
    }

    /// A list of `len` positive numbers (long-rope factors).
    pub(crate) fn factor_list(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let v = self.get(name).ok_or_else(|| self.missing(name))?;
        let values: Option<Vec<f32>> = v
            .as_array()
            .map(|a| a.iter().map(|x| x.as_f64().filter(|x| x.is_finite() && *x > 0.0).map(|x| x as f32)).collect())
            .unwrap_or(None);
        match values {
            Some(values) if values.len() == len => Ok(values),
            _ => Err(self.bad_named(name, format!("expected {len} positive numbers (one per rotated pair)"))),
        }
    }

    /// Rejects a boolean option that our graphs do not implement when it is on.
    pub(crate) fn must_be_off(&self, name: &str) -> Result<()> {
        if self.get(name).and_then(Value::as_bool) == Some(true) {
            return Err(self.bad_named(name, "true is not supported".into()));
        }
        Ok(())
    }
}

impl ConfigKeys for HfKeys<'_> {
    fn name(&self, key: Key) -> String {
        self.key(key.hf)
    }

    fn opt_count(&self, key: Key) -> Result<Option<usize>> {
        if key.hf.is_empty() { Ok(None) } else { self.opt_count_named(key.hf) }
    }

    fn opt_f32(&self, key: Key) -> Result<Option<f32>> {
        if key.hf.is_empty() { Ok(None) } else { self.opt_f32_named(key.hf) }
    }

    fn vocab(&self, _n_embd: usize) -> Result<usize> {
        // The embeddings' shape is checked against it when the weights load.
        self.count_named("vocab_size")
    }
}
