//! Whole-forward (FPM) timing end to end: the op-level model exported as an FPM grid replays
//! to the op-level model's numbers, cells are matched exactly, and steps outside the measured
//! domain or mismatched files fail with messages that say why.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use servesim_scenario::catalog::Catalog;
use servesim_scenario::scenario::{parse_with_overrides, prepare};
use servesim_scenario::{Files, Override, Prediction, ScenarioError};
use servesim_tests::{data_file, predict_file, predict_file_with, repo_root};

/// Files held in memory (what the browser has after a drop).
struct MemFiles(BTreeMap<String, Vec<u8>>);

impl Files for MemFiles {
    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        self.0.get(path).cloned().ok_or_else(|| format!("cannot read '{path}': not loaded"))
    }

    fn data(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        data_file(path)
    }
}

fn close(a: f64, b: f64, tol: f64, what: &str) {
    assert!((a - b).abs() <= tol * b.abs(), "{what}: {a} vs {b} (tolerance {tol})");
}

fn same_within(fpm: &Prediction, op: &Prediction, tol: f64, what: &str) {
    let (f, o) = (&fpm.summary, &op.summary);
    assert_eq!(f.completed_requests, o.completed_requests, "{what}");
    close(f.ttft.mean, o.ttft.mean, tol, &format!("{what} TTFT mean"));
    close(f.ttft.median, o.ttft.median, tol, &format!("{what} TTFT p50"));
    close(f.tpot.mean, o.tpot.mean, tol, &format!("{what} TPOT mean"));
    close(f.output_throughput_tok_s, o.output_throughput_tok_s, tol, &format!("{what} throughput"));
}

/// The op-level grid of a deployment file, as an FPM pair in memory under `grid.parquet`.
fn export(rel: &str) -> (String, MemFiles) {
    let text = std::fs::read_to_string(repo_root().join(rel)).unwrap();
    let catalog = Catalog::builtin().unwrap();
    let root = parse_with_overrides(&text, rel, &[]).unwrap();
    let prepared = prepare(&root, rel, &catalog, None, &MemFiles(BTreeMap::new())).unwrap();
    let cells: Vec<_> =
        (0..prepared.roles.len()).map(|i| servesim_scenario::fpmgrid::cell(&prepared, i).unwrap()).collect();
    let (bytes, sidecar) = servesim_data::fpm::write_fpm("grid.parquet", &cells, "test").unwrap();
    let files = MemFiles(BTreeMap::from([
        ("grid.parquet".to_string(), bytes),
        ("grid.metadata.json".to_string(), sidecar.into_bytes()),
    ]));
    (text, files)
}

fn run(text: &str, files: &MemFiles, sets: &[&str]) -> Result<Prediction, ScenarioError> {
    let overrides: Vec<Override> = sets.iter().map(|s| Override::parse(s).unwrap()).collect();
    servesim_scenario::predict(text, "deployment.yaml", &overrides, None, files)
}

const FPM: &str = "engine.workers.aggregated.timing={forward_model: fpm, fpm_parquet_path: grid.parquet}";

#[test]
fn an_exported_grid_replays_to_the_op_level_numbers() {
    let (text, files) = export("tests/fixtures/fpm/vllm/deployment.yaml");
    let op = run(&text, &files, &[]).unwrap();
    let fpm = run(&text, &files, &[FPM]).unwrap();
    // The grid is the op-level model itself; what differs is interpolation between grid
    // points and AISimulate's mixed-step rule (vLLM mixes prefill chunks into decode steps),
    // which moves when requests meet and so, with per-request frontend delays, the TTFT
    // median by a few percent.
    same_within(&fpm, &op, 0.05, "vLLM grid");
    let timing = &fpm.json["servesim"]["timing"][0];
    assert_eq!(timing["model"], "fpm");
    assert!(timing["lookups"]["measured"].as_u64().unwrap() > 0, "{timing}");
    assert!(timing["lookups"]["interpolated"].as_u64().unwrap() > 0, "{timing}");
    // And it is a real difference in method, not the same numbers by another name.
    assert_ne!(fpm.summary.ttft.mean, op.summary.ttft.mean);
}

#[test]
fn committed_fixtures_are_current_for_every_engine() {
    // A fixture drifts from its deployment when the op-level model changes; regenerate with
    // the command in tests/fixtures/fpm/README.md.
    for e in ["vllm", "sglang", "trtllm"] {
        let op = predict_file(&format!("tests/fixtures/fpm/{e}/deployment.yaml")).unwrap();
        let fpm = predict_file(&format!("tests/scenarios/fpm_{e}.yaml")).unwrap();
        same_within(&fpm, &op, 0.05, e);
    }
}

#[test]
fn a_cell_of_another_deployment_is_never_borrowed() {
    let e = predict_file_with(
        "tests/scenarios/fpm_vllm.yaml",
        &["engine.workers.aggregated.parallelism={tensor: 2}"],
    )
    .unwrap_err();
    assert_eq!(e.exit_code(), 2);
    let m = e.to_string();
    assert!(m.contains("engine.workers.aggregated.timing.fpm_parquet_path"), "{m}");
    assert!(m.contains("has no cell for Qwen/Qwen3-32B-FP8, vllm on h200_sxm, tp 2"), "{m}");
    assert!(m.contains("servesim-qwen3-32b-fp8-vllm-h200_sxm-tp1"), "lists the cells it has: {m}");
    // Asking for the cell by id does not override the identity check.
    let e = predict_file_with(
        "tests/scenarios/fpm_vllm.yaml",
        &[
            "engine.workers.aggregated.parallelism={tensor: 2}",
            "engine.workers.aggregated.timing.fpm_cell_id=servesim-qwen3-32b-fp8-vllm-h200_sxm-tp1-dp1-ep1-aggregated",
        ],
    )
    .unwrap_err();
    assert!(e.to_string().contains("tp is 1, the deployment has 2"), "{e}");
    // Another quantization is another cell too.
    let e = predict_file_with("tests/scenarios/fpm_vllm.yaml", &["engine.quantization={kv_cache: bf16}"])
        .unwrap_err();
    assert!(e.to_string().contains("kv bfloat16"), "{e}");
}

#[test]
fn steps_outside_the_measured_domain_fail_the_run_and_say_so() {
    // The grid was measured up to 64 sequences; 128 in flight need bigger decode batches.
    let e = predict_file_with(
        "tests/scenarios/fpm_vllm.yaml",
        &["engine.workers.aggregated.scheduler.max_sequences=128", "traffic.load.concurrency=128"],
    )
    .unwrap_err();
    assert_eq!(e.exit_code(), 1);
    let m = e.to_string();
    assert!(m.contains("outside the measured domain (batch 1..=64"), "{m}");
    assert!(m.contains("never extrapolated"), "{m}");
}

#[test]
fn broken_or_mismatched_files_are_config_errors() {
    let (text, files) = export("tests/fixtures/fpm/vllm/deployment.yaml");
    let mut map = files.0;
    // No sidecar.
    let side = map.remove("grid.metadata.json").unwrap();
    let e = run(&text, &MemFiles(map.clone()), &[FPM]).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("grid.metadata.json"), "{e}");
    // A sidecar of other bytes.
    map.insert("grid.metadata.json".into(), side.clone());
    let mut bytes = map["grid.parquet"].clone();
    let n = bytes.len();
    bytes.truncate(n - 100);
    map.insert("grid.parquet".into(), bytes);
    let e = run(&text, &MemFiles(map.clone()), &[FPM]).unwrap_err();
    assert!(e.to_string().contains("sha256"), "{e}");
    // Not JSON.
    map.insert("grid.metadata.json".into(), b"{ schema".to_vec());
    let e = run(&text, &MemFiles(map), &[FPM]).unwrap_err();
    assert!(e.to_string().contains("grid.metadata.json: not valid JSON at line 1"), "{e}");
    // Config shape errors name the field.
    let e =
        run(&text, &MemFiles(BTreeMap::new()), &["engine.workers.aggregated.timing={forward_model: fpm}"])
            .unwrap_err();
    assert!(e.to_string().contains("forward_model: fpm needs fpm_parquet_path"), "{e}");
    let e = run(
        &text,
        &MemFiles(BTreeMap::new()),
        &["engine.workers.aggregated.timing={fpm_parquet_path: x.parquet}"],
    )
    .unwrap_err();
    assert!(e.to_string().contains("only used with forward_model: fpm"), "{e}");
}
