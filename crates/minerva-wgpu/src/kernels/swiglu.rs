//! `swiglu.wgsl`: `silu(gate) * up`.

use crate::gpu::{Gpu, PipelineKey, groups_1d};

/// Records `out[..n] = silu(gate) * up`.
pub(crate) fn swiglu(gpu: &Gpu, gate: &wgpu::Buffer, up: &wgpu::Buffer, out: &wgpu::Buffer, n: usize) {
    let params = [n as u32, 0, 0, 0];
    let groups = groups_1d((n as u32).div_ceil(256));
    gpu.dispatch(
        PipelineKey::named("swiglu"),
        || include_str!("swiglu.wgsl").to_string(),
        &[gate, up, out],
        &params,
        groups,
    );
    gpu.moved(12 * n as u64);
}
