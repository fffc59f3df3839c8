//! Token content identity, so that prefix caches can tell which tokens two requests share.
//!
//! The simulator never sees real token ids. A request's tokens are described as a list of
//! [`Segment`]s: `Segment { id, len }` stands for tokens `0..len` of a content stream `id`.
//! Two token positions hold the same token exactly when every earlier position matches and
//! both come from the same stream at the same offset. That is enough to express Mooncake
//! `hash_ids`, shared system prompts, and multi-turn prompts that embed earlier outputs.

use alloc::vec::Vec;

use crate::rng::{chain, mix2};

/// Tokens `0..len` of the content stream `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    /// Identity of the content stream.
    pub id: u64,
    /// Number of tokens taken from the start of the stream.
    pub len: u32,
}

/// Seed of every block-hash chain (an arbitrary odd constant).
const CHAIN_ROOT: u64 = 0x5EED_5EED_5EED_5EED;

/// Walks a token sequence block by block and yields each full block's chained hash.
///
/// The hash of block `j` covers every token before the end of the block, as in vLLM's
/// prefix cache, so equal hashes mean equal prefixes (up to 64-bit collisions).
#[derive(Clone, Debug)]
pub struct BlockHasher {
    block_size: u32,
    seg: usize,
    offset: u32,
    prev: u64,
}

impl BlockHasher {
    /// Starts at token 0 with the given block size (tokens per block, at least 1).
    #[must_use]
    pub fn new(block_size: u32) -> Self {
        BlockHasher { block_size: block_size.max(1), seg: 0, offset: 0, prev: CHAIN_ROOT }
    }

    /// Tokens per block.
    #[must_use]
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Appends the hashes of the next full blocks that lie inside the segment under the
    /// cursor, at most `max` of them, exactly as that many [`BlockHasher::next_block`] calls
    /// would; returns how many. The pieces' mixes do not depend on each other, so with the
    /// chain kept in a register they overlap and only the chain's multiply is serial (block
    /// by block, each mix waited for the last link through memory).
    pub fn extend_in_segment(&mut self, segments: &[Segment], max: usize, out: &mut Vec<u64>) -> usize {
        let Some(&s) = segments.get(self.seg) else { return 0 };
        let bs = self.block_size;
        let n = ((s.len.saturating_sub(self.offset) / bs) as usize).min(max);
        let (mut prev, offset) = (self.prev, self.offset);
        out.extend((0..n).map(|k| {
            #[allow(clippy::cast_possible_truncation)] // k < n, and n blocks fit the segment's u32 length.
            let off = offset + k as u32 * bs;
            prev = chain(prev, mix2(s.id, (u64::from(off) << 32) | u64::from(bs)));
            prev
        }));
        #[allow(clippy::cast_possible_truncation)] // As above.
        {
            self.offset += n as u32 * bs;
        }
        self.prev = prev;
        if n > 0 && self.offset == s.len && self.seg + 1 < segments.len() {
            // Step into the next segment now (this one is not the last, so it cannot grow).
            self.seg += 1;
            self.offset = 0;
        }
        n
    }

    /// Hash of the next full block of `segments`, or `None` when fewer than a block's worth
    /// of tokens remain. `segments` may grow between calls: the last segment may get longer
    /// and new segments may be appended (outputs are appended one token at a time). Blocks
    /// inside the segment under the cursor are hashed faster in bulk by
    /// [`BlockHasher::extend_in_segment`].
    pub fn next_block(&mut self, segments: &[Segment]) -> Option<u64> {
        // The cursor may rest at the end of a segment that has since grown, or that another
        // segment now follows; only step past a segment once a later one exists.
        while self.seg + 1 < segments.len() && self.offset >= segments[self.seg].len {
            self.seg += 1;
            self.offset = 0;
        }
        // Check there is a full block left before consuming anything.
        let mut available = 0u64;
        for (i, s) in segments.iter().enumerate().skip(self.seg) {
            let start = if i == self.seg { self.offset.min(s.len) } else { 0 };
            available += u64::from(s.len - start);
            if available >= u64::from(self.block_size) {
                break;
            }
        }
        if available < u64::from(self.block_size) {
            return None;
        }
        let mut need = self.block_size;
        let mut h = self.prev;
        while need > 0 {
            if self.offset >= segments[self.seg].len {
                self.seg += 1;
                self.offset = 0;
            }
            let s = segments[self.seg];
            let take = (s.len - self.offset).min(need);
            if take > 0 {
                h = chain(h, mix2(s.id, (u64::from(self.offset) << 32) | u64::from(take)));
            }
            need -= take;
            self.offset += take;
        }
        self.prev = h;
        Some(h)
    }
}

/// Total number of tokens in `segments`.
#[must_use]
pub fn total_len(segments: &[Segment]) -> u64 {
    segments.iter().map(|s| u64::from(s.len)).sum()
}

/// Hashes of all full blocks of `segments`.
#[must_use]
pub fn block_hashes(segments: &[Segment], block_size: u32) -> Vec<u64> {
    let mut h = BlockHasher::new(block_size);
    let mut out = Vec::new();
    while let Some(x) = h.next_block(segments) {
        out.push(x);
    }
    out
}

/// Number of leading tokens two segment lists share.
#[must_use]
pub fn common_prefix_tokens(a: &[Segment], b: &[Segment]) -> u64 {
    let mut n = 0u64;
    for (x, y) in a.iter().zip(b) {
        if x.id != y.id {
            break;
        }
        n += u64::from(x.len.min(y.len));
        if x.len != y.len {
            break;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn shared_prefix_gives_equal_block_hashes() {
        let a = vec![Segment { id: 1, len: 100 }, Segment { id: 2, len: 50 }];
        let b = vec![Segment { id: 1, len: 100 }, Segment { id: 3, len: 50 }];
        let ha = block_hashes(&a, 32);
        let hb = block_hashes(&b, 32);
        assert_eq!(ha.len(), 4);
        // Blocks 0..3 lie inside stream 1; block 3 (tokens 96..128) straddles the fork.
        assert_eq!(ha[..3], hb[..3]);
        assert_ne!(ha[3], hb[3]);
        assert_eq!(common_prefix_tokens(&a, &b), 100);
    }

    #[test]
    fn segmentation_does_not_matter_only_content() {
        // The same tokens described as one stream or as a stream with an output appended.
        let a = vec![Segment { id: 9, len: 64 }, Segment { id: 10, len: 64 }];
        let mut b = vec![Segment { id: 9, len: 64 }];
        let mut h = BlockHasher::new(64);
        let first = h.next_block(&b);
        assert!(h.next_block(&b).is_none());
        b.push(Segment { id: 10, len: 64 });
        let second = h.next_block(&b);
        assert_eq!(vec![first.unwrap(), second.unwrap()], block_hashes(&a, 64));
    }

    #[test]
    fn a_segment_growing_one_token_at_a_time_is_hashed_completely() {
        // A prompt ending exactly on a block boundary, then an output growing token by token:
        // the cursor must not skip the tokens appended after it reached the end.
        for prompt in [64u32, 100, 128] {
            let mut content = vec![Segment { id: 1, len: prompt }, Segment { id: 2, len: 0 }];
            let mut h = BlockHasher::new(64);
            let mut got = Vec::new();
            for _ in 0..300 {
                while let Some(x) = h.next_block(&content) {
                    got.push(x);
                }
                content[1].len += 1;
            }
            while let Some(x) = h.next_block(&content) {
                got.push(x);
            }
            assert_eq!(got, block_hashes(&content, 64), "prompt {prompt}");
        }
    }

    /// The definition, piece by piece: a block's hash chains one `(stream, offset, length)`
    /// piece per segment it overlaps.
    fn reference_hashes(segments: &[Segment], block_size: u32) -> Vec<u64> {
        let mut pieces = Vec::new();
        for s in segments {
            pieces.extend((0..s.len).map(|off| (s.id, off)));
        }
        let mut out = Vec::new();
        let mut prev = CHAIN_ROOT;
        for block in pieces.chunks_exact(block_size as usize) {
            let mut h = prev;
            let mut i = 0;
            while i < block.len() {
                let (id, off) = block[i];
                let run = block[i..].iter().zip(off..).take_while(|(p, o)| p.0 == id && p.1 == *o).count();
                h = chain(h, mix2(id, (u64::from(off) << 32) | run as u64));
                i += run;
            }
            out.push(h);
            prev = h;
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn hashes_follow_the_piecewise_definition(
            lens in proptest::collection::vec(0u32..80, 0..8),
            block_size in 1u32..40,
        ) {
            #[allow(clippy::cast_possible_truncation)]
            let segments: Vec<Segment> =
                lens.iter().enumerate().map(|(i, &len)| Segment { id: 7 + i as u64, len }).collect();
            proptest::prop_assert_eq!(block_hashes(&segments, block_size), reference_hashes(&segments, block_size));
        }
    }

    proptest::proptest! {
        /// Hashing a segment's blocks in batches of any size, with single blocks between, is
        /// hashing them one at a time.
        #[test]
        fn batches_within_a_segment_are_single_blocks_in_a_row(
            lens in proptest::collection::vec(0u32..300, 0..8),
            block_size in 1u32..70,
            batches in proptest::collection::vec(0usize..9, 1..40),
        ) {
            #[allow(clippy::cast_possible_truncation)]
            let segments: Vec<Segment> =
                lens.iter().enumerate().map(|(i, &len)| Segment { id: 3 + i as u64, len }).collect();
            let mut h = BlockHasher::new(block_size);
            let mut got = Vec::new();
            for max in batches.iter().cycle().take(10_000) {
                let before = got.len();
                let n = h.extend_in_segment(&segments, *max, &mut got);
                proptest::prop_assert_eq!(got.len() - before, n);
                proptest::prop_assert!(n <= *max);
                if n == 0 {
                    match h.next_block(&segments) {
                        Some(x) => got.push(x),
                        None => break,
                    }
                }
            }
            proptest::prop_assert_eq!(got, block_hashes(&segments, block_size));
        }
    }

    #[test]
    fn partial_tail_blocks_have_no_hash() {
        assert_eq!(block_hashes(&[Segment { id: 1, len: 63 }], 64).len(), 0);
        assert_eq!(block_hashes(&[Segment { id: 1, len: 129 }], 64).len(), 2);
        assert_eq!(block_hashes(&[], 64).len(), 0);
    }
}
