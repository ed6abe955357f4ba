//! f16 rows through an f32 vector kernel, a block of rows at a time widened into a buffer on the
//! stack: what a kernel set without f16 loads of its own does with an f16 KV cache. Widening is
//! exact and the f32 kernels' results for a row do not depend on the rows beside it, so the
//! results are those of the rows widened whole.

use half::f16;
use half::slice::HalfFloatSliceExt;

/// Values widened at a time (8 KiB: stays in L1 beside the operands).
const BLOCK: usize = 2048;

/// `crate::vector::widen_f16` by `half` (its own instructions where it has them): over the common
/// length.
pub(crate) fn widen_f16(values: &[f16], out: &mut [f32]) {
    let n = values.len().min(out.len());
    values[..n].convert_to_f32_slice(&mut out[..n]);
}

/// `crate::vector::dots_f16` through `dots`, an f32 `dots` kernel.
pub(crate) fn dots_f16(dots: impl Fn(&mut [f32], &[f32], &[f32]), out: &mut [f32], x: &[f32], rows: &[f16]) {
    let len = x.len();
    let written = rows.len().checked_div(len).map_or(0, |whole| out.len().min(whole));
    if written > 0 {
        let per_block = (BLOCK / len).max(1);
        let mut wide = Widened::new(len);
        for first in (0..written).step_by(per_block) {
            let last = (first + per_block).min(written);
            dots(&mut out[first..last], x, wide.rows(&rows[first * len..last * len]));
        }
    }
    out[written..].fill(0.0);
}

/// `crate::vector::weighted_sums_add_f16` through `sums`, an f32 `weighted_sums_add` kernel.
pub(crate) fn weighted_sums_add_f16(
    sums: impl Fn(&mut [&mut [f32]], &[&[f32]], &[f32]) + Copy,
    outs: &mut [&mut [f32]],
    weights: &[&[f32]],
    rows: &[f16],
) {
    let Some(len) = outs.first().map(|out| out.len()) else { return };
    if outs.iter().any(|out| out.len() != len) {
        // Each query reads rows of its own output's length.
        for (out, weights) in outs.iter_mut().zip(weights) {
            weighted_sums_add_f16(sums, &mut [&mut **out], &[weights], rows);
        }
        return;
    }
    if len == 0 {
        return;
    }
    let count = weights.iter().map(|w| w.len()).max().unwrap_or(0).min(rows.len() / len);
    let per_block = (BLOCK / len).max(1);
    let mut wide = Widened::new(len);
    // Queries in groups of a fixed size, so the weights' parts fit an array.
    const GROUP: usize = 8;
    for first in (0..count).step_by(per_block) {
        let last = (first + per_block).min(count);
        let block = wide.rows(&rows[first * len..last * len]);
        for (outs, weights) in outs.chunks_mut(GROUP).zip(weights.chunks(GROUP)) {
            let mut parts: [&[f32]; GROUP] = [&[]; GROUP];
            for (part, w) in parts.iter_mut().zip(weights) {
                *part = &w[first.min(w.len())..last.min(w.len())];
            }
            sums(outs, &parts[..weights.len()], block);
        }
    }
}

/// The buffer rows are widened into: on the stack (no allocation per call: decode steps allocate
/// nothing), on the heap only for rows longer than `BLOCK` values.
struct Widened {
    stack: [f32; BLOCK],
    heap: Vec<f32>,
}

impl Widened {
    fn new(len: usize) -> Self {
        let heap = if len > BLOCK { vec![0.0; len] } else { Vec::new() };
        Widened { stack: [0.0; BLOCK], heap }
    }

    /// `rows` widened (at most `BLOCK` values, or one row).
    fn rows(&mut self, rows: &[f16]) -> &[f32] {
        let values = if self.heap.is_empty() { &mut self.stack[..] } else { &mut self.heap[..] };
        let out = &mut values[..rows.len()];
        rows.convert_to_f32_slice(out);
        out
    }
}
