//! The Validate page's messages: selecting a calibration file's rows, replaying them as
//! `servesim validate` does, and building the CLI's table and reports from the outcomes.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use servesim_scenario::catalog::Catalog;
use servesim_scenario::validate::{self, calibrate, Knobs, Outcome, SiliconRow};
use servesim_scenario::Files;

use super::{FromWorker, WorkerState};

/// What the Validate page asks a worker (`ToWorker::Validation`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ask {
    /// Which rows of a calibration file a selection keeps: answer `RowsSelected`.
    SelectRows {
        /// The file's text (AIConfigurator `silicon_sample.csv` columns).
        csv: String,
        /// Its name, for error messages.
        source: String,
        /// The rows wanted.
        wanted: RowsWanted,
    },
    /// Replay rows of a calibration file (`servesim validate --silicon`): one `Validated`
    /// answer per row, in order.
    Validate {
        /// The file's text.
        csv: String,
        /// Its name, for error messages.
        source: String,
        /// Which rows, by position in the file's data rows (from 0).
        indices: Vec<usize>,
        /// Replay options as `(flag, value)`, the CLI's (`validate::OPTIONS`); none: the
        /// replay policy.
        options: Vec<(String, String)>,
    },
    /// The CLI's table, notes and reports of replayed rows: answer `Report`.
    Report {
        /// The file's text.
        csv: String,
        /// Its name, as the report names it.
        source: String,
        /// The rows replayed, by position in the file's data rows.
        indices: Vec<usize>,
        /// Their outcomes (`Validated` answers), in the same order.
        outcomes: Vec<Outcome>,
        /// The selection they were chosen by, for the report's command line.
        wanted: RowsWanted,
        /// The replay options they were replayed with (`Validate`'s).
        options: Vec<(String, String)>,
    },
    /// Calibrate the engine's constants on the rows `wanted` keeps (`servesim calibrate`):
    /// the coordinator answers with the replays it needs (`CalibrationNeeds`) until it has
    /// the report (`CalibrationReport`).
    Calibrate {
        /// The file's text.
        csv: String,
        /// Its name, as the report names it.
        source: String,
        /// The rows, as `SelectRows` chooses them.
        wanted: RowsWanted,
        /// The constants to fit by name (`--fit`).
        fit: Vec<String>,
        /// Cross-validation folds (`--folds`; 0: none).
        folds: usize,
    },
    /// The replays a `CalibrationNeeds` asked for: answer with the next need or the report.
    Calibrated {
        /// The options they replayed with, as asked.
        options: Vec<(String, String)>,
        /// Each row's position in the file and its predicted mean TTFT and TPOT (ms), if any.
        predicted: Vec<(usize, Option<(f64, f64)>)>,
    },
    /// The scenario a row is replayed as (`servesim validate --show-scenarios`), to open in
    /// Predict: answer `Scenario`.
    Scenario {
        /// The file's text.
        csv: String,
        /// Its name, for error messages.
        source: String,
        /// The row, by position in the file's data rows.
        index: usize,
        /// Replay options, as `Validate`'s.
        options: Vec<(String, String)>,
    },
    /// Replay a scenario and compare it with a measured per-request log (`servesim validate
    /// --requests LOG --config CONFIG`): answer `RequestsCompared`.
    CompareRequests {
        /// The log's text (vLLM per-request JSONL).
        log: String,
        /// Its name, for error messages.
        log_name: String,
        /// The scenario that replays the log's workload (YAML or JSON).
        config: String,
        /// Its name.
        source: String,
    },
}

/// A worker's answer to an [`Ask`] (`FromWorker::Validation`); failures are
/// `FromWorker::Failed`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Answer {
    /// The rows a `SelectRows` keeps, by position in the file's data rows, in file order.
    RowsSelected {
        /// Positions.
        indices: Vec<usize>,
    },
    /// One replayed row of a `Validate`.
    Validated {
        /// The row's position in the file's data rows.
        index: usize,
        /// Its prediction, or why there is none (`validate::run_row`).
        outcome: Outcome,
    },
    /// What `servesim validate` prints and writes for the rows of a `Report`.
    Report {
        /// The table, notes, reports and points to draw (boxed: the largest message).
        report: Box<ValidationAnswer>,
    },
    /// A calibration's next replays: `indices` (positions in the file) with `options`
    /// (`Validate`'s), answered by `Calibrated`.
    CalibrationNeeds {
        /// The replay options, as `(flag, value)`.
        options: Vec<(String, String)>,
        /// The rows to replay.
        indices: Vec<usize>,
        /// Replays of the rows answered so far.
        done: usize,
    },
    /// What `servesim calibrate` prints, as a table and as `--format json`.
    CalibrationReport {
        /// The table.
        table: String,
        /// The JSON.
        json: String,
    },
    /// The scenario a `Scenario` asked for.
    Scenario {
        /// The row's position in the file's data rows.
        index: usize,
        /// The scenario (a prediction.yaml).
        yaml: String,
    },
    /// What `servesim validate --requests` prints for a `CompareRequests`: mean, p50 and p90
    /// TTFT and TPOT, measured against predicted.
    RequestsCompared {
        /// The table.
        table: String,
    },
}

fn answer(id: u32, answer: Answer) -> FromWorker {
    FromWorker::Validation { id, answer }
}

impl Ask {
    /// The configs whose data files the worker must fetch first: the tables of the rows'
    /// GPUs, engines and releases, or the scenario's.
    #[must_use]
    pub fn configs(&self, state: &mut WorkerState) -> Vec<String> {
        match self {
            Ask::Validate { csv, source, indices, .. } => table_configs(state, csv, source, indices),
            Ask::Scenario { csv, source, index, .. } => table_configs(state, csv, source, &[*index]),
            Ask::CompareRequests { config, .. } => vec![config.clone()],
            Ask::SelectRows { .. } | Ask::Report { .. } | Ask::Calibrate { .. } | Ask::Calibrated { .. } => {
                Vec::new()
            }
        }
    }
}

/// Handles `ask`, posting its answers (or `Failed`) under `id`.
pub(super) fn handle(
    state: &mut WorkerState,
    id: u32,
    ask: Ask,
    files: &dyn Files,
    post: &mut dyn FnMut(FromWorker),
) {
    match ask {
        Ask::SelectRows { csv, source, wanted } => {
            let kept = state
                .catalog()
                .map_err(|e| e.to_string())
                .and_then(|c| select_rows(&csv, &source, &wanted, c));
            post(match kept {
                Ok(kept) => {
                    answer(id, Answer::RowsSelected { indices: kept.into_iter().map(|(i, _)| i).collect() })
                }
                Err(message) => FromWorker::Failed { id, message, exit_code: 2 },
            });
        }
        Ask::Validate { csv, source, indices, options } => {
            let rows = RowsToReplay { csv: &csv, source: &source, indices: &indices, options: &options };
            if let Err(reply) = validate_rows(state, id, &rows, files, post) {
                post(reply);
            }
        }
        Ask::Report { csv, source, indices, outcomes, wanted, options } => {
            let rows = RowsToReplay { csv: &csv, source: &source, indices: &indices, options: &options };
            post(validation_report(state, id, &rows, &outcomes, &wanted));
        }
        Ask::Calibrate { csv, source, wanted, fit, folds } => {
            post(start_calibration(state, id, &csv, &source, &wanted, &fit, folds));
        }
        Ask::Calibrated { options, predicted } => post(continue_calibration(state, id, &options, &predicted)),
        Ask::Scenario { csv, source, index, options } => {
            let rows = RowsToReplay { csv: &csv, source: &source, indices: &[index], options: &options };
            post(row_scenario(state, id, &rows, files));
        }
        Ask::CompareRequests { log, log_name, config, source } => {
            let log = LogToCompare { text: &log, name: &log_name };
            post(compare_request_log(state, id, &log, &config, &source, files));
        }
    }
}

/// A calibration file's rows, parsed once per file: every point of a calibration sends the
/// same file to every worker, which reads it for the tables to fetch and again to replay.
///
/// # Errors
/// The reader's, naming the file and line.
fn parsed_rows(state: &mut WorkerState, csv: &str, source: &str) -> Result<Arc<Vec<SiliconRow>>, String> {
    if let Some((name, text, rows)) = &state.silicon {
        if name == source && text == csv {
            return Ok(Arc::clone(rows));
        }
    }
    let rows = Arc::new(validate::parse_silicon(csv.as_bytes(), source).map_err(|e| e.to_string())?);
    state.silicon = Some((source.to_string(), csv.to_string(), Arc::clone(&rows)));
    Ok(rows)
}

/// A config naming each of `indices`' GPU, engine and release, so the worker fetches the
/// tables those rows replay with (a row that names no release, the default one's).
fn table_configs(state: &mut WorkerState, csv: &str, source: &str, indices: &[usize]) -> Vec<String> {
    let Ok(rows) = parsed_rows(state, csv, source) else {
        return Vec::new();
    };
    let mut configs: Vec<String> = indices
        .iter()
        .filter_map(|i| rows.get(*i))
        .map(|r| {
            // A row that names no release is timed with the default one's tables.
            let release = validate::engine_release(r);
            let version =
                if release.is_empty() { String::new() } else { format!(", backend_version: '{release}'") };
            format!(
                "engine: {{model: '{}', hardware: '{}', backend: '{}'{version}}}",
                r.model, r.system, r.backend
            )
        })
        .collect();
    configs.sort();
    configs.dedup();
    configs
}

/// Rows of a calibration file to replay, and the options to replay them with.
struct RowsToReplay<'a> {
    /// The file's text.
    pub csv: &'a str,
    /// Its name.
    pub source: &'a str,
    /// The rows, by position in the file's data rows.
    pub indices: &'a [usize],
    /// `(flag, value)` as the CLI's options ([`knobs`]).
    pub options: &'a [(String, String)],
}

/// The replay options the page's what-if fields hold, read as the CLI reads its flags.
///
/// # Errors
/// Naming the option, when one is unknown or out of range.
pub fn knobs(options: &[(String, String)]) -> Result<Knobs, String> {
    Knobs::from_options(options.iter().map(|(flag, value)| (flag.as_str(), value.as_str())))
}

/// Replays a calibration file's rows, one reply each, as `servesim validate` replays them
/// with the same options (the engine's recipe and published deployments included).
fn validate_rows(
    state: &mut WorkerState,
    id: u32,
    rows: &RowsToReplay<'_>,
    files: &dyn Files,
    post: &mut dyn FnMut(FromWorker),
) -> Result<(), FromWorker> {
    // A file or an option the page could not read is the user's to fix (the CLI's exit 2).
    let failed = |message: String| FromWorker::Failed { id, message, exit_code: 2 };
    let knobs = knobs(rows.options).map_err(failed)?;
    let source = rows.source;
    let parsed = parsed_rows(state, rows.csv, source).map_err(failed)?;
    let catalog = state.catalog().map_err(|e| FromWorker::Failed {
        id,
        message: e.to_string(),
        exit_code: e.exit_code(),
    })?;
    for &index in rows.indices {
        let row = parsed.get(index).ok_or_else(|| {
            failed(format!("{source}: no data row {index} (the file has {})", parsed.len()))
        })?;
        let outcome = validate::run_row(row, catalog, files, &knobs);
        post(answer(id, Answer::Validated { index, outcome }));
    }
    Ok(())
}

/// The scenario the first of `rows` is replayed as ([`Ask::Scenario`]).
fn row_scenario(state: &mut WorkerState, id: u32, rows: &RowsToReplay<'_>, files: &dyn Files) -> FromWorker {
    let failed = |message: String| FromWorker::Failed { id, message, exit_code: 2 };
    let knobs = match knobs(rows.options) {
        Ok(k) => k,
        Err(e) => return failed(e),
    };
    let parsed = match parsed_rows(state, rows.csv, rows.source) {
        Ok(p) => p,
        Err(e) => return failed(e),
    };
    let Some((&index, row)) = rows.indices.first().and_then(|i| Some((i, parsed.get(*i)?))) else {
        return failed(format!("{}: no such data row (the file has {})", rows.source, parsed.len()));
    };
    let catalog = match state.catalog() {
        Ok(c) => c,
        Err(e) => return FromWorker::Failed { id, message: e.to_string(), exit_code: e.exit_code() },
    };
    match validate::replay_scenario(row, catalog, files, &knobs) {
        Ok(replay) => answer(id, Answer::Scenario { index, yaml: replay.yaml }),
        Err(message) => FromWorker::Failed { id, message, exit_code: 1 },
    }
}

/// The rows the Validate page asks for: the CLI's `--filter`, `--class`, `--source` and
/// `--single-node` as the page's fields hold them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RowsWanted {
    /// Comma-separated texts, any of which a kept row's id, model, system or engine contains;
    /// empty keeps every row.
    pub filter: String,
    /// A class by its short name (`dense-agg`, …, `validate::CLASS_NAMES`); empty: any.
    pub class: String,
    /// Who measured the rows (`inferencex`, `aiconfigurator`, `other`); empty: anyone.
    pub measured_by: String,
    /// Only rows whose every worker fits in one node of its GPU.
    pub single_node: bool,
}

/// The rows of a file `wanted` keeps: `(position among the file's data rows, row)`.
///
/// # Errors
/// When the file cannot be read as a calibration file, a class or source is unknown, or no
/// row matches.
pub fn select_rows(
    csv: &str,
    name: &str,
    wanted: &RowsWanted,
    catalog: &Catalog,
) -> Result<Vec<(usize, SiliconRow)>, String> {
    let rows = validate::parse_silicon(csv.as_bytes(), name).map_err(|e| e.to_string())?;
    let mut keep = validate::Selection {
        filters: wanted
            .filter
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(str::to_string)
            .collect(),
        single_node: wanted.single_node,
        ..validate::Selection::default()
    };
    if !wanted.class.is_empty() {
        keep.add_class(&wanted.class)?;
    }
    if !wanted.measured_by.is_empty() {
        keep.set_source(&wanted.measured_by)?;
    }
    let kept: Vec<(usize, SiliconRow)> =
        rows.into_iter().enumerate().filter(|(_, r)| keep.keeps(r, catalog)).collect();
    if kept.is_empty() {
        return Err(format!("no row of {name} matches the selection ({})", describe(wanted)));
    }
    Ok(kept)
}

/// The selection as the CLI's options would spell it.
fn describe(w: &RowsWanted) -> String {
    let mut parts: Vec<String> = Vec::new();
    parts.extend((!w.filter.trim().is_empty()).then(|| format!("filter '{}'", w.filter.trim())));
    parts.extend((!w.class.is_empty()).then(|| format!("class {}", w.class)));
    parts.extend((!w.measured_by.is_empty()).then(|| format!("source {}", w.measured_by)));
    parts.extend(w.single_node.then(|| "single node".to_string()));
    if parts.is_empty() {
        "every row".to_string()
    } else {
        parts.join(", ")
    }
}

/// The `servesim validate` command that selects and replays rows as the page did (`name`: the
/// file), each argument quoted for a POSIX shell where it needs it.
#[must_use]
pub fn command_line(name: &str, wanted: &RowsWanted, knobs: &Knobs) -> String {
    let mut args = vec!["servesim".to_string(), "validate".into(), "--silicon".into(), name.into()];
    for filter in wanted.filter.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        args.extend(["--filter".into(), filter.into()]);
    }
    if !wanted.class.is_empty() {
        args.extend(["--class".into(), wanted.class.clone()]);
    }
    if !wanted.measured_by.is_empty() {
        args.extend(["--source".into(), wanted.measured_by.clone()]);
    }
    if wanted.single_node {
        args.push("--single-node".into());
    }
    args.extend(knobs.flags().split_whitespace().map(str::to_string));
    args.iter().map(|a| validate::shell_quoted(a)).collect::<Vec<_>>().join(" ")
}

/// A finished validation: what the CLI prints and writes for the same rows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationAnswer {
    /// The error table.
    pub table: String,
    /// The notes under it.
    pub notes: String,
    /// `--report FILE.json`.
    pub json: String,
    /// `--report FILE.md`.
    pub markdown: String,
    /// `--rows-csv`.
    pub rows_csv: String,
    /// (row id, measured, predicted) TTFT in ms of the predicted rows.
    pub ttft: Vec<(String, f64, f64)>,
    /// The same for TPOT.
    pub tpot: Vec<(String, f64, f64)>,
    /// Every row, for the page's table.
    pub rows: Vec<RowResult>,
}

/// One row of a validation as the page's table shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RowResult {
    /// The row's position in the file's data rows.
    pub index: usize,
    /// The row's id.
    pub id: String,
    /// Model, GPU, engine and mode.
    pub deployment: String,
    /// Prompt and output tokens and clients (`1024/128 × 8`).
    pub workload: String,
    /// Measured mean TTFT and TPOT (ms).
    pub measured: (f64, f64),
    /// Predicted, when the row could be replayed.
    pub predicted: Option<(f64, f64)>,
    /// Why not, otherwise.
    pub error: Option<String>,
}

impl RowResult {
    /// The TTFT and TPOT errors (percent; positive: predicted slower).
    #[must_use]
    pub fn errors_pct(&self) -> Option<(f64, f64)> {
        let (mt, mp) = self.measured;
        self.predicted.map(|(pt, pp)| (100.0 * (pt / mt - 1.0), 100.0 * (pp / mp - 1.0)))
    }
}

/// How the page's row table is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOrder {
    /// As in the file.
    File,
    /// Largest TTFT error first (rows not predicted last).
    Ttft,
    /// Largest TPOT error first.
    Tpot,
}

/// The rows whose id or deployment contains `filter` (any case), in `order`.
#[must_use]
pub fn shown_rows<'a>(rows: &'a [RowResult], filter: &str, order: RowOrder) -> Vec<&'a RowResult> {
    let filter = filter.trim().to_lowercase();
    let mut shown: Vec<&RowResult> = rows
        .iter()
        .filter(|r| {
            filter.is_empty() || format!("{} {}", r.id, r.deployment).to_lowercase().contains(&filter)
        })
        .collect();
    let size = |r: &RowResult| {
        r.errors_pct()
            .map_or(f64::NEG_INFINITY, |(t, p)| if order == RowOrder::Ttft { t.abs() } else { p.abs() })
    };
    if order != RowOrder::File {
        // Stable: equal errors keep file order.
        shown.sort_by(|a, b| size(b).total_cmp(&size(a)));
    }
    shown
}

/// The CLI's outputs for `rows` (at `positions` in the file) and their outcomes (`command`:
/// the command line that replays them so, [`command_line`]; `name`: the file, as the report
/// names it).
#[must_use]
pub fn validation_answer(
    command: &str,
    name: &str,
    (positions, rows): (&[usize], &[SiliconRow]),
    outcomes: &[Outcome],
    catalog: &Catalog,
) -> ValidationAnswer {
    let s = validate::summarize(rows, outcomes, catalog);
    let head = validate::ReportHead { command, silicon: name, version: env!("CARGO_PKG_VERSION") };
    let json = serde_json::to_string_pretty(&validate::to_json(&head, rows, outcomes, &s))
        .map(|t| t + "\n")
        .unwrap_or_default();
    let points = |pick: fn(&SiliconRow, (f64, f64)) -> (f64, f64)| {
        rows.iter()
            .zip(outcomes)
            .filter_map(|(r, o)| o.predicted.map(|p| (r.id.clone(), pick(r, p))))
            .map(|(id, (m, p))| (id, m, p))
            .collect()
    };
    ValidationAnswer {
        table: validate::table(&s),
        notes: validate::notes(&s),
        json,
        markdown: validate::to_markdown(&head, rows, outcomes, &s),
        rows_csv: validate::rows_csv(rows, outcomes),
        ttft: points(|r, p| (r.ttft_ms, p.0)),
        tpot: points(|r, p| (r.tpot_ms, p.1)),
        rows: rows
            .iter()
            .zip(outcomes)
            .zip(positions)
            .map(|((r, o), &index)| RowResult {
                index,
                id: r.id.clone(),
                deployment: format!(
                    "{} on {}, {}, {}",
                    r.model,
                    r.system,
                    r.backend,
                    validate::class(r, catalog)
                ),
                workload: format!("{}/{} × {}", r.isl, r.osl, r.concurrency),
                measured: (r.ttft_ms, r.tpot_ms),
                predicted: o.predicted,
                error: o.error.clone(),
            })
            .collect(),
    }
}

/// The report of replayed rows ([`validation_answer`]), or why there is none.
fn validation_report(
    state: &mut WorkerState,
    id: u32,
    replayed: &RowsToReplay<'_>,
    outcomes: &[Outcome],
    wanted: &RowsWanted,
) -> FromWorker {
    let failed = |message: String| FromWorker::Failed { id, message, exit_code: 2 };
    let (source, indices) = (replayed.source, replayed.indices);
    let knobs = match knobs(replayed.options) {
        Ok(k) => k,
        Err(e) => return failed(e),
    };
    let rows = match parsed_rows(state, replayed.csv, source) {
        Ok(r) => r,
        Err(e) => return failed(e),
    };
    let picked: Option<Vec<SiliconRow>> = indices.iter().map(|i| rows.get(*i).cloned()).collect();
    let Some(picked) = picked.filter(|p| p.len() == outcomes.len()) else {
        return failed(format!(
            "{source}: {} outcomes for {} rows of {}",
            outcomes.len(),
            indices.len(),
            rows.len()
        ));
    };
    let command = command_line(source, wanted, &knobs);
    match state.catalog() {
        Ok(catalog) => answer(
            id,
            Answer::Report {
                report: Box::new(validation_answer(&command, source, (indices, &picked), outcomes, catalog)),
            },
        ),
        Err(e) => FromWorker::Failed { id, message: e.to_string(), exit_code: e.exit_code() },
    }
}

/// A calibration the coordinator is running: its rows' positions in the file, what was
/// asked, and the replays answered so far.
pub(super) struct Calibrating {
    id: u32,
    /// Each selected row's position in the file, in the order `setup` holds them.
    positions: Vec<usize>,
    setup: calibrate::Setup,
    replay: calibrate::Replay,
}

/// [`Ask::Calibrate`]: selects the rows, checks what was asked as `servesim calibrate`
/// does, and answers with the first replays the calibration needs.
fn start_calibration(
    state: &mut WorkerState,
    id: u32,
    csv: &str,
    source: &str,
    wanted: &RowsWanted,
    fit: &[String],
    folds: usize,
) -> FromWorker {
    let failed = |message: String| FromWorker::Failed { id, message, exit_code: 2 };
    let kept = match state.catalog() {
        Ok(catalog) => select_rows(csv, source, wanted, catalog),
        Err(e) => return FromWorker::Failed { id, message: e.to_string(), exit_code: e.exit_code() },
    };
    let (positions, rows): (Vec<usize>, Vec<SiliconRow>) = match kept {
        Ok(k) => k.into_iter().unzip(),
        Err(e) => return failed(e),
    };
    let setup = match calibrate::Setup::new(source, &rows, fit, folds) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    state.calibration = Some(Calibrating { id, positions, setup, replay: calibrate::Replay::default() });
    calibration_step(state, id)
}

/// [`Ask::Calibrated`]: records the replays and answers with the next need or the report.
fn continue_calibration(
    state: &mut WorkerState,
    id: u32,
    options: &[(String, String)],
    predicted: &[(usize, Option<(f64, f64)>)],
) -> FromWorker {
    let knobs = match knobs(options) {
        Ok(k) => k,
        Err(message) => return FromWorker::Failed { id, message, exit_code: 2 },
    };
    let Some(job) = state.calibration.as_mut().filter(|c| c.id == id) else {
        return FromWorker::Failed { id, message: format!("no calibration {id} is running"), exit_code: 1 };
    };
    for &(position, p) in predicted {
        if let Some(row) = job.positions.iter().position(|q| *q == position) {
            job.replay.add(&knobs, row, p);
        }
    }
    calibration_step(state, id)
}

/// The running calibration's next need, or its report.
fn calibration_step(state: &mut WorkerState, id: u32) -> FromWorker {
    let Some(job) = state.calibration.as_ref().filter(|c| c.id == id) else {
        return FromWorker::Failed { id, message: format!("no calibration {id} is running"), exit_code: 1 };
    };
    match job.replay.step(&job.setup) {
        Ok(calibrate::Step::Need { knobs, rows, done }) => answer(
            id,
            Answer::CalibrationNeeds {
                options: knobs.options().into_iter().map(|(f, v)| (f.to_string(), v)).collect(),
                indices: rows.iter().filter_map(|r| job.positions.get(*r).copied()).collect(),
                done,
            },
        ),
        Ok(calibrate::Step::Done(c)) => {
            state.calibration = None;
            let json = serde_json::to_string_pretty(&c.to_json()).map(|t| t + "\n").unwrap_or_default();
            answer(id, Answer::CalibrationReport { table: c.table(), json })
        }
        Err(message) => {
            state.calibration = None;
            FromWorker::Failed { id, message, exit_code: 1 }
        }
    }
}

/// A measured per-request log: its text and name.
struct LogToCompare<'a> {
    pub text: &'a str,
    pub name: &'a str,
}

/// [`Ask::CompareRequests`]: replays `config` and compares it with the log, as `servesim
/// validate --requests` does.
fn compare_request_log(
    state: &mut WorkerState,
    id: u32,
    log: &LogToCompare<'_>,
    config: &str,
    source: &str,
    files: &dyn Files,
) -> FromWorker {
    let measured = match validate::parse_request_log(log.text.as_bytes(), log.name) {
        Ok(m) => m,
        Err(e) => return FromWorker::Failed { id, message: e.to_string(), exit_code: 2 },
    };
    let prediction = state.catalog().and_then(|catalog| {
        servesim_scenario::scenario::predict_with_catalog(config, source, catalog, files)
    });
    match prediction {
        Ok(p) => answer(
            id,
            Answer::RequestsCompared {
                table: validate::requests_table(&validate::compare_requests(&measured, &p)),
            },
        ),
        Err(e) => FromWorker::Failed { id, message: e.to_string(), exit_code: e.exit_code() },
    }
}
