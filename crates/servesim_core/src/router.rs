//! Request placement across workers.
//!
//! - `RoundRobin`: each request to the next worker in turn.
//! - `LeastLoaded`: fewest requests queued or running (ties: lowest index).
//! - `KvAware`: Dynamo's KV-router cost (REF §5.4), lowest cost wins, ties broken at random
//!   from the routing stream, or softmax sampling when `temperature > 0`:
//!   `cost = prefill_load_scale × max(0, prefill_blocks − credit × decay × overlap_blocks)
//!          + decode_blocks + active_request_weight × active_requests`,
//!   `decay = 1 / (1 + credit_decay × active_prefill_blocks / request_blocks)`.
//!   `prefill_blocks` is the worker's outstanding prefill work plus this request, in KV blocks;
//!   `decode_blocks` the blocks it holds plus those this request would add.
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
}

impl Default for KvAwareConfig {
    fn default() -> Self {
        KvAwareConfig {
            overlap_score_credit: 1.0,
            prefill_load_scale: 1.0,
            temperature: 0.0,
            active_request_weight: 0.0,
            overlap_credit_decay: 0.0,
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
                let w = *next % n;
                *next = w + 1;
                Placement { worker: w, overlap_tokens: overlap_tokens(req, &workers[w]) }
            }
            Router::LeastLoaded => {
                let w = least_loaded(workers);
                Placement { worker: w, overlap_tokens: overlap_tokens(req, &workers[w]) }
            }
            Router::SessionAffinity { homes } => {
                let w = match req.spec.session {
                    Some((s, _)) => *homes.entry(s).or_insert_with(|| least_loaded(workers)),
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
    let mut best = 0;
    for (i, w) in workers.iter().enumerate() {
        if active(w) < active(&workers[best]) {
            best = i;
        }
    }
    best
}

/// Leading prompt tokens cached on the worker (best rank).
fn overlap_tokens(req: &Request, w: &Worker) -> u32 {
    w.ranks.iter().map(|r| r.kv.cached_prefix_tokens(req)).max().unwrap_or(0).min(req.input_tokens)
}

/// Prefill tokens the worker still has to compute for the requests it holds.
fn pending_prefill_tokens(w: &Worker, reqs: &[Request]) -> u64 {
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
        let overlap = f64::from(overlap_tokens(req, w)) / bs;
        let active_prefill = pending_prefill_tokens(w, reqs) as f64 / bs;
        let decay = 1.0 / (1.0 + cfg.overlap_credit_decay * active_prefill / request_blocks);
        let credit = cfg.overlap_score_credit * decay * overlap;
        let prefill_blocks = active_prefill + request_blocks;
        let decode_blocks = f64::from(w.kv_blocks_used()) + (request_blocks - overlap).max(0.0);
        let cost = cfg.prefill_load_scale * (prefill_blocks - credit).max(0.0)
            + decode_blocks
            + cfg.active_request_weight * active(w) as f64;
        costs.push(cost);
        overlaps.push(overlap);
    }
    let min = costs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = costs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let w = if cfg.temperature > 0.0 && max > min {
        // Softmax over min-max normalised costs: lower cost, higher probability.
        let weights: Vec<f64> =
            costs.iter().map(|c| libm::exp(-((c - min) / (max - min)) / cfg.temperature)).collect();
        let total: f64 = weights.iter().sum();
        let mut x = rng.next_f64() * total;
        let mut pick = weights.len() - 1;
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
