//! What each tensor becomes, and the byte work: dtype changes (row chunks, bounded memory) and
//! llama.cpp's Q/K row permutation.
//!
//! | canonical tensor | GGUF output | SafeTensors / MLX output |
//! |---|---|---|
//! | norms, biases, sinks, router in bf16/f16 | f32 (as llama.cpp stores them; widening is exact) | as stored |
//! | weight matrix, float | as stored; `--quant` → its type (`mixture.rs`); `--dtype` → that float | as stored; `--dtype` → that float |
//! | weight matrix, GGML-quantized | as stored; `--quant` → its type, re-quantized | dequantized to `--dtype` (bf16) |
//! | GPT-OSS MXFP4 experts | MXFP4 | MXFP4 (HF `_blocks`/`_scales`, MLX mxfp4) |
//! | router (`ffn_gate_inp`) | as stored (llama.cpp never quantizes it) | as stored |

use std::borrow::Cow;

use half::{bf16, f16};
use minerva_core::DType;

use super::mixture::matrix_types;
use super::{ConvertError, ConvertOptions, Report, Result, Target, unsupported};
use crate::convert::source::{CanonTensor, SourceModel};

/// `values` as little-endian bytes of `dtype` (F32, F16 or BF16).
pub(crate) fn float_bytes(dtype: DType, values: &[f32]) -> Vec<u8> {
    match dtype {
        DType::BF16 => values.iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect(),
        DType::F16 => values.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

pub(crate) fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// A weight matrix (what `--quant` / `--dtype` apply to): a 2-D+ `.weight` that is not a norm or
/// the MoE router.
fn is_matrix(t: &CanonTensor) -> bool {
    t.shape.len() >= 2 && t.name.ends_with(".weight") && !t.name.contains("norm") && !t.name.contains("ffn_gate_inp")
}

/// GPT-OSS's expert matrices, which stay MXFP4 in every layout.
pub(crate) fn is_mxfp4_experts(t: &CanonTensor) -> bool {
    t.dtype == DType::MXFP4 && t.name.contains("_exps.weight")
}

/// The dtype each tensor of `model` is written as, in order.
pub(crate) fn output_dtypes(model: &SourceModel, opts: &ConvertOptions) -> Result<Vec<DType>> {
    let quantized = match (opts.quant, opts.target) {
        (Some(q), Target::Gguf) => {
            let config = model.config();
            matrix_types(q, &model.tensors, is_matrix, config.n_layer, (model.spec.llama_cpp_70b)(config))
        }
        _ => vec![None; model.tensors.len()],
    };
    model.tensors.iter().zip(quantized).map(|(t, q)| output_dtype(t, q, opts)).collect()
}

/// The dtype `t` is written as; `quant`: the type `--quant` gives it.
pub(crate) fn output_dtype(t: &CanonTensor, quant: Option<DType>, opts: &ConvertOptions) -> Result<DType> {
    if is_mxfp4_experts(t) {
        return Ok(DType::MXFP4);
    }
    let dequantized = opts.dtype.unwrap_or(DType::BF16);
    Ok(match opts.target {
        Target::Gguf => {
            if !is_matrix(t) {
                // llama.cpp keeps every float tensor that is not a weight matrix (norms, biases,
                // sinks, the MoE router) in f32.
                if is_float(t.dtype) { DType::F32 } else { t.dtype }
            } else if let Some(q) = quant {
                q
            } else if let Some(d) = opts.dtype
                && is_float(t.dtype)
            {
                d
            } else {
                t.dtype
            }
        }
        Target::SafeTensors | Target::Mlx => {
            if !is_float(t.dtype) {
                if t.dtype.info().quantized || t.dtype == DType::MXFP4 {
                    dequantized
                } else {
                    return Err(unsupported(
                        format!("tensor {}", t.name),
                        format!("{} in a SafeTensors model", t.dtype),
                    ));
                }
            } else if let Some(d) = opts.dtype
                && is_matrix(t)
            {
                d
            } else {
                t.dtype
            }
        }
    })
}

/// Counts `t` written as `to` (`repacked`: the writer rearranged its bytes).
pub(crate) fn record(report: &mut Report, t: &CanonTensor, to: DType, repacked: bool) {
    let (from, repacked) = (t.dtype, repacked || t.repacked());
    if t.mlx_affine() {
        report.mlx_affine_dequantized += 1;
        return;
    }
    if from == to {
        if repacked {
            report.repacked += 1
        } else {
            report.copied += 1
        }
        return;
    }
    // Exact: f32 holds every value of f16, bf16 and the block formats' dequantized values.
    let exact = to == DType::F32;
    let map = if exact { &mut report.widened } else { &mut report.lossy };
    *map.entry((from, to)).or_default() += 1;
}

/// Gemma norm factors between Hugging Face's `w` and GGUF's `1 + w`: `values` (of `from`) plus
/// `delta` (1 or −1), in f32, as f32 bytes; and whether subtracting `delta` again gives back every
/// input value exactly (so that the reverse conversion restores the source bit for bit).
pub(crate) fn shift_norm(name: &str, from: DType, bytes: &[u8], delta: f32) -> Result<(Vec<u8>, bool)> {
    let n = bytes.len() / from.info().block_bytes.max(1) as usize;
    let mut values = vec![0.0f32; n];
    minerva_quant::dequantize(from, bytes, &mut values)
        .map_err(|source| ConvertError::Quant { tensor: name.to_string(), source })?;
    let mut exact = true;
    let shifted: Vec<f32> = values
        .iter()
        .map(|&w| {
            let v = w + delta;
            exact &= (v - delta).to_bits() == w.to_bits();
            v
        })
        .collect();
    Ok((float_bytes(DType::F32, &shifted), exact))
}

/// Counts a Gemma norm written shifted; `exact`: shifting back restores the source.
pub(crate) fn record_shift(report: &mut Report, exact: bool) {
    if exact { report.shifted += 1 } else { report.shift_rounded += 1 }
}

/// Values per conversion chunk: bounded memory for any tensor size.
const CHUNK_VALUES: usize = 1 << 20;

/// `bytes` (rows of `cols` values of `from`) as `to`, converted a chunk of rows at a time.
pub(crate) fn convert_bytes<'a>(
    name: &str,
    from: DType,
    to: DType,
    bytes: &'a [u8],
    cols: usize,
) -> Result<Cow<'a, [u8]>> {
    if from == to {
        return Ok(Cow::Borrowed(bytes));
    }
    let quant = |e| ConvertError::Quant { tensor: name.to_string(), source: e };
    let bad = || unsupported(format!("tensor {name}"), format!("rows of {cols} values cannot be {from} → {to}"));
    let (in_row, out_row) = (from.row_bytes(cols).ok_or_else(bad)?, to.row_bytes(cols).ok_or_else(bad)?);
    if in_row == 0 || !bytes.len().is_multiple_of(in_row) {
        return Err(bad());
    }
    let rows = bytes.len() / in_row;
    let rows_per_chunk = (CHUNK_VALUES / cols.max(1)).max(1);
    let mut out = Vec::with_capacity(rows.checked_mul(out_row).ok_or_else(bad)?);
    let mut values = Vec::new();
    for chunk in bytes.chunks(rows_per_chunk * in_row) {
        values.resize(chunk.len() / in_row * cols, 0.0);
        minerva_quant::dequantize_fast(from, chunk, &mut values).map_err(quant)?;
        if is_float(to) {
            out.extend_from_slice(&float_bytes(to, &values));
        } else {
            let start = out.len();
            out.resize(start + chunk.len() / in_row * out_row, 0);
            minerva_quant::quantize(to, &values, &mut out[start..]).map_err(quant)?;
        }
    }
    Ok(Cow::Owned(out))
}

/// llama.cpp's `LlamaModel.permute` of a Q or K matrix (`rows` rows over `heads` heads): within
/// each head, half-split rows `(i, i + d/2)` become adjacent rows `(2i, 2i + 1)`, so adjacent-pair
/// RoPE on the result equals `rotate_half` on the input. `inverse` undoes it. Rows are whole
/// byte runs in every dtype, so this works on quantized rows too.
pub(crate) fn permute_qk_rows(name: &str, bytes: &[u8], rows: usize, heads: usize, inverse: bool) -> Result<Vec<u8>> {
    let bad =
        || unsupported(format!("tensor {name}"), format!("{rows} rows do not split into {heads} heads of even size"));
    if heads == 0 || rows == 0 || !rows.is_multiple_of(heads) || !(rows / heads).is_multiple_of(2) {
        return Err(bad());
    }
    if !bytes.len().is_multiple_of(rows) {
        return Err(bad());
    }
    let (row_bytes, head_dim) = (bytes.len() / rows, rows / heads);
    let half = head_dim / 2;
    let mut out = vec![0u8; bytes.len()];
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let split = h * head_dim + j * half + i;
                let adjacent = h * head_dim + 2 * i + j;
                let (src, dst) = if inverse { (adjacent, split) } else { (split, adjacent) };
                out[dst * row_bytes..(dst + 1) * row_bytes]
                    .copy_from_slice(&bytes[src * row_bytes..(src + 1) * row_bytes]);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_round_trips_and_pairs_halves() {
        // 2 heads × 4 rows of one byte: head rows (0,1 | 2,3) → (0,2,1,3).
        let rows: Vec<u8> = (0..8).collect();
        let p = permute_qk_rows("q", &rows, 8, 2, false).unwrap();
        assert_eq!(p, [0, 2, 1, 3, 4, 6, 5, 7]);
        assert_eq!(permute_qk_rows("q", &p, 8, 2, true).unwrap(), rows);
        assert!(permute_qk_rows("q", &rows, 8, 3, false).is_err());
    }

    #[test]
    fn conversions_are_chunked_and_exact_where_they_should_be() {
        let values: Vec<f32> = (0..64 * 3).map(|i| (i as f32 - 90.0) / 16.0).collect();
        let f32s = float_bytes(DType::F32, &values);
        let q8 = convert_bytes("w", DType::F32, DType::Q8_0, &f32s, 64).unwrap();
        assert_eq!(q8.len(), 3 * 2 * 34);
        let back = convert_bytes("w", DType::Q8_0, DType::F32, &q8, 64).unwrap();
        let again = convert_bytes("w", DType::F32, DType::Q8_0, &back, 64).unwrap();
        assert_eq!(q8, again, "Q8_0 → f32 → Q8_0 gives the same blocks");
        let bf = float_bytes(DType::BF16, &values);
        let wide = convert_bytes("w", DType::BF16, DType::F32, &bf, 64).unwrap();
        assert_eq!(convert_bytes("w", DType::F32, DType::BF16, &wide, 64).unwrap(), bf);
        assert!(convert_bytes("w", DType::F32, DType::Q8_0, &f32s[..4 * 40], 40).is_err());
    }
}
