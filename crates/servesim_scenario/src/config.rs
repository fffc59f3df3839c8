//! The prediction config: AISimulate's `prediction.yaml` schema (REF §1) with its defaults,
//! plus servesim's documented extensions. [`crate::decode`] builds it from a [`crate::node::Node`].

use servesim_core::engine::Backend;
use servesim_core::metrics::Sla;
use servesim_core::traffic::LengthDist;
use servesim_perf::oplevel::{AllReduceImpl, MoeKernel};
use servesim_perf::spec::{Dtype, GemmQuant, MoeQuant};

/// A whole validated config.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// What arrives and when.
    pub traffic: TrafficConfig,
    /// The deployment.
    pub engine: EngineConfig,
    /// Request placement.
    pub router: RouterConfig,
    /// Service-level evaluation.
    pub evaluation: EvaluationConfig,
    /// `planner` when `policy: enabled`: the built-in autoscaling planner.
    pub planner: Option<PlannerConfig>,
}

/// `planner` with `policy: enabled`: Dynamo's load-based scaling (`servesim_core::planner`).
/// Keys that tune throughput-based scaling (its interval, load predictors) are accepted and
/// have no effect, as in Dynamo with `enable_throughput_scaling: false`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlannerConfig {
    /// `load_adjustment_interval_seconds` (5): time between scaling decisions.
    pub interval_seconds: f64,
    /// `load_scaling_down_sensitivity` (80, percent): the scale-down boundary.
    pub down_sensitivity_pct: f64,
    /// `load_min_observations` (5): observations a regression needs before deciding.
    pub min_observations: u32,
    /// `max_num_fpm_samples` (64): observations each regression keeps.
    pub window: u32,
    /// `max_num_gpus` (8): GPUs all pools may hold at once.
    pub max_gpus: u32,
    /// `min_num_gpus` (-1: none): GPUs all pools keep at least.
    pub min_gpus: Option<u32>,
    /// `min_workers` (1): fewest workers a pool keeps.
    pub min_workers: u32,
    /// `prefill_min_workers` (`min_workers`).
    pub prefill_min_workers: Option<u32>,
    /// `decode_min_workers` (`min_workers`).
    pub decode_min_workers: Option<u32>,
}

impl PlannerConfig {
    /// The fewest workers pool `role` (aggregated, prefill or decode) keeps.
    #[must_use]
    pub fn min_workers_of(&self, role: &str) -> u32 {
        match role {
            "prefill" => self.prefill_min_workers.unwrap_or(self.min_workers),
            "decode" => self.decode_min_workers.unwrap_or(self.min_workers),
            _ => self.min_workers,
        }
    }
}

impl Default for PlannerConfig {
    fn default() -> Self {
        // AISimulate's defaults (REF §1.3); the window is its max_num_fpm_samples.
        PlannerConfig {
            interval_seconds: 5.0,
            down_sensitivity_pct: 80.0,
            min_observations: 5,
            window: 64,
            max_gpus: 8,
            min_gpus: None,
            min_workers: 1,
            prefill_min_workers: None,
            decode_min_workers: None,
        }
    }
}

/// `traffic`.
#[derive(Clone, Debug, PartialEq)]
pub struct TrafficConfig {
    /// `traffic.source`.
    pub source: SourceConfig,
    /// `traffic.load`.
    pub load: LoadConfig,
    /// `traffic.stop`.
    pub stop: StopConfig,
}

/// `traffic.source`.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceConfig {
    /// `type: synthetic` — independent requests.
    Synthetic {
        /// `input_tokens` (a fixed count, or a distribution: servesim extension).
        input_tokens: LengthDist,
        /// `output_tokens`.
        output_tokens: LengthDist,
        /// `shared_prefix_tokens` (servesim extension, 0): leading tokens every prompt shares,
        /// like AIConfigurator's `--prefix`.
        shared_prefix_tokens: u32,
        /// `prompt_pool` (servesim extension, 0: off): distinct prompts the requests draw
        /// from, as a benchmark client's dataset does (aiperf's and genai-perf's
        /// `--num-dataset-entries`, 100 unless set); with prefix caching a repeated prompt
        /// is reused.
        prompt_pool: u32,
    },
    /// `type: synthetic-session` — multi-turn sessions.
    Session {
        /// `new_input_tokens_per_turn` (1024).
        new_input_tokens_per_turn: LengthDist,
        /// `output_tokens_per_turn` (128).
        output_tokens_per_turn: LengthDist,
        /// `session.turns` (4, at least 2).
        turns: u32,
        /// `session.shared_prefix_ratio` (0).
        shared_prefix_ratio: f64,
        /// `session.prefix_groups` (0: one group).
        prefix_groups: u32,
        /// `session.inter_turn_delay_ms` (0).
        inter_turn_delay_ms: f64,
    },
    /// `type: trace` — replay of trace files.
    Trace {
        /// `paths`, with where each was written (for errors).
        paths: Vec<(String, crate::node::Origin)>,
        /// `format`.
        format: TraceFormatConfig,
        /// `block_size`: tokens per `hash_ids` entry. Unset, 512 (Mooncake's), except that a
        /// file whose every row gives its prompt as token ids is hashed in blocks of the
        /// engine's KV block size, so the prefix cache shares exactly what the engine would.
        block_size: Option<u32>,
        /// `nested_timestamp_basis` (Weka): how subagents' requests give their times.
        nested_basis: servesim_data::trace::NestedBasis,
    },
}

/// `traffic.source.format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormatConfig {
    /// `mooncake` (JSONL with `hash_ids`).
    Mooncake,
    /// `azure_csv` (servesim extension): `TIMESTAMP,ContextTokens,GeneratedTokens`.
    AzureCsv,
    /// `agentic_mooncake` (Mooncake rows with `request_id` and `wait_for`: a dependency graph
    /// replayed at its roots' timestamps).
    AgenticMooncake,
    /// `weka` (kv-cache-tester / AgentX conversations, each a play of requests that wait for
    /// the one before: a dependency graph too).
    Weka,
}

impl TraceFormatConfig {
    /// Whether the format's rows form a dependency graph of plays (agentic traffic).
    #[must_use]
    pub fn is_graph(self) -> bool {
        matches!(self, TraceFormatConfig::AgenticMooncake | TraceFormatConfig::Weka)
    }
}

/// `traffic.load`.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadConfig {
    /// The pacing.
    pub kind: LoadKind,
    /// `rate_schedule` (servesim extension, open loops): `(at_seconds, rate)` from which each
    /// rate applies, ascending; the load's own rate applies before the first.
    pub rate_schedule: Vec<(f64, f64)>,
    /// `seed`: root seed of the run (AISimulate uses it for `poisson`; servesim for every
    /// random stream). Default 42.
    pub seed: u64,
    /// `agentic_lanes` (agentic traces at their timestamps): at most this many plays at once.
    pub agentic_lanes: Option<u32>,
    /// `agentic_snapshot: {seed}` (agentic traces at their timestamps): replay each play from
    /// a cut drawn with this seed ([`servesim_core::traffic::Trace::snapshot`]).
    pub agentic_snapshot: Option<u64>,
    /// `agentic_warmup`: before the replay, send each conversation's last prompt before the
    /// snapshot's cut as a one-token primer and start the replay when all have completed.
    pub agentic_warmup: bool,
}

/// `traffic.load.type` and its parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum LoadKind {
    /// `concurrency`: closed loop.
    Concurrency(u32),
    /// `poisson` at `requests_per_second`.
    Poisson(f64),
    /// `constant_rate` at `requests_per_second`.
    ConstantRate(f64),
    /// `gamma` at `requests_per_second` with gap coefficient of variation `cv` (extension).
    Gamma {
        /// Mean rate.
        rate: f64,
        /// Coefficient of variation.
        cv: f64,
    },
    /// `kv_capacity_fraction`: concurrency whose KV working set is `fraction` of usable KV.
    KvCapacityFraction(f64),
    /// `trace_timestamps`: the trace's own timing, divided by `speedup`.
    TraceTimestamps {
        /// `speedup` (1).
        speedup: f64,
    },
}

impl LoadKind {
    /// AISimulate's "load unit" (concurrency or rate) for `*_per_load_unit` stop rules.
    #[must_use]
    pub fn load_unit(&self) -> Option<f64> {
        match *self {
            LoadKind::Concurrency(c) => Some(f64::from(c)),
            LoadKind::Poisson(r) | LoadKind::ConstantRate(r) | LoadKind::Gamma { rate: r, .. } => Some(r),
            LoadKind::KvCapacityFraction(_) | LoadKind::TraceTimestamps { .. } => None,
        }
    }
}

/// `traffic.stop`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StopConfig {
    /// `requests` (default 100; a whole trace for trace sources).
    pub requests: Option<u32>,
    /// `requests_per_load_unit`: `max(1, round(k × load unit))` requests.
    pub requests_per_load_unit: Option<f64>,
    /// `sessions`.
    pub sessions: Option<u32>,
    /// `sessions_per_load_unit`.
    pub sessions_per_load_unit: Option<f64>,
    /// `max_virtual_time_seconds` (trace only): simulated time after which nothing more is
    /// processed (events at the cutoff still are).
    pub max_virtual_time_seconds: Option<f64>,
}

/// `engine.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One pool of workers doing prefill and decode.
    Aggregated,
    /// Separate prefill and decode pools.
    Disaggregated,
}

/// `engine.context_length`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextLength {
    /// `max`: the model's limit on vLLM; unlimited on SGLang and TensorRT-LLM.
    Max,
    /// Prompts at or above this many tokens are rejected.
    Tokens(u32),
}

/// `engine.quantization` (servesim extension): serve a checkpoint in another format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quantization {
    /// Dense GEMM weight/activation format; default: the checkpoint's.
    pub gemm: Option<GemmQuant>,
    /// Expert format of MoE models; default: the checkpoint's, or `gemm` when that is set.
    pub moe: Option<MoeQuant>,
    /// KV-cache format; default: the engine's choice for the checkpoint.
    pub kv_cache: Option<Dtype>,
}

/// `engine`.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// `mode`.
    pub mode: Mode,
    /// `model`: a catalog id (Hugging Face id).
    pub model: String,
    /// `hardware`: a catalog id such as `h200_sxm`.
    pub hardware: String,
    /// `backend`.
    pub backend: Backend,
    /// `backend_version` (selects performance data only).
    pub backend_version: Option<String>,
    /// `context_length`.
    pub context_length: ContextLength,
    /// `enable_chunked_prefill` (default on).
    pub enable_chunked_prefill: bool,
    /// `quantization`.
    pub quantization: Quantization,
    /// `workers`.
    pub workers: Workers,
    /// `kv_transfer` (disaggregated mode).
    pub kv_transfer: KvTransferConfig,
    /// `nextn` / `nextn_accepted`, or `speculation` (off by default).
    pub speculation: SpeculationConfig,
    /// `kv_eviction_policy` (REF §5.3): which cached block a full KV pool drops first.
    pub kv_eviction_policy: KvEvictionPolicy,
}

/// `engine.kv_eviction_policy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvEvictionPolicy {
    /// `lru`: the least recently freed block (the engines' own rule).
    #[default]
    Lru,
    /// `belady`: the block whose next request, in the run's known input order, comes last
    /// (AISimulate's best-effort oracle, `global_input_trace_order_v1`).
    Belady,
}

impl KvEvictionPolicy {
    /// The name the config and the report use.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            KvEvictionPolicy::Lru => "lru",
            KvEvictionPolicy::Belady => "belady",
        }
    }
}

/// Speculative decoding (REF §1.2, §5.6).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum SpeculationConfig {
    /// No drafts.
    #[default]
    Off,
    /// MTP or EAGLE (`nextn`, `nextn_accepted`): drafts from draft layers, `accepted` of them
    /// accepted per round on average.
    DraftLayers {
        /// Draft tokens per round (1–5).
        nextn: u32,
        /// Mean accepted drafts per round (0–`nextn`).
        accepted: f64,
    },
    /// vLLM's n-gram prompt lookup (`speculation: {kind: ngram, ...}`): no draft model.
    Ngram {
        /// Conditional acceptance rate of each draft position.
        rates: Vec<f64>,
        /// Seed of the acceptance draws.
        seed: u64,
    },
    /// vLLM's draft-model speculation (`speculation: {kind: draft_model, model, ...}`): a
    /// smaller model of the same vocabulary proposes the drafts, one forward pass each.
    DraftModel {
        /// The draft model's catalog id.
        model: String,
        /// Conditional acceptance rate of each draft position.
        rates: Vec<f64>,
        /// Seed of the acceptance draws.
        seed: u64,
    },
}

impl SpeculationConfig {
    /// Draft layers each step runs (MTP, EAGLE: one per draft token).
    #[must_use]
    pub fn draft_layers(&self) -> u32 {
        match self {
            SpeculationConfig::DraftLayers { nextn, .. } => *nextn,
            _ => 0,
        }
    }

    /// The draft model's catalog id, for draft-model speculation.
    #[must_use]
    pub fn draft_model(&self) -> Option<&str> {
        match self {
            SpeculationConfig::DraftModel { model, .. } => Some(model),
            _ => None,
        }
    }
}

/// `engine.workers`.
#[derive(Clone, Debug, PartialEq)]
// Decoded once per run; boxing the roles would only add indirection.
#[allow(clippy::large_enum_variant)]
pub enum Workers {
    /// `aggregated`.
    Aggregated(RoleConfig),
    /// `prefill` and `decode` pools.
    Disaggregated {
        /// `prefill`.
        prefill: RoleConfig,
        /// `decode`.
        decode: RoleConfig,
    },
}

impl Workers {
    /// Every role with its name, in worker order (prefill before decode).
    #[must_use]
    pub fn roles(&self) -> Vec<(&'static str, &RoleConfig)> {
        match self {
            Workers::Aggregated(r) => vec![("aggregated", r)],
            Workers::Disaggregated { prefill, decode } => vec![("prefill", prefill), ("decode", decode)],
        }
    }
}

/// `engine.kv_transfer.timing_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferMode {
    /// `destination_missing` (default): move only prompt tokens the decode worker lacks.
    DestinationMissing,
    /// `full`: move the whole prompt.
    Full,
}

/// `engine.kv_transfer`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvTransferConfig {
    /// `bytes_per_token` (`auto`: one TP shard of the prefill role).
    pub bytes_per_token: Option<u64>,
    /// `bandwidth_gb_per_second` (decimal GB/s per worker link; null = no delay).
    pub bandwidth_gb_per_second: Option<f64>,
    /// `timing_mode`.
    pub timing_mode: TransferMode,
    /// `link_sharing` (servesim extension): `max_min` (default) or `independent` (AISimulate).
    pub link_sharing: servesim_core::transfer::Sharing,
}

impl Default for KvTransferConfig {
    fn default() -> Self {
        KvTransferConfig {
            bytes_per_token: None,
            bandwidth_gb_per_second: None,
            timing_mode: TransferMode::DestinationMissing,
            link_sharing: servesim_core::transfer::Sharing::MaxMin,
        }
    }
}

/// `engine.workers.<role>.parallelism`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParallelismConfig {
    /// `replicas`.
    pub replicas: u32,
    /// `tensor`.
    pub tensor: u32,
    /// `pipeline`.
    pub pipeline: u32,
    /// `attention_data`.
    pub attention_data: u32,
    /// `moe_tensor`.
    pub moe_tensor: u32,
    /// `moe_expert`.
    pub moe_expert: u32,
}

/// `engine.workers.<role>.scheduler`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SchedulerKnobs {
    /// `max_batched_tokens` per attention-DP rank as configured (SGLang reads
    /// `chunked_prefill_size` instead). `None` takes the engine's default for the role's GPU,
    /// resolved when the scenario is prepared ([`crate::scenario::PreparedRole`]).
    pub max_batched_tokens: Option<u32>,
    /// `max_sequences` per attention-DP rank as configured (`max_num_seqs`,
    /// `max_batch_size`, `max_running_requests`). `None` takes the engine's default,
    /// resolved when the scenario is prepared; a prefill role defaults to 1 (AISimulate).
    pub max_sequences: Option<u32>,
    /// `prefill_schedule_interval` (vLLM, 1): with attention DP, admit new prompts only every
    /// N-th step.
    pub prefill_schedule_interval: u32,
    /// `async_scheduling` (servesim extension, true): the engine prepares the next step on
    /// the host while the GPU runs this one (vLLM's async scheduling, default from 0.14;
    /// SGLang's and TensorRT-LLM's overlap schedulers). `false` models an engine that
    /// schedules between steps (vLLM before 0.14, `--no-async-scheduling`,
    /// `--disable-overlap-schedule`): every step also waits for its host work.
    pub async_scheduling: bool,
    /// `plan_ahead` (servesim extension): the engine plans each step while the one before it
    /// runs, so a request arriving during a step joins the step after next (vLLM's batch
    /// queue; TensorRT-LLM's and SGLang's overlap loops do the same). Default: on for vLLM
    /// with `async_scheduling`, off for the others, whose frontend constants were fitted
    /// without it and whose rows it did not improve (`docs/validation.md`).
    pub plan_ahead: Option<bool>,
    /// SGLang's `chunked_prefill_size` as configured, before attention DP divides it among
    /// its ranks (servesim extension, SGLang's own name). `None` takes SGLang's default for
    /// the role's GPU ([`servesim_perf::memory::sglang_gpu_defaults`]), set in
    /// `sglang.chunked_prefill_size` when the scenario is prepared.
    pub chunked_prefill_size: Option<u32>,
    /// SGLang knobs (`schedule_policy`, `max_prefill_tokens`, `schedule_conservativeness`,
    /// `scheduler_recv_interval`, `enable_mixed_chunk`: servesim extensions, SGLang's own names;
    /// `prefill_decode_interval`: AISimulate). The per-rank chunk comes from
    /// `chunked_prefill_size`.
    pub sglang: servesim_core::engine::SglangKnobs,
    /// TensorRT-LLM batch waiting (`batch_wait_timeout_iters`, `batch_wait_max_tokens_ratio`:
    /// servesim extensions, TensorRT-LLM's own names; off by default).
    pub batch_wait: servesim_core::engine::BatchWait,
    /// TensorRT-LLM's `attention_dp_config: {enable_balance, timeout_iters,
    /// batching_wait_iters}` (its own names; balance off by default): `Some` when enabled.
    pub adp_balance: Option<servesim_core::engine::AdpBalance>,
}

/// `engine.workers.<role>.kv_cache.capacity`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Capacity {
    /// `type: default` — from the memory model.
    Default {
        /// `memory_fraction`: of the whole HBM for vLLM (default 0.92, 0.9 before 0.20); of
        /// the memory left after weights and overheads for TensorRT-LLM (0.9); of the whole
        /// HBM for SGLang's weights and KV alone (0.88 before 0.5.3, from then on derived
        /// from the GPU as SGLang does). `None` takes the engine's default for its release,
        /// set when the scenario is prepared.
        memory_fraction: Option<f64>,
        /// `cuda_graph_reserved_bytes` (0).
        cuda_graph_reserved_bytes: u64,
    },
    /// `type: fixed` — this many blocks per rank.
    FixedBlocks(u64),
    /// `type: fixed` — `floor(bytes / (block_size × bytes_per_token))` blocks per rank.
    FixedBytes(u64),
}

/// `engine.workers.<role>.kv_cache`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvCacheConfig {
    /// `block_size` (vLLM 64, SGLang 1, TRT-LLM 32).
    pub block_size: u32,
    /// `prefix_caching` (true).
    pub prefix_caching: bool,
    /// `bytes_per_token` (`auto` = one TP shard from the model).
    pub bytes_per_token: Option<u64>,
    /// `capacity`.
    pub capacity: Capacity,
    /// `host_offload` (G2): a host-memory KV tier per attention-DP rank.
    pub host_offload: Option<HostOffloadConfig>,
    /// `g3_offload` (G3): a storage KV tier behind the host tiers.
    pub g3_offload: Option<G3OffloadConfig>,
    /// `state_cache` (servesim extension): how a hybrid model's recurrent state is kept.
    pub state_cache: StateCacheConfig,
}

/// `kv_cache.state_cache`: the per-sequence recurrent state of hybrid (linear-attention)
/// models. Every field defaults to what the engine does.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StateCacheConfig {
    /// `ssm_dtype` (`auto`: the checkpoint's `mamba_ssm_dtype`, else the model's 16-bit type
    /// for vLLM and TensorRT-LLM and float32 for SGLang): vLLM's `--mamba-ssm-cache-dtype`,
    /// SGLang's `--mamba-ssm-dtype`.
    pub ssm_dtype: Option<servesim_perf::memory::StateDtype>,
    /// `mamba_full_memory_ratio` (SGLang only; 0.9): state memory over full-attention KV
    /// memory when SGLang splits what is left after the weights.
    pub mamba_full_memory_ratio: Option<f64>,
}

/// `kv_cache.g3_offload`: AISimulate's storage tier behind host memory (its KV cache guide;
/// REF §5.3). Its defaults are AISimulate's, which it calls modelling assumptions rather than
/// measurements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct G3OffloadConfig {
    /// `scope` (required): one store per worker, or one for the whole deployment.
    pub scope: G3Scope,
    /// `num_g3_blocks` (required): blocks per worker (`worker_local`) or in all
    /// (`cluster_shared`).
    pub num_g3_blocks: u32,
    /// `latency_to_first_byte_ms` (0.1).
    pub latency_to_first_byte_ms: f64,
    /// `read_bandwidth_gbps` (10; 0 = unlimited): each worker's read link, decimal GB/s.
    pub read_bandwidth_gbps: f64,
    /// `write_bandwidth_gbps` (10; 0 = unlimited): each worker's write link.
    pub write_bandwidth_gbps: f64,
    /// `shared_read_bandwidth_gbps` (80; 0 = unlimited): the shared store's total read
    /// bandwidth (`cluster_shared` only).
    pub shared_read_bandwidth_gbps: f64,
    /// `shared_write_bandwidth_gbps` (80; 0 = unlimited): its total write bandwidth.
    pub shared_write_bandwidth_gbps: f64,
    /// SGLang's HiCache prefetching (servesim extension, SGLang's own names): `Some` behind a
    /// HiCache tier.
    pub hicache: Option<HicacheStorageConfig>,
}

/// How SGLang's HiCache reads its storage tier ahead of admission
/// (`--hicache-storage-prefetch-policy` and the backend's extra config).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HicacheStorageConfig {
    /// `prefetch_policy` (`best_effort`, SGLang's default; `wait_complete`; `timeout`).
    pub policy: HicachePrefetchPolicy,
    /// `prefetch_threshold` (256): fewest tokens worth prefetching.
    pub threshold_tokens: u32,
    /// `prefetch_timeout_base_s` (1 s): the `timeout` policy's allowance of any prefetch.
    pub timeout_base_s: f64,
    /// `prefetch_timeout_per_ki_token_s` (0.25 s): its allowance per 1,024 tokens found.
    pub timeout_per_ki_token_s: f64,
}

/// `g3_offload.prefetch_policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HicachePrefetchPolicy {
    /// `best_effort`: whatever has arrived when the scheduler reaches the request.
    BestEffort,
    /// `wait_complete`: the request waits for the whole prefetch.
    WaitComplete,
    /// `timeout`: it waits at most the allowance.
    Timeout,
}

/// `g3_offload.scope`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum G3Scope {
    /// `worker_local`: each worker has its own store; workers cannot read each other's blocks.
    WorkerLocal,
    /// `cluster_shared`: one store for every worker, any of which reads any block.
    ClusterShared,
}

/// `kv_cache.host_offload`: vLLM's KV offloading to CPU memory (its `OffloadingConnector`,
/// `--kv-offloading-size`), AISimulate's G2 tier with `scope: dp_rank_local`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostOffloadConfig {
    /// How much host memory each rank's tier has.
    pub size: HostSize,
    /// `d2h_bandwidth_gbps` (32; 0 = unlimited): each GPU's device-to-host link, decimal GB/s.
    pub d2h_bandwidth_gbps: f64,
    /// `h2d_bandwidth_gbps` (32; 0 = unlimited): each GPU's host-to-device link.
    pub h2d_bandwidth_gbps: f64,
    /// `latency_to_first_byte_ms` (0).
    pub latency_to_first_byte_ms: f64,
    /// `write_policy: write_through_selective` (SGLang's HiCache): a node is written once two
    /// inserts have covered it, not at the first.
    pub selective: bool,
    /// `write_policy: write_back` (SGLang's HiCache): a node is written only when GPU memory
    /// evicts it, the step that evicts it waiting for the copy.
    pub write_back: bool,
    /// `scope: cluster_shared` (vLLM): one pool every rank of the role's workers holds its
    /// blocks in, with its own bandwidth each way; `None` for `dp_rank_local`, a tier per rank.
    pub shared: Option<SharedHostLinks>,
}

/// A cluster-shared host pool's own bandwidth over all the ranks using it, decimal GB/s
/// (0 = unlimited): `shared_d2h_bandwidth_gbps` and `shared_h2d_bandwidth_gbps`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SharedHostLinks {
    /// To host memory.
    pub d2h_gbps: f64,
    /// Back to GPU memory.
    pub h2d_gbps: f64,
}

/// The size of a host tier.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HostSize {
    /// `num_host_blocks`: blocks per attention-DP rank (AISimulate), or the whole pool's when
    /// it is cluster-shared.
    Blocks(u32),
    /// `size_gib` (servesim extension): GiB over the worker's tensor-parallel GPUs, as vLLM's
    /// `--kv-offloading-size` counts it; each GPU's own for TensorRT-LLM (`host_cache_size`)
    /// and SGLang (`--hicache-size`, which counts 10^9 bytes).
    Gib(f64),
    /// `hicache_ratio` (SGLang's `--hicache-ratio`, above 1): the GPU's KV cache times this.
    DeviceRatio(f64),
}

/// `engine.workers.<role>`.
#[derive(Clone, Debug, PartialEq)]
pub struct RoleConfig {
    /// `hardware` (P/D roles only): this role's GPU type, when it differs from the engine's.
    pub hardware: Option<String>,
    /// `parallelism`.
    pub parallelism: ParallelismConfig,
    /// `scheduler`.
    pub scheduler: SchedulerKnobs,
    /// `kv_cache`.
    pub kv_cache: KvCacheConfig,
    /// `timing`.
    pub timing: TimingConfig,
    /// `frontend` (servesim extension): the serving processes' host work.
    pub frontend: FrontendConfig,
    /// `startup_seconds` (0): how long a worker the planner adds takes to serve.
    pub startup_seconds: f64,
}

/// `engine.workers.<role>.frontend` (servesim extension): the API-server processes in front
/// of each replica, which parse every request and write every streamed chunk
/// (`servesim_core::frontend`). Costs left out take the engine's calibrated values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FrontendConfig {
    /// `processes` (1): serving processes per replica (TensorRT-LLM `num_serve_frontends`,
    /// vLLM `--api-server-count`).
    pub processes: u32,
    /// `stream_interval` (1): output tokens per streamed chunk.
    pub stream_interval: u32,
    /// `request_ms`: host time per request.
    pub request_ms: Option<f64>,
    /// `chunk_us`: host time per streamed chunk.
    pub chunk_us: Option<f64>,
    /// `prompt_token_us`: host time per prompt token (tokenising the prompt).
    pub prompt_token_us: Option<f64>,
}

impl Default for FrontendConfig {
    fn default() -> Self {
        FrontendConfig {
            processes: 1,
            stream_interval: 1,
            request_ms: None,
            chunk_us: None,
            prompt_token_us: None,
        }
    }
}

/// `engine.workers.<role>.timing`: how step times are computed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimingConfig {
    /// Which model.
    pub kind: TimingKind,
    /// `prefill_scale` (servesim extension): multiplies the prefill share of every step;
    /// default: the engine's calibrated value.
    pub prefill_scale: Option<f64>,
    /// `step_overhead_ms` (servesim extension): engine time per step outside the kernels.
    pub step_overhead_ms: Option<f64>,
    /// `frontend_ms` (servesim extension): API-server time from arrival to dispatch.
    pub frontend_ms: Option<f64>,
    /// `host_us_per_sequence` (servesim extension): host time per scheduled sequence a step
    /// waits for when the engine schedules synchronously (`scheduler.async_scheduling: false`).
    pub host_us_per_sequence: Option<f64>,
    /// `allreduce` (servesim extension): `custom` (the engine's own kernels, the default) or
    /// `nccl` (its custom all-reduce turned off).
    pub allreduce: Option<AllReduceImpl>,
    /// `moe_kernel` (servesim extension): `default` (the table's default lane) or
    /// `min_latency` (TensorRT-LLM's TRTLLM-gen experts, `moe_config.backend: TRTLLM`).
    pub moe_kernel: Option<MoeKernel>,
}

/// `forward_model: fpm`: where the whole-forward tables are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FpmSource {
    /// `fpm_parquet_path` (its sidecar is the same stem with `.metadata.json`).
    pub parquet_path: String,
    /// Where `fpm_parquet_path` was given, for messages.
    pub origin: crate::node::Origin,
    /// `fpm_cell_id` (servesim extension): which cell, when several match the deployment.
    pub cell_id: Option<String>,
}

/// `timing.type`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TimingKind {
    /// `type: default` with `forward_model: op_level`: op-level model over measured tables.
    #[default]
    OpLevel,
    /// `type: roofline` (servesim extension): first principles only, no tables.
    Roofline,
    /// `forward_model: fpm`: measured whole-forward steps (AISimulate FPM tables).
    Fpm(FpmSource),
}

/// `router.policy`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RouterPolicy {
    /// `round_robin` (default).
    RoundRobin,
    /// `least_loaded`: fewest active requests.
    LeastLoaded,
    /// `kv_aware` (alias `kv_router`): Dynamo's KV-router cost, built in.
    KvAware(servesim_core::router::KvAwareConfig),
    /// `session_affinity`: every turn of a session to one worker.
    SessionAffinity,
}

/// `router`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouterConfig {
    /// `policy`.
    pub policy: RouterPolicy,
}

/// `evaluation`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EvaluationConfig {
    /// `sla`.
    pub sla: Sla,
    /// `uncertainty` (servesim extension): replays of other seeds and acceptance rates that
    /// bound the figures.
    pub uncertainty: Option<UncertaintyConfig>,
}

/// `evaluation.uncertainty`: the scenario replayed with `seeds` root seeds (its own first,
/// then the next ones), which redraws arrivals, lengths, frontend delays and acceptance
/// draws; with `acceptance_rate_spread`, each further replay also scales speculative
/// decoding's acceptance by a factor spread evenly over `1 ± spread`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UncertaintyConfig {
    /// `seeds` (2–64).
    pub seeds: u32,
    /// `acceptance_rate_spread` (0–0.5; 0 by default).
    pub acceptance_rate_spread: f64,
}
