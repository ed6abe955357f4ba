//! `mul_mat_id.wgsl` / `mul_mat_id_vec.wgsl`: each (token, slot) pair's row times its picked
//! expert's matrix (decode), the block kernel where the columns are a multiple of 32.

use super::MatmulPlan;
use super::mul_mat::{DECODE_LANES, VEC_WEIGHT_ROWS, WORKGROUP};
use crate::gpu::{Gpu, PipelineKey, groups_1d};
use crate::weight::WgpuWeight;

/// The decode expert kernels' shared `Params` and bindings.
const PARAMS: &str = include_str!("mul_mat_id_params.wgsl");

/// Records `y[i] = x[i / x_div] · W[ids[i]]ᵀ` for `pairs` pairs, `W` a stacked weight of
/// `expert_rows` rows per expert whose chunks hold whole experts (checked by the caller).
#[allow(clippy::too_many_arguments)]
pub(crate) fn mul_mat_id(
    gpu: &Gpu,
    w: &WgpuWeight,
    expert_rows: usize,
    x: &wgpu::Buffer,
    x_div: usize,
    ids: &wgpu::Buffer,
    pairs: usize,
    y: &wgpu::Buffer,
    plan: &MatmulPlan,
) {
    let (reduce, reduce_name) = plan.reduce();
    let block = plan.block(w.cols);
    let kind = if block { "mul_mat_id_vec" } else { "mul_mat_id" };
    let key = PipelineKey::named(kind).dtype(w.dtype).variant(reduce_name);
    let rows_per_group = if block { VEC_WEIGHT_ROWS } else { WORKGROUP / DECODE_LANES };
    let [gx, gy, _] = groups_1d(expert_rows.div_ceil(rows_per_group) as u32);
    for chunk in &w.chunks {
        let params = [
            w.cols as u32,
            expert_rows as u32,
            pairs as u32,
            w.row_bytes as u32,
            0,
            expert_rows as u32,
            gx,
            (chunk.row_start / expert_rows) as u32,
            (chunk.rows / expert_rows) as u32,
            x_div as u32,
            0,
            0,
        ];
        let source = || {
            if block {
                super::with_block32(w.dtype, &format!("{PARAMS}\n{}", include_str!("mul_mat_id_vec.wgsl")), plan)
            } else {
                let kernel = format!("{PARAMS}\n{}\n{reduce}", include_str!("mul_mat_id.wgsl"));
                let kernel = kernel.replace("{{TPR}}", &DECODE_LANES.to_string());
                super::with_dequant(w.dtype, &kernel)
            }
        };
        gpu.dispatch(key, source, &[&chunk.buffer, x, ids, y], &params, [gx, gy, pairs as u32]);
        // Each pair reads its expert's rows (pairs of a token pick distinct experts; a batch's
        // pairs may share one, counted once per pair here).
        gpu.moved(pairs as u64 * super::mul_mat::moved(w, expert_rows, 1));
    }
}
