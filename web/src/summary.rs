//! The Predict page's result summary beyond the headline cards: latency percentiles, SLA
//! attainment, GPUs, the memory and KV breakdown per worker role, and where the step times
//! came from. Pure functions of prediction.json (tested natively) and the views that show them.

use leptos::prelude::*;
use serde_json::Value;

use crate::app::fmt_num;

/// Latency figures tabulated: (prediction.json stem, label).
pub const LATENCIES: [(&str, &str); 4] =
    [("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_latency_ms", "E2E")];
/// Statistics per latency: (key prefix, heading).
pub const STATS: [(&str, &str); 5] =
    [("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99")];

/// The percentile table: one row per latency, ms with two decimals.
#[must_use]
pub fn latency_rows(p: &Value) -> Vec<(&'static str, Vec<String>)> {
    LATENCIES
        .iter()
        .map(|(stem, label)| {
            (*label, STATS.iter().map(|(s, _)| fmt_num(&p[format!("{s}_{stem}")], 2)).collect())
        })
        .collect()
}

/// SLA attainment: requests that met the SLA over completed requests, as text (`no SLA set`
/// when the scenario has none).
#[must_use]
pub fn attainment(p: &Value) -> String {
    match (p["goodput_completed_requests"].as_f64(), p["completed_requests"].as_f64()) {
        (Some(good), Some(done)) if done > 0.0 => {
            format!("{:.1}% ({good:.0} of {done:.0})", 100.0 * good / done)
        }
        (Some(_), _) => "–".into(),
        _ => "no SLA set".into(),
    }
}

/// GiB with one decimal.
fn gib(v: &Value) -> String {
    v.as_f64().map_or_else(|| "–".into(), |b| format!("{:.1}", b / f64::from(1u32 << 30)))
}

/// Memory rows per role: (label, one cell per role), GiB per GPU unless stated.
#[must_use]
pub fn memory_rows(p: &Value) -> (Vec<String>, Vec<(&'static str, Vec<String>)>) {
    let Some(mem) = p["servesim"]["memory"].as_object() else { return (Vec::new(), Vec::new()) };
    let roles: Vec<String> = mem.keys().cloned().collect();
    let row = |label: &'static str, f: &dyn Fn(&Value) -> String| (label, mem.values().map(f).collect());
    let rows = vec![
        row("GPU memory (GiB)", &|m| gib(&m["total_gpu_capacity_bytes"])),
        row("weights", &|m| gib(&m["weights_bytes"])),
        row("activations", &|m| gib(&m["activations_bytes"])),
        row("runtime overhead", &|m| gib(&m["runtime_overhead_bytes"])),
        row("communication buffers", &|m| gib(&m["comm_overhead_bytes"])),
        row("CUDA graphs", &|m| gib(&m["cuda_graph_reserved_bytes"])),
        row("KV cache", &|m| gib(&m["kv_cache_bytes"])),
        row("KV bytes per token", &|m| fmt_num(&m["kv_size_per_token_bytes"], 0)),
        row("KV capacity (tokens)", &|m| fmt_num(&m["total_kv_size_tokens"], 0)),
    ];
    (roles, rows)
}

/// Timing provenance per role: (role, model, data source, lookups as text).
#[must_use]
pub fn provenance(p: &Value) -> Vec<(String, String, String, String)> {
    p["servesim"]["timing"].as_array().map_or(Vec::new(), |a| {
        a.iter()
            .map(|t| {
                let l = &t["lookups"];
                let n = |k: &str| l[k].as_u64().unwrap_or(0);
                let total = n("measured") + n("interpolated") + n("extrapolated") + n("roofline");
                let lookups = if total == 0 {
                    "–".to_string()
                } else {
                    format!(
                        "{} measured · {} interpolated · {} extrapolated · {} roofline",
                        n("measured"),
                        n("interpolated"),
                        n("extrapolated"),
                        n("roofline")
                    )
                };
                (
                    t["role"].as_str().unwrap_or("").to_string(),
                    t["model"].as_str().unwrap_or("").to_string(),
                    t["data"].as_str().unwrap_or("").to_string(),
                    lookups,
                )
            })
            .collect()
    })
}

/// The serving processes' work, as text (`not simulated` when the run has no frontend queue).
#[must_use]
pub fn frontend(p: &Value) -> String {
    let f = &p["servesim"]["frontend"];
    if !f.is_object() {
        return "not simulated".into();
    }
    let pct = |v: &Value| v.as_f64().map_or_else(|| "–".into(), |x| format!("{:.0}%", 100.0 * x));
    let processes = match f["processes"].as_u64() {
        Some(1) => "1 process".to_string(),
        _ => format!("{} processes", fmt_num(&f["processes"], 0)),
    };
    format!(
        "{} busy ({processes}) · requests wait {} ms · tokens {} ms late",
        pct(&f["busy_fraction"]),
        fmt_num(&f["mean_request_wait_ms"], 2),
        fmt_num(&f["mean_token_delay_ms"], 2)
    )
}

/// Speculative decoding, as text (`off` when the engine does not speculate).
#[must_use]
pub fn speculation(p: &Value) -> String {
    let s = &p["servesim"]["speculation"];
    if !s.is_object() {
        return "off".into();
    }
    let kind = match s["kind"].as_str() {
        Some("ngram") => "n-gram lookup".to_string(),
        Some("draft_model") => format!("draft model {}", s["draft_model"].as_str().unwrap_or("")),
        _ => "draft layers (MTP/EAGLE)".to_string(),
    };
    format!(
        "{kind}: {} drafts a round · {} tokens a round ({} expected)",
        fmt_num(&s["draft_tokens"], 0),
        fmt_num(&s["tokens_per_round"], 2),
        fmt_num(&s["expected_tokens_per_round"], 2)
    )
}

/// Which pool keeps a KV tier, before its figures: nothing for aggregated workers.
fn pool_prefix(tier: &Value) -> &'static str {
    if tier["role"] == "prefill" {
        "prefill workers · "
    } else {
        ""
    }
}

/// The host KV tier (G2), as text (`none` when the workers keep no KV in host memory).
#[must_use]
pub fn host_tier(p: &Value) -> String {
    let h = &p["servesim"]["host_offload"];
    if !h.is_object() {
        return "none".into();
    }
    // A pool the ranks share says how large it is and how much one rank gave another.
    let shared = if h["scope"] == "cluster_shared" {
        format!(" · {}", servesim_scenario::report::capacity_phrase(h))
    } else {
        String::new()
    };
    format!(
        "{}{} restores of {} tokens · {} ms wait on average · {} {} written{}, {} evicted{shared}",
        pool_prefix(h),
        fmt_num(&h["restores"], 0),
        fmt_num(&h["restored_tokens"], 0),
        fmt_num(&h["mean_restore_wait_ms"], 2),
        fmt_num(&h["written_blocks"], 0),
        h["counted_in"].as_str().unwrap_or("blocks"),
        servesim_scenario::report::writes_phrase(h),
        fmt_num(&h["evicted_blocks"], 0)
    )
}

/// The storage KV tier (G3) behind host memory, as text (`none` without one).
#[must_use]
pub fn storage_tier(p: &Value) -> String {
    let g = &p["servesim"]["g3_offload"];
    if !g.is_object() {
        return "none".into();
    }
    let pool = pool_prefix(g);
    if g["reads"] == "prefetch" {
        return format!(
            "{pool}{} · {} prefetches ({}) read {} tokens, {} reached host memory · {} pages written, {} evicted",
            g["scope"].as_str().unwrap_or("").replace('_', " "),
            fmt_num(&g["prefetches"], 0),
            g["prefetch_policy"].as_str().unwrap_or("").replace('_', " "),
            fmt_num(&g["read_tokens"], 0),
            fmt_num(&g["prefetched_tokens"], 0),
            fmt_num(&g["written_blocks"], 0),
            fmt_num(&g["evicted_blocks"], 0)
        );
    }
    format!(
        "{pool}{} · {} blocks read back in {} reads ({} across workers) · {} written, {} evicted",
        g["scope"].as_str().unwrap_or("").replace('_', " "),
        fmt_num(&g["read_blocks"], 0),
        fmt_num(&g["read_jobs"], 0),
        fmt_num(&g["cross_worker_read_blocks"], 0),
        fmt_num(&g["written_blocks"], 0),
        fmt_num(&g["evicted_blocks"], 0)
    )
}

/// The GPU pools' eviction rule, as text: `LRU`, or Belady with what its forecast covered.
#[must_use]
pub fn kv_eviction(p: &Value) -> String {
    let e = &p["servesim"]["kv_eviction"];
    if !e.is_object() {
        return "LRU".into();
    }
    format!(
        "Belady ({}) · forecast of {} requests over {} blocks · {} cached tokens evicted",
        e["assumption"].as_str().unwrap_or(""),
        fmt_num(&e["forecast_requests"], 0),
        fmt_num(&e["forecast_blocks"], 0),
        fmt_num(&e["evicted_tokens"], 0)
    )
}

/// A hybrid model's recurrent state, as text: its size and where the engine keeps it (`–`
/// for models without one).
#[must_use]
pub fn recurrent_state(p: &Value) -> String {
    let Some(roles) = p["servesim"]["memory"].as_object() else { return "–".into() };
    let parts: Vec<String> = roles
        .iter()
        .filter(|(_, m)| m["recurrent_state"].is_object())
        .map(|(role, m)| {
            let st = &m["recurrent_state"];
            #[allow(clippy::cast_precision_loss)] // State sizes are far below 2^53 bytes.
            let mib = st["bytes_per_sequence"].as_u64().unwrap_or(0) as f64 / f64::from(1u32 << 20);
            let kept = match st["kept_in"].as_str() {
                Some("kv_pool_blocks") => {
                    format!("{} KV blocks a sequence", fmt_num(&st["blocks_per_sequence"], 0))
                }
                Some("state_pool_slots") => format!(
                    "{} state slots a rank, {} kept states dropped",
                    fmt_num(&st["slots"], 0),
                    fmt_num(&st["dropped_states"], 0)
                ),
                _ => format!("{} batch slots allocated", fmt_num(&st["slots"], 0)),
            };
            let reuse = match st["prefix_reuse"].as_str() {
                Some("block_boundary_checkpoints") => "reuse up to a checkpointed block",
                Some("finished_sequence_states") => "reuse where a finished request left its state",
                _ => "no prefix reuse",
            };
            format!(
                "{role}: {mib:.1} MiB a sequence ({}) · {kept} · {reuse}",
                st["ssm_dtype"].as_str().unwrap_or("")
            )
        })
        .collect();
    if parts.is_empty() {
        "–".into()
    } else {
        parts.join("; ")
    }
}

/// GPUs the run used: the deployment's, or with the autoscaling planner how many it started
/// with, held at most and held on average.
#[must_use]
pub fn gpus(p: &Value) -> String {
    let pools = p["servesim"]["planner"]["pools"].as_array().map_or(&[][..], Vec::as_slice);
    if pools.is_empty() {
        return fmt_num(&p["servesim"]["deployment"]["gpus"], 0);
    }
    let sum = |k: &str| -> f64 {
        pools
            .iter()
            .map(|x| x[k].as_f64().unwrap_or(0.0) * x["gpus_per_worker"].as_f64().unwrap_or(0.0))
            .sum()
    };
    format!(
        "{} at start · {} at most · {} on average",
        fmt_num(&Value::from(sum("initial_workers")), 0),
        fmt_num(&Value::from(sum("peak_workers")), 0),
        fmt_num(&Value::from(sum("mean_workers")), 2)
    )
}

/// The autoscaling planner's work, as text (`off` when the fleet is fixed).
#[must_use]
pub fn autoscaling(p: &Value) -> String {
    let pools = p["servesim"]["planner"]["pools"].as_array().map_or(&[][..], Vec::as_slice);
    if pools.is_empty() {
        return "off".into();
    }
    pools
        .iter()
        .map(|x| {
            format!(
                "{} {} → {} → {} workers, {} up, {} down",
                x["role"].as_str().unwrap_or(""),
                fmt_num(&x["initial_workers"], 0),
                fmt_num(&x["peak_workers"], 0),
                fmt_num(&x["final_workers"], 0),
                fmt_num(&x["scale_ups"], 0),
                fmt_num(&x["scale_downs"], 0)
            )
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The plays of a replayed agentic dependency graph and how long they took from their first
/// request's arrival to their last token (`none` for other traffic).
#[must_use]
pub fn agentic(p: &Value) -> String {
    let a = &p["servesim"]["agentic"];
    if !a.is_object() {
        return "none".into();
    }
    let secs = |k: &str| fmt_num(&Value::from(a["play_duration_ms"][k].as_f64().unwrap_or(0.0) / 1e3), 1);
    let done = if a["completed_plays"] == a["plays"] {
        "all completed".to_string()
    } else {
        format!("{} completed", fmt_num(&a["completed_plays"], 0))
    };
    let s = &a["snapshot"];
    let snapshot = if s.is_object() {
        format!(
            " · snapshot (seed {}): {} of {} plays cut, {} earlier requests not replayed",
            s["seed"],
            fmt_num(&s["cut_plays"], 0),
            fmt_num(&s["plays"], 0),
            fmt_num(&s["history_requests"], 0)
        )
    } else {
        String::new()
    };
    let warmup = match s["warmup_primers"].as_u64() {
        Some(n) if n > 0 => format!(
            " · {n} warmup primers, replay from {} s",
            fmt_num(&Value::from(s["replay_start_ms"].as_f64().unwrap_or(0.0) / 1e3), 1)
        ),
        _ => String::new(),
    };
    format!(
        "{} plays, {done} · {} s mean, {} s p90, {} s max to the last token{snapshot}{warmup}",
        fmt_num(&a["plays"], 0),
        secs("mean"),
        secs("p90"),
        secs("max")
    )
}

/// An uncertainty band as text: the replays and the range of the headline figures over them
/// (`off` when the run has none).
#[must_use]
pub fn uncertainty(p: &Value) -> String {
    let u = &p["servesim"]["uncertainty"];
    let Some(runs) = u["runs"].as_u64() else { return "off".into() };
    let f = &u["figures"];
    let band = |k: &str, digits: usize| {
        format!("{}–{}", fmt_num(&f[k]["min"], digits), fmt_num(&f[k]["max"], digits))
    };
    let spread = u["acceptance_rate_spread"]
        .as_f64()
        .map_or(String::new(), |s| format!(", acceptance ±{:.0}%", 100.0 * s));
    format!(
        "{runs} seeds{spread} · TTFT p90 {} ms · TPOT p90 {} ms · {} req/s",
        band("p90_ttft_ms", 1),
        band("p90_tpot_ms", 2),
        band("request_throughput_rps", 3)
    )
}

/// The summary of a finished run.
#[component]
pub fn Summary(prediction: Signal<Option<Value>>) -> impl IntoView {
    let with =
        move |f: fn(&Value) -> String| move || prediction.with(|p| p.as_ref().map_or_else(|| "–".into(), f));
    view! {
        <Show when=move || prediction.with(Option::is_some)>
            <div class="summary-grid">
                <dl class="answer" id="run-facts">
                    <dt>"GPUs"</dt><dd id="gpus">{with(gpus)}</dd>
                    <dt>"Autoscaling"</dt><dd id="autoscaling">{with(autoscaling)}</dd>
                    <dt>"Agentic plays"</dt><dd id="agentic">{with(agentic)}</dd>
                    <dt>"Uncertainty band"</dt><dd id="uncertainty">{with(uncertainty)}</dd>
                    <dt>"SLA attainment"</dt><dd id="sla-attainment">{with(attainment)}</dd>
                    <dt>"Goodput"</dt><dd id="goodput">{with(|p| match p["goodput_request_throughput_rps"].as_f64() {
                        Some(_) => format!("{} req/s · {} output tok/s", fmt_num(&p["goodput_request_throughput_rps"], 3), fmt_num(&p["goodput_output_throughput_tok_s"], 1)),
                        None => "–".into(),
                    })}</dd>
                    <dt>"Prefix cache reuse"</dt><dd id="prefix-reuse">{with(|p| p["prefix_cache_reused_ratio"].as_f64().map_or_else(|| "–".into(), |r| format!("{:.1}%", 100.0 * r)))}</dd>
                    <dt>"Preemptions"</dt><dd id="preemptions">{with(|p| fmt_num(&p["servesim"]["num_preemptions"], 0))}</dd>
                    <dt>"Host KV tier"</dt><dd id="host-tier">{with(host_tier)}</dd>
                    <dt>"Storage KV tier"</dt><dd id="storage-tier">{with(storage_tier)}</dd>
                    <dt>"KV eviction"</dt><dd id="kv-eviction">{with(kv_eviction)}</dd>
                    <dt>"Recurrent state"</dt><dd id="recurrent-state">{with(recurrent_state)}</dd>
                    <dt>"Serving frontend"</dt><dd id="frontend">{with(frontend)}</dd>
                    <dt>"Speculative decoding"</dt><dd id="speculation">{with(speculation)}</dd>
                </dl>
                <div class="table-wrap">
                    <table id="latency-table" class="compact">
                        <caption>"Latency (ms)"</caption>
                        <thead><tr><th></th>{STATS.iter().map(|(_, h)| view! { <th scope="col">{*h}</th> }).collect_view()}</tr></thead>
                        <tbody>{move || prediction.with(|p| p.as_ref().map(latency_rows).unwrap_or_default()).into_iter().map(|(label, cells)| view! {
                            <tr><th scope="row">{label}</th>{cells.into_iter().map(|c| view! { <td>{c}</td> }).collect_view()}</tr>
                        }).collect_view()}</tbody>
                    </table>
                </div>
            </div>
            <details id="memory-details">
                <summary>"Memory and KV cache per GPU"</summary>
                {move || {
                    let (roles, rows) = prediction.with(|p| p.as_ref().map(memory_rows).unwrap_or_default());
                    view! {
                        <table id="memory-table" class="compact">
                            <thead><tr><th></th>{roles.into_iter().map(|r| view! { <th scope="col">{r}</th> }).collect_view()}</tr></thead>
                            <tbody>{rows.into_iter().map(|(label, cells)| view! {
                                <tr><th scope="row">{label}</th>{cells.into_iter().map(|c| view! { <td>{c}</td> }).collect_view()}</tr>
                            }).collect_view()}</tbody>
                        </table>
                    }
                }}
            </details>
            <details id="provenance-details">
                <summary>"Where the step times come from"</summary>
                <ul id="provenance" class="winners">
                    {move || prediction.with(|p| p.as_ref().map(provenance).unwrap_or_default()).into_iter().map(|(role, model, data, lookups)| view! {
                        <li><strong>{role}</strong>": "{model}" — "{data}<br/><span class="hint">{lookups}</span></li>
                    }).collect_view()}
                </ul>
            </details>
        </Show>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pd() -> Value {
        serde_json::from_str(include_str!("../../tests/golden/pd_vllm.prediction.json")).unwrap()
    }

    #[test]
    fn percentiles_sla_memory_and_provenance_come_from_prediction_json() {
        let p = pd();
        let rows = latency_rows(&p);
        assert_eq!(rows[0].0, "TTFT");
        assert_eq!(rows[0].1[0], fmt_num(&p["mean_ttft_ms"], 2));
        assert_eq!(rows[3].1[4], fmt_num(&p["p99_e2e_latency_ms"], 2));
        let good = p["goodput_completed_requests"].as_u64().unwrap();
        assert_eq!(attainment(&p), format!("{:.1}% ({good} of 300)", 100.0 * good as f64 / 300.0));
        let partial = serde_json::json!({"goodput_completed_requests": 216, "completed_requests": 300});
        assert_eq!(attainment(&partial), "72.0% (216 of 300)");
        let default: Value =
            serde_json::from_str(include_str!("../../tests/golden/default.prediction.json")).unwrap();
        assert_eq!(attainment(&default), "no SLA set");
        let (roles, mem) = memory_rows(&p);
        assert_eq!(roles, ["prefill", "decode"]);
        let weights = mem.iter().find(|(l, _)| *l == "weights").unwrap();
        assert_eq!(weights.1[0], "16.0");
        let prov = provenance(&p);
        assert_eq!(prov.len(), 2);
        assert_eq!(prov[0].1, "op_level");
        let lookups = &p["servesim"]["timing"][0]["lookups"];
        let want = format!("{} measured · {} interpolated", lookups["measured"], lookups["interpolated"]);
        assert!(prov[0].3.starts_with(&want), "{} vs {want}", prov[0].3);
        assert_eq!(frontend(&p), "not simulated");
        let queued = serde_json::json!({"servesim": {"frontend": {
            "processes": 2, "busy_fraction": 0.853, "mean_request_wait_ms": 1.5, "mean_token_delay_ms": 12.25
        }}});
        assert_eq!(
            frontend(&queued),
            "85% busy (2 processes) · requests wait 1.50 ms · tokens 12.25 ms late"
        );
        let one = serde_json::json!({"servesim": {"frontend": {
            "processes": 1, "busy_fraction": 0.2, "mean_request_wait_ms": 1.0, "mean_token_delay_ms": 2.0
        }}});
        assert!(frontend(&one).starts_with("20% busy (1 process) ·"), "{}", frontend(&one));
        assert_eq!(speculation(&p), "off");
        assert_eq!(host_tier(&p), "none");
        assert_eq!(autoscaling(&p), "off");
        assert_eq!(agentic(&p), "none");
        assert_eq!(uncertainty(&p), "off");
        let banded = serde_json::json!({"servesim": {"uncertainty": {"runs": 8, "figures": {
            "p90_ttft_ms": {"min": 158.2, "max": 208.63},
            "p90_tpot_ms": {"min": 10.021, "max": 12.456},
            "request_throughput_rps": {"min": 5.1061, "max": 5.8843}
        }}}});
        assert_eq!(
            uncertainty(&banded),
            "8 seeds · TTFT p90 158.2–208.6 ms · TPOT p90 10.02–12.46 ms · 5.106–5.884 req/s"
        );
        let graph: Value =
            serde_json::from_str(include_str!("../../tests/golden/agentic_coding_vllm.prediction.json"))
                .unwrap();
        let d = &graph["servesim"]["agentic"]["play_duration_ms"];
        assert_eq!(
            agentic(&graph),
            format!(
                "12 plays, all completed · {:.1} s mean, {:.1} s p90, {:.1} s max to the last token",
                d["mean"].as_f64().unwrap() / 1e3,
                d["p90"].as_f64().unwrap() / 1e3,
                d["max"].as_f64().unwrap() / 1e3
            )
        );
        let warm: Value = serde_json::from_str(include_str!(
            "../../tests/golden/agentic_coding_vllm_warmup.prediction.json"
        ))
        .unwrap();
        let s = &warm["servesim"]["agentic"]["snapshot"];
        let text = agentic(&warm);
        assert!(
            text.contains(&format!(
                " · snapshot (seed 7): 12 of 12 plays cut, {} earlier requests not replayed · {} warmup primers, replay from ",
                s["history_requests"], s["warmup_primers"]
            )),
            "{text}"
        );
        assert_eq!(gpus(&p), fmt_num(&p["servesim"]["deployment"]["gpus"], 0));
        let ramp: Value =
            serde_json::from_str(include_str!("../../tests/golden/planner_vllm_ramp.prediction.json"))
                .unwrap();
        let pool = &ramp["servesim"]["planner"]["pools"][0];
        assert_eq!(
            autoscaling(&ramp),
            format!(
                "aggregated 1 → {} → 1 workers, {} up, {} down",
                pool["peak_workers"], pool["scale_ups"], pool["scale_downs"]
            )
        );
        assert_eq!(
            gpus(&ramp),
            format!(
                "1 at start · {} at most · {:.2} on average",
                pool["peak_workers"],
                pool["mean_workers"].as_f64().unwrap()
            )
        );
        let g2 = serde_json::json!({"servesim": {"host_offload": {
            "restores": 374, "restored_tokens": 2_160_960, "mean_restore_wait_ms": 25.587,
            "written_blocks": 15235, "evicted_blocks": 7043
        }}});
        assert_eq!(
            host_tier(&g2),
            format!(
                "374 restores of {} tokens · 25.59 ms wait on average · {} blocks written, {} evicted",
                fmt_num(&serde_json::json!(2_160_960), 0),
                fmt_num(&serde_json::json!(15235), 0),
                fmt_num(&serde_json::json!(7043), 0)
            )
        );
        let mut trt = g2.clone();
        trt["servesim"]["host_offload"]["writes"] = "on_eviction".into();
        assert!(
            host_tier(&trt).contains(" blocks written as GPU memory evicted them, "),
            "{}",
            host_tier(&trt)
        );
        let mut sglang = g2.clone();
        sglang["servesim"]["host_offload"]["writes"] = "write_through".into();
        sglang["servesim"]["host_offload"]["counted_in"] = "tokens".into();
        assert!(
            host_tier(&sglang).contains(" tokens written through from the radix cache, "),
            "{}",
            host_tier(&sglang)
        );
        let mut pd = g2.clone();
        pd["servesim"]["host_offload"]["role"] = "prefill".into();
        assert_eq!(host_tier(&pd), format!("prefill workers · {}", host_tier(&g2)));
        let mut pooled = g2.clone();
        for (k, v) in [
            ("scope", serde_json::json!("cluster_shared")),
            ("capacity_blocks", 8192.into()),
            ("ranks", 2.into()),
            ("cross_rank_restored_blocks", 18153.into()),
        ] {
            pooled["servesim"]["host_offload"][k] = v;
        }
        assert_eq!(
            host_tier(&pooled),
            format!(
                "{} · 8192 blocks in one pool 2 ranks share (18153 restored by another rank than wrote them)",
                host_tier(&g2)
            )
        );
        assert_eq!(storage_tier(&g2), "none");
        let g3 = serde_json::json!({"servesim": {"g3_offload": {
            "scope": "cluster_shared", "read_blocks": 32275, "read_jobs": 366,
            "cross_worker_read_blocks": 17690, "written_blocks": 15236, "evicted_blocks": 0
        }}});
        assert_eq!(
            storage_tier(&g3),
            format!(
                "cluster shared · {} blocks read back in 366 reads ({} across workers) · {} written, 0 evicted",
                fmt_num(&serde_json::json!(32275), 0),
                fmt_num(&serde_json::json!(17690), 0),
                fmt_num(&serde_json::json!(15236), 0)
            )
        );
        let mut l3 = g3.clone();
        let g = &mut l3["servesim"]["g3_offload"];
        g["reads"] = "prefetch".into();
        g["prefetch_policy"] = "wait_complete".into();
        g["prefetches"] = 305.into();
        g["read_tokens"] = 1_704_448.into();
        g["prefetched_tokens"] = 1_703_925.into();
        assert_eq!(
            storage_tier(&l3),
            format!(
                "cluster shared · 305 prefetches (wait complete) read {} tokens, {} reached host memory · {} pages written, 0 evicted",
                fmt_num(&serde_json::json!(1_704_448), 0),
                fmt_num(&serde_json::json!(1_703_925), 0),
                fmt_num(&serde_json::json!(15236), 0)
            )
        );
        l3["servesim"]["g3_offload"]["role"] = "prefill".into();
        assert!(storage_tier(&l3).starts_with("prefill workers · cluster shared · 305 prefetches"));
        assert_eq!(kv_eviction(&g3), "LRU");
        assert_eq!(recurrent_state(&g3), "–");
        let hybrid = serde_json::json!({"servesim": {"memory": {"aggregated": {"recurrent_state": {
            "bytes_per_sequence": 153_944_064_u64, "ssm_dtype": "float32", "kept_in": "kv_pool_blocks",
            "blocks_per_sequence": 3, "slots": null, "prefix_reuse": "block_boundary_checkpoints"
        }}}}});
        assert_eq!(
            recurrent_state(&hybrid),
            "aggregated: 146.8 MiB a sequence (float32) · 3 KV blocks a sequence · reuse up to a checkpointed block"
        );
        let belady = serde_json::json!({"servesim": {"kv_eviction": {
            "policy": "belady", "assumption": "global_input_trace_order_v1",
            "forecast_requests": 1500, "forecast_blocks": 6200, "evicted_tokens": 3_396_672
        }}});
        assert_eq!(
            kv_eviction(&belady),
            format!(
                "Belady (global_input_trace_order_v1) · forecast of {} requests over {} blocks · {} cached tokens evicted",
                fmt_num(&serde_json::json!(1500), 0),
                fmt_num(&serde_json::json!(6200), 0),
                fmt_num(&serde_json::json!(3_396_672), 0)
            )
        );
        let mtp = serde_json::json!({"servesim": {"speculation": {
            "kind": "draft_layers", "draft_tokens": 3, "draft_layers": 3,
            "expected_tokens_per_round": 3.2, "tokens_per_round": 3.2137, "rounds": 27539
        }}});
        assert_eq!(
            speculation(&mtp),
            "draft layers (MTP/EAGLE): 3 drafts a round · 3.21 tokens a round (3.20 expected)"
        );
        let draft = serde_json::json!({"servesim": {"speculation": {
            "kind": "draft_model", "draft_model": "meta-llama/Llama-3.1-8B-Instruct", "draft_tokens": 4,
            "expected_tokens_per_round": 2.864, "tokens_per_round": 2.8485, "rounds": 6718
        }}});
        assert_eq!(
            speculation(&draft),
            "draft model meta-llama/Llama-3.1-8B-Instruct: 4 drafts a round · 2.85 tokens a round (2.86 expected)"
        );
    }
}
