//! Recommend speed: candidates replayed per wall-second for the search specs in
//! `data/recommend/` (or YAML files given on the command line), single-threaded and on every
//! core. Each candidate is a full replay, so this is the figure that decides how large a
//! search stays interactive.
//!
//!     cargo bench -p servesim_tests --bench recommend_speed [-- FILE.yaml ...]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use servesim_scenario::catalog::Catalog;
use servesim_scenario::recommend::{evaluate, finish, parse_spec, Spec};
use servesim_scenario::scenario::parse_with_overrides;
use servesim_tests::{repo_root, DataOnly};

fn run(spec: &Spec, source: &str, catalog: &Catalog, jobs: usize) -> (f64, usize) {
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let mut all = Vec::new();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= spec.len() {
                            return mine;
                        }
                        mine.push(evaluate(spec, i, source, catalog, &DataOnly));
                    }
                })
            })
            .collect();
        for h in handles {
            all.extend(h.join().unwrap());
        }
    });
    let rec = finish(spec, all, "bench");
    (started.elapsed().as_secs_f64(), rec.yamls.len())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a.ends_with(".yaml")).collect();
    let files: Vec<std::path::PathBuf> = if args.is_empty() {
        let mut v: Vec<_> = std::fs::read_dir(repo_root().join("data/recommend"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        v.sort();
        v
    } else {
        args.iter().map(std::path::PathBuf::from).collect()
    };
    let catalog = Catalog::builtin().unwrap();
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    println!("{:<28} {:>10} {:>6} {:>10} {:>14}", "search", "candidates", "jobs", "wall s", "candidates/s");
    for path in files {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let root = parse_with_overrides(&text, &name, &[]).unwrap();
        let spec = parse_spec(&root, &name, &catalog).unwrap();
        for jobs in [1, cores] {
            let (secs, _) = run(&spec, &name, &catalog, jobs);
            #[allow(clippy::cast_precision_loss)]
            let rate = spec.len() as f64 / secs;
            println!("{name:<28} {:>10} {jobs:>6} {secs:>10.2} {rate:>14.1}", spec.len());
        }
    }
}
