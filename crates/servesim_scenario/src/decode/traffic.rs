//! The `traffic` block: request source (synthetic lengths, sessions, traces), arrival
//! process and stop rules.

use servesim_core::traffic::LengthDist;
use servesim_data::trace::NestedBasis;

use crate::config::{LoadConfig, LoadKind, SourceConfig, StopConfig, TraceFormatConfig, TrafficConfig};
use crate::diag::{boolean, choice, number_in, positive, string, u32_in, u64_min, Cx, Fields};
use crate::node::{Node, Value};

use super::{MAX_CONCURRENCY, MAX_REQUESTS, MAX_TOKENS};

pub(super) fn default_traffic() -> TrafficConfig {
    TrafficConfig {
        source: SourceConfig::Synthetic {
            input_tokens: LengthDist::Fixed(1024),
            output_tokens: LengthDist::Fixed(128),
            shared_prefix_tokens: 0,
            prompt_pool: 0,
        },
        load: LoadConfig {
            kind: LoadKind::Concurrency(10),
            rate_schedule: Vec::new(),
            seed: 42,
            agentic_lanes: None,
            agentic_snapshot: None,
            agentic_warmup: false,
        },
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

pub(super) fn decode_traffic(node: &Node, path: &str, cx: &mut Cx) -> Option<TrafficConfig> {
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
    let (source, load) = (source?, load?);
    let agentic = matches!(&source, SourceConfig::Trace { format, .. } if format.is_graph());
    for (set, key, what) in [
        (load.agentic_lanes.is_some(), "agentic_lanes", "lanes hold"),
        (load.agentic_snapshot.is_some(), "agentic_snapshot", "a snapshot cuts"),
    ] {
        if set && !agentic {
            let at = node.get("load").and_then(|l| l.get(key));
            cx.domain(
                &crate::diag::join(path, &format!("load.{key}")),
                at.unwrap_or(node),
                format!("{what} plays of an agentic trace (traffic.source.format agentic_mooncake or weka), and this source has none"),
            );
            return None;
        }
    }
    // A graph's requests start when what they wait for completes, its roots at their
    // timestamps; a closed loop or a rate has nothing to pace (AISimulate replays agentic
    // traces at their timestamps too).
    if agentic && !matches!(load.kind, LoadKind::TraceTimestamps { .. }) {
        let at = node.get("load").and_then(|l| l.get("type"));
        cx.domain(
            &crate::diag::join(path, "load.type"),
            at.unwrap_or(node),
            "an agentic trace (agentic_mooncake or weka) is replayed at its roots' timestamps, each other request when the requests it waits for complete: use load type trace_timestamps (speedup compresses both)",
        );
        return None;
    }
    Some(TrafficConfig { source, load, stop: stop? })
}

const SOURCE_KEYS: &[&str] = &[
    "type",
    "input_tokens",
    "output_tokens",
    "shared_prefix_tokens",
    "prompt_pool",
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
            let pool = match f.take("prompt_pool") {
                Some((n, p)) => u32_in(n, &p, cx, 0, MAX_REQUESTS),
                None => Some(0),
            };
            Some(SourceConfig::Synthetic {
                input_tokens: input?,
                output_tokens: output?,
                shared_prefix_tokens: shared?,
                prompt_pool: pool?,
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
                    "agentic_mooncake" => Some(TraceFormatConfig::AgenticMooncake),
                    "weka" => Some(TraceFormatConfig::Weka),
                    other => {
                        cx.unsupported(&p, n, format!("trace format '{other}' is not replayed by servesim yet (mooncake, agentic_mooncake, weka and azure_csv are)"));
                        None
                    }
                },
                None => Some(TraceFormatConfig::Mooncake),
            };
            let block_size = match f.take("block_size") {
                Some((n, p)) => u32_in(n, &p, cx, 1, 1 << 20).map(Some),
                None => Some(None),
            };
            let nested_basis = match f.take("nested_timestamp_basis") {
                Some((n, p)) => choice(n, &p, cx, &["auto", "absolute", "relative"]).map(|b| match b {
                    "absolute" => NestedBasis::Absolute,
                    "relative" => NestedBasis::Relative,
                    _ => NestedBasis::Auto,
                }),
                None => Some(NestedBasis::Auto),
            };
            Some(SourceConfig::Trace {
                paths: paths?,
                format: format?,
                block_size: block_size?,
                nested_basis: nested_basis?,
            })
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
    "rate_schedule",
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
    let rate_schedule = match f.take("rate_schedule") {
        Some((n, p)) if matches!(kind, "poisson" | "constant_rate" | "gamma") => {
            decode_rate_schedule(n, &p, cx, rate_key)
        }
        Some((n, p)) => {
            cx.schema(&p, n, "applies to open-loop loads (poisson, constant_rate, gamma)");
            None
        }
        None => Some(Vec::new()),
    };
    let lanes = match f.take("agentic_lanes") {
        Some((n, p)) if kind == "trace_timestamps" => u32_in(n, &p, cx, 1, MAX_CONCURRENCY).map(Some),
        Some((n, p)) => {
            cx.domain(
                &p,
                n,
                "lanes pace an agentic trace's plays (agentic_mooncake or weka) at its timestamps (load type trace_timestamps)",
            );
            None
        }
        None => Some(None),
    };
    let snapshot = match f.take("agentic_snapshot") {
        Some((n, _)) if matches!(n.value, Value::Null) => Some(None),
        Some((n, p)) if kind == "trace_timestamps" => decode_snapshot(n, &p, cx).map(Some),
        Some((n, p)) => {
            cx.domain(&p, n, "a snapshot cuts the plays of an agentic trace (agentic_mooncake or weka) replayed at its timestamps (load type trace_timestamps)");
            None
        }
        None => Some(None),
    };
    // AISimulate's defaults (no warmup, no recycled profile) may be written out.
    let warmup = match f.take("agentic_warmup") {
        Some((n, _)) if matches!(n.value, Value::Null) => Some(false),
        Some((n, p)) => match boolean(n, &p, cx) {
            // The primers are a snapshot's; AgentX's ten generic one-token requests a lane
            // are not simulated, so a warmup without a snapshot would be nothing but them.
            Some(true) if !matches!(snapshot, Some(Some(_))) => {
                cx.unsupported(&p, n, "servesim's warmup primes each conversation's last prompt before an agentic_snapshot's cut (set one); AgentX's generic warmup requests alone are not simulated");
                None
            }
            w => w,
        },
        None => Some(false),
    };
    if let Some((n, p)) = f.take("agentic_profile") {
        if !matches!(n.value, Value::Null) {
            cx.unsupported(&p, n, "AgentX's recycled profiles are not simulated by servesim yet (agentic_snapshot and agentic_lanes are)");
        }
    }
    let context = match source {
        SourceKind::Synthetic => format!("to load type '{kind}' of a synthetic source"),
        SourceKind::Session => format!("to load type '{kind}' of a session source"),
        SourceKind::Trace => format!("to load type '{kind}' of a trace source"),
    };
    f.finish(cx, LOAD_KEYS, &context);
    Some(LoadConfig {
        kind: out?,
        rate_schedule: rate_schedule?,
        seed: seed?,
        agentic_lanes: lanes?,
        agentic_snapshot: snapshot?,
        agentic_warmup: warmup?,
    })
}

/// `agentic_snapshot: {seed}`: the seed of the plays' cuts.
fn decode_snapshot(node: &Node, path: &str, cx: &mut Cx) -> Option<u64> {
    let mut f = Fields::of(node, path, cx)?;
    let seed = match f.take("seed") {
        Some((n, p)) => u64_min(n, &p, cx, 0),
        None => {
            cx.schema(
                &crate::diag::join(path, "seed"),
                node,
                "required: the seed the plays' cuts are drawn from",
            );
            None
        }
    };
    f.finish(cx, &["seed"], "to agentic_snapshot");
    seed
}

/// `rate_schedule`: a list of `{at_seconds, <rate_key>}` with strictly increasing times.
fn decode_rate_schedule(node: &Node, path: &str, cx: &mut Cx, rate_key: &str) -> Option<Vec<(f64, f64)>> {
    let Value::Seq(items) = &node.value else {
        cx.schema(
            path,
            node,
            format!("expected a list of {{at_seconds, {rate_key}}}, found {}", node.value.kind()),
        );
        return None;
    };
    let before = cx.diags.len();
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let ip = format!("{path}[{i}]");
        let Some(mut f) = Fields::of(item, &ip, cx) else { continue };
        let at = match f.take("at_seconds") {
            Some((n, p)) => {
                let at = number_in(n, &p, cx, 0.0, 1e9);
                if let (Some(a), Some(&(prev, _))) = (at, out.last()) {
                    if a <= prev {
                        cx.domain(&p, n, format!("must be later than the entry before it ({prev} s)"));
                    }
                }
                at
            }
            None => {
                cx.schema(&crate::diag::join(&ip, "at_seconds"), item, "required");
                None
            }
        };
        let rate = match f.take(rate_key) {
            Some((n, p)) => positive(n, &p, cx),
            None => {
                cx.schema(&crate::diag::join(&ip, rate_key), item, "required");
                None
            }
        };
        f.finish(cx, &["at_seconds", rate_key], "");
        if let (Some(a), Some(r)) = (at, rate) {
            out.push((a, r));
        }
    }
    (cx.diags.len() == before).then_some(out)
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
