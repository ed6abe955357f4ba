//! `expert_bias.wgsl`: each pair's row plus its expert's bias row.

use crate::gpu::{Gpu, PipelineKey, groups_1d};
use crate::weight::WgpuWeight;

/// Records `y[i, c] += bias[ids[i], c]` for `pairs` rows of `bias.cols` (a one-chunk matrix).
pub(crate) fn expert_bias(gpu: &Gpu, bias: &WgpuWeight, ids: &wgpu::Buffer, pairs: usize, y: &wgpu::Buffer) {
    let n = pairs * bias.cols;
    let params = [n as u32, bias.cols as u32, bias.row_bytes as u32, 0];
    let key = PipelineKey::named("expert_bias").dtype(bias.dtype);
    let source = || super::with_dequant(bias.dtype, include_str!("expert_bias.wgsl"));
    let groups = groups_1d((n as u32).div_ceil(256));
    gpu.dispatch(key, source, &[&bias.chunks[0].buffer, ids, y], &params, groups);
}
