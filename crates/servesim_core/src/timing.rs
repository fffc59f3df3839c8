//! The boundary between the scheduler and performance models: how long one forward step takes.
//!
//! A step is described per attention-DP rank as the prefill chunks it runs (new tokens on top
//! of a cached or already-computed context) and the decode requests it advances (one token
//! each, on top of their KV). Performance models (`servesim_perf`) implement [`StepTimer`].

use alloc::string::String;
use alloc::vec::Vec;

use crate::units::SimDur;

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
    /// Decode requests (one new token each).
    pub decode_requests: u32,
    /// Sum over decode requests of their KV length including the new token.
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

/// Times forward steps of one worker role.
pub trait StepTimer {
    /// Duration of one step in which rank `i` does `ranks[i]`. With attention data
    /// parallelism the ranks run in lockstep, so the step ends when the slowest rank does.
    ///
    /// # Errors
    /// When the model cannot time this step; the run then fails with the message.
    fn step_time(&mut self, ranks: &[RankLoad]) -> Result<SimDur, TimingError>;

    /// A description of the model and its lookups so far, for reports.
    fn report(&self) -> Option<TimerReport> {
        None
    }
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
