//! The scheduler's side of the paged KV cache: blocks for each step's positions, copy-on-write
//! of a shared partial block, preemption when the pool runs out, and prefixes kept for later
//! requests.

use minerva_model::Backend;

use super::blocks::Found;
use super::scheduler::Scheduler;
use super::sequence::Sequence;
use crate::error::ApiError;

impl<B: Backend> Scheduler<B> {
    /// Gives every sequence of `plan` ((index into `running`, tokens to run)) the blocks its new
    /// positions need, oldest sequence first, and sets the backend's tables that changed. When
    /// the pool has no block left, the newest sequence is preempted and `Ok(false)` says the plan
    /// must be made again.
    pub(super) fn reserve(&mut self, plan: &[(usize, usize)]) -> Result<bool, ApiError> {
        let bs = self.pool.block_size();
        let mut by_age: Vec<(usize, usize)> = plan.to_vec();
        by_age.sort_by_key(|&(i, _)| self.running[i].order);
        for (i, len) in by_age {
            let (fed, end) = (self.running[i].fed, self.running[i].fed + len);
            // The first new position falls in a block that other sequences hold too (the prompt's
            // last block, shared by a request's choices) or that is cached: it gets its own copy.
            if !fed.is_multiple_of(bs) {
                let shared = self.running[i].blocks[fed / bs];
                if self.pool.must_copy(shared) {
                    let Some(copy) = self.pool.take() else { return self.preempt_newest().map(|()| false) };
                    self.model
                        .backend
                        .copy_blocks(&mut self.cache, &[(shared, copy)])
                        .map_err(|e| ApiError::internal(format!("copying a KV block: {e}")))?;
                    self.pool.release(&[shared]);
                    let seq = &mut self.running[i];
                    seq.blocks[fed / bs] = copy;
                    seq.table_changed = true;
                }
            }
            while self.running[i].blocks.len() < end.div_ceil(bs) {
                let Some(block) = self.pool.take() else { return self.preempt_newest().map(|()| false) };
                let seq = &mut self.running[i];
                seq.blocks.push(block);
                seq.table_changed = true;
            }
        }
        for seq in self.running.iter_mut().filter(|s| s.table_changed) {
            self.model
                .backend
                .set_blocks(&mut self.cache, seq.slot, &seq.blocks)
                .map_err(|e| ApiError::internal(format!("setting a block table: {e}")))?;
            seq.table_changed = false;
        }
        Ok(true)
    }

    /// Frees the blocks and slot of the newest running sequence that holds blocks and puts it
    /// back in line, first among the preempted: it runs its tokens again when blocks free up and
    /// carries on where it was (its stream sees no gap). A sequence alone that cannot grow has
    /// outgrown the pool: its request fails.
    fn preempt_newest(&mut self) -> Result<(), ApiError> {
        let victim = (0..self.running.len())
            .filter(|&i| !self.running[i].blocks.is_empty())
            .max_by_key(|&i| self.running[i].order)
            .ok_or_else(|| ApiError::internal("the KV cache has no block for any sequence"))?;
        if self.running.iter().filter(|s| !s.waits_for_leader).count() == 1 {
            let message =
                format!("the KV cache of {} blocks cannot hold this sequence; raise --kv-memory", self.pool.len());
            return Err(ApiError::internal(message));
        }
        let mut seq = self.running.swap_remove(victim);
        super::speculate::undraft(&mut seq);
        self.let_go(&mut seq);
        seq.prefill_to = seq.tokens.len();
        seq.fed = 0;
        self.shared.metrics.preemptions.inc();
        let at = self.preempted.partition_point(|s| s.order < seq.order);
        self.preempted.insert(at, seq);
        Ok(())
    }

    /// Notes the blocks `seq` has written, the partly filled last one too (so later requests
    /// find them), lets go of its blocks and gives its slot back.
    pub(super) fn let_go(&mut self, seq: &mut Sequence) {
        let written = seq.fed.min(seq.tokens.len());
        let (mut known, mut chain) = seq.noted;
        self.pool.note_full(&seq.blocks, &seq.tokens[..written], &mut known, &mut chain);
        let bs = self.pool.block_size();
        if known == written / bs
            && let Some(&tail) = seq.blocks.get(known)
        {
            self.pool.note_tail(tail, &seq.tokens[known * bs..written], chain);
        }
        self.pool.release(&seq.blocks);
        seq.blocks.clear();
        seq.noted = (0, 0);
        self.free_slots.push(seq.slot);
    }

    /// Lets go of `seq`'s blocks without noting their content (a failed step: what they hold is
    /// not known to be whole), and gives its slot back.
    pub(super) fn drop_blocks(&mut self, seq: &mut Sequence) {
        self.pool.release(&seq.blocks);
        seq.blocks.clear();
        self.free_slots.push(seq.slot);
    }

    /// Starts `seq` in a free slot from the longest cached prefix of its tokens (at least its
    /// last token left to run, which gives the logits of its next one): the whole blocks found,
    /// shared, then a copy of a block that holds some of the next tokens. Returns how many tokens
    /// it does not have to run.
    pub(super) fn place(&mut self, seq: &mut Sequence, slot: usize) -> usize {
        let bs = self.pool.block_size();
        let wanted = &seq.tokens[..seq.prefill_to];
        let last = wanted.len().saturating_sub(1);
        let Found { mut whole, ids, mut part } = self.pool.lookup(wanted);
        if whole.len() * bs > last {
            // Every token is in whole blocks: the last block is continued in a copy instead, so
            // that the last token runs.
            if let Some((b, _)) = part.take() {
                self.pool.release(&[b]);
            }
            part = whole.pop().map(|b| (b, bs));
        }
        // The whole blocks are noted already: the next to note follows the last of them.
        let noted = (whole.len(), whole.len().checked_sub(1).map_or(0, |last| ids[last]));
        let mut fed = whole.len() * bs;
        if let Some((shared, n)) = part {
            let n = n.min(last - fed);
            let copy = if n > 0 { self.pool.take() } else { None };
            if let Some(copy) = copy {
                match self.model.backend.copy_blocks(&mut self.cache, &[(shared, copy)]) {
                    Ok(()) => {
                        whole.push(copy);
                        fed += n;
                    }
                    // Not worth failing for: the tokens run again.
                    Err(_) => self.pool.release(&[copy]),
                }
            }
            self.pool.release(&[shared]);
        }
        seq.slot = slot;
        seq.fed = fed;
        seq.noted = noted;
        seq.blocks = whole;
        seq.table_changed = true;
        fed
    }

    /// Notes the whole blocks each running sequence has written since the last step, so that a
    /// request arriving while it still runs finds them too.
    pub(super) fn note_written(&mut self) {
        for seq in &mut self.running {
            let (mut known, mut chain) = seq.noted;
            let written = seq.fed.min(seq.tokens.len());
            self.pool.note_full(&seq.blocks, &seq.tokens[..written], &mut known, &mut chain);
            seq.noted = (known, chain);
        }
    }

    /// Whether the pool can start a sequence of `tokens` tokens now: blocks for all of them
    /// beyond `found` cached whole ones, plus one to grow.
    pub(super) fn fits(&self, tokens: usize, found: usize) -> bool {
        let needed = (tokens + 1).div_ceil(self.pool.block_size()).saturating_sub(found);
        self.pool.available() >= needed
    }
}
