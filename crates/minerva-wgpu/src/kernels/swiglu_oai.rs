//! `swiglu_oai.wgsl`: GPT-OSS's clamped SwiGLU, in place over the gate.

use crate::gpu::{Gpu, PipelineKey, groups_1d};

/// Records `gate[..n] = swiglu_oai(gate, up)` with slope `alpha` and clamp `limit`.
pub(crate) fn swiglu_oai(gpu: &Gpu, gate: &wgpu::Buffer, up: &wgpu::Buffer, n: usize, alpha: f32, limit: f32) {
    let params = [n as u32, alpha.to_bits(), limit.to_bits(), 0];
    let groups = groups_1d((n as u32).div_ceil(256));
    gpu.dispatch(
        PipelineKey::named("swiglu_oai"),
        || include_str!("swiglu_oai.wgsl").to_string(),
        &[gate, up],
        &params,
        groups,
    );
}
