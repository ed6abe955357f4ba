//! `argmax.wgsl` + `argmax_reduce.wgsl`: each row's index of its largest value (greedy decoding
//! on the GPU), a row's parts read by many workgroups, then reduced.

use crate::gpu::{Gpu, PipelineKey};

/// Values per part of a row (one workgroup of 256 threads, 8 values each).
const PART_LEN: usize = 2048;

/// Records `out[r] = argmax(x[r, :])` for `rows` rows of `cols` (at most 65535 rows, as every
/// row-per-workgroup kernel).
pub(crate) fn argmax(gpu: &Gpu, x: &wgpu::Buffer, out: &wgpu::Buffer, rows: usize, cols: usize) {
    let parts = cols.div_ceil(PART_LEN).max(1);
    let best = gpu.scratch((rows * parts * 8) as u64);
    let params = [cols as u32, PART_LEN as u32, parts as u32, 0];
    let source = || format!("{}\n{}", include_str!("argmax_tree.wgsl"), include_str!("argmax.wgsl"));
    gpu.dispatch(PipelineKey::named("argmax"), source, &[x, best.buffer()], &params, [parts as u32, rows as u32, 1]);
    gpu.moved(4 * (rows * cols) as u64);
    let source = || format!("{}\n{}", include_str!("argmax_tree.wgsl"), include_str!("argmax_reduce.wgsl"));
    gpu.dispatch(PipelineKey::named("argmax_reduce"), source, &[best.buffer(), out], &params, [rows as u32, 1, 1]);
}
