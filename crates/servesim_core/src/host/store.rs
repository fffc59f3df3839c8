//! The storage KV tier (G3): copies of KV blocks on storage behind the host tiers, one store
//! per worker or one for the whole deployment, so a prefix that has left both GPU and host
//! memory is read back instead of recomputed.
//!
//! AISimulate's `g3_offload` (its KV cache guide, REF §5.3), in servesim's terms:
//! - **Writes.** Every block a host tier writes is also written here once its host copy has
//!   ended (write-through), unless the store holds it already. A write copies the block over
//!   the writing port's write link, one block after another.
//! - **Room.** The store holds `capacity_blocks` blocks and evicts the least recently used
//!   one that is neither being written nor read; a write that finds every block busy is
//!   dropped.
//! - **Reads.** At admission, after the GPU hit and the host tier's blocks, a request
//!   continues with the blocks found here ([`G3Store::lookup`]); they are read into the
//!   host tier over the reading port's read link ([`G3Store::read`]) and then restored to GPU
//!   memory with the host's own blocks. A block still being written is not found.
//! - **Sharing.** A `cluster_shared` store is one for every worker: a block is stored once
//!   and any worker reads it, and transfers in one direction share the store's bandwidth
//!   equally with the other ports moving data that way. servesim fixes a transfer's share
//!   when it starts (`min(port bandwidth, shared bandwidth / ports busy)`) rather than
//!   re-dividing it as others start and end, as AISimulate does; each port's own transfers
//!   queue first come, first served.
//!
//! Invariants (a property test runs the store against a naive model): at most
//! `capacity_blocks` blocks are held; a block being written or read is never evicted.

use alloc::vec::Vec;

use super::lru::BlockLru;
use super::transfer;
use crate::units::{SimDur, SimTime};

/// What a storage tier holds and how fast its links are.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct G3Spec {
    /// Blocks the store holds (`num_g3_blocks`: per worker when local, in all when shared).
    pub capacity_blocks: u32,
    /// Bytes of one block (the host tier's block).
    pub block_bytes: u64,
    /// Each port's read bandwidth, bytes/s (`None`: unlimited).
    pub read_bytes_per_s: Option<f64>,
    /// Each port's write bandwidth, bytes/s (`None`: unlimited).
    pub write_bytes_per_s: Option<f64>,
    /// The store's total read bandwidth over all ports (`None`: no cap; a worker-local store
    /// has one port and no cap).
    pub shared_read_bytes_per_s: Option<f64>,
    /// The store's total write bandwidth over all ports.
    pub shared_write_bytes_per_s: Option<f64>,
    /// Latency to a transfer's first byte.
    pub first_byte: SimDur,
}

/// Counters of a storage tier (summed over stores in reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct G3Stats {
    /// Blocks the store (or stores) can hold.
    pub capacity_blocks: u64,
    /// Blocks looked up at admissions (up to and including the first not found).
    pub lookup_probes: u64,
    /// Blocks found.
    pub lookup_hits: u64,
    /// Lookups that stopped at a block still being written.
    pub lookup_pending: u64,
    /// Read transfers (one per restore that read blocks here).
    pub read_jobs: u64,
    /// Blocks read into host tiers.
    pub read_blocks: u64,
    /// Blocks read by a port other than the one that wrote them.
    pub cross_worker_read_blocks: u64,
    /// Blocks written.
    pub written_blocks: u64,
    /// Offered blocks not written because every held block was busy.
    pub dropped_blocks: u64,
    /// Blocks evicted to make room.
    pub evicted_blocks: u64,
    /// Restores that read fewer blocks than the store held for them, because the host tier
    /// had no idle room for the rest (those are recomputed).
    pub bypassed_restores: u64,
    /// Blocks held when the counters were read.
    pub resident_blocks: u64,
    /// Of those, blocks still being written.
    pub pending_blocks: u64,
}

impl G3Stats {
    /// Adds another store's counters.
    pub fn add(&mut self, o: &G3Stats) {
        self.capacity_blocks += o.capacity_blocks;
        self.lookup_probes += o.lookup_probes;
        self.lookup_hits += o.lookup_hits;
        self.lookup_pending += o.lookup_pending;
        self.read_jobs += o.read_jobs;
        self.read_blocks += o.read_blocks;
        self.cross_worker_read_blocks += o.cross_worker_read_blocks;
        self.written_blocks += o.written_blocks;
        self.dropped_blocks += o.dropped_blocks;
        self.evicted_blocks += o.evicted_blocks;
        self.bypassed_restores += o.bypassed_restores;
        self.resident_blocks += o.resident_blocks;
        self.pending_blocks += o.pending_blocks;
    }
}

/// Transfer directions, indexing a port's links.
const READ: usize = 0;
const WRITE: usize = 1;

/// One storage tier and the ports (workers) attached to it.
#[derive(Clone, Debug)]
pub struct G3Store {
    spec: G3Spec,
    blocks: BlockLru,
    /// The port that wrote each slot's block.
    writers: Vec<u32>,
    /// When each port's read and write links are next free.
    links: Vec<[SimTime; 2]>,
    stats: G3Stats,
}

impl G3Store {
    /// An empty store with no ports.
    #[must_use]
    pub fn new(spec: G3Spec) -> Self {
        G3Store {
            spec,
            blocks: BlockLru::new(spec.capacity_blocks as usize),
            writers: Vec::new(),
            links: Vec::new(),
            stats: G3Stats { capacity_blocks: u64::from(spec.capacity_blocks), ..G3Stats::default() },
        }
    }

    /// The store's configuration.
    #[must_use]
    pub fn spec(&self) -> &G3Spec {
        &self.spec
    }

    /// Attaches a port (a worker's host tier) and returns its number.
    pub fn attach(&mut self) -> u32 {
        self.links.push([SimTime::ZERO; 2]);
        #[allow(clippy::cast_possible_truncation)] // One port per worker ever started.
        let port = (self.links.len() - 1) as u32;
        port
    }

    /// Counters at `now` (blocks whose writes end after it are pending).
    #[must_use]
    pub fn stats(&self, now: SimTime) -> G3Stats {
        let pending = self.blocks.held().filter(|e| e.ready_at > now).count();
        G3Stats { resident_blocks: self.blocks.len() as u64, pending_blocks: pending as u64, ..self.stats }
    }

    /// Whether `key` is held and written by `now`.
    #[must_use]
    pub fn holds(&self, key: u64, now: SimTime) -> bool {
        self.blocks.holds(key, now)
    }

    /// How many of `keys`, from the first, are held and written by `now`, without counting
    /// the lookup (the router's estimate).
    #[must_use]
    pub fn peek_prefix(&self, keys: &[u64], now: SimTime) -> usize {
        keys.iter().take_while(|k| self.holds(**k, now)).count()
    }

    /// Looks up `keys` from the first at an admission at `now`: how many are held and written.
    /// Found blocks become the most recently used.
    pub fn lookup(&mut self, keys: &[u64], now: SimTime) -> usize {
        let mut found = 0;
        for &k in keys {
            self.stats.lookup_probes += 1;
            match self.blocks.slot(k) {
                Some(s) if self.blocks.entry(s).ready_at <= now => found += 1,
                Some(_) => {
                    self.stats.lookup_pending += 1;
                    break;
                }
                None => break,
            }
        }
        self.stats.lookup_hits += found as u64;
        self.blocks.touch(&keys[..found]);
        found
    }

    /// When a transfer of `bytes` over `port`'s link `dir` that may start at `at` starts and
    /// ends, the link then busy until it ends.
    fn move_bytes(&mut self, port: u32, dir: usize, bytes: u64, at: SimTime) -> (SimTime, SimTime) {
        let start = at.max(self.links[port as usize][dir]);
        let (own, shared) = match dir {
            READ => (self.spec.read_bytes_per_s, self.spec.shared_read_bytes_per_s),
            _ => (self.spec.write_bytes_per_s, self.spec.shared_write_bytes_per_s),
        };
        // Other ports moving data this way when it starts share the store's bandwidth.
        let done = start + transfer(bytes, super::fair_share(&self.links, port, dir, start, own, shared));
        self.links[port as usize][dir] = done;
        (start, done)
    }

    /// Writes block `key` from `port`'s host tier, whose copy there ends at `at`, unless the
    /// store holds it.
    pub fn write(&mut self, port: u32, key: u64, at: SimTime) {
        if self.blocks.slot(key).is_some() {
            return;
        }
        let st = &mut self.stats;
        let Some(slot) = self.blocks.insert_counted(key, at, &mut st.evicted_blocks, &mut st.dropped_blocks)
        else {
            return;
        };
        let (_, done) = self.move_bytes(port, WRITE, self.spec.block_bytes, at);
        self.blocks.entry_mut(slot).ready_at = done + self.spec.first_byte;
        if self.writers.len() <= slot as usize {
            self.writers.resize(slot as usize + 1, port);
        }
        self.writers[slot as usize] = port;
        self.stats.written_blocks += 1;
    }

    /// Reads blocks `keys` (held, as [`G3Store::lookup`] found them) for `port` from `now`:
    /// they are kept until the read ends, when they are in the port's host memory.
    pub fn read(&mut self, port: u32, keys: &[u64], now: SimTime) -> SimTime {
        self.read_span(port, keys, now).1
    }

    /// [`G3Store::read`], with when the first byte arrives too: the blocks arrive in order
    /// between the two.
    pub fn read_span(&mut self, port: u32, keys: &[u64], now: SimTime) -> (SimTime, SimTime) {
        let bytes = self.spec.block_bytes.saturating_mul(keys.len() as u64);
        let (start, end) = self.move_bytes(port, READ, bytes, now);
        let (first, done) = (start + self.spec.first_byte, end + self.spec.first_byte);
        for &k in keys {
            if let Some(s) = self.blocks.slot(k) {
                let e = self.blocks.entry_mut(s);
                e.read_until = e.read_until.max(done);
                self.stats.cross_worker_read_blocks += u64::from(self.writers[s as usize] != port);
            }
        }
        self.stats.read_jobs += 1;
        self.stats.read_blocks += keys.len() as u64;
        (first, done)
    }

    /// Counts a restore that read fewer blocks than were found here.
    pub fn count_bypass(&mut self) {
        self.stats.bypassed_restores += 1;
    }
}

#[cfg(test)]
mod tests;
