//! HiCache's storage tier (L3): SGLang's `HiCacheController` with a storage backend
//! (`--hicache-storage-backend`: file, Mooncake, 3FS, NIXL), behind a host tier of tokens.
//!
//! - **Writes.** Every copy to host memory is backed up to storage once it ends
//!   (`writing_check` calls `write_backup_storage` for each node whose host copy finished),
//!   page by page: a page is `page_tokens` tokens, keyed by the hash of everything up to its
//!   end, and a page the store holds already is not written again.
//! - **Prefetch.** When a request reaches the scheduler (`_add_request_to_queue` →
//!   `_prefetch_kvcache`), the part of its prompt past what GPU and host memory hold, cut to
//!   whole pages, is looked up in storage page after page. Fewer than `threshold_tokens` (256)
//!   worth asking for, or found, and nothing is fetched (`prefetch_from_storage`, the
//!   controller's revoke); nor while prefetches already hold 80% of the host memory the GPU's
//!   own copy leaves (`prefetch_rate_limited`). Otherwise host memory makes room for the
//!   pages found and they are read in over the storage link, 128 pages to a batch
//!   (`storage_batch_size`).
//! - **Termination.** When the scheduler reaches the request in its waiting queue it asks
//!   whether the prefetch may stop (`check_prefetch_progress`): at once under `best_effort`,
//!   only when complete under `wait_complete`, when complete or past `base + per_page ×
//!   pages` under `timeout`. A request whose prefetch may not stop yet is passed over (the
//!   queue's later requests may still be admitted). What has arrived by then joins the host
//!   tree, and the admission loads it back to GPU memory as any host hit.

use alloc::vec::Vec;

use super::HostTier;
use crate::content::{block_hashes, Segment};
use crate::radix::{head_tokens, NodeId, Piece};
use crate::request::ReqSeq;
use crate::units::{SimDur, SimTime};

/// When a HiCache prefetch from storage may stop (`--hicache-storage-prefetch-policy`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PrefetchPolicy {
    /// `best_effort` (SGLang's default): as soon as the scheduler reaches the request.
    BestEffort,
    /// `wait_complete`: once every page found has arrived.
    WaitComplete,
    /// `timeout`: once every page has arrived, or `base + per_page × pages` after the prefetch
    /// began (`prefetch_timeout_base`, `prefetch_timeout_per_ki_token` scaled to a page).
    Timeout {
        /// The allowance of any prefetch.
        base: SimDur,
        /// The allowance of each page found.
        per_page: SimDur,
    },
}

/// How a HiCache host tier uses the storage tier behind it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StoragePrefetch {
    /// When a prefetch may stop.
    pub policy: PrefetchPolicy,
    /// Fewest tokens worth prefetching (`prefetch_threshold`, 256 in SGLang; at least a page).
    pub threshold_tokens: u32,
    /// Tokens a storage page holds (SGLang's `--page-size`).
    pub page_tokens: u32,
}

/// Pages SGLang moves from storage in one batch (`HiCacheController.storage_batch_size`).
pub const STORAGE_BATCH_PAGES: u32 = 128;

/// The share of the host memory left beside the GPU's own tokens that prefetches may hold
/// (`prefetch_capacity_limit = 0.8 × (host size − device size)`), as a fraction.
const PREFETCH_CAPACITY: (u64, u64) = (4, 5);

/// One request's prefetch under way.
#[derive(Clone, Copy, Debug)]
struct Prefetch {
    seq: ReqSeq,
    /// First token fetched (a page boundary).
    from: u32,
    /// Pages being read.
    pages: u32,
    /// When the prefetch began (its timeout counts from here).
    issued: SimTime,
    /// When the first page's first byte arrives.
    first: SimTime,
    /// When the last page has arrived.
    done: SimTime,
    /// Tokens the prefetch counts against the rate limit (what it asked for).
    asked: u32,
    /// The host tree's node ending the held prefix it continues, locked meanwhile
    /// (`protect_host`).
    anchor: NodeId,
    /// The scheduler has been told when to look again.
    woken: bool,
}

impl Prefetch {
    /// Pages in host memory by `now`: whole batches, in order.
    fn pages_by(&self, now: SimTime) -> u32 {
        if now >= self.done {
            return self.pages;
        }
        if now <= self.first {
            return 0;
        }
        #[allow(clippy::cast_precision_loss)] // Nanosecond spans of a run fit in 2^53.
        let share = now.since(self.first).as_ns() as f64 / self.done.since(self.first).as_ns() as f64;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0 ≤ share < 1.
        let arrived = (share * f64::from(self.pages)) as u32;
        arrived / STORAGE_BATCH_PAGES * STORAGE_BATCH_PAGES
    }
}

/// A HiCache tier's prefetching state.
#[derive(Clone, Debug)]
pub(super) struct Prefetcher {
    cfg: StoragePrefetch,
    ops: Vec<Prefetch>,
    /// The newest request already seen arriving (each is looked up once, on arrival).
    seen: Option<ReqSeq>,
}

impl Prefetcher {
    pub(super) fn new(cfg: StoragePrefetch) -> Self {
        Prefetcher { cfg, ops: Vec::new(), seen: None }
    }

    pub(super) fn page_tokens(&self) -> u32 {
        self.cfg.page_tokens.max(1)
    }
}

/// Whether the scheduler may go on with a waiting request ([`HostTier::prefetch_gate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefetchGate {
    /// Its prefetch (if any) has stopped and what arrived is in host memory.
    Go,
    /// Its prefetch may not stop yet: pass it over. `wake` is when to look again, given the
    /// first time only.
    Wait {
        /// When the prefetch may stop.
        wake: Option<SimTime>,
    },
}

/// The storage keys of the whole pages of `key` (a sequence from its first token).
pub(super) fn page_keys(key: &[Piece], page_tokens: u32) -> Vec<u64> {
    let segments: Vec<Segment> = key
        .iter()
        .map(|p| {
            debug_assert_eq!(p.start, 0, "a request's pieces start their streams");
            Segment { id: p.id, len: p.start + p.len }
        })
        .collect();
    block_hashes(&segments, page_tokens)
}

impl HostTier {
    /// The tier prefetching from the storage tier behind it as `cfg` says (HiCache's L3);
    /// without a storage tier and a tree of tokens it never prefetches.
    #[must_use]
    pub fn with_prefetch(mut self, cfg: StoragePrefetch) -> Self {
        self.prefetch = Some(Prefetcher::new(cfg));
        self
    }

    /// Whether the tier prefetches from storage.
    #[must_use]
    pub fn prefetches(&self) -> bool {
        self.prefetch.is_some() && self.g3.is_some() && self.tree.is_some()
    }

    /// Whether request `seq` has not been seen arriving yet (newer than every one seen).
    #[must_use]
    pub fn unseen(&self, seq: ReqSeq) -> bool {
        self.prefetch.as_ref().is_some_and(|p| p.seen.is_none_or(|s| seq > s))
    }

    /// Request `seq` arrives at `now` with its known tokens `key`, of which GPU and host memory
    /// hold the first `matched`: starts its prefetch from storage if it is worth one.
    /// `device_tokens` is the GPU's KV capacity (the rate limit leaves the host memory that
    /// mirrors it).
    pub fn arrive(&mut self, seq: ReqSeq, key: &[Piece], matched: u32, device_tokens: u64, now: SimTime) {
        let capacity = u64::from(self.spec.capacity_blocks);
        let (Some(pf), Some(g), Some(tree)) = (self.prefetch.as_mut(), &self.g3, self.tree.as_mut()) else {
            return;
        };
        pf.seen = Some(pf.seen.map_or(seq, |s| s.max(seq)));
        let page = pf.page_tokens();
        let known: u32 = key.iter().map(|p| p.len).sum();
        let from = matched.min(known) / page * page;
        let asked = (known - from) / page * page;
        let threshold = pf.cfg.threshold_tokens.max(page);
        let limit = capacity.saturating_sub(device_tokens) * PREFETCH_CAPACITY.0 / PREFETCH_CAPACITY.1;
        // What the prefetches under way asked for (`prefetch_tokens_occupied`).
        let occupied: u64 = pf.ops.iter().map(|o| u64::from(o.asked)).sum();
        if asked < threshold || occupied >= limit {
            return;
        }
        // What host memory holds of the prefix stays while the pages come in, from before
        // room is made for them (`protect_host`).
        let (_, anchor) = tree.match_prefix(key, from);
        tree.lock(anchor);
        // Host memory for all of it first; what storage lacks is given back.
        if !tree.alloc(u64::from(asked)) {
            tree.unlock(anchor);
            return;
        }
        let keys = page_keys(key, page);
        let first = (from / page) as usize;
        let wanted = &keys[first..first + (asked / page) as usize];
        let mut store = g.store.borrow_mut();
        let found = store.lookup(wanted, now);
        #[allow(clippy::cast_possible_truncation)] // At most a prompt's pages.
        let fetched = found as u32 * page;
        if fetched < threshold {
            tree.free_private(u64::from(asked));
            tree.unlock(anchor);
            self.stats.prefetch_revoked += 1;
            return;
        }
        tree.free_private(u64::from(asked - fetched));
        let (first_byte, done) = store.read_span(g.port, &wanted[..found], now);
        pf.ops.push(Prefetch {
            seq,
            from,
            pages: fetched / page,
            issued: now,
            first: first_byte,
            done,
            asked,
            anchor,
            woken: false,
        });
        self.stats.prefetches += 1;
    }

    /// Whether the scheduler, reaching request `seq` (known tokens `key`) in its waiting queue
    /// at `now`, may go on with it: its prefetch stops if the policy lets it, and the pages
    /// that have arrived join the host tree.
    pub fn prefetch_gate(&mut self, seq: ReqSeq, key: &[Piece], now: SimTime) -> PrefetchGate {
        let (Some(pf), Some(tree)) = (self.prefetch.as_mut(), self.tree.as_mut()) else {
            return PrefetchGate::Go;
        };
        let Some(i) = pf.ops.iter().position(|o| o.seq == seq) else { return PrefetchGate::Go };
        let op = pf.ops[i];
        let may_stop = match pf.cfg.policy {
            PrefetchPolicy::BestEffort => now,
            PrefetchPolicy::WaitComplete => op.done,
            // SGLang stops once the time spent exceeds the allowance.
            PrefetchPolicy::Timeout { base, per_page } => {
                let allowance = base + SimDur::from_ns(per_page.as_ns().saturating_mul(u64::from(op.pages)));
                op.done.min(op.issued + allowance + SimDur::from_ns(1))
            }
        };
        if now < may_stop {
            pf.ops[i].woken = true;
            return PrefetchGate::Wait { wake: (!op.woken).then_some(may_stop) };
        }
        pf.ops.swap_remove(i);
        let page = pf.page_tokens();
        let fetched = op.pages * page;
        tree.free_private(u64::from(fetched));
        let arrived = op.pages_by(now);
        if arrived < op.pages {
            self.stats.prefetch_cut_short += 1;
        }
        if arrived > 0 {
            let total = op.from + arrived * page;
            let upto = head_tokens(key, total);
            let (held, node) = tree.match_prefix(&upto, total);
            let new = u64::from(total - held);
            tree.lock(node);
            if new > 0 && tree.alloc(new) {
                tree.insert(&upto);
                // Tokens before the pages (the GPU's alone) are not counted as fetched.
                self.stats.prefetched_tokens += new.min(u64::from(arrived * page));
            }
            tree.unlock(node);
        }
        tree.unlock(op.anchor);
        PrefetchGate::Go
    }

    /// How many tokens of `key` past its first `from` the storage tier behind holds, in whole
    /// pages written by `now`, for the router's estimate (0 without one).
    #[must_use]
    pub fn peek_stored_tokens(&self, key: &[Piece], from: u32, now: SimTime) -> u32 {
        let (Some(pf), Some(g)) = (&self.prefetch, &self.g3) else { return 0 };
        let page = pf.page_tokens();
        let keys = page_keys(key, page);
        let first = (from / page) as usize;
        let stored = g.store.borrow().peek_prefix(keys.get(first..).unwrap_or(&[]), now);
        #[allow(clippy::cast_possible_truncation)] // At most a prompt's pages.
        let past = (first as u32 + stored as u32) * page;
        past.saturating_sub(from)
    }

    /// Backs up to storage, behind a HiCache tree, the pages of `key` from the one holding
    /// token `held` on, whose copy to host memory ends at `ready`.
    pub(super) fn back_up_pages(&mut self, key: &[Piece], held: u32, ready: SimTime) {
        let (Some(pf), Some(g)) = (&self.prefetch, &self.g3) else { return };
        let page = pf.page_tokens();
        let keys = page_keys(key, page);
        let mut store = g.store.borrow_mut();
        for &k in keys.iter().skip((held / page) as usize) {
            store.write(g.port, k, ready);
        }
    }
}

#[cfg(test)]
mod tests;
