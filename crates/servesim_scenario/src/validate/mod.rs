//! Fidelity against measured deployments: every row of a calibration file
//! (`servesim_data::silicon`) is replayed as closed-loop traffic and its predicted mean TTFT
//! and TPOT compared with what the real GPUs measured.
//!
//! Replay policy (SPEC §6, with the incumbent's end-to-end settings, REF §7): `concurrency`
//! requests in flight (closed loop), 10 requests per concurrency slot, prompt and output
//! lengths uniform in `[floor × nominal, nominal]` (the CLI's default floor 0.8 is what the
//! benchmark and AISimulate's dashboard use; floor 1 replays them exactly — fixed lengths in a
//! closed loop phase-lock into waves that no real deployment keeps), prefix caching off,
//! `max_batched_tokens` 8192 and `max_sequences` `max(256, concurrency per rank)` on the
//! role that runs decode (prefill workers keep the row's prefill batch size), unless the
//! row's benchmark published other engine options ([`recipe`]). The KV cache is
//! fp8 when the row runs in fp8 or fp4, else bf16; an MXFP4 checkpoint on a GPU without FP4
//! tensor cores keeps its own weight formats ([`interpret`]). A row of an engine release with
//! its own calibration replays with it ([`release_knobs`]). Everything else is the engine's
//! default.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use servesim_core::engine::Backend;
use servesim_data::silicon::{Layout, Mode, SiliconRow};

use servesim_perf::oplevel::{release_before, AllReduceImpl, EngineCalibration};
use servesim_perf::spec::MoeQuant;

use crate::catalog::Catalog;
use crate::scenario::{predict_with_catalog, Files};

/// Requests per concurrency slot (REF §7: "10 requests per concurrency slot").
pub const REQUESTS_PER_SLOT: u32 = 10;

/// Timing constants to replay with instead of the engines' calibrated ones.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Knobs {
    /// `timing.prefill_scale`.
    pub prefill_scale: Option<f64>,
    /// `timing.step_overhead_ms`.
    pub step_overhead_ms: Option<f64>,
    /// `timing.frontend_ms`.
    pub frontend_ms: Option<f64>,
    /// `timing.host_us_per_sequence`.
    pub host_us_per_sequence: Option<f64>,
    /// `timing.allreduce`.
    pub allreduce: Option<AllReduceImpl>,
    /// `frontend.request_ms` (aggregated rows).
    pub frontend_request_ms: Option<f64>,
    /// `frontend.chunk_us` (aggregated rows).
    pub frontend_chunk_us: Option<f64>,
    /// Sample lengths uniformly from this fraction of nominal up to nominal (REF §7 uses 0.8);
    /// `None`: fixed lengths.
    pub length_floor: Option<f64>,
    /// Requests each concurrency slot sends; `None`: [`REQUESTS_PER_SLOT`].
    pub requests_per_slot: Option<u32>,
    /// Read an MLA model's `tp N, attention_dp 1` layout as attention data parallelism over
    /// the N GPUs (`tp 1, attention_dp N`), the way SGLang and TensorRT-LLM serve DeepSeek-style
    /// models at high concurrency. One rule for every row; off by default (rows replay as
    /// written).
    pub mla_attention_dp: bool,
    /// Replay every row with the replay policy's engine options only, ignoring what its
    /// benchmark's published recipe sets ([`recipe`]).
    pub no_recipes: bool,
    /// Replay every row with MTP/EAGLE speculative decoding: `nextn` drafts a round,
    /// `nextn_accepted` accepted on average. The file does not record which runs speculated,
    /// so this is a what-if for a filtered set of rows, never a default.
    pub speculation: Option<(u32, f64)>,
}

impl Knobs {
    fn yaml(&self) -> String {
        let mut v = Vec::new();
        if let Some(x) = self.prefill_scale {
            v.push(format!("prefill_scale: {x}"));
        }
        if let Some(x) = self.step_overhead_ms {
            v.push(format!("step_overhead_ms: {x}"));
        }
        if let Some(x) = self.frontend_ms {
            v.push(format!("frontend_ms: {x}"));
        }
        if let Some(x) = self.host_us_per_sequence {
            v.push(format!("host_us_per_sequence: {x}"));
        }
        if let Some(a) = self.allreduce {
            v.push(format!("allreduce: {}", a.name()));
        }
        v.join(", ")
    }

    fn frontend_yaml(&self) -> String {
        let mut v = Vec::new();
        if let Some(x) = self.frontend_request_ms {
            v.push(format!("request_ms: {x}"));
        }
        if let Some(x) = self.frontend_chunk_us {
            v.push(format!("chunk_us: {x}"));
        }
        v.join(", ")
    }
}

/// What happened to one row.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Predicted mean TTFT and TPOT (ms), when the row could be predicted.
    pub predicted: Option<(f64, f64)>,
    /// Why not, otherwise.
    pub error: Option<String>,
    /// Prefill and decode workers chosen by [`size_pools`] for a disaggregated row that does
    /// not record them.
    pub sized: Option<(u32, u32)>,
}

/// Most busy a sized prefill pool is at the replay's request rate: the headroom capacity
/// planning leaves so prompts do not queue (an M/D/1 queue at 80% load waits twice the
/// service time; at 95% it waits ten times).
pub const SIZED_PREFILL_UTILIZATION: f64 = 0.8;

/// Most workers [`size_pools`] gives one pool.
pub const MAX_SIZED_WORKERS: u32 = 64;

fn quant_gemm(s: &str) -> Option<&'static str> {
    match s {
        "fp8" => Some("fp8"),
        "fp8_block" => Some("fp8_block"),
        "nvfp4" | "fp4" => Some("nvfp4"),
        // bf16, int4 weight-only (experts only) and unset keep the checkpoint's dense format.
        _ => None,
    }
}

fn quant_moe(s: &str) -> Option<&'static str> {
    match s {
        "fp8" => Some("fp8"),
        "fp8_block" => Some("fp8_block"),
        "nvfp4" | "fp4" => Some("nvfp4"),
        "int4_wo" | "int4" => Some("int4_wo"),
        "w4a16_mxfp4" | "mxfp4" => Some("w4a16_mxfp4"),
        _ => None,
    }
}

/// Whether the row's engine release scheduled synchronously by default: vLLM before 0.14,
/// which turned async scheduling on (vLLM PR #27614). Rows without a version, or with a
/// nightly tag, are taken as recent.
#[must_use]
pub fn schedules_synchronously(backend: &str, version: &str) -> bool {
    backend == "vllm" && release_before(version, (0, 14))
}

/// Engine releases NVIDIA Dynamo's runtime containers bundle, from Dynamo's support matrix
/// ("Backend Dependencies", docs.nvidia.com/dynamo): Dynamo release, then vLLM, SGLang and
/// TensorRT-LLM.
const DYNAMO_RUNTIMES: &[(&str, [&str; 3])] = &[
    ("0.9.0", ["0.14.1", "0.5.8", "1.3.0rc1"]),
    ("0.8.1.post3", ["0.12.0", "0.5.6.post2", "1.2.0rc6.post3"]),
    ("0.8.1.post2", ["0.12.0", "0.5.6.post2", "1.2.0rc6.post2"]),
    ("0.8.1.post1", ["0.12.0", "0.5.6.post2", "1.2.0rc6.post1"]),
    ("0.8.1", ["0.12.0", "0.5.6.post2", "1.2.0rc6.post1"]),
    ("0.8.0", ["0.12.0", "0.5.6.post2", "1.2.0rc6.post1"]),
    ("0.7.1", ["0.11.0", "0.5.4.post3", "1.2.0rc3"]),
    ("0.7.0.post1", ["0.11.0", "0.5.4.post3", "1.2.0rc3"]),
    ("0.7.0", ["0.11.0", "0.5.4.post3", "1.2.0rc2"]),
    ("0.6.1.post1", ["0.11.0", "0.5.3.post2", "1.1.0rc5"]),
    ("0.6.1", ["0.11.0", "0.5.3.post2", "1.1.0rc5"]),
    ("0.6.0", ["0.11.0", "0.5.3.post2", "1.1.0rc5"]),
];

/// The release of the engine a row ran. Rows served through NVIDIA Dynamo may record the
/// Dynamo runtime's version instead (InferenceX's Dynamo TensorRT-LLM rows: `0.8.1.post2`,
/// with `image=…/ai-dynamo/tensorrtllm-runtime:0.8.1.post2` or no image at all). A version
/// that is a Dynamo release [`DYNAMO_RUNTIMES`] lists (or a patch of one, which takes its
/// base release's), on a row whose Dynamo image carries that tag or on a TensorRT-LLM row
/// (TensorRT-LLM's own 0.x releases predate its PyTorch backend and these harnesses: 0.8.0
/// is read as Dynamo's), names the engine release that runtime bundles. Any other version is
/// the engine's own, as recorded.
#[must_use]
pub fn engine_release(row: &SiliconRow) -> String {
    let v = row.backend_version.trim();
    let image_tag = row
        .source
        .split(';')
        .filter_map(|f| f.trim().strip_prefix("image="))
        .find(|img| img.contains("ai-dynamo/"))
        .and_then(|img| img.rsplit_once(':'))
        .map(|(_, tag)| tag.trim());
    if !(image_tag == Some(v) || row.backend == "trtllm") {
        return v.to_string();
    }
    let column = match row.backend.as_str() {
        "vllm" => 0,
        "sglang" => 1,
        _ => 2,
    };
    let find = |tag: &str| DYNAMO_RUNTIMES.iter().find(|(d, _)| *d == tag).map(|(_, e)| e[column]);
    let base = v.split_once(".post").map_or(v, |(b, _)| b);
    find(v).or_else(|| find(base)).unwrap_or(v).to_string()
}

/// The knobs a row replays with: those given, and where they leave a constant unset, the
/// calibration of the engine release the row ran when it differs from the default release's
/// ([`EngineCalibration::for_release`]; TensorRT-LLM 1.0 has its own prefill scale, frontend
/// delay, step overhead and serving-process queue). Scenarios cannot name a release the data
/// holds no tables of, so the replay writes those constants out (`--show-scenarios` shows
/// them).
#[must_use]
pub fn release_knobs(row: &SiliconRow, knobs: &Knobs) -> Knobs {
    let own = EngineCalibration::for_release(&row.backend, &engine_release(row));
    let default = EngineCalibration::for_release(&row.backend, "");
    let mut k = *knobs;
    if own.prefill_scale != default.prefill_scale {
        k.prefill_scale = k.prefill_scale.or(Some(own.prefill_scale));
    }
    if own.frontend_s != default.frontend_s {
        k.frontend_ms = k.frontend_ms.or(Some(own.frontend_s * 1e3));
    }
    if own.step_overhead_s != default.step_overhead_s {
        k.step_overhead_ms = k.step_overhead_ms.or(Some(own.step_overhead_s * 1e3));
    }
    if own.frontend_request_s != default.frontend_request_s {
        k.frontend_request_ms = k.frontend_request_ms.or(Some(own.frontend_request_s * 1e3));
    }
    if own.frontend_chunk_s != default.frontend_chunk_s {
        k.frontend_chunk_us = k.frontend_chunk_us.or(Some(own.frontend_chunk_s * 1e6));
    }
    k
}

/// The engine release whose kernel tables time the row: the one it ran ([`engine_release`]),
/// where the data holds tables of that release for its GPU (AIConfigurator measured older
/// releases only in part, often just the all-reduce; the default release fills the rest),
/// else `None` (the default release throughout). Never chosen from the measurement.
#[must_use]
pub fn tables_version(row: &SiliconRow, files: &dyn Files) -> Option<String> {
    let v = engine_release(row);
    (!v.is_empty() && crate::perfdata::holds_version(files, &row.system, &row.backend, &v)).then_some(v)
}

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
}

/// The published recipe of a row's benchmark, where servesim knows it. InferenceX rows are
/// the dated ones (`source_file=YYYY-MM-DD.csv`) and its database dump (`db-dump/…`), whose
/// DeepSeek-V3 rows are its DeepSeek-R1 benchmarks (`dsr1_…` ids) too.
/// - Llama-3.1-70B with TensorRT-LLM (`benchmarks/70b_*_trt*.sh`): `trtllm-serve
///   --max_num_tokens 16384`, and for 1k/1k below TP8 also `batch_wait_timeout_iters: 20` and
///   `batch_wait_max_tokens_ratio: 0.9` ("will improve the performance" at 1k/1k, says the
///   script).
/// - DeepSeek-R1 with SGLang on B200 (`benchmarks/dsr1_fp8_b200.sh`, `dsr1_fp4_b200.sh`):
///   `--scheduler-recv-interval` 10, or 30 from 16 clients up ("relax to ~30 requests between
///   scheduler recv polls"). The fp8 script's TP4 layout (8k/1k only) keeps 10 and sets
///   `--mem-fraction-static 0.95`, `--max-running-requests 32` and `--chunked-prefill-size
///   8192`: the weights take 157 GiB of each GPU's 180, which the default 0.88 cannot hold.
///   Its TP8 limits (128 running requests) are left out: the 256-client rows measure 2.1 s
///   TTFTs that such a cap would make tens of seconds, so they ran under another revision.
///   The fp4 script's `--chunked-prefill-size 16384` and `--mem-fraction-static 0.85` are
///   what SGLang derives on B200 at TP8 anyway (16,384 and 0.853).
/// - DeepSeek-R1 with TensorRT-LLM on B200 and H200 (`dsr1_fp8_b200_trt.sh`,
///   `dsr1_fp4_b200_trt.sh`, `dsr1_fp8_h200_trt.sh`): `--max_num_tokens` = the clients plus
///   the prompt plus 64, rounded up to 64, at least 8,192; `free_gpu_memory_fraction` 0.8
///   (fp8 on B200: 0.7 from 256 clients at 1k/1k and 1k/8k, 0.75 at 8k/1k on TP4; H200: 0.75);
///   fp8 on B200 at 1k/1k from 64 to 255 clients waits for batches (40 iterations, 0.8).
///
/// AIConfigurator's own gap-analysis rows (`source_file=…/aic-auto-gap-analysis/…`) ran
/// the engine configurations AIConfigurator's generator writes ([`aic_generator_recipe`]).
#[must_use]
pub fn recipe(row: &SiliconRow) -> Recipe {
    let first = row.source.split(';').next().unwrap_or("").trim();
    let dated = first
        .strip_prefix("source_file=")
        .and_then(|f| f.strip_suffix(".csv"))
        .is_some_and(|d| d.len() == 10 && d.bytes().all(|b| b.is_ascii_digit() || b == b'-'));
    let inferencex = dated || first.starts_with("db-dump/");
    let tp = match row.mode {
        Mode::Agg { layout } => layout.tp,
        Mode::Disagg { .. } => return Recipe::default(),
    };
    if first.contains("/aic-auto-gap-analysis/") {
        return aic_generator_recipe(row);
    }
    if !inferencex {
        return Recipe::default();
    }
    let deepseek = matches!(row.model.as_str(), "deepseek-ai/DeepSeek-R1" | "deepseek-ai/DeepSeek-V3");
    match row.backend.as_str() {
        "trtllm" if row.model == "meta-llama/Llama-3.1-70B" => Recipe {
            max_batched_tokens: Some(16_384),
            batch_wait: (row.isl == 1024 && row.osl == 1024 && tp < 8).then_some((20, 0.9)),
            ..Recipe::default()
        },
        "sglang" if deepseek && row.system == "b200_sxm" => {
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
        "trtllm" if deepseek && matches!(row.system.as_str(), "b200_sxm" | "h200_sxm") => {
            trtllm_deepseek_recipe(row, tp)
        }
        _ => Recipe::default(),
    }
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

/// InferenceX's TensorRT-LLM DeepSeek-R1 scripts on B200 and H200 ([`recipe`]).
fn trtllm_deepseek_recipe(row: &SiliconRow, tp: u32) -> Recipe {
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
    Recipe {
        max_batched_tokens: Some(budget.max(8192)),
        batch_wait,
        memory_fraction: Some(fraction),
        ..Recipe::default()
    }
}

fn role_yaml(
    out: &mut String,
    name: &str,
    l: &Layout,
    replicas: u32,
    prefill: bool,
    row: &SiliconRow,
    knobs: &Knobs,
) {
    let concurrency = row.concurrency;
    let _ = writeln!(out, "    {name}:");
    let _ = writeln!(
        out,
        "      parallelism: {{replicas: {replicas}, tensor: {}, pipeline: {}, attention_data: {}, moe_tensor: {}, moe_expert: {}}}",
        l.tp, l.pp, l.dp, l.moe_tp, l.moe_ep
    );
    // REF §7: max_num_seqs = max(256, concurrency), per attention-DP rank of the role that
    // holds the running requests (decode, or the aggregated workers).
    let ranks = (replicas.max(1) * l.dp.max(1)).max(1);
    let recipe = if knobs.no_recipes { Recipe::default() } else { recipe(row) };
    let policy_seqs = l.batch.max(256).max(concurrency.div_ceil(ranks));
    let seqs = if prefill { l.batch.max(1) } else { recipe.max_sequences.unwrap_or(policy_seqs) };
    let sync = if schedules_synchronously(&row.backend, &engine_release(row)) {
        ", async_scheduling: false"
    } else {
        ""
    };
    let mut wait = recipe.batch_wait.map_or(String::new(), |(iters, ratio)| {
        format!(", batch_wait_timeout_iters: {iters}, batch_wait_max_tokens_ratio: {ratio}")
    });
    if let Some(n) = recipe.recv_interval {
        let _ = write!(wait, ", scheduler_recv_interval: {n}");
    }
    if let Some(n) = recipe.chunked_prefill_size {
        let _ = write!(wait, ", chunked_prefill_size: {n}");
    }
    if let Some(n) = recipe.max_prefill_tokens {
        let _ = write!(wait, ", max_prefill_tokens: {n}");
    }
    if let Some(on) = recipe.mixed_chunk {
        let _ = write!(wait, ", enable_mixed_chunk: {on}");
    }
    let _ = writeln!(
        out,
        "      scheduler: {{max_batched_tokens: {}, max_sequences: {seqs}{sync}{wait}}}",
        recipe.max_batched_tokens.unwrap_or(8192)
    );
    // The memory fraction follows the row's release even where the data has no tables of it
    // (then the scenario names no `backend_version` and would take the recent default).
    let release = engine_release(row);
    let backend = Backend::from_name(&row.backend).unwrap_or(Backend::TrtLlm);
    let fraction = recipe.memory_fraction.or_else(|| {
        (!release.is_empty())
            .then(|| crate::decode::engine::default_memory_fraction(backend, Some(&release)))
            .flatten()
    });
    let capacity =
        fraction.map_or(String::new(), |f| format!(", capacity: {{type: default, memory_fraction: {f}}}"));
    let _ = writeln!(out, "      kv_cache: {{prefix_caching: false{capacity}}}");
    let k = knobs.yaml();
    if !k.is_empty() {
        let _ = writeln!(out, "      timing: {{{k}}}");
    }
    let f = knobs.frontend_yaml();
    if !f.is_empty() && name == "aggregated" {
        let _ = writeln!(out, "      frontend: {{{f}}}");
    }
}

/// Dense models have no experts: the files repeat the TP degree in the MoE columns.
fn strip(l: Layout, dense: bool) -> Layout {
    if dense {
        Layout { moe_tp: 1, moe_ep: 1, ..l }
    } else {
        l
    }
}

/// The scenario a row is replayed as (a prediction.yaml).
#[must_use]
pub fn scenario_yaml(row: &SiliconRow, knobs: &Knobs, dense: bool, tables: Option<&str>) -> String {
    let knobs = &release_knobs(row, knobs);
    let mut y = String::new();
    let _ = writeln!(y, "# {} (line {})", row.id, row.line);
    let _ = writeln!(y, "engine:");
    let _ = writeln!(y, "  model: {}", row.model);
    let _ = writeln!(y, "  hardware: {}", row.system);
    let _ = writeln!(y, "  backend: {}", row.backend);
    if let Some(v) = tables {
        let _ = writeln!(y, "  backend_version: {v}");
    }
    let mut q = Vec::new();
    if let Some(g) = quant_gemm(&row.gemm_quant) {
        q.push(format!("gemm: {g}"));
    }
    if let Some(m) = quant_moe(&row.moe_quant) {
        q.push(format!("moe: {m}"));
    }
    let low = matches!(row.precision.as_str(), "fp8" | "fp4" | "int4");
    q.push(format!("kv_cache: {}", if low { "fp8" } else { "bf16" }));
    let _ = writeln!(y, "  quantization: {{{}}}", q.join(", "));
    if !knobs.no_recipes && recipe(row).chunked_prefill == Some(false) {
        let _ = writeln!(y, "  enable_chunked_prefill: false");
    }
    if let Some((nextn, accepted)) = knobs.speculation {
        let _ = writeln!(y, "  nextn: {nextn}");
        let _ = writeln!(y, "  nextn_accepted: {accepted}");
    }
    match row.mode {
        Mode::Agg { layout } => {
            let _ = writeln!(y, "  workers:");
            role_yaml(&mut y, "aggregated", &strip(layout, dense), 1, false, row, knobs);
        }
        Mode::Disagg { prefill, prefill_workers, decode, decode_workers } => {
            let _ = writeln!(y, "  mode: disaggregated");
            let _ = writeln!(y, "  workers:");
            role_yaml(
                &mut y,
                "prefill",
                &strip(prefill, dense),
                prefill_workers.unwrap_or(1),
                true,
                row,
                knobs,
            );
            let decode_workers = decode_workers.unwrap_or(1);
            role_yaml(&mut y, "decode", &strip(decode, dense), decode_workers, false, row, knobs);
        }
    }
    let len = |n: u32| {
        let floor = knobs.length_floor.unwrap_or(1.0).clamp(0.0, 1.0);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let lo = ((f64::from(n) * floor).ceil() as u32).max(1);
        if lo >= n {
            format!("{n}")
        } else {
            format!("{{dist: uniform, min: {lo}, max: {n}}}")
        }
    };
    let _ = writeln!(y, "traffic:");
    let _ = writeln!(
        y,
        "  source: {{type: synthetic, input_tokens: {}, output_tokens: {}}}",
        len(row.isl),
        len(row.osl.max(2))
    );
    let _ = writeln!(y, "  load: {{type: concurrency, concurrency: {}}}", row.concurrency);
    let per_slot = knobs.requests_per_slot.unwrap_or(REQUESTS_PER_SLOT).max(1);
    let _ = writeln!(y, "  stop: {{requests: {}}}", row.concurrency.saturating_mul(per_slot));
    y
}

/// The row as it will be replayed. An MXFP4 checkpoint (gpt-oss) run on a GPU without FP4
/// tensor cores (Hopper, Ampere) replays in the checkpoint's own formats whatever the row's
/// quantization label (`nvfp4`, `fp4`, `fp8`: the activations' format at most): the engines
/// load its experts as MXFP4 weights and run them with 16-bit activations (`w4a16_mxfp4`, the
/// format AIConfigurator measured gpt-oss's experts in on those GPUs; NVFP4 kernels do not
/// run there) and its attention in bf16, as the checkpoint stores it.
/// With [`Knobs::mla_attention_dp`], MLA layouts written as tensor parallelism become
/// attention data parallelism.
#[must_use]
pub fn interpret(row: &SiliconRow, catalog: &Catalog, knobs: &Knobs) -> SiliconRow {
    let model = catalog.model(&row.model);
    let mut out = row.clone();
    let mxfp4_checkpoint = model.is_some_and(|m| m.moe_quant == MoeQuant::W4a16Mxfp4);
    let no_fp4_cores = catalog.gpu(&row.system).is_some_and(|h| h.fp4_flops.is_none());
    if mxfp4_checkpoint && no_fp4_cores {
        out.gemm_quant = String::new();
        out.moe_quant = String::new();
    }
    let mla = model.is_some_and(|m| m.mla.is_some());
    if !(knobs.mla_attention_dp && mla) {
        return out;
    }
    let dp = |l: Layout| if l.dp <= 1 && l.tp > 1 { Layout { dp: l.tp, tp: 1, ..l } } else { l };
    out.mode = match row.mode {
        Mode::Agg { layout } => Mode::Agg { layout: dp(layout) },
        Mode::Disagg { prefill, prefill_workers, decode, decode_workers } => {
            Mode::Disagg { prefill: dp(prefill), prefill_workers, decode: dp(decode), decode_workers }
        }
    };
    out
}

/// Worker counts for a disaggregated row that leaves them blank (most InferenceX rows do),
/// chosen from servesim's own static estimate of the recorded layouts, never from the
/// measurement: the fewest decode workers whose KV cache holds the row's concurrency, then
/// the fewest prefill workers that keep up with the rate those decode workers sustain at no
/// more than [`SIZED_PREFILL_UTILIZATION`] (AIConfigurator's disaggregated sweep matches the
/// two pools' rates the same way). Counts the row records are kept. `None` for aggregated
/// rows and rows that record both counts.
///
/// # Errors
/// When the layouts cannot be estimated (a model that does not fit, an unknown id).
pub fn size_pools(
    row: &SiliconRow,
    catalog: &Catalog,
    files: &dyn Files,
    knobs: &Knobs,
) -> Result<Option<(u32, u32)>, String> {
    let Mode::Disagg { prefill, prefill_workers, decode, decode_workers } = row.mode else {
        return Ok(None);
    };
    if prefill_workers.is_some() && decode_workers.is_some() {
        return Ok(None);
    }
    let dense = catalog.model(&row.model).is_some_and(|m| m.moe.is_none());
    let probe = |p: u32, d: u32| -> Result<crate::estimate::Estimate, String> {
        let mut r = row.clone();
        r.mode = Mode::Disagg { prefill, prefill_workers: Some(p), decode, decode_workers: Some(d) };
        let yaml = scenario_yaml(&r, knobs, dense, tables_version(row, files).as_deref());
        let root = crate::scenario::parse_with_overrides(&yaml, &row.id, &[]).map_err(|e| e.to_string())?;
        let prepared =
            crate::scenario::prepare(&root, &row.id, catalog, None, files).map_err(|e| e.to_string())?;
        crate::estimate::estimate(&prepared).map_err(|e| e.to_string())
    };
    let detail = |e: &crate::estimate::Estimate, key: &str| {
        e.detail.iter().find(|(k, _)| *k == key).map_or(f64::NAN, |(_, v)| *v)
    };
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let workers =
        |x: f64| if x.is_finite() { x.ceil().clamp(1.0, f64::from(MAX_SIZED_WORKERS)) as u32 } else { 1 };
    let d = match decode_workers {
        Some(d) => d,
        None => {
            let one = probe(1, 1)?;
            let per_worker = detail(&one, "max_decode_batch_per_rank") * detail(&one, "decode_ranks");
            workers(f64::from(row.concurrency) / per_worker)
        }
    };
    let p = match prefill_workers {
        Some(p) => p,
        None => {
            // With the most prefill workers the decode pool alone sets the rate.
            let wide = probe(MAX_SIZED_WORKERS, d)?;
            let per_worker = detail(&wide, "prefill_capacity_rps") / f64::from(MAX_SIZED_WORKERS);
            workers(wide.request_rate_rps / (SIZED_PREFILL_UTILIZATION * per_worker))
        }
    };
    Ok(Some((p, d)))
}

/// The row as it is replayed: [`interpret`]ed, with [`size_pools`]' counts filled in.
///
/// # Errors
/// As [`size_pools`].
pub fn replayed_row(
    row: &SiliconRow,
    catalog: &Catalog,
    files: &dyn Files,
    knobs: &Knobs,
) -> Result<(SiliconRow, Option<(u32, u32)>), String> {
    let mut r = interpret(row, catalog, knobs);
    let sized = size_pools(&r, catalog, files, knobs)?;
    if let (Some((p, d)), Mode::Disagg { prefill, decode, .. }) = (sized, r.mode) {
        r.mode = Mode::Disagg { prefill, prefill_workers: Some(p), decode, decode_workers: Some(d) };
    }
    Ok((r, sized))
}

/// Replays one row.
#[must_use]
pub fn run_row(row: &SiliconRow, catalog: &Catalog, files: &dyn Files, knobs: &Knobs) -> Outcome {
    let dense = catalog.model(&row.model).is_some_and(|m| m.moe.is_none());
    let flat = |e: &str| e.lines().collect::<Vec<_>>().join(" ");
    let (r, sized) = match replayed_row(row, catalog, files, knobs) {
        Ok(x) => x,
        Err(e) => return Outcome { predicted: None, error: Some(flat(&e)), sized: None },
    };
    let yaml = scenario_yaml(&r, knobs, dense, tables_version(row, files).as_deref());
    match predict_with_catalog(&yaml, &row.id, catalog, files) {
        Ok(p) => Outcome { predicted: Some((p.summary.ttft.mean, p.summary.tpot.mean)), error: None, sized },
        Err(e) => Outcome { predicted: None, error: Some(flat(&e.to_string())), sized },
    }
}

/// Mean absolute percentage error over a group, with coverage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Group {
    /// Rows in the group.
    pub rows: usize,
    /// Rows predicted.
    pub predicted: usize,
    /// Sum of |TTFT error| fractions over predicted rows.
    ttft_abs: f64,
    /// Sum of |TPOT error| fractions.
    tpot_abs: f64,
    /// Sum of signed TTFT errors (bias).
    ttft_signed: f64,
    /// Sum of signed TPOT errors.
    tpot_signed: f64,
    /// Predicted / measured (TTFT, TPOT) of each predicted row.
    ratios: Vec<(f64, f64)>,
    /// Sums of |ratio / s − 1| (TTFT, TPOT), each row against the best constant scale `s` of
    /// its deployment family (model × system × engine × mode): what no per-family constant removes.
    scatter_abs: (f64, f64),
}

impl Group {
    fn add(&mut self, row: &SiliconRow, o: &Outcome) {
        self.rows += 1;
        if let Some((ttft, tpot)) = o.predicted {
            self.predicted += 1;
            let e1 = ttft / row.ttft_ms - 1.0;
            let e2 = tpot / row.tpot_ms - 1.0;
            self.ttft_abs += e1.abs();
            self.tpot_abs += e2.abs();
            self.ttft_signed += e1;
            self.tpot_signed += e2;
            self.ratios.push((ttft / row.ttft_ms, tpot / row.tpot_ms));
        }
    }

    /// Sums of |ratio / s − 1| over this group's own rows (TTFT, TPOT), each at the scale `s`
    /// that minimises it: with u = 1/s the sum is Σ rᵢ·|u − 1/rᵢ|, least at the median of
    /// the 1/rᵢ weighted by rᵢ.
    fn residual_sums(&self) -> (f64, f64) {
        let side = |pick: fn(&(f64, f64)) -> f64| {
            let mut v: Vec<(f64, f64)> = self.ratios.iter().map(pick).map(|r| (1.0 / r, r)).collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            let half = 0.5 * v.iter().map(|p| p.1).sum::<f64>();
            let mut acc = 0.0;
            let Some(u) = v.iter().find(|p| {
                acc += p.1;
                acc >= half
            }) else {
                return 0.0;
            };
            v.iter().map(|p| (p.1 * u.0 - 1.0).abs()).sum()
        };
        (side(|r| r.0), side(|r| r.1))
    }

    /// `sum` as a percentage mean over the predicted rows (NaN when none was predicted).
    #[allow(clippy::cast_precision_loss)] // Row counts are far below 2^52.
    fn per_predicted_row(&self, sum: f64) -> f64 {
        if self.predicted == 0 {
            return f64::NAN;
        }
        100.0 * sum / self.predicted as f64
    }

    /// TTFT scatter (%): the MAPE left after scaling each deployment family's predictions by
    /// the one constant that fits that family best, i.e. the error no per-family constant can
    /// remove (the rest is bias).
    #[must_use]
    pub fn ttft_scatter(&self) -> f64 {
        self.per_predicted_row(self.scatter_abs.0)
    }

    /// TPOT scatter (%), as [`Group::ttft_scatter`].
    #[must_use]
    pub fn tpot_scatter(&self) -> f64 {
        self.per_predicted_row(self.scatter_abs.1)
    }

    /// TTFT MAPE (%) over predicted rows.
    #[must_use]
    pub fn ttft_mape(&self) -> f64 {
        self.per_predicted_row(self.ttft_abs)
    }

    /// TPOT MAPE (%) over predicted rows.
    #[must_use]
    pub fn tpot_mape(&self) -> f64 {
        self.per_predicted_row(self.tpot_abs)
    }

    /// Mean signed TTFT error (%): positive means servesim predicts slower than measured.
    #[must_use]
    pub fn ttft_bias(&self) -> f64 {
        self.per_predicted_row(self.ttft_signed)
    }

    /// Mean signed TPOT error (%).
    #[must_use]
    pub fn tpot_bias(&self) -> f64 {
        self.per_predicted_row(self.tpot_signed)
    }

    /// Rows predicted / rows (%).
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn coverage(&self) -> f64 {
        if self.rows == 0 {
            return f64::NAN;
        }
        100.0 * self.predicted as f64 / self.rows as f64
    }
}

/// The row's class: dense or MoE, aggregated or disaggregated.
#[must_use]
pub fn class(row: &SiliconRow, catalog: &Catalog) -> &'static str {
    let moe = catalog.model(&row.model).is_some_and(|m| m.moe.is_some());
    match (moe, row.disaggregated()) {
        (false, false) => "dense aggregated",
        (true, false) => "MoE aggregated",
        (false, true) => "dense disaggregated",
        (true, true) => "MoE disaggregated",
    }
}

/// Groups by `model × system × engine × mode`, by class, and overall.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// By `(model, system, backend, mode)`.
    pub by_config: BTreeMap<(String, String, String, String), Group>,
    /// By class (dense/MoE × aggregated/disaggregated).
    pub by_class: BTreeMap<&'static str, Group>,
    /// Every row.
    pub overall: Group,
}

/// Summarises outcomes.
#[must_use]
pub fn summarize(rows: &[SiliconRow], outcomes: &[Outcome], catalog: &Catalog) -> Summary {
    let mut s = Summary::default();
    let mut class_of = BTreeMap::new();
    for (r, o) in rows.iter().zip(outcomes) {
        let mode = if r.disaggregated() { "disagg" } else { "agg" };
        let key = (r.model.clone(), r.system.clone(), r.backend.clone(), mode.to_string());
        let c = class(r, catalog);
        class_of.insert(key.clone(), c);
        s.by_config.entry(key).or_default().add(r, o);
        s.by_class.entry(c).or_default().add(r, o);
        s.overall.add(r, o);
    }
    // Scatter is measured within each family, then pooled into its class and the total.
    for (key, g) in &mut s.by_config {
        let (a, b) = g.residual_sums();
        g.scatter_abs = (a, b);
        let class = class_of.get(key).and_then(|c| s.by_class.get_mut(c));
        for pooled in class.into_iter().chain([&mut s.overall]) {
            pooled.scatter_abs.0 += a;
            pooled.scatter_abs.1 += b;
        }
    }
    s
}

/// The fidelity table as Markdown.
#[must_use]
pub fn table(s: &Summary) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| model | system | engine | mode | rows | coverage | TTFT MAPE | TPOT MAPE | TTFT bias | TPOT bias | TTFT scatter | TPOT scatter |"
    );
    let _ = writeln!(t, "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let line = |t: &mut String, label: &str, g: &Group| {
        let _ = writeln!(
            t,
            "| {label} | {} | {:.1}% | {:.1}% | {:.1}% | {:+.1}% | {:+.1}% | {:.1}% | {:.1}% |",
            g.rows,
            g.coverage(),
            g.ttft_mape(),
            g.tpot_mape(),
            g.ttft_bias(),
            g.tpot_bias(),
            g.ttft_scatter(),
            g.tpot_scatter()
        );
    };
    for ((m, sys, be, mode), g) in &s.by_config {
        line(&mut t, &format!("{m} | {sys} | {be} | {mode}"), g);
    }
    for (c, g) in &s.by_class {
        line(&mut t, &format!("**{c}** | | |"), g);
    }
    line(&mut t, "**all rows** | | |", &s.overall);
    t
}

/// A measured per-request log against a prediction of the same workload.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestComparison {
    /// Requests measured and predicted.
    pub counts: (usize, usize),
    /// `(metric, measured, predicted)` for mean, p50 and p90 of TTFT and TPOT (ms).
    pub rows: Vec<(String, f64, f64)>,
}

/// Percentile of sorted values by the reference nearest-rank rule.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = servesim_core::metrics::nearest_rank(sorted.len() as u64, p);
    usize::try_from(i).ok().and_then(|i| sorted.get(i)).copied().unwrap_or(f64::NAN)
}

fn stats(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    #[allow(clippy::cast_precision_loss)]
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    [mean, percentile(&v, 50.0), percentile(&v, 90.0)]
}

/// Compares TTFT and TPOT distributions (per request, the reference definitions) of a
/// measured log with a prediction's per-request records.
#[must_use]
pub fn compare_requests(
    measured: &[servesim_data::silicon::MeasuredRequest],
    predicted: &crate::Prediction,
) -> RequestComparison {
    let m_ttft = stats(measured.iter().map(|r| r.ttft_ms).collect());
    let m_tpot = stats(measured.iter().filter_map(|r| r.tpot_ms).collect());
    let done: Vec<&crate::report::RequestRecord> =
        predicted.requests.iter().filter(|r| r.ttft_ms.is_some()).collect();
    let p_ttft = stats(done.iter().filter_map(|r| r.ttft_ms).collect());
    #[allow(clippy::cast_precision_loss)]
    let p_tpot = stats(
        done.iter()
            .filter(|r| r.output_length > 1)
            .filter_map(|r| match (r.first_token_ms, r.last_token_ms) {
                (Some(a), Some(b)) => Some((b - a) / f64::from(r.output_length - 1)),
                _ => None,
            })
            .collect(),
    );
    let mut rows = Vec::new();
    for (name, m, p) in [("TTFT", m_ttft, p_ttft), ("TPOT", m_tpot, p_tpot)] {
        for (i, stat) in ["mean", "p50", "p90"].iter().enumerate() {
            rows.push((format!("{name} {stat} (ms)"), m[i], p[i]));
        }
    }
    RequestComparison { counts: (measured.len(), done.len()), rows }
}

/// The comparison as a text table with signed errors.
#[must_use]
pub fn requests_table(c: &RequestComparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "requests: {} measured, {} predicted", c.counts.0, c.counts.1);
    let _ = writeln!(out, "{:<18} {:>12} {:>12} {:>9}", "metric", "measured", "servesim", "error");
    for (name, m, p) in &c.rows {
        let _ = writeln!(out, "{name:<18} {m:>12.1} {p:>12.1} {:>+8.1}%", (p - m) / m * 100.0);
    }
    out
}

#[cfg(test)]
mod tests;
