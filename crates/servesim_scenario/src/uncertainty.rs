//! Uncertainty bands (`evaluation.uncertainty`, a servesim extension): the scenario replayed
//! with further root seeds — which redraw arrivals, lengths, prompt contents, frontend delays
//! and speculative acceptance draws — and, with `acceptance_rate_spread`, speculative
//! decoding's acceptance scaled up and down; prediction.json's `servesim.uncertainty` gives
//! each headline figure's range over the replays. The scenario's own replay is the first, so
//! every other figure of prediction.json is what a run without bands gives.

use serde_json::{json, Map, Value};

use crate::config::{SpeculationConfig, UncertaintyConfig};
use crate::scenario::Prepared;

/// The figures of prediction.json that get a band (those present in the scenario's own run).
pub const BANDED: &[&str] = &[
    "request_throughput_rps",
    "output_throughput_tok_s",
    "goodput_request_throughput_rps",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p90_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p90_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "p90_itl_ms",
    "p99_itl_ms",
    "mean_e2e_latency_ms",
    "p90_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "duration_ms",
    "gpu_hours",
    "prefix_cache_reused_ratio",
];

/// Each replay's acceptance scale, the scenario's own (1) first: the others are the midpoints
/// of `seeds - 1` equal parts of `1 ± spread`, so the replays cover the range evenly and
/// reach within half a part of its ends.
#[must_use]
pub fn acceptance_scales(u: &UncertaintyConfig) -> Vec<f64> {
    let others = u.seeds.saturating_sub(1);
    core::iter::once(1.0)
        .chain((0..others).map(|k| {
            let mid = (2.0 * f64::from(k) + 1.0) / f64::from(others) - 1.0;
            1.0 + u.acceptance_rate_spread * mid
        }))
        .collect()
}

/// How many replays past the scenario's own its band asks for.
#[must_use]
pub fn further_replays(p: &Prepared) -> usize {
    p.config.evaluation.uncertainty.map_or(0, |u| u.seeds.saturating_sub(1) as usize)
}

/// Replay `k` (1 ..= [`further_replays`]) of the scenario's band: root seed `seed + k` (an
/// n-gram speculation's own seed moves with it) and the `k`-th acceptance scale.
#[must_use]
pub fn variant(p: &Prepared, k: usize) -> Prepared {
    let scale =
        p.config.evaluation.uncertainty.and_then(|u| acceptance_scales(&u).get(k).copied()).unwrap_or(1.0);
    let mut v = p.clone();
    let k = k as u64;
    v.seed = p.seed.wrapping_add(k);
    v.config.evaluation.uncertainty = None;
    v.config.engine.speculation = match &p.config.engine.speculation {
        SpeculationConfig::Off => SpeculationConfig::Off,
        SpeculationConfig::DraftLayers { nextn, accepted } => SpeculationConfig::DraftLayers {
            nextn: *nextn,
            accepted: (accepted * scale).clamp(0.0, f64::from(*nextn)),
        },
        SpeculationConfig::Ngram { rates, seed } => SpeculationConfig::Ngram {
            rates: rates.iter().map(|r| (r * scale).clamp(0.0, 1.0)).collect(),
            seed: seed.wrapping_add(k),
        },
        SpeculationConfig::DraftModel { model, rates, seed } => SpeculationConfig::DraftModel {
            model: model.clone(),
            rates: rates.iter().map(|r| (r * scale).clamp(0.0, 1.0)).collect(),
            seed: seed.wrapping_add(k),
        },
    };
    v
}

/// Adds `servesim.uncertainty` to the scenario's own prediction.json, `base`, from the other
/// replays' prediction.json (replay 1 first, as [`variant`] numbers them).
#[allow(clippy::cast_precision_loss)] // At most 64 replays.
pub fn attach(base: &mut Value, p: &Prepared, others: &[Value]) {
    let Some(u) = p.config.evaluation.uncertainty else { return };
    let runs: Vec<&Value> = core::iter::once(&*base).chain(others).collect();
    let mut figures = Map::new();
    for key in BANDED {
        let values: Vec<f64> = runs.iter().filter_map(|r| r[*key].as_f64()).collect();
        if values.len() != runs.len() {
            continue;
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        figures.insert(
            (*key).to_string(),
            json!({
                "min": values.iter().copied().fold(f64::INFINITY, f64::min),
                "max": values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                "mean": mean,
                "std": libm::sqrt(var),
                "values": values,
            }),
        );
    }
    let mut section = json!({
        "runs": runs.len(),
        "seeds": (0..u64::from(u.seeds)).map(|k| p.seed.wrapping_add(k)).collect::<Vec<_>>(),
        "figures": figures,
    });
    if u.acceptance_rate_spread > 0.0 {
        section["acceptance_rate_spread"] = json!(u.acceptance_rate_spread);
        section["acceptance_rate_scales"] = json!(acceptance_scales(&u));
    }
    base["servesim"]["uncertainty"] = section;
}

/// The summary's lines for a prediction with bands.
#[must_use]
pub fn summary_lines(u: &Value) -> Vec<String> {
    let Some(runs) = u["runs"].as_u64() else { return Vec::new() };
    let seeds = u["seeds"].as_array().map_or(&[][..], Vec::as_slice);
    let (first, last) =
        (seeds.first().cloned().unwrap_or_default(), seeds.last().cloned().unwrap_or_default());
    let spread = match u["acceptance_rate_spread"].as_f64() {
        Some(s) => format!(", acceptance scaled within ±{:.0}%", s * 100.0),
        None => String::new(),
    };
    let mut out =
        vec![format!("uncertainty over {runs} replays (seeds {first}-{last}{spread}), lowest to highest:\n")];
    let f = &u["figures"];
    let band = |k: &str, digits: usize| -> Option<String> {
        let b = &f[k];
        Some(format!("{:.digits$}-{:.digits$}", b["min"].as_f64()?, b["max"].as_f64()?))
    };
    for (label, keys, unit) in [
        ("TTFT", ["mean_ttft_ms", "p90_ttft_ms", "p99_ttft_ms"], "ms"),
        ("TPOT", ["mean_tpot_ms", "p90_tpot_ms", "p99_tpot_ms"], "ms"),
        ("E2E latency", ["mean_e2e_latency_ms", "p90_e2e_latency_ms", "p99_e2e_latency_ms"], "ms"),
    ] {
        if let (Some(m), Some(p90), Some(p99)) = (band(keys[0], 2), band(keys[1], 2), band(keys[2], 2)) {
            out.push(format!("  {label}: mean {m} {unit}, p90 {p90} {unit}, p99 {p99} {unit}\n"));
        }
    }
    if let (Some(rps), Some(tok)) = (band("request_throughput_rps", 3), band("output_throughput_tok_s", 1)) {
        let goodput = band("goodput_request_throughput_rps", 3)
            .map_or(String::new(), |g| format!("; goodput {g} req/s"));
        out.push(format!("  throughput: {rps} req/s, {tok} output tok/s{goodput}\n"));
    }
    out
}
