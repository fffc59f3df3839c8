//! The end of a search: scores, the top-N, the Pareto front and the recommendation report
//! from the candidates' full replays ([`finish`]).

use std::fmt::Write as _;

use serde_json::{json, Value as Json};

use crate::node::{self, Node, Value};

use super::spec::path_get;
use super::{f, Candidate, Spec, StageReport, Strategy, Target, STATUSES};

/// Indices of the Pareto-optimal points (maximising both coordinates): a point is dropped when
/// another is at least as good in both and better in one. Sorted by the second coordinate.
#[must_use]
pub fn pareto_front(points: &[(f64, f64)]) -> Vec<usize> {
    let mut idx: Vec<usize> =
        (0..points.len()).filter(|i| points[*i].0.is_finite() && points[*i].1.is_finite()).collect();
    // Sort by x descending (ties: y descending); sweep keeping points that raise the best y.
    idx.sort_by(|a, b| {
        points[*b].0.total_cmp(&points[*a].0).then(points[*b].1.total_cmp(&points[*a].1)).then(a.cmp(b))
    });
    let mut front = Vec::new();
    let mut best_y = f64::NEG_INFINITY;
    let mut last: Option<(f64, f64)> = None;
    for i in idx {
        let p = points[i];
        if p.1 > best_y {
            front.push(i);
            best_y = p.1;
            last = Some(p);
        } else if last == Some(p) {
            // An exact duplicate of a front point is not dominated by it.
            front.push(i);
        }
    }
    front.sort_by(|a, b| points[*a].1.total_cmp(&points[*b].1).then(a.cmp(b)));
    front
}

/// The finished search: files to write.
#[derive(Clone, Debug)]
pub struct Recommendation {
    /// `recommendation.json`.
    pub json: Json,
    /// `recommendation.csv`.
    pub csv: String,
    /// `recommendations/NNNN.yaml`, in view order.
    pub yamls: Vec<(String, String)>,
    /// A text summary for the terminal.
    pub summary: String,
}

fn candidate_id(i: usize) -> String {
    format!("candidate-{i:06}")
}

pub(super) fn node_json(n: &Node) -> Json {
    match &n.value {
        Value::Null => Json::Null,
        Value::Bool(b) => json!(b),
        Value::Int(i) => json!(i),
        Value::Float(x) => json!(x),
        Value::Str(s) => json!(s),
        Value::Seq(v) => Json::Array(v.iter().map(node_json).collect()),
        Value::Map(m) => Json::Object(m.iter().map(|(k, _, v)| (k.clone(), node_json(v))).collect()),
    }
}

/// The `config_sha256` of a search's provenance: the parsed spec (overrides applied) as YAML.
#[must_use]
pub fn config_sha256(root: &Node) -> String {
    servesim_data::fpm::sha256_hex(node::to_yaml(root).as_bytes())
}

/// Ranks candidates and builds the outputs. `config_sha256` identifies the input config.
#[must_use]
pub fn finish(
    spec: &Spec,
    mut cands: Vec<Candidate>,
    config_sha256: &str,
    stages: &[StageReport],
) -> Recommendation {
    cands.sort_by_key(|c| c.index);
    let feasible: Vec<usize> = (0..cands.len()).filter(|i| cands[*i].status == "feasible").collect();
    let view: Vec<usize> = if spec.target == Target::Pareto {
        let pts: Vec<(f64, f64)> = feasible
            .iter()
            .map(|i| {
                (
                    f(&cands[*i].objectives, "throughput_per_gpu"),
                    f(&cands[*i].objectives, "throughput_per_user"),
                )
            })
            .collect();
        pareto_front(&pts).into_iter().map(|k| feasible[k]).collect()
    } else {
        let mut ranked = feasible.clone();
        ranked.sort_by(|a, b| {
            let (ca, cb) = (&cands[*a], &cands[*b]);
            let score =
                cb.score.unwrap_or(f64::NEG_INFINITY).total_cmp(&ca.score.unwrap_or(f64::NEG_INFINITY));
            let good = |c: &Candidate| f(&c.metrics, "goodput_output_throughput_tok_s");
            let tie = if spec.target == Target::MinGpus {
                good(cb).total_cmp(&good(ca)).then(
                    f(&ca.metrics, "mean_e2e_latency_ms").total_cmp(&f(&cb.metrics, "mean_e2e_latency_ms")),
                )
            } else {
                ca.used_gpus.cmp(&cb.used_gpus)
            };
            score.then(tie).then(ca.index.cmp(&cb.index))
        });
        ranked.truncate(spec.top_n);
        ranked
    };
    let mut counts = [0usize; 5];
    for c in &cands {
        let k = STATUSES.iter().position(|s| *s == c.status).unwrap_or(3);
        counts[k] += 1;
    }
    let mut yamls = Vec::new();
    for (rank, i) in view.iter().enumerate() {
        let c = &cands[*i];
        let header = format!(
            "# {} ({} GPUs), rank {} of servesim recommend, target {}: replay with servesim predict -c\n",
            candidate_id(c.index),
            c.used_gpus,
            rank + 1,
            spec.target.name()
        );
        yamls.push((format!("{:04}.yaml", rank + 1), header + &node::to_yaml(&c.config)));
    }
    let cand_json = |c: &Candidate| {
        json!({
            "candidate_id": candidate_id(c.index),
            "status": c.status,
            "reason_category": c.reason_category,
            "reason": c.reason,
            "used_gpus": c.used_gpus,
            "score": c.score,
            "config": node_json(&c.config),
            "metrics": c.metrics,
            "objectives": c.objectives,
            "evaluation": c.fidelity.name(),
        })
    };
    let view_ids: Vec<String> = view.iter().map(|i| candidate_id(cands[*i].index)).collect();
    let views = if spec.target == Target::Pareto {
        json!({ "pareto_front": view_ids })
    } else {
        json!({ "top_n": view_ids })
    };
    let json = json!({
        "schema_version": "1.1",
        "candidate_retention": "all",
        "counts": {
            "evaluated": cands.len(),
            "feasible": counts[0],
            "infeasible": counts[1],
            "unsupported": counts[2],
            "timed_out": 0,
            "failed": counts[3],
            "pruned": counts[4],
            "cache_hits": 0,
            "resource_limited": 0,
        },
        "candidates": cands.iter().map(cand_json).collect::<Vec<_>>(),
        "views": views,
        "provenance": {
            "strategy": match spec.strategy { Strategy::Exhaustive => "exhaustive", Strategy::Staged => "staged" },
            "stages": stages.iter().map(|st| json!({
                "evaluation": st.fidelity.name(),
                "evaluated": st.evaluated,
                "feasible": st.feasible,
                "kept": st.kept,
            })).collect::<Vec<_>>(),
            "target": spec.target.name(),
            "gpu_budget": [spec.min_gpus, spec.max_gpus],
            "config_sha256": config_sha256,
            "searched": spec.domains.iter().map(|d| json!({"path": d.path, "values": d.values.len()})).collect::<Vec<_>>(),
        },
    });
    let mut csv = String::from("schema_version,candidate_id,status,reason_category,reason,used_gpus,score,config_json,metrics_json,objectives_json,is_top_n,is_pareto\n");
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    for (i, c) in cands.iter().enumerate() {
        let in_view = view.contains(&i);
        let _ = writeln!(
            csv,
            "1.1,{},{},{},{},{},{},{},{},{},{},{}",
            candidate_id(c.index),
            c.status,
            c.reason_category.unwrap_or(""),
            q(c.reason.as_deref().unwrap_or("")),
            c.used_gpus,
            c.score.map_or(String::new(), |s| s.to_string()),
            q(&node_json(&c.config).to_string()),
            q(&Json::Object(c.metrics.clone()).to_string()),
            q(&Json::Object(c.objectives.clone()).to_string()),
            in_view && spec.target != Target::Pareto,
            in_view && spec.target == Target::Pareto,
        );
    }
    let mut summary = String::new();
    let _ = writeln!(
        summary,
        "{} candidates: {} feasible, {} infeasible, {} unsupported, {} failed, {} pruned (target {})",
        cands.len(),
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        counts[4],
        spec.target.name()
    );
    if spec.strategy == Strategy::Staged {
        let st: Vec<String> = stages
            .iter()
            .map(|st| {
                format!(
                    "{}: {} evaluated, {} feasible, {} kept",
                    st.fidelity.name(),
                    st.evaluated,
                    st.feasible,
                    st.kept
                )
            })
            .collect();
        let _ = writeln!(summary, "staged search: {}", st.join("; "));
    }
    let priced = !spec.gpu_hour_usd.is_empty();
    let _ = writeln!(
        summary,
        "{:<5} {:<17} {:>5} {:>12} {:>12} {:>10} {:>10}{}  searched values",
        "rank",
        "candidate",
        "GPUs",
        "tok/s/GPU",
        "tok/s/user",
        "TTFT ms",
        "TPOT ms",
        if priced { "   $/M tok" } else { "" }
    );
    for (rank, i) in view.iter().enumerate() {
        let c = &cands[*i];
        let chosen: Vec<String> = spec
            .domains
            .iter()
            .map(|d| {
                let v = path_get(&c.config, &d.path).map_or(Json::Null, node_json);
                format!("{}={}", d.path.rsplit('.').next().unwrap_or(&d.path), v)
            })
            .collect();
        let cost = if priced {
            format!(" {:>10.3}", f(&c.objectives, "cost_per_million_output_tokens_usd"))
        } else {
            String::new()
        };
        let _ = writeln!(
            summary,
            "{:<5} {:<17} {:>5} {:>12.1} {:>12.1} {:>10.1} {:>10.2}{cost}  {}",
            rank + 1,
            candidate_id(c.index),
            c.used_gpus,
            f(&c.objectives, "throughput_per_gpu"),
            f(&c.objectives, "throughput_per_user"),
            f(&c.metrics, "mean_ttft_ms"),
            f(&c.metrics, "mean_tpot_ms"),
            chosen.join(" ")
        );
    }
    Recommendation { json, csv, yamls, summary }
}
