//! Each worker role of the `engine` block: its parallelism, scheduler knobs, KV cache,
//! capacity, frontend and timing model, with the engine defaults a role inherits.

use servesim_core::engine::Backend;
use servesim_perf::memory::StateDtype;
use servesim_perf::oplevel::{release_before, release_triple, AllReduceImpl, MoeKernel};

use crate::config::{
    Capacity, FpmSource, FrontendConfig, G3OffloadConfig, G3Scope, HicachePrefetchPolicy,
    HicacheStorageConfig, HostOffloadConfig, HostSize, KvCacheConfig, KvTransferConfig, Mode,
    ParallelismConfig, RoleConfig, SchedulerKnobs, SharedHostLinks, StateCacheConfig, TimingConfig,
    TimingKind, TransferMode, Workers,
};
use crate::diag::{boolean, choice, number_in, positive, string, u32_in, u64_min, Cx, Fields};
use crate::node::{Node, Value};

use super::{MAX_CONCURRENCY, MAX_PARALLEL, MAX_TOKENS};

/// The engine's default memory fraction: TensorRT-LLM's `free_gpu_memory_fraction` 0.9,
/// vLLM's `gpu_memory_utilization` 0.92 from 0.20 on and 0.9 before (AICDB §5.6 point 6;
/// vLLM's engine arguments give 0.92), SGLang's `mem_fraction_static` 0.88 before 0.5.3 and
/// from then on `None`: derived from the GPU's memory and the layout when the memory is
/// planned ([`servesim_perf::memory::sglang_default_fraction`]). A release that does not parse,
/// or none, is taken as recent.
pub(crate) fn default_memory_fraction(backend: Backend, version: Option<&str>) -> Option<f64> {
    match backend {
        Backend::Sglang if !sglang_since_0_5_3(version) => Some(0.88),
        Backend::Sglang => None,
        Backend::TrtLlm => Some(0.9),
        Backend::Vllm if version.is_some_and(|v| release_before(v, (0, 20))) => Some(0.9),
        Backend::Vllm => Some(0.92),
    }
}

/// Whether an SGLang release derives its memory settings from the GPU as 0.5.3 does
/// (`_handle_gpu_memory_settings`, PR #10975). A release that does not parse, or none, is
/// taken as recent.
pub(crate) fn sglang_since_0_5_3(version: Option<&str>) -> bool {
    version.and_then(release_triple).is_none_or(|v| v >= (0, 5, 3))
}

/// What a worker role inherits from the engine block.
#[derive(Clone, Copy)]
pub(super) struct RoleDefaults {
    pub(super) backend: Backend,
    pub(super) mode: Mode,
}

pub(super) fn decode_workers(
    node: &Node,
    path: &str,
    cx: &mut Cx,
    defaults: RoleDefaults,
) -> Option<Workers> {
    let mode = defaults.mode;
    let mut f = Fields::of(node, path, cx)?;
    // A bare `role:` (null) means "all defaults", like `role: {}`.
    let role = |f: &mut Fields, name: &str, cx: &mut Cx, prefill: bool| -> Option<RoleConfig> {
        let p = crate::diag::join(path, name);
        match f.take(name) {
            Some((n, _)) => decode_role(n, &p, cx, defaults, prefill),
            None if node.get(name).is_some() => {
                decode_role(&Node::builtin(Value::Null), &p, cx, defaults, prefill)
            }
            None => {
                cx.schema(
                    &p,
                    node,
                    format!(
                        "required in {} mode",
                        if mode == Mode::Aggregated { "aggregated" } else { "disaggregated" }
                    ),
                );
                None
            }
        }
    };
    let out = match mode {
        Mode::Aggregated => {
            let r = role(&mut f, "aggregated", cx, false);
            for k in ["prefill", "decode"] {
                if let Some((n, p)) = f.take(k) {
                    cx.schema(&p, n, "prefill and decode pools need engine.mode: disaggregated");
                }
            }
            r.map(Workers::Aggregated)
        }
        Mode::Disaggregated => {
            let prefill = role(&mut f, "prefill", cx, true);
            let decode = role(&mut f, "decode", cx, false);
            if let Some((n, p)) = f.take("aggregated") {
                cx.schema(&p, n, "disaggregated mode uses prefill and decode pools, not aggregated workers");
            }
            match (prefill, decode) {
                (Some(prefill), Some(decode)) => Some(Workers::Disaggregated { prefill, decode }),
                _ => None,
            }
        }
    };
    if let Some((n, p)) = f.take("encoder") {
        cx.unsupported(&p, n, "encoder pools (EPD) are not simulated by servesim yet");
    }
    f.finish(cx, &["aggregated", "prefill", "decode", "encoder"], "");
    out
}

fn decode_role(
    node: &Node,
    path: &str,
    cx: &mut Cx,
    defaults: RoleDefaults,
    prefill: bool,
) -> Option<RoleConfig> {
    let RoleDefaults { backend, mode } = defaults;
    let mut f = Fields::of(node, path, cx)?;
    let parallelism = match f.take("parallelism") {
        Some((n, p)) => decode_parallelism(n, &p, cx),
        None => Some(ParallelismConfig {
            replicas: 1,
            tensor: 1,
            pipeline: 1,
            attention_data: 1,
            moe_tensor: 1,
            moe_expert: 1,
        }),
    };
    let dp = parallelism.map_or(1, |p| p.attention_data);
    let scheduler_entry = f.take("scheduler");
    let scheduler = decode_scheduler(
        scheduler_entry.clone(),
        &crate::diag::join(path, "scheduler"),
        cx,
        backend,
        dp,
        prefill,
    );
    let kv_cache =
        decode_kv_cache(f.take("kv_cache"), &crate::diag::join(path, "kv_cache"), cx, defaults, dp, prefill);
    let timing = match f.take("timing") {
        Some((n, p)) => decode_timing(n, &p, cx),
        None => TimingConfig::default(),
    };
    if let (Some(s), Some((n, p))) = (&scheduler, &scheduler_entry) {
        if !s.async_scheduling && timing.kind != TimingKind::OpLevel {
            cx.domain(
                p,
                n,
                "async_scheduling: false is modelled by the op-level timing model only (forward_model: op_level)",
            );
        }
    }
    let frontend = match f.take("frontend") {
        Some((n, p)) if mode == Mode::Disaggregated => {
            cx.unsupported(&p, n, "the serving frontend's queue is modelled for aggregated workers only");
            FrontendConfig::default()
        }
        Some((n, p)) => decode_frontend(n, &p, cx),
        None => FrontendConfig::default(),
    };
    let hardware = match f.take("hardware") {
        Some((n, p)) if mode == Mode::Disaggregated => string(n, &p, cx),
        Some((n, p)) => {
            cx.schema(
                &p,
                n,
                "a per-role hardware applies to disaggregated pools; set engine.hardware instead",
            );
            None
        }
        None => None,
    };
    let startup_seconds = match f.take("startup_seconds") {
        Some((n, p)) => number_in(n, &p, cx, 0.0, 1e6),
        None => Some(0.0),
    };
    f.finish(
        cx,
        &["parallelism", "scheduler", "kv_cache", "timing", "frontend", "hardware", "startup_seconds"],
        "",
    );
    Some(RoleConfig {
        startup_seconds: startup_seconds?,
        hardware,
        parallelism: parallelism?,
        scheduler: scheduler?,
        kv_cache: kv_cache?,
        timing,
        frontend,
    })
}

fn decode_frontend(node: &Node, path: &str, cx: &mut Cx) -> FrontendConfig {
    let mut out = FrontendConfig::default();
    let Some(mut f) = Fields::of(node, path, cx) else { return out };
    if let Some((n, p)) = f.take("processes") {
        out.processes = u32_in(n, &p, cx, 1, 1024).unwrap_or(1);
    }
    if let Some((n, p)) = f.take("stream_interval") {
        out.stream_interval = u32_in(n, &p, cx, 1, 1_000_000).unwrap_or(1);
    }
    out.request_ms = f.take("request_ms").and_then(|(n, p)| number_in(n, &p, cx, 0.0, 1e5));
    out.chunk_us = f.take("chunk_us").and_then(|(n, p)| number_in(n, &p, cx, 0.0, 1e6));
    out.prompt_token_us = f.take("prompt_token_us").and_then(|(n, p)| number_in(n, &p, cx, 0.0, 1e4));
    f.finish(cx, &["processes", "stream_interval", "request_ms", "chunk_us", "prompt_token_us"], "");
    out
}

pub(super) fn decode_kv_transfer(node: &Node, path: &str, cx: &mut Cx) -> Option<KvTransferConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let before = cx.diags.len();
    let mut out = KvTransferConfig::default();
    if let Some((n, p)) = f.take("bytes_per_token") {
        if !matches!(&n.value, Value::Str(s) if s == "auto") {
            out.bytes_per_token = u64_min(n, &p, cx, 1);
        }
    }
    if let Some((n, p)) = f.take("bandwidth_gb_per_second") {
        out.bandwidth_gb_per_second = positive(n, &p, cx);
    }
    if let Some((n, p)) = f.take("timing_mode") {
        if let Some(m) = choice(n, &p, cx, &["destination_missing", "full"]) {
            out.timing_mode = if m == "full" { TransferMode::Full } else { TransferMode::DestinationMissing };
        }
    }
    if let Some((n, p)) = f.take("link_sharing") {
        if let Some(m) = choice(n, &p, cx, &["max_min", "independent"]) {
            out.link_sharing = if m == "independent" {
                servesim_core::transfer::Sharing::Independent
            } else {
                servesim_core::transfer::Sharing::MaxMin
            };
        }
    }
    f.finish(cx, &["bytes_per_token", "bandwidth_gb_per_second", "timing_mode", "link_sharing"], "");
    (cx.diags.len() == before).then_some(out)
}

fn decode_parallelism(node: &Node, path: &str, cx: &mut Cx) -> Option<ParallelismConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let mut get = |key: &str, cx: &mut Cx| match f.take(key) {
        Some((n, p)) => u32_in(n, &p, cx, 1, MAX_PARALLEL),
        None => Some(1),
    };
    let replicas = get("replicas", cx);
    let tensor = get("tensor", cx);
    let pipeline = get("pipeline", cx);
    let attention_data = get("attention_data", cx);
    let moe_tensor = get("moe_tensor", cx);
    let moe_expert = get("moe_expert", cx);
    for k in ["prefill_context", "decode_context", "preset"] {
        if let Some((n, p)) = f.take(k) {
            let one = matches!(n.value, Value::Int(1));
            if !one {
                cx.unsupported(&p, n, format!("'{k}' is not simulated by servesim yet"));
            }
        }
    }
    f.finish(
        cx,
        &[
            "replicas",
            "tensor",
            "pipeline",
            "attention_data",
            "moe_tensor",
            "moe_expert",
            "prefill_context",
            "decode_context",
            "preset",
        ],
        "",
    );
    Some(ParallelismConfig {
        replicas: replicas?,
        tensor: tensor?,
        pipeline: pipeline?,
        attention_data: attention_data?,
        moe_tensor: moe_tensor?,
        moe_expert: moe_expert?,
    })
}

const SCHEDULER_KEYS: &[&str] = &[
    "max_batched_tokens",
    "max_sequences",
    "prefill_schedule_interval",
    "prefill_decode_interval",
    "schedule_policy",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "schedule_conservativeness",
    "scheduler_recv_interval",
    "enable_mixed_chunk",
    "async_scheduling",
    "plan_ahead",
    "batch_wait_timeout_iters",
    "batch_wait_max_tokens_ratio",
    "attention_dp_config",
];

const ADP_CONFIG_KEYS: &[&str] = &["enable_balance", "timeout_iters", "batching_wait_iters"];

/// Most steps `attention_dp_config` may hold context (TensorRT-LLM takes any integer; its
/// recipes use 50–500, and a hold longer than this is a misconfiguration).
const MAX_ADP_WAIT_ITERS: u32 = 100_000;

/// TensorRT-LLM's `attention_dp_config` ([`servesim_core::engine::AdpBalance`]): `None` when
/// balance is off or the entry is invalid (reported).
fn decode_adp_config(node: &Node, path: &str, cx: &mut Cx) -> Option<servesim_core::engine::AdpBalance> {
    let mut f = Fields::of(node, path, cx)?;
    let mut out = servesim_core::engine::AdpBalance::default();
    let mut enabled = false;
    if let Some((n, p)) = f.take("enable_balance") {
        enabled = boolean(n, &p, cx).unwrap_or(false);
    }
    if let Some((n, p)) = f.take("timeout_iters") {
        out.timeout_iters = u32_in(n, &p, cx, 0, MAX_ADP_WAIT_ITERS).unwrap_or(out.timeout_iters);
    }
    if let Some((n, p)) = f.take("batching_wait_iters") {
        out.batching_wait_iters = u32_in(n, &p, cx, 0, MAX_ADP_WAIT_ITERS).unwrap_or(out.batching_wait_iters);
    }
    f.finish(cx, ADP_CONFIG_KEYS, "");
    enabled.then_some(out)
}

/// Largest `scheduler_recv_interval` accepted (SGLang takes any integer; recipes use 10–30,
/// and a request held a thousand decode steps is already a misconfiguration).
const MAX_RECV_INTERVAL: u32 = 1000;

fn decode_scheduler(
    entry: Option<(&Node, String)>,
    path: &str,
    cx: &mut Cx,
    backend: Backend,
    dp: u32,
    prefill: bool,
) -> Option<SchedulerKnobs> {
    // The engines' own defaults depend on the GPU and the KV pool, so they are set when the
    // scenario is prepared; a prefill role runs one prompt at a time (AISimulate).
    let defaults = SchedulerKnobs {
        max_batched_tokens: None,
        max_sequences: prefill.then_some(1),
        prefill_schedule_interval: 1,
        async_scheduling: true,
        plan_ahead: None,
        chunked_prefill_size: None,
        sglang: servesim_core::engine::SglangKnobs::default(),
        batch_wait: servesim_core::engine::BatchWait::default(),
        adp_balance: None,
    };
    let Some((node, _)) = entry else { return Some(defaults) };
    let mut f = Fields::of(node, path, cx)?;
    let before = cx.diags.len();
    let mut out = defaults;
    if let Some((n, p)) = f.take("max_batched_tokens") {
        out.max_batched_tokens = u32_in(n, &p, cx, 1, MAX_TOKENS).or(out.max_batched_tokens);
    }
    if let Some((n, p)) = f.take("max_sequences") {
        out.max_sequences = u32_in(n, &p, cx, 1, MAX_CONCURRENCY).or(out.max_sequences);
    }
    if let Some((n, p)) = f.take("prefill_schedule_interval") {
        out.prefill_schedule_interval = u32_in(n, &p, cx, 1, 1000).unwrap_or(1);
        if backend != Backend::Vllm && out.prefill_schedule_interval > 1 {
            cx.domain(&p, n, "prefill_schedule_interval is a vLLM knob");
        }
    }
    if let Some((n, p)) = f.take("async_scheduling") {
        out.async_scheduling = boolean(n, &p, cx).unwrap_or(true);
    }
    if let Some((n, p)) = f.take("plan_ahead") {
        out.plan_ahead = boolean(n, &p, cx);
    }
    if let Some((n, p)) = f.take("prefill_decode_interval") {
        out.sglang.prefill_decode_interval = u32_in(n, &p, cx, 0, 1000).unwrap_or(0);
        if backend != Backend::Sglang && out.sglang.prefill_decode_interval > 0 {
            cx.domain(&p, n, "prefill_decode_interval is an SGLang knob");
        }
    }
    for key in ["batch_wait_timeout_iters", "batch_wait_max_tokens_ratio"] {
        let Some((n, p)) = f.take(key) else { continue };
        if backend != Backend::TrtLlm {
            cx.domain(&p, n, format!("'{key}' is a TensorRT-LLM knob (backend is not trtllm)"));
            continue;
        }
        if dp > 1 {
            // PyExecutor checks batch waiting only without attention DP.
            cx.domain(&p, n, format!("TensorRT-LLM ignores '{key}' under attention data parallelism"));
            continue;
        }
        if key == "batch_wait_timeout_iters" {
            out.batch_wait.timeout_iters = u32_in(n, &p, cx, 0, 100_000).unwrap_or(0);
        } else {
            out.batch_wait.max_tokens_ratio = number_in(n, &p, cx, 0.0, 1.0).unwrap_or(0.0);
        }
    }
    if let Some((n, p)) = f.take("attention_dp_config") {
        if backend != Backend::TrtLlm {
            cx.domain(&p, n, "'attention_dp_config' is a TensorRT-LLM knob (backend is not trtllm)");
        } else if dp <= 1 {
            // PyExecutor balances ranks only with enable_attention_dp.
            cx.domain(&p, n, "TensorRT-LLM applies 'attention_dp_config' only under attention data parallelism (parallelism.attention_data > 1)");
        } else {
            out.adp_balance = decode_adp_config(n, &p, cx);
        }
    }
    let sglang_only = [
        "schedule_policy",
        "chunked_prefill_size",
        "max_prefill_tokens",
        "schedule_conservativeness",
        "scheduler_recv_interval",
        "enable_mixed_chunk",
    ];
    for key in sglang_only {
        let Some((n, p)) = f.take(key) else { continue };
        if backend != Backend::Sglang {
            cx.domain(&p, n, format!("'{key}' is an SGLang knob (backend is not sglang)"));
            continue;
        }
        match key {
            "schedule_policy" => {
                if let Some(c) = choice(n, &p, cx, &["fcfs", "fifo", "lpm"]) {
                    out.sglang.policy = if c == "lpm" {
                        servesim_core::engine::SglangPolicy::Lpm
                    } else {
                        servesim_core::engine::SglangPolicy::Fifo
                    };
                }
            }
            "chunked_prefill_size" => {
                if let Some(v) = u32_in(n, &p, cx, 1, MAX_TOKENS) {
                    out.chunked_prefill_size = Some(v);
                }
            }
            "max_prefill_tokens" => {
                if let Some(v) = u32_in(n, &p, cx, 1, MAX_TOKENS) {
                    out.sglang.max_prefill_tokens = v;
                }
            }
            "scheduler_recv_interval" => {
                if let Some(v) = u32_in(n, &p, cx, 1, MAX_RECV_INTERVAL) {
                    out.sglang.recv_interval = v;
                }
            }
            "enable_mixed_chunk" => {
                if let Some(v) = boolean(n, &p, cx) {
                    out.sglang.mixed_chunk = v;
                }
            }
            _ => {
                if let Some(v) = number_in(n, &p, cx, 0.01, 100.0) {
                    out.sglang.init_new_token_ratio = (0.7 * v).min(1.0);
                }
            }
        }
    }
    f.finish(cx, SCHEDULER_KEYS, "");
    (cx.diags.len() == before).then_some(out)
}

fn decode_kv_cache(
    entry: Option<(&Node, String)>,
    path: &str,
    cx: &mut Cx,
    defaults: RoleDefaults,
    dp: u32,
    prefill: bool,
) -> Option<KvCacheConfig> {
    let RoleDefaults { backend, mode } = defaults;
    let default_block = match backend {
        Backend::Vllm => 64,
        Backend::Sglang => 1,
        Backend::TrtLlm => 32,
    };
    let defaults = KvCacheConfig {
        block_size: default_block,
        prefix_caching: true,
        bytes_per_token: None,
        capacity: Capacity::Default { memory_fraction: None, cuda_graph_reserved_bytes: 0 },
        host_offload: None,
        g3_offload: None,
        state_cache: StateCacheConfig::default(),
    };
    let Some((node, _)) = entry else { return Some(defaults) };
    let mut f = Fields::of(node, path, cx)?;
    let block_size = match f.take("block_size") {
        Some((n, p)) => {
            let min = if backend == Backend::Sglang { 1 } else { 2 };
            u32_in(n, &p, cx, min, 4096)
        }
        None => Some(default_block),
    };
    let prefix_caching = match f.take("prefix_caching") {
        Some((n, p)) => boolean(n, &p, cx),
        None => Some(true),
    };
    let bytes_per_token = match f.take("bytes_per_token") {
        Some((n, _)) if matches!(&n.value, Value::Str(s) if s == "auto") => Some(None),
        Some((n, p)) => u64_min(n, &p, cx, 1).map(Some),
        None => Some(None),
    };
    let capacity = match f.take("capacity") {
        Some((n, p)) => decode_capacity(n, &p, cx),
        None => Some(defaults.capacity),
    };
    let host_entry = f.has("host_offload");
    let host_offload = match f.take("host_offload") {
        Some((n, p)) if mode == Mode::Disaggregated && !prefill => {
            cx.unsupported(
                &p,
                n,
                "'host_offload' is simulated for aggregated and prefill workers, not decode workers (they keep the KV they receive and compute in GPU memory)",
            );
            None
        }
        Some((n, p)) if prefix_caching == Some(false) => {
            cx.domain(
                &p,
                n,
                "'host_offload' needs prefix_caching: true (offloaded blocks are found by their hashes)",
            );
            None
        }
        Some((n, p)) => decode_host_offload(n, &p, cx, backend),
        None => None,
    };
    let g3_offload = match f.take("g3_offload") {
        // A host_offload given but refused (engine, mode, prefix caching) has said why
        // already; one not given is named here.
        Some((n, p)) if host_offload.is_none() => {
            if host_entry {
                None
            } else {
                cx.domain(&p, n, "'g3_offload' (a storage tier behind host memory) needs host_offload");
                None
            }
        }
        Some((n, p)) if backend == Backend::TrtLlm => {
            cx.unsupported(
                &p,
                n,
                "'g3_offload' is simulated behind vLLM's host offloading and SGLang's HiCache, not TensorRT-LLM's",
            );
            None
        }
        Some((n, p)) if dp > 1 => {
            cx.unsupported(
                &p,
                n,
                format!("'g3_offload' is simulated for attention_data: 1 only (this role has {dp}), as in AISimulate"),
            );
            None
        }
        Some((n, p)) if host_offload.is_some_and(|h| h.shared.is_some()) => {
            cx.unsupported(
                &p,
                n,
                "'g3_offload' is simulated behind host tiers of each rank's own (host_offload.scope: dp_rank_local), not behind a cluster-shared host pool",
            );
            None
        }
        Some((n, p)) => decode_g3_offload(n, &p, cx, backend),
        None => None,
    };
    let state_cache = match f.take("state_cache") {
        Some((n, p)) => decode_state_cache(n, &p, cx, backend),
        None => Some(StateCacheConfig::default()),
    };
    if let Some((n, p)) = f.take("prefix_match_unit") {
        cx.unsupported(
            &p,
            n,
            "'prefix_match_unit' (sub-block prefix reuse of hybrid models) is not simulated by servesim yet",
        );
    }
    f.finish(
        cx,
        &[
            "block_size",
            "prefix_caching",
            "bytes_per_token",
            "capacity",
            "host_offload",
            "g3_offload",
            "state_cache",
            "prefix_match_unit",
        ],
        "",
    );
    Some(KvCacheConfig {
        block_size: block_size?,
        prefix_caching: prefix_caching?,
        bytes_per_token: bytes_per_token?,
        capacity: capacity?,
        host_offload,
        g3_offload,
        state_cache: state_cache?,
    })
}

/// `kv_cache.state_cache`: the recurrent state of hybrid models.
fn decode_state_cache(node: &Node, path: &str, cx: &mut Cx, backend: Backend) -> Option<StateCacheConfig> {
    let before = cx.diags.len();
    let mut f = Fields::of(node, path, cx)?;
    let ssm_dtype = match f.take("ssm_dtype") {
        Some((n, p)) => match choice(n, &p, cx, &["auto", "bfloat16", "float16", "float32"]) {
            Some("auto") => None,
            Some("float32") => Some(StateDtype::Fp32),
            Some(_) => Some(StateDtype::Half),
            None => None,
        },
        None => None,
    };
    let mamba_full_memory_ratio = match f.take("mamba_full_memory_ratio") {
        Some((n, p)) if backend != Backend::Sglang => {
            cx.unsupported(
                &p,
                n,
                "'mamba_full_memory_ratio' is an SGLang setting (--mamba-full-memory-ratio); vLLM and TensorRT-LLM do not split memory this way",
            );
            None
        }
        Some((n, p)) => number_in(n, &p, cx, 0.01, 100.0),
        None => None,
    };
    f.finish(cx, &["ssm_dtype", "mamba_full_memory_ratio"], "");
    (cx.diags.len() == before).then_some(StateCacheConfig { ssm_dtype, mamba_full_memory_ratio })
}

/// `kv_cache.g3_offload` (behind a host tier, attention_data 1): its scope, size and links,
/// and behind SGLang's HiCache how it is prefetched from.
fn decode_g3_offload(node: &Node, path: &str, cx: &mut Cx, backend: Backend) -> Option<G3OffloadConfig> {
    let before = cx.diags.len();
    let mut f = Fields::of(node, path, cx)?;
    let scope = match f.take("scope") {
        Some((n, p)) => match choice(n, &p, cx, &["worker_local", "cluster_shared"]) {
            Some("worker_local") => Some(G3Scope::WorkerLocal),
            Some(_) => Some(G3Scope::ClusterShared),
            None => None,
        },
        None => {
            cx.schema(
                path,
                node,
                "needs scope: worker_local (a store per worker) or cluster_shared (one for all)",
            );
            None
        }
    };
    let blocks = match f.take("num_g3_blocks") {
        Some((n, p)) => u32_in(n, &p, cx, 1, u32::MAX),
        None => {
            cx.schema(path, node, "needs num_g3_blocks (blocks per worker, or in all when cluster_shared)");
            None
        }
    };
    let gbps = |f: &mut Fields, k: &str, default: f64, cx: &mut Cx| {
        f.take(k).map_or(Some(default), |(n, p)| number_in(n, &p, cx, 0.0, 1e6))
    };
    let read = gbps(&mut f, "read_bandwidth_gbps", DEFAULT_G3_LINK_GBPS, cx);
    let write = gbps(&mut f, "write_bandwidth_gbps", DEFAULT_G3_LINK_GBPS, cx);
    let shared = |f: &mut Fields, k: &str, cx: &mut Cx| match f.take(k) {
        Some((n, p)) if scope == Some(G3Scope::WorkerLocal) => {
            cx.schema(&p, n, format!("'{k}' applies to scope: cluster_shared only"));
            None
        }
        Some((n, p)) => number_in(n, &p, cx, 0.0, 1e6),
        None => Some(DEFAULT_G3_SHARED_GBPS),
    };
    let shared_read = shared(&mut f, "shared_read_bandwidth_gbps", cx);
    let shared_write = shared(&mut f, "shared_write_bandwidth_gbps", cx);
    let latency = f
        .take("latency_to_first_byte_ms")
        .map_or(Some(DEFAULT_G3_FIRST_BYTE_MS), |(n, p)| number_in(n, &p, cx, 0.0, 1e6));
    let hicache = decode_hicache_storage(&mut f, cx, backend);
    f.finish(
        cx,
        &[
            "scope",
            "num_g3_blocks",
            "latency_to_first_byte_ms",
            "read_bandwidth_gbps",
            "write_bandwidth_gbps",
            "shared_read_bandwidth_gbps",
            "shared_write_bandwidth_gbps",
            "prefetch_policy",
            "prefetch_threshold",
            "prefetch_timeout_base_s",
            "prefetch_timeout_per_ki_token_s",
        ],
        "",
    );
    if cx.diags.len() != before {
        return None;
    }
    Some(G3OffloadConfig {
        scope: scope?,
        num_g3_blocks: blocks?,
        latency_to_first_byte_ms: latency?,
        read_bandwidth_gbps: read?,
        write_bandwidth_gbps: write?,
        shared_read_bandwidth_gbps: shared_read?,
        shared_write_bandwidth_gbps: shared_write?,
        hicache,
    })
}

/// HiCache's prefetch keys of `g3_offload` (SGLang's own names; refused on vLLM): `Some`
/// with their values or defaults on SGLang, `None` elsewhere.
fn decode_hicache_storage(f: &mut Fields, cx: &mut Cx, backend: Backend) -> Option<HicacheStorageConfig> {
    let keys = [
        "prefetch_policy",
        "prefetch_threshold",
        "prefetch_timeout_base_s",
        "prefetch_timeout_per_ki_token_s",
    ];
    if backend != Backend::Sglang {
        for k in keys {
            if let Some((n, p)) = f.take(k) {
                cx.unsupported(
                    &p,
                    n,
                    format!("'{k}' is SGLang HiCache's (--hicache-storage-prefetch-policy and its storage config); vLLM reads storage at admission"),
                );
            }
        }
        return None;
    }
    let policy = match f.take("prefetch_policy") {
        Some((n, p)) => match choice(n, &p, cx, &["best_effort", "wait_complete", "timeout"]) {
            Some("wait_complete") => HicachePrefetchPolicy::WaitComplete,
            Some("timeout") => HicachePrefetchPolicy::Timeout,
            _ => HicachePrefetchPolicy::BestEffort,
        },
        None => HicachePrefetchPolicy::BestEffort,
    };
    let threshold_tokens = f
        .take("prefetch_threshold")
        .map_or(Some(DEFAULT_PREFETCH_THRESHOLD), |(n, p)| u32_in(n, &p, cx, 1, u32::MAX))
        .unwrap_or(DEFAULT_PREFETCH_THRESHOLD);
    let mut seconds = |k: &str, default: f64| {
        f.take(k).map_or(Some(default), |(n, p)| number_in(n, &p, cx, 0.0, 1e6)).unwrap_or(default)
    };
    let timeout_base_s = seconds("prefetch_timeout_base_s", DEFAULT_PREFETCH_TIMEOUT_BASE_S);
    let timeout_per_ki_token_s =
        seconds("prefetch_timeout_per_ki_token_s", DEFAULT_PREFETCH_TIMEOUT_PER_KI_S);
    Some(HicacheStorageConfig { policy, threshold_tokens, timeout_base_s, timeout_per_ki_token_s })
}

/// HiCache's fewest tokens worth a prefetch: SGLang's default
/// (`HiRadixCache._parse_storage_backend_extra_config`, `prefetch_threshold`).
const DEFAULT_PREFETCH_THRESHOLD: u32 = 256;
/// The `timeout` policy's allowance of any prefetch, s: SGLang's `prefetch_timeout_base`.
const DEFAULT_PREFETCH_TIMEOUT_BASE_S: f64 = 1.0;
/// Its allowance per 1,024 tokens found, s: SGLang's `prefetch_timeout_per_ki_token`.
const DEFAULT_PREFETCH_TIMEOUT_PER_KI_S: f64 = 0.25;

/// A storage tier's per-worker read and write bandwidth when none is given, decimal GB/s:
/// AISimulate's default (its KV cache guide, "modeling assumptions, not measured values").
const DEFAULT_G3_LINK_GBPS: f64 = 10.0;
/// A shared storage tier's total bandwidth each way when none is given: AISimulate's default.
const DEFAULT_G3_SHARED_GBPS: f64 = 80.0;
/// A storage transfer's latency to its first byte when none is given, ms: AISimulate's default.
const DEFAULT_G3_FIRST_BYTE_MS: f64 = 0.1;

/// `kv_cache.host_offload` (aggregated and prefill workers): its size, its links and, for SGLang's HiCache,
/// its write policy.
fn decode_host_offload(node: &Node, path: &str, cx: &mut Cx, backend: Backend) -> Option<HostOffloadConfig> {
    let before = cx.diags.len();
    let mut f = Fields::of(node, path, cx)?;
    let blocks = f.take("num_host_blocks").and_then(|(n, p)| u32_in(n, &p, cx, 1, u32::MAX));
    let gib = f.take("size_gib").and_then(|(n, p)| positive(n, &p, cx));
    // SGLang's `--hicache-ratio`: host memory as a multiple of the GPU's KV cache, which
    // HiCache requires to be larger.
    let ratio = f.take("hicache_ratio").and_then(|(n, p)| {
        if backend != Backend::Sglang {
            cx.unsupported(
                &p,
                n,
                "'hicache_ratio' is SGLang HiCache's (--hicache-ratio); give num_host_blocks or size_gib",
            );
            return None;
        }
        let r = positive(n, &p, cx)?;
        if r <= 1.0 {
            cx.domain(
                &p,
                n,
                format!(
                    "must be above 1, got {r}: HiCache's host memory must be larger than the GPU's KV cache"
                ),
            );
            return None;
        }
        Some(r)
    });
    let size = match (blocks, gib, ratio) {
        (Some(b), None, None) => Some(HostSize::Blocks(b)),
        (None, Some(g), None) => Some(HostSize::Gib(g)),
        (None, None, Some(r)) => Some(HostSize::DeviceRatio(r)),
        (None, None, None) => {
            if cx.diags.len() == before {
                cx.schema(
                    path,
                    node,
                    "needs num_host_blocks (blocks a rank holds), size_gib or, for SGLang, hicache_ratio",
                );
            }
            None
        }
        _ => {
            cx.schema(path, node, "give one of num_host_blocks, size_gib and hicache_ratio");
            None
        }
    };
    let shared = match f.take("scope") {
        Some((n, p)) => match choice(n, &p, cx, &["dp_rank_local", "cluster_shared"]) {
            Some("cluster_shared") if backend != Backend::Vllm => {
                cx.unsupported(
                    &p,
                    n,
                    "a cluster-shared host pool is simulated for vLLM, as in AISimulate; SGLang's HiCache and TensorRT-LLM keep a host tier per rank (scope: dp_rank_local)",
                );
                false
            }
            Some(scope) => scope == "cluster_shared",
            None => false,
        },
        None => false,
    };
    let mut shared_gbps = [DEFAULT_HOST_SHARED_GBPS; 2];
    for (i, k) in ["shared_d2h_bandwidth_gbps", "shared_h2d_bandwidth_gbps"].into_iter().enumerate() {
        match f.take(k) {
            Some((n, p)) if !shared => {
                cx.schema(&p, n, format!("'{k}' applies to scope: cluster_shared only"));
            }
            Some((n, p)) => {
                if let Some(v) = number_in(n, &p, cx, 0.0, 1e6) {
                    shared_gbps[i] = v;
                }
            }
            None => {}
        }
    }
    // SGLang HiCache's `--hicache-write-policy`.
    let (mut selective, mut write_back) = (false, false);
    if let Some((n, p)) = f.take("write_policy") {
        match choice(n, &p, cx, &["write_through", "write_through_selective", "write_back"]) {
            Some(_) if backend != Backend::Sglang => {
                cx.unsupported(&p, n, "'write_policy' is SGLang HiCache's (--hicache-write-policy)");
            }
            Some(policy) => {
                selective = policy == "write_through_selective";
                write_back = policy == "write_back";
            }
            None => {}
        }
    }
    let gbps = |f: &mut Fields, k: &str, cx: &mut Cx| {
        f.take(k).map_or(Some(DEFAULT_HOST_LINK_GBPS), |(n, p)| number_in(n, &p, cx, 0.0, 1e6))
    };
    let d2h = gbps(&mut f, "d2h_bandwidth_gbps", cx);
    let h2d = gbps(&mut f, "h2d_bandwidth_gbps", cx);
    let latency =
        f.take("latency_to_first_byte_ms").map_or(Some(0.0), |(n, p)| number_in(n, &p, cx, 0.0, 1e6));
    f.finish(
        cx,
        &[
            "num_host_blocks",
            "size_gib",
            "hicache_ratio",
            "scope",
            "d2h_bandwidth_gbps",
            "h2d_bandwidth_gbps",
            "latency_to_first_byte_ms",
            "shared_d2h_bandwidth_gbps",
            "shared_h2d_bandwidth_gbps",
            "write_policy",
        ],
        "",
    );
    if cx.diags.len() != before {
        return None;
    }
    Some(HostOffloadConfig {
        size: size?,
        d2h_bandwidth_gbps: d2h?,
        h2d_bandwidth_gbps: h2d?,
        latency_to_first_byte_ms: latency?,
        selective,
        write_back,
        shared: shared.then_some(SharedHostLinks { d2h_gbps: shared_gbps[0], h2d_gbps: shared_gbps[1] }),
    })
}

/// A cluster-shared host pool's own bandwidth each way when none is given, decimal GB/s:
/// AISimulate's default for `shared_d2h_bandwidth_gbps` and `shared_h2d_bandwidth_gbps`
/// (REF §5.3, "shared_* 80").
const DEFAULT_HOST_SHARED_GBPS: f64 = 80.0;

/// A host tier's link bandwidth when none is given, decimal GB/s: AISimulate's default for
/// `d2h_bandwidth_gbps` and `h2d_bandwidth_gbps` (REF §5.3), about what a PCIe 5.0 x16 link
/// moves in one direction.
const DEFAULT_HOST_LINK_GBPS: f64 = 32.0;

fn decode_capacity(node: &Node, path: &str, cx: &mut Cx) -> Option<Capacity> {
    let mut f = Fields::of(node, path, cx)?;
    let kind = match f.take("type") {
        Some((n, p)) => choice(n, &p, cx, &["default", "fixed"])?,
        None => "default",
    };
    let out = if kind == "default" {
        let fraction = match f.take("memory_fraction") {
            Some((n, p)) => number_in(n, &p, cx, 0.01, 1.0).map(Some),
            None => Some(None),
        };
        let graphs = match f.take("cuda_graph_reserved_bytes") {
            Some((n, p)) => u64_min(n, &p, cx, 0),
            None => Some(0),
        };
        Some(Capacity::Default { memory_fraction: fraction?, cuda_graph_reserved_bytes: graphs? })
    } else {
        let blocks = f.take("blocks").map(|(n, p)| u64_min(n, &p, cx, 1));
        let bytes = f.take("bytes").map(|(n, p)| u64_min(n, &p, cx, 1));
        match (blocks, bytes) {
            (Some(b), None) => b.map(Capacity::FixedBlocks),
            (None, Some(b)) => b.map(Capacity::FixedBytes),
            _ => {
                cx.schema(path, node, "type 'fixed' needs exactly one of 'blocks' or 'bytes'");
                None
            }
        }
    };
    f.finish(
        cx,
        &["type", "memory_fraction", "cuda_graph_reserved_bytes", "blocks", "bytes"],
        &format!("to capacity type '{kind}'"),
    );
    out
}

fn decode_timing(node: &Node, path: &str, cx: &mut Cx) -> TimingConfig {
    let Some(mut f) = Fields::of(node, path, cx) else { return TimingConfig::default() };
    let mut out = TimingConfig::default();
    if let Some((n, p)) = f.take("type") {
        match choice(n, &p, cx, &["default", "roofline", "fixed", "polynomial"]) {
            Some("roofline") => out.kind = TimingKind::Roofline,
            Some("fixed" | "polynomial") => {
                cx.unsupported(&p, n, "fixed and polynomial step times are not available in servesim yet");
            }
            _ => {}
        }
    }
    let mut fpm = false;
    if let Some((n, p)) = f.take("forward_model") {
        if choice(n, &p, cx, &["op_level", "fpm"]) == Some("fpm") {
            if out.kind == TimingKind::Roofline {
                cx.domain(&p, n, "forward_model: fpm needs type: default (roofline uses no tables)");
            }
            fpm = true;
        }
    }
    let parquet =
        f.take("fpm_parquet_path").and_then(|(n, p)| string(n, &p, cx).map(|s| (s, n.origin.clone(), p)));
    let cell_id = f.take("fpm_cell_id").and_then(|(n, p)| string(n, &p, cx));
    match (fpm, parquet) {
        (true, Some((parquet_path, origin, _))) => {
            out.kind = TimingKind::Fpm(FpmSource { parquet_path, origin, cell_id });
        }
        (true, None) => {
            cx.report(
                crate::diag::DiagKind::Schema,
                &format!("{path}.fpm_parquet_path"),
                &node.origin,
                "forward_model: fpm needs fpm_parquet_path (the fpm_forward_perf.parquet file)",
            );
        }
        (false, Some((_, _, p))) => {
            cx.report(
                crate::diag::DiagKind::Domain,
                &p,
                &node.origin,
                "fpm_parquet_path is only used with forward_model: fpm",
            );
        }
        (false, None) => {}
    }
    for k in ["prefill_ms", "decode_ms"] {
        if let Some((n, p)) = f.take(k) {
            cx.unsupported(&p, n, format!("'{k}' is not used by servesim's timing model yet"));
        }
    }
    out.prefill_scale = f.take("prefill_scale").and_then(|(n, p)| number_in(n, &p, cx, 0.1, 100.0));
    out.step_overhead_ms = f.take("step_overhead_ms").and_then(|(n, p)| number_in(n, &p, cx, 0.0, 1e4));
    out.frontend_ms = f.take("frontend_ms").and_then(|(n, p)| number_in(n, &p, cx, 0.0, 1e6));
    out.host_us_per_sequence =
        f.take("host_us_per_sequence").and_then(|(n, p)| number_in(n, &p, cx, 0.0, 1e5));
    let op_level = out.kind == TimingKind::OpLevel;
    out.allreduce = kernel_choice(&mut f, cx, op_level, "allreduce", &AllReduceImpl::NAMES, "tables")
        .and_then(AllReduceImpl::from_name);
    out.moe_kernel = kernel_choice(&mut f, cx, op_level, "moe_kernel", &MoeKernel::NAMES, "MoE tables")
        .and_then(MoeKernel::from_name);
    f.finish(
        cx,
        &[
            "type",
            "prefill_ms",
            "decode_ms",
            "forward_model",
            "fpm_parquet_path",
            "fpm_cell_id",
            "prefill_scale",
            "step_overhead_ms",
            "frontend_ms",
            "host_us_per_sequence",
            "allreduce",
            "moe_kernel",
        ],
        "",
    );
    out
}

/// A choice among the op-level model's kernel tables (`timing.allreduce`, `timing.moe_kernel`),
/// which other timing models do not read.
fn kernel_choice<'c>(
    f: &mut Fields<'_>,
    cx: &mut Cx,
    op_level: bool,
    key: &str,
    names: &[&'c str],
    what: &str,
) -> Option<&'c str> {
    let (n, p) = f.take(key)?;
    let name = choice(n, &p, cx, names)?;
    if !op_level {
        cx.domain(
            &p,
            n,
            format!("{key} picks one of the op-level model's {what}; roofline and FPM timing do not use it"),
        );
    }
    Some(name)
}
