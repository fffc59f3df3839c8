//! Uncertainty bands end to end: replay `k` of a band is the scenario at seed `seed + k`, the
//! scenario's own figures are untouched, an acceptance spread widens what it should, and
//! what a band cannot be asked for is refused at its field.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use servesim_scenario::catalog::Catalog;
use servesim_scenario::scenario::{parse_with_overrides, prepare};
use servesim_scenario::uncertainty::{further_replays, variant, BANDED};
use servesim_scenario::Override;
use servesim_tests::{config_refusal, predict_file_with, repo_root, DirFiles};

const POISSON: &str = "tests/scenarios/uncertainty_vllm_poisson.yaml";
const EAGLE: &str = "tests/scenarios/uncertainty_sglang_eagle.yaml";

fn band<'a>(p: &'a Value, key: &str) -> &'a Value {
    &p["servesim"]["uncertainty"]["figures"][key]
}

fn values(p: &Value, key: &str) -> Vec<f64> {
    band(p, key)["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
}

#[test]
fn each_replay_is_the_scenario_at_the_next_seed_and_the_first_is_its_own() {
    let with_band = predict_file_with(POISSON, &[]).unwrap().json;
    let u = &with_band["servesim"]["uncertainty"];
    assert_eq!(u["runs"].as_u64(), Some(8));
    assert_eq!(u["seeds"], serde_json::json!([42, 43, 44, 45, 46, 47, 48, 49]));
    // Without the band, prediction.json is the band's prediction less its section.
    let plain = predict_file_with(POISSON, &["evaluation={sla: {ttft_ms: 300, itl_ms: 20}}"]).unwrap().json;
    let mut stripped = with_band.clone();
    stripped["servesim"].as_object_mut().unwrap().remove("uncertainty");
    assert_eq!(stripped, plain);
    // Replay k is the scenario at load seed 42 + k, figure for figure.
    for k in [1u64, 5, 7] {
        let seeded = predict_file_with(
            POISSON,
            &["evaluation={sla: {ttft_ms: 300, itl_ms: 20}}", &format!("traffic.load.seed={}", 42 + k)],
        )
        .unwrap()
        .json;
        for key in BANDED {
            if let Some(v) = seeded[*key].as_f64() {
                assert_eq!(values(&with_band, key)[k as usize], v, "{key} of replay {k}");
            }
        }
    }
    // Every banded figure lies within its band, which the replays really spread.
    for key in BANDED {
        let b = band(&with_band, key);
        if b.is_null() {
            continue;
        }
        let (lo, hi) = (b["min"].as_f64().unwrap(), b["max"].as_f64().unwrap());
        let own = with_band[*key].as_f64().unwrap();
        assert!(lo <= own && own <= hi, "{key}: {own} outside {lo}-{hi}");
        assert_eq!(values(&with_band, key).len(), 8);
    }
    let ttft = band(&with_band, "p90_ttft_ms");
    assert!(ttft["max"].as_f64().unwrap() > 1.1 * ttft["min"].as_f64().unwrap(), "{ttft}");
    let summary = servesim_scenario::report::summary_table(&predict_file_with(POISSON, &[]).unwrap());
    assert!(summary.contains("uncertainty over 8 replays (seeds 42-49)"), "{summary}");
}

#[test]
fn an_acceptance_spread_scales_the_drafts_accepted_and_widens_the_decode_band() {
    let spread = predict_file_with(EAGLE, &[]).unwrap().json;
    let u = &spread["servesim"]["uncertainty"];
    let scales: Vec<f64> =
        u["acceptance_rate_scales"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(scales, [1.0, 0.8, 0.9, 1.0, 1.1, 1.2]);
    let seeds_only =
        predict_file_with(EAGLE, &["evaluation.uncertainty.acceptance_rate_spread=0"]).unwrap().json;
    assert!(seeds_only["servesim"]["uncertainty"]["acceptance_rate_scales"].is_null());
    let width = |p: &Value| {
        band(p, "mean_tpot_ms")["max"].as_f64().unwrap() - band(p, "mean_tpot_ms")["min"].as_f64().unwrap()
    };
    assert!(width(&spread) > 2.0 * width(&seeds_only), "{} vs {}", width(&spread), width(&seeds_only));
    // Fewer drafts accepted, slower decoding: the scale-0.8 replay is slower than the
    // scale-1.2 one, whose seeds differ by four.
    let tpot = values(&spread, "mean_tpot_ms");
    assert!(tpot[1] > tpot[5], "{tpot:?}");
    // The replay at scale 0.8 is the scenario at seed 43 with 1.44 drafts accepted.
    let own = prepare(
        &parse_with_overrides(
            &std::fs::read_to_string(repo_root().join(EAGLE)).unwrap(),
            EAGLE,
            &[Override::parse("engine.nextn_accepted=1.44").unwrap()],
        )
        .unwrap(),
        EAGLE,
        &Catalog::builtin().unwrap(),
        Some(43),
        &DirFiles(repo_root()),
    )
    .unwrap();
    let mut own = own;
    own.config.evaluation.uncertainty = None;
    assert_eq!(own.run().unwrap().json["mean_tpot_ms"].as_f64(), Some(tpot[1]));
}

#[test]
fn replays_are_the_same_prepared_once_or_per_thread() {
    let text = std::fs::read_to_string(repo_root().join(EAGLE)).unwrap();
    let root = parse_with_overrides(&text, EAGLE, &[]).unwrap();
    let catalog = Catalog::builtin().unwrap();
    let p = prepare(&root, EAGLE, &catalog, None, &DirFiles(repo_root())).unwrap();
    assert_eq!(further_replays(&p), 5);
    let once = variant(&p, 3).run_once().unwrap().json;
    let again = prepare(&root, EAGLE, &catalog, None, &DirFiles(repo_root())).unwrap();
    assert_eq!(variant(&again, 3).run_once().unwrap().json, once);
    assert!(variant(&p, 3).config.evaluation.uncertainty.is_none());
}

#[test]
fn what_a_band_cannot_be_is_refused_at_its_field() {
    for (set, field, what) in [
        ("evaluation.uncertainty.seeds=1", "evaluation.uncertainty.seeds", "between 2 and 64"),
        ("evaluation.uncertainty.seeds=65", "evaluation.uncertainty.seeds", "between 2 and 64"),
        ("evaluation.uncertainty={acceptance_rate_spread: 0.1}", "evaluation.uncertainty.seeds", "required"),
        (
            "evaluation.uncertainty.acceptance_rate_spread=0.6",
            "evaluation.uncertainty.acceptance_rate_spread",
            "0.5",
        ),
        (
            "evaluation.uncertainty.acceptance_rate_spread=0.1",
            "evaluation.uncertainty.acceptance_rate_spread",
            "engine.speculation is off",
        ),
        ("evaluation.uncertainty.runs=3", "evaluation.uncertainty.runs", "unknown key"),
    ] {
        let e = config_refusal(POISSON, &[set]);
        assert!(e.contains(field) && e.contains(what), "{set}: {e}");
    }
}
