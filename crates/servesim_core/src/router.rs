//! Request placement across workers.
//!
//! - `RoundRobin`: each request to the next worker in turn.
//! - `LeastLoaded`: fewest requests queued or running (ties: lowest index).
//! - `KvAware`: Dynamo's KV-router cost (REF §5.4), lowest cost wins, ties broken at random
//!   from the routing stream, or softmax sampling when `temperature > 0`:
//!   `cost = prefill_load_scale × max(0, prefill_blocks − credit × decay × overlap_blocks
//!          − host_cache_hit_weight × host_overlap_blocks
//!          − disk_cache_hit_weight × disk_overlap_blocks)
//!          + decode_blocks + active_request_weight × active_requests`,
//!   `decay = 1 / (1 + credit_decay × active_prefill_blocks / request_blocks)`.
//!   `prefill_blocks` is the worker's outstanding prefill work plus this request, in KV blocks;
//!   `decode_blocks` the blocks it holds plus those this request would add;
//!   `host_overlap_blocks` the blocks (HiCache: tokens) after the GPU hit that the worker's
//!   host tier holds (as its rank reported them at its last step, as the router learns them
//!   from KV events);
//!   `disk_overlap_blocks` the blocks after those that its storage tier (G3) holds.
//! - `SessionAffinity`: every turn of a session to the worker of its first turn (first turns
//!   and standalone requests go to the least-loaded worker).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::request::{Request, Status};
use crate::rng::Rng;
use crate::worker::Worker;

/// Knobs of the KV-aware router (Dynamo names).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvAwareConfig {
    /// `overlap_score_credit` (1.0): blocks of prefill credited per cached block.
    pub overlap_score_credit: f64,
    /// `prefill_load_scale` (1.0): weight of outstanding prefill work.
    pub prefill_load_scale: f64,
    /// `temperature` (0.0): 0 = pick the minimum; > 0 = softmax over normalised costs.
    pub temperature: f64,
    /// `decode_active_request_weight` (0.0): cost per active request.
    pub active_request_weight: f64,
    /// `overlap_score_credit_decay` (0.0): how fast credit fades as prefill work piles up.
    pub overlap_credit_decay: f64,
    /// `host_cache_hit_weight` (0.75, Dynamo's default as REF §5.4 reports it): blocks of
    /// prefill credited per block a worker's host tier holds beyond its GPU hit.
    pub host_cache_hit_weight: f64,
    /// `disk_cache_hit_weight` (0.25, Dynamo's default as REF §5.4 reports it): blocks of
    /// prefill credited per block a worker's storage tier holds beyond its host hit.
    pub disk_cache_hit_weight: f64,
}

impl Default for KvAwareConfig {
    fn default() -> Self {
        KvAwareConfig {
            overlap_score_credit: 1.0,
            prefill_load_scale: 1.0,
            temperature: 0.0,
            active_request_weight: 0.0,
            overlap_credit_decay: 0.0,
            host_cache_hit_weight: 0.75,
            disk_cache_hit_weight: 0.25,
        }
    }
}

/// A routing policy and its state.
#[derive(Clone, Debug)]
pub enum Router {
    /// Each request goes to the next worker in turn.
    RoundRobin {
        /// Worker the next request goes to.
        next: usize,
    },
    /// Fewest active requests.
    LeastLoaded,
    /// Dynamo's KV-aware cost.
    KvAware {
        /// Knobs.
        cfg: KvAwareConfig,
        /// Tie-break and sampling stream.
        rng: Rng,
    },
    /// Sticky sessions.
    SessionAffinity {
        /// Worker of each session seen so far.
        homes: BTreeMap<u32, usize>,
    },
}

/// What a routing decision saw (for per-request records).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Chosen worker.
    pub worker: usize,
    /// Prompt tokens already cached on it when routed.
    pub overlap_tokens: u32,
}

impl Router {
    /// Round-robin starting at worker 0.
    #[must_use]
    pub fn round_robin() -> Self {
        Router::RoundRobin { next: 0 }
    }

    /// Picks a worker for `req` among `workers` (`reqs` are all requests so far, for loads).
    /// The caller has hashed the request's known blocks when prefix caching is on.
    pub fn route(&mut self, req: &Request, workers: &[Worker], reqs: &[Request]) -> Placement {
        let n = workers.len().max(1);
        match self {
            Router::RoundRobin { next } => {
                // Workers the planner has off, starting or draining are passed over.
                let mut w = *next % n;
                for _ in 0..n {
                    if workers.get(w).is_none_or(|x| x.accepting) {
                        break;
                    }
                    w = (w + 1) % n;
                }
                *next = w + 1;
                Placement { worker: w, overlap_tokens: overlap_tokens(req, &workers[w]) }
            }
            Router::LeastLoaded => {
                let w = least_loaded(workers);
                Placement { worker: w, overlap_tokens: overlap_tokens(req, &workers[w]) }
            }
            Router::SessionAffinity { homes } => {
                let w = match req.spec.session {
                    Some((s, _)) => {
                        let home = homes.entry(s).or_insert_with(|| least_loaded(workers));
                        // A session whose worker was scaled down moves to a serving one.
                        if !workers[*home].accepting {
                            *home = least_loaded(workers);
                        }
                        *home
                    }
                    None => least_loaded(workers),
                };
                Placement { worker: w, overlap_tokens: overlap_tokens(req, &workers[w]) }
            }
            Router::KvAware { cfg, rng } => kv_aware(*cfg, rng, req, workers, reqs),
        }
    }
}

fn active(w: &Worker) -> usize {
    w.ranks.iter().map(crate::engine::Rank::load).sum::<usize>() + w.unreceived_len()
}

fn least_loaded(workers: &[Worker]) -> usize {
    let mut best: Option<usize> = None;
    for (i, w) in workers.iter().enumerate() {
        if w.accepting && best.is_none_or(|b| active(w) < active(&workers[b])) {
            best = Some(i);
        }
    }
    best.unwrap_or(0)
}

/// Leading prompt tokens cached on the worker (best rank).
fn overlap_tokens(req: &Request, w: &Worker) -> u32 {
    w.ranks.iter().map(|r| r.kv.cached_prefix_tokens(req)).max().unwrap_or(0).min(req.input_tokens)
}

/// The best credit of a rank of `w` for the blocks of `req`'s prompt it holds right after what
/// its GPU holds: `host_weight` a block in its host tier, then `disk_weight` a block in the
/// storage tier behind (0 without host tiers).
fn offload_credit(req: &Request, w: &Worker, host_weight: f64, disk_weight: f64) -> f64 {
    let mut best: f64 = 0.0;
    for r in &w.ranks {
        let Some(host) = r.host.as_deref() else { continue };
        if host.spec().writes.tokens() {
            // HiCache's tokens (SGLang's radix cache counts blocks of one token).
            let limit = req.input_tokens.saturating_sub(1);
            let key = req.pieces(limit);
            let on_gpu = r.kv.cached_prefix_tokens(req);
            let held = host.held_tokens(&key, limit).max(on_gpu);
            // Behind it, the pages of HiCache's storage tier (L3) past both.
            let on_disk =
                if disk_weight > 0.0 { host.peek_stored_tokens(&key, held, host.clock()) } else { 0 };
            let credit = host_weight * f64::from(held - on_gpu) + disk_weight * f64::from(on_disk);
            best = best.max(credit);
            continue;
        }
        let bs = r.kv.block_size().max(1);
        let from = (r.kv.cached_prefix_tokens(req) / bs) as usize;
        // As at admission: short of the last prompt token's block.
        let most = (req.input_tokens.saturating_sub(1) / bs) as usize;
        let keys = req.hashes.get(from..req.hashes.len().min(most)).unwrap_or(&[]);
        let in_host = host.match_prefix(keys, host.clock());
        let on_disk = if disk_weight > 0.0 { host.peek_g3(&keys[in_host..], host.clock()) } else { 0 };
        #[allow(clippy::cast_precision_loss)] // Block counts are far below 2^52.
        let credit = host_weight * in_host as f64 + disk_weight * on_disk as f64;
        best = best.max(credit);
    }
    best
}

/// Prefill tokens the worker still has to compute for the requests it holds.
pub(crate) fn pending_prefill_tokens(w: &Worker, reqs: &[Request]) -> u64 {
    let queued = w.ranks.iter().flat_map(|r| r.waiting.iter().chain(&r.running));
    let mut t = 0u64;
    for id in queued.copied().chain(w.unreceived()) {
        if let Some(q) = reqs.get(id as usize) {
            if q.status != Status::Completed && !q.is_decoding() {
                t += u64::from(q.pending_tokens());
            }
        }
    }
    t
}

#[allow(clippy::cast_precision_loss)]
fn kv_aware(
    cfg: KvAwareConfig,
    rng: &mut Rng,
    req: &Request,
    workers: &[Worker],
    reqs: &[Request],
) -> Placement {
    let bs = f64::from(workers.first().and_then(|w| w.ranks.first()).map_or(1, |r| r.kv.block_size()));
    let request_blocks = libm::ceil(f64::from(req.input_tokens) / bs).max(1.0);
    let mut costs = Vec::with_capacity(workers.len());
    let mut overlaps = Vec::with_capacity(workers.len());
    for w in workers {
        if !w.accepting {
            // Never chosen: the tie and softmax picks below skip infinite costs.
            costs.push(f64::INFINITY);
            overlaps.push(0.0);
            continue;
        }
        let overlap = f64::from(overlap_tokens(req, w)) / bs;
        let active_prefill = pending_prefill_tokens(w, reqs) as f64 / bs;
        let decay = 1.0 / (1.0 + cfg.overlap_credit_decay * active_prefill / request_blocks);
        let host = offload_credit(req, w, cfg.host_cache_hit_weight, cfg.disk_cache_hit_weight);
        let credit = cfg.overlap_score_credit * decay * overlap + host;
        let prefill_blocks = active_prefill + request_blocks;
        let decode_blocks = f64::from(w.kv_blocks_used()) + (request_blocks - overlap).max(0.0);
        let cost = cfg.prefill_load_scale * (prefill_blocks - credit).max(0.0)
            + decode_blocks
            + cfg.active_request_weight * active(w) as f64;
        costs.push(cost);
        overlaps.push(overlap);
    }
    let min = costs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = costs.iter().copied().filter(|c| c.is_finite()).fold(f64::NEG_INFINITY, f64::max);
    let w = if cfg.temperature > 0.0 && max > min {
        // Softmax over min-max normalised costs: lower cost, higher probability.
        let weights: Vec<f64> = costs
            .iter()
            .map(
                |c| if c.is_finite() { libm::exp(-((c - min) / (max - min)) / cfg.temperature) } else { 0.0 },
            )
            .collect();
        let total: f64 = weights.iter().sum();
        let mut x = rng.next_f64() * total;
        let mut pick = costs.iter().rposition(|c| c.is_finite()).unwrap_or(weights.len() - 1);
        for (i, wt) in weights.iter().enumerate() {
            if x < *wt {
                pick = i;
                break;
            }
            x -= wt;
        }
        pick
    } else {
        let ties: Vec<usize> = costs.iter().enumerate().filter(|(_, c)| **c <= min).map(|(i, _)| i).collect();
        ties[rng.below(ties.len() as u64) as usize]
    };
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let overlap_tokens = ((overlaps[w] * bs) as u32).min(req.input_tokens);
    Placement { worker: w, overlap_tokens }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::Segment;
    use crate::engine::Backend;
    use crate::host::{HostSpec, HostTier};
    use crate::request::RequestSpec;
    use crate::sim::make_ranks;
    use crate::units::{SimDur, SimTime};
    use alloc::boxed::Box;
    use alloc::vec;

    fn worker(id: u32) -> Worker {
        let cfg = crate::engine::test_config(Backend::Vllm);
        let mut ranks = make_ranks(1, 100, 16, true, false);
        let spec = HostSpec {
            capacity_blocks: 64,
            block_bytes: 1,
            d2h_bytes_per_s: None,
            h2d_bytes_per_s: None,
            first_byte: SimDur::ZERO,
            writes: crate::host::HostWrites::AfterCompute,
        };
        ranks[0].host = Some(Box::new(HostTier::new(spec)));
        Worker::new(id, cfg, ranks, 0)
    }

    /// A 100-token prompt with 4 output tokens, hashed in blocks of `block_size`.
    fn prompt(block_size: u32) -> Request {
        Request::new(
            RequestSpec {
                arrival: SimTime::ZERO,
                prompt: vec![Segment { id: 5, len: 100 }],
                output_tokens: 4,
                output_stream: 6,
                session: None,
                public_tokens: crate::request::ALL_SHARED,
                warmup: false,
            },
            block_size,
        )
    }

    #[test]
    fn the_kv_aware_router_credits_blocks_a_host_tier_holds() {
        let mut req = prompt(16);
        req.hash_known_blocks();
        // Worker 2 of three holds the prompt's six full blocks in host memory, none on GPU.
        let mut workers = vec![worker(0), worker(1), worker(2)];
        let host = workers[2].ranks[0].host.as_deref_mut().unwrap();
        for &h in &req.hashes {
            host.offer(h, SimTime::ZERO);
        }
        for seed in 0..8 {
            let rng = || crate::rng::Rng::stream(seed, crate::rng::Stream::Routing);
            let mut router = Router::KvAware { cfg: KvAwareConfig::default(), rng: rng() };
            assert_eq!(router.route(&req, &workers, &[]).worker, 2, "seed {seed}");
        }
        // Without the credit the three costs tie and the pick is random.
        let blind = KvAwareConfig { host_cache_hit_weight: 0.0, ..KvAwareConfig::default() };
        let picks: Vec<usize> = (0..16)
            .map(|seed| {
                let rng = crate::rng::Rng::stream(seed, crate::rng::Stream::Routing);
                Router::KvAware { cfg: blind, rng }.route(&req, &workers, &[]).worker
            })
            .collect();
        assert!(picks.iter().any(|&w| w != 2), "ties go anywhere: {picks:?}");
    }

    #[test]
    fn the_kv_aware_router_credits_tokens_hicache_holds() {
        let req = prompt(1);
        let spec = HostSpec {
            capacity_blocks: 1000,
            block_bytes: 1,
            d2h_bytes_per_s: None,
            h2d_bytes_per_s: None,
            first_byte: SimDur::ZERO,
            writes: crate::host::HostWrites::WriteThrough,
        };
        let sglang = |id: u32| {
            let mut ranks = make_ranks(1, 400, 1, true, true);
            ranks[0].host = Some(Box::new(HostTier::new(spec)));
            Worker::new(id, crate::engine::test_config(Backend::Sglang), ranks, 0)
        };
        // Worker 1 of three holds the whole prompt in host memory, none on GPU; it is credited
        // for the 99 tokens before the last.
        let mut workers = vec![sglang(0), sglang(1), sglang(2)];
        let host = workers[1].ranks[0].host.as_deref_mut().unwrap();
        host.write_tokens(&req.pieces(100), SimTime::ZERO);
        assert!((offload_credit(&req, &workers[1], 0.75, 0.0) - 0.75 * 99.0).abs() < 1e-9);
        assert_eq!(offload_credit(&req, &workers[0], 0.75, 0.0), 0.0);
        for seed in 0..8 {
            let rng = crate::rng::Rng::stream(seed, crate::rng::Stream::Routing);
            let mut router = Router::KvAware { cfg: KvAwareConfig::default(), rng };
            assert_eq!(router.route(&req, &workers, &[]).worker, 1, "seed {seed}");
        }
        // Behind HiCache, a storage tier's pages past host memory count at the disk weight:
        // another worker backed up the whole prompt (six pages of 16 tokens); this worker's
        // host memory holds its first 40 tokens, so the stored pages from the one holding
        // token 40 (tokens 32 to 95) are credited past it: 56 tokens.
        let store =
            alloc::rc::Rc::new(core::cell::RefCell::new(crate::host::G3Store::new(crate::host::G3Spec {
                capacity_blocks: 100,
                block_bytes: 16,
                read_bytes_per_s: None,
                write_bytes_per_s: None,
                shared_read_bytes_per_s: None,
                shared_write_bytes_per_s: None,
                first_byte: SimDur::ZERO,
            })));
        let prefetch = crate::host::StoragePrefetch {
            policy: crate::host::PrefetchPolicy::BestEffort,
            threshold_tokens: 32,
            page_tokens: 16,
        };
        let mut writer = HostTier::new(spec).with_prefetch(prefetch).with_g3(store.clone(), true);
        writer.write_tokens(&req.pieces(100), SimTime::ZERO);
        let mut w = sglang(3);
        let mut tier = HostTier::new(spec).with_prefetch(prefetch).with_g3(store, true);
        tier.write_tokens(&req.pieces(40), SimTime::ZERO);
        w.ranks[0].host = Some(Box::new(tier));
        let credit = offload_credit(&req, &w, 0.75, 0.25);
        assert!((credit - (0.75 * 40.0 + 0.25 * 56.0)).abs() < 1e-9, "{credit}");
        assert!((offload_credit(&req, &w, 0.75, 0.0) - 0.75 * 40.0).abs() < 1e-9);
    }

    #[test]
    fn every_policy_passes_over_workers_that_take_no_requests() {
        let req = |session: Option<(u32, u32)>| {
            let mut r = Request::new(
                RequestSpec {
                    arrival: SimTime::ZERO,
                    prompt: vec![Segment { id: 9, len: 40 }],
                    output_tokens: 4,
                    output_stream: 1,
                    session,
                    public_tokens: crate::request::ALL_SHARED,
                    warmup: false,
                },
                16,
            );
            r.hash_known_blocks();
            r
        };
        let mut workers = vec![worker(0), worker(1), worker(2), worker(3)];
        workers[1].accepting = false;
        workers[3].accepting = false;
        let mut rr = Router::round_robin();
        let picks: Vec<usize> = (0..6).map(|_| rr.route(&req(None), &workers, &[]).worker).collect();
        assert_eq!(picks, [0, 2, 0, 2, 0, 2]);
        assert!([0, 2].contains(&Router::LeastLoaded.route(&req(None), &workers, &[]).worker));
        for seed in 0..16 {
            let rng = crate::rng::Rng::stream(seed, crate::rng::Stream::Routing);
            for temperature in [0.0, 0.5] {
                let cfg = KvAwareConfig { temperature, ..KvAwareConfig::default() };
                let w = Router::KvAware { cfg, rng: rng.clone() }.route(&req(None), &workers, &[]).worker;
                assert!([0, 2].contains(&w), "seed {seed}, temperature {temperature}: {w}");
            }
        }
        // A session whose worker stops taking requests moves to one that does, and stays.
        let mut affinity = Router::SessionAffinity { homes: BTreeMap::new() };
        let home = affinity.route(&req(Some((7, 0))), &workers, &[]).worker;
        workers[home].accepting = false;
        let moved = affinity.route(&req(Some((7, 1))), &workers, &[]).worker;
        assert!(moved != home && workers[moved].accepting);
        workers[home].accepting = true;
        assert_eq!(affinity.route(&req(Some((7, 2))), &workers, &[]).worker, moved);
    }
}
