//! Messages between the page and the simulation worker, and the worker's request handler.
//!
//! Messages travel as JSON text through `postMessage`. The handler is plain Rust with no
//! browser dependency, so it is tested natively as well as in the browser.

use serde::{Deserialize, Serialize};
use servesim_scenario::catalog::Catalog;
use servesim_scenario::report::{to_jsonl, to_pretty_json};
use servesim_scenario::scenario::{parse_with_overrides, prepare};
use servesim_scenario::{Files, ScenarioError};

/// servesim's data files (kernel tables) the worker fetched from the page's origin, by path
/// under `data/`. Configs that name their own files (traces) are refused until the Data
/// page supplies them.
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
        /// requests.jsonl text.
        requests: String,
        /// Host time the run took (ms).
        wall_ms: f64,
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
}

/// Events per slice between progress checks: small enough to keep progress smooth, large
/// enough that the check costs nothing.
const SLICE_EVENTS: u64 = 20_000;
/// Minimum host time between progress messages (ms).
const PROGRESS_EVERY_MS: f64 = 50.0;

/// Handles one message. `files` holds the data files the run may need (see
/// [`servesim_scenario::perfdata::paths_for_config`]); `now_ms` reads a host clock; `post`
/// sends a reply.
pub fn handle(msg: ToWorker, files: &dyn Files, now_ms: &dyn Fn() -> f64, post: &mut dyn FnMut(FromWorker)) {
    match msg {
        ToWorker::Run { id, config, source } => {
            let started = now_ms();
            match run(id, &config, &source, files, now_ms, post) {
                Ok((prediction, requests)) => {
                    post(FromWorker::Done { id, prediction, requests, wall_ms: now_ms() - started });
                }
                Err(e) => post(FromWorker::Failed { id, message: e.to_string(), exit_code: e.exit_code() }),
            }
        }
    }
}

fn run(
    id: u32,
    config: &str,
    source: &str,
    files: &dyn Files,
    now_ms: &dyn Fn() -> f64,
    post: &mut dyn FnMut(FromWorker),
) -> Result<(String, String), ScenarioError> {
    let catalog = Catalog::builtin().map_err(|e| ScenarioError::Run { message: e.to_string() })?;
    let root = parse_with_overrides(config, source, &[])?;
    let prepared = prepare(&root, source, &catalog, None, files)?;
    match servesim_scenario::estimate::estimate(&prepared) {
        Ok(e) => post(FromWorker::Estimate { id, estimate: Some(to_pretty_json(&e.to_json())), note: None }),
        Err(e) => post(FromWorker::Estimate { id, estimate: None, note: Some(e.to_string()) }),
    }
    let mut sim = prepared.start();
    let mut last_post = f64::NEG_INFINITY;
    loop {
        let p = sim.run_slice(SLICE_EVENTS).map_err(|e| ScenarioError::Run { message: e.to_string() })?;
        let t = now_ms();
        if p.stopped.is_some() || t - last_post >= PROGRESS_EVERY_MS {
            post(FromWorker::Progress {
                id,
                finished: p.finished_requests,
                total: p.total_requests,
                sim_ms: p.now.as_ms_f64(),
            });
            last_post = t;
        }
        if p.stopped.is_some() {
            break;
        }
    }
    let prediction = prepared.finish(sim);
    Ok((to_pretty_json(&prediction.json), to_jsonl(&prediction.requests)))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What the worker fetches for the default scenario (H200, vLLM tables).
    fn data_for(_config: &str) -> MemFiles {
        let mut m = MemFiles::default();
        macro_rules! add {
            ($($f:literal),*) => {$(
                m.data.insert(
                    concat!("perf/h200_sxm/vllm/0.24.0/", $f, ".parquet").to_string(),
                    include_bytes!(concat!("../../data/perf/h200_sxm/vllm/0.24.0/", $f, ".parquet")).to_vec(),
                );
            )*};
        }
        add!("gemm", "context_attention", "generation_attention", "allreduce", "moe");
        m.data.insert(
            "perf/h200_sxm/nccl.parquet".to_string(),
            include_bytes!("../../data/perf/h200_sxm/nccl.parquet").to_vec(),
        );
        m
    }

    struct Both(MemFiles);

    impl Files for Both {
        fn read(&self, path: &str) -> Result<Vec<u8>, String> {
            self.0.read(path)
        }

        fn data(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
            self.0.data(path)
        }
    }

    fn run_default() -> Vec<FromWorker> {
        let mut out = Vec::new();
        let msg = ToWorker::Run {
            id: 7,
            config: servesim_scenario::DEFAULT_SCENARIO.into(),
            source: "default".into(),
        };
        handle(msg, &data_for(servesim_scenario::DEFAULT_SCENARIO), &|| 0.0, &mut |m| out.push(m));
        out
    }

    #[test]
    fn default_run_reports_progress_then_done_with_the_cli_bytes() {
        let out = run_default();
        // The static estimate comes first, as the CLI's `servesim estimate` prints it.
        let Some(FromWorker::Estimate { id: 7, estimate: Some(est), note: None }) = out.first() else {
            panic!("{:?}", out.first())
        };
        let root = parse_with_overrides(servesim_scenario::DEFAULT_SCENARIO, "default", &[]).unwrap();
        let catalog = Catalog::builtin().unwrap();
        let files = data_for(servesim_scenario::DEFAULT_SCENARIO);
        let prepared = prepare(&root, "default", &catalog, None, &files).unwrap();
        let cli_est = servesim_scenario::estimate::estimate(&prepared).unwrap();
        assert_eq!(*est, to_pretty_json(&cli_est.to_json()));
        assert!(matches!(out.get(1), Some(FromWorker::Progress { id: 7, .. })));
        let Some(FromWorker::Done { prediction, .. }) = out.last() else { panic!("{out:?}") };
        let cli = servesim_scenario::predict(
            servesim_scenario::DEFAULT_SCENARIO,
            "default",
            &[],
            None,
            &Both(data_for(servesim_scenario::DEFAULT_SCENARIO)),
        )
        .unwrap();
        assert_eq!(*prediction, to_pretty_json(&cli.json));
    }

    #[test]
    fn bad_config_fails_with_exit_code_two() {
        let mut out = Vec::new();
        handle(
            ToWorker::Run { id: 1, config: "engine: [".into(), source: "page".into() },
            &MemFiles::default(),
            &|| 0.0,
            &mut |m| out.push(m),
        );
        assert!(matches!(&out[..], [FromWorker::Failed { id: 1, exit_code: 2, .. }]), "{out:?}");
    }

    #[test]
    fn garbage_messages_are_answered() {
        assert!(matches!(
            decode_to_worker("{\"type\":\"nope\"}"),
            Err(FromWorker::Failed { exit_code: 2, .. })
        ));
        let m = ToWorker::Run { id: 3, config: "x".into(), source: "s".into() };
        assert_eq!(decode_to_worker(&encode(&m)), Ok(m));
    }
}
