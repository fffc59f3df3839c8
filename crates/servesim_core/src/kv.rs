//! A paged KV cache with block-granular prefix caching (the vLLM / TensorRT-LLM model).
//!
//! The pool owns `capacity` blocks of `block_size` tokens. A block is either held by one or
//! more requests (`ref_count > 0`) or free. Free blocks sit in one eviction queue in LRU
//! order; a free block that still holds a complete, hashed block of tokens remains findable
//! through the prefix index until the queue's head is reused for a new allocation, which
//! evicts it. This mirrors vLLM's `BlockPool` (free-block queue + hash map of cached blocks).
//!
//! **The queue** is a ring of `(block, epoch)` entries rather than a linked list through the
//! blocks: allocation pops the front and release pushes the back without touching any other
//! block (a linked list's neighbour updates were cache misses on every block handed out). A
//! block taken from the middle (a prefix hit on a free cached block) bumps its epoch, which
//! leaves its entry dead; dead entries are skipped at the front and dropped in one pass when
//! they outnumber the live ones.
//!
//! **Private content.** A block whose content no other request can contain (it lies past the
//! request's shareable prefix, see [`RequestSpec::public_tokens`](crate::request::RequestSpec))
//! is only *marked* as holding cached content instead of being hashed into the index: nobody
//! could look it up, so the index entry would be pure cost (a hash, an insert, and a remove at
//! eviction). Evicting it still counts as an eviction. If its request is preempted it may look
//! its own blocks up again, so they are indexed then ([`BlockPool::index_private`]). The
//! results are those of indexing every block; a property test runs both side by side.
//!
//! **Recurrent state (hybrid models).** A pool built [`BlockPool::with_state`] serves a model
//! whose linear-attention layers keep a fixed-size state per sequence, as vLLM's hybrid KV
//! manager does: each running sequence holds that many blocks besides its tokens' blocks. With
//! prefix caching on (vLLM's `mamba_cache_mode: align`), the state a sequence reaches at a
//! block boundary is copied into fresh blocks indexed under [`state_key`]s of that block's
//! hash (a checkpoint), which are free and evictable like any cached block; a prefix is reusable
//! only up to its last block whose checkpoint is resident, since the state cannot be rebuilt
//! from the tokens' KV.
//!
//! Invariants (checked by the property tests against a naive model):
//! - blocks in use never exceed capacity;
//! - every block is either referenced or in the free queue, never both;
//! - the prefix index only names blocks whose content is still resident;
//! - a block is empty, indexed or marked private (one state, so never both).

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use core::hash::{BuildHasherDefault, Hasher};

use hashbrown::{HashMap, HashTable};

pub mod belady;
use belady::{BeladyFree, SharedOracle};

/// Block hashes are already uniformly mixed 64-bit values (SplitMix64 chains), so the prefix
/// index uses them as their own hash instead of hashing them again.
#[derive(Clone, Copy, Debug, Default)]
pub struct PremixedHasher(u64);

impl Hasher for PremixedHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are stored; fold anything else in deterministically all the same.
        for b in bytes {
            self.0 = crate::rng::mix2(self.0, u64::from(*b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 ^= v;
    }
}

/// Map keyed by pre-mixed 64-bit hashes.
pub type PremixedMap<V> = HashMap<u64, V, BuildHasherDefault<PremixedHasher>>;

/// Index of a block within one pool.
pub type BlockId = u32;

/// Dead queue entries tolerated beyond the live ones before the queue is compacted (so a
/// small pool does not compact on every hit).
const DEAD_ENTRY_SLACK: usize = 64;

/// What a block's tokens are, as far as the prefix cache is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Content {
    /// Nothing cached (never filled, or filled without prefix caching).
    Empty,
    /// Registered in the prefix index under the block's `hash`.
    Indexed,
    /// Cached content nobody else can look up (not in the index).
    Private,
}

/// One block's bookkeeping: 24 bytes, so the blocks a step touches share cache lines. A block
/// is in the free queue exactly when nobody references it.
#[derive(Clone, Debug)]
struct Block {
    /// Content hash, meaningful when `content` is [`Content::Indexed`].
    hash: u64,
    ref_count: u32,
    /// Bumped whenever the block leaves the free queue: a queue entry with an older epoch is dead.
    epoch: u32,
    content: Content,
}

impl Block {
    /// The hash the block is indexed under, if it is.
    fn indexed(&self) -> Option<u64> {
        (self.content == Content::Indexed).then_some(self.hash)
    }
}

/// Counters a pool keeps for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Cached blocks whose content was dropped to make room.
    pub evictions: u64,
    /// Blocks found in the prefix index at admission.
    pub hit_blocks: u64,
    /// Blocks looked up in the prefix index at admission.
    pub lookup_blocks: u64,
}

/// A fixed-size pool of KV blocks with an LRU prefix cache.
#[derive(Clone, Debug)]
pub struct BlockPool {
    block_size: u32,
    blocks: Vec<Block>,
    /// Free blocks in LRU order (front: evicted first), with dead entries among them.
    queue: VecDeque<(BlockId, u32)>,
    free_len: u32,
    /// The prefix index: indexed blocks by content hash. It stores only block ids (4 bytes
    /// a slot; the hash is the block record's), so a replica's index stays a few tens of
    /// KiB and in cache: with hash-keyed slots it was four times that, and every insert and
    /// eviction missed the cache.
    index: HashTable<BlockId>,
    prefix_caching: bool,
    stats: PoolStats,
    /// Belady eviction: free blocks ranked by their next use instead of the LRU ring (which
    /// then stays empty).
    belady: Option<alloc::boxed::Box<BeladyFree>>,
    /// Blocks each running sequence holds for its recurrent state (0: no linear attention).
    state_blocks: u32,
    /// Hashes of indexed blocks evicted since the last [`BlockPool::take_evicted`], when a
    /// tier below keeps what this pool evicts ([`BlockPool::log_evictions`]).
    evicted: Option<Vec<u64>>,
}

/// The index key of slot `slot` of the recurrent-state checkpoint taken after the block whose
/// content hash is `prefix` (a SplitMix64 finaliser of both, so it never meets a token block's
/// hash in practice).
#[must_use]
pub fn state_key(prefix: u64, slot: u32) -> u64 {
    // SplitMix64's increment and multipliers (Steele, Lea and Flood, 2014); the salt is
    // "STATE" in ASCII, so a checkpoint's keys are not a token block's hash chain continued.
    let mut z = prefix ^ 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(u64::from(slot) + 1) ^ 0x5354_4154_4500_0000;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl BlockPool {
    /// A pool of `capacity` blocks of `block_size` tokens.
    #[must_use]
    pub fn new(capacity: u32, block_size: u32, prefix_caching: bool) -> Self {
        let capacity = capacity.min(u32::MAX - 1);
        let blocks = (0..capacity)
            .map(|_| Block { hash: 0, ref_count: 0, epoch: 0, content: Content::Empty })
            .collect();
        BlockPool {
            block_size: block_size.max(1),
            blocks,
            queue: (0..capacity).map(|i| (i, 0)).collect(),
            free_len: capacity,
            // Room for twice the pool: the index holds up to every block, and at hashbrown's
            // 7/8 load limit a full-sized table probes long and rehashes away its
            // tombstones every few hundred evictions.
            index: if prefix_caching {
                HashTable::with_capacity(capacity as usize * 2)
            } else {
                HashTable::new()
            },
            prefix_caching,
            stats: PoolStats::default(),
            belady: None,
            state_blocks: 0,
            evicted: None,
        }
    }

    /// The same pool for a hybrid model whose sequences each hold `blocks_per_sequence` blocks
    /// of recurrent state; with prefix caching, states at block boundaries are checkpointed
    /// and bound prefix hits (see the module docs).
    #[must_use]
    pub fn with_state(mut self, blocks_per_sequence: u32) -> Self {
        self.hold_states(blocks_per_sequence);
        self
    }

    /// From now on each running sequence holds `blocks_per_sequence` blocks of recurrent state
    /// ([`BlockPool::with_state`]).
    pub fn hold_states(&mut self, blocks_per_sequence: u32) {
        self.state_blocks = blocks_per_sequence;
    }

    /// From now on records the hash of every indexed block evicted, for a tier below that
    /// keeps them (TensorRT-LLM's host offloading).
    pub fn log_evictions(&mut self) {
        self.evicted.get_or_insert_with(Vec::new);
    }

    /// Moves the hashes of the indexed blocks evicted since the last call, in eviction order,
    /// into `out` (nothing unless [`BlockPool::log_evictions`] was called).
    pub fn take_evicted(&mut self, out: &mut Vec<u64>) {
        if let Some(log) = self.evicted.as_mut() {
            out.append(log);
        }
    }

    /// Blocks each running sequence holds for its recurrent state (0 without one).
    #[must_use]
    pub fn state_blocks(&self) -> u32 {
        self.state_blocks
    }

    /// Whether states at block boundaries are checkpointed (and prefix hits end at one).
    #[must_use]
    pub fn checkpoints(&self) -> bool {
        self.state_blocks > 0 && self.prefix_caching
    }

    /// Whether the checkpoint taken after the block hashed `prefix` is resident (all its slots).
    #[must_use]
    pub fn has_checkpoint(&self, prefix: u64) -> bool {
        (0..self.state_blocks).all(|slot| self.lookup(state_key(prefix, slot)).is_some())
    }

    /// Checkpoints the state a sequence has after the block hashed `prefix`: copies it into
    /// fresh blocks that join the free queue's tail, findable under its [`state_key`]s. A
    /// resident checkpoint is only moved to the tail; none is taken when too few blocks are free.
    pub fn checkpoint(&mut self, prefix: u64) {
        if !self.checkpoints() {
            return;
        }
        if self.has_checkpoint(prefix) {
            self.refresh_checkpoint(prefix);
            return;
        }
        let mut copy = Vec::with_capacity(self.state_blocks as usize);
        if !self.allocate_many(self.state_blocks, &mut copy) {
            return;
        }
        for (slot, &b) in (0..).zip(&copy) {
            self.register(b, state_key(prefix, slot));
        }
        for &b in &copy {
            self.release(b);
        }
    }

    /// Moves the resident slots of the checkpoint after the block hashed `prefix` that nobody
    /// holds to the free queue's tail (a restore read it, so it is evicted last).
    pub fn refresh_checkpoint(&mut self, prefix: u64) {
        for slot in 0..self.state_blocks {
            if let Some(b) = self.lookup(state_key(prefix, slot)) {
                if self.blocks[b as usize].ref_count == 0 {
                    self.unlink(b);
                    self.push_tail(b);
                }
            }
        }
    }

    /// The same pool evicting by `oracle`'s forecast of each block's next use (Belady)
    /// instead of least recently freed first.
    #[must_use]
    pub fn with_belady(mut self, oracle: SharedOracle) -> Self {
        self.evict_by(oracle);
        self
    }

    /// From now on evicts by `oracle`'s forecast (Belady); the free blocks keep their order
    /// among equal forecasts.
    pub fn evict_by(&mut self, oracle: SharedOracle) {
        let mut bf = BeladyFree::new(oracle, self.capacity());
        for (b, epoch) in core::mem::take(&mut self.queue) {
            let blk = &self.blocks[b as usize];
            if blk.ref_count == 0 && blk.epoch == epoch {
                bf.push(b, blk.indexed());
            }
        }
        self.belady = Some(alloc::boxed::Box::new(bf));
    }

    /// The eviction forecast this pool follows, if it evicts by Belady's rule.
    #[must_use]
    pub fn eviction_oracle(&self) -> Option<&SharedOracle> {
        self.belady.as_deref().map(BeladyFree::oracle)
    }

    /// Ends request `seq`'s forecast demand (its first prefill chunk was committed) when the
    /// pool evicts by Belady's rule.
    pub fn retire_demand(&mut self, seq: crate::request::ReqSeq) {
        if let Some(bf) = &self.belady {
            bf.oracle().borrow_mut().retire(seq);
        }
    }

    /// Tokens per block.
    #[must_use]
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Total blocks.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // Capacity is clamped to u32 in `new`.
    pub fn capacity(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Blocks that can be handed out now (free, including evictable cached blocks).
    #[must_use]
    pub fn num_free(&self) -> u32 {
        self.free_len
    }

    /// Blocks referenced by at least one request.
    #[must_use]
    pub fn num_used(&self) -> u32 {
        self.capacity() - self.free_len
    }

    /// Whether freed blocks keep their content for reuse.
    #[must_use]
    pub fn prefix_caching(&self) -> bool {
        self.prefix_caching
    }

    /// Counters since the pool was created.
    #[must_use]
    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Blocks needed to hold `tokens` tokens.
    #[must_use]
    pub fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(u64::from(self.block_size))
    }

    /// Looks up the longest run of leading `hashes` that are resident. Returns the blocks
    /// (not yet referenced) and how many of them are currently free (so would leave the
    /// free queue when referenced).
    pub fn find_prefix(&mut self, hashes: &[u64], out: &mut Vec<BlockId>) -> u32 {
        out.clear();
        if !self.prefix_caching {
            return 0;
        }
        let mut free_hits = 0;
        for &h in hashes {
            match self.lookup(h) {
                Some(b) => {
                    out.push(b);
                    if self.blocks[b as usize].ref_count == 0 {
                        free_hits += 1;
                    }
                }
                None => break,
            }
        }
        if self.checkpoints() {
            let k = self.resumable_len(hashes, out.len());
            for &b in &out[k..] {
                if self.blocks[b as usize].ref_count == 0 {
                    free_hits -= 1;
                }
            }
            out.truncate(k);
        }
        self.stats.lookup_blocks += hashes.len() as u64;
        self.stats.hit_blocks += out.len() as u64;
        free_hits
    }

    /// Leading `hashes` resident now, without side effects (for routers).
    #[must_use]
    pub fn match_len(&self, hashes: &[u64]) -> usize {
        if !self.prefix_caching {
            return 0;
        }
        let n = hashes.iter().take_while(|h| self.lookup(**h).is_some()).count();
        self.resumable_len(hashes, n)
    }

    /// How many of the first `n` resident `hashes` a request can resume from: all of them,
    /// or with a hybrid model's checkpoints only up to the last block whose checkpoint is
    /// resident (the state cannot be rebuilt from the KV).
    fn resumable_len(&self, hashes: &[u64], n: usize) -> usize {
        if !self.checkpoints() {
            return n;
        }
        (1..=n).rev().find(|&k| self.has_checkpoint(hashes[k - 1])).unwrap_or(0)
    }

    /// Takes a reference on a resident block found by [`BlockPool::find_prefix`].
    pub fn touch(&mut self, b: BlockId) {
        if self.blocks[b as usize].ref_count == 0 {
            self.unlink(b);
        }
        self.blocks[b as usize].ref_count += 1;
    }

    /// Hands out a block, evicting the least recently freed cached block if needed (under
    /// Belady's rule, the one whose next use is furthest away).
    pub fn allocate(&mut self) -> Option<BlockId> {
        let b = self.pop_free()?;
        self.unlink(b);
        self.claim(b);
        Some(b)
    }

    /// Takes the next free block to hand out off the eviction order (the caller unlinks it).
    #[inline]
    fn pop_free(&mut self) -> Option<BlockId> {
        if let Some(bf) = self.belady.as_deref_mut() {
            let (index, blocks) = (&self.index, &self.blocks);
            return bf.pop(|h| lookup_in(index, blocks, h));
        }
        loop {
            let (b, epoch) = self.queue.pop_front()?;
            let blk = &self.blocks[b as usize];
            if blk.ref_count == 0 && blk.epoch == epoch {
                return Some(b);
            }
        }
    }

    /// Gives an unlinked free block its first reference, evicting its cached content.
    fn claim(&mut self, b: BlockId) {
        let blk = &mut self.blocks[b as usize];
        match blk.content {
            Content::Indexed => {
                if let Ok(slot) = self.index.find_entry(blk.hash, |&x| x == b) {
                    slot.remove();
                }
                if let Some(log) = self.evicted.as_mut() {
                    log.push(blk.hash);
                }
                self.stats.evictions += 1;
            }
            Content::Private => self.stats.evictions += 1,
            Content::Empty => {}
        }
        blk.content = Content::Empty;
        blk.ref_count = 1;
    }

    /// Hands out `n` blocks exactly as `n` calls of [`BlockPool::allocate`] would, appending
    /// them to `out`; false (handing out nothing) when fewer than `n` are free. The blocks are
    /// found first and claimed after: the loads of their records then overlap instead of
    /// each waiting behind the previous block's eviction from the index. (Claiming a block
    /// never changes whether another queue entry is live.)
    pub fn allocate_many(&mut self, n: u32, out: &mut Vec<BlockId>) -> bool {
        if n > self.free_len {
            return false;
        }
        let start = out.len();
        out.reserve(n as usize);
        if self.belady.is_some() {
            while out.len() - start < n as usize {
                let Some(b) = self.pop_free() else { break };
                out.push(b);
            }
        } else {
            // The LRU ring inline: this loop hands out most of a run's blocks.
            while out.len() - start < n as usize {
                let Some((b, epoch)) = self.queue.pop_front() else { break };
                let blk = &self.blocks[b as usize];
                if blk.ref_count == 0 && blk.epoch == epoch {
                    out.push(b);
                }
            }
        }
        for &b in &out[start..] {
            let blk = &mut self.blocks[b as usize];
            blk.epoch = blk.epoch.wrapping_add(1);
            self.claim(b);
        }
        #[allow(clippy::cast_possible_truncation)] // At most `n`, a u32.
        {
            self.free_len -= (out.len() - start) as u32;
        }
        self.compact_queue();
        true
    }

    /// [`BlockPool::release`] of each of `blocks`, last first (a sequence's tail is evicted
    /// before its head, as vLLM frees a request's blocks).
    pub fn release_all(&mut self, blocks: &[BlockId]) {
        self.queue.reserve(blocks.len());
        for &b in blocks.iter().rev() {
            self.release(b);
        }
    }

    /// Drops one reference; a block nobody references joins the tail of the eviction queue
    /// (keeping its content if it is registered in the prefix index).
    #[inline]
    pub fn release(&mut self, b: BlockId) {
        let blk = &mut self.blocks[b as usize];
        debug_assert!(blk.ref_count > 0, "double free of block {b}");
        blk.ref_count = blk.ref_count.saturating_sub(1);
        if blk.ref_count == 0 {
            if !self.prefix_caching {
                blk.content = Content::Empty;
            }
            self.push_tail(b);
        }
    }

    /// Records that block `b` now holds the complete block of tokens hashed `hash`.
    /// If the same content is already resident elsewhere, the index keeps the older copy.
    pub fn register(&mut self, b: BlockId, hash: u64) {
        if !self.prefix_caching || self.blocks[b as usize].content == Content::Indexed {
            return;
        }
        let blocks = &mut self.blocks;
        let slot = self.index.entry(hash, |x| blocks[*x as usize].hash == hash, |x| blocks[*x as usize].hash);
        if let hashbrown::hash_table::Entry::Vacant(slot) = slot {
            slot.insert(b);
            let blk = &mut blocks[b as usize];
            blk.hash = hash;
            blk.content = Content::Indexed;
        }
    }

    /// Records that block `b` now holds a complete block of content no other request can
    /// contain: it is kept (and counted when evicted) like indexed content, but not indexed.
    pub fn mark_private(&mut self, b: BlockId) {
        let blk = &mut self.blocks[b as usize];
        if self.prefix_caching && blk.content == Content::Empty {
            blk.content = Content::Private;
        }
    }

    /// Indexes a block marked private under its content hash `hash` (its request was
    /// preempted and may look it up when it is admitted again).
    pub fn index_private(&mut self, b: BlockId, hash: u64) {
        let blk = &mut self.blocks[b as usize];
        if blk.content == Content::Private {
            blk.content = Content::Empty;
            self.register(b, hash);
        }
    }

    /// Counts blocks a lookup covered without hashing them (private content, which cannot
    /// be resident for the request looking), so hit rates are those of looking every block up.
    pub fn count_unhashed_lookups(&mut self, blocks: u64) {
        if self.prefix_caching {
            self.stats.lookup_blocks += blocks;
        }
    }

    /// Whether `hash` is resident (for routers that score cache overlap).
    #[must_use]
    pub fn contains(&self, hash: u64) -> bool {
        self.lookup(hash).is_some()
    }

    /// The indexed block holding the content hashed `hash`.
    fn lookup(&self, hash: u64) -> Option<BlockId> {
        lookup_in(&self.index, &self.blocks, hash)
    }

    /// Reference count of a block (for tests and invariant checks).
    #[must_use]
    pub fn ref_count(&self, b: BlockId) -> u32 {
        self.blocks[b as usize].ref_count
    }

    /// Takes a free block out of the queue (its entry, wherever it is, becomes dead).
    fn unlink(&mut self, b: BlockId) {
        if let Some(bf) = self.belady.as_deref_mut() {
            bf.remove(b);
        }
        let blk = &mut self.blocks[b as usize];
        blk.epoch = blk.epoch.wrapping_add(1);
        self.free_len -= 1;
        self.compact_queue();
    }

    /// Dead entries cost a skip each at the front; drops them once they are most of the ring.
    fn compact_queue(&mut self) {
        if self.queue.len() > 2 * self.free_len as usize + DEAD_ENTRY_SLACK {
            let blocks = &self.blocks;
            self.queue.retain(|&(b, e)| {
                let blk = &blocks[b as usize];
                blk.ref_count == 0 && blk.epoch == e
            });
        }
    }

    fn push_tail(&mut self, b: BlockId) {
        let blk = &self.blocks[b as usize];
        match self.belady.as_deref_mut() {
            Some(bf) => bf.push(b, blk.indexed()),
            None => self.queue.push_back((b, blk.epoch)),
        }
        self.free_len += 1;
    }

    /// Checks every structural invariant; used by tests and debug builds.
    ///
    /// # Panics
    /// When an invariant is broken.
    pub fn check_invariants(&self) {
        let mut seen = 0u32;
        let mut queued = alloc::vec![false; self.blocks.len()];
        let live: Vec<(BlockId, u32)> = match self.belady.as_deref() {
            Some(bf) => bf.free_blocks().map(|b| (b, self.blocks[b as usize].epoch)).collect(),
            None => self.queue.iter().copied().collect(),
        };
        for (b, e) in live {
            let blk = &self.blocks[b as usize];
            if blk.epoch != e {
                continue; // Dead: the block left the queue after this entry was pushed.
            }
            assert!(blk.ref_count == 0, "block {b} in free queue but referenced");
            assert!(!queued[b as usize], "block {b} queued twice");
            queued[b as usize] = true;
            seen += 1;
        }
        assert_eq!(seen, self.free_len);
        for (i, blk) in self.blocks.iter().enumerate() {
            assert_eq!(queued[i], blk.ref_count == 0, "block {i} free-queue membership");
        }
        let mut hashes = alloc::collections::BTreeSet::new();
        for &b in &self.index {
            let h = self.blocks[b as usize].indexed();
            assert!(h.is_some(), "index names block {b}, which lost its content");
            assert!(hashes.insert(h), "two blocks indexed under one hash");
            assert_eq!(self.lookup(h.unwrap_or_default()), Some(b), "block {b} not found by its hash");
        }
        let indexed = self.blocks.iter().filter(|blk| blk.content == Content::Indexed).count();
        assert_eq!(indexed, self.index.len(), "an indexed block is missing from the index");
    }
}

/// The indexed block holding the content hashed `hash`.
fn lookup_in(index: &HashTable<BlockId>, blocks: &[Block], hash: u64) -> Option<BlockId> {
    index.find(hash, |&x| blocks[x as usize].hash == hash).copied()
}

#[cfg(test)]
mod tests;
