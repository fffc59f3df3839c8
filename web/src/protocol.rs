//! Messages between the page and the simulation worker, and the worker's request handler.
//!
//! Messages travel as JSON text through `postMessage`. The handler is plain Rust with no
//! browser dependency, so it is tested natively as well as in the browser.

use serde::{Deserialize, Serialize};
use servesim_scenario::catalog::Catalog;
use servesim_scenario::estimate::confirm::{replay, replay_from_json, replay_to_json, Confirm};
use servesim_scenario::estimate::sweep::{default_sweep, SweepSpec};
use servesim_scenario::recommend::{
    config_sha256, evaluate_at, finish, parse_spec, Candidate, Fidelity, Search, Spec,
};
use servesim_scenario::report::{to_pretty_json, Requests};
use servesim_scenario::scenario::{parse_with_overrides, prepare};
use servesim_scenario::{Files, ScenarioError};

/// servesim's data files (kernel tables) the worker fetched from the page's origin, by path
/// under `data/`. Files the user dropped on the Data page are kept in [`WorkerState`].
#[derive(Clone, Debug, Default)]
pub struct MemFiles {
    /// Data files by path (`perf/h200_sxm/vllm/0.24.0/gemm.parquet`).
    pub data: std::collections::BTreeMap<String, Vec<u8>>,
}

impl Files for MemFiles {
    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        Err(format!("cannot read '{path}': no files are available here"))
    }

    fn data(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        Ok(self.data.get(path).cloned())
    }
}

/// Page → worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToWorker {
    /// Run a scenario.
    Run {
        /// Request id, echoed in every reply.
        id: u32,
        /// Config text (YAML or JSON).
        config: String,
        /// Name shown in error messages.
        source: String,
    },
    /// Start coordinating a search (`servesim recommend`): reply with its first stage.
    Plan {
        /// Search id, echoed in every reply.
        id: u32,
        /// Search spec text (YAML or JSON).
        spec: String,
        /// Name shown in error messages.
        source: String,
    },
    /// Evaluate candidates of a search (one `Evaluated` reply each, in order).
    Evaluate {
        /// Search id.
        id: u32,
        /// Search spec text (parsed once per worker and kept).
        spec: String,
        /// Name shown in error messages.
        source: String,
        /// Candidate indices.
        indices: Vec<usize>,
        /// `static`, `short` or `full`.
        fidelity: String,
    },
    /// Start AIConfigurator's `default` question (`servesim estimate --default`): reply with
    /// the first wave of confirming replays.
    Sweep {
        /// Sweep id, echoed in every reply.
        id: u32,
        /// What to sweep.
        query: SweepSpec,
        /// Winners per mode confirmed by replay (0: none).
        replay_top: usize,
    },
    /// Replay one sweep point.
    Replay {
        /// Sweep id.
        id: u32,
        /// The point's prediction config.
        yaml: String,
        /// Its label (error messages).
        label: String,
        /// Its closed-loop concurrency (the first wave, left out of the steady TTFT).
        concurrency: f64,
    },
    /// The replays of the coordinator's pending wave, in order: reply with the next wave or
    /// the report.
    SubmitReplays {
        /// Sweep id.
        id: u32,
        /// One `Replayed` result per point of the wave.
        replays: Vec<String>,
    },
    /// Keep a file the user dropped (a trace, an FPM table) for configs that name it. No reply.
    PutFile {
        /// File name (or path inside a dropped folder); configs name it.
        name: String,
        /// The bytes, base64.
        base64: String,
    },
    /// Describe a dropped file (`servesim data inspect`).
    Inspect {
        /// Request id.
        id: u32,
        /// File name as given to `PutFile`.
        name: String,
        /// Which slice of a kernel table to preview.
        slice: usize,
    },
    /// Validate a config without running it: reply with every problem and its position.
    Check {
        /// Request id.
        id: u32,
        /// Config text (YAML or JSON).
        config: String,
    },
    /// The results of the coordinator's pending stage: reply with the next stage or the
    /// finished recommendation.
    Submit {
        /// Search id.
        id: u32,
        /// One `Evaluated` candidate per index of the stage.
        candidates: Vec<String>,
    },
    /// A message of the Validate page (`servesim validate` and `calibrate`): replies are
    /// `FromWorker::Validation` with the same id, or `Failed`.
    Validation {
        /// Validation id, echoed in every reply.
        id: u32,
        /// What is asked.
        ask: validation::Ask,
    },
    /// Every record of the last run, as a file: reply with `FilePart`s.
    RequestsFile {
        /// The run's id.
        id: u32,
        /// `jsonl` (requests.jsonl) or `csv`.
        format: String,
    },
}

impl ToWorker {
    /// The id every reply echoes.
    #[must_use]
    pub fn id(&self) -> u32 {
        match self {
            ToWorker::Run { id, .. }
            | ToWorker::Plan { id, .. }
            | ToWorker::Evaluate { id, .. }
            | ToWorker::Submit { id, .. }
            | ToWorker::Sweep { id, .. }
            | ToWorker::Replay { id, .. }
            | ToWorker::SubmitReplays { id, .. }
            | ToWorker::Inspect { id, .. }
            | ToWorker::RequestsFile { id, .. }
            | ToWorker::Validation { id, .. }
            | ToWorker::Check { id, .. } => *id,
            ToWorker::PutFile { .. } => 0,
        }
    }

    /// The configs whose data files the worker must fetch before handling this message.
    #[must_use]
    pub fn configs(&self, state: &mut WorkerState) -> Vec<String> {
        match self {
            ToWorker::Run { config, .. } => vec![config.clone()],
            ToWorker::Evaluate { spec, source, indices, .. } => {
                let Ok((parsed, _)) = state.spec_and_catalog(spec, source) else { return Vec::new() };
                // Candidates may differ in GPU or engine: fetch what any of them needs.
                indices
                    .iter()
                    .filter_map(|i| parsed.candidate(*i).ok())
                    .map(|n| servesim_scenario::node::to_yaml(&n))
                    .collect()
            }
            ToWorker::Replay { yaml, .. } => vec![yaml.clone()],
            ToWorker::Sweep { query, .. } => vec![format!(
                "engine: {{model: {}, hardware: {}, backend: {}}}",
                query.model, query.system, query.backend
            )],
            ToWorker::Check { config, .. } => vec![config.clone()],
            ToWorker::Validation { ask, .. } => ask.configs(state),
            ToWorker::Plan { .. }
            | ToWorker::Submit { .. }
            | ToWorker::SubmitReplays { .. }
            | ToWorker::PutFile { .. }
            | ToWorker::RequestsFile { .. }
            | ToWorker::Inspect { .. } => Vec::new(),
        }
    }
}

/// Worker → page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromWorker {
    /// The worker is loaded and listening.
    Ready,
    /// The scenario's static estimate (`servesim estimate`), sent before the replay starts so
    /// the page has a first answer at once.
    Estimate {
        /// Request id.
        id: u32,
        /// The estimate as the CLI's `servesim estimate --format json` prints it, when the
        /// traffic is one the estimate describes.
        estimate: Option<String>,
        /// Why there is no estimate (sessions, traces), otherwise empty.
        note: Option<String>,
    },
    /// A run advanced.
    Progress {
        /// Request id.
        id: u32,
        /// Requests finished.
        finished: u64,
        /// Requests in total.
        total: u64,
        /// Simulated time reached (ms).
        sim_ms: f64,
    },
    /// A run finished.
    Done {
        /// Request id.
        id: u32,
        /// prediction.json text, byte-identical to the CLI's.
        prediction: String,
        /// requests.jsonl text: every record, or every `requests_every`-th of a run with more
        /// than [`PAGE_RECORDS`] (`RequestsFile` has them all).
        requests: String,
        /// Records in the run.
        #[serde(default)]
        requests_total: u64,
        /// Every how many records `requests` keeps one (1: all).
        #[serde(default)]
        requests_every: u64,
        /// Where each role's GPU time went, as `servesim predict --detail time` prints it.
        #[serde(default)]
        time: Vec<String>,
        /// Host time the run took (ms).
        wall_ms: f64,
    },
    /// A search stage to evaluate (from the coordinator).
    Stage {
        /// Search id.
        id: u32,
        /// The stage's position in `plan` (0-based).
        stage: usize,
        /// Every stage's fidelity, in order (`static`, `short`, `full`).
        plan: Vec<String>,
        /// Candidates in the search.
        candidates: usize,
        /// Candidate indices to evaluate.
        indices: Vec<usize>,
        /// `static`, `short` or `full`.
        fidelity: String,
    },
    /// One evaluated candidate (`Candidate::to_wire` as JSON text).
    Evaluated {
        /// Search id.
        id: u32,
        /// The candidate.
        candidate: String,
    },
    /// A finished search: the CLI's output files.
    Recommended {
        /// Search id.
        id: u32,
        /// recommendation.json text, byte-identical to the CLI's.
        recommendation: String,
        /// recommendation.csv text.
        csv: String,
        /// `recommendations/NNNN.yaml` files: (name, text).
        yamls: Vec<(String, String)>,
        /// The CLI's text summary.
        summary: String,
    },
    /// Sweep points to replay (from the coordinator).
    Replays {
        /// Sweep id.
        id: u32,
        /// Points: (label, prediction config, concurrency).
        wave: Vec<(String, String, f64)>,
        /// Host time of the static sweep (ms).
        static_ms: f64,
    },
    /// One replay (`confirm::replay_to_json` as text).
    Replayed {
        /// Sweep id.
        id: u32,
        /// The figures or the error.
        replay: String,
    },
    /// A finished `default` sweep.
    SweepDone {
        /// Sweep id.
        id: u32,
        /// estimate-default.json text (as the CLI's `--format json`).
        report: String,
        /// The CLI's table.
        table: String,
        /// Prediction configs of the points replayed: (label, mode, yaml).
        winners: Vec<(String, String, String)>,
    },
    /// What a dropped file holds.
    Inspected {
        /// Request id.
        id: u32,
        /// File name.
        name: String,
        /// `mooncake_trace`, `azure_trace`, `servesim_table`, `fpm`, ... (`inspect::Kind::key`).
        kind: String,
        /// The text `servesim data inspect` prints.
        summary: String,
        /// A kernel table's slices.
        slices: Vec<String>,
        /// A plotly figure of the file, when there is something to draw.
        figure: Option<Box<serde_json::Value>>,
    },
    /// The problems of a config (empty when it would run).
    Checked {
        /// Request id.
        id: u32,
        /// Every problem, with its dotted path and position.
        problems: Vec<Problem>,
        /// Model ids the catalog knows (for the form's choices).
        models: Vec<String>,
        /// GPU ids the catalog knows.
        hardware: Vec<String>,
    },
    /// A run could not complete.
    Failed {
        /// Request id.
        id: u32,
        /// What went wrong (every config problem, one per line).
        message: String,
        /// The CLI exit code for the same failure.
        exit_code: i32,
    },
    /// A reply to a `ToWorker::Validation`.
    Validation {
        /// Validation id.
        id: u32,
        /// The answer.
        answer: validation::Answer,
    },
    /// Part of a file asked for with `RequestsFile`, whole lines; the file is the parts in
    /// order.
    FilePart {
        /// The run's id.
        id: u32,
        /// The text.
        text: String,
        /// The file's last part.
        last: bool,
    },
}

/// One problem of a config, for the page to show at its field and line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    /// Dotted path of the value (`""`: the whole document).
    pub path: String,
    /// Line in the text (from 1), when known.
    pub line: Option<u32>,
    /// Column (from 1), when known.
    pub col: Option<u32>,
    /// What is wrong.
    pub message: String,
}

/// Events per slice between progress checks: small enough to keep progress smooth, large
/// enough that the check costs nothing.
const SLICE_EVENTS: u64 = 20_000;
/// Minimum host time between progress messages (ms).
const PROGRESS_EVERY_MS: f64 = 50.0;

/// What a worker keeps between messages: the catalog, the last search spec it evaluated
/// candidates of, and (on the coordinator) the search in progress.
#[derive(Default)]
pub struct WorkerState {
    /// Files the user dropped, by name.
    user: std::collections::BTreeMap<String, Vec<u8>>,
    /// The last run's id and records, for [`ToWorker::RequestsFile`].
    last_run: Option<(u32, Requests)>,
    catalog: Option<Catalog>,
    spec: Option<(String, String, Spec)>,
    search: Option<Coordinated>,
    sweep: Option<Sweeping>,
    calibration: Option<validation::Calibrating>,
    /// The last calibration file read: its name, text and rows (`validation::parsed_rows`).
    silicon: Option<(String, String, std::sync::Arc<Vec<servesim_scenario::validate::SiliconRow>>)>,
}

/// A `default` sweep the coordinator is confirming.
struct Sweeping {
    id: u32,
    confirm: Confirm,
    started_ms: f64,
    static_ms: f64,
}

/// A search the coordinator is running.
struct Coordinated {
    id: u32,
    spec: Spec,
    search: Search,
    sha: String,
}

impl WorkerState {
    fn catalog(&mut self) -> Result<&Catalog, ScenarioError> {
        if self.catalog.is_none() {
            self.catalog =
                Some(Catalog::builtin().map_err(|e| ScenarioError::Run { message: e.to_string() })?);
        }
        self.catalog.as_ref().ok_or_else(|| ScenarioError::Run { message: "no catalog".into() })
    }

    /// The parsed spec for `text` (kept: every candidate of a search shares it) and the catalog.
    fn spec_and_catalog(&mut self, text: &str, source: &str) -> Result<(&Spec, &Catalog), ScenarioError> {
        let fresh = !matches!(&self.spec, Some((t, s, _)) if t == text && s == source);
        if fresh {
            let root = parse_with_overrides(text, source, &[])?;
            let spec = parse_spec(&root, source, self.catalog()?)?;
            self.spec = Some((text.to_string(), source.to_string(), spec));
        }
        match (&self.spec, &self.catalog) {
            (Some((_, _, spec)), Some(catalog)) => Ok((spec, catalog)),
            _ => Err(ScenarioError::Run { message: "no spec".into() }),
        }
    }
}

/// Handles one message. `files` holds the data files the run may need (see
/// [`servesim_scenario::perfdata::paths_for_config`]); `now_ms` reads a host clock; `post`
/// sends a reply.
pub fn handle(
    state: &mut WorkerState,
    msg: ToWorker,
    files: &dyn Files,
    now_ms: &dyn Fn() -> f64,
    post: &mut dyn FnMut(FromWorker),
) {
    if let ToWorker::PutFile { name, base64 } = msg {
        use base64::Engine as _;
        match base64::engine::general_purpose::STANDARD.decode(base64.as_bytes()) {
            Ok(bytes) => {
                state.user.insert(name, bytes);
            }
            Err(e) => {
                post(FromWorker::Failed { id: 0, message: format!("{name}: not base64: {e}"), exit_code: 2 })
            }
        }
        return;
    }
    // Dropped files are read through the same `Files` as the data directory.
    let user = std::mem::take(&mut state.user);
    dispatch(state, msg, &Layered { data: files, user: &user }, now_ms, post);
    state.user = user;
}

/// The data directory plus the user's dropped files.
struct Layered<'a> {
    data: &'a dyn Files,
    user: &'a std::collections::BTreeMap<String, Vec<u8>>,
}

impl Files for Layered<'_> {
    /// A dropped file by the path a config gives: the exact name, or else the one dropped
    /// file with the same base name (a CLI config's `../traces/x.jsonl` finds `x.jsonl`).
    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        if let Some(b) = self.user.get(path) {
            return Ok(b.clone());
        }
        let base = |p: &str| p.rsplit(['/', '\\']).next().unwrap_or(p).to_string();
        let want = base(path);
        let hits: Vec<&String> = self.user.keys().filter(|k| base(k) == want).collect();
        match hits.as_slice() {
            [one] => Ok(self.user[*one].clone()),
            [] => Err(format!(
                "cannot read '{path}': drop it on the Data tab first (files never leave this page)"
            )),
            many => Err(format!(
                "cannot read '{path}': several dropped files are named '{want}' ({}); give the full name",
                many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            )),
        }
    }

    /// A dropped AIConfigurator table that maps to `path` (by its place in a `systems/data`
    /// tree) replaces servesim's own: the user chose it. Converted on use.
    fn data(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        use servesim_scenario::perfdata::{aic_path, aic_table};
        for (name, bytes) in self.user {
            if let Some((family, p)) = aic_path(name) {
                if p == path {
                    return aic_table(name, family, bytes.clone()).map(Some).map_err(|e| e.to_string());
                }
            }
        }
        self.data.data(path)
    }
}

fn dispatch(
    state: &mut WorkerState,
    msg: ToWorker,
    files: &dyn Files,
    now_ms: &dyn Fn() -> f64,
    post: &mut dyn FnMut(FromWorker),
) {
    let id = msg.id();
    let failed =
        |e: ScenarioError| FromWorker::Failed { id, message: e.to_string(), exit_code: e.exit_code() };
    match msg {
        ToWorker::Run { id, config, source } => {
            let started = now_ms();
            // The last run's records go before this one's are made.
            state.last_run = None;
            match run(state, id, &config, &source, files, now_ms, post) {
                Ok((prediction, requests, time)) => {
                    let sample = requests.jsonl_sample(PAGE_RECORDS);
                    state.last_run = Some((id, requests));
                    post(FromWorker::Done {
                        id,
                        prediction,
                        requests: sample.text,
                        requests_total: sample.total as u64,
                        requests_every: sample.every as u64,
                        time,
                        wall_ms: now_ms() - started,
                    });
                }
                Err(e) => post(failed(e)),
            }
        }
        ToWorker::RequestsFile { id, format } => requests_file(state, id, &format, post),
        ToWorker::Validation { id, ask } => validation::handle(state, id, ask, files, post),
        ToWorker::Plan { id, spec, source } => match plan(state, id, &spec, &source) {
            Ok(reply) => post(reply),
            Err(e) => post(failed(e)),
        },
        ToWorker::Evaluate { id, spec, source, indices, fidelity } => {
            let Some(fidelity) = Fidelity::from_key(&fidelity) else {
                post(FromWorker::Failed {
                    id,
                    message: format!("unknown fidelity '{fidelity}'"),
                    exit_code: 2,
                });
                return;
            };
            let (spec, catalog) = match state.spec_and_catalog(&spec, &source) {
                Ok(sc) => sc,
                Err(e) => return post(failed(e)),
            };
            for index in indices {
                if index >= spec.len() {
                    let message =
                        format!("candidate {index} is outside the search ({} candidates)", spec.len());
                    return post(FromWorker::Failed { id, message, exit_code: 1 });
                }
                let c = evaluate_at(spec, index, &source, catalog, files, fidelity);
                let mut wire = c.to_wire();
                wire["label"] = serde_json::Value::String(spec.label(index));
                post(FromWorker::Evaluated { id, candidate: wire.to_string() });
            }
        }
        ToWorker::Submit { id, candidates } => post(submit(state, id, &candidates)),
        ToWorker::PutFile { .. } => {}
        ToWorker::Inspect { id, name, slice } => post(inspect(files, id, &name, slice)),
        ToWorker::Check { id, config } => post(check(state, id, &config, files)),
        ToWorker::Sweep { id, query, replay_top } => {
            let started_ms = now_ms();
            let reply = state.catalog().and_then(|catalog| {
                let sweep = default_sweep(&query, catalog, files)?;
                let confirm = Confirm::new(query, sweep, replay_top);
                Ok(confirm)
            });
            match reply {
                Ok(confirm) => {
                    let static_ms = now_ms() - started_ms;
                    state.sweep = Some(Sweeping { id, confirm, started_ms, static_ms });
                    post(next_wave(state, id, now_ms));
                }
                Err(e) => post(failed(e)),
            }
        }
        ToWorker::Replay { id, yaml, label, concurrency } => {
            let reply = state.catalog().map(|catalog| replay(&yaml, &label, concurrency, catalog, files));
            match reply {
                Ok(r) => post(FromWorker::Replayed { id, replay: replay_to_json(&r).to_string() }),
                Err(e) => post(failed(e)),
            }
        }
        ToWorker::SubmitReplays { id, replays } => {
            let Some(sw) = state.sweep.as_mut().filter(|s| s.id == id) else {
                return post(FromWorker::Failed {
                    id,
                    message: format!("no sweep {id} is in progress"),
                    exit_code: 1,
                });
            };
            let parsed: Result<Vec<_>, String> = replays
                .iter()
                .map(|t| {
                    serde_json::from_str(t).map_err(|e| e.to_string()).and_then(|v| replay_from_json(&v))
                })
                .collect();
            match parsed.and_then(|r| sw.confirm.submit(r)) {
                Ok(()) => post(next_wave(state, id, now_ms)),
                Err(message) => post(FromWorker::Failed { id, message, exit_code: 1 }),
            }
        }
    }
}

/// `servesim data inspect` of a dropped file, with a figure of it.
fn inspect(files: &dyn Files, id: u32, name: &str, slice: usize) -> FromWorker {
    let bytes = match files.read(name) {
        Ok(b) => b,
        Err(message) => return FromWorker::Failed { id, message, exit_code: 2 },
    };
    let side_name = servesim_scenario::perfdata::fpm_sidecar_path(name);
    let side_text = if name.ends_with(".parquet") {
        files.read(&side_name).ok().and_then(|b| String::from_utf8(b).ok())
    } else {
        None
    };
    let sidecar = side_text.as_deref().map(|t| (side_name.as_str(), t));
    match servesim_scenario::inspect(name, bytes, sidecar, slice) {
        Ok(found) => FromWorker::Inspected {
            id,
            name: name.to_string(),
            kind: found.kind.key().to_string(),
            summary: found.summary,
            slices: found.slices,
            figure: found.preview.as_ref().map(|p| Box::new(crate::charts::preview_figures(p))),
        },
        Err(message) => FromWorker::Failed { id, message, exit_code: 2 },
    }
}

/// Validates a config as `Run` would, without running it.
fn check(state: &mut WorkerState, id: u32, config: &str, files: &dyn Files) -> FromWorker {
    let outcome = match state.catalog() {
        Ok(catalog) => parse_with_overrides(config, "scenario", &[])
            .and_then(|root| prepare(&root, "scenario", catalog, None, files))
            .err(),
        Err(e) => Some(e),
    };
    let problems = match outcome {
        None => Vec::new(),
        Some(ScenarioError::Config { diagnostics, .. }) => diagnostics
            .into_iter()
            .map(|d| {
                let (line, col) = match d.origin {
                    servesim_scenario::node::Origin::File { line, col } => (Some(line), Some(col)),
                    _ => (None, None),
                };
                Problem { path: d.path, line, col, message: d.message }
            })
            .collect(),
        // Does not fit, or cannot run: about the deployment as a whole.
        Some(e) => {
            vec![Problem { path: "engine.workers".into(), line: None, col: None, message: e.to_string() }]
        }
    };
    let (models, hardware) = state.catalog().map_or_else(
        |_| (Vec::new(), Vec::new()),
        |c| {
            (
                c.models.iter().map(|m| m.id.clone()).collect(),
                c.hardware.iter().map(|h| h.id.clone()).collect(),
            )
        },
    );
    FromWorker::Checked { id, problems, models, hardware }
}

fn plan(state: &mut WorkerState, id: u32, text: &str, source: &str) -> Result<FromWorker, ScenarioError> {
    let root = parse_with_overrides(text, source, &[])?;
    let spec = parse_spec(&root, source, state.catalog()?)?;
    let search = Search::new(&spec);
    state.search = Some(Coordinated { id, spec, search, sha: config_sha256(&root) });
    Ok(next_stage(state, id))
}

fn submit(state: &mut WorkerState, id: u32, wires: &[String]) -> FromWorker {
    let Some(c) = state.search.as_mut().filter(|c| c.id == id) else {
        return FromWorker::Failed { id, message: format!("no search {id} is in progress"), exit_code: 1 };
    };
    let mut cands = Vec::with_capacity(wires.len());
    for w in wires {
        let parsed = serde_json::from_str(w)
            .map_err(|e| e.to_string())
            .and_then(|v| Candidate::from_wire(&c.spec, &v));
        match parsed {
            Ok(cand) => cands.push(cand),
            Err(message) => return FromWorker::Failed { id, message, exit_code: 1 },
        }
    }
    let expected = c.search.pending().map_or(0, |(i, _)| i.len());
    if cands.len() != expected {
        return FromWorker::Failed {
            id,
            message: format!("stage has {expected} candidates, {} results came back", cands.len()),
            exit_code: 1,
        };
    }
    c.search.submit(&c.spec, cands);
    next_stage(state, id)
}

/// The coordinator's next sweep message: the next wave of replays, or the report.
fn next_wave(state: &mut WorkerState, id: u32, now_ms: &dyn Fn() -> f64) -> FromWorker {
    let Some(sw) = state.sweep.as_mut() else {
        return FromWorker::Failed { id, message: "no sweep is in progress".into(), exit_code: 1 };
    };
    let wave: Vec<(String, String, f64)> =
        sw.confirm.wave().iter().map(|p| (p.label.clone(), p.yaml.clone(), p.estimate.concurrency)).collect();
    if !wave.is_empty() {
        return FromWorker::Replays { id, wave, static_ms: sw.static_ms };
    }
    let Some(sw) = state.sweep.take() else {
        return FromWorker::Failed { id, message: "no sweep is in progress".into(), exit_code: 1 };
    };
    let report = sw.confirm.report(sw.static_ms / 1000.0, (now_ms() - sw.started_ms) / 1000.0);
    FromWorker::SweepDone {
        id,
        report: to_pretty_json(&report.json()),
        table: report.table(),
        winners: report
            .winners
            .iter()
            .map(|w| (w.label.clone(), w.mode.to_string(), w.yaml.clone()))
            .collect(),
    }
}

/// The coordinator's next message: the pending stage, or the finished recommendation.
fn next_stage(state: &mut WorkerState, id: u32) -> FromWorker {
    let Some(c) = state.search.as_ref() else {
        return FromWorker::Failed { id, message: "no search is in progress".into(), exit_code: 1 };
    };
    if let Some((indices, fidelity)) = c.search.pending() {
        return FromWorker::Stage {
            id,
            stage: c.search.stages().len(),
            plan: c.search.plan().iter().map(|f| f.key().to_string()).collect(),
            candidates: c.spec.len(),
            indices: indices.to_vec(),
            fidelity: fidelity.key().to_string(),
        };
    }
    let Some(c) = state.search.take() else {
        return FromWorker::Failed { id, message: "no search is in progress".into(), exit_code: 1 };
    };
    let (cands, stages) = c.search.into_results();
    let rec = finish(&c.spec, cands, &c.sha, &stages);
    FromWorker::Recommended {
        id,
        recommendation: to_pretty_json(&rec.json),
        csv: rec.csv,
        yamls: rec.yamls,
        summary: rec.summary,
    }
}

fn run(
    state: &mut WorkerState,
    id: u32,
    config: &str,
    source: &str,
    files: &dyn Files,
    now_ms: &dyn Fn() -> f64,
    post: &mut dyn FnMut(FromWorker),
) -> Result<(String, Requests, Vec<String>), ScenarioError> {
    let root = parse_with_overrides(config, source, &[])?;
    let prepared = prepare(&root, source, state.catalog()?, None, files)?;
    match servesim_scenario::estimate::estimate(&prepared) {
        Ok(e) => post(FromWorker::Estimate { id, estimate: Some(to_pretty_json(&e.to_json())), note: None }),
        Err(e) => post(FromWorker::Estimate { id, estimate: None, note: Some(e.to_string()) }),
    }
    // An uncertainty band's replays follow the scenario's own, one after another; progress
    // counts the requests of all of them.
    let replays = 1 + servesim_scenario::uncertainty::further_replays(&prepared) as u64;
    let mut last_post = f64::NEG_INFINITY;
    let mut replay = |run: &servesim_scenario::scenario::Prepared, k: u64| {
        let mut sim = run.start();
        loop {
            let p = sim.run_slice(SLICE_EVENTS).map_err(|e| ScenarioError::Run { message: e.to_string() })?;
            let t = now_ms();
            if p.stopped.is_some() || t - last_post >= PROGRESS_EVERY_MS {
                post(FromWorker::Progress {
                    id,
                    finished: k * p.total_requests + p.finished_requests,
                    total: replays * p.total_requests,
                    sim_ms: p.now.as_ms_f64(),
                });
                last_post = t;
            }
            if p.stopped.is_some() {
                return Ok::<_, ScenarioError>(run.finish(sim));
            }
        }
    };
    let mut prediction = replay(&prepared, 0)?;
    let mut others = Vec::new();
    for k in 1..replays {
        #[allow(clippy::cast_possible_truncation)] // At most 64 replays.
        let v = servesim_scenario::uncertainty::variant(&prepared, k as usize);
        others.push(replay(&v, k)?.json);
    }
    servesim_scenario::uncertainty::attach(&mut prediction.json, &prepared, &others);
    let time = servesim_scenario::details::time_lines(&servesim_scenario::details::time_details(
        &prepared,
        &prediction,
    ));
    Ok((to_pretty_json(&prediction.json), prediction.requests, time))
}

/// Records a page receives with a finished run at most (about 76 MB of requests.jsonl); a
/// longer run's are sampled evenly and the whole file comes from [`ToWorker::RequestsFile`].
pub const PAGE_RECORDS: usize = 100_000;

/// Bytes of one [`FromWorker::FilePart`] (whole lines, so a little more).
const FILE_PART_BYTES: usize = 4 << 20;

/// Sends the last run's records as a file in parts of whole lines.
fn requests_file(state: &WorkerState, id: u32, format: &str, post: &mut dyn FnMut(FromWorker)) {
    let Some((_, requests)) = state.last_run.as_ref().filter(|(run, _)| *run == id) else {
        let message = format!("run {id}'s records are gone (a later run replaced them): run it again");
        return post(FromWorker::Failed { id, message, exit_code: 1 });
    };
    let mut out = PartWriter { id, part_bytes: FILE_PART_BYTES, buf: Vec::new(), post };
    let written = match format {
        "jsonl" => requests.write_jsonl(&mut out),
        "csv" => requests.write_csv(&mut out),
        other => {
            let message = format!("unknown requests file format '{other}' (jsonl or csv)");
            return (out.post)(FromWorker::Failed { id, message, exit_code: 1 });
        }
    };
    if let Err(e) = written {
        return (out.post)(FromWorker::Failed { id, message: e.to_string(), exit_code: 1 });
    }
    let text = String::from_utf8_lossy(&out.buf).into_owned();
    (out.post)(FromWorker::FilePart { id, text, last: true });
}

/// Posts what is written to it in parts of whole lines.
struct PartWriter<'a> {
    id: u32,
    /// Bytes a part holds before it is sent at the next line's end.
    part_bytes: usize,
    buf: Vec<u8>,
    post: &'a mut dyn FnMut(FromWorker),
}

impl std::io::Write for PartWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= self.part_bytes && self.buf.last() == Some(&b'\n') {
            let text = String::from_utf8_lossy(&self.buf).into_owned();
            self.buf.clear();
            (self.post)(FromWorker::FilePart { id: self.id, text, last: false });
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Decodes a message, turning garbage into a `Failed` reply instead of a silent drop.
///
/// # Errors
/// The `Failed` reply to send back when the text is not a valid message.
pub fn decode_to_worker(text: &str) -> Result<ToWorker, FromWorker> {
    serde_json::from_str(text).map_err(|e| FromWorker::Failed {
        id: 0,
        message: format!("worker received an unreadable message: {e}"),
        exit_code: 2,
    })
}

/// Encodes a message as JSON text.
#[must_use]
pub fn encode<T: Serialize>(msg: &T) -> String {
    serde_json::to_string(msg).unwrap_or_else(|e| {
        format!("{{\"type\":\"failed\",\"id\":0,\"message\":\"encode: {e}\",\"exit_code\":1}}")
    })
}

mod validation;
pub use validation::{
    command_line, knobs, select_rows, shown_rows, validation_answer, Answer, Ask, RowOrder, RowResult,
    RowsWanted, ValidationAnswer,
};

#[cfg(test)]
mod tests;
