//! `argmax.wgsl`: each row's index of its largest value (greedy decoding on the GPU).

use crate::gpu::Gpu;

/// Records `out[r] = argmax(x[r, :])` for `rows` rows of `cols`.
pub(crate) fn argmax(gpu: &Gpu, x: &wgpu::Buffer, out: &wgpu::Buffer, rows: usize, cols: usize) {
    let params = [cols as u32, 0, 0, 0];
    gpu.dispatch("argmax", || include_str!("argmax.wgsl").to_string(), &[x, out], &params, [rows as u32, 1, 1]);
}
