//! The recurrent state of hybrid models (linear-attention layers beside softmax attention):
//! how much each sequence holds on a GPU, and where each engine keeps it.
//!
//! - **vLLM** (hybrid KV cache manager): states share the KV pool. The block size is raised
//!   until one layer's page of attention KV holds one layer's state, and each sequence then
//!   holds `ceil(state / block bytes)` blocks beside its tokens'. With prefix caching
//!   (`mamba_cache_mode: align`) prompt chunks end at block boundaries, where states are
//!   checkpointed, and a prefix is reused up to its last checkpoint.
//! - **SGLang** (`HybridReqToTokenPool`): what is left after the weights is split between a
//!   state pool and the KV pool by `mamba_full_memory_ratio` (0.9); the state pool's slots bound
//!   the running requests and hold the states finished requests leave for reuse (dropped least
//!   recently used first when a request needs a slot), and the radix cache reuses a prefix only
//!   where a finished request's state was kept (`mamba_scheduler_strategy: no_buffer`).
//! - **TensorRT-LLM** (`MambaHybridCacheManager`): a state for every `max_batch_size` slot is
//!   allocated before the KV cache is sized.
//!
//! Under P/D a request's state moves with its KV (`PdSetup::state_bytes`).

use servesim_core::engine::Backend;
use servesim_perf::memory::{self, MemoryPlan, Parallelism, StateDtype};
use servesim_perf::spec::ModelArch;

use super::role::gib;
use super::ScenarioError;
use crate::config::{Capacity, KvEvictionPolicy, RoleConfig};
use crate::diag::{Cx, DiagKind};
use crate::node::Origin;

/// vLLM rounds the raised block size to its attention kernels' block alignment
/// (`HybridAttentionMambaModelConfig.verify_and_update_config`, 16 tokens for FlashAttention).
const VLLM_KERNEL_BLOCK_ALIGNMENT: u64 = 16;

/// SGLang's default `--mamba-full-memory-ratio` (`server_args.py`).
const SGLANG_MAMBA_FULL_MEMORY_RATIO: f64 = 0.9;

/// A hybrid model's recurrent state on one role's workers.
#[derive(Clone, Debug, PartialEq)]
pub struct StatePlan {
    /// State one sequence holds on one GPU, bytes.
    pub bytes_per_sequence: u64,
    /// Element type of the recurrent matrices.
    pub ssm_dtype: StateDtype,
    /// vLLM: blocks of the KV pool one sequence's state takes (0 for the other engines).
    pub blocks_per_sequence: u32,
    /// vLLM: the configured block size, when the engine raised it to hold a layer's state.
    pub block_size_raised_from: Option<u32>,
    /// SGLang: state slots per attention-DP rank; TensorRT-LLM: states allocated up front.
    pub slots: Option<u64>,
    /// Bytes of each GPU allocated to states up front (SGLang and TensorRT-LLM).
    pub reserved_bytes: u64,
}

/// What the state plan reads of its role.
pub(super) struct StateInputs<'a> {
    pub backend: Backend,
    pub model: &'a ModelArch,
    pub parallelism: Parallelism,
    pub name: &'static str,
    pub role: &'a RoleConfig,
    pub eviction: KvEvictionPolicy,
    /// Running requests per rank before the state bounds them (TensorRT-LLM's allocation).
    pub max_sequences: u32,
    /// Where a config path's value came from, for diagnostics.
    pub at: &'a dyn Fn(&str) -> Origin,
}

/// Plans a hybrid model's state on one role: raises vLLM's block size (`block_size`), takes
/// SGLang's and TensorRT-LLM's state memory out of `memory`, and checks the combinations the
/// simulation does not cover. `Ok(None)` for models without linear attention (a `state_cache`
/// block given for one is reported to `cx`).
pub(super) fn plan(
    input: &StateInputs<'_>,
    cx: &mut Cx,
    memory: &mut MemoryPlan,
    block_size: &mut u32,
) -> Result<Option<StatePlan>, ScenarioError> {
    let StateInputs { backend, model, parallelism, name, role, eviction, max_sequences, at } = *input;
    let kv = &role.kv_cache;
    let path = format!("engine.workers.{name}.kv_cache");
    let Some(la) = &model.linear_attention else {
        if kv.state_cache != crate::config::StateCacheConfig::default() {
            let p = format!("{path}.state_cache");
            cx.report(
                DiagKind::Domain,
                &p,
                &at(&p),
                format!("{} has no linear-attention layers: state_cache applies to hybrid models", model.id),
            );
        }
        return Ok(None);
    };
    let before = cx.diags.len();
    let mut refuse = |what: &str, why: String| cx.report(DiagKind::Unsupported, what, &at(what), why);
    if kv.host_offload.is_some() {
        refuse(
            &format!("{path}.host_offload"),
            format!("{} is a hybrid model: offloading its recurrent state to host memory is not simulated (AISimulate refuses it too)", model.id),
        );
    }
    if eviction == KvEvictionPolicy::Belady {
        refuse(
            "engine.kv_eviction_policy",
            format!(
                "{} is a hybrid model: Belady eviction beside its recurrent state is not simulated; use lru",
                model.id
            ),
        );
    }
    if backend == Backend::TrtLlm && kv.prefix_caching {
        refuse(
            &format!("{path}.prefix_caching"),
            format!(
                "{} is a hybrid model: TensorRT-LLM's block reuse of its recurrent state is not simulated; set prefix_caching: false",
                model.id
            ),
        );
    }
    if cx.diags.len() != before {
        return Ok(None);
    }
    // `auto`: the type the checkpoint's config asks for (vLLM's Qwen3.5 config reads
    // `mamba_ssm_dtype`), else vLLM's `--mamba-ssm-cache-dtype auto` and TensorRT-LLM's
    // `mamba_ssm_cache_dtype auto` keep the model's 16-bit type and SGLang keeps float32
    // (`--mamba-ssm-dtype`).
    let ssm_dtype = kv.state_cache.ssm_dtype.or(la.ssm_dtype).unwrap_or(match backend {
        Backend::Vllm | Backend::TrtLlm => StateDtype::Half,
        Backend::Sglang => StateDtype::Fp32,
    });
    let bytes = memory::state_bytes_per_sequence(model, parallelism, ssm_dtype, StateDtype::Half);
    let mut plan = StatePlan {
        bytes_per_sequence: bytes,
        ssm_dtype,
        blocks_per_sequence: 0,
        block_size_raised_from: None,
        slots: None,
        reserved_bytes: 0,
    };
    let default_capacity = matches!(kv.capacity, Capacity::Default { .. });
    let refit = |m: &mut MemoryPlan, block: u32| {
        m.kv_tokens = m.kv_cache_bytes / m.kv_bytes_per_token.max(1);
        m.kv_blocks = m.kv_tokens / u64::from(block.max(1));
    };
    match backend {
        Backend::Vllm => {
            let attn_layers =
                u64::from(model.attention_layers().div_ceil(parallelism.pipeline.max(1))).max(1);
            let linear_layers =
                u64::from(la.layers.min(model.num_layers).div_ceil(parallelism.pipeline.max(1))).max(1);
            let attn_page_per_token = (memory.kv_bytes_per_token / attn_layers).max(1);
            let state_page = bytes.div_ceil(linear_layers);
            let a = VLLM_KERNEL_BLOCK_ALIGNMENT;
            let needed = a * state_page.div_ceil(a * attn_page_per_token);
            if needed > u64::from(*block_size) {
                plan.block_size_raised_from = Some(*block_size);
                *block_size = u32::try_from(needed).map_err(|_| ScenarioError::Resource {
                    message: format!(
                        "{name} workers: vLLM's block size for this hybrid layout would be {needed} tokens"
                    ),
                })?;
                refit(memory, *block_size);
            }
            let block_bytes = u64::from(*block_size) * memory.kv_bytes_per_token.max(1);
            plan.blocks_per_sequence = u32::try_from(bytes.div_ceil(block_bytes)).unwrap_or(u32::MAX);
        }
        Backend::TrtLlm if default_capacity => {
            let reserved = u64::from(max_sequences) * bytes;
            let Some(left) = memory.kv_cache_bytes.checked_sub(reserved).filter(|l| *l > 0) else {
                return Err(ScenarioError::Resource {
                    message: format!(
                        "{name} workers: TensorRT-LLM allocates a recurrent state for each of its {max_sequences} max_batch_size slots ({:.2} GiB a GPU) and only {:.2} GiB is left for KV and states; lower engine.workers.{name}.scheduler.max_sequences",
                        gib(reserved),
                        gib(memory.kv_cache_bytes)
                    ),
                });
            };
            memory.kv_cache_bytes = left;
            refit(memory, *block_size);
            plan.slots = Some(u64::from(max_sequences));
            plan.reserved_bytes = reserved;
        }
        Backend::Sglang if default_capacity => {
            let ratio = kv.state_cache.mamba_full_memory_ratio.unwrap_or(SGLANG_MAMBA_FULL_MEMORY_RATIO);
            #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            // GPU memory is far below 2^53 bytes; the budget is non-negative.
            let budget = (memory.kv_cache_bytes as f64 * ratio / (1.0 + ratio)) as u64;
            let slots = budget / bytes.max(1);
            if slots == 0 {
                return Err(ScenarioError::Resource {
                    message: format!(
                        "{name} workers: SGLang's state pool ({:.2} GiB a GPU at mamba_full_memory_ratio {ratio}) holds no {:.1} MiB state",
                        gib(budget),
                        mib(bytes)
                    ),
                });
            }
            plan.reserved_bytes = slots * bytes;
            memory.kv_cache_bytes -= plan.reserved_bytes;
            refit(memory, *block_size);
            plan.slots = Some(slots);
        }
        // A cache of fixed size holds the KV alone; the states are outside it.
        Backend::TrtLlm | Backend::Sglang => {}
    }
    Ok(Some(plan))
}

/// Bytes in MiB, for messages.
fn mib(bytes: u64) -> f64 {
    gib(bytes) * 1024.0
}
