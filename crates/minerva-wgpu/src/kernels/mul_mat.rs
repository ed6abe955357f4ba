//! `mul_mat.wgsl`: `y = x · Wᵀ` straight from the stored (quantized) weight.

use crate::gpu::{Gpu, groups_1d};
use crate::weight::WgpuWeight;

/// Tokens per workgroup in prefill: each dequantized weight chunk is used this many times.
pub(crate) const PREFILL_TILE: usize = 8;

/// Threads per weight row (`TPR` in the shader) in a decode step (one token): a row's 32 threads
/// read 256 consecutive values at a time. Prefill keeps 8, each dequantized chunk serving a tile
/// of tokens.
pub(crate) const DECODE_LANES: usize = 32;

/// Threads per weight row in prefill.
const PREFILL_LANES: usize = 8;

/// Threads per workgroup in the matrix kernels (`WG` in the shaders).
pub(crate) const WORKGROUP: usize = 64;

/// Records `y[n_tok × w.rows] = x[n_tok × w.cols] · Wᵀ`, one dispatch per chunk of the weight.
///
/// With `subgroups`, the per-row reduction uses subgroup shuffles instead of workgroup memory.
pub(crate) fn mul_mat(gpu: &Gpu, w: &WgpuWeight, x: &wgpu::Buffer, n_tok: usize, y: &wgpu::Buffer, subgroups: bool) {
    let (tile, lanes) = if n_tok == 1 { (1, DECODE_LANES) } else { (PREFILL_TILE, PREFILL_LANES) };
    let reduce = if subgroups {
        include_str!("mul_mat_reduce_subgroup.wgsl")
    } else {
        include_str!("mul_mat_reduce_workgroup.wgsl")
    };
    let key = format!("mul_mat/{}/{tile}/{}", w.dtype.name(), if subgroups { "subgroup" } else { "workgroup" });
    for chunk in &w.chunks {
        let [gx, gy, _] = groups_1d(chunk.rows.div_ceil(WORKGROUP / lanes) as u32);
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
            let kernel = kernel.replace("{{TILE_T}}", &tile.to_string()).replace("{{TPR}}", &lanes.to_string());
            super::with_dequant(w.dtype, &kernel)
        };
        gpu.dispatch(&key, source, &[&chunk.buffer, x, y], &params, [gx, gy, n_tok.div_ceil(tile) as u32]);
    }
}
