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

use std::fmt::Write as _;

use servesim_core::engine::Backend;
use servesim_data::silicon::{Layout, Mode};

use servesim_perf::oplevel::{release_before, EngineCalibration, MoeKernel};
use servesim_perf::spec::MoeQuant;

use crate::catalog::Catalog;
use crate::scenario::{parse_with_overrides, prepare, Files, Prepared};

pub mod calibrate;
mod deployments;
mod knobs;
mod recipe;
mod report;
mod summary;

pub use knobs::{accepted_drafts, KnobOption, Knobs, OptionKind, MTP_DRAFT_ACCEPTANCE, OPTIONS};
pub use recipe::{
    from_aiconfigurator_harness, from_inferencex, measured_by, ran_mtp_configuration, recipe, Recipe,
    AIC_AGG_MIN_BATCH, AIC_BUDGET_HEADROOM_TOKENS, AIC_TOKENS_PER_BLOCK,
};
pub use report::{not_predicted, notes, rows_csv, shell_quoted, to_json, to_markdown, ReportHead};
/// The calibration file's reader, for callers without their own dependency on the data crate
/// (the page).
pub use servesim_data::silicon::{
    parse as parse_silicon, parse_request_log, MeasuredRequest, SiliconError, SiliconRow,
};
pub use summary::{
    class, compare_requests, curve_key, requests_table, shape_errors, summarize, table, workers_source,
    Group, RequestComparison, Summary,
};

/// Which rows of a calibration file to replay: `servesim validate` and `calibrate`'s
/// `--filter`, `--class`, `--source` and `--single-node`, and the page's Validate tab alike.
/// Every part that is set must match; the default keeps every row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    /// Texts any of which the row's id, model, system or engine contains (none: any row).
    pub filters: Vec<String>,
    /// Classes (`class`'s names) any of which the row is in (none: any class).
    pub classes: Vec<&'static str>,
    /// Who measured the row ([`measured_by`]: `inferencex`, `aiconfigurator`, `other`).
    pub measured_by: Option<&'static str>,
    /// Only rows each of whose workers fits in one node of its GPU.
    pub single_node: bool,
}

/// The classes by their short names: `--class dense-agg` and the like.
pub const CLASS_NAMES: [(&str, &str); 4] = [
    ("dense-agg", "dense aggregated"),
    ("moe-agg", "MoE aggregated"),
    ("dense-disagg", "dense disaggregated"),
    ("moe-disagg", "MoE disaggregated"),
];

/// The sources [`measured_by`] names.
pub const SOURCES: [&str; 3] = ["inferencex", "aiconfigurator", "other"];

impl Selection {
    /// Adds a class by its short name ([`CLASS_NAMES`]).
    ///
    /// # Errors
    /// When the name is none of them.
    pub fn add_class(&mut self, short: &str) -> Result<(), String> {
        let (_, class) = CLASS_NAMES
            .iter()
            .find(|(s, _)| *s == short)
            .ok_or_else(|| format!("class {short}: use dense-agg, moe-agg, dense-disagg or moe-disagg"))?;
        self.classes.push(class);
        Ok(())
    }

    /// Sets the measuring source ([`SOURCES`]).
    ///
    /// # Errors
    /// When the name is none of them.
    pub fn set_source(&mut self, source: &str) -> Result<(), String> {
        let s = SOURCES
            .iter()
            .find(|s| **s == source)
            .ok_or_else(|| format!("source {source}: use inferencex, aiconfigurator or other"))?;
        self.measured_by = Some(s);
        Ok(())
    }

    /// Whether the selection keeps `row`.
    #[must_use]
    pub fn keeps(&self, row: &SiliconRow, catalog: &Catalog) -> bool {
        let text = |f: &String| {
            [&row.id, &row.model, &row.system, &row.backend].iter().any(|s| s.contains(f.as_str()))
        };
        (self.filters.is_empty() || self.filters.iter().any(text))
            && (self.classes.is_empty() || self.classes.contains(&class(row, catalog)))
            && self.measured_by.is_none_or(|m| measured_by(row) == m)
            && (!self.single_node || single_node(row, catalog))
    }
}

/// Whether every worker of a row fits in one node of its GPU: tensor × pipeline × attention-DP
/// degree within the catalog's GPUs per node (a GPU the catalog does not know counts as not
/// fitting).
#[must_use]
pub fn single_node(row: &SiliconRow, catalog: &Catalog) -> bool {
    let Some(node) = catalog.gpu(&row.system).map(|h| h.gpus_per_node) else { return false };
    let fits = |l: &Layout| l.tp.max(1) * l.pp.max(1) * l.dp.max(1) <= node;
    match &row.mode {
        Mode::Agg { layout } => fits(layout),
        Mode::Disagg { prefill, decode, .. } => fits(prefill) && fits(decode),
    }
}

/// Requests per concurrency slot (REF §7: "10 requests per concurrency slot").
pub const REQUESTS_PER_SLOT: u32 = 10;

/// Shortest sampled length as a fraction of nominal (REF §7: "ISL/OSL sampled 80–100% of
/// nominal"), the replay's default.
pub const LENGTH_FLOOR: f64 = 0.8;

/// What happened to one row.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// Predicted mean TTFT and TPOT (ms), when the row could be predicted.
    pub predicted: Option<(f64, f64)>,
    /// Why not, otherwise.
    pub error: Option<String>,
    /// Prefill and decode workers chosen by [`size_pools`] for a disaggregated row that does
    /// not record them.
    pub sized: Option<(u32, u32)>,
    /// Whether the row replayed InferenceX's published deployment ([`replays_published`]).
    pub published: bool,
    /// MTP drafts a round the row replayed ([`speculation`]), when it speculated.
    pub drafts: Option<u32>,
    /// Kernel seconds a second the measured request rate's prompts need on the replayed
    /// deployment's prefilling workers ([`measured_prompt_load`]); above 1 the measurement
    /// served more prompts than those kernels can compute.
    pub prompt_load: Option<f64>,
    /// The row's curve as replayed ([`curve_key`] of the replayed layouts and worker counts,
    /// with InferenceX's published deployment when the row replayed one): rows that share a
    /// layout in the file but ran different published deployments are different curves.
    /// `None` when no deployment could be worked out for the row ([`replayed_row`] failed).
    pub curve: Option<String>,
}

/// The prompt load beyond which a row's measurement contradicts the kernel data: its
/// prompts alone would need more than all of the prefilling workers' time.
pub const PROMPT_LOAD_LIMIT: f64 = 1.0;

/// [`crate::estimate::prompt_kernel_load`] at the row's measured request rate: a closed loop
/// of `concurrency` clients, each request lasting its measured TTFT plus its mean output
/// (the replay's lengths) less one times its measured TPOT (Little's law). `None` when the
/// row records no positive latency or the timing model has no kernel breakdown.
#[must_use]
pub fn measured_prompt_load(row: &SiliconRow, p: &Prepared) -> Option<f64> {
    let osl = crate::estimate::workload(p).ok()?.osl;
    let request_s = (row.ttft_ms + (osl - 1.0).max(0.0) * row.tpot_ms) / 1000.0;
    if !(request_s > 0.0 && request_s.is_finite()) {
        return None;
    }
    crate::estimate::prompt_kernel_load(p, f64::from(row.concurrency) / request_s).ok()
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
/// that is a Dynamo release `DYNAMO_RUNTIMES` lists (or a patch of one, which takes its
/// base release's), on a row whose Dynamo image carries that tag or on a TensorRT-LLM row
/// (TensorRT-LLM's own 0.x releases predate its PyTorch backend and these harnesses: 0.8.0
/// is read as Dynamo's), names the engine release that runtime bundles. Any other version is
/// the engine's own, as recorded.
#[must_use]
pub fn engine_release(row: &SiliconRow) -> String {
    let v = row.backend_version.trim();
    let image_tag = recipe::images(row)
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
    if own.frontend_prompt_token_s != default.frontend_prompt_token_s {
        k.frontend_prompt_token_us = k.frontend_prompt_token_us.or(Some(own.frontend_prompt_token_s * 1e6));
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

/// One worker role of a replayed row; `published` is the deployment the row replays
/// ([`published_deployment`]).
#[allow(clippy::too_many_arguments)]
fn role_yaml(
    out: &mut String,
    name: &str,
    l: &Layout,
    replicas: u32,
    prefill: bool,
    row: &SiliconRow,
    knobs: &Knobs,
    published: Option<deployments::Deployment>,
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
    // InferenceX's published disaggregated deployments cap a decode rank at its recipe's batch
    // and run TensorRT-LLM's decode experts on TRTLLM-gen kernels without attention DP
    // (`moe_config: {backend: TRTLLM}` in those recipes, CUTLASS or DeepGEMM with it).
    let seqs = if prefill {
        l.batch.max(1)
    } else {
        published.and_then(|d| d.decode_batch).or(recipe.max_sequences).unwrap_or(policy_seqs)
    };
    // Their DeepSeek-R1 TensorRT-LLM prefill workers (srt-slurm's
    // `recipes/trtllm/{b200,b300,gb200,gb300}-fp4/…` and `b200-fp8/…`, e.g.
    // `b200-fp4/1k1k/stp/ctx1_gen1_dep8_batch512_eplb0_mtp0.yaml`) run without the overlap
    // scheduler (`disable_overlap_scheduler: true`) and, in fp4, on TRTLLM-gen experts
    // (`moe_config: {backend: TRTLLM}`; DeepGEMM in fp8). InferenceMAX's deployments of 2025,
    // replayed with their counts recorded, predate those recipes.
    let trtllm_published = published.is_some() && row.backend == "trtllm";
    let from_recipes = matches!(row.mode, Mode::Disagg { prefill_workers: None, decode_workers: None, .. });
    let deepseek_prefill = prefill
        && trtllm_published
        && from_recipes
        && matches!(row.model.as_str(), "deepseek-ai/DeepSeek-R1" | "deepseek-ai/DeepSeek-V3");
    let moe_kernel = recipe.moe_kernel.or_else(|| {
        let decode_tep = !prefill && trtllm_published && l.dp <= 1;
        let fp4_prefill = deepseek_prefill && quant_moe(&row.moe_quant) == Some("nvfp4");
        (decode_tep || fp4_prefill).then_some(MoeKernel::MinLatency)
    });
    let mut scheduling = if deepseek_prefill || schedules_synchronously(&row.backend, &engine_release(row)) {
        ", async_scheduling: false".to_owned()
    } else {
        String::new()
    };
    if let Some(on) = knobs.plan_ahead {
        let _ = write!(scheduling, ", plan_ahead: {on}");
    }
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
    if let Some((timeout, batching)) = recipe.adp_balance {
        let _ = write!(
            wait,
            ", attention_dp_config: {{enable_balance: true, timeout_iters: {timeout}, batching_wait_iters: {batching}}}"
        );
    }
    let _ = writeln!(
        out,
        "      scheduler: {{max_batched_tokens: {}, max_sequences: {seqs}{scheduling}{wait}}}",
        recipe.max_batched_tokens.unwrap_or(8192)
    );
    // The memory fraction follows the row's release even where the data has no tables of it
    // (then the scenario names no `backend_version` and would take the recent default).
    let release = engine_release(row);
    let backend = Backend::from_name(&row.backend).unwrap_or(Backend::TrtLlm);
    let fraction = recipe.memory_fraction.or_else(|| {
        (!release.is_empty())
            .then(|| crate::decode::role::default_memory_fraction(backend, Some(&release)))
            .flatten()
    });
    let capacity =
        fraction.map_or(String::new(), |f| format!(", capacity: {{type: default, memory_fraction: {f}}}"));
    let caching = knobs.prompt_pool.is_some();
    let _ = writeln!(out, "      kv_cache: {{prefix_caching: {caching}{capacity}}}");
    let mut k = knobs.yaml();
    if let Some(m) = moe_kernel.filter(|_| knobs.moe_kernel.is_none()) {
        let sep = if k.is_empty() { "" } else { ", " };
        let _ = write!(k, "{sep}moe_kernel: {}", m.name());
    }
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

/// The MTP drafts a round a replayed row (as [`replayed_row`] returns it) proposes, and how
/// many of them are accepted on average: those of its published deployment or recipe, when
/// either speculated, each accepted with [`MTP_DRAFT_ACCEPTANCE`] (or `--mtp-acceptance`);
/// the `--nextn` what-if overrides both.
#[must_use]
pub fn speculation(row: &SiliconRow, knobs: &Knobs) -> Option<(u32, f64)> {
    let recipe_drafts = if knobs.no_recipes { None } else { recipe(row).drafts };
    let drafts = published_deployment(row, knobs).and_then(|d| d.drafts).or(recipe_drafts);
    knobs.speculation.or_else(|| {
        drafts.map(|n| (n, accepted_drafts(n, knobs.mtp_acceptance.unwrap_or(MTP_DRAFT_ACCEPTANCE))))
    })
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
    let bf16_kv = !knobs.no_recipes && recipe(row).kv_cache_bf16;
    q.push(format!("kv_cache: {}", if low && !bf16_kv { "fp8" } else { "bf16" }));
    let _ = writeln!(y, "  quantization: {{{}}}", q.join(", "));
    if !knobs.no_recipes && recipe(row).chunked_prefill == Some(false) {
        let _ = writeln!(y, "  enable_chunked_prefill: false");
    }
    let published = published_deployment(row, knobs);
    if let Some((nextn, accepted)) = speculation(row, knobs) {
        let _ = writeln!(y, "  nextn: {nextn}");
        let _ = writeln!(y, "  nextn_accepted: {accepted}");
    }
    match row.mode {
        Mode::Agg { layout } => {
            let _ = writeln!(y, "  workers:");
            role_yaml(&mut y, "aggregated", &strip(layout, dense), 1, false, row, knobs, None);
        }
        Mode::Disagg { prefill, prefill_workers, decode, decode_workers } => {
            let _ = writeln!(y, "  mode: disaggregated");
            let _ = writeln!(y, "  workers:");
            role_yaml(
                &mut y,
                "prefill",
                &strip(prefill, dense),
                prefill_workers.or(published.map(|d| d.prefill.workers)).unwrap_or(1),
                true,
                row,
                knobs,
                published,
            );
            let decode_workers = decode_workers.or(published.map(|d| d.decode.workers)).unwrap_or(1);
            role_yaml(&mut y, "decode", &strip(decode, dense), decode_workers, false, row, knobs, published);
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
    let pool = knobs.prompt_pool.map_or(String::new(), |n| format!(", prompt_pool: {n}"));
    let _ = writeln!(
        y,
        "  source: {{type: synthetic, input_tokens: {}, output_tokens: {}{pool}}}",
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
/// An MLA model's layout whose tensor-parallel degree does not divide its attention heads
/// (DeepSeek-R1's 128 at `tp 36` or `tp 72` on GB200 racks) can only have run as attention
/// data parallelism over those GPUs: that is how TensorRT-LLM's `enable_attention_dp` and
/// SGLang's `--enable-dp-attention` count them (`tensor_parallel_size` / `--tp` is the world
/// size, each rank running attention for its own requests), so such a layout replays as
/// `tp 1, attention_dp N`. With [`Knobs::mla_attention_dp`], every MLA layout written as
/// tensor parallelism does.
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
    if let (true, Mode::Agg { layout }) = (recipe::from_inferencex(row), out.mode) {
        out.mode = Mode::Agg { layout: expert_parallel_layout(layout) };
    }
    let Some(model) = model.filter(|m| m.mla.is_some()) else {
        return out;
    };
    let as_dp = |l: &Layout| l.dp <= 1 && l.tp > 1 && (knobs.mla_attention_dp || model.num_heads % l.tp != 0);
    let dp = |l: Layout| if as_dp(&l) { Layout { dp: l.tp, tp: 1, ..l } } else { l };
    out.mode = match out.mode {
        Mode::Agg { layout } => Mode::Agg { layout: dp(layout) },
        Mode::Disagg { prefill, prefill_workers, decode, decode_workers } => {
            Mode::Disagg { prefill: dp(prefill), prefill_workers, decode: dp(decode), decode_workers }
        }
    };
    out
}

/// An InferenceX aggregated layout as it ran. Its exports write a deployment of `n` GPUs
/// with expert parallelism over all of them (`--tp_size n --ep_size n` for TensorRT-LLM,
/// `--tp n --ep n` for SGLang, `-tp n --enable-expert-parallel` for vLLM; ids `…_tp8_ep8_…`)
/// as the product of the two degrees: `tp n², moe_tp n, moe_ep n`, with attention data
/// parallelism `attention_dp n²` instead of `tp`, and for vLLM `tp n, attention_dp n, moe_ep
/// n²`. Read literally, DeepSeek-R1 at `tp 8, ep 8` on an 8-GPU H200 would replay on 64
/// GPUs. Such a layout becomes `n` GPUs of tensor (or attention data) parallelism with MoE
/// expert parallelism `n`; the per-rank batch keeps the row's clients per rank. Any other
/// layout is returned as it is.
#[must_use]
pub fn expert_parallel_layout(l: Layout) -> Layout {
    let square = |n: u32| n.saturating_mul(n);
    let (n, attention_dp) = if l.moe_tp > 1 && l.moe_ep == l.moe_tp && (l.tp == 1 || l.dp == 1) {
        (l.moe_tp, l.tp == 1)
    } else if l.moe_tp == 1 && l.tp > 1 && l.dp == l.tp {
        (l.tp, false)
    } else {
        return l;
    };
    if l.tp.saturating_mul(l.dp) != square(n) || l.moe_tp.saturating_mul(l.moe_ep) != square(n) {
        return l;
    }
    let (tp, dp) = if attention_dp { (1, n) } else { (n, 1) };
    Layout { tp, dp, moe_tp: 1, moe_ep: n, batch: l.batch.saturating_mul(l.dp) / dp, ..l }
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

/// The published deployment a row (as [`replayed_row`] returns it) replays: its counts blank
/// and its decode layout the deployment's, or InferenceMAX's earlier deployment of a row the
/// file writes as one aggregated worker (`validate/deployments.rs`), its counts recorded.
fn published_deployment(row: &SiliconRow, knobs: &Knobs) -> Option<deployments::Deployment> {
    let Mode::Disagg { decode, .. } = row.mode else { return None };
    if knobs.no_recipes {
        return None;
    }
    deployments::replayed(row)
        .filter(|d| deployments::is_published_decode(d, &decode))
        .or_else(|| deployments::legacy(row).filter(|d| deployments::is_published_decode(d, &decode)))
}

/// Prefill and decode workers of the deployment InferenceX published for a row, when the row
/// replays it ([`replays_published`]).
#[must_use]
pub fn published_workers(row: &SiliconRow, knobs: &Knobs) -> Option<(u32, u32)> {
    deployments::replayed(row)
        .filter(|_| replays_published(row, knobs))
        .map(|d| (d.prefill.workers, d.decode.workers))
}

/// Whether a disaggregated row replays the deployment InferenceX published for it (workers,
/// layouts and decode batch from its benchmark configuration, `validate/deployments.rs`)
/// instead of pools sized from the estimate: an InferenceX row that records no worker counts
/// and whose clients ran exactly one deployment, unless recipes are off.
#[must_use]
pub fn replays_published(row: &SiliconRow, knobs: &Knobs) -> bool {
    !knobs.no_recipes && deployments::replayed(row).is_some()
}

/// The row as it is replayed: [`interpret`]ed, with InferenceX's published deployment
/// ([`replays_published`]) or [`size_pools`]' counts filled in; a row written as one
/// aggregated worker that ran one of InferenceMAX's disaggregated deployments
/// (`validate/deployments.rs`) replays that deployment, unless recipes are off.
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
    // InferenceMAX's deployment of a row written as one aggregated worker of every GPU, or of
    // a disaggregated one: its pools become the row's recorded workers, by which the
    // scenario finds the deployment again.
    let earlier = if row.disaggregated() { deployments::earlier(row) } else { deployments::legacy(row) };
    if let Some(d) = earlier.filter(|_| !knobs.no_recipes) {
        r.mode = Mode::Disagg {
            prefill: d.prefill_layout(row.isl),
            prefill_workers: Some(d.prefill.workers),
            decode: d.decode_layout(),
            decode_workers: Some(d.decode.workers),
        };
        return Ok((r, None));
    }
    if let Some(d) = deployments::replayed(row).filter(|_| replays_published(row, knobs)) {
        // The counts stay blank: the scenario takes them, the decode batch, the experts'
        // kernels and the drafts from the published deployment (`published_deployment`).
        r.mode = Mode::Disagg {
            prefill: d.prefill_layout(row.isl),
            prefill_workers: None,
            decode: d.decode_layout(),
            decode_workers: None,
        };
        return Ok((r, None));
    }
    let sized = size_pools(&r, catalog, files, knobs)?;
    if let (Some((p, d)), Mode::Disagg { prefill, decode, .. }) = (sized, r.mode) {
        r.mode = Mode::Disagg { prefill, prefill_workers: Some(p), decode, decode_workers: Some(d) };
    }
    Ok((r, sized))
}

/// A row as it is replayed: its layouts as they ran ([`replayed_row`]), the pools sized for it
/// when it records none, and the scenario (a prediction.yaml) that replays it.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// The row as replayed.
    pub row: SiliconRow,
    /// Prefill and decode workers sized by [`size_pools`], when the row records none.
    pub sized: Option<(u32, u32)>,
    /// The scenario.
    pub yaml: String,
}

/// The scenario `row` is replayed as with `knobs`: what [`run_row`] runs, `servesim validate
/// --show-scenarios` prints and the page opens in Predict.
///
/// # Errors
/// When the row cannot be replayed (a model or GPU the catalog does not know, a layout that
/// does not fit).
pub fn replay_scenario(
    row: &SiliconRow,
    catalog: &Catalog,
    files: &dyn Files,
    knobs: &Knobs,
) -> Result<Replay, String> {
    let dense = catalog.model(&row.model).is_some_and(|m| m.moe.is_none());
    let (r, sized) = replayed_row(row, catalog, files, knobs)?;
    let yaml = scenario_yaml(&r, knobs, dense, tables_version(row, files).as_deref());
    Ok(Replay { row: r, sized, yaml })
}

/// Replays one row.
#[must_use]
pub fn run_row(row: &SiliconRow, catalog: &Catalog, files: &dyn Files, knobs: &Knobs) -> Outcome {
    let flat = |e: &str| e.lines().collect::<Vec<_>>().join(" ");
    let Replay { row: r, sized, yaml } = match replay_scenario(row, catalog, files, knobs) {
        Ok(x) => x,
        Err(e) => return Outcome { error: Some(flat(&e)), ..Outcome::default() },
    };
    let published = replays_published(row, knobs);
    let curve = Some(match deployments::replayed(row).filter(|_| published) {
        Some(d) => format!("{}|{d:?}", curve_key(&r)),
        None => curve_key(&r),
    });
    let drafts = speculation(&r, knobs).map(|(n, _)| n);
    let prepared = parse_with_overrides(&yaml, &row.id, &[])
        .and_then(|root| prepare(&root, &row.id, catalog, None, files));
    let prompt_load = prepared.as_ref().ok().and_then(|p| measured_prompt_load(row, p));
    match prepared.and_then(|p| p.run()) {
        Ok(p) => Outcome {
            predicted: Some((p.summary.ttft.mean, p.summary.tpot.mean)),
            error: None,
            sized,
            published,
            drafts,
            prompt_load,
            curve,
        },
        Err(e) => Outcome {
            predicted: None,
            error: Some(flat(&e.to_string())),
            sized,
            published,
            drafts,
            prompt_load,
            curve,
        },
    }
}

#[cfg(test)]
mod tests;
