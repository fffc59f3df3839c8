//! The engine options a row's published benchmark recipe set beyond the replay policy.

use servesim_data::silicon::{Mode, SiliconRow};
use servesim_perf::oplevel::MoeKernel;

/// Engine options a row's benchmark set beyond the replay policy, from the benchmark's
/// published recipe (never from the measurement).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Recipe {
    /// The token budget per step, when not the policy's 8,192.
    pub max_batched_tokens: Option<u32>,
    /// SGLang's `--chunked-prefill-size`, when the script sets one.
    pub chunked_prefill_size: Option<u32>,
    /// TensorRT-LLM batch waiting: (`batch_wait_timeout_iters`, `batch_wait_max_tokens_ratio`).
    pub batch_wait: Option<(u32, f64)>,
    /// SGLang's `scheduler_recv_interval`.
    pub recv_interval: Option<u32>,
    /// The running-request cap (`--max-running-requests`), when the script sets one.
    pub max_sequences: Option<u32>,
    /// The engine's memory fraction (`--mem-fraction-static`, `free_gpu_memory_fraction`),
    /// when the script sets one.
    pub memory_fraction: Option<f64>,
    /// TensorRT-LLM's `enable_chunked_prefill`, when the recipe sets it (servesim's default
    /// chunks, as AISimulate assumes).
    pub chunked_prefill: Option<bool>,
    /// SGLang's `--max-prefill-tokens`, when the script sets one.
    pub max_prefill_tokens: Option<u32>,
    /// SGLang's `--enable-mixed-chunk`, when the script sets it.
    pub mixed_chunk: Option<bool>,
    /// TensorRT-LLM's attention-DP balance, (`timeout_iters`, `batching_wait_iters`), when
    /// the script enables it for a layout with attention data parallelism.
    pub adp_balance: Option<(u32, u32)>,
    /// The KV cache in the model's 16-bit type where the replay policy would take fp8 (an
    /// fp8 row whose script leaves the engine's `--kv-cache-dtype auto`).
    pub kv_cache_bf16: bool,
    /// The MoE kernels, when the script picks TensorRT-LLM's TRTLLM-gen backend
    /// (`moe_config: {backend: TRTLLM}`).
    pub moe_kernel: Option<MoeKernel>,
    /// MTP draft tokens a decode step proposes, when the row ran the benchmark's speculative
    /// configuration (`speculative_config: {decoding_type: MTP, num_nextn_predict_layers}`).
    pub drafts: Option<u32>,
}

/// The published recipe of a row's benchmark, where servesim knows it. InferenceX rows are
/// the dated ones (`source_file=YYYY-MM-DD.csv`) and its database dump (`db-dump/…`), whose
/// DeepSeek-V3 rows are its DeepSeek-R1 benchmarks (`dsr1_…` ids) too.
/// - Llama-3.1-70B with TensorRT-LLM (`benchmarks/70b_*_trt*.sh`): `trtllm-serve
///   --max_num_tokens 16384`, and for 1k/1k below TP8 also `batch_wait_timeout_iters: 20` and
///   `batch_wait_max_tokens_ratio: 0.9` ("will improve the performance" at 1k/1k, says the
///   script).
/// - Llama-3.1-70B with vLLM (`benchmarks/70b_fp8_h100_slurm.sh`, `70b_b200_slurm.sh`):
///   `--gpu-memory-utilization 0.9` where recent vLLM defaults to 0.92 (the rows record no
///   release). Their other options are the replay policy's or cannot bind in a closed loop:
///   `--max-num-batched-tokens 8192`, no prefix caching, asynchronous scheduling,
///   `--max-num-seqs` the clients.
/// - DeepSeek-R1 with SGLang on B200 (`benchmarks/dsr1_fp8_b200.sh`, `dsr1_fp4_b200.sh`) and
///   B300 (`dsr1_fp8_b300.sh`, `dsr1_fp4_b300.sh`, which "reuse the existing DSR1 B200 SGLang
///   recipe as-is"):
///   `--scheduler-recv-interval` 10, or 30 from 16 clients up ("relax to ~30 requests between
///   scheduler recv polls"). The fp8 script's TP4 layout (8k/1k only) keeps 10 and sets
///   `--mem-fraction-static 0.95`, `--max-running-requests 32` and `--chunked-prefill-size
///   8192`: the weights take 157 GiB of each GPU's 180, which the default 0.88 cannot hold.
///   Its TP8 limits (128 running requests) are left out: the 256-client rows measure 2.1 s
///   TTFTs that such a cap would make tens of seconds, so they ran under another revision.
///   The fp4 script's `--chunked-prefill-size 16384` and `--mem-fraction-static 0.85` are
///   what SGLang derives on B200 at TP8 anyway (16,384 and 0.853).
/// - Qwen3.5-397B-A17B with SGLang on B200 and B300 (`qwen3.5_bf16_b200.sh`,
///   `qwen3.5_fp8_b200.sh`, `qwen3.5_bf16_b300.sh`, `qwen3.5_fp4_b300.sh` as of the rows'
///   images, SGLang 0.5.9 to 0.5.10): `--scheduler-recv-interval` 10, or 30 from 16 clients
///   up; `--chunked-prefill-size` and `--max-prefill-tokens` 32,768; `--mem-fraction-static`
///   0.82 (fp4: 0.8). Their
///   `--max-running-requests 128` is left out as for DeepSeek-R1: the 256-client rows measure
///   2.2–2.5 s TTFTs where such a cap would queue half the clients for a whole request. The
///   fp8 script's first revision ran NEXTN speculation and its later ones (SGLang 0.5.14) a
///   fixed interval of 10; the rows' images are those of the revisions above.
/// - DeepSeek-R1 with SGLang on H200 (`dsr1_fp8_h200.sh`): no `--kv-cache-dtype`, so the
///   KV cache stays in the model's bf16 (the B200 scripts pass `fp8_e4m3`);
///   `--chunked-prefill-size` and `--max-prefill-tokens` 32,768, `--mem-fraction-static`
///   0.82, `--max-running-requests` 512 at 1k/1k and 256 otherwise. The disaggregated
///   Dynamo SGLang recipes on H100 and H200 keep the bf16 KV cache too
///   (`disaggregated_recipe`).
/// - DeepSeek-R1 with TensorRT-LLM on B200 and H200 (`dsr1_fp8_b200_trt.sh`,
///   `dsr1_fp4_b200_trt.sh`, `dsr1_fp8_h200_trt.sh`): `--max_num_tokens` = the clients plus
///   the prompt plus 64, rounded up to 64, at least 8,192; `free_gpu_memory_fraction` 0.8
///   (fp8 on B200: 0.7 from 256 clients at 1k/1k and 1k/8k, 0.75 at 8k/1k on TP4; H200: 0.75);
///   fp8 on B200 at 1k/1k from 64 to 255 clients waits for batches (40 iterations, 0.8),
///   which TensorRT-LLM skips under attention data parallelism; with attention DP, the
///   scripts balance its ranks (`attention_dp_config: {enable_balance: true, timeout_iters:
///   60, batching_wait_iters: 0}`). Their `moe_config.backend` is TRTLLM (the TRTLLM-gen
///   kernels, [`MoeKernel::MinLatency`]) below 256 clients at 1k/1k and 1k/8k and, for fp4, up
///   to 32 clients at 8k/1k; above, fp4 runs CUTLASS and fp8 DeepGEMM (the tables' default
///   lanes). The H200 script leaves the backend at its default.
///   A B200 row run on an image only InferenceX's MTP configurations used
///   ([`ran_mtp_configuration`]) replays `dsr1_fp8_b200_trt_mtp.sh` / `dsr1_fp4_b200_trt_mtp.sh`
///   instead: three MTP drafts a round (one under attention DP), `--max_num_tokens` = the
///   batch times one more than the drafts, plus the prompt and 64, rounded up to 64, the
///   batch being the clients (a rank's share under attention DP); `free_gpu_memory_fraction`
///   0.8; fp8 runs DeepGEMM experts, fp4 TRTLLM-gen (CUTLASS under attention DP); no batch
///   waiting.
/// - gpt-oss-120b with TensorRT-LLM on B200 (`gptoss_fp4_b200_trt.sh`): `--max_num_tokens
///   20000`, `--max_batch_size 512`, and with attention DP `attention_dp_config:
///   {enable_balance: true}` (TensorRT-LLM's defaults, 50 and 10 iterations).
///
/// AIConfigurator's own gap-analysis rows (`source_file=…/aic-auto-gap-analysis/…`) ran
/// the engine configurations AIConfigurator's generator writes (`aic_generator_recipe`).
#[must_use]
pub fn recipe(row: &SiliconRow) -> Recipe {
    let inferencex = from_inferencex(row);
    let (tp, dp) = match row.mode {
        Mode::Agg { layout } => (layout.tp, layout.dp),
        Mode::Disagg { .. } => return disaggregated_recipe(row, inferencex),
    };
    let attention_dp = dp > 1;
    if from_aiconfigurator_harness(row) {
        return aic_generator_recipe(row);
    }
    if !inferencex {
        return Recipe::default();
    }
    let deepseek = matches!(row.model.as_str(), "deepseek-ai/DeepSeek-R1" | "deepseek-ai/DeepSeek-V3");
    match row.backend.as_str() {
        "vllm" if row.model == "meta-llama/Llama-3.1-70B" => {
            Recipe { memory_fraction: Some(0.9), ..Recipe::default() }
        }
        "trtllm" if row.model == "meta-llama/Llama-3.1-70B" => Recipe {
            max_batched_tokens: Some(16_384),
            batch_wait: (row.isl == 1024 && row.osl == 1024 && tp < 8).then_some((20, 0.9)),
            ..Recipe::default()
        },
        "sglang" if deepseek && matches!(row.system.as_str(), "b200_sxm" | "b300_sxm") => {
            let fp8_tp4 = row.precision == "fp8" && tp == 4;
            let relaxed = row.concurrency >= 16 && !fp8_tp4;
            let interval = Recipe { recv_interval: Some(if relaxed { 30 } else { 10 }), ..Recipe::default() };
            if fp8_tp4 {
                Recipe {
                    chunked_prefill_size: Some(8192),
                    max_sequences: Some(32),
                    memory_fraction: Some(0.95),
                    ..interval
                }
            } else {
                interval
            }
        }
        "sglang"
            if row.model == "Qwen/Qwen3.5-397B-A17B"
                && matches!(row.system.as_str(), "b200_sxm" | "b300_sxm") =>
        {
            Recipe {
                recv_interval: Some(if row.concurrency >= 16 { 30 } else { 10 }),
                chunked_prefill_size: Some(32_768),
                max_prefill_tokens: Some(32_768),
                memory_fraction: Some(if row.precision == "fp4" { 0.8 } else { 0.82 }),
                ..Recipe::default()
            }
        }
        "sglang" if deepseek && row.system == "h200_sxm" => Recipe {
            chunked_prefill_size: Some(32_768),
            max_prefill_tokens: Some(32_768),
            memory_fraction: Some(0.82),
            max_sequences: Some(if row.isl == 1024 && row.osl == 1024 { 512 } else { 256 }),
            kv_cache_bf16: true,
            ..Recipe::default()
        },
        "trtllm" if deepseek && matches!(row.system.as_str(), "b200_sxm" | "h200_sxm") => {
            trtllm_deepseek_recipe(row, tp, dp)
        }
        "trtllm" if row.model == "openai/gpt-oss-120b" && row.system == "b200_sxm" => Recipe {
            max_batched_tokens: Some(20_000),
            max_sequences: Some(512),
            adp_balance: attention_dp.then(|| {
                let d = servesim_core::engine::AdpBalance::default();
                (d.timeout_iters, d.batching_wait_iters)
            }),
            ..Recipe::default()
        },
        _ => Recipe::default(),
    }
}

/// Container images that, on a GPU, only InferenceX's speculative (`…-trt-mtp`) aggregated
/// TensorRT-LLM configurations ran, per its `perf-changelog.yaml`: on B200 the plain
/// DeepSeek-R1 configurations moved to `release:1.2.0rc6.post2` (pull requests 594 and 620)
/// and the MTP ones to the next TensorRT-LLM 1.2 release, `release:1.2.0rc6.post3` (632 and
/// 642). Earlier images (`1.1.0rc2.post2`) ran both kinds, so their rows stay plain.
const MTP_ONLY_IMAGES: &[(&str, &str)] = &[("b200_sxm", "tensorrt-llm/release:1.2.0rc6.post3")];

/// Whether an InferenceX TensorRT-LLM row ran a speculative (MTP) configuration, as its
/// container image says (`MTP_ONLY_IMAGES`); the file records no speculation.
#[must_use]
pub fn ran_mtp_configuration(row: &SiliconRow) -> bool {
    row.backend == "trtllm"
        && from_inferencex(row)
        && images(row).any(|img| {
            MTP_ONLY_IMAGES.iter().any(|(system, tag)| row.system == *system && img.ends_with(tag))
        })
}

/// The container images a row's source names (`image=…` fields).
pub(super) fn images(row: &SiliconRow) -> impl Iterator<Item = &str> {
    row.source.split(';').filter_map(|f| f.trim().strip_prefix("image=")).map(str::trim)
}

/// Whether a row comes from AIConfigurator's own gap-analysis runs
/// (`source_file=…/aic-auto-gap-analysis/…`), which deployed what its generator writes.
#[must_use]
pub fn from_aiconfigurator_harness(row: &SiliconRow) -> bool {
    row.source.split(';').next().unwrap_or("").trim().contains("/aic-auto-gap-analysis/")
}

/// Where a row was measured: `"inferencex"` ([`from_inferencex`]), `"aiconfigurator"`
/// ([`from_aiconfigurator_harness`]) or `"other"`.
#[must_use]
pub fn measured_by(row: &SiliconRow) -> &'static str {
    if from_inferencex(row) {
        "inferencex"
    } else if from_aiconfigurator_harness(row) {
        "aiconfigurator"
    } else {
        "other"
    }
}

/// Whether a row comes from InferenceX: its dated exports (`source_file=YYYY-MM-DD.csv`) or
/// its database dump (`db-dump/…`).
#[must_use]
pub fn from_inferencex(row: &SiliconRow) -> bool {
    let first = row.source.split(';').next().unwrap_or("").trim();
    let dated = first
        .strip_prefix("source_file=")
        .and_then(|f| f.strip_suffix(".csv"))
        .is_some_and(|d| d.len() == 10 && d.bytes().all(|b| b.is_ascii_digit() || b == b'-'));
    dated || first.starts_with("db-dump/")
}

/// What InferenceX's disaggregated recipes (srt-slurm's, as its configuration names them)
/// set that the replay policy would otherwise get wrong: the Dynamo SGLang DeepSeek-R1
/// recipes for H100 and H200 (`recipes/h100/…/h100-fp8-1p1d-max-tp.yaml`,
/// `recipes/h200/8k1k/bs128-1p1d-dep.yaml` and the others of those directories) pass no
/// `--kv-cache-dtype`, so SGLang keeps the model's bf16 KV, as its aggregated H200 script
/// does; the Blackwell recipes pass `fp8_e4m3`.
fn disaggregated_recipe(row: &SiliconRow, inferencex: bool) -> Recipe {
    let deepseek = matches!(row.model.as_str(), "deepseek-ai/DeepSeek-R1" | "deepseek-ai/DeepSeek-V3");
    let hopper = matches!(row.system.as_str(), "h100_sxm" | "h200_sxm");
    Recipe { kv_cache_bf16: inferencex && deepseek && hopper && row.backend == "sglang", ..Recipe::default() }
}

/// The running-request cap AIConfigurator's generator writes for aggregated TensorRT-LLM
/// workers below 512 (`rule_plugin/trtllm.rule`: `agg_decode max_batch_size = (512 if
/// max_batch_size < 512 else max_batch_size * 2)`).
pub const AIC_AGG_MIN_BATCH: u32 = 512;

/// Prompt headroom in the token budgets AIConfigurator's generator writes
/// (`rule_plugin/trtllm.rule`: `agg max_num_tokens = max_batch_size + isl + 1500`, rounded up
/// to [`AIC_TOKENS_PER_BLOCK`]; `rule_plugin/sglang.rule`: `max_prefill_tokens = isl + 1500`).
pub const AIC_BUDGET_HEADROOM_TOKENS: u32 = 1500;

/// The KV block the generator sizes TensorRT-LLM's budget in (`tokens_per_block` 32 unless
/// set, so that `max_num_tokens` divides into blocks, `rule_plugin/trtllm.rule`).
pub const AIC_TOKENS_PER_BLOCK: u32 = 32;

/// The TensorRT-LLM engine options AIConfigurator's generator writes for an aggregated
/// worker, which its evaluation pipeline (`aiconfigurator eval`) deploys behind NVIDIA
/// Dynamo ([`recipe`]). The rules run in order, so the token budget adds the raised cap, not
/// the configuration's batch size; `enable_chunked_prefill` stays at the template's `false`
/// (`extra_engine_args.1.0.0rc3.yaml.j2` and later). Its vLLM template passes neither option.
/// Its SGLang rule sets `--max-running-requests` to the batch size, `--max-prefill-tokens` to
/// the prompt plus [`AIC_BUDGET_HEADROOM_TOKENS`] and `--enable-mixed-chunk` (prefill batches
/// carry the running decodes); the chunk stays SGLang's default for the GPU.
fn aic_generator_recipe(row: &SiliconRow) -> Recipe {
    let Mode::Agg { layout } = row.mode else { return Recipe::default() };
    // The configuration's batch size (the file's `batch_size`), else the clients.
    let batch = if layout.batch > 0 { layout.batch } else { row.concurrency };
    match row.backend.as_str() {
        "trtllm" => {}
        "sglang" => {
            return Recipe {
                max_sequences: Some(batch),
                max_prefill_tokens: Some(row.isl + AIC_BUDGET_HEADROOM_TOKENS),
                mixed_chunk: Some(true),
                ..Recipe::default()
            }
        }
        _ => return Recipe::default(),
    }
    let cap = if batch < AIC_AGG_MIN_BATCH { AIC_AGG_MIN_BATCH } else { 2 * batch };
    let budget =
        (cap + row.isl + AIC_BUDGET_HEADROOM_TOKENS).div_ceil(AIC_TOKENS_PER_BLOCK) * AIC_TOKENS_PER_BLOCK;
    Recipe {
        max_batched_tokens: Some(budget),
        max_sequences: Some(cap),
        chunked_prefill: Some(false),
        ..Recipe::default()
    }
}

/// InferenceX's TensorRT-LLM DeepSeek-R1 scripts on B200 and H200 ([`recipe`]), for an
/// aggregated worker of `tp` × `dp` GPUs (`dp` > 1: attention data parallelism).
fn trtllm_deepseek_recipe(row: &SiliconRow, tp: u32, dp: u32) -> Recipe {
    let attention_dp = dp > 1;
    if ran_mtp_configuration(row) {
        let drafts: u32 = if attention_dp { 1 } else { 3 };
        // The script's TP is every GPU of the worker; under attention DP each is a rank.
        let batch = if attention_dp { row.concurrency / (tp.max(1) * dp) } else { row.concurrency };
        let budget = ((drafts + 1) * batch + row.isl + 64).div_ceil(64) * 64;
        let trtllm_gen = row.precision == "fp4" && !attention_dp;
        return Recipe {
            max_batched_tokens: Some(budget),
            memory_fraction: Some(0.8),
            adp_balance: attention_dp.then_some((60, 0)),
            moe_kernel: trtllm_gen.then_some(MoeKernel::MinLatency),
            drafts: Some(drafts),
            ..Recipe::default()
        };
    }
    let many = row.concurrency >= 256;
    let (fraction, batch_wait) = match (row.system.as_str(), row.precision.as_str()) {
        ("h200_sxm", _) => (0.75, None),
        (_, "fp8") => match (row.isl, row.osl) {
            (1024, 1024 | 8192) if many => (0.7, None),
            (1024, 1024) if row.concurrency >= 64 => (0.8, Some((40, 0.8))),
            (8192, 1024) if tp == 4 => (0.75, None),
            _ => (0.8, None),
        },
        _ => (0.8, None),
    };
    let budget = (row.concurrency + row.isl + 64).div_ceil(64) * 64;
    let trtllm_gen = row.system == "b200_sxm"
        && match (row.isl, row.osl) {
            (1024, 1024 | 8192) => !many,
            // Only the fp4 script switches at 8k/1k (fp8 keeps TRTLLM there).
            (8192, 1024) => row.precision != "fp4" || row.concurrency <= 32,
            _ => true,
        };
    Recipe {
        max_batched_tokens: Some(budget.max(8192)),
        batch_wait: batch_wait.filter(|_| !attention_dp),
        memory_fraction: Some(fraction),
        adp_balance: attention_dp.then_some((60, 0)),
        moe_kernel: trtllm_gen.then_some(MoeKernel::MinLatency),
        ..Recipe::default()
    }
}
