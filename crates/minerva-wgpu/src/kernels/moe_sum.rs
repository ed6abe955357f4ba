//! `moe_sum.wgsl`: the routing-weighted sum of each row's expert outputs.

use crate::gpu::{Gpu, PipelineKey, groups_1d};

/// Records `out[t] = Σ_j weights[t·k + j] · y[t·k + j]` for `rows` rows of `len`.
pub(crate) fn moe_sum(
    gpu: &Gpu,
    y: &wgpu::Buffer,
    weights: &wgpu::Buffer,
    out: &wgpu::Buffer,
    rows: usize,
    len: usize,
    k: usize,
) {
    let n = rows * len;
    let params = [n as u32, len as u32, k as u32, 0];
    let groups = groups_1d((n as u32).div_ceil(256));
    gpu.dispatch(
        PipelineKey::named("moe_sum"),
        || include_str!("moe_sum.wgsl").to_string(),
        &[y, weights, out],
        &params,
        groups,
    );
}
