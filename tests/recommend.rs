//! `servesim recommend` end to end: candidates are replayed, ranked and written as configs that
//! replay to the same numbers; `min_gpus` picks the fewest GPUs that meet the SLA.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use servesim_scenario::catalog::Catalog;
use servesim_scenario::recommend::{evaluate, finish, parse_spec, Candidate, Recommendation, Spec};
use servesim_scenario::scenario::parse_with_overrides;
use servesim_tests::{repo_root, DataOnly};

fn search_file(rel: &str) -> (Spec, Vec<Candidate>, Recommendation) {
    let text = std::fs::read_to_string(repo_root().join(rel)).unwrap();
    let catalog = Catalog::builtin().unwrap();
    let root = parse_with_overrides(&text, rel, &[]).unwrap();
    let spec = parse_spec(&root, rel, &catalog).unwrap();
    let cands: Vec<Candidate> =
        (0..spec.len()).map(|i| evaluate(&spec, i, rel, &catalog, &DataOnly)).collect();
    let stages = [servesim_scenario::recommend::StageReport {
        fidelity: servesim_scenario::recommend::Fidelity::Full,
        evaluated: cands.len(),
        feasible: cands.iter().filter(|c| c.status == "feasible").count(),
        kept: 0,
    }];
    let rec = finish(&spec, cands.clone(), "test", &stages);
    (spec, cands, rec)
}

#[test]
fn min_gpus_picks_the_smallest_count_that_meets_the_sla() {
    let (_, cands, rec) = search_file("tests/recommend/min_gpus_qwen3_8b_h100.yaml");
    assert_eq!(cands.len(), 8);
    // Independently: the smallest used_gpus among candidates whose means meet the SLA.
    let meets = |c: &Candidate| {
        let m = |k: &str| c.metrics[k].as_f64().unwrap();
        m("mean_ttft_ms") <= 400.0 && m("mean_tpot_ms") <= 15.0
    };
    let fewest = cands.iter().filter(|c| meets(c)).map(|c| c.used_gpus).min().unwrap();
    assert!(cands.iter().any(|c| !meets(c) && c.used_gpus < fewest), "the case must reject smaller fleets");
    let top = &rec.json["views"]["top_n"];
    let first = top[0].as_str().unwrap();
    let best =
        rec.json["candidates"].as_array().unwrap().iter().find(|c| c["candidate_id"] == first).unwrap();
    assert_eq!(best["used_gpus"].as_u64().unwrap(), u64::from(fewest));
    for c in rec.json["candidates"].as_array().unwrap() {
        if c["used_gpus"].as_u64().unwrap() < u64::from(fewest) {
            assert_eq!(c["status"], "infeasible");
            assert_eq!(c["reason_category"], "sla_constraint");
        }
    }
}

#[test]
fn recommended_configs_replay_to_the_same_metrics() {
    let (_, _, rec) = search_file("data/recommend/qwen3_32b_h200.yaml");
    assert!(!rec.yamls.is_empty());
    let front = rec.json["views"]["pareto_front"].as_array().unwrap();
    assert_eq!(front.len(), rec.yamls.len());
    // Along the front tok/s/user rises and tok/s/GPU falls.
    let cands = rec.json["candidates"].as_array().unwrap();
    let obj = |id: &serde_json::Value, k: &str| {
        cands.iter().find(|c| &c["candidate_id"] == id).unwrap()["objectives"][k].as_f64().unwrap()
    };
    for w in front.windows(2) {
        assert!(obj(&w[0], "throughput_per_user") <= obj(&w[1], "throughput_per_user"));
        assert!(obj(&w[0], "throughput_per_gpu") >= obj(&w[1], "throughput_per_gpu"));
    }
    for ((name, yaml), id) in rec.yamls.iter().zip(front) {
        let p = servesim_scenario::predict(yaml, name, &[], None, &DataOnly).unwrap();
        let c = cands.iter().find(|c| &c["candidate_id"] == id).unwrap();
        for (k, v) in c["metrics"].as_object().unwrap() {
            if let Some(direct) = p.json.get(k) {
                assert_eq!(direct, v, "{name} {k}");
            }
        }
        assert!(c["objectives"]["cost_per_million_output_tokens_usd"].as_f64().unwrap() > 0.0);
    }
    // CSV: a header and one line per candidate.
    assert_eq!(rec.csv.lines().count(), cands.len() + 1);
}

#[test]
fn infeasible_candidates_are_rejected_before_simulation_with_a_category() {
    let text = "engine: {model: meta-llama/Llama-3.1-70B-Instruct, hardware: h100_sxm, backend: vllm, workers: {aggregated: {parallelism: {tensor: {choices: [1, 4, 16]}}}}}\n\
                traffic: {source: {type: synthetic, input_tokens: 100, output_tokens: 10}, load: {type: concurrency, concurrency: 1}, stop: {requests: 2}}\n\
                optimization: {target: throughput, constraints: {max_candidate_gpus: 8}}";
    let catalog = Catalog::builtin().unwrap();
    let root = parse_with_overrides(text, "t.yaml", &[]).unwrap();
    let spec = parse_spec(&root, "t.yaml", &catalog).unwrap();
    let cands: Vec<Candidate> =
        (0..spec.len()).map(|i| evaluate(&spec, i, "t.yaml", &catalog, &DataOnly)).collect();
    // 70B in bf16 does not fit one 80 GB GPU; TP16 exceeds the 8-GPU budget.
    assert_eq!((cands[0].status, cands[0].reason_category), ("infeasible", Some("kv_capacity")));
    assert_eq!(cands[1].status, "feasible");
    assert_eq!((cands[2].status, cands[2].reason_category), ("infeasible", Some("gpu_budget")));
    assert!(
        cands[0].metrics.is_empty() && cands[2].metrics.is_empty(),
        "rejected candidates are never simulated"
    );
}

/// Runs a search on two threads.
fn run_search(
    spec: &Spec,
    rel: &str,
    catalog: &Catalog,
) -> (Vec<Candidate>, Vec<servesim_scenario::recommend::StageReport>) {
    let mut run = |idx: &[usize], fid: servesim_scenario::recommend::Fidelity| {
        servesim_scenario::recommend::evaluate_parallel(
            spec,
            idx,
            fid,
            rel,
            catalog,
            &DataOnly,
            2,
            &|_, _| {},
        )
    };
    servesim_scenario::recommend::search(spec, &mut run)
}

#[test]
fn a_staged_search_ranks_the_same_top_configs_as_replaying_every_candidate() {
    use servesim_scenario::recommend::{Fidelity, Strategy};
    let rel = "tests/recommend/staged_qwen3_32b_h200.yaml";
    let text = std::fs::read_to_string(repo_root().join(rel)).unwrap();
    let catalog = Catalog::builtin().unwrap();
    let root = parse_with_overrides(&text, rel, &[]).unwrap();
    let staged = parse_spec(&root, rel, &catalog).unwrap();
    assert_eq!(staged.len(), 135);
    assert_eq!(staged.strategy, Strategy::Staged, "above 64 candidates the default is staged");
    let (cands, stages) = run_search(&staged, rel, &catalog);
    assert_eq!(cands.len(), 135);
    let names: Vec<&str> = stages.iter().map(|s| s.fidelity.name()).collect();
    // A closed loop goes from the screen straight to full replays.
    assert_eq!(names, ["static estimate", "full replay"]);
    assert_eq!(stages[0].evaluated, 135);
    assert!(stages[1].evaluated <= 135 / 3, "{stages:?}");
    // Every ranked candidate was replayed in full; every pruned one says where it was dropped.
    for c in &cands {
        match c.status {
            "feasible" => assert_eq!(c.fidelity, Fidelity::Full),
            "pruned" => assert!(c.reason.as_deref().unwrap().contains("after the")),
            _ => {}
        }
    }
    let staged_rec = finish(&staged, cands, "t", &stages);
    let mut exhaustive = staged.clone();
    exhaustive.strategy = Strategy::Exhaustive;
    let (all, all_stages) = run_search(&exhaustive, rel, &catalog);
    let full_rec = finish(&exhaustive, all, "t", &all_stages);
    assert_eq!(staged_rec.json["views"]["top_n"], full_rec.json["views"]["top_n"]);
    assert_eq!(staged_rec.json["provenance"]["strategy"], "staged");
}

#[test]
fn an_unknown_search_algorithm_is_a_clear_error() {
    let catalog = Catalog::builtin().unwrap();
    let root = parse_with_overrides("optimizer: {algorithm: annealing}\n", "t.yaml", &[]).unwrap();
    let e = parse_spec(&root, "t.yaml", &catalog).unwrap_err().to_string();
    assert!(e.contains("optimizer.algorithm") && e.contains("staged"), "{e}");
}

#[test]
fn an_open_loop_staged_search_screens_with_short_replays_and_keeps_the_answer() {
    use servesim_scenario::recommend::Strategy;
    let rel = "tests/recommend/min_gpus_qwen3_8b_h100.yaml";
    let text = std::fs::read_to_string(repo_root().join(rel)).unwrap();
    let catalog = Catalog::builtin().unwrap();
    let overrides = [servesim_scenario::Override::parse("optimizer.algorithm=staged").unwrap()];
    let root = parse_with_overrides(&text, rel, &overrides).unwrap();
    let spec = parse_spec(&root, rel, &catalog).unwrap();
    assert_eq!(spec.strategy, Strategy::Staged);
    let (cands, stages) = run_search(&spec, rel, &catalog);
    let names: Vec<&str> = stages.iter().map(|s| s.fidelity.name()).collect();
    assert_eq!(names, ["static estimate", "short replay", "full replay"]);
    let staged = finish(&spec, cands, "t", &stages);
    let (_, _, exhaustive) = search_file(rel);
    assert_eq!(staged.json["views"]["top_n"][0], exhaustive.json["views"]["top_n"][0]);
}

#[test]
fn a_search_driven_by_messages_in_any_order_equals_the_threaded_search() {
    use servesim_scenario::recommend::{evaluate_at, Search};
    // What the page does: candidates cross to Web Workers and back as JSON, and results
    // arrive in whatever order the workers finish.
    let rel = "tests/recommend/min_gpus_qwen3_8b_h100.yaml";
    let text = std::fs::read_to_string(repo_root().join(rel)).unwrap();
    let catalog = Catalog::builtin().unwrap();
    let overrides = [servesim_scenario::Override::parse("optimizer.algorithm=staged").unwrap()];
    let root = parse_with_overrides(&text, rel, &overrides).unwrap();
    let spec = parse_spec(&root, rel, &catalog).unwrap();
    let mut s = Search::new(&spec);
    while let Some((indices, fidelity)) = s.pending() {
        let mut wire: Vec<String> = indices
            .iter()
            .map(|i| evaluate_at(&spec, *i, rel, &catalog, &DataOnly, fidelity).to_wire().to_string())
            .collect();
        wire.reverse();
        let back: Vec<Candidate> = wire
            .iter()
            .map(|t| Candidate::from_wire(&spec, &serde_json::from_str(t).unwrap()).unwrap())
            .collect();
        s.submit(&spec, back);
    }
    let (cands, stages) = s.into_results();
    let (threaded, threaded_stages) = run_search(&spec, rel, &catalog);
    assert_eq!(stages, threaded_stages);
    for (a, b) in cands.iter().zip(&threaded) {
        assert_eq!(a.metrics, b.metrics, "candidate {}", a.index);
        assert_eq!(a.objectives, b.objectives, "candidate {}", a.index);
        assert_eq!(a.score, b.score, "candidate {}", a.index);
    }
    assert_eq!(cands, threaded);
    // A message naming an unknown status is refused, not guessed.
    let mut bad = threaded[0].to_wire();
    bad["status"] = serde_json::json!("splendid");
    assert!(Candidate::from_wire(&spec, &bad).unwrap_err().contains("unknown status"));
}
