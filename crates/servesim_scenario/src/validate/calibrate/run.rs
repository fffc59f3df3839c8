//! A whole calibration as `servesim calibrate` and the page's Validate tab run it: the rows
//! checked, the constants fitted and cross-validated through the caller's evaluator, and the
//! report both print. [`Replay`] drives it for a caller that replays rows asynchronously (the
//! page's worker pool), one point at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use servesim_data::silicon::SiliconRow;

use super::{cross_validate, fit, Evaluate, Param, Score};
use crate::validate::Knobs;

/// What a calibration is asked: one engine's rows, the constants to fit and the folds.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// The file, as the report names it.
    pub silicon: String,
    /// The rows' engine.
    pub backend: String,
    /// Each model on its GPU.
    pub deployments: BTreeSet<String>,
    /// Measured mean TTFT and TPOT (ms) of each row.
    pub measured: Vec<(f64, f64)>,
    /// The constants to fit.
    pub params: Vec<Param>,
    /// Cross-validation folds (0: none).
    pub folds: usize,
    /// Each constant with its engine value where every row shares one, and the start (their
    /// median where releases differ).
    pub engine: Vec<(Param, Option<f64>, f64)>,
}

impl Setup {
    /// Checks a calibration of `rows` of `silicon`: `fit` names the constants (as `--fit`
    /// does), the rows ran on one engine, and `folds` is 0 or 2 to the rows.
    ///
    /// # Errors
    /// Naming what is wrong, as the CLI's usage errors do (exit 2).
    pub fn new(silicon: &str, rows: &[SiliconRow], fit: &[String], folds: usize) -> Result<Setup, String> {
        let mut params = Vec::new();
        for n in fit.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
            let p = Param::from_name(n).ok_or_else(|| {
                format!(
                    "--fit {n}: not a constant servesim fits; use {}",
                    Param::ALL.map(Param::name).join(", ")
                )
            })?;
            if !params.contains(&p) {
                params.push(p);
            }
        }
        if params.is_empty() {
            return Err("--fit names no constant".into());
        }
        let engines: BTreeSet<&str> = rows.iter().map(|r| r.backend.as_str()).collect();
        let Some(first) = engines.first() else { return Err(format!("{silicon}: no rows to calibrate")) };
        if engines.len() > 1 {
            let list: Vec<&str> = engines.iter().copied().collect();
            return Err(format!(
                "{silicon}: the selected rows ran on {} engines ({}); the constants are an engine's, so \
                 calibrate one at a time (e.g. --filter {first})",
                list.len(),
                list.join(", "),
            ));
        }
        if folds == 1 || folds > rows.len() {
            return Err(format!(
                "--folds {folds}: use 0 (no cross-validation) or 2 to {} (the rows)",
                rows.len()
            ));
        }
        let engine = params
            .iter()
            .map(|&p| {
                let mut v: Vec<f64> = rows.iter().map(|r| p.engine_value(r)).collect();
                v.sort_by(f64::total_cmp);
                let same = v.first() == v.last();
                (p, same.then(|| v[0]), v[v.len() / 2])
            })
            .collect();
        Ok(Setup {
            silicon: silicon.to_string(),
            backend: (*first).to_string(),
            deployments: rows.iter().map(|r| format!("{} on {}", r.model, r.system)).collect(),
            measured: rows.iter().map(|r| (r.ttft_ms, r.tpot_ms)).collect(),
            params,
            folds,
            engine,
        })
    }
}

/// What a calibration found.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    /// What was asked.
    pub setup: Setup,
    /// The fitted value of each constant, in [`Param::ALL`] order.
    pub fitted: Vec<(Param, f64)>,
    /// The rows' errors with the engine's constants.
    pub before: Score,
    /// With the fitted ones.
    pub after: Score,
    /// Each row predicted with constants fitted without it, when folds were asked.
    pub held_out: Option<Score>,
    /// Replays of the rows the whole calibration made.
    pub replays: usize,
}

/// Calibrates `setup`'s rows, replaying them (by position among them) through `eval`,
/// starting from `servesim validate`'s replay policy.
///
/// # Errors
/// When none of the rows could be replayed (the CLI's exit 1).
pub fn calibrate(setup: &Setup, eval: &mut Evaluate<'_>) -> Result<Calibration, String> {
    let mut replays = 0usize;
    let mut counted = |k: &Knobs, idx: &[usize]| {
        replays += 1;
        eval(k, idx)
    };
    let base = Knobs::replay_policy();
    let start: Vec<(Param, f64)> = setup.engine.iter().map(|&(p, _, m)| (p, m)).collect();
    let all: Vec<usize> = (0..setup.measured.len()).collect();
    let before = Score::of(&setup.measured, &counted(&base, &all));
    if before.predicted == 0 {
        return Err(format!(
            "{}: none of the {} rows could be replayed (`servesim validate --silicon` says why)",
            setup.silicon,
            setup.measured.len()
        ));
    }
    let fitted = fit(&setup.measured, &all, &setup.params, &base, &start, &mut counted);
    let held_out = (setup.folds >= 2)
        .then(|| cross_validate(&setup.measured, setup.folds, &setup.params, &base, &start, &mut counted));
    Ok(Calibration {
        setup: setup.clone(),
        fitted: fitted.values,
        before,
        after: fitted.score,
        held_out,
        replays,
    })
}

impl Calibration {
    /// Whether the engine's constants, which differ between the rows' releases, score better
    /// than the one set the fit found (the fit starts from the releases' shared values, so
    /// where every row shares them it is never worse).
    #[must_use]
    pub fn releases_win(&self) -> bool {
        self.setup.engine.iter().any(|(_, same, _)| same.is_none())
            && self.before.objective() < self.after.objective()
    }

    /// The `timing:` block of the fitted constants.
    #[must_use]
    pub fn timing(&self) -> String {
        let v: Vec<String> = self.fitted.iter().map(|(p, v)| format!("{}: {v}", p.name())).collect();
        format!("{{{}}}", v.join(", "))
    }

    /// The report as `--format table` prints it.
    #[must_use]
    pub fn table(&self) -> String {
        let s = &self.setup;
        let rows = s.measured.len();
        let mut out = format!(
            "servesim calibrate --silicon {}: {rows} {} row{}\n",
            s.silicon,
            s.backend,
            if rows == 1 { "" } else { "s" }
        );
        for m in &s.deployments {
            let _ = writeln!(out, "  {m}");
        }
        let _ = writeln!(out, "\n{:<18} {:>10} {:>10}", "constant", "engine", "fitted");
        for (&(p, same, _), &(_, v)) in s.engine.iter().zip(&self.fitted) {
            let e = same.map_or_else(|| "per release".to_string(), |x| format!("{x}"));
            let _ = writeln!(out, "{:<18} {e:>10} {v:>10}", p.name());
        }
        let _ = writeln!(
            out,
            "\n{:<22} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "", "TTFT MAPE", "TPOT MAPE", "TTFT bias", "TPOT bias", "predicted"
        );
        let mut line = |name: &str, s: &Score| {
            let _ = writeln!(
                out,
                "{name:<22} {:>9.1}% {:>9.1}% {:>+9.1}% {:>+9.1}% {:>10}",
                s.ttft_mape,
                s.tpot_mape,
                s.ttft_bias,
                s.tpot_bias,
                format!("{}/{}", s.predicted, s.rows)
            );
        };
        line("engine constants", &self.before);
        line("fitted", &self.after);
        if let Some(h) = &self.held_out {
            line(&format!("held out ({} folds)", s.folds), h);
        }
        let _ = writeln!(
            out,
            "\n{} replays of the rows. To predict with the fitted constants, set them on each \
             worker role of the scenario:\n  engine.workers.<role>.timing: {}",
            self.replays,
            self.timing()
        );
        if self.releases_win() {
            out.push_str(
                "The engine's constants differ between these rows' releases and score better than any one \
                 set found: keep them, or calibrate each release's rows (--filter) on their own.\n",
            );
        }
        if self.held_out.is_none() {
            out.push_str("(--folds 5 also scores every row with constants fitted without it)\n");
        }
        out
    }

    /// The report as Markdown: the command that ran it, then the table.
    #[must_use]
    pub fn to_markdown(&self, command: &str) -> String {
        format!("# servesim calibrate\n\n`{command}`\n\n```text\n{}```\n", self.table())
    }

    /// The report as `--format json` prints it.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        let score = |s: &Score| {
            serde_json::json!({
                "rows": s.rows, "predicted": s.predicted,
                "ttft_mape_pct": s.ttft_mape, "tpot_mape_pct": s.tpot_mape,
                "ttft_bias_pct": s.ttft_bias, "tpot_bias_pct": s.tpot_bias,
            })
        };
        let s = &self.setup;
        let constants: Vec<serde_json::Value> = s
            .engine
            .iter()
            .zip(&self.fitted)
            .map(
                |(&(p, same, _), &(_, v))| serde_json::json!({"name": p.name(), "engine": same, "fitted": v}),
            )
            .collect();
        let timing: serde_json::Map<String, serde_json::Value> =
            self.fitted.iter().map(|(p, v)| (p.name().to_string(), serde_json::json!(v))).collect();
        serde_json::json!({
            "silicon": s.silicon,
            "backend": s.backend,
            "deployments": s.deployments,
            "rows": s.measured.len(),
            "constants": constants,
            "engine_constants": score(&self.before),
            "fitted": score(&self.after),
            "held_out": self.held_out.as_ref().map(score),
            "folds": s.folds,
            "replays": self.replays,
            "engine_releases_better": self.releases_win(),
            "timing": timing,
        })
    }
}

/// A calibration for a caller whose replays arrive later (the page's worker pool): each
/// [`Replay::step`] reruns the whole calibration from the replays known so far, and stops at
/// the first point not yet replayed, asking for it. The search is deterministic, so the
/// rerun retraces every earlier point and the finished calibration is the one
/// [`calibrate`] gives with a synchronous evaluator.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    /// Predictions by the options that replay them ([`Knobs::options`]), then row position.
    known: BTreeMap<Vec<(&'static str, String)>, Predictions>,
}

/// Each row's prediction (position among the setup's rows → mean TTFT and TPOT, ms).
type Predictions = BTreeMap<usize, Option<(f64, f64)>>;

/// What a calibration needs next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Replays of these rows (positions among the setup's) with these knobs.
    Need {
        /// The knobs to replay with.
        knobs: Box<Knobs>,
        /// The rows not yet replayed with them.
        rows: Vec<usize>,
        /// Replays of the rows the calibration has had answered so far (its progress).
        done: usize,
    },
    /// The calibration, finished.
    Done(Box<Calibration>),
}

impl Replay {
    /// Records a replay of row `row` with `knobs`.
    pub fn add(&mut self, knobs: &Knobs, row: usize, predicted: Option<(f64, f64)>) {
        self.known.entry(knobs.options()).or_default().insert(row, predicted);
    }

    /// The calibration as far as the known replays take it.
    ///
    /// # Errors
    /// As [`calibrate`].
    pub fn step(&self, setup: &Setup) -> Result<Step, String> {
        let mut missing: Option<(Knobs, Vec<usize>)> = None;
        let mut done = 0usize;
        let mut eval = |k: &Knobs, idx: &[usize]| -> Vec<Option<(f64, f64)>> {
            if missing.is_some() {
                return vec![None; idx.len()];
            }
            let point = self.known.get(&k.options());
            let got: Vec<Option<Option<(f64, f64)>>> =
                idx.iter().map(|i| point.and_then(|p| p.get(i)).copied()).collect();
            if got.iter().all(Option::is_some) {
                done += 1;
                return got.into_iter().map(Option::flatten).collect();
            }
            let rows = idx.iter().zip(&got).filter(|(_, g)| g.is_none()).map(|(&i, _)| i).collect();
            missing = Some((*k, rows));
            vec![None; idx.len()]
        };
        let result = calibrate(setup, &mut eval);
        match missing {
            Some((knobs, rows)) => Ok(Step::Need { knobs: Box::new(knobs), rows, done }),
            None => result.map(|c| Step::Done(Box::new(c))),
        }
    }
}
