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
//! role that runs decode (prefill workers keep the row's prefill batch size). The KV cache is
//! fp8 when the row runs in fp8 or fp4, else bf16; an MXFP4 checkpoint on a GPU without FP4
//! tensor cores keeps its own weight formats ([`interpret`]). A row of an engine release with
//! its own calibration replays with it ([`release_knobs`]). Everything else is the engine's
//! default.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use servesim_data::silicon::{Layout, Mode, SiliconRow};

use servesim_perf::oplevel::{release_before, EngineCalibration};
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
    /// `frontend.request_ms` (aggregated rows).
    pub frontend_request_ms: Option<f64>,
    /// `frontend.chunk_us` (aggregated rows).
    pub frontend_chunk_us: Option<f64>,
    /// Sample lengths uniformly from this fraction of nominal up to nominal (REF §7 uses 0.8);
    /// `None`: fixed lengths.
    pub length_floor: Option<f64>,
    /// Read an MLA model's `tp N, attention_dp 1` layout as attention data parallelism over
    /// the N GPUs (`tp 1, attention_dp N`), the way SGLang and TensorRT-LLM serve DeepSeek-style
    /// models at high concurrency. One rule for every row; off by default (rows replay as
    /// written).
    pub mla_attention_dp: bool,
    /// Replay every row with the replay policy's engine options only, ignoring what its
    /// benchmark's published recipe sets ([`recipe`]).
    pub no_recipes: bool,
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
/// ([`EngineCalibration::for_release`]; TensorRT-LLM 1.0 has its own prefill scale and
/// frontend). Scenarios cannot name a release the data holds no tables of, so the replay
/// writes those constants out (`--show-scenarios` shows them).
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
    /// TensorRT-LLM batch waiting: (`batch_wait_timeout_iters`, `batch_wait_max_tokens_ratio`).
    pub batch_wait: Option<(u32, f64)>,
    /// SGLang's `scheduler_recv_interval`.
    pub recv_interval: Option<u32>,
}

/// The published recipe of a row's benchmark, where servesim knows it. InferenceX rows are
/// the dated ones (`source_file=YYYY-MM-DD.csv`) and its database dump (`db-dump/…`).
/// - Llama-3.1-70B with TensorRT-LLM (`benchmarks/70b_*_trt*.sh`): `trtllm-serve
///   --max_num_tokens 16384`, and for 1k/1k below TP8 also `batch_wait_timeout_iters: 20` and
///   `batch_wait_max_tokens_ratio: 0.9` ("will improve the performance" at 1k/1k, says the
///   script).
/// - DeepSeek-R1 with SGLang on B200 (`benchmarks/dsr1_fp8_b200.sh`, `dsr1_fp4_b200.sh`):
///   `--scheduler-recv-interval` 10, or 30 from 16 clients up ("relax to ~30 requests between
///   scheduler recv polls"); the fp8 script's TP4 layout keeps 10.
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
    if !inferencex {
        return Recipe::default();
    }
    match (row.backend.as_str(), row.model.as_str()) {
        ("trtllm", "meta-llama/Llama-3.1-70B") => Recipe {
            max_batched_tokens: Some(16_384),
            batch_wait: (row.isl == 1024 && row.osl == 1024 && tp < 8).then_some((20, 0.9)),
            recv_interval: None,
        },
        ("sglang", "deepseek-ai/DeepSeek-R1") if row.system == "b200_sxm" => {
            let fp8_tp4 = row.precision == "fp8" && tp == 4;
            let relaxed = row.concurrency >= 16 && !fp8_tp4;
            Recipe { recv_interval: Some(if relaxed { 30 } else { 10 }), ..Recipe::default() }
        }
        _ => Recipe::default(),
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
    let seqs = if prefill { l.batch.max(1) } else { l.batch.max(256).max(concurrency.div_ceil(ranks)) };
    let sync = if schedules_synchronously(&row.backend, &engine_release(row)) {
        ", async_scheduling: false"
    } else {
        ""
    };
    let recipe = if knobs.no_recipes { Recipe::default() } else { recipe(row) };
    let mut wait = recipe.batch_wait.map_or(String::new(), |(iters, ratio)| {
        format!(", batch_wait_timeout_iters: {iters}, batch_wait_max_tokens_ratio: {ratio}")
    });
    if let Some(n) = recipe.recv_interval {
        let _ = write!(wait, ", scheduler_recv_interval: {n}");
    }
    let _ = writeln!(
        out,
        "      scheduler: {{max_batched_tokens: {}, max_sequences: {seqs}{sync}{wait}}}",
        recipe.max_batched_tokens.unwrap_or(8192)
    );
    let _ = writeln!(out, "      kv_cache: {{prefix_caching: false}}");
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
    let _ = writeln!(y, "  stop: {{requests: {}}}", row.concurrency.saturating_mul(REQUESTS_PER_SLOT));
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

    /// TTFT scatter (%): the MAPE left after scaling each deployment family's predictions by
    /// the one constant that fits that family best, i.e. the error no per-family constant can
    /// remove (the rest is bias).
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn ttft_scatter(&self) -> f64 {
        if self.predicted == 0 {
            return f64::NAN;
        }
        100.0 * self.scatter_abs.0 / self.predicted as f64
    }

    /// TPOT scatter (%), as [`Group::ttft_scatter`].
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn tpot_scatter(&self) -> f64 {
        if self.predicted == 0 {
            return f64::NAN;
        }
        100.0 * self.scatter_abs.1 / self.predicted as f64
    }

    /// TTFT MAPE (%) over predicted rows.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn ttft_mape(&self) -> f64 {
        if self.predicted == 0 {
            return f64::NAN;
        }
        100.0 * self.ttft_abs / self.predicted as f64
    }

    /// TPOT MAPE (%) over predicted rows.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn tpot_mape(&self) -> f64 {
        if self.predicted == 0 {
            return f64::NAN;
        }
        100.0 * self.tpot_abs / self.predicted as f64
    }

    /// Mean signed TTFT error (%): positive means servesim predicts slower than measured.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn ttft_bias(&self) -> f64 {
        if self.predicted == 0 {
            return f64::NAN;
        }
        100.0 * self.ttft_signed / self.predicted as f64
    }

    /// Mean signed TPOT error (%).
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn tpot_bias(&self) -> f64 {
        if self.predicted == 0 {
            return f64::NAN;
        }
        100.0 * self.tpot_signed / self.predicted as f64
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mode: Mode) -> SiliconRow {
        SiliconRow {
            line: 2,
            id: "r".into(),
            source: String::new(),
            backend: "vllm".into(),
            backend_version: String::new(),
            model: "Qwen/Qwen3-32B".into(),
            system: "h100_sxm".into(),
            precision: "fp8".into(),
            gemm_quant: "fp8".into(),
            moe_quant: "fp8".into(),
            isl: 1024,
            osl: 128,
            concurrency: 8,
            mode,
            ttft_ms: 100.0,
            tpot_ms: 10.0,
        }
    }

    #[test]
    fn gpt_oss_without_fp4_tensor_cores_replays_in_its_mxfp4_checkpoint_formats() {
        let catalog = Catalog::builtin().unwrap();
        let l = Layout { tp: 2, pp: 1, dp: 1, moe_tp: 2, moe_ep: 1, batch: 8 };
        let mut r = row(Mode::Agg { layout: l });
        r.model = "openai/gpt-oss-120b".into();
        r.precision = "fp4".into();
        r.gemm_quant = "nvfp4".into();
        r.moe_quant = "nvfp4".into();
        let yaml = |r: &SiliconRow| {
            scenario_yaml(&interpret(r, &catalog, &Knobs::default()), &Knobs::default(), false, None)
        };
        for (gpu, label) in [("h200_sxm", "nvfp4"), ("h100_sxm", "nvfp4"), ("h100_sxm", "fp8")] {
            r.system = gpu.into();
            r.gemm_quant = label.into();
            r.moe_quant = label.into();
            assert!(yaml(&r).contains("quantization: {kv_cache: fp8}"), "{gpu} {label}: {}", yaml(&r));
        }
        r.gemm_quant = "nvfp4".into();
        r.moe_quant = "nvfp4".into();
        // Blackwell runs NVFP4 kernels: the label stands, as for other models on Hopper.
        r.system = "b200_sxm".into();
        assert!(yaml(&r).contains("quantization: {gemm: nvfp4, moe: nvfp4, kv_cache: fp8}"), "{}", yaml(&r));
        r.system = "h200_sxm".into();
        r.model = "Qwen/Qwen3-30B-A3B".into();
        assert!(yaml(&r).contains("gemm: nvfp4"), "{}", yaml(&r));
    }

    #[test]
    fn mla_layouts_can_be_read_as_attention_data_parallel() {
        let catalog = Catalog::builtin().unwrap();
        let l = Layout { tp: 8, pp: 1, dp: 1, moe_tp: 1, moe_ep: 8, batch: 64 };
        let mut r = row(Mode::Agg { layout: l });
        r.model = "deepseek-ai/DeepSeek-R1".into();
        let on = Knobs { mla_attention_dp: true, ..Knobs::default() };
        let Mode::Agg { layout } = interpret(&r, &catalog, &on).mode else { panic!() };
        assert_eq!((layout.tp, layout.dp, layout.moe_ep), (1, 8, 8));
        // Off by default, and never for models without MLA.
        assert_eq!(interpret(&r, &catalog, &Knobs::default()), r);
        let dense = row(Mode::Agg { layout: l });
        assert_eq!(interpret(&dense, &catalog, &on), dense);
    }

    #[test]
    fn rows_become_closed_loop_scenarios() {
        let l = Layout { tp: 2, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
        let y = scenario_yaml(&row(Mode::Agg { layout: l }), &Knobs::default(), true, None);
        assert!(y.contains("concurrency: 8"), "{y}");
        assert!(y.contains("requests: 80"), "{y}");
        assert!(y.contains("input_tokens: 1024"), "{y}");
        let sampled = scenario_yaml(
            &row(Mode::Agg { layout: l }),
            &Knobs { length_floor: Some(0.8), ..Knobs::default() },
            true,
            None,
        );
        assert!(sampled.contains("input_tokens: {dist: uniform, min: 820, max: 1024}"), "{sampled}");
        assert!(y.contains("gemm: fp8"), "{y}");
        assert!(y.contains("max_sequences: 256"), "{y}");
        let d = scenario_yaml(
            &row(Mode::Disagg { prefill: l, prefill_workers: Some(2), decode: l, decode_workers: Some(3) }),
            &Knobs { prefill_scale: Some(1.5), ..Knobs::default() },
            true,
            None,
        );
        assert!(d.contains("timing: {prefill_scale: 1.5}"), "{d}");
        assert!(d.contains("mode: disaggregated") && d.contains("replicas: 3"), "{d}");
        // Decode ranks hold the running requests: max(256, concurrency per rank).
        let mut big =
            row(Mode::Disagg { prefill: l, prefill_workers: Some(2), decode: l, decode_workers: Some(3) });
        big.concurrency = 4096;
        let b = scenario_yaml(&big, &Knobs::default(), true, None);
        assert!(b.contains("max_sequences: 1366"), "{b}");
        assert!(!b.contains("async_scheduling"), "{b}");
        assert!(!b.contains("backend_version"), "{b}");
        let v = scenario_yaml(&big, &Knobs::default(), true, Some("1.0.0rc3"));
        assert!(v.contains("  backend: vllm\n  backend_version: 1.0.0rc3\n"), "{v}");
    }

    #[test]
    fn inferencex_trtllm_llama_70b_rows_replay_with_their_recipe() {
        let l = |tp| Layout { tp, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
        let mut r = row(Mode::Agg { layout: l(2) });
        r.backend = "trtllm".into();
        r.model = "meta-llama/Llama-3.1-70B".into();
        r.source = "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=8".into();
        (r.isl, r.osl) = (1024, 1024);
        let want =
            Recipe { max_batched_tokens: Some(16_384), batch_wait: Some((20, 0.9)), recv_interval: None };
        assert_eq!(recipe(&r), want);
        let y = scenario_yaml(&r, &Knobs::default(), true, None);
        assert!(
            y.contains("max_batched_tokens: 16384")
                && y.contains("batch_wait_timeout_iters: 20, batch_wait_max_tokens_ratio: 0.9"),
            "{y}"
        );
        let plain = scenario_yaml(&r, &Knobs { no_recipes: true, ..Knobs::default() }, true, None);
        assert!(plain.contains("max_batched_tokens: 8192") && !plain.contains("batch_wait"), "{plain}");
        // Batch waiting only at 1k/1k below TP8; the larger budget throughout.
        let only_budget = Recipe { max_batched_tokens: Some(16_384), ..Recipe::default() };
        r.mode = Mode::Agg { layout: l(8) };
        assert_eq!(recipe(&r), only_budget);
        (r.mode, r.osl) = (Mode::Agg { layout: l(2) }, 8192);
        assert_eq!(recipe(&r), only_budget);
        // Other sources, engines and models replay the policy.
        r.osl = 1024;
        for change in [
            |r: &mut SiliconRow| r.source = "source_file=/data/h100_sxm/trtllm/1.0.0rc3/x.csv".into(),
            |r: &mut SiliconRow| r.backend = "vllm".into(),
            |r: &mut SiliconRow| r.model = "Qwen/Qwen3-32B".into(),
        ] {
            let mut other = r.clone();
            change(&mut other);
            assert_eq!(recipe(&other), Recipe::default(), "{other:?}");
        }
    }

    #[test]
    fn inferencex_sglang_deepseek_r1_rows_on_b200_replay_with_their_recv_interval() {
        let l = |tp| Layout { tp, pp: 1, dp: 1, moe_tp: tp, moe_ep: 1, batch: 8 };
        let mut r = row(Mode::Agg { layout: l(8) });
        (r.backend, r.model, r.system, r.precision) =
            ("sglang".into(), "deepseek-ai/DeepSeek-R1".into(), "b200_sxm".into(), "fp8".into());
        r.source = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=16".into();
        let interval = |r: &SiliconRow| recipe(r).recv_interval;
        r.concurrency = 16;
        assert_eq!(interval(&r), Some(30));
        let y = scenario_yaml(&r, &Knobs::default(), false, None);
        assert!(y.contains("scheduler_recv_interval: 30"), "{y}");
        let plain = scenario_yaml(&r, &Knobs { no_recipes: true, ..Knobs::default() }, false, None);
        assert!(!plain.contains("scheduler_recv_interval"), "{plain}");
        // Below 16 clients, and the fp8 script's TP4 layout: every 10 steps.
        r.concurrency = 8;
        assert_eq!(interval(&r), Some(10));
        (r.concurrency, r.mode) = (64, Mode::Agg { layout: l(4) });
        assert_eq!(interval(&r), Some(10));
        r.precision = "fp4".into();
        assert_eq!(interval(&r), Some(30));
        // The database dump is InferenceX too; other GPUs, engines and sources are not this recipe.
        r.source = "db-dump/2026-04-27; config_id=1; silicon_concurrency=64".into();
        assert_eq!(interval(&r), Some(30));
        for change in [
            |r: &mut SiliconRow| r.system = "h200_sxm".into(),
            |r: &mut SiliconRow| r.backend = "trtllm".into(),
            |r: &mut SiliconRow| r.source = "source_file=qwen3.5-397b-gap-analysis.csv".into(),
        ] {
            let mut other = r.clone();
            change(&mut other);
            assert_eq!(recipe(&other), Recipe::default(), "{other:?}");
        }
    }

    #[test]
    fn dynamo_rows_replay_with_the_engine_release_their_runtime_bundles() {
        let l = Layout { tp: 4, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
        let mut r = row(Mode::Agg { layout: l });
        let image = |tag: &str, engine: &str| {
            format!("source_file=2026-03-25.csv; wip=False; image=nvcr.io/nvidia/ai-dynamo/{engine}-runtime:{tag}")
        };
        for (backend, version, source, want) in [
            // InferenceX's Dynamo TensorRT-LLM rows record Dynamo's release, with or without the image.
            ("trtllm", "0.8.1.post2", image("0.8.1.post2", "tensorrtllm"), "1.2.0rc6.post2"),
            ("trtllm", "0.8.1.post1", "source_file=2026-04-06.csv".to_string(), "1.2.0rc6.post1"),
            // A patch the matrix does not list takes its base release's; an unlisted release
            // stays as recorded (TensorRT-LLM 0.21.0 is TensorRT-LLM's own).
            ("trtllm", "0.7.0.post2", image("0.7.0.post2", "tensorrtllm"), "1.2.0rc2"),
            ("trtllm", "0.5.1-rc0.pre3", String::new(), "0.5.1-rc0.pre3"),
            ("sglang", "0.5.1-rc0.pre1", image("0.5.1-rc0.pre1", "sglang"), "0.5.1-rc0.pre1"),
            ("trtllm", "0.21.0", String::new(), "0.21.0"),
            ("vllm", "0.8.0", image("0.8.0", "vllm"), "0.12.0"),
            // A row that records its engine's own release keeps it, in a Dynamo image or not.
            ("vllm", "0.12.0", image("0.8.0", "vllm"), "0.12.0"),
            ("trtllm", "1.3.0rc5", image("0.8.1", "tensorrtllm"), "1.3.0rc5"),
            ("trtllm", "1.0.0rc3", String::new(), "1.0.0rc3"),
        ] {
            (r.backend, r.backend_version, r.source) = (backend.into(), version.into(), source);
            assert_eq!(engine_release(&r), want, "{backend} {version}");
        }
        // A Dynamo 0.8 TensorRT-LLM row replays with the calibration of 1.1 and later, a
        // TensorRT-LLM 1.0 row with its own.
        (r.backend, r.backend_version, r.source) = ("trtllm".into(), "0.8.1.post2".into(), String::new());
        assert_eq!(release_knobs(&r, &Knobs::default()), Knobs::default());
        r.backend_version = "1.0.0rc3".into();
        assert_eq!(release_knobs(&r, &Knobs::default()).prefill_scale, Some(1.25));
        // vLLM 0.12 behind Dynamo 0.8 schedules synchronously, as vLLM 0.12 does.
        (r.backend, r.backend_version, r.source) = ("vllm".into(), "0.8.0".into(), image("0.8.0", "vllm"));
        assert!(scenario_yaml(&r, &Knobs::default(), true, None).contains("async_scheduling: false"));
    }

    #[test]
    fn rows_from_vllm_before_0_14_replay_with_synchronous_scheduling() {
        for (backend, version, sync) in [
            ("vllm", "0.12.0", true),
            ("vllm", "0.13.2", true),
            ("vllm", "0.14.0", false),
            ("vllm", "0.19.1", false),
            ("vllm", "", false),
            ("vllm", "nightly-5b8c30d", false),
            ("sglang", "0.5.6.post2", false),
            ("trtllm", "0.8.1.post2", false),
        ] {
            assert_eq!(schedules_synchronously(backend, version), sync, "{backend} {version}");
        }
        let l = Layout { tp: 2, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
        let mut r = row(Mode::Agg { layout: l });
        r.backend_version = "0.12.0".into();
        let y = scenario_yaml(&r, &Knobs::default(), true, None);
        assert!(y.contains("max_sequences: 256, async_scheduling: false}"), "{y}");
    }

    #[test]
    fn tensorrt_llm_1_0_rows_replay_with_their_release_calibration() {
        let l = Layout { tp: 1, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
        let mut r = row(Mode::Agg { layout: l });
        r.backend = "trtllm".into();
        for (version, written) in
            [("1.0.0rc3", true), ("0.21.0", true), ("1.1.0rc2.post2", false), ("", false)]
        {
            r.backend_version = version.into();
            let y = scenario_yaml(&r, &Knobs::default(), true, None);
            assert_eq!(
                y.contains("timing: {prefill_scale: 1.25, frontend_ms: 50}"),
                written,
                "{version}: {y}"
            );
        }
        // A constant given on the command line wins over the release's.
        r.backend_version = "1.0.0rc3".into();
        let y = scenario_yaml(&r, &Knobs { prefill_scale: Some(1.1), ..Knobs::default() }, true, None);
        assert!(y.contains("timing: {prefill_scale: 1.1, frontend_ms: 50}"), "{y}");
        // Other engines' releases share one calibration.
        r.backend = "sglang".into();
        r.backend_version = "0.4.0".into();
        assert!(!scenario_yaml(&r, &Knobs::default(), true, None).contains("timing:"));
    }

    #[test]
    fn groups_compute_mape_bias_and_coverage() {
        let l = Layout { tp: 1, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
        let rows = vec![row(Mode::Agg { layout: l }), row(Mode::Agg { layout: l })];
        let outs = vec![
            Outcome { predicted: Some((110.0, 9.0)), error: None, sized: None },
            Outcome { predicted: None, error: Some("refused".into()), sized: None },
        ];
        let s = summarize(&rows, &outs, &Catalog::builtin().unwrap());
        let g = &s.overall;
        assert!((g.ttft_mape() - 10.0).abs() < 1e-9);
        assert!((g.tpot_bias() + 10.0).abs() < 1e-9);
        assert!((g.coverage() - 50.0).abs() < 1e-9);
        assert!(table(&s).contains("dense aggregated"));
    }

    #[test]
    fn scatter_is_the_error_left_after_each_family_best_scale() {
        let l = Layout { tp: 1, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
        let mut rows = vec![row(Mode::Agg { layout: l }); 5];
        for r in &mut rows[3..] {
            r.system = "h200_sxm".into();
        }
        // Family one: TTFT ratios 1.2, 1.2, 1.5 (best scale 1.2); family two: 0.5 and 0.7 (best
        // scale 0.7: residual 2/7, where the median 0.6 would leave 1/3).
        let out = |ttft: f64| Outcome {
            predicted: Some((ttft * rows[0].ttft_ms, rows[0].tpot_ms)),
            error: None,
            sized: None,
        };
        let outs = vec![out(1.2), out(1.2), out(1.5), out(0.5), out(0.7)];
        let s = summarize(&rows, &outs, &Catalog::builtin().unwrap());
        let first = s.by_config.values().find(|g| g.rows == 3).unwrap();
        assert!((first.ttft_mape() - 30.0).abs() < 1e-9);
        assert!((first.ttft_scatter() - 100.0 * 0.25 / 3.0).abs() < 1e-9, "{}", first.ttft_scatter());
        // Pooled: each row against its own family's scale, not one for all rows.
        let pooled = 100.0 * (0.25 + 2.0 / 7.0) / 5.0;
        assert!((s.overall.ttft_scatter() - pooled).abs() < 1e-9, "{}", s.overall.ttft_scatter());
        assert!((s.by_class["dense aggregated"].ttft_scatter() - pooled).abs() < 1e-9);
        assert!(s.overall.tpot_scatter().abs() < 1e-12, "exact TPOT everywhere");
        assert!(table(&s).contains("TTFT scatter"));
    }
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
