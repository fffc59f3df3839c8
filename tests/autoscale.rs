//! The built-in autoscaling planner and time-varying traffic, end to end: what a user who
//! sizes a fleet for a traffic peak relies on.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use servesim_scenario::report::to_pretty_json;
use servesim_tests::{config_refusal, predict_file_with};

const RAMP: &str = "tests/scenarios/planner_vllm_ramp.yaml";
const PD: &str = "tests/scenarios/planner_pd_trtllm.yaml";

fn planner(p: &servesim_scenario::Prediction) -> &Value {
    &p.json["servesim"]["planner"]
}

/// Worker-seconds from a pool's step function of provisioned workers, up to `end_ms`.
fn integral(pool: &Value, end_ms: f64) -> f64 {
    let t: Vec<f64> =
        pool["timeline"]["time_ms"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let n: Vec<f64> =
        pool["timeline"]["provisioned"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let mut total = 0.0;
    for k in 0..t.len() {
        let to = t.get(k + 1).copied().unwrap_or(f64::INFINITY).min(end_ms);
        if to > t[k] {
            total += n[k] * (to - t[k]) / 1e3;
        }
    }
    total
}

#[test]
fn the_planner_grows_the_fleet_for_a_peak_and_shrinks_it_after_for_fewer_gpu_hours() {
    let auto = predict_file_with(RAMP, &[]).unwrap();
    let pl = planner(&auto);
    let pool = &pl["pools"][0];
    assert_eq!(pool["role"], "aggregated");
    assert_eq!(pool["initial_workers"], 1);
    let peak = pool["peak_workers"].as_u64().unwrap();
    assert!(peak >= 3, "peak {peak}");
    assert_eq!(pool["final_workers"], 1, "back to one replica after the peak");
    let decisions = pl["decisions"].as_array().unwrap();
    // Growth happens in the peak (from 120 s), one worker at a time, 30 s apart at least
    // (each new replica takes 30 s to start and the planner waits for it).
    let ups: Vec<f64> = decisions
        .iter()
        .filter(|d| d["to"].as_u64() > d["from"].as_u64())
        .map(|d| d["time_ms"].as_f64().unwrap())
        .collect();
    assert!(ups.first().is_some_and(|&t| t >= 120_000.0), "{ups:?}");
    assert!(ups.windows(2).all(|w| w[1] - w[0] >= 30_000.0), "{ups:?}");
    for d in decisions {
        assert_eq!(d["to"].as_i64().unwrap().abs_diff(d["from"].as_i64().unwrap()), 1, "{d}");
    }
    // The serving frontends are those of the replicas the planner started (all four slots of
    // the 4-GPU budget), each counted for the time it was provisioned.
    let fe = &auto.json["servesim"]["frontend"];
    assert_eq!(fe["workers"].as_array().unwrap().len() as u64, peak);
    assert_eq!(fe["processes"].as_u64(), Some(peak));
    // GPU-hours integrate the provisioned workers (starting, serving, draining).
    let s = &auto.summary;
    let worker_seconds = integral(pool, s.duration_ms);
    assert!(
        (s.decode_worker_seconds - worker_seconds).abs() < 1e-6,
        "{} vs {worker_seconds}",
        s.decode_worker_seconds
    );
    assert!((s.gpu_hours - worker_seconds / 3600.0).abs() < 1e-9);
    // Against fixed fleets: one replica is hopelessly behind in the peak, a peak-sized fleet
    // holds the SLA at a much higher GPU bill.
    let fixed = |n: u64| {
        let replicas = format!("engine.workers.aggregated.parallelism.replicas={n}");
        predict_file_with(RAMP, &["planner.policy=disabled", &replicas]).unwrap()
    };
    let one = fixed(1);
    let big = fixed(peak);
    assert!(
        auto.summary.ttft.mean < one.summary.ttft.mean / 5.0,
        "{} vs {}",
        auto.summary.ttft.mean,
        one.summary.ttft.mean
    );
    assert!(
        auto.summary.gpu_hours < big.summary.gpu_hours * 0.6,
        "{} vs {}",
        auto.summary.gpu_hours,
        big.summary.gpu_hours
    );
    assert!(auto.summary.gpu_hours > one.summary.gpu_hours);
    assert!(big.summary.ttft.p90 < auto.summary.ttft.p90);
}

#[test]
fn a_planner_that_can_never_scale_predicts_exactly_the_fixed_fleet() {
    // A budget of the starting GPUs and a scale-down boundary of zero leave nothing to do:
    // the prediction must be the fixed deployment's, byte for byte but for the section.
    for (path, sets) in [
        (RAMP, vec!["planner.max_num_gpus=1", "planner.load_scaling_down_sensitivity=0"]),
        (PD, vec!["planner.max_num_gpus=2", "planner.load_scaling_down_sensitivity=0"]),
    ] {
        let mut with = predict_file_with(path, &sets).unwrap();
        let without = predict_file_with(path, &["planner.policy=disabled"]).unwrap();
        assert!(planner(&with)["decisions"].as_array().unwrap().is_empty());
        // What only a planner run reports: its section and each slot's provisioned time.
        with.json["servesim"].as_object_mut().unwrap().remove("planner");
        for w in with.json["servesim"]["time_series"]["workers"].as_array_mut().unwrap() {
            assert!(w.as_object_mut().unwrap().remove("provisioned_ms").is_some());
        }
        let (a, b) = (to_pretty_json(&with.json), to_pretty_json(&without.json));
        if let Some((k, (x, y))) = a.lines().zip(b.lines()).enumerate().find(|(_, (x, y))| x != y) {
            panic!("{path}: line {}: {x:?} vs {y:?}", k + 1);
        }
        assert_eq!(a.len(), b.len(), "{path}");
        assert_eq!(with.requests, without.requests, "{path}");
    }
}

#[test]
fn both_pools_of_a_disaggregated_deployment_scale_within_one_gpu_budget() {
    let p = predict_file_with(PD, &[]).unwrap();
    let pl = planner(&p);
    assert_eq!(pl["max_num_gpus"], 6);
    let pools = pl["pools"].as_array().unwrap();
    assert_eq!(pools.iter().map(|x| x["role"].as_str().unwrap()).collect::<Vec<_>>(), ["prefill", "decode"]);
    for pool in pools {
        assert!(pool["scale_ups"].as_u64().unwrap() > 0, "{pool}");
    }
    // At no time do the two pools hold more than six GPUs (one GPU a worker).
    let mut events: Vec<(f64, usize, u64)> = Vec::new();
    for (i, pool) in pools.iter().enumerate() {
        let t = pool["timeline"]["time_ms"].as_array().unwrap();
        let n = pool["timeline"]["provisioned"].as_array().unwrap();
        for (t, n) in t.iter().zip(n) {
            events.push((t.as_f64().unwrap(), i, n.as_u64().unwrap()));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut held = [0u64; 2];
    for (_, i, n) in events {
        held[i] = n;
        assert!(held[0] + held[1] <= 6, "{held:?}");
    }
    // Worker slots are laid out pool by pool: the time series names each slot's role, and
    // every request's decode worker is numbered within the decode pool.
    let ts = p.json["servesim"]["time_series"]["workers"].as_array().unwrap();
    let prefill_slots = pools[0]["max_workers"].as_u64().unwrap() as usize;
    assert_eq!(ts.len() as u64, prefill_slots as u64 + pools[1]["max_workers"].as_u64().unwrap());
    assert!(ts[..prefill_slots].iter().all(|w| w["role"] == "prefill"));
    assert!(ts[prefill_slots..].iter().all(|w| w["role"] == "decode"));
    // New workers take the lowest free slot, so the slots ever started are as many as each
    // pool's peak; the rest report no provisioned time (the page leaves them out).
    let started = ts.iter().filter(|w| w["provisioned_ms"].as_f64().unwrap() > 0.0).count() as u64;
    assert_eq!(started, pools.iter().map(|x| x["peak_workers"].as_u64().unwrap()).sum::<u64>());
    let jsonl = servesim_scenario::report::to_jsonl(&p.requests);
    let decode_slots = pools[1]["max_workers"].as_u64().unwrap();
    let mut decode_workers = std::collections::BTreeSet::new();
    for line in jsonl.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        decode_workers.insert(r["decode_worker_idx"].as_u64().unwrap());
        assert!(r["prefill_worker_idx"].as_u64().unwrap() < prefill_slots as u64, "{r}");
    }
    // The first decode worker serves from the start; a second one after a scale-up.
    assert_eq!(decode_workers.first(), Some(&0));
    assert!(
        decode_workers.len() > 1 && decode_workers.iter().all(|&w| w < decode_slots),
        "{decode_workers:?}"
    );
    // Worker-seconds of each pool are its own integral.
    let s = &p.summary;
    assert!((s.prefill_worker_seconds - integral(&pools[0], s.duration_ms)).abs() < 1e-6);
    assert!((s.decode_worker_seconds - integral(&pools[1], s.duration_ms)).abs() < 1e-6);
}

#[test]
fn planner_and_rate_schedule_mistakes_name_their_field() {
    for (sets, words) in [
        (vec!["planner.enable_throughput_scaling=true"], "planner.enable_throughput_scaling"),
        (vec!["planner.enable_load_scaling=false"], "planner.enable_load_scaling"),
        (vec!["planner.scaling_policy=hybrid_180_5"], "planner.scaling_policy"),
        (vec!["planner.max_num_gpus=0"], "planner.max_num_gpus"),
        (vec!["engine.workers.aggregated.parallelism.tensor=2", "planner.max_num_gpus=1"], "below the 2 GPUs"),
        (vec!["planner.min_workers=2"], "engine.workers.aggregated.parallelism.replicas"),
        (vec!["planner.fpm_sample_bucket_size=10"], "perfect square"),
        (vec!["planner.load_sensitivity=aggressive"], "planner.load_sensitivity"),
        (vec!["planner.max_workers=3"], "unknown key"),
        (vec!["engine.workers.aggregated.startup_seconds=-1"], "startup_seconds"),
        (vec!["traffic.load.rate_schedule=[{at_seconds: 100, requests_per_second: 5}, {at_seconds: 50, requests_per_second: 2}]"], "rate_schedule[1].at_seconds"),
        (vec!["traffic.load.rate_schedule=[{at_seconds: 100, requests_per_second: 0}]"], "rate_schedule[0].requests_per_second"),
        (vec!["traffic.load.rate_schedule=[{at_seconds: 100}]"], "rate_schedule[0].requests_per_second"),
        (vec!["traffic.load.type=concurrency"], "traffic.load.rate_schedule"),
    ] {
        let text = config_refusal(RAMP, &sets);
        assert!(text.contains(words), "{sets:?}: {text}");
    }
    // Keys that tune throughput-based scaling only are accepted, as Dynamo accepts them
    // with load-based scaling alone, and change nothing.
    let tuned = predict_file_with(
        RAMP,
        &[
            "planner.load_predictor=kalman",
            "planner.throughput_adjustment_interval_seconds=60",
            "planner.target=sla",
        ],
    )
    .unwrap();
    let plain = predict_file_with(RAMP, &[]).unwrap();
    assert_eq!(tuned.json, plain.json);
}
