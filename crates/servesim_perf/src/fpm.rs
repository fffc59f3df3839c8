//! Whole-forward-pass (FPM) step times: AISimulate's `fpm_forward_perf` tables.
//!
//! An FPM cell holds measured latencies of complete forward steps of one deployment (model,
//! system, engine, parallelism, quantization). Coordinates are per attention-DP rank iteration
//! totals: prefill rows at `(batch, total new tokens, total cached KV tokens)`, decode rows at
//! `(batch, total KV tokens)`.
//!
//! Lookups, in order:
//! 1. **Domain gate.** Each phase has an axis-aligned box (the smallest and largest value
//!    measured on every axis). A step outside it is an error: FPM never extrapolates.
//! 2. **Exact hit.** A measured coordinate returns its measured latency verbatim.
//! 3. **Nested bracketing.** Otherwise the lookup interpolates one axis at a time: batch, then
//!    (prefill) cached KV, then the site's own curve (new tokens for prefill, KV for decode).
//!    On each axis it takes the nearest measured value at or below the target and the nearest
//!    at or above whose inner lookups succeed, and blends linearly. Taking the *nearest
//!    brackets* keeps a CUDA-graph cliff (the collector measures rung pairs such as batch 512
//!    and 513) on the side it belongs to, instead of averaging across it as nearest-neighbour
//!    weighting does. A value bracketed on one side only is refused.
//!
//! Mixed steps (prefill chunks and decode requests together) follow AISimulate's rule:
//! `prefill(chunks, new tokens + decodes, cached) + max(0, decode(decodes, KV) −
//! decode(decodes, KV floor))`, the floor being the larger of the decode count and the
//! smallest measured KV total: weights and fixed costs are paid once, by the prefill lookup.
//! With attention data parallelism the step ends at the slowest rank, as the tables'
//! latencies (maximum rank wall time) do.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use servesim_core::timing::{RankLoad, StepTimer, TimerReport, TimingError};
use servesim_core::units::SimDur;

/// One measured prefill step (per-rank totals).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PrefillPoint {
    /// Requests in the step.
    pub batch: u32,
    /// New tokens computed, summed over requests.
    pub prefill_tokens: u64,
    /// Cached (already computed) KV tokens read, summed over requests.
    pub kv_tokens: u64,
    /// Measured step latency.
    pub latency_ms: f64,
}

/// One measured decode step (per-rank totals).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodePoint {
    /// Requests in the step.
    pub batch: u32,
    /// KV tokens read, summed over requests.
    pub kv_tokens: u64,
    /// Measured step latency.
    pub latency_ms: f64,
}

/// The measurements of one FPM cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FpmCell {
    /// The cell's identity, for reports (e.g. its `cell_id` and source file).
    pub label: String,
    /// Prefill rows.
    pub prefill: Vec<PrefillPoint>,
    /// Decode rows.
    pub decode: Vec<DecodePoint>,
}

/// A curve: measured `(x, latency_ms)` pairs sorted by `x`, one per `x`.
type Curve = Vec<(u64, f64)>;

/// Smallest and largest measured value of one axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Smallest.
    pub min: u64,
    /// Largest.
    pub max: u64,
}

impl Range {
    fn of(mut it: impl Iterator<Item = u64>) -> Option<Range> {
        let first = it.next()?;
        Some(it.fold(Range { min: first, max: first }, |r, x| Range { min: r.min.min(x), max: r.max.max(x) }))
    }

    fn contains(self, x: u64) -> bool {
        (self.min..=self.max).contains(&x)
    }
}

impl core::fmt::Display for Range {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}..={}", self.min, self.max)
    }
}

/// The axis-aligned domain of each phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Domain {
    /// Prefill `(batch, new tokens, cached KV tokens)`.
    pub prefill: [Range; 3],
    /// Decode `(batch, KV tokens)`.
    pub decode: [Range; 2],
}

/// An FPM cell could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FpmError {
    /// What is wrong.
    pub message: String,
}

impl core::fmt::Display for FpmError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.message)
    }
}

/// How a lookup was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A measured row, verbatim.
    Measured,
    /// Blended between measured rows.
    Interpolated,
}

/// An FPM cell indexed for lookups.
#[derive(Clone, Debug)]
pub struct FpmModel {
    label: String,
    /// Prefill sites: batch → cached KV → curve over new tokens.
    prefill: BTreeMap<u32, BTreeMap<u64, Curve>>,
    /// Decode sites: batch → curve over KV tokens.
    decode: BTreeMap<u32, Curve>,
    domain: Domain,
    /// Rows that repeated a coordinate (their median is used).
    pub repeated_rows: usize,
}

/// Sorts `(x, y)` pairs and merges repeated `x` into their median; returns the repeats.
fn finish_curve(points: &mut Curve) -> usize {
    points.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut out: Curve = Vec::with_capacity(points.len());
    let mut repeats = 0;
    let mut i = 0;
    while i < points.len() {
        let x = points[i].0;
        let j = points[i..].iter().position(|p| p.0 != x).map_or(points.len(), |k| i + k);
        let n = j - i;
        repeats += n - 1;
        // The median of a sorted run (mean of the middle two for even counts).
        let y = if n % 2 == 1 {
            points[i + n / 2].1
        } else {
            (points[i + n / 2 - 1].1 + points[i + n / 2].1) / 2.0
        };
        out.push((x, y));
        i = j;
    }
    *points = out;
    repeats
}

impl FpmModel {
    /// Indexes a cell.
    ///
    /// # Errors
    /// When the cell lacks prefill or decode rows, or a row has a zero batch or a
    /// non-positive or non-finite latency.
    pub fn new(cell: &FpmCell) -> Result<FpmModel, FpmError> {
        let bad = |what: &str| FpmError { message: format!("FPM cell {}: {what}", cell.label) };
        if cell.prefill.is_empty() || cell.decode.is_empty() {
            return Err(bad(&format!(
                "needs both prefill and decode rows (has {} prefill, {} decode)",
                cell.prefill.len(),
                cell.decode.len()
            )));
        }
        let mut prefill: BTreeMap<u32, BTreeMap<u64, Curve>> = BTreeMap::new();
        for (i, p) in cell.prefill.iter().enumerate() {
            if p.batch == 0 || p.prefill_tokens == 0 || !(p.latency_ms.is_finite() && p.latency_ms > 0.0) {
                return Err(bad(&format!(
                    "prefill row {} (batch {}, {} new tokens, {} ms) is not a valid measurement",
                    i + 1,
                    p.batch,
                    p.prefill_tokens,
                    p.latency_ms
                )));
            }
            prefill
                .entry(p.batch)
                .or_default()
                .entry(p.kv_tokens)
                .or_default()
                .push((p.prefill_tokens, p.latency_ms));
        }
        let mut decode: BTreeMap<u32, Curve> = BTreeMap::new();
        for (i, d) in cell.decode.iter().enumerate() {
            if d.batch == 0 || !(d.latency_ms.is_finite() && d.latency_ms > 0.0) {
                return Err(bad(&format!(
                    "decode row {} (batch {}, {} KV tokens, {} ms) is not a valid measurement",
                    i + 1,
                    d.batch,
                    d.kv_tokens,
                    d.latency_ms
                )));
            }
            decode.entry(d.batch).or_default().push((d.kv_tokens, d.latency_ms));
        }
        let mut repeated_rows = 0;
        for sites in prefill.values_mut() {
            for curve in sites.values_mut() {
                repeated_rows += finish_curve(curve);
            }
        }
        for curve in decode.values_mut() {
            repeated_rows += finish_curve(curve);
        }
        // Both vectors are non-empty (checked above), so every range exists.
        let range = |r: Option<Range>| r.unwrap_or(Range { min: 0, max: 0 });
        let domain = Domain {
            prefill: [
                range(Range::of(cell.prefill.iter().map(|p| u64::from(p.batch)))),
                range(Range::of(cell.prefill.iter().map(|p| p.prefill_tokens))),
                range(Range::of(cell.prefill.iter().map(|p| p.kv_tokens))),
            ],
            decode: [
                range(Range::of(cell.decode.iter().map(|d| u64::from(d.batch)))),
                range(Range::of(cell.decode.iter().map(|d| d.kv_tokens))),
            ],
        };
        Ok(FpmModel { label: cell.label.clone(), prefill, decode, domain, repeated_rows })
    }

    /// The measured domain.
    #[must_use]
    pub fn domain(&self) -> Domain {
        self.domain
    }

    /// The cell's label.
    #[must_use]
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Latency of a pure prefill step.
    ///
    /// # Errors
    /// Outside the prefill domain, or where no measured rows bracket the point.
    pub fn prefill_ms(&self, batch: u32, tokens: u64, kv: u64) -> Result<(f64, Answer), FpmError> {
        let [rb, rt, rk] = self.domain.prefill;
        if !(rb.contains(u64::from(batch)) && rt.contains(tokens) && rk.contains(kv)) {
            return Err(FpmError {
                message: format!(
                    "FPM cell {}: a prefill step of {batch} requests, {tokens} new tokens and {kv} cached tokens is outside the measured domain (batch {rb}, new tokens {rt}, cached tokens {rk}); FPM tables are never extrapolated",
                    self.label
                ),
            });
        }
        bracket(&self.prefill, batch, |sites| bracket(sites, kv, |curve| on_curve(curve, tokens))).ok_or_else(
            || FpmError {
                message: format!(
                    "FPM cell {}: no measured prefill rows surround {batch} requests, {tokens} new tokens, {kv} cached tokens",
                    self.label
                ),
            },
        )
    }

    /// Latency of a pure decode step.
    ///
    /// # Errors
    /// Outside the decode domain, or where no measured rows bracket the point.
    pub fn decode_ms(&self, batch: u32, kv: u64) -> Result<(f64, Answer), FpmError> {
        let [rb, rk] = self.domain.decode;
        if !(rb.contains(u64::from(batch)) && rk.contains(kv)) {
            return Err(FpmError {
                message: format!(
                    "FPM cell {}: a decode step of {batch} requests reading {kv} KV tokens is outside the measured domain (batch {rb}, KV tokens {rk}); FPM tables are never extrapolated",
                    self.label
                ),
            });
        }
        bracket(&self.decode, batch, |curve| on_curve(curve, kv)).ok_or_else(|| FpmError {
            message: format!(
                "FPM cell {}: no measured decode rows surround {batch} requests reading {kv} KV tokens",
                self.label
            ),
        })
    }
}

/// Linear interpolation on a sorted curve; exact hits verbatim; `None` outside it.
fn on_curve(curve: &Curve, x: u64) -> Option<(f64, Answer)> {
    match curve.binary_search_by(|p| p.0.cmp(&x)) {
        Ok(i) => Some((curve[i].1, Answer::Measured)),
        Err(i) if i > 0 && i < curve.len() => {
            let (x0, y0) = curve[i - 1];
            let (x1, y1) = curve[i];
            #[allow(clippy::cast_precision_loss)]
            let w = (x - x0) as f64 / (x1 - x0) as f64;
            Some((y0 + w * (y1 - y0), Answer::Interpolated))
        }
        Err(_) => None,
    }
}

/// One axis of the nested lookup: the nearest keys at or below and at or above `x` whose
/// inner lookups succeed, blended linearly; an exact key whose inner lookup succeeds wins.
fn bracket<K, V>(
    map: &BTreeMap<K, V>,
    x: K,
    inner: impl Fn(&V) -> Option<(f64, Answer)>,
) -> Option<(f64, Answer)>
where
    K: Ord + Copy + Into<u64>,
{
    let below = map.range(..=x).rev().find_map(|(k, v)| inner(v).map(|a| (*k, a)));
    if let Some((k, a)) = below {
        if k == x {
            return Some(a);
        }
    }
    let above = map.range(x..).find_map(|(k, v)| inner(v).map(|a| (*k, a)));
    let ((k0, (y0, _)), (k1, (y1, _))) = (below?, above?);
    let (k0, k1, xv): (u64, u64, u64) = (k0.into(), k1.into(), x.into());
    #[allow(clippy::cast_precision_loss)]
    let w = (xv - k0) as f64 / (k1 - k0) as f64;
    Some((y0 + w * (y1 - y0), Answer::Interpolated))
}

/// A [`StepTimer`] over one FPM cell.
#[derive(Clone, Debug)]
pub struct FpmTimer {
    model: alloc::rc::Rc<FpmModel>,
    /// Lookups `[measured, interpolated]` for prefill and decode.
    counts: [[u64; 2]; 2],
}

impl FpmTimer {
    /// A timer over `model`.
    #[must_use]
    pub fn new(model: alloc::rc::Rc<FpmModel>) -> FpmTimer {
        FpmTimer { model, counts: [[0; 2]; 2] }
    }

    fn count(&mut self, phase: usize, a: Answer) {
        self.counts[phase][usize::from(a == Answer::Interpolated)] += 1;
    }

    /// Milliseconds of one rank's share of a step.
    ///
    /// # Errors
    /// When a lookup falls outside the measured domain.
    pub fn rank_ms(&mut self, r: &RankLoad) -> Result<f64, FpmError> {
        if r.is_empty() {
            return Ok(0.0);
        }
        let decodes = r.decode_requests;
        if r.prefill.is_empty() {
            let (ms, a) = self.model.decode_ms(decodes, r.decode_kv_tokens)?;
            self.count(1, a);
            return Ok(ms);
        }
        let chunks = u32::try_from(r.prefill.len()).unwrap_or(u32::MAX);
        let new: u64 = r.prefill.iter().map(|c| u64::from(c.new_tokens)).sum();
        let cached: u64 = r.prefill.iter().map(|c| u64::from(c.context_tokens)).sum();
        let (mut ms, a) = self.model.prefill_ms(chunks, new + u64::from(decodes), cached)?;
        self.count(0, a);
        if decodes > 0 {
            let floor = u64::from(decodes).max(self.model.domain.decode[1].min);
            let (full, a1) = self.model.decode_ms(decodes, r.decode_kv_tokens.max(floor))?;
            let (base, a2) = self.model.decode_ms(decodes, floor)?;
            self.count(1, a1);
            self.count(1, a2);
            ms += (full - base).max(0.0);
        }
        Ok(ms)
    }
}

impl StepTimer for FpmTimer {
    fn step_time(&mut self, ranks: &[RankLoad]) -> Result<SimDur, TimingError> {
        let mut worst: f64 = 0.0;
        for r in ranks {
            let ms = self.rank_ms(r).map_err(|e| TimingError { message: e.message })?;
            worst = worst.max(ms);
        }
        Ok(SimDur::from_secs_f64(worst / 1e3))
    }

    fn report(&self) -> Option<TimerReport> {
        let d = self.model.domain;
        Some(TimerReport {
            model: "fpm".into(),
            data: format!(
                "{} (prefill batch {}, new tokens {}, cached tokens {}; decode batch {}, KV tokens {})",
                self.model.label, d.prefill[0], d.prefill[1], d.prefill[2], d.decode[0], d.decode[1]
            ),
            lookups: [("fpm_prefill", self.counts[0]), ("fpm_decode", self.counts[1])]
                .iter()
                .filter(|(_, c)| c[0] + c[1] > 0)
                .map(|(k, c)| ((*k).into(), [c[0], c[1], 0, 0]))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::rc::Rc;
    use alloc::vec;
    use servesim_core::timing::PrefillChunk;

    /// A small cell with a CUDA-graph cliff between decode batch 4 and 5.
    fn cell() -> FpmCell {
        let mut prefill = Vec::new();
        for batch in [1u32, 2] {
            for kv in [0u64, 1024] {
                for tokens in [128u64, 512, 2048] {
                    #[allow(clippy::cast_precision_loss)]
                    let ms = 5.0 + 0.01 * tokens as f64 + 0.002 * kv as f64 + f64::from(batch);
                    prefill.push(PrefillPoint {
                        batch,
                        prefill_tokens: tokens,
                        kv_tokens: kv,
                        latency_ms: ms,
                    });
                }
            }
        }
        let mut decode = Vec::new();
        for (batch, base) in [(1u32, 6.0), (4, 6.5), (5, 13.0), (8, 14.0)] {
            for kv in [256u64, 4096, 65536] {
                #[allow(clippy::cast_precision_loss)]
                let ms = base + 1e-4 * kv as f64;
                decode.push(DecodePoint { batch, kv_tokens: kv, latency_ms: ms });
            }
        }
        FpmCell { label: "test".into(), prefill, decode }
    }

    fn model() -> FpmModel {
        FpmModel::new(&cell()).unwrap()
    }

    #[test]
    fn exact_hits_are_verbatim() {
        let m = model();
        for p in &cell().prefill {
            assert_eq!(
                m.prefill_ms(p.batch, p.prefill_tokens, p.kv_tokens).unwrap(),
                (p.latency_ms, Answer::Measured)
            );
        }
        for d in &cell().decode {
            assert_eq!(m.decode_ms(d.batch, d.kv_tokens).unwrap(), (d.latency_ms, Answer::Measured));
        }
    }

    #[test]
    fn interpolation_is_linear_between_brackets() {
        let m = model();
        // Halfway along the KV curve of batch 1: 6.0 + 1e-4 * (256 + 4096) / 2.
        let (ms, a) = m.decode_ms(1, 2176).unwrap();
        assert_eq!(a, Answer::Interpolated);
        assert!((ms - (6.0 + 1e-4 * 2176.0)).abs() < 1e-9, "{ms}");
        // Prefill is linear in every axis here, so the nested blend is exact.
        let (ms, _) = m.prefill_ms(2, 1000, 512).unwrap();
        assert!((ms - (5.0 + 10.0 + 1.024 + 2.0)).abs() < 1e-9, "{ms}");
    }

    #[test]
    fn graph_cliffs_stay_on_their_side() {
        let m = model();
        // Batch 6 lies between the eager rows 5 and 8, not across the 4 → 5 cliff.
        let (ms, _) = m.decode_ms(6, 4096).unwrap();
        let expect = 13.0 + (14.0 - 13.0) / 3.0 + 1e-4 * 4096.0;
        assert!((ms - expect).abs() < 1e-9, "{ms} vs {expect}");
        // Batch 3 stays under the graph rows.
        let (ms, _) = m.decode_ms(3, 256).unwrap();
        assert!(ms < 6.5 + 0.1, "{ms}");
    }

    #[test]
    fn outside_the_domain_is_refused() {
        let m = model();
        let e = m.decode_ms(9, 4096).unwrap_err();
        assert!(e.message.contains("outside the measured domain (batch 1..=8"), "{}", e.message);
        assert!(m.prefill_ms(1, 4096, 0).is_err());
        assert!(m.prefill_ms(1, 100, 0).is_err());
        assert!(m.decode_ms(1, 100_000).is_err());
    }

    #[test]
    fn curves_missing_coverage_are_skipped_not_extrapolated() {
        let mut c = cell();
        // Batch 4's curve stops at 4096 KV tokens: a batch-4 lookup at 8192 must blend the
        // nearest covering batches (1 and 5), never extend batch 4's curve.
        c.decode.retain(|d| !(d.batch == 4 && d.kv_tokens == 65536));
        let m = FpmModel::new(&c).unwrap();
        let (ms, _) = m.decode_ms(4, 8192).unwrap();
        let b1 = 6.0 + 1e-4 * 8192.0;
        let b5 = 13.0 + 1e-4 * 8192.0;
        assert!((ms - (b1 + (b5 - b1) * 3.0 / 4.0)).abs() < 1e-9, "{ms}");
    }

    #[test]
    fn mixed_steps_follow_the_published_rule_and_slowest_rank_wins() {
        let mut t = FpmTimer::new(Rc::new(model()));
        let rank = RankLoad {
            prefill: vec![PrefillChunk { new_tokens: 508, context_tokens: 0 }],
            decode_requests: 4,
            decode_kv_tokens: 4096,
        };
        // prefill(1, 512, 0) + decode(4, 4096) - decode(4, 256).
        let expect = (5.0 + 5.12 + 1.0) + (6.5 + 0.4096) - (6.5 + 0.0256);
        let ms = t.rank_ms(&rank).unwrap();
        assert!((ms - expect).abs() < 1e-9, "{ms} vs {expect}");
        let idle = RankLoad::default();
        let d = t.step_time(&[idle, rank]).unwrap();
        assert_eq!(d, SimDur::from_secs_f64(expect / 1e3));
        let report = t.report().unwrap();
        assert_eq!(report.model, "fpm");
        assert_eq!(report.lookups.len(), 2);
    }

    #[test]
    fn more_work_is_never_faster() {
        let m = model();
        let mut last = 0.0;
        for kv in (256..=65536).step_by(997) {
            let (ms, _) = m.decode_ms(6, kv).unwrap();
            assert!(ms >= last);
            last = ms;
        }
    }

    #[test]
    fn invalid_cells_are_errors() {
        let mut c = cell();
        c.decode.clear();
        assert!(FpmModel::new(&c).unwrap_err().message.contains("needs both"));
        let mut c = cell();
        c.prefill[3].latency_ms = f64::NAN;
        assert!(FpmModel::new(&c).unwrap_err().message.contains("prefill row 4"));
    }

    #[test]
    fn repeated_coordinates_use_the_median() {
        let mut c = cell();
        let d = c.decode[0];
        c.decode.push(DecodePoint { latency_ms: d.latency_ms + 3.0, ..d });
        c.decode.push(DecodePoint { latency_ms: d.latency_ms + 1.0, ..d });
        let m = FpmModel::new(&c).unwrap();
        assert_eq!(m.repeated_rows, 2);
        assert_eq!(m.decode_ms(d.batch, d.kv_tokens).unwrap().0, d.latency_ms + 1.0);
    }
}
