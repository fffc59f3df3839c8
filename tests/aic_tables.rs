//! AIConfigurator tables used directly (the page's Data tab): the committed fixture, an
//! AIConfigurator-layout GEMM table, is what its generator writes, converts back to the rows
//! it came from, and times a run differently from the built-in table it was derived from.
//!
//! Regenerate the fixture with `SERVESIM_BLESS=1 cargo test -p servesim_tests --test aic_tables`.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use servesim_data::aic::{servesim_path, to_servesim_table, write_aic};
use servesim_data::perf::read_table;
use servesim_perf::tables::{Family, Row};
use servesim_scenario::report::to_pretty_json;
use servesim_scenario::{predict, Files};
use servesim_tests::{data_file, repo_root};

/// The fixture's place in an AIConfigurator `systems/data` tree.
const FIXTURE: &str = "tests/fixtures/aic/systems/data/h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet";
/// Its latencies are the built-in table's times this factor, so a run can tell them apart.
const SLOWER: f64 = 1.5;

/// The fixture's rows: the built-in H200 vLLM block-scaled fp8 GEMM slice (what the default
/// scenario's Qwen3-32B-FP8 runs) and the bf16 and per-tensor fp8 slices that bound it, every
/// third m, 1.5× slower.
fn fixture_rows() -> Vec<Row> {
    let bytes = data_file("perf/h200_sxm/vllm/0.24.0/gemm.parquet").unwrap().unwrap();
    let t = read_table("gemm.parquet", bytes).unwrap();
    let mut rows = Vec::new();
    for dtype in ["bfloat16", "fp8", "fp8_block"] {
        let g = t.slice(&[dtype]).unwrap();
        let axes = g.axes();
        for m in axes[0].iter().step_by(3) {
            for n in &axes[1] {
                for k in &axes[2] {
                    if let Some(l) = g.exact(&[*m, *n, *k]) {
                        rows.push((vec![dtype.to_string()], vec![*m, *n, *k], l * SLOWER));
                    }
                }
            }
        }
    }
    rows
}

#[test]
fn the_fixture_is_what_its_generator_writes() {
    let bytes = write_aic(FIXTURE, Family::Gemm, &fixture_rows(), "fixture").unwrap();
    let path = repo_root().join(FIXTURE);
    if std::env::var_os("SERVESIM_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        return;
    }
    let committed = std::fs::read(&path).expect("fixture missing: run with SERVESIM_BLESS=1");
    let a = read_table("a", to_servesim_table("a", Family::Gemm, committed).unwrap()).unwrap();
    let b = read_table("b", to_servesim_table("b", Family::Gemm, bytes).unwrap()).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"), "fixture drifted: re-bless");
}

/// Built-in data, with the converted fixture in place of the GEMM table it maps to.
struct WithAic(Vec<u8>);

impl Files for WithAic {
    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        Err(format!("cannot read '{path}'"))
    }

    fn data(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        match servesim_path(FIXTURE) {
            Some((_, p)) if p == path => Ok(Some(self.0.clone())),
            _ => data_file(path),
        }
    }
}

#[test]
fn a_dropped_aiconfigurator_table_times_the_run() {
    assert_eq!(servesim_path(FIXTURE).unwrap().1, "perf/h200_sxm/vllm/0.24.0/gemm.parquet");
    let aic = std::fs::read(repo_root().join(FIXTURE)).unwrap();
    let table = to_servesim_table(FIXTURE, Family::Gemm, aic).unwrap();
    let text = std::fs::read_to_string(repo_root().join("data/scenarios/default.yaml")).unwrap();
    let base = predict(&text, "default", &[], None, &servesim_tests::DataOnly).unwrap();
    let slow = predict(&text, "default", &[], None, &WithAic(table)).unwrap();
    let f = |p: &servesim_scenario::Prediction, k: &str| p.json[k].as_f64().unwrap();
    // GEMMs dominate a dense model's steps: 1.5× slower kernels, clearly slower tokens.
    let ratio = f(&slow, "mean_tpot_ms") / f(&base, "mean_tpot_ms");
    assert!(ratio > 1.3 && ratio < SLOWER + 0.01, "TPOT ratio {ratio}");
    assert_ne!(to_pretty_json(&slow.json), to_pretty_json(&base.json));
}
