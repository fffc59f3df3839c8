//! Traffic: which requests arrive, and when.
//!
//! A [`Traffic`] owns the arrival process and hands the simulation every request due at the
//! current time. Closed-loop loads (`concurrency`) create the next request when one finishes;
//! open-loop loads (`poisson`, `constant_rate`, `gamma`) draw inter-arrival gaps lazily, one
//! request ahead, so memory does not grow with the number of requests.

use alloc::vec;
use alloc::vec::Vec;

use crate::content::Segment;
use crate::queue::EventQueue;
use crate::request::RequestSpec;
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

/// Where request contents come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Independent synthetic requests.
    Synthetic {
        /// Prompt length.
        input_tokens: LengthDist,
        /// Output length.
        output_tokens: LengthDist,
    },
}

/// How requests are paced.
#[derive(Clone, Debug, PartialEq)]
pub enum Load {
    /// Closed loop: this many requests in flight; a finished request is replaced at once.
    Concurrency(u32),
    /// Open loop, exponential gaps at this mean rate (requests per second).
    Poisson(f64),
    /// Open loop, equal gaps.
    ConstantRate(f64),
    /// Open loop, gamma-distributed gaps with this mean rate and coefficient of variation
    /// (`cv` > 1 is burstier than Poisson, < 1 more regular).
    Gamma {
        /// Mean requests per second.
        rate: f64,
        /// Coefficient of variation of the gaps.
        cv: f64,
    },
}

/// A complete traffic description.
#[derive(Clone, Debug, PartialEq)]
pub struct TrafficSpec {
    /// Contents.
    pub source: Source,
    /// Pacing.
    pub load: Load,
    /// Stop after this many requests have been sent.
    pub stop_requests: u32,
}

/// The live arrival process of a run.
pub struct Traffic {
    spec: TrafficSpec,
    lengths: Rng,
    arrivals: Rng,
    content_seed: u64,
    generated: u32,
    pending: EventQueue<RequestSpec>,
    last_open_arrival: SimTime,
}

impl Traffic {
    /// Starts the arrival process for `root_seed`.
    #[must_use]
    pub fn new(spec: TrafficSpec, root_seed: u64) -> Self {
        let mut t = Traffic {
            lengths: Rng::stream(root_seed, Stream::Lengths),
            arrivals: Rng::stream(root_seed, Stream::Arrivals),
            content_seed: Rng::stream(root_seed, Stream::Content).next_u64(),
            spec,
            generated: 0,
            pending: EventQueue::new(),
            last_open_arrival: SimTime::ZERO,
        };
        match t.spec.load {
            Load::Concurrency(c) => {
                for _ in 0..c.min(t.spec.stop_requests) {
                    t.generate(SimTime::ZERO);
                }
            }
            Load::Poisson(_) | Load::ConstantRate(_) | Load::Gamma { .. } => {
                if t.spec.stop_requests > 0 {
                    t.generate(SimTime::ZERO);
                }
            }
        }
        t
    }

    /// Requests sent so far.
    #[must_use]
    pub fn generated(&self) -> u32 {
        self.generated
    }

    /// Requests this traffic will send in total.
    #[must_use]
    pub fn total(&self) -> u32 {
        self.spec.stop_requests
    }

    /// When the next request arrives, if any is scheduled.
    #[must_use]
    pub fn next_arrival(&self) -> Option<SimTime> {
        self.pending.peek_time()
    }

    /// Takes the next request due at or before `now`.
    pub fn pop_due(&mut self, now: SimTime) -> Option<RequestSpec> {
        if self.pending.peek_time()? > now {
            return None;
        }
        let (_, spec) = self.pending.pop()?;
        if self.is_open_loop() && self.generated < self.spec.stop_requests {
            let gap = self.open_loop_gap();
            let t = self.last_open_arrival + gap;
            self.generate(t);
        }
        Some(spec)
    }

    /// Tells the traffic that a request finished (or was rejected) at `now`.
    pub fn on_request_done(&mut self, now: SimTime) {
        if matches!(self.spec.load, Load::Concurrency(_)) && self.generated < self.spec.stop_requests {
            self.generate(now);
        }
    }

    fn is_open_loop(&self) -> bool {
        !matches!(self.spec.load, Load::Concurrency(_))
    }

    fn open_loop_gap(&mut self) -> SimDur {
        match self.spec.load {
            Load::Poisson(rate) => SimDur::from_secs_f64(self.arrivals.exponential(1.0 / rate)),
            Load::ConstantRate(rate) => SimDur::from_secs_f64(1.0 / rate),
            Load::Gamma { rate, cv } => {
                // Gaps with mean 1/rate and std cv/rate: shape 1/cv², scale cv²/rate.
                let shape = 1.0 / (cv * cv);
                SimDur::from_secs_f64(self.arrivals.gamma(shape, cv * cv / rate))
            }
            Load::Concurrency(_) => SimDur::ZERO,
        }
    }

    fn generate(&mut self, at: SimTime) {
        let index = u64::from(self.generated);
        self.generated += 1;
        let spec = match &self.spec.source {
            Source::Synthetic { input_tokens, output_tokens } => {
                let input = input_tokens.sample(&mut self.lengths);
                let output = output_tokens.sample(&mut self.lengths);
                let prompt_stream = mix2(self.content_seed, 2 * index);
                RequestSpec {
                    arrival: at,
                    prompt: vec![Segment { id: prompt_stream, len: input }],
                    output_tokens: output,
                    output_stream: mix2(self.content_seed, 2 * index + 1),
                    session: None,
                }
            }
        };
        if self.is_open_loop() {
            self.last_open_arrival = at;
        }
        self.pending.push(at, spec);
    }
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

    fn spec(load: Load, n: u32) -> TrafficSpec {
        TrafficSpec {
            source: Source::Synthetic {
                input_tokens: LengthDist::Fixed(100),
                output_tokens: LengthDist::Fixed(10),
            },
            load,
            stop_requests: n,
        }
    }

    #[test]
    fn constant_rate_is_evenly_spaced() {
        let times = arrival_times(&spec(Load::ConstantRate(4.0), 5), 1);
        let ns: Vec<u64> = times.iter().map(|t| t.as_ns()).collect();
        assert_eq!(ns, [0, 250_000_000, 500_000_000, 750_000_000, 1_000_000_000]);
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
        t.on_request_done(SimTime::from_ns(50));
        assert_eq!(t.next_arrival(), Some(SimTime::from_ns(50)));
        t.on_request_done(SimTime::from_ns(60));
        t.on_request_done(SimTime::from_ns(70)); // Beyond the stop rule: ignored.
        assert_eq!(t.generated(), 5);
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
}
