//! What the op-level timer is told about a deployment ([`OpLevelSetup`]), its modelling
//! constants and the per-engine calibration ([`OpConstants`], [`EngineCalibration`]), and which
//! steps run as CUDA graphs ([`GraphPolicy`]).

use crate::memory::Parallelism;
use crate::spec::{Dtype, GemmQuant, Hardware, ModelArch, MoeQuant};

/// Global modelling constants of the op-level timer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpConstants {
    /// Fraction of HBM bandwidth element-wise kernels achieve: AIConfigurator's
    /// `mem_bw_empirical_scaling_factor` 0.8 (AICDB §3.1).
    pub memory_efficiency: f64,
    /// Fixed cost of one element-wise kernel: AIConfigurator's 3 µs (AICDB §3.1).
    pub kernel_latency_s: f64,
    /// Fraction of dense peak a GEMM or attention kernel reaches when no table covers it:
    /// h200 bf16 8192³ GEMM measured at 1.36377 ms = 0.815 of 989 TFLOP/s (AICDB §3.3).
    pub compute_efficiency: f64,
    /// Latency of one point-to-point or collective hop: AIConfigurator's `p2p_latency`
    /// 10 µs (AICDB §3.1).
    pub link_latency_s: f64,
    /// Engine overhead per forward step (scheduler, input preparation, sampling, launch),
    /// seconds; calibrated per engine on `shared/validation/calibration.csv`.
    pub step_overhead_s: f64,
    /// Multiplier on the prefill share of a step (its GEMM increment over the decode tokens
    /// and its context attention): what isolated kernel measurements miss in a real engine's
    /// prefill (eager launches, KV-cache writes, input preparation); calibrated per engine.
    pub prefill_scale: f64,
    /// Serving-frontend time from a request's arrival to its dispatch (HTTP, tokenisation),
    /// seconds; calibrated per engine.
    pub frontend_s: f64,
    /// A serving process's own work per request (parse, validate, tokenise), seconds: a queue
    /// (`servesim_core::frontend`), unlike the pure latency `frontend_s`.
    pub frontend_request_s: f64,
    /// A serving process's work per streamed chunk (detokenise, build and write the event),
    /// seconds.
    pub frontend_chunk_s: f64,
    /// A serving process's work per prompt token (tokenising the prompt), seconds; queued
    /// with the request's own work.
    pub frontend_prompt_token_s: f64,
    /// Host time per step that a step waits for when the engine schedules synchronously,
    /// seconds; 0 for an overlapping scheduler (see [`SYNC_HOST_S_PER_STEP`]).
    pub host_s_per_step: f64,
    /// Host time per scheduled sequence that a step waits for when the engine schedules
    /// synchronously (scheduling, input preparation, sampling and output processing run
    /// between GPU steps instead of under them), seconds. 0 when the engine overlaps host and
    /// GPU work (vLLM's async scheduling, on by default from 0.14; SGLang's and
    /// TensorRT-LLM's overlap schedulers); see [`SYNC_HOST_S_PER_SEQUENCE`].
    pub host_s_per_sequence: f64,
    /// When set, a weight-bound fp8 GEMM is never timed slower than its
    /// bf16 table time scaled to the quantized speed of light and divided by this relative
    /// efficiency: the engine's kernel reaches at least this fraction of the bf16 kernel's
    /// efficiency at that shape. Calibrated per engine (see [`TRTLLM`]); `None` keeps the
    /// quantized tables as measured.
    pub quantized_gemm_floor: Option<f64>,
    /// Which kernels run the tensor-parallel all-reduce.
    pub allreduce: AllReduceImpl,
    /// Which kernels run the routed experts.
    pub moe_kernel: MoeKernel,
}

/// The kernels that run a MoE layer's routed experts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MoeKernel {
    /// The engine's default path: the lane AIConfigurator collected most of (TensorRT-LLM's
    /// CUTLASS MoE for nvfp4, DeepGEMM for fp8 blocks on Blackwell).
    #[default]
    Default,
    /// TensorRT-LLM's TRTLLM-gen MoE (`moe_config.backend: TRTLLM`), timed from
    /// AIConfigurator's `moe_torch_flow_min_latency` lane, which it measured for nvfp4 on B200
    /// and GB200. Where the data has no such slice, the default lane's time stands in, counted
    /// as extrapolated (vLLM's and SGLang's Blackwell tables already measure FlashInfer's
    /// TRTLLM-gen experts as their default lane).
    MinLatency,
}

impl MoeKernel {
    /// Every kernel choice by its config name (`timing.moe_kernel`).
    pub const NAMES: [&'static str; 2] = ["default", "min_latency"];

    /// Appended to a MoE table's dtype key for the min-latency lane's slices
    /// (`nvfp4:min_latency`), which `servesim data import-aic` keeps beside the default lane.
    pub const MIN_LATENCY_SUFFIX: &'static str = ":min_latency";

    /// The config name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            MoeKernel::Default => "default",
            MoeKernel::MinLatency => "min_latency",
        }
    }

    /// The kernel choice of a config name, if it is one.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        [MoeKernel::Default, MoeKernel::MinLatency].into_iter().find(|k| k.name() == name)
    }
}

/// The implementation of a tensor-parallel all-reduce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllReduceImpl {
    /// The engine's own kernels (vLLM's and SGLang's custom all-reduce, TensorRT-LLM's
    /// one-shot/two-shot), timed from the engine's `custom_allreduce` table: what every engine
    /// runs by default inside one NVLink domain.
    #[default]
    Custom,
    /// NCCL's ring/tree all-reduce, timed from the `nccl` table: what an engine runs with its
    /// custom kernels disabled (vLLM and SGLang `--disable-custom-all-reduce`, TensorRT-LLM
    /// `allreduce_strategy: NCCL`) or when it cannot use them.
    Nccl,
}

impl AllReduceImpl {
    /// Every implementation by its config name (`timing.allreduce`).
    pub const NAMES: [&'static str; 2] = ["custom", "nccl"];

    /// The config name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            AllReduceImpl::Custom => "custom",
            AllReduceImpl::Nccl => "nccl",
        }
    }

    /// The implementation of a config name, if it is one.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        [AllReduceImpl::Custom, AllReduceImpl::Nccl].into_iter().find(|a| a.name() == name)
    }
}

impl OpConstants {
    /// These constants for an engine that schedules synchronously: each step waits for its
    /// host work ([`SYNC_HOST_S_PER_STEP`], [`SYNC_HOST_S_PER_SEQUENCE`]), which takes the
    /// place of the calibrated step overhead, the part of that work an asynchronous scheduler
    /// leaves exposed (both were fitted so: the overhead on asynchronous releases, the host
    /// time on vLLM 0.12 with no overhead).
    #[must_use]
    pub fn synchronous(self) -> Self {
        OpConstants {
            host_s_per_step: SYNC_HOST_S_PER_STEP,
            host_s_per_sequence: SYNC_HOST_S_PER_SEQUENCE,
            step_overhead_s: 0.0,
            ..self
        }
    }

    /// The same kernel efficiencies, latencies and calibration without the costs a step pays
    /// once outside its kernels (per-step overhead, host and serving-process time): for a
    /// second model's passes inside the same step (a speculative draft model).
    #[must_use]
    pub fn kernels_only(self) -> Self {
        let none = OpConstants::default();
        OpConstants {
            step_overhead_s: none.step_overhead_s,
            frontend_s: none.frontend_s,
            frontend_request_s: none.frontend_request_s,
            frontend_chunk_s: none.frontend_chunk_s,
            frontend_prompt_token_s: none.frontend_prompt_token_s,
            host_s_per_step: none.host_s_per_step,
            host_s_per_sequence: none.host_s_per_sequence,
            ..self
        }
    }

    /// The constants for an engine (`vllm`, `sglang`, `trtllm`): shared efficiencies and
    /// latencies, plus the engine's calibrated per-step overhead.
    #[must_use]
    pub fn for_backend(backend: &str) -> Self {
        let c = match backend {
            "vllm" => VLLM,
            "sglang" => SGLANG,
            _ => TRTLLM,
        };
        OpConstants {
            step_overhead_s: c.step_overhead_s,
            prefill_scale: c.prefill_scale,
            frontend_s: c.frontend_s,
            frontend_request_s: c.frontend_request_s,
            frontend_chunk_s: c.frontend_chunk_s,
            frontend_prompt_token_s: c.frontend_prompt_token_s,
            quantized_gemm_floor: c.quantized_gemm_floor,
            ..OpConstants::default()
        }
    }
}

/// Engine constants calibrated on `shared/validation/calibration.csv`
/// (`servesim validate --fit`, recorded in `docs/validation.md`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EngineCalibration {
    /// Per-step overhead (s).
    pub step_overhead_s: f64,
    /// Prefill-share multiplier.
    pub prefill_scale: f64,
    /// Frontend delay (s).
    pub frontend_s: f64,
    /// Serving-process work per request (s).
    pub frontend_request_s: f64,
    /// Serving-process work per streamed chunk (s).
    pub frontend_chunk_s: f64,
    /// Serving-process work per prompt token (s).
    pub frontend_prompt_token_s: f64,
    /// Quantized GEMMs' least efficiency relative to bf16 ([`OpConstants::quantized_gemm_floor`]).
    pub quantized_gemm_floor: Option<f64>,
}

/// vLLM 0.14 and later (asynchronous scheduling by default): the prefill scale and frontend
/// were fitted on all 143 dense aggregated vLLM rows, a grid over prefill scale {1, 1.25, 1.5,
/// 2}, step overhead {0, 1} ms and frontend {0, 30, 50, 80} ms (`docs/validation.md`).
///
/// Its steps carry 0.7 ms the kernels do not (twenty-third session). The 88 rows of recent
/// releases (InferenceX's Llama-3.1-70B sweeps on B200 and H100, fp8 and fp4, asynchronous
/// scheduling) sat below measured TPOT once the kernel tables were read as a monotone
/// envelope (bias −8.7% on B200, −11.7% on H100), the gap growing with the batch; a grid
/// over {0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1} ms took their TPOT MAPE from 11.3% to 8.7% at
/// 0.7 ms (flat to 0.9; B200 alone best at 0.6–0.7), TTFT 21.3% → 21.6%. Prefill scales
/// {1.05–1.2} and frontends of 40 ms moved their TTFT by under a point either way, so those
/// stay. The overhead is what an asynchronous scheduler leaves exposed; a synchronous one's
/// host time replaces it ([`OpConstants::synchronous`]), which is how the 46 rows of vLLM
/// 0.12 were fitted.
///
/// Its frontend is 30 ms and 6 µs a prompt token (thirty-fifth session), fitted once
/// asynchronous releases replayed their batch queue (`SchedulerConfig::plan_ahead`: a request
/// arriving during a step joins the step after next). The 527 aggregated rows of releases 0.14
/// and later (InferenceX: 88 dense, Llama-3.1-70B; 439 MoE) showed a fixed 50 ms to be too
/// long for short prompts at few clients (gpt-oss-120b on B200, 1,024 tokens, 4–8 clients:
/// 30–53 ms measured, 61–69 predicted) and too short for long ones (8,192 tokens: 82–142 ms,
/// 78–95 predicted). A grid over frontend {10, 20, 30, 40, 50, 80, 100, 120} ms × {0, 2, 4,
/// 6, 8} µs a prompt token took their TTFT MAPE from 21.3% (dense) / 28.4% (MoE) to 20.9% /
/// 20.8% at 30 ms and 6 µs (the batch queue alone, at 50 ms: 22.0% / 26.6%). The per-token
/// cost is the serving process's own work on the prompt (tokenising, hashing its blocks for the
/// prefix cache, serialising it to the engine core), queued in that process
/// (`servesim_core::frontend`). vLLM 0.12 keeps 50 ms ([`VLLM_0_12`]).
pub const VLLM: EngineCalibration = EngineCalibration {
    step_overhead_s: 0.7e-3,
    prefill_scale: 1.0,
    frontend_s: 0.030,
    frontend_request_s: 0.0,
    frontend_chunk_s: 0.0,
    frontend_prompt_token_s: 6.0e-6,
    quantized_gemm_floor: None,
};

/// vLLM before 0.14 (synchronous scheduling): AIConfigurator's harness rows of 0.12.0 (55
/// dense, 27 MoE on H100 and H200) keep the 50 ms frontend fitted before the per-token cost:
/// on the same grid their dense TTFT MAPE is best at 50 ms and no per-token cost (40.3%; 6
/// µs: 48.6%). Release and harness are confounded, as for TensorRT-LLM 1.0.
pub const VLLM_0_12: EngineCalibration =
    EngineCalibration { frontend_s: 0.050, frontend_prompt_token_s: 0.0, ..VLLM };

/// SGLang: prefill scale from its 23 dense aggregated rows, same grid.
///
/// Its frontend takes 200 ms on average (twenty-sixth session), fitted on all 617 of its
/// rows. At 8 clients or fewer its MoE rows' TTFT was 2.4× the prediction (median; 1.8–2.8×
/// for each of DeepSeek-R1, DeepSeek-V3, GLM-5, Qwen3.5-397B and Qwen3-235B on B200, B300
/// and H200), while the same harness's vLLM rows of Qwen3-235B-FP8 on H200 came out at 1.18×
/// and vLLM's MoE rows as a whole at 1.03×. With each request drawing its own delay
/// (`servesim_core::traffic::Traffic::with_frontend`), a grid over {30, 100, 150, 200, 250}
/// ms took the 389 MoE aggregated rows' TTFT MAPE from 61.0% to 47.5 / 40.9 / 38.7 / 39.4%,
/// the 205 disaggregated ones' from 60.8% to 44.9% at 200 ms, and the 23 dense rows' (none
/// below 20 clients) from 42.8% to 38.3 / 39.0 / 40.8 / 42.2%. Those dense rows had rejected
/// it (41% → 104%) only while a constant delay let their closed loops march in step.
///
/// Its steps carry 2 ms the kernels do not (twenty-third session), fitted on all 426 of its
/// aggregated rows (403 MoE, InferenceX's and AIConfigurator's DeepSeek-R1/V3, Qwen3.5, GLM-5
/// and Qwen3-235B on B200, B300 and H200; 23 dense): their TPOT sat below measured (MoE bias
/// −19.5%), by a median 2.9 ms at 8 clients or fewer and more with the batch. A grid over
/// {0, 1, 1.5, 2, 2.5, 3, 4} ms took MoE aggregated TPOT MAPE from 28.1% to 21.7% at 2 ms,
/// 20.8% at 2.5, 20.6% at 3 and 22.8% at 4; the dense rows' 21.0% to 20.2% (best 20.0% at
/// 1.5). SGLang's disaggregated decode pools, whose TPOT is already predicted 59% slow for
/// layouts the file does not record, come out slower with any overhead (68.2% → 79.3% at 2
/// ms, 82.9% at 2.5), so the low end of the flat 2–3 ms valley is taken. Prefill scales of 2
/// and 3 left the TPOT gap where it was (27.2%, 26.0% with no overhead): it is not prefill
/// time landing in decodes. As for vLLM, a synchronous scheduler's host time replaces it.
///
/// Its TokenizerManager is a queue of 40 µs a streamed chunk (twenty-seventh session;
/// `servesim_core::frontend`): one process receives, tokenises and streams every request's
/// results and hits "single-core bottlenecks under high-concurrency scenarios" (SGLang issue
/// #6553; `--tokenizer-worker-num`, SGLang PR #8964, defaults to one). The dense rows at
/// 352–512 clients measure 1.3–6.3 s TTFTs at 11–19 thousand streamed tokens/s, 0.4–0.8 s
/// predicted without it. A grid over {0, 15, 20, 25, 30, 35, 40, 45, 50} µs took the 23 dense
/// rows' TTFT MAPE from 40.8% to 30.9 / 35.0 / 34.1% at 35 / 40 / 45 µs (55.0% at 50), TPOT
/// 19.5% → 18.7 / 16.8 / 16.2%; a per-request cost of 1–4 ms on top changed nothing or made
/// it worse. Its MoE rows stream too few tokens a second to feel it (389 rows, 38.7% / 21.7%
/// at every point of the grid).
pub const SGLANG: EngineCalibration = EngineCalibration {
    step_overhead_s: 2.0e-3,
    prefill_scale: 1.5,
    frontend_s: 0.200,
    frontend_request_s: 0.0,
    frontend_chunk_s: 40.0e-6,
    frontend_prompt_token_s: 0.0,
    quantized_gemm_floor: None,
};
/// TensorRT-LLM 1.1 and later (the default release, 1.3.0rc20, among them): 122 dense
/// aggregated rows, 112 of them InferenceX's Llama-3.1-70B sweeps on B200 and H200 (run on
/// 1.1.0rc1 and later images, InferenceX `.github/workflows/70b-trt-tmpl.yml`). A grid over
/// prefill scale {1, 1.05, 1.1, 1.15} × frontend {10, 20, 30} ms put those 112 rows at 7.7–12%
/// TTFT MAPE for scale 1–1.1 with 20–30 ms (scale 1.25 and 50 ms, the 1.0 fit below: 28%,
/// bias +28%): the kernel tables, measured on 1.3.0rc20, time these releases' prefill as it
/// ran, so the scale stays 1 and the frontend is 30 ms (`docs/validation.md`, section 2).
///
/// Its fp8 GEMMs are floored at 0.8 of the bf16 kernel's efficiency (a grid over {none, 1.0,
/// 0.9, 0.8, 0.7}, for all engines or TensorRT-LLM only, fp8 and NVFP4 or fp8 only: dense
/// aggregated TPOT MAPE 16.6% → 13.8%). The fp8 tables carry about 10 µs per call at decode
/// shapes over the bf16 kernel's efficiency (h200, n = k = 8192: 30 µs for 64 MB of fp8
/// weights, 35.6 µs for 128 MB of bf16), which measured TensorRT-LLM decode steps do not show:
/// their excess over the tables' prediction was near constant across TP1–TP8 (Llama-3.1-70B
/// fp8 on H200, about 3 ms a step for 320 GEMMs). vLLM's rows got worse with the floor, so it
/// keeps its tables.
pub const TRTLLM: EngineCalibration = EngineCalibration {
    step_overhead_s: 0.0,
    prefill_scale: 1.0,
    frontend_s: 0.030,
    frontend_request_s: 0.0,
    frontend_chunk_s: 0.0,
    frontend_prompt_token_s: 0.0,
    quantized_gemm_floor: Some(0.8),
};

/// TensorRT-LLM 1.0: 193 dense aggregated rows, all 1.0.0rc3 on H100 (Qwen3-32B fp8 and
/// Llama-3.1-8B, from one harness), on a grid over prefill scale {1, 1.25, 1.5, 2} × frontend
/// {0, 30, 50, 80, 120} ms, refined to {1.15, 1.25, 1.4, 1.5, 1.6} × {30, 40, 50, 65, 80}:
/// prefill 1.25× what the 1.3.0rc20 tables say and 50 ms of frontend (1.4 / 40 ms gained 0.5
/// points of TTFT MAPE on these rows and lost 2.3 on the 56 Qwen3-235B-FP8 rows of 1.0).
/// Release and harness are confounded here: no other release was measured by that harness,
/// nor 1.0 by another.
///
/// Its steps carry 0.6 ms the kernels do not: once the kernel tables were read as a
/// monotone envelope (`tables::Grid::monotone_envelope`), these rows' TPOT sat 6.9% below
/// measured (bias), and a grid over {0, 0.2, 0.4, 0.6, 0.8, 1.0} ms took the 203 dense rows'
/// TPOT MAPE 12.5% → 10.0% at 0.6 ms and the 57 Qwen3-235B-FP8 rows' 10.5% → 9.1%, while the
/// 1.1-and-later InferenceX rows were best at 0 (6.2% → 7.7% at 0.6 ms).
///
/// Its single serving process is a queue of 6 ms a request and 70 µs a streamed chunk
/// (twenty-seventh session; `servesim_core::frontend`). trtllm-serve parses every request and
/// writes every streamed chunk on one event loop (TensorRT-LLM PR #16523, which added
/// `num_serve_frontends` because that loop, not the GPU, set first-token latency at high
/// concurrency). The Llama-3.1-8B rows at TP4–TP8 and 64–128 clients measure 0.4–2 s TTFTs
/// at a decode step the kernels predict, and top out near 18 requests/s at 512 output tokens
/// whatever the TP. A grid over {0, 50, 65, 70, 75, 85, 100} µs × {0, 3, 4, 6, 8, 10, 15} ms
/// took the 193 dense rows' TTFT MAPE from 30.6% to 26.5–27.5% over 65–75 µs × 4–8 ms (27.0%
/// here, the middle; 28.7% at 85 µs, 39.1% at 100 as the 8B rows saturate), TPOT 7.4% →
/// 7.6%, and the same harness's 56 Qwen3-235B-FP8 rows' from 46.4% to 41.1% (TPOT 9.0% →
/// 9.1%). Dynamo-served rows of later releases have a separate frontend and keep none.
///
/// Its frontend latency is 80 ms (twenty-eighth session): once the rows replayed the engine
/// options AIConfigurator's generator writes (`validate::recipe`: a budget of 512 + the
/// prompt + 1,500 tokens, no chunked context), a grid over {50, 65, 80, 100, 120} ms on that
/// harness's 252 H100 rows (249 of 1.0; 196 dense, 56 Qwen3-235B-FP8) took their TTFT MAPE
/// from 30.6% to 26.8% at 80 and 100 ms (TPOT 8.2% throughout); 80 is the dense rows' best
/// (27.4% → 25.9%), the Qwen3-235B-FP8 rows' 41.7% → 30.1% (alone they would take 120 ms:
/// 17.5%).
pub const TRTLLM_1_0: EngineCalibration = EngineCalibration {
    prefill_scale: 1.25,
    frontend_s: 0.080,
    step_overhead_s: 0.6e-3,
    frontend_request_s: 6.0e-3,
    frontend_chunk_s: 70.0e-6,
    frontend_prompt_token_s: 0.0,
    ..TRTLLM
};

impl EngineCalibration {
    /// The calibration of an engine release (`version` as the engine reports it, e.g.
    /// `1.0.0rc3`); a release that does not parse as `major.minor` is taken as recent.
    #[must_use]
    pub fn for_release(backend: &str, version: &str) -> Self {
        match backend {
            "vllm" if release_before(version, (0, 14)) => VLLM_0_12,
            "vllm" => VLLM,
            "sglang" => SGLANG,
            _ if release_before(version, (1, 1)) => TRTLLM_1_0,
            _ => TRTLLM,
        }
    }
}

/// Whether `version` (`major.minor[.patch...]`, any suffix) is older than `major.minor`.
#[must_use]
pub fn release_before(version: &str, (major, minor): (u32, u32)) -> bool {
    release_triple(version).is_some_and(|(a, b, _)| (a, b) < (major, minor))
}

/// `(major, minor, patch)` of a release such as `0.5.6.post2` or `1.0.0rc3` (each part's
/// leading digits; patch 0 when absent), or `None` when major or minor does not parse.
#[must_use]
pub fn release_triple(version: &str) -> Option<(u32, u32, u32)> {
    let mut parts = version.trim().split('.').map(|p| {
        let digits = p.bytes().take_while(u8::is_ascii_digit).count();
        p[..digits].parse::<u32>().ok()
    });
    Some((parts.next()??, parts.next()??, parts.next().flatten().unwrap_or(0)))
}

/// Host time of a step that an engine scheduling synchronously adds to every step in place of
/// the calibrated step overhead ([`OpConstants::synchronous`]), seconds
/// (with [`SYNC_HOST_S_PER_SEQUENCE`] per sequence in it). Fitted on the 46 dense aggregated
/// rows measured on vLLM 0.12 (Qwen3-32B on H100, TP2–TP8, 8–256 clients), the release before
/// async scheduling became vLLM's default (0.14, vLLM PR #27614): their measured TPOT sat
/// 4.3–4.7 ms above the kernels' sum at every TP, growing with the batch. A grid over
/// {0, 0.5, 1, 1.5} ms × {0, 20, 40, 50, 60, 70, 80} µs per sequence took their TPOT MAPE
/// from 16.1% (bias −16.1%) to 3.9–4.3% for (1.5 ms, 40 µs), (1 ms, 50 µs), (1.5 ms, 50 µs)
/// and (1 ms, 60 µs); 1 ms and 50 µs is the middle of that ridge (4.1%, bias −1.6%), and
/// near the 55–65 µs a sequence the rows' slope over concurrency shows. With the kernel
/// tables read as a monotone envelope the rows' TPOT fell to 4.7% (bias −4.7%); 60 µs a
/// sequence (a grid over {50, 55, 60, 65}) gives 3.9% (−3.0%). Only vLLM was
/// measured in this mode; SGLang and TensorRT-LLM with their overlap schedulers disabled use
/// the same figures for want of data.
pub const SYNC_HOST_S_PER_STEP: f64 = 1.0e-3;

/// Host time per scheduled sequence of a synchronously scheduling engine, seconds (see
/// [`SYNC_HOST_S_PER_STEP`]).
pub const SYNC_HOST_S_PER_SEQUENCE: f64 = 60.0e-6;

impl Default for OpConstants {
    fn default() -> Self {
        OpConstants {
            memory_efficiency: 0.8,
            kernel_latency_s: 3.0e-6,
            compute_efficiency: 0.815,
            link_latency_s: 10.0e-6,
            step_overhead_s: 0.0,
            prefill_scale: 1.0,
            frontend_s: 0.0,
            frontend_request_s: 0.0,
            frontend_chunk_s: 0.0,
            frontend_prompt_token_s: 0.0,
            host_s_per_step: 0.0,
            host_s_per_sequence: 0.0,
            quantized_gemm_floor: None,
            allreduce: AllReduceImpl::Custom,
            moe_kernel: MoeKernel::Default,
        }
    }
}

/// What the timer needs to know about the deployment.
#[derive(Clone, Debug)]
pub struct OpLevelSetup {
    /// The model.
    pub model: ModelArch,
    /// The GPU.
    pub hardware: Hardware,
    /// Layout of one worker.
    pub parallelism: Parallelism,
    /// Dense GEMM format.
    pub gemm: GemmQuant,
    /// Expert format.
    pub moe: MoeQuant,
    /// KV-cache format.
    pub kv: Dtype,
    /// Attention math format (`fmha`): TensorRT-LLM and SGLang run fp8 attention over an fp8
    /// KV cache, vLLM keeps bf16 (AIConfigurator's per-engine defaults, aiconfigurator-ref.json).
    pub attention_fp8: bool,
    /// Which steps run as CUDA graphs.
    pub graphs: GraphPolicy,
    /// Constants.
    pub constants: OpConstants,
    /// Draft layers a step also runs under speculative decoding (MTP and EAGLE: one
    /// decoder-sized layer per draft token; 0 otherwise).
    pub draft_layers: u32,
}

impl OpLevelSetup {
    /// What the draft layers add to a step's model time: AIConfigurator scales a step's
    /// operators by (layers + nextn) / layers for MTP (`sdk/engine.py`, `apply_nextn`).
    #[must_use]
    pub fn draft_scale(&self) -> f64 {
        let layers = self.model.num_layers.max(1);
        f64::from(layers + self.draft_layers) / f64::from(layers)
    }
}

/// Which forward steps an engine replays as CUDA graphs (launch-free kernels, graph-mode
/// collectives); the others launch eagerly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphPolicy {
    /// Largest step (tokens) captured.
    pub max_tokens: u32,
    /// Only decode-only steps are captured.
    pub decode_only: bool,
}

impl GraphPolicy {
    /// vLLM V1: piecewise graphs for steps of up to `min(2 × max_num_seqs, 512)` tokens,
    /// prefill included (vLLM's default `max_cudagraph_capture_size`).
    #[must_use]
    pub fn vllm(max_sequences: u32) -> Self {
        GraphPolicy { max_tokens: (2 * max_sequences).min(512), decode_only: false }
    }

    /// SGLang: decode batches only, up to `cuda_graph_max_bs` (its default follows the GPU:
    /// [`crate::memory::sglang_gpu_defaults`]).
    #[must_use]
    pub fn sglang(cuda_graph_max_bs: u32) -> Self {
        GraphPolicy { max_tokens: cuda_graph_max_bs, decode_only: true }
    }

    /// TensorRT-LLM (PyTorch backend): generation-only batches, up to its default CUDA-graph
    /// batch size of 128.
    #[must_use]
    pub fn trtllm() -> Self {
        GraphPolicy { max_tokens: 128, decode_only: true }
    }

    /// Whether a step with `tokens` new tokens, `prefill` or not, runs as a graph.
    #[must_use]
    pub fn captures(&self, tokens: u64, prefill: bool) -> bool {
        tokens <= u64::from(self.max_tokens) && !(prefill && self.decode_only)
    }
}
