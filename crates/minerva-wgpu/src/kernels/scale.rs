//! `scale.wgsl`: `x *= factor`.

use crate::gpu::{Gpu, PipelineKey, groups_1d};

/// Records `x[..n] *= factor`.
pub(crate) fn scale(gpu: &Gpu, x: &wgpu::Buffer, factor: f32, n: usize) {
    let params = [n as u32, factor.to_bits(), 0, 0];
    let groups = groups_1d((n as u32).div_ceil(256));
    gpu.dispatch(PipelineKey::named("scale"), || include_str!("scale.wgsl").to_string(), &[x], &params, groups);
}
