//! A worker (one engine replica): attention-DP ranks stepping in lockstep.
//!
//! A step is formed by the engine policy on every rank, timed by the worker's
//! [`StepTimer`] as one grouped pass that ends at the slowest rank,
//! and applied when it completes: computed tokens advance, newly full blocks enter the prefix
//! cache, and requests that finished their pending tokens emit an output token.
//!
//! **Fast-forward.** A stable decode batch runs many steps as one event (`worker/run.rs`), with the
//! results of stepping one token at a time.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::engine::{self, KvStore, Rank, RankPlan, SchedulerConfig};
use crate::frontend::Frontend;
use crate::metrics::ItlSamples;
use crate::request::{Phase, ReqId, Request, Status, NEVER};
use crate::timing::{step_dur, PrefillChunk, RankLoad, StepKind, StepTally, StepTimer, TimingError};
use crate::units::{SimDur, SimTime};

mod run;
use run::Run;

/// Busy-time and token counters of a worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Forward steps run.
    pub steps: u64,
    /// Time spent in steps.
    pub busy_ns: u64,
    /// Prefill tokens computed.
    pub prefill_tokens: u64,
    /// Output tokens decode steps produced (several a round under speculative decoding).
    pub decode_tokens: u64,
    /// Decode rounds run (one per decoding request per step).
    pub decode_rounds: u64,
    /// Requests preempted.
    pub preemptions: u64,
    /// Cached KV tokens evicted to make room (filled in with the results).
    pub kv_evicted_tokens: u64,
    /// A hybrid model's kept recurrent states dropped to free a state slot (SGLang; filled
    /// in with the results).
    pub dropped_states: u64,
    /// The serving processes' work, when the worker simulates them.
    pub frontend: Option<crate::frontend::FrontendStats>,
    /// The host KV tiers' counters (filled in with the results; `None` without them).
    pub host: Option<crate::host::HostStats>,
    /// The steps by kind ([`StepKind::ALL`] order): their time and work.
    pub by_kind: [StepTally; 3],
    /// How long the autoscaling planner kept the worker provisioned, up to the end of the
    /// report's duration (filled in with the results; `None` in a fixed fleet, where every
    /// worker serves throughout).
    pub provisioned: Option<crate::units::SimDur>,
}

impl WorkerStats {
    /// The tally of one kind of step.
    #[must_use]
    pub fn of_kind(&self, kind: StepKind) -> &StepTally {
        &self.by_kind[kind as usize]
    }
}

/// What a completed step produced, for the simulation to account.
#[derive(Clone, Debug, Default)]
pub struct StepOutcome {
    /// Requests that emitted a token this step.
    pub emitted: Vec<ReqId>,
    /// Requests that emitted their last token this step.
    pub finished: Vec<ReqId>,
    /// P/D: requests whose prefill finished here (KV now held as the source side).
    pub handoffs: Vec<ReqId>,
}

/// When a scheduled step (or run of steps) ends, and the ordering key its completion event
/// would have had if each step had been scheduled on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepEnd {
    /// When the last step of the step or run ends.
    pub end: SimTime,
    /// When that last step started (the virtual push time of its completion event).
    pub pushed: SimTime,
}

/// Whether fast-forward is allowed and how far a run may reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunBounds {
    /// Form runs at all.
    pub enabled: bool,
    /// No step of a run may end after this time.
    pub max_end: SimTime,
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
    /// True while a step (or run) is in flight.
    pub busy: bool,
    /// When the previous applied step ended.
    pub last_step_end: SimTime,
    /// When the last planned step started.
    last_step_start: SimTime,
    /// Counters.
    pub stats: WorkerStats,
    /// Generation of the pending completion event (stale events carry an older one).
    pub generation: u64,
    /// The serving processes in front of the engine, when they do work worth simulating.
    pub frontend: Option<Frontend>,
    /// Whether routers may place new requests here (false while the planner has it off,
    /// starting or draining).
    pub accepting: bool,
    /// Counters of the KV pools and host tiers a restart replaced.
    retired: (u64, Option<crate::host::HostStats>),
    /// Kept states dropped by the ranks a planner restart replaced.
    retired_states: u64,
    /// The counters of storage tiers of its own (worker-local) that replaced ranks had.
    retired_g3: Option<crate::host::G3Stats>,
    /// Tokens of the step being finished that the serving processes still have to write,
    /// with when each request's previous token reached its client.
    delivering: Vec<(ReqId, SimTime)>,
    plans: Vec<RankPlan>,
    loads: Vec<RankLoad>,
    run: Option<Run>,
    /// The last finished run, whose vectors the next one reuses.
    spare_run: Option<Run>,
    /// Requests the engine process holds that its scheduler has not taken in yet.
    recv: RecvGate,
    /// With [`SchedulerConfig::plan_ahead`]: requests that arrived while the step in flight
    /// ran, with when each arrived; the step after it was planned before they came.
    late: VecDeque<(ReqId, SimTime)>,
    /// Requests in the serving process's queue ([`Worker::pass_frontend`]).
    admitting: Vec<ReqId>,
    /// TensorRT-LLM's attention-DP balance counters ([`engine::AdpBalance`]).
    adp: engine::AdpBalanceState,
    /// Host-tier restores the scheduler started, with when each ends, for the simulation to
    /// wake the worker ([`Worker::take_restores`]).
    restores: Vec<(SimTime, ReqId)>,
    /// A run's blocks to offer to host tiers, as (filled at, plan index, hash); kept for reuse.
    host_offers: Vec<(SimTime, u32, u64)>,
}

/// SGLang's `scheduler_recv_interval` (`managers/scheduler_recv_skipper.py`): at the top of
/// each iteration the scheduler adds the weight of the step it just ran to a counter, one for a
/// decode step and 1,000 (more than any interval) for any other, and takes new requests in
/// only when the counter reaches the interval, resetting it. Decode steps thus take requests in
/// every `interval` steps, and right after a prefill step. An engine with nothing running spins
/// through empty iterations in microseconds, so it takes requests in at once.
#[derive(Clone, Debug, Default)]
struct RecvGate {
    /// Arrived, not yet taken in, in arrival order.
    inbox: Vec<ReqId>,
    /// The counter after the last check (below the interval).
    counter: u32,
    /// Decode steps finished since the last check.
    decode_steps: u32,
    /// Whether a step other than decode finished since the last check.
    other_step: bool,
}

impl Worker {
    /// A worker with the given ranks.
    #[must_use]
    pub fn new(id: u32, cfg: SchedulerConfig, ranks: Vec<Rank>, timer: usize) -> Self {
        let n = ranks.len();
        let frontend = cfg.frontend.is_active().then(|| Frontend::new(cfg.frontend));
        Worker {
            id,
            frontend,
            accepting: true,
            retired: (0, None),
            retired_states: 0,
            retired_g3: None,
            delivering: Vec::new(),
            cfg,
            ranks,
            timer,
            busy: false,
            last_step_end: SimTime::ZERO,
            last_step_start: SimTime::ZERO,
            stats: WorkerStats::default(),
            generation: 0,
            plans: (0..n).map(|_| RankPlan::default()).collect(),
            loads: (0..n).map(|_| RankLoad::default()).collect(),
            run: None,
            spare_run: None,
            recv: RecvGate::default(),
            late: VecDeque::new(),
            admitting: Vec::new(),
            adp: engine::AdpBalanceState::default(),
            restores: Vec::new(),
            host_offers: Vec::new(),
        }
    }

    /// Queues a P/D handoff on the least-loaded rank for a KV reservation; returns the rank.
    pub fn enqueue_handoff(&mut self, id: ReqId, req: &mut Request) -> usize {
        let best = self.least_loaded_rank();
        req.worker = self.id;
        #[allow(clippy::cast_possible_truncation)] // Rank counts are small.
        {
            req.rank = best as u32;
            req.decode_rank = best as u32;
        }
        req.status = Status::Transferring;
        self.ranks[best].handoffs.push_back(id);
        best
    }

    /// TensorRT-LLM's attention-DP balance, when configured and there are ranks to balance.
    fn adp_balance(&self) -> Option<engine::AdpBalance> {
        self.cfg.adp_balance.filter(|_| self.ranks.len() > 1)
    }

    fn least_loaded_rank(&self) -> usize {
        let mut best = 0;
        for (i, r) in self.ranks.iter().enumerate() {
            if r.load() < self.ranks[best].load() {
                best = i;
            }
        }
        best
    }

    /// Queues a newly routed request arriving at `now`: on its least-loaded rank (ties: lowest
    /// index), or, with a receive interval, in the engine process until the scheduler next
    /// takes requests in. An engine that plans ahead holds it until the scheduler plans a step
    /// after it arrived ([`SchedulerConfig::plan_ahead`]).
    pub fn enqueue(&mut self, now: SimTime, id: ReqId, req: &mut Request) {
        if let Some(i) = self.admitting.iter().position(|&a| a == id) {
            self.admitting.swap_remove(i);
        }
        req.worker = self.id;
        req.status = Status::Waiting;
        if self.cfg.plan_ahead {
            self.late.push_back((id, now));
        } else {
            self.receive(id, req);
        }
    }

    /// A request reaches the engine process.
    fn receive(&mut self, id: ReqId, req: &mut Request) {
        if self.cfg.sglang.recv_interval > 1 {
            self.recv.inbox.push(id);
        } else {
            self.place(id, req);
        }
    }

    fn place(&mut self, id: ReqId, req: &mut Request) {
        let best = self.least_loaded_rank();
        #[allow(clippy::cast_possible_truncation)] // Rank counts are small.
        {
            req.rank = best as u32;
        }
        self.ranks[best].waiting.push_back(id);
    }

    /// The scheduler's intake at the top of an iteration ([`RecvGate`]). A fast-forwarded run
    /// of k decode steps passed k checks: the counter wrapped at each intake on the way, which
    /// took nothing in (a run ends at the first check that has requests to take).
    fn take_in(&mut self, reqs: &mut [Request]) {
        let interval = self.cfg.sglang.recv_interval;
        if interval <= 1 {
            return;
        }
        let g = &mut self.recv;
        let idle = self.ranks.iter().all(|r| r.running.is_empty());
        let stepped = g.decode_steps > 0 || g.other_step;
        let wrapped = (u64::from(g.counter) + u64::from(g.decode_steps)) % u64::from(interval);
        #[allow(clippy::cast_possible_truncation)] // Below the interval, a u32.
        {
            g.counter = wrapped as u32;
        }
        let due = g.other_step || idle || (stepped && g.counter == 0);
        g.decode_steps = 0;
        g.other_step = false;
        if !due {
            return;
        }
        g.counter = 0;
        let inbox = core::mem::take(&mut g.inbox);
        for &id in &inbox {
            self.place(id, &mut reqs[id as usize]);
        }
        self.recv.inbox = inbox;
        self.recv.inbox.clear();
    }

    /// Requests routed here that the scheduler has not taken in: in the serving process's
    /// queue, held for the step after next ([`SchedulerConfig::plan_ahead`]), or in the
    /// engine process between intakes. The router counts them as this worker's load.
    pub fn unreceived(&self) -> impl Iterator<Item = ReqId> + '_ {
        self.admitting
            .iter()
            .copied()
            .chain(self.late.iter().map(|&(id, _)| id))
            .chain(self.recv.inbox.iter().copied())
    }

    /// How many requests [`Worker::unreceived`] lists.
    #[must_use]
    pub fn unreceived_len(&self) -> usize {
        self.admitting.len() + self.late.len() + self.recv.inbox.len()
    }

    /// Queues request `id`'s own work in its serving process at `now`. Returns when it
    /// reaches the engine if that is later than `now` (the request is held here until then and
    /// is [`Worker::enqueue`]d at that time); `None` when it can be enqueued at once.
    pub fn pass_frontend(&mut self, now: SimTime, id: ReqId, req: &mut Request) -> Option<SimTime> {
        let at = self.frontend.as_mut()?.admit(now, req.seq, req.spec.input_tokens());
        if at <= now {
            return None;
        }
        req.worker = self.id;
        self.admitting.push(id);
        Some(at)
    }

    /// Requests waiting on all ranks (those whose prefix the host tier is restoring included).
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.ranks.iter().map(|r| r.waiting.len() + r.restoring.len()).sum::<usize>() + self.unreceived_len()
    }

    /// With [`SchedulerConfig::plan_ahead`], the requests the step about to be planned at
    /// `now` may take: the engine planned it when the step in flight began (vLLM's
    /// `step_with_batch_queue` schedules step N+1 while step N runs; TensorRT-LLM's and SGLang's
    /// overlap loops launch the next batch before they process the last one's output), so a
    /// request that arrived during that step waits for the step after. An engine with nothing
    /// else to run plans at once, and an engine that was idle plans after everything that
    /// arrived.
    fn take_late(&mut self, now: SimTime, reqs: &mut [Request]) {
        if self.late.is_empty() {
            return;
        }
        let has_work = !self.recv.inbox.is_empty()
            || self
                .ranks
                .iter()
                .any(|r| !r.running.is_empty() || !r.waiting.is_empty() || !r.handoffs.is_empty());
        let cutoff = if has_work && now == self.last_step_end { self.last_step_start } else { now };
        while let Some(&(id, at)) = self.late.front() {
            if at > cutoff {
                break;
            }
            self.late.pop_front();
            self.receive(id, &mut reqs[id as usize]);
        }
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

    /// True while a run of fast-forwarded steps is in flight.
    #[must_use]
    pub fn in_run(&self) -> bool {
        self.run.is_some()
    }

    /// Plans and times the next step, extending it into a run when allowed. `Ok(None)` when
    /// there is nothing to do.
    ///
    /// # Errors
    /// When the timer cannot time a step.
    pub fn start_step(
        &mut self,
        now: SimTime,
        reqs: &mut [Request],
        timer: &mut dyn StepTimer,
        bounds: RunBounds,
    ) -> Result<Option<StepEnd>, TimingError> {
        self.take_late(now, reqs);
        self.take_in(reqs);
        for (rank, plan) in self.ranks.iter_mut().zip(&mut self.plans) {
            if let Some(host) = rank.host.as_mut() {
                host.set_clock(now);
            }
            engine::schedule(&self.cfg, rank, reqs, plan);
            self.restores.extend(plan.restores.iter().map(|&(id, done)| (done, id)));
        }
        if let Some(balance) = self.adp_balance() {
            engine::trtllm::balance_adp(balance, &mut self.adp, self.cfg.max_sequences, &mut self.plans);
        }
        let mut any = false;
        for (plan, load) in self.plans.iter().zip(&mut self.loads) {
            load.clear();
            self.stats.preemptions += u64::from(plan.preemptions);
            for p in &plan.items {
                let r = &mut reqs[p.req as usize];
                if r.stamps.first_admit == NEVER {
                    r.stamps.first_admit = now;
                }
                if r.phase == Phase::Decode && r.pd.decode_admit == NEVER {
                    r.pd.decode_admit = now;
                }
                if p.decode {
                    // Speculative decoding verifies 1 + drafts positions per request in one
                    // pass: each is a query row, seeing one more key than the one before
                    // (AIConfigurator scales the decode batch by nextn + 1 the same way).
                    let q = 1 + self.cfg.speculation.draft_tokens;
                    load.decode_requests += q;
                    load.decode_kv_tokens +=
                        u64::from(q) * (u64::from(p.context_tokens) + 1) + u64::from(q * (q - 1) / 2);
                } else {
                    load.prefill
                        .push(PrefillChunk { new_tokens: p.new_tokens, context_tokens: p.context_tokens });
                }
            }
            any |= !plan.items.is_empty();
        }
        if !any {
            if self.late.is_empty() {
                return Ok(None);
            }
            // Nothing could run without them (what waits does not fit yet): the engine had
            // planned an empty step, and plans them now.
            while let Some((id, _)) = self.late.pop_front() {
                self.receive(id, &mut reqs[id as usize]);
            }
            return self.start_step(now, reqs, timer, bounds);
        }
        // Host-tier copies the step waits for (TensorRT-LLM's offloading) hold the GPU first.
        let copies_end = self.plans.iter().map(|p| p.copies_end).max().unwrap_or(SimTime::ZERO);
        let mut stall = if copies_end > now { copies_end.since(now) } else { SimDur::ZERO };
        let compute = step_dur(timer.step_time(&self.loads)?);
        // Loads the forward pass overlaps (SGLang's HiCache) end it no earlier than they do.
        let loads_end = self.plans.iter().map(|p| p.loads_end).max().unwrap_or(SimTime::ZERO);
        if loads_end > now + compute + stall {
            stall = loads_end.since(now + compute);
        }
        let first = compute + stall;
        self.busy = true;
        self.last_step_start = now;
        let end = now + first;
        let mut out = StepEnd { end, pushed: now };
        if bounds.enabled && stall == SimDur::ZERO && end <= bounds.max_end {
            if let Some(run) = self.form_run(now, end, reqs, timer, bounds.max_end)? {
                out = StepEnd { end: run.ends[run.len() - 1], pushed: run.step_start(run.len()) };
                self.run = Some(run);
                return Ok(Some(out));
            }
        }
        self.stats.steps += 1;
        self.stats.busy_ns += first.as_ns();
        if let Some(kind) = StepKind::of(&self.loads) {
            self.stats.by_kind[kind as usize].add(&self.loads, first.as_ns());
        }
        Ok(Some(out))
    }

    /// The host-tier restores started since the last call, with when each ends.
    pub fn take_restores(&mut self) -> impl Iterator<Item = (SimTime, ReqId)> + '_ {
        self.restores.drain(..)
    }

    /// Ends the host-tier restore of request `id` ([`engine::finish_restore`]).
    pub fn finish_restore(&mut self, id: ReqId, reqs: &mut [Request]) {
        let r = &mut reqs[id as usize];
        if let Some(rank) = self.ranks.get_mut(r.rank as usize) {
            engine::finish_restore(rank, r, id);
        }
    }

    /// The host tiers' counters, summed over ranks (`None` without host tiers).
    #[must_use]
    pub fn host_stats(&self) -> Option<crate::host::HostStats> {
        let mut tiers = self.ranks.iter().filter_map(|r| r.host.as_ref()).peekable();
        tiers.peek()?;
        let mut all = self.retired.1.unwrap_or_default();
        for t in tiers {
            all.add(&t.stats());
        }
        Some(all)
    }

    /// Adds to `all` the counters of the storage tiers behind this worker's host tiers at
    /// `now`: its own (those of replaced ranks included), and the live stores not in `seen` yet.
    pub fn add_g3_stats(&self, now: SimTime, all: &mut crate::host::G3Stats, seen: &mut Vec<*const ()>) {
        if let Some(r) = &self.retired_g3 {
            all.add(r);
        }
        // Ranks of one worker, or workers, may share a store: each is counted once.
        for (store, _) in self.ranks.iter().filter_map(|r| r.host.as_deref()?.g3()) {
            let id = alloc::rc::Rc::as_ptr(store).cast::<()>();
            if !seen.contains(&id) {
                seen.push(id);
                all.add(&store.borrow().stats(now));
            }
        }
    }

    /// Adds to `all` the counters of the host pools this worker's ranks share with others
    /// ([`crate::host::HostTier::in_pool`]) not in `seen` yet.
    pub fn add_host_pool_stats(&self, all: &mut crate::host::HostPoolStats, seen: &mut Vec<*const ()>) {
        for pool in self.ranks.iter().filter_map(|r| r.host.as_deref()?.shared_pool()) {
            crate::host::add_once(pool, all, seen);
        }
    }

    /// Cached KV tokens dropped to make room, over every KV pool this worker had.
    #[must_use]
    pub fn kv_evicted_tokens(&self) -> u64 {
        self.retired.0 + self.ranks.iter().map(|r| r.kv.evicted_tokens()).sum::<u64>()
    }

    /// A hybrid model's kept recurrent states dropped to free a state slot, over every KV pool
    /// this worker had.
    #[must_use]
    pub fn dropped_states(&self) -> u64 {
        self.retired_states + self.ranks.iter().map(|r| r.kv.dropped_states()).sum::<u64>()
    }

    /// True when the worker holds nothing: no step in flight, no request queued, running or
    /// in its serving processes, no KV kept for a transfer.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        !self.busy
            && self.run.is_none()
            && self.unreceived_len() == 0
            && self.ranks.iter().all(|r| r.load() == 0 && r.kv.used_units() == 0)
    }

    /// Gives the worker fresh ranks, as a process the planner starts has an empty KV cache
    /// and host tier; the counters of the ranks it replaces stay in the reports.
    pub fn provision(&mut self, ranks: Vec<Rank>) {
        let evicted = self.kv_evicted_tokens();
        self.retired_states = self.dropped_states();
        if let Some(mut old) = self.host_stats() {
            // Capacity is the new tier's, not a sum over lifetimes.
            old.capacity_blocks = 0;
            self.retired.1 = Some(old);
        }
        self.retired.0 = evicted;
        // A store of the worker's own goes with its ranks (one per worker, whatever its ranks).
        let own = self.ranks.iter().filter_map(|r| r.host.as_deref()).find_map(|h| match h.g3() {
            Some((store, false)) => Some(store.borrow().stats(h.clock())),
            _ => None,
        });
        if let Some(mut old) = own {
            // Capacity is the new store's, not a sum over lifetimes.
            old.capacity_blocks = 0;
            self.retired_g3.get_or_insert_with(Default::default).add(&old);
        }
        let n = ranks.len();
        self.ranks = ranks;
        self.plans = (0..n).map(|_| RankPlan::default()).collect();
        self.loads = (0..n).map(|_| RankLoad::default()).collect();
        self.adp = engine::AdpBalanceState::default();
    }

    /// Applies the step (or the rest of the run) that ends at `now`.
    pub fn finish_step(
        &mut self,
        now: SimTime,
        reqs: &mut [Request],
        out: &mut StepOutcome,
        itl: &mut ItlSamples,
    ) {
        out.emitted.clear();
        out.finished.clear();
        out.handoffs.clear();
        if let Some(len) = self.run.as_ref().map(Run::len) {
            self.recv.decode_steps =
                self.recv.decode_steps.saturating_add(u32::try_from(len).unwrap_or(u32::MAX));
            self.apply_run_steps(len, reqs, itl);
            self.last_step_start = self.run.as_ref().map_or(self.last_step_start, |r| r.step_start(len));
            self.spare_run = self.run.take();
            for (rank, plan) in self.ranks.iter_mut().zip(&self.plans) {
                for p in &plan.items {
                    let r = &mut reqs[p.req as usize];
                    out.emitted.push(p.req);
                    if r.emitted >= r.output_target() {
                        r.status = Status::Completed;
                        engine::release(rank, r, now);
                        out.finished.push(p.req);
                    }
                }
                if !out.finished.is_empty() {
                    rank.running.retain(|id| reqs[*id as usize].status == Status::Running);
                }
            }
            self.busy = false;
            return;
        }
        if self.plans.iter().all(|p| p.items.iter().all(|i| i.decode)) {
            self.recv.decode_steps = self.recv.decode_steps.saturating_add(1);
        } else {
            self.recv.other_step = true;
        }
        // Most emitting requests also emitted at the end of the previous step: count their
        // (equal) gaps once instead of one sample per request.
        let mut common_gaps = 0u64;
        let spec = self.cfg.speculation;
        for (rank, plan) in self.ranks.iter_mut().zip(&self.plans) {
            for p in &plan.items {
                let r = &mut reqs[p.req as usize];
                // The drafts this step verified, as the policy counted them when it planned.
                let drafts = if p.decode { spec.lookahead(r) } else { 0 };
                r.computed += p.new_tokens;
                if p.decode {
                    self.stats.decode_tokens += u64::from(p.new_tokens);
                    self.stats.decode_rounds += 1;
                } else {
                    self.stats.prefill_tokens += u64::from(p.new_tokens);
                }
                engine::after_compute(rank, r, p, now);
                if r.pending_tokens() == 0 && r.phase == Phase::Prefill {
                    // The prompt is done: its KV stays here as the source of the transfer;
                    // the bootstrap token is not shown to the client.
                    r.pd.prefill_done = now;
                    r.phase = Phase::Transfer;
                    r.status = Status::Transferring;
                    r.park_source();
                    out.handoffs.push(p.req);
                } else if r.pending_tokens() == 0 {
                    let prev = r.stamps.last_token;
                    if self.frontend.is_some() {
                        // Its client sees it once the serving process has written it: the
                        // gap and the stamps are settled after the loop.
                        self.delivering.push((p.req, prev));
                    } else if prev == self.last_step_end {
                        common_gaps += 1;
                    } else if prev != NEVER {
                        itl.add(now - prev, 1);
                    }
                    out.emitted.push(p.req);
                    let mut done = r.emit_token(now);
                    if drafts > 0 {
                        // The accepted drafts reach the client in the same streamed chunk as
                        // the round's first token: one inter-token gap per chunk, as benchmark
                        // clients (vLLM's `bench serve`) record it.
                        let extra;
                        (extra, done) = accept_drafts(rank, r, &spec, drafts, done, now);
                        self.stats.decode_tokens += u64::from(extra);
                    }
                    if done {
                        r.status = Status::Completed;
                        engine::release(rank, r, now);
                        out.finished.push(p.req);
                    }
                }
            }
            if !out.finished.is_empty() || !out.handoffs.is_empty() {
                rank.running.retain(|id| reqs[*id as usize].status == Status::Running);
            }
        }
        itl.add(now - self.last_step_end, common_gaps);
        if let Some(fe) = &mut self.frontend {
            fe.stream(self.delivering.iter().map(|d| reqs[d.0 as usize].seq), &[now], |_, _| {});
            for &(id, prev) in &self.delivering {
                let written = fe.last_written(fe.process_of(reqs[id as usize].seq));
                if prev != NEVER {
                    itl.add(written.since(prev), 1);
                }
                delivered_at(&mut reqs[id as usize], now, written);
            }
            self.delivering.clear();
        }
        self.busy = false;
        self.last_step_end = now;
    }
}

/// Emits the drafts of `r`'s round that the target accepted (the round's first token was
/// emitted already; `done` if it was the last): each accepted draft's KV was written by the
/// pass, and the token after it is the target's own. The rejected drafts' slots go back.
/// Returns the drafts emitted and whether the request finished.
fn accept_drafts(
    rank: &mut engine::Rank,
    r: &mut Request,
    spec: &engine::Speculation,
    drafts: u32,
    mut done: bool,
    now: SimTime,
) -> (u32, bool) {
    // The round follows the output token emitted before it.
    let accepted = spec.accepted(r.seq, r.emitted - 1).min(drafts);
    let mut extra = 0;
    while !done && extra < accepted {
        r.computed += 1;
        extra += 1;
        done = r.emit_token(now);
    }
    engine::register_and_offer(rank, r, now);
    return_draft_slots(rank, r, drafts - extra);
    (extra, done)
}

/// SGLang returns the slots of rejected drafts after the pass; a paged pool keeps its
/// blocks for the next round's drafts.
fn return_draft_slots(rank: &mut engine::Rank, r: &mut Request, rejected: u32) {
    if let KvStore::Radix(cache) = &mut rank.kv {
        cache.free_private(u64::from(rejected));
        r.private_tokens -= rejected;
    }
}

/// Moves the stamps of the token `r` emitted at `emitted` to when its client got it.
fn delivered_at(r: &mut Request, emitted: SimTime, written: SimTime) {
    if r.stamps.first_token == emitted && r.emitted == 1 {
        r.stamps.first_token = written;
    }
    // A speculative round may emit the second token together with later ones.
    if r.stamps.second_token == emitted && r.emitted >= 2 {
        r.stamps.second_token = written;
    }
    r.stamps.last_token = written;
}
