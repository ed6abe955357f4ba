//! `kv_store.wgsl`: writes a step's keys and values into one layer of the KV cache, with the
//! step's deferred RoPE folded in when there is one (`kv_store_rope.wgsl`).

use super::KvElem;
use super::attention::Paging;
use crate::gpu::{Gpu, PipelineKey, groups_1d};

/// The step's rotation of Q and K, applied by the store: K's values as they are written to the
/// cache, Q in place.
pub(crate) struct StoreRope<'a> {
    pub q: &'a wgpu::Buffer,
    pub table: &'a wgpu::Buffer,
    pub n_head: usize,
    pub half: usize,
    pub neox: bool,
}

/// Records the store of `rows` rows of keys `k` and values `v` (`n_kv × head_dim` each) at each
/// row's (slot, position) in `info`, through the block `tables`; with `rope`, rotated first.
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
    rope: Option<StoreRope<'_>>,
) {
    let (n_head, half, neox) = rope.as_ref().map_or((0, 0, false), |r| (r.n_head, r.half, r.neox));
    let params = [
        rows as u32,
        n_kv as u32,
        head_dim as u32,
        paging.block_size as u32,
        paging.per_slot as u32,
        paging.blocks as u32,
        n_head as u32,
        half as u32,
        u32::from(neox),
        0,
        0,
        0,
    ];
    let values = (rows * n_kv * head_dim) as u32;
    let (kernel, body, store_threads) = match elem {
        KvElem::F32 => ("kv_store", include_str!("kv_store.wgsl"), values),
        KvElem::F16 => ("kv_store_f16", include_str!("kv_store_f16.wgsl"), values / 2),
    };
    let q_pairs = (rows * n_head * half) as u32;
    let (key, snippet, binding) = match rope {
        None => (PipelineKey::named(kernel), include_str!("kv_store_plain.wgsl"), "6"),
        Some(_) => (
            PipelineKey::named(kernel).variant("rope"),
            concat!(include_str!("rope_pair.wgsl"), include_str!("kv_store_rope.wgsl")),
            "8",
        ),
    };
    let source = || format!("{snippet}\n{}", body.replace("{{PARAMS_BINDING}}", binding));
    let groups = groups_1d((store_threads + q_pairs).div_ceil(64));
    match &rope {
        None => gpu.dispatch(key, source, &[k, v, kc, vc, info, tables], &params, groups),
        Some(r) => gpu.dispatch(key, source, &[k, v, kc, vc, info, tables, r.q, r.table], &params, groups),
    }
    // Keys and values read as f32 and written as cache elements; Q's rotated pairs read and
    // written with their (cos, sin).
    gpu.moved(2 * u64::from(values) * (4 + elem.bytes() as u64) + u64::from(q_pairs) * 24);
}
