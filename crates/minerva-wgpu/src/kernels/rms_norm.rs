//! `rms_norm.wgsl`: row-wise RMS normalisation times a gain vector.

use crate::gpu::{Gpu, PipelineKey};

/// Records `out = x / rms(x) * g` for `rows` rows of `cols`.
pub(crate) fn rms_norm(
    gpu: &Gpu,
    x: &wgpu::Buffer,
    g: &wgpu::Buffer,
    out: &wgpu::Buffer,
    rows: usize,
    cols: usize,
    eps: f32,
) {
    let params = [cols as u32, eps.to_bits(), 0, 0];
    gpu.dispatch(
        PipelineKey::named("rms_norm"),
        || include_str!("rms_norm.wgsl").to_string(),
        &[x, g, out],
        &params,
        [rows as u32, 1, 1],
    );
    gpu.moved(4 * (2 * rows + 1) as u64 * cols as u64);
}
