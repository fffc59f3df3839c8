//! The autoscaling planner: Dynamo's load-based scaling, built in.
//!
//! Read in ai-dynamo/dynamo (`components/src/dynamo/planner/utils/agg_planner.py`,
//! `prefill_planner.py`, `decode_planner.py`, `load_based_regression.py`, `prometheus.py`,
//! `defaults.py`). Every `adjustment_interval / samples` the planner samples each serving
//! worker: prompt tokens it has yet to compute (`active_prefill_tokens`), KV it holds
//! (`active_decode_blocks`), and the last TTFT, ITL and prompt length seen on it. Every
//! `adjustment_interval` it feeds a sliding-window linear regression per pool,
//! `active_prefill_tokens + ISL -> TTFT` and `active_decode_blocks -> ITL`, solves each for the
//! load that meets the SLA target, and moves the pool by one worker:
//!
//! - up when *every* worker is above the target load (prefill or decode; an aggregated pool
//!   when either is);
//! - down when every worker is below `target x (n - 1) / n x sensitivity` (an aggregated pool
//!   only when both are), never below the pool's minimum;
//! - never past the GPU budget (`max_num_gpus`) over all pools.
//!
//! As Dynamo's connector scales with `blocking=True`, a pool makes no decision while one of
//! its workers is starting or draining. A new worker serves after its pool's `startup` delay; the worker
//! scaled down is the one started last: it stops taking requests at once, finishes what it
//! holds, and then leaves. Provisioned time (starting, serving, draining) is what the report's
//! worker-seconds and GPU-hours integrate.
//!
//! Aggregated pools regress on per-worker averages over the interval's samples (chunked
//! prefill makes the instantaneous figures noisy, `agg_planner.py`); prefill and decode pools
//! on the latest sample.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::units::{SimDur, SimTime};

/// Dynamo's `loadbased_metric_samples`: samples taken per adjustment interval.
pub const SAMPLES_PER_INTERVAL: u32 = 10;

/// What a pool's workers do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolRole {
    /// Prefill and decode in one engine: scaled on both regressions.
    Aggregated,
    /// Prefill workers of a disaggregated deployment: scaled on TTFT.
    Prefill,
    /// Decode workers of a disaggregated deployment: scaled on ITL.
    Decode,
}

impl PoolRole {
    /// The role's name in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            PoolRole::Aggregated => "aggregated",
            PoolRole::Prefill => "prefill",
            PoolRole::Decode => "decode",
        }
    }
}

/// One scaled pool: workers `first_slot .. first_slot + slots` of the simulation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolSpec {
    /// What its workers do.
    pub role: PoolRole,
    /// Index of its first worker slot.
    pub first_slot: usize,
    /// Worker slots it may fill (its most workers).
    pub slots: usize,
    /// Workers serving when the run starts.
    pub initial: usize,
    /// Fewest workers it keeps (Dynamo's `min_endpoint`).
    pub min_workers: usize,
    /// GPUs one worker takes.
    pub gpus_per_worker: u32,
    /// Delay between a scale-up decision and the new worker serving.
    pub startup: SimDur,
}

/// The planner's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannerSpec {
    /// Time between scaling decisions (`load_adjustment_interval_seconds`).
    pub interval: SimDur,
    /// Observations the regressions keep (`max_num_fpm_samples`; Dynamo's learning window).
    pub window: usize,
    /// Observations a regression needs before it decides (`load_min_observations`).
    pub min_observations: usize,
    /// Scale-down boundary as a fraction of the target load (`load_scaling_down_sensitivity` / 100).
    pub down_sensitivity: f64,
    /// TTFT the prefill regression solves for (ms).
    pub ttft_target_ms: f64,
    /// ITL the decode regression solves for (ms).
    pub itl_target_ms: f64,
    /// GPUs all pools may hold at once (`max_num_gpus`).
    pub max_gpus: u32,
    /// GPUs all pools keep at least (`min_num_gpus`; 0 for none).
    pub min_gpus: u32,
    /// The scaled pools.
    pub pools: Vec<PoolSpec>,
}

/// A worker slot's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Not provisioned.
    Off,
    /// Provisioned, loading: serves at `ready`.
    Starting {
        /// When it starts serving.
        ready: SimTime,
    },
    /// Taking requests.
    Serving,
    /// Scaled down: finishing what it holds, taking nothing new.
    Draining,
}

/// Load figures of one serving worker at one sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadSample {
    /// Worker slot.
    pub slot: usize,
    /// Prompt tokens queued or being computed.
    pub active_prefill_tokens: f64,
    /// KV units held (blocks; tokens for a radix cache).
    pub active_decode_blocks: f64,
    /// Last TTFT seen on it (ms; 0 before any).
    pub last_ttft_ms: f64,
    /// Last mean ITL seen on it (ms; 0 before any).
    pub last_itl_ms: f64,
    /// Prompt length of the last request seen on it (0 before any).
    pub last_isl: f64,
}

/// The latest latencies seen on a worker, as a router's per-worker metrics hold them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Last {
    ttft_ms: f64,
    itl_ms: f64,
    isl: f64,
}

/// What the simulation must do after a planner tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Provision worker `slot`; it serves at `ready` (now when the pool has no startup delay).
    Start {
        /// Worker slot.
        slot: usize,
        /// When it serves.
        ready: SimTime,
    },
    /// Stop routing to worker `slot`; it leaves once idle.
    Drain {
        /// Worker slot.
        slot: usize,
    },
}

/// One scaling decision, for the report.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// When it was taken.
    pub at: SimTime,
    /// Index of the pool in [`PlannerSpec::pools`].
    pub pool: usize,
    /// Serving workers before.
    pub from: usize,
    /// Workers wanted after.
    pub to: usize,
    /// Why: which regression asked, with its target load and the pool's loads.
    pub reason: Reason,
}

/// What moved a pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reason {
    /// Every worker held more pending prompt tokens than the TTFT target allows.
    PrefillAbove {
        /// Target pending tokens a worker.
        target: f64,
    },
    /// Every worker held more KV than the ITL target allows.
    DecodeAbove {
        /// Target KV units a worker.
        target: f64,
    },
    /// Every worker was below the scale-down boundary (of both regressions when aggregated).
    Below,
}

/// Counts of one pool over the run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolReport {
    /// Workers after each change, as `(time, serving, provisioned)`.
    pub timeline: Vec<(SimTime, u32, u32)>,
    /// Most workers provisioned at once.
    pub peak: usize,
}

/// A sliding-window least-squares line `y = slope x + intercept`
/// (Dynamo's `LoadBasedRegressionModel`).
#[derive(Clone, Debug, PartialEq)]
pub struct Regression {
    window: usize,
    min_observations: usize,
    points: VecDeque<(f64, f64)>,
}

impl Regression {
    /// An empty model keeping the last `window` points, deciding from `min_observations`.
    #[must_use]
    pub fn new(window: usize, min_observations: usize) -> Self {
        Regression {
            window: window.max(1),
            min_observations: min_observations.max(1),
            points: VecDeque::new(),
        }
    }

    /// Adds a point, dropping the oldest beyond the window.
    pub fn observe(&mut self, x: f64, y: f64) {
        if self.points.len() == self.window {
            self.points.pop_front();
        }
        self.points.push_back((x, y));
    }

    /// Points held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when no point is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The fitted `(slope, intercept)`; a slope of 0 when every x is equal (as scikit-learn
    /// fits it). `None` below the minimum observations.
    #[must_use]
    pub fn fit(&self) -> Option<(f64, f64)> {
        if self.points.len() < self.min_observations {
            return None;
        }
        #[allow(clippy::cast_precision_loss)] // Windows hold a few dozen points.
        let n = self.points.len() as f64;
        let mx = self.points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = self.points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = self.points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
        let sxy: f64 = self.points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
        Some((slope, my - slope * mx))
    }

    /// The largest load `x` whose predicted latency meets `target_y`, at least 0. With a slope
    /// that is not positive, the smallest `x` seen below the target (the smallest seen at all
    /// when none is). `None` below the minimum observations.
    #[must_use]
    pub fn x_for(&self, target_y: f64) -> Option<f64> {
        let (slope, intercept) = self.fit()?;
        if slope > 0.0 {
            return Some(((target_y - intercept) / slope).max(0.0));
        }
        let below = self.points.iter().filter(|p| p.1 < target_y).map(|p| p.0).fold(f64::INFINITY, f64::min);
        let x = if below.is_finite() {
            below
        } else {
            self.points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min)
        };
        Some(x.max(0.0))
    }
}

/// One pool's running state.
#[derive(Clone, Debug)]
struct Pool {
    spec: PoolSpec,
    ttft: Regression,
    itl: Regression,
    /// Serving-start order of each slot (the last started drains first).
    started: Vec<u64>,
    report: PoolReport,
}

/// The planner's state over a run.
#[derive(Clone, Debug)]
pub struct Planner {
    spec: PlannerSpec,
    states: Vec<SlotState>,
    /// Each slot's provisioned spans `(from, to)`, `to` = [`SimTime::MAX`] while open.
    provisioned: Vec<Vec<(SimTime, SimTime)>>,
    last: Vec<Last>,
    pools: Vec<Pool>,
    /// The interval's samples, oldest first: one list of serving workers' loads each.
    buffer: VecDeque<Vec<LoadSample>>,
    sample_every: SimDur,
    next_sample: SimTime,
    samples_taken: u64,
    start_counter: u64,
    draining: usize,
    decisions: Vec<Decision>,
}

impl Planner {
    /// A planner over `slots` worker slots; each pool's first `initial` slots serve at time 0.
    #[must_use]
    pub fn new(spec: PlannerSpec, slots: usize) -> Self {
        let mut states = alloc::vec![SlotState::Off; slots];
        let mut pools = Vec::with_capacity(spec.pools.len());
        let mut counter = 0;
        for p in &spec.pools {
            let mut started = alloc::vec![0; p.slots];
            for (k, s) in states.iter_mut().skip(p.first_slot).take(p.initial.min(p.slots)).enumerate() {
                *s = SlotState::Serving;
                counter += 1;
                started[k] = counter;
            }
            let n = p.initial.min(p.slots);
            #[allow(clippy::cast_possible_truncation)] // Worker counts are small.
            let report = PoolReport { timeline: alloc::vec![(SimTime::ZERO, n as u32, n as u32)], peak: n };
            pools.push(Pool {
                spec: *p,
                ttft: Regression::new(spec.window, spec.min_observations),
                itl: Regression::new(spec.window, spec.min_observations),
                started,
                report,
            });
        }
        let sample_every = SimDur::from_ns((spec.interval.as_ns() / u64::from(SAMPLES_PER_INTERVAL)).max(1));
        let provisioned =
            states
                .iter()
                .map(|s| {
                    if *s == SlotState::Off {
                        Vec::new()
                    } else {
                        alloc::vec![(SimTime::ZERO, SimTime::MAX)]
                    }
                })
                .collect();
        Planner {
            spec,
            last: alloc::vec![Last::default(); slots],
            states,
            provisioned,
            pools,
            buffer: VecDeque::new(),
            sample_every,
            next_sample: SimTime::ZERO.saturating_add(sample_every),
            samples_taken: 0,
            start_counter: counter,
            draining: 0,
            decisions: Vec::new(),
        }
    }

    /// The settings.
    #[must_use]
    pub fn spec(&self) -> &PlannerSpec {
        &self.spec
    }

    /// When the next sample is due.
    #[must_use]
    pub fn due(&self) -> SimTime {
        self.next_sample
    }

    /// A slot's state.
    #[must_use]
    pub fn state(&self, slot: usize) -> SlotState {
        self.states.get(slot).copied().unwrap_or(SlotState::Off)
    }

    /// Whether some worker is draining (the simulation then checks whether it is idle).
    #[must_use]
    pub fn any_draining(&self) -> bool {
        self.draining > 0
    }

    /// How long slot `slot` was provisioned (starting, serving or draining) up to `end`.
    #[must_use]
    pub fn provisioned(&self, slot: usize, end: SimTime) -> SimDur {
        let spans = self.provisioned.get(slot).map_or(&[][..], Vec::as_slice);
        spans.iter().fold(SimDur::ZERO, |d, &(a, b)| d.saturating_add(b.min(end).since(a.min(end))))
    }

    /// Worker-seconds pool `pool` (index in [`PlannerSpec::pools`]) had provisioned up to `end`.
    #[must_use]
    pub fn worker_seconds(&self, pool: usize, end: SimTime) -> f64 {
        let Some(p) = self.pools.get(pool) else { return 0.0 };
        (p.spec.first_slot..p.spec.first_slot + p.spec.slots)
            .map(|s| self.provisioned(s, end).as_secs_f64())
            .sum()
    }

    /// The decisions taken so far.
    #[must_use]
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// Each pool's counts.
    pub fn reports(&self) -> impl Iterator<Item = (&PoolSpec, &PoolReport)> {
        self.pools.iter().map(|p| (&p.spec, &p.report))
    }

    /// A request's first token reached its client: its TTFT becomes the last seen on the
    /// worker that prefilled it (as the router's per-worker metrics record it).
    pub fn observe_ttft(&mut self, slot: usize, ttft_ms: f64, isl: u32) {
        if let Some(l) = self.last.get_mut(slot) {
            l.ttft_ms = ttft_ms;
            l.isl = f64::from(isl);
        }
    }

    /// A request finished: its mean inter-token latency becomes the last seen on the worker
    /// that decoded it.
    pub fn observe_itl(&mut self, slot: usize, itl_ms: f64) {
        if let Some(l) = self.last.get_mut(slot) {
            l.itl_ms = itl_ms;
        }
    }

    /// Takes the sample due now from `loads` (one entry a serving worker, with `slot` and the
    /// two load figures set) and, at the end of an interval, decides. Returns what to do.
    pub fn sample(&mut self, now: SimTime, mut loads: Vec<LoadSample>) -> Vec<Action> {
        for l in &mut loads {
            if let Some(last) = self.last.get(l.slot) {
                l.last_ttft_ms = last.ttft_ms;
                l.last_itl_ms = last.itl_ms;
                l.last_isl = last.isl;
            }
        }
        if self.buffer.len() == SAMPLES_PER_INTERVAL as usize {
            self.buffer.pop_front();
        }
        self.buffer.push_back(loads);
        self.samples_taken += 1;
        self.next_sample = now.saturating_add(self.sample_every);
        let mut actions = Vec::new();
        if self.samples_taken.is_multiple_of(u64::from(SAMPLES_PER_INTERVAL)) {
            for p in 0..self.pools.len() {
                self.decide(now, p, &mut actions);
            }
        }
        actions
    }

    /// A starting worker serves.
    pub fn ready(&mut self, now: SimTime, slot: usize) {
        if let Some(s) = self.states.get_mut(slot) {
            if matches!(s, SlotState::Starting { .. }) {
                *s = SlotState::Serving;
                self.record(now, slot);
            }
        }
    }

    /// A draining worker is idle: it leaves.
    pub fn retire(&mut self, now: SimTime, slot: usize) {
        let Some(s) = self.states.get_mut(slot) else { return };
        if *s != SlotState::Draining {
            return;
        }
        *s = SlotState::Off;
        self.draining -= 1;
        if let Some(open) = self.provisioned.get_mut(slot).and_then(|v| v.last_mut()) {
            open.1 = now;
        }
        self.record(now, slot);
    }

    /// The pool (index in [`PlannerSpec::pools`]) slot `slot` belongs to.
    #[must_use]
    pub fn pool_of(&self, slot: usize) -> Option<usize> {
        self.pools.iter().position(|p| slot >= p.spec.first_slot && slot < p.spec.first_slot + p.spec.slots)
    }

    fn count(&self, pool: usize, f: impl Fn(SlotState) -> bool) -> usize {
        let s = &self.pools[pool].spec;
        self.states[s.first_slot..s.first_slot + s.slots].iter().filter(|x| f(**x)).count()
    }

    /// Appends the pool's counts after a change at `now`.
    fn record(&mut self, now: SimTime, slot: usize) {
        let Some(p) = self.pool_of(slot) else { return };
        let serving = self.count(p, |s| s == SlotState::Serving);
        let provisioned = self.count(p, |s| s != SlotState::Off);
        let report = &mut self.pools[p].report;
        report.peak = report.peak.max(provisioned);
        #[allow(clippy::cast_possible_truncation)] // Worker counts are small.
        let point = (now, serving as u32, provisioned as u32);
        match report.timeline.last_mut() {
            Some(last) if last.0 == now => *last = point,
            _ => report.timeline.push(point),
        }
    }

    /// GPUs provisioned by every pool but `except`, and by `except` at `workers`.
    fn gpus_with(&self, except: usize, workers: usize) -> u64 {
        let mut total = 0u64;
        for (i, p) in self.pools.iter().enumerate() {
            let n = if i == except { workers } else { self.count(i, |s| s != SlotState::Off) };
            total += n as u64 * u64::from(p.spec.gpus_per_worker);
        }
        total
    }

    fn decide(&mut self, now: SimTime, p: usize, actions: &mut Vec<Action>) {
        let spec = self.pools[p].spec;
        // Scaling blocks (Dynamo's connector waits for the deployment to settle): no decision
        // while a worker of the pool starts or drains.
        if self.count(p, |s| matches!(s, SlotState::Starting { .. } | SlotState::Draining)) > 0 {
            return;
        }
        let serving: Vec<usize> = (spec.first_slot..spec.first_slot + spec.slots)
            .filter(|&s| self.states[s] == SlotState::Serving)
            .collect();
        let n = serving.len();
        let Some(recent) = self.buffer.back() else { return };
        let recent: Vec<LoadSample> = recent.iter().filter(|l| serving.contains(&l.slot)).copied().collect();
        if recent.len() != n || n == 0 {
            return;
        }
        self.learn(p, &serving);
        let pool = &self.pools[p];
        let avg_isl = {
            let isl: Vec<f64> = self
                .buffer
                .iter()
                .flatten()
                .filter(|l| serving.contains(&l.slot))
                .map(|l| l.last_isl)
                .collect();
            #[allow(clippy::cast_precision_loss)]
            let m = if isl.is_empty() { 0.0 } else { isl.iter().sum::<f64>() / isl.len() as f64 };
            m
        };
        #[allow(clippy::cast_precision_loss)] // Worker counts are small.
        let shrink = (n as f64 - 1.0) / n as f64 * self.spec.down_sensitivity;
        // A regression's verdict on its load: Some(true) up, Some(false) down, None neither
        // (or no data), with the target load per worker.
        let verdict = |target: Option<f64>, load: fn(&LoadSample) -> f64| -> (Option<bool>, f64) {
            let Some(target) = target else { return (None, 0.0) };
            if target <= 0.0 {
                return (None, target);
            }
            if recent.iter().all(|l| load(l) > target) {
                return (Some(true), target);
            }
            let down = n > 1 && recent.iter().all(|l| load(l) < target * shrink);
            (down.then_some(false), target)
        };
        let ttft_target = self.spec.ttft_target_ms;
        let prefill =
            || verdict(pool.ttft.x_for(ttft_target).map(|x| x - avg_isl), |l| l.active_prefill_tokens);
        let decode = || verdict(pool.itl.x_for(self.spec.itl_target_ms), |l| l.active_decode_blocks);
        let (up, reason) = match spec.role {
            PoolRole::Prefill => match prefill() {
                (Some(true), t) => (true, Reason::PrefillAbove { target: t }),
                (Some(false), _) => (false, Reason::Below),
                (None, _) => return,
            },
            PoolRole::Decode => match decode() {
                (Some(true), t) => (true, Reason::DecodeAbove { target: t }),
                (Some(false), _) => (false, Reason::Below),
                (None, _) => return,
            },
            PoolRole::Aggregated => match (prefill(), decode()) {
                ((Some(true), t), _) => (true, Reason::PrefillAbove { target: t }),
                (_, (Some(true), t)) => (true, Reason::DecodeAbove { target: t }),
                ((Some(false), _), (Some(false), _)) => (false, Reason::Below),
                _ => return,
            },
        };
        let mut to = if up { n + 1 } else { n - 1 };
        to = to.max(spec.min_workers).min(spec.slots);
        // The GPU budget caps growth; the GPU floor stops shrinking.
        while to > n && self.gpus_with(p, to) > u64::from(self.spec.max_gpus) {
            to -= 1;
        }
        if to < n && self.gpus_with(p, to) < u64::from(self.spec.min_gpus) {
            to = n;
        }
        if to == n {
            return;
        }
        self.decisions.push(Decision { at: now, pool: p, from: n, to, reason });
        if to > n {
            let Some(slot) =
                (spec.first_slot..spec.first_slot + spec.slots).find(|&s| self.states[s] == SlotState::Off)
            else {
                return;
            };
            let ready = now.saturating_add(spec.startup);
            self.states[slot] =
                if spec.startup == SimDur::ZERO { SlotState::Serving } else { SlotState::Starting { ready } };
            self.start_counter += 1;
            self.last[slot] = Last::default();
            self.provisioned[slot].push((now, SimTime::MAX));
            let pool = &mut self.pools[p];
            pool.started[slot - spec.first_slot] = self.start_counter;
            self.record(now, slot);
            actions.push(Action::Start { slot, ready });
        } else {
            let pool = &self.pools[p];
            let Some(&slot) = serving.iter().max_by_key(|&&s| pool.started[s - spec.first_slot]) else {
                return;
            };
            self.states[slot] = SlotState::Draining;
            self.draining += 1;
            self.record(now, slot);
            actions.push(Action::Drain { slot });
        }
    }

    /// Feeds the interval's observations to pool `p`'s regressions.
    fn learn(&mut self, p: usize, serving: &[usize]) {
        let averaged = self.pools[p].spec.role == PoolRole::Aggregated;
        let mut points: Vec<LoadSample> = Vec::new();
        if averaged {
            for &slot in serving {
                let mine: Vec<&LoadSample> =
                    self.buffer.iter().flatten().filter(|l| l.slot == slot).collect();
                if mine.is_empty() {
                    continue;
                }
                #[allow(clippy::cast_precision_loss)]
                let k = mine.len() as f64;
                let mean = |f: fn(&LoadSample) -> f64| mine.iter().map(|l| f(l)).sum::<f64>() / k;
                points.push(LoadSample {
                    slot,
                    active_prefill_tokens: mean(|l| l.active_prefill_tokens),
                    active_decode_blocks: mean(|l| l.active_decode_blocks),
                    last_ttft_ms: mean(|l| l.last_ttft_ms),
                    last_itl_ms: mean(|l| l.last_itl_ms),
                    last_isl: mean(|l| l.last_isl),
                });
            }
        } else if let Some(recent) = self.buffer.back() {
            points.extend(recent.iter().filter(|l| serving.contains(&l.slot)));
        }
        let pool = &mut self.pools[p];
        for l in points {
            if pool.spec.role != PoolRole::Decode && l.last_ttft_ms > 0.0 && l.last_isl > 0.0 {
                pool.ttft.observe(l.active_prefill_tokens + l.last_isl, l.last_ttft_ms);
            }
            if pool.spec.role != PoolRole::Prefill && l.last_itl_ms > 0.0 && l.active_decode_blocks > 0.0 {
                pool.itl.observe(l.active_decode_blocks, l.last_itl_ms);
            }
        }
    }
}

#[cfg(test)]
mod tests;
