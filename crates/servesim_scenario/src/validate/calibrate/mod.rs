//! Fitting an engine's timing constants to a user's own measurements (`servesim calibrate`).
//!
//! servesim's per-engine constants (the prefill share multiplier, the per-step engine
//! overhead and the frontend delay) were fitted once on `shared/validation/calibration.csv`.
//! A deployment measured elsewhere (another driver, image, client or network) can sit off them
//! by a constant amount, which is what users of static estimators complain about (REF §8,
//! "Accuracy doubts"). This module refits those constants on measured rows in the same
//! format, replaying every row closed loop exactly as `servesim validate` does, and reports
//! the error before and after, and, with folds, on rows the fit did not see.
//!
//! The search is a coordinate descent: for each constant in turn, a scan of its whole range
//! then a golden-section refinement around the best point, on a fixed quantum (so repeated
//! points are replayed once and the answer is the same on any machine); a second sweep
//! refines each constant near its value. The objective is the mean of the TTFT and TPOT mean
//! absolute percentage errors over the predicted rows.

use std::collections::BTreeMap;

use servesim_data::silicon::SiliconRow;
use servesim_perf::oplevel::EngineCalibration;

use super::{engine_release, schedules_synchronously, Knobs};

mod run;
pub use run::{calibrate, Calibration, Replay, Setup, Step};

/// A timing constant `calibrate` can fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Param {
    /// `timing.prefill_scale`: multiplier on a step's prefill share.
    PrefillScale,
    /// `timing.step_overhead_ms`: engine time added to every forward step.
    StepOverheadMs,
    /// `timing.frontend_ms`: mean delay from a request's arrival to the engine seeing it.
    FrontendMs,
}

impl Param {
    /// Every constant, in the order they are fitted.
    pub const ALL: [Param; 3] = [Param::PrefillScale, Param::StepOverheadMs, Param::FrontendMs];

    /// The key under `engine.workers.<role>.timing`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Param::PrefillScale => "prefill_scale",
            Param::StepOverheadMs => "step_overhead_ms",
            Param::FrontendMs => "frontend_ms",
        }
    }

    /// The constant a name stands for.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Param> {
        Param::ALL.into_iter().find(|p| p.name() == s)
    }

    /// Searched range and quantum. The ranges hold every value an engine release has been
    /// calibrated to (`docs/validation.md`: prefill 1.0–1.5, overhead 0–2 ms, frontend
    /// 30–200 ms) with room on both sides; the quanta are below what a replay resolves.
    fn range(self) -> (f64, f64, f64) {
        match self {
            Param::PrefillScale => (0.5, 3.0, 0.01),
            Param::StepOverheadMs => (0.0, 10.0, 0.05),
            Param::FrontendMs => (0.0, 500.0, 1.0),
        }
    }

    /// The value replays use for `k` (`None`: each row's engine release's own).
    #[must_use]
    pub fn get(self, k: &Knobs) -> Option<f64> {
        match self {
            Param::PrefillScale => k.prefill_scale,
            Param::StepOverheadMs => k.step_overhead_ms,
            Param::FrontendMs => k.frontend_ms,
        }
    }

    fn set(self, k: &mut Knobs, v: f64) {
        match self {
            Param::PrefillScale => k.prefill_scale = Some(v),
            Param::StepOverheadMs => k.step_overhead_ms = Some(v),
            Param::FrontendMs => k.frontend_ms = Some(v),
        }
    }

    /// The value a row replays with by default: its engine release's calibration (no step
    /// overhead where the release schedules synchronously: its host time stands in for it).
    #[must_use]
    pub fn engine_value(self, row: &SiliconRow) -> f64 {
        let release = engine_release(row);
        let c = EngineCalibration::for_release(&row.backend, &release);
        match self {
            Param::PrefillScale => c.prefill_scale,
            Param::StepOverheadMs if schedules_synchronously(&row.backend, &release) => 0.0,
            Param::StepOverheadMs => c.step_overhead_s * 1e3,
            Param::FrontendMs => c.frontend_s * 1e3,
        }
    }

    /// `v` on this constant's quantum, within its range.
    fn snap(self, v: f64) -> f64 {
        let (lo, hi, q) = self.range();
        let n = libm::round((v.clamp(lo, hi) - lo) / q);
        // Rounded through a decimal string so that 1.1 prints as 1.1, not 1.1000000000000001.
        format!("{:.4}", lo + n * q).parse().unwrap_or(lo)
    }
}

/// Errors of a set of rows' predictions against their measurements.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Score {
    /// Rows scored.
    pub rows: usize,
    /// Rows predicted (the others could not be replayed).
    pub predicted: usize,
    /// TTFT mean absolute percentage error over the predicted rows (percent).
    pub ttft_mape: f64,
    /// TPOT mean absolute percentage error (percent).
    pub tpot_mape: f64,
    /// Mean signed TTFT error (percent; negative: predicted too fast).
    pub ttft_bias: f64,
    /// Mean signed TPOT error (percent).
    pub tpot_bias: f64,
}

impl Score {
    /// The errors of `predicted` (mean TTFT, TPOT in ms; `None`: not predicted) against
    /// `measured`, row by row.
    #[must_use]
    pub fn of(measured: &[(f64, f64)], predicted: &[Option<(f64, f64)>]) -> Score {
        let mut s = Score { rows: measured.len(), ..Score::default() };
        for (&(mt, mp), p) in measured.iter().zip(predicted) {
            let Some((pt, pp)) = *p else { continue };
            let (e1, e2) = (pt / mt - 1.0, pp / mp - 1.0);
            s.predicted += 1;
            s.ttft_mape += e1.abs();
            s.tpot_mape += e2.abs();
            s.ttft_bias += e1;
            s.tpot_bias += e2;
        }
        let n = s.predicted.max(1) as f64 / 100.0;
        s.ttft_mape /= n;
        s.tpot_mape /= n;
        s.ttft_bias /= n;
        s.tpot_bias /= n;
        s
    }

    /// What the search minimises: the mean of the two MAPEs (percent).
    #[must_use]
    pub fn objective(&self) -> f64 {
        (self.ttft_mape + self.tpot_mape) / 2.0
    }
}

/// Replays rows with knobs: the predictions of the rows at `indices`, in that order.
pub type Evaluate<'a> = dyn FnMut(&Knobs, &[usize]) -> Vec<Option<(f64, f64)>> + 'a;

/// The result of a fit.
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    /// The fitted value of each constant, in [`Param::ALL`] order.
    pub values: Vec<(Param, f64)>,
    /// The knobs the fitted values replay with.
    pub knobs: Knobs,
    /// The fitted rows' errors at those values.
    pub score: Score,
    /// Distinct replays of the rows the search made.
    pub evaluations: usize,
}

/// The search over one set of rows: every point it tries is replayed once.
struct Search<'e, 'a> {
    measured: Vec<(f64, f64)>,
    indices: Vec<usize>,
    base: Knobs,
    params: Vec<Param>,
    eval: &'e mut Evaluate<'a>,
    seen: BTreeMap<Vec<u64>, Score>,
    /// Rows the starting point predicts: a point that predicts fewer is not a fit.
    needed: usize,
}

impl Search<'_, '_> {
    fn knobs(&self, point: &[f64]) -> Knobs {
        let mut k = self.base;
        for (p, &v) in self.params.iter().zip(point) {
            p.set(&mut k, v);
        }
        k
    }

    fn score(&mut self, point: &[f64]) -> Score {
        let key: Vec<u64> = point.iter().map(|v| v.to_bits()).collect();
        if let Some(s) = self.seen.get(&key) {
            return *s;
        }
        let k = self.knobs(point);
        let s = Score::of(&self.measured, &(self.eval)(&k, &self.indices));
        self.seen.insert(key, s);
        s
    }

    /// The objective at `point`, infinite where rows the base predicts drop out.
    fn cost(&mut self, point: &[f64]) -> f64 {
        let s = self.score(point);
        if s.predicted < self.needed || s.predicted == 0 {
            f64::INFINITY
        } else {
            s.objective()
        }
    }

    /// Moves coordinate `i` of `point` to the best value in `[lo, hi]`: a scan of `points`
    /// values (none when 0) then a golden-section refinement around the best one.
    fn line(&mut self, point: &mut [f64], i: usize, lo: f64, hi: f64, points: usize) {
        let p = self.params[i];
        let q = p.range().2;
        let at = |s: &mut Self, v: f64, point: &mut [f64]| {
            let old = point[i];
            point[i] = p.snap(v);
            let c = s.cost(point);
            let v = point[i];
            point[i] = old;
            (c, v)
        };
        let (mut best_c, mut best_v) = at(self, point[i], point);
        // Without a scan the whole interval is the bracket; after one, the scan's neighbours
        // of its best point.
        let (mut a, mut b) = (lo, hi);
        if points > 1 {
            let step = (hi - lo) / (points - 1) as f64;
            for j in 0..points {
                let (c, v) = at(self, lo + step * j as f64, point);
                if c < best_c {
                    (best_c, best_v) = (c, v);
                }
            }
            (a, b) = ((best_v - step).max(lo), (best_v + step).min(hi));
        }
        // Golden section, down to the quantum.
        let phi = (libm::sqrt(5.0) - 1.0) / 2.0;
        // Each step keeps one interior point and replays one new one.
        let mut x1 = b - phi * (b - a);
        let mut x2 = a + phi * (b - a);
        let (mut c1, v1) = at(self, x1, point);
        let (mut c2, v2) = at(self, x2, point);
        for (c, v) in [(c1, v1), (c2, v2)] {
            if c < best_c {
                (best_c, best_v) = (c, v);
            }
        }
        while b - a > 2.0 * q {
            let (c, v);
            if c1 <= c2 {
                (b, x2, c2) = (x2, x1, c1);
                x1 = b - phi * (b - a);
                (c, v) = at(self, x1, point);
                c1 = c;
            } else {
                (a, x1, c1) = (x1, x2, c2);
                x2 = a + phi * (b - a);
                (c, v) = at(self, x2, point);
                c2 = c;
            }
            if c < best_c {
                (best_c, best_v) = (c, v);
            }
        }
        point[i] = best_v;
    }

    /// Nelder–Mead over the constants scaled to their ranges, from `point`, every vertex
    /// snapped to the quanta; ends when the simplex is within a few quanta or after
    /// [`SIMPLEX_ITERATIONS`].
    fn simplex(&mut self, point: &mut Vec<f64>) {
        let ranges: Vec<(f64, f64, f64)> = self.params.iter().map(|p| p.range()).collect();
        let params = self.params.clone();
        let to_value = |x: &[f64]| -> Vec<f64> {
            params
                .iter()
                .zip(&ranges)
                .zip(x)
                .map(|((p, &(lo, hi, _)), &u)| p.snap(lo + u.clamp(0.0, 1.0) * (hi - lo)))
                .collect()
        };
        let n = point.len();
        let x0: Vec<f64> = point.iter().zip(&ranges).map(|(&v, &(lo, hi, _))| (v - lo) / (hi - lo)).collect();
        let mut verts: Vec<(f64, Vec<f64>)> = Vec::with_capacity(n + 1);
        for j in 0..=n {
            let mut x = x0.clone();
            if j > 0 {
                x[j - 1] += if x[j - 1] > 0.5 { -SIMPLEX_STEP } else { SIMPLEX_STEP };
            }
            let c = self.cost(&to_value(&x));
            verts.push((c, x));
        }
        let tiny = ranges.iter().map(|&(lo, hi, q)| 2.0 * q / (hi - lo)).fold(f64::INFINITY, f64::min);
        for _ in 0..SIMPLEX_ITERATIONS {
            verts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let size = verts[1..]
                .iter()
                .flat_map(|(_, x)| x.iter().zip(&verts[0].1).map(|(a, b)| (a - b).abs()))
                .fold(0.0, f64::max);
            if size < tiny {
                break;
            }
            let centroid: Vec<f64> =
                (0..n).map(|d| verts[..n].iter().map(|(_, x)| x[d]).sum::<f64>() / n as f64).collect();
            let along = |t: f64| -> Vec<f64> {
                centroid.iter().zip(&verts[n].1).map(|(c, w)| (c + t * (c - w)).clamp(0.0, 1.0)).collect()
            };
            let xr = along(1.0);
            let cr = self.cost(&to_value(&xr));
            if cr < verts[0].0 {
                let xe = along(2.0);
                let ce = self.cost(&to_value(&xe));
                verts[n] = if ce < cr { (ce, xe) } else { (cr, xr) };
            } else if cr < verts[n - 1].0 {
                verts[n] = (cr, xr);
            } else {
                let xc = along(-0.5);
                let cc = self.cost(&to_value(&xc));
                if cc < verts[n].0 {
                    verts[n] = (cc, xc);
                } else {
                    // Shrink towards the best vertex.
                    let best = verts[0].1.clone();
                    for v in &mut verts[1..] {
                        let x: Vec<f64> = v.1.iter().zip(&best).map(|(a, b)| b + (a - b) / 2.0).collect();
                        *v = (self.cost(&to_value(&x)), x);
                    }
                }
            }
        }
        verts.sort_by(|a, b| a.0.total_cmp(&b.0));
        *point = to_value(&verts[0].1);
    }
}

/// Values of the first scan across a constant's range (every tenth of it): coarse enough to
/// be cheap, fine enough that the golden section starts in the right valley.
const SCAN_POINTS: usize = 11;

/// The last refinement searches a fortieth of a constant's range each side of its value.
const POLISH_SPAN: f64 = 40.0;

/// First step of the simplex along each constant, as a fraction of its range.
const SIMPLEX_STEP: f64 = 0.05;

/// Most simplex iterations of a fit (each replays the rows once or twice).
const SIMPLEX_ITERATIONS: usize = 60;

/// Fits `params` on the rows at `indices` (their `measured` mean TTFT and TPOT, ms), starting
/// from `base` with each unset constant at `start`'s value. Deterministic: the same rows,
/// start and evaluator give the same fit.
pub fn fit(
    measured: &[(f64, f64)],
    indices: &[usize],
    params: &[Param],
    base: &Knobs,
    start: &[(Param, f64)],
    eval: &mut Evaluate<'_>,
) -> Fit {
    let mut params: Vec<Param> = params.to_vec();
    params.sort();
    params.dedup();
    let measured: Vec<(f64, f64)> = indices.iter().map(|&i| measured[i]).collect();
    let mut s = Search {
        measured,
        indices: indices.to_vec(),
        base: *base,
        params: params.clone(),
        eval,
        seen: BTreeMap::new(),
        needed: 0,
    };
    let mut point: Vec<f64> = params
        .iter()
        .map(|p| {
            let v = p.get(base).or_else(|| start.iter().find(|(q, _)| q == p).map(|&(_, v)| v));
            p.snap(v.unwrap_or(p.range().0))
        })
        .collect();
    s.needed = s.score(&point).predicted;
    // Each constant over its whole range, then the simplex for the ridges where two constants
    // trade off (the frontend delay and the prefill multiplier both move TTFT), then each
    // constant near its value.
    for (i, p) in params.iter().enumerate() {
        let (lo, hi, _) = p.range();
        s.line(&mut point, i, lo, hi, SCAN_POINTS);
    }
    if params.len() > 1 {
        s.simplex(&mut point);
    }
    for (i, p) in params.iter().enumerate() {
        let (lo, hi, q) = p.range();
        let span = ((hi - lo) / POLISH_SPAN).max(4.0 * q);
        let (a, b) = ((point[i] - span).max(lo), (point[i] + span).min(hi));
        s.line(&mut point, i, a, b, 0);
    }
    let score = s.score(&point);
    let knobs = s.knobs(&point);
    Fit { values: params.iter().copied().zip(point).collect(), knobs, score, evaluations: s.seen.len() }
}

/// `folds`-fold cross-validation: rows are dealt to folds in turn (row `i` to fold
/// `i % folds`), each fold is predicted with constants fitted on the others, and the
/// held-out predictions of every row are scored together.
pub fn cross_validate(
    measured: &[(f64, f64)],
    folds: usize,
    params: &[Param],
    base: &Knobs,
    start: &[(Param, f64)],
    eval: &mut Evaluate<'_>,
) -> Score {
    let n = measured.len();
    let folds = folds.clamp(2, n.max(2));
    let mut held_out: Vec<Option<(f64, f64)>> = vec![None; n];
    for f in 0..folds {
        let (test, train): (Vec<usize>, Vec<usize>) = (0..n).partition(|i| i % folds == f);
        if test.is_empty() || train.is_empty() {
            continue;
        }
        let fitted = fit(measured, &train, params, base, start, eval);
        for (i, p) in test.iter().zip(eval(&fitted.knobs, &test)) {
            held_out[*i] = p;
        }
    }
    Score::of(measured, &held_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An evaluator whose rows are predicted exactly at prefill 1.37 and frontend 84 ms and
    /// drift from them linearly, row by row, as a replay's would.
    fn synthetic(calls: &mut usize) -> impl FnMut(&Knobs, &[usize]) -> Vec<Option<(f64, f64)>> + '_ {
        move |k: &Knobs, idx: &[usize]| {
            *calls += 1;
            let (p, f) = (k.prefill_scale.unwrap_or(1.0), k.frontend_ms.unwrap_or(50.0));
            idx.iter()
                .map(|&i| {
                    let w = 1.0 + i as f64;
                    let ttft = 100.0 * w + 60.0 * w * (p - 1.37) + (f - 84.0);
                    let tpot = 10.0 + 4.0 * (p - 1.37) / w;
                    Some((ttft, tpot))
                })
                .collect()
        }
    }

    fn measured(n: usize) -> Vec<(f64, f64)> {
        (0..n).map(|i| (100.0 * (1.0 + i as f64), 10.0)).collect()
    }

    fn setup(rows: usize, folds: usize) -> Setup {
        Setup {
            silicon: "cal.csv".into(),
            backend: "vllm".into(),
            deployments: ["m on h100_sxm".to_string()].into(),
            measured: measured(rows),
            params: vec![Param::PrefillScale, Param::FrontendMs],
            folds,
            engine: vec![(Param::PrefillScale, Some(1.0), 1.0), (Param::FrontendMs, Some(50.0), 50.0)],
        }
    }

    #[test]
    fn a_calibration_replayed_a_point_at_a_time_is_the_synchronous_one() {
        let setup = setup(6, 3);
        let mut calls = 0;
        let direct = calibrate(&setup, &mut synthetic(&mut calls)).unwrap();
        assert_eq!(direct.replays, calls);
        assert!(direct.after.objective() < 0.5 && direct.held_out.is_some(), "{direct:?}");
        // The page's way: ask for the first missing point, replay it, ask again.
        let (mut replay, mut asked, mut unused) = (Replay::default(), 0, 0);
        let mut oracle = synthetic(&mut unused);
        let done = loop {
            match replay.step(&setup).unwrap() {
                Step::Need { knobs, rows, done } => {
                    // Each step retraces the points before it (a fold's point may be an earlier
                    // one's on its rows, known without asking).
                    assert!(done >= asked, "{done} done, {asked} asked");
                    assert!(!rows.is_empty());
                    for (row, p) in rows.iter().zip(oracle(&knobs, &rows)) {
                        replay.add(&knobs, *row, p);
                    }
                    asked += 1;
                }
                Step::Done(c) => break c,
            }
        };
        assert_eq!(*done, direct);
        // Distinct points only: the rows of a point already seen are never asked again.
        assert!(asked <= direct.replays, "{asked} asked, {} replays", direct.replays);
        let table = done.table();
        assert!(
            table.starts_with("servesim calibrate --silicon cal.csv: 6 vllm rows\n  m on h100_sxm\n"),
            "{table}"
        );
        assert!(table.contains("held out (3 folds)"), "{table}");
        assert_eq!(done.to_json()["replays"], direct.replays);
    }

    #[test]
    fn a_calibration_of_rows_none_can_replay_says_so() {
        let mut none = |_: &Knobs, idx: &[usize]| vec![None; idx.len()];
        let e = calibrate(&setup(2, 0), &mut none).unwrap_err();
        assert!(e.contains("none of the 2 rows could be replayed"), "{e}");
        let mut replay = Replay::default();
        let Step::Need { knobs, rows, .. } = replay.step(&setup(2, 0)).unwrap() else { panic!() };
        assert_eq!((*knobs, rows), (Knobs::replay_policy(), vec![0, 1]));
        replay.add(&knobs, 0, None);
        replay.add(&knobs, 1, None);
        assert!(replay.step(&setup(2, 0)).unwrap_err().contains("none of the 2 rows"));
    }

    #[test]
    fn the_search_finds_the_constants_that_reproduce_the_rows() {
        let m = measured(6);
        let idx: Vec<usize> = (0..6).collect();
        let mut calls = 0;
        let mut eval = synthetic(&mut calls);
        let params = [Param::PrefillScale, Param::FrontendMs];
        let start = [(Param::PrefillScale, 1.0), (Param::FrontendMs, 50.0)];
        let f = fit(&m, &idx, &params, &Knobs::default(), &start, &mut eval);
        assert_eq!(f.values[0].0, Param::PrefillScale);
        assert!((f.values[0].1 - 1.37).abs() <= 0.011, "{f:?}");
        assert!((f.values[1].1 - 84.0).abs() <= 1.0, "{f:?}");
        assert!(f.score.objective() < 0.5, "{f:?}");
        assert_eq!(f.knobs.prefill_scale, Some(f.values[0].1));
        assert_eq!(f.knobs.step_overhead_ms, None, "an unfitted constant stays the engine's");
        drop(eval);
        assert_eq!(calls, f.evaluations, "every point is replayed once");
    }

    #[test]
    fn a_fit_is_never_worse_than_its_start_and_is_deterministic() {
        let m = measured(4);
        let idx = [0, 1, 2, 3];
        let start = [(Param::PrefillScale, 1.37), (Param::FrontendMs, 84.0)];
        let params = [Param::FrontendMs, Param::PrefillScale];
        let (mut c1, mut c2) = (0, 0);
        let a = fit(&m, &idx, &params, &Knobs::default(), &start, &mut synthetic(&mut c1));
        let b = fit(&m, &idx, &params, &Knobs::default(), &start, &mut synthetic(&mut c2));
        assert_eq!(a, b);
        assert!(a.score.objective() <= 1e-9, "{a:?}");
    }

    #[test]
    fn a_set_knob_is_the_starting_point() {
        let m = measured(3);
        let base = Knobs { frontend_ms: Some(84.0), ..Knobs::default() };
        let mut calls = 0;
        let f = fit(&m, &[0, 1, 2], &[Param::PrefillScale], &base, &[], &mut synthetic(&mut calls));
        assert_eq!(f.knobs.frontend_ms, Some(84.0), "only the asked-for constants move");
        assert!((f.values[0].1 - 1.37).abs() <= 0.011, "{f:?}");
    }

    #[test]
    fn held_out_rows_are_scored_with_constants_fitted_without_them() {
        let m = measured(6);
        let start = [(Param::PrefillScale, 1.0), (Param::FrontendMs, 50.0)];
        let mut calls = 0;
        let s = cross_validate(
            &m,
            3,
            &[Param::PrefillScale, Param::FrontendMs],
            &Knobs::default(),
            &start,
            &mut synthetic(&mut calls),
        );
        assert_eq!((s.rows, s.predicted), (6, 6));
        assert!(s.objective() < 1.0, "{s:?}");
    }

    #[test]
    fn rows_that_stop_being_predicted_rule_a_point_out() {
        let m = measured(2);
        let mut eval = |k: &Knobs, idx: &[usize]| -> Vec<Option<(f64, f64)>> {
            let p = k.prefill_scale.unwrap_or(1.0);
            // Exact at 2.0, but the second row fails above 1.5.
            idx.iter()
                .map(|&i| {
                    (i == 0 || p <= 1.5).then(|| (100.0 * (1.0 + i as f64) * (1.0 + (p - 2.0) / 4.0), 10.0))
                })
                .collect()
        };
        let f = fit(
            &m,
            &[0, 1],
            &[Param::PrefillScale],
            &Knobs::default(),
            &[(Param::PrefillScale, 1.0)],
            &mut eval,
        );
        assert_eq!(f.score.predicted, 2);
        assert!(f.values[0].1 <= 1.5, "{f:?}");
    }

    #[test]
    fn engine_values_are_what_each_release_replays_with() {
        let head = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n";
        let row = |backend: &str, version: &str| {
            let csv = format!(
                "{head}r,,{backend},{version},Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,8,1,1,1,1,1,,,,,,,,,,,,,,,100,10\n"
            );
            servesim_data::silicon::parse(csv.as_bytes(), "rows.csv").unwrap().remove(0)
        };
        let (old_vllm, vllm, trt10) =
            (row("vllm", "0.12.0"), row("vllm", "0.24.0"), row("trtllm", "1.0.0rc3"));
        // vLLM 0.12 schedules between steps: its host time replaces the step overhead.
        assert_eq!(Param::StepOverheadMs.engine_value(&old_vllm), 0.0);
        assert!(Param::StepOverheadMs.engine_value(&vllm) > 0.0);
        assert_eq!(Param::PrefillScale.engine_value(&trt10), 1.25);
        assert_eq!(Param::FrontendMs.engine_value(&old_vllm), 50.0);
    }

    #[test]
    fn names_round_trip_and_values_snap_to_the_quantum() {
        for p in Param::ALL {
            assert_eq!(Param::from_name(p.name()), Some(p));
        }
        assert_eq!(Param::from_name("prefill"), None);
        assert_eq!(Param::PrefillScale.snap(1.1049), 1.1);
        assert_eq!(Param::FrontendMs.snap(-3.0), 0.0);
        assert_eq!(Param::StepOverheadMs.snap(99.0), 10.0);
    }

    #[test]
    fn scores_are_percentages_over_the_predicted_rows() {
        let s = Score::of(
            &[(100.0, 10.0), (200.0, 20.0), (50.0, 5.0)],
            &[Some((110.0, 9.0)), None, Some((45.0, 5.0))],
        );
        assert_eq!((s.rows, s.predicted), (3, 2));
        assert!((s.ttft_mape - 10.0).abs() < 1e-9 && (s.ttft_bias - 0.0).abs() < 1e-9);
        assert!((s.tpot_mape - 5.0).abs() < 1e-9 && (s.tpot_bias + 5.0).abs() < 1e-9);
    }
}
