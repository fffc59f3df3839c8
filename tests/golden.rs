//! Golden scenarios: each YAML under `tests/scenarios/` (and the shipped `data/scenarios/`)
//! is run and summarised as rounded, human-readable text compared with
//! `tests/snapshots/<name>.snap`. Rewrite snapshots with `SERVESIM_BLESS=1 cargo test -p
//! servesim_tests --test golden` and review the diff.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

use servesim_scenario::report::to_pretty_json;
use servesim_scenario::{predict, Prediction};
use servesim_tests::{predict_file, repo_root, DirFiles};

fn summary_text(path: &str, p: &Prediction) -> String {
    let s = &p.summary;
    let d = |name: &str, x: &servesim_core::metrics::Dist| {
        format!(
            "{name}: mean {:.3} p50 {:.3} p90 {:.3} p99 {:.3} max {:.3} (n={})\n",
            x.mean, x.median, x.p90, x.p99, x.max, x.count
        )
    };
    let extra = &p.json["servesim"];
    let mut out = format!(
        "scenario: {path}\nrequests: {} completed of {} ({} rejected)\nduration_ms: {:.3}\nthroughput: {:.4} req/s, {:.2} output tok/s\n",
        s.completed_requests, s.num_requests, extra["rejected_requests"], s.duration_ms, s.request_throughput_rps, s.output_throughput_tok_s
    );
    out += &d("ttft_ms", &s.ttft);
    out += &d("tpot_ms", &s.tpot);
    out += &d("itl_ms", &s.itl);
    out += &d("e2e_ms", &s.e2e_latency);
    out += &format!(
        "prefix_cache_reused_ratio: {:.4}\npreemptions: {}\ngpu_hours: {:.6}\nkv_blocks_per_rank: {}\n",
        s.prefix_cache_reused_ratio,
        s.num_preemptions,
        s.gpu_hours,
        extra["memory"]
            .as_object()
            .map(|m| m
                .iter()
                .map(|(role, v)| format!("{role}={}", v["kv_blocks_per_rank"]))
                .collect::<Vec<_>>()
                .join(" "))
            .unwrap_or_default()
    );
    if extra["deployment"]["mode"] == "disaggregated" {
        out += &format!("kv_transferred_tokens: {}\n", extra["kv_transfer"]["transferred_tokens"]);
    }
    let host = &extra["host_offload"];
    if host.is_object() {
        out += &format!(
            "host_offload: {} restores, {} blocks restored, {} written, {} evicted, {} dropped, mean wait {:.3} ms\n",
            host["restores"], host["restored_blocks"], host["written_blocks"], host["evicted_blocks"], host["dropped_blocks"],
            host["mean_restore_wait_ms"].as_f64().unwrap_or(0.0)
        );
    }
    let g3 = &extra["g3_offload"];
    if g3.is_object() {
        out += &format!(
            "g3_offload: {} reads, {} blocks read ({} across workers), {} of {} looked up found, {} written, {} evicted, {} dropped, {} cut short\n",
            g3["read_jobs"], g3["read_blocks"], g3["cross_worker_read_blocks"], g3["lookup_hits"], g3["lookup_probes"],
            g3["written_blocks"], g3["evicted_blocks"], g3["dropped_blocks"], g3["bypassed_restores"]
        );
        if g3["reads"] == "prefetch" {
            out += &format!(
                "g3_prefetch: {} ({} tokens a page), {} prefetches, {} cut short, {} not started, {} tokens to host memory\n",
                g3["prefetch_policy"].as_str().unwrap_or(""),
                g3["page_tokens"],
                g3["prefetches"],
                g3["prefetches_cut_short"],
                g3["prefetches_revoked"],
                g3["prefetched_tokens"]
            );
        }
    }
    for (role, m) in extra["memory"].as_object().into_iter().flatten() {
        let st = &m["recurrent_state"];
        if st.is_object() {
            out += &format!(
                "recurrent_state {role}: {} bytes ({}), {}, blocks {}, slots {}, reserved {} bytes, reuse {}\n",
                st["bytes_per_sequence"],
                st["ssm_dtype"].as_str().unwrap_or(""),
                st["kept_in"].as_str().unwrap_or(""),
                st["blocks_per_sequence"],
                st["slots"],
                st["reserved_bytes"],
                st["prefix_reuse"].as_str().unwrap_or("")
            );
        }
    }
    let ev = &extra["kv_eviction"];
    if ev.is_object() {
        out += &format!(
            "kv_eviction: {} ({}), forecast {} requests over {} blocks, {} ended, first-admission reuse {:.4}, {} prefill tokens, {} evicted tokens\n",
            ev["policy"].as_str().unwrap_or(""),
            ev["assumption"].as_str().unwrap_or(""),
            ev["forecast_requests"],
            ev["forecast_blocks"],
            ev["demand_ended_requests"],
            ev["first_admission_prefix_cache_reused_ratio"].as_f64().unwrap_or(0.0),
            ev["committed_prefill_tokens"],
            ev["evicted_tokens"]
        );
    }
    for pool in extra["planner"]["pools"].as_array().into_iter().flatten() {
        out += &format!(
            "planner {}: {} -> {} workers, peak {}, {} up, {} down, {:.3} worker-s\n",
            pool["role"].as_str().unwrap_or(""),
            pool["initial_workers"],
            pool["final_workers"],
            pool["peak_workers"],
            pool["scale_ups"],
            pool["scale_downs"],
            pool["worker_seconds"].as_f64().unwrap_or(0.0)
        );
    }
    let a = &extra["agentic"];
    if a.is_object() {
        let d = &a["play_duration_ms"];
        out += &format!(
            "agentic: {} plays, {} completed, play ms mean {:.3} p90 {:.3} max {:.3}\n",
            a["plays"],
            a["completed_plays"],
            d["mean"].as_f64().unwrap_or(0.0),
            d["p90"].as_f64().unwrap_or(0.0),
            d["max"].as_f64().unwrap_or(0.0)
        );
    }
    for (key, band) in extra["uncertainty"]["figures"].as_object().into_iter().flatten() {
        out += &format!(
            "band {key}: {:.4} - {:.4}\n",
            band["min"].as_f64().unwrap_or(0.0),
            band["max"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(g) = s.goodput {
        out += &format!(
            "goodput: {} requests, {:.4} req/s, {:.2} output tok/s\n",
            g.completed_requests, g.request_throughput_rps, g.output_throughput_tok_s
        );
    }
    out
}

fn check(rel: &str) {
    let root = repo_root();
    let p = predict_file(rel).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let got = summary_text(rel, &p);
    let name = Path::new(rel).file_stem().unwrap().to_string_lossy().to_string();
    let snap = root.join("tests/snapshots").join(format!("{name}.snap"));
    if std::env::var_os("SERVESIM_BLESS").is_some() {
        fs::write(&snap, &got).unwrap();
        return;
    }
    let want = fs::read_to_string(&snap)
        .unwrap_or_else(|_| panic!("missing snapshot {}; run with SERVESIM_BLESS=1", snap.display()));
    assert_eq!(got, want, "{rel} changed; review and re-bless with SERVESIM_BLESS=1");
}

#[test]
fn every_scenario_matches_its_snapshot() {
    let root = repo_root();
    let mut files = Vec::new();
    for dir in ["tests/scenarios", "data/scenarios"] {
        for e in fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yaml") {
                files.push(format!("{dir}/{}", p.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    files.sort();
    assert!(files.len() >= 8, "{files:?}");
    for f in files {
        check(&f);
    }
}

/// Scenarios whose full prediction.json is kept byte for byte in `tests/golden/`. The browser
/// test (`web/tests/web.rs`) runs the same scenarios in WebAssembly against the same files, so
/// native and wasm agree exactly for every engine and for P/D.
pub const BYTE_GOLDENS: &[(&str, &str)] = &[
    ("default", "data/scenarios/default.yaml"),
    ("sglang_default", "tests/scenarios/sglang_default.yaml"),
    ("trtllm_tp4_poisson", "tests/scenarios/trtllm_tp4_poisson.yaml"),
    ("pd_vllm", "tests/scenarios/pd_vllm.yaml"),
    ("pd_sglang_kv_aware", "tests/scenarios/pd_sglang_kv_aware.yaml"),
    ("spec_eagle_sglang", "tests/scenarios/spec_eagle_sglang.yaml"),
    ("vllm_host_offload", "tests/scenarios/vllm_host_offload.yaml"),
    ("trtllm_host_offload", "tests/scenarios/trtllm_host_offload.yaml"),
    ("sglang_hicache", "tests/scenarios/sglang_hicache.yaml"),
    ("sglang_hicache_storage", "tests/scenarios/sglang_hicache_storage.yaml"),
    ("vllm_g3_shared", "tests/scenarios/vllm_g3_shared.yaml"),
    ("pd_vllm_host_offload", "tests/scenarios/pd_vllm_host_offload.yaml"),
    ("vllm_host_offload_shared", "tests/scenarios/vllm_host_offload_shared.yaml"),
    ("vllm_belady_prompt_pool", "tests/scenarios/vllm_belady_prompt_pool.yaml"),
    ("hybrid_qwen35_vllm_sessions", "tests/scenarios/hybrid_qwen35_vllm_sessions.yaml"),
    ("planner_vllm_ramp", "tests/scenarios/planner_vllm_ramp.yaml"),
    ("agentic_coding_vllm", "tests/scenarios/agentic_coding_vllm.yaml"),
    ("agentic_coding_vllm_warmup", "tests/scenarios/agentic_coding_vllm_warmup.yaml"),
    ("uncertainty_vllm_poisson", "tests/scenarios/uncertainty_vllm_poisson.yaml"),
];

#[test]
fn full_predictions_are_byte_identical() {
    let root = repo_root();
    for (name, rel) in BYTE_GOLDENS {
        let text = fs::read_to_string(root.join(rel)).unwrap();
        let files = DirFiles(root.join(rel).parent().unwrap().to_path_buf());
        let p = predict(&text, name, &[], None, &files).unwrap();
        let got = to_pretty_json(&p.json);
        let path = root.join("tests/golden").join(format!("{name}.prediction.json"));
        if std::env::var_os("SERVESIM_BLESS").is_some() {
            fs::write(&path, &got).unwrap();
            continue;
        }
        assert_eq!(got, fs::read_to_string(&path).unwrap(), "{name}");
        // A second run in the same process gives the same bytes.
        let again = predict(&text, name, &[], None, &files).unwrap();
        assert_eq!(got, to_pretty_json(&again.json), "{name}: second run differs");
    }
}

/// Fast-forwarding stable decode batches changes nothing but the number of events: every
/// scenario gives the same report (all figures, time series, per-request records) with and
/// without it. Likewise leaving blocks only their own request can contain out of the prefix
/// index changes nothing at all.
#[test]
fn fast_forward_and_private_blocks_are_exact() {
    use servesim_scenario::catalog::Catalog;
    use servesim_scenario::report::to_jsonl;
    use servesim_scenario::scenario::{parse_with_overrides, prepare};
    let root = repo_root();
    let catalog = Catalog::builtin().unwrap();
    let mut checked = 0;
    let mut saved = (0u64, 0u64);
    for dir in ["tests/scenarios", "data/scenarios"] {
        let mut files: Vec<_> = fs::read_dir(root.join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for path in files.into_iter().filter(|p| p.extension().is_some_and(|x| x == "yaml")) {
            let text = fs::read_to_string(&path).unwrap();
            let name = path.display().to_string();
            let node = parse_with_overrides(&text, &name, &[]).unwrap();
            let files = servesim_tests::DirFiles(path.parent().unwrap().to_path_buf());
            let mut prepared = prepare(&node, &name, &catalog, None, &files).unwrap();
            let fast = prepared.run().unwrap();
            prepared.traffic.all_content_shared = true;
            let indexed = prepared.run().unwrap();
            assert!(
                to_pretty_json(&fast.json) == to_pretty_json(&indexed.json),
                "{name}: indexing every block changed the report"
            );
            assert_eq!(
                to_jsonl(&fast.requests),
                to_jsonl(&indexed.requests),
                "{name}: per-request records differ"
            );
            prepared.traffic.all_content_shared = false;
            prepared.fast_forward = false;
            let slow = prepared.run().unwrap();
            let strip = |p: &Prediction| {
                let mut v = p.json.clone();
                let events = v["servesim"]["events"].as_u64().unwrap();
                v["servesim"]["events"] = serde_json::Value::Null;
                // Lookup counts include step times a decode run computed ahead and then cut
                // short, so they differ; the step times themselves may not.
                for t in v["servesim"]["timing"].as_array_mut().unwrap() {
                    t["lookups"] = serde_json::Value::Null;
                    t["lookups_by_op"] = serde_json::Value::Null;
                }
                (to_pretty_json(&v), events)
            };
            let ((a, ea), (b, eb)) = (strip(&fast), strip(&slow));
            assert!(a == b, "{name}: fast-forward changed the report");
            assert_eq!(
                to_jsonl(&fast.requests),
                to_jsonl(&slow.requests),
                "{name}: per-request records differ"
            );
            saved.0 += ea;
            saved.1 += eb;
            checked += 1;
        }
    }
    assert!(checked >= 20);
    println!("fast-forward: {} events instead of {} over {checked} scenarios", saved.0, saved.1);
}
