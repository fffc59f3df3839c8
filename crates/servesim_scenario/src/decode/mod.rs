//! Node tree → [`Config`]: applies AISimulate's defaults, checks every field, and collects
//! every problem instead of stopping at the first.

use servesim_core::metrics::Sla;

use crate::config::{Config, EvaluationConfig, RouterConfig, RouterPolicy};
use crate::diag::{choice, number_in, positive, string, Cx, Fields};
use crate::node::{Node, Value};

pub(crate) mod engine;
pub(crate) mod role;
mod traffic;

use engine::decode_engine;
use traffic::{decode_traffic, default_traffic};

/// Largest token count accepted anywhere (2^24 = 16.7M tokens): far beyond any model's context.
const MAX_TOKENS: u32 = 1 << 24;
/// Largest request count of one run (keeps runs bounded; TigerBeetle's "limit everything").
pub(crate) const MAX_REQUESTS: u32 = 10_000_000;
/// Largest closed-loop concurrency.
pub(crate) const MAX_CONCURRENCY: u32 = 1_000_000;
/// Largest GPU count of one parallel dimension.
const MAX_PARALLEL: u32 = 1024;

/// Decodes a whole config. `None` means at least one diagnostic was recorded.
pub fn decode(root: &Node, cx: &mut Cx) -> Option<Config> {
    let before = cx.diags.len();
    let mut f = Fields::of(root, "", cx)?;
    let engine = match f.take("engine") {
        Some((n, p)) => decode_engine(n, &p, cx),
        None => {
            cx.schema("engine", root, "required section is missing (model, hardware and workers live here)");
            None
        }
    };
    let traffic = match f.take("traffic") {
        Some((n, p)) => decode_traffic(n, &p, cx),
        None => Some(default_traffic()),
    };
    let router = match f.take("router") {
        Some((n, p)) => decode_router(n, &p, cx),
        None => Some(RouterConfig { policy: RouterPolicy::RoundRobin }),
    };
    if let Some((n, p)) = f.take("planner") {
        decode_planner(n, &p, cx);
    }
    let evaluation = match f.take("evaluation") {
        Some((n, p)) => decode_evaluation(n, &p, cx),
        None => Some(EvaluationConfig::default()),
    };
    if let Some((n, p)) = f.take("execution") {
        decode_execution(n, &p, cx);
    }
    for (key, what) in [("optimization", "recommend"), ("optimizer", "recommend")] {
        if let Some((n, p)) = f.take(key) {
            cx.schema(&p, n, format!("belongs to a {what} config; predict does not accept it"));
        }
    }
    f.finish(
        cx,
        &["traffic", "engine", "router", "planner", "evaluation", "execution", "optimization", "optimizer"],
        "",
    );
    let (engine, traffic, router, evaluation) = (engine?, traffic?, router?, evaluation?);
    if cx.diags.len() > before {
        return None;
    }
    let config = Config { traffic, engine, router, evaluation };
    Some(config)
}

const ROUTER_KEYS: &[&str] = &[
    "policy",
    "prefill_load_model",
    "overlap_score_credit",
    "prefill_load_scale",
    "temperature",
    "decode_active_request_weight",
    "overlap_score_credit_decay",
    "host_cache_hit_weight",
];

fn decode_router(node: &Node, path: &str, cx: &mut Cx) -> Option<RouterConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let name = match f.take("policy") {
        Some((n, p)) => {
            choice(n, &p, cx, &["round_robin", "least_loaded", "kv_aware", "kv_router", "session_affinity"])?
        }
        None => "round_robin",
    };
    let policy = match name {
        "round_robin" => Some(RouterPolicy::RoundRobin),
        "least_loaded" => Some(RouterPolicy::LeastLoaded),
        "session_affinity" => Some(RouterPolicy::SessionAffinity),
        _ => {
            let mut k = servesim_core::router::KvAwareConfig::default();
            let before = cx.diags.len();
            if let Some((n, p)) = f.take("overlap_score_credit") {
                k.overlap_score_credit = number_in(n, &p, cx, 0.0, 1.0e6).unwrap_or(k.overlap_score_credit);
            }
            if let Some((n, p)) = f.take("prefill_load_scale") {
                k.prefill_load_scale = number_in(n, &p, cx, 0.0, 1.0e6).unwrap_or(k.prefill_load_scale);
            }
            if let Some((n, p)) = f.take("temperature") {
                k.temperature = number_in(n, &p, cx, 0.0, 1.0e6).unwrap_or(k.temperature);
            }
            if let Some((n, p)) = f.take("decode_active_request_weight") {
                k.active_request_weight = number_in(n, &p, cx, 0.0, 1.0e6).unwrap_or(k.active_request_weight);
            }
            if let Some((n, p)) = f.take("host_cache_hit_weight") {
                k.host_cache_hit_weight = number_in(n, &p, cx, 0.0, 1.0e6).unwrap_or(k.host_cache_hit_weight);
            }
            if let Some((n, p)) = f.take("overlap_score_credit_decay") {
                k.overlap_credit_decay = number_in(n, &p, cx, 0.0, 1.0e6).unwrap_or(k.overlap_credit_decay);
            }
            if let Some((n, p)) = f.take("prefill_load_model") {
                if let Some(m) = node_type(n, &p, cx) {
                    if m != "none" {
                        cx.unsupported(&p, n, "prefill_load_model 'aic' is not simulated by servesim yet; the built-in router counts prefill tokens");
                    }
                }
            }
            (cx.diags.len() == before).then_some(RouterPolicy::KvAware(k))
        }
    };
    f.finish(cx, ROUTER_KEYS, &format!("to router policy '{name}'"));
    Some(RouterConfig { policy: policy? })
}

/// `{type: X}` or a bare `X`.
fn node_type(node: &Node, path: &str, cx: &mut Cx) -> Option<String> {
    match &node.value {
        Value::Map(_) => {
            let mut f = Fields::of(node, path, cx)?;
            let t = f.take("type").and_then(|(n, p)| string(n, &p, cx));
            f.finish(cx, &["type"], "");
            t
        }
        _ => string(node, path, cx),
    }
}

fn decode_planner(node: &Node, path: &str, cx: &mut Cx) {
    let Some(mut f) = Fields::of(node, path, cx) else { return };
    if let Some((n, p)) = f.take("policy") {
        if choice(n, &p, cx, &["disabled", "enabled"]) == Some("enabled") {
            cx.unsupported(&p, n, "the autoscaling planner is not simulated by servesim yet");
        }
    }
    // Every other planner knob only matters when the planner is enabled.
    if let Value::Map(items) = &node.value {
        for (k, _, _) in items {
            f.take(k);
        }
    }
    f.finish(cx, &[], "");
}

fn decode_evaluation(node: &Node, path: &str, cx: &mut Cx) -> Option<EvaluationConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let sla = match f.take("sla") {
        Some((n, p)) => decode_sla(n, &p, cx),
        None => Some(Sla::default()),
    };
    f.finish(cx, &["sla"], "");
    Some(EvaluationConfig { sla: sla? })
}

fn decode_sla(node: &Node, path: &str, cx: &mut Cx) -> Option<Sla> {
    let mut f = Fields::of(node, path, cx)?;
    let mut get = |k: &str, cx: &mut Cx| f.take(k).map(|(n, p)| positive(n, &p, cx));
    let ttft = get("ttft_ms", cx);
    let itl = get("itl_ms", cx);
    let e2e = get("e2e_ms", cx);
    f.finish(cx, &["ttft_ms", "itl_ms", "e2e_ms"], "");
    if e2e.is_some() && (ttft.is_some() || itl.is_some()) {
        cx.domain(path, node, "e2e_ms cannot be combined with ttft_ms or itl_ms");
        return None;
    }
    let flat = |o: Option<Option<f64>>| -> Result<Option<f64>, ()> {
        match o {
            None => Ok(None),
            Some(Some(v)) => Ok(Some(v)),
            Some(None) => Err(()),
        }
    };
    Some(Sla { ttft_ms: flat(ttft).ok()?, itl_ms: flat(itl).ok()?, e2e_ms: flat(e2e).ok()? })
}

fn decode_execution(node: &Node, path: &str, cx: &mut Cx) {
    // Host-side resource limits of the simulator process: accepted for compatibility; they
    // never change modelled results (REF §1.4).
    let Some(mut f) = Fields::of(node, path, cx) else { return };
    if let Some((n, p)) = f.take("resources") {
        if let Some(mut r) = Fields::of(n, &p, cx) {
            let keys = [
                "memory_limit_gb",
                "cpu_limit",
                "reserve_memory_gb",
                "reserve_memory_fraction",
                "available_memory_fraction",
                "initialization_timeout_seconds",
                "shutdown_timeout_seconds",
            ];
            for k in keys {
                r.take(k);
            }
            r.finish(cx, &keys, "");
        }
    }
    f.finish(cx, &["resources"], "");
}
