//! Prefill's expert matmul with the pairs grouped by expert, so each picked expert's weights are
//! dequantized once per tile of pairs instead of once per pair: `mul_mat_id_tiled.wgsl` (tiles of
//! rows × pairs in workgroup memory, `tile.rs`, columns a multiple of 32) or
//! `mul_mat_id_grouped.wgsl` (tiles of 8 pairs, any column count).

use super::MatmulPlan;
use super::tile::TileShape;
use crate::gpu::{Gpu, PipelineKey, groups_1d};
use crate::weight::WgpuWeight;

/// The prefill expert kernels' shared `Params` and bindings.
const PARAMS: &str = include_str!("mul_mat_id_grouped_params.wgsl");

/// Weight rows per workgroup of `mul_mat_id_grouped.wgsl` (`RPW` in the shader).
const ROWS_PER_WORKGROUP: usize = 8;

/// Workgroup memory `mul_mat_id_tiled.wgsl` declares besides the tiles: its 256 counts, its
/// tile's pair list and their total.
fn id_tile_extra(shape: TileShape) -> usize {
    4 * (256 + shape.acts() + 1)
}

/// Records `y[i] = x[i / x_div] · W[ids[i]]ᵀ` for `pairs` pairs of `tokens` tokens (each token
/// routes to distinct experts, so an expert gets at most `tokens` pairs), as
/// [`super::mul_mat_id::mul_mat_id`], walking the pairs routed to each expert.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mul_mat_id_grouped(
    gpu: &Gpu,
    w: &WgpuWeight,
    expert_rows: usize,
    x: &wgpu::Buffer,
    x_div: usize,
    ids: &wgpu::Buffer,
    pairs: usize,
    tokens: usize,
    y: &wgpu::Buffer,
    plan: &MatmulPlan,
) {
    // The tiles pay once an expert has enough pairs to share each weight: 8 on average. An
    // expert's groups of a tile's pairs go along z with the experts (at most 65535 workgroups).
    let n_expert = w.rows / expert_rows.max(1);
    let tile = plan
        .tile(w.rows, tokens, w.cols, id_tile_extra)
        .filter(|s| pairs >= 8 * n_expert && n_expert * tokens.div_ceil(s.acts()) <= 65535);
    let groups_t = tile.map_or(0, |s| tokens.div_ceil(s.acts()));
    let (key, rows_per_group) = match tile {
        Some(s) => (PipelineKey::named("mul_mat_id_tiled").dtype(w.dtype).variant(s.name()), s.rows()),
        None => (PipelineKey::named("mul_mat_id_grouped").dtype(w.dtype), ROWS_PER_WORKGROUP),
    };
    let [gx, gy, _] = groups_1d(expert_rows.div_ceil(rows_per_group) as u32);
    let source = || {
        let kernel = match tile {
            Some(s) => format!("{PARAMS}\n{}\n{}", s.wgsl(), include_str!("mul_mat_id_tiled.wgsl")),
            None => format!("{PARAMS}\n{}", include_str!("mul_mat_id_grouped.wgsl")),
        };
        super::with_dequant(w.dtype, &kernel)
    };
    for chunk in &w.chunks {
        let experts = chunk.rows / expert_rows;
        let first = (chunk.row_start / expert_rows) as u32;
        let (cols, rows, n_pairs, row_bytes) = (w.cols as u32, expert_rows as u32, pairs as u32, w.row_bytes as u32);
        let params = [cols, rows, n_pairs, row_bytes, rows, gx, first, x_div as u32, groups_t as u32, 0, 0, 0];
        let z = if tile.is_some() { experts * groups_t } else { experts } as u32;
        gpu.dispatch(key, source, &[&chunk.buffer, x, ids, y], &params, [gx, gy, z]);
        gpu.moved(moved(w, expert_rows, experts, pairs));
    }
}

/// The bytes the chunk's experts must move at least: the weights of as many experts as there are
/// pairs (at most all of them), every pair's activations and outputs.
fn moved(w: &WgpuWeight, expert_rows: usize, experts: usize, pairs: usize) -> u64 {
    let weights = (experts.min(pairs) * expert_rows * w.row_bytes) as u64;
    weights + (4 * pairs * (w.cols + expert_rows)) as u64
}
