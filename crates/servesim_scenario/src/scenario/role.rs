//! One worker role, resolved: its GPU and layout checked, its memory planned by the engine's
//! rule, its engine defaults that follow the GPU and release applied, and its step timer
//! chosen.

use std::rc::Rc;

use servesim_core::engine::Backend;
use servesim_perf::memory::{self, FractionOf, MemoryInputs, Parallelism, SglangReserve};
use servesim_perf::oplevel::{GraphPolicy, OpConstants, OpLevelSetup};
use servesim_perf::spec::{Dtype, GemmQuant, Hardware, ModelArch, MoeQuant};
use servesim_perf::tables::Family;

use super::state::{self, StateInputs};
use super::{Files, PreparedRole, RoleTiming, ScenarioError};
use crate::catalog::Catalog;
use crate::config::{
    Capacity, ContextLength, EngineConfig, HostSize, RoleConfig, SpeculationConfig, TimingKind,
};
use crate::decode::role::{default_memory_fraction, sglang_since_0_5_3};
use crate::diag::{Cx, DiagKind};
use crate::node::{Node, Origin};
use crate::perfdata;

/// What every role of a scenario shares.
pub(super) struct RoleEnv<'a> {
    pub root: &'a Node,
    pub catalog: &'a Catalog,
    pub files: &'a dyn Files,
    pub engine: &'a EngineConfig,
    pub model: &'a ModelArch,
    /// The draft model of draft-model speculation.
    pub draft: Option<&'a ModelArch>,
    /// The engine's GPU; a role may name its own.
    pub hardware: &'a Hardware,
    pub gemm_quant: GemmQuant,
    pub moe_quant: MoeQuant,
    pub gemm_dtype: Dtype,
    pub kv_dtype: Dtype,
}

impl RoleEnv<'_> {
    /// Where `path` (or its nearest present parent) was written.
    fn at(&self, path: &str) -> Origin {
        super::origin_of(self.root, path)
    }
}

/// Resolves one role. Problems with its config go to `cx` and give `Ok(None)`.
///
/// # Errors
/// [`ScenarioError::Resource`] when the role does not fit its GPUs, or its tables cannot be
/// read.
pub(super) fn prepare_role(
    env: &RoleEnv<'_>,
    cx: &mut Cx,
    name: &'static str,
    role: &RoleConfig,
) -> Result<Option<PreparedRole>, ScenarioError> {
    let RoleEnv { engine, model, hardware, gemm_quant, moe_quant, gemm_dtype, kv_dtype, .. } = *env;
    let base = format!("engine.workers.{name}");
    // A role may run on its own GPU type (heterogeneous P/D).
    let hw = match &role.hardware {
        Some(id) => match env.catalog.gpu(id) {
            Some(h) => h,
            None => {
                let known: Vec<&str> = env.catalog.hardware.iter().map(|h| h.id.as_str()).collect();
                cx.report(
                    DiagKind::Domain,
                    &format!("{base}.hardware"),
                    &env.at(&format!("{base}.hardware")),
                    format!("unknown hardware '{id}'; known: {}", known.join(", ")),
                );
                return Ok(None);
            }
        },
        None => hardware,
    };
    let par = role.parallelism;
    // Experts left unpartitioned follow the attention layout: tensor-parallel over every
    // GPU of the stage (the engines' default without expert parallelism).
    let unset = par.moe_tensor == 1 && par.moe_expert == 1;
    let parallelism = Parallelism {
        tensor: par.tensor,
        pipeline: par.pipeline,
        attention_data: par.attention_data,
        moe_expert: par.moe_expert,
        moe_tensor: if unset && model.moe.is_some() {
            par.tensor * par.attention_data
        } else {
            par.moe_tensor
        },
    };
    let ppath = format!("{base}.parallelism");
    if model.moe.is_none() && (par.moe_expert > 1 || par.moe_tensor > 1) {
        cx.report(
            DiagKind::Domain,
            &ppath,
            &env.at(&ppath),
            format!("{} is a dense model: moe_expert and moe_tensor must be 1", model.id),
        );
    }
    let tpath = format!("{ppath}.tensor");
    if model.num_heads % par.tensor != 0 {
        cx.report(
            DiagKind::Domain,
            &tpath,
            &env.at(&tpath),
            format!(
                "{} attention heads are not divisible by tensor parallelism {}",
                model.num_heads, par.tensor
            ),
        );
    }
    // Tensor parallelism across nodes is allowed (multi-node TP, NVL72 racks); its
    // collectives then run over the scale-out links.
    if model.moe.is_some()
        && par.moe_tensor * par.moe_expert != 1
        && par.moe_tensor * par.moe_expert != par.tensor * par.attention_data
    {
        cx.report(
            DiagKind::Domain,
            &ppath,
            &env.at(&ppath),
            format!(
                "moe_tensor x moe_expert ({} x {}) must equal tensor x attention_data ({} x {}): experts are spread over the same GPUs",
                par.moe_tensor, par.moe_expert, par.tensor, par.attention_data
            ),
        );
    }
    if !cx.diags.is_empty() {
        return Ok(None);
    }
    let (memory_fraction, graphs) = match role.kv_cache.capacity {
        Capacity::Default { memory_fraction, cuda_graph_reserved_bytes } => {
            (memory_fraction, cuda_graph_reserved_bytes)
        }
        Capacity::FixedBlocks(_) | Capacity::FixedBytes(_) => (Some(0.9), 0),
    };
    // SGLang sizes its chunk and CUDA graphs by the GPU, and from 0.5.3 its memory
    // fraction too (from the chunk, the graphs and the layout).
    let release = engine.backend_version.as_deref();
    let sglang_tp = par.tensor * par.attention_data;
    let sglang_gpu = memory::sglang_gpu_defaults(hw.hbm_bytes, sglang_tp, sglang_since_0_5_3(release));
    let sglang_chunk = role.scheduler.chunked_prefill_size.unwrap_or(sglang_gpu.chunked_prefill_size);
    let mut config = role.clone();
    // Under attention DP each rank takes its share of the chunk (SGLang divides
    // `chunked_prefill_size` by `dp_size`).
    config.scheduler.sglang.chunked_prefill_size = (sglang_chunk / par.attention_data.max(1)).max(1);
    if engine.backend == Backend::Sglang {
        config.scheduler.chunked_prefill_size = Some(sglang_chunk);
    }
    // The step budget per rank: SGLang's chunk (it does not read `max_batched_tokens`), or
    // the config's, or the engine's default for the GPU.
    let (default_tokens, default_sequences) = batch_defaults(engine.backend, hw);
    let max_batched_tokens = match engine.backend {
        Backend::Sglang => config.scheduler.sglang.chunked_prefill_size,
        Backend::Vllm | Backend::TrtLlm => role.scheduler.max_batched_tokens.unwrap_or(default_tokens),
    };
    let memory_fraction = memory_fraction.or_else(|| default_memory_fraction(engine.backend, release));
    let memory_fraction = match memory_fraction {
        Some(f) => f,
        None => {
            let derived = memory::sglang_default_fraction(&SglangReserve {
                hbm_bytes: hw.hbm_bytes,
                chunked_prefill_tokens: sglang_chunk,
                tp_size: sglang_tp,
                pipeline: par.pipeline,
                attention_data: par.attention_data,
                draft_mib: sglang_draft_mib(&engine.speculation),
            });
            // SGLang's own rule leaves nothing for weights and KV: its reserve per CUDA-graph
            // slot grows with the attention-DP ranks. The engine would start with a
            // meaningless fraction, so say which setting to give instead.
            if derived <= 0.0 {
                #[allow(clippy::cast_precision_loss)] // GPU memory is far below 2^53 bytes.
                let gib = hw.hbm_bytes as f64 / memory::GIB as f64;
                return Err(ScenarioError::Resource {
                    message: format!(
                        "{name} workers: SGLang's derived mem_fraction_static for this layout is {derived:.3}: its reserve for activations and CUDA graphs ({:.1} GiB of the {gib:.1} GiB GPU, with {} attention-DP ranks) leaves nothing for weights and KV; set engine.workers.{name}.kv_cache.capacity.memory_fraction (SGLang's --mem-fraction-static)",
                        (1.0 - derived) * gib,
                        par.attention_data
                    ),
                });
            }
            derived
        }
    };
    let mut memory = memory::plan(
        model,
        hw,
        &MemoryInputs {
            parallelism,
            weight_dtype: gemm_dtype,
            expert_dtype: moe_quant.dtype(),
            kv_dtype,
            memory_fraction,
            fraction_of: match engine.backend {
                Backend::Vllm => FractionOf::Total,
                Backend::Sglang => FractionOf::WeightsAndKv,
                Backend::TrtLlm => FractionOf::Free,
            },
            max_batched_tokens,
            block_size: role.kv_cache.block_size,
            cuda_graph_reserved_bytes: graphs,
        },
    )
    .map_err(|e| ScenarioError::Resource { message: format!("{name} workers: {}", e.message) })?;
    if let Some(d) = env.draft {
        // vLLM loads the draft beside the target with the same tensor parallelism, and its
        // layers' KV lives in the same blocks as the target's.
        let draft_weights = memory::weight_bytes_per_gpu(d, parallelism, d.weight_dtype, d.moe_quant.dtype());
        let Some(left) = memory.kv_cache_bytes.checked_sub(draft_weights) else {
            return Err(ScenarioError::Resource {
                message: format!(
                    "{name} workers: the draft model {} needs {:.2} GiB a GPU and only {:.2} GiB is left for KV",
                    d.id,
                    gib(draft_weights),
                    gib(memory.kv_cache_bytes)
                ),
            });
        };
        memory.weights_bytes += draft_weights;
        memory.kv_cache_bytes = left;
        memory.kv_bytes_per_token += memory::kv_bytes_per_token(d, parallelism, kv_dtype);
        memory.kv_tokens = memory.kv_cache_bytes / memory.kv_bytes_per_token.max(1);
        memory.kv_blocks = memory.kv_tokens / u64::from(role.kv_cache.block_size);
    }
    if let Some(b) = role.kv_cache.bytes_per_token {
        memory.kv_bytes_per_token = b;
        memory.kv_tokens = memory.kv_cache_bytes / b;
        memory.kv_blocks = memory.kv_tokens / u64::from(role.kv_cache.block_size);
    }
    let at = |path: &str| env.at(path);
    let state = state::plan(
        &StateInputs {
            backend: engine.backend,
            model,
            parallelism,
            name,
            role,
            eviction: engine.kv_eviction_policy,
            max_sequences: role.scheduler.max_sequences.unwrap_or(default_sequences),
            at: &at,
        },
        cx,
        &mut memory,
        &mut config.kv_cache.block_size,
    )?;
    if !cx.diags.is_empty() {
        return Ok(None);
    }
    if state.as_ref().is_some_and(|s| s.blocks_per_sequence > 0)
        && config.kv_cache.prefix_caching
        && max_batched_tokens < config.kv_cache.block_size
    {
        // Aligned chunks are whole blocks: a smaller budget would never schedule one.
        cx.report(
            DiagKind::Domain,
            &format!("{base}.scheduler.max_batched_tokens"),
            &env.at(&format!("{base}.scheduler.max_batched_tokens")),
            format!(
                "{} is a hybrid model: vLLM's block size is {} tokens for it and prompt chunks are whole blocks, so max_batched_tokens ({max_batched_tokens}) must be at least that",
                model.id, config.kv_cache.block_size
            ),
        );
        return Ok(None);
    }
    let block = u64::from(config.kv_cache.block_size);
    let blocks = match role.kv_cache.capacity {
        Capacity::Default { .. } => memory.kv_blocks,
        Capacity::FixedBlocks(b) => b,
        Capacity::FixedBytes(bytes) => bytes / (block * memory.kv_bytes_per_token.max(1)),
    };
    if blocks == 0 {
        return Err(ScenarioError::Resource {
            message: format!("{name} workers: the KV cache holds no block"),
        });
    }
    if let Some(h) = role.kv_cache.host_offload {
        let block_bytes = block * memory.kv_bytes_per_token.max(1);
        let host_blocks =
            host_capacity_blocks(h.size, block_bytes, host_size_gpus(engine.backend, par.tensor), blocks);
        if engine.backend == Backend::Sglang {
            // HiCache refuses a host pool no larger than the GPU's (`MHATokenToKVPoolHost`:
            // "The host memory should be larger than the device memory").
            if u64::from(host_blocks) <= blocks {
                return Err(ScenarioError::Resource {
                    message: format!(
                        "{name} workers: SGLang's HiCache needs more host memory than GPU memory for KV: host_offload holds {} tokens a rank, the GPU KV cache {} (give num_host_blocks or size_gib above that, or hicache_ratio: 2, SGLang's default)",
                        u64::from(host_blocks) * block,
                        blocks * block
                    ),
                });
            }
        }
        if host_blocks == 0 {
            return Err(ScenarioError::Resource {
                message: format!(
                    "{name} workers: kv_cache.host_offload holds no block: a block of {} tokens takes {block_bytes} bytes on each of the {} tensor-parallel GPUs",
                    role.kv_cache.block_size, par.tensor
                ),
            });
        }
    }
    let max_sequences = role.scheduler.max_sequences.unwrap_or_else(|| match engine.backend {
        Backend::Vllm | Backend::TrtLlm => default_sequences,
        Backend::Sglang => {
            let context = match engine.context_length {
                ContextLength::Tokens(n) => u64::from(n),
                ContextLength::Max => model.max_position_embeddings,
            };
            sglang_max_running_requests(blocks * block, context)
        }
    });
    // Every running request holds one of SGLang's state slots.
    let max_sequences = match state.as_ref().and_then(|s| s.slots) {
        Some(slots) if engine.backend == Backend::Sglang => {
            max_sequences.min(u32::try_from(slots).unwrap_or(u32::MAX))
        }
        _ => max_sequences,
    };
    let timing = match &role.timing.kind {
        TimingKind::Roofline => RoleTiming::Roofline,
        TimingKind::Fpm(src) => {
            let kv_name = match kv_dtype {
                Dtype::Bf16 => "bfloat16",
                other => other.name(),
            };
            let want = perfdata::FpmWant {
                model: &model.id,
                system: &hw.id,
                backend: engine.backend.name(),
                shape: [par.tensor, par.pipeline, par.attention_data, par.moe_tensor, par.moe_expert, 1],
                gemm: gemm_quant.table_name(),
                kv: kv_name,
            };
            let at = format!("engine.workers.{name}.timing.fpm_parquet_path");
            match perfdata::load_fpm(env.files, &src.parquet_path, src.cell_id.as_deref(), &want) {
                Ok(m) => RoleTiming::Fpm(Rc::new(m)),
                Err(message) => {
                    cx.report(DiagKind::Domain, &at, &src.origin, message);
                    return Ok(None);
                }
            }
        }
        TimingKind::OpLevel => {
            let backend = engine.backend.name();
            let version = engine
                .backend_version
                .clone()
                .unwrap_or_else(|| perfdata::default_version(engine.backend).to_string());
            let default = perfdata::default_version(engine.backend);
            let db = perfdata::load(env.files, &hw.id, backend, &version, default)?;
            let own = |f: Family| f != Family::Nccl && db.table_version(f) == version;
            if version != default && !db.families().any(own) && db.families().next().is_some() {
                // A version the data holds nothing of (a typo, or not imported) would
                // silently be timed as the default release.
                cx.report(
                    DiagKind::Domain,
                    "engine.backend_version",
                    &env.at("engine.backend_version"),
                    format!(
                        "no kernel tables for {backend} {version} on {}; the data holds {default} \
                         (omit backend_version to use it, or import other versions with `servesim data \
                         import-aic --version {backend}={version}` and pass --data-dir)",
                        hw.id
                    ),
                );
                return Ok(None);
            }
            RoleTiming::OpLevel {
                setup: Box::new(OpLevelSetup {
                    model: model.clone(),
                    hardware: hw.clone(),
                    parallelism,
                    gemm: gemm_quant,
                    moe: moe_quant,
                    kv: kv_dtype,
                    attention_fp8: engine.backend != Backend::Vllm,
                    graphs: match engine.backend {
                        Backend::Vllm => GraphPolicy::vllm(max_sequences),
                        Backend::Sglang => GraphPolicy::sglang(sglang_gpu.cuda_graph_max_bs),
                        Backend::TrtLlm => GraphPolicy::trtllm(),
                    },
                    draft_layers: engine.speculation.draft_layers(),
                    constants: {
                        let mut c = OpConstants::for_backend(backend);
                        if !role.scheduler.async_scheduling {
                            c = c.synchronous();
                        }
                        if let Some(x) = role.timing.prefill_scale {
                            c.prefill_scale = x;
                        }
                        if let Some(ms) = role.timing.step_overhead_ms {
                            c.step_overhead_s = ms / 1e3;
                        }
                        if let Some(us) = role.timing.host_us_per_sequence {
                            c.host_s_per_sequence = us / 1e6;
                        }
                        if let Some(a) = role.timing.allreduce {
                            c.allreduce = a;
                        }
                        if let Some(k) = role.timing.moe_kernel {
                            c.moe_kernel = k;
                        }
                        c
                    },
                }),
                db: Rc::new(db),
            }
        }
    };
    Ok(Some(PreparedRole {
        name,
        config,
        hardware: hw.clone(),
        parallelism,
        memory,
        max_batched_tokens,
        max_sequences,
        memory_fraction: matches!(role.kv_cache.capacity, Capacity::Default { .. })
            .then_some(memory_fraction),
        blocks_per_rank: u32::try_from(blocks).unwrap_or(u32::MAX),
        timing,
        state,
    }))
}

/// The memory SGLang reserves for a speculative draft when it derives its memory fraction,
/// MiB: 2,048 for EAGLE and MTP draft layers ("eagle draft models and cuda graphs" in
/// `_handle_gpu_memory_settings`), none for n-gram lookup.
fn sglang_draft_mib(speculation: &SpeculationConfig) -> f64 {
    match speculation {
        SpeculationConfig::DraftLayers { .. } => 2048.0,
        SpeculationConfig::Off | SpeculationConfig::Ngram { .. } | SpeculationConfig::DraftModel { .. } => {
            0.0
        }
    }
}

/// An engine's default step budget and running-request cap, `(tokens, sequences)`:
/// - `vllm serve` (`EngineArgs`, the `OPENAI_API_SERVER` usage context): 8,192 and 1,024 on
///   GPUs of 70 GiB and more other than A100 ("for GPUs like H100 and MI300x, use larger
///   default values"; PR #17885 keeps A100 on the small ones), 2,048 and 256 elsewhere;
/// - TensorRT-LLM: `max_num_tokens` 8,192 and `max_batch_size` 2,048 (its `BuildConfig`,
///   which `trtllm-serve` and the LLM API take when none is given);
/// - SGLang reads neither: its chunk is the budget and its request pool the cap
///   ([`sglang_max_running_requests`]); the pair returned for it is unused.
fn batch_defaults(backend: Backend, hw: &Hardware) -> (u32, u32) {
    match backend {
        Backend::TrtLlm | Backend::Sglang => (8192, 2048),
        Backend::Vllm if hw.hbm_bytes >= 70 * memory::GIB && !hw.id.contains("a100") => (8192, 1024),
        Backend::Vllm => (2048, 256),
    }
}

/// SGLang's default `max_running_requests` per attention-DP rank (`model_runner`): its
/// request pool, `kv_tokens / context_len × 512` clamped to 2,048–4,096, and at most half the
/// KV pool's tokens.
fn sglang_max_running_requests(kv_tokens: u64, context_len: u64) -> u32 {
    let pool = (kv_tokens.saturating_mul(512) / context_len.max(1)).clamp(2048, 4096);
    u32::try_from(pool.min(kv_tokens / 2).max(1)).unwrap_or(u32::MAX)
}

/// How many GPUs share a host tier's `size_gib`: vLLM's `--kv-offloading-size` is the sum over
/// the worker's tensor-parallel GPUs, TensorRT-LLM's `host_cache_size` and SGLang's
/// `--hicache-size` each rank's own.
#[must_use]
pub(crate) fn host_size_gpus(backend: Backend, tensor: u32) -> u32 {
    match backend {
        Backend::TrtLlm | Backend::Sglang => 1,
        Backend::Vllm => tensor,
    }
}

/// Blocks a rank's host tier holds: `num_host_blocks` as given, `size_gib` shared by
/// `tensor` GPUs ([`host_size_gpus`]), each holding its own shard of every block
/// (`block_bytes` a GPU), or `hicache_ratio` times the rank's `device_blocks`.
#[must_use]
pub(crate) fn host_capacity_blocks(size: HostSize, block_bytes: u64, tensor: u32, device_blocks: u64) -> u32 {
    match size {
        HostSize::Blocks(b) => b,
        HostSize::DeviceRatio(r) => {
            #[allow(clippy::cast_precision_loss)] // Block counts are far below 2^53.
            let blocks = (r * device_blocks as f64).floor();
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Clamped to u32.
            let b = blocks.clamp(0.0, f64::from(u32::MAX)) as u32;
            b
        }
        HostSize::Gib(gib) => {
            #[allow(clippy::cast_precision_loss)] // GiB counts and block sizes are far below 2^53.
            let per_gpu = gib * memory::GIB as f64 / f64::from(tensor.max(1));
            #[allow(clippy::cast_precision_loss)]
            let blocks = (per_gpu / block_bytes.max(1) as f64).floor();
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Clamped to u32.
            let b = blocks.clamp(0.0, f64::from(u32::MAX)) as u32;
            b
        }
    }
}

/// Bytes in GiB, for messages.
#[allow(clippy::cast_precision_loss)] // GPU memory is far below 2^53 bytes.
pub(super) fn gib(bytes: u64) -> f64 {
    bytes as f64 / memory::GIB as f64
}
