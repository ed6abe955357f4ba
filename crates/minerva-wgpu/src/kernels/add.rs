//! `add.wgsl`: `x += y`.

use crate::gpu::{Gpu, PipelineKey, groups_1d};

/// Records `x[..n] += y[..n]`.
pub(crate) fn add(gpu: &Gpu, x: &wgpu::Buffer, y: &wgpu::Buffer, n: usize) {
    let params = [n as u32, 0, 0, 0];
    gpu.dispatch(
        PipelineKey::named("add"),
        || include_str!("add.wgsl").to_string(),
        &[x, y],
        &params,
        groups_1d((n as u32).div_ceil(256)),
    );
    gpu.moved(12 * n as u64);
}
