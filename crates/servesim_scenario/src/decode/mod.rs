//! Node tree → [`Config`]: applies AISimulate's defaults, checks every field, and collects
//! every problem instead of stopping at the first.

use servesim_core::metrics::Sla;

use crate::config::{Config, EvaluationConfig, PlannerConfig, RouterConfig, RouterPolicy, UncertaintyConfig};
use crate::diag::{boolean, choice, int_in, number_in, positive, string, u32_in, Cx, Fields};
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
    let planner = f.take("planner").and_then(|(n, p)| decode_planner(n, &p, cx));
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
    if evaluation.uncertainty.is_some_and(|u| u.acceptance_rate_spread > 0.0)
        && engine.speculation == crate::config::SpeculationConfig::Off
    {
        let path = "evaluation.uncertainty.acceptance_rate_spread";
        let at = crate::edit::lookup(root, path).unwrap_or(root);
        cx.domain(path, at, "spreads speculative decoding's acceptance, and engine.speculation is off");
    }
    if engine.kv_eviction_policy == crate::config::KvEvictionPolicy::Belady {
        check_belady_traffic(root, &traffic, planner.is_some(), cx);
    }
    if cx.diags.len() > before {
        return None;
    }
    let config = Config { traffic, engine, router, evaluation, planner };
    Some(config)
}

/// Belady's forecast is the whole input known before the run (AISimulate: open-loop,
/// complete input traces on fixed workers): refuses what would make it wrong.
fn check_belady_traffic(root: &Node, traffic: &crate::config::TrafficConfig, planner: bool, cx: &mut Cx) {
    use crate::config::{LoadKind, SourceConfig};
    let path = "engine.kv_eviction_policy";
    let at = crate::edit::lookup(root, path).unwrap_or(root);
    if matches!(traffic.load.kind, LoadKind::Concurrency(_) | LoadKind::KvCapacityFraction(_)) {
        cx.domain(
            path,
            at,
            "Belady eviction forecasts the requests in the order they arrive, which a closed loop only learns as requests complete: use an open-loop traffic.load (poisson, constant_rate, gamma or trace_timestamps)",
        );
    }
    match &traffic.source {
        SourceConfig::Session { .. } => cx.domain(
            path,
            at,
            "Belady eviction cannot forecast multi-turn sessions (a turn's prompt holds the previous turn's output and is sent when it completes)",
        ),
        SourceConfig::Trace { format, .. } if format.is_graph() => cx.domain(
            path,
            at,
            "Belady eviction cannot forecast an agentic trace (its rows are sent as the rows they wait for complete)",
        ),
        _ => {}
    }
    if planner {
        cx.unsupported(
            path,
            at,
            "Belady eviction is simulated on fixed workers; the planner would start and stop them",
        );
    }
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
    "disk_cache_hit_weight",
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
            if let Some((n, p)) = f.take("disk_cache_hit_weight") {
                k.disk_cache_hit_weight = number_in(n, &p, cx, 0.0, 1.0e6).unwrap_or(k.disk_cache_hit_weight);
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

/// Keys of `planner` that tune throughput-based scaling only: accepted without effect, as
/// Dynamo ignores them when only load-based scaling runs.
const THROUGHPUT_PLANNER_KEYS: &[&str] = &[
    "throughput_adjustment_interval_seconds",
    "load_predictor",
    "load_predictor_log1p",
    "prophet_window_size",
    "kalman_q_level",
    "kalman_q_trend",
    "kalman_r",
    "kalman_min_points",
    "target",
];

/// Keys of `planner` that servesim's load-based scaling reads or checks.
const PLANNER_KEYS: &[&str] = &[
    "policy",
    "enable_load_scaling",
    "enable_throughput_scaling",
    "load_adjustment_interval_seconds",
    "load_scaling_down_sensitivity",
    "load_min_observations",
    "max_num_fpm_samples",
    "fpm_sample_bucket_size",
    "max_num_gpus",
    "min_num_gpus",
    "min_workers",
    "prefill_min_workers",
    "decode_min_workers",
    "scaling_policy",
    "fpm_sampling",
    "load_sensitivity",
];

/// `planner`: `None` when disabled (or invalid; problems go to `cx`).
fn decode_planner(node: &Node, path: &str, cx: &mut Cx) -> Option<PlannerConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let mut enabled = match f.take("policy") {
        Some((n, p)) => choice(n, &p, cx, &["disabled", "enabled"]) == Some("enabled"),
        None => false,
    };
    let mut pc = PlannerConfig::default();
    // The recommend presets that name a load-based policy set its interval.
    if let Some((n, p)) = f.take("scaling_policy") {
        let all = [
            "disabled",
            "throughput_180_5",
            "throughput_600_5",
            "load_180_5",
            "load_180_10",
            "hybrid_180_5",
            "hybrid_600_5",
        ];
        match choice(n, &p, cx, &all) {
            Some("disabled") => enabled = false,
            Some("load_180_5") => (enabled, pc.interval_seconds) = (true, 5.0),
            Some("load_180_10") => (enabled, pc.interval_seconds) = (true, 10.0),
            Some(_) => cx.unsupported(
                &p,
                n,
                "throughput-based scaling (profiled interpolation and load prediction) is not \
                 simulated yet; use load_180_5 or load_180_10 (load-based scaling)",
            ),
            None => {}
        }
    }
    for key in ["fpm_sampling", "load_sensitivity"] {
        if let Some((n, p)) = f.take(key) {
            cx.unsupported(
                &p,
                n,
                "this preset is not modelled; set max_num_fpm_samples or \
                 load_scaling_down_sensitivity directly",
            );
        }
    }
    if let Some((n, p)) = f.take("enable_throughput_scaling") {
        if boolean(n, &p, cx) == Some(true) && enabled {
            cx.unsupported(
                &p,
                n,
                "throughput-based scaling (profiled interpolation and load prediction) is not \
                 simulated yet; servesim's planner scales on load (enable_load_scaling)",
            );
        }
    }
    if let Some((n, p)) = f.take("enable_load_scaling") {
        if boolean(n, &p, cx) == Some(false) && enabled {
            cx.unsupported(
                &p,
                n,
                "with load-based scaling off the planner has nothing servesim simulates \
                 (throughput-based scaling is not modelled yet); set policy: disabled instead",
            );
        }
    }
    let mut take = |key: &str, cx: &mut Cx, lo: f64, hi: f64| {
        f.take(key).and_then(|(n, p)| number_in(n, &p, cx, lo, hi))
    };
    if let Some(v) = take("load_adjustment_interval_seconds", cx, 0.1, 86_400.0) {
        pc.interval_seconds = v;
    }
    if let Some(v) = take("load_scaling_down_sensitivity", cx, 0.0, 100.0) {
        pc.down_sensitivity_pct = v;
    }
    let mut count =
        |key: &str, cx: &mut Cx, lo: u32| f.take(key).and_then(|(n, p)| u32_in(n, &p, cx, lo, 1 << 20));
    if let Some(v) = count("load_min_observations", cx, 1) {
        pc.min_observations = v;
    }
    if let Some(v) = count("max_num_fpm_samples", cx, 1) {
        pc.window = v;
    }
    if let Some(v) = count("max_num_gpus", cx, 1) {
        pc.max_gpus = v;
    }
    if let Some(v) = count("min_workers", cx, 1) {
        pc.min_workers = v;
    }
    pc.prefill_min_workers = count("prefill_min_workers", cx, 1);
    pc.decode_min_workers = count("decode_min_workers", cx, 1);
    if let Some((n, p)) = f.take("min_num_gpus") {
        pc.min_gpus = int_in(n, &p, cx, -1, 1 << 20).and_then(|v| u32::try_from(v).ok());
    }
    if let Some((n, p)) = f.take("fpm_sample_bucket_size") {
        // Dynamo requires a perfect square; servesim's regression does not bucket samples.
        if let Some(v) = u32_in(n, &p, cx, 1, 1 << 20) {
            let r = (1..=v).take_while(|r| r * r <= v).last().unwrap_or(1);
            if r * r != v {
                cx.domain(&p, n, format!("must be a perfect square (1, 4, 9, 16, ...), got {v}"));
            }
        }
    }
    for key in THROUGHPUT_PLANNER_KEYS {
        f.take(key);
    }
    let schema: Vec<&str> = PLANNER_KEYS.iter().chain(THROUGHPUT_PLANNER_KEYS).copied().collect();
    f.finish(cx, &schema, "");
    if !enabled {
        return None;
    }
    if pc.max_gpus < pc.min_gpus.unwrap_or(0) {
        cx.domain(
            &join_path(path, "min_num_gpus"),
            node,
            format!("({}) is above max_num_gpus ({})", pc.min_gpus.unwrap_or(0), pc.max_gpus),
        );
    }
    Some(pc)
}

fn join_path(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}.{b}")
    }
}

fn decode_evaluation(node: &Node, path: &str, cx: &mut Cx) -> Option<EvaluationConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let sla = match f.take("sla") {
        Some((n, p)) => decode_sla(n, &p, cx),
        None => Some(Sla::default()),
    };
    let uncertainty = match f.take("uncertainty") {
        Some((n, p)) => decode_uncertainty(n, &p, cx).map(Some),
        None => Some(None),
    };
    f.finish(cx, &["sla", "uncertainty"], "");
    Some(EvaluationConfig { sla: sla?, uncertainty: uncertainty? })
}

/// Most replays an uncertainty band runs (each a full replay of the scenario).
pub(crate) const MAX_UNCERTAINTY_SEEDS: u32 = 64;

fn decode_uncertainty(node: &Node, path: &str, cx: &mut Cx) -> Option<UncertaintyConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let seeds = match f.take("seeds") {
        Some((n, p)) => u32_in(n, &p, cx, 2, MAX_UNCERTAINTY_SEEDS),
        None => {
            cx.schema(
                &join_path(path, "seeds"),
                node,
                "required: how many seeds to replay (2-64), e.g. seeds: 8",
            );
            None
        }
    };
    let spread = match f.take("acceptance_rate_spread") {
        Some((n, p)) => number_in(n, &p, cx, 0.0, 0.5),
        None => Some(0.0),
    };
    f.finish(cx, &["seeds", "acceptance_rate_spread"], "");
    Some(UncertaintyConfig { seeds: seeds?, acceptance_rate_spread: spread? })
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
