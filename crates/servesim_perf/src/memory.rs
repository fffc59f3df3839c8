//! GPU memory: weights, activations, overheads, and the KV-cache capacity left over.
//!
//! The budget follows AISimulate's captured memory detail (REF §2.1, Qwen3-32B-FP8 on one
//! H200): KV bytes = `memory_fraction × HBM − weights − activations − runtime overhead`,
//! tokens = ⌊KV bytes / bytes per token⌋, blocks = ⌊tokens / block size⌋. The unit test
//! reproduces those published figures to the byte. TensorRT-LLM takes its fraction of the
//! memory left once the model is loaded instead ([`FractionOf::Free`]), and SGLang's holds the
//! weights and KV alone ([`FractionOf::WeightsAndKv`]).

use alloc::format;
use alloc::string::String;

pub use crate::spec::StateDtype;
use crate::spec::{Dtype, Hardware, ModelArch};

/// Bytes per GiB.
pub const GIB: u64 = 1 << 30;

/// Non-torch runtime memory per GPU (CUDA context, allocator slack, engine buffers): 3.5 GiB,
/// AIConfigurator's `other_mem` (AICDB §3.1) and AISimulate's `runtime_overhead_bytes`.
pub const RUNTIME_OVERHEAD_BYTES: u64 = 3 * GIB + GIB / 2;

/// Parallel layout of one worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parallelism {
    /// Tensor parallel degree.
    pub tensor: u32,
    /// Pipeline stages.
    pub pipeline: u32,
    /// Attention data-parallel ranks.
    pub attention_data: u32,
    /// Expert parallel degree of MoE layers.
    pub moe_expert: u32,
    /// Tensor parallel degree of MoE layers.
    pub moe_tensor: u32,
}

impl Parallelism {
    /// One GPU, no parallelism.
    pub const SINGLE: Parallelism =
        Parallelism { tensor: 1, pipeline: 1, attention_data: 1, moe_expert: 1, moe_tensor: 1 };

    /// GPUs one worker occupies.
    #[must_use]
    pub fn gpus(&self) -> u32 {
        self.tensor * self.pipeline * self.attention_data
    }
}

/// What an engine's memory fraction is a fraction of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FractionOf {
    /// The whole HBM: the engine's weights, activations and KV together stay under it
    /// (vLLM `gpu_memory_utilization`).
    Total,
    /// The whole HBM, for the weights and the KV pool alone; activations, CUDA graphs and
    /// runtime buffers live in the rest (SGLang `mem_fraction_static`, which its server
    /// arguments define as "(model weights + KV cache pool) / GPU memory capacity").
    WeightsAndKv,
    /// The memory still free after weights, activations and overheads; the KV cache takes
    /// that fraction of it (TensorRT-LLM `free_gpu_memory_fraction`, sized after the model
    /// is loaded and a profiling step has run; AICDB §5.6 point 6).
    Free,
}

/// What SGLang's default `mem_fraction_static` depends on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SglangReserve {
    /// HBM of one GPU.
    pub hbm_bytes: u64,
    /// `chunked_prefill_size`: the most prompt tokens one step takes.
    pub chunked_prefill_tokens: u32,
    /// SGLang's `tp_size`: every GPU of a pipeline stage, attention-DP ranks included
    /// (`--tp 8 --dp 8` is servesim's `tensor: 1, attention_data: 8`).
    pub tp_size: u32,
    /// Pipeline stages.
    pub pipeline: u32,
    /// Attention data-parallel ranks (1 without attention DP).
    pub attention_data: u32,
    /// Extra memory a speculative draft holds, MiB (EAGLE/MTP draft layers 2,048; none 0).
    pub draft_mib: f64,
}

/// SGLang's defaults that follow the GPU's memory (`server_args.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SglangGpuDefaults {
    /// `chunked_prefill_size`: the most prompt tokens one step takes, before attention DP
    /// divides it among its ranks.
    pub chunked_prefill_size: u32,
    /// `cuda_graph_max_bs`: the largest decode batch captured as a CUDA graph.
    pub cuda_graph_max_bs: u32,
}

/// SGLang's GPU-memory tiers. From 0.5.3 on (PR #10975, `_handle_gpu_memory_settings`) the
/// chunk is 2,048 below 35 GiB, 4,096 below 60, 8,192 below 160 and 16,384 above, and the
/// graph's largest batch 8 below 20 GiB, 24 (80 from TP4) below 35, 32 (160) below 60, 256
/// (512) below 160 and 512 above. Before 0.5.3 the chunk is 2,048 below 35 GiB, 8,192 below
/// 160 and 16,384 above, and the graphs reach 8 (80 from TP4) below 35 GiB and otherwise 160
/// (256 from TP4 on GPUs of 80 GB and more, as `cuda_graph_runner` captured them).
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn sglang_gpu_defaults(hbm_bytes: u64, tp_size: u32, since_0_5_3: bool) -> SglangGpuDefaults {
    let gib = hbm_bytes as f64 / GIB as f64;
    let wide = tp_size >= 4;
    let pick = |narrow: u32, wide_bs: u32| if wide { wide_bs } else { narrow };
    let (chunked_prefill_size, cuda_graph_max_bs) = if since_0_5_3 {
        if gib < 20.0 {
            (2048, 8)
        } else if gib < 35.0 {
            (2048, pick(24, 80))
        } else if gib < 60.0 {
            (4096, pick(32, 160))
        } else if gib < 160.0 {
            (8192, pick(256, 512))
        } else {
            (16_384, 512)
        }
    } else if gib < 35.0 {
        (2048, pick(8, 80))
    } else {
        let chunk = if gib < 160.0 { 8192 } else { 16_384 };
        (chunk, if wide && hbm_bytes >= 80_000_000_000 { 256 } else { 160 })
    };
    SglangGpuDefaults { chunked_prefill_size, cuda_graph_max_bs }
}

/// SGLang's default `mem_fraction_static` from 0.5.3 on (PR #10975, `server_args.py`
/// `_handle_gpu_memory_settings`): the GPU's memory less a reserve for activations and CUDA
/// graphs, all in MiB. The reserve is 512 for metadata, 1.5 per token of the prefill chunk
/// (at least 2,048), 2 per CUDA-graph batch slot ([`sglang_gpu_defaults`]), 1,024 per 8 GPUs
/// of TP × PP, with attention DP 3 per slot and rank (4.5 above 300 slots), at least 10,240 on
/// GPUs above 60 GiB, plus the draft's. Rounded to three decimals.
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn sglang_default_fraction(r: &SglangReserve) -> f64 {
    let gpu_mib = r.hbm_bytes as f64 / f64::from(1u32 << 20);
    let gib = |g: f64| g * 1024.0;
    let graph_bs = f64::from(sglang_gpu_defaults(r.hbm_bytes, r.tp_size, true).cuda_graph_max_bs);
    let mut reserved = 512.0 + f64::from(r.chunked_prefill_tokens.max(2048)) * 1.5 + graph_bs * 2.0;
    reserved += f64::from(r.tp_size.max(1) * r.pipeline.max(1)) / 8.0 * 1024.0;
    if r.attention_data > 1 {
        let dp = f64::from(r.attention_data);
        reserved += graph_bs * dp * 3.0;
        if graph_bs > 300.0 {
            reserved += graph_bs * dp * 1.5;
        }
    }
    if gpu_mib > gib(60.0) {
        reserved = reserved.max(gib(10.0));
    }
    reserved += r.draft_mib;
    libm::round((gpu_mib - reserved) / gpu_mib * 1000.0) / 1000.0
}

/// Inputs of the memory plan beyond model and hardware.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryInputs {
    /// Layout of the worker.
    pub parallelism: Parallelism,
    /// Dense linear-layer weight format.
    pub weight_dtype: Dtype,
    /// Expert weight format (MoE models).
    pub expert_dtype: Dtype,
    /// KV-cache format.
    pub kv_dtype: Dtype,
    /// The engine's memory fraction (`gpu_memory_utilization` and friends).
    pub memory_fraction: f64,
    /// What `memory_fraction` is a fraction of.
    pub fraction_of: FractionOf,
    /// Largest token count of one step (sizes activations).
    pub max_batched_tokens: u32,
    /// KV block size in tokens.
    pub block_size: u32,
    /// Memory held back for CUDA graphs.
    pub cuda_graph_reserved_bytes: u64,
}

/// Where each GPU's memory goes.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryPlan {
    /// HBM of one GPU.
    pub total_gpu_capacity_bytes: u64,
    /// Weights resident on one GPU.
    pub weights_bytes: u64,
    /// Peak activation memory.
    pub activations_bytes: u64,
    /// Runtime overhead.
    pub runtime_overhead_bytes: u64,
    /// Communication buffers (NCCL).
    pub comm_overhead_bytes: u64,
    /// CUDA-graph reserve.
    pub cuda_graph_reserved_bytes: u64,
    /// Bytes left for KV cache on one GPU.
    pub kv_cache_bytes: u64,
    /// KV bytes one token takes on one GPU.
    pub kv_bytes_per_token: u64,
    /// Tokens of KV one GPU (one attention-DP rank) holds.
    pub kv_tokens: u64,
    /// KV blocks per rank.
    pub kv_blocks: u64,
}

/// The configuration does not fit in GPU memory.
#[derive(Clone, Debug, PartialEq)]
pub struct DoesNotFit {
    /// The numbers that show why.
    pub message: String,
}

/// Activation coefficient by tensor-parallel degree for dense (Llama-family) models:
/// AIConfigurator's `_get_memory_usage` table LLAMA {1: 11, 2: 6.5, 4: 5, 8: 5} (AICDB §5.6).
fn activation_coeff(tp: u32) -> f64 {
    match tp {
        1 => 11.0,
        2 => 6.5,
        _ => 5.0,
    }
}

/// NCCL communicator buffers per GPU by TP degree: AIConfigurator's `nccl_mem` table,
/// identical in every 0.12 system YAML (AICDB §5.6): 342 MiB at TP2, 392 MiB from TP4.
#[must_use]
pub fn nccl_buffer_bytes(gpus_in_group: u32) -> u64 {
    match gpus_in_group {
        0 | 1 => 0,
        2 => 358_612_992,
        _ => 411_041_792,
    }
}

/// KV bytes per token on one GPU for the softmax-attention layers of this pipeline stage.
/// GQA stores K and V for the KV heads this GPU holds (replicated when TP exceeds their
/// count); MLA stores one compressed latent plus the shared rotary key per layer, the same on
/// every TP rank. Linear-attention layers keep a fixed-size state instead (not per token).
#[must_use]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)] // Small positive products.
pub fn kv_bytes_per_token(model: &ModelArch, p: Parallelism, kv_dtype: Dtype) -> u64 {
    let layers = u64::from(model.attention_layers().div_ceil(p.pipeline.max(1)));
    let elems = match &model.mla {
        Some(m) => layers * (m.kv_lora_rank + m.qk_rope_head_dim),
        None => {
            let heads_per_gpu = model.num_kv_heads.div_ceil(p.tensor.max(1)).max(1);
            2 * layers * u64::from(heads_per_gpu) * model.head_dim
        }
    };
    libm::ceil(elems as f64 * kv_dtype.bytes()) as u64
}

/// Recurrent state one sequence holds on one GPU for the linear-attention layers of this
/// pipeline stage (0 for models without them). Per layer, Gated DeltaNet keeps a
/// `key_head_dim x value_head_dim` matrix per value head (`ssm`) and the last
/// `conv_kernel - 1` inputs of its q/k/v convolution (`conv`); tensor parallelism splits the
/// heads, as vLLM's and SGLang's state shapes do.
#[must_use]
pub fn state_bytes_per_sequence(model: &ModelArch, p: Parallelism, ssm: StateDtype, conv: StateDtype) -> u64 {
    let Some(la) = &model.linear_attention else { return 0 };
    let tp = u64::from(p.tensor.max(1));
    let layers = u64::from(la.layers.min(model.num_layers).div_ceil(p.pipeline.max(1)));
    let value_heads = u64::from(la.value_heads).div_ceil(tp);
    let ssm_bytes = value_heads * la.key_head_dim * la.value_head_dim * ssm.bytes();
    let channels = (2 * u64::from(la.key_heads) * la.key_head_dim
        + u64::from(la.value_heads) * la.value_head_dim)
        .div_ceil(tp);
    let conv_bytes = la.conv_kernel.saturating_sub(1) * channels * conv.bytes();
    layers * (ssm_bytes + conv_bytes)
}

/// Weight bytes resident on one GPU: dense layers sharded by TP and PP (replicated across
/// attention-DP ranks), experts spread over the worker's GPUs of one stage (MoE TP × EP
/// repartition those GPUs), embeddings and LM head in bf16, vocabulary-parallel.
#[must_use]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
pub fn weight_bytes_per_gpu(model: &ModelArch, p: Parallelism, gemm: Dtype, experts: Dtype) -> u64 {
    let tp = f64::from(p.tensor.max(1));
    let pp = f64::from(p.pipeline.max(1));
    let expert_shards = f64::from((p.moe_tensor.max(1) * p.moe_expert.max(1)).max(1));
    let dense = model.dense_linear_params() as f64 * gemm.bytes() / (tp * pp);
    let exp = model.expert_params() as f64 * experts.bytes() / (expert_shards * pp);
    let emb = model.embedding_params() as f64 * Dtype::Bf16.bytes() / (tp * pp);
    libm::ceil(dense + exp + emb) as u64
}

/// Plans one GPU's memory.
///
/// # Errors
/// [`DoesNotFit`] when weights and fixed costs leave no room for even one KV block.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
pub fn plan(model: &ModelArch, hw: &Hardware, m: &MemoryInputs) -> Result<MemoryPlan, DoesNotFit> {
    let p = m.parallelism;
    let weights_bytes = weight_bytes_per_gpu(model, p, m.weight_dtype, m.expert_dtype);
    let activations_bytes = libm::round(
        2.0 * f64::from(m.max_batched_tokens)
            * f64::from(model.num_heads)
            * model.head_dim as f64
            * activation_coeff(p.tensor),
    ) as u64;
    let comm_overhead_bytes = nccl_buffer_bytes(p.tensor);
    let fixed = weights_bytes
        + activations_bytes
        + RUNTIME_OVERHEAD_BYTES
        + comm_overhead_bytes
        + m.cuda_graph_reserved_bytes;
    let hbm = hw.hbm_bytes as f64;
    let (usable, kv_cache) = match m.fraction_of {
        FractionOf::Total => (m.memory_fraction * hbm, m.memory_fraction * hbm - fixed as f64),
        FractionOf::WeightsAndKv => (m.memory_fraction * hbm, m.memory_fraction * hbm - weights_bytes as f64),
        FractionOf::Free => (hbm, m.memory_fraction * (hbm - fixed as f64)),
    };
    let kv_bytes_per_token = kv_bytes_per_token(model, p, m.kv_dtype);
    let kv_cache_bytes = if kv_cache > 0.0 { kv_cache as u64 } else { 0 };
    let kv_tokens = kv_cache_bytes / kv_bytes_per_token.max(1);
    let kv_blocks = kv_tokens / u64::from(m.block_size.max(1));
    if kv_blocks == 0 {
        let g = |b: u64| b as f64 / GIB as f64;
        let hbm_gib = hbm / GIB as f64;
        let costs = format!(
            "weights {:.2} GiB + activations {:.2} GiB + runtime {:.2} GiB + NCCL {:.2} GiB + CUDA graphs {:.2} GiB",
            g(weights_bytes),
            g(activations_bytes),
            g(RUNTIME_OVERHEAD_BYTES),
            g(comm_overhead_bytes),
            g(m.cuda_graph_reserved_bytes)
        );
        let (rule, costs) = match m.fraction_of {
            FractionOf::Total => (format!("{} x {hbm_gib:.1} GiB HBM", m.memory_fraction), costs),
            FractionOf::WeightsAndKv => (
                format!("{} x {hbm_gib:.1} GiB HBM for weights and KV alone", m.memory_fraction),
                format!("weights {:.2} GiB", g(weights_bytes)),
            ),
            FractionOf::Free => {
                (format!("all HBM; the KV cache gets {} of what is left", m.memory_fraction), costs)
            }
        };
        return Err(DoesNotFit {
            message: format!(
                "{} on {} x{} does not fit: usable {:.2} GiB ({rule}) but {costs} leave no room for one KV block \
                 of {} tokens ({} bytes/token)",
                model.id,
                hw.id,
                p.gpus(),
                usable / GIB as f64,
                m.block_size,
                kv_bytes_per_token
            ),
        });
    }
    Ok(MemoryPlan {
        total_gpu_capacity_bytes: hw.hbm_bytes,
        weights_bytes,
        activations_bytes,
        runtime_overhead_bytes: RUNTIME_OVERHEAD_BYTES,
        comm_overhead_bytes,
        cuda_graph_reserved_bytes: m.cuda_graph_reserved_bytes,
        kv_cache_bytes,
        kv_bytes_per_token,
        kv_tokens,
        kv_blocks,
    })
}
