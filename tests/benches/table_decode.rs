//! Kernel-table decoding and scenario preparation, the cost before a run's first event:
//!
//!     cargo bench -p servesim_tests --bench table_decode
//!
//! Reads each table the default scenario needs (Parquet → slices → dense grids) and prepares
//! the default scenario from scratch (catalog, tables, memory plan), best of several runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_precision_loss)]

use std::time::Instant;

use servesim_scenario::catalog::Catalog;
use servesim_scenario::scenario::{parse_with_overrides, prepare};
use servesim_tests::{repo_root, DataOnly};

const REPEATS: usize = 7;

fn best<T>(mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut out = None;
    for _ in 0..REPEATS {
        let t = Instant::now();
        let r = f();
        best = best.min(t.elapsed().as_secs_f64());
        out = Some(r);
    }
    (best, out.unwrap())
}

fn main() {
    let dir = repo_root().join("data/perf/h200_sxm/vllm/0.24.0");
    let mut total_rows = 0usize;
    let mut total_s = 0.0;
    for fam in ["gemm", "context_attention", "generation_attention", "allreduce", "moe"] {
        let bytes = std::fs::read(dir.join(format!("{fam}.parquet"))).unwrap();
        let (s, t) = best(|| servesim_data::perf::read_table(fam, bytes.clone()).unwrap());
        total_rows += t.rows;
        total_s += s;
        println!(
            "{fam:<22} {:>7} rows  {:>7.2} ms  {:>6.2} M rows/s",
            t.rows,
            s * 1e3,
            t.rows as f64 / s / 1e6
        );
    }
    println!(
        "{:<22} {total_rows:>7} rows  {:>7.2} ms  {:>6.2} M rows/s",
        "all",
        total_s * 1e3,
        total_rows as f64 / total_s / 1e6
    );
    let text = std::fs::read_to_string(repo_root().join("data/scenarios/default.yaml")).unwrap();
    let (s, _) = best(|| {
        let catalog = Catalog::builtin().unwrap();
        let root = parse_with_overrides(&text, "default", &[]).unwrap();
        prepare(&root, "default", &catalog, None, &DataOnly).unwrap()
    });
    println!("prepare default scenario (catalog + tables + plan): {:.2} ms", s * 1e3);
}
