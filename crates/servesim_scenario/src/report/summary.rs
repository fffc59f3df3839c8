//! The summary table `servesim predict` prints, and the sentence on refused requests the page
//! shows too.

use serde_json::Value;

use super::{agentic, planner, tiers, Prediction};

/// The summary table printed by `servesim predict`.
#[must_use]
pub fn summary_table(p: &Prediction) -> String {
    let s = &p.summary;
    let dep = &p.json["servesim"]["deployment"];
    let mut out = String::new();
    let roles: Vec<String> = dep["roles"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|x| {
                    format!(
                        "{} {}x {} TP{}{}",
                        x["role"].as_str().unwrap_or("?"),
                        x["replicas"],
                        x["hardware"].as_str().unwrap_or("?"),
                        x["tensor"],
                        if x["attention_data"].as_u64().unwrap_or(1) > 1 {
                            format!(" DP{}", x["attention_data"])
                        } else {
                            String::new()
                        }
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let planner = &p.json["servesim"]["planner"];
    out.push_str(&format!(
        "servesim predict: {} with {} ({} GPUs{}, {})\n",
        dep["model"].as_str().unwrap_or("?"),
        dep["backend"].as_str().unwrap_or("?"),
        dep["gpus"],
        if planner.is_object() {
            format!(" to start, autoscaled up to {}", planner["max_num_gpus"])
        } else {
            String::new()
        },
        roles.join(" + "),
    ));
    out.push_str(&format!(
        "requests: {} completed of {}, duration {:.1} s, {:.3} req/s, {:.1} output tok/s, {:.4} GPU-hours\n\n",
        s.completed_requests,
        s.num_requests,
        s.duration_ms / 1000.0,
        s.request_throughput_rps,
        s.output_throughput_tok_s,
        s.gpu_hours
    ));
    if let Some(line) = rejection_line(&p.json["servesim"]) {
        out.push_str(&line);
        out.push_str("\n\n");
    }
    out.push_str(&format!(
        "{:<22}{:>11}{:>11}{:>11}{:>11}{:>11}\n",
        "metric", "mean", "p50", "p90", "p99", "max"
    ));
    for (name, d) in [
        ("TTFT (ms)", &s.ttft),
        ("TPOT (ms)", &s.tpot),
        ("ITL (ms)", &s.itl),
        ("E2E latency (ms)", &s.e2e_latency),
    ] {
        out.push_str(&format!(
            "{name:<22}{:>11.2}{:>11.2}{:>11.2}{:>11.2}{:>11.2}\n",
            d.mean, d.median, d.p90, d.p99, d.max
        ));
    }
    if let Some(g) = s.goodput {
        out.push_str(&format!(
            "\ngoodput: {} of {} requests met the SLA ({:.3} req/s, {:.1} output tok/s)\n",
            g.completed_requests, s.completed_requests, g.request_throughput_rps, g.output_throughput_tok_s
        ));
    }
    out.push_str(&format!(
        "prefix cache reuse: {:.1}%   preemptions: {}\n",
        s.prefix_cache_reused_ratio * 100.0,
        s.num_preemptions
    ));
    let sp = &p.json["servesim"]["speculation"];
    if sp.is_object() {
        let by = sp["draft_model"].as_str().map(|m| format!(" by {m}")).unwrap_or_default();
        out.push_str(&format!(
            "speculative decoding: {} drafts a round{by}, {:.2} tokens a round ({:.2} expected)\n",
            sp["draft_tokens"].as_u64().unwrap_or(0),
            sp["tokens_per_round"].as_f64().unwrap_or(0.0),
            sp["expected_tokens_per_round"].as_f64().unwrap_or(0.0),
        ));
    }
    let fe = &p.json["servesim"]["frontend"];
    if fe.is_object() {
        out.push_str(&format!(
            "serving frontend: {} {:.0}% busy, requests wait {:.2} ms for them, tokens reach clients {:.2} ms after the engine\n",
            match fe["processes"].as_u64() {
                Some(1) => "1 process".to_string(),
                n => format!("{} processes", n.unwrap_or(0)),
            },
            fe["busy_fraction"].as_f64().unwrap_or(0.0) * 100.0,
            fe["mean_request_wait_ms"].as_f64().unwrap_or(0.0),
            fe["mean_token_delay_ms"].as_f64().unwrap_or(0.0),
        ));
    }
    for line in tiers::summary_lines(&p.json["servesim"]) {
        out.push_str(&line);
    }
    for line in planner::summary_lines(&p.json["servesim"]["planner"]) {
        out.push_str(&line);
    }
    if let Some(line) = agentic::summary_line(&p.json["servesim"]["agentic"]) {
        out.push_str(&line);
    }
    for line in crate::uncertainty::summary_lines(&p.json["servesim"]["uncertainty"]) {
        out.push_str(&line);
    }
    for t in p.json["servesim"]["timing"].as_array().into_iter().flatten() {
        out.push_str(&timing_line(t));
        out.push('\n');
    }
    for line in crate::details::time_lines(&p.json["details"]["time"]) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The refused requests and why, as one sentence (`None` when every request was accepted).
#[must_use]
pub fn rejection_line(servesim: &Value) -> Option<String> {
    let n = servesim["rejected_requests"].as_u64().filter(|&n| n > 0)?;
    let why = &servesim["rejections"];
    let count = |k: &str| why[k].as_u64().unwrap_or(0);
    let mut reasons = Vec::new();
    if count("beyond_context") > 0 {
        reasons.push(format!(
            "{} longer (prompt + output) than the model's context of {} tokens",
            count("beyond_context"),
            why["context_tokens"].as_u64().unwrap_or(0)
        ));
    }
    if count("beyond_kv_pool") > 0 {
        reasons.push(format!(
            "{} longer than a rank's KV pool of {} tokens",
            count("beyond_kv_pool"),
            why["kv_pool_tokens"].as_u64().unwrap_or(0)
        ));
    }
    let what = if n == 1 { "request was" } else { "requests were" };
    Some(if reasons.is_empty() {
        format!("warning: {n} {what} rejected and never ran")
    } else {
        format!("warning: {n} {what} rejected and never ran: {}", reasons.join("; "))
    })
}

/// One role's timing provenance for the table: which model and data timed its steps, and how
/// its kernel lookups split between measured points, interpolation and the roofline (so a run
/// that found no tables says so where the user looks, not only in prediction.json).
fn timing_line(t: &Value) -> String {
    let role = t["role"].as_str().unwrap_or("?");
    let model = t["model"].as_str().unwrap_or("?");
    let data = t["data"].as_str().unwrap_or("?");
    let l = &t["lookups"];
    let count = |k: &str| l[k].as_u64().unwrap_or(0);
    let total = count("measured") + count("interpolated") + count("extrapolated") + count("roofline");
    if total == 0 {
        return format!("timing, {role}: {model}, {data}");
    }
    let pct = |k: &str| count(k) as f64 / total as f64 * 100.0;
    format!(
        "timing, {role}: {model}, {data}; kernel lookups {:.0}% measured, {:.0}% interpolated, {:.0}% extrapolated, {:.0}% roofline",
        pct("measured"),
        pct("interpolated"),
        pct("extrapolated"),
        pct("roofline"),
    )
}
