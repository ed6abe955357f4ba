//! The KV cache's blocks: which sequences hold each one, and which full blocks keep a known
//! prefix for later requests (vLLM's prefix caching).
//!
//! A block is free, held (by one or more running sequences: a prompt shared by `n` choices), or
//! cached: keeping the keys and values of a known run of tokens, found again by the tokens
//! before it and its own. Cached blocks no one holds are taken back, least recently used first,
//! only when no free block is left, so a conversation's second turn finds its first turn's
//! blocks even after other requests ran in between. A cached block is never written again: a
//! sequence that continues one (the partly filled last block of a finished turn, or a block whose
//! tokens it shares only in part) writes to a copy.

use std::collections::{BTreeMap, HashMap};

/// What a full block holds: the tokens of its positions, after the run of blocks that `parent`
/// names (0: none; the start of a sequence).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Content {
    parent: u64,
    tokens: Box<[u32]>,
}

/// What [`BlockPool::lookup`] found: whole blocks (with their content ids, for noting what
/// follows them), then a block sharing `.1` of the next tokens.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Found {
    pub(super) whole: Vec<u32>,
    pub(super) ids: Vec<u64>,
    pub(super) part: Option<(u32, usize)>,
}

impl Found {
    /// Every found block (to let go of them).
    pub(super) fn blocks(&self) -> Vec<u32> {
        self.whole.iter().copied().chain(self.part.map(|p| p.0)).collect()
    }
}

/// A cached block's content and when it was last let go.
#[derive(Clone, Debug)]
struct Cached {
    content: Content,
    since: u64,
}

/// The pool's bookkeeping.
pub(super) struct BlockPool {
    block_size: usize,
    /// Per block: the sequences holding it.
    refs: Vec<u32>,
    /// Blocks with a holder (kept as blocks change hands, for the usage gauge of every step).
    held: usize,
    /// Blocks holding nothing worth keeping.
    free: Vec<u32>,
    /// Per block: what it is cached as, if it is.
    cached_as: Vec<Option<Cached>>,
    /// Cached content → (block, content id).
    index: HashMap<Content, (u32, u64)>,
    /// Content id → the cached blocks that follow it (whole or partly filled).
    children: HashMap<u64, Vec<u32>>,
    /// Cached blocks held by no one, by when they were let go: the next to be taken first.
    idle: BTreeMap<u64, u32>,
    clock: u64,
    next_id: u64,
}

impl BlockPool {
    /// A pool of `blocks` free blocks of `block_size` positions.
    pub(super) fn new(blocks: usize, block_size: usize) -> BlockPool {
        let blocks = blocks.min(u32::MAX as usize);
        BlockPool {
            block_size: block_size.max(1),
            refs: vec![0; blocks],
            held: 0,
            // Popped from the end: block 0 first, so memory is touched from its start.
            free: (0..blocks as u32).rev().collect(),
            cached_as: vec![None; blocks],
            index: HashMap::new(),
            children: HashMap::new(),
            idle: BTreeMap::new(),
            clock: 0,
            next_id: 1,
        }
    }

    /// Positions per block.
    pub(super) fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub(super) fn len(&self) -> usize {
        self.refs.len()
    }

    /// Blocks held by a running sequence.
    pub(super) fn held(&self) -> usize {
        self.held
    }

    /// Blocks [`BlockPool::take`] can still give: free ones and cached ones no one holds.
    pub(super) fn available(&self) -> usize {
        self.free.len() + self.idle.len()
    }

    /// A block for a sequence to write (held once): a free one, else the least recently used
    /// cached one (forgetting what it held). `None` when every block is held.
    pub(super) fn take(&mut self) -> Option<u32> {
        let block = match self.free.pop() {
            Some(b) => b,
            None => {
                let (_, b) = self.idle.pop_first()?;
                self.forget(b);
                b
            }
        };
        self.refs[block as usize] = 1;
        self.held += 1;
        Some(block)
    }

    /// One more holder of `block` (a sequence sharing it).
    pub(super) fn share(&mut self, block: u32) {
        let b = block as usize;
        if self.refs[b] == 0 {
            self.held += 1;
            if let Some(cached) = &self.cached_as[b] {
                self.idle.remove(&cached.since);
            }
        }
        self.refs[b] += 1;
    }

    /// Whether a sequence about to write into `block` must write to a copy: another sequence
    /// holds it too, or it is cached.
    pub(super) fn must_copy(&self, block: u32) -> bool {
        self.refs[block as usize] > 1 || self.cached_as[block as usize].is_some()
    }

    /// One holder fewer for each of `blocks`; a block no one holds becomes free, or idle if it is
    /// cached.
    pub(super) fn release(&mut self, blocks: &[u32]) {
        for &block in blocks {
            let b = block as usize;
            debug_assert!(self.refs[b] > 0, "block {b} released more often than held");
            self.refs[b] = self.refs[b].saturating_sub(1);
            if self.refs[b] > 0 {
                continue;
            }
            self.held -= 1;
            match &mut self.cached_as[b] {
                Some(cached) => {
                    self.clock += 1;
                    cached.since = self.clock;
                    self.idle.insert(self.clock, block);
                }
                None => self.free.push(block),
            }
        }
    }

    /// The cached blocks that hold `tokens` from position 0: whole blocks in order, then the
    /// cached block after them sharing the most of the next tokens (at least one), with how many
    /// it shares — to be continued in a copy. Each found block is now held once more by the
    /// caller.
    pub(super) fn lookup(&mut self, tokens: &[u32]) -> Found {
        let (mut whole, mut ids) = (Vec::new(), Vec::new());
        let mut parent = 0;
        for chunk in tokens.chunks_exact(self.block_size) {
            let key = Content { parent, tokens: chunk.into() };
            let Some(&(block, id)) = self.index.get(&key) else { break };
            self.share(block);
            whole.push(block);
            ids.push(id);
            parent = id;
        }
        let rest = &tokens[whole.len() * self.block_size..];
        let common = |b: &u32| {
            let content = &self.cached_as[*b as usize].as_ref().map_or(&[][..], |c| &c.content.tokens[..]);
            content.iter().zip(rest).take_while(|(a, b)| a == b).count()
        };
        let best = self.children.get(&parent).and_then(|kids| kids.iter().map(|b| (*b, common(b))).max_by_key(|k| k.1));
        let part = best.filter(|&(_, n)| n > 0);
        if let Some((block, _)) = part {
            self.share(block);
        }
        Found { whole, ids, part }
    }

    /// Notes what the whole blocks of a sequence hold, `tokens` being its tokens from position
    /// 0 whose keys and values are written: `blocks[i]` holds `tokens[i·B..(i+1)·B]`. `known`
    /// is how many leading blocks were noted before (updated), `chain` the content id of the last
    /// of them (updated), so each call notes only what is new. A block whose content another
    /// block already keeps is left uncached (its twin serves later requests).
    pub(super) fn note_full(&mut self, blocks: &[u32], tokens: &[u32], known: &mut usize, chain: &mut u64) {
        let full = (tokens.len() / self.block_size).min(blocks.len());
        while *known < full {
            let i = *known;
            let content =
                Content { parent: *chain, tokens: tokens[i * self.block_size..(i + 1) * self.block_size].into() };
            let block = blocks[i];
            *chain = match self.index.get(&content) {
                Some(&(_, id)) => id,
                None if self.cached_as[block as usize].is_none() => {
                    let id = self.next_id;
                    self.next_id += 1;
                    self.cache(block, content, id);
                    id
                }
                // This block already keeps other content (it cannot: a held block is written only
                // past what it keeps); keep the chain going under a fresh id nothing finds.
                None => {
                    self.next_id += 1;
                    self.next_id - 1
                }
            };
            *known += 1;
        }
    }

    /// Notes what the partly filled block after `chain` holds: `tokens`, fewer than a block's
    /// (the last block of a sequence that ends).
    pub(super) fn note_tail(&mut self, block: u32, tokens: &[u32], chain: u64) {
        if tokens.is_empty() || tokens.len() >= self.block_size || self.cached_as[block as usize].is_some() {
            return;
        }
        let content = Content { parent: chain, tokens: tokens.into() };
        if self.index.contains_key(&content) {
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.cache(block, content, id);
    }

    /// Makes `block` the cached holder of `content` under `id`.
    fn cache(&mut self, block: u32, content: Content, id: u64) {
        self.children.entry(content.parent).or_default().push(block);
        self.index.insert(content.clone(), (block, id));
        self.cached_as[block as usize] = Some(Cached { content, since: 0 });
    }

    /// Drops what `block` was cached as (it is about to be rewritten).
    fn forget(&mut self, block: u32) {
        if let Some(cached) = self.cached_as[block as usize].take() {
            self.index.remove(&cached.content);
            if let Some(kids) = self.children.get_mut(&cached.content.parent) {
                kids.retain(|&b| b != block);
                if kids.is_empty() {
                    self.children.remove(&cached.content.parent);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_taken_shared_and_released() {
        let mut pool = BlockPool::new(3, 2);
        let (a, b) = (pool.take().unwrap(), pool.take().unwrap());
        assert_eq!((a, b), (0, 1));
        pool.share(a);
        assert_eq!((pool.must_copy(a), pool.held(), pool.available()), (true, 2, 1));
        pool.release(&[a]);
        assert!(!pool.must_copy(a));
        pool.release(&[a, b]);
        assert_eq!((pool.held(), pool.available()), (0, 3));
        assert_eq!(
            [pool.take(), pool.take(), pool.take(), pool.take()].map(|b| b.is_some()),
            [true, true, true, false]
        );
    }

    #[test]
    fn a_finished_prefix_is_found_again_until_its_blocks_are_needed() {
        let mut pool = BlockPool::new(4, 2);
        let tokens = [1, 2, 3, 4, 5];
        let blocks: Vec<u32> = (0..3).map(|_| pool.take().unwrap()).collect();
        let (mut known, mut chain) = (0, 0);
        pool.note_full(&blocks, &tokens, &mut known, &mut chain);
        assert_eq!(known, 2, "the partial third block is not noted as whole");
        pool.release(&blocks);
        // Whole blocks only, in order, and only after the same tokens.
        let found = pool.lookup(&[1, 2, 3, 4, 9]);
        assert_eq!((&found.whole, found.part), (&vec![blocks[0], blocks[1]], None));
        assert_eq!(pool.lookup(&[3, 4]), Found::default(), "the same tokens at another place");
        pool.release(&found.blocks());
        // Free blocks go first; then the least recently let go of the cached ones.
        let taken: Vec<u32> = (0..4).map(|_| pool.take().unwrap()).collect();
        assert_eq!(&taken[..2], &[blocks[2], 3]);
        assert_eq!(pool.lookup(&tokens), Found::default(), "their blocks were rewritten");
    }

    #[test]
    fn a_block_sharing_some_of_the_next_tokens_is_found_to_be_copied() {
        let mut pool = BlockPool::new(6, 4);
        let blocks: Vec<u32> = (0..3).map(|_| pool.take().unwrap()).collect();
        let tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        let (mut known, mut chain) = (0, 0);
        pool.note_full(&blocks, &tokens, &mut known, &mut chain);
        // The partly filled last block: 9, 10.
        pool.note_tail(blocks[2], &tokens[8..], chain);
        assert!(pool.must_copy(blocks[2]), "a cached block is not written again");
        pool.release(&blocks);
        // Diverging inside the second block: the first whole, 2 of the second's tokens shared.
        let found = pool.lookup(&[1, 2, 3, 4, 5, 6, 0, 0, 0]);
        assert_eq!((&found.whole, found.part), (&vec![blocks[0]], Some((blocks[1], 2))));
        pool.release(&found.blocks());
        // Past the whole blocks, the tail: 9 of 9, 10, 11 shared.
        let found = pool.lookup(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 11]);
        assert_eq!((&found.whole, found.part), (&vec![blocks[0], blocks[1]], Some((blocks[2], 1))));
        // The ids chain on as noting the blocks did.
        assert_eq!(found.ids.last(), Some(&chain));
        assert_eq!(pool.held(), 3);
        pool.release(&found.blocks());
        // Taking the tail's block for new content forgets it.
        let taken: Vec<u32> = (0..4).map(|_| pool.take().unwrap()).collect();
        assert!(taken.contains(&blocks[0]));
        assert_eq!(pool.lookup(&tokens).whole, Vec::<u32>::new());
    }

    #[test]
    fn twins_keep_one_cached_copy_and_the_chain_goes_on() {
        let mut pool = BlockPool::new(4, 2);
        let a: Vec<u32> = (0..2).map(|_| pool.take().unwrap()).collect();
        let b: Vec<u32> = (0..2).map(|_| pool.take().unwrap()).collect();
        let (mut ka, mut ca, mut kb, mut cb) = (0, 0, 0, 0);
        pool.note_full(&a, &[7, 7, 8, 8], &mut ka, &mut ca);
        pool.note_full(&b, &[7, 7, 9, 9], &mut kb, &mut cb);
        pool.release(&a);
        pool.release(&b);
        // b[0] is a twin of a[0]: b's second block is found after a[0].
        assert_eq!(pool.lookup(&[7, 7, 9, 9]).whole, vec![a[0], b[1]]);
        assert_eq!(pool.lookup(&[7, 7, 8, 8]).whole, vec![a[0], a[1]]);
    }
}
