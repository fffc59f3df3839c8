//! Agentic dependency-graph replay, end to end: every request waits for what the trace says it
//! waits for, plays are reported, and what cannot be replayed is refused with its place named.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use servesim_data::trace::{parse, TraceFormat};
use servesim_tests::{config_refusal, predict_file_with, repo_root};

const SCENARIO: &str = "tests/scenarios/agentic_coding_vllm.yaml";
const TRACE: &str = "tests/fixtures/traces/agentic_coding.jsonl";

fn trace() -> servesim_core::traffic::Trace {
    let bytes = std::fs::read(repo_root().join(TRACE)).unwrap();
    parse(&bytes, TRACE, TraceFormat::AgenticMooncake, 512).unwrap().trace
}

/// Checks, for every request of a run of `copies` copies of the trace at `speedup`, that it
/// arrived exactly its delay (over the speedup) after the last of its dependencies' last
/// tokens, and a root at its timestamp; returns the number of requests checked.
fn check_order(p: &servesim_scenario::Prediction, copies: usize, speedup: f64) -> usize {
    check_order_of(&trace(), p, copies, speedup, 0.0)
}

/// [`check_order`] for a run of trace `t` whose trace time starts at `start_ms` (after a
/// warmup, whose requests are left out).
fn check_order_of(
    t: &servesim_core::traffic::Trace,
    p: &servesim_scenario::Prediction,
    copies: usize,
    speedup: f64,
    start_ms: f64,
) -> usize {
    let keys = t.row_keys();
    let sessions = keys.iter().map(|k| k.0).max().unwrap() + 1;
    // Row of (file copy, key): a later file's sessions come after the earlier files'.
    let mut rec: BTreeMap<(usize, usize), (f64, f64)> = BTreeMap::new();
    for r in p.requests.iter().filter(|r| !r.warmup) {
        let s: u32 = r.session_id.as_deref().unwrap().strip_prefix("session_").unwrap().parse().unwrap();
        let (copy, s) = ((s / sessions) as usize, s % sessions);
        let row = keys.iter().position(|k| *k == (s, r.turn_index.unwrap())).unwrap();
        assert_eq!(r.request_id.as_deref(), Some(t.request_ids[row].as_str()), "{}", r.uuid);
        rec.insert((copy, row), (r.arrival_time_ms, r.last_token_ms.expect("every request completes")));
    }
    assert_eq!(rec.len(), copies * t.rows.len(), "every row is sent once");
    for ((copy, row), (arrival, _)) in &rec {
        let r = &t.rows[*row];
        let expected = if r.wait_for.is_empty() {
            start_ms + r.timestamp.as_ms_f64() / speedup
        } else {
            let last = r.wait_for.iter().map(|d| rec[&(*copy, *d as usize)].1).fold(0.0, f64::max);
            last + r.delay.unwrap().as_ms_f64() / speedup
        };
        assert!(
            (arrival - expected).abs() < 1e-3,
            "row {row} of copy {copy}: arrived {arrival} ms, expected {expected} ms"
        );
    }
    rec.len()
}

#[test]
fn every_request_is_sent_when_what_it_waits_for_has_completed() {
    let p = predict_file_with(SCENARIO, &[]).unwrap();
    assert_eq!(check_order(&p, 1, 1.0), 340);
    let a = &p.json["servesim"]["agentic"];
    assert_eq!((a["plays"].as_u64(), a["completed_plays"].as_u64()), (Some(12), Some(12)));
    assert_eq!((a["requests"].as_u64(), a["dependent_requests"].as_u64()), (Some(340), Some(328)));
    assert_eq!(a["longest_chain_requests"].as_u64(), Some(30));
    // A play's longest chain waits its tool calls and client delays in turn: no play can be
    // quicker than the sum along its chain, and the longest play is longer than any chain's.
    let t = trace();
    let mut chain_wait = vec![0.0f64; t.rows.len()];
    let mut order: Vec<usize> = (0..t.rows.len()).collect();
    // Rows in the fixture wait only for earlier rows, so file order is a topological order.
    order.sort_unstable();
    for r in order {
        let row = &t.rows[r];
        assert!(row.wait_for.iter().all(|d| (*d as usize) < r));
        let before = row.wait_for.iter().map(|d| chain_wait[*d as usize]).fold(0.0, f64::max);
        chain_wait[r] = before + row.delay.map_or(0.0, |d| d.as_ms_f64());
    }
    let longest_wait = chain_wait.iter().copied().fold(0.0, f64::max);
    assert!(a["play_duration_ms"]["max"].as_f64().unwrap() > longest_wait);
    let summary = servesim_scenario::report::summary_table(&p);
    assert!(summary.contains("agentic plays: 12 (all completed)"), "{summary}");
}

#[test]
fn speedup_compresses_roots_and_waits_and_files_keep_their_own_graphs() {
    let p = predict_file_with(SCENARIO, &["traffic.load.speedup=2"]).unwrap();
    check_order(&p, 1, 2.0);
    let slow = predict_file_with(SCENARIO, &[]).unwrap();
    let mean = |p: &servesim_scenario::Prediction| {
        p.json["servesim"]["agentic"]["play_duration_ms"]["mean"].as_f64().unwrap()
    };
    assert!(mean(&p) < mean(&slow), "{} vs {}", mean(&p), mean(&slow));
    // The same file twice: two graphs side by side, each row waiting for its own file's rows.
    let two = format!("traffic.source.paths=[{0}, {0}]", "../fixtures/traces/agentic_coding.jsonl");
    let p = predict_file_with(SCENARIO, &[two.as_str()]).unwrap();
    assert_eq!(check_order(&p, 2, 1.0), 680);
    assert_eq!(p.json["servesim"]["agentic"]["plays"].as_u64(), Some(24));
}

#[test]
fn a_request_limit_stops_the_graph_without_waiting_for_rows_never_sent() {
    let p = predict_file_with(SCENARIO, &["traffic.stop.requests=40"]).unwrap();
    assert_eq!(p.json["num_requests"].as_u64(), Some(40));
    assert_eq!(p.json["completed_requests"].as_u64(), Some(40));
    let a = &p.json["servesim"]["agentic"];
    assert!(a["completed_plays"].as_u64().unwrap() < a["started_plays"].as_u64().unwrap());
}

#[test]
fn what_an_agentic_replay_cannot_do_is_refused_with_its_place() {
    let e = config_refusal(SCENARIO, &["traffic.load={type: concurrency, concurrency: 4}"]);
    assert!(e.contains("traffic.load.type") && e.contains("use load type trace_timestamps"), "{e}");
    // Read as plain Mooncake, the dependencies are refused, naming the file and line.
    let e = config_refusal(SCENARIO, &["traffic.source.format=mooncake"]);
    assert!(e.contains("traffic.source.paths[0]") && e.contains("agentic_coding.jsonl:2:"), "{e}");
    assert!(e.contains("format agentic_mooncake"), "{e}");
    // Each setting refused, with what its message names.
    for (set, names) in [
        ("traffic.load.agentic_warmup=true", &["traffic.load.agentic_warmup", "agentic_snapshot"][..]),
        ("traffic.load.agentic_warmup=3", &["traffic.load.agentic_warmup"]),
        ("traffic.load.agentic_profile={duration_seconds: 60}", &["traffic.load.agentic_profile"]),
        ("traffic.load.agentic_snapshot={}", &["traffic.load.agentic_snapshot.seed", "required"]),
        ("traffic.load.agentic_snapshot={seed: 3, at: 0.5}", &["traffic.load.agentic_snapshot.at"]),
        ("traffic.load.agentic_lanes=0", &["traffic.load.agentic_lanes"]),
    ] {
        let e = config_refusal(SCENARIO, &[set]);
        assert!(names.iter().all(|n| e.contains(n)), "{set}: {e}");
    }
    // Lanes hold plays: a plain trace has none.
    let e = config_refusal(
        "tests/scenarios/trace_azure_conv.yaml",
        &["traffic.load.agentic_lanes=2", "traffic.stop.requests=10"],
    );
    assert!(e.contains("traffic.load.agentic_lanes") && e.contains("agentic_mooncake"), "{e}");
    let e = config_refusal(
        "tests/scenarios/trace_azure_conv.yaml",
        &["traffic.load.agentic_snapshot={seed: 1}", "traffic.stop.requests=10"],
    );
    assert!(e.contains("traffic.load.agentic_snapshot") && e.contains("agentic_mooncake"), "{e}");
}

#[test]
fn aisimulate_defaults_written_out_change_nothing() {
    let plain = predict_file_with(SCENARIO, &[]).unwrap();
    let explicit = predict_file_with(
        SCENARIO,
        &[
            "traffic.load.agentic_snapshot=null",
            "traffic.load.agentic_warmup=false",
            "traffic.load.agentic_profile=null",
        ],
    )
    .unwrap();
    assert_eq!(
        servesim_scenario::report::to_pretty_json(&explicit.json),
        servesim_scenario::report::to_pretty_json(&plain.json)
    );
}

#[test]
fn a_seeded_snapshot_replays_each_play_from_its_cut() {
    const SNAPSHOT: &str = "tests/scenarios/agentic_coding_vllm_snapshot.yaml";
    let full = predict_file_with(SCENARIO, &[]).unwrap();
    let p = predict_file_with(SNAPSHOT, &[]).unwrap();
    let cut = trace().snapshot(7, 0);
    let s = cut.snapshot.clone().unwrap();
    // Every kept request still waits for what it waits for after the cut.
    let sent = check_order_of(&cut, &p, 1, 1.0, 0.0);
    let j = &p.json["servesim"]["agentic"]["snapshot"];
    assert_eq!(j["seed"].as_u64(), Some(7));
    assert_eq!(j["plays"].as_u64(), Some(12));
    assert_eq!(j["cut_plays"].as_u64(), Some(12), "every play of the fixture spans time");
    let history = j["history_requests"].as_u64().unwrap() as usize;
    assert_eq!(sent + history, 340);
    assert_eq!(sent, s.replayed_requests as usize);
    let f = j["mean_cut_fraction"].as_f64().unwrap();
    assert!((0.25..=0.75).contains(&f), "{f}");
    // A play's later requests carry longer histories, and the cut leaves the cache cold for
    // the conversation each first kept request continues.
    let mean_input = |p: &servesim_scenario::Prediction| {
        p.json["total_input_tokens"].as_f64().unwrap() / p.json["completed_requests"].as_f64().unwrap()
    };
    assert!(mean_input(&p) > mean_input(&full), "{} vs {}", mean_input(&p), mean_input(&full));
    let reuse = |p: &servesim_scenario::Prediction| p.json["prefix_cache_reused_ratio"].as_f64().unwrap();
    assert!(reuse(&p) < reuse(&full), "{} vs {}", reuse(&p), reuse(&full));
    let summary = servesim_scenario::report::summary_table(&p);
    assert!(summary.contains("snapshot (seed 7): 12 of 12 plays cut"), "{summary}");
    // One seed, one run; another seed cuts elsewhere.
    let again = predict_file_with(SNAPSHOT, &[]).unwrap();
    assert_eq!(
        servesim_scenario::report::to_pretty_json(&again.json),
        servesim_scenario::report::to_pretty_json(&p.json)
    );
    let other = predict_file_with(SNAPSHOT, &["traffic.load.agentic_snapshot.seed=8"]).unwrap();
    assert_ne!(
        other.json["servesim"]["agentic"]["snapshot"]["history_requests"].as_u64(),
        Some(history as u64)
    );
    // In lanes, the plays that take them at the start are cut, as AgentX cuts each lane; the
    // plays that wait for a lane start from their beginning.
    let four = predict_file_with(SNAPSHOT, &["traffic.load.agentic_lanes=4"]).unwrap();
    let j = &four.json["servesim"]["agentic"]["snapshot"];
    assert_eq!(j["cut_plays"].as_u64(), Some(4));
    let cut4 = trace().snapshot(7, 4);
    assert_eq!(check_order_in_lanes(&cut4, &four), cut4.rows.len());
    assert!(cut4.rows.len() > sent);
}

#[test]
fn lanes_hold_plays_apart_and_as_many_lanes_as_plays_change_nothing() {
    let free = predict_file_with(SCENARIO, &[]).unwrap();
    let wide = predict_file_with(SCENARIO, &["traffic.load.agentic_lanes=12"]).unwrap();
    assert_eq!(
        servesim_scenario::report::to_pretty_json(&wide.json),
        servesim_scenario::report::to_pretty_json(&free.json),
        "each play of the fixture has one root, so twelve lanes are no limit"
    );
    for lanes in [1usize, 3] {
        let p = predict_file_with(SCENARIO, &[&format!("traffic.load.agentic_lanes={lanes}")]).unwrap();
        let t = trace();
        let (plays, keys) = (t.plays(), t.row_keys());
        // Per play: first arrival and last token.
        let mut span: BTreeMap<u32, (f64, f64)> = BTreeMap::new();
        for r in p.requests.iter() {
            let s: u32 = r.session_id.as_deref().unwrap().strip_prefix("session_").unwrap().parse().unwrap();
            let row = keys.iter().position(|k| *k == (s, r.turn_index.unwrap())).unwrap();
            let e = span.entry(plays[row]).or_insert((f64::INFINITY, 0.0));
            e.0 = e.0.min(r.arrival_time_ms);
            e.1 = e.1.max(r.last_token_ms.unwrap());
        }
        assert_eq!(span.len(), 12);
        // At no play's start are `lanes` others under way.
        for (a, (start, _)) in &span {
            let running = span.iter().filter(|(b, (s, e))| b != &a && s <= start && e > start).count();
            assert!(
                running < lanes,
                "{lanes} lanes: play {a} starts at {start} ms with {running} others running"
            );
        }
        assert!(p.json["duration_ms"].as_f64().unwrap() > free.json["duration_ms"].as_f64().unwrap());
    }
}

#[test]
fn the_order_holds_on_sglang_and_across_a_disaggregated_handover() {
    let p = predict_file_with("tests/scenarios/agentic_coding_sglang.yaml", &[]).unwrap();
    assert_eq!(check_order(&p, 1, 8.0), 340);
    let pool = &p.json["servesim"]["planner"]["pools"][0];
    assert!(pool["scale_ups"].as_u64().unwrap() >= 1, "the planner grows the pool under the plays");
    let p = predict_file_with("tests/scenarios/agentic_coding_pd_trtllm.yaml", &[]).unwrap();
    assert_eq!(check_order(&p, 1, 1.0), 340);
    assert!(p.requests.iter().all(|r| r.prefill_worker_idx.is_some()), "every request went through prefill");
}

/// Behind a GPU pool too small for the live trajectories, a host tier on each replica and a
/// storage tier both replicas share keep the histories the pool evicts: each play keeps its
/// order, more of its prompts are restored instead of prefilled again (a host tier alone
/// already helps; storage adds what the host tier evicted and what the other replica wrote),
/// and the slowest first tokens come sooner.
#[test]
fn kv_tiers_keep_the_histories_an_agentic_replay_evicts() {
    const TIERS: &str = "tests/scenarios/agentic_coding_vllm_kv_tiers.yaml";
    let kv = |tiers: &str| {
        format!("engine.workers.aggregated.kv_cache={{capacity: {{type: fixed, blocks: 600}}{tiers}}}")
    };
    let with = predict_file_with(TIERS, &[]).unwrap();
    let host = predict_file_with(TIERS, &[kv(", host_offload: {size_gib: 32}").as_str()]).unwrap();
    let none = predict_file_with(TIERS, &[kv("").as_str()]).unwrap();
    for p in [&with, &host, &none] {
        assert_eq!(check_order(p, 1, 1.0), 340);
    }
    // Reuse rises from no tiers to the host tier to both; p99 TTFT falls with either.
    for (figure, rises) in [("/prefix_cache_reused_ratio", true), ("/p99_ttft_ms", false)] {
        let [a, b, c] = [&none, &host, &with].map(|p| p.json.pointer(figure).unwrap().as_f64().unwrap());
        let ordered = if rises { a < b && b < c } else { a > b && a > c };
        assert!(ordered, "{figure}: {a} {b} {c}");
    }
    let restores = |p: &servesim_scenario::Prediction| {
        p.json["servesim"]["host_offload"]["restored_blocks"].as_u64().unwrap()
    };
    assert!(restores(&host) > 0 && restores(&with) > 0);
    assert!(none.json["servesim"]["host_offload"].is_null());
    let g3 = &with.json["servesim"]["g3_offload"];
    assert!(
        g3["read_blocks"].as_u64().unwrap() > 0 && g3["cross_worker_read_blocks"].as_u64().unwrap() > 0,
        "{g3}"
    );
}

/// An agentic replay of `file` with and without its host tier: both keep every play's order,
/// and the tier (written as `writes` says) raises reuse and lowers p99 TTFT.
fn assert_host_tier_keeps_histories(file: &str, writes: &str) {
    let host = predict_file_with(file, &[]).unwrap();
    let none = predict_file_with(file, &["engine.workers.aggregated.kv_cache.host_offload=null"]).unwrap();
    for p in [&host, &none] {
        assert_eq!(check_order(p, 1, 1.0), 340);
    }
    for (figure, rises) in [("/prefix_cache_reused_ratio", true), ("/p99_ttft_ms", false)] {
        let [a, b] = [&none, &host].map(|p| p.json.pointer(figure).unwrap().as_f64().unwrap());
        assert!(if rises { a < b } else { a > b }, "{figure}: {a} {b}");
    }
    let tier = &host.json["servesim"]["host_offload"];
    assert_eq!(tier["writes"], writes);
    assert!(tier["restored_tokens"].as_u64().unwrap() > 0, "{tier}");
}

#[test]
fn tensorrt_llm_host_offload_keeps_the_histories_an_agentic_replay_evicts() {
    assert_host_tier_keeps_histories(
        "tests/scenarios/agentic_coding_trtllm_host_offload.yaml",
        "on_eviction",
    );
}

#[test]
fn sglang_hicache_keeps_the_histories_an_agentic_replay_evicts() {
    assert_host_tier_keeps_histories("tests/scenarios/agentic_coding_sglang_hicache.yaml", "write_through");
}

/// EAGLE drafts on every engine keep each play's order (a request is sent only when what it
/// waits for has completed), and by bringing the outputs sooner they send the waiting
/// requests sooner: tokens come at under 60% of the plain replay's TPOT and the plays end
/// earlier.
#[test]
fn speculative_decoding_keeps_the_order_and_shortens_the_plays() {
    for be in ["vllm", "sglang", "trtllm"] {
        let spec =
            predict_file_with(&format!("tests/scenarios/agentic_coding_{be}_eagle.yaml"), &[]).unwrap();
        assert_eq!(check_order(&spec, 1, 1.0), 340, "{be}");
        let plain = predict_file_with(SCENARIO, &[format!("engine.backend={be}").as_str()]).unwrap();
        let tpot = |p: &servesim_scenario::Prediction| p.json["mean_tpot_ms"].as_f64().unwrap();
        assert!(tpot(&spec) < 0.6 * tpot(&plain), "{be}: {} vs {}", tpot(&spec), tpot(&plain));
        let play = |p: &servesim_scenario::Prediction| {
            p.json["servesim"]["agentic"]["play_duration_ms"]["mean"].as_f64().unwrap()
        };
        assert!(play(&spec) < play(&plain), "{be}: {} vs {}", play(&spec), play(&plain));
    }
}

#[test]
fn a_warmup_primes_each_conversation_before_the_snapshot_is_replayed() {
    const SNAPSHOT: &str = "tests/scenarios/agentic_coding_vllm_snapshot.yaml";
    let cold = predict_file_with(SNAPSHOT, &[]).unwrap();
    let warm = predict_file_with("tests/scenarios/agentic_coding_vllm_warmup.yaml", &[]).unwrap();
    let cut = trace().snapshot(7, 0);
    let s = cut.snapshot.clone().unwrap();
    let j = &warm.json["servesim"]["agentic"]["snapshot"];
    let primers = j["warmup_primers"].as_u64().unwrap();
    assert_eq!(primers, s.primers.len() as u64);
    assert!(primers >= 12, "every play's conversations before the cut: {primers}");
    // The primers run first and apart: every one is done before the replay's first request.
    let start = j["replay_start_ms"].as_f64().unwrap();
    let primed: Vec<_> = warm.requests.iter().filter(|r| r.warmup).collect();
    assert_eq!(primed.len() as u64, primers);
    assert!(primed.iter().all(|r| r.arrival_time_ms == 0.0 && r.output_length == 1));
    let last_primer = primed.iter().map(|r| r.last_token_ms.unwrap()).fold(0.0, f64::max);
    assert!(start > 0.0 && (start - last_primer).abs() < 1e-6, "{start} vs {last_primer}");
    // The replay keeps its order, in trace time from the barrier.
    assert_eq!(check_order_of(&cut, &warm, 1, 1.0, start), s.replayed_requests as usize);
    // Primers are not measured: the same requests are counted, over the replay's span.
    assert_eq!(warm.json["num_requests"], cold.json["num_requests"]);
    assert_eq!(warm.json["total_input_tokens"], cold.json["total_input_tokens"]);
    let last = warm.requests.iter().filter_map(|r| r.last_token_ms).fold(0.0, f64::max);
    assert!((warm.json["duration_ms"].as_f64().unwrap() - (last - start)).abs() < 1e-6);
    // The replay finds each conversation's history cached: more reuse, faster first tokens.
    let f = |p: &servesim_scenario::Prediction, k: &str| p.json[k].as_f64().unwrap();
    assert!(
        f(&warm, "prefix_cache_reused_ratio") > f(&cold, "prefix_cache_reused_ratio"),
        "{} vs {}",
        f(&warm, "prefix_cache_reused_ratio"),
        f(&cold, "prefix_cache_reused_ratio")
    );
    assert!(f(&warm, "mean_ttft_ms") < f(&cold, "mean_ttft_ms"));
    let summary = servesim_scenario::report::summary_table(&warm);
    assert!(summary.contains(&format!("warmup: {primers} one-token primers")), "{summary}");
}

/// The requests of a run of `t` in lanes, each checked to wait for what it waits for (a
/// root's time depends on the lanes, so only dependents are checked); their number.
fn check_order_in_lanes(t: &servesim_core::traffic::Trace, p: &servesim_scenario::Prediction) -> usize {
    let keys = t.row_keys();
    let mut rec: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
    for r in p.requests.iter().filter(|r| !r.warmup) {
        let s: u32 = r.session_id.as_deref().unwrap().strip_prefix("session_").unwrap().parse().unwrap();
        let row = keys.iter().position(|k| *k == (s, r.turn_index.unwrap())).unwrap();
        rec.insert(row, (r.arrival_time_ms, r.last_token_ms.unwrap()));
    }
    for (row, (arrival, _)) in &rec {
        let r = &t.rows[*row];
        if r.wait_for.is_empty() {
            continue;
        }
        let last = r.wait_for.iter().map(|d| rec[&(*d as usize)].1).fold(0.0, f64::max);
        assert!((arrival - (last + r.delay.unwrap().as_ms_f64())).abs() < 1e-3, "row {row}");
    }
    rec.len()
}

#[test]
fn weka_conversations_replay_as_plays_of_requests_each_after_the_one_before() {
    const WEKA: &str = "tests/scenarios/weka_coding_vllm.yaml";
    let bytes = std::fs::read(repo_root().join("tests/fixtures/traces/weka_coding.jsonl")).unwrap();
    let t = parse(&bytes, "weka_coding.jsonl", TraceFormat::Weka, 64).unwrap().trace;
    let p = predict_file_with(WEKA, &[]).unwrap();
    assert_eq!(check_order_of(&t, &p, 1, 1.0, 0.0), 186);
    let a = &p.json["servesim"]["agentic"];
    assert_eq!((a["plays"].as_u64(), a["completed_plays"].as_u64()), (Some(8), Some(8)));
    assert_eq!((a["dependent_requests"].as_u64(), a["joins"].as_u64()), (Some(178), Some(24)));
    assert_eq!(a["longest_chain_requests"].as_u64(), Some(33));
    // Requests name their conversation (a subagent's under its parent's) and place in it.
    assert!(p.requests.iter().any(|r| r.request_id.as_deref() == Some("conv03/0")));
    let sub = p
        .requests
        .iter()
        .filter(|r| r.request_id.as_deref().is_some_and(|n| n.contains("/sa:agent_")))
        .count();
    assert_eq!(sub, 186 - t.request_ids.iter().filter(|n| !n.contains("/sa:")).count());
    assert!(sub > 50, "{sub} subagent requests");
    // A subagent waits for its parent's request and its parent's next request for it: every
    // join is a parent request after a subagent that was not launched in the background.
    let joins: Vec<&servesim_core::traffic::TraceRow> =
        t.rows.iter().filter(|r| r.wait_for.len() > 1).collect();
    assert_eq!(joins.len(), 24);
    // A conversation's history is reused from one request to the next; none across them.
    assert!(p.json["prefix_cache_reused_ratio"].as_f64().unwrap() > 0.8);
    // Snapshots, warmup and lanes work on Weka plays as on agentic Mooncake ones.
    let w = predict_file_with(
        WEKA,
        &[
            "traffic.load.agentic_snapshot={seed: 2}",
            "traffic.load.agentic_warmup=true",
            "traffic.load.agentic_lanes=3",
        ],
    )
    .unwrap();
    let s = &w.json["servesim"]["agentic"]["snapshot"];
    assert_eq!(s["cut_plays"].as_u64(), Some(3));
    assert!(s["warmup_primers"].as_u64().unwrap() >= 3, "a primer for each conversation the cuts cross");
    let cut = t.snapshot(2, 3);
    assert_eq!(check_order_in_lanes(&cut, &w), cut.rows.len());
    // The file's block size is its own; a config that sets another is told so.
    let e = config_refusal(WEKA, &["traffic.source.block_size=512"]);
    assert!(e.contains("traffic.source.paths[0]") && e.contains("blocks of 64 tokens"), "{e}");
    let e = config_refusal(WEKA, &["traffic.load={type: poisson, requests_per_second: 2}"]);
    assert!(e.contains("traffic.load.type") && e.contains("trace_timestamps"), "{e}");
}
