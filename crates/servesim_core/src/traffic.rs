//! Traffic: which requests arrive, and when.
//!
//! A [`Traffic`] owns the arrival process and hands the simulation every request due at the
//! current time. Closed-loop loads (`concurrency`) create the next request when one finishes;
//! open-loop loads (`poisson`, `constant_rate`, `gamma`) draw inter-arrival gaps lazily, one
//! request ahead, so memory does not grow with the number of requests.

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use crate::content::Segment;
use crate::queue::EventQueue;
use crate::request::{RequestSpec, ALL_SHARED};
use crate::rng::{mix2, Rng, Stream};
use crate::units::{SimDur, SimTime};

/// A token-length distribution. Samples are rounded to the nearest integer and clamped to
/// `[min, max]` (and to at least 1).
#[derive(Clone, Debug, PartialEq)]
pub enum LengthDist {
    /// Always this many tokens.
    Fixed(u32),
    /// Uniform over the integers `min..=max`.
    Uniform {
        /// Smallest value.
        min: u32,
        /// Largest value.
        max: u32,
    },
    /// Normal with the given mean and standard deviation, clamped.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
        /// Lower clamp.
        min: u32,
        /// Upper clamp.
        max: u32,
    },
    /// Log-normal with the given mean and standard deviation of the result, clamped.
    LogNormal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
        /// Lower clamp.
        min: u32,
        /// Upper clamp.
        max: u32,
    },
    /// Exponential with the given mean, clamped.
    Exponential {
        /// Mean.
        mean: f64,
        /// Lower clamp.
        min: u32,
        /// Upper clamp.
        max: u32,
    },
}

impl LengthDist {
    /// Draws one length.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Clamped before the cast.
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        let clamp = |x: f64, lo: u32, hi: u32| -> u32 {
            let x = libm::round(x);
            let lo = f64::from(lo.max(1));
            let hi = f64::from(hi.max(1));
            x.clamp(lo, hi.max(lo)) as u32
        };
        match *self {
            LengthDist::Fixed(n) => n.max(1),
            LengthDist::Uniform { min, max } => {
                let (lo, hi) = (min.max(1), max.max(min.max(1)));
                lo + rng.below(u64::from(hi - lo) + 1) as u32
            }
            LengthDist::Normal { mean, std, min, max } => clamp(mean + std * rng.standard_normal(), min, max),
            LengthDist::LogNormal { mean, std, min, max } => {
                clamp(rng.lognormal_mean_std(mean, std), min, max)
            }
            LengthDist::Exponential { mean, min, max } => clamp(rng.exponential(mean), min, max),
        }
    }

    /// The distribution's mean before clamping (for sizing loads).
    #[must_use]
    pub fn nominal_mean(&self) -> f64 {
        match *self {
            LengthDist::Fixed(n) => f64::from(n),
            LengthDist::Uniform { min, max } => (f64::from(min) + f64::from(max)) / 2.0,
            LengthDist::Normal { mean, .. }
            | LengthDist::LogNormal { mean, .. }
            | LengthDist::Exponential { mean, .. } => mean,
        }
    }
}

/// A multi-turn session source: each turn's prompt is the previous turn's prompt, its output,
/// and new input, so later turns can reuse the earlier turns' KV.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSpec {
    /// New input tokens per turn.
    pub new_input_tokens: LengthDist,
    /// Output tokens per turn.
    pub output_tokens: LengthDist,
    /// Turns per session (at least 1).
    pub turns: u32,
    /// Fraction of the first turn's input shared by every session of a prefix group.
    pub shared_prefix_ratio: f64,
    /// Number of prefix groups sessions are spread over (0: one group shared by all).
    pub prefix_groups: u32,
    /// Think time between a turn's last token and the next turn's arrival.
    pub think_time: SimDur,
}

/// One row of a request trace (Mooncake, Azure, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct TraceRow {
    /// Arrival time from the start of the trace (first row at zero).
    pub timestamp: SimDur,
    /// Session (dense index) when the row is a turn of one; turns follow file order.
    pub session: Option<u32>,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
    /// Content ids of consecutive `block_size`-token blocks of the prompt (may be empty).
    pub hash_ids: Vec<u64>,
    /// For later turns of a session: delay after the previous turn completes.
    pub delay: Option<SimDur>,
}

/// A parsed request trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// Rows in file order.
    pub rows: Vec<TraceRow>,
    /// Tokens per `hash_ids` entry (Mooncake: 512).
    pub block_size: u32,
    /// Per row: leading prompt tokens some other row's prompt also starts with (at `hash_ids`
    /// granularity, so possibly more than are really shared, never fewer). The rest of a row's
    /// content (its uncovered tail and its output) is its own.
    pub public_tokens: Vec<u32>,
}

impl Trace {
    /// A trace of `rows` whose `hash_ids` name `block_size`-token blocks.
    #[must_use]
    pub fn new(rows: Vec<TraceRow>, block_size: u32) -> Self {
        let public_tokens = shared_prefixes(&rows, block_size);
        Trace { rows, block_size, public_tokens }
    }
}

/// The `hash_ids` a row's prompt uses (ids past its input length are ignored), with the
/// tokens each covers.
fn used_ids(row: &TraceRow, block_size: u32) -> impl Iterator<Item = (u64, u32)> + '_ {
    let mut left = row.input_tokens;
    row.hash_ids.iter().map_while(move |h| {
        let len = left.min(block_size);
        left -= len;
        (len > 0).then_some((*h, len))
    })
}

/// For each row, the prompt tokens covered by its longest run of leading `hash_ids` that
/// another row's prompt also starts with. Runs are keyed by a chained hash of their ids; a
/// collision could only make a run look shared, which errs on the safe side.
fn shared_prefixes(rows: &[TraceRow], block_size: u32) -> Vec<u32> {
    let mut runs: crate::kv::PremixedMap<u32> = crate::kv::PremixedMap::default();
    for row in rows {
        let mut key = TRACE_NAMESPACE;
        for (h, _) in used_ids(row, block_size) {
            key = mix2(key, h);
            *runs.entry(key).or_insert(0) += 1;
        }
    }
    rows.iter()
        .map(|row| {
            let (mut key, mut covered, mut shared) = (TRACE_NAMESPACE, 0u32, 0u32);
            for (h, len) in used_ids(row, block_size) {
                key = mix2(key, h);
                covered += len;
                if runs.get(&key).is_some_and(|n| *n > 1) {
                    shared = covered;
                }
            }
            shared
        })
        .collect()
}

/// Where request contents come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Independent synthetic requests.
    Synthetic {
        /// Prompt length.
        input_tokens: LengthDist,
        /// Output length.
        output_tokens: LengthDist,
        /// Leading prompt tokens every request shares (a common system prompt), capped at
        /// one less than the prompt so each request computes at least one token of its own.
        shared_prefix_tokens: u32,
        /// Distinct prompts the requests draw from, as a benchmark client's dataset (0: every
        /// request its own prompt). Each entry's prompt and output lengths are drawn once;
        /// requests take the entries in a seeded random order, reshuffled after every pass,
        /// so a prompt repeats once the pool is used up and a prefix cache can reuse it.
        prompt_pool: u32,
    },
    /// Synthetic multi-turn sessions.
    Sessions(SessionSpec),
    /// Replay of a trace.
    Trace(Arc<Trace>),
}

/// How jobs (single requests, or whole sessions) are paced.
#[derive(Clone, Debug, PartialEq)]
pub enum Load {
    /// Closed loop: this many jobs in flight; a finished job is replaced at once. A session
    /// holds its slot through its think times.
    Concurrency(u32),
    /// Open loop, exponential gaps at this mean rate (jobs per second).
    Poisson(f64),
    /// Open loop, equal gaps.
    ConstantRate(f64),
    /// Open loop, gamma-distributed gaps with this mean rate and coefficient of variation
    /// (`cv` > 1 is burstier than Poisson, < 1 more regular).
    Gamma {
        /// Mean jobs per second.
        rate: f64,
        /// Coefficient of variation of the gaps.
        cv: f64,
    },
    /// Trace replay at the trace's own timestamps, divided by `speedup` (also think times).
    TraceTimestamps {
        /// Time compression factor (> 0).
        speedup: f64,
    },
}

/// When to stop sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stop {
    /// Requests to send at most.
    pub max_requests: u32,
    /// Jobs (sessions) to start at most.
    pub max_sessions: u32,
}

/// A complete traffic description.
#[derive(Clone, Debug, PartialEq)]
pub struct TrafficSpec {
    /// Contents.
    pub source: Source,
    /// Pacing.
    pub load: Load,
    /// Stop rules.
    pub stop: Stop,
    /// Treat all content as shareable, so the prefix cache indexes every full block as the
    /// engines do. The results are identical either way (a test checks); off, blocks only
    /// their own request can contain are not indexed, which is faster.
    pub all_content_shared: bool,
}

impl TrafficSpec {
    /// Requests this traffic sends at most (sessions count all their turns).
    #[must_use]
    pub fn max_requests(&self) -> u32 {
        let by_jobs = match &self.source {
            Source::Synthetic { .. } => u64::from(self.stop.max_sessions),
            Source::Sessions(s) => u64::from(self.stop.max_sessions) * u64::from(s.turns.max(1)),
            Source::Trace(t) => t.rows.len() as u64,
        };
        u32::try_from(by_jobs.min(u64::from(self.stop.max_requests))).unwrap_or(u32::MAX)
    }
}

/// Content-id namespace of trace `hash_ids` (kept apart from synthetic streams).
const TRACE_NAMESPACE: u64 = 0x7AACE;
/// Content-id namespace of shared synthetic prefixes.
const PREFIX_NAMESPACE: u64 = 0x9F1E;
/// Content-id namespace of prompt-pool entries.
const POOL_NAMESPACE: u64 = 0x9001;

/// One prompt of a synthetic prompt pool.
#[derive(Clone, Copy, Debug)]
struct PoolEntry {
    input: u32,
    output: u32,
    stream: u64,
}

/// The prompts synthetic requests draw from ([`Source::Synthetic`]'s `prompt_pool`), and the
/// order of the pass under way.
#[derive(Clone, Debug)]
struct PromptPool {
    entries: Vec<PoolEntry>,
    /// Entry indices of this pass, taken from the back.
    order: Vec<u32>,
    rng: Rng,
}

impl PromptPool {
    fn new(size: u32, input: &LengthDist, output: &LengthDist, content_seed: u64, root_seed: u64) -> Self {
        let mut rng = Rng::stream(root_seed, Stream::PromptPool);
        let entries = (0..size)
            .map(|k| PoolEntry {
                input: input.sample(&mut rng),
                output: output.sample(&mut rng),
                stream: mix2(POOL_NAMESPACE ^ content_seed, u64::from(k)),
            })
            .collect();
        PromptPool { entries, order: Vec::new(), rng }
    }

    /// The next entry: each pass takes every entry once, in a fresh random order
    /// (Fisher–Yates).
    fn next(&mut self) -> PoolEntry {
        if self.order.is_empty() {
            #[allow(clippy::cast_possible_truncation)] // The pool's size is a u32.
            let n = self.entries.len() as u32;
            self.order.extend(0..n);
            for i in (1..self.order.len()).rev() {
                #[allow(clippy::cast_possible_truncation)] // below(i + 1) <= i, an index.
                let j = self.rng.below(i as u64 + 1) as usize;
                self.order.swap(i, j);
            }
        }
        let k = self.order.pop().map_or(0, |k| k as usize);
        self.entries[k]
    }
}

/// A session in flight.
#[derive(Clone, Debug)]
struct SessionState {
    /// Session index (for records).
    id: u32,
    /// Turns sent so far.
    turn: u32,
    /// Prompt of the last turn (synthetic sessions extend it).
    content: Vec<Segment>,
    /// Trace rows of this session, when replaying a trace.
    rows: Vec<usize>,
}

/// The live arrival process of a run.
pub struct Traffic {
    spec: TrafficSpec,
    lengths: Rng,
    arrivals: Rng,
    content_seed: u64,
    requests_sent: u32,
    jobs_started: u32,
    /// Trace jobs (row lists) in start order.
    trace_jobs: Vec<Vec<usize>>,
    /// Sessions in flight, by session index.
    sessions: BTreeMap<u32, SessionState>,
    /// Requests by arrival time, not yet arrived.
    pending: EventQueue<RequestSpec>,
    /// Arrived requests by the time they leave the frontend.
    dispatching: EventQueue<RequestSpec>,
    last_open_start: SimTime,
    max_requests: u32,
    /// Mean time from a request's arrival to its dispatch to the router (the serving
    /// frontend: HTTP, tokenisation). Latencies are measured from arrival.
    dispatch_delay: SimDur,
    /// Draws each request's frontend delay.
    frontend: Rng,
    /// The prompts synthetic requests draw from, when the source has a pool.
    pool: Option<PromptPool>,
}

impl Traffic {
    /// Starts the arrival process for `root_seed`, with no frontend delay.
    #[must_use]
    pub fn new(spec: TrafficSpec, root_seed: u64) -> Self {
        Self::with_frontend(spec, root_seed, SimDur::ZERO)
    }

    /// Starts the arrival process for `root_seed`; requests reach the router `frontend_delay`
    /// after they arrive on average. Each request's delay is drawn uniformly between zero and
    /// twice that mean: a serving frontend's time varies with the request and with what else
    /// its event loop is doing, and a constant delay lets a closed loop's clients march in
    /// step (every request returning, and so being prefilled, together), which measured runs
    /// do not show (`docs/validation.md`, "SGLang's frontend").
    #[must_use]
    pub fn with_frontend(spec: TrafficSpec, root_seed: u64, frontend_delay: SimDur) -> Self {
        let trace_jobs = match &spec.source {
            Source::Trace(t) => trace_jobs(t),
            Source::Synthetic { .. } | Source::Sessions(_) => Vec::new(),
        };
        let max_requests = spec.max_requests();
        let content_seed = Rng::stream(root_seed, Stream::Content).next_u64();
        let pool = match &spec.source {
            // A pool at least as large as the requests never repeats a prompt, whichever
            // entries are drawn, so it holds no more entries than requests.
            Source::Synthetic { input_tokens, output_tokens, prompt_pool, .. } if *prompt_pool > 0 => {
                let size = (*prompt_pool).min(max_requests.max(1));
                Some(PromptPool::new(size, input_tokens, output_tokens, content_seed, root_seed))
            }
            _ => None,
        };
        let mut t = Traffic {
            lengths: Rng::stream(root_seed, Stream::Lengths),
            arrivals: Rng::stream(root_seed, Stream::Arrivals),
            content_seed,
            spec,
            requests_sent: 0,
            jobs_started: 0,
            trace_jobs,
            sessions: BTreeMap::new(),
            pending: EventQueue::new(),
            dispatching: EventQueue::new(),
            last_open_start: SimTime::ZERO,
            max_requests,
            dispatch_delay: frontend_delay,
            frontend: Rng::stream(root_seed, Stream::Frontend),
            pool,
        };
        match t.spec.load {
            Load::Concurrency(c) => {
                for _ in 0..c {
                    if !t.start_job(SimTime::ZERO) {
                        break;
                    }
                }
            }
            Load::Poisson(_) | Load::ConstantRate(_) | Load::Gamma { .. } => {
                t.start_job(SimTime::ZERO);
            }
            Load::TraceTimestamps { .. } => {
                let at = t.trace_job_start(0);
                t.start_job(at);
            }
        }
        t
    }

    /// Requests sent so far.
    #[must_use]
    pub fn generated(&self) -> u32 {
        self.requests_sent
    }

    /// Requests this traffic sends at most.
    #[must_use]
    pub fn total(&self) -> u32 {
        self.max_requests
    }

    /// When the next request arrives or leaves the frontend, if any is scheduled.
    #[must_use]
    pub fn next_arrival(&self) -> Option<SimTime> {
        match (self.pending.peek_time(), self.dispatching.peek_time()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When a request arriving at `arrival` reaches the router ([`Self::with_frontend`]).
    fn dispatch_at(&mut self, arrival: SimTime) -> SimTime {
        if self.dispatch_delay == SimDur::ZERO {
            return arrival;
        }
        let spread = 2.0 * self.frontend.next_f64();
        arrival + SimDur::from_secs_f64(self.dispatch_delay.as_secs_f64() * spread)
    }

    /// When the next request that has arrived leaves the frontend, if any has arrived.
    #[must_use]
    pub fn next_dispatch(&self) -> Option<SimTime> {
        self.dispatching.peek_time()
    }

    /// Takes the next request due for dispatch at or before `now`.
    pub fn pop_due(&mut self, now: SimTime) -> Option<RequestSpec> {
        self.arrive(now);
        if self.dispatching.peek_time()? > now {
            return None;
        }
        self.dispatching.pop().map(|(_, spec)| spec)
    }

    /// Requests that have arrived by `now` enter the frontend, each for its own time.
    pub fn arrive(&mut self, now: SimTime) {
        while self.pending.peek_time().is_some_and(|t| t <= now) {
            let Some((at, spec)) = self.pending.pop() else { break };
            // Open loops start the next job when this one's first request arrives.
            let first_of_job = spec.session.is_none_or(|(_, turn)| turn == 0);
            if first_of_job && !matches!(self.spec.load, Load::Concurrency(_)) {
                let next = match self.spec.load {
                    Load::TraceTimestamps { .. } => Some(self.trace_job_start(self.jobs_started as usize)),
                    _ => self.open_loop_gap().map(|g| self.last_open_start.max(at) + g),
                };
                if let Some(next) = next {
                    self.start_job(next);
                }
            }
            let due = self.dispatch_at(at);
            self.dispatching.push(due, spec);
        }
    }

    /// Tells the traffic that a request finished (or was rejected) at `now`; `session` and
    /// `content` are that request's session and its prompt plus generated tokens.
    pub fn on_request_done(&mut self, now: SimTime, session: Option<(u32, u32)>, content: &[Segment]) {
        let job_over = match session {
            None => true,
            Some((sid, _)) => !self.next_turn(sid, now, content),
        };
        if job_over {
            if let Some((sid, _)) = session {
                self.sessions.remove(&sid);
            }
            if matches!(self.spec.load, Load::Concurrency(_)) {
                self.start_job(now);
            }
        }
    }

    fn open_loop_gap(&mut self) -> Option<SimDur> {
        Some(match self.spec.load {
            Load::Poisson(rate) => SimDur::from_secs_f64(self.arrivals.exponential(1.0 / rate)),
            Load::ConstantRate(rate) => SimDur::from_secs_f64(1.0 / rate),
            Load::Gamma { rate, cv } => {
                // Gaps with mean 1/rate and std cv/rate: shape 1/cv², scale cv²/rate.
                let shape = 1.0 / (cv * cv);
                SimDur::from_secs_f64(self.arrivals.gamma(shape, cv * cv / rate))
            }
            Load::Concurrency(_) | Load::TraceTimestamps { .. } => return None,
        })
    }

    fn speedup(&self) -> f64 {
        match self.spec.load {
            Load::TraceTimestamps { speedup } if speedup > 0.0 => speedup,
            _ => 1.0,
        }
    }

    fn scaled(&self, d: SimDur) -> SimDur {
        #[allow(clippy::cast_precision_loss)]
        SimDur::from_ms_f64(d.as_ns() as f64 / 1e6 / self.speedup())
    }

    fn trace_job_start(&self, job: usize) -> SimTime {
        let Source::Trace(t) = &self.spec.source else { return SimTime::ZERO };
        let row = self.trace_jobs.get(job).and_then(|j| j.first()).and_then(|r| t.rows.get(*r));
        SimTime::ZERO + row.map_or(SimDur::ZERO, |r| self.scaled(r.timestamp))
    }

    /// Starts the next job at `at`. False when the stop rules allow no more.
    fn start_job(&mut self, at: SimTime) -> bool {
        if self.jobs_started >= self.spec.stop.max_sessions || self.requests_sent >= self.max_requests {
            return false;
        }
        let job = self.jobs_started;
        let spec = match self.spec.source.clone() {
            Source::Synthetic { input_tokens, output_tokens, shared_prefix_tokens, .. } => {
                // A pooled prompt is its entry's stream, the same for every request that draws it.
                let (input, output, stream) = match &mut self.pool {
                    Some(pool) => {
                        let e = pool.next();
                        (e.input, e.output, e.stream)
                    }
                    None => (
                        input_tokens.sample(&mut self.lengths),
                        output_tokens.sample(&mut self.lengths),
                        self.stream_id(2 * u64::from(self.requests_sent)),
                    ),
                };
                let shared = shared_prefix_tokens.min(input.saturating_sub(1));
                let own = Segment { id: stream, len: input - shared };
                let prompt = if shared > 0 {
                    // One stream for everyone's prefix, distinct from every request stream.
                    vec![Segment { id: self.stream_id(u64::MAX), len: shared }, own]
                } else {
                    vec![own]
                };
                // Only the common prefix is anyone else's (the whole prompt, when pooled); the
                // output is its own.
                let public = if self.pool.is_some() { input } else { shared };
                self.request(at, prompt, output, None, public)
            }
            Source::Sessions(s) => {
                let input = s.new_input_tokens.sample(&mut self.lengths);
                let output = s.output_tokens.sample(&mut self.lengths);
                let mut prompt = Vec::new();
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let shared = (libm::round(s.shared_prefix_ratio * f64::from(input)) as u32).min(input);
                if shared > 0 {
                    let group = if s.prefix_groups == 0 { 0 } else { job % s.prefix_groups };
                    prompt.push(Segment {
                        id: mix2(PREFIX_NAMESPACE ^ self.content_seed, u64::from(group)),
                        len: shared,
                    });
                }
                if input > shared {
                    prompt.push(Segment {
                        id: self.stream_id(2 * u64::from(self.requests_sent)),
                        len: input - shared,
                    });
                }
                self.sessions.insert(
                    job,
                    SessionState { id: job, turn: 0, content: prompt.clone(), rows: Vec::new() },
                );
                // A later turn embeds all of this turn's content; a lone turn shares only the
                // group prefix.
                let public = if s.turns > 1 { ALL_SHARED } else { shared };
                self.request(at, prompt, output, Some((job, 0)), public)
            }
            Source::Trace(t) => {
                let Some(rows) = self.trace_jobs.get(job as usize).cloned() else { return false };
                let Some(&first) = rows.first() else { return false };
                let Some(row) = t.rows.get(first) else { return false };
                let public = t.public_tokens.get(first).copied().unwrap_or(ALL_SHARED);
                let prompt =
                    trace_prompt(row, t.block_size, self.stream_id(2 * u64::from(self.requests_sent)));
                let session = (rows.len() > 1 || row.session.is_some()).then_some((job, 0));
                if session.is_some() {
                    self.sessions.insert(job, SessionState { id: job, turn: 0, content: Vec::new(), rows });
                }
                self.request(at, prompt, row.output_tokens, session, public)
            }
        };
        self.jobs_started += 1;
        if !matches!(self.spec.load, Load::Concurrency(_)) {
            self.last_open_start = at;
        }
        self.pending.push(at, spec);
        true
    }

    /// Schedules turn `turn + 1` of session `sid` after think time. False when the session is over.
    fn next_turn(&mut self, sid: u32, now: SimTime, done_content: &[Segment]) -> bool {
        if self.requests_sent >= self.max_requests {
            return false;
        }
        let source = self.spec.source.clone();
        let Some(state) = self.sessions.get_mut(&sid) else { return false };
        let turn = state.turn + 1;
        let (spec_at, prompt, output, public) = match &source {
            Source::Sessions(s) => {
                if turn >= s.turns {
                    return false;
                }
                // Next prompt: everything so far (prompt + generated output) plus new input.
                let mut prompt = done_content.to_vec();
                let input = s.new_input_tokens.sample(&mut self.lengths);
                let output = s.output_tokens.sample(&mut self.lengths);
                let id = mix2(self.content_seed, 2 * u64::from(self.requests_sent));
                prompt.push(Segment { id, len: input });
                // The last turn's new input and output are its own; earlier turns' are embedded
                // by the next turn.
                let public = if turn + 1 < s.turns {
                    ALL_SHARED
                } else {
                    u32::try_from(crate::content::total_len(done_content)).unwrap_or(ALL_SHARED)
                };
                (now + s.think_time, prompt, output, public)
            }
            Source::Trace(t) => {
                let Some(&index) = state.rows.get(turn as usize) else { return false };
                let Some(row) = t.rows.get(index) else { return false };
                let public = t.public_tokens.get(index).copied().unwrap_or(ALL_SHARED);
                let id = mix2(self.content_seed, 2 * u64::from(self.requests_sent));
                let prompt = trace_prompt(row, t.block_size, id);
                let delay = row.delay.unwrap_or(SimDur::ZERO);
                let out = row.output_tokens;
                let at = now + self.scaled(delay);
                (at, prompt, out, public)
            }
            Source::Synthetic { .. } => return false,
        };
        let Some(state) = self.sessions.get_mut(&sid) else { return false };
        state.turn = turn;
        state.content.clone_from(&prompt);
        let id = state.id;
        let spec = self.request(spec_at, prompt, output, Some((id, turn)), public);
        self.pending.push(spec_at, spec);
        true
    }

    fn stream_id(&self, n: u64) -> u64 {
        mix2(self.content_seed, n)
    }

    fn request(
        &mut self,
        at: SimTime,
        prompt: Vec<Segment>,
        output: u32,
        session: Option<(u32, u32)>,
        public_tokens: u32,
    ) -> RequestSpec {
        let n = u64::from(self.requests_sent);
        self.requests_sent += 1;
        RequestSpec {
            arrival: at,
            prompt,
            output_tokens: output.max(1),
            output_stream: mix2(self.content_seed, 2 * n + 1),
            session,
            public_tokens: if self.spec.all_content_shared { ALL_SHARED } else { public_tokens },
        }
    }
}

/// Groups trace rows into jobs: rows of one session form one job (turns in file order); other
/// rows are jobs of one request. Jobs are ordered by their first row's timestamp (stable).
fn trace_jobs(t: &Trace) -> Vec<Vec<usize>> {
    let mut jobs: Vec<Vec<usize>> = Vec::new();
    let mut by_session: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, r) in t.rows.iter().enumerate() {
        match r.session {
            Some(s) => match by_session.get(&s) {
                Some(&j) => jobs[j].push(i),
                None => {
                    by_session.insert(s, jobs.len());
                    jobs.push(vec![i]);
                }
            },
            None => jobs.push(vec![i]),
        }
    }
    jobs.sort_by_key(|j| j.first().map_or(SimDur::ZERO, |r| t.rows[*r].timestamp));
    jobs
}

/// A trace row's prompt: one segment per `hash_ids` entry (the last one may be partial), then
/// unique content for any tokens the ids do not cover.
fn trace_prompt(row: &TraceRow, block_size: u32, unique: u64) -> Vec<Segment> {
    let mut out = Vec::with_capacity(row.hash_ids.len() + 1);
    let mut left = row.input_tokens;
    for h in &row.hash_ids {
        if left == 0 {
            break;
        }
        let len = left.min(block_size);
        out.push(Segment { id: mix2(TRACE_NAMESPACE, *h), len });
        left -= len;
    }
    if left > 0 {
        out.push(Segment { id: unique, len: left });
    }
    out
}

/// Collects all arrival times of an open-loop spec (for tests and charts of offered load).
#[must_use]
pub fn arrival_times(spec: &TrafficSpec, root_seed: u64) -> Vec<SimTime> {
    let mut t = Traffic::new(spec.clone(), root_seed);
    let mut out = Vec::new();
    while let Some(at) = t.next_arrival() {
        if let Some(r) = t.pop_due(at) {
            out.push(r.arrival);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeSet;

    fn spec(load: Load, n: u32) -> TrafficSpec {
        TrafficSpec {
            source: Source::Synthetic {
                input_tokens: LengthDist::Fixed(100),
                output_tokens: LengthDist::Fixed(10),
                shared_prefix_tokens: 0,
                prompt_pool: 0,
            },
            load,
            stop: Stop { max_requests: n, max_sessions: u32::MAX },
            all_content_shared: false,
        }
    }

    #[test]
    fn constant_rate_is_evenly_spaced() {
        let times = arrival_times(&spec(Load::ConstantRate(4.0), 5), 1);
        let ns: Vec<u64> = times.iter().map(|t| t.as_ns()).collect();
        assert_eq!(ns, [0, 250_000_000, 500_000_000, 750_000_000, 1_000_000_000]);
    }

    #[test]
    fn frontend_delays_vary_around_their_mean_and_leave_arrivals_alone() {
        // Poisson arrivals faster than the frontend's delay: each request leaves the frontend
        // between 0 and 2 × 50 ms after it arrives, 50 ms on average, and the arrival process
        // is the one the traffic has without a frontend.
        let s = spec(Load::Poisson(100.0), 4000);
        let mean = SimDur::from_ms(50);
        let mut t = Traffic::with_frontend(s.clone(), 7, mean);
        let (mut arrivals, mut delays) = (Vec::new(), Vec::new());
        while let Some(now) = t.next_arrival() {
            while let Some(r) = t.pop_due(now) {
                delays.push((now - r.arrival).as_ms_f64());
                arrivals.push(r.arrival);
            }
        }
        arrivals.sort_unstable();
        assert_eq!(arrivals, arrival_times(&s, 7));
        assert!(delays.iter().all(|d| (0.0..=100.0).contains(d)), "{delays:?}");
        let m = delays.iter().sum::<f64>() / delays.len() as f64;
        assert!((m - 50.0).abs() < 2.0, "mean delay {m} ms");
        // Not a constant: about half of them lie within 25 ms of either end.
        let edges = delays.iter().filter(|d| **d < 25.0 || **d > 75.0).count();
        assert!(edges * 3 > delays.len(), "{edges} of {}", delays.len());
    }

    #[test]
    fn poisson_rate_and_gamma_burstiness() {
        let n = 20_000;
        let mean_gap = |t: &[SimTime]| t.last().unwrap().as_ms_f64() / (t.len() - 1) as f64;
        let cv_of = |t: &[SimTime]| {
            let gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]).as_ms_f64()).collect();
            let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let v = gaps.iter().map(|g| (g - m) * (g - m)).sum::<f64>() / gaps.len() as f64;
            v.sqrt() / m
        };
        let p = arrival_times(&spec(Load::Poisson(10.0), n), 3);
        assert!((mean_gap(&p) - 100.0).abs() < 3.0);
        assert!((cv_of(&p) - 1.0).abs() < 0.05);
        let g = arrival_times(&spec(Load::Gamma { rate: 10.0, cv: 3.0 }, n), 3);
        assert!((mean_gap(&g) - 100.0).abs() < 8.0, "gamma mean gap {}", mean_gap(&g));
        assert!((cv_of(&g) - 3.0).abs() < 0.3, "gamma cv {}", cv_of(&g));
    }

    #[test]
    fn concurrency_sends_the_first_wave_at_zero_then_on_completion() {
        let mut t = Traffic::new(spec(Load::Concurrency(3), 5), 9);
        let mut first = Vec::new();
        while let Some(r) = t.pop_due(SimTime::ZERO) {
            first.push(r);
        }
        assert_eq!(first.len(), 3);
        assert!(t.next_arrival().is_none());
        t.on_request_done(SimTime::from_ns(50), None, &[]);
        assert_eq!(t.next_arrival(), Some(SimTime::from_ns(50)));
        t.on_request_done(SimTime::from_ns(60), None, &[]);
        t.on_request_done(SimTime::from_ns(70), None, &[]); // Beyond the stop rule: ignored.
        assert_eq!(t.generated(), 5);
    }

    fn session_spec(turns: u32, ratio: f64) -> TrafficSpec {
        TrafficSpec {
            source: Source::Sessions(SessionSpec {
                new_input_tokens: LengthDist::Fixed(100),
                output_tokens: LengthDist::Fixed(10),
                turns,
                shared_prefix_ratio: ratio,
                prefix_groups: 0,
                think_time: SimDur::from_ms(500),
            }),
            load: Load::Concurrency(2),
            stop: Stop { max_requests: u32::MAX, max_sessions: 3 },
            all_content_shared: false,
        }
    }

    #[test]
    fn sessions_send_the_next_turn_after_think_time_with_the_history_as_prefix() {
        let mut t = Traffic::new(session_spec(3, 0.5), 1);
        assert_eq!(t.total(), 9);
        let a = t.pop_due(SimTime::ZERO).unwrap();
        let b = t.pop_due(SimTime::ZERO).unwrap();
        assert!(t.pop_due(SimTime::ZERO).is_none(), "two sessions in flight");
        assert_eq!((a.session, b.session), (Some((0, 0)), Some((1, 0))));
        // Both first turns share a 50-token prefix (one prefix group).
        assert_eq!(a.prompt[0], b.prompt[0]);
        assert_eq!(a.prompt[0].len, 50);
        // Turn 0 of session 0 ends at 1 s having generated 10 tokens.
        let mut done = a.prompt.clone();
        done.push(Segment { id: a.output_stream, len: 10 });
        t.on_request_done(SimTime::from_ms(1000), a.session, &done);
        assert_eq!(t.next_arrival(), Some(SimTime::from_ms(1500)));
        let next = t.pop_due(SimTime::from_ms(1500)).unwrap();
        assert_eq!(next.session, Some((0, 1)));
        assert_eq!(next.input_tokens(), 100 + 10 + 100);
        assert_eq!(next.prompt[..done.len()], done[..]);
    }

    #[test]
    fn each_source_states_the_content_other_requests_may_share() {
        // Multi-turn: every turn but the last is embedded by the next one; the last shares
        // only the history it was given.
        let mut t = Traffic::new(session_spec(2, 0.5), 1);
        let a = t.pop_due(SimTime::ZERO).unwrap();
        assert_eq!(a.public_tokens, ALL_SHARED);
        let mut done = a.prompt.clone();
        done.push(Segment { id: a.output_stream, len: 10 });
        t.pop_due(SimTime::ZERO).unwrap();
        t.on_request_done(SimTime::from_ms(1000), a.session, &done);
        let last = t.pop_due(SimTime::from_ms(1500)).unwrap();
        assert_eq!(last.session, Some((0, 1)));
        assert_eq!(last.public_tokens, 110, "the first turn's prompt and output");
        // A lone turn shares its group prefix.
        let mut t = Traffic::new(session_spec(1, 0.5), 1);
        assert_eq!(t.pop_due(SimTime::ZERO).unwrap().public_tokens, 50);
        // Independent requests share the common system prompt only.
        let mut s = spec(Load::ConstantRate(1.0), 1);
        if let Source::Synthetic { shared_prefix_tokens, .. } = &mut s.source {
            *shared_prefix_tokens = 30;
        }
        assert_eq!(Traffic::new(s.clone(), 1).pop_due(SimTime::ZERO).unwrap().public_tokens, 30);
        // Indexing everything is one switch away.
        s.all_content_shared = true;
        assert_eq!(Traffic::new(s, 1).pop_due(SimTime::ZERO).unwrap().public_tokens, ALL_SHARED);
    }

    #[test]
    fn a_finished_session_frees_its_slot() {
        let mut t = Traffic::new(session_spec(1, 0.0), 1);
        let a = t.pop_due(SimTime::ZERO).unwrap();
        let _b = t.pop_due(SimTime::ZERO).unwrap();
        t.on_request_done(SimTime::from_ms(10), a.session, &a.prompt);
        let c = t.pop_due(SimTime::from_ms(10)).unwrap();
        assert_eq!(c.session, Some((2, 0)));
        t.on_request_done(SimTime::from_ms(20), c.session, &c.prompt);
        assert!(t.next_arrival().is_none(), "max_sessions reached");
    }

    fn trace() -> Arc<Trace> {
        let row = |ts: u64, session: Option<u32>, ids: Vec<u64>, input: u32, delay: Option<u64>| TraceRow {
            timestamp: SimDur::from_ms(ts),
            session,
            input_tokens: input,
            output_tokens: 5,
            hash_ids: ids,
            delay: delay.map(SimDur::from_ms),
        };
        Arc::new(Trace::new(
            vec![
                row(0, None, vec![1, 2], 1000, None),
                row(100, Some(7), vec![1, 3], 600, None),
                row(0, Some(7), vec![1, 3, 4], 1200, Some(50)),
                row(300, None, vec![], 64, None),
            ],
            512,
        ))
    }

    #[test]
    fn a_trace_row_shares_the_ids_another_row_starts_with() {
        let t = trace();
        // Rows 0-2 all start with id 1; rows 1 and 2 also share id 3, of which row 1 uses 88
        // tokens and row 2 a whole block (overstated for row 2, which is safe). Row 3 has no ids.
        assert_eq!(t.public_tokens, vec![512, 600, 1024, 0]);
        let mut traffic = Traffic::new(
            TrafficSpec {
                source: Source::Trace(t),
                load: Load::TraceTimestamps { speedup: 1.0 },
                stop: Stop { max_requests: u32::MAX, max_sessions: u32::MAX },
                all_content_shared: false,
            },
            1,
        );
        let first = traffic.pop_due(SimTime::ZERO).unwrap();
        assert_eq!((first.input_tokens(), first.public_tokens), (1000, 512));
    }

    #[test]
    fn trace_timestamps_with_speedup_and_session_delays() {
        let spec = TrafficSpec {
            source: Source::Trace(trace()),
            load: Load::TraceTimestamps { speedup: 2.0 },
            stop: Stop { max_requests: u32::MAX, max_sessions: u32::MAX },
            all_content_shared: false,
        };
        let mut t = Traffic::new(spec, 1);
        assert_eq!(t.total(), 4);
        let r0 = t.pop_due(SimTime::ZERO).unwrap();
        assert_eq!(r0.prompt.iter().map(|s| s.len).collect::<Vec<_>>(), [512, 488]);
        let r1 = t.pop_due(SimTime::from_ms(50)).unwrap();
        assert_eq!(r1.session, Some((1, 0)));
        // The first 512-token block is the same content in both rows.
        assert_eq!(r0.prompt[0], r1.prompt[0]);
        assert_eq!(t.next_arrival(), Some(SimTime::from_ms(150)));
        // The session's second turn arrives 50 ms / 2 after its first completes.
        t.on_request_done(SimTime::from_ms(120), r1.session, &r1.prompt);
        assert_eq!(t.next_arrival(), Some(SimTime::from_ms(145)));
        let r2 = t.pop_due(SimTime::from_ms(145)).unwrap();
        assert_eq!(r2.session, Some((1, 1)));
        assert_eq!(r2.input_tokens(), 1200);
        let r3 = t.pop_due(SimTime::from_ms(150)).unwrap();
        assert_eq!(r3.input_tokens(), 64);
        assert!(t.next_arrival().is_none());
    }

    #[test]
    fn length_distributions_respect_their_bounds() {
        let mut r = Rng::new(5);
        let d = LengthDist::LogNormal { mean: 1000.0, std: 800.0, min: 10, max: 4000 };
        let xs: Vec<u32> = (0..10_000).map(|_| d.sample(&mut r)).collect();
        assert!(xs.iter().all(|x| (10..=4000).contains(x)));
        let u = LengthDist::Uniform { min: 3, max: 5 };
        assert!((0..1000).map(|_| u.sample(&mut r)).all(|x| (3..=5).contains(&x)));
    }

    #[test]
    fn a_prompt_pool_repeats_each_prompt_once_a_pass_in_a_fresh_order() {
        let mut s = spec(Load::ConstantRate(1.0), 12);
        if let Source::Synthetic { input_tokens, prompt_pool, .. } = &mut s.source {
            *input_tokens = LengthDist::Uniform { min: 50, max: 500 };
            *prompt_pool = 4;
        }
        let mut t = Traffic::new(s.clone(), 7);
        let mut got = Vec::new();
        while let Some(at) = t.next_arrival() {
            if let Some(r) = t.pop_due(at) {
                got.push(r);
            }
        }
        assert_eq!(got.len(), 12);
        // Every pass of 4 requests takes each of the 4 prompts once; a prompt keeps its length.
        let mut lengths = BTreeMap::new();
        let passes: Vec<Vec<u64>> = got
            .chunks(4)
            .map(|pass| {
                let mut ids: Vec<u64> = pass.iter().map(|r| r.prompt[0].id).collect();
                for r in pass {
                    assert_eq!(*lengths.entry(r.prompt[0].id).or_insert(r.prompt[0].len), r.prompt[0].len);
                    // The whole prompt may be another request's; the output is its own.
                    assert_eq!(r.public_tokens, r.prompt[0].len);
                }
                let order = ids.clone();
                ids.sort_unstable();
                ids.dedup();
                assert_eq!(ids.len(), 4, "a pass repeats a prompt");
                order
            })
            .collect();
        assert_eq!(lengths.len(), 4);
        assert!(passes[0] != passes[1] || passes[1] != passes[2], "the order is reshuffled each pass");
        // Outputs are never shared, and one seed gives one sequence.
        let outputs: BTreeSet<u64> = got.iter().map(|r| r.output_stream).collect();
        assert_eq!(outputs.len(), 12);
        let again: Vec<u64> = {
            let mut t = Traffic::new(s, 7);
            core::iter::from_fn(|| t.next_arrival().map(|at| t.pop_due(at)))
                .flatten()
                .map(|r| r.prompt[0].id)
                .collect()
        };
        assert_eq!(again, got.iter().map(|r| r.prompt[0].id).collect::<Vec<_>>());
        // A pool larger than the run never repeats a prompt (and holds one entry a request).
        let mut big = spec(Load::ConstantRate(1.0), 12);
        if let Source::Synthetic { prompt_pool, .. } = &mut big.source {
            *prompt_pool = 10_000_000;
        }
        let t = Traffic::new(big.clone(), 7);
        assert_eq!(t.pool.as_ref().map(|p| p.entries.len()), Some(12));
        let ids: BTreeSet<u64> = {
            let mut t = Traffic::new(big, 7);
            core::iter::from_fn(|| t.next_arrival().map(|at| t.pop_due(at)))
                .flatten()
                .map(|r| r.prompt[0].id)
                .collect()
        };
        assert_eq!(ids.len(), 12);
    }
}
