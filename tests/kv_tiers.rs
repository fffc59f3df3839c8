//! TensorRT-LLM's host tier (G2), end to end: it keeps what GPU memory evicts and gives it
//! back on reuse. SGLang's HiCache: it keeps what enters the radix cache and loads back what
//! GPU memory lost, keeping its copy; with storage behind, it prefetches what host memory lost
//! before admission. The storage KV tier (G3) behind host memory: it keeps what the host tiers lose,
//! a shared store serves every worker and a local one only its own, the KV-aware router
//! credits what it holds, and a host tier too small for a history cuts restores short rather
//! than stalling. And Belady eviction of the GPU pools: the forecast keeps what is asked for
//! soonest, changes nothing when nothing is evicted, and is refused where it cannot hold.
//! Host and storage tiers on the prefill workers of a disaggregated deployment, on each engine.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use servesim_tests::{config_refusal, predict_file_with};

const SHARED: &str = "tests/scenarios/vllm_g3_shared.yaml";
const TRT_HOST: &str = "tests/scenarios/trtllm_host_offload.yaml";
const HICACHE: &str = "tests/scenarios/sglang_hicache.yaml";
const HICACHE_L3: &str = "tests/scenarios/sglang_hicache_storage.yaml";
const LOCAL: &str = "tests/scenarios/vllm_g3_local_kv_router.yaml";

fn run(rel: &str, sets: &[&str]) -> servesim_scenario::Prediction {
    predict_file_with(rel, sets).unwrap()
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// Prompt tokens host or storage memory gave back at the requests' first admissions.
fn first_admission_tier_tokens(p: &servesim_scenario::Prediction) -> u64 {
    p.requests.iter().map(|r| u64::from(r.first_admission_host_reused_input_tokens.unwrap_or(0))).sum()
}

/// Runs with and without a tier both complete everything, and the tier reuses at least 30
/// points more of the prompts and cuts mean TTFT by at least 30%.
fn assert_tier_pays(with: &servesim_scenario::Prediction, without: &servesim_scenario::Prediction) {
    assert_gains(with, without, 0.3, 0.7);
}

/// Runs `better` and `worse` complete the same requests, and `better` reuses at least `points`
/// more of the prompts and has at most `ttft_ratio` of the other's mean TTFT.
fn assert_gains(
    better: &servesim_scenario::Prediction,
    worse: &servesim_scenario::Prediction,
    points: f64,
    ttft_ratio: f64,
) {
    assert_eq!(better.summary.completed_requests, worse.summary.completed_requests);
    assert!(
        better.summary.prefix_cache_reused_ratio > worse.summary.prefix_cache_reused_ratio + points,
        "{} vs {}",
        better.summary.prefix_cache_reused_ratio,
        worse.summary.prefix_cache_reused_ratio
    );
    assert!(better.summary.ttft.mean < ttft_ratio * worse.summary.ttft.mean);
}

#[test]
fn tensorrt_llm_offloads_what_gpu_memory_evicts_and_moves_it_back_on_reuse() {
    let with = run(TRT_HOST, &[]);
    let without = run(TRT_HOST, &["engine.workers.aggregated.kv_cache.host_offload=null"]);
    assert!(without.json["servesim"]["host_offload"].is_null());
    let host = &with.json["servesim"]["host_offload"];
    assert_eq!(host["writes"], "on_eviction");
    // Host memory turns recomputed histories into copies back.
    assert_tier_pays(&with, &without);
    // A block lives in one tier at a time: what moves back was written first, and what the
    // tier holds is what it wrote less what it evicted and gave back.
    let (written, restored) = (n(host, "written_blocks"), n(host, "restored_blocks"));
    assert!(restored > 0 && restored < written, "{host}");
    assert_eq!(n(host, "resident_blocks"), written - n(host, "evicted_blocks") - restored);
    assert_eq!(n(host, "capacity_blocks_per_rank"), 8192);
    assert!(first_admission_tier_tokens(&with) > 0);
    assert_eq!(first_admission_tier_tokens(&without), 0);
    // The steps that wait for the copies make them visible in the restores' mean wait.
    assert!(host["mean_restore_wait_ms"].as_f64().unwrap() > 0.0);
    // Same seed, same bytes.
    assert_eq!(with.json, run(TRT_HOST, &[]).json);
}

#[test]
fn sglang_hicache_writes_what_enters_the_radix_cache_and_loads_back_what_gpu_memory_lost() {
    let with = run(HICACHE, &[]);
    let without = run(HICACHE, &["engine.workers.aggregated.kv_cache.host_offload=null"]);
    let host = &with.json["servesim"]["host_offload"];
    assert_eq!(
        (host["writes"].as_str(), host["counted_in"].as_str()),
        (Some("write_through"), Some("tokens"))
    );
    assert_tier_pays(&with, &without);
    // The tiers are inclusive: a load keeps its host copy, so what the tier holds is what it
    // wrote less what it evicted, and a history is loaded back more often than written.
    let (written, restored) = (n(host, "written_blocks"), n(host, "restored_blocks"));
    assert_eq!(n(host, "resident_blocks"), written - n(host, "evicted_blocks"));
    assert!(restored > written, "{host}");
    assert_eq!(n(host, "restored_tokens"), restored);
    assert!(first_admission_tier_tokens(&with) > 0);
    // 64 GiB a GPU of 128 KiB tokens (Llama-3.1-8B in bf16): 524,288 tokens, never exceeded.
    assert_eq!(n(host, "capacity_blocks_per_rank"), 524_288);
    assert!(n(host, "resident_blocks") <= 524_288);
    // A load moves 128 KiB a token at 32 GB/s: the mean wait is the mean load's copy time,
    // plus a little where loads admitted together queue on the link.
    let mean_tokens = restored as f64 / n(host, "restores") as f64;
    let copy_ms = mean_tokens * 131_072.0 / 32e9 * 1e3;
    let wait = host["mean_restore_wait_ms"].as_f64().unwrap();
    assert!(wait >= 0.999 * copy_ms && wait < 1.25 * copy_ms, "{wait} ms waited, {copy_ms} ms of copying");
    // write_through_selective writes a node at its second insert: a turn's prompt when the
    // turn ends, its output with the next turn's prompt (a session's last output never). Fewer
    // tokens are written, and a history evicted before its turn ends is computed again.
    let selective = run(
        HICACHE,
        &["engine.workers.aggregated.kv_cache.host_offload.write_policy=write_through_selective"],
    );
    let sel = &selective.json["servesim"]["host_offload"];
    assert_eq!(sel["writes"], "write_through_selective");
    assert!(n(sel, "written_blocks") < written, "{sel}");
    assert!(n(sel, "restored_blocks") > 0, "{sel}");
    assert!(selective.summary.prefix_cache_reused_ratio > without.summary.prefix_cache_reused_ratio + 0.3);
    // SGLang's --hicache-ratio sizes the tier from the GPU's: 4 × 128,000 tokens.
    let ratio = run(
        HICACHE,
        &["engine.workers.aggregated.kv_cache.host_offload={hicache_ratio: 4, d2h_bandwidth_gbps: 32, h2d_bandwidth_gbps: 32}"],
    );
    assert_eq!(n(&ratio.json["servesim"]["host_offload"], "capacity_blocks_per_rank"), 512_000);
    // Less host memory than GPU memory for KV is refused, as SGLang refuses it.
    let small = predict_file_with(HICACHE, &["engine.workers.aggregated.kv_cache.host_offload.size_gib=8"]);
    let err = small.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("HiCache needs more host memory than GPU memory"), "{err}");
    assert_eq!(with.json, run(HICACHE, &[]).json);
}

#[test]
fn sglang_hicache_write_back_writes_what_gpu_memory_evicts_and_the_step_waits_for_the_copy() {
    let through = run(HICACHE, &[]);
    let back = run(HICACHE, &["engine.workers.aggregated.kv_cache.host_offload.write_policy=write_back"]);
    let without = run(HICACHE, &["engine.workers.aggregated.kv_cache.host_offload=null"]);
    let host = &back.json["servesim"]["host_offload"];
    assert_eq!((host["writes"].as_str(), host["counted_in"].as_str()), (Some("write_back"), Some("tokens")));
    assert_tier_pays(&back, &without);
    // Only what the GPU's tree evicts is written, not everything that enters it.
    let through_host = &through.json["servesim"]["host_offload"];
    assert!(n(host, "written_blocks") < n(through_host, "written_blocks"), "{host}");
    assert!(n(host, "restored_blocks") > 0, "{host}");
    // A step that evicts waits for its copies, where write-through copies in the background:
    // the same traffic waits longer for its first tokens.
    assert!(back.summary.ttft.mean > through.summary.ttft.mean);
    let text = servesim_scenario::report::summary_table(&back);
    assert!(text.contains(" tokens written as GPU memory evicted them, "), "{text}");
    assert_eq!(
        back.json,
        run(HICACHE, &["engine.workers.aggregated.kv_cache.host_offload.write_policy=write_back"]).json
    );
}

#[test]
fn sglang_hicache_prefetches_from_storage_what_host_memory_lost_before_admission() {
    let l3 = "engine.workers.aggregated.kv_cache.g3_offload";
    let wait = run(HICACHE_L3, &[]);
    let without = run(HICACHE_L3, &[&format!("{l3}=null")]);
    let best = run(HICACHE_L3, &[&format!("{l3}.prefetch_policy=best_effort")]);
    let g3 = &wait.json["servesim"]["g3_offload"];
    assert_eq!(
        (g3["reads"].as_str(), g3["prefetch_policy"].as_str()),
        (Some("prefetch"), Some("wait_complete"))
    );
    // Pages of 64 tokens, 128 KiB a token.
    assert_eq!((n(g3, "page_tokens"), n(g3, "block_bytes")), (64, 64 * 131_072));
    // Storage turns recomputed histories into prefetches, then loads from host memory.
    assert_tier_pays(&wait, &without);
    // Waiting for whole prefetches, every page read reaches host memory (less what host
    // memory held already when it stopped); round robin makes most reads cross workers.
    let (pages, tokens) = (n(g3, "read_blocks"), n(g3, "prefetched_tokens"));
    assert_eq!(n(g3, "prefetches_cut_short"), 0);
    assert!(tokens <= pages * 64 && tokens > pages * 63, "{g3}");
    assert!(n(g3, "cross_worker_read_blocks") * 2 > pages, "{g3}");
    // A turn that starts no prefetch found too little of it stored: most of it is new.
    assert!(n(g3, "prefetches_revoked") > 0);
    assert_eq!(n(g3, "written_blocks") - n(g3, "evicted_blocks"), n(g3, "resident_blocks"));
    // best_effort stops a prefetch when the scheduler reaches its request: many stop early,
    // and reuse falls between no storage and waiting for it.
    let be = &best.json["servesim"]["g3_offload"];
    assert!(n(be, "prefetches_cut_short") > 0, "{be}");
    assert!(n(be, "prefetched_tokens") < n(be, "read_blocks") * 64, "{be}");
    let reuse = |p: &servesim_scenario::Prediction| p.summary.prefix_cache_reused_ratio;
    assert!(reuse(&without) < reuse(&best) && reuse(&best) < reuse(&wait));
    // Prefetch keys are SGLang's: refused on vLLM (the config errors test), and the same seed
    // gives the same bytes.
    assert_eq!(wait.json, run(HICACHE_L3, &[]).json);
}

#[test]
fn a_shared_store_restores_histories_host_memory_lost_on_either_worker() {
    let with = run(SHARED, &[]);
    let without = run(SHARED, &["engine.workers.aggregated.kv_cache.g3_offload=null"]);
    assert!(without.json["servesim"]["g3_offload"].is_null());
    let g3 = &with.json["servesim"]["g3_offload"];
    assert_eq!(g3["scope"], "cluster_shared");
    // The store turns recomputation into reads.
    assert_tier_pays(&with, &without);
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

/// One replica at first, which the planner may grow to four (starting in 5 s).
const PLANNER_FROM_ONE: [&str; 3] = [
    "planner={policy: enabled, max_num_gpus: 4, load_adjustment_interval_seconds: 2}",
    "engine.workers.aggregated.parallelism.replicas=1",
    "engine.workers.aggregated.startup_seconds=5",
];

#[test]
fn workers_the_planner_starts_get_their_own_store() {
    let p = run(LOCAL, &PLANNER_FROM_ONE);
    assert_eq!(p.summary.completed_requests, p.summary.num_requests);
    let pool = &p.json["servesim"]["planner"]["pools"][0];
    assert!(n(pool, "peak_workers") > 1, "{pool}");
    let g3 = &p.json["servesim"]["g3_offload"];
    assert!(n(g3, "read_blocks") > 0);
    assert_eq!(n(g3, "cross_worker_read_blocks"), 0);
}

const PD_HOST: &str = "tests/scenarios/pd_vllm_host_offload.yaml";

#[test]
fn prefill_workers_of_a_disaggregated_deployment_restore_histories_from_host_memory() {
    let with = run(PD_HOST, &[]);
    let without = run(PD_HOST, &["engine.workers.prefill.kv_cache.host_offload=null"]);
    assert!(without.json["servesim"]["host_offload"].is_null());
    assert_eq!(with.summary.completed_requests, with.summary.num_requests);
    assert_eq!(with.summary.completed_requests, without.summary.completed_requests);
    let host = &with.json["servesim"]["host_offload"];
    assert_eq!(host["role"], "prefill");
    assert_eq!(host["writes"], "after_compute");
    // Histories the prefill GPUs lost come back from host memory instead of being recomputed.
    assert!(n(host, "restores") > 0 && n(host, "restored_blocks") <= n(host, "written_blocks"), "{host}");
    assert!(
        with.summary.prefix_cache_reused_ratio > without.summary.prefix_cache_reused_ratio + 0.1,
        "{} vs {}",
        with.summary.prefix_cache_reused_ratio,
        without.summary.prefix_cache_reused_ratio
    );
    assert!(with.summary.ttft.mean < 0.85 * without.summary.ttft.mean);
    // Only the two prefill workers (0 and 1) keep a tier; the decode worker keeps none.
    let workers: Vec<u64> = host["workers"].as_array().unwrap().iter().map(|w| n(w, "worker")).collect();
    assert_eq!(workers, [0, 1]);
    // The decode worker still receives what it lacks of each prompt over the transfer link.
    let moved = n(&with.json["servesim"]["kv_transfer"], "transferred_tokens");
    assert!(moved > 0 && moved < n(&with.json, "total_input_tokens"), "{moved}");
    assert!(servesim_scenario::report::summary_table(&with).contains("host KV tier (G2, prefill workers): "));
    // Same seed, same bytes.
    assert_eq!(with.json, run(PD_HOST, &[]).json);
}

#[test]
fn sglang_and_tensorrt_llm_prefill_workers_keep_their_own_host_tiers() {
    for (backend, writes, capacity) in
        [("sglang", "write_through", "128000"), ("trtllm", "on_eviction", "4000")]
    {
        let sets = [
            format!("engine.backend={backend}"),
            format!("engine.workers.prefill.kv_cache.capacity={{type: fixed, blocks: {capacity}}}"),
        ];
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let with = run(PD_HOST, &sets);
        let mut off = sets.clone();
        off.push("engine.workers.prefill.kv_cache.host_offload=null");
        let without = run(PD_HOST, &off);
        let host = &with.json["servesim"]["host_offload"];
        assert_eq!((host["role"].as_str(), host["writes"].as_str()), (Some("prefill"), Some(writes)));
        assert!(n(host, "restores") > 0, "{backend}: {host}");
        assert_eq!(with.summary.completed_requests, with.summary.num_requests);
        assert!(
            with.summary.prefix_cache_reused_ratio > without.summary.prefix_cache_reused_ratio,
            "{backend}: {} vs {}",
            with.summary.prefix_cache_reused_ratio,
            without.summary.prefix_cache_reused_ratio
        );
    }
}

#[test]
fn a_store_shared_by_prefill_workers_serves_histories_either_computed() {
    let p = run(
        PD_HOST,
        &[
            "router.policy=round_robin",
            "engine.workers.prefill.kv_cache.host_offload.size_gib=4",
            "engine.workers.prefill.kv_cache.g3_offload={scope: cluster_shared, num_g3_blocks: 100000}",
        ],
    );
    assert_eq!(p.summary.completed_requests, p.summary.num_requests);
    let g3 = &p.json["servesim"]["g3_offload"];
    assert_eq!((g3["role"].as_str(), g3["scope"].as_str()), (Some("prefill"), Some("cluster_shared")));
    assert!(n(g3, "cross_worker_read_blocks") > 0, "{g3}");
}

const BELADY_POOL: &str = "tests/scenarios/vllm_belady_prompt_pool.yaml";
const BELADY_TRACE: &str = "tests/scenarios/trtllm_belady_documents.yaml";

#[test]
fn belady_keeps_the_prompts_asked_for_soonest_where_lru_drops_them() {
    for rel in [BELADY_POOL, BELADY_TRACE] {
        let belady = run(rel, &[]);
        let lru = run(rel, &["engine.kv_eviction_policy=lru"]);
        assert!(lru.json["servesim"]["kv_eviction"].is_null());
        let ev = &belady.json["servesim"]["kv_eviction"];
        assert_eq!(ev["policy"], "belady");
        assert_eq!(ev["assumption"], "global_input_trace_order_v1");
        // The forecast holds every request sent, and every one's demand ended by its prefill.
        let s = &belady.summary;
        assert_eq!(s.completed_requests, s.num_requests);
        assert_eq!(n(ev, "forecast_requests"), s.num_requests);
        assert_eq!(n(ev, "demand_ended_requests"), s.num_requests);
        // About half of the prompts fit: the forecast reuses several times what LRU does.
        let (b, l) = (
            s.first_admission_prefix_cache_reused_ratio,
            lru.summary.first_admission_prefix_cache_reused_ratio,
        );
        assert!(b > 0.4 && b > 3.0 * l, "{rel}: belady {b} vs lru {l}");
        assert!(s.ttft.mean < 0.85 * lru.summary.ttft.mean, "{rel}");
        let prefill = |p: &servesim_scenario::Prediction| {
            p.json["servesim"]["time_series"]["workers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| n(w, "prefill_tokens"))
                .sum::<u64>()
        };
        assert_eq!(n(ev, "committed_prefill_tokens"), prefill(&belady));
        assert!(prefill(&belady) < prefill(&lru), "{rel}");
    }
}

#[test]
fn belady_changes_nothing_when_the_cache_holds_every_prompt() {
    // 100 prompts of 63 blocks fit in 20,000: nothing is evicted, so the order cannot matter.
    let big = "engine.workers.aggregated.kv_cache.capacity.blocks=20000";
    let mut belady = run(BELADY_POOL, &[big]);
    let lru = run(BELADY_POOL, &[big, "engine.kv_eviction_policy=lru"]);
    assert_eq!(n(&belady.json["servesim"]["kv_eviction"], "evicted_tokens"), 0);
    belady.json["servesim"].as_object_mut().unwrap().remove("kv_eviction");
    assert_eq!(belady.json, lru.json);
}

#[test]
fn a_refused_request_ends_its_demand() {
    // 50 blocks of 64 tokens cannot hold a 4,200-token request: every one is refused.
    let p = run(BELADY_POOL, &["engine.workers.aggregated.kv_cache.capacity.blocks=50"]);
    assert_eq!(p.json["servesim"]["rejected_requests"], 1500);
    assert_eq!(n(&p.json["servesim"]["kv_eviction"], "demand_ended_requests"), 1500);
}

#[test]
fn belady_forecasts_across_replicas_and_attention_dp_ranks() {
    // The forecast is global: it does not know which worker a request will go to.
    for sets in [
        ["engine.workers.aggregated.parallelism.replicas=2"],
        ["engine.workers.aggregated.parallelism.attention_data=2"],
    ] {
        let p = run(BELADY_POOL, &sets);
        let ev = &p.json["servesim"]["kv_eviction"];
        assert_eq!(n(ev, "demand_ended_requests"), p.summary.num_requests, "{sets:?}");
        let lru = run(BELADY_POOL, &[sets[0], "engine.kv_eviction_policy=lru"]);
        assert!(
            p.summary.first_admission_prefix_cache_reused_ratio
                > lru.summary.first_admission_prefix_cache_reused_ratio,
            "{sets:?}"
        );
    }
}

#[test]
fn belady_is_refused_where_its_forecast_cannot_hold() {
    let cases: &[(&[&str], &str)] = &[
        (&["traffic.load={type: concurrency, concurrency: 8}"], "use an open-loop traffic.load"),
        (
            &[
                "traffic.source={type: synthetic-session, session: {turns: 3}}",
                "traffic.load={type: poisson, sessions_per_second: 1}",
            ],
            "cannot forecast multi-turn sessions",
        ),
        (&["engine.backend=sglang"], "SGLang's radix cache evicts by LRU"),
        (
            &["engine.workers.aggregated.kv_cache.host_offload={num_host_blocks: 100}"],
            "host_offload is not simulated",
        ),
        (&["engine.workers.aggregated.kv_cache.prefix_caching=false"], "prefix_caching is false"),
        (&["planner={policy: enabled, max_num_gpus: 4}"], "the planner would start and stop them"),
        (&["engine.kv_eviction_policy=optimal"], "not one of: lru, belady"),
    ];
    for (sets, needle) in cases {
        let msg = config_refusal(BELADY_POOL, sets);
        assert!(msg.contains("engine.kv_eviction_policy") && msg.contains(needle), "{sets:?}: {msg}");
    }
    // A trace whose rows are turns of a session: named by file and request.
    let dir = std::env::temp_dir().join(format!("servesim_belady_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("chat.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [1, 2]}\n{\"timestamp\": 5, \"session_id\": \"a\", \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [1, 3]}\n",
    )
    .unwrap();
    let set = format!("traffic.source.paths=[{}]", trace.display());
    let msg = config_refusal(BELADY_TRACE, &[&set]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(msg.contains("chat.jsonl: request 2 of the file belongs to a multi-turn session"), "{msg}");
}

const HOST_SHARED: &str = "tests/scenarios/vllm_host_offload_shared.yaml";

#[test]
fn a_host_pool_shared_by_replicas_restores_histories_either_computed() {
    let shared = run(HOST_SHARED, &[]);
    // The same host memory (8,192 blocks) kept as a tier per rank, and no host memory at all.
    let local = run(
        HOST_SHARED,
        &[
            "engine.workers.aggregated.kv_cache.host_offload.scope=dp_rank_local",
            "engine.workers.aggregated.kv_cache.host_offload.num_host_blocks=4096",
        ],
    );
    let without = run(HOST_SHARED, &["engine.workers.aggregated.kv_cache.host_offload=null"]);
    assert_tier_pays(&shared, &without);
    // Round robin sends most turns away from their history: only a shared pool brings it back.
    assert_gains(&shared, &local, 0.15, 0.7);
    let host = &shared.json["servesim"]["host_offload"];
    assert_eq!(host["scope"], "cluster_shared");
    // The pool's size and contents once, not per rank: 8,192 blocks of 8 MiB (Llama-3.1-8B,
    // 64 tokens of 128 KiB) are 64 GiB.
    assert_eq!((n(host, "capacity_blocks"), n(host, "ranks")), (8192, 2));
    assert_eq!(host["capacity_gib"].as_f64(), Some(64.0));
    assert!(n(host, "resident_blocks") <= 8192);
    let cross = n(host, "cross_rank_restored_blocks");
    assert!(cross > 0 && cross <= n(host, "restored_blocks"), "{host}");
    // AISimulate's g2_domains: the shared pool, its capacity once.
    let domains = shared.json["g2_domains"].as_array().unwrap();
    assert_eq!(domains.len(), 1);
    assert_eq!((n(&domains[0], "capacity_blocks"), n(&domains[0], "ranks")), (8192, 2));
    assert_eq!(n(&domains[0], "used_blocks"), n(host, "resident_blocks"));
    let table = servesim_scenario::report::summary_table(&shared);
    assert!(table.contains("8192 blocks in one pool 2 ranks share"), "{table}");
    // Each request's first admission splits its reuse between GPU and host memory
    // (AISimulate's per-request fields); together they are the run's first-admission reuse,
    // and host memory's part is what its restores brought back to first admissions.
    let (mut g1, mut tiers, mut input) = (0u64, 0u64, 0u64);
    for r in shared.requests.iter() {
        g1 += u64::from(r.first_admission_g1_reused_input_tokens.unwrap());
        tiers += u64::from(r.first_admission_host_reused_input_tokens.unwrap());
        input += u64::from(r.input_length);
    }
    #[allow(clippy::cast_precision_loss)] // Token counts are far below 2^52.
    let ratio = (g1 + tiers) as f64 / input as f64;
    assert!((ratio - shared.summary.first_admission_prefix_cache_reused_ratio).abs() < 1e-12);
    assert!(g1 > 0 && tiers > g1 && tiers <= n(host, "restored_tokens"), "{g1} {tiers}");
    assert_eq!(first_admission_tier_tokens(&without), 0);
    // Tiers of a rank's own say so, and report no domain.
    let own = &local.json["servesim"]["host_offload"];
    assert_eq!((own["scope"].as_str(), n(own, "capacity_blocks_per_rank")), (Some("dp_rank_local"), 4096));
    assert!(local.json.get("g2_domains").is_none());
    // Same seed, same bytes.
    assert_eq!(shared.json, run(HOST_SHARED, &[]).json);
}

#[test]
fn ranks_restoring_at_once_share_the_pools_bandwidth() {
    let wide = run(HOST_SHARED, &[]);
    // 4 GB/s back to GPU memory in all, against each rank's own 32 GB/s link.
    let narrow =
        run(HOST_SHARED, &["engine.workers.aggregated.kv_cache.host_offload.shared_h2d_bandwidth_gbps=4"]);
    let wait = |p: &servesim_scenario::Prediction| {
        p.json["servesim"]["host_offload"]["mean_restore_wait_ms"].as_f64().unwrap()
    };
    assert!(wait(&narrow) > 10.0 * wait(&wide), "{} vs {}", wait(&narrow), wait(&wide));
    assert!(narrow.summary.ttft.mean > wide.summary.ttft.mean);
    assert_eq!(narrow.json["servesim"]["host_offload"]["shared_h2d_bandwidth_gbps"].as_f64(), Some(4.0));
}

#[test]
fn prefill_workers_of_a_disaggregated_deployment_share_one_host_pool() {
    let p = run(PD_HOST, &["engine.workers.prefill.kv_cache.host_offload.scope=cluster_shared"]);
    assert_eq!(p.summary.completed_requests, p.summary.num_requests);
    let host = &p.json["servesim"]["host_offload"];
    assert_eq!((host["role"].as_str(), host["scope"].as_str()), (Some("prefill"), Some("cluster_shared")));
    assert_eq!(n(host, "ranks"), 2);
    assert!(n(host, "cross_rank_restored_blocks") > 0, "{host}");
    assert_eq!(p.json["g2_domains"][0]["role"], "prefill");
}

#[test]
fn workers_the_planner_starts_join_the_shared_host_pool() {
    let p = run(HOST_SHARED, &PLANNER_FROM_ONE);
    assert_eq!(p.summary.completed_requests, p.summary.num_requests);
    let pool = &p.json["servesim"]["planner"]["pools"][0];
    let started = n(pool, "scale_ups");
    assert!(started > 0, "{pool}");
    // One pool through the run: every worker started joins it as a rank of its own, and reads
    // what the others wrote.
    let host = &p.json["servesim"]["host_offload"];
    assert_eq!(n(host, "ranks"), 1 + started);
    assert_eq!(n(host, "capacity_blocks"), 8192);
    assert!(n(host, "cross_rank_restored_blocks") > 0, "{host}");
}
