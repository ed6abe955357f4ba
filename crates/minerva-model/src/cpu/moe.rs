//! GPT-OSS mixture of experts on the CPU: route every row, then run each picked expert once over
//! all the rows routed to it, reading only that expert's slice of the stacked (MXFP4) matrices.
//!
//! ```text
//! stacked expert matrix [n_expert, rows, cols], stored dtype, row-major:
//! +-----------------------+-----------------------+-----+
//! | expert 0: rows × cols | expert 1: rows × cols | ... |   expert e = bytes e·rows·row_bytes ..
//! +-----------------------+-----------------------+-----+
//! ```

use minerva_core::DType;
use minerva_quant::Product;

use super::{CpuBackend, CpuTensor, CpuWeight};
use crate::backend::{MoeExperts, MoeParams};
use crate::checks;
use crate::error::Result;

/// See [`crate::Backend::moe`].
pub(super) fn moe(
    backend: &CpuBackend,
    x: &CpuTensor,
    router_logits: &CpuTensor,
    experts: &MoeExperts<'_, CpuWeight>,
    p: &MoeParams,
) -> Result<CpuTensor> {
    let (n_embd, n_expert, k) = (x.cols, p.n_expert, p.n_expert_used);
    checks::moe(x.rows, (router_logits.rows, router_logits.cols), p)?;
    let n_ff = experts.gate.rows / n_expert;
    let check = |w: &CpuWeight, experts: usize, rows: usize, cols: usize| {
        checks::experts(&w.name, w.shape(), experts, rows, cols)
    };
    check(experts.gate, n_expert, n_ff, n_embd)?;
    check(experts.up, n_expert, n_ff, n_embd)?;
    check(experts.down, n_expert, n_embd, n_ff)?;
    check(experts.gate_bias, 1, n_expert, n_ff)?;
    check(experts.up_bias, 1, n_expert, n_ff)?;
    check(experts.down_bias, 1, n_expert, n_embd)?;

    // Routing: top-k logits (ties to the lower index), softmax over the k.
    let mut routed: Vec<Vec<(usize, f32)>> = vec![Vec::new(); n_expert];
    for (r, logits) in router_logits.data.chunks_exact(n_expert).enumerate() {
        let mut order: Vec<usize> = (0..n_expert).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let top = &order[..k];
        let max = logits[top[0]];
        let exps: Vec<f32> = top.iter().map(|&e| (logits[e] - max).exp()).collect();
        let total: f32 = exps.iter().sum();
        for (&e, w) in top.iter().zip(exps) {
            routed[e].push((r, w / total));
        }
    }

    let mut out = CpuTensor::zeros(x.rows, n_embd);
    let mut gate_up = if x.rows == 1 && !backend.f32_activations {
        decode_gate_up(experts, &routed, n_ff, &x.data)?
    } else {
        Vec::new()
    }
    .into_iter();
    for (e, rows) in routed.iter().enumerate().filter(|(_, rows)| !rows.is_empty()) {
        let n = rows.len();
        let (mut gate, mut up) = match gate_up.next() {
            Some(computed) => computed,
            None => {
                let mut xs = Vec::with_capacity(n * n_embd);
                for &(r, _) in rows {
                    xs.extend_from_slice(&x.data[r * n_embd..(r + 1) * n_embd]);
                }
                (
                    expert_matmul(backend, experts.gate, e, n_ff, &xs, n)?,
                    expert_matmul(backend, experts.up, e, n_ff, &xs, n)?,
                )
            }
        };
        add_row_bias(&mut gate, &bias_row(experts.gate_bias, e)?);
        add_row_bias(&mut up, &bias_row(experts.up_bias, e)?);
        for (g, u) in gate.iter_mut().zip(&up) {
            *g = swiglu_oai(*g, *u, p.alpha, p.limit);
        }
        let mut down = expert_matmul(backend, experts.down, e, n_embd, &gate, n)?;
        add_row_bias(&mut down, &bias_row(experts.down_bias, e)?);
        for (&(r, w), y) in rows.iter().zip(down.chunks_exact(n_embd)) {
            out.data[r * n_embd..(r + 1) * n_embd].iter_mut().zip(y).for_each(|(o, y)| *o += w * y);
        }
    }
    Ok(out)
}

/// A decode's gate and up products for every picked expert (in expert order), as
/// `expert_matmul` computes them but in one `matmul_i16_each`: the picked experts all read the
/// one row, and their eight matrices then take one parallel loop instead of eight.
fn decode_gate_up(
    experts: &MoeExperts<'_, CpuWeight>,
    routed: &[Vec<(usize, f32)>],
    n_ff: usize,
    x: &[f32],
) -> Result<Vec<(Vec<f32>, Vec<f32>)>> {
    let picked: Vec<usize> = routed.iter().enumerate().filter(|(_, rows)| !rows.is_empty()).map(|(e, _)| e).collect();
    let mut outs: Vec<(Vec<f32>, Vec<f32>)> = picked.iter().map(|_| (vec![0.0; n_ff], vec![0.0; n_ff])).collect();
    let mut products = Vec::with_capacity(2 * picked.len());
    for (&e, (gate, up)) in picked.iter().zip(outs.iter_mut()) {
        for (w, ys) in [(experts.gate, gate), (experts.up, up)] {
            products.push(Product { dtype: w.dtype, weights: expert_bytes(w, e, n_ff)?, rows: n_ff, ys });
        }
    }
    minerva_quant::matmul_i16_each(&mut products, x.len(), x, 1)?;
    Ok(outs)
}

/// OpenAI's SwiGLU variant: the gate clamped above, the linear part clamped both ways and
/// shifted by one.
fn swiglu_oai(gate: f32, up: f32, alpha: f32, limit: f32) -> f32 {
    let g = gate.min(limit);
    let u = up.clamp(-limit, limit);
    g / (1.0 + (-alpha * g).exp()) * (u + 1.0)
}

/// Expert `e`'s bytes of a stacked matrix with `rows` rows per expert.
fn expert_bytes(w: &CpuWeight, e: usize, rows: usize) -> Result<&[u8]> {
    let row_bytes = w.dtype.row_bytes(w.cols).ok_or_else(|| {
        checks::operands("moe", format!("{} rows of {} {} values are not whole blocks", w.name, w.cols, w.dtype))
    })?;
    Ok(&w.bytes()[e * rows * row_bytes..(e + 1) * rows * row_bytes])
}

/// `xs · W[e]ᵀ` for `n` rows: the fused quantized kernel (i16 activations) on the expert's bytes, or, in the f32
/// reference mode, the expert's matrix dequantized and multiplied in f32.
fn expert_matmul(backend: &CpuBackend, w: &CpuWeight, e: usize, rows: usize, xs: &[f32], n: usize) -> Result<Vec<f32>> {
    let bytes = expert_bytes(w, e, rows)?;
    let mut out = vec![0.0; n * rows];
    if backend.f32_activations && w.dtype != DType::F32 {
        let mut values = vec![0.0f32; rows * w.cols];
        minerva_quant::dequantize_fast(w.dtype, bytes, &mut values)?;
        let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        minerva_quant::matmul(DType::F32, &f32_bytes, rows, w.cols, xs, n, &mut out)?;
    } else {
        // i16 activations, as the dense layers: Q8_0 activations moved this model's logits 1000×
        // more (docs/model.md).
        minerva_quant::matmul_i16(w.dtype, bytes, rows, w.cols, xs, n, &mut out)?;
    }
    Ok(out)
}

/// Row `e` of a `[n_expert, len]` bias matrix, as f32.
fn bias_row(w: &CpuWeight, e: usize) -> Result<Vec<f32>> {
    let mut values = vec![0.0; w.cols];
    minerva_quant::dequantize(w.dtype, expert_bytes(w, e, 1)?, &mut values)?;
    Ok(values)
}

fn add_row_bias(rows: &mut [f32], bias: &[f32]) {
    rows.chunks_exact_mut(bias.len()).for_each(|row| row.iter_mut().zip(bias).for_each(|(v, b)| *v += b));
}

#[cfg(test)]
mod tests {
    use super::swiglu_oai;

    #[test]
    fn swiglu_oai_clamps_as_the_reference() {
        // gate above the limit is clamped to 7; up is clamped to ±7 and shifted by one.
        let sig = |v: f32| 1.0 / (1.0 + (-1.702 * v).exp());
        assert_eq!(swiglu_oai(9.0, 20.0, 1.702, 7.0), 7.0 * sig(7.0) * 8.0);
        assert_eq!(swiglu_oai(-9.0, -20.0, 1.702, 7.0), -9.0 * sig(-9.0) * -6.0);
        assert_eq!(swiglu_oai(0.5, 0.0, 1.702, 7.0), 0.5 * sig(0.5));
    }
}
