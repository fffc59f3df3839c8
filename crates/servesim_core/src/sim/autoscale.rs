//! The autoscaling planner's side of the event loop: sampling serving workers, starting and
//! retiring workers, the latencies the planner learns from, and provisioned time in the report.

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::{make_ranks, Event, Simulation};
use crate::engine::Rank;
use alloc::rc::Rc;
use core::cell::RefCell;

use crate::host::{G3Spec, G3Store, HostSpec, HostTier, SharedG3, SharedHostPool, StoragePrefetch};
use crate::metrics::Summary;
use crate::planner::{Action, LoadSample, Planner, PlannerSpec, PoolRole, SlotState};
use crate::queue::event_key;
use crate::request::{ReqId, Request, NEVER};
use crate::units::SimTime;

/// The autoscaling planner of a run.
pub struct PlannerSetup {
    /// Its settings and pools.
    pub spec: PlannerSpec,
    /// How each pool (by index in `spec.pools`) builds the ranks of a worker it starts.
    pub ranks: Vec<RankTemplate>,
}

/// How to build one worker's ranks.
#[derive(Clone, Debug)]
pub struct RankTemplate {
    /// Attention-DP ranks.
    pub dp: u32,
    /// KV blocks per rank.
    pub blocks_per_rank: u32,
    /// Tokens per block.
    pub block_size: u32,
    /// Prefix caching on.
    pub prefix_caching: bool,
    /// A radix tree (SGLang) instead of a block pool.
    pub radix: bool,
    /// A host tier per rank.
    pub host: Option<HostSpec>,
    /// The pool every rank's host tier holds its blocks in, when they share one
    /// (`cluster_shared`; living on as workers come and go), instead of each its own.
    pub host_pool: Option<SharedHostPool>,
    /// A storage tier behind the host tiers.
    pub g3: Option<G3Attach>,
    /// How HiCache host tiers prefetch from that storage tier (SGLang).
    pub prefetch: Option<StoragePrefetch>,
    /// Belady eviction: the forecast every paged pool evicts by (LRU when `None`).
    pub eviction: Option<crate::kv::belady::SharedOracle>,
    /// Blocks of recurrent state each sequence holds in a paged pool (hybrid models under
    /// vLLM; 0 otherwise).
    pub state_blocks: u32,
    /// A hybrid model's radix cache (SGLang): reuse ends where a finished request's state is,
    /// and the kept states share this many state-pool slots a rank with the running requests.
    pub radix_states: Option<u32>,
}

/// Which storage tier a worker's host tiers write through to.
#[derive(Clone, Debug)]
pub enum G3Attach {
    /// A store of the worker's own, fresh for every worker started.
    PerWorker(G3Spec),
    /// One store every worker shares, living on as workers come and go.
    Shared(SharedG3),
}

impl RankTemplate {
    /// Fresh ranks: empty KV caches and host tiers.
    #[must_use]
    pub fn build(&self) -> Vec<Rank> {
        let mut ranks =
            make_ranks(self.dp, self.blocks_per_rank, self.block_size, self.prefix_caching, self.radix);
        // One store per worker, whatever its ranks, or the one all workers share.
        let g3 = match &self.g3 {
            Some(G3Attach::PerWorker(spec)) => Some((Rc::new(RefCell::new(G3Store::new(*spec))), false)),
            Some(G3Attach::Shared(store)) => Some((store.clone(), true)),
            None => None,
        };
        for r in &mut ranks {
            match &mut r.kv {
                crate::engine::KvStore::Paged(pool) => {
                    pool.hold_states(self.state_blocks);
                    if let Some(oracle) = &self.eviction {
                        pool.evict_by(oracle.clone());
                    }
                }
                crate::engine::KvStore::Radix(cache) => {
                    if let Some(slots) = self.radix_states {
                        cache.resume_at_states();
                        cache.limit_states(slots);
                    }
                }
            }
            r.host = self.host.map(|h| {
                let mut tier = match &self.host_pool {
                    Some(pool) => HostTier::in_pool(h, pool.clone()),
                    None => HostTier::new(h),
                };
                if let Some(p) = self.prefetch {
                    tier = tier.with_prefetch(p);
                }
                Box::new(match &g3 {
                    Some((store, shared)) => tier.with_g3(store.clone(), *shared),
                    None => tier,
                })
            });
        }
        ranks
    }
}

/// The planner and how it builds the workers it starts.
pub(super) struct Autoscale {
    pub(super) planner: Planner,
    pub(super) ranks: Vec<RankTemplate>,
}

impl Autoscale {
    /// A request finished: its mean inter-token latency is the last the decode worker saw.
    pub(super) fn observe_finished(&mut self, r: &Request, last_seen: SimTime) {
        let first = r.stamps.first_token;
        if r.emitted > 1 && first != NEVER {
            let itl_ms = last_seen.since(first).as_ms_f64() / f64::from(r.emitted - 1);
            self.planner.observe_itl(r.worker as usize, itl_ms);
        }
    }
}

impl Simulation {
    /// Samples the serving workers' load for the planner at `due` and carries out what it
    /// decides.
    pub(super) fn planner_tick(&mut self, due: SimTime) {
        let Some(a) = self.autoscale.as_mut() else { return };
        let mut loads = Vec::new();
        for (slot, w) in self.workers.iter_mut().enumerate() {
            if !w.accepting {
                continue;
            }
            w.materialize(due, None, &mut self.requests, &mut self.itl);
            #[allow(clippy::cast_precision_loss)] // Token counts are far below 2^52.
            loads.push(LoadSample {
                slot,
                active_prefill_tokens: crate::router::pending_prefill_tokens(w, &self.requests) as f64,
                active_decode_blocks: f64::from(w.kv_blocks_used()),
                ..LoadSample::default()
            });
        }
        for action in a.planner.sample(due, loads) {
            match action {
                Action::Start { slot, ready } => {
                    let Some(template) = a.planner.pool_of(slot).and_then(|p| a.ranks.get(p)) else {
                        continue;
                    };
                    let w = &mut self.workers[slot];
                    w.provision(template.build());
                    if ready <= due {
                        w.accepting = true;
                    } else {
                        #[allow(clippy::cast_possible_truncation)] // Worker counts are small.
                        self.queue.push_keyed(ready, event_key(due, 0), Event::Ready { worker: slot as u32 });
                    }
                }
                Action::Drain { slot } => self.workers[slot].accepting = false,
            }
        }
        self.retire_idle(due);
    }

    /// A started worker serves.
    pub(super) fn on_ready(&mut self, w: usize) {
        if let Some(a) = self.autoscale.as_mut() {
            a.planner.ready(self.now, w);
            self.workers[w].accepting = a.planner.state(w) == SlotState::Serving;
        }
    }

    /// Draining workers that hold nothing any more leave.
    pub(super) fn retire_idle(&mut self, at: SimTime) {
        let Some(a) = self.autoscale.as_mut() else { return };
        if !a.planner.any_draining() {
            return;
        }
        for (slot, w) in self.workers.iter().enumerate() {
            if a.planner.state(slot) == SlotState::Draining && w.is_idle() {
                a.planner.retire(at, slot);
            }
        }
    }

    /// A request that has just emitted its first token: its TTFT becomes the last seen on the
    /// worker that prefilled it (`worker` when it has no separate prefill worker).
    pub(super) fn observe_first_token(&mut self, id: ReqId, worker: usize) {
        let Some(a) = self.autoscale.as_mut() else { return };
        let r = &self.requests[id as usize];
        if r.emitted != 1 {
            return;
        }
        let seen = if r.stamps.first_token == NEVER { self.now } else { r.stamps.first_token };
        let slot = r.prefill_worker.map_or(worker, |p| p as usize);
        a.planner.observe_ttft(slot, seen.since(r.spec.arrival).as_ms_f64(), r.input_tokens);
    }

    /// Worker-seconds integrate provisioned workers (starting, serving, draining) up to the
    /// report's end, instead of count x duration.
    pub(super) fn bill_provisioned_time(&self, summary: &mut Summary, end: SimTime) {
        let Some(a) = &self.autoscale else { return };
        let (mut prefill, mut decode) = (0.0, 0.0);
        for (i, (spec, _)) in a.planner.reports().enumerate() {
            match spec.role {
                PoolRole::Prefill => prefill += a.planner.worker_seconds(i, end),
                PoolRole::Aggregated | PoolRole::Decode => decode += a.planner.worker_seconds(i, end),
            }
        }
        summary.prefill_worker_seconds = prefill;
        summary.decode_worker_seconds = decode;
        summary.gpu_hours = (prefill * f64::from(summary.prefill_gpus_per_worker)
            + decode * f64::from(summary.decode_gpus_per_worker))
            / 3600.0;
    }
}
