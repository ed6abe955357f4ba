//! `add_bias.wgsl`: `x[r] += bias` for every row.

use crate::gpu::{Gpu, PipelineKey, groups_1d};

/// Records `x[r, c] += bias[c]` for `rows × cols` values.
pub(crate) fn add_bias(gpu: &Gpu, x: &wgpu::Buffer, bias: &wgpu::Buffer, rows: usize, cols: usize) {
    let n = rows * cols;
    let params = [n as u32, cols as u32, 0, 0];
    let groups = groups_1d((n as u32).div_ceil(256));
    gpu.dispatch(
        PipelineKey::named("add_bias"),
        || include_str!("add_bias.wgsl").to_string(),
        &[x, bias],
        &params,
        groups,
    );
}
