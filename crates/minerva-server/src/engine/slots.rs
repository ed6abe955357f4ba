//! The KV-cache slots not in use, and what each still holds: a finished request leaves its
//! tokens' keys and values behind, so a new request that starts with the same tokens (a chat
//! client re-sending the conversation) runs only the rest (llama-server's `cache_prompt`).

/// Free slots and the tokens each one's cache holds.
pub(super) struct Slots {
    free: Vec<usize>,
    /// Per slot: the tokens whose keys and values are in its cache, from position 0.
    cached: Vec<Vec<u32>>,
    /// Per slot: when it was last given back (for least-recently-used eviction).
    last_used: Vec<u64>,
    clock: u64,
}

impl Slots {
    /// `n` empty slots.
    pub(super) fn new(n: usize) -> Slots {
        Slots { free: (0..n).collect(), cached: vec![Vec::new(); n], last_used: vec![0; n], clock: 0 }
    }

    /// All slots, free or not.
    pub(super) fn len(&self) -> usize {
        self.cached.len()
    }

    /// Slots free now.
    pub(super) fn free(&self) -> usize {
        self.free.len()
    }

    /// Takes the free slot whose cache shares the longest prefix with `prompt` (among equals the
    /// least recently used, so the others keep their contents longer). Returns the slot and how
    /// many of the prompt's first tokens its cache already holds.
    pub(super) fn take(&mut self, prompt: &[u32]) -> Option<(usize, usize)> {
        let common = |slot: usize| self.cached[slot].iter().zip(prompt).take_while(|(a, b)| a == b).count();
        let (index, &slot) = self
            .free
            .iter()
            .enumerate()
            .max_by_key(|&(_, &slot)| (common(slot), std::cmp::Reverse(self.last_used[slot])))?;
        let reuse = common(slot);
        self.free.swap_remove(index);
        Some((slot, reuse))
    }

    /// Gives `slot` back; its cache holds the keys and values of `tokens`.
    pub(super) fn give_back(&mut self, slot: usize, tokens: &[u32]) {
        self.clock += 1;
        self.last_used[slot] = self.clock;
        self.cached[slot].clear();
        self.cached[slot].extend_from_slice(tokens);
        self.free.push(slot);
    }

    /// Gives `slot` back with nothing in its cache known to be valid (a failed step).
    pub(super) fn give_back_empty(&mut self, slot: usize) {
        self.give_back(slot, &[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_common_prefix_wins_then_the_least_recently_used() {
        let mut slots = Slots::new(3);
        let (a, _) = slots.take(&[1, 2, 3]).unwrap();
        let (b, _) = slots.take(&[1, 2, 3]).unwrap();
        let (c, _) = slots.take(&[9]).unwrap();
        assert_eq!(slots.take(&[1]), None);
        slots.give_back(a, &[1, 2, 3, 4]);
        slots.give_back(b, &[1, 2, 7]);
        slots.give_back(c, &[5, 6]);
        assert_eq!(slots.take(&[1, 2, 3, 4, 5]), Some((a, 4)));
        assert_eq!(slots.take(&[1, 2, 8]), Some((b, 2)));
        // No prefix in common: the least recently used slot is evicted.
        slots.give_back(a, &[1]);
        assert_eq!(slots.take(&[42]), Some((c, 0)));
        assert_eq!(slots.free(), 1);
        slots.give_back_empty(c);
        assert_eq!(slots.take(&[5, 6]), Some((a, 0)));
    }
}
