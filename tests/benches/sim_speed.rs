//! Simulation speed: simulated requests per wall-second for the benchmark scenarios in
//! `tests/bench_scenarios/` (and any YAML given on the command line).
//!
//!     cargo bench -p servesim_tests --bench sim_speed [-- FILE.yaml ...]
//!
//! Each scenario is prepared once (config, catalog, trace parsing: reported separately) and
//! then simulated `RUNS` times; the best and median run are reported. Results also check
//! that every run produced the same prediction (determinism under repetition).
//!
//! Memory: the peak heap a run adds to the prepared scenario (counted by a wrapping global
//! allocator), and that peak per simulated request; split into the simulation's own peak and
//! the report's (summary, prediction.json), which starts from what the simulation left.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use servesim_scenario::catalog::Catalog;
use servesim_scenario::report::to_pretty_json;
use servesim_scenario::scenario::{parse_with_overrides, prepare};
use servesim_tests::DirFiles;

const RUNS: usize = 5;

/// The system allocator, counting live heap bytes and their peak, so a run's memory is
/// measured exactly and on every platform (resident-set marks keep freed pages of earlier runs).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`; the counters only observe sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn main() {
    let files = servesim_tests::bench_yaml_files("tests/bench_scenarios");
    let catalog = Catalog::builtin().unwrap();
    println!(
        "{:<34} {:>9} {:>10} {:>10} {:>12} {:>12} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "scenario",
        "requests",
        "prep ms",
        "sim ms",
        "req/s",
        "events/s",
        "steps",
        "sim MB",
        "sim B/req",
        "peak MB",
        "B/req"
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
        let (mut peak, mut sim_peak) = (0usize, 0usize);
        for _ in 0..RUNS {
            let before = LIVE.load(Ordering::Relaxed);
            PEAK.store(before, Ordering::Relaxed);
            let t = Instant::now();
            let mut sim = prepared.start();
            sim.run().unwrap();
            sim_peak = sim_peak.max(PEAK.load(Ordering::Relaxed) - before);
            let result = prepared.finish(sim);
            times.push(t.elapsed().as_secs_f64());
            peak = peak.max(PEAK.load(Ordering::Relaxed) - before);
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
        #[allow(clippy::cast_precision_loss)]
        let (peak_mb, sim_mb) = (peak as f64 / 1e6, sim_peak as f64 / 1e6);
        let (per_req, sim_per_req) = (peak as u64 / requests.max(1), sim_peak as u64 / requests.max(1));
        println!(
            "{name:<34} {requests:>9} {prep_ms:>10.1} {:>10.1} {rps:>12.0} {eps:>12.0} {steps:>10} {sim_mb:>9.1} {sim_per_req:>9} {peak_mb:>9.1} {per_req:>9}   (median {:.1} ms)",
            best * 1000.0,
            times[RUNS / 2] * 1000.0
        );
    }
}
