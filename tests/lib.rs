//! Workspace-level tests (in `tests/*.rs` beside this file):
//! - `golden`: every scenario under `tests/scenarios` and `data/scenarios` against its
//!   human-readable snapshot, plus the byte-exact default prediction.json;
//! - `architecture`: ARCHITECTURE.md's codemap and invariants against `cargo metadata`;
//! - `features`: every `supported`/`limited` entry of features.toml names scenarios that run.
//!
//! Shared helpers live here.

use std::path::{Path, PathBuf};

/// The repository root.
#[must_use]
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// `../shared` beside the checkout (traces, validation data, reference figures), if present.
#[must_use]
pub fn shared_dir() -> Option<PathBuf> {
    let p = repo_root().join("../shared");
    p.is_dir().then_some(p)
}

/// The README's capability table, generated from features.toml (grouped by category).
#[must_use]
pub fn features_markdown(features: &toml::Table) -> String {
    let label = |s: &str| match s {
        "supported" => "supported",
        "limited" => "limited",
        "analytical" => "analytical",
        "na" => "n/a",
        _ => "—",
    };
    let mut out = String::from("| Technique | vLLM | SGLang | TensorRT-LLM |\n|---|---|---|---|\n");
    let mut category = "";
    let empty = Vec::new();
    for item in features.get("feature").and_then(toml::Value::as_array).unwrap_or(&empty) {
        let cat = item.get("category").and_then(toml::Value::as_str).unwrap_or("");
        if cat != category {
            category = cat;
            out.push_str(&format!("| **{cat}** | | | |\n"));
        }
        let tech = item.get("technique").and_then(toml::Value::as_str).unwrap_or("");
        let st = |e: &str| {
            item.get(e).and_then(|t| t.get("status")).and_then(toml::Value::as_str).map_or("—", label)
        };
        out.push_str(&format!("| {tech} | {} | {} | {} |\n", st("vllm"), st("sglang"), st("trtllm")));
    }
    out
}

/// Files relative to a directory on disk (what the CLI does), for tests.
pub struct DirFiles(pub PathBuf);

impl servesim_scenario::Files for DirFiles {
    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        let p = self.0.join(path);
        std::fs::read(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    }

    fn data(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        data_file(path)
    }
}

/// A file of the repository's `data/` directory, or `None` if absent.
///
/// # Errors
/// When it exists but cannot be read.
pub fn data_file(path: &str) -> Result<Option<Vec<u8>>, String> {
    let p = repo_root().join("data").join(path);
    match std::fs::read(&p) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", p.display())),
    }
}

/// [`servesim_scenario::Files`] with no config-relative files but the repository's data.
pub struct DataOnly;

impl servesim_scenario::Files for DataOnly {
    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        Err(format!("cannot read '{path}': no files are available here"))
    }

    fn data(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        data_file(path)
    }
}

/// Runs the scenario file at `rel` (from the repository root), reading its files beside it.
///
/// # Errors
/// The scenario's error.
pub fn predict_file(rel: &str) -> Result<servesim_scenario::Prediction, servesim_scenario::ScenarioError> {
    predict_file_with(rel, &[])
}

/// Like [`predict_file`], with `--set` overrides (`PATH=YAML` strings).
///
/// # Errors
/// The scenario's error.
///
/// # Panics
/// When an override is not `PATH=YAML`.
pub fn predict_file_with(
    rel: &str,
    sets: &[&str],
) -> Result<servesim_scenario::Prediction, servesim_scenario::ScenarioError> {
    let overrides: Vec<servesim_scenario::Override> = sets
        .iter()
        .map(|s| servesim_scenario::Override::parse(s).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let path = repo_root().join(rel);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| servesim_scenario::ScenarioError::Run { message: format!("{rel}: {e}") })?;
    let dir = path.parent().map_or_else(repo_root, Path::to_path_buf);
    servesim_scenario::predict(&text, rel, &overrides, None, &DirFiles(dir))
}

/// The error text of a config [`predict_file_with`] refuses as a config error (exit 2), for
/// checking what it names.
///
/// # Panics
/// When the config runs, or fails otherwise.
#[must_use]
pub fn config_refusal(rel: &str, sets: &[&str]) -> String {
    match predict_file_with(rel, sets) {
        Ok(_) => panic!("{rel} with {sets:?} ran; a config error was expected"),
        Err(err) => {
            assert_eq!(err.exit_code(), 2, "{sets:?}: {err}");
            err.to_string()
        }
    }
}

/// The YAML files a bench runs: those named on its command line, else every `*.yaml` in
/// `default_dir` (relative to the repository), sorted.
#[must_use]
pub fn bench_yaml_files(default_dir: &str) -> Vec<PathBuf> {
    let args: Vec<PathBuf> =
        std::env::args().skip(1).filter(|a| a.ends_with(".yaml")).map(PathBuf::from).collect();
    if !args.is_empty() {
        return args;
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo_root().join(default_dir))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|x| x == "yaml"));
    v.sort();
    v
}
