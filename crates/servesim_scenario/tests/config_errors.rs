//! Bad configs give every problem with its dotted path and position, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use servesim_scenario::catalog::Catalog;
use servesim_scenario::scenario::{parse_with_overrides, prepare};
use servesim_scenario::{NoFiles, ScenarioError};

const BASE: &str = "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n";

fn errors(text: &str) -> (i32, String) {
    let catalog = Catalog::builtin().unwrap();
    let result = parse_with_overrides(text, "t.yaml", &[])
        .and_then(|root| prepare(&root, "t.yaml", &catalog, None, &NoFiles));
    match result {
        Ok(_) => (0, String::new()),
        Err(e) => (e.exit_code(), e.to_string()),
    }
}

/// (config, exit code, every substring the message must contain)
const CASES: &[(&str, i32, &[&str])] = &[
    // Extreme numbers are shown as written, not as hundreds of digits.
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\ntraffic:\n  load: {type: poisson, requests_per_second: -1e-300}\n  source: {type: synthetic-session, session: {shared_prefix_ratio: 1e300}}\n",
        2,
        &["requests_per_second", "greater than 0, got -1e-300", "between 0 and 1, got 1e300"],
    ),
    // A count beyond what a run replays is refused, not silently cut to the limit.
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\ntraffic:\n  load: {type: constant_rate, requests_per_second: 6}\n  stop:\n    requests_per_load_unit: 4294967296\n",
        2,
        &["traffic.stop.requests_per_load_unit (line 8", "is 25769803776, more than the 10000000"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\ntraffic:\n  source: {type: synthetic-session, session: {turns: 2}}\n  load: {type: concurrency, concurrency: 8}\n  stop: {sessions_per_load_unit: 2000000}\n",
        2,
        &["traffic.stop.sessions_per_load_unit (line 8", "is 16000000, more than"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\ntraffic:\n  source: {type: synthetic-session, session: {turns: 65536}}\n  load: {type: concurrency, concurrency: 8}\n  stop: {sessions: 200}\n",
        2,
        &["traffic.stop.sessions (line 8", "200 sessions of 65536 turns are 13107200 requests"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\ntraffic:\n  source: {type: synthetic, input_tokens: 1, output_tokens: 1}\n  load: {type: kv_capacity_fraction, fraction: 100}\n",
        2,
        &["traffic.load.fraction (line 7", "concurrent requests, more than the 1000000"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  speculation: {kind: eagle, num_speculative_tokens: 9, acceptance_rates: 0.5, seeds: 1}\n  workers: {aggregated: {}}\n",
        2,
        &[
            "engine.speculation.kind (line 4",
            "not one of: ngram",
            "engine.speculation.num_speculative_tokens",
            "between 1 and 5",
            "engine.speculation.acceptance_rates",
            "expected a list",
            "engine.speculation.seeds",
            "did you mean 'seed'",
        ],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  nextn: 2.5\n  nextn_accepted: 1\n  workers: {aggregated: {}}\n",
        2,
        &["engine.nextn (line 4, column 10)", "expected an integer"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers:\n    aggregated: {timing: {allreduce: ring}}\n",
        2,
        &["engine.workers.aggregated.timing.allreduce (line 5", "not one of: custom, nccl"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers:\n    aggregated: {timing: {type: roofline, allreduce: nccl}}\n",
        2,
        &["engine.workers.aggregated.timing.allreduce", "op-level model's tables"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  nextn: 9\n  speculation: {kind: ngram, num_speculative_tokens: 2, acceptance_rates: [0.5, 0.4]}\n  workers: {aggregated: {}}\n",
        2,
        &["engine.nextn (line 5", "between 0 and 5"],
    ),
    ("engine: [1, 2\n", 2, &["(document) (line"]),
    ("traffic: {}\n", 2, &["engine (line 1, column 1): required section is missing"]),
    ("engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n", 2, &["engine.workers (line 2, column 3): required"]),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  mode: disaggregated\n  workers: {prefill: {}}\n",
        2,
        &["engine.workers.decode", "required in disaggregated mode"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {hardware: h200_sxm}}\n",
        2,
        &["engine.workers.aggregated.hardware", "disaggregated pools"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  kv_transfer: {bandwidth_gb_per_second: 10}\n  workers: {aggregated: {}}\n",
        2,
        &["engine.kv_transfer", "disaggregated"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  mode: disaggregated\n  kv_transfer: {bandwidth_gb_per_second: -1, timing_mode: partial}\n  workers: {prefill: {hardware: x100}, decode: {}}\n",
        2,
        &[
            "engine.kv_transfer.bandwidth_gb_per_second (line 5",
            "engine.kv_transfer.timing_mode",
            "not one of: destination_missing, full",
        ],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: sglang\n  enable_chunked_prefill: false\n  workers: {aggregated: {scheduler: {schedule_policy: random}}}\n",
        2,
        &["enable_chunked_prefill", "schedule_policy", "not one of: fcfs, fifo, lpm"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {scheduler: {schedule_policy: lpm}}}\n",
        2,
        &["'schedule_policy' is an SGLang knob"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {scheduler: {async_scheduling: sometimes}}}\n",
        2,
        &["engine.workers.aggregated.scheduler.async_scheduling (line 4"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {scheduler: {async_scheduling: false}, timing: {type: roofline}}}\n",
        2,
        &["engine.workers.aggregated.scheduler (line 4", "op-level timing model only"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {parallelism: {tensor: 3}}}\n",
        2,
        &["engine.workers.aggregated.parallelism.tensor", "not divisible"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\ntraffic:\n  source: {type: trace}\n",
        2,
        &["traffic.source.paths", "required for source type 'trace'"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\ntraffic:\n  source: {type: trace, paths: [x.jsonl]}\n",
        2,
        &["traffic.source.paths[0]", "cannot read 'x.jsonl'"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\ntraffic:\n  load: {type: trace_timestamps}\n",
        2,
        &["traffic.load.type", "not one of: concurrency, poisson, constant_rate, gamma, kv_capacity_fraction"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\ntraffic:\n  source: {type: synthetic-session}\n  load: {type: poisson, requests_per_second: 3}\n",
        2,
        &["traffic.load.sessions_per_second", "required for load type 'poisson'", "traffic.load.requests_per_second", "does not apply"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\ntraffic:\n  source:\n    input_tokens: {dist: lognormal, mean: 100}\n    output_tokens: {dist: uniform, min: 9, max: 3}\n",
        2,
        &["traffic.source.input_tokens.std", "min (9) must not exceed max (3)"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\nrouter: {policy: kv_aware, temperature: -1, prefill_load_model: aic}\n",
        2,
        &["router.temperature", "prefill_load_model 'aic'"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers: {aggregated: {}}\nrouter: {policy: round_robin, temperature: 0.5}\n",
        2,
        &["router.temperature", "does not apply to router policy 'round_robin'"],
    ),
    (
        "engine:\n  model: meta-llama/Llama-3.1-70B-Instruct\n  hardware: h100_sxm\n  mode: disaggregated\n  workers: {prefill: {parallelism: {tensor: 8}}, decode: {}}\n",
        3,
        &["decode workers", "does not fit"],
    ),
    // Host offload (G2): aggregated only, sized one way, with prefix caching, for
    // attention-only models; SGLang's HiCache larger than GPU memory.
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: sglang\n  workers: {aggregated: {kv_cache: {host_offload: {num_host_blocks: 10}}}}\n",
        3,
        &["aggregated workers", "HiCache needs more host memory than GPU memory", "holds 10 tokens a rank"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3.5-27B\n  hardware: h100_sxm\n  backend: sglang\n  workers: {aggregated: {parallelism: {tensor: 2}, kv_cache: {host_offload: {size_gib: 400}}}}\n",
        2,
        &["engine.workers.aggregated.kv_cache.host_offload", "hybrid model", "recurrent state to host memory is not simulated"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: sglang\n  workers: {aggregated: {kv_cache: {host_offload: {size_gib: 400, write_policy: write_backs}}}}\n",
        2,
        &["host_offload.write_policy (line 5", "'write_backs' is not one of", "did you mean 'write_back'?"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers: {aggregated: {kv_cache: {host_offload: {size_gib: 400, write_policy: write_through}}}}\n",
        2,
        &["host_offload.write_policy (line 5", "SGLang HiCache's (--hicache-write-policy)"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: sglang\n  workers: {aggregated: {kv_cache: {host_offload: {hicache_ratio: 1}}}}\n",
        2,
        &["host_offload.hicache_ratio (line 5", "must be above 1, got 1"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: trtllm\n  workers: {aggregated: {kv_cache: {host_offload: {hicache_ratio: 2}}}}\n",
        2,
        &["host_offload.hicache_ratio (line 5", "SGLang HiCache's (--hicache-ratio)"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: sglang\n  workers: {aggregated: {kv_cache: {host_offload: {hicache_ratio: 2, size_gib: 100}}}}\n",
        2,
        &["kv_cache.host_offload (line 5", "give one of num_host_blocks, size_gib and hicache_ratio"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  mode: disaggregated\n  workers: {prefill: {}, decode: {kv_cache: {host_offload: {num_host_blocks: 10}}}}\n",
        2,
        &["engine.workers.decode.kv_cache.host_offload", "aggregated and prefill workers, not decode workers"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers:\n    aggregated:\n      kv_cache:\n        prefix_caching: false\n        host_offload: {num_host_blocks: 10}\n",
        2,
        &["kv_cache.host_offload (line 9", "needs prefix_caching: true"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers:\n    aggregated:\n      kv_cache:\n        host_offload: {num_host_blocks: 10, size_gib: 4, scope: cluster, h2d_bandwidth_gbps: -1, shared_d2h_bandwidth_gbps: 80, num_blocks: 3}\n",
        2,
        &[
            "give one of num_host_blocks, size_gib and hicache_ratio",
            "host_offload.scope",
            "dp_rank_local",
            "host_offload.h2d_bandwidth_gbps",
            "between 0 and 1000000, got -1",
            "host_offload.shared_d2h_bandwidth_gbps",
            "applies to scope: cluster_shared only",
            "host_offload.num_blocks",
        ],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers:\n    aggregated:\n      kv_cache:\n        host_offload: {num_host_blocks: 10, scope: cluster_shared, shared_h2d_bandwidth_gbps: -5}\n",
        2,
        &["host_offload.shared_h2d_bandwidth_gbps (line 8", "got -5"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers:\n    aggregated:\n      kv_cache:\n        host_offload: {num_host_blocks: 10, scope: cluster_shared}\n        g3_offload: {scope: cluster_shared, num_g3_blocks: 10}\n",
        2,
        &["kv_cache.g3_offload (line 9", "not behind a cluster-shared host pool"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: sglang\n  workers: {aggregated: {kv_cache: {host_offload: {hicache_ratio: 2, scope: cluster_shared}}}}\n",
        2,
        &["kv_cache.host_offload.scope (line 5", "simulated for vLLM, as in AISimulate", "scope: dp_rank_local"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers: {aggregated: {kv_cache: {host_offload: {d2h_bandwidth_gbps: 16}}}}\n",
        2,
        &["kv_cache.host_offload (line 5", "needs num_host_blocks (blocks a rank holds), size_gib or, for SGLang, hicache_ratio"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers: {aggregated: {kv_cache: {g3_offload: {scope: worker_local, num_g3_blocks: 10}}}}\n",
        2,
        &["kv_cache.g3_offload (line 5", "needs host_offload"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: sglang\n  workers: {aggregated: {kv_cache: {host_offload: {hicache_ratio: 2}, g3_offload: {scope: worker_local, num_g3_blocks: 10, prefetch_policy: eventually, prefetch_threshold: 0}}}}\n",
        2,
        &[
            "kv_cache.g3_offload.prefetch_policy (line 5",
            "best_effort, wait_complete, timeout",
            "kv_cache.g3_offload.prefetch_threshold (line 5",
        ],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers: {aggregated: {kv_cache: {host_offload: {num_host_blocks: 10}, g3_offload: {scope: worker_local, num_g3_blocks: 10, prefetch_policy: wait_complete}}}}\n",
        2,
        &["kv_cache.g3_offload.prefetch_policy (line 5", "SGLang HiCache's (--hicache-storage-prefetch-policy"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: trtllm\n  workers: {aggregated: {kv_cache: {host_offload: {num_host_blocks: 10}, g3_offload: {scope: worker_local, num_g3_blocks: 10}}}}\n",
        2,
        &["kv_cache.g3_offload (line 5", "behind vLLM's host offloading and SGLang's HiCache, not TensorRT-LLM's"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers:\n    aggregated:\n      parallelism: {attention_data: 2}\n      kv_cache:\n        host_offload: {num_host_blocks: 10}\n        g3_offload: {scope: worker_local, num_g3_blocks: 10}\n",
        2,
        &["kv_cache.g3_offload (line 10", "attention_data: 1 only (this role has 2)"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers:\n    aggregated:\n      kv_cache:\n        host_offload: {num_host_blocks: 10}\n        g3_offload: {scope: local, num_g3_blocks: 0, read_bandwidth_gbps: -2, blocks: 4}\n",
        2,
        &["g3_offload.scope", "worker_local", "g3_offload.num_g3_blocks", "g3_offload.read_bandwidth_gbps", "g3_offload.blocks"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers:\n    aggregated:\n      kv_cache:\n        host_offload: {num_host_blocks: 10}\n        g3_offload: {scope: worker_local, shared_read_bandwidth_gbps: 40}\n",
        2,
        &["g3_offload (line 9", "needs num_g3_blocks", "g3_offload.shared_read_bandwidth_gbps", "cluster_shared only"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers:\n    aggregated:\n      kv_cache:\n        host_offload: {num_host_blocks: 10}\n        g3_offload: {num_g3_blocks: 10}\n",
        2,
        &["g3_offload (line 9", "needs scope: worker_local"],
    ),
    (
        "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  workers: {aggregated: {kv_cache: {host_offload: {size_gib: 0.001}}}}\n",
        3,
        &["kv_cache.host_offload holds no block", "tensor-parallel GPUs"],
    ),
];

#[test]
fn every_bad_config_is_explained() {
    for (text, code, needles) in CASES {
        let (got, msg) = errors(text);
        assert_eq!(got, *code, "{text}\n{msg}");
        for n in *needles {
            assert!(msg.contains(n), "missing '{n}' in:\n{msg}\nfor:\n{text}");
        }
    }
}

#[test]
fn an_invalid_nextn_beside_an_ngram_block_is_reported_once() {
    let text = "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: vllm\n  nextn: 9\n  speculation: {kind: ngram, num_speculative_tokens: 2, acceptance_rates: [0.5, 0.4]}\n  workers: {aggregated: {}}\n";
    let (_, msg) = errors(text);
    assert!(!msg.contains("exclusive"), "{msg}");
    let text = text.replace("nextn: 9", "nextn: 2\n  nextn_accepted: 1");
    assert!(errors(&text).1.contains("exclusive"));
}

#[test]
fn a_valid_base_is_valid() {
    assert_eq!(errors(&format!("{BASE}  workers: {{aggregated: {{}}}}\n")).0, 0);
    assert_eq!(
        errors(&format!(
            "{BASE}  backend: vllm\n  workers: {{aggregated: {{kv_cache: {{host_offload: {{size_gib: 8, scope: dp_rank_local, latency_to_first_byte_ms: 0.01}}}}}}}}\n"
        ))
        .0,
        0
    );
    assert_eq!(
        errors(&format!("{BASE}  mode: disaggregated\n  workers: {{prefill: {{}}, decode: {{}}}}\n")).0,
        0
    );
}

proptest::proptest! {
    /// Fuzz: arbitrary text through the whole config pipeline gives a result or an error.
    #[test]
    fn arbitrary_text_never_panics(text in "[ -~\n\t]{0,300}") {
        let _ = errors(&text);
    }

    /// Fuzz: mutations of a valid config (random keys and values spliced in) never panic.
    #[test]
    fn spliced_configs_never_panic(
        key in "(engine|traffic|router|evaluation|workers|load|source|stop|scheduler|kv_cache|parallelism|mode|backend)",
        value in "(\\{\\}|\\[\\]|-?[0-9]{1,6}|[a-z_]{1,10}|\\{type: [a-z_-]{1,12}\\}|null|true|1e99|-0\\.5)",
        at in 0usize..6,
    ) {
        let lines: Vec<&str> = "engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  workers:\n    aggregated: {}\ntraffic:\n  load: {type: concurrency}\n".lines().collect();
        let mut out = String::new();
        for (i, l) in lines.iter().enumerate() {
            out.push_str(l);
            out.push('\n');
            if i == at {
                let indent = l.len() - l.trim_start().len();
                out.push_str(&format!("{}{key}: {value}\n", " ".repeat(indent)));
            }
        }
        let _ = errors(&out);
    }
}

#[test]
fn scenario_error_kinds_map_to_exit_codes() {
    assert_eq!(ScenarioError::Run { message: String::new() }.exit_code(), 1);
    assert_eq!(ScenarioError::Resource { message: String::new() }.exit_code(), 3);
}
