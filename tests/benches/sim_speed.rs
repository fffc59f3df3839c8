//! Simulation speed: simulated requests per wall-second for the benchmark scenarios in
//! `tests/bench_scenarios/` (and any YAML given on the command line).
//!
//!     cargo bench -p servesim_tests --bench sim_speed [-- FILE.yaml ...]
//!
//! Each scenario is prepared once (config, catalog, trace parsing: reported separately) and
//! then simulated `RUNS` times; the best and median run are reported. Results also check
//! that every run produced the same prediction (determinism under repetition).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use servesim_scenario::catalog::Catalog;
use servesim_scenario::report::to_pretty_json;
use servesim_scenario::scenario::{parse_with_overrides, prepare};
use servesim_tests::DirFiles;

const RUNS: usize = 5;

fn main() {
    let files = servesim_tests::bench_yaml_files("tests/bench_scenarios");
    let catalog = Catalog::builtin().unwrap();
    println!(
        "{:<34} {:>9} {:>10} {:>10} {:>12} {:>12} {:>10}",
        "scenario", "requests", "prep ms", "sim ms", "req/s", "events/s", "steps"
    );
    for path in files {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let t0 = Instant::now();
        let root = parse_with_overrides(&text, &name, &[]).unwrap();
        let files = DirFiles(path.parent().unwrap().to_path_buf());
        let prepared = match prepare(&root, &name, &catalog, None, &files) {
            Ok(p) => p,
            Err(e) => {
                println!("{name:<34} skipped: {e}");
                continue;
            }
        };
        let prep_ms = t0.elapsed().as_secs_f64() * 1000.0;
        let mut times = Vec::new();
        let mut first: Option<String> = None;
        let (mut requests, mut events, mut steps) = (0, 0, 0);
        for _ in 0..RUNS {
            let t = Instant::now();
            let mut sim = prepared.start();
            sim.run().unwrap();
            let result = prepared.finish(sim);
            times.push(t.elapsed().as_secs_f64());
            requests = result.summary.num_requests;
            events = result.json["servesim"]["events"].as_u64().unwrap();
            steps = result.json["servesim"]["time_series"]["workers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["steps"].as_u64().unwrap())
                .sum::<u64>();
            let text = to_pretty_json(&result.json);
            match &first {
                None => first = Some(text),
                Some(f) => assert_eq!(f, &text, "{name}: runs differ"),
            }
        }
        times.sort_by(f64::total_cmp);
        let best = times[0];
        #[allow(clippy::cast_precision_loss)]
        let (rps, eps) = (requests as f64 / best, events as f64 / best);
        println!(
            "{name:<34} {requests:>9} {prep_ms:>10.1} {:>10.1} {rps:>12.0} {eps:>12.0} {steps:>10}   (median {:.1} ms)",
            best * 1000.0,
            times[RUNS / 2] * 1000.0
        );
    }
}
