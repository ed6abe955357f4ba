//! `geglu.wgsl`: `gelu_tanh(gate) * up`.

use crate::gpu::{Gpu, PipelineKey, groups_1d};

/// Records `out[..n] = gelu_tanh(gate) * up`.
pub(crate) fn geglu(gpu: &Gpu, gate: &wgpu::Buffer, up: &wgpu::Buffer, out: &wgpu::Buffer, n: usize) {
    let params = [n as u32, 0, 0, 0];
    let groups = groups_1d((n as u32).div_ceil(256));
    gpu.dispatch(
        PipelineKey::named("geglu"),
        || include_str!("geglu.wgsl").to_string(),
        &[gate, up, out],
        &params,
        groups,
    );
}
