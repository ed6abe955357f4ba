//! `moe_route.wgsl`: top-k experts per row and the softmax over their logits.

use crate::gpu::{Gpu, PipelineKey, groups_1d};

/// Records `ids`/`weights` (`rows × k` u32 / f32) from router `logits` (`rows × n_expert`).
pub(crate) fn moe_route(
    gpu: &Gpu,
    logits: &wgpu::Buffer,
    ids: &wgpu::Buffer,
    weights: &wgpu::Buffer,
    rows: usize,
    n_expert: usize,
    k: usize,
) {
    let params = [rows as u32, n_expert as u32, k as u32, 0];
    let groups = groups_1d((rows as u32).div_ceil(64));
    let source = || include_str!("moe_route.wgsl").to_string();
    gpu.dispatch(PipelineKey::named("moe_route"), source, &[logits, ids, weights], &params, groups);
}
