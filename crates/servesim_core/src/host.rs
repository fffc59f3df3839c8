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
//! Invariants (a property test runs the tier against a naive model): at most
//! `capacity_blocks` blocks are held; a held block is in the index once; a block being written
//! or read is never evicted.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::kv::PremixedMap;
use crate::units::{SimDur, SimTime};

/// Dead LRU entries tolerated beyond the live ones before the queue is compacted.
const DEAD_ENTRY_SLACK: usize = 64;

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
}

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
    }
}

/// One held block.
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    /// When its copy to host memory ends (it is found from then on).
    ready_at: SimTime,
    /// Restores reading it now.
    readers: u32,
    /// Bumped whenever the entry moves in the LRU queue or its slot is reused.
    epoch: u32,
    live: bool,
}

/// One rank's host tier.
#[derive(Clone, Debug)]
pub struct HostTier {
    spec: HostSpec,
    entries: Vec<Entry>,
    index: PremixedMap<u32>,
    /// Held blocks in LRU order (front: evicted first) as `(slot, epoch)`, with dead entries.
    lru: VecDeque<(u32, u32)>,
    d2h_free: SimTime,
    h2d_free: SimTime,
    clock: SimTime,
    stats: HostStats,
}

impl HostTier {
    /// An empty tier.
    #[must_use]
    pub fn new(spec: HostSpec) -> Self {
        HostTier {
            spec,
            entries: Vec::new(),
            index: PremixedMap::default(),
            lru: VecDeque::new(),
            d2h_free: SimTime::ZERO,
            h2d_free: SimTime::ZERO,
            clock: SimTime::ZERO,
            stats: HostStats { capacity_blocks: u64::from(spec.capacity_blocks), ..HostStats::default() },
        }
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

    /// Blocks held (being written included).
    #[must_use]
    pub fn resident(&self) -> usize {
        self.index.len()
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> HostStats {
        HostStats { resident_blocks: self.index.len() as u64, ..self.stats }
    }

    /// Whether the block `key` is held and its copy has ended by `now`.
    #[must_use]
    pub fn holds(&self, key: u64, now: SimTime) -> bool {
        self.index.get(&key).is_some_and(|&s| self.entries[s as usize].ready_at <= now)
    }

    /// Offers a block filled at `at` (blocks are offered in the order their steps end): it is
    /// copied to host memory unless held already, evicting the least recently used idle block
    /// when the tier is full.
    pub fn offer(&mut self, key: u64, at: SimTime) {
        if self.index.contains_key(&key) {
            return;
        }
        // Slots are only freed by eviction, which reuses them at once: below capacity every
        // slot is live, so a new block takes a new one.
        let slot = if self.index.len() < self.spec.capacity_blocks as usize {
            #[allow(clippy::cast_possible_truncation)] // At most capacity_blocks slots.
            let s = self.entries.len() as u32;
            self.entries.push(Entry { key, ready_at: at, readers: 0, epoch: 0, live: false });
            s
        } else {
            match self.evict(at) {
                Some(s) => s,
                None => {
                    self.stats.dropped_blocks += 1;
                    return;
                }
            }
        };
        let done = at.max(self.d2h_free) + transfer(self.spec.block_bytes, self.spec.d2h_bytes_per_s);
        self.d2h_free = done;
        let e = &mut self.entries[slot as usize];
        e.key = key;
        e.ready_at = done + self.spec.first_byte;
        e.readers = 0;
        e.epoch = e.epoch.wrapping_add(1);
        e.live = true;
        self.lru.push_back((slot, e.epoch));
        self.index.insert(key, slot);
        self.stats.written_blocks += 1;
        self.compact();
    }

    /// Offers blocks `keys`, in order, all filled (or found) at `at`.
    pub fn offer_all(&mut self, keys: &[u64], at: SimTime) {
        for &k in keys {
            self.offer(k, at);
        }
    }

    /// Frees the least recently used block that is neither being written at `at` nor read;
    /// busy blocks keep their places. `None` when all are busy.
    fn evict(&mut self, at: SimTime) -> Option<u32> {
        let idle = |e: &Entry, epoch: u32| e.live && e.epoch == epoch && e.readers == 0 && e.ready_at <= at;
        // Dead entries at the front go; the front block is most often the one to evict.
        let slot = loop {
            let &(slot, epoch) = self.lru.front()?;
            let e = &self.entries[slot as usize];
            if !e.live || e.epoch != epoch {
                self.lru.pop_front();
                continue;
            }
            if idle(e, epoch) {
                self.lru.pop_front();
                break slot;
            }
            // Busy blocks are passed over where they stand.
            let entries = &self.entries;
            let i = self.lru.iter().position(|&(slot, epoch)| idle(&entries[slot as usize], epoch))?;
            break self.lru.remove(i)?.0;
        };
        let e = &mut self.entries[slot as usize];
        e.live = false;
        let key = e.key;
        self.index.remove(&key);
        self.stats.evicted_blocks += 1;
        Some(slot)
    }

    /// Marks the held blocks among `keys` (a request's blocks in order) as just used, the
    /// first last, so that it is the most recently used.
    pub fn touch(&mut self, keys: &[u64]) {
        for k in keys.iter().rev() {
            if let Some(&slot) = self.index.get(k) {
                let e = &mut self.entries[slot as usize];
                e.epoch = e.epoch.wrapping_add(1);
                self.lru.push_back((slot, e.epoch));
            }
        }
        self.compact();
    }

    /// Whether a restore is reading any of `keys`.
    #[must_use]
    pub fn any_being_read(&self, keys: &[u64]) -> bool {
        keys.iter().any(|k| self.index.get(k).is_some_and(|&s| self.entries[s as usize].readers > 0))
    }

    /// How many of `keys`, from the first, are held with their copies ended by `now`.
    #[must_use]
    pub fn match_prefix(&self, keys: &[u64], now: SimTime) -> usize {
        keys.iter().take_while(|k| self.holds(**k, now)).count()
    }

    /// Starts restoring the blocks `keys` (all held, as [`HostTier::match_prefix`] found) at
    /// `now`: they become the most recently used and are kept until [`HostTier::end_restore`].
    /// Returns when the copy ends.
    pub fn begin_restore(&mut self, keys: &[u64], now: SimTime) -> SimTime {
        for k in keys {
            if let Some(&slot) = self.index.get(k) {
                let e = &mut self.entries[slot as usize];
                e.readers += 1;
                e.epoch = e.epoch.wrapping_add(1);
                self.lru.push_back((slot, e.epoch));
            }
        }
        let bytes = self.spec.block_bytes.saturating_mul(keys.len() as u64);
        let link_done = now.max(self.h2d_free) + transfer(bytes, self.spec.h2d_bytes_per_s);
        self.h2d_free = link_done;
        let done = link_done + self.spec.first_byte;
        self.stats.restores += 1;
        self.stats.restored_blocks += keys.len() as u64;
        self.stats.restore_wait_ns += done.since(now).as_ns();
        self.compact();
        done
    }

    /// Ends the restore of `keys`: they may be evicted again.
    pub fn end_restore(&mut self, keys: &[u64]) {
        for k in keys {
            if let Some(&slot) = self.index.get(k) {
                let e = &mut self.entries[slot as usize];
                e.readers = e.readers.saturating_sub(1);
            }
        }
    }

    /// Drops dead queue entries once they outnumber the live ones.
    fn compact(&mut self) {
        if self.lru.len() <= 2 * self.index.len() + DEAD_ENTRY_SLACK {
            return;
        }
        let entries = &self.entries;
        self.lru.retain(|&(slot, epoch)| {
            let e = &entries[slot as usize];
            e.live && e.epoch == epoch
        });
    }
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
