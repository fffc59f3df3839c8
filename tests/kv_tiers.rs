//! The storage KV tier (G3) behind host memory, end to end: it keeps what the host tiers lose,
//! a shared store serves every worker and a local one only its own, the KV-aware router
//! credits what it holds, and a host tier too small for a history cuts restores short rather
//! than stalling.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use servesim_tests::predict_file_with;

const SHARED: &str = "tests/scenarios/vllm_g3_shared.yaml";
const LOCAL: &str = "tests/scenarios/vllm_g3_local_kv_router.yaml";

fn run(rel: &str, sets: &[&str]) -> servesim_scenario::Prediction {
    predict_file_with(rel, sets).unwrap()
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn a_shared_store_restores_histories_host_memory_lost_on_either_worker() {
    let with = run(SHARED, &[]);
    let without = run(SHARED, &["engine.workers.aggregated.kv_cache.g3_offload=null"]);
    assert!(without.json["servesim"]["g3_offload"].is_null());
    let g3 = &with.json["servesim"]["g3_offload"];
    assert_eq!(g3["scope"], "cluster_shared");
    // Both runs complete everything; the store turns recomputation into reads.
    assert_eq!(with.summary.completed_requests, without.summary.completed_requests);
    assert!(
        with.summary.prefix_cache_reused_ratio > without.summary.prefix_cache_reused_ratio + 0.3,
        "{} vs {}",
        with.summary.prefix_cache_reused_ratio,
        without.summary.prefix_cache_reused_ratio
    );
    assert!(with.summary.ttft.mean < 0.7 * without.summary.ttft.mean);
    // Round robin sends turns away from where they were computed: many reads cross workers.
    let read = n(g3, "read_blocks");
    assert!(n(g3, "cross_worker_read_blocks") * 4 > read, "{g3}");
    // What storage reads goes on to GPU memory through the host tier.
    let host = &with.json["servesim"]["host_offload"];
    assert!(read <= n(host, "restored_blocks"));
    assert!(n(g3, "lookup_hits") <= n(g3, "lookup_probes"));
    assert_eq!(n(g3, "read_tokens"), read * 64);
    // One store: capacity counted once, never exceeded.
    assert_eq!(n(g3, "capacity_blocks_total"), 16_384);
    assert!(n(g3, "resident_blocks") <= 16_384);
    assert!(n(g3, "pending_blocks") <= n(g3, "resident_blocks"));
    // Same seed, same bytes.
    assert_eq!(with.json, run(SHARED, &[]).json);
}

#[test]
fn worker_local_stores_serve_only_their_own_worker() {
    let p = run(SHARED, &["engine.workers.aggregated.kv_cache.g3_offload.scope=worker_local"]);
    let g3 = &p.json["servesim"]["g3_offload"];
    assert_eq!(g3["scope"], "worker_local");
    assert_eq!(n(g3, "cross_worker_read_blocks"), 0);
    assert!(n(g3, "read_blocks") > 0);
    // A store per worker.
    assert_eq!(n(g3, "capacity_blocks_total"), 2 * 16_384);
    // Histories computed on the other worker are not found: less reuse than one shared store.
    let shared = run(SHARED, &[]);
    assert!(p.summary.prefix_cache_reused_ratio < shared.summary.prefix_cache_reused_ratio);
}

#[test]
fn the_kv_aware_router_credits_blocks_a_store_holds() {
    let credited = run(LOCAL, &[]);
    let blind = run(LOCAL, &["router.disk_cache_hit_weight=0"]);
    assert_ne!(credited.json, blind.json);
    assert!(
        credited.summary.prefix_cache_reused_ratio > blind.summary.prefix_cache_reused_ratio,
        "{} vs {}",
        credited.summary.prefix_cache_reused_ratio,
        blind.summary.prefix_cache_reused_ratio
    );
    // Without a storage tier the weight changes nothing.
    let a = run(LOCAL, &["engine.workers.aggregated.kv_cache.g3_offload=null"]);
    let b =
        run(LOCAL, &["engine.workers.aggregated.kv_cache.g3_offload=null", "router.disk_cache_hit_weight=0"]);
    assert_eq!(a.json, b.json);
}

#[test]
fn a_host_tier_too_small_for_a_history_cuts_restores_short_and_the_run_ends() {
    // Eight host blocks: a history read back from storage stops where host memory is full.
    let p = run(SHARED, &["engine.workers.aggregated.kv_cache.host_offload={num_host_blocks: 8}"]);
    let g3 = &p.json["servesim"]["g3_offload"];
    assert!(n(g3, "bypassed_restores") > 0, "{g3}");
    assert_eq!(p.summary.completed_requests, p.summary.num_requests);
}

#[test]
fn workers_the_planner_starts_get_their_own_store() {
    let p = run(
        LOCAL,
        &[
            "planner={policy: enabled, max_num_gpus: 4, load_adjustment_interval_seconds: 2}",
            "engine.workers.aggregated.parallelism.replicas=1",
            "engine.workers.aggregated.startup_seconds=5",
        ],
    );
    assert_eq!(p.summary.completed_requests, p.summary.num_requests);
    let pool = &p.json["servesim"]["planner"]["pools"][0];
    assert!(n(pool, "peak_workers") > 1, "{pool}");
    let g3 = &p.json["servesim"]["g3_offload"];
    assert!(n(g3, "read_blocks") > 0);
    assert_eq!(n(g3, "cross_worker_read_blocks"), 0);
}
