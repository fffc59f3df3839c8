//! Behaviour that must show up in the numbers: each test compares a scenario with a variant
//! that lacks the mechanism, so the mechanism cannot silently stop working.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use servesim_tests::{config_refusal, predict_file, predict_file_with, repo_root};

fn shared_trace(name: &str) -> Option<String> {
    std::fs::read_to_string(repo_root().join("../shared/traces").join(name)).ok()
}

#[test]
fn prefix_reuse_on_the_mooncake_trace_matches_an_independent_count() {
    let Some(text) = shared_trace("mooncake_conversation_trace.jsonl") else { return };
    // Naive model: a 512-token block is reusable when its whole id chain was seen before; the
    // engine reuses whole 64-token blocks and always computes at least one token.
    let mut seen: BTreeSet<Vec<u64>> = BTreeSet::new();
    let (mut reused, mut total) = (0u64, 0u64);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let len = v["input_length"].as_u64().unwrap();
        let ids: Vec<u64> = v["hash_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        total += len;
        let mut hit = 0;
        for i in 0..ids.len() {
            if seen.contains(&ids[..=i]) {
                hit += (len - 512 * i as u64).min(512);
            } else {
                break;
            }
        }
        reused += hit.min((len - 1) / 64 * 64);
        for i in 0..ids.len() {
            seen.insert(ids[..=i].to_vec());
        }
    }
    let ideal = reused as f64 / total as f64;
    let p = predict_file_with(
        "tests/scenarios/trace_mooncake_conversation.yaml",
        &[
            "engine.workers.aggregated.parallelism.replicas=1",
            "engine.workers.aggregated.kv_cache.capacity={type: fixed, blocks: 5000000}",
            "traffic.load={type: concurrency, concurrency: 1}",
            "traffic.stop={}",
        ],
    )
    .unwrap();
    assert_eq!(p.summary.completed_requests, 12_031);
    assert!(
        (p.summary.prefix_cache_reused_ratio - ideal).abs() < 1e-9,
        "{} vs {ideal}",
        p.summary.prefix_cache_reused_ratio
    );
}

#[test]
fn kv_aware_routing_reuses_more_and_queues_less_than_round_robin() {
    if shared_trace("mooncake_conversation_trace.jsonl").is_none() {
        return;
    }
    let kv = predict_file_with("tests/scenarios/router_kv_aware_mooncake.yaml", &[]).unwrap().summary;
    let rr =
        predict_file_with("tests/scenarios/router_kv_aware_mooncake.yaml", &["router={policy: round_robin}"])
            .unwrap()
            .summary;
    assert!(kv.prefix_cache_reused_ratio > rr.prefix_cache_reused_ratio * 1.1, "{kv:?} vs {rr:?}");
    assert!(kv.ttft.mean < rr.ttft.mean, "kv {} rr {}", kv.ttft.mean, rr.ttft.mean);
}

#[test]
fn session_affinity_keeps_conversation_history_cached() {
    let sa = predict_file_with("tests/scenarios/router_session_affinity.yaml", &[]).unwrap().summary;
    let rr =
        predict_file_with("tests/scenarios/router_session_affinity.yaml", &["router.policy=round_robin"])
            .unwrap()
            .summary;
    assert!(
        sa.prefix_cache_reused_ratio > rr.prefix_cache_reused_ratio + 0.2,
        "{} vs {}",
        sa.prefix_cache_reused_ratio,
        rr.prefix_cache_reused_ratio
    );
    assert!(sa.ttft.mean < rr.ttft.mean);
}

#[test]
fn prefix_caching_off_means_no_reuse_and_slower_first_tokens() {
    // The engine's fixed frontend latency is the same either way: compare the engine part.
    let no_frontend = "engine.workers.aggregated.timing={frontend_ms: 0}";
    let on = predict_file_with("tests/scenarios/sessions_multi_turn.yaml", &[no_frontend]).unwrap().summary;
    let off = predict_file_with(
        "tests/scenarios/sessions_multi_turn.yaml",
        &[no_frontend, "engine.workers.aggregated.kv_cache.prefix_caching=false"],
    )
    .unwrap()
    .summary;
    assert!(on.prefix_cache_reused_ratio > 0.5);
    assert_eq!(off.prefix_cache_reused_ratio, 0.0);
    assert!(off.ttft.mean > on.ttft.mean * 1.5, "off {} on {}", off.ttft.mean, on.ttft.mean);
}

#[test]
fn a_small_kv_cache_preempts_and_a_large_one_does_not() {
    let small = predict_file_with("tests/scenarios/vllm_preemption.yaml", &[]).unwrap().summary;
    let large = predict_file_with(
        "tests/scenarios/vllm_preemption.yaml",
        &["engine.workers.aggregated.kv_cache.capacity={type: default}"],
    )
    .unwrap()
    .summary;
    assert!(small.num_preemptions > 10);
    assert_eq!(large.num_preemptions, 0);
    assert!(small.e2e_latency.mean > large.e2e_latency.mean);
}

#[test]
fn chunked_prefill_off_lets_long_prompts_block_decodes() {
    // With chunking, decode steps interleave with prompt chunks; without it a prompt longer
    // than the budget still runs (vLLM then takes it whole only if it fits the budget, so
    // raise the budget to keep the run valid) and decodes stall behind whole prompts.
    let on = predict_file_with(
        "tests/scenarios/vllm_chunked_prefill.yaml",
        &["engine.workers.aggregated.scheduler.max_batched_tokens=2048"],
    )
    .unwrap()
    .summary;
    let off = predict_file_with(
        "tests/scenarios/vllm_chunked_prefill.yaml",
        &[
            "engine.enable_chunked_prefill=false",
            "engine.workers.aggregated.scheduler.max_batched_tokens=32768",
        ],
    )
    .unwrap()
    .summary;
    assert!(off.itl.max > on.itl.max * 2.0, "off {} on {}", off.itl.max, on.itl.max);
}

#[test]
fn sglang_reuses_per_token_where_vllm_reuses_whole_blocks() {
    // Sessions whose shared parts are not multiples of vLLM's 64-token block.
    let sets = |b: &'static str| -> Vec<&'static str> {
        vec![
            if b == "sglang" { "engine.backend=sglang" } else { "engine.backend=vllm" },
            // Short turns: vLLM loses up to a block of history at every turn boundary.
            "traffic.source.new_input_tokens_per_turn=90",
            "traffic.source.output_tokens_per_turn={dist: uniform, min: 10, max: 50}",
            "traffic.source.session.turns=8",
            "traffic.load={type: poisson, sessions_per_second: 2, seed: 9}",
            "traffic.stop.sessions=60",
        ]
    };
    let rel = "tests/scenarios/sessions_multi_turn.yaml";
    let s = predict_file_with(rel, &sets("sglang")).unwrap().summary;
    let v = predict_file_with(rel, &sets("vllm")).unwrap().summary;
    assert!(
        s.prefix_cache_reused_ratio > v.prefix_cache_reused_ratio + 0.05,
        "sglang {} vllm {}",
        s.prefix_cache_reused_ratio,
        v.prefix_cache_reused_ratio
    );
}

#[test]
fn lpm_trades_tail_latency_for_reuse_and_median_ttft() {
    let rel = "tests/scenarios/sglang_lpm_sessions.yaml";
    let lpm = predict_file_with(rel, &[]).unwrap().summary;
    let fcfs = predict_file_with(rel, &["engine.workers.aggregated.scheduler.schedule_policy=fcfs"])
        .unwrap()
        .summary;
    assert!(lpm.prefix_cache_reused_ratio > fcfs.prefix_cache_reused_ratio + 0.05);
    assert!(lpm.ttft.median < fcfs.ttft.median / 2.0, "lpm {} fcfs {}", lpm.ttft.median, fcfs.ttft.median);
    assert!(lpm.ttft.max > fcfs.ttft.max, "LPM starves uncached requests");
}

#[test]
fn trtllm_waits_where_vllm_preempts() {
    let rel = "tests/scenarios/vllm_preemption.yaml";
    let v = predict_file_with(rel, &[]).unwrap().summary;
    // Same memory (600 blocks of 64 tokens = 1,200 blocks of 32).
    let t = predict_file_with(
        rel,
        &[
            "engine.backend=trtllm",
            "engine.workers.aggregated.kv_cache={capacity: {type: fixed, blocks: 1200}}",
        ],
    )
    .unwrap()
    .summary;
    assert!(v.num_preemptions > 0);
    assert_eq!(t.num_preemptions, 0);
    assert_eq!(t.completed_requests, v.completed_requests);
}

#[test]
fn sglang_retracts_and_recovers_under_kv_pressure() {
    let s = predict_file_with("tests/scenarios/sglang_retraction.yaml", &[]).unwrap().summary;
    assert!(s.num_preemptions > 0, "retractions expected");
    assert_eq!(s.completed_requests, 200);
    let roomy = predict_file_with(
        "tests/scenarios/sglang_retraction.yaml",
        &["engine.workers.aggregated.kv_cache.capacity={type: default}"],
    )
    .unwrap()
    .summary;
    assert_eq!(roomy.num_preemptions, 0);
}

fn records(p: &servesim_scenario::Prediction) -> Vec<serde_json::Value> {
    p.requests.iter().map(|r| serde_json::to_value(r).unwrap()).collect()
}

#[test]
fn pd_links_shared_max_min_slow_first_tokens_more_than_independent_links() {
    // A slow link makes transfers overlap.
    let rel = "tests/scenarios/pd_vllm.yaml";
    let shared =
        predict_file_with(rel, &["engine.kv_transfer={bandwidth_gb_per_second: 2}"]).unwrap().summary;
    let indep = predict_file_with(
        rel,
        &["engine.kv_transfer={bandwidth_gb_per_second: 2, link_sharing: independent}"],
    )
    .unwrap()
    .summary;
    let instant = predict_file_with(rel, &["engine.kv_transfer={}"]).unwrap().summary;
    assert!(
        shared.ttft.mean > indep.ttft.mean,
        "shared {} independent {}",
        shared.ttft.mean,
        indep.ttft.mean
    );
    assert!(indep.ttft.mean > instant.ttft.mean);
}

#[test]
fn pd_destination_missing_moves_only_what_the_decode_worker_lacks() {
    let rel = "tests/scenarios/pd_sglang_kv_aware.yaml";
    let missing = predict_file_with(rel, &[]).unwrap();
    let full = predict_file_with(rel, &["engine.kv_transfer.timing_mode=full"]).unwrap();
    let moved = |p: &servesim_scenario::Prediction| {
        p.json["servesim"]["kv_transfer"]["transferred_tokens"].as_u64().unwrap()
    };
    assert!(moved(&missing) < moved(&full) * 8 / 10, "{} vs {}", moved(&missing), moved(&full));
    let input: u64 = full.requests.iter().map(|r| u64::from(r.input_length)).sum();
    assert_eq!(
        moved(&full),
        input,
        "full mode moves every prompt token (SGLang ships the first token with them)"
    );
    assert!(missing.summary.ttft.mean < full.summary.ttft.mean);
}

#[test]
fn pd_reservation_order_follows_the_engine() {
    // SGLang reserves decode KV before prefill; vLLM after it.
    for r in records(&predict_file_with("tests/scenarios/pd_sglang_kv_aware.yaml", &[]).unwrap()) {
        assert!(
            r["destination_reserved_ms"].as_f64().unwrap() <= r["prefill_admit_ms"].as_f64().unwrap(),
            "{r}"
        );
        assert!(r["source_released_ms"].as_f64().unwrap() >= r["source_held_ms"].as_f64().unwrap());
    }
    for r in records(&predict_file_with("tests/scenarios/pd_vllm.yaml", &[]).unwrap()) {
        assert!(
            r["destination_reserved_ms"].as_f64().unwrap() >= r["source_held_ms"].as_f64().unwrap(),
            "{r}"
        );
        assert!(
            r["first_token_ms"].as_f64().unwrap() > r["destination_activated_ms"].as_f64().unwrap(),
            "vLLM samples the first token on the decode worker"
        );
        assert!(r["decode_worker_idx"].as_u64().unwrap() < 1, "decode indices are pool-local");
    }
}

#[test]
fn pd_gpu_hours_count_both_pools() {
    let p = predict_file_with("tests/scenarios/pd_trtllm_hetero.yaml", &[]).unwrap();
    let s = &p.summary;
    assert_eq!((s.prefill_gpus_per_worker, s.decode_gpus_per_worker), (4, 8));
    let want = (s.prefill_worker_seconds * 4.0 + s.decode_worker_seconds * 8.0) / 3600.0;
    assert!((s.gpu_hours - want).abs() < 1e-12);
    assert!((s.gpu_hours - 12.0 * s.duration_ms / 3.6e6).abs() < 1e-9);
}

#[test]
fn a_shared_prompt_prefix_is_reused_and_shortens_prefill() {
    let base = predict_file_with("data/scenarios/default.yaml", &[]).unwrap();
    let shared =
        predict_file_with("data/scenarios/default.yaml", &["traffic.source.shared_prefix_tokens=512"])
            .unwrap();
    // Every request after the first reuses the 512 shared tokens (whole 16-token blocks).
    let ratio = shared.summary.prefix_cache_reused_ratio;
    assert!(ratio > 0.45 && ratio <= 0.5, "reuse {ratio}");
    assert_eq!(base.summary.prefix_cache_reused_ratio, 0.0);
    assert!(
        shared.summary.ttft.mean < 0.8 * base.summary.ttft.mean,
        "{} vs {}",
        shared.summary.ttft.mean,
        base.summary.ttft.mean
    );
    // A prefix longer than a prompt leaves each request one token of its own.
    let all = predict_file_with("data/scenarios/default.yaml", &["traffic.source.shared_prefix_tokens=5000"])
        .unwrap();
    assert!(all.summary.prefix_cache_reused_ratio < 1.0);
}

#[test]
fn sglang_requests_retracted_past_a_chunk_resume_their_recompute() {
    // Prompts plus outputs far beyond chunked_prefill_size in a small KV pool: retracted
    // requests come back needing several chunks of recompute (prompt and earlier outputs).
    // They used to be stranded after their first chunk and the run stalled.
    let p = predict_file_with(
        "tests/scenarios/sglang_retraction.yaml",
        &[
            "engine.workers.aggregated.kv_cache.capacity={type: fixed, blocks: 60000}",
            "engine.workers.aggregated.scheduler.chunked_prefill_size=1024",
            "traffic.source.input_tokens=3000",
            "traffic.source.output_tokens=3000",
            "traffic.load.concurrency=24",
            "traffic.stop.requests=60",
        ],
    )
    .unwrap();
    assert_eq!(p.summary.completed_requests, 60);
    assert!(p.summary.num_preemptions > 0, "the case must retract");
}

#[test]
fn pipeline_stages_add_throughput_not_single_request_speed() {
    let rel = "tests/scenarios/vllm_tp4_pp2_poisson.yaml";
    let lone = ["traffic.load={type: concurrency, concurrency: 1}", "traffic.stop={requests: 4}"];
    let pp2 = predict_file_with(rel, &lone).unwrap().summary;
    let pp1 = predict_file_with(rel, &[lone[0], lone[1], "engine.workers.aggregated.parallelism.pipeline=1"])
        .unwrap()
        .summary;
    // One request crosses both stages: the same layers at the same TP, plus a hop per token.
    let ratio = pp2.tpot.mean / pp1.tpot.mean;
    assert!((1.0..1.1).contains(&ratio), "TPOT PP2 {} vs PP1 {}", pp2.tpot.mean, pp1.tpot.mean);
    let ttft_ratio = pp2.ttft.mean / pp1.ttft.mean;
    assert!((0.95..1.1).contains(&ttft_ratio), "TTFT PP2 {} vs PP1 {}", pp2.ttft.mean, pp1.ttft.mean);
    // Compute-bound work (long prompts, short answers): two stages in flight serve about
    // what two replicas of the same size do, far more than one replica of half the GPUs.
    // (Memory-bound decode is another matter: each micro-batch reads its stage's weights,
    // so at equal concurrency PP adds little there — as on real engines.)
    let busy = [
        "traffic.source={type: synthetic, input_tokens: {dist: uniform, min: 2000, max: 4000}, output_tokens: 4}",
        "traffic.load={type: concurrency, concurrency: 32}",
        "traffic.stop={requests: 256}",
    ];
    let with = |extra: &[&str]| {
        let sets: Vec<&str> = busy.iter().chain(extra).copied().collect();
        predict_file_with(rel, &sets).unwrap().summary.request_throughput_rps
    };
    let staged = with(&[]);
    let half = with(&["engine.workers.aggregated.parallelism.pipeline=1"]);
    let twice = with(&[
        "engine.workers.aggregated.parallelism.pipeline=1",
        "engine.workers.aggregated.parallelism.replicas=2",
    ]);
    assert!(staged > 1.4 * half, "PP2 {staged} req/s vs one TP4 replica {half}");
    assert!(staged < 1.1 * twice, "PP2 {staged} req/s vs two TP4 replicas {twice}");
}

/// "fp8" asked of a block-scaled FP8 checkpoint keeps its 128×128 block scaling, for the
/// experts as for the dense layers (`engine.quantization` in SPEC §2.1); asking for the
/// per-tensor kernels by their own name still gets them.
#[test]
fn fp8_on_a_block_scaled_checkpoint_keeps_its_block_kernels() {
    let base = ["engine.model=Qwen/Qwen3-235B-A22B-FP8", "engine.workers.aggregated.parallelism={tensor: 8}"];
    let run = |q: &str| {
        let set = format!("engine.quantization={q}");
        let sets = [base[0], base[1], set.as_str()];
        predict_file_with("data/scenarios/default.yaml", &sets).unwrap().summary
    };
    let native = run("{gemm: fp8_block, moe: fp8_block}");
    assert_eq!(run("{gemm: fp8, moe: fp8}"), native);
    assert_eq!(run("{moe: fp8}"), native);
    assert_ne!(run("{gemm: fp8_block, moe: bf16}"), native, "another expert format is another run");
}

/// An engine version the data does not hold is an error naming the field, not a silent
/// roofline run, when the GPU has measured tables for another version; a GPU without any
/// tables still runs on the roofline.
#[test]
fn an_engine_version_without_tables_is_an_error_where_other_versions_exist() {
    let err = predict_file_with("data/scenarios/default.yaml", &["engine.backend_version=0.12.0"])
        .expect_err("an error");
    assert_eq!(err.exit_code(), 2, "{err}");
    let text = err.to_string();
    assert!(text.contains("engine.backend_version"), "{text}");
    assert!(
        text.contains("no kernel tables for vllm 0.12.0 on h200_sxm") && text.contains("0.24.0"),
        "{text}"
    );
    let roofline = predict_file_with(
        "data/scenarios/default.yaml",
        &["engine.backend_version=0.12.0", "engine.hardware=a100_sxm"],
    );
    assert!(roofline.is_ok(), "{:?}", roofline.err());
}

/// An engine release the data holds only some tables of (AIConfigurator measured vLLM 0.19.0's
/// all-reduce on the RTX PRO 6000, nothing else) is timed with those, and with the default
/// release's tables for the rest; the report names each family's release.
#[test]
fn an_older_engine_release_borrows_the_tables_it_lacks_from_the_default_one() {
    let sets = |version: Option<&'static str>| {
        let mut s = vec![
            "engine.model=Qwen/Qwen3-32B",
            "engine.hardware=rtx_pro_6000_server",
            "engine.workers.aggregated.parallelism={tensor: 2}",
            "traffic.source.input_tokens=2048",
            "traffic.stop.requests=20",
        ];
        s.extend(version);
        s
    };
    let default = predict_file_with("data/scenarios/default.yaml", &sets(None)).unwrap();
    let older =
        predict_file_with("data/scenarios/default.yaml", &sets(Some("engine.backend_version=0.19.0")))
            .unwrap();
    let data = |p: &servesim_scenario::Prediction| {
        p.json["servesim"]["timing"][0]["data"].as_str().unwrap_or_default().to_string()
    };
    let d = data(&older);
    assert!(d.contains("vllm/0.19.0") && d.contains("(0.19.0: allreduce, nccl; 0.24.0: gemm,"), "{d}");
    let d = data(&default);
    assert!(d.contains("(0.24.0: gemm,") && d.contains("allreduce") && !d.contains(';'), "{d}");
    assert_eq!(older.summary.completed_requests, default.summary.completed_requests);
    // The 0.19.0 all-reduce is 2.4x slower at prefill sizes on this PCIe GPU: TP2 prefill
    // steps (128 all-reduces of 2048 x 5120 values) take tens of milliseconds longer.
    let (old, new) = (older.summary.ttft.mean, default.summary.ttft.mean);
    assert!(old > new * 1.15, "TTFT {old} ms with 0.19.0 against {new} ms with 0.24.0");
    assert!(older.summary.tpot.mean > default.summary.tpot.mean);
}

/// A synchronously scheduling engine waits for host work every step: TPOT grows by about
/// the per-step and per-sequence host cost less the overhead an asynchronous step leaves
/// exposed (which the host time replaces), and nothing else changes about the requests.
#[test]
fn synchronous_scheduling_adds_host_time_to_every_step() {
    let path = "tests/scenarios/vllm_sync_scheduling.yaml";
    let sync = predict_file_with(path, &[]).unwrap().summary;
    // Planning ahead (on by default with async scheduling) moves prompts a step later, which
    // changes how they land among the decodes: held off here to compare host time alone.
    let overlapped = predict_file_with(
        path,
        &[
            "engine.workers.aggregated.scheduler.async_scheduling=true",
            "engine.workers.aggregated.scheduler.plan_ahead=false",
        ],
    )
    .unwrap()
    .summary;
    assert_eq!(sync.completed_requests, overlapped.completed_requests);
    let added = sync.tpot.mean - overlapped.tpot.mean;
    // 64 clients: 1 ms + 64 × 60 µs − 0.7 ms = 4.14 ms a decode step, a little less as the
    // batch drains at the end of the run, a little more where other clients' prompts arrive
    // apart and each takes a step of its own (which pays the host time too).
    let full = 1.0 + 64.0 * servesim_perf::oplevel::SYNC_HOST_S_PER_SEQUENCE * 1e3
        - servesim_perf::oplevel::VLLM.step_overhead_s * 1e3;
    assert!(
        (full - 0.7..=full + 0.4).contains(&added),
        "TPOT {} vs {}",
        sync.tpot.mean,
        overlapped.tpot.mean
    );
}

/// A busy serving process paces its clients: with 75 µs a streamed chunk, one trtllm-serve
/// process at 128 clients cannot write tokens as fast as the engine makes them, so clients see
/// a longer TPOT and send their next requests later; four processes share the work and the
/// engine's own pace returns.
#[test]
fn a_busy_serving_process_paces_clients_and_more_processes_relieve_it() {
    let path = "tests/scenarios/trtllm_serve_frontend.yaml";
    let run = predict_file_with(path, &[]).unwrap();
    // The report says how busy the process was and how late tokens came.
    let fe = &run.json["servesim"]["frontend"];
    assert_eq!(fe["requests"], 512);
    assert_eq!(fe["tokens"], 512 * 512);
    let busy = fe["busy_fraction"].as_f64().unwrap();
    assert!(busy > 0.5 && busy <= 1.0, "{busy}");
    assert!(fe["mean_token_delay_ms"].as_f64().unwrap() > 1.0, "{fe}");
    let one = run.summary;
    let four = predict_file_with(path, &["engine.workers.aggregated.frontend.processes=4"]).unwrap().summary;
    let none = predict_file_with(path, &["engine.workers.aggregated.frontend.chunk_us=0"]).unwrap();
    assert!(none.json["servesim"].get("frontend").is_none(), "no costs, no frontend section");
    let none = none.summary;
    // 512 output tokens × 75 µs = 38.4 ms of one process per request: at most 26 requests/s.
    assert!(one.request_throughput_rps <= 26.1, "{}", one.request_throughput_rps);
    assert!(none.request_throughput_rps > 1.3 * one.request_throughput_rps);
    assert!(four.request_throughput_rps > 1.3 * one.request_throughput_rps);
    assert!(one.tpot.mean > 1.5 * none.tpot.mean, "TPOT {} vs {}", one.tpot.mean, none.tpot.mean);
    assert!(four.tpot.mean < 1.05 * none.tpot.mean, "TPOT {} vs {}", four.tpot.mean, none.tpot.mean);
}

/// vLLM's batch queue plans each step while the one before it runs, so a prompt that arrives
/// mid-step waits one step longer for its prefill; its serving process also tokenises every
/// prompt token. Both add to TTFT only, and each can be turned off.
#[test]
fn vllm_plans_a_step_ahead_and_its_serving_process_tokenises_prompts() {
    let path = "tests/scenarios/vllm_api_servers.yaml";
    let run = |sets: &[&str]| predict_file_with(path, sets).unwrap().summary;
    let base = ["engine.workers.aggregated.frontend.prompt_token_us=0"];
    let ahead = run(&base);
    let stepwise = run(&[base[0], "engine.workers.aggregated.scheduler.plan_ahead=false"]);
    // Most prompts arrive while a step runs (Poisson arrivals at 40 requests/s).
    assert!(ahead.ttft.mean > stepwise.ttft.mean, "{} vs {}", ahead.ttft.mean, stepwise.ttft.mean);
    assert!(
        (ahead.tpot.mean / stepwise.tpot.mean - 1.0).abs() < 0.05,
        "{} vs {}",
        ahead.tpot.mean,
        stepwise.tpot.mean
    );
    // The calibrated 6 µs a token: 512 tokens add about 3 ms of process time to each request.
    let tokenised = run(&[]);
    let added = tokenised.ttft.mean - ahead.ttft.mean;
    assert!((2.5..6.0).contains(&added), "{added} ms");
    let sync = run(&["engine.workers.aggregated.scheduler.async_scheduling=false"]);
    let sync_ahead = run(&[
        "engine.workers.aggregated.scheduler.async_scheduling=false",
        "engine.workers.aggregated.scheduler.plan_ahead=true",
    ]);
    assert!(sync_ahead.ttft.mean > sync.ttft.mean, "an explicit plan_ahead wins over the default");
    let bad = config_refusal(path, &["engine.workers.aggregated.frontend.prompt_token_us=-1"]);
    assert!(bad.contains("engine.workers.aggregated.frontend.prompt_token_us"), "{bad}");
}

/// The frontend queue is modelled for aggregated workers; on a disaggregated role, and with
/// out-of-range values, it is a config error naming the field.
#[test]
fn frontend_settings_outside_the_model_are_config_errors() {
    let pd = predict_file_with(
        "tests/scenarios/pd_vllm.yaml",
        &["engine.workers.prefill.frontend={chunk_us: 50}"],
    )
    .expect_err("an error");
    assert_eq!(pd.exit_code(), 2, "{pd}");
    assert!(pd.to_string().contains("engine.workers.prefill.frontend"), "{pd}");
    let bad = predict_file_with(
        "tests/scenarios/trtllm_serve_frontend.yaml",
        &["engine.workers.aggregated.frontend.processes=0", "engine.workers.aggregated.frontend.speed=2"],
    )
    .expect_err("an error");
    let text = bad.to_string();
    assert_eq!(bad.exit_code(), 2, "{text}");
    assert!(text.contains("engine.workers.aggregated.frontend.processes"), "{text}");
    assert!(text.contains("engine.workers.aggregated.frontend.speed"), "{text}");
}

#[test]
fn a_full_cache_evicts_whole_blocks_and_without_prefix_caching_nothing_is_cached() {
    // Evicted tokens per worker, and the pool's block size as reported.
    let evicted = |overrides: &[&str]| -> (Vec<u64>, u64) {
        let p = predict_file_with("tests/scenarios/vllm_preemption.yaml", overrides).unwrap();
        let s = &p.json["servesim"];
        let block = s["deployment"]["roles"][0]["block_size"].as_u64().unwrap();
        let per_worker = s["time_series"]["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["kv_evicted_tokens"].as_u64().unwrap())
            .collect();
        (per_worker, block)
    };
    let (small, block) = evicted(&[]);
    assert!(small.iter().all(|t| *t > 0 && t % block == 0), "{small:?} in blocks of {block}");
    let (uncached, _) = evicted(&["engine.workers.aggregated.kv_cache.prefix_caching=false"]);
    assert!(uncached.iter().all(|t| *t == 0), "{uncached:?}");
}

/// SGLang's receive interval holds new prompts while requests decode until the scheduler's
/// next intake: every 30 decode steps in InferenceX's DeepSeek-R1 recipe, so a prompt waits
/// about 15 steps on average (the first wave finds the engine idle and waits for nothing).
/// Other engines refuse the key, naming it; 0 is out of range.
#[test]
fn sglang_recv_interval_holds_prompts_until_the_next_intake() {
    let path = "tests/scenarios/sglang_recv_interval.yaml";
    let held = predict_file_with(path, &[]).unwrap().summary;
    let open = predict_file_with(path, &["engine.workers.aggregated.scheduler.scheduler_recv_interval=1"])
        .unwrap()
        .summary;
    assert_eq!(held.completed_requests, open.completed_requests);
    let added = held.ttft.mean - open.ttft.mean;
    let fifteen_steps = 15.0 * held.tpot.mean;
    assert!(
        added > 0.6 * fifteen_steps && added < 1.2 * fifteen_steps,
        "TTFT {} ms held against {} ms: {added} ms more, 15 steps are {fifteen_steps} ms",
        held.ttft.mean,
        open.ttft.mean
    );
    for (file, set, words) in [
        (
            "data/scenarios/default.yaml",
            "engine.workers.aggregated.scheduler.scheduler_recv_interval=10",
            "SGLang knob",
        ),
        (path, "engine.workers.aggregated.scheduler.scheduler_recv_interval=0", "between 1 and 1000"),
    ] {
        let text = config_refusal(file, &[set]);
        assert!(text.contains("scheduler_recv_interval") && text.contains(words), "{text}");
    }
}

/// SGLang's `--enable-mixed-chunk` puts the running decodes into every prefill batch: a
/// request decoding while 64 clients' prompts arrive no longer waits out whole prefill
/// batches between tokens, so the longest gap and the time to the second token shrink, and
/// the engine serves more. Other engines refuse the key; SGLang turns it off under
/// speculative decoding, so servesim refuses that pair rather than ignore it.
#[test]
fn sglang_mixed_chunks_keep_decodes_running_through_prefill() {
    let path = "tests/scenarios/sglang_mixed_chunk.yaml";
    let mixed = predict_file_with(path, &[]).unwrap().summary;
    let apart = predict_file_with(path, &["engine.workers.aggregated.scheduler.enable_mixed_chunk=false"])
        .unwrap()
        .summary;
    assert_eq!(mixed.completed_requests, apart.completed_requests);
    assert!(
        mixed.itl.max < 0.25 * apart.itl.max,
        "max ITL {} ms mixed, {} ms apart",
        mixed.itl.max,
        apart.itl.max
    );
    assert!(
        mixed.ttst.mean < 0.5 * apart.ttst.mean,
        "TTST {} ms mixed, {} ms apart",
        mixed.ttst.mean,
        apart.ttst.mean
    );
    assert!(mixed.request_throughput_rps > apart.request_throughput_rps);
    for (file, set, words) in [
        (
            "data/scenarios/default.yaml",
            &["engine.workers.aggregated.scheduler.enable_mixed_chunk=true"][..],
            "SGLang knob",
        ),
        (path, &["engine.nextn=2", "engine.nextn_accepted=1.2"][..], "speculative decoding"),
    ] {
        let text = config_refusal(file, set);
        assert!(text.contains("enable_mixed_chunk") && text.contains(words), "{text}");
    }
}

/// SGLang sizes its prefill chunk by the GPU (`_handle_gpu_memory_settings`): 8,192 tokens on
/// H200, 16,384 on B200, unless the config sets `chunked_prefill_size`; `max_batched_tokens`,
/// which SGLang does not read, changes nothing.
#[test]
fn sglang_takes_its_prefill_chunk_from_the_gpu() {
    let path = "tests/scenarios/sglang_default.yaml";
    let long = [
        "traffic.source.input_tokens={dist: fixed, value: 12000}",
        "traffic.load.concurrency=4",
        "traffic.stop.requests=40",
    ];
    let run = |extra: &[&str]| {
        let mut set: Vec<&str> = long.to_vec();
        set.extend_from_slice(extra);
        predict_file_with(path, &set).unwrap().summary
    };
    let chunk = |n: u32| format!("engine.workers.aggregated.scheduler.chunked_prefill_size={n}");
    let (c8k, c16k) = (chunk(8192), chunk(16_384));
    let b200 = "engine.hardware=b200_sxm";
    // H200: the default is 8,192.
    let h200 = run(&[]);
    assert_eq!(h200, run(&[&c8k]));
    assert_ne!(h200, run(&[&c16k]));
    // B200: 16,384.
    let wide = run(&[b200]);
    assert_eq!(wide, run(&[b200, &c16k]));
    assert_ne!(wide, run(&[b200, &c8k]));
    // prediction.json says what was assumed: the chunk, and the memory fraction SGLang
    // derives with it (TP2 on 180 GiB: 512 + 16,384 x 1.5 + 512 x 2 + 256 MiB reserved).
    let j = predict_file_with(path, &[b200]).unwrap().json;
    assert_eq!(j["servesim"]["deployment"]["roles"][0]["chunked_prefill_size"], 16_384);
    assert_eq!(j["servesim"]["memory"]["aggregated"]["memory_fraction"], 0.857);
    assert_eq!(wide, run(&[b200, "engine.workers.aggregated.scheduler.max_batched_tokens=2048"]));
}

/// A config that leaves the step budget and the running-request cap out gets the engine's own
/// defaults: `vllm serve` sizes them by the GPU (A100 keeps the small ones), TensorRT-LLM
/// takes its `BuildConfig`, SGLang its request pool; a value in the config wins.
#[test]
fn schedulers_default_to_their_engines_limits() {
    let limits = |path: &str, set: &[&str]| {
        let j = predict_file_with(path, set).unwrap().json;
        let role = &j["servesim"]["deployment"]["roles"][0];
        (role["max_batched_tokens"].as_u64().unwrap(), role["max_sequences"].as_u64().unwrap())
    };
    let vllm = "data/scenarios/default.yaml";
    assert_eq!(limits(vllm, &[]), (8192, 1024));
    assert_eq!(limits(vllm, &["engine.model=Qwen/Qwen3-8B", "engine.hardware=a100_sxm"]), (2048, 256));
    assert_eq!(limits(vllm, &["engine.model=Qwen/Qwen3-8B", "engine.hardware=l40s"]), (2048, 256));
    assert_eq!(limits(vllm, &["engine.backend=trtllm"]), (8192, 2048));
    assert_eq!(
        limits(
            vllm,
            &[
                "engine.workers.aggregated.scheduler.max_sequences=64",
                "engine.workers.aggregated.scheduler.max_batched_tokens=4096"
            ]
        ),
        (4096, 64)
    );
    // SGLang: 1.83M KV tokens over Qwen3-32B's 40,960-token context is a pool of 22,891,
    // clamped to 4,096; its budget is its chunk.
    assert_eq!(limits("tests/scenarios/sglang_default.yaml", &[]), (8192, 4096));
}

/// TensorRT-LLM batch waiting holds prompts back while decodes run: with InferenceX's 1k/1k
/// settings at 8 clients every prompt waits for the timeout (the token ratio is never
/// reached), which adds about the timeout in decode steps to TTFT; other engines and attention
/// DP refuse the keys, naming them.
#[test]
fn trtllm_batch_waiting_delays_prompts_by_up_to_its_timeout() {
    let path = "tests/scenarios/trtllm_batch_wait.yaml";
    let held = predict_file_with(path, &[]).unwrap().summary;
    let off = predict_file_with(path, &["engine.workers.aggregated.scheduler.batch_wait_timeout_iters=0"])
        .unwrap()
        .summary;
    assert_eq!(held.completed_requests, off.completed_requests);
    let added = held.ttft.mean - off.ttft.mean;
    let twenty_steps = 20.0 * held.tpot.mean;
    assert!(
        added > 0.5 * twenty_steps && added < 1.2 * twenty_steps,
        "TTFT {} ms held against {} ms: {added} ms more, 20 steps are {twenty_steps} ms",
        held.ttft.mean,
        off.ttft.mean
    );
    for (file, set, words) in [
        (
            "data/scenarios/default.yaml",
            "engine.workers.aggregated.scheduler.batch_wait_timeout_iters=20",
            "TensorRT-LLM knob",
        ),
        (
            path,
            "engine.workers.aggregated.parallelism={tensor: 1, attention_data: 2}",
            "attention data parallelism",
        ),
    ] {
        let text = config_refusal(file, &[set]);
        assert!(text.contains("batch_wait_") && text.contains(words), "{text}");
    }
}

/// Speculative decoding: a round emits 1 + the accepted drafts, so TPOT × tokens a round is
/// the round's time, which costs more than a plain decode step (wider batch, draft layers)
/// and far less than as many plain steps. Every engine, MTP/EAGLE (`nextn`) and vLLM's n-gram
/// lookup; invalid settings are refused with the key named (exit 2).
#[test]
fn speculative_rounds_cost_more_than_a_step_and_emit_several_tokens() {
    let off = ["engine.nextn=0", "engine.nextn_accepted=null"];
    for (path, tokens, plain_sets) in [
        ("tests/scenarios/spec_mtp_trtllm.yaml", 3.2, &off[..]),
        ("tests/scenarios/spec_eagle_vllm.yaml", 2.8, &off[..]),
        ("tests/scenarios/spec_eagle_sglang.yaml", 2.8, &off[..]),
        ("tests/scenarios/spec_eagle_trtllm.yaml", 2.8, &off[..]),
        ("tests/scenarios/spec_ngram_vllm.yaml", 2.472, &["engine.speculation=null"][..]),
    ] {
        let run = predict_file_with(path, &[]).unwrap();
        let spec = run.summary;
        let plain_run = predict_file_with(path, plain_sets).unwrap();
        assert!(plain_run.json["servesim"]["speculation"].is_null(), "{path}");
        let plain = plain_run.summary;
        // The rounds emitted what the acceptance model expects (a sample of it, a little
        // less where outputs end inside a round).
        let sp = &run.json["servesim"]["speculation"];
        let per_round = sp["tokens_per_round"].as_f64().unwrap();
        assert!((sp["expected_tokens_per_round"].as_f64().unwrap() - tokens).abs() < 1e-9, "{path}");
        assert!((per_round / tokens - 1.0).abs() < 0.03, "{path}: {per_round} tokens a round");
        assert_eq!(spec.completed_requests, plain.completed_requests, "{path}");
        assert_eq!(spec.total_output_tokens, plain.total_output_tokens, "{path}");
        // Outputs end inside rounds, so a request's rounds emit a little fewer on average.
        let round_ms = spec.tpot.mean * tokens;
        assert!(
            round_ms > plain.tpot.mean && round_ms < 0.8 * tokens * plain.tpot.mean,
            "{path}: round {round_ms} ms vs plain step {} ms",
            plain.tpot.mean
        );
        // One inter-token gap per round's chunk: ITL is the round time, not TPOT.
        assert!(
            spec.itl.median > 1.5 * spec.tpot.median,
            "{path}: ITL {} TPOT {}",
            spec.itl.median,
            spec.tpot.median
        );
    }
    let default = "data/scenarios/default.yaml";
    for (file, sets, words) in [
        (default, &["engine.nextn=6"][..], "between 0 and 5"),
        (default, &["engine.nextn=3"][..], "nextn_accepted is required"),
        (default, &["engine.nextn=3", "engine.nextn_accepted=3.5"][..], "between 0 and 3"),
        (default, &["engine.nextn_accepted=1"][..], "needs nextn"),
        (
            "tests/scenarios/spec_mtp_trtllm.yaml",
            &["engine.speculation={kind: ngram, num_speculative_tokens: 2, acceptance_rates: [0.5, 0.5]}"][..],
            "exclusive",
        ),
        (
            "tests/scenarios/spec_eagle_sglang.yaml",
            &[
                "engine.nextn=0",
                "engine.nextn_accepted=null",
                "engine.speculation={kind: ngram, num_speculative_tokens: 2, acceptance_rates: [0.5, 0.5]}",
            ][..],
            "vLLM's",
        ),
        (
            "tests/scenarios/spec_ngram_vllm.yaml",
            &["engine.speculation.acceptance_rates=[0.8, 0.6]"][..],
            "one per draft position",
        ),
        (
            "tests/scenarios/spec_ngram_vllm.yaml",
            &["engine.speculation.acceptance_rates=[0.8, 1.6, 0.4]"][..],
            "[1]",
        ),
        (
            "tests/scenarios/fpm_vllm.yaml",
            &["engine.nextn=2", "engine.nextn_accepted=1"][..],
            "FPM cells time forward passes without drafts",
        ),
    ] {
        let text = config_refusal(file, sets);
        assert!(
            text.contains(words) && (text.contains("nextn") || text.contains("speculation")),
            "{sets:?}: {text}"
        );
    }
}

/// Draft-model speculation (vLLM): a round costs the target's verify pass plus the draft
/// model's passes, so TPOT lies between free drafts at the same acceptance (n-gram lookup)
/// and no speculation; the draft's weights and KV share the GPUs. Bad drafts are refused with
/// the key named.
#[test]
fn a_draft_model_costs_its_passes_and_its_memory() {
    let path = "tests/scenarios/spec_draft_model_vllm.yaml";
    let draft = predict_file_with(path, &[]).unwrap();
    let free =
        predict_file_with(path, &["engine.speculation.kind=ngram", "engine.speculation.model=null"]).unwrap();
    let plain = predict_file_with(path, &["engine.speculation=null"]).unwrap();
    let sp = &draft.json["servesim"]["speculation"];
    assert_eq!(sp["kind"], "draft_model");
    assert_eq!(sp["draft_model"], "meta-llama/Llama-3.1-8B-Instruct");
    // 1 + 0.8 + 0.8 x 0.7 + 0.8 x 0.7 x 0.6 + 0.8 x 0.7 x 0.6 x 0.5 tokens a round.
    assert!((sp["expected_tokens_per_round"].as_f64().unwrap() - 2.864).abs() < 1e-9);
    assert_eq!(sp["rounds"], free.json["servesim"]["speculation"]["rounds"], "same acceptance draws");
    let (d, f, p) = (draft.summary.tpot.mean, free.summary.tpot.mean, plain.summary.tpot.mean);
    assert!(f < d && d < p, "free drafts {f} ms < draft model {d} ms < none {p} ms");
    // Four passes of an 8B draft on four H200s add at least a few ms a round.
    assert!((d - f) * 2.864 > 4.0, "draft passes {} ms a round", (d - f) * 2.864);
    // The provenance counts the draft's kernel lookups beside the target's.
    let by_op = &draft.json["servesim"]["timing"][0]["lookups_by_op"];
    assert!(by_op["draft gemm"]["interpolated"].as_u64().unwrap() > 0, "{by_op}");
    assert!(
        by_op["gemm"].is_object()
            && free.json["servesim"]["timing"][0]["lookups_by_op"]["draft gemm"].is_null()
    );
    // The first draft pass also runs the prompts: TTFT grows too.
    assert!(draft.summary.ttft.median > free.summary.ttft.median);
    let mem = |r: &servesim_scenario::Prediction, k: &str| {
        r.json["servesim"]["memory"]["aggregated"][k].as_u64().unwrap()
    };
    // Llama-3.1-8B's bf16 weights over four GPUs, and its KV beside the target's in every block.
    let extra = mem(&draft, "weights_bytes") - mem(&plain, "weights_bytes");
    assert!(extra > 3_900_000_000 && extra < 4_100_000_000, "{extra}");
    assert_eq!(
        mem(&draft, "kv_size_per_token_bytes") - mem(&plain, "kv_size_per_token_bytes"),
        2 * 32 * 2 * 128 * 2
    );
    assert!(mem(&draft, "kv_blocks_per_rank") * 10 < mem(&plain, "kv_blocks_per_rank") * 7);
    for (sets, words) in [
        (&["engine.speculation.model=meta-llama/Llama-3.1-9B"][..], "unknown draft model"),
        (&["engine.speculation.model=Qwen/Qwen3-8B"][..], "share the target's tokenizer"),
        (&["engine.speculation.model=null"][..], "required for kind: draft_model"),
        (&["engine.speculation.kind=ngram"][..], "n-gram lookup has none"),
        (&["engine.backend=sglang"][..], "vLLM's here"),
        (
            &["engine.workers.aggregated.parallelism={tensor: 2, pipeline: 2}"][..],
            "without pipeline parallelism",
        ),
    ] {
        let text = config_refusal(path, sets);
        assert!(text.contains(words) && text.contains("engine."), "{sets:?}: {text}");
    }
}

/// `timing.allreduce: nccl` (an engine run with its custom all-reduce disabled) times every
/// tensor-parallel all-reduce from the NCCL table: slower decode at TP8, where each of Qwen3-32B's
/// 64 layers pays two of them a step, and nothing changes without tensor parallelism.
#[test]
fn nccl_allreduce_slows_tensor_parallel_steps_only() {
    let path = "tests/scenarios/vllm_sync_scheduling.yaml";
    let run = |tp: u32, ar: &str| {
        let sets = [
            format!("engine.workers.aggregated.parallelism.tensor={tp}"),
            format!("engine.workers.aggregated.timing.allreduce={ar}"),
        ];
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        predict_file_with(path, &sets).unwrap().summary
    };
    let (custom, nccl) = (run(8, "custom"), run(8, "nccl"));
    let added = nccl.tpot.mean - custom.tpot.mean;
    // H100 tables: a 64-sequence decode step (655 KB messages) pays about 6 µs more a call,
    // 0.7 ms over its 128 calls; a step with a 1,000-token prompt (10 MB messages) about 45 µs,
    // 6 ms. Measured: 14.7 → 17.2 ms.
    assert!((0.7..=4.0).contains(&added), "TPOT {} vs {}", nccl.tpot.mean, custom.tpot.mean);
    assert!(nccl.ttft.mean > custom.ttft.mean);
    let (one, one_nccl) = (run(1, "custom"), run(1, "nccl"));
    assert_eq!(one.tpot.mean.to_bits(), one_nccl.tpot.mean.to_bits());
    assert_eq!(one.ttft.mean.to_bits(), one_nccl.ttft.mean.to_bits());
}

/// `timing.moe_kernel: min_latency` (TensorRT-LLM's TRTLLM-gen experts) times DeepSeek-R1's
/// nvfp4 experts on B200 from AIConfigurator's min-latency table: at 16 decodes over TP4/EP4
/// that table takes 117 µs a layer where CUTLASS takes 274 µs, so a decode step loses about
/// 9 ms of its 21 (InferenceX measured 12.5 ms TPOT for this deployment with TRTLLM kernels).
/// The choice is checked like any other: a misspelt kernel and a timing model without
/// tables are refused, naming the field.
#[test]
fn trtllm_gen_moe_kernels_speed_up_small_batch_experts() {
    let path = "tests/scenarios/trtllm_moe_min_latency.yaml";
    let run = |k: &str| {
        let set = format!("engine.workers.aggregated.timing.moe_kernel={k}");
        predict_file_with(path, &[set.as_str()]).unwrap().summary
    };
    let (fast, default) = (run("min_latency"), run("default"));
    let saved = default.tpot.mean - fast.tpot.mean;
    assert!((7.0..=11.0).contains(&saved), "TPOT {} vs {}", fast.tpot.mean, default.tpot.mean);
    assert!(fast.ttft.mean < default.ttft.mean);
    for (sets, words) in [
        (&["engine.workers.aggregated.timing.moe_kernel=trtllm"][..], "min_latency"),
        (
            &["engine.workers.aggregated.timing.type=roofline"][..],
            "moe_kernel picks one of the op-level model's MoE tables",
        ),
    ] {
        let text = config_refusal(path, sets);
        assert!(text.contains(words) && text.contains("moe_kernel"), "{sets:?}: {text}");
    }
}

#[test]
fn sglang_refuses_a_derived_memory_fraction_with_nothing_left_and_says_what_to_set() {
    // SGLang 0.5.3+ reserves memory per CUDA-graph slot and attention-DP rank; at 64 ranks on
    // a 141 GiB H200 its own rule goes negative, so the derived fraction cannot be used.
    let wide = [
        "engine.backend=sglang",
        "engine.workers.aggregated.parallelism={tensor: 1, attention_data: 64, moe_expert: 64}",
        "traffic.stop={requests: 64}",
    ];
    let e = predict_file_with("tests/scenarios/moe_qwen3_30b_ep2.yaml", &wide).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, servesim_scenario::ScenarioError::Resource { .. }), "{text}");
    assert!(text.contains("derived mem_fraction_static for this layout is -0.17"), "{text}");
    assert!(text.contains("set engine.workers.aggregated.kv_cache.capacity.memory_fraction"), "{text}");
    // Given a fraction, as a deployment of that size must be, it runs.
    let mut given = wide.to_vec();
    given.push("engine.workers.aggregated.kv_cache.capacity={type: default, memory_fraction: 0.8}");
    let p = predict_file_with("tests/scenarios/moe_qwen3_30b_ep2.yaml", &given).unwrap();
    assert_eq!(p.summary.completed_requests, 64);
}

#[test]
fn a_token_id_trace_is_hashed_at_the_engine_block_unless_the_source_sets_one() {
    // Two prompts share their first 128 of 160 tokens. At the engine's 64-token KV block the
    // second reuses two blocks of the first; at Mooncake's 512 each prompt is one partial
    // block of its own and nothing is reused. A file of hash_ids beside it is refused.
    let dir = std::env::temp_dir().join(format!("servesim-token-blocks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prompt = |last: u32| (0..160).map(|i| if i < 128 { i } else { last + i }).collect::<Vec<_>>();
    let row = |ns: u64, last: u32| {
        format!(
            "{{\"arrival_time_ns\": {ns}, \"input_toks\": 160, \"output_toks\": 4, \"input_tok_ids\": {:?}}}\n",
            prompt(last)
        )
    };
    std::fs::write(dir.join("tokens.jsonl"), row(0, 1000) + &row(1_000_000_000, 2000)).unwrap();
    std::fs::write(dir.join("hashes.jsonl"), "{\"timestamp\": 0, \"hash_ids\": [1], \"output_length\": 4}\n")
        .unwrap();
    let run = |source: &str| {
        let yaml = format!(
            "engine:\n  model: meta-llama/Llama-3.1-8B-Instruct\n  hardware: h100_sxm\n  backend: vllm\n  workers:\n    aggregated:\n      kv_cache: {{prefix_caching: true, block_size: 64}}\ntraffic:\n  source: {source}\n  load: {{type: trace_timestamps}}\n"
        );
        servesim_scenario::predict(&yaml, "blocks.yaml", &[], None, &servesim_tests::DirFiles(dir.clone()))
    };
    // Reused tokens of the 320 prompt tokens.
    let reused = |source: &str| run(source).unwrap().summary.prefix_cache_reused_ratio * 320.0;
    let fine = reused("{type: trace, paths: [tokens.jsonl]}");
    assert!((fine - 128.0).abs() < 1e-9, "{fine}");
    assert!(reused("{type: trace, paths: [tokens.jsonl], block_size: 512}").abs() < 1e-9);
    let err = run("{type: trace, paths: [tokens.jsonl, hashes.jsonl]}").unwrap_err().to_string();
    assert!(
        err.contains("hashes.jsonl hashes its prompts in blocks of 512") && err.contains("block_size"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// TensorRT-LLM's attention-DP balance: holding prompts until every rank has one trades
/// TTFT for fewer steps in which one rank's prefill stalls the others' decodes, as its
/// "ADP Balance Strategy" blog measures (throughput up, TTFT up). Misplaced settings are
/// refused with the key named (exit 2).
#[test]
fn trtllm_attention_dp_balance_trades_ttft_for_decode_speed() {
    let path = "tests/scenarios/trtllm_adp_balance.yaml";
    let held = predict_file_with(path, &[]).unwrap().summary;
    let off = predict_file_with(
        path,
        &["engine.workers.aggregated.scheduler.attention_dp_config.enable_balance=false"],
    )
    .unwrap()
    .summary;
    assert_eq!(held.completed_requests, off.completed_requests);
    assert!(held.ttft.mean > 1.5 * off.ttft.mean, "TTFT {} held, {} off", held.ttft.mean, off.ttft.mean);
    assert!(held.tpot.mean < 0.85 * off.tpot.mean, "TPOT {} held, {} off", held.tpot.mean, off.tpot.mean);
    assert!(held.request_throughput_rps > 1.1 * off.request_throughput_rps);
    // A timeout of 0 never holds anything: the same run as balance off.
    let no_wait =
        predict_file_with(path, &["engine.workers.aggregated.scheduler.attention_dp_config.timeout_iters=0"])
            .unwrap()
            .summary;
    assert!((no_wait.ttft.mean - off.ttft.mean).abs() < 1e-9);
    for (set, words) in [
        ("engine.backend=vllm", "TensorRT-LLM knob"),
        (
            "engine.workers.aggregated.parallelism={tensor: 8, attention_data: 1, moe_expert: 8}",
            "attention data parallelism",
        ),
        ("engine.workers.aggregated.scheduler.attention_dp_config.timeout_iters=-1", "timeout_iters"),
        ("engine.workers.aggregated.scheduler.attention_dp_config.balance=true", "balance"),
    ] {
        let text = config_refusal(path, &[set]);
        assert!(text.contains("attention_dp_config") && text.contains(words), "{set}: {text}");
    }
}

#[test]
fn refused_requests_are_counted_by_reason_and_named_in_the_summary() {
    // Prompts of 40,000 tokens with outputs of 100,000 exceed Qwen3-32B's 40,960-token context.
    let long = predict_file_with(
        "data/scenarios/default.yaml",
        &[
            "traffic.source.input_tokens=40000",
            "traffic.source.output_tokens=100000",
            "traffic.stop.requests=5",
        ],
    )
    .unwrap();
    let why = &long.json["servesim"]["rejections"];
    assert_eq!(long.json["servesim"]["rejected_requests"], 5);
    assert_eq!((why["beyond_context"].as_u64(), why["beyond_kv_pool"].as_u64()), (Some(5), Some(0)));
    assert_eq!(long.summary.completed_requests, 0);
    let text = servesim_scenario::report::summary_table(&long);
    let context = why["context_tokens"].as_u64().unwrap();
    assert!(
        text.contains(&format!("5 requests were rejected and never ran: 5 longer (prompt + output) than the model's context of {context} tokens")),
        "{text}"
    );
    // Within the context but beyond a rank's KV pool (the pool cut to 64 blocks of 64 tokens).
    let pool = predict_file_with(
        "data/scenarios/default.yaml",
        &[
            "traffic.source.input_tokens=8000",
            "traffic.stop.requests=5",
            "engine.workers.aggregated.kv_cache.capacity.type=fixed",
            "engine.workers.aggregated.kv_cache.capacity.blocks=64",
        ],
    )
    .unwrap();
    let why = &pool.json["servesim"]["rejections"];
    assert_eq!((why["beyond_context"].as_u64(), why["beyond_kv_pool"].as_u64()), (Some(0), Some(5)));
    assert_eq!(why["kv_pool_tokens"], 4096);
    assert!(servesim_scenario::report::summary_table(&pool)
        .contains("5 longer than a rank's KV pool of 4096 tokens"));
    // A run that refuses nothing says nothing.
    let fine = predict_file_with("data/scenarios/default.yaml", &["traffic.stop.requests=5"]).unwrap();
    assert!(fine.json["servesim"].get("rejections").is_none());
    assert!(!servesim_scenario::report::summary_table(&fine).contains("rejected"));
}

#[test]
fn a_prompt_pool_recurs_like_a_benchmark_dataset_and_its_prompts_are_reused() {
    let pooled = predict_file_with("tests/scenarios/prompt_pool_aiperf.yaml", &[]).unwrap();
    let fresh =
        predict_file_with("tests/scenarios/prompt_pool_aiperf.yaml", &["traffic.source.prompt_pool=0"])
            .unwrap();
    // The first use of each of the 100 prompts computes it; the other 500 requests repeat one
    // and reuse all its full 64-token blocks but the one holding its last token.
    let recs = records(&pooled);
    let (mut first, mut repeats) = (0, 0);
    for r in &recs {
        let n = r["input_length"].as_u64().unwrap();
        match r["reused_input_tokens"].as_u64().unwrap() {
            0 => first += 1,
            k => {
                assert_eq!(k, (n - 1) / 64 * 64, "{r}");
                repeats += 1;
            }
        }
    }
    assert_eq!((first, repeats), (100, 500));
    let lens: BTreeSet<u64> = recs.iter().map(|r| r["input_length"].as_u64().unwrap()).collect();
    assert!(lens.len() <= 100, "at most 100 distinct prompt lengths: {}", lens.len());
    assert_eq!(fresh.summary.prefix_cache_reused_ratio, 0.0);
    assert!(pooled.summary.ttft.mean < 0.7 * fresh.summary.ttft.mean);
    // Without prefix caching a recurring prompt is computed again.
    let off = predict_file_with(
        "tests/scenarios/prompt_pool_aiperf.yaml",
        &["engine.workers.aggregated.kv_cache.prefix_caching=false"],
    )
    .unwrap();
    assert_eq!(off.summary.prefix_cache_reused_ratio, 0.0);
    // The static estimate counts the same reuse: 5/6 of requests, all full blocks but the
    // last token's (1,984 of a mean 2,000).
    let est = estimate_file_with("tests/scenarios/prompt_pool_aiperf.yaml", &[]).unwrap();
    let j = est.to_json();
    assert!((j["prompt_pool_reused_tokens"].as_f64().unwrap() - 1984.0 * 5.0 / 6.0).abs() < 1e-6, "{j}");
    // A KV pool that holds part of the prompts keeps those drawn again soon: 100 prompts of
    // 1,024 tokens, one client, 1,200 blocks (room for about 70 prompts). The replay reuses
    // 30.4% of prompt tokens; the estimate's LRU model says 29.8%.
    let part = [
        "traffic.source.input_tokens=1024",
        "traffic.source.output_tokens=16",
        "traffic.load.concurrency=1",
        "traffic.stop.requests=2000",
        "engine.workers.aggregated.kv_cache.capacity.type=fixed",
        "engine.workers.aggregated.kv_cache.capacity.blocks=1200",
    ];
    let replayed = predict_file_with("tests/scenarios/prompt_pool_aiperf.yaml", &part).unwrap();
    let estimated = estimate_file_with("tests/scenarios/prompt_pool_aiperf.yaml", &part).unwrap().to_json();
    let (r, e) = (
        replayed.summary.prefix_cache_reused_ratio,
        estimated["prompt_pool_reused_tokens"].as_f64().unwrap() / 1024.0,
    );
    assert!(r > 0.2 && r < 0.4 && (r - e).abs() < 0.03, "replay {r:.3}, estimate {e:.3}");
}

/// The static estimate of a scenario file with `--set` overrides.
fn estimate_file_with(
    rel: &str,
    sets: &[&str],
) -> Result<servesim_scenario::estimate::Estimate, servesim_scenario::ScenarioError> {
    let overrides: Vec<servesim_scenario::Override> =
        sets.iter().map(|s| servesim_scenario::Override::parse(s).unwrap()).collect();
    let text = std::fs::read_to_string(servesim_tests::repo_root().join(rel)).unwrap();
    let root = servesim_scenario::scenario::parse_with_overrides(&text, rel, &overrides)?;
    let catalog = servesim_scenario::catalog::Catalog::builtin().unwrap();
    let p = servesim_scenario::scenario::prepare(&root, rel, &catalog, None, &servesim_tests::DataOnly)?;
    servesim_scenario::estimate::estimate(&p)
}

#[test]
fn a_run_whose_times_overflow_fails_with_a_reason_instead_of_hanging() {
    // 1e-9 GB/s moves a prompt's KV in about a century of simulated time a request; the
    // queue of transfers runs past 2^64 ns. The run must stop with an error, not spin.
    let err = predict_file_with(
        "tests/scenarios/pd_sglang_kv_aware.yaml",
        &["engine.kv_transfer.bandwidth_gb_per_second=1e-9"],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("ran past 2^64 ns") && err.contains("bandwidths"), "{err}");
    // So must one whose next arrival lies past the end of time (it is never queued).
    let err = predict_file_with(
        "tests/scenarios/load_constant_rate.yaml",
        &["traffic.load={type: poisson, requests_per_second: 1e-300}", "traffic.stop={requests: 4}"],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("ran past 2^64 ns (about 584 years) after 1 finished requests"), "{err}");
    // A slow but finite link still runs to the end.
    let slow = predict_file_with(
        "tests/scenarios/pd_sglang_kv_aware.yaml",
        &["engine.kv_transfer.bandwidth_gb_per_second=1e-6"],
    )
    .unwrap();
    assert!(slow.summary.completed_requests > 0);
    assert_eq!(slow.summary.completed_requests, slow.summary.num_requests);
}

#[test]
fn a_long_run_s_page_sample_is_every_nth_record_and_the_csv_has_them_all() {
    let p = predict_file_with("tests/scenarios/load_constant_rate.yaml", &[]).unwrap();
    let all = servesim_scenario::report::to_jsonl(&p.requests);
    let lines: Vec<&str> = all.lines().collect();
    let n = p.requests.count();
    assert_eq!(n, lines.len());
    assert!(n > 40, "{n} records");
    let whole = p.requests.jsonl_sample(n);
    assert_eq!((whole.text.as_str(), whole.total, whole.every), (all.as_str(), n, 1));
    let s = p.requests.jsonl_sample(40);
    assert_eq!((s.total, s.every), (n, n.div_ceil(40)));
    let kept: Vec<&str> = lines.iter().copied().step_by(s.every).collect();
    assert_eq!(s.text.lines().collect::<Vec<_>>(), kept);
    assert!(kept.len() <= 40);
    let mut csv = Vec::new();
    p.requests.write_csv(&mut csv).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    assert_eq!(csv.lines().count(), n + 1);
    let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert_eq!(header, first.as_object().unwrap().keys().map(String::as_str).collect::<Vec<_>>());
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(row[header.iter().position(|k| *k == "uuid").unwrap()], first["uuid"].as_str().unwrap());
}

/// The power contract (REF §2.4): `power_w` and `power_coverage` are always present;
/// coverage is the share of op latency with an energy figure — 0 over kernel tables that
/// carry none, so no power is published — and both are null without per-op timing.
#[test]
fn power_is_withheld_with_its_coverage_stated() {
    let op = predict_file("data/scenarios/default.yaml").unwrap();
    assert_eq!(op.json["power_coverage"], 0.0);
    assert!(op.json["power_w"].is_null() && op.json.as_object().unwrap().contains_key("power_w"));
    for (path, sets) in [
        ("tests/scenarios/fpm_vllm.yaml", &[][..]),
        ("data/scenarios/default.yaml", &["engine.workers.aggregated.timing={type: roofline}"][..]),
    ] {
        let p = predict_file_with(path, sets).unwrap();
        assert!(p.json["power_w"].is_null() && p.json["power_coverage"].is_null(), "{path} {sets:?}");
        assert!(p.json.as_object().unwrap().contains_key("power_coverage"));
    }
}
