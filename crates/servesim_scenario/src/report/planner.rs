//! prediction.json's `servesim.planner` section and the summary's planner lines.

use serde_json::{json, Value};
use servesim_core::sim::RunResult;
use servesim_core::units::{SimDur, SimTime};

use crate::scenario::Prepared;

/// The autoscaling planner, when it ran: its settings, each pool's size over the run and
/// every decision it took.
pub(super) fn section(p: &Prepared, r: &RunResult) -> Option<Value> {
    use servesim_core::planner::Reason;
    let planner = r.planner.as_ref()?;
    let spec = planner.spec();
    let end = SimTime::ZERO + SimDur::from_ms_f64(r.summary.duration_ms);
    let duration_s = r.summary.duration_ms / 1e3;
    let pools: Vec<Value> = planner
        .reports()
        .enumerate()
        .map(|(i, (pool, report))| {
            let mine = || planner.decisions().iter().filter(move |d| d.pool == i);
            let ups = mine().filter(|d| d.to > d.from).count();
            let downs = mine().filter(|d| d.to < d.from).count();
            let worker_seconds = planner.worker_seconds(i, end);
            json!({
                "role": pool.role.name(),
                "gpus_per_worker": pool.gpus_per_worker,
                "initial_workers": pool.initial,
                "min_workers": pool.min_workers,
                "max_workers": pool.slots,
                "peak_workers": report.peak,
                "final_workers": report.timeline.last().map_or(0, |t| t.2),
                "startup_s": pool.startup.as_secs_f64(),
                "worker_seconds": worker_seconds,
                "mean_workers": if duration_s > 0.0 { worker_seconds / duration_s } else { 0.0 },
                "scale_ups": ups,
                "scale_downs": downs,
                "timeline": {
                    "time_ms": report.timeline.iter().map(|t| t.0.as_ms_f64()).collect::<Vec<_>>(),
                    "serving": report.timeline.iter().map(|t| t.1).collect::<Vec<_>>(),
                    "provisioned": report.timeline.iter().map(|t| t.2).collect::<Vec<_>>(),
                },
            })
        })
        .collect();
    let decisions: Vec<Value> = planner
        .decisions()
        .iter()
        .map(|d| {
            let (reason, target) = match d.reason {
                Reason::PrefillAbove { target } => ("prefill_above_target", Some(target)),
                Reason::DecodeAbove { target } => ("decode_above_target", Some(target)),
                Reason::Below => ("below_boundary", None),
            };
            json!({
                "time_ms": d.at.as_ms_f64(),
                "role": spec.pools.get(d.pool).map_or("", |p| p.role.name()),
                "from": d.from,
                "to": d.to,
                "reason": reason,
                "target_load": target,
            })
        })
        .collect();
    let sla = &p.config.evaluation.sla;
    Some(json!({
        "scaling": "load",
        "adjustment_interval_s": spec.interval.as_secs_f64(),
        "samples_per_interval": servesim_core::planner::SAMPLES_PER_INTERVAL,
        "regression_window": spec.window,
        "min_observations": spec.min_observations,
        "scale_down_sensitivity": spec.down_sensitivity,
        "ttft_target_ms": spec.ttft_target_ms,
        "itl_target_ms": spec.itl_target_ms,
        "targets_from": if sla.ttft_ms.is_some() || sla.itl_ms.is_some() { "evaluation.sla (Dynamo's 500 / 50 ms where unset)" } else { "Dynamo planner defaults" },
        "max_num_gpus": spec.max_gpus,
        "min_num_gpus": spec.min_gpus,
        "pools": pools,
        "decisions": decisions,
    }))
}

/// The summary table's lines about the planner's pools (none without a planner).
pub(super) fn summary_lines(planner: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for pool in planner["pools"].as_array().into_iter().flatten() {
        let n = |k: &str| pool[k].as_u64().unwrap_or(0);
        out.push(format!(
            "planner, {} pool: {} -> {} workers (peak {}, {:.2} on average), {} scale-ups, {} scale-downs\n",
            pool["role"].as_str().unwrap_or(""),
            n("initial_workers"),
            n("final_workers"),
            n("peak_workers"),
            pool["mean_workers"].as_f64().unwrap_or(0.0),
            n("scale_ups"),
            n("scale_downs"),
        ));
    }
    out
}
