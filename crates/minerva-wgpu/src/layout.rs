//! How a weight's rows are laid out in GPU memory.
//!
//! GGML blocks of 17, 18, 20, 22 and 34 bytes leave a block's quants at offsets that are not
//! 16-byte aligned, so a kernel reading them in the file's layout gathers 4-byte words and
//! realigns them. For those formats each row is regrouped at upload: a group of
//! `group` consecutive blocks is stored as their heads (scales, minima, high bits: the bytes
//! outside the block's body), padded to 16 bytes, followed by their bodies (the quants, a
//! multiple of 16 bytes each). Every body then starts on a 16-byte boundary and is read as whole
//! `vec4<u32>`s; a row is a multiple of 16 bytes, so rows start aligned too. The last group of a
//! row may hold fewer blocks (its heads area keeps the full padded size). The shaders find block
//! `b` of a row with `head_at` / `body_at` (common.wgsl) from the constants [`BlockSplit::wgsl`]
//! emits; for a format stored as in the file those constants describe groups of one block with
//! no head.

/// A block format's split into a head and a 16-byte-multiple body, and the blocks per group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockSplit {
    /// The block's bytes.
    pub block_bytes: usize,
    /// Where the body starts in the block; the head is the bytes before it then those after it.
    pub body_start: usize,
    /// The body's bytes, a multiple of 16.
    pub body_bytes: usize,
    /// Blocks per group: chosen so that the group's heads fill whole 16-byte words where they can.
    pub group: usize,
}

impl BlockSplit {
    /// A block stored as in the file: one block per group, all body.
    pub(crate) const fn whole(block_bytes: usize) -> BlockSplit {
        BlockSplit { block_bytes, body_start: 0, body_bytes: block_bytes, group: 1 }
    }

    fn head_bytes(&self) -> usize {
        self.block_bytes - self.body_bytes
    }

    /// The padded bytes of one group's heads.
    fn heads_bytes(&self) -> usize {
        (self.group * self.head_bytes()).next_multiple_of(16)
    }

    fn group_bytes(&self) -> usize {
        self.heads_bytes() + self.group * self.body_bytes
    }

    /// Whether rows are stored as in the file.
    pub(crate) fn is_whole(&self) -> bool {
        self.group == 1 && self.body_bytes == self.block_bytes
    }

    /// Bytes of a row of `blocks` blocks in this layout.
    pub(crate) fn row_bytes(&self, blocks: usize) -> Option<usize> {
        if self.is_whole() {
            return blocks.checked_mul(self.block_bytes);
        }
        let (full, rest) = (blocks / self.group, blocks % self.group);
        let tail = if rest == 0 { 0 } else { self.heads_bytes() + rest * self.body_bytes };
        full.checked_mul(self.group_bytes())?.checked_add(tail)
    }

    /// Writes one row (`src`: its blocks as in the file) in this layout into `dst`
    /// (`row_bytes` long; padding is zeroed).
    pub(crate) fn write_row(&self, src: &[u8], dst: &mut [u8]) {
        if self.is_whole() {
            dst.copy_from_slice(src);
            return;
        }
        dst.fill(0);
        let (head, body_end) = (self.head_bytes(), self.body_start + self.body_bytes);
        for (b, block) in src.chunks_exact(self.block_bytes).enumerate() {
            let group_start = (b / self.group) * self.group_bytes();
            let h = group_start + (b % self.group) * head;
            dst[h..h + self.body_start].copy_from_slice(&block[..self.body_start]);
            dst[h + self.body_start..h + head].copy_from_slice(&block[body_end..]);
            let body = group_start + self.heads_bytes() + (b % self.group) * self.body_bytes;
            dst[body..body + self.body_bytes].copy_from_slice(&block[self.body_start..body_end]);
        }
    }

    /// The WGSL constants `head_at` / `body_at` (common.wgsl) find blocks with.
    pub(crate) fn wgsl(&self) -> String {
        format!(
            "const GROUP_BLOCKS: u32 = {}u;\nconst HEAD_BYTES: u32 = {}u;\nconst BODY_BYTES: u32 = {}u;\n\
             const HEADS_BYTES: u32 = {}u;\nconst GROUP_BYTES: u32 = {}u;\n",
            self.group,
            self.head_bytes(),
            self.body_bytes,
            self.heads_bytes(),
            self.group_bytes()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Q4_0's split: a 2-byte scale, 16 bytes of quants, 8 blocks a group.
    const Q4_0: BlockSplit = BlockSplit { block_bytes: 18, body_start: 2, body_bytes: 16, group: 8 };

    #[test]
    fn a_regrouped_row_puts_every_byte_where_head_at_and_body_at_find_it() {
        // Q6_K-like: the head after the body.
        let q6k = BlockSplit { block_bytes: 210, body_start: 0, body_bytes: 208, group: 8 };
        let q5_0 = BlockSplit { block_bytes: 22, body_start: 6, body_bytes: 16, group: 8 };
        for split in [Q4_0, q6k, q5_0] {
            for blocks in [1, 7, 8, 9, 21] {
                let src: Vec<u8> = (0..blocks * split.block_bytes).map(|i| (i * 31 % 251) as u8).collect();
                let n = split.row_bytes(blocks).unwrap();
                assert_eq!(n % 16, 0, "{split:?} × {blocks}: {n} bytes");
                let mut dst = vec![0xaa; n];
                split.write_row(&src, &mut dst);
                for (b, block) in src.chunks_exact(split.block_bytes).enumerate() {
                    let group = (b / split.group) * split.group_bytes();
                    let head = group + (b % split.group) * split.head_bytes();
                    let body = group + split.heads_bytes() + (b % split.group) * split.body_bytes;
                    assert_eq!(body % 16, 0);
                    let mut rebuilt = dst[head..head + split.body_start].to_vec();
                    rebuilt.extend_from_slice(&dst[body..body + split.body_bytes]);
                    rebuilt.extend_from_slice(&dst[head + split.body_start..head + split.head_bytes()]);
                    assert_eq!(rebuilt, block, "{split:?} block {b} of {blocks}");
                }
            }
        }
    }

    #[test]
    fn full_groups_of_small_heads_cost_no_bytes() {
        assert_eq!(Q4_0.row_bytes(16), Some(16 * 18));
        // A partial group keeps its whole padded heads area.
        assert_eq!(Q4_0.row_bytes(9), Some(8 * 18 + 16 + 16));
        assert_eq!(BlockSplit::whole(144).row_bytes(3), Some(432));
    }
}
