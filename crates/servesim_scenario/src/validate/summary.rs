//! Error tables: MAPE, bias, scatter and coverage by model × system × engine and by class,
//! and a measured per-request log against its replay.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use servesim_data::silicon::{Layout, Mode, SiliconRow};

use super::{Outcome, PROMPT_LOAD_LIMIT};
use crate::catalog::Catalog;

/// Mean absolute percentage error over a group, with coverage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Group {
    /// Rows in the group.
    pub rows: usize,
    /// Rows predicted.
    pub predicted: usize,
    /// Sum of |TTFT error| fractions over predicted rows.
    ttft_abs: f64,
    /// Sum of |TPOT error| fractions.
    tpot_abs: f64,
    /// Sum of signed TTFT errors (bias).
    ttft_signed: f64,
    /// Sum of signed TPOT errors.
    tpot_signed: f64,
    /// Predicted / measured (TTFT, TPOT) of each predicted row.
    ratios: Vec<(f64, f64)>,
    /// Sums of |ratio / s − 1| (TTFT, TPOT), each row against the best constant scale `s` of
    /// its deployment family (model × system × engine × mode): what no per-family constant removes.
    scatter_abs: (f64, f64),
    /// Sums of the shape errors (TTFT, TPOT) of the group's rows that are not the first point
    /// of their curve ([`curve_key`]).
    shape_abs: (f64, f64),
    /// Rows with a shape error.
    pub shape_points: usize,
}

impl Group {
    fn add(&mut self, row: &SiliconRow, o: &Outcome) {
        self.rows += 1;
        if let Some((ttft, tpot)) = o.predicted {
            self.predicted += 1;
            let e1 = ttft / row.ttft_ms - 1.0;
            let e2 = tpot / row.tpot_ms - 1.0;
            self.ttft_abs += e1.abs();
            self.tpot_abs += e2.abs();
            self.ttft_signed += e1;
            self.tpot_signed += e2;
            self.ratios.push((ttft / row.ttft_ms, tpot / row.tpot_ms));
        }
    }

    /// Sums of |ratio / s − 1| over this group's own rows (TTFT, TPOT), each at the scale `s`
    /// that minimises it: with u = 1/s the sum is Σ rᵢ·|u − 1/rᵢ|, least at the median of
    /// the 1/rᵢ weighted by rᵢ.
    fn residual_sums(&self) -> (f64, f64) {
        let side = |pick: fn(&(f64, f64)) -> f64| {
            let mut v: Vec<(f64, f64)> = self.ratios.iter().map(pick).map(|r| (1.0 / r, r)).collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            let half = 0.5 * v.iter().map(|p| p.1).sum::<f64>();
            let mut acc = 0.0;
            let Some(u) = v.iter().find(|p| {
                acc += p.1;
                acc >= half
            }) else {
                return 0.0;
            };
            v.iter().map(|p| (p.1 * u.0 - 1.0).abs()).sum()
        };
        (side(|r| r.0), side(|r| r.1))
    }

    /// `sum` as a percentage mean over the predicted rows (NaN when none was predicted).
    fn per_predicted_row(&self, sum: f64) -> f64 {
        percent_mean(sum, self.predicted)
    }

    /// TTFT scatter (%): the MAPE left after scaling each deployment family's predictions by
    /// the one constant that fits that family best, i.e. the error no per-family constant can
    /// remove (the rest is bias).
    #[must_use]
    pub fn ttft_scatter(&self) -> f64 {
        self.per_predicted_row(self.scatter_abs.0)
    }

    /// TPOT scatter (%), as [`Group::ttft_scatter`].
    #[must_use]
    pub fn tpot_scatter(&self) -> f64 {
        self.per_predicted_row(self.scatter_abs.1)
    }

    /// TTFT shape error (%): each curve (one deployment measured at several concurrencies,
    /// [`curve_key`]) divided by its value at its lowest concurrency, measured and predicted
    /// alike, then the mean |predicted / measured − 1| of the other points. How well the
    /// growth with load is predicted, whatever the level; AISimulate's accuracy dashboard
    /// publishes the same normalisation (REF §7). NaN when no curve has two predicted points.
    #[must_use]
    pub fn ttft_shape(&self) -> f64 {
        self.per_shape_point(self.shape_abs.0)
    }

    /// TPOT shape error (%), as [`Group::ttft_shape`].
    #[must_use]
    pub fn tpot_shape(&self) -> f64 {
        self.per_shape_point(self.shape_abs.1)
    }

    /// `sum` as a percentage mean over the rows with a shape error (NaN when there are none).
    fn per_shape_point(&self, sum: f64) -> f64 {
        percent_mean(sum, self.shape_points)
    }

    /// TTFT MAPE (%) over predicted rows.
    #[must_use]
    pub fn ttft_mape(&self) -> f64 {
        self.per_predicted_row(self.ttft_abs)
    }

    /// TPOT MAPE (%) over predicted rows.
    #[must_use]
    pub fn tpot_mape(&self) -> f64 {
        self.per_predicted_row(self.tpot_abs)
    }

    /// Mean signed TTFT error (%): positive means servesim predicts slower than measured.
    #[must_use]
    pub fn ttft_bias(&self) -> f64 {
        self.per_predicted_row(self.ttft_signed)
    }

    /// Mean signed TPOT error (%).
    #[must_use]
    pub fn tpot_bias(&self) -> f64 {
        self.per_predicted_row(self.tpot_signed)
    }

    /// Rows predicted / rows (%).
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn coverage(&self) -> f64 {
        if self.rows == 0 {
            return f64::NAN;
        }
        100.0 * self.predicted as f64 / self.rows as f64
    }
}

/// A sum of fractions as a percentage mean over `n` rows (NaN when there are none).
#[allow(clippy::cast_precision_loss)] // Row counts are far below 2^52.
fn percent_mean(sum: f64, n: usize) -> f64 {
    if n == 0 {
        return f64::NAN;
    }
    100.0 * sum / n as f64
}

/// The row's class: dense or MoE, aggregated or disaggregated.
#[must_use]
pub fn class(row: &SiliconRow, catalog: &Catalog) -> &'static str {
    let moe = catalog.model(&row.model).is_some_and(|m| m.moe.is_some());
    match (moe, row.disaggregated()) {
        (false, false) => "dense aggregated",
        (true, false) => "MoE aggregated",
        (false, true) => "dense disaggregated",
        (true, true) => "MoE disaggregated",
    }
}

/// A curve: the rows of one benchmark sweep (the source file) of one deployment — model,
/// GPU, engine and release, quantisation, prompt and output lengths, layouts and worker
/// counts — that differ only in their concurrency (and the batch that follows it).
#[must_use]
pub fn curve_key(row: &SiliconRow) -> String {
    let layout =
        |l: &Layout| format!("tp{} pp{} dp{} moe_tp{} moe_ep{}", l.tp, l.pp, l.dp, l.moe_tp, l.moe_ep);
    let deployment = match &row.mode {
        Mode::Agg { layout: l } => format!("agg {}", layout(l)),
        Mode::Disagg { prefill, prefill_workers, decode, decode_workers } => format!(
            "disagg {prefill_workers:?}x({}) {decode_workers:?}x({})",
            layout(prefill),
            layout(decode)
        ),
    };
    let sweep = row.source.split(';').next().unwrap_or("").trim();
    format!(
        "{}|{}|{}|{}|{}|{}|{}|{}x{}|{deployment}|{sweep}",
        row.model,
        row.system,
        row.backend,
        row.backend_version,
        row.precision,
        row.gemm_quant,
        row.moe_quant,
        row.isl,
        row.osl
    )
}

/// Each predicted row's shape errors (TTFT, TPOT) against the lowest-concurrency point of its
/// curve (`Outcome::curve`, else [`curve_key`] of the row as written; the first such row in
/// the file where two share it), `None` for that point itself and for rows alone on their
/// curve or not predicted.
#[must_use]
pub fn shape_errors(rows: &[SiliconRow], outcomes: &[Outcome]) -> Vec<Option<(f64, f64)>> {
    let mut curves: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, (r, o)) in rows.iter().zip(outcomes).enumerate() {
        if o.predicted.is_some() {
            let key = o.curve.clone().unwrap_or_else(|| curve_key(r));
            curves.entry(key).or_default().push(i);
        }
    }
    let mut out = vec![None; rows.len()];
    for members in curves.values() {
        let Some(&base) = members.iter().min_by_key(|&&i| (rows[i].concurrency, i)) else { continue };
        let Some((pt0, pp0)) = outcomes[base].predicted else { continue };
        let (mt0, mp0) = (rows[base].ttft_ms, rows[base].tpot_ms);
        for &i in members.iter().filter(|&&i| i != base) {
            let Some((pt, pp)) = outcomes[i].predicted else { continue };
            let e = |p: f64, p0: f64, m: f64, m0: f64| ((p / p0) / (m / m0) - 1.0).abs();
            let errors = (e(pt, pt0, rows[i].ttft_ms, mt0), e(pp, pp0, rows[i].tpot_ms, mp0));
            if errors.0.is_finite() && errors.1.is_finite() {
                out[i] = Some(errors);
            }
        }
    }
    out
}

/// Groups by `model × system × engine × mode`, by class, and overall.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// By `(model, system, backend, mode)`.
    pub by_config: BTreeMap<(String, String, String, String), Group>,
    /// By class (dense/MoE × aggregated/disaggregated).
    pub by_class: BTreeMap<&'static str, Group>,
    /// Every row.
    pub overall: Group,
    /// Disaggregated rows by where their worker counts came from ([`workers_source`]): how
    /// much of the error the pool sizing owns.
    pub disagg_by_workers: BTreeMap<&'static str, Group>,
    /// By class, the rows whose measurement served more prompts than the kernels of their
    /// prefilling workers can compute (`Outcome::prompt_load` above [`PROMPT_LOAD_LIMIT`]).
    pub beyond_kernels: BTreeMap<&'static str, Group>,
    /// By class, every other row: the error on measurements the kernel data allows (scatter
    /// not computed).
    pub within_kernels: BTreeMap<&'static str, Group>,
}

/// Where a disaggregated row's replayed worker counts came from: `"recorded"` by the row,
/// `"published"` by InferenceX's benchmark configuration, or `"sized"` from the estimate
/// (`None` for an aggregated row).
#[must_use]
pub fn workers_source(row: &SiliconRow, o: &Outcome) -> Option<&'static str> {
    match row.mode {
        Mode::Disagg { prefill_workers: Some(_), decode_workers: Some(_), .. } => Some("recorded"),
        Mode::Disagg { .. } if o.published => Some("published"),
        Mode::Disagg { .. } => Some("sized"),
        Mode::Agg { .. } => None,
    }
}

/// Summarises outcomes.
#[must_use]
pub fn summarize(rows: &[SiliconRow], outcomes: &[Outcome], catalog: &Catalog) -> Summary {
    let mut s = Summary::default();
    let mut class_of = BTreeMap::new();
    let shapes = shape_errors(rows, outcomes);
    for ((r, o), shape) in rows.iter().zip(outcomes).zip(shapes) {
        let mode = if r.disaggregated() { "disagg" } else { "agg" };
        let key = (r.model.clone(), r.system.clone(), r.backend.clone(), mode.to_string());
        let c = class(r, catalog);
        class_of.insert(key.clone(), c);
        let family = s.by_config.entry(key).or_default();
        family.add(r, o);
        let class = s.by_class.entry(c).or_default();
        class.add(r, o);
        s.overall.add(r, o);
        if let Some((t, p)) = shape {
            for g in [family, class, &mut s.overall] {
                g.shape_abs.0 += t;
                g.shape_abs.1 += p;
                g.shape_points += 1;
            }
        }
        if let Some(source) = workers_source(r, o) {
            s.disagg_by_workers.entry(source).or_default().add(r, o);
        }
        let side = if o.prompt_load.is_some_and(|l| l > PROMPT_LOAD_LIMIT) {
            &mut s.beyond_kernels
        } else {
            &mut s.within_kernels
        };
        side.entry(c).or_default().add(r, o);
    }
    // Scatter is measured within each family, then pooled into its class and the total.
    for (key, g) in &mut s.by_config {
        let (a, b) = g.residual_sums();
        g.scatter_abs = (a, b);
        let class = class_of.get(key).and_then(|c| s.by_class.get_mut(c));
        for pooled in class.into_iter().chain([&mut s.overall]) {
            pooled.scatter_abs.0 += a;
            pooled.scatter_abs.1 += b;
        }
    }
    s
}

/// The fidelity table as Markdown.
#[must_use]
pub fn table(s: &Summary) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| model | system | engine | mode | rows | coverage | TTFT MAPE | TPOT MAPE | TTFT bias | TPOT bias | TTFT scatter | TPOT scatter | TTFT shape | TPOT shape |"
    );
    let _ = writeln!(t, "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // A group none of whose rows was predicted has no error to show.
    let pct = |x: f64| if x.is_finite() { format!("{x:.1}%") } else { "n/a".into() };
    let signed = |x: f64| if x.is_finite() { format!("{x:+.1}%") } else { "n/a".into() };
    let line = |t: &mut String, label: &str, g: &Group| {
        let _ = writeln!(
            t,
            "| {label} | {} | {:.1}% | {} | {} | {} | {} | {} | {} | {} | {} |",
            g.rows,
            g.coverage(),
            pct(g.ttft_mape()),
            pct(g.tpot_mape()),
            signed(g.ttft_bias()),
            signed(g.tpot_bias()),
            pct(g.ttft_scatter()),
            pct(g.tpot_scatter()),
            pct(g.ttft_shape()),
            pct(g.tpot_shape())
        );
    };
    for ((m, sys, be, mode), g) in &s.by_config {
        line(&mut t, &format!("{m} | {sys} | {be} | {mode}"), g);
    }
    for (c, g) in &s.by_class {
        line(&mut t, &format!("**{c}** | | |"), g);
    }
    line(&mut t, "**all rows** | | |", &s.overall);
    t
}

/// A measured per-request log against a prediction of the same workload.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestComparison {
    /// Requests measured and predicted.
    pub counts: (usize, usize),
    /// `(metric, measured, predicted)` for mean, p50 and p90 of TTFT and TPOT (ms).
    pub rows: Vec<(String, f64, f64)>,
}

/// Percentile of sorted values by the reference nearest-rank rule.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = servesim_core::metrics::nearest_rank(sorted.len() as u64, p);
    usize::try_from(i).ok().and_then(|i| sorted.get(i)).copied().unwrap_or(f64::NAN)
}

fn stats(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    #[allow(clippy::cast_precision_loss)]
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    [mean, percentile(&v, 50.0), percentile(&v, 90.0)]
}

/// Compares TTFT and TPOT distributions (per request, the reference definitions) of a
/// measured log with a prediction's per-request records.
#[must_use]
pub fn compare_requests(
    measured: &[servesim_data::silicon::MeasuredRequest],
    predicted: &crate::Prediction,
) -> RequestComparison {
    let m_ttft = stats(measured.iter().map(|r| r.ttft_ms).collect());
    let m_tpot = stats(measured.iter().filter_map(|r| r.tpot_ms).collect());
    let done: Vec<crate::report::RequestRecord> =
        predicted.requests.iter().filter(|r| r.ttft_ms.is_some()).collect();
    let p_ttft = stats(done.iter().filter_map(|r| r.ttft_ms).collect());
    #[allow(clippy::cast_precision_loss)]
    let p_tpot = stats(
        done.iter()
            .filter(|r| r.output_length > 1)
            .filter_map(|r| match (r.first_token_ms, r.last_token_ms) {
                (Some(a), Some(b)) => Some((b - a) / f64::from(r.output_length - 1)),
                _ => None,
            })
            .collect(),
    );
    let mut rows = Vec::new();
    for (name, m, p) in [("TTFT", m_ttft, p_ttft), ("TPOT", m_tpot, p_tpot)] {
        for (i, stat) in ["mean", "p50", "p90"].iter().enumerate() {
            rows.push((format!("{name} {stat} (ms)"), m[i], p[i]));
        }
    }
    RequestComparison { counts: (measured.len(), done.len()), rows }
}

/// The comparison as a text table with signed errors.
#[must_use]
pub fn requests_table(c: &RequestComparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "requests: {} measured, {} predicted", c.counts.0, c.counts.1);
    let _ = writeln!(out, "{:<18} {:>12} {:>12} {:>9}", "metric", "measured", "servesim", "error");
    for (name, m, p) in &c.rows {
        let _ = writeln!(out, "{name:<18} {m:>12.1} {p:>12.1} {:>+8.1}%", (p - m) / m * 100.0);
    }
    out
}
