//! Hybrid models (linear-attention layers beside softmax attention), end to end: the recurrent
//! state each sequence holds is sized from the model, each engine keeps it where it does (vLLM
//! in its KV pool with a raised block size, SGLang in a pool split off by its memory ratio,
//! TensorRT-LLM in a state for every batch slot), prefix reuse ends where a state was kept, and
//! what is not simulated is refused with the setting to change.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use servesim_tests::{config_refusal, predict_file_with};

const VLLM: &str = "tests/scenarios/hybrid_qwen35_vllm_sessions.yaml";
const SGLANG: &str = "tests/scenarios/hybrid_qwen35_sglang_sessions.yaml";

/// Qwen3.5-27B's state on one GPU (TP1), by hand from its config: 48 Gated DeltaNet layers,
/// each with 48 value heads of 128x128 matrices (4 bytes each in float32, its
/// `mamba_ssm_dtype`) and the last 3 inputs of its convolution over 2x16 key heads and 48
/// value heads of 128 channels (2 bytes each).
const STATE_FP32: u64 = 48 * (48 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 48 * 128) * 2);

fn run(rel: &str, sets: &[&str]) -> servesim_scenario::Prediction {
    predict_file_with(rel, sets).unwrap()
}

fn state(p: &servesim_scenario::Prediction) -> &Value {
    &p.json["servesim"]["memory"]["aggregated"]["recurrent_state"]
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

fn role(p: &servesim_scenario::Prediction) -> &Value {
    &p.json["servesim"]["deployment"]["roles"][0]
}

#[test]
fn vllm_keeps_states_in_its_kv_pool_with_a_block_size_raised_to_hold_one() {
    let p = run(VLLM, &[]);
    let st = state(&p);
    assert_eq!(n(st, "bytes_per_sequence"), STATE_FP32);
    assert_eq!(st["ssm_dtype"], "float32");
    assert_eq!(st["kept_in"], "kv_pool_blocks");
    // One layer's state is 3,207,168 bytes and one layer's KV 4,096 bytes a token (4 KV heads
    // of 256 in bf16, K and V): 783 tokens, rounded up to vLLM's 16-token kernel blocks.
    assert_eq!(n(role(&p), "block_size"), 784);
    assert_eq!(n(st, "block_size_configured"), 64);
    // A block holds 784 tokens of 16 layers' KV (51,380,224 bytes): three hold a state.
    assert_eq!(n(st, "blocks_per_sequence"), 3);
    let mem = &p.json["servesim"]["memory"]["aggregated"];
    assert_eq!(n(mem, "kv_blocks_per_rank"), n(mem, "total_kv_size_tokens") / 784);
    assert_eq!(st["prefix_reuse"], "block_boundary_checkpoints");
    // The state's type can be set as vLLM's --mamba-ssm-cache-dtype sets it.
    let half = run(VLLM, &["engine.workers.aggregated.kv_cache.state_cache.ssm_dtype=bfloat16"]);
    assert_eq!(
        n(state(&half), "bytes_per_sequence"),
        48 * (48 * 128 * 128 * 2 + 3 * (2 * 16 * 128 + 48 * 128) * 2)
    );
    assert_eq!(n(role(&half), "block_size"), 400);
}

#[test]
fn sglang_splits_a_state_pool_off_whose_slots_bound_the_running_requests() {
    let p = run(SGLANG, &[]);
    let st = state(&p);
    assert_eq!(n(st, "bytes_per_sequence"), STATE_FP32);
    assert_eq!(st["kept_in"], "state_pool_slots");
    let slots = n(st, "slots");
    assert_eq!(n(st, "reserved_bytes"), slots * STATE_FP32);
    // --mamba-full-memory-ratio 0.9: the states get 0.9 / 1.9 of what the weights leave.
    let kv = n(&p.json["servesim"]["memory"]["aggregated"], "kv_cache_bytes");
    let total = kv + slots * STATE_FP32;
    #[allow(clippy::cast_precision_loss)]
    let share = (slots * STATE_FP32) as f64 / total as f64;
    assert!((share - 0.9 / 1.9).abs() < 0.01, "{share}");
    assert!(n(role(&p), "max_sequences") <= slots);
    // A small state pool bounds the batch: requests wait for a slot.
    let small = run(SGLANG, &["engine.workers.aggregated.kv_cache.state_cache.mamba_full_memory_ratio=0.02"]);
    let few = n(state(&small), "slots");
    assert!(few < 24, "{few} slots");
    assert_eq!(n(role(&small), "max_sequences"), few);
    assert!(
        small.summary.ttft.mean > 2.0 * p.summary.ttft.mean,
        "{} vs {}",
        small.summary.ttft.mean,
        p.summary.ttft.mean
    );
}

/// The states SGLang keeps for reuse (a finished request's, at its sequence's end) hold
/// slots of the same pool as the running requests': with slots to spare none is dropped; with
/// about one slot a session in flight, admitting a request drops the least recently used
/// kept state, and the sessions' next turns find fewer to resume from.
#[test]
fn kept_states_share_sglangs_state_pool_with_the_running_requests() {
    let p = run(SGLANG, &[]);
    assert_eq!(n(state(&p), "dropped_states"), 0);
    let tight = run(SGLANG, &["engine.workers.aggregated.kv_cache.state_cache.mamba_full_memory_ratio=0.05"]);
    let slots = n(state(&tight), "slots");
    assert!((24..40).contains(&slots), "{slots} slots for 24 sessions in flight");
    assert!(n(state(&tight), "dropped_states") > 0);
    let reuse = |p: &servesim_scenario::Prediction| p.json["prefix_cache_reused_ratio"].as_f64().unwrap();
    assert!(reuse(&tight) < 0.5 * reuse(&p), "{} vs {}", reuse(&tight), reuse(&p));
    let summary = servesim_scenario::report::summary_table(&tight);
    assert!(summary.contains("kept states dropped"), "{summary}");
}

#[test]
fn tensorrt_llm_allocates_a_state_for_every_batch_slot() {
    let sets = [
        "engine.backend=trtllm",
        "engine.workers.aggregated.kv_cache.prefix_caching=false",
        "engine.workers.aggregated.scheduler.max_sequences=32",
    ];
    let p = run(VLLM, &sets);
    let st = state(&p);
    assert_eq!(st["kept_in"], "max_batch_size_slots");
    assert_eq!(n(st, "slots"), 32);
    assert_eq!(n(st, "reserved_bytes"), 32 * STATE_FP32);
    assert_eq!(st["prefix_reuse"], "none");
    let fewer = run(VLLM, &[sets[0], sets[1], "engine.workers.aggregated.scheduler.max_sequences=16"]);
    let kv =
        |p: &servesim_scenario::Prediction| n(&p.json["servesim"]["memory"]["aggregated"], "kv_cache_bytes");
    assert_eq!(kv(&fewer) - kv(&p), 16 * STATE_FP32);
    // Its default max_batch_size (2,048) leaves no room for states of this size.
    let err = predict_file_with(VLLM, &sets[..2]).unwrap_err().to_string();
    assert!(err.contains("2048 max_batch_size slots") && err.contains("max_sequences"), "{err}");
}

#[test]
fn a_hybrid_model_resumes_sessions_but_not_the_system_prompts_they_share() {
    // Sessions in groups that share half of their first turn: a transformer reuses the shared
    // part too, a hybrid model only its own history (no state was kept where the shared part
    // ends).
    let reuse = |rel: &str, sets: &[&str]| run(rel, sets).summary.prefix_cache_reused_ratio;
    let unshared = ["traffic.source.session.shared_prefix_ratio=0"];
    let dense = ["engine.model=Qwen/Qwen3-32B"];
    let dense_unshared = [dense[0], unshared[0]];
    for rel in [VLLM, SGLANG] {
        let hybrid = reuse(rel, &[]);
        assert!(hybrid > 0.4, "{rel}: sessions resume ({hybrid})");
        assert!((hybrid - reuse(rel, &unshared)).abs() < 0.005, "{rel}");
        let gain = reuse(rel, &dense) - reuse(rel, &dense_unshared);
        assert!(gain > 0.02, "{rel}: a transformer reuses shared prompts ({gain})");
    }
    // vLLM resumes at a 784-token block boundary, SGLang where the last turn ended.
    assert!(reuse(SGLANG, &[]) > reuse(VLLM, &[]) + 0.05);
}

#[test]
fn prefill_and_decode_workers_move_the_state_with_the_kv() {
    // One request at a time over 1 GB/s links: the state's bytes add their time to the
    // transfer, so float32 matrices cost (153,944,064 - 78,446,592) bytes / 1 GB/s = 75.5 ms
    // more TTFT than bfloat16 ones.
    let pd = |backend: &str, dtype: &str| {
        let backend = format!("engine.backend={backend}");
        let dtype = format!("{{kv_cache: {{state_cache: {{ssm_dtype: {dtype}}}}}}}");
        let workers = format!("engine.workers={{prefill: {dtype}, decode: {dtype}}}");
        run(
            VLLM,
            &[
                backend.as_str(),
                "engine.mode=disaggregated",
                workers.as_str(),
                "engine.kv_transfer={bandwidth_gb_per_second: 1}",
                "traffic.source={type: synthetic, input_tokens: 1000, output_tokens: 20}",
                "traffic.load={type: concurrency, concurrency: 1}",
                "traffic.stop={requests: 6}",
            ],
        )
    };
    let half = 48 * (48 * 128 * 128 * 2 + 3 * (2 * 16 * 128 + 48 * 128) * 2);
    for backend in ["sglang", "vllm"] {
        let (a, b) = (pd(backend, "float32"), pd(backend, "bfloat16"));
        assert_eq!(a.summary.completed_requests, 6, "{backend}");
        #[allow(clippy::cast_precision_loss)]
        let want_ms = (STATE_FP32 - half) as f64 / 1e6;
        let got = a.summary.ttft.mean - b.summary.ttft.mean;
        assert!((got - want_ms).abs() < 1.0, "{backend}: {got} ms more, {want_ms} expected");
    }
}

#[test]
fn what_is_not_simulated_for_hybrid_models_is_refused_with_the_setting() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["engine.workers.aggregated.kv_cache.host_offload={num_host_blocks: 100}"],
            "offloading its recurrent state to host memory",
        ),
        (
            &[
                "engine.kv_eviction_policy=belady",
                "traffic.source={type: synthetic, input_tokens: 1000, output_tokens: 100}",
                "traffic.load={type: poisson, requests_per_second: 1}",
                "traffic.stop={requests: 10}",
            ],
            "Belady eviction beside its recurrent state",
        ),
        (&["engine.backend=trtllm"], "set prefix_caching: false"),
        (&["engine.workers.aggregated.scheduler.max_batched_tokens=512"], "must be at least that"),
        (
            &["engine.workers.aggregated.kv_cache.state_cache.mamba_full_memory_ratio=0.5"],
            "'mamba_full_memory_ratio' is an SGLang setting",
        ),
        (
            &[
                "engine.model=Qwen/Qwen3-32B",
                "engine.workers.aggregated.kv_cache.state_cache.ssm_dtype=float32",
            ],
            "has no linear-attention layers",
        ),
        (&["engine.workers.aggregated.kv_cache.state_cache.ssm_dtype=fp8"], "ssm_dtype"),
    ];
    for (sets, want) in cases {
        let err = config_refusal(VLLM, sets);
        assert!(err.contains(want), "{sets:?}: {err}");
    }
}
