//! `rms_norm_heads.wgsl`: RMS normalisation of every head of every row in place (QK-norm).

use crate::gpu::{Gpu, PipelineKey};

/// Records `x[r, h] = x[r, h] / rms(x[r, h]) * g` for `rows` rows of `n_heads` heads of
/// `head_dim` values. `rows` and `n_heads` are each at most 65535 (one dispatch dimension each).
pub(crate) fn rms_norm_heads(
    gpu: &Gpu,
    x: &wgpu::Buffer,
    g: &wgpu::Buffer,
    rows: usize,
    n_heads: usize,
    head_dim: usize,
    eps: f32,
) {
    let params = [n_heads as u32, head_dim as u32, eps.to_bits(), 0];
    let groups = [rows as u32, n_heads as u32, 1];
    gpu.dispatch(
        PipelineKey::named("rms_norm_heads"),
        || include_str!("rms_norm_heads.wgsl").to_string(),
        &[x, g],
        &params,
        groups,
    );
}
