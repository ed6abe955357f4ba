//! `mul_mat.wgsl`: `y = x · Wᵀ` straight from the stored (quantized) weight.

use crate::gpu::{Gpu, groups_1d};
use crate::weight::WgpuWeight;

/// Tokens per workgroup in prefill: each dequantized weight chunk is used this many times.
pub(crate) const PREFILL_TILE: usize = 8;

/// Weight rows per workgroup (`RPW` in the shader).
const ROWS_PER_WORKGROUP: usize = 8;

/// Records `y[n_tok × w.rows] = x[n_tok × w.cols] · Wᵀ`, one dispatch per chunk of the weight.
///
/// With `subgroups`, the per-row reduction uses subgroup shuffles instead of workgroup memory.
pub(crate) fn mul_mat(gpu: &Gpu, w: &WgpuWeight, x: &wgpu::Buffer, n_tok: usize, y: &wgpu::Buffer, subgroups: bool) {
    let tile = if n_tok == 1 { 1 } else { PREFILL_TILE };
    let reduce = if subgroups {
        include_str!("mul_mat_reduce_subgroup.wgsl")
    } else {
        include_str!("mul_mat_reduce_workgroup.wgsl")
    };
    let key = format!("mul_mat/{}/{tile}/{}", w.dtype.name(), if subgroups { "subgroup" } else { "workgroup" });
    for chunk in &w.chunks {
        let [gx, gy, _] = groups_1d(chunk.rows.div_ceil(ROWS_PER_WORKGROUP) as u32);
        let params = [
            w.cols as u32,
            chunk.rows as u32,
            n_tok as u32,
            w.row_bytes as u32,
            chunk.row_start as u32,
            w.rows as u32,
            gx,
            0,
        ];
        let source = || {
            let kernel = format!("{}\n{reduce}", include_str!("mul_mat.wgsl"));
            super::with_dequant(w.dtype, &kernel.replace("{{TILE_T}}", &tile.to_string()))
        };
        gpu.dispatch(&key, source, &[&chunk.buffer, x, y], &params, [gx, gy, n_tok.div_ceil(tile) as u32]);
    }
}
