//! GPT-OSS mixture of experts on the CPU: route every row, then run each picked expert once over
//! all the rows routed to it, reading only that expert's slice of the stacked (MXFP4) matrices.
//!
//! ```text
//! stacked expert matrix [n_expert, rows, cols], stored dtype, row-major:
//! +-----------------------+-----------------------+-----+
//! | expert 0: rows × cols | expert 1: rows × cols | ... |   expert e = bytes e·rows·row_bytes ..
//! +-----------------------+-----------------------+-----+
//! ```

use std::cell::{Cell, RefCell};

use minerva_core::DType;
use minerva_quant::{Matrix, Product};

use super::{CpuBackend, CpuTensor, CpuWeight};
use crate::backend::{MoeExperts, MoeParams};
use crate::checks;
use crate::error::Result;

/// A call's working vectors, kept per thread between calls (a decode step calls once per layer).
#[derive(Default)]
struct Scratch {
    /// Expert indices being ranked for one row.
    order: Vec<usize>,
    /// (expert, row, weight) of every pick, then sorted by expert and row.
    picks: Vec<(usize, usize, f32)>,
    /// An expert's rows of `x`, gathered.
    xs: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    /// Gate and up products interleaved, from an HF `gate_up_proj` read as one matrix.
    pair: Vec<f32>,
    down: Vec<f32>,
    bias: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

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
    SCRATCH.with_borrow_mut(|scratch| {
        let Scratch { order, picks, xs, gate, up, pair, down, bias } = scratch;
        route(router_logits, n_expert, k, order, picks);
        let mut out = CpuTensor::zeros(x.rows, n_embd);
        let decode = x.rows == 1 && !backend.f32_activations;
        if decode {
            // Every pick's gate and up products, in pick order, in one call.
            decode_gate_up(backend, experts, picks, n_ff, &x.data, gate, up, pair)?;
        }
        for (i, run) in picks.chunk_by(|a, b| a.0 == b.0).enumerate() {
            let (e, n) = (run[0].0, run.len());
            let (gate, up) = if decode {
                (&mut gate[i * n_ff..][..n_ff], &mut up[i * n_ff..][..n_ff])
            } else {
                xs.clear();
                for &(_, r, _) in run {
                    xs.extend_from_slice(&x.data[r * n_embd..(r + 1) * n_embd]);
                }
                match experts.gate.interleaved_with(experts.up) {
                    Some(both) if !backend.f32_activations => {
                        let matrix = both.rows(e * 2 * n_ff, 2 * n_ff, n_embd)?;
                        pair.resize(n * 2 * n_ff, 0.0);
                        minerva_quant::matmul_i16_matrix(matrix, 2 * n_ff, n_embd, xs, n, pair)?;
                        deinterleave(pair, gate, up);
                    }
                    _ => {
                        expert_matmul(backend, experts.gate, e, n_ff, xs, n, gate)?;
                        expert_matmul(backend, experts.up, e, n_ff, xs, n, up)?;
                    }
                }
                (&mut gate[..], &mut up[..])
            };
            add_row_bias(gate, bias_row(experts.gate_bias, e, bias)?);
            add_row_bias(up, bias_row(experts.up_bias, e, bias)?);
            for (g, u) in gate.iter_mut().zip(up.iter()) {
                *g = swiglu_oai(*g, *u, p.alpha, p.limit);
            }
            expert_matmul(backend, experts.down, e, n_embd, gate, n, down)?;
            add_row_bias(down, bias_row(experts.down_bias, e, bias)?);
            for (&(_, r, w), y) in run.iter().zip(down.chunks_exact(n_embd)) {
                out.data[r * n_embd..(r + 1) * n_embd].iter_mut().zip(y).for_each(|(o, y)| *o += w * y);
            }
        }
        Ok(out)
    })
}

/// Routing: each row's top `k` logits (ties to the lower index), weighted by the softmax over
/// those `k`, as `picks` of (expert, row, weight) sorted by expert, then row.
fn route(
    router_logits: &CpuTensor,
    n_expert: usize,
    k: usize,
    order: &mut Vec<usize>,
    picks: &mut Vec<(usize, usize, f32)>,
) {
    picks.clear();
    // A total order (`total_cmp`, then the index), so unstable sorting ranks as a stable sort.
    for (r, logits) in router_logits.data.chunks_exact(n_expert).enumerate() {
        let rank = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
        order.clear();
        order.extend(0..n_expert);
        order.select_nth_unstable_by(k - 1, rank);
        order[..k].sort_unstable_by(rank);
        let max = logits[order[0]];
        let first = picks.len();
        picks.extend(order[..k].iter().map(|&e| (e, r, (logits[e] - max).exp())));
        let total: f32 = picks[first..].iter().map(|pick| pick.2).sum();
        picks[first..].iter_mut().for_each(|pick| pick.2 /= total);
    }
    picks.sort_unstable_by_key(|&(e, r, _)| (e, r));
}

/// A decode's gate and up products for every pick (one row: one pick per expert, in expert
/// order) into `gate` and `up` (`n_ff` values per pick), as `expert_matmul` computes them but in
/// one `matmul_i16_each`: the picked experts all read the one row, and their matrices then take
/// one parallel loop instead of one each.
#[allow(clippy::too_many_arguments)]
fn decode_gate_up(
    backend: &CpuBackend,
    experts: &MoeExperts<'_, CpuWeight>,
    picks: &[(usize, usize, f32)],
    n_ff: usize,
    x: &[f32],
    gate: &mut Vec<f32>,
    up: &mut Vec<f32>,
    pair: &mut Vec<f32>,
) -> Result<()> {
    gate.resize(picks.len() * n_ff, 0.0);
    up.resize(picks.len() * n_ff, 0.0);
    let mut products: Vec<Product<'_>> = PRODUCTS.take();
    if let Some(both) = experts.gate.interleaved_with(experts.up) {
        // HF's interleaved gate/up: each pick's 2·n_ff rows in one product, split afterwards.
        pair.resize(picks.len() * 2 * n_ff, 0.0);
        for (&(e, _, _), ys) in picks.iter().zip(pair.chunks_exact_mut(2 * n_ff)) {
            products.push(Product { matrix: both.rows(e * 2 * n_ff, 2 * n_ff, x.len())?, rows: 2 * n_ff, ys });
        }
        let result = minerva_quant::matmul_i16_each(&mut products, x.len(), x, 1);
        PRODUCTS.set(minerva_core::recycle_vec(products));
        result?;
        deinterleave(pair, gate, up);
        return Ok(());
    }
    let outputs = gate.chunks_exact_mut(n_ff).zip(up.chunks_exact_mut(n_ff));
    for (&(e, _, _), (gate, up)) in picks.iter().zip(outputs) {
        for (w, ys) in [(experts.gate, gate), (experts.up, up)] {
            products.push(Product { matrix: expert_matrix(backend, w, e, n_ff)?, rows: n_ff, ys });
        }
    }
    let result = minerva_quant::matmul_i16_each(&mut products, x.len(), x, 1);
    PRODUCTS.set(minerva_core::recycle_vec(products));
    Ok(result?)
}

thread_local! {
    /// `decode_gate_up`'s product list, kept empty between calls.
    static PRODUCTS: Cell<Vec<Product<'static>>> = const { Cell::new(Vec::new()) };
}

/// Interleaved rows `g0 u0 g1 u1 …` into `gate` and `up` (resized to half of `pair` each).
fn deinterleave(pair: &[f32], gate: &mut Vec<f32>, up: &mut Vec<f32>) {
    gate.clear();
    up.clear();
    gate.extend(pair.iter().step_by(2));
    up.extend(pair.iter().skip(1).step_by(2));
}

/// OpenAI's SwiGLU variant: the gate clamped above, the linear part clamped both ways and
/// shifted by one.
fn swiglu_oai(gate: f32, up: f32, alpha: f32, limit: f32) -> f32 {
    let g = gate.min(limit);
    let u = up.clamp(-limit, limit);
    g / (1.0 + (-alpha * g).exp()) * (u + 1.0)
}

/// Expert `e`'s matrix of a stacked matrix with `rows` rows per expert, as the products read it:
/// of the repacked copy where `--repack` makes one (the whole stack at its first product, with
/// 8-bit activations: `Repack::applies`), else in place.
fn expert_matrix<'a>(backend: &CpuBackend, w: &'a CpuWeight, e: usize, rows: usize) -> Result<Matrix<'a>> {
    let matrix = w.product_matrix(backend.repack_mode(), (&backend.repacked, backend.repack_memory));
    matrix.rows(e * rows, rows, w.cols).map_err(|err| checks::operands("moe", format!("{}: {err}", w.name)))
}

/// `xs · W[e]ᵀ` for `n` rows into `out` (resized to `n × rows`): the fused quantized kernel (i16
/// activations) on the expert's bytes, or, in the f32 reference mode, the expert's matrix
/// dequantized and multiplied in f32.
fn expert_matmul(
    backend: &CpuBackend,
    w: &CpuWeight,
    e: usize,
    rows: usize,
    xs: &[f32],
    n: usize,
    out: &mut Vec<f32>,
) -> Result<()> {
    let matrix = expert_matrix(backend, w, e, rows)?;
    out.resize(n * rows, 0.0);
    if backend.f32_activations && w.dtype != DType::F32 {
        let mut values = vec![0.0f32; rows * w.cols];
        matrix.dequantize(rows, w.cols, &mut values)?;
        let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        minerva_quant::matmul(DType::F32, &f32_bytes, rows, w.cols, xs, n, out)?;
    } else {
        // i16 activations, as the dense layers (Q8_0 activations moved this model's logits 1000×
        // more, docs/model.md); 8-bit ones only for a repacked copy (`--repack on`).
        minerva_quant::matmul_i16_matrix(matrix, rows, w.cols, xs, n, out)?;
    }
    Ok(())
}

/// Row `e` of a `[n_expert, len]` bias matrix, as f32, in `values`.
fn bias_row<'a>(w: &CpuWeight, e: usize, values: &'a mut Vec<f32>) -> Result<&'a [f32]> {
    values.resize(w.cols, 0.0);
    let row = w.matrix().rows(e, 1, w.cols).map_err(|err| checks::operands("moe", format!("{}: {err}", w.name)))?;
    row.dequantize(1, w.cols, values)?;
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
