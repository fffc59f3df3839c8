//! From config text to a runnable simulation and back to a report: the one pipeline the CLI,
//! the browser worker and the tests all share, so they give the same numbers.

use std::fmt;

use servesim_core::engine::{SchedulerConfig, Speculation};
use servesim_core::frontend::FrontendSpec;
use servesim_core::metrics::Fleet;
use servesim_core::router::Router;
use servesim_core::sim::{make_ranks, Limits, PdSetup, SimSetup, Simulation};
use servesim_core::timing::StepTimer;
use servesim_core::transfer::TransferNet;
use std::sync::Arc;

use servesim_core::traffic::{Load, SessionSpec, Source, Stop, Trace, TrafficSpec};
use servesim_core::units::{SimDur, SimTime};
use servesim_core::worker::Worker;
use servesim_data::trace::TraceFormat;
use servesim_perf::fpm::{FpmModel, FpmTimer};
use servesim_perf::memory::{self, FractionOf, MemoryInputs, MemoryPlan, Parallelism, SglangReserve};
use servesim_perf::oplevel::{GraphPolicy, OpConstants, OpLevelSetup, OpLevelTimer, PerfDb};
use servesim_perf::roofline::RooflineTimer;
use servesim_perf::spec::{Dtype, GemmQuant, Hardware, ModelArch, MoeQuant};
use servesim_perf::tables::Family;

use std::rc::Rc;

use servesim_core::engine::Backend;

use crate::catalog::Catalog;
use crate::config::{
    Capacity, Config, ContextLength, LoadKind, RoleConfig, RouterPolicy, SourceConfig, SpeculationConfig,
    TimingKind, TraceFormatConfig, TransferMode,
};
use crate::diag::{Cx, DiagKind, Diagnostic};
use crate::node::{self, Node, Origin};
use crate::perfdata;
use crate::report::{self, Prediction};

/// Why a scenario could not produce a prediction. Each kind maps to a CLI exit code.
#[derive(Clone, Debug, PartialEq)]
pub enum ScenarioError {
    /// The config is invalid (exit 2). Lists every problem found.
    Config {
        /// Name of the config source (file path, "page", ...).
        source: String,
        /// The problems.
        diagnostics: Vec<Diagnostic>,
    },
    /// The deployment does not fit its hardware (exit 3).
    Resource {
        /// The numbers that show why.
        message: String,
    },
    /// The simulation failed while running (exit 1).
    Run {
        /// What went wrong.
        message: String,
    },
}

impl ScenarioError {
    /// The CLI exit code for this error (REF §1.5).
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        match self {
            ScenarioError::Config { .. } => 2,
            ScenarioError::Resource { .. } => 3,
            ScenarioError::Run { .. } => 1,
        }
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScenarioError::Config { source, diagnostics } => {
                let n = diagnostics.len();
                writeln!(f, "{source}: {n} problem{} in the config:", if n == 1 { "" } else { "s" })?;
                for d in diagnostics {
                    writeln!(f, "  - {d}")?;
                }
                Ok(())
            }
            ScenarioError::Resource { message } => write!(f, "resource refusal: {message}"),
            ScenarioError::Run { message } => write!(f, "run failed: {message}"),
        }
    }
}

impl std::error::Error for ScenarioError {}

/// A `--set PATH=YAML` override.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    /// Dotted path.
    pub path: String,
    /// YAML value text.
    pub value: String,
}

impl Override {
    /// Parses `PATH=YAML`.
    ///
    /// # Errors
    /// When there is no `=` or the path is empty.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.split_once('=') {
            Some((p, v)) if !p.trim().is_empty() => {
                Ok(Override { path: p.trim().to_string(), value: v.to_string() })
            }
            _ => Err(format!("--set expects PATH=YAML, got '{s}'")),
        }
    }
}

/// Reads the files a config names (trace paths). The CLI reads the disk relative to the
/// config file; the browser serves files the user dropped. This crate never touches a disk.
pub trait Files {
    /// The bytes of `path`, or why they cannot be read.
    ///
    /// # Errors
    /// A message naming the path.
    fn read(&self, path: &str) -> Result<Vec<u8>, String>;

    /// A file of servesim's own data directory (`perf/<system>/...` tables), or `None` when
    /// there is no such file. The CLI carries `data/` inside the binary; the browser fetches it
    /// from the page's origin.
    ///
    /// # Errors
    /// When the file exists but cannot be read.
    fn data(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        let _ = path;
        Ok(None)
    }
}

/// A [`Files`] with no files (configs that name files fail with a clear message).
pub struct NoFiles;

impl Files for NoFiles {
    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        Err(format!("cannot read '{path}': no files are available here"))
    }
}

fn config_error(source: &str, diagnostics: Vec<Diagnostic>) -> ScenarioError {
    ScenarioError::Config { source: source.to_string(), diagnostics }
}

/// Parses config text and applies overrides left to right (validation comes after all of them).
///
/// # Errors
/// A syntax error in the text or an override.
pub fn parse_with_overrides(text: &str, source: &str, overrides: &[Override]) -> Result<Node, ScenarioError> {
    let syntax = |e: node::SyntaxError, origin: Origin, path: &str| {
        config_error(
            source,
            vec![Diagnostic {
                path: path.to_string(),
                origin,
                message: e.message.clone(),
                kind: DiagKind::Syntax,
            }],
        )
    };
    let mut root = node::parse(text, None)
        .map_err(|e| syntax(e.clone(), Origin::File { line: e.line, col: e.col }, ""))?;
    for (i, o) in overrides.iter().enumerate() {
        let value =
            node::parse(&o.value, Some(i + 1)).map_err(|e| syntax(e, Origin::Override(i + 1), &o.path))?;
        root.set_path(&o.path, value).map_err(|m| {
            config_error(
                source,
                vec![Diagnostic {
                    path: o.path.clone(),
                    origin: Origin::Override(i + 1),
                    message: m,
                    kind: DiagKind::Schema,
                }],
            )
        })?;
    }
    Ok(root)
}

/// One worker role, resolved.
#[derive(Clone, Debug)]
pub struct PreparedRole {
    /// `aggregated`, `prefill` or `decode`.
    pub name: &'static str,
    /// Its config.
    pub config: RoleConfig,
    /// Its GPU type.
    pub hardware: Hardware,
    /// Layout of one worker.
    pub parallelism: Parallelism,
    /// Memory of one GPU.
    pub memory: MemoryPlan,
    /// KV blocks (tokens for SGLang) per attention-DP rank.
    pub blocks_per_rank: u32,
    /// How its steps are timed.
    pub timing: RoleTiming,
}

/// The step-time model of one role.
#[derive(Clone, Debug)]
pub enum RoleTiming {
    /// Op-level model over the role's measured tables (possibly none: then all roofline).
    OpLevel {
        /// Deployment facts the model needs.
        setup: Box<OpLevelSetup>,
        /// The tables.
        db: Rc<PerfDb>,
    },
    /// First-principles roofline (`timing.type: roofline`).
    Roofline,
    /// Measured whole-forward steps (`forward_model: fpm`).
    Fpm(Rc<FpmModel>),
}

impl PreparedRole {
    /// GPUs of the whole role (all replicas).
    #[must_use]
    pub fn gpus(&self) -> u32 {
        self.parallelism.gpus() * self.config.parallelism.replicas
    }
}

/// Everything resolved about a scenario before it runs.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The validated config.
    pub config: Config,
    /// Root seed.
    pub seed: u64,
    /// The model.
    pub model: ModelArch,
    /// Worker roles in worker order: `aggregated`, or `prefill` then `decode`.
    pub roles: Vec<PreparedRole>,
    /// GEMM format.
    pub gemm_dtype: Dtype,
    /// KV-cache format.
    pub kv_dtype: Dtype,
    /// The arrival process.
    pub traffic: TrafficSpec,
    /// Run limits (simulated-time cutoff of `stop.max_virtual_time_seconds`).
    pub limits: Limits,
    /// Fast-forward stable decode batches (on by default; results are identical either way).
    pub fast_forward: bool,
    /// Frontend delay between arrival and dispatch (the engine's calibrated API-server
    /// latency, or `timing.frontend_ms`).
    pub frontend_delay: SimDur,
    /// Longest request the engine accepts (prompt + output), if limited.
    pub context_limit: Option<u32>,
}

/// Validates a parsed config against the catalog and resolves everything the run needs.
///
/// # Errors
/// [`ScenarioError::Config`] for invalid or unknown values, [`ScenarioError::Resource`] when
/// the deployment does not fit in GPU memory.
pub fn prepare(
    root: &Node,
    source: &str,
    catalog: &Catalog,
    seed: Option<u64>,
    files: &dyn Files,
) -> Result<Prepared, ScenarioError> {
    let mut cx = Cx::default();
    let config = crate::decode::decode(root, &mut cx);
    // Catalog lookups read the raw values, so an unknown model is reported together with
    // every other problem rather than after they are fixed.
    let raw = |key: &str| root.get("engine").and_then(|e| e.get(key));
    let model = match raw("model") {
        Some(Node { value: node::Value::Str(id), origin }) => {
            let m = catalog.model(id);
            if m.is_none() {
                let hint =
                    catalog.suggest_model(id).map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default();
                let known: Vec<&str> = catalog.models.iter().map(|m| m.id.as_str()).collect();
                cx.report(
                    DiagKind::Domain,
                    "engine.model",
                    origin,
                    format!("unknown model '{id}'{hint}; known: {}", known.join(", ")),
                );
            }
            m
        }
        _ => None,
    };
    let hardware = match raw("hardware") {
        Some(Node { value: node::Value::Str(id), origin }) => {
            let h = catalog.gpu(id);
            if h.is_none() {
                let known: Vec<&str> = catalog.hardware.iter().map(|h| h.id.as_str()).collect();
                let hint = crate::diag::suggest(id, &known)
                    .map(|s| format!(" (did you mean '{s}'?)"))
                    .unwrap_or_default();
                cx.report(
                    DiagKind::Domain,
                    "engine.hardware",
                    origin,
                    format!("unknown hardware '{id}'{hint}; known: {}", known.join(", ")),
                );
            }
            h
        }
        _ => None,
    };
    let (Some(config), Some(model), Some(hardware)) = (config, model, hardware) else {
        return Err(config_error(source, cx.diags));
    };
    let engine = &config.engine;
    let at = |path: &str| {
        let mut n = root;
        for part in path.split('.') {
            match n.get(part) {
                Some(c) => n = c,
                None => break,
            }
        }
        n.origin.clone()
    };
    // An override in the checkpoint's own storage class keeps its scaling scheme (an FP8
    // block-scaled checkpoint served "as fp8" stays block-scaled).
    let gemm_quant = match engine.quantization.gemm {
        Some(q) if q.dtype() == model.gemm_quant.dtype() && q == GemmQuant::of(q.dtype()) => model.gemm_quant,
        Some(q) => q,
        None => model.gemm_quant,
    };
    let moe_quant = match (engine.quantization.moe, engine.quantization.gemm) {
        // The same for experts: "fp8" on a block-scaled checkpoint runs its block-scaled kernels.
        (Some(m), _) if m == MoeQuant::Fp8 && model.moe_quant == MoeQuant::Fp8Block => model.moe_quant,
        (Some(m), _) => m,
        (None, Some(_)) if gemm_quant != model.gemm_quant => MoeQuant::like(gemm_quant),
        _ => model.moe_quant,
    };
    let gemm_dtype = gemm_quant.dtype();
    let kv_dtype = engine.quantization.kv_cache.unwrap_or(model.default_kv_dtype);
    let mut roles = Vec::new();
    for (name, role) in engine.workers.roles() {
        let base = format!("engine.workers.{name}");
        // A role may run on its own GPU type (heterogeneous P/D).
        let hw = match &role.hardware {
            Some(id) => match catalog.gpu(id) {
                Some(h) => h,
                None => {
                    let known: Vec<&str> = catalog.hardware.iter().map(|h| h.id.as_str()).collect();
                    cx.report(
                        DiagKind::Domain,
                        &format!("{base}.hardware"),
                        &at(&format!("{base}.hardware")),
                        format!("unknown hardware '{id}'; known: {}", known.join(", ")),
                    );
                    continue;
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
                &at(&ppath),
                format!("{} is a dense model: moe_expert and moe_tensor must be 1", model.id),
            );
        }
        let tpath = format!("{ppath}.tensor");
        if model.num_heads % par.tensor != 0 {
            cx.report(
                DiagKind::Domain,
                &tpath,
                &at(&tpath),
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
                &at(&ppath),
                format!(
                    "moe_tensor x moe_expert ({} x {}) must equal tensor x attention_data ({} x {}): experts are spread over the same GPUs",
                    par.moe_tensor, par.moe_expert, par.tensor, par.attention_data
                ),
            );
        }
        if !cx.diags.is_empty() {
            continue;
        }
        let (memory_fraction, graphs) = match role.kv_cache.capacity {
            Capacity::Default { memory_fraction, cuda_graph_reserved_bytes } => {
                (memory_fraction, cuda_graph_reserved_bytes)
            }
            Capacity::FixedBlocks(_) | Capacity::FixedBytes(_) => (Some(0.9), 0),
        };
        // SGLang sizes its chunk and CUDA graphs by the GPU, and from 0.5.3 its memory
        // fraction too (from the chunk, the graphs and the layout).
        let sglang_tp = par.tensor * par.attention_data;
        let sglang_gpu = memory::sglang_gpu_defaults(
            hw.hbm_bytes,
            sglang_tp,
            crate::decode::engine::sglang_since_0_5_3(engine.backend_version.as_deref()),
        );
        let sglang_chunk = role.scheduler.chunked_prefill_size.unwrap_or(sglang_gpu.chunked_prefill_size);
        let mut config = role.clone();
        // Under attention DP each rank takes its share of the chunk (SGLang divides
        // `chunked_prefill_size` by `dp_size`).
        config.scheduler.sglang.chunked_prefill_size = (sglang_chunk / par.attention_data.max(1)).max(1);
        let memory_fraction = memory_fraction.unwrap_or_else(|| {
            memory::sglang_default_fraction(&SglangReserve {
                hbm_bytes: hw.hbm_bytes,
                chunked_prefill_tokens: sglang_chunk,
                tp_size: sglang_tp,
                pipeline: par.pipeline,
                attention_data: par.attention_data,
                draft_mib: sglang_draft_mib(&engine.speculation),
            })
        });
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
                // SGLang's steps take its chunk, not `max_batched_tokens`.
                max_batched_tokens: if engine.backend == Backend::Sglang {
                    config.scheduler.sglang.chunked_prefill_size
                } else {
                    role.scheduler.max_batched_tokens
                },
                block_size: role.kv_cache.block_size,
                cuda_graph_reserved_bytes: graphs,
            },
        )
        .map_err(|e| ScenarioError::Resource { message: format!("{name} workers: {}", e.message) })?;
        if let Some(b) = role.kv_cache.bytes_per_token {
            memory.kv_bytes_per_token = b;
            memory.kv_tokens = memory.kv_cache_bytes / b;
            memory.kv_blocks = memory.kv_tokens / u64::from(role.kv_cache.block_size);
        }
        let block = u64::from(role.kv_cache.block_size);
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
                match perfdata::load_fpm(files, &src.parquet_path, src.cell_id.as_deref(), &want) {
                    Ok(m) => RoleTiming::Fpm(Rc::new(m)),
                    Err(message) => {
                        cx.report(DiagKind::Domain, &at, &src.origin, message);
                        continue;
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
                let db = perfdata::load(files, &hw.id, backend, &version, default)?;
                let own = |f: Family| f != Family::Nccl && db.table_version(f) == version;
                if version != default && !db.families().any(own) && db.families().next().is_some() {
                    // A version the data holds nothing of (a typo, or not imported) would
                    // silently be timed as the default release.
                    cx.report(
                        DiagKind::Domain,
                        "engine.backend_version",
                        &at("engine.backend_version"),
                        format!(
                            "no kernel tables for {backend} {version} on {}; the data holds {default} \
                             (omit backend_version to use it, or import other versions with `servesim data \
                             import-aic --version {backend}={version}` and pass --data-dir)",
                            hw.id
                        ),
                    );
                    continue;
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
                            Backend::Vllm => GraphPolicy::vllm(role.scheduler.max_sequences),
                            Backend::Sglang => GraphPolicy::sglang(sglang_gpu.cuda_graph_max_bs),
                            Backend::TrtLlm => GraphPolicy::trtllm(),
                        },
                        draft_layers: engine.speculation.draft_layers(),
                        constants: {
                            let mut c = OpConstants::for_backend(backend);
                            if !role.scheduler.async_scheduling {
                                c.host_s_per_step = servesim_perf::oplevel::SYNC_HOST_S_PER_STEP;
                                c.host_s_per_sequence = servesim_perf::oplevel::SYNC_HOST_S_PER_SEQUENCE;
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
                            c
                        },
                    }),
                    db: Rc::new(db),
                }
            }
        };
        roles.push(PreparedRole {
            name,
            config,
            hardware: hw.clone(),
            parallelism,
            memory,
            blocks_per_rank: u32::try_from(blocks).unwrap_or(u32::MAX),
            timing,
        });
    }
    if !cx.diags.is_empty() {
        return Err(config_error(source, cx.diags));
    }
    if let [p, d] = &roles[..] {
        if p.config.kv_cache.block_size != d.config.kv_cache.block_size {
            let path = "engine.workers.decode.kv_cache.block_size";
            cx.report(
                DiagKind::Domain,
                path,
                &at(path),
                "prefill and decode pools must use the same KV block size",
            );
            return Err(config_error(source, cx.diags));
        }
    }
    // The decode (or aggregated) role's KV capacity sizes kv_capacity_fraction loads.
    let Some(load_role) = roles.last() else {
        return Err(ScenarioError::Run { message: "no worker role".into() });
    };
    let kv_tokens = u64::from(load_role.blocks_per_rank) * u64::from(load_role.config.kv_cache.block_size);
    let ranks = load_role.parallelism.attention_data * load_role.config.parallelism.replicas;
    let traffic = build_traffic(&config, root, source, files, kv_tokens, ranks)?;
    let context_limit = match engine.context_length {
        ContextLength::Tokens(n) => Some(n),
        ContextLength::Max => u32::try_from(model.max_position_embeddings).ok(),
    };
    // The serving frontend sits in front of the first role (prefill in P/D).
    let frontend_delay = match config.engine.workers.roles().first() {
        Some((_, r)) => SimDur::from_secs_f64(r.timing.frontend_ms.map_or_else(
            || OpConstants::for_backend(config.engine.backend.name()).frontend_s,
            |ms| ms / 1e3,
        )),
        None => SimDur::ZERO,
    };
    Ok(Prepared {
        seed: seed.unwrap_or(config.traffic.load.seed),
        model: model.clone(),
        roles,
        gemm_dtype,
        kv_dtype,
        limits: Limits {
            max_sim_time: config
                .traffic
                .stop
                .max_virtual_time_seconds
                .map_or(SimTime::MAX, |s| SimTime::ZERO + SimDur::from_secs_f64(s)),
            ..Limits::default()
        },
        traffic,
        context_limit,
        config,
        fast_forward: true,
        frontend_delay,
    })
}

/// Reads and parses every trace file of a trace source.
/// The memory SGLang reserves for a speculative draft when it derives its memory fraction,
/// MiB: 2,048 for EAGLE and MTP draft layers ("eagle draft models and cuda graphs" in
/// `_handle_gpu_memory_settings`), none for n-gram lookup.
fn sglang_draft_mib(speculation: &SpeculationConfig) -> f64 {
    match speculation {
        SpeculationConfig::DraftLayers { .. } => 2048.0,
        SpeculationConfig::Off | SpeculationConfig::Ngram { .. } => 0.0,
    }
}

fn load_traces(
    paths: &[(String, Origin)],
    format: TraceFormatConfig,
    block_size: u32,
    files: &dyn Files,
    source: &str,
    timestamps_needed: bool,
) -> Result<Trace, ScenarioError> {
    let mut rows = Vec::new();
    let mut sessions = 0u32;
    let mut diags = Vec::new();
    for (i, (path, origin)) in paths.iter().enumerate() {
        let at = format!("traffic.source.paths[{i}]");
        let bytes = match files.read(path) {
            Ok(b) => b,
            Err(m) => {
                diags.push(Diagnostic {
                    path: at,
                    origin: origin.clone(),
                    message: m,
                    kind: DiagKind::Domain,
                });
                continue;
            }
        };
        let fmt = match format {
            TraceFormatConfig::Mooncake => TraceFormat::Mooncake,
            TraceFormatConfig::AzureCsv => TraceFormat::AzureCsv,
        };
        match servesim_data::trace::parse(&bytes, path, fmt, block_size) {
            Ok(parsed) => {
                if let (true, Some(line)) = (timestamps_needed, parsed.untimed_line) {
                    diags.push(Diagnostic {
                        path: at,
                        origin: origin.clone(),
                        message: format!("{path}:{line}: a request that starts a job has no timestamp, so load type trace_timestamps cannot place it (use load type concurrency, or add timestamps)"),
                        kind: DiagKind::Domain,
                    });
                    continue;
                }
                // Files are replayed as if started together; their sessions stay apart.
                let offset = sessions;
                let mut max_session = 0;
                for mut r in parsed.trace.rows {
                    if let Some(s) = r.session.as_mut() {
                        *s += offset;
                        max_session = max_session.max(*s + 1);
                    }
                    rows.push(r);
                }
                sessions = sessions.max(max_session);
            }
            Err(e) => diags.push(Diagnostic {
                path: at,
                origin: origin.clone(),
                message: e.to_string(),
                kind: DiagKind::Domain,
            }),
        }
    }
    if !diags.is_empty() {
        return Err(config_error(source, diags));
    }
    Ok(Trace::new(rows, block_size))
}

/// The arrival process of a config. `kv_tokens` is one rank's KV capacity in tokens and
/// `kv_ranks` the number of ranks across replicas (for `kv_capacity_fraction`).
fn build_traffic(
    config: &Config,
    root: &Node,
    source: &str,
    files: &dyn Files,
    kv_tokens: u64,
    kv_ranks: u32,
) -> Result<TrafficSpec, ScenarioError> {
    let t = &config.traffic;
    let (src, per_job_tokens) = match &t.source {
        SourceConfig::Synthetic { input_tokens, output_tokens, shared_prefix_tokens } => (
            Source::Synthetic {
                input_tokens: input_tokens.clone(),
                output_tokens: output_tokens.clone(),
                shared_prefix_tokens: *shared_prefix_tokens,
            },
            input_tokens.nominal_mean() + output_tokens.nominal_mean(),
        ),
        SourceConfig::Session {
            new_input_tokens_per_turn,
            output_tokens_per_turn,
            turns,
            shared_prefix_ratio,
            prefix_groups,
            inter_turn_delay_ms,
        } => (
            Source::Sessions(SessionSpec {
                new_input_tokens: new_input_tokens_per_turn.clone(),
                output_tokens: output_tokens_per_turn.clone(),
                turns: *turns,
                shared_prefix_ratio: *shared_prefix_ratio,
                prefix_groups: *prefix_groups,
                think_time: SimDur::from_ms_f64(*inter_turn_delay_ms),
            }),
            f64::from(*turns)
                * (new_input_tokens_per_turn.nominal_mean() + output_tokens_per_turn.nominal_mean()),
        ),
        SourceConfig::Trace { paths, format, block_size } => {
            let needs_timestamps = matches!(t.load.kind, LoadKind::TraceTimestamps { .. });
            (
                Source::Trace(Arc::new(load_traces(
                    paths,
                    *format,
                    *block_size,
                    files,
                    source,
                    needs_timestamps,
                )?)),
                0.0,
            )
        }
    };
    let load = match t.load.kind {
        LoadKind::Concurrency(c) => Load::Concurrency(c),
        LoadKind::Poisson(r) => Load::Poisson(r),
        LoadKind::ConstantRate(r) => Load::ConstantRate(r),
        LoadKind::Gamma { rate, cv } => Load::Gamma { rate, cv },
        LoadKind::TraceTimestamps { speedup } => Load::TraceTimestamps { speedup },
        LoadKind::KvCapacityFraction(fraction) => {
            // 1.0 = concurrency whose KV working set (prompt + output per request) fills the
            // usable KV capacity of every rank of every replica (REF §1.1).
            #[allow(clippy::cast_precision_loss)]
            let total = kv_tokens as f64 * f64::from(kv_ranks);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let c = libm::round(fraction * total / per_job_tokens.max(1.0)).clamp(1.0, 1e6) as u32;
            Load::Concurrency(c)
        }
    };
    let load_unit = match load {
        Load::Concurrency(c) => f64::from(c),
        Load::Poisson(r) | Load::ConstantRate(r) | Load::Gamma { rate: r, .. } => r,
        Load::TraceTimestamps { .. } => 1.0,
    };
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let per_unit = |k: f64| libm::round(k * load_unit).clamp(1.0, 1e7) as u32;
    let stop_node = root.get("traffic").and_then(|n| n.get("stop"));
    if matches!(load, Load::TraceTimestamps { .. })
        && (t.stop.requests_per_load_unit.is_some() || t.stop.sessions_per_load_unit.is_some())
    {
        let origin = stop_node.map_or(Origin::Builtin, |n| n.origin.clone());
        return Err(config_error(
            source,
            vec![Diagnostic {
                path: "traffic.stop".into(),
                origin,
                message:
                    "*_per_load_unit needs a load unit (concurrency or a rate); trace_timestamps has none"
                        .into(),
                kind: DiagKind::Domain,
            }],
        ));
    }
    let max_requests = match (&src, t.stop.requests, t.stop.requests_per_load_unit) {
        (_, Some(n), _) => n,
        (_, None, Some(k)) => per_unit(k),
        // A trace replays whole unless told otherwise; sessions stop on their own rule.
        (Source::Trace(_), None, None) => u32::MAX,
        (Source::Sessions(_), None, None)
            if t.stop.sessions.is_some() || t.stop.sessions_per_load_unit.is_some() =>
        {
            u32::MAX
        }
        (_, None, None) => 100,
    };
    let max_sessions = match (t.stop.sessions, t.stop.sessions_per_load_unit) {
        (Some(n), _) => n,
        (None, Some(k)) => per_unit(k),
        (None, None) => u32::MAX,
    };
    Ok(TrafficSpec {
        source: src,
        load,
        stop: Stop { max_requests, max_sessions },
        all_content_shared: false,
    })
}

impl Prepared {
    /// GPUs the deployment uses.
    #[must_use]
    pub fn gpus(&self) -> u32 {
        self.roles.iter().map(PreparedRole::gpus).sum()
    }

    /// Whether prefill and decode run on separate pools.
    #[must_use]
    pub fn disaggregated(&self) -> bool {
        self.roles.len() == 2
    }

    fn router(&self, decode: bool) -> Router {
        let rng = || servesim_core::rng::Rng::stream(self.seed, servesim_core::rng::Stream::Routing);
        match self.config.router.policy {
            RouterPolicy::RoundRobin => Router::round_robin(),
            RouterPolicy::LeastLoaded => Router::LeastLoaded,
            RouterPolicy::SessionAffinity => {
                Router::SessionAffinity { homes: std::collections::BTreeMap::new() }
            }
            RouterPolicy::KvAware(mut cfg) => {
                // Decode routers are overlap-blind: the prompt's KV arrives with the request.
                if decode {
                    cfg.overlap_score_credit = 0.0;
                }
                Router::KvAware { cfg, rng: rng() }
            }
        }
    }

    /// The serving processes' work in front of each replica of `role`: its `frontend` block,
    /// with the engine's calibrated costs where it leaves them out. Disaggregated roles have
    /// none (their frontend is the P/D router's, which is not simulated as a queue).
    #[must_use]
    pub fn frontend_spec(&self, role: &PreparedRole) -> FrontendSpec {
        if self.disaggregated() {
            return FrontendSpec::default();
        }
        let f = role.config.frontend;
        let c = OpConstants::for_backend(self.config.engine.backend.name());
        let request_s = f.request_ms.map_or(c.frontend_request_s, |ms| ms / 1e3);
        let chunk_s = f.chunk_us.map_or(c.frontend_chunk_s, |us| us / 1e6);
        // A chunk carries `stream_interval` tokens of one request: its work is spread over them.
        FrontendSpec::new(
            f.processes,
            SimDur::from_secs_f64(request_s),
            SimDur::from_secs_f64(chunk_s / f64::from(f.stream_interval.max(1))),
        )
    }

    /// A fresh step timer for `role` (one of `self.roles`).
    #[must_use]
    pub fn timer(&self, role: &PreparedRole) -> Box<dyn StepTimer> {
        match &role.timing {
            RoleTiming::OpLevel { setup, db } => Box::new(OpLevelTimer::new((**setup).clone(), db.clone())),
            RoleTiming::Fpm(m) => Box::new(FpmTimer::new(m.clone())),
            RoleTiming::Roofline => Box::new(
                RooflineTimer::new(
                    self.model.clone(),
                    role.hardware.clone(),
                    role.parallelism,
                    self.gemm_dtype,
                    self.kv_dtype,
                )
                .with_draft_layers(self.config.engine.speculation.draft_layers()),
            ),
        }
    }

    /// The engine's speculative decoding, its acceptance draws keyed by the run's seed (MTP,
    /// EAGLE) or by the n-gram block's own `seed`, as in AISimulate.
    #[must_use]
    pub fn speculation(&self) -> Speculation {
        use servesim_core::rng::{Rng, Stream};
        match &self.config.engine.speculation {
            SpeculationConfig::Off => Speculation::default(),
            SpeculationConfig::DraftLayers { nextn, accepted } => Speculation::mean_accepted(
                *nextn,
                *accepted,
                Rng::stream(self.seed, Stream::Acceptance).next_u64(),
            ),
            SpeculationConfig::Ngram { rates, seed } => {
                Speculation::conditional(rates, Rng::stream(*seed, Stream::Acceptance).next_u64())
            }
        }
    }

    /// Builds the simulation, ready to run.
    #[must_use]
    pub fn start(&self) -> Simulation {
        let backend = self.config.engine.backend;
        let mut workers: Vec<Worker> = Vec::new();
        let mut timers: Vec<Box<dyn StepTimer>> = Vec::new();
        for (ti, role) in self.roles.iter().enumerate() {
            let rc = &role.config;
            let cfg = SchedulerConfig {
                backend,
                max_batched_tokens: rc.scheduler.max_batched_tokens,
                max_sequences: rc.scheduler.max_sequences,
                chunked_prefill: self.config.engine.enable_chunked_prefill,
                prefill_schedule_interval: rc.scheduler.prefill_schedule_interval,
                sglang: rc.scheduler.sglang,
                batch_wait: rc.scheduler.batch_wait,
                frontend: self.frontend_spec(role),
                speculation: self.speculation(),
            };
            for _ in 0..rc.parallelism.replicas {
                let ranks = make_ranks(
                    role.parallelism.attention_data,
                    role.blocks_per_rank,
                    rc.kv_cache.block_size,
                    rc.kv_cache.prefix_caching,
                    backend == servesim_core::engine::Backend::Sglang,
                );
                #[allow(clippy::cast_possible_truncation)] // Worker counts are small.
                let id = workers.len() as u32;
                workers.push(Worker::new(id, cfg.clone(), ranks, ti));
            }
            timers.push(self.timer(role));
        }
        let fleet = match &self.roles[..] {
            [p, d] => Fleet {
                prefill_workers: p.config.parallelism.replicas,
                prefill_gpus_per_worker: p.parallelism.gpus(),
                decode_workers: d.config.parallelism.replicas,
                decode_gpus_per_worker: d.parallelism.gpus(),
            },
            [a, ..] => Fleet {
                prefill_workers: 0,
                prefill_gpus_per_worker: 0,
                decode_workers: a.config.parallelism.replicas,
                decode_gpus_per_worker: a.parallelism.gpus(),
            },
            [] => Fleet::default(),
        };
        let pd = match &self.roles[..] {
            [p, d] => {
                let t = self.config.engine.kv_transfer;
                // `auto`: one TP shard of the prefill role (each TP rank moves its shard over
                // its own link in parallel).
                #[allow(clippy::cast_precision_loss)]
                let bytes_per_token = t.bytes_per_token.unwrap_or(p.memory.kv_bytes_per_token) as f64;
                let np = p.config.parallelism.replicas as usize;
                let nd = d.config.parallelism.replicas as usize;
                Some(PdSetup {
                    prefill_workers: np,
                    decode_router: self.router(true),
                    net: TransferNet::new(t.bandwidth_gb_per_second.map(|g| g * 1e9), t.link_sharing, np, nd),
                    destination_first: backend == servesim_core::engine::Backend::Sglang,
                    bytes_per_token,
                    missing_only: t.timing_mode == TransferMode::DestinationMissing,
                })
            }
            _ => None,
        };
        let block_size = self.roles.first().map_or(1, |r| r.config.kv_cache.block_size);
        let setup = SimSetup {
            seed: self.seed,
            traffic: self.traffic.clone(),
            workers,
            router: self.router(false),
            block_size,
            limits: self.limits,
            // 100 ms to start; the series halves its resolution as the run grows.
            sample_interval: SimDur::from_ms(100),
            sla: self.config.evaluation.sla,
            fleet,
            context_limit: self.context_limit,
            fast_forward: self.fast_forward,
            frontend_delay: self.frontend_delay,
            pd,
        };
        Simulation::new(setup, timers)
    }

    /// Runs a stopped simulation's results into a prediction.
    #[must_use]
    pub fn finish(&self, sim: Simulation) -> Prediction {
        report::build(self, sim.into_result())
    }

    /// Runs the scenario to completion.
    ///
    /// # Errors
    /// [`ScenarioError::Run`] when the simulation fails.
    pub fn run(&self) -> Result<Prediction, ScenarioError> {
        let mut sim = self.start();
        sim.run().map_err(|e| ScenarioError::Run { message: e.to_string() })?;
        Ok(self.finish(sim))
    }
}

/// Parses, validates, prepares and runs config text in one call.
///
/// # Errors
/// Any [`ScenarioError`].
pub fn predict(
    text: &str,
    source: &str,
    overrides: &[Override],
    seed: Option<u64>,
    files: &dyn Files,
) -> Result<Prediction, ScenarioError> {
    let catalog = Catalog::builtin().map_err(|e| ScenarioError::Run { message: e.to_string() })?;
    let root = parse_with_overrides(text, source, overrides)?;
    prepare(&root, source, &catalog, seed, files)?.run()
}

/// [`predict`] with a catalog the caller already holds (sweeps and validation run many).
///
/// # Errors
/// As [`predict`].
pub fn predict_with_catalog(
    text: &str,
    source: &str,
    catalog: &Catalog,
    files: &dyn Files,
) -> Result<Prediction, ScenarioError> {
    let root = parse_with_overrides(text, source, &[])?;
    prepare(&root, source, catalog, None, files)?.run()
}
