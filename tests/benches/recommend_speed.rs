//! Recommend speed: candidates replayed per wall-second for the search specs in
//! `data/recommend/` (or YAML files given on the command line), single-threaded and on every
//! core, with the strategy the spec asks for (exhaustive: every candidate a full replay;
//! staged: static estimates, then short and full replays of the best), and the stages' sizes.
//!
//!     cargo bench -p servesim_tests --bench recommend_speed [-- FILE.yaml ...]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use servesim_scenario::catalog::Catalog;
use servesim_scenario::recommend::{
    evaluate_parallel, finish, parse_spec, search, Fidelity, Spec, StageReport,
};
use servesim_scenario::scenario::parse_with_overrides;
use servesim_tests::DataOnly;

/// Runs a search: total wall seconds, the stages, and each stage's wall seconds.
fn run(spec: &Spec, source: &str, catalog: &Catalog, jobs: usize) -> (f64, Vec<StageReport>, Vec<f64>) {
    let started = Instant::now();
    let mut stage_s = Vec::new();
    let mut runner = |indices: &[usize], fidelity: Fidelity| {
        let t = Instant::now();
        let out = evaluate_parallel(spec, indices, fidelity, source, catalog, &DataOnly, jobs, &|_, _| {});
        stage_s.push(t.elapsed().as_secs_f64());
        out
    };
    let (all, stages) = search(spec, &mut runner);
    let _ = finish(spec, all, "bench", &stages);
    (started.elapsed().as_secs_f64(), stages, stage_s)
}

fn main() {
    let files = servesim_tests::bench_yaml_files("data/recommend");
    let catalog = Catalog::builtin().unwrap();
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    println!("{:<28} {:>10} {:>6} {:>10} {:>14}", "search", "candidates", "jobs", "wall s", "candidates/s");
    for path in files {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let root = parse_with_overrides(&text, &name, &[]).unwrap();
        let spec = parse_spec(&root, &name, &catalog).unwrap();
        for jobs in [1, cores] {
            let (secs, stages, stage_s) = run(&spec, &name, &catalog, jobs);
            #[allow(clippy::cast_precision_loss)]
            let rate = spec.len() as f64 / secs;
            let st: Vec<String> = stages
                .iter()
                .zip(&stage_s)
                .map(|(s, t)| format!("{} {}->{} {t:.2} s", s.fidelity.name(), s.evaluated, s.kept))
                .collect();
            println!("{name:<28} {:>10} {jobs:>6} {secs:>10.2} {rate:>14.1}   {}", spec.len(), st.join(", "));
        }
    }
}
