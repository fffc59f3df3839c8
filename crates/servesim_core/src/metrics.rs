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

use crate::record::RecordLog;
use crate::request::{Status, NEVER};
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

impl Dist {
    /// From its moments, extremes and the 50th, 75th, 90th, 95th and 99th percentiles.
    fn of(mean: f64, var: f64, count: u64, (min, max): (f64, f64), p: [f64; 5]) -> Dist {
        Dist {
            mean,
            min,
            max,
            median: p[0],
            p75: p[1],
            p90: p[2],
            p95: p[3],
            p99: p[4],
            std: libm::sqrt(var),
            count,
        }
    }
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

/// Inter-token gaps as a multiset of `(gap, count)` runs.
///
/// A long replay records about one run per engine step (a million for the Mooncake
/// benchmark), so the statistics avoid sorting them: sums give the mean and deviation, and
/// each percentile is selected through histograms (one pass summing and counting the runs by
/// log-scale bucket, one gathering the runs of the buckets the ranks fall in, then small
/// sorts, or narrower histograms for a crowded bucket).
#[derive(Clone, Debug, Default)]
pub struct ItlSamples {
    /// Runs packed as `gap << COUNT_BITS | count`: half the memory of pairs, and a replay
    /// records a million.
    packed: Vec<u64>,
    /// Runs whose gap or count does not fit the packing (gaps of hours, huge batches).
    wide: Vec<(u64, u64)>,
}

/// Bits of a packed run's count (a million requests in one step); the gap gets the other 44
/// (4.9 hours in nanoseconds).
const COUNT_BITS: u32 = 20;

/// The count field of a packed run.
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// Buckets of one selection histogram (32 KiB of counters: they stay in the L1 cache).
const SELECT_BUCKETS: usize = 1 << 12;

/// Runs at or below this many are sorted instead of narrowed further.
const SELECT_SORT_MAX: usize = 4 * SELECT_BUCKETS;

/// Milliseconds of a gap, as every ITL figure is reported.
#[allow(clippy::cast_precision_loss)]
fn gap_ms(g: u64) -> f64 {
    g as f64 / NS_PER_MS as f64
}

/// Output tokens per second a client sees across a positive gap.
fn per_user(g: u64) -> f64 {
    1000.0 / gap_ms(g)
}

impl ItlSamples {
    /// Records `count` gaps of `gap`.
    pub fn add(&mut self, gap: SimDur, count: u64) {
        let g = gap.as_ns();
        if count == 0 {
            return;
        }
        if g >> (64 - COUNT_BITS) == 0 && count >> COUNT_BITS == 0 {
            // A step's requests add the same gap one after another: one run holds them all
            // (runs are a multiset, so merging changes no figure; it keeps memory near one run
            // a step rather than one a token).
            if let Some(last) = self.packed.last_mut() {
                if *last >> COUNT_BITS == g && (*last & COUNT_MASK) + count <= COUNT_MASK {
                    *last += count;
                    return;
                }
            }
            self.packed.push(g << COUNT_BITS | count);
        } else {
            self.wide.push((g, count));
        }
    }

    /// Every run as `(gap, count)`.
    fn runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let unpack = |p: &u64| (p >> COUNT_BITS, p & COUNT_MASK);
        self.packed.iter().map(unpack).chain(self.wide.iter().copied())
    }

    /// Statistics of the gaps in milliseconds, and of the per-user token rate `1000 / gap`
    /// over the positive gaps. Percentiles, extremes and counts are those of [`dist_weighted`]
    /// bit for bit. Means and deviations come from exact integer sums, so they do not depend
    /// on how the gaps were grouped into runs (a fast-forwarded decode run records one run per
    /// step where stepping records several): gaps in whole nanoseconds, rates in whole
    /// billionths of a token per second.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn dists(&self) -> (Dist, Dist) {
        let (mut gap_sums, mut rate_sums) = (Moments::default(), Moments::default());
        let (mut min, mut max, mut min_pos) = (u64::MAX, 0u64, u64::MAX);
        let mut counts = alloc::vec![0u64; LOG_BUCKETS];
        for (g, c) in self.runs() {
            gap_sums.add(g, c);
            min = min.min(g);
            max = max.max(g);
            counts[log_bucket(g)] += c;
            if g > 0 {
                min_pos = min_pos.min(g);
                rate_sums.add((RATE_UNITS_NS + g / 2) / g, c);
            }
        }
        let n = gap_sums.n;
        if n == 0 {
            return (Dist::default(), Dist::default());
        }
        let positive = rate_sums.n;
        let zeros = n - positive;
        let (mean_ns, var_ns) = gap_sums.mean_var();
        let (mean, var) = (mean_ns / NS_PER_MS as f64, var_ns / (NS_PER_MS as f64 * NS_PER_MS as f64));
        let (mean_u, var_u) = rate_sums.mean_var();
        let (mean_rate, var_rate) =
            (mean_u / RATE_UNIT_PER_TOKEN_S, var_u / (RATE_UNIT_PER_TOKEN_S * RATE_UNIT_PER_TOKEN_S));
        // Ranks into the gaps in ascending order: the gap percentiles, then the per-user
        // ones (ascending rate is descending positive gap, after the zero gaps).
        let pcts = [50.0, 75.0, 90.0, 95.0, 99.0];
        let mut ranks = [0u64; 10];
        for (i, p) in pcts.iter().enumerate() {
            ranks[i] = nearest_rank(n, *p);
            let top = positive.saturating_sub(1);
            ranks[5 + i] = (zeros + top - nearest_rank(positive, *p).min(top)).min(n - 1);
        }
        let picked = select_ranks(|| self.runs(), &counts, &ranks);
        let at = |i: usize, f: fn(u64) -> f64| {
            [f(picked[i]), f(picked[i + 1]), f(picked[i + 2]), f(picked[i + 3]), f(picked[i + 4])]
        };
        let gaps = Dist::of(mean, var, n, (gap_ms(min), gap_ms(max)), at(0, gap_ms));
        if positive == 0 {
            return (gaps, Dist::default());
        }
        let rates =
            Dist::of(mean_rate, var_rate, positive, (per_user(max), per_user(min_pos)), at(5, per_user));
        (gaps, rates)
    }
}

/// Per-user rates are summed in billionths of a token per second: `RATE_UNITS_NS / gap_ns`,
/// rounded (0.5e-9 tokens/s at most off per gap).
const RATE_UNITS_NS: u64 = 1_000_000_000 * 1_000_000_000;

/// Rate units in one token per second.
const RATE_UNIT_PER_TOKEN_S: f64 = 1e9;

/// Exact weighted sums of integer samples: count, `Σ c·x` and `Σ c·x²`.
#[derive(Clone, Copy, Debug, Default)]
struct Moments {
    n: u64,
    s1: u128,
    s2: u128,
    /// Once an exact sum would overflow (gaps of hours over billions of tokens), the sums
    /// carry on in floating point here.
    approx: Option<(f64, f64)>,
}

impl Moments {
    #[allow(clippy::cast_precision_loss)]
    fn add(&mut self, x: u64, c: u64) {
        self.n += c;
        let cx = u128::from(x) * u128::from(c);
        if self.approx.is_none() {
            // Usually `c·x` fits 64 bits and `c·x²` is one 64×64-bit product that cannot overflow.
            let cxx = match u64::try_from(cx) {
                Ok(cx) => Some(u128::from(cx) * u128::from(x)),
                Err(_) => cx.checked_mul(u128::from(x)),
            };
            let exact = cxx.and_then(|cxx| Some((self.s1.checked_add(cx)?, self.s2.checked_add(cxx)?)));
            if let Some((s1, s2)) = exact {
                (self.s1, self.s2) = (s1, s2);
                return;
            }
        }
        self.add_approx(x, cx);
    }

    /// The floating-point sums, from the first sample that would overflow the exact ones on.
    /// Kept out of line: inlined, the compiler computed its 128-bit conversions (library
    /// calls) for every sample before knowing they were not needed.
    #[cold]
    #[inline(never)]
    #[allow(clippy::cast_precision_loss)]
    fn add_approx(&mut self, x: u64, cx: u128) {
        let (f1, f2) = self.approx.get_or_insert((self.s1 as f64, self.s2 as f64));
        *f1 += cx as f64;
        *f2 += cx as f64 * x as f64;
    }

    /// Mean and population variance (0 for no samples).
    #[allow(clippy::cast_precision_loss)]
    fn mean_var(&self) -> (f64, f64) {
        if self.n == 0 {
            return (0.0, 0.0);
        }
        let nf = self.n as f64;
        if let Some((f1, f2)) = self.approx {
            let mean = f1 / nf;
            return (mean, (f2 / nf - mean * mean).max(0.0));
        }
        let (s1, s2) = (self.s1, self.s2);
        let mean = s1 as f64 / nf;
        let n = u128::from(self.n);
        // n·Σc·x² − (Σc·x)² is n² times the variance, and never negative.
        let var = match (n.checked_mul(s2), s1.checked_mul(s1)) {
            (Some(a), Some(b)) => a.saturating_sub(b) as f64 / (nf * nf),
            _ => (s2 as f64 / nf - mean * mean).max(0.0),
        };
        (mean, var)
    }
}

/// The gap at each 0-based rank (`ranks[i] < total count`) of the multiset `runs`, given
/// their counts by [`log_bucket`]: one pass gathering the runs of the buckets the ranks fall
/// in, then a selection within each (a bucket spans under 1% of its gaps' values, so
/// gathered sets are small unless the gaps are).
fn select_ranks<I: Iterator<Item = (u64, u64)>>(
    runs: impl Fn() -> I,
    counts: &[u64],
    ranks: &[u64; 10],
) -> [u64; 10] {
    // The bucket each rank falls in and its rank within the bucket.
    let wanted: Vec<(usize, u64)> = ranks
        .iter()
        .map(|&r| {
            let (k, before) = bucket_of(counts, r);
            (k, r - before)
        })
        .collect();
    // Each wanted bucket's slot in `gathered` (u8::MAX: not wanted).
    let mut slot = alloc::vec![u8::MAX; counts.len()];
    let mut gathered: Vec<Vec<(u64, u64)>> = Vec::new();
    for &(k, _) in &wanted {
        if slot[k] == u8::MAX {
            #[allow(clippy::cast_possible_truncation)] // At most ten ranks.
            {
                slot[k] = gathered.len() as u8;
            }
            // Room for the bucket's gaps, one run each, up to a bound (runs may hold many).
            #[allow(clippy::cast_possible_truncation)] // Bounded by SELECT_SORT_MAX.
            gathered.push(Vec::with_capacity(counts[k].min(SELECT_SORT_MAX as u64) as usize));
        }
    }
    for (g, c) in runs() {
        let i = slot[log_bucket(g)];
        if i != u8::MAX {
            gathered[usize::from(i)].push((g, c));
        }
    }
    let mut out = [0u64; 10];
    for (o, (k, r)) in out.iter_mut().zip(wanted) {
        *o = select_in(&gathered[usize::from(slot[k])], r);
    }
    out
}

/// Significant bits below the leading one that [`log_bucket`] keeps.
const LOG_BUCKET_BITS: u32 = 7;

/// Number of [`log_bucket`] values (58 KiB of counters).
const LOG_BUCKETS: usize = (64 - LOG_BUCKET_BITS as usize + 1) << LOG_BUCKET_BITS;

/// A bucket of gap `g`, monotone in `g`: small gaps are their own bucket, larger ones share
/// their binary exponent and the next [`LOG_BUCKET_BITS`] bits (1/128 of their value wide).
#[allow(clippy::cast_possible_truncation)] // Below LOG_BUCKETS.
fn log_bucket(g: u64) -> usize {
    if g < 1 << LOG_BUCKET_BITS {
        return g as usize;
    }
    let e = 63 - g.leading_zeros();
    let mantissa = (g >> (e - LOG_BUCKET_BITS)) & ((1 << LOG_BUCKET_BITS) - 1);
    (((e - LOG_BUCKET_BITS + 1) << LOG_BUCKET_BITS) as usize) | mantissa as usize
}

/// Per-bucket counts of `runs` over `min..=max`, and the shift that maps `gap - min` to a bucket.
fn histogram(runs: &[(u64, u64)], min: u64, max: u64) -> (Vec<u64>, u32) {
    let spread = max - min;
    let bits = 64 - spread.leading_zeros();
    let shift = bits.saturating_sub(SELECT_BUCKETS.trailing_zeros());
    let mut counts = alloc::vec![0u64; SELECT_BUCKETS];
    for &(g, c) in runs {
        #[allow(clippy::cast_possible_truncation)] // Below SELECT_BUCKETS after the shift.
        let k = ((g - min) >> shift) as usize;
        counts[k] += c;
    }
    (counts, shift)
}

/// The gap at 0-based rank `r` of the multiset `runs`.
fn select_in(runs: &[(u64, u64)], r: u64) -> u64 {
    if runs.len() <= SELECT_SORT_MAX {
        let mut sorted = runs.to_vec();
        sorted.sort_unstable_by_key(|x| x.0);
        let mut seen = 0u64;
        for &(g, c) in &sorted {
            seen += c;
            if seen > r {
                return g;
            }
        }
        return sorted.last().map_or(0, |x| x.0);
    }
    let min = runs.iter().map(|x| x.0).min().unwrap_or(0);
    let max = runs.iter().map(|x| x.0).max().unwrap_or(0);
    if min == max {
        return min;
    }
    let (counts, shift) = histogram(runs, min, max);
    let (k, before) = bucket_of(&counts, r);
    #[allow(clippy::cast_possible_truncation)] // Below SELECT_BUCKETS after the shift.
    let inside: Vec<(u64, u64)> =
        runs.iter().filter(|x| ((x.0 - min) >> shift) as usize == k).copied().collect();
    select_in(&inside, r - before)
}

/// The bucket holding 0-based rank `r`, and the count of all earlier buckets.
fn bucket_of(counts: &[u64], r: u64) -> (usize, u64) {
    let (mut k, mut before) = (0usize, 0u64);
    while k + 1 < counts.len() && before + counts[k] <= r {
        before += counts[k];
        k += 1;
    }
    (k, before)
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
pub fn summarize(requests: &RecordLog, itl: &mut ItlSamples, sla: Sla, fleet: Fleet) -> Summary {
    let mut s = Summary::default();
    // Warmup requests come before the measured run; when there are any, it starts with the
    // first measured request.
    let (mut warmed, mut first_arrival) = (false, SimTime::MAX);
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
    for r in requests.iter() {
        if r.warmup {
            warmed = true;
            continue;
        }
        s.num_requests += 1;
        first_arrival = first_arrival.min(r.arrival);
        s.num_preemptions += u64::from(r.preemptions);
        if r.status != Status::Completed || r.stamps.first_admit == NEVER || r.emitted == 0 {
            continue;
        }
        s.completed_requests += 1;
        s.total_input_tokens += u64::from(r.input_tokens);
        s.total_output_tokens += u64::from(r.emitted);
        all_input += u64::from(r.input_tokens);
        reused += u64::from(r.reused_max);
        reused_first += u64::from(r.first_admission_reused().unwrap_or(0));
        let arrival = r.arrival;
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
    let start = if warmed && s.num_requests > 0 { first_arrival } else { SimTime::ZERO };
    s.duration_ms = end.since(start).as_ms_f64();
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
    (s.itl, s.output_token_throughput_per_user) = itl.dists();
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

    /// The sorted definition: [`dist_weighted`] over the gaps in milliseconds and over the
    /// per-user rates of the positive gaps.
    fn sorted_dists(runs: &[(u64, u64)]) -> (Dist, Dist) {
        let mut gaps: Vec<(f64, u64)> = runs.iter().map(|(g, c)| (gap_ms(*g), *c)).collect();
        let mut rates: Vec<(f64, u64)> =
            runs.iter().filter(|(g, _)| *g > 0).map(|(g, c)| (per_user(*g), *c)).collect();
        (dist_weighted(&mut gaps), dist_weighted(&mut rates))
    }

    fn assert_same(got: &Dist, want: &Dist) -> Result<(), TestCaseError> {
        let exact = |d: &Dist| (d.min, d.max, d.median, d.p75, d.p90, d.p95, d.p99, d.count);
        prop_assert_eq!(exact(got), exact(want));
        // Means: relative 1e-9, or 1e-9 absolute (rates are summed in 1e-9 tokens/s units).
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) + 1e-9;
        prop_assert!(close(got.mean, want.mean), "mean {} vs {}", got.mean, want.mean);
        prop_assert!(
            close(got.std, want.std) || (got.std - want.std).abs() < 1e-6,
            "std {} vs {}",
            got.std,
            want.std
        );
        Ok(())
    }

    proptest! {
        /// Selection gives exactly the sorted definition's percentiles, extremes and counts,
        /// on sets large enough to be narrowed by histograms (with clusters, repeats, zero
        /// gaps and outliers, as step gaps have) and on small ones.
        #[test]
        fn selected_statistics_match_the_sorted_definition(
            gaps in proptest::collection::vec((0u64..1 << 40, 1u64..5), 0..40_000),
            few in 1u64..50,
            cluster in 1u64..20_000_000,
        ) {
            let mut itl = ItlSamples::default();
            for (i, (g, c)) in gaps.iter().enumerate() {
                let g = match i % 4 {
                    0 => g % few,
                    1 | 2 => cluster + g % 100_000,
                    _ => *g,
                };
                itl.add(SimDur::from_ns(g), *c);
            }
            let (gaps, rates) = itl.dists();
            let (want_gaps, want_rates) = sorted_dists(&itl.runs().collect::<Vec<_>>());
            assert_same(&gaps, &want_gaps)?;
            assert_same(&rates, &want_rates)?;
        }
    }

    proptest! {
        /// Buckets never reorder gaps, and each stays within 1/128 of its gaps' values.
        #[test]
        fn log_buckets_are_monotone_and_narrow(a in 0u64..u64::MAX, d in 0u64..1 << 20) {
            let b = a.saturating_add(d);
            prop_assert!(log_bucket(a) <= log_bucket(b));
            prop_assert!(log_bucket(b) < LOG_BUCKETS);
            if log_bucket(a) == log_bucket(b) && a >= 1 << LOG_BUCKET_BITS {
                prop_assert!(b - a <= a >> LOG_BUCKET_BITS, "{a} and {b} share a bucket");
            }
        }
    }

    proptest! {
        /// However the same gaps are grouped into runs (one run of 30 or 30 runs of one, in
        /// any order), every statistic is bit for bit the same.
        #[test]
        fn statistics_do_not_depend_on_grouping(
            gaps in proptest::collection::vec((0u64..1 << 36, 1u64..40), 1..300),
        ) {
            let mut grouped = ItlSamples::default();
            let mut single = ItlSamples::default();
            for (g, c) in &gaps {
                grouped.add(SimDur::from_ns(*g), *c);
            }
            for (g, c) in gaps.iter().rev() {
                for _ in 0..*c {
                    single.add(SimDur::from_ns(*g), 1);
                }
            }
            prop_assert_eq!(grouped.dists(), single.dists());
        }
    }

    #[test]
    #[allow(clippy::cast_precision_loss)]
    fn sums_that_would_overflow_carry_on_in_floating_point() {
        // 2^20 gaps of 2^60 ns: Σc·x² is 2^140, past any 128-bit sum.
        let mut m = Moments::default();
        m.add(3, 2);
        assert!(m.approx.is_none());
        m.add(1 << 60, 1 << 20);
        m.add(1 << 59, 2);
        assert!(m.approx.is_some());
        let n = 2.0 + (1u64 << 20) as f64 + 2.0;
        let xs = [(3.0, 2.0), ((1u64 << 60) as f64, (1u64 << 20) as f64), ((1u64 << 59) as f64, 2.0)];
        let mean = xs.iter().map(|(x, c)| x * c).sum::<f64>() / n;
        let var = xs.iter().map(|(x, c)| c * (x - mean) * (x - mean)).sum::<f64>() / n;
        let (got_mean, got_var) = m.mean_var();
        assert!((got_mean / mean - 1.0).abs() < 1e-12, "{got_mean} vs {mean}");
        assert!((got_var / var - 1.0).abs() < 1e-3, "{got_var} vs {var}");
    }

    #[test]
    fn runs_too_wide_to_pack_are_kept_whole() {
        // Gaps of days and steps of millions of requests do not fit a packed run.
        let mut itl = ItlSamples::default();
        for i in 0..50u64 {
            itl.add(SimDur::from_ns(10_000_000 + i), 3);
        }
        itl.add(SimDur::from_ns(1 << 45), 2);
        itl.add(SimDur::from_ns(20_000_000), 3 << 20);
        assert_eq!(itl.wide, alloc::vec![(1 << 45, 2), (20_000_000, 3 << 20)]);
        let (gaps, rates) = itl.dists();
        let (want_gaps, want_rates) = sorted_dists(&itl.runs().collect::<Vec<_>>());
        assert_same(&gaps, &want_gaps).unwrap();
        assert_same(&rates, &want_rates).unwrap();
        assert_eq!(gaps.count, 150 + 2 + (3 << 20));
        assert!((gaps.max - (1u64 << 45) as f64 / 1e6).abs() < 1e-6, "{}", gaps.max);
    }

    #[test]
    fn a_steps_equal_gaps_share_one_run_up_to_the_count_limit() {
        // One token each for 64 requests of a step: one run, not 64 (a replay of millions of
        // tokens kept one run a token: 34 MB for the 10,000-request benchmark).
        let mut itl = ItlSamples::default();
        for _ in 0..64 {
            itl.add(SimDur::from_ns(12_000_000), 1);
        }
        itl.add(SimDur::from_ns(13_000_000), 2);
        itl.add(SimDur::from_ns(12_000_000), 1);
        assert_eq!(itl.packed.len(), 3);
        assert_eq!(
            itl.runs().collect::<Vec<_>>(),
            alloc::vec![(12_000_000, 64), (13_000_000, 2), (12_000_000, 1)]
        );
        // A run never counts past its packed field.
        let mut full = ItlSamples::default();
        full.add(SimDur::from_ns(5), COUNT_MASK - 1);
        full.add(SimDur::from_ns(5), 2);
        assert_eq!(full.runs().collect::<Vec<_>>(), alloc::vec![(5, COUNT_MASK - 1), (5, 2)]);
    }

    #[test]
    fn one_dominant_bucket_is_narrowed_again() {
        // 100,000 gaps within 100 us and one of an hour: the log-scale buckets put them in two
        // (each 65 us wide at 10 ms), so the selection must narrow those to find the percentiles.
        let mut itl = ItlSamples::default();
        for i in 0..100_000u64 {
            itl.add(SimDur::from_ns(10_000_000 + (i * 7919) % 100_000), 1 + i % 3);
        }
        itl.add(SimDur::from_ns(3_600_000_000_000), 1);
        let (gaps, rates) = itl.dists();
        let (want_gaps, want_rates) = sorted_dists(&itl.runs().collect::<Vec<_>>());
        assert_same(&gaps, &want_gaps).unwrap();
        assert_same(&rates, &want_rates).unwrap();
        assert_eq!(itl.runs().map(|r| r.1).sum::<u64>(), gaps.count);
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
