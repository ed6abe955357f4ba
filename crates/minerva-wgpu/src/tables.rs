//! [`StepTables`]: the host-made tables a step's layers share (RoPE angles, row positions, prefill
//! query blocks), written once per step into buffers kept from step to step.

use minerva_model::{Batch, RopeConfig, checks};

use crate::gpu::{Gpu, StepTable};
use crate::kernels;

/// Host-made tables that the layers of a step share, written once per step into buffers kept
/// from step to step ([`StepTable`]).
pub(crate) struct StepTables {
    /// Per RoPE configuration (Gemma 3's local and global layers have one each): the positions
    /// its (cos, sin) table was written for, and the table.
    rope: Vec<(RopeConfig, Vec<u32>, StepTable)>,
    /// The batch `row_info` and `query_blocks` were written for, and its number of query blocks.
    rows: Option<(Batch, usize)>,
    /// (slot, position) of every row.
    row_info: StepTable,
    /// The prefill query blocks.
    query_blocks: StepTable,
}

impl Default for StepTables {
    fn default() -> Self {
        StepTables {
            rope: Vec::new(),
            rows: None,
            row_info: StepTable::new("row table"),
            query_blocks: StepTable::new("query blocks"),
        }
    }
}

impl StepTables {
    /// The (cos, sin) table of `positions` under `rope`, computed exactly as the CPU backend does
    /// and written once per step (Q and K of every layer share it).
    pub(crate) fn rope(&mut self, gpu: &Gpu, positions: &[u32], rope: &RopeConfig) -> wgpu::Buffer {
        let i = match self.rope.iter().position(|(c, _, _)| c == rope) {
            Some(i) => i,
            None => {
                self.rope.push((rope.clone(), Vec::new(), StepTable::new("rope table")));
                self.rope.len() - 1
            }
        };
        let (_, written_for, table) = &mut self.rope[i];
        if written_for == positions
            && let Some(buffer) = gpu.reuse_table(table)
        {
            return buffer;
        }
        // The same table as the CPU backend rotates by.
        let values = checks::rope_table(positions, rope);
        written_for.clear();
        written_for.extend_from_slice(positions);
        gpu.write_table(table, bytemuck::cast_slice(&values))
    }

    /// (slot, position) of every row of `batch` and its prefill query blocks (and their count),
    /// written once per step.
    pub(crate) fn rows(&mut self, gpu: &Gpu, batch: &Batch) -> (wgpu::Buffer, wgpu::Buffer, usize) {
        if let Some((b, n)) = &self.rows
            && b == batch
            && let (Some(info), Some(blocks)) = (gpu.reuse_table(&self.row_info), gpu.reuse_table(&self.query_blocks))
        {
            return (info, blocks, *n);
        }
        let mut info = vec![0u32; batch.n_tokens() * 2];
        for seq in &batch.seqs {
            for r in seq.rows.clone() {
                info[2 * r] = seq.slot as u32;
                info[2 * r + 1] = batch.positions[r];
            }
        }
        let info = gpu.write_table(&self.row_info, bytemuck::cast_slice(&info));
        let blocks = kernels::attention::prefill_blocks(batch);
        let n = blocks.len() / 4;
        let blocks = gpu.write_table(&self.query_blocks, bytemuck::cast_slice(&blocks));
        self.rows = Some((batch.clone(), n));
        (info, blocks, n)
    }
}
