//! `kv_store.wgsl`: writes a step's keys and values into one layer of the KV cache.

use crate::gpu::{Gpu, groups_1d};

/// Records the copy of `rows` rows of `k`, `v` (`n_kv · head_dim` wide) into `kc`, `vc` at each
/// row's (slot, position) from `info`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn kv_store(
    gpu: &Gpu,
    k: &wgpu::Buffer,
    v: &wgpu::Buffer,
    kc: &wgpu::Buffer,
    vc: &wgpu::Buffer,
    info: &wgpu::Buffer,
    rows: usize,
    n_kv: usize,
    head_dim: usize,
    capacity: usize,
) {
    let params = [rows as u32, n_kv as u32, head_dim as u32, capacity as u32];
    let threads = (rows * n_kv * head_dim) as u32;
    let source = || include_str!("kv_store.wgsl").to_string();
    gpu.dispatch("kv_store", source, &[k, v, kc, vc, info], &params, groups_1d(threads.div_ceil(64)));
}
