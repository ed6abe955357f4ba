//! Logical tensors: quantized component groups seen as one tensor with its true shape.
//!
//! * HF GPT-OSS MXFP4 (format-specs §4.3): `X_blocks` u8 `[.., rows, in/32, 16]` + `X_scales` u8
//!   `[.., rows, in/32]` → `X` `[.., rows, in]`. Recognised by name alone.
//! * MLX (§4.4), only when `config.json` has a `quantization` section: `m.weight` u32 + `m.scales`
//!   (+ `m.biases` in affine mode) → `m.weight` `[.., out, in]`. `bits`, `group_size` and `mode` come
//!   from the section's top level, overridden per module by `quantization["m"]` (an object; `false`
//!   leaves the module unquantized).
//!
//! Dequantization is `minerva-quant`'s job; this module only checks that the components fit.

use minerva_core::{DType, TensorView};
use serde_json::Value;

use crate::error::{Result, SafetensorsError};

/// What grouping stored tensors into logical ones needs from a checkpoint (implemented by
/// `Checkpoint`, which owns the logical list; kept here so that this module does not depend on it).
pub(crate) trait StoredTensors {
    /// Number of stored tensors.
    fn len(&self) -> usize;
    /// Stored tensor `index` (in the checkpoint's tensor order).
    fn view(&self, index: usize) -> TensorView<'_>;
    /// The index of the stored tensor named `name`.
    fn index_of(&self, name: &str) -> Option<usize>;
    /// `config.json`'s `quantization` section, if any.
    fn quantization(&self) -> Option<&Value>;
}

/// A tensor as the model sees it: its logical shape and how its values are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogicalTensor<'a> {
    /// `X` for `X_blocks`/`X_scales`; `m.weight` for MLX; the stored name for plain tensors.
    pub name: &'a str,
    /// The dequantized shape, numpy order.
    pub shape: &'a [usize],
    /// The stored components.
    pub encoding: Encoding<'a>,
}

/// How a logical tensor's values are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding<'a> {
    /// One stored tensor, values as its dtype says.
    Plain(TensorView<'a>),
    /// HF GPT-OSS MXFP4: `value = FP4[nibble] * 2^(scale-127)`, element `2j` = low nibble of byte `j`.
    HfMxfp4 {
        /// `X_blocks`, u8 `[.., rows, in/32, 16]`.
        blocks: TensorView<'a>,
        /// `X_scales`, u8 (E8M0) `[.., rows, in/32]`.
        scales: TensorView<'a>,
    },
    /// MLX affine: `w = q*scale + bias`, `q` packed LSB-first in u32 words.
    MlxAffine {
        /// `m.weight`, u32 `[.., out, in*bits/32]`.
        weight: TensorView<'a>,
        /// `m.scales`, float `[.., out, in/group_size]`.
        scales: TensorView<'a>,
        /// `m.biases`, same shape and dtype as `scales`.
        biases: TensorView<'a>,
        /// Bits per element.
        bits: u32,
        /// Elements per scale/bias.
        group_size: u32,
    },
    /// MLX mxfp4: 8 nibbles per u32 LSB-first (bytes as HF `_blocks`), u8 E8M0 scales, no biases.
    MlxMxfp4 {
        /// `m.weight`, u32 `[.., out, in/8]`.
        weight: TensorView<'a>,
        /// `m.scales`, u8 `[.., out, in/group_size]`.
        scales: TensorView<'a>,
        /// Elements per scale (32).
        group_size: u32,
    },
}

impl Encoding<'_> {
    /// A short name: `"plain"`, `"hf-mxfp4"`, `"mlx-affine"` or `"mlx-mxfp4"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Encoding::Plain(_) => "plain",
            Encoding::HfMxfp4 { .. } => HF_MXFP4,
            Encoding::MlxAffine { .. } => MLX_AFFINE,
            Encoding::MlxMxfp4 { .. } => MLX_MXFP4,
        }
    }

    /// The stored tensors, first component first.
    pub fn components(&self) -> Vec<TensorView<'_>> {
        match *self {
            Encoding::Plain(v) => vec![v],
            Encoding::HfMxfp4 { blocks, scales } => vec![blocks, scales],
            Encoding::MlxAffine { weight, scales, biases, .. } => vec![weight, scales, biases],
            Encoding::MlxMxfp4 { weight, scales, .. } => vec![weight, scales],
        }
    }
}

const HF_MXFP4: &str = "hf-mxfp4";
const MLX_AFFINE: &str = "mlx-affine";
const MLX_MXFP4: &str = "mlx-mxfp4";

/// Component indices into the stored tensors' order ([`StoredTensors::view`]).
enum Parts {
    Plain(usize),
    HfMxfp4 { blocks: usize, scales: usize },
    MlxAffine { weight: usize, scales: usize, biases: usize, bits: u32, group_size: u32 },
    MlxMxfp4 { weight: usize, scales: usize, group_size: u32 },
}

/// A validated logical tensor, resolved to views on demand.
pub(crate) struct LogicalEntry {
    pub name: String,
    shape: Vec<usize>,
    parts: Parts,
}

impl LogicalEntry {
    pub(crate) fn resolve<'a>(&'a self, ckpt: &'a impl StoredTensors) -> LogicalTensor<'a> {
        let v = |i: usize| ckpt.view(i);
        let encoding = match self.parts {
            Parts::Plain(i) => Encoding::Plain(v(i)),
            Parts::HfMxfp4 { blocks, scales } => Encoding::HfMxfp4 { blocks: v(blocks), scales: v(scales) },
            Parts::MlxAffine { weight, scales, biases, bits, group_size } => {
                Encoding::MlxAffine { weight: v(weight), scales: v(scales), biases: v(biases), bits, group_size }
            }
            Parts::MlxMxfp4 { weight, scales, group_size } => {
                Encoding::MlxMxfp4 { weight: v(weight), scales: v(scales), group_size }
            }
        };
        LogicalTensor { name: &self.name, shape: &self.shape, encoding }
    }
}

/// Quantization parameters of one MLX module.
#[derive(Clone, Debug, PartialEq, Eq)]
struct MlxParams {
    bits: u32,
    group_size: u32,
    mode: String,
}

/// Groups the checkpoint's tensors into logical tensors, validating every quantized group.
pub(crate) fn build(ckpt: &impl StoredTensors) -> Result<Vec<LogicalEntry>> {
    let quant = ckpt.quantization();
    let defaults = match quant {
        Some(section) => Some(params(section, None, "")?),
        None => None,
    };
    let mut used = vec![false; ckpt.len()];
    let mut out: Vec<(usize, LogicalEntry)> = Vec::new();
    for i in 0..ckpt.len() {
        let view = ckpt.view(i);
        let name = view.name;
        if let Some(base) = name.strip_suffix("_blocks") {
            let scales_name = format!("{base}_scales");
            let Some(s) = ckpt.index_of(&scales_name) else {
                return Err(missing(base, HF_MXFP4, scales_name));
            };
            let shape = hf_mxfp4_shape(base, view, ckpt.view(s))?;
            used[i] = true;
            used[s] = true;
            out.push((
                i,
                LogicalEntry { name: base.to_owned(), shape, parts: Parts::HfMxfp4 { blocks: i, scales: s } },
            ));
            continue;
        }
        let (Some(section), Some(defaults)) = (quant, &defaults) else { continue };
        let Some(module) = name.strip_suffix(".weight") else { continue };
        let Some(s) = ckpt.index_of(&format!("{module}.scales")) else { continue };
        let Some(p) = module_params(section, defaults, module)? else { continue };
        let scales = ckpt.view(s);
        expect_dtype(name, kind_of(&p), view, DType::U32, "U32")?;
        let (shape, parts) = if p.mode == "affine" {
            let biases_name = format!("{module}.biases");
            let Some(b) = ckpt.index_of(&biases_name) else {
                return Err(missing(name, MLX_AFFINE, biases_name));
            };
            let biases = ckpt.view(b);
            let shape = mlx_affine_shape(name, &p, view, scales, biases)?;
            used[b] = true;
            (shape, Parts::MlxAffine { weight: i, scales: s, biases: b, bits: p.bits, group_size: p.group_size })
        } else {
            let shape = mlx_mxfp4_shape(name, &p, view, scales)?;
            (shape, Parts::MlxMxfp4 { weight: i, scales: s, group_size: p.group_size })
        };
        used[i] = true;
        used[s] = true;
        out.push((i, LogicalEntry { name: name.to_owned(), shape, parts }));
    }
    for (i, _) in used.iter().enumerate().filter(|(_, used)| !**used) {
        let view = ckpt.view(i);
        let entry = LogicalEntry { name: view.name.to_owned(), shape: view.shape.to_vec(), parts: Parts::Plain(i) };
        out.push((i, entry));
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, e)| e).collect())
}

fn kind_of(p: &MlxParams) -> &'static str {
    if p.mode == "affine" { MLX_AFFINE } else { MLX_MXFP4 }
}

fn missing(name: &str, kind: &'static str, missing: String) -> SafetensorsError {
    SafetensorsError::MissingComponent { name: name.to_owned(), kind, missing }
}

fn expect_dtype(name: &str, kind: &'static str, v: TensorView<'_>, dtype: DType, expected: &'static str) -> Result<()> {
    if v.dtype == dtype {
        return Ok(());
    }
    Err(SafetensorsError::ComponentDType {
        name: name.to_owned(),
        kind,
        component: v.name.to_owned(),
        found: v.dtype,
        expected,
    })
}

fn bad_shape(name: &str, kind: &'static str, v: TensorView<'_>, expected: String) -> SafetensorsError {
    SafetensorsError::ComponentShape {
        name: name.to_owned(),
        kind,
        component: v.name.to_owned(),
        found: v.shape.to_vec(),
        expected,
    }
}

/// `[.., rows, nb, 16]` + `[.., rows, nb]` → `[.., rows, nb*32]`.
fn hf_mxfp4_shape(name: &str, blocks: TensorView<'_>, scales: TensorView<'_>) -> Result<Vec<usize>> {
    expect_dtype(name, HF_MXFP4, blocks, DType::U8, "U8")?;
    expect_dtype(name, HF_MXFP4, scales, DType::U8, "U8")?;
    let [prefix @ .., nb, 16] = blocks.shape else {
        return Err(bad_shape(name, HF_MXFP4, blocks, "[.., rows, in/32, 16]".into()));
    };
    if scales.shape.split_last() != Some((nb, prefix)) {
        let expected =
            format!("{:?} (the blocks' shape without its last dimension)", &blocks.shape[..prefix.len() + 1]);
        return Err(bad_shape(name, HF_MXFP4, scales, expected));
    }
    // The blocks hold nb*16 bytes per row, so nb*32 elements fit in usize unless nb is absurd.
    let cols = nb.checked_mul(32).ok_or_else(|| bad_shape(name, HF_MXFP4, blocks, "a smaller in/32".into()))?;
    Ok([prefix, &[cols]].concat())
}

/// `weight [.., out, in*bits/32]`, `scales`/`biases [.., out, in/group]` → `[.., out, in]`.
fn mlx_affine_shape(
    name: &str,
    p: &MlxParams,
    weight: TensorView<'_>,
    scales: TensorView<'_>,
    biases: TensorView<'_>,
) -> Result<Vec<usize>> {
    let (prefix, cols) = mlx_columns(name, MLX_AFFINE, weight, p.bits)?;
    if !matches!(scales.dtype, DType::F16 | DType::BF16 | DType::F32) {
        return Err(SafetensorsError::ComponentDType {
            name: name.to_owned(),
            kind: MLX_AFFINE,
            component: scales.name.to_owned(),
            found: scales.dtype,
            expected: "F16, BF16 or F32",
        });
    }
    let expected = group_shape(name, MLX_AFFINE, weight, prefix, cols, p.group_size)?;
    if scales.shape != expected.as_slice() {
        return Err(bad_shape(name, MLX_AFFINE, scales, format!("{expected:?}")));
    }
    expect_dtype(name, MLX_AFFINE, biases, scales.dtype, "the scales' dtype")?;
    if biases.shape != expected.as_slice() {
        return Err(bad_shape(name, MLX_AFFINE, biases, format!("{expected:?}")));
    }
    Ok([prefix, &[cols]].concat())
}

/// `weight u32 [.., out, in/8]`, `scales u8 [.., out, in/32]` → `[.., out, in]`.
fn mlx_mxfp4_shape(name: &str, p: &MlxParams, weight: TensorView<'_>, scales: TensorView<'_>) -> Result<Vec<usize>> {
    let (prefix, cols) = mlx_columns(name, MLX_MXFP4, weight, p.bits)?;
    expect_dtype(name, MLX_MXFP4, scales, DType::U8, "U8")?;
    let expected = group_shape(name, MLX_MXFP4, weight, prefix, cols, p.group_size)?;
    if scales.shape != expected.as_slice() {
        return Err(bad_shape(name, MLX_MXFP4, scales, format!("{expected:?}")));
    }
    Ok([prefix, &[cols]].concat())
}

/// The packed weight's outer dimensions and its logical row length `packed*32/bits`.
fn mlx_columns<'v>(name: &str, kind: &'static str, weight: TensorView<'v>, bits: u32) -> Result<(&'v [usize], usize)> {
    let Some((&packed, prefix)) = weight.shape.split_last() else {
        return Err(bad_shape(name, kind, weight, "at least one dimension".into()));
    };
    let bits_total = packed.checked_mul(32);
    match bits_total {
        Some(total) if total % bits as usize == 0 => Ok((prefix, total / bits as usize)),
        _ => Err(bad_shape(name, kind, weight, format!("a last dimension holding whole {bits}-bit elements"))),
    }
}

/// `prefix + [cols / group]`, checking whole groups.
fn group_shape(
    name: &str,
    kind: &'static str,
    weight: TensorView<'_>,
    prefix: &[usize],
    cols: usize,
    group: u32,
) -> Result<Vec<usize>> {
    if !cols.is_multiple_of(group as usize) {
        return Err(bad_shape(name, kind, weight, format!("a row length ({cols}) that is a multiple of {group}")));
    }
    Ok([prefix, &[cols / group as usize]].concat())
}

/// The parameters for `module`, or `None` when its entry is `false`. A module's own entry is
/// read as MLX reads it: `nn.quantize` passes it alone to `to_quantized`, so a key it leaves out
/// takes `to_quantized`'s default (4 bits, groups of 64, affine), not the top level's — mlx-lm
/// writes `{"group_size": 64, "bits": 8}` for the 8-bit layers of an MXFP4 GPT-OSS.
fn module_params(section: &Value, defaults: &MlxParams, module: &str) -> Result<Option<MlxParams>> {
    match section.get(module) {
        None => Ok(Some(defaults.clone())),
        Some(Value::Bool(false)) => Ok(None),
        Some(v @ Value::Object(_)) => params(v, None, module).map(Some),
        Some(_) => Err(quant_error(module, "expected an object or false".into())),
    }
}

fn quant_error(module: &str, reason: String) -> SafetensorsError {
    SafetensorsError::QuantConfig { module: module.to_owned(), reason }
}

/// Reads `bits`, `group_size` and `mode` from `v`, falling back to `base` (or MLX's 4 / 64 / affine).
fn params(v: &Value, base: Option<&MlxParams>, module: &str) -> Result<MlxParams> {
    if !v.is_object() {
        return Err(quant_error(module, "expected an object".into()));
    }
    let number = |key: &str, default: u32| -> Result<u32> {
        match v.get(key) {
            None => Ok(default),
            Some(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| quant_error(module, format!("{key} is {n}, expected a small unsigned integer"))),
        }
    };
    let bits = number("bits", base.map_or(4, |b| b.bits))?;
    let group_size = number("group_size", base.map_or(64, |b| b.group_size))?;
    let mode = match v.get("mode") {
        None => base.map_or_else(|| "affine".to_owned(), |b| b.mode.clone()),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(quant_error(module, format!("mode is {other}, expected a string"))),
    };
    match mode.as_str() {
        "affine" if matches!(bits, 2 | 3 | 4 | 5 | 6 | 8) && group_size > 0 => {}
        "affine" => return Err(quant_error(module, format!("affine bits {bits} / group_size {group_size}"))),
        "mxfp4" if bits == 4 && group_size == 32 => {}
        "mxfp4" => {
            return Err(quant_error(module, format!("mxfp4 needs bits 4, group_size 32, got {bits}/{group_size}")));
        }
        other => return Err(quant_error(module, format!("mode {other:?} is not supported (affine, mxfp4)"))),
    }
    Ok(MlxParams { bits, group_size, mode })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_entry_without_a_mode_is_affine_as_mlx_reads_it() {
        // mlx-lm's `convert -q --q-bits 8` of the MXFP4 GPT-OSS: experts stay MXFP4 (the top
        // level), the router is 8-bit affine in groups of 64 with no `mode` written.
        let section = serde_json::json!({
            "bits": 4, "group_size": 32, "mode": "mxfp4",
            "model.layers.0.mlp.router": {"group_size": 64, "bits": 8},
            "model.layers.0.mlp.gate": {"bits": 8},
            "model.layers.0.self_attn.q_proj": false
        });
        let defaults = params(&section, None, "quantization").unwrap();
        assert_eq!((defaults.bits, defaults.group_size, defaults.mode.as_str()), (4, 32, "mxfp4"));
        let router = module_params(&section, &defaults, "model.layers.0.mlp.router").unwrap().unwrap();
        assert_eq!((router.bits, router.group_size, router.mode.as_str()), (8, 64, "affine"));
        let gate = module_params(&section, &defaults, "model.layers.0.mlp.gate").unwrap().unwrap();
        assert_eq!((gate.bits, gate.group_size, gate.mode.as_str()), (8, 64, "affine"));
        let experts = module_params(&section, &defaults, "model.layers.0.mlp.experts.up_proj").unwrap().unwrap();
        assert_eq!((experts.bits, experts.group_size, experts.mode.as_str()), (4, 32, "mxfp4"));
        assert!(module_params(&section, &defaults, "model.layers.0.self_attn.q_proj").unwrap().is_none());
    }
}
