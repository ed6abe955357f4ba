//! `embed.wgsl`: rows of a (quantized) embedding table, dequantized to f32.

use crate::gpu::{Gpu, PipelineKey};
use crate::weight::WgpuWeight;

/// Records `out[i, :] = table[tokens[i], :]` (token ids already checked against the table).
pub(crate) fn embed(gpu: &Gpu, table: &WgpuWeight, tokens: &wgpu::Buffer, n_tok: usize, out: &wgpu::Buffer) {
    let key = PipelineKey::named("embed").dtype(table.dtype);
    for chunk in &table.chunks {
        let params = [table.cols as u32, chunk.rows as u32, chunk.row_start as u32, table.row_bytes as u32];
        let source = || super::with_dequant(table.dtype, include_str!("embed.wgsl"));
        gpu.dispatch(key, source, &[&chunk.buffer, tokens, out], &params, [n_tok as u32, 1, 1]);
    }
}
