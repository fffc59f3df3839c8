//! A worker (one engine replica): attention-DP ranks stepping in lockstep.
//!
//! A step is formed by the engine policy on every rank, timed by the worker's
//! [`StepTimer`](crate::timing::StepTimer) as one grouped pass that ends at the slowest rank,
//! and applied when it completes: computed tokens advance, newly full blocks enter the prefix
//! cache, and requests that finished their pending tokens emit an output token.

use alloc::vec::Vec;

use crate::engine::{self, Rank, RankPlan, SchedulerConfig};
use crate::metrics::ItlSamples;
use crate::request::{ReqId, Request, Status, NEVER};
use crate::timing::{PrefillChunk, RankLoad, StepTimer, TimingError};
use crate::units::{SimDur, SimTime};

/// Busy-time and token counters of a worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Forward steps run.
    pub steps: u64,
    /// Time spent in steps.
    pub busy_ns: u64,
    /// Prefill tokens computed.
    pub prefill_tokens: u64,
    /// Decode tokens computed.
    pub decode_tokens: u64,
    /// Requests preempted.
    pub preemptions: u64,
}

/// What a completed step produced, for the simulation to account.
#[derive(Clone, Debug, Default)]
pub struct StepOutcome {
    /// Requests that emitted a token this step.
    pub emitted: Vec<ReqId>,
    /// Requests that emitted their last token this step.
    pub finished: Vec<ReqId>,
}

/// One engine replica.
pub struct Worker {
    /// Index in the cluster.
    pub id: u32,
    /// Scheduler semantics and budgets.
    pub cfg: SchedulerConfig,
    /// Attention-DP ranks.
    pub ranks: Vec<Rank>,
    /// Index of the timer that times this worker's steps.
    pub timer: usize,
    /// True while a step is in flight.
    pub busy: bool,
    /// When the previous step ended.
    pub last_step_end: SimTime,
    /// Counters.
    pub stats: WorkerStats,
    plans: Vec<RankPlan>,
    loads: Vec<RankLoad>,
}

impl Worker {
    /// A worker with the given ranks.
    #[must_use]
    pub fn new(id: u32, cfg: SchedulerConfig, ranks: Vec<Rank>, timer: usize) -> Self {
        let n = ranks.len();
        Worker {
            id,
            cfg,
            ranks,
            timer,
            busy: false,
            last_step_end: SimTime::ZERO,
            stats: WorkerStats::default(),
            plans: (0..n).map(|_| RankPlan::default()).collect(),
            loads: (0..n).map(|_| RankLoad::default()).collect(),
        }
    }

    /// Queues a newly routed request on its least-loaded rank (ties: lowest index).
    pub fn enqueue(&mut self, id: ReqId, req: &mut Request) {
        let mut best = 0;
        for (i, r) in self.ranks.iter().enumerate() {
            if r.load() < self.ranks[best].load() {
                best = i;
            }
        }
        req.worker = self.id;
        #[allow(clippy::cast_possible_truncation)] // Rank counts are small.
        {
            req.rank = best as u32;
        }
        req.status = Status::Waiting;
        self.ranks[best].waiting.push_back(id);
    }

    /// Requests waiting on all ranks.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.ranks.iter().map(|r| r.waiting.len()).sum()
    }

    /// Requests running on all ranks.
    #[must_use]
    pub fn running(&self) -> usize {
        self.ranks.iter().map(|r| r.running.len()).sum()
    }

    /// KV allocation units in use on all ranks (blocks; tokens for a radix cache).
    #[must_use]
    pub fn kv_blocks_used(&self) -> u32 {
        self.ranks.iter().map(|r| r.kv.used_units()).sum()
    }

    /// Plans and times the next step. `Ok(None)` when there is nothing to do.
    ///
    /// # Errors
    /// When the timer cannot time the step.
    pub fn start_step(
        &mut self,
        now: SimTime,
        reqs: &mut [Request],
        timer: &mut dyn StepTimer,
    ) -> Result<Option<SimDur>, TimingError> {
        let mut any = false;
        for ((rank, plan), load) in self.ranks.iter_mut().zip(&mut self.plans).zip(&mut self.loads) {
            engine::schedule(&self.cfg, rank, reqs, plan);
            load.clear();
            self.stats.preemptions += u64::from(plan.preemptions);
            for p in &plan.items {
                let r = &mut reqs[p.req as usize];
                if r.stamps.first_admit == NEVER {
                    r.stamps.first_admit = now;
                }
                if p.decode {
                    load.decode_requests += 1;
                    load.decode_kv_tokens += u64::from(p.context_tokens) + 1;
                } else {
                    load.prefill
                        .push(PrefillChunk { new_tokens: p.new_tokens, context_tokens: p.context_tokens });
                }
            }
            any |= !plan.items.is_empty();
        }
        if !any {
            return Ok(None);
        }
        let dur = timer.step_time(&self.loads)?;
        self.busy = true;
        self.stats.steps += 1;
        self.stats.busy_ns += dur.as_ns();
        Ok(Some(dur))
    }

    /// Applies the step that ends at `now`, recording inter-token gaps into `itl`.
    pub fn finish_step(
        &mut self,
        now: SimTime,
        reqs: &mut [Request],
        out: &mut StepOutcome,
        itl: &mut ItlSamples,
    ) {
        out.emitted.clear();
        out.finished.clear();
        // Most emitting requests also emitted at the end of the previous step: count their
        // (equal) gaps once instead of one sample per request.
        let mut common_gaps = 0u64;
        for (rank, plan) in self.ranks.iter_mut().zip(&self.plans) {
            for p in &plan.items {
                let r = &mut reqs[p.req as usize];
                r.computed += p.new_tokens;
                if p.decode {
                    self.stats.decode_tokens += u64::from(p.new_tokens);
                } else {
                    self.stats.prefill_tokens += u64::from(p.new_tokens);
                }
                engine::after_compute(rank, r, p);
                if r.pending_tokens() == 0 {
                    let prev = r.stamps.last_token;
                    if prev == self.last_step_end {
                        common_gaps += 1;
                    } else if prev != NEVER {
                        itl.add(now - prev, 1);
                    }
                    out.emitted.push(p.req);
                    if r.emit_token(now) {
                        r.status = Status::Completed;
                        engine::release(rank, r);
                        out.finished.push(p.req);
                    }
                }
            }
            if !out.finished.is_empty() {
                rank.running.retain(|id| reqs[*id as usize].status == Status::Running);
            }
        }
        itl.add(now - self.last_step_end, common_gaps);
        self.busy = false;
        self.last_step_end = now;
    }
}
