//! The blocks a host tier (G2) holds and the links that copy them: one rank's own pool, or
//! one pool that the ranks of many workers share (AISimulate's `host_offload.scope:
//! cluster_shared`, REF §5.3; its AgentX G2 guide: "shared roles join the same
//! deployment-level pool: `num_host_blocks` is its total capacity").
//!
//! - **Blocks.** One LRU of `capacity_blocks` blocks by key. A block any rank wrote is found
//!   by every rank, and is not written again by another; a block being written or read by
//!   any rank is never evicted.
//! - **Links.** Each rank (a *port*) copies over its own device-to-host and host-to-device
//!   links, one transfer after another. A shared pool also has a bandwidth of its own per
//!   direction, split equally among the ports moving data that way when a transfer starts:
//!   `min(port bandwidth, pool bandwidth / busy ports)`, AISimulate's equal share fixed at
//!   the transfer's start (AISimulate re-divides it as transfers start and end), as the
//!   storage tier's shared links are ([`super::G3Store`]).

use alloc::rc::Rc;
use alloc::vec::Vec;
use core::cell::RefCell;

use super::lru::BlockLru;
use super::transfer;
use crate::units::SimTime;

/// Device-to-host, indexing a port's links.
pub(super) const D2H: usize = 0;
/// Host-to-device.
pub(super) const H2D: usize = 1;

/// A host pool several ranks' tiers share: the simulation runs on one thread, and each use
/// borrows it for one call.
pub type SharedHostPool = Rc<RefCell<HostPool>>;

/// What a host pool holds and how fast it is beyond its ports' own links.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostPoolSpec {
    /// Blocks the pool holds (`num_host_blocks`: a rank's own, or the shared pool's total).
    pub capacity_blocks: u32,
    /// The pool's device-to-host bandwidth over all ports, bytes/s of one GPU's shard of a
    /// block (`None`: no cap beyond the ports' own links).
    pub shared_d2h_bytes_per_s: Option<f64>,
    /// The pool's host-to-device bandwidth over all ports, likewise.
    pub shared_h2d_bytes_per_s: Option<f64>,
}

/// Counters of a pool shared by several ranks (a rank's own pool is counted in its
/// [`super::HostStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostPoolStats {
    /// Blocks the pool holds at most.
    pub capacity_blocks: u64,
    /// Blocks held when the counters were read.
    pub resident_blocks: u64,
    /// Ranks attached to it over the run.
    pub ports: u64,
    /// Blocks restored by a rank other than the one that wrote them.
    pub cross_rank_restored_blocks: u64,
}

impl HostPoolStats {
    /// Adds another pool's counters.
    pub fn add(&mut self, o: &HostPoolStats) {
        self.capacity_blocks += o.capacity_blocks;
        self.resident_blocks += o.resident_blocks;
        self.ports += o.ports;
        self.cross_rank_restored_blocks += o.cross_rank_restored_blocks;
    }
}

/// Adds `pool`'s counters to `all` unless `seen` holds it already (a pool many ranks share is
/// counted once), and marks it seen.
pub fn add_once(pool: &SharedHostPool, all: &mut HostPoolStats, seen: &mut Vec<*const ()>) {
    let id = Rc::as_ptr(pool).cast::<()>();
    if !seen.contains(&id) {
        seen.push(id);
        all.add(&pool.borrow().stats());
    }
}

/// The blocks and links of one host pool.
#[derive(Clone, Debug)]
pub struct HostPool {
    spec: HostPoolSpec,
    pub(super) blocks: BlockLru,
    /// The port that wrote each slot's block.
    writers: Vec<u32>,
    /// When each port's device-to-host and host-to-device links are next free.
    links: Vec<[SimTime; 2]>,
    cross_rank_restored: u64,
}

impl HostPool {
    /// An empty pool with no ports.
    #[must_use]
    pub fn new(spec: HostPoolSpec) -> Self {
        HostPool {
            spec,
            blocks: BlockLru::new(spec.capacity_blocks as usize),
            writers: Vec::new(),
            links: Vec::new(),
            cross_rank_restored: 0,
        }
    }

    /// An empty pool for ranks to share.
    #[must_use]
    pub fn shared(spec: HostPoolSpec) -> SharedHostPool {
        Rc::new(RefCell::new(HostPool::new(spec)))
    }

    /// The pool's configuration.
    #[must_use]
    pub fn spec(&self) -> &HostPoolSpec {
        &self.spec
    }

    /// Attaches a port (a rank's tier) and returns its number.
    pub(super) fn attach(&mut self) -> u32 {
        self.links.push([SimTime::ZERO; 2]);
        #[allow(clippy::cast_possible_truncation)] // One port per rank ever started.
        let port = (self.links.len() - 1) as u32;
        port
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> HostPoolStats {
        HostPoolStats {
            capacity_blocks: u64::from(self.spec.capacity_blocks),
            resident_blocks: self.blocks.len() as u64,
            ports: self.links.len() as u64,
            cross_rank_restored_blocks: self.cross_rank_restored,
        }
    }

    /// When a transfer of `bytes` over `port`'s link `dir`, at `own` bandwidth, that may start
    /// at `at` ends; the link is busy until then.
    pub(super) fn move_bytes(
        &mut self,
        port: u32,
        dir: usize,
        bytes: u64,
        at: SimTime,
        own: Option<f64>,
    ) -> SimTime {
        let start = at.max(self.links[port as usize][dir]);
        let total =
            if dir == D2H { self.spec.shared_d2h_bytes_per_s } else { self.spec.shared_h2d_bytes_per_s };
        let done = start + transfer(bytes, super::fair_share(&self.links, port, dir, start, own, total));
        self.links[port as usize][dir] = done;
        done
    }

    /// Records that `port` wrote the block in `slot`.
    pub(super) fn set_writer(&mut self, slot: u32, port: u32) {
        if self.writers.len() <= slot as usize {
            self.writers.resize(slot as usize + 1, port);
        }
        self.writers[slot as usize] = port;
    }

    /// Counts a restore by `port` of the block in `slot`.
    pub(super) fn count_read(&mut self, slot: u32, port: u32) {
        self.cross_rank_restored += u64::from(self.writers.get(slot as usize).is_some_and(|w| *w != port));
    }
}
