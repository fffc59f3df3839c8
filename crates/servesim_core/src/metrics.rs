//! Metrics with the incumbents' exact definitions (REF §2.1):
//!
//! - only completed requests count; `duration` is the latest last-token time;
//! - TTFT = first token − arrival; E2E = last token − arrival; TTST = second − first token;
//! - TPOT is one value per request with at least two tokens: (last − first) / (n − 1);
//! - ITL is every inter-token gap (long outputs weigh more); per-user throughput is
//!   1000 / gap for each positive gap;
//! - percentiles are nearest rank at index `round((n − 1) · p / 100)`; std is the population std;
//! - goodput counts requests meeting every SLA bound (inclusive).

use alloc::vec::Vec;

use crate::request::{Request, Status, NEVER};
use crate::units::{SimDur, SimTime, NS_PER_MS};

/// Summary statistics of one metric.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Dist {
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// 50th percentile.
    pub median: f64,
    /// 75th percentile.
    pub p75: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Population standard deviation.
    pub std: f64,
    /// Number of samples (weights summed for weighted inputs).
    pub count: u64,
}

/// Nearest-rank index for percentile `p` of `n` sorted samples.
#[must_use]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
pub fn nearest_rank(n: u64, p: f64) -> u64 {
    if n == 0 {
        return 0;
    }
    let idx = libm::round((n - 1) as f64 * p / 100.0);
    (idx.max(0.0) as u64).min(n - 1)
}

/// Statistics of `(value, weight)` pairs; the pairs are sorted in place. Zero weights are ignored.
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn dist_weighted(pairs: &mut [(f64, u64)]) -> Dist {
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n: u64 = pairs.iter().map(|p| p.1).sum();
    if n == 0 {
        return Dist::default();
    }
    let nf = n as f64;
    let sum: f64 = pairs.iter().map(|(v, w)| v * *w as f64).sum();
    let mean = sum / nf;
    let var: f64 = pairs.iter().map(|(v, w)| (v - mean) * (v - mean) * *w as f64).sum::<f64>() / nf;
    let at = |p: f64| {
        let target = nearest_rank(n, p);
        let mut seen = 0u64;
        for (v, w) in pairs.iter() {
            seen += w;
            if seen > target {
                return *v;
            }
        }
        pairs.last().map_or(0.0, |p| p.0)
    };
    let mut nonzero = pairs.iter().filter(|p| p.1 > 0);
    Dist {
        mean,
        min: nonzero.clone().next().map_or(0.0, |p| p.0),
        max: nonzero.next_back().map_or(0.0, |p| p.0),
        median: at(50.0),
        p75: at(75.0),
        p90: at(90.0),
        p95: at(95.0),
        p99: at(99.0),
        std: libm::sqrt(var),
        count: n,
    }
}

/// Statistics of plain samples; `values` are sorted in place.
#[must_use]
pub fn dist(values: &[f64]) -> Dist {
    let mut pairs: Vec<(f64, u64)> = values.iter().map(|v| (*v, 1)).collect();
    dist_weighted(&mut pairs)
}

/// Inter-token gaps as a multiset: `(gap, count)` runs, merged at the end.
#[derive(Clone, Debug, Default)]
pub struct ItlSamples {
    runs: Vec<(u64, u64)>,
}

impl ItlSamples {
    /// Records `count` gaps of `gap`.
    pub fn add(&mut self, gap: SimDur, count: u64) {
        if count > 0 {
            self.runs.push((gap.as_ns(), count));
        }
    }

    /// Sorts and merges equal gaps; call before reading.
    pub fn compact(&mut self) {
        radix_sort_by_gap(&mut self.runs);
        let mut kept = 0usize;
        for i in 0..self.runs.len() {
            let (g, c) = self.runs[i];
            if kept > 0 && self.runs[kept - 1].0 == g {
                self.runs[kept - 1].1 += c;
            } else {
                self.runs[kept] = (g, c);
                kept += 1;
            }
        }
        self.runs.truncate(kept);
    }

    /// The merged runs (after [`ItlSamples::compact`]).
    #[must_use]
    pub fn runs(&self) -> &[(u64, u64)] {
        &self.runs
    }
}

/// Sorts `(gap, count)` pairs by gap: least-significant-digit radix sort of `gap - min` over
/// 16-bit digits, as many as the spread of gaps needs (two when it is under 4.3 s). A long
/// replay records about one pair per engine step (a million for the Mooncake benchmark),
/// where this is several times faster than a comparison sort. Pairs with equal gaps keep no
/// particular order (they are merged next).
fn radix_sort_by_gap(v: &mut Vec<(u64, u64)>) {
    const BITS: u32 = 16;
    const BUCKETS: usize = 1 << BITS;
    if v.len() < BUCKETS {
        v.sort_unstable_by_key(|r| r.0);
        return;
    }
    let min = v.iter().map(|r| r.0).min().unwrap_or(0);
    let spread = v.iter().map(|r| r.0 - min).max().unwrap_or(0);
    let mut tmp: Vec<(u64, u64)> = alloc::vec![(0, 0); v.len()];
    let mut counts: Vec<usize> = alloc::vec![0; BUCKETS];
    let mut shift = 0u32;
    while shift < 64 && (spread >> shift) > 0 {
        counts.fill(0);
        #[allow(clippy::cast_possible_truncation)] // Masked to 16 bits.
        let digit = |g: u64| (((g - min) >> shift) as usize) & (BUCKETS - 1);
        for r in v.iter() {
            counts[digit(r.0)] += 1;
        }
        let mut start = 0usize;
        for c in &mut counts {
            let n = *c;
            *c = start;
            start += n;
        }
        for r in v.iter() {
            let d = digit(r.0);
            tmp[counts[d]] = *r;
            counts[d] += 1;
        }
        core::mem::swap(v, &mut tmp);
        shift += BITS;
    }
}

/// Service-level bounds in milliseconds (inclusive); unset bounds are not checked.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sla {
    /// Time to first token.
    pub ttft_ms: Option<f64>,
    /// Average inter-token latency of a request, `(e2e − ttft) / (out − 1)`.
    pub itl_ms: Option<f64>,
    /// End-to-end latency.
    pub e2e_ms: Option<f64>,
}

impl Sla {
    /// True when at least one bound is set.
    #[must_use]
    pub fn is_set(&self) -> bool {
        self.ttft_ms.is_some() || self.itl_ms.is_some() || self.e2e_ms.is_some()
    }
}

/// Goodput figures (present only when an SLA is set).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Goodput {
    /// Completed requests meeting every bound.
    pub completed_requests: u64,
    /// Those per second of duration.
    pub request_throughput_rps: f64,
    /// Their output tokens per second of duration.
    pub output_throughput_tok_s: f64,
}

/// GPUs and busy-time accounting of the deployment, filled in by the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Fleet {
    /// Prefill workers (0 when aggregated).
    pub prefill_workers: u32,
    /// GPUs per prefill worker.
    pub prefill_gpus_per_worker: u32,
    /// Decode or aggregated workers.
    pub decode_workers: u32,
    /// GPUs per decode or aggregated worker.
    pub decode_gpus_per_worker: u32,
}

/// Everything prediction.json reports about a run, before serialisation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Requests that arrived.
    pub num_requests: u64,
    /// Requests that completed.
    pub completed_requests: u64,
    /// Input tokens of completed requests.
    pub total_input_tokens: u64,
    /// Output tokens of completed requests.
    pub total_output_tokens: u64,
    /// Latest last-token time of a completed request.
    pub duration_ms: f64,
    /// Completed requests per second.
    pub request_throughput_rps: f64,
    /// Input tokens per second.
    pub input_throughput_tok_s: f64,
    /// Output tokens per second.
    pub output_throughput_tok_s: f64,
    /// Input plus output tokens per second.
    pub total_throughput_tok_s: f64,
    /// Prefill worker-seconds provisioned.
    pub prefill_worker_seconds: f64,
    /// Decode (or aggregated) worker-seconds provisioned.
    pub decode_worker_seconds: f64,
    /// GPUs per prefill worker.
    pub prefill_gpus_per_worker: u32,
    /// GPUs per decode or aggregated worker.
    pub decode_gpus_per_worker: u32,
    /// GPU-hours provisioned over the run.
    pub gpu_hours: f64,
    /// Goodput, when an SLA is set.
    pub goodput: Option<Goodput>,
    /// Input plus output tokens of completed requests.
    pub processed_tokens: u64,
    /// Σ reused input tokens (max over admissions) / Σ input tokens.
    pub prefix_cache_reused_ratio: f64,
    /// The same using each request's first admission.
    pub first_admission_prefix_cache_reused_ratio: f64,
    /// Time to first token (ms).
    pub ttft: Dist,
    /// Time to second token (ms).
    pub ttst: Dist,
    /// Time per output token, one value per request (ms).
    pub tpot: Dist,
    /// Inter-token latency, every gap (ms).
    pub itl: Dist,
    /// End-to-end latency (ms).
    pub e2e_latency: Dist,
    /// Per-user output token throughput, 1000 / gap (tokens/s).
    pub output_token_throughput_per_user: Dist,
    /// Preemptions over all requests.
    pub num_preemptions: u64,
}

fn ms(d: SimDur) -> f64 {
    d.as_ms_f64()
}

/// Computes the summary of a finished run.
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn summarize(requests: &[Request], itl: &mut ItlSamples, sla: Sla, fleet: Fleet) -> Summary {
    let mut s = Summary { num_requests: requests.len() as u64, ..Summary::default() };
    let mut ttft = Vec::new();
    let mut ttst = Vec::new();
    let mut tpot = Vec::new();
    let mut e2e = Vec::new();
    let mut end = SimTime::ZERO;
    let mut reused = 0u64;
    let mut reused_first = 0u64;
    let mut all_input = 0u64;
    let mut good = Goodput::default();
    let mut good_tokens = 0u64;
    for r in requests {
        s.num_preemptions += u64::from(r.preemptions);
        if r.status != Status::Completed || r.stamps.first_admit == NEVER || r.emitted == 0 {
            continue;
        }
        s.completed_requests += 1;
        s.total_input_tokens += u64::from(r.input_tokens);
        s.total_output_tokens += u64::from(r.emitted);
        all_input += u64::from(r.input_tokens);
        reused += u64::from(r.reused_max);
        reused_first += u64::from(r.first_admission_reused.unwrap_or(0));
        let arrival = r.spec.arrival;
        let t_first = ms(r.stamps.first_token - arrival);
        let t_e2e = ms(r.stamps.last_token - arrival);
        end = end.max(r.stamps.last_token);
        ttft.push(t_first);
        e2e.push(t_e2e);
        if r.emitted >= 2 {
            ttst.push(ms(r.stamps.second_token - r.stamps.first_token));
            tpot.push(ms(r.stamps.last_token - r.stamps.first_token) / f64::from(r.emitted - 1));
        }
        if sla.is_set() {
            let ok_ttft = sla.ttft_ms.is_none_or(|b| t_first <= b);
            let ok_e2e = sla.e2e_ms.is_none_or(|b| t_e2e <= b);
            let ok_itl = r.emitted <= 1
                || sla.itl_ms.is_none_or(|b| (t_e2e - t_first) / f64::from(r.emitted - 1) <= b);
            if ok_ttft && ok_e2e && ok_itl {
                good.completed_requests += 1;
                good_tokens += u64::from(r.emitted);
            }
        }
    }
    s.duration_ms = end.as_ms_f64();
    let secs = s.duration_ms / 1000.0;
    let per_s = |x: u64| if secs > 0.0 { x as f64 / secs } else { 0.0 };
    s.request_throughput_rps = per_s(s.completed_requests);
    s.input_throughput_tok_s = per_s(s.total_input_tokens);
    s.output_throughput_tok_s = per_s(s.total_output_tokens);
    s.total_throughput_tok_s = per_s(s.total_input_tokens + s.total_output_tokens);
    s.processed_tokens = s.total_input_tokens + s.total_output_tokens;
    s.prefill_gpus_per_worker = fleet.prefill_gpus_per_worker;
    s.decode_gpus_per_worker = fleet.decode_gpus_per_worker;
    s.prefill_worker_seconds = f64::from(fleet.prefill_workers) * secs;
    s.decode_worker_seconds = f64::from(fleet.decode_workers) * secs;
    s.gpu_hours = (s.prefill_worker_seconds * f64::from(fleet.prefill_gpus_per_worker)
        + s.decode_worker_seconds * f64::from(fleet.decode_gpus_per_worker))
        / 3600.0;
    if sla.is_set() {
        good.request_throughput_rps = per_s(good.completed_requests);
        good.output_throughput_tok_s = per_s(good_tokens);
        s.goodput = Some(good);
    }
    if all_input > 0 {
        s.prefix_cache_reused_ratio = reused as f64 / all_input as f64;
        s.first_admission_prefix_cache_reused_ratio = reused_first as f64 / all_input as f64;
    }
    s.ttft = dist(&ttft);
    s.ttst = dist(&ttst);
    s.tpot = dist(&tpot);
    s.e2e_latency = dist(&e2e);
    itl.compact();
    let mut gaps: Vec<(f64, u64)> =
        itl.runs().iter().map(|(g, c)| (*g as f64 / NS_PER_MS as f64, *c)).collect();
    let mut per_user: Vec<(f64, u64)> =
        gaps.iter().filter(|(g, _)| *g > 0.0).map(|(g, c)| (1000.0 / g, *c)).collect();
    s.itl = dist_weighted(&mut gaps);
    s.output_token_throughput_per_user = dist_weighted(&mut per_user);
    s
}

/// One sample of a worker's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerSample {
    /// Requests waiting (all ranks).
    pub waiting: u32,
    /// Requests running (all ranks).
    pub running: u32,
    /// KV blocks in use (all ranks).
    pub kv_blocks_used: u32,
    /// Prompt tokens computed since the run started (prefill chunks).
    pub prefill_cumulative: u64,
    /// Output tokens computed since the run started (decode).
    pub decode_cumulative: u64,
}

/// Worker state sampled on simulated time at a fixed interval. When the series grows past
/// `max_samples`, every other sample is dropped and the interval doubles, so memory stays
/// bounded however long the run (cumulative counters stay exact).
#[derive(Clone, Debug)]
pub struct TimeSeries {
    /// Sampling interval.
    pub interval: SimDur,
    /// Sample times.
    pub times: Vec<SimTime>,
    /// `samples[k][w]` is worker `w` at `times[k]`.
    pub samples: Vec<Vec<WorkerSample>>,
    max_samples: usize,
    next: SimTime,
}

impl TimeSeries {
    /// An empty series sampling every `interval` (at least 1 ns) up to about `max_samples` points.
    #[must_use]
    pub fn new(interval: SimDur, max_samples: usize) -> Self {
        let interval = interval.max(SimDur::from_ns(1));
        TimeSeries {
            interval,
            times: Vec::new(),
            samples: Vec::new(),
            max_samples: max_samples.max(2),
            next: SimTime::ZERO,
        }
    }

    /// The next time a sample is due.
    #[must_use]
    pub fn due(&self) -> SimTime {
        self.next
    }

    /// Stores the sample due now.
    pub fn record(&mut self, sample: Vec<WorkerSample>) {
        self.times.push(self.next);
        self.samples.push(sample);
        self.next += self.interval;
        if self.times.len() > self.max_samples {
            keep_even_indices(&mut self.times);
            keep_even_indices(&mut self.samples);
            self.interval = SimDur::from_ns(self.interval.as_ns().saturating_mul(2));
            self.next = self.times.last().map_or(SimTime::ZERO, |t| *t + self.interval);
        }
    }
}

fn keep_even_indices<T>(v: &mut Vec<T>) {
    let mut i = 0usize;
    v.retain(|_| {
        i += 1;
        i % 2 == 1
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Compaction gives each distinct gap once, in order, with its total count: checked
        /// against a BTreeMap, on vectors long enough to take the radix path and on short ones.
        #[test]
        fn compact_matches_a_sorted_map(
            gaps in proptest::collection::vec((0u64..1 << 40, 1u64..5), 0..70_000),
            few in 1u64..50,
        ) {
            let mut itl = ItlSamples::default();
            let mut naive = alloc::collections::BTreeMap::new();
            for (i, (g, c)) in gaps.iter().enumerate() {
                // Many repeats too, as step gaps have.
                let g = if i % 3 == 0 { g % few } else { *g };
                itl.add(SimDur::from_ns(g), *c);
                *naive.entry(g).or_insert(0u64) += c;
            }
            itl.compact();
            let want: Vec<(u64, u64)> = naive.into_iter().collect();
            prop_assert_eq!(itl.runs(), &want[..]);
        }
    }

    #[test]
    fn nearest_rank_matches_the_reference_rule() {
        // index = round((n-1) * p / 100)
        assert_eq!(nearest_rank(10, 50.0), 5); // 4.5 rounds half away from zero
        assert_eq!(nearest_rank(10, 90.0), 8); // 8.1
        assert_eq!(nearest_rank(10, 99.0), 9); // 8.91
        assert_eq!(nearest_rank(1, 99.0), 0);
        let d = dist(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((d.min, d.median, d.max, d.mean), (1.0, 3.0, 5.0, 3.0));
        assert!((d.std - 2f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn weighted_equals_expanded() {
        let mut w = [(2.0, 3), (1.0, 1), (5.0, 2)];
        let e = dist(&[2.0, 2.0, 2.0, 1.0, 5.0, 5.0]);
        assert_eq!(dist_weighted(&mut w), e);
    }

    #[test]
    fn empty_is_all_zero() {
        assert_eq!(dist(&[]), Dist::default());
    }

    #[test]
    fn series_compacts_and_stays_bounded() {
        let mut ts = TimeSeries::new(SimDur::from_ns(10), 4);
        for _ in 0..100 {
            ts.record(alloc::vec![WorkerSample::default()]);
        }
        assert!(ts.times.len() <= 5);
        // Samples stay evenly spaced at the current interval.
        for w in ts.times.windows(2) {
            assert_eq!(w[1] - w[0], ts.interval);
        }
    }
}
