//! The `details` section of prediction.json, asked for with `--detail` (AISimulate's
//! `details`, schema 1.0): each role's memory plan (`memory`), where its GPU time went
//! (`time`), and where its step times came from (`source`).

use serde_json::{json, Map, Value};
use servesim_core::timing::{StepKind, StepTally, StepTimer};

use crate::report::Prediction;
use crate::scenario::{Prepared, PreparedRole};

/// Extra sections of prediction.json asked for with `--detail`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Details {
    /// `memory`: the per-role memory breakdown and KV sizing.
    pub memory: bool,
    /// `time`: the per-role busy time by kind of step and by op.
    pub time: bool,
    /// `source`: the per-role step-time model, its data and how its lookups were answered.
    pub source: bool,
}

impl Details {
    /// Parses `summary,memory,time,energy,source,all` (comma-separated).
    ///
    /// # Errors
    /// A message naming an unknown or unsupported detail.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut d = Details::default();
        for item in list.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            match item {
                "summary" => {}
                "memory" => d.memory = true,
                "time" => d.time = true,
                "source" => d.source = true,
                "all" => d = Details { memory: true, time: true, source: true },
                "energy" => {
                    return Err(
                        "--detail energy has nothing to add: the kernel tables servesim reads carry no \
                                energy figures, so power_coverage is 0 (null without op-level timing) and \
                                power_w null (summary, memory, time, source and all are available)"
                            .to_string(),
                    )
                }
                other => {
                    return Err(format!(
                        "unknown --detail '{other}' (use summary, memory, time, source, all)"
                    ))
                }
            }
        }
        Ok(d)
    }

    /// Whether any section is asked for.
    #[must_use]
    pub fn any(self) -> bool {
        self.memory || self.time || self.source
    }
}

/// Adds the requested `details` section to a prediction.
pub fn add_details(p: &Prepared, prediction: &mut Prediction, details: Details) {
    if !details.any() {
        return;
    }
    let mut section = Map::new();
    section.insert("schema_version".into(), json!("1.0"));
    if details.memory {
        section.insert("memory".into(), memory(p));
    }
    if details.time {
        section.insert("time".into(), time_details(p, prediction));
    }
    if details.source {
        let by_role: Map<String, Value> = prediction.json["servesim"]["timing"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| (t["role"].as_str().unwrap_or("?").to_string(), t.clone()))
            .collect();
        section.insert("source".into(), Value::Object(by_role));
    }
    if let Value::Object(o) = &mut prediction.json {
        o.insert("details".into(), Value::Object(section));
    }
}

fn memory(p: &Prepared) -> Value {
    let mut memory = Map::new();
    for role in &p.roles {
        let m = &role.memory;
        let bs = u64::from(role.config.kv_cache.block_size);
        memory.insert(
            role.name.to_string(),
            json!({
                "stage": "before_native_capacity_adjustments",
                "total_gpu_capacity_bytes": m.total_gpu_capacity_bytes,
                "memory_breakdown": {
                    "weights_bytes": m.weights_bytes,
                    "activations_bytes": m.activations_bytes,
                    "runtime_overhead_bytes": m.runtime_overhead_bytes,
                    "comm_overhead_bytes": m.comm_overhead_bytes,
                    "cuda_graph_reserved_bytes": m.cuda_graph_reserved_bytes,
                },
                "kv_cache_bytes": m.kv_cache_bytes,
                "kv_size_per_token_bytes": m.kv_bytes_per_token,
                "total_kv_size_tokens": m.kv_tokens,
                "estimated_num_gpu_blocks": m.kv_tokens / bs.max(1),
                "scheduler_block_size_tokens": bs,
                "kv_blocks_per_rank_used": role.blocks_per_rank,
                "tolerance_adjusted": false,
                "source": "servesim_perf::memory (AISimulate/AIConfigurator budget rule)",
            }),
        );
    }
    Value::Object(memory)
}

/// How `time` splits a kind's busy time by op, for readers of the JSON.
const TIME_METHOD: &str = "busy_ms and steps per kind of step are the replay's own sums; each kind's \
    busy_ms is split by op in the proportions of its typical step (mean work per busy rank), as \
    the step-time model breaks that step down";

/// `details.time` of a prediction: each role's busy time by kind of step (the replay's sums
/// over its workers) and, where the timing model has parts, by op.
#[must_use]
#[allow(clippy::cast_precision_loss)] // Step and token counts are far below 2^52.
pub fn time_details(p: &Prepared, prediction: &Prediction) -> Value {
    let worker_steps = &prediction.worker_steps;
    let mut roles = Map::new();
    for (ri, role) in p.roles.iter().enumerate() {
        let workers: Vec<&[StepTally; 3]> = worker_steps
            .iter()
            .enumerate()
            .filter(|(w, _)| crate::report::role_of_worker(p, *w) == ri)
            .map(|(_, t)| t)
            .collect();
        let mut kinds = [StepTally::default(); 3];
        for w in &workers {
            for (sum, t) in kinds.iter_mut().zip(w.iter()) {
                sum.merge(t);
            }
        }
        let busy_ms: f64 = kinds.iter().map(|t| t.busy_ns as f64 / 1e6).sum();
        let mut timer = p.timer(role);
        let mut total_parts: Option<Map<String, Value>> = None;
        let mut by_step = Vec::new();
        for (kind, t) in StepKind::ALL.iter().zip(&kinds) {
            if t.steps == 0 {
                continue;
            }
            let (entry, parts) = kind_entry(*kind, t, busy_ms, &mut *timer, role);
            if let Some(parts) = parts {
                let sum = total_parts.get_or_insert_with(Map::new);
                for (k, ms) in parts {
                    let prev = sum.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                    sum.insert(k.to_string(), json!(prev + ms));
                }
            }
            by_step.push(entry);
        }
        roles.insert(
            role.name.to_string(),
            json!({
                "workers": workers.len(),
                "steps": kinds.iter().map(|t| t.steps).sum::<u64>(),
                "busy_ms": busy_ms,
                "parts_ms": total_parts.map_or(Value::Null, Value::Object),
                "by_step": by_step,
            }),
        );
    }
    json!({"method": TIME_METHOD, "roles": roles})
}

/// One kind's entry, and its busy time by op when the model has parts.
#[allow(clippy::cast_precision_loss)]
fn kind_entry(
    kind: StepKind,
    t: &StepTally,
    role_busy_ms: f64,
    timer: &mut dyn StepTimer,
    role: &PreparedRole,
) -> (Value, Option<Vec<(&'static str, f64)>>) {
    let busy_ms = t.busy_ns as f64 / 1e6;
    let typical = t.typical();
    let first = typical.first().cloned().unwrap_or_default();
    let chunk = first.prefill.first().copied();
    let typical_ms = timer.step_time(&typical).ok().map(|d| d.as_secs_f64() * 1e3);
    let parts: Option<Vec<(&'static str, f64)>> = timer.breakdown(&typical).and_then(|parts| {
        let total: f64 = parts.iter().map(|(_, s)| s).sum();
        (total > 0.0).then(|| parts.into_iter().map(|(k, s)| (k, s / total * busy_ms)).collect())
    });
    let parts_json = parts.as_ref().map_or(Value::Null, |ps| {
        Value::Object(ps.iter().map(|(k, ms)| ((*k).to_string(), json!(ms))).collect())
    });
    let entry = json!({
        "step": kind.name(),
        "steps": t.steps,
        "busy_ms": busy_ms,
        "busy_share": if role_busy_ms > 0.0 { busy_ms / role_busy_ms } else { 0.0 },
        "mean_step_ms": busy_ms / t.steps as f64,
        "typical": {
            "busy_ranks": typical.len(),
            "attention_data": role.config.parallelism.attention_data,
            "decode_requests_per_rank": first.decode_requests,
            "kv_tokens_per_decode": if first.decode_requests > 0 {
                first.decode_kv_tokens / u64::from(first.decode_requests)
            } else {
                0
            },
            "prefill_chunks_per_rank": first.prefill.len(),
            "prefill_tokens_per_chunk": chunk.map_or(0, |c| c.new_tokens),
            "context_tokens_per_chunk": chunk.map_or(0, |c| c.context_tokens),
        },
        "typical_step_ms": typical_ms,
        "parts_ms": parts_json,
    });
    (entry, parts)
}

/// Lines for the summary table from `details.time` ([`time_details`]), one per role: its
/// busy time by kind of step, then by op (parts of 0.5% and more), largest first.
#[must_use]
pub fn time_lines(time: &Value) -> Vec<String> {
    let Some(roles) = time["roles"].as_object() else { return Vec::new() };
    roles
        .iter()
        .map(|(name, r)| {
            let busy = r["busy_ms"].as_f64().unwrap_or(0.0);
            let share = |ms: f64| if busy > 0.0 { ms / busy * 100.0 } else { 0.0 };
            let kinds: Vec<String> = r["by_step"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|k| {
                    format!(
                        "{} steps {:.0}% ({} × {:.2} ms)",
                        k["step"].as_str().unwrap_or("?"),
                        share(k["busy_ms"].as_f64().unwrap_or(0.0)),
                        k["steps"],
                        k["mean_step_ms"].as_f64().unwrap_or(0.0)
                    )
                })
                .collect();
            let mut parts: Vec<(&str, f64)> = r["parts_ms"]
                .as_object()
                .map(|o| o.iter().map(|(k, v)| (k.as_str(), v.as_f64().unwrap_or(0.0))).collect())
                .unwrap_or_default();
            parts.retain(|(_, ms)| share(*ms) >= 0.5);
            parts.sort_by(|a, b| b.1.total_cmp(&a.1));
            let ops: Vec<String> = parts.iter().map(|(k, ms)| format!("{k} {:.0}%", share(*ms))).collect();
            let mut line = format!("Busy time, {name} ({:.2} s busy): {}", busy / 1e3, kinds.join(", "));
            if !ops.is_empty() {
                line.push_str("; ");
                line.push_str(&ops.join(", "));
            }
            line
        })
        .collect()
}
