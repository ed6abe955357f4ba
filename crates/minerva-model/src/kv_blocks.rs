//! Paged KV caches: a cache is a pool of fixed-size blocks of positions, and each sequence slot
//! reads and writes its positions through a block table (position `p` of a slot lives at offset
//! `p % block_size` of block `table[p / block_size]`), as vLLM's PagedAttention does. Sequences
//! then take memory as they grow, and two slots may point at the same blocks (a prompt shared by
//! several sampled choices, or a prefix kept from an earlier request).
//!
//! Both backends lay a layer's keys (and values) out `[kv_head][block][position in block][head_dim]`,
//! so the positions of consecutive block ids are consecutive in memory: a table that counts up
//! (what [`BlockTables::contiguous`] gives each slot) reads as one run, as an unpaged cache would.

use std::ops::Range;

use crate::backend::{Batch, CacheShape};
use crate::error::{ModelError, Result};

/// Positions per block unless a cache asks for another size: small enough that a prefix is
/// shared at a fine grain and little memory sits unused at a sequence's end, large enough that
/// each block's keys of a head (32 × 64 values) are one long read.
pub const KV_BLOCK_SIZE: usize = 32;

/// Every slot's block table, kept by a cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockTables {
    block_size: usize,
    blocks: usize,
    /// Entries per slot: enough blocks for the cache's `capacity`.
    per_slot: usize,
    /// `slots × per_slot` block ids, slot by slot.
    ids: Vec<u32>,
    /// Blocks in use at the start of each slot's row of `ids`.
    lens: Vec<usize>,
}

impl BlockTables {
    /// Tables for `shape`: slot `s` holds blocks `s·n .. (s+1)·n` (`n` blocks per slot) where the
    /// pool has them all, an empty table otherwise (its owner sets it with [`BlockTables::set`]).
    pub fn contiguous(shape: &CacheShape) -> Result<BlockTables> {
        let per_slot = shape.blocks_per_slot()?;
        let len = shape.slots.checked_mul(per_slot).ok_or_else(|| too_large(shape))?;
        if shape.blocks > u32::MAX as usize {
            return Err(too_large(shape));
        }
        let whole = len <= shape.blocks;
        let ids = if whole { (0..len as u32).collect() } else { vec![0; len] };
        let lens = vec![if whole { per_slot } else { 0 }; shape.slots];
        Ok(BlockTables { block_size: shape.block_size, blocks: shape.blocks, per_slot, ids, lens })
    }

    /// Entries per slot.
    pub fn per_slot(&self) -> usize {
        self.per_slot
    }

    /// Every slot's row of ids (`slots × per_slot`; past a slot's length, stale entries).
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Slot `slot`'s blocks.
    pub fn table(&self, slot: usize) -> &[u32] {
        &self.ids[slot * self.per_slot..][..self.lens[slot]]
    }

    /// Makes `blocks` slot `slot`'s table: at most [`BlockTables::per_slot`] ids, each inside the
    /// pool.
    pub fn set(&mut self, slot: usize, blocks: &[u32]) -> Result<()> {
        if slot >= self.lens.len() || blocks.len() > self.per_slot {
            let message = format!(
                "{} blocks for slot {slot} of a cache of {} slots × {} blocks",
                blocks.len(),
                self.lens.len(),
                self.per_slot
            );
            return Err(ModelError::BadOperands { op: "set_blocks", message });
        }
        if let Some(&bad) = blocks.iter().find(|&&b| b as usize >= self.blocks) {
            let message = format!("block {bad} is outside the pool of {}", self.blocks);
            return Err(ModelError::BadOperands { op: "set_blocks", message });
        }
        self.ids[slot * self.per_slot..][..blocks.len()].copy_from_slice(blocks);
        self.lens[slot] = blocks.len();
        Ok(())
    }

    /// Checks that every row of `batch` has a block: its position is inside its slot's table.
    pub fn check_batch(&self, batch: &Batch) -> Result<()> {
        for seq in &batch.seqs {
            let Some(&len) = self.lens.get(seq.slot) else {
                let message = format!("slot {} of {}", seq.slot, self.lens.len());
                return Err(ModelError::BadOperands { op: "attention", message });
            };
            let covered = len * self.block_size;
            if let Some(&pos) = batch.positions[seq.rows.clone()].iter().find(|&&p| p as usize >= covered) {
                let message = format!("position {pos} of slot {} has no KV block ({len} blocks)", seq.slot);
                return Err(ModelError::BadBatch { message });
            }
        }
        Ok(())
    }

    /// Where position `pos` of `slot` lives: (block, position in block). The caller checked the
    /// position ([`BlockTables::check_batch`]).
    pub fn locate(&self, slot: usize, pos: usize) -> (usize, usize) {
        (self.ids[slot * self.per_slot + pos / self.block_size] as usize, pos % self.block_size)
    }

    /// `positions` of `slot` cut into runs that lie one after another in memory (blocks whose ids
    /// count up), none longer than `max_len`: (positions, block of the first, its place in that
    /// block). The caller checked the positions.
    pub fn runs(&self, slot: usize, positions: Range<usize>, max_len: usize) -> Runs<'_> {
        Runs { tables: self, slot, next: positions.start, end: positions.end, max_len: max_len.max(1) }
    }
}

/// The iterator of [`BlockTables::runs`].
pub struct Runs<'a> {
    tables: &'a BlockTables,
    slot: usize,
    next: usize,
    end: usize,
    max_len: usize,
}

impl Iterator for Runs<'_> {
    type Item = (Range<usize>, usize, usize);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.end {
            return None;
        }
        let bs = self.tables.block_size;
        let start = self.next;
        let (block, offset) = self.tables.locate(self.slot, start);
        let mut end = ((start / bs + 1) * bs).min(self.end);
        // Extend over the following blocks while their ids count up from this one's.
        while end < self.end && end - start < self.max_len {
            let (b, _) = self.tables.locate(self.slot, end);
            if b != block + (end - start + offset) / bs {
                break;
            }
            end = (end + bs).min(self.end);
        }
        let end = end.min(start + self.max_len);
        self.next = end;
        Some((start..end, block, offset))
    }
}

fn too_large(shape: &CacheShape) -> ModelError {
    ModelError::Resource {
        message: format!("a KV cache of {} slots and {} blocks is too large", shape.slots, shape.blocks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::SeqSpan;

    fn shape(slots: usize, capacity: usize, blocks: usize) -> CacheShape {
        CacheShape { slots, n_layer: 1, n_head_kv: 1, head_dim: 4, capacity, block_size: 4, blocks }
    }

    #[test]
    fn a_contiguous_cache_gives_each_slot_its_own_blocks() {
        let t = BlockTables::contiguous(&shape(3, 10, 9)).unwrap();
        assert_eq!(t.table(0), &[0, 1, 2]);
        assert_eq!(t.table(2), &[6, 7, 8]);
        // Consecutive ids read as one run, cut at `max_len`.
        let runs: Vec<_> = t.runs(1, 1..10, 6).collect();
        assert_eq!(runs, vec![(1..7, 3, 1), (7..10, 4, 3)]);
        // A pool smaller than every slot's share starts with empty tables.
        let paged = BlockTables::contiguous(&shape(3, 10, 5)).unwrap();
        assert_eq!(paged.table(0), &[] as &[u32]);
    }

    #[test]
    fn runs_break_where_ids_stop_counting_up() {
        let mut t = BlockTables::contiguous(&shape(2, 16, 4)).unwrap();
        t.set(0, &[2, 3, 0]).unwrap();
        let runs: Vec<_> = t.runs(0, 0..12, 100).collect();
        assert_eq!(runs, vec![(0..8, 2, 0), (8..12, 0, 0)]);
        assert_eq!(t.locate(0, 9), (0, 1));
        assert_eq!(t.runs(0, 5..6, 100).collect::<Vec<_>>(), vec![(5..6, 3, 1)]);
    }

    #[test]
    fn tables_and_batches_are_checked() {
        let mut t = BlockTables::contiguous(&shape(2, 8, 4)).unwrap();
        assert!(t.set(0, &[0, 1, 2]).is_err(), "more blocks than a slot's capacity");
        assert!(t.set(0, &[4]).is_err(), "outside the pool");
        assert!(t.set(2, &[0]).is_err(), "no such slot");
        t.set(1, &[3]).unwrap();
        let batch = |pos: u32| Batch {
            seqs: vec![SeqSpan { rows: 0..1, start_pos: pos as usize, slot: 1 }],
            positions: vec![pos],
        };
        assert!(t.check_batch(&batch(3)).is_ok());
        let err = t.check_batch(&batch(4)).unwrap_err().to_string();
        assert!(err.contains("position 4 of slot 1 has no KV block"), "{err}");
    }
}
