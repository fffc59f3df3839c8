//! Node tree → [`Config`]: applies AISimulate's defaults, checks every field, and collects
//! every problem instead of stopping at the first.

use servesim_core::engine::Backend;
use servesim_core::metrics::Sla;
use servesim_core::traffic::LengthDist;
use servesim_perf::spec::{Dtype, GemmQuant, MoeQuant};

use crate::config::{
    Capacity, Config, ContextLength, EngineConfig, EvaluationConfig, FpmSource, FrontendConfig,
    KvCacheConfig, KvTransferConfig, LoadConfig, LoadKind, Mode, ParallelismConfig, Quantization, RoleConfig,
    RouterConfig, RouterPolicy, SchedulerKnobs, SourceConfig, StopConfig, TimingConfig, TimingKind,
    TraceFormatConfig, TrafficConfig, TransferMode, Workers,
};
use crate::diag::{boolean, choice, number_in, positive, string, u32_in, u64_min, Cx, Fields};
use crate::node::{Node, Value};

/// Largest token count accepted anywhere (2^24 = 16.7M tokens): far beyond any model's context.
const MAX_TOKENS: u32 = 1 << 24;
/// Largest request count of one run (keeps runs bounded; TigerBeetle's "limit everything").
const MAX_REQUESTS: u32 = 10_000_000;
/// Largest closed-loop concurrency.
const MAX_CONCURRENCY: u32 = 1_000_000;
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

fn default_traffic() -> TrafficConfig {
    TrafficConfig {
        source: SourceConfig::Synthetic {
            input_tokens: LengthDist::Fixed(1024),
            output_tokens: LengthDist::Fixed(128),
            shared_prefix_tokens: 0,
        },
        load: LoadConfig { kind: LoadKind::Concurrency(10), seed: 42 },
        stop: StopConfig::default(),
    }
}

/// Which family of source a config uses (loads and stops depend on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SourceKind {
    Synthetic,
    Session,
    Trace,
}

fn decode_traffic(node: &Node, path: &str, cx: &mut Cx) -> Option<TrafficConfig> {
    let d = default_traffic();
    let mut f = Fields::of(node, path, cx)?;
    let source = match f.take("source") {
        Some((n, p)) => decode_source(n, &p, cx),
        None => Some(d.source),
    };
    let kind = match &source {
        Some(SourceConfig::Session { .. }) => SourceKind::Session,
        Some(SourceConfig::Trace { .. }) => SourceKind::Trace,
        _ => SourceKind::Synthetic,
    };
    let load = match f.take("load") {
        Some((n, p)) => decode_load(n, &p, cx, kind),
        None => Some(d.load),
    };
    let stop = match f.take("stop") {
        Some((n, p)) => decode_stop(n, &p, cx, kind),
        None => Some(d.stop),
    };
    f.finish(cx, &["source", "load", "stop"], "");
    Some(TrafficConfig { source: source?, load: load?, stop: stop? })
}

const SOURCE_KEYS: &[&str] = &[
    "type",
    "input_tokens",
    "output_tokens",
    "shared_prefix_tokens",
    "images",
    "new_input_tokens_per_turn",
    "output_tokens_per_turn",
    "session",
    "paths",
    "format",
    "block_size",
    "nested_timestamp_basis",
];

fn decode_source(node: &Node, path: &str, cx: &mut Cx) -> Option<SourceConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let kind = match f.take("type") {
        Some((n, p)) => choice(n, &p, cx, &["synthetic", "synthetic-session", "trace"])?,
        None => "synthetic",
    };
    let len_or = |f: &mut Fields, key: &str, default: u32, cx: &mut Cx| {
        f.take(key).map_or(Some(LengthDist::Fixed(default)), |(n, p)| lengths(n, &p, cx))
    };
    let out = match kind {
        "synthetic" => {
            if let Some((n, p)) = f.take("images") {
                cx.unsupported(&p, n, "image inputs (EPD/vision-language) are not simulated by servesim yet");
            }
            let input = len_or(&mut f, "input_tokens", 1024, cx);
            let output = len_or(&mut f, "output_tokens", 128, cx);
            let shared = match f.take("shared_prefix_tokens") {
                Some((n, p)) => u32_in(n, &p, cx, 0, 10_000_000),
                None => Some(0),
            };
            Some(SourceConfig::Synthetic {
                input_tokens: input?,
                output_tokens: output?,
                shared_prefix_tokens: shared?,
            })
        }
        "synthetic-session" => {
            let input = len_or(&mut f, "new_input_tokens_per_turn", 1024, cx);
            let output = len_or(&mut f, "output_tokens_per_turn", 128, cx);
            let (mut turns, mut ratio, mut groups, mut delay) = (Some(4), Some(0.0), Some(0), Some(0.0));
            if let Some((n, p)) = f.take("session") {
                if let Some(mut s) = Fields::of(n, &p, cx) {
                    if let Some((n, p)) = s.take("turns") {
                        turns = u32_in(n, &p, cx, 2, 100_000);
                    }
                    if let Some((n, p)) = s.take("shared_prefix_ratio") {
                        ratio = number_in(n, &p, cx, 0.0, 1.0);
                    }
                    if let Some((n, p)) = s.take("prefix_groups") {
                        groups = u32_in(n, &p, cx, 0, MAX_REQUESTS);
                    }
                    if let Some((n, p)) = s.take("inter_turn_delay_ms") {
                        delay = number_in(n, &p, cx, 0.0, 1.0e9);
                    }
                    s.finish(
                        cx,
                        &["turns", "shared_prefix_ratio", "prefix_groups", "inter_turn_delay_ms"],
                        "",
                    );
                }
            }
            Some(SourceConfig::Session {
                new_input_tokens_per_turn: input?,
                output_tokens_per_turn: output?,
                turns: turns?,
                shared_prefix_ratio: ratio?,
                prefix_groups: groups?,
                inter_turn_delay_ms: delay?,
            })
        }
        _ => {
            let paths = match f.take("paths") {
                Some((n, p)) => match &n.value {
                    Value::Seq(items) if !items.is_empty() => {
                        let mut out = Vec::new();
                        for (i, item) in items.iter().enumerate() {
                            if let Some(s) = string(item, &format!("{p}[{i}]"), cx) {
                                out.push((s, item.origin.clone()));
                            }
                        }
                        (out.len() == items.len()).then_some(out)
                    }
                    Value::Str(s) => Some(vec![(s.clone(), n.origin.clone())]),
                    _ => {
                        cx.schema(&p, n, "expected a non-empty list of trace file paths");
                        None
                    }
                },
                None => {
                    cx.schema(&crate::diag::join(path, "paths"), node, "required for source type 'trace'");
                    None
                }
            };
            let format = match f.take("format") {
                Some((n, p)) => match choice(
                    n,
                    &p,
                    cx,
                    &[
                        "mooncake",
                        "azure_csv",
                        "mooncake-delta",
                        "agentic_mooncake",
                        "weka",
                        "applied_compute_agentic",
                        "dynamo",
                    ],
                )? {
                    "mooncake" => Some(TraceFormatConfig::Mooncake),
                    "azure_csv" => Some(TraceFormatConfig::AzureCsv),
                    other => {
                        cx.unsupported(&p, n, format!("trace format '{other}' is not replayed by servesim yet (mooncake and azure_csv are)"));
                        None
                    }
                },
                None => Some(TraceFormatConfig::Mooncake),
            };
            let block_size = match f.take("block_size") {
                Some((n, p)) => u32_in(n, &p, cx, 1, 1 << 20),
                None => Some(512),
            };
            if let Some((n, p)) = f.take("nested_timestamp_basis") {
                let _ = choice(n, &p, cx, &["auto", "absolute", "relative"]);
            }
            Some(SourceConfig::Trace { paths: paths?, format: format?, block_size: block_size? })
        }
    };
    f.finish(cx, SOURCE_KEYS, &format!("to source type '{kind}'"));
    out
}

/// A token count, or a distribution `{dist: fixed|uniform|normal|lognormal|exponential, ...}`
/// (servesim extension of `input_tokens` / `output_tokens`).
fn lengths(node: &Node, path: &str, cx: &mut Cx) -> Option<LengthDist> {
    if !matches!(node.value, Value::Map(_)) {
        return u32_in(node, path, cx, 1, MAX_TOKENS).map(LengthDist::Fixed);
    }
    let mut f = Fields::of(node, path, cx)?;
    let Some((dn, dp)) = f.take("dist") else {
        cx.schema(
            path,
            node,
            "a length distribution needs 'dist' (fixed, uniform, normal, lognormal, exponential)",
        );
        return None;
    };
    let dist = choice(dn, &dp, cx, &["fixed", "uniform", "normal", "lognormal", "exponential"])?;
    let get_u32 = |f: &mut Fields, key: &str, default: Option<u32>, cx: &mut Cx| -> Option<u32> {
        match f.take(key) {
            Some((n, p)) => u32_in(n, &p, cx, 1, MAX_TOKENS),
            None => {
                if default.is_none() {
                    cx.schema(
                        &crate::diag::join(path, key),
                        node,
                        format!("'{key}' is required for dist '{dist}'"),
                    );
                }
                default
            }
        }
    };
    let get_pos = |f: &mut Fields, key: &str, cx: &mut Cx| -> Option<f64> {
        match f.take(key) {
            Some((n, p)) => positive(n, &p, cx),
            None => {
                cx.schema(
                    &crate::diag::join(path, key),
                    node,
                    format!("'{key}' is required for dist '{dist}'"),
                );
                None
            }
        }
    };
    let out = match dist {
        "fixed" => get_u32(&mut f, "value", None, cx).map(LengthDist::Fixed),
        "uniform" => {
            let (min, max) = (get_u32(&mut f, "min", None, cx), get_u32(&mut f, "max", None, cx));
            match (min, max) {
                (Some(min), Some(max)) if min <= max => Some(LengthDist::Uniform { min, max }),
                (Some(min), Some(max)) => {
                    cx.domain(path, node, format!("min ({min}) must not exceed max ({max})"));
                    None
                }
                _ => None,
            }
        }
        _ => {
            let mean = get_pos(&mut f, "mean", cx);
            let std = if dist == "exponential" {
                Some(0.0)
            } else {
                match f.take("std") {
                    Some((n, p)) => number_in(n, &p, cx, 0.0, f64::MAX),
                    None => {
                        cx.schema(
                            &crate::diag::join(path, "std"),
                            node,
                            format!("'std' is required for dist '{dist}'"),
                        );
                        None
                    }
                }
            };
            let min = get_u32(&mut f, "min", Some(1), cx);
            let max = get_u32(&mut f, "max", Some(MAX_TOKENS), cx);
            match (mean, std, min, max) {
                (Some(mean), Some(std), Some(min), Some(max)) if min <= max => Some(match dist {
                    "normal" => LengthDist::Normal { mean, std, min, max },
                    "lognormal" => LengthDist::LogNormal { mean, std, min, max },
                    _ => LengthDist::Exponential { mean, min, max },
                }),
                (_, _, Some(min), Some(max)) if min > max => {
                    cx.domain(path, node, format!("min ({min}) must not exceed max ({max})"));
                    None
                }
                _ => None,
            }
        }
    };
    let keys: &[&str] = match dist {
        "fixed" => &["dist", "value"],
        "uniform" => &["dist", "min", "max"],
        "exponential" => &["dist", "mean", "min", "max"],
        _ => &["dist", "mean", "std", "min", "max"],
    };
    f.finish(cx, keys, &format!("to dist '{dist}'"));
    out
}

const LOAD_KEYS: &[&str] = &[
    "type",
    "concurrency",
    "requests_per_second",
    "sessions_per_second",
    "seed",
    "fraction",
    "speedup",
    "cv",
    "agentic_lanes",
    "agentic_snapshot",
    "agentic_warmup",
    "agentic_profile",
];

fn decode_load(node: &Node, path: &str, cx: &mut Cx, source: SourceKind) -> Option<LoadConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let allowed: &[&str] = match source {
        SourceKind::Synthetic => {
            &["concurrency", "poisson", "constant_rate", "gamma", "kv_capacity_fraction"]
        }
        SourceKind::Session => &["concurrency", "poisson", "constant_rate", "gamma"],
        SourceKind::Trace => &["trace_timestamps", "concurrency", "poisson", "constant_rate", "gamma"],
    };
    let kind = match f.take("type") {
        Some((n, p)) => choice(n, &p, cx, allowed)?,
        None if source == SourceKind::Trace => "trace_timestamps",
        None => "concurrency",
    };
    let seed = match f.take("seed") {
        Some((n, p)) => u64_min(n, &p, cx, 0),
        None => Some(42),
    };
    // Sessions are paced by sessions_per_second (first turns only), requests otherwise.
    let rate_key = if source == SourceKind::Session { "sessions_per_second" } else { "requests_per_second" };
    let rate = |f: &mut Fields, cx: &mut Cx| match f.take(rate_key) {
        Some((n, p)) => positive(n, &p, cx),
        None => {
            cx.schema(&crate::diag::join(path, rate_key), node, format!("required for load type '{kind}'"));
            None
        }
    };
    let out = match kind {
        "concurrency" => match f.take("concurrency") {
            Some((n, p)) => u32_in(n, &p, cx, 1, MAX_CONCURRENCY).map(LoadKind::Concurrency),
            None => Some(LoadKind::Concurrency(10)),
        },
        "poisson" => rate(&mut f, cx).map(LoadKind::Poisson),
        "constant_rate" => rate(&mut f, cx).map(LoadKind::ConstantRate),
        "gamma" => {
            let r = rate(&mut f, cx);
            let cv = match f.take("cv") {
                Some((n, p)) => number_in(n, &p, cx, 0.01, 100.0),
                None => {
                    cx.schema(
                        &crate::diag::join(path, "cv"),
                        node,
                        "required for load type 'gamma' (1 = Poisson, >1 bursty)",
                    );
                    None
                }
            };
            Some(LoadKind::Gamma { rate: r?, cv: cv? })
        }
        "kv_capacity_fraction" => match f.take("fraction") {
            Some((n, p)) => number_in(n, &p, cx, 1e-6, 100.0).map(LoadKind::KvCapacityFraction),
            None => {
                cx.schema(
                    &crate::diag::join(path, "fraction"),
                    node,
                    "required for load type 'kv_capacity_fraction'",
                );
                None
            }
        },
        _ => match f.take("speedup") {
            Some((n, p)) => {
                number_in(n, &p, cx, 1e-6, 1e6).map(|speedup| LoadKind::TraceTimestamps { speedup })
            }
            None => Some(LoadKind::TraceTimestamps { speedup: 1.0 }),
        },
    };
    for k in ["agentic_lanes", "agentic_snapshot", "agentic_warmup", "agentic_profile"] {
        if let Some((n, p)) = f.take(k) {
            cx.unsupported(&p, n, "agentic pacing is not simulated by servesim yet");
        }
    }
    let context = match source {
        SourceKind::Synthetic => format!("to load type '{kind}' of a synthetic source"),
        SourceKind::Session => format!("to load type '{kind}' of a session source"),
        SourceKind::Trace => format!("to load type '{kind}' of a trace source"),
    };
    f.finish(cx, LOAD_KEYS, &context);
    Some(LoadConfig { kind: out?, seed: seed? })
}

fn decode_stop(node: &Node, path: &str, cx: &mut Cx, source: SourceKind) -> Option<StopConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let mut stop = StopConfig::default();
    let before = cx.diags.len();
    if let Some((n, p)) = f.take("requests") {
        stop.requests = u32_in(n, &p, cx, 1, MAX_REQUESTS);
    }
    if let Some((n, p)) = f.take("requests_per_load_unit") {
        stop.requests_per_load_unit = positive(n, &p, cx);
    }
    if source == SourceKind::Session {
        if let Some((n, p)) = f.take("sessions") {
            stop.sessions = u32_in(n, &p, cx, 1, MAX_REQUESTS);
        }
        if let Some((n, p)) = f.take("sessions_per_load_unit") {
            stop.sessions_per_load_unit = positive(n, &p, cx);
        }
    }
    if source == SourceKind::Trace {
        if let Some((n, p)) = f.take("max_virtual_time_seconds") {
            stop.max_virtual_time_seconds = positive(n, &p, cx);
        }
    }
    let context = match source {
        SourceKind::Synthetic => "to a synthetic source",
        SourceKind::Session => "to a session source",
        SourceKind::Trace => "to a trace source",
    };
    f.finish(
        cx,
        &[
            "requests",
            "requests_per_load_unit",
            "sessions",
            "sessions_per_load_unit",
            "max_virtual_time_seconds",
        ],
        context,
    );
    if stop.requests.is_some() && stop.requests_per_load_unit.is_some() {
        cx.domain(path, node, "set either 'requests' or 'requests_per_load_unit', not both");
    }
    if stop.sessions.is_some() && stop.sessions_per_load_unit.is_some() {
        cx.domain(path, node, "set either 'sessions' or 'sessions_per_load_unit', not both");
    }
    (cx.diags.len() == before).then_some(stop)
}

fn dtype(node: &Node, path: &str, cx: &mut Cx) -> Option<Dtype> {
    match choice(node, path, cx, &["bf16", "bfloat16", "fp16", "float16", "fp8", "fp4", "nvfp4", "mxfp4"])? {
        "bf16" | "bfloat16" | "fp16" | "float16" => Some(Dtype::Bf16),
        "fp8" => Some(Dtype::Fp8),
        _ => Some(Dtype::Fp4),
    }
}

const ENGINE_KEYS: &[&str] = &[
    "mode",
    "model",
    "hardware",
    "backend",
    "backend_version",
    "context_length",
    "enable_chunked_prefill",
    "speculation",
    "nextn",
    "nextn_accepted",
    "kv_transfer",
    "workers",
    "afd",
    "quantization",
    "kv_eviction_policy",
];

fn decode_engine(node: &Node, path: &str, cx: &mut Cx) -> Option<EngineConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let mode = match f.take("mode") {
        Some((n, p)) => match choice(n, &p, cx, &["aggregated", "disaggregated", "afd"])? {
            "aggregated" => Some(Mode::Aggregated),
            "disaggregated" => Some(Mode::Disaggregated),
            _ => {
                cx.unsupported(&p, n, "attention-FFN disaggregation (afd) is not estimated by servesim yet");
                None
            }
        },
        None => Some(Mode::Aggregated),
    };
    let required = |f: &mut Fields, key: &str, what: &str, cx: &mut Cx| match f.take(key) {
        Some((n, p)) => string(n, &p, cx),
        None => {
            cx.schema(&crate::diag::join(path, key), node, format!("required: {what}"));
            None
        }
    };
    let model = required(&mut f, "model", "a model id such as Qwen/Qwen3-32B-FP8", cx);
    let hardware = required(&mut f, "hardware", "a GPU id such as h200_sxm", cx);
    let backend = match f.take("backend") {
        Some((n, p)) => match choice(n, &p, cx, &["vllm", "sglang", "trtllm"])? {
            "vllm" => Some(Backend::Vllm),
            "sglang" => Some(Backend::Sglang),
            _ => Some(Backend::TrtLlm),
        },
        None => Some(Backend::Vllm),
    };
    let backend_version = f.take("backend_version").and_then(|(n, p)| string(n, &p, cx));
    let context_length = match f.take("context_length") {
        Some((n, p)) => match &n.value {
            Value::Str(s) if s == "max" => Some(ContextLength::Max),
            _ => u32_in(n, &p, cx, 1, MAX_TOKENS).map(ContextLength::Tokens),
        },
        None => Some(ContextLength::Max),
    };
    let chunked = match f.take("enable_chunked_prefill") {
        Some((n, p)) => {
            let v = boolean(n, &p, cx);
            if v == Some(false) && backend == Some(Backend::Sglang) {
                cx.domain(
                    &p,
                    n,
                    "SGLang always chunks long prompts; enable_chunked_prefill: false is rejected for sglang",
                );
            }
            v
        }
        None => Some(true),
    };
    let kv_transfer = match f.take("kv_transfer") {
        Some((n, p)) => {
            if mode == Some(Mode::Aggregated) {
                cx.schema(&p, n, "kv_transfer applies to engine.mode: disaggregated");
            }
            decode_kv_transfer(n, &p, cx)
        }
        None => Some(KvTransferConfig::default()),
    };
    for k in ["speculation", "nextn", "nextn_accepted", "afd", "kv_eviction_policy"] {
        if let Some((n, p)) = f.take(k) {
            let zero = matches!(n.value, Value::Int(0)) && k == "nextn";
            if !zero {
                cx.unsupported(&p, n, format!("'{k}' is not simulated by servesim yet"));
            }
        }
    }
    let quantization = match f.take("quantization") {
        Some((n, p)) => decode_quantization(n, &p, cx),
        None => Some(Quantization::default()),
    };
    let backend_for_defaults = backend.unwrap_or(Backend::Vllm);
    let workers = match f.take("workers") {
        Some((n, p)) => decode_workers(n, &p, cx, backend_for_defaults, mode.unwrap_or(Mode::Aggregated)),
        None => {
            cx.schema(&crate::diag::join(path, "workers"), node, "required: e.g. workers: {aggregated: {}}");
            None
        }
    };
    f.finish(cx, ENGINE_KEYS, "");
    Some(EngineConfig {
        mode: mode?,
        model: model?,
        hardware: hardware?,
        backend: backend?,
        backend_version,
        context_length: context_length?,
        enable_chunked_prefill: chunked?,
        quantization: quantization?,
        workers: workers?,
        kv_transfer: kv_transfer?,
    })
}

fn gemm_quant(node: &Node, path: &str, cx: &mut Cx) -> Option<GemmQuant> {
    match choice(
        node,
        path,
        cx,
        &["bf16", "bfloat16", "fp16", "float16", "fp8", "fp8_block", "fp4", "nvfp4"],
    )? {
        "bf16" | "bfloat16" | "fp16" | "float16" => Some(GemmQuant::Bf16),
        "fp8" => Some(GemmQuant::Fp8),
        "fp8_block" => Some(GemmQuant::Fp8Block),
        _ => Some(GemmQuant::Nvfp4),
    }
}

fn moe_quant(node: &Node, path: &str, cx: &mut Cx) -> Option<MoeQuant> {
    match choice(
        node,
        path,
        cx,
        &[
            "bf16",
            "bfloat16",
            "fp16",
            "float16",
            "fp8",
            "fp8_block",
            "fp4",
            "nvfp4",
            "mxfp4",
            "w4a16_mxfp4",
            "int4",
            "int4_wo",
        ],
    )? {
        "bf16" | "bfloat16" | "fp16" | "float16" => Some(MoeQuant::Bf16),
        "fp8" => Some(MoeQuant::Fp8),
        "fp8_block" => Some(MoeQuant::Fp8Block),
        "fp4" | "nvfp4" => Some(MoeQuant::Nvfp4),
        "mxfp4" | "w4a16_mxfp4" => Some(MoeQuant::W4a16Mxfp4),
        _ => Some(MoeQuant::Int4Wo),
    }
}

fn decode_quantization(node: &Node, path: &str, cx: &mut Cx) -> Option<Quantization> {
    let mut f = Fields::of(node, path, cx)?;
    let gemm = f.take("gemm").map(|(n, p)| gemm_quant(n, &p, cx));
    let moe = f.take("moe").map(|(n, p)| moe_quant(n, &p, cx));
    let kv = f.take("kv_cache").map(|(n, p)| dtype(n, &p, cx));
    f.finish(cx, &["gemm", "moe", "kv_cache"], "");
    Some(Quantization {
        gemm: match gemm {
            Some(g) => Some(g?),
            None => None,
        },
        moe: match moe {
            Some(g) => Some(g?),
            None => None,
        },
        kv_cache: match kv {
            Some(k) => Some(k?),
            None => None,
        },
    })
}

fn decode_workers(node: &Node, path: &str, cx: &mut Cx, backend: Backend, mode: Mode) -> Option<Workers> {
    let mut f = Fields::of(node, path, cx)?;
    // A bare `role:` (null) means "all defaults", like `role: {}`.
    let role = |f: &mut Fields, name: &str, cx: &mut Cx, prefill: bool| -> Option<RoleConfig> {
        let p = crate::diag::join(path, name);
        match f.take(name) {
            Some((n, _)) => decode_role(n, &p, cx, backend, mode, prefill),
            None if node.get(name).is_some() => {
                decode_role(&Node::builtin(Value::Null), &p, cx, backend, mode, prefill)
            }
            None => {
                cx.schema(
                    &p,
                    node,
                    format!(
                        "required in {} mode",
                        if mode == Mode::Aggregated { "aggregated" } else { "disaggregated" }
                    ),
                );
                None
            }
        }
    };
    let out = match mode {
        Mode::Aggregated => {
            let r = role(&mut f, "aggregated", cx, false);
            for k in ["prefill", "decode"] {
                if let Some((n, p)) = f.take(k) {
                    cx.schema(&p, n, "prefill and decode pools need engine.mode: disaggregated");
                }
            }
            r.map(Workers::Aggregated)
        }
        Mode::Disaggregated => {
            let prefill = role(&mut f, "prefill", cx, true);
            let decode = role(&mut f, "decode", cx, false);
            if let Some((n, p)) = f.take("aggregated") {
                cx.schema(&p, n, "disaggregated mode uses prefill and decode pools, not aggregated workers");
            }
            match (prefill, decode) {
                (Some(prefill), Some(decode)) => Some(Workers::Disaggregated { prefill, decode }),
                _ => None,
            }
        }
    };
    if let Some((n, p)) = f.take("encoder") {
        cx.unsupported(&p, n, "encoder pools (EPD) are not simulated by servesim yet");
    }
    f.finish(cx, &["aggregated", "prefill", "decode", "encoder"], "");
    out
}

fn decode_role(
    node: &Node,
    path: &str,
    cx: &mut Cx,
    backend: Backend,
    mode: Mode,
    prefill: bool,
) -> Option<RoleConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let parallelism = match f.take("parallelism") {
        Some((n, p)) => decode_parallelism(n, &p, cx),
        None => Some(ParallelismConfig {
            replicas: 1,
            tensor: 1,
            pipeline: 1,
            attention_data: 1,
            moe_tensor: 1,
            moe_expert: 1,
        }),
    };
    let dp = parallelism.map_or(1, |p| p.attention_data);
    let scheduler_entry = f.take("scheduler");
    let scheduler = decode_scheduler(
        scheduler_entry.clone(),
        &crate::diag::join(path, "scheduler"),
        cx,
        backend,
        dp,
        prefill,
    );
    let kv_cache = decode_kv_cache(f.take("kv_cache"), &crate::diag::join(path, "kv_cache"), cx, backend);
    let timing = match f.take("timing") {
        Some((n, p)) => decode_timing(n, &p, cx),
        None => TimingConfig::default(),
    };
    if let (Some(s), Some((n, p))) = (&scheduler, &scheduler_entry) {
        if !s.async_scheduling && timing.kind != TimingKind::OpLevel {
            cx.domain(
                p,
                n,
                "async_scheduling: false is modelled by the op-level timing model only (forward_model: op_level)",
            );
        }
    }
    let frontend = match f.take("frontend") {
        Some((n, p)) if mode == Mode::Disaggregated => {
            cx.unsupported(&p, n, "the serving frontend's queue is modelled for aggregated workers only");
            FrontendConfig::default()
        }
        Some((n, p)) => decode_frontend(n, &p, cx),
        None => FrontendConfig::default(),
    };
    let hardware = match f.take("hardware") {
        Some((n, p)) if mode == Mode::Disaggregated => string(n, &p, cx),
        Some((n, p)) => {
            cx.schema(
                &p,
                n,
                "a per-role hardware applies to disaggregated pools; set engine.hardware instead",
            );
            None
        }
        None => None,
    };
    if let Some((n, p)) = f.take("startup_seconds") {
        cx.unsupported(
            &p,
            n,
            "'startup_seconds' applies to autoscaled pools, which servesim does not simulate yet",
        );
    }
    f.finish(
        cx,
        &["parallelism", "scheduler", "kv_cache", "timing", "frontend", "hardware", "startup_seconds"],
        "",
    );
    Some(RoleConfig {
        hardware,
        parallelism: parallelism?,
        scheduler: scheduler?,
        kv_cache: kv_cache?,
        timing,
        frontend,
    })
}

fn decode_frontend(node: &Node, path: &str, cx: &mut Cx) -> FrontendConfig {
    let mut out = FrontendConfig::default();
    let Some(mut f) = Fields::of(node, path, cx) else { return out };
    if let Some((n, p)) = f.take("processes") {
        out.processes = u32_in(n, &p, cx, 1, 1024).unwrap_or(1);
    }
    if let Some((n, p)) = f.take("stream_interval") {
        out.stream_interval = u32_in(n, &p, cx, 1, 1_000_000).unwrap_or(1);
    }
    out.request_ms = f.take("request_ms").and_then(|(n, p)| number_in(n, &p, cx, 0.0, 1e5));
    out.chunk_us = f.take("chunk_us").and_then(|(n, p)| number_in(n, &p, cx, 0.0, 1e6));
    f.finish(cx, &["processes", "stream_interval", "request_ms", "chunk_us"], "");
    out
}

fn decode_kv_transfer(node: &Node, path: &str, cx: &mut Cx) -> Option<KvTransferConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let before = cx.diags.len();
    let mut out = KvTransferConfig::default();
    if let Some((n, p)) = f.take("bytes_per_token") {
        if !matches!(&n.value, Value::Str(s) if s == "auto") {
            out.bytes_per_token = u64_min(n, &p, cx, 1);
        }
    }
    if let Some((n, p)) = f.take("bandwidth_gb_per_second") {
        out.bandwidth_gb_per_second = positive(n, &p, cx);
    }
    if let Some((n, p)) = f.take("timing_mode") {
        if let Some(m) = choice(n, &p, cx, &["destination_missing", "full"]) {
            out.timing_mode = if m == "full" { TransferMode::Full } else { TransferMode::DestinationMissing };
        }
    }
    if let Some((n, p)) = f.take("link_sharing") {
        if let Some(m) = choice(n, &p, cx, &["max_min", "independent"]) {
            out.link_sharing = if m == "independent" {
                servesim_core::transfer::Sharing::Independent
            } else {
                servesim_core::transfer::Sharing::MaxMin
            };
        }
    }
    f.finish(cx, &["bytes_per_token", "bandwidth_gb_per_second", "timing_mode", "link_sharing"], "");
    (cx.diags.len() == before).then_some(out)
}

fn decode_parallelism(node: &Node, path: &str, cx: &mut Cx) -> Option<ParallelismConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let mut get = |key: &str, cx: &mut Cx| match f.take(key) {
        Some((n, p)) => u32_in(n, &p, cx, 1, MAX_PARALLEL),
        None => Some(1),
    };
    let replicas = get("replicas", cx);
    let tensor = get("tensor", cx);
    let pipeline = get("pipeline", cx);
    let attention_data = get("attention_data", cx);
    let moe_tensor = get("moe_tensor", cx);
    let moe_expert = get("moe_expert", cx);
    for k in ["prefill_context", "decode_context", "preset"] {
        if let Some((n, p)) = f.take(k) {
            let one = matches!(n.value, Value::Int(1));
            if !one {
                cx.unsupported(&p, n, format!("'{k}' is not simulated by servesim yet"));
            }
        }
    }
    f.finish(
        cx,
        &[
            "replicas",
            "tensor",
            "pipeline",
            "attention_data",
            "moe_tensor",
            "moe_expert",
            "prefill_context",
            "decode_context",
            "preset",
        ],
        "",
    );
    Some(ParallelismConfig {
        replicas: replicas?,
        tensor: tensor?,
        pipeline: pipeline?,
        attention_data: attention_data?,
        moe_tensor: moe_tensor?,
        moe_expert: moe_expert?,
    })
}

const SCHEDULER_KEYS: &[&str] = &[
    "max_batched_tokens",
    "max_sequences",
    "prefill_schedule_interval",
    "prefill_decode_interval",
    "schedule_policy",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "schedule_conservativeness",
    "async_scheduling",
];

fn decode_scheduler(
    entry: Option<(&Node, String)>,
    path: &str,
    cx: &mut Cx,
    backend: Backend,
    dp: u32,
    prefill: bool,
) -> Option<SchedulerKnobs> {
    let mut sg = servesim_core::engine::SglangKnobs::default();
    // Under attention DP the chunk budget is per rank (AISimulate: ÷ attention_data).
    sg.chunked_prefill_size = (sg.chunked_prefill_size / dp.max(1)).max(1);
    // AISimulate: max_sequences 256, except 1 on a prefill role.
    let defaults = SchedulerKnobs {
        max_batched_tokens: 8192,
        max_sequences: if prefill { 1 } else { 256 },
        prefill_schedule_interval: 1,
        async_scheduling: true,
        sglang: sg,
    };
    let Some((node, _)) = entry else { return Some(defaults) };
    let mut f = Fields::of(node, path, cx)?;
    let before = cx.diags.len();
    let mut out = defaults;
    if let Some((n, p)) = f.take("max_batched_tokens") {
        out.max_batched_tokens = u32_in(n, &p, cx, 1, MAX_TOKENS).unwrap_or(out.max_batched_tokens);
    }
    if let Some((n, p)) = f.take("max_sequences") {
        out.max_sequences = u32_in(n, &p, cx, 1, MAX_CONCURRENCY).unwrap_or(out.max_sequences);
    }
    if let Some((n, p)) = f.take("prefill_schedule_interval") {
        out.prefill_schedule_interval = u32_in(n, &p, cx, 1, 1000).unwrap_or(1);
        if backend != Backend::Vllm && out.prefill_schedule_interval > 1 {
            cx.domain(&p, n, "prefill_schedule_interval is a vLLM knob");
        }
    }
    if let Some((n, p)) = f.take("async_scheduling") {
        out.async_scheduling = boolean(n, &p, cx).unwrap_or(true);
    }
    if let Some((n, p)) = f.take("prefill_decode_interval") {
        out.sglang.prefill_decode_interval = u32_in(n, &p, cx, 0, 1000).unwrap_or(0);
        if backend != Backend::Sglang && out.sglang.prefill_decode_interval > 0 {
            cx.domain(&p, n, "prefill_decode_interval is an SGLang knob");
        }
    }
    let sglang_only =
        ["schedule_policy", "chunked_prefill_size", "max_prefill_tokens", "schedule_conservativeness"];
    for key in sglang_only {
        let Some((n, p)) = f.take(key) else { continue };
        if backend != Backend::Sglang {
            cx.domain(&p, n, format!("'{key}' is an SGLang knob (backend is not sglang)"));
            continue;
        }
        match key {
            "schedule_policy" => {
                if let Some(c) = choice(n, &p, cx, &["fcfs", "fifo", "lpm"]) {
                    out.sglang.policy = if c == "lpm" {
                        servesim_core::engine::SglangPolicy::Lpm
                    } else {
                        servesim_core::engine::SglangPolicy::Fifo
                    };
                }
            }
            "chunked_prefill_size" => {
                if let Some(v) = u32_in(n, &p, cx, 1, MAX_TOKENS) {
                    out.sglang.chunked_prefill_size = (v / dp.max(1)).max(1);
                }
            }
            "max_prefill_tokens" => {
                if let Some(v) = u32_in(n, &p, cx, 1, MAX_TOKENS) {
                    out.sglang.max_prefill_tokens = v;
                }
            }
            _ => {
                if let Some(v) = number_in(n, &p, cx, 0.01, 100.0) {
                    out.sglang.init_new_token_ratio = (0.7 * v).min(1.0);
                }
            }
        }
    }
    f.finish(cx, SCHEDULER_KEYS, "");
    (cx.diags.len() == before).then_some(out)
}

fn decode_kv_cache(
    entry: Option<(&Node, String)>,
    path: &str,
    cx: &mut Cx,
    backend: Backend,
) -> Option<KvCacheConfig> {
    let default_block = match backend {
        Backend::Vllm => 64,
        Backend::Sglang => 1,
        Backend::TrtLlm => 32,
    };
    let default_fraction = if backend == Backend::Sglang { 0.88 } else { 0.9 };
    let defaults = KvCacheConfig {
        block_size: default_block,
        prefix_caching: true,
        bytes_per_token: None,
        capacity: Capacity::Default { memory_fraction: default_fraction, cuda_graph_reserved_bytes: 0 },
    };
    let Some((node, _)) = entry else { return Some(defaults) };
    let mut f = Fields::of(node, path, cx)?;
    let block_size = match f.take("block_size") {
        Some((n, p)) => {
            let min = if backend == Backend::Sglang { 1 } else { 2 };
            u32_in(n, &p, cx, min, 4096)
        }
        None => Some(default_block),
    };
    let prefix_caching = match f.take("prefix_caching") {
        Some((n, p)) => boolean(n, &p, cx),
        None => Some(true),
    };
    let bytes_per_token = match f.take("bytes_per_token") {
        Some((n, _)) if matches!(&n.value, Value::Str(s) if s == "auto") => Some(None),
        Some((n, p)) => u64_min(n, &p, cx, 1).map(Some),
        None => Some(None),
    };
    let capacity = match f.take("capacity") {
        Some((n, p)) => decode_capacity(n, &p, cx, default_fraction),
        None => Some(defaults.capacity),
    };
    for k in ["host_offload", "g3_offload", "state_cache", "prefix_match_unit"] {
        if let Some((n, p)) = f.take(k) {
            cx.unsupported(
                &p,
                n,
                format!("'{k}' (KV tiers beyond GPU memory) is not simulated by servesim yet"),
            );
        }
    }
    f.finish(
        cx,
        &[
            "block_size",
            "prefix_caching",
            "bytes_per_token",
            "capacity",
            "host_offload",
            "g3_offload",
            "state_cache",
            "prefix_match_unit",
        ],
        "",
    );
    Some(KvCacheConfig {
        block_size: block_size?,
        prefix_caching: prefix_caching?,
        bytes_per_token: bytes_per_token?,
        capacity: capacity?,
    })
}

fn decode_capacity(node: &Node, path: &str, cx: &mut Cx, default_fraction: f64) -> Option<Capacity> {
    let mut f = Fields::of(node, path, cx)?;
    let kind = match f.take("type") {
        Some((n, p)) => choice(n, &p, cx, &["default", "fixed"])?,
        None => "default",
    };
    let out = if kind == "default" {
        let fraction = match f.take("memory_fraction") {
            Some((n, p)) => number_in(n, &p, cx, 0.01, 1.0),
            None => Some(default_fraction),
        };
        let graphs = match f.take("cuda_graph_reserved_bytes") {
            Some((n, p)) => u64_min(n, &p, cx, 0),
            None => Some(0),
        };
        Some(Capacity::Default { memory_fraction: fraction?, cuda_graph_reserved_bytes: graphs? })
    } else {
        let blocks = f.take("blocks").map(|(n, p)| u64_min(n, &p, cx, 1));
        let bytes = f.take("bytes").map(|(n, p)| u64_min(n, &p, cx, 1));
        match (blocks, bytes) {
            (Some(b), None) => b.map(Capacity::FixedBlocks),
            (None, Some(b)) => b.map(Capacity::FixedBytes),
            _ => {
                cx.schema(path, node, "type 'fixed' needs exactly one of 'blocks' or 'bytes'");
                None
            }
        }
    };
    f.finish(
        cx,
        &["type", "memory_fraction", "cuda_graph_reserved_bytes", "blocks", "bytes"],
        &format!("to capacity type '{kind}'"),
    );
    out
}

fn decode_timing(node: &Node, path: &str, cx: &mut Cx) -> TimingConfig {
    let Some(mut f) = Fields::of(node, path, cx) else { return TimingConfig::default() };
    let mut out = TimingConfig::default();
    if let Some((n, p)) = f.take("type") {
        match choice(n, &p, cx, &["default", "roofline", "fixed", "polynomial"]) {
            Some("roofline") => out.kind = TimingKind::Roofline,
            Some("fixed" | "polynomial") => {
                cx.unsupported(&p, n, "fixed and polynomial step times are not available in servesim yet");
            }
            _ => {}
        }
    }
    let mut fpm = false;
    if let Some((n, p)) = f.take("forward_model") {
        if choice(n, &p, cx, &["op_level", "fpm"]) == Some("fpm") {
            if out.kind == TimingKind::Roofline {
                cx.domain(&p, n, "forward_model: fpm needs type: default (roofline uses no tables)");
            }
            fpm = true;
        }
    }
    let parquet =
        f.take("fpm_parquet_path").and_then(|(n, p)| string(n, &p, cx).map(|s| (s, n.origin.clone(), p)));
    let cell_id = f.take("fpm_cell_id").and_then(|(n, p)| string(n, &p, cx));
    match (fpm, parquet) {
        (true, Some((parquet_path, origin, _))) => {
            out.kind = TimingKind::Fpm(FpmSource { parquet_path, origin, cell_id });
        }
        (true, None) => {
            cx.report(
                crate::diag::DiagKind::Schema,
                &format!("{path}.fpm_parquet_path"),
                &node.origin,
                "forward_model: fpm needs fpm_parquet_path (the fpm_forward_perf.parquet file)",
            );
        }
        (false, Some((_, _, p))) => {
            cx.report(
                crate::diag::DiagKind::Domain,
                &p,
                &node.origin,
                "fpm_parquet_path is only used with forward_model: fpm",
            );
        }
        (false, None) => {}
    }
    for k in ["prefill_ms", "decode_ms"] {
        if let Some((n, p)) = f.take(k) {
            cx.unsupported(&p, n, format!("'{k}' is not used by servesim's timing model yet"));
        }
    }
    out.prefill_scale = f.take("prefill_scale").and_then(|(n, p)| number_in(n, &p, cx, 0.1, 100.0));
    out.step_overhead_ms = f.take("step_overhead_ms").and_then(|(n, p)| number_in(n, &p, cx, 0.0, 1e4));
    out.frontend_ms = f.take("frontend_ms").and_then(|(n, p)| number_in(n, &p, cx, 0.0, 1e6));
    out.host_us_per_sequence =
        f.take("host_us_per_sequence").and_then(|(n, p)| number_in(n, &p, cx, 0.0, 1e5));
    f.finish(
        cx,
        &[
            "type",
            "prefill_ms",
            "decode_ms",
            "forward_model",
            "fpm_parquet_path",
            "fpm_cell_id",
            "prefill_scale",
            "step_overhead_ms",
            "frontend_ms",
            "host_us_per_sequence",
        ],
        "",
    );
    out
}

const ROUTER_KEYS: &[&str] = &[
    "policy",
    "prefill_load_model",
    "overlap_score_credit",
    "prefill_load_scale",
    "temperature",
    "decode_active_request_weight",
    "overlap_score_credit_decay",
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
