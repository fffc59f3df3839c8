//! prediction.json's `servesim.agentic` section and the summary's line for it: how long the
//! plays of a dependency-graph trace took, and what a seeded snapshot cut.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use servesim_core::request::Status;
use servesim_core::sim::RunResult;
use servesim_core::traffic::Source;
use servesim_core::units::SimTime;

use crate::scenario::Prepared;

/// A replayed dependency graph: its shape, and each play's time from its first request's
/// arrival to its last request's last token (plays every request of which completed).
pub(super) fn section(p: &Prepared, r: &RunResult) -> Option<Value> {
    let Source::Trace(t) = &p.traffic.source else { return None };
    if !t.dag {
        return None;
    }
    let play_of = t.plays();
    let row_of: BTreeMap<(u32, u32), usize> =
        t.row_keys().into_iter().enumerate().map(|(r, k)| (k, r)).collect();
    let mut rows_per_play: BTreeMap<u32, usize> = BTreeMap::new();
    for &pl in &play_of {
        *rows_per_play.entry(pl).or_default() += 1;
    }
    // Per play: requests sent, requests completed, first arrival, last token.
    let mut seen: BTreeMap<u32, (usize, usize, SimTime, SimTime)> = BTreeMap::new();
    for rec in r.records.iter() {
        let Some(row) = rec.session.and_then(|k| row_of.get(&k)) else { continue };
        let e = seen.entry(play_of[*row]).or_insert((0, 0, SimTime::MAX, SimTime::ZERO));
        e.0 += 1;
        e.2 = e.2.min(rec.arrival);
        if rec.status == Status::Completed {
            e.1 += 1;
            e.3 = e.3.max(rec.stamps.last_token);
        }
    }
    let mut durations: Vec<f64> = seen
        .iter()
        .filter(|(pl, s)| s.1 == rows_per_play[*pl])
        .map(|(_, s)| (s.3 - s.2).as_ms_f64())
        .collect();
    durations.sort_by(f64::total_cmp);
    let d = servesim_core::metrics::dist(&durations);
    let mut section = json!({
        "plays": rows_per_play.len(),
        "started_plays": seen.len(),
        "completed_plays": durations.len(),
        "requests": t.rows.len(),
        "dependent_requests": t.rows.iter().filter(|r| !r.wait_for.is_empty()).count(),
        "joins": t.rows.iter().filter(|r| r.wait_for.len() > 1).count(),
        "longest_chain_requests": t.longest_chain(),
        "play_duration_ms": {
            "mean": d.mean, "median": d.median, "p90": d.p90, "p99": d.p99, "max": d.max,
        },
    });
    if let Some(s) = &t.snapshot {
        // The replay starts when the last warmup primer is done, with its first root (at
        // trace time zero).
        let replay_start = if t.warmup.is_empty() {
            None
        } else {
            r.records.iter().filter(|rec| !rec.warmup).map(|rec| rec.arrival).min()
        };
        section["snapshot"] = json!({
            "seed": s.seed,
            "plays": s.plays,
            "cut_plays": s.cut_plays,
            "history_requests": s.history_requests,
            "replayed_requests": s.replayed_requests,
            "mean_cut_fraction": s.mean_cut_fraction,
            "conversations_with_history": s.primers.len(),
            "warmup_primers": t.warmup.len(),
            "replay_start_ms": replay_start.map_or(0.0, SimTime::as_ms_f64),
        });
    }
    Some(section)
}

/// The summary line of a replayed dependency graph.
pub(super) fn summary_line(a: &Value) -> Option<String> {
    let plays = a["plays"].as_u64()?;
    let done = a["completed_plays"].as_u64().unwrap_or(0);
    let d = &a["play_duration_ms"];
    let s = |k: &str| d[k].as_f64().unwrap_or(0.0) / 1e3;
    let finished = if done == plays { "all completed".to_string() } else { format!("{done} completed") };
    let snapshot = match a.get("snapshot") {
        Some(s) => format!(
            "; snapshot (seed {}): {} of {} plays cut at a mean {:.0}% of their span, {} earlier requests not replayed",
            s["seed"],
            s["cut_plays"],
            s["plays"],
            s["mean_cut_fraction"].as_f64().unwrap_or(0.0) * 100.0,
            s["history_requests"],
        ),
        None => String::new(),
    };
    let warmup = match a.get("snapshot").and_then(|s| s["warmup_primers"].as_u64()).filter(|n| *n > 0) {
        Some(n) => format!(
            "; warmup: {n} one-token primers, replay from {:.1} s",
            a["snapshot"]["replay_start_ms"].as_f64().unwrap_or(0.0) / 1e3
        ),
        None => String::new(),
    };
    Some(format!(
        "agentic plays: {plays} ({finished}), first request to last token mean {:.1} s, p90 {:.1} s, max {:.1} s; {} of {} requests sent after what they wait for, longest chain {}{snapshot}{warmup}\n",
        s("mean"),
        s("p90"),
        s("max"),
        a["dependent_requests"],
        a["requests"],
        a["longest_chain_requests"],
    ))
}
