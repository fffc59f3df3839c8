//! `servesim calibrate`: the engine's timing constants fitted to a file of measured rows.

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use servesim_scenario::validate::calibrate::{cross_validate, fit, Param, Score};
use servesim_scenario::validate::{run_row, Knobs};

use crate::{DiskFiles, Failure, Format};

/// What `servesim calibrate` was asked.
pub(crate) struct CalibrateArgs<'a> {
    pub(crate) silicon: &'a Path,
    pub(crate) rows: &'a crate::validate::RowSelection,
    pub(crate) fit: &'a [String],
    pub(crate) folds: usize,
    pub(crate) format: Format,
    pub(crate) jobs: usize,
    pub(crate) data_dir: Option<PathBuf>,
}

/// The constants `--fit` names, or why they cannot be fitted.
fn params(names: &[String]) -> Result<Vec<Param>, Failure> {
    let mut out = Vec::new();
    for n in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        let p = Param::from_name(n).ok_or_else(|| Failure {
            code: 2,
            message: format!(
                "--fit {n}: not a constant servesim fits; use {}",
                Param::ALL.map(Param::name).join(", ")
            ),
        })?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.is_empty() {
        return Err(Failure { code: 2, message: "--fit names no constant".into() });
    }
    Ok(out)
}

/// `servesim calibrate --silicon FILE`.
pub(crate) fn run(a: &CalibrateArgs<'_>) -> Result<(), Failure> {
    let started = Instant::now();
    let params = params(a.fit)?;
    let (rows, catalog) = crate::validate::select(a.silicon, a.rows)?;
    let engines: BTreeSet<&str> = rows.iter().map(|r| r.backend.as_str()).collect();
    if engines.len() > 1 {
        let list: Vec<&str> = engines.into_iter().collect();
        return Err(Failure {
            code: 2,
            message: format!(
                "{}: the selected rows ran on {} engines ({}); the constants are an engine's, so \
                 calibrate one at a time (e.g. --filter {})",
                a.silicon.display(),
                list.len(),
                list.join(", "),
                list[0]
            ),
        });
    }
    if a.folds == 1 || a.folds > rows.len() {
        return Err(Failure {
            code: 2,
            message: format!(
                "--folds {}: use 0 (no cross-validation) or 2 to {} (the rows)",
                a.folds,
                rows.len()
            ),
        });
    }
    let files = DiskFiles { base: PathBuf::from("."), data_dir: a.data_dir.clone() };
    // The replay policy of `servesim validate` at its defaults.
    let base = Knobs::replay_policy();
    let measured: Vec<(f64, f64)> = rows.iter().map(|r| (r.ttft_ms, r.tpot_ms)).collect();
    // Each constant starts at the rows' engine value (their median where releases differ).
    let engine: Vec<(Param, Option<f64>, f64)> = params
        .iter()
        .map(|&p| {
            let mut v: Vec<f64> = rows.iter().map(|r| p.engine_value(r)).collect();
            v.sort_by(f64::total_cmp);
            let same = v.first() == v.last();
            (p, same.then(|| v[0]), v[v.len() / 2])
        })
        .collect();
    let start: Vec<(Param, f64)> = engine.iter().map(|&(p, _, m)| (p, m)).collect();
    let show = std::io::stderr().is_terminal();
    let mut replays = 0usize;
    let mut eval = |k: &Knobs, idx: &[usize]| -> Vec<Option<(f64, f64)>> {
        replays += 1;
        if show {
            eprint!("\rreplay {replays} of the rows   ");
        }
        servesim_scenario::parallel::map(
            idx.len(),
            a.jobs,
            &|j| run_row(&rows[idx[j]], &catalog, &files, k),
            &|_, _| {},
        )
        .into_iter()
        .map(|o| o.and_then(|o| o.predicted))
        .collect()
    };
    let all: Vec<usize> = (0..rows.len()).collect();
    let before = Score::of(&measured, &eval(&base, &all));
    if before.predicted == 0 {
        return Err(Failure {
            code: 1,
            message: format!(
                "{}: none of the {} rows could be replayed (`servesim validate --silicon` says why)",
                a.silicon.display(),
                rows.len()
            ),
        });
    }
    let fitted = fit(&measured, &all, &params, &base, &start, &mut eval);
    let held_out =
        (a.folds >= 2).then(|| cross_validate(&measured, a.folds, &params, &base, &start, &mut eval));
    if show {
        eprintln!();
    }
    let report = Report {
        silicon: a.silicon,
        backend: &rows[0].backend,
        deployments: rows.iter().map(|r| format!("{} on {}", r.model, r.system)).collect(),
        rows: rows.len(),
        engine: &engine,
        fitted: &fitted.values,
        before,
        after: fitted.score,
        held_out,
        folds: a.folds,
        replays,
    };
    match a.format {
        Format::Json => print_json(&report)?,
        Format::Table => print_table(&report),
    }
    eprintln!("wall time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// What a calibration found, for printing.
struct Report<'a> {
    silicon: &'a Path,
    backend: &'a str,
    deployments: BTreeSet<String>,
    rows: usize,
    /// Each constant with its engine value where every row shares one, and the start.
    engine: &'a [(Param, Option<f64>, f64)],
    fitted: &'a [(Param, f64)],
    before: Score,
    after: Score,
    held_out: Option<Score>,
    folds: usize,
    replays: usize,
}

impl Report<'_> {
    /// Whether the engine's constants, which differ between the rows' releases, score better
    /// than the one set the fit found (the fit starts from the releases' shared values, so
    /// where every row shares them it is never worse).
    fn releases_win(&self) -> bool {
        self.engine.iter().any(|(_, same, _)| same.is_none())
            && self.before.objective() < self.after.objective()
    }

    /// The `timing:` block of the fitted constants.
    fn timing(&self) -> String {
        let v: Vec<String> = self.fitted.iter().map(|(p, v)| format!("{}: {v}", p.name())).collect();
        format!("{{{}}}", v.join(", "))
    }
}

/// `--format json`.
fn print_json(r: &Report<'_>) -> Result<(), Failure> {
    let score = |s: &Score| {
        serde_json::json!({
            "rows": s.rows, "predicted": s.predicted,
            "ttft_mape_pct": s.ttft_mape, "tpot_mape_pct": s.tpot_mape,
            "ttft_bias_pct": s.ttft_bias, "tpot_bias_pct": s.tpot_bias,
        })
    };
    let constants: Vec<serde_json::Value> = r
        .engine
        .iter()
        .zip(r.fitted)
        .map(|(&(p, same, _), &(_, v))| serde_json::json!({"name": p.name(), "engine": same, "fitted": v}))
        .collect();
    let timing_obj: serde_json::Map<String, serde_json::Value> =
        r.fitted.iter().map(|(p, v)| (p.name().to_string(), serde_json::json!(v))).collect();
    let out = serde_json::json!({
        "silicon": r.silicon.display().to_string(),
        "backend": r.backend,
        "deployments": r.deployments,
        "rows": r.rows,
        "constants": constants,
        "engine_constants": score(&r.before),
        "fitted": score(&r.after),
        "held_out": r.held_out.as_ref().map(score),
        "folds": r.folds,
        "replays": r.replays,
        "engine_releases_better": r.releases_win(),
        "timing": timing_obj,
    });
    let text = serde_json::to_string_pretty(&out).map_err(|e| Failure { code: 1, message: e.to_string() })?;
    say_raw!("{text}\n");
    Ok(())
}

/// `--format table`.
fn print_table(r: &Report<'_>) {
    say!("servesim calibrate --silicon {}: {} {} rows", r.silicon.display(), r.rows, r.backend);
    for m in &r.deployments {
        say!("  {m}");
    }
    say!("\n{:<18} {:>10} {:>10}", "constant", "engine", "fitted");
    for (&(p, same, _), &(_, v)) in r.engine.iter().zip(r.fitted) {
        let e = same.map_or_else(|| "per release".to_string(), |x| format!("{x}"));
        say!("{:<18} {e:>10} {v:>10}", p.name());
    }
    say!(
        "\n{:<22} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "",
        "TTFT MAPE",
        "TPOT MAPE",
        "TTFT bias",
        "TPOT bias",
        "predicted"
    );
    let line = |name: &str, s: &Score| {
        say!(
            "{name:<22} {:>9.1}% {:>9.1}% {:>+9.1}% {:>+9.1}% {:>10}",
            s.ttft_mape,
            s.tpot_mape,
            s.ttft_bias,
            s.tpot_bias,
            format!("{}/{}", s.predicted, s.rows)
        );
    };
    line("engine constants", &r.before);
    line("fitted", &r.after);
    if let Some(h) = &r.held_out {
        line(&format!("held out ({} folds)", r.folds), h);
    }
    say!(
        "\n{} replays of the rows. To predict with the fitted constants, set them on each \
         worker role of the scenario:\n  engine.workers.<role>.timing: {}",
        r.replays,
        r.timing()
    );
    if r.releases_win() {
        say!(
            "The engine's constants differ between these rows' releases and score better than any one \
             set found: keep them, or calibrate each release's rows (--filter) on their own."
        );
    }
    if r.held_out.is_none() {
        say!("(--folds 5 also scores every row with constants fitted without it)");
    }
}
