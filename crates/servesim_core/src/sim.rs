//! The event loop.
//!
//! A [`Simulation`] owns all state of one run and advances it in bounded slices
//! ([`Simulation::run_slice`]) so a Web Worker can report progress and be cancelled between
//! slices. Events are ordered by `(time, insertion seq)`. After the last event at a given
//! instant has been handled, every worker whose state changed gets a chance to start a step
//! ("settle"), so requests arriving together are batched together.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use crate::engine::{Backend, KvStore, Rank};
use crate::frontend::Frontend;
use crate::metrics::{self, Fleet, ItlSamples, Sla, Summary, TimeSeries, WorkerSample};
use crate::planner::SlotState;
use crate::queue::{event_key, EventQueue};
use crate::record::{Record, RecordLog};
use crate::request::{ReqId, Request, Status};
use crate::router::Router;
use crate::timing::StepTimer;
use crate::traffic::{Traffic, TrafficSpec};
use crate::transfer::TransferNet;
use crate::units::{SimDur, SimTime};
use crate::worker::{RunBounds, StepOutcome, Worker, WorkerStats};

mod autoscale;
mod pd;

use autoscale::Autoscale;
pub use autoscale::{G3Attach, PlannerSetup, RankTemplate};

/// Hard limits on a run. Hitting one ends the run early and is reported, never hidden.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Events to process at most.
    pub max_events: u64,
    /// Simulated time not to go beyond (events after it are not processed).
    pub max_sim_time: SimTime,
}

impl Default for Limits {
    fn default() -> Self {
        // 2^32 events is hours of host time even at tens of millions of events per second.
        Limits { max_events: 1 << 32, max_sim_time: SimTime::MAX }
    }
}

/// Why a run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Every request reached a terminal state.
    Drained,
    /// [`Limits::max_events`] was reached.
    EventLimit,
    /// [`Limits::max_sim_time`] was reached.
    TimeLimit,
}

/// A run that cannot continue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimError {
    /// A performance model could not time a step. Fatal.
    Timing {
        /// Worker whose step failed.
        worker: u32,
        /// The model's explanation.
        message: String,
    },
    /// Nothing is scheduled but requests are unfinished: they can never be served. Fatal.
    Stalled {
        /// Requests left waiting.
        unfinished: u64,
        /// Where they are: `(status, phase, count)`, for the message.
        states: Vec<(&'static str, &'static str, u64)>,
        /// The first stuck request's progress, for diagnosis.
        example: String,
    },
    /// An event fell past the end of simulated time (2^64 ns, about 584 years): some duration
    /// the scenario implies is absurd. Fatal.
    TimeOverflow {
        /// Requests finished before it.
        finished: u64,
    },
}

impl core::fmt::Display for SimError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SimError::Timing { worker, message } => {
                write!(f, "worker {worker}: cannot time a step: {message}")
            }
            SimError::Stalled { unfinished, states, example } => {
                write!(f, "{unfinished} requests can never be scheduled (simulation stalled)")?;
                for (i, (s, p, n)) in states.iter().enumerate() {
                    write!(f, "{}{n} {s} in {p}", if i == 0 { ": " } else { ", " })?;
                }
                if !example.is_empty() {
                    write!(f, "; e.g. {example}")?;
                }
                Ok(())
            }
            SimError::TimeOverflow { finished } => write!(
                f,
                "simulated time ran past 2^64 ns (about 584 years) after {finished} finished \
                 requests: an arrival, step or transfer lies absurdly far ahead (check rates, \
                 bandwidths and delays near zero or huge)"
            ),
        }
    }
}

/// Where a run stands after a slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Simulated clock.
    pub now: SimTime,
    /// Events processed so far.
    pub events: u64,
    /// Requests in a terminal state.
    pub finished_requests: u64,
    /// Requests the traffic will send in total.
    pub total_requests: u64,
    /// Set once the run is over.
    pub stopped: Option<StopReason>,
}

/// Everything a run needs besides its timers.
pub struct SimSetup {
    /// Root seed of every random stream.
    pub seed: u64,
    /// Arrivals.
    pub traffic: TrafficSpec,
    /// Workers, each with its ranks and timer index.
    pub workers: Vec<Worker>,
    /// Request placement.
    pub router: Router,
    /// KV block size shared by all workers (tokens).
    pub block_size: u32,
    /// Limits.
    pub limits: Limits,
    /// Time-series sampling interval.
    pub sample_interval: SimDur,
    /// Service-level bounds for goodput.
    pub sla: Sla,
    /// GPU accounting.
    pub fleet: Fleet,
    /// Fast-forward stable decode batches (identical results, fewer events).
    pub fast_forward: bool,
    /// Prefill/decode disaggregation, if any.
    pub pd: Option<PdSetup>,
    /// Longest request (prompt + output tokens) the engine accepts; longer ones are rejected
    /// on arrival, as vLLM refuses requests beyond `max_model_len`.
    pub context_limit: Option<u32>,
    /// Mean delay between a request's arrival and its dispatch (the serving frontend); each
    /// request draws its own ([`Traffic::with_frontend`]).
    pub frontend_delay: SimDur,
    /// The autoscaling planner, if any: `workers` then holds every slot its pools may fill.
    pub planner: Option<PlannerSetup>,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    /// Requests due now; `pushed` is when this event was scheduled.
    Arrival { pushed: SimTime },
    /// A worker's step (or run) ends; stale when the worker's generation moved on.
    StepDone { worker: u32, generation: u64 },
    /// A KV transfer completes; stale when its rate changed since.
    TransferDone { slot: u32, generation: u64 },
    /// A request's serving process has handed it to its worker's engine.
    Dispatch { worker: u32, id: ReqId },
    /// A request's prefix is back in GPU memory from the worker's host tier.
    Restored { worker: u32, id: ReqId },
    /// A worker the planner started has loaded and serves.
    Ready { worker: u32 },
}

/// Prefill/decode disaggregation of a run.
pub struct PdSetup {
    /// `workers[..prefill_workers]` are prefill workers, the rest decode workers.
    pub prefill_workers: usize,
    /// Places requests on decode workers (overlap-blind for the KV-aware policy).
    pub decode_router: Router,
    /// Links and transfers between the pools.
    pub net: TransferNet,
    /// Reserve decode KV before prefill (SGLang) instead of after (vLLM, TensorRT-LLM).
    pub destination_first: bool,
    /// KV bytes moved per token.
    pub bytes_per_token: f64,
    /// Bytes of recurrent state moved with every request (hybrid models; 0 otherwise).
    pub state_bytes: f64,
    /// Move only the prompt tokens the decode worker lacks (`destination_missing`).
    pub missing_only: bool,
}

/// The results of a finished run.
pub struct RunResult {
    /// prediction.json figures.
    pub summary: Summary,
    /// Every request that arrived, in arrival order (index = [`crate::request::ReqSeq`]):
    /// finished, refused, or as it stood when the run stopped.
    pub records: RecordLog,
    /// Sampled worker state.
    pub series: TimeSeries,
    /// Per-worker counters.
    pub worker_stats: Vec<WorkerStats>,
    /// Why the run ended.
    pub stop: StopReason,
    /// Events processed.
    pub events: u64,
    /// Each timer's report (by timer index: one per worker role).
    pub timers: Vec<Option<crate::timing::TimerReport>>,
    /// The autoscaling planner's decisions and pool counts, if it ran.
    pub planner: Option<crate::planner::Planner>,
    /// The storage KV tiers' counters, summed over stores (`None` without any).
    pub g3: Option<crate::host::G3Stats>,
    /// The counters of the host pools ranks share, summed over pools (`None` without any).
    pub host_pool: Option<crate::host::HostPoolStats>,
    /// The Belady eviction forecast's counters (`None` under LRU eviction).
    pub eviction: Option<crate::kv::belady::ForecastStats>,
}

/// One simulation run.
pub struct Simulation {
    now: SimTime,
    queue: EventQueue<Event>,
    /// Requests in flight, by [`ReqId`] slot; a finished request's slot is in `free`.
    requests: Vec<Request>,
    /// Slots of `requests` whose request has finished, reused by the next arrival.
    free: Vec<ReqId>,
    /// Every arrived request's record, by arrival number: written when it arrives, and again
    /// when it finishes or the run ends.
    records: RecordLog,
    workers: Vec<Worker>,
    timers: Vec<Box<dyn StepTimer>>,
    traffic: Traffic,
    router: Router,
    itl: ItlSamples,
    series: TimeSeries,
    dirty: Vec<bool>,
    block_size: u32,
    limits: Limits,
    sla: Sla,
    fleet: Fleet,
    context_limit: Option<u32>,
    fast_forward: bool,
    pd: Option<PdSetup>,
    cur_key: u128,
    prefix_caching: bool,
    /// Some rank keeps a host tier, which holds every full block a request computes: hash
    /// them all (vLLM hashes every block), not only the shareable prefix.
    hash_all: bool,
    events: u64,
    finished: u64,
    next_arrival_event: SimTime,
    stopped: Option<StopReason>,
    outcome: StepOutcome,
    autoscale: Option<Box<Autoscale>>,
}

/// At most this many time-series points are kept (the interval doubles beyond it).
const MAX_SERIES_POINTS: usize = 2048;

impl Simulation {
    /// Prepares a run. `timers[w.timer]` times worker `w`'s steps.
    #[must_use]
    pub fn new(setup: SimSetup, timers: Vec<Box<dyn StepTimer>>) -> Self {
        let n = setup.workers.len();
        let prefix_caching =
            setup.workers.iter().any(|w| w.ranks.first().is_some_and(|r| r.kv.prefix_caching()));
        let hash_all = setup.workers.iter().any(|w| w.ranks.iter().any(|r| r.host.is_some()));
        let mut workers = setup.workers;
        let autoscale = setup.planner.map(|p| {
            let planner = crate::planner::Planner::new(p.spec, workers.len());
            for (slot, w) in workers.iter_mut().enumerate() {
                w.accepting = planner.state(slot) == SlotState::Serving;
            }
            Box::new(Autoscale { planner, ranks: p.ranks })
        });
        let mut sim = Simulation {
            now: SimTime::ZERO,
            queue: EventQueue::new(),
            requests: Vec::new(),
            free: Vec::new(),
            records: RecordLog::default(),
            traffic: Traffic::with_frontend(setup.traffic, setup.seed, setup.frontend_delay),
            workers,
            timers,
            router: setup.router,
            itl: ItlSamples::default(),
            series: TimeSeries::new(setup.sample_interval, MAX_SERIES_POINTS),
            dirty: alloc::vec![false; n],
            block_size: setup.block_size,
            limits: setup.limits,
            sla: setup.sla,
            fleet: setup.fleet,
            context_limit: setup.context_limit,
            fast_forward: setup.fast_forward,
            prefix_caching,
            hash_all,
            pd: setup.pd,
            cur_key: 0,
            events: 0,
            finished: 0,
            next_arrival_event: SimTime::MAX,
            stopped: None,
            outcome: StepOutcome::default(),
            autoscale,
        };
        sim.schedule_next_arrival();
        sim
    }

    /// The current state of the run.
    #[must_use]
    pub fn progress(&self) -> Progress {
        Progress {
            now: self.now,
            events: self.events,
            finished_requests: self.finished,
            total_requests: u64::from(self.traffic.total()),
            stopped: self.stopped,
        }
    }

    /// Request slots allocated so far: the most requests in flight at once (a finished
    /// request's slot is reused; what remains of it is its [`Record`]).
    #[must_use]
    pub fn request_slots(&self) -> usize {
        self.requests.len()
    }

    /// Processes at most `max_events` events.
    ///
    /// # Errors
    /// A fatal [`SimError`]; the run cannot continue.
    pub fn run_slice(&mut self, max_events: u64) -> Result<Progress, SimError> {
        let mut budget = max_events;
        while self.stopped.is_none() && budget > 0 {
            let Some(t) = self.queue.peek_time() else {
                // An arrival past the end of simulated time is never queued.
                if self.traffic.next_arrival() == Some(SimTime::MAX) {
                    return Err(SimError::TimeOverflow { finished: self.finished });
                }
                let unfinished = self.records.len() as u64 - self.finished;
                if unfinished > 0 || self.traffic.next_arrival().is_some() {
                    let mut states: Vec<(&'static str, &'static str, u64)> = Vec::new();
                    let mut example = String::new();
                    for r in &self.requests {
                        if example.is_empty() && !matches!(r.status, Status::Completed | Status::Rejected) {
                            example = alloc::format!(
                                "a request with {} prompt tokens, {} computed, {} of {} outputs",
                                r.input_tokens,
                                r.computed,
                                r.emitted,
                                r.output_target()
                            );
                        }
                        let status = match r.status {
                            Status::Waiting => "waiting",
                            Status::Transferring => "transferring",
                            Status::Running => "running",
                            Status::Completed | Status::Rejected => continue,
                        };
                        let phase = match r.phase {
                            crate::request::Phase::Serve => "serve",
                            crate::request::Phase::Prefill => "prefill",
                            crate::request::Phase::Transfer => "transfer",
                            crate::request::Phase::Decode => "decode",
                        };
                        match states.iter_mut().find(|(s, p, _)| *s == status && *p == phase) {
                            Some(e) => e.2 += 1,
                            None => states.push((status, phase, 1)),
                        }
                    }
                    // Where the work is stuck: the first ranks holding anything.
                    let mut shown = 0;
                    for w in &self.workers {
                        for (i, r) in w.ranks.iter().enumerate() {
                            if r.load() == 0 || shown == 4 {
                                continue;
                            }
                            shown += 1;
                            let (used, cap) = match &r.kv {
                                crate::engine::KvStore::Radix(c) => (c.used_tokens(), c.capacity()),
                                crate::engine::KvStore::Paged(p) => (
                                    u64::from(p.num_used()) * u64::from(p.block_size()),
                                    u64::from(p.capacity()) * u64::from(p.block_size()),
                                ),
                            };
                            example.push_str(&alloc::format!(
                                "; worker {} rank {}: {} waiting, {} running, {} awaiting KV, {} loading, KV {used} of {cap} tokens in use",
                                w.id,
                                i,
                                r.waiting.len(),
                                r.running.len(),
                                r.handoffs.len(),
                                r.loading.len()
                            ));
                        }
                    }
                    return Err(SimError::Stalled { unfinished, states, example });
                }
                self.stopped = Some(StopReason::Drained);
                break;
            };
            // Times saturate at the end of simulated time; an event there would loop forever.
            if t == SimTime::MAX {
                return Err(SimError::TimeOverflow { finished: self.finished });
            }
            if t > self.limits.max_sim_time {
                self.stopped = Some(StopReason::TimeLimit);
                break;
            }
            if self.events >= self.limits.max_events {
                self.stopped = Some(StopReason::EventLimit);
                break;
            }
            let planner_due = self.autoscale.as_ref().map(|a| a.planner.due()).filter(|&d| d <= t);
            // Samples in time order: the series' before a planner tick materialises later state.
            while self.series.due() <= planner_due.unwrap_or(t) {
                let due = self.series.due();
                for w in &mut self.workers {
                    w.materialize(due, None, &mut self.requests, &mut self.itl);
                }
                let sample = self.workers.iter().map(sample_of).collect();
                self.series.record(sample);
            }
            if let Some(due) = planner_due {
                // The tick may start a worker sooner than `t`: look at the queue again. Ticks
                // spend the slice's budget, so a slice of idle ticks still ends.
                self.planner_tick(due);
                budget -= 1;
                continue;
            }
            let Some((t, key, ev)) = self.queue.pop_keyed() else { break };
            self.now = t;
            self.cur_key = key;
            self.events += 1;
            budget -= 1;
            match ev {
                Event::Arrival { pushed } => self.on_arrival(pushed),
                Event::StepDone { worker, generation } => {
                    if self.workers[worker as usize].generation == generation {
                        self.on_step_done(worker);
                    }
                }
                Event::TransferDone { slot, generation } => self.on_transfer_done(slot as usize, generation),
                Event::Dispatch { worker, id } => self.on_dispatch(worker as usize, id),
                Event::Restored { worker, id } => self.on_restored(worker as usize, id),
                Event::Ready { worker } => self.on_ready(worker as usize),
            }
            if self.queue.peek_time() != Some(self.now) {
                self.settle()?;
            }
        }
        Ok(self.progress())
    }

    /// Runs to the end.
    ///
    /// # Errors
    /// A fatal [`SimError`].
    pub fn run(&mut self) -> Result<Progress, SimError> {
        loop {
            let p = self.run_slice(1 << 20)?;
            if p.stopped.is_some() {
                return Ok(p);
            }
        }
    }

    /// Consumes a stopped run into its results.
    #[must_use]
    pub fn into_result(mut self) -> RunResult {
        for r in &self.requests {
            if !matches!(r.status, Status::Completed | Status::Rejected) {
                self.records.set(r.seq, Record::from(r));
            }
        }
        let mut summary = metrics::summarize(&self.records, &mut self.itl, self.sla, self.fleet);
        // The end of the report's duration, as the report converts it back.
        let end = SimTime::ZERO + SimDur::from_ms_f64(summary.duration_ms);
        self.bill_provisioned_time(&mut summary, end);
        let g3 = self.g3_stats(end);
        let host_pool = self.host_pool_stats();
        let eviction = self
            .workers
            .iter()
            .find_map(|w| w.ranks.first().and_then(|r| r.kv.eviction_oracle()))
            .map(|o| o.borrow().stats());
        RunResult {
            g3,
            host_pool,
            eviction,
            summary,
            worker_stats: self
                .workers
                .iter()
                .enumerate()
                .map(|(slot, w)| WorkerStats {
                    provisioned: self.autoscale.as_ref().map(|a| a.planner.provisioned(slot, end)),
                    frontend: w.frontend.as_ref().map(Frontend::stats),
                    kv_evicted_tokens: w.kv_evicted_tokens(),
                    dropped_states: w.dropped_states(),
                    host: w.host_stats(),
                    ..w.stats
                })
                .collect(),
            records: self.records,
            series: self.series,
            stop: self.stopped.unwrap_or(StopReason::EventLimit),
            events: self.events,
            timers: self.timers.iter().map(|t| t.report()).collect(),
            planner: self.autoscale.map(|a| a.planner),
        }
    }

    /// The storage tiers' counters at `end`, each shared store counted once (`None` when the
    /// workers have none).
    fn g3_stats(&self, end: SimTime) -> Option<crate::host::G3Stats> {
        let mut all = crate::host::G3Stats::default();
        let mut seen = Vec::new();
        for w in &self.workers {
            w.add_g3_stats(end, &mut all, &mut seen);
        }
        (!seen.is_empty()).then_some(all)
    }

    /// The shared host pools' counters, each counted once (`None` when no ranks share one).
    fn host_pool_stats(&self) -> Option<crate::host::HostPoolStats> {
        let mut all = crate::host::HostPoolStats::default();
        let mut seen = Vec::new();
        for w in &self.workers {
            w.add_host_pool_stats(&mut all, &mut seen);
        }
        // A pool whose ranks the planner has all stopped lives on in the template.
        let templates = self.autoscale.iter().flat_map(|a| &a.ranks);
        for pool in templates.filter_map(|t| t.host_pool.as_ref()) {
            crate::host::add_once(pool, &mut all, &mut seen);
        }
        (!seen.is_empty()).then_some(all)
    }

    fn schedule_next_arrival(&mut self) {
        if let Some(t) = self.traffic.next_arrival() {
            if t < self.next_arrival_event {
                self.queue.push_keyed(t, event_key(self.now, 0), Event::Arrival { pushed: self.now });
                self.next_arrival_event = t;
            }
        }
    }

    fn on_arrival(&mut self, pushed: SimTime) {
        if self.next_arrival_event <= self.now {
            self.next_arrival_event = SimTime::MAX;
        }
        self.traffic.arrive(self.now);
        if self.traffic.next_dispatch().is_some_and(|t| t <= self.now) {
            // The router looks at every worker: bring fast-forwarded runs up to now.
            self.materialize_all(Some(event_key(pushed, 0)));
        }
        while let Some(spec) = self.traffic.pop_due(self.now) {
            if self.pd.is_some() {
                self.arrive_disaggregated(spec);
                continue;
            }
            let id = self.next_slot();
            let mut req = self.admit_record(spec);
            if self.prefix_caching {
                req.hash_known_blocks();
            }
            let placement = self.router.route(&req, &self.workers, &self.requests);
            let w = placement.worker;
            req.route_overlap_tokens = placement.overlap_tokens;
            let worker = &mut self.workers[w];
            // A request larger than a rank's whole KV pool could never run: refuse it now
            // (vLLM refuses prompts beyond max_model_len the same way).
            let cap_tokens = worker.ranks.first().map_or(0, |r| r.kv.capacity_tokens());
            // TensorRT-LLM clamps the output to what the pool can hold instead of refusing.
            if worker.cfg.backend == Backend::TrtLlm && u64::from(req.max_tokens()) > cap_tokens {
                if let Ok(cap) = u32::try_from(cap_tokens) {
                    if req.input_tokens < cap {
                        req.cap_output(cap - req.input_tokens);
                    }
                }
            }
            let too_long = self.context_limit.is_some_and(|l| req.max_tokens() > l);
            if too_long || u64::from(req.max_tokens()) > cap_tokens {
                req.status = Status::Rejected;
                req.worker = worker.id;
                if let Some(oracle) = worker.ranks.first().and_then(|r| r.kv.eviction_oracle()) {
                    // A refused request's forecast demand ends unserved (Belady).
                    oracle.borrow_mut().retire(req.seq);
                }
                self.traffic.on_request_done(self.now, (req.spec.session, req.spec.warmup), req.content());
                self.records.set(req.seq, Record::from(&req));
                self.finished += 1;
                continue;
            }
            if let Some(at) = worker.pass_frontend(self.now, id, &mut req) {
                // The serving process is busy: the engine sees the request later.
                #[allow(clippy::cast_possible_truncation)] // Worker counts are small.
                self.queue.push_keyed(at, event_key(self.now, 0), Event::Dispatch { worker: w as u32, id });
                self.store(id, req);
                continue;
            }
            worker.enqueue(self.now, id, &mut req);
            // A new request ends this worker's run after the step in flight.
            if let Some(end) = worker.truncate_run() {
                let gen = worker.generation;
                #[allow(clippy::cast_possible_truncation)] // Worker counts are small.
                self.queue.push_keyed(
                    end.end,
                    event_key(end.pushed, 1 + w as u32),
                    Event::StepDone { worker: w as u32, generation: gen },
                );
            }
            self.store(id, req);
            self.dirty[w] = true;
        }
        self.schedule_next_arrival();
    }

    /// A request leaves its serving process for the engine's queue.
    fn on_dispatch(&mut self, w: usize, id: ReqId) {
        self.interrupt(w);
        self.workers[w].enqueue(self.now, id, &mut self.requests[id as usize]);
        self.dirty[w] = true;
    }

    /// A host-tier restore ended: the request computes the rest of its prompt.
    fn on_restored(&mut self, w: usize, id: ReqId) {
        self.interrupt(w);
        self.workers[w].finish_restore(id, &mut self.requests);
        self.dirty[w] = true;
    }

    fn on_step_done(&mut self, w: u32) {
        let wi = w as usize;
        self.workers[wi].finish_step(self.now, &mut self.requests, &mut self.outcome, &mut self.itl);
        if self.autoscale.is_some() {
            // First tokens: the TTFT the router last saw for the worker that prefilled each.
            for k in 0..self.outcome.emitted.len() {
                self.observe_first_token(self.outcome.emitted[k], wi);
            }
        }
        let finished = core::mem::take(&mut self.outcome.finished);
        for &id in &finished {
            self.complete(id);
        }
        self.outcome.finished = finished;
        self.dirty[wi] = true;
        if self.pd.is_some() {
            let handoffs = core::mem::take(&mut self.outcome.handoffs);
            if !handoffs.is_empty() {
                self.materialize_all(Some(self.cur_key));
            }
            for &id in &handoffs {
                self.hand_off(id);
            }
            self.outcome.handoffs = handoffs;
            if self.is_decode_worker(wi) {
                // Completions freed KV: handoffs waiting for a reservation may fit now.
                self.try_reserve(wi);
            }
        }
        self.schedule_next_arrival();
    }

    /// Accounts a request that emitted its last token.
    fn complete(&mut self, id: ReqId) {
        let r = &mut self.requests[id as usize];
        let key = (r.spec.session, r.spec.warmup);
        // The client is done when it has the last token, which a busy serving process may
        // write after the engine emitted it.
        let seen = if r.stamps.last_token == crate::request::NEVER { self.now } else { r.stamps.last_token };
        if let Some(a) = self.autoscale.as_mut() {
            a.observe_finished(r, seen);
        }
        self.traffic.on_request_done(seen.max(self.now), key, r.content());
        r.release_content();
        self.records.set(r.seq, Record::from(&*r));
        self.free.push(id);
        self.finished += 1;
    }

    /// The slot the next stored request takes.
    fn next_slot(&self) -> ReqId {
        #[allow(clippy::cast_possible_truncation)] // Requests in flight are bounded by u32 stop rules.
        self.free.last().copied().unwrap_or(self.requests.len() as ReqId)
    }

    /// A new request, numbered in arrival order, with its first record written.
    fn admit_record(&mut self, spec: crate::request::RequestSpec) -> Request {
        let mut req = Request::new(spec, self.block_size);
        if self.hash_all {
            req.public_blocks = u32::MAX;
        }
        #[allow(clippy::cast_possible_truncation)] // Request counts are bounded by u32 stop rules.
        {
            req.seq = self.records.len() as crate::request::ReqSeq;
        }
        self.records.push(Record::from(&req));
        req
    }

    /// Puts a request in flight in slot `id` (from [`Simulation::next_slot`]).
    fn store(&mut self, id: ReqId, req: Request) {
        if id as usize == self.requests.len() {
            self.requests.push(req);
        } else {
            self.free.pop();
            let old = &mut self.requests[id as usize];
            debug_assert!(matches!(old.status, Status::Completed), "slot {id} reused while in flight");
            *old = req;
        }
    }

    fn materialize_all(&mut self, key: Option<u128>) {
        for w in &mut self.workers {
            w.materialize(self.now, key, &mut self.requests, &mut self.itl);
        }
    }

    /// A request is about to change worker `w`'s queues or KV: bring its run up to now and
    /// end it after the step in flight.
    fn interrupt(&mut self, w: usize) {
        let worker = &mut self.workers[w];
        worker.materialize(self.now, Some(self.cur_key), &mut self.requests, &mut self.itl);
        if let Some(end) = worker.truncate_run() {
            let generation = worker.generation;
            #[allow(clippy::cast_possible_truncation)] // Worker counts are small.
            let (wi, key) = (w as u32, event_key(end.pushed, 1 + w as u32));
            self.queue.push_keyed(end.end, key, Event::StepDone { worker: wi, generation });
        }
    }

    fn settle(&mut self) -> Result<(), SimError> {
        // Runs stop before the next known arrival (an exactness-preserving bound that avoids
        // planning steps an arrival would cut short) and never pass the time limit.
        let max_end = self.limits.max_sim_time.min(self.traffic.next_arrival().unwrap_or(SimTime::MAX));
        let bounds = RunBounds { enabled: self.fast_forward, max_end };
        for w in 0..self.workers.len() {
            if !self.dirty[w] {
                continue;
            }
            self.dirty[w] = false;
            let worker = &mut self.workers[w];
            if worker.busy {
                continue;
            }
            let timer = &mut self.timers[worker.timer];
            match worker.start_step(self.now, &mut self.requests, timer.as_mut(), bounds) {
                Ok(Some(end)) => {
                    worker.generation += 1;
                    let generation = worker.generation;
                    #[allow(clippy::cast_possible_truncation)] // Worker counts are small.
                    let (wi, key) = (w as u32, event_key(end.pushed, 1 + w as u32));
                    self.queue.push_keyed(end.end, key, Event::StepDone { worker: wi, generation });
                }
                Ok(None) => {}
                Err(e) => return Err(SimError::Timing { worker: worker.id, message: e.message }),
            }
            #[allow(clippy::cast_possible_truncation)] // Worker counts are small.
            let wi = w as u32;
            for (at, id) in worker.take_restores() {
                self.queue.push_keyed(at, event_key(self.now, 0), Event::Restored { worker: wi, id });
            }
        }
        self.retire_idle(self.now);
        Ok(())
    }
}

fn sample_of(w: &Worker) -> WorkerSample {
    #[allow(clippy::cast_possible_truncation)] // Queue lengths fit u32.
    WorkerSample {
        waiting: w.waiting() as u32,
        running: w.running() as u32,
        kv_blocks_used: w.kv_blocks_used(),
        prefill_cumulative: w.stats.prefill_tokens,
        decode_cumulative: w.stats.decode_tokens,
    }
}

/// Builds the ranks of one worker: `dp` ranks, each with its own KV pool of
/// `blocks_per_rank` blocks of `block_size` tokens (a radix tree of that many tokens when
/// `radix` is set, as SGLang keeps it).
#[must_use]
pub fn make_ranks(
    dp: u32,
    blocks_per_rank: u32,
    block_size: u32,
    prefix_caching: bool,
    radix: bool,
) -> Vec<Rank> {
    (0..dp.max(1))
        .map(|_| {
            Rank::new(if radix {
                KvStore::Radix(crate::radix::RadixCache::new(
                    u64::from(blocks_per_rank) * u64::from(block_size),
                    prefix_caching,
                ))
            } else {
                KvStore::Paged(crate::kv::BlockPool::new(blocks_per_rank, block_size, prefix_caching))
            })
        })
        .collect()
}
