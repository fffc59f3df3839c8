//! Traffic: which requests arrive, and when.
//!
//! A [`Traffic`] owns the arrival process and hands the simulation every request due at the
//! current time. Closed-loop loads (`concurrency`) create the next request when one finishes;
//! open-loop loads (`poisson`, `constant_rate`, `gamma`) draw inter-arrival gaps lazily, one
//! request ahead, so memory does not grow with the number of requests.

use alloc::collections::BTreeMap;
use alloc::string::String;
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
    /// For later turns of a session: delay after the previous turn completes. In a
    /// dependency graph ([`Trace::dag`]): delay after the last of `wait_for` completes (an
    /// agentic trace's `delay` plus its `tool_wait_ms`).
    pub delay: Option<SimDur>,
    /// In a dependency graph: the rows (indices into [`Trace::rows`]) that must all complete
    /// before this one is sent; empty for a root, which starts at its timestamp.
    pub wait_for: Vec<u32>,
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
    /// The rows form a dependency graph (agentic Mooncake): every row is a request of its
    /// own, sent once the rows it waits for have completed, plus its delay; a row's session
    /// is its trajectory (for routing and records), not a chain of turns. Off: rows of one
    /// session are turns, each sent after the one before it.
    pub dag: bool,
    /// Each row's name in its file (agentic Mooncake's `request_id`), for per-request records;
    /// empty when the rows have none.
    pub request_ids: Vec<String>,
    /// When this trace is a seeded snapshot of another ([`Trace::snapshot`]): what the cut
    /// kept and dropped.
    pub snapshot: Option<Snapshot>,
    /// Requests sent at time zero before a dependency graph's replay (AgentX's warmup: a
    /// one-token primer of each conversation's last prompt before a snapshot's cut,
    /// [`Snapshot::primers`]). The replay starts when all of them have completed, its
    /// timestamps counted from then; they are not measured.
    pub warmup: Vec<TraceRow>,
}

impl Trace {
    /// A trace of `rows` whose `hash_ids` name `block_size`-token blocks.
    #[must_use]
    pub fn new(rows: Vec<TraceRow>, block_size: u32) -> Self {
        let public_tokens = shared_prefixes(&rows, block_size);
        Trace {
            rows,
            block_size,
            public_tokens,
            dag: false,
            request_ids: Vec::new(),
            snapshot: None,
            warmup: Vec::new(),
        }
    }

    /// This trace with `warmup` sent before its replay ([`Trace::warmup`]). A row's shared
    /// prefix ([`Trace::public_tokens`]) counts what the warmup's requests share with it too.
    #[must_use]
    pub fn with_warmup(mut self, warmup: Vec<TraceRow>) -> Self {
        let mut all = self.rows.clone();
        all.extend(warmup.iter().cloned());
        let mut public = shared_prefixes(&all, self.block_size);
        public.truncate(self.rows.len());
        self.public_tokens = public;
        self.warmup = warmup;
        self
    }

    /// A trace whose rows wait for each other ([`TraceRow::wait_for`]). The caller checks
    /// that the graph has no cycle and that every index is a row (a row in a cycle, or one
    /// that waits for a row past the end, is never sent).
    #[must_use]
    pub fn dag(rows: Vec<TraceRow>, block_size: u32) -> Self {
        Trace { dag: true, ..Trace::new(rows, block_size) }
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
        /// A dependency graph's lanes: at most this many plays ([`Trace::plays`]) at once, a
        /// play waiting for a free lane starting when one frees (its rows keeping their
        /// offsets from its first root), plays in the order of their first roots; 0: no limit.
        max_plays: u32,
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
    /// Open loops: the rate (jobs per second) from each time on, ascending; the load's own
    /// rate applies before the first. Empty: the load's rate throughout.
    pub rate_changes: Vec<(SimTime, f64)>,
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
/// Content-id namespace of warmup primers' own tails and outputs.
const WARMUP_NAMESPACE: u64 = 0x3A2A;

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
    /// Dependency bookkeeping, when replaying a dependency-graph trace.
    dag: Option<Dag>,
    /// Warmup requests ([`Trace::warmup`]) not yet completed: the replay waits for them.
    warmup_left: u32,
    /// When the replay's trace time zero falls: when its warmup completed (zero without one).
    replay_start: SimTime,
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
        let max_plays = match spec.load {
            Load::TraceTimestamps { max_plays, .. } => max_plays,
            _ => 0,
        };
        let trace_jobs = match &spec.source {
            Source::Trace(t) if t.dag && max_plays > 0 => dag_plays(t),
            Source::Trace(t) if t.dag => dag_roots(t),
            Source::Trace(t) => trace_jobs(t),
            Source::Synthetic { .. } | Source::Sessions(_) => Vec::new(),
        };
        let dag = match &spec.source {
            Source::Trace(t) if t.dag => Some(Dag::new(t, &trace_jobs, max_plays)),
            _ => None,
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
            dag,
            warmup_left: 0,
            replay_start: SimTime::ZERO,
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
                if !t.send_warmup() {
                    let at = t.trace_job_start(0);
                    t.start_job(at);
                }
            }
        }
        t
    }

    /// Sends a dependency graph's warmup requests at time zero; false when it has none.
    fn send_warmup(&mut self) -> bool {
        let Source::Trace(t) = &self.spec.source else { return false };
        if !t.dag || t.warmup.is_empty() {
            return false;
        }
        let t = Arc::clone(t);
        for (i, row) in t.warmup.iter().enumerate() {
            // The primer's covered blocks are the conversation's; its tail is its own.
            let tail = mix2(WARMUP_NAMESPACE ^ self.content_seed, i as u64);
            let prompt = trace_prompt(row, t.block_size, tail);
            let spec = RequestSpec {
                arrival: SimTime::ZERO,
                prompt,
                output_tokens: row.output_tokens.max(1),
                output_stream: mix2(WARMUP_NAMESPACE ^ self.content_seed, u64::MAX - i as u64),
                session: None,
                public_tokens: ALL_SHARED,
                warmup: true,
            };
            self.pending.push(SimTime::ZERO, spec);
        }
        self.warmup_left = u32::try_from(t.warmup.len()).unwrap_or(u32::MAX);
        true
    }

    /// Requests sent so far.
    #[must_use]
    pub fn generated(&self) -> u32 {
        self.requests_sent
    }

    /// Requests this traffic sends at most, warmup requests included.
    #[must_use]
    pub fn total(&self) -> u32 {
        let warmup = match &self.spec.source {
            Source::Trace(t) if t.dag => u32::try_from(t.warmup.len()).unwrap_or(u32::MAX),
            _ => 0,
        };
        self.max_requests.saturating_add(warmup)
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
            // Open loops start the next job when this one's first request arrives (a graph's
            // jobs are its roots).
            let first_of_job = match (&self.dag, &self.spec.source, spec.session) {
                _ if spec.warmup => false,
                (Some(dag), Source::Trace(t), Some(key)) => dag.opens_job(key, t, &self.trace_jobs),
                _ => spec.session.is_none_or(|(_, turn)| turn == 0),
            };
            if first_of_job && !matches!(self.spec.load, Load::Concurrency(_)) {
                let lanes_full = self.dag.as_mut().is_some_and(Dag::wait_for_lane);
                let next = match self.spec.load {
                    Load::TraceTimestamps { .. } if lanes_full => None,
                    // A play that waited for its lane may open after the next one's timestamp.
                    Load::TraceTimestamps { .. } => {
                        Some(self.trace_job_start(self.jobs_started as usize).max(at))
                    }
                    _ if !self.spec.rate_changes.is_empty() => {
                        self.scheduled_start(self.last_open_start.max(at))
                    }
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
    /// `content` are that request's session and its prompt plus generated tokens, `warmup`
    /// its [`RequestSpec::warmup`].
    pub fn on_request_done(
        &mut self,
        now: SimTime,
        (session, warmup): (Option<(u32, u32)>, bool),
        content: &[Segment],
    ) {
        if warmup {
            // The last warmup request to complete starts the replay.
            self.warmup_left = self.warmup_left.saturating_sub(1);
            if self.warmup_left == 0 {
                self.replay_start = now;
                let at = self.trace_job_start(0);
                self.start_job(at);
            }
            return;
        }
        if self.dag.is_some() {
            // A closed loop over a graph starts the next root when a request nothing waits
            // for (a leaf) finishes.
            let leaf = self.release_dependents(now, session);
            if leaf && matches!(self.spec.load, Load::Concurrency(_)) {
                self.start_job(now);
            }
            self.free_lane(now, session);
            return;
        }
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

    /// The next open-loop job start after `from` under a rate schedule: a gap of unit mean
    /// (exponential, constant or gamma) is the work to do at the rate in force, carried across
    /// rate changes (a non-homogeneous process by time rescaling).
    fn scheduled_start(&mut self, from: SimTime) -> Option<SimTime> {
        let (base, mut work) = match self.spec.load {
            Load::Poisson(rate) => (rate, self.arrivals.exponential(1.0)),
            Load::ConstantRate(rate) => (rate, 1.0),
            Load::Gamma { rate, cv } => (rate, self.arrivals.gamma(1.0 / (cv * cv), cv * cv)),
            Load::Concurrency(_) | Load::TraceTimestamps { .. } => return None,
        };
        let changes = &self.spec.rate_changes;
        let mut t = from;
        let mut k = changes.partition_point(|c| c.0 <= t);
        loop {
            let rate = if k == 0 { base } else { changes[k - 1].1 };
            let Some(&(end, _)) = changes.get(k) else {
                return Some(t + SimDur::from_secs_f64(work / rate));
            };
            let span = end.since(t).as_secs_f64() * rate;
            if work <= span {
                return Some(t + SimDur::from_secs_f64(work / rate));
            }
            work -= span;
            t = end;
            k += 1;
        }
    }

    fn speedup(&self) -> f64 {
        match self.spec.load {
            Load::TraceTimestamps { speedup, .. } if speedup > 0.0 => speedup,
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
        self.replay_start + row.map_or(SimDur::ZERO, |r| self.scaled(r.timestamp))
    }

    /// Starts the next job at `at`. False when the stop rules allow no more.
    fn start_job(&mut self, at: SimTime) -> bool {
        if self.jobs_started >= self.spec.stop.max_sessions || self.requests_sent >= self.max_requests {
            return false;
        }
        let job = self.jobs_started;
        if self.dag.as_ref().is_some_and(Dag::in_lanes) {
            return self.start_play(at);
        }
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
                let session = match &self.dag {
                    Some(dag) => dag.key(first),
                    None => (rows.len() > 1 || row.session.is_some()).then_some((job, 0)),
                };
                if session.is_some() && self.dag.is_none() {
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
            warmup: false,
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

mod dag;
mod snapshot;

use dag::{dag_plays, dag_roots, Dag};
pub use snapshot::Snapshot;

#[cfg(test)]
mod tests;
