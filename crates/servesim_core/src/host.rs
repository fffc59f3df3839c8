//! A rank's host-memory KV tier (G2): copies of computed KV blocks in CPU memory, so a prompt
//! whose prefix has left GPU memory is restored over the host link instead of recomputed.
//!
//! This is vLLM's KV offloading (`OffloadingConnector` with its CPU backend,
//! `--kv-offloading-size`; AISimulate's `host_offload`, REF §5.3), one tier per attention-DP
//! rank:
//! - **Writes.** Every full block a rank computes is offered once, at the end of the step that
//!   filled it. A block the tier already holds is not written again. A write copies the block
//!   over the rank's device-to-host link, one block after another (first come, first served),
//!   and the block can be found from the moment its copy ends.
//! - **Room.** The tier holds `capacity_blocks` blocks and evicts the least recently used one
//!   to make room. A block still being written or being read back is never evicted and keeps
//!   its place (vLLM's `LRUOffloadingManager` holds a reference on both and passes over
//!   them); a write that finds every block busy is dropped.
//! - **Reads.** Each time the scheduler considers a waiting request it marks all of the
//!   request's blocks the tier holds as used, its first block last, so a prompt's head outlives
//!   its tail ([`HostTier::touch`], vLLM's `touch`). At admission it continues the request's GPU
//!   prefix hit with the blocks found here ([`HostTier::match_prefix`]) and restores them over
//!   the host-to-device link ([`HostTier::begin_restore`]); the request waits, holding its GPU
//!   blocks, until the copy ends (vLLM's `WAITING_FOR_REMOTE_KVS`), then computes the rest of
//!   its prompt. A request whose blocks another restore is reading waits for that one instead
//!   ([`HostTier::any_being_read`]): they reach GPU memory once.
//!
//! Each link moves `block_bytes` per block at its bandwidth (unlimited when none is given); a
//! transfer's first byte arrives `first_byte` after it starts, a latency the link does not
//! stay busy for.
//!
//! TensorRT-LLM's host offloading (`kv_cache_config.host_cache_size`) keeps the same tier
//! with [`HostWrites::OnEviction`]: a block is copied out only when GPU memory evicts it, and
//! moves back when a prompt reuses it ([`HostTier::onboard`]), so it lives in one tier at a
//! time; the engine's next forward pass waits for both copies (`syncTransfers`), so they
//! lengthen that step instead of holding the request aside.
//!
//! SGLang's HiCache (`--enable-hierarchical-cache`, write policy `write_through`, its default)
//! keeps the tier as a second radix tree of tokens ([`HostWrites::WriteThrough`]): the
//! sequence a request has computed is copied to host memory when it enters the GPU's radix
//! cache (after its prompt's last chunk, and whole when it finishes), token for token where
//! host memory does not hold it yet ([`HostTier::write_tokens`]); host memory evicts the least
//! recently used leaves. An admission whose prompt continues past its GPU hit in host memory
//! by at least [`LOAD_BACK_MIN_TOKENS`] loads those tokens back into the GPU's tree
//! ([`HostTier::load_tokens`]), a copy the step's forward pass overlaps layer by layer, so the
//! step ends no earlier than the copy. The host copy stays (the tiers are inclusive). With
//! `write_through_selective` ([`HostWrites::WriteThroughSelective`]) only the nodes of the GPU's
//! tree that two inserts have covered are written.
//!
//! Behind it may sit a storage tier (G3, [`G3Store`]): every block written here is written
//! there too, and an admission continues what GPU and host memory hold with the blocks
//! storage holds, read into host memory first ([`HostTier::begin_tiered_restore`]). Behind
//! HiCache's tree the storage tier is written page by page and read ahead of admission, as
//! SGLang's storage backends are ([`StoragePrefetch`], module `prefetch`).
//!
//! A vLLM tier's blocks may instead sit in one pool that the ranks of many workers share
//! (`scope: cluster_shared`, [`HostTier::in_pool`], module `pool`): what any rank wrote, every
//! rank finds, and the pool's own bandwidth is split among the ranks copying at once.
//!
//! Invariants (a property test runs the tier against a naive model): at most
//! `capacity_blocks` blocks are held; a held block is in the index once; a block being written
//! or read is never evicted.

use alloc::rc::Rc;
use core::cell::RefCell;

use crate::radix::{Piece, RadixCache};
use crate::units::{SimDur, SimTime};
use lru::Inserted;
pub use pool::{add_once, HostPool, HostPoolSpec, HostPoolStats, SharedHostPool};
use pool::{D2H, H2D};
use prefetch::Prefetcher;
pub use prefetch::{PrefetchGate, PrefetchPolicy, StoragePrefetch, STORAGE_BATCH_PAGES};
pub use store::{G3Spec, G3Stats, G3Store};

mod lru;
mod pool;
mod prefetch;
mod store;

/// What one rank's host tier holds and how fast its links are.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostSpec {
    /// Blocks the tier holds (`host_offload.num_host_blocks`).
    pub capacity_blocks: u32,
    /// Bytes of one block on one GPU (`block_size` × KV bytes a token on one TP shard: each
    /// GPU copies its own shard over its own link).
    pub block_bytes: u64,
    /// Device-to-host bandwidth, bytes/s (`None`: unlimited).
    pub d2h_bytes_per_s: Option<f64>,
    /// Host-to-device bandwidth, bytes/s (`None`: unlimited).
    pub h2d_bytes_per_s: Option<f64>,
    /// Latency to a transfer's first byte.
    pub first_byte: SimDur,
    /// When blocks are written.
    pub writes: HostWrites,
}

/// When a host tier is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostWrites {
    /// Every full block, after the step that computed it (vLLM's `OffloadingConnector`).
    #[default]
    AfterCompute,
    /// A block GPU memory evicts, on its way out (TensorRT-LLM's secondary pool).
    OnEviction,
    /// The tokens a request computed, when they enter the GPU's radix cache, into a radix
    /// tree of tokens (SGLang's HiCache, `--hicache-write-policy write_through`); the spec's
    /// blocks are tokens.
    WriteThrough,
    /// As [`HostWrites::WriteThrough`], but only what two requests' inserts have covered
    /// (`write_through_selective`).
    WriteThroughSelective,
    /// HiCache's tree written only with what the GPU's radix cache evicts, the step that
    /// evicts it waiting for the copy (`write_back`: `HiRadixCache.evict` backs a node up and
    /// `writing_check(write_back=True)` waits before the GPU memory is freed).
    WriteBack,
}

impl HostWrites {
    /// Whether the tier is HiCache's radix tree of tokens.
    #[must_use]
    pub fn tokens(self) -> bool {
        matches!(self, HostWrites::WriteThrough | HostWrites::WriteThroughSelective | HostWrites::WriteBack)
    }

    /// Whether HiCache writes what enters the GPU's tree as it enters (not on eviction).
    #[must_use]
    pub fn through(self) -> bool {
        matches!(self, HostWrites::WriteThrough | HostWrites::WriteThroughSelective)
    }

    /// The inserts a node of the GPU's tree must have seen before HiCache writes it
    /// (`HiRadixCache.write_through_threshold`: 1, or 2 when selective).
    #[must_use]
    pub fn min_hits(self) -> u32 {
        if self == HostWrites::WriteThroughSelective {
            2
        } else {
            1
        }
    }
}

/// The fewest tokens HiCache loads back from host memory; a shorter host hit is computed
/// again (`HiRadixCache.load_back_threshold`, 10 tokens in SGLang).
pub const LOAD_BACK_MIN_TOKENS: u32 = 10;

/// Counters of a host tier (summed over ranks in reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Blocks the tier (or tiers) can hold.
    pub capacity_blocks: u64,
    /// Blocks copied to host memory.
    pub written_blocks: u64,
    /// Offered blocks not written because every held block was busy.
    pub dropped_blocks: u64,
    /// Blocks evicted to make room.
    pub evicted_blocks: u64,
    /// Restores started (one per admission that found blocks here).
    pub restores: u64,
    /// Blocks restored to GPU memory.
    pub restored_blocks: u64,
    /// Time admissions waited for their restores, from the scheduler's decision to the copy's
    /// end (queueing on the link included), summed.
    pub restore_wait_ns: u64,
    /// Blocks held when the counters were read.
    pub resident_blocks: u64,
    /// HiCache: prefetches from storage started.
    pub prefetches: u64,
    /// HiCache: prefetches not started because storage held too little of the prompt.
    pub prefetch_revoked: u64,
    /// HiCache: prefetches stopped before every page had arrived.
    pub prefetch_cut_short: u64,
    /// HiCache: tokens prefetches brought into host memory.
    pub prefetched_tokens: u64,
}

impl HostStats {
    /// Adds another tier's counters.
    pub fn add(&mut self, o: &HostStats) {
        self.capacity_blocks += o.capacity_blocks;
        self.written_blocks += o.written_blocks;
        self.dropped_blocks += o.dropped_blocks;
        self.evicted_blocks += o.evicted_blocks;
        self.restores += o.restores;
        self.restored_blocks += o.restored_blocks;
        self.restore_wait_ns += o.restore_wait_ns;
        self.resident_blocks += o.resident_blocks;
        self.prefetches += o.prefetches;
        self.prefetch_revoked += o.prefetch_revoked;
        self.prefetch_cut_short += o.prefetch_cut_short;
        self.prefetched_tokens += o.prefetched_tokens;
    }
}

/// A storage tier shared by the host tiers attached to it (one per worker, or one for all):
/// the simulation runs on one thread, and each use borrows it for one call.
pub type SharedG3 = Rc<RefCell<G3Store>>;

/// A host tier's attachment to its storage tier.
#[derive(Clone, Debug)]
struct G3Port {
    store: SharedG3,
    port: u32,
    /// The store serves other workers too.
    shared: bool,
}

/// One rank's host tier.
#[derive(Clone, Debug)]
pub struct HostTier {
    spec: HostSpec,
    /// The blocks it holds and its links: its own, or a pool other ranks share.
    pool: SharedHostPool,
    /// This rank's port on the pool.
    port: u32,
    /// Other ranks share the pool (`cluster_shared`).
    shared: bool,
    clock: SimTime,
    /// When the last copy started so far ends, its first-byte latency included.
    copies_end: SimTime,
    stats: HostStats,
    g3: Option<G3Port>,
    /// HiCache's tokens ([`HostWrites::WriteThrough`]); the block index is empty then.
    tree: Option<RadixCache>,
    /// HiCache's prefetching from the storage tier behind, when configured.
    prefetch: Option<Prefetcher>,
}

impl HostTier {
    /// An empty tier.
    #[must_use]
    pub fn new(spec: HostSpec) -> Self {
        let tokens = spec.writes.tokens();
        let own = HostPoolSpec {
            capacity_blocks: if tokens { 0 } else { spec.capacity_blocks },
            shared_d2h_bytes_per_s: None,
            shared_h2d_bytes_per_s: None,
        };
        HostTier::with_pool(spec, HostPool::shared(own), false)
    }

    /// A tier of blocks (not HiCache's tokens) holding its blocks in `pool`, which other
    /// ranks' tiers share (as a new port of it); `spec.capacity_blocks` should be the pool's.
    #[must_use]
    pub fn in_pool(spec: HostSpec, pool: SharedHostPool) -> Self {
        HostTier::with_pool(spec, pool, true)
    }

    /// An empty tier attached to `pool` as a new port.
    fn with_pool(spec: HostSpec, pool: SharedHostPool, shared: bool) -> Self {
        let tokens = spec.writes.tokens();
        let port = pool.borrow_mut().attach();
        HostTier {
            spec,
            pool,
            port,
            shared,
            clock: SimTime::ZERO,
            copies_end: SimTime::ZERO,
            stats: HostStats { capacity_blocks: u64::from(spec.capacity_blocks), ..HostStats::default() },
            g3: None,
            tree: tokens.then(|| RadixCache::new(u64::from(spec.capacity_blocks), true)),
            prefetch: None,
        }
    }

    /// The pool this tier's blocks are in, when other ranks share it.
    #[must_use]
    pub fn shared_pool(&self) -> Option<&SharedHostPool> {
        self.shared.then_some(&self.pool)
    }

    /// The tier writing through to the storage tier `store` (as a new port of it), which
    /// other workers' tiers share if `shared`.
    #[must_use]
    pub fn with_g3(mut self, store: SharedG3, shared: bool) -> Self {
        let port = store.borrow_mut().attach();
        self.g3 = Some(G3Port { store, port, shared });
        self
    }

    /// The storage tier behind this one, if any, and whether other workers share it.
    #[must_use]
    pub fn g3(&self) -> Option<(&SharedG3, bool)> {
        self.g3.as_ref().map(|g| (&g.store, g.shared))
    }

    /// The tier's configuration.
    #[must_use]
    pub fn spec(&self) -> &HostSpec {
        &self.spec
    }

    /// Sets the time the rank's scheduler plans at (what [`HostTier::match_prefix`] sees).
    pub fn set_clock(&mut self, now: SimTime) {
        self.clock = now;
    }

    /// The time the rank's scheduler plans at.
    #[must_use]
    pub fn clock(&self) -> SimTime {
        self.clock
    }

    /// Blocks held (being written included); tokens for HiCache.
    #[must_use]
    pub fn resident(&self) -> usize {
        match &self.tree {
            Some(t) => usize::try_from(t.tree_tokens()).unwrap_or(usize::MAX),
            None => self.pool.borrow().blocks.len(),
        }
    }

    /// Counters so far. A shared pool's size and contents are its own ([`HostPool::stats`]),
    /// not any one rank's: they count 0 here.
    #[must_use]
    pub fn stats(&self) -> HostStats {
        if self.shared {
            return HostStats { capacity_blocks: 0, resident_blocks: 0, ..self.stats };
        }
        HostStats { resident_blocks: self.resident() as u64, ..self.stats }
    }

    /// Copies to host memory, at `at`, the tokens of `key` (a sequence from its first token)
    /// that HiCache's tree does not hold yet, evicting its least recently used leaves to make
    /// room; the path held already becomes the most recently used. The copies queue on the
    /// device-to-host link. Tokens that find no room are dropped (SGLang's `write_backup`
    /// then leaves the node on the GPU only). With storage behind, the new pages are backed up
    /// there once their copy ends. Nothing without a HiCache tree.
    pub fn write_tokens(&mut self, key: &[Piece], at: SimTime) {
        self.write_tokens_until(key, at);
    }

    /// [`HostTier::write_tokens`], returning when the copy ends if anything was written.
    pub fn write_tokens_until(&mut self, key: &[Piece], at: SimTime) -> Option<SimTime> {
        let tree = self.tree.as_mut()?;
        let total: u32 = key.iter().map(|p| p.len).sum();
        // The path held already stays while room is made for the rest.
        let (held, node) = tree.match_prefix(key, total);
        let new = u64::from(total - held);
        if new == 0 {
            return None;
        }
        tree.lock(node);
        let evicted = tree.evicted_tokens();
        let room = tree.alloc(new);
        if room {
            tree.insert(key);
        }
        tree.unlock(node);
        if !room {
            self.stats.dropped_blocks += new;
            return None;
        }
        self.stats.evicted_blocks += tree.evicted_tokens() - evicted;
        self.stats.written_blocks += new;
        let bytes = self.spec.block_bytes.saturating_mul(new);
        let done = self.pool.borrow_mut().move_bytes(self.port, D2H, bytes, at, self.spec.d2h_bytes_per_s);
        self.copies_end = self.copies_end.max(done + self.spec.first_byte);
        self.back_up_pages(key, held, done + self.spec.first_byte);
        Some(done + self.spec.first_byte)
    }

    /// How many tokens of `key`, from the first and at most `limit`, HiCache's tree holds (0
    /// without one).
    #[must_use]
    pub fn held_tokens(&self, key: &[Piece], limit: u32) -> u32 {
        self.tree.as_ref().map_or(0, |t| t.peek(key, limit))
    }

    /// Loads tokens `from..to` of `key` (held, as [`HostTier::held_tokens`] found) back to GPU
    /// memory at `now`: the path becomes the most recently used and stays held. Returns when
    /// the copy ends. It starts at once: SGLang keeps a node on the GPU until its copy to host
    /// memory ends (`write_backup` locks it), so what host memory alone holds was written
    /// before. (That pinning itself is not modelled: GPU memory may evict a node sooner.)
    pub fn load_tokens(&mut self, key: &[Piece], from: u32, to: u32, now: SimTime) -> SimTime {
        if let Some(tree) = self.tree.as_mut() {
            tree.match_prefix(key, to);
        }
        self.copy_to_device(to.saturating_sub(from) as usize, now, now)
    }

    /// Whether the block `key` is held and its copy has ended by `now`.
    #[must_use]
    pub fn holds(&self, key: u64, now: SimTime) -> bool {
        self.pool.borrow().blocks.holds(key, now)
    }

    /// Offers a block filled at `at` (blocks are offered in the order their steps end): it is
    /// copied to host memory unless held already, evicting the least recently used idle block
    /// when the tier is full; with a storage tier behind, it is written there once copied.
    pub fn offer(&mut self, key: u64, at: SimTime) {
        let mut pool = self.pool.borrow_mut();
        if pool.blocks.slot(key).is_some() {
            return;
        }
        let st = &mut self.stats;
        let Some(slot) = pool.blocks.insert_counted(key, at, &mut st.evicted_blocks, &mut st.dropped_blocks)
        else {
            return;
        };
        let done = pool.move_bytes(self.port, D2H, self.spec.block_bytes, at, self.spec.d2h_bytes_per_s);
        let ready = done + self.spec.first_byte;
        self.copies_end = self.copies_end.max(ready);
        pool.blocks.entry_mut(slot).ready_at = ready;
        pool.set_writer(slot, self.port);
        drop(pool);
        self.stats.written_blocks += 1;
        if let Some(g) = &self.g3 {
            g.store.borrow_mut().write(g.port, key, ready);
        }
    }

    /// Offers blocks `keys`, in order, all filled (or found) at `at`.
    pub fn offer_all(&mut self, keys: &[u64], at: SimTime) {
        for &k in keys {
            self.offer(k, at);
        }
    }

    /// Marks the held blocks among `keys` (a request's blocks in order) as just used, the
    /// first last, so that it is the most recently used.
    pub fn touch(&mut self, keys: &[u64]) {
        self.pool.borrow_mut().blocks.touch(keys);
    }

    /// Whether a restore is reading any of `keys`.
    #[must_use]
    pub fn any_being_read(&self, keys: &[u64]) -> bool {
        let pool = self.pool.borrow();
        keys.iter().any(|k| pool.blocks.slot(*k).is_some_and(|s| pool.blocks.entry(s).readers > 0))
    }

    /// How many of `keys`, from the first, are held with their copies ended by `now`.
    #[must_use]
    pub fn match_prefix(&self, keys: &[u64], now: SimTime) -> usize {
        let pool = self.pool.borrow();
        keys.iter().take_while(|k| pool.blocks.holds(**k, now)).count()
    }

    /// How many of `keys`, from the first, are held, their copies ended or not.
    #[must_use]
    pub fn held_prefix(&self, keys: &[u64]) -> usize {
        let pool = self.pool.borrow();
        keys.iter().take_while(|k| pool.blocks.slot(**k).is_some()).count()
    }

    /// Looks up in the storage tier behind, at an admission at `now`, the blocks `keys` that
    /// come after what GPU and host memory hold: how many it holds from the first (0 without
    /// one). A block this tier holds already (its copy under way) ends the lookup.
    pub fn lookup_g3(&mut self, keys: &[u64], now: SimTime) -> usize {
        let Some(g) = &self.g3 else { return 0 };
        let absent = self.absent_prefix(keys);
        if absent == 0 {
            return 0;
        }
        g.store.borrow_mut().lookup(&keys[..absent], now)
    }

    /// How many of `keys` the storage tier behind holds from the first, for the router's
    /// estimate at `now` (0 without one).
    #[must_use]
    pub fn peek_g3(&self, keys: &[u64], now: SimTime) -> usize {
        self.g3.as_ref().map_or(0, |g| g.store.borrow().peek_prefix(keys, now))
    }

    /// When every copy started so far ends (what a step that waits for them waits until).
    #[must_use]
    pub fn copies_end(&self) -> SimTime {
        self.copies_end
    }

    /// Moves the held blocks `keys` (a prefix [`HostTier::held_prefix`] found) back to GPU
    /// memory at `now`, as TensorRT-LLM onboards them: they leave the tier, and the copy
    /// starts once the copies that brought them here have ended. Returns when it ends.
    pub fn onboard(&mut self, keys: &[u64], now: SimTime) -> SimTime {
        let mut start = now;
        let mut pool = self.pool.borrow_mut();
        for &k in keys {
            if let Some(slot) = pool.blocks.slot(k) {
                start = start.max(pool.blocks.entry(slot).ready_at);
                pool.count_read(slot, self.port);
                pool.blocks.remove(k);
            }
        }
        drop(pool);
        self.copy_to_device(keys.len(), now, start)
    }

    /// Starts restoring the blocks `keys` (all held, as [`HostTier::match_prefix`] found) at
    /// `now`: they become the most recently used and are kept until [`HostTier::end_restore`].
    /// Returns when the copy ends.
    pub fn begin_restore(&mut self, keys: &[u64], now: SimTime) -> SimTime {
        self.pin(keys);
        self.copy_to_device(keys.len(), now, now)
    }

    /// Starts a restore of the held blocks `held` followed by the blocks `stored` that the
    /// storage tier holds ([`HostTier::lookup_g3`]): those are read into this tier first
    /// (while it has idle room for them), then all come back to GPU memory. Returns how many
    /// blocks are restored and when the copy ends; `None` when none are.
    pub fn begin_tiered_restore(
        &mut self,
        held: &[u64],
        stored: &[u64],
        now: SimTime,
    ) -> Option<(usize, SimTime)> {
        self.pin(held);
        let mut staged: alloc::vec::Vec<u32> = alloc::vec::Vec::new();
        let mut pool = self.pool.borrow_mut();
        for &k in stored {
            match pool.blocks.insert(k, now) {
                Inserted::Slot { slot, evicted } => {
                    self.stats.evicted_blocks += u64::from(evicted);
                    pool.blocks.entry_mut(slot).readers = 1;
                    pool.set_writer(slot, self.port);
                    staged.push(slot);
                }
                Inserted::Dropped => break,
            }
        }
        let mut start = now;
        if let Some(g) = &self.g3 {
            let mut store = g.store.borrow_mut();
            if staged.len() < stored.len() {
                store.count_bypass();
            }
            if !staged.is_empty() {
                start = store.read(g.port, &stored[..staged.len()], now);
            }
        }
        for &slot in &staged {
            pool.blocks.entry_mut(slot).ready_at = start;
        }
        drop(pool);
        let n = held.len() + staged.len();
        if n == 0 {
            return None;
        }
        Some((n, self.copy_to_device(n, now, start)))
    }

    /// Holds the held blocks among `keys` for a restore, as the most recently used.
    fn pin(&mut self, keys: &[u64]) {
        let mut pool = self.pool.borrow_mut();
        for k in keys {
            if let Some(slot) = pool.blocks.slot(*k) {
                pool.blocks.entry_mut(slot).readers += 1;
                pool.blocks.promote(slot);
                pool.count_read(slot, self.port);
            }
        }
    }

    /// How many of `keys`, from the first, the tier does not hold at all.
    fn absent_prefix(&self, keys: &[u64]) -> usize {
        let pool = self.pool.borrow();
        keys.iter().take_while(|k| pool.blocks.slot(**k).is_none()).count()
    }

    /// Copies `blocks` blocks to GPU memory from `start`, for a restore decided at `now`:
    /// when the copy ends.
    fn copy_to_device(&mut self, blocks: usize, now: SimTime, start: SimTime) -> SimTime {
        let bytes = self.spec.block_bytes.saturating_mul(blocks as u64);
        let link_done =
            self.pool.borrow_mut().move_bytes(self.port, H2D, bytes, start, self.spec.h2d_bytes_per_s);
        let done = link_done + self.spec.first_byte;
        self.copies_end = self.copies_end.max(done);
        self.stats.restores += 1;
        self.stats.restored_blocks += blocks as u64;
        self.stats.restore_wait_ns += done.since(now).as_ns();
        done
    }

    /// Ends the restore of `keys`: they may be evicted again.
    pub fn end_restore(&mut self, keys: &[u64]) {
        let mut pool = self.pool.borrow_mut();
        for k in keys {
            if let Some(slot) = pool.blocks.slot(*k) {
                let e = pool.blocks.entry_mut(slot);
                e.readers = e.readers.saturating_sub(1);
            }
        }
    }
}

/// The rate a transfer that starts at `start` on `port`'s link `dir` gets, out of `links`
/// (when each port's links are next free): the port's `own` bandwidth, or its equal share of
/// the `total` the ports then moving data that way split, if that is less.
fn fair_share(
    links: &[[SimTime; 2]],
    port: u32,
    dir: usize,
    start: SimTime,
    own: Option<f64>,
    total: Option<f64>,
) -> Option<f64> {
    let Some(total) = total.filter(|s| *s > 0.0 && s.is_finite()) else { return own };
    let busy = links.iter().enumerate().filter(|&(p, l)| p != port as usize && l[dir] > start).count();
    #[allow(clippy::cast_precision_loss)] // Port counts are small.
    let share = total / (busy + 1) as f64;
    Some(own.filter(|o| *o > 0.0 && o.is_finite()).map_or(share, |o| o.min(share)))
}

/// Time to move `bytes` at `bytes_per_s` (none: instant).
#[allow(clippy::cast_precision_loss)] // Byte counts are far below 2^53.
fn transfer(bytes: u64, bytes_per_s: Option<f64>) -> SimDur {
    match bytes_per_s {
        Some(bw) if bw > 0.0 && bw.is_finite() => SimDur::from_secs_f64(bytes as f64 / bw),
        _ => SimDur::ZERO,
    }
}

#[cfg(test)]
mod tests;
