//! The boundary between the scheduler and performance models: how long one forward step takes.
//!
//! A step is described per attention-DP rank as the prefill chunks it runs (new tokens on top
//! of a cached or already-computed context) and the decode requests it advances (one token
//! each, on top of their KV). Performance models (`servesim_perf`) implement [`StepTimer`].

use alloc::string::String;
use alloc::vec::Vec;

use crate::units::{SimDur, SimTime};

/// A prefill chunk within a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillChunk {
    /// Tokens computed in this step.
    pub new_tokens: u32,
    /// Tokens already in KV before the chunk (prefix-cache hits and earlier chunks).
    pub context_tokens: u32,
}

/// The work one attention-DP rank does in a step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankLoad {
    /// Prefill chunks, in scheduling order.
    pub prefill: Vec<PrefillChunk>,
    /// Decode query rows: one per decode request, or 1 + its draft tokens under speculative
    /// decoding (each verified position is a query).
    pub decode_requests: u32,
    /// Sum over decode query rows of the keys each sees (its KV length including itself).
    pub decode_kv_tokens: u64,
}

impl RankLoad {
    /// Clears the load while keeping its allocation.
    pub fn clear(&mut self) {
        self.prefill.clear();
        self.decode_requests = 0;
        self.decode_kv_tokens = 0;
    }

    /// True when the rank does nothing this step.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.prefill.is_empty() && self.decode_requests == 0
    }

    /// New tokens this step (prefill tokens plus one per decode request).
    #[must_use]
    pub fn new_tokens(&self) -> u64 {
        self.prefill.iter().map(|c| u64::from(c.new_tokens)).sum::<u64>() + u64::from(self.decode_requests)
    }
}

/// What a step is, for accounting: decode-only, prompts beside decodes, or prompts only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// Only decode rows.
    Decode,
    /// Prefill chunks and decode rows in one step.
    Mixed,
    /// Only prefill chunks.
    Prefill,
}

impl StepKind {
    /// Every kind, in report order.
    pub const ALL: [StepKind; 3] = [StepKind::Decode, StepKind::Mixed, StepKind::Prefill];

    /// The kind of a step in which the ranks do `loads` (`None` when nothing is done).
    #[must_use]
    pub fn of(loads: &[RankLoad]) -> Option<StepKind> {
        let prefill = loads.iter().any(|l| !l.prefill.is_empty());
        let decode = loads.iter().any(|l| l.decode_requests > 0);
        match (prefill, decode) {
            (false, false) => None,
            (false, true) => Some(StepKind::Decode),
            (true, true) => Some(StepKind::Mixed),
            (true, false) => Some(StepKind::Prefill),
        }
    }

    /// Its name in reports.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            StepKind::Decode => "decode",
            StepKind::Mixed => "mixed",
            StepKind::Prefill => "prefill",
        }
    }
}

/// Sums over the steps of one kind a worker ran: their time and the work in them, from
/// which a typical step of the kind is laid out ([`StepTally::typical`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTally {
    /// Steps.
    pub steps: u64,
    /// Time in them (ns).
    pub busy_ns: u64,
    /// Busy ranks summed over the steps (an attention-DP rank with no work is not busy).
    pub busy_ranks: u64,
    /// Decode query rows.
    pub decode_rows: u64,
    /// Keys the decode rows saw.
    pub decode_kv_tokens: u64,
    /// Prefill chunks.
    pub prefill_chunks: u64,
    /// Prefill tokens computed.
    pub prefill_tokens: u64,
    /// Tokens already in KV before each prefill chunk, summed.
    pub prefill_context_tokens: u64,
}

impl StepTally {
    /// Counts one step of `busy_ns` in which the ranks did `loads`.
    pub fn add(&mut self, loads: &[RankLoad], busy_ns: u64) {
        self.steps += 1;
        self.busy_ns += busy_ns;
        for l in loads.iter().filter(|l| !l.is_empty()) {
            self.busy_ranks += 1;
            self.decode_rows += u64::from(l.decode_requests);
            self.decode_kv_tokens += l.decode_kv_tokens;
            self.prefill_chunks += l.prefill.len() as u64;
            for c in &l.prefill {
                self.prefill_tokens += u64::from(c.new_tokens);
                self.prefill_context_tokens += u64::from(c.context_tokens);
            }
        }
    }

    /// Adds `other`'s counts (another worker's steps of the same kind).
    pub fn merge(&mut self, other: &StepTally) {
        let StepTally {
            steps,
            busy_ns,
            busy_ranks,
            decode_rows,
            decode_kv_tokens,
            prefill_chunks,
            prefill_tokens,
            prefill_context_tokens,
        } = *other;
        self.steps += steps;
        self.busy_ns += busy_ns;
        self.busy_ranks += busy_ranks;
        self.decode_rows += decode_rows;
        self.decode_kv_tokens += decode_kv_tokens;
        self.prefill_chunks += prefill_chunks;
        self.prefill_tokens += prefill_tokens;
        self.prefill_context_tokens += prefill_context_tokens;
    }

    /// The typical step: as many busy ranks as the steps had on average, each with the
    /// mean work of a busy rank (its mean chunk repeated, its mean decode batch at the mean
    /// KV length); empty when no step was counted.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // Means of u32 quantities fit in u32.
    pub fn typical(&self) -> Vec<RankLoad> {
        if self.steps == 0 || self.busy_ranks == 0 {
            return Vec::new();
        }
        let mean = |sum: u64, n: u64| (sum + n / 2).checked_div(n).unwrap_or(0);
        let ranks = mean(self.busy_ranks, self.steps).max(1);
        let chunks =
            if self.prefill_chunks > 0 { mean(self.prefill_chunks, self.busy_ranks).max(1) } else { 0 };
        let chunk = PrefillChunk {
            new_tokens: mean(self.prefill_tokens, self.prefill_chunks).max(1) as u32,
            context_tokens: mean(self.prefill_context_tokens, self.prefill_chunks) as u32,
        };
        let rows = if self.decode_rows > 0 { mean(self.decode_rows, self.busy_ranks).max(1) } else { 0 };
        let load = RankLoad {
            prefill: alloc::vec![chunk; chunks as usize],
            decode_requests: rows as u32,
            decode_kv_tokens: mean(self.decode_kv_tokens, self.decode_rows) * rows,
        };
        alloc::vec![load; ranks as usize]
    }
}

/// Micro-batch `m` of `stages` of one rank's load, as a pipeline-parallel engine splits a
/// batch (vLLM keeps `pipeline` batches in flight, each with its own requests): prefill
/// chunks and decode requests dealt round-robin, decode KV shared in proportion.
pub fn micro_batch(load: &RankLoad, stages: u32, m: u32, out: &mut RankLoad) {
    out.clear();
    let stages = stages.max(1);
    out.prefill.extend(load.prefill.iter().skip(m as usize).step_by(stages as usize).copied());
    let n = load.decode_requests;
    let mine = n.saturating_sub(m).div_ceil(stages);
    out.decode_requests = mine;
    if n > 0 {
        out.decode_kv_tokens = load.decode_kv_tokens * u64::from(mine) / u64::from(n);
    }
}

/// Seconds of one step of a `stages`-deep pipeline, from `stage_seconds` (one stage's time
/// for a load). With a micro-batch per stage in flight, every request advances one token per
/// cycle, and a cycle lasts as long as the largest micro-batch takes to cross every stage
/// (`stages` × its stage time, which bounds the busiest stage's work too). One request alone
/// therefore crosses the whole model: pipelining adds throughput, never single-request speed.
pub fn pipelined_seconds(
    ranks: &[RankLoad],
    stages: u32,
    stage_seconds: &mut dyn FnMut(&[RankLoad]) -> f64,
) -> f64 {
    if stages <= 1 {
        return stage_seconds(ranks);
    }
    let mut micro: Vec<RankLoad> = ranks.iter().map(|_| RankLoad::default()).collect();
    let mut worst = 0.0f64;
    for m in 0..stages {
        for (r, out) in ranks.iter().zip(micro.iter_mut()) {
            micro_batch(r, stages, m, out);
        }
        if micro.iter().all(RankLoad::is_empty) {
            break;
        }
        worst = worst.max(stage_seconds(&micro));
    }
    f64::from(stages) * worst
}

/// A performance model could not time a step (e.g. outside its measured domain).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimingError {
    /// What was asked and why it cannot be answered.
    pub message: String,
}

impl core::fmt::Display for TimingError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What a timer reports about itself after a run: which model, which data, and how its
/// lookups were answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimerReport {
    /// Model name (`op_level`, `roofline`, `fpm`, ...).
    pub model: String,
    /// Data the model used (e.g. table set and version), empty when none.
    pub data: String,
    /// Lookups per op kind: `[measured, interpolated, extrapolated, roofline]`.
    pub lookups: Vec<(String, [u64; 4])>,
}

/// A step's seconds split by what they are spent on (op kinds, then the calibrated costs
/// outside the kernel tables), in a stable order; the parts add up to the step's time.
pub type StepBreakdown = Vec<(&'static str, f64)>;

/// Times forward steps of one worker role.
pub trait StepTimer {
    /// Duration of one step in which rank `i` does `ranks[i]`. With attention data
    /// parallelism the ranks run in lockstep, so the step ends when the slowest rank does.
    ///
    /// # Errors
    /// When the model cannot time this step; the run then fails with the message.
    fn step_time(&mut self, ranks: &[RankLoad]) -> Result<SimDur, TimingError>;

    /// Extends a run of decode-only steps of an unchanged batch. `loads` is the run's last
    /// step so far, which ends at the last element of `ends`; each following step decodes
    /// the same requests with one more KV token each. Pushes the following steps' ends until
    /// `ends` holds `max_steps` or the next step would end after `max_end`.
    ///
    /// Every step must be timed exactly as [`StepTimer::step_time`] would time it (runs are
    /// fast-forwarded only because the result equals stepping one at a time); the default
    /// does just that. Timers override it to share the work that does not change from step
    /// to step.
    ///
    /// # Errors
    /// As [`StepTimer::step_time`].
    fn extend_decode_run(
        &mut self,
        loads: &[RankLoad],
        ends: &mut Vec<SimTime>,
        max_steps: usize,
        max_end: SimTime,
    ) -> Result<(), TimingError> {
        extend_decode_run_stepwise(self, loads, ends, max_steps, max_end)
    }

    /// A description of the model and its lookups so far, for reports.
    fn report(&self) -> Option<TimerReport> {
        None
    }

    /// The step [`StepTimer::step_time`] would time for `ranks`, split into its parts, for
    /// reports; `None` when the model has no parts to show (a whole-forward table). It does
    /// not count as a timed step (no lookups are tallied).
    fn breakdown(&mut self, _ranks: &[RankLoad]) -> Option<StepBreakdown> {
        None
    }
}

/// [`StepTimer::extend_decode_run`] one [`StepTimer::step_time`] call per step.
///
/// # Errors
/// As [`StepTimer::step_time`].
pub fn extend_decode_run_stepwise<T: StepTimer + ?Sized>(
    timer: &mut T,
    loads: &[RankLoad],
    ends: &mut Vec<SimTime>,
    max_steps: usize,
    max_end: SimTime,
) -> Result<(), TimingError> {
    let mut loads = loads.to_vec();
    push_run_steps(ends, max_steps, max_end, |_, _| {
        for load in &mut loads {
            load.decode_kv_tokens += u64::from(load.decode_requests);
        }
        timer.step_time(&loads)
    })
}

/// Appends step ends after the last of `ends`, each step lasting what `next_step` times (at
/// least 1 ns), until `ends` holds `max_steps` or the next step would end after `max_end`.
/// `next_step` is called once per step tried, including the one that would end too late, with
/// how many steps may still be pushed and the time left from the last end to `max_end` (a
/// timer may time steps ahead in batches).
///
/// # Errors
/// The first error `next_step` returns.
pub fn push_run_steps(
    ends: &mut Vec<SimTime>,
    max_steps: usize,
    max_end: SimTime,
    mut next_step: impl FnMut(usize, SimDur) -> Result<SimDur, TimingError>,
) -> Result<(), TimingError> {
    let Some(&last) = ends.last() else { return Ok(()) };
    let mut t = last;
    while ends.len() < max_steps {
        let next = t + step_dur(next_step(max_steps - ends.len(), max_end - t)?);
        if next > max_end {
            break;
        }
        ends.push(next);
        t = next;
    }
    Ok(())
}

/// A step's duration as scheduled: at least 1 ns, so a step's completion never lands in the
/// instant that scheduled it.
#[must_use]
pub fn step_dur(d: SimDur) -> SimDur {
    d.max(SimDur::from_ns(1))
}

/// A timer with constant prefill-token and decode-step costs, for hand-checkable tests.
#[derive(Clone, Debug)]
pub struct FixedTimer {
    /// Fixed cost of any non-empty step.
    pub step_overhead: SimDur,
    /// Cost per prefill token.
    pub per_prefill_token: SimDur,
    /// Cost per decode request.
    pub per_decode_request: SimDur,
}

impl StepTimer for FixedTimer {
    fn step_time(&mut self, ranks: &[RankLoad]) -> Result<SimDur, TimingError> {
        let mut worst = SimDur::ZERO;
        for r in ranks {
            if r.is_empty() {
                continue;
            }
            let prefill: u64 = r.prefill.iter().map(|c| u64::from(c.new_tokens)).sum();
            let ns = self.step_overhead.as_ns()
                + prefill * self.per_prefill_token.as_ns()
                + u64::from(r.decode_requests) * self.per_decode_request.as_ns();
            worst = worst.max(SimDur::from_ns(ns));
        }
        Ok(worst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipeline_micro_batches_deal_requests_round_robin() {
        let load = RankLoad {
            prefill: alloc::vec![
                PrefillChunk { new_tokens: 100, context_tokens: 0 },
                PrefillChunk { new_tokens: 50, context_tokens: 10 },
                PrefillChunk { new_tokens: 7, context_tokens: 0 },
            ],
            decode_requests: 5,
            decode_kv_tokens: 500,
        };
        let mut out = RankLoad::default();
        micro_batch(&load, 2, 0, &mut out);
        assert_eq!((out.prefill.len(), out.decode_requests, out.decode_kv_tokens), (2, 3, 300));
        micro_batch(&load, 2, 1, &mut out);
        assert_eq!((out.prefill.len(), out.decode_requests, out.decode_kv_tokens), (1, 2, 200));
        // Stage time proportional to tokens: the cycle is stages x the largest micro-batch.
        #[allow(clippy::cast_precision_loss)]
        let mut per_token = |r: &[RankLoad]| r.iter().map(|x| x.new_tokens() as f64).sum::<f64>();
        let two = pipelined_seconds(core::slice::from_ref(&load), 2, &mut per_token);
        assert!((two - 2.0 * 110.0).abs() < 1e-9, "{two}");
        // One request alone crosses every stage.
        let one = RankLoad { decode_requests: 1, decode_kv_tokens: 10, ..RankLoad::default() };
        assert!((pipelined_seconds(core::slice::from_ref(&one), 4, &mut per_token) - 4.0).abs() < 1e-9);
        assert!((pipelined_seconds(core::slice::from_ref(&one), 1, &mut per_token) - 1.0).abs() < 1e-9);
    }
}
