//! `mul_mat_id_grouped.wgsl`: prefill's expert matmul with the pairs grouped by expert, so each
//! picked expert's weights are dequantized once per tile of 8 pairs instead of once per pair.

use crate::gpu::{Gpu, groups_1d};
use crate::weight::WgpuWeight;

/// Weight rows per workgroup (`RPW` in the shader).
const ROWS_PER_WORKGROUP: usize = 8;

/// Records `y[i] = x[i / x_div] · W[ids[i]]ᵀ` for `pairs` pairs, as
/// [`super::mul_mat_id::mul_mat_id`], with one workgroup per (8 rows, expert) walking the pairs
/// routed to its expert.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mul_mat_id_grouped(
    gpu: &Gpu,
    w: &WgpuWeight,
    expert_rows: usize,
    x: &wgpu::Buffer,
    x_div: usize,
    ids: &wgpu::Buffer,
    pairs: usize,
    y: &wgpu::Buffer,
) {
    let key = format!("mul_mat_id_grouped/{}", w.dtype.name());
    let [gx, gy, _] = groups_1d(expert_rows.div_ceil(ROWS_PER_WORKGROUP) as u32);
    for chunk in &w.chunks {
        let params = [
            w.cols as u32,
            expert_rows as u32,
            pairs as u32,
            w.row_bytes as u32,
            expert_rows as u32,
            gx,
            (chunk.row_start / expert_rows) as u32,
            x_div as u32,
        ];
        let source = || super::with_dequant(w.dtype, include_str!("mul_mat_id_grouped.wgsl"));
        let experts = (chunk.rows / expert_rows) as u32;
        gpu.dispatch(&key, source, &[&chunk.buffer, x, ids, y], &params, [gx, gy, experts]);
    }
}
