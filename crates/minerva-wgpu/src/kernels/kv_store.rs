//! `kv_store.wgsl`: writes a step's keys and values into one layer of the KV cache.

use super::KvElem;
use super::attention::Paging;
use crate::gpu::{Gpu, PipelineKey, groups_1d};

/// Records the copy of `rows` rows of `k`, `v` (`n_kv · head_dim` wide) into `kc`, `vc` at each
/// row's (slot, position) from `info` through the slots' block `tables`, as `elem` (f16: one thread per pair of values; `head_dim`
/// is even, checked when the cache is made).
#[allow(clippy::too_many_arguments)]
pub(crate) fn kv_store(
    gpu: &Gpu,
    k: &wgpu::Buffer,
    v: &wgpu::Buffer,
    kc: &wgpu::Buffer,
    vc: &wgpu::Buffer,
    info: &wgpu::Buffer,
    tables: &wgpu::Buffer,
    rows: usize,
    n_kv: usize,
    head_dim: usize,
    paging: Paging,
    elem: KvElem,
) {
    let params = [
        rows as u32,
        n_kv as u32,
        head_dim as u32,
        paging.block_size as u32,
        paging.per_slot as u32,
        paging.blocks as u32,
        0,
        0,
    ];
    let values = (rows * n_kv * head_dim) as u32;
    let (key, source, threads) = match elem {
        KvElem::F32 => (PipelineKey::named("kv_store"), include_str!("kv_store.wgsl"), values),
        KvElem::F16 => (PipelineKey::named("kv_store_f16"), include_str!("kv_store_f16.wgsl"), values / 2),
    };
    gpu.dispatch(key, || source.to_string(), &[k, v, kc, vc, info, tables], &params, groups_1d(threads.div_ceil(64)));
    gpu.moved(2 * u64::from(values) * (4 + elem.bytes() as u64));
}
