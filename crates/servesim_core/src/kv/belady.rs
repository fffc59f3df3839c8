//! Belady eviction: free cached blocks leave in order of how far away their next use is.
//!
//! Belady's rule (evict what is needed furthest in the future) needs the future. Here it comes
//! from the run's own input: before the run every request's prompt is known (an open-loop
//! trace or synthetic load, generated up front from the same seed), so a [`DemandOracle`] can
//! list, for every complete prompt block, the requests that will ask for it, in arrival order.
//! A request's demand ends when its first prefill chunk is committed (or it is refused);
//! later chunks and re-admissions after preemption do not renew it. This is AISimulate's
//! `global_input_trace_order_v1` assumption (REF §5.3): the forecast ranks eviction
//! candidates only. It never places content, does not know which worker a request will go
//! to, and does not forecast output blocks.
//!
//! A `BeladyFree` keeps one pool's free blocks ordered by that forecast: blocks nobody will
//! ask for again (empty, private, or no demand left) first, then the one whose next request
//! arrives last; ties leave in the order they were freed (LRU). When a request's demand ends,
//! the oracle logs the blocks whose next request moved, and each pool re-ranks its free copies
//! of them before it next evicts.

use alloc::collections::BTreeSet;
use alloc::rc::Rc;
use alloc::vec::Vec;
use core::cell::RefCell;

use super::{BlockId, PremixedMap};
use crate::request::ReqSeq;

/// The next request (arrival number) that will ask for a block; [`NO_DEMAND`] for none.
pub type Demand = u32;

/// No request will ask for the block again.
pub const NO_DEMAND: Demand = u32::MAX;

/// A block no request asks for (no entry in the oracle's lists).
const NOT_ASKED: u32 = u32::MAX;

/// What a run's eviction forecast covered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForecastStats {
    /// Requests in the forecast (every request the traffic sends).
    pub requests: u32,
    /// Distinct prompt blocks some request asks for.
    pub blocks: u64,
    /// (request, block) pairs: the forecast's size.
    pub demands: u64,
    /// Requests whose demand ended (first prefill chunk committed, or refused).
    pub ended_requests: u32,
}

/// The future demand for every prompt block of a run, in arrival order.
#[derive(Clone, Debug, Default)]
pub struct DemandOracle {
    /// Block hash → its entry in `lists`.
    slots: PremixedMap<u32>,
    /// Per block hash: the hash, its requests' range in `demand` and the first one whose
    /// demand has not ended.
    lists: Vec<DemandList>,
    /// Requests asking for each block, ascending within a block's range.
    demand: Vec<ReqSeq>,
    /// Per request: the range of its blocks' entries in `request_slots`.
    request_start: Vec<usize>,
    /// The `lists` entries of each request's blocks, request after request.
    request_slots: Vec<u32>,
    /// Whether each request's demand has ended.
    retired: Vec<bool>,
    retired_count: u32,
    /// `lists` entries whose next request moved, in the order they moved.
    changes: Vec<u32>,
}

#[derive(Clone, Copy, Debug)]
struct DemandList {
    hash: u64,
    /// One past the block's last entry in `demand`.
    end: usize,
    /// Its first entry whose request's demand has not ended.
    next: usize,
}

impl DemandOracle {
    /// The oracle for requests numbered 0, 1, ... in arrival order, each given by the hashes
    /// of the complete prompt blocks another request may share.
    #[must_use]
    pub fn new<I, H>(requests: I) -> Self
    where
        I: IntoIterator<Item = H>,
        H: AsRef<[u64]>,
    {
        let mut o = DemandOracle { request_start: alloc::vec![0], ..DemandOracle::default() };
        // Per block: how many requests ask for it, and the last one counted.
        let mut counts: Vec<(usize, u32)> = Vec::new();
        for (seq, hashes) in requests.into_iter().enumerate() {
            #[allow(clippy::cast_possible_truncation)] // Request numbers are u32.
            let seq = seq as u32;
            for &h in hashes.as_ref() {
                #[allow(clippy::cast_possible_truncation)] // Distinct blocks of a run fit u32.
                let next = o.lists.len() as u32;
                let slot = *o.slots.entry(h).or_insert(next);
                if slot == next {
                    o.lists.push(DemandList { hash: h, end: 0, next: 0 });
                    counts.push((0, u32::MAX));
                }
                // A hash twice in one prompt (a collision) is one demand.
                let c = &mut counts[slot as usize];
                if c.1 != seq {
                    *c = (c.0 + 1, seq);
                    o.request_slots.push(slot);
                }
            }
            o.request_start.push(o.request_slots.len());
        }
        let mut at = 0;
        for (list, (n, _)) in o.lists.iter_mut().zip(&counts) {
            *list = DemandList { hash: list.hash, end: at, next: at };
            at += n;
        }
        o.demand = alloc::vec![0; at];
        for seq in 0..o.request_start.len() - 1 {
            for &slot in &o.request_slots[o.request_start[seq]..o.request_start[seq + 1]] {
                let list = &mut o.lists[slot as usize];
                #[allow(clippy::cast_possible_truncation)] // Request numbers are u32.
                {
                    o.demand[list.end] = seq as ReqSeq;
                }
                list.end += 1;
            }
        }
        o.retired = alloc::vec![false; o.request_start.len() - 1];
        o
    }

    /// Requests the oracle knows.
    #[must_use]
    pub fn requests(&self) -> usize {
        self.retired.len()
    }

    /// Counters for reports.
    #[must_use]
    pub fn stats(&self) -> ForecastStats {
        #[allow(clippy::cast_possible_truncation)] // Request counts are u32.
        ForecastStats {
            requests: self.requests() as u32,
            blocks: self.blocks() as u64,
            demands: self.demand.len() as u64,
            ended_requests: self.retired_count,
        }
    }

    /// Requests whose demand has ended.
    #[must_use]
    pub fn retired(&self) -> u32 {
        self.retired_count
    }

    /// Distinct blocks some request asks for.
    #[must_use]
    pub fn blocks(&self) -> usize {
        self.lists.len()
    }

    /// The next request that will ask for the block hashed `hash`.
    #[must_use]
    pub fn next_demand(&self, hash: u64) -> Demand {
        self.next_of(self.slot_of(hash))
    }

    /// The block's entry in `lists`, [`NOT_ASKED`] when no request asks for it.
    fn slot_of(&self, hash: u64) -> u32 {
        self.slots.get(&hash).copied().unwrap_or(NOT_ASKED)
    }

    fn next_of(&self, slot: u32) -> Demand {
        let Some(l) = self.lists.get(slot as usize) else { return NO_DEMAND };
        if l.next < l.end {
            self.demand[l.next]
        } else {
            NO_DEMAND
        }
    }

    /// Ends request `seq`'s demand (its first prefill chunk was committed, or it was refused).
    /// Idempotent; a request the oracle does not know is ignored.
    pub fn retire(&mut self, seq: ReqSeq) {
        let i = seq as usize;
        if i >= self.retired.len() || self.retired[i] {
            return;
        }
        self.retired[i] = true;
        self.retired_count += 1;
        for &slot in &self.request_slots[self.request_start[i]..self.request_start[i + 1]] {
            let l = &mut self.lists[slot as usize];
            let before = l.next;
            while l.next < l.end && self.retired[self.demand[l.next] as usize] {
                l.next += 1;
            }
            if l.next != before {
                self.changes.push(slot);
            }
        }
    }

    /// Blocks whose next request moved since the `seen`-th change, with their next demand.
    fn changes_since(&self, seen: usize) -> impl Iterator<Item = (u64, Demand)> + '_ {
        self.changes[seen.min(self.changes.len())..]
            .iter()
            .map(|&s| (self.lists[s as usize].hash, self.next_of(s)))
    }
}

impl DemandOracle {
    /// The forecast for an open-loop `traffic` as the simulation will send it with `seed` and
    /// `frontend_delay`: requests numbered in the order they reach the router, each with the
    /// hashes of its complete prompt blocks of `block_size` tokens that another request may
    /// share. (A block only its own request contains is left out whatever
    /// `all_content_shared` says: that request's demand ends with the prefill that computes
    /// it, before it can be evicted.) The traffic is generated once up front; a closed loop or
    /// a session's later turns would depend on completions, so the caller refuses them
    /// (their requests would be missing here).
    #[must_use]
    pub fn for_traffic(
        traffic: &crate::traffic::TrafficSpec,
        seed: u64,
        frontend_delay: crate::units::SimDur,
        block_size: u32,
    ) -> Self {
        let spec = crate::traffic::TrafficSpec { all_content_shared: false, ..traffic.clone() };
        let mut t = crate::traffic::Traffic::with_frontend(spec, seed, frontend_delay);
        let mut due = None;
        DemandOracle::new(core::iter::from_fn(move || loop {
            if let Some(at) = due {
                if let Some(spec) = t.pop_due(at) {
                    let mut req = crate::request::Request::new(spec, block_size);
                    req.hash_known_blocks();
                    return Some(req.hashes);
                }
            }
            due = Some(t.next_arrival()?);
        }))
    }
}

/// An oracle every pool of a run consults.
pub type SharedOracle = Rc<RefCell<DemandOracle>>;

/// Rank of a free block: smaller leaves first. `(NO_DEMAND - next demand, freed at, block)`.
type Rank = (u32, u64, BlockId);

/// One pool's free blocks in Belady order.
#[derive(Clone, Debug)]
pub(super) struct BeladyFree {
    oracle: SharedOracle,
    /// Oracle changes this pool has applied.
    seen: usize,
    order: BTreeSet<Rank>,
    /// Each free block's rank (meaningless for blocks in use).
    rank: Vec<Rank>,
    /// Counts blocks as they are freed, for LRU order among equal forecasts.
    clock: u64,
}

impl BeladyFree {
    /// No free block yet, for a pool of `capacity` blocks.
    pub(super) fn new(oracle: SharedOracle, capacity: u32) -> Self {
        let seen = oracle.borrow().changes.len();
        BeladyFree {
            oracle,
            seen,
            order: BTreeSet::new(),
            rank: alloc::vec![(0, 0, 0); capacity as usize],
            clock: 0,
        }
    }

    /// Block `b` was freed; `hash` is the content it keeps findable, if any.
    pub(super) fn push(&mut self, b: BlockId, hash: Option<u64>) {
        let next = hash.map_or(NO_DEMAND, |h| self.oracle.borrow().next_demand(h));
        let r = (NO_DEMAND - next, self.clock, b);
        self.clock += 1;
        self.rank[b as usize] = r;
        self.order.insert(r);
    }

    /// Free block `b` was taken for a request.
    pub(super) fn remove(&mut self, b: BlockId) {
        self.order.remove(&self.rank[b as usize]);
    }

    /// The block to evict next (taken out of the order), after applying the oracle's news to
    /// this pool's free blocks: `resident` names the free block holding a hash, if any.
    pub(super) fn pop(&mut self, resident: impl Fn(u64) -> Option<BlockId>) -> Option<BlockId> {
        self.sync(resident);
        self.order.pop_first().map(|(_, _, b)| b)
    }

    fn sync(&mut self, resident: impl Fn(u64) -> Option<BlockId>) {
        let oracle = self.oracle.borrow();
        for (h, next) in oracle.changes_since(self.seen) {
            let Some(b) = resident(h) else { continue };
            let old = self.rank[b as usize];
            if self.order.remove(&old) {
                let r = (NO_DEMAND - next, old.1, b);
                self.rank[b as usize] = r;
                self.order.insert(r);
            }
        }
        self.seen = oracle.changes.len();
    }

    /// Free blocks in eviction order (for invariant checks).
    pub(super) fn free_blocks(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.order.iter().map(|r| r.2)
    }

    /// The oracle.
    pub(super) fn oracle(&self) -> &SharedOracle {
        &self.oracle
    }
}

#[cfg(test)]
mod tests;
