//! From config text to a runnable simulation and back to a report: the one pipeline the CLI,
//! the browser worker and the tests all share, so they give the same numbers. Each role is
//! resolved in `role`, the arrival process built in `traffic`.

use std::fmt;
use std::rc::Rc;

use servesim_core::engine::{SchedulerConfig, Speculation};
use servesim_core::frontend::FrontendSpec;
use std::cell::RefCell;

use servesim_core::host::HostPool;
use servesim_core::kv::belady::{DemandOracle, SharedOracle};
use servesim_core::metrics::Fleet;
use servesim_core::planner::{PlannerSpec, PoolRole, PoolSpec};
use servesim_core::router::Router;
use servesim_core::sim::{Limits, PdSetup, PlannerSetup, RankTemplate, SimSetup, Simulation};
use servesim_core::timing::StepTimer;
use servesim_core::traffic::TrafficSpec;
use servesim_core::transfer::TransferNet;
use servesim_core::units::{SimDur, SimTime};
use servesim_core::worker::Worker;
use servesim_perf::draft::DraftModelTimer;
use servesim_perf::fpm::{FpmModel, FpmTimer};
use servesim_perf::memory::{MemoryPlan, Parallelism};
use servesim_perf::oplevel::{OpConstants, OpLevelSetup, OpLevelTimer, PerfDb};
use servesim_perf::roofline::RooflineTimer;
use servesim_perf::spec::{Dtype, GemmQuant, Hardware, ModelArch, MoeQuant};

use crate::catalog::Catalog;
use crate::config::{
    Config, ContextLength, KvEvictionPolicy, RoleConfig, RouterPolicy, SpeculationConfig, TransferMode,
};
use crate::diag::{Cx, DiagKind, Diagnostic};
use crate::node::{self, Node, Origin};
use crate::report::{self, Prediction};

mod role;
mod state;
mod tiers;
mod traffic;

pub use state::StatePlan;

use role::RoleEnv;
use traffic::build_traffic;

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
    /// The step budget per attention-DP rank, in tokens: the config's `max_batched_tokens`, the
    /// engine's default for the GPU, or for SGLang its per-rank chunk.
    pub max_batched_tokens: u32,
    /// Requests one attention-DP rank runs at once: the config's `max_sequences` or the
    /// engine's default (vLLM by GPU, TensorRT-LLM 2,048, SGLang from its KV pool).
    pub max_sequences: u32,
    /// The memory fraction the plan used: the config's, or the engine's default for its
    /// release and GPU. `None` for a cache of fixed size.
    pub memory_fraction: Option<f64>,
    /// KV blocks (tokens for SGLang) per attention-DP rank.
    pub blocks_per_rank: u32,
    /// How its steps are timed.
    pub timing: RoleTiming,
    /// A hybrid model's recurrent state on these workers (`None` without linear attention).
    pub state: Option<StatePlan>,
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

    /// KV tokens one rank's pool holds.
    #[must_use]
    pub fn kv_tokens_per_rank(&self) -> u64 {
        u64::from(self.blocks_per_rank) * u64::from(self.config.kv_cache.block_size)
    }

    /// Ranks of the whole role: attention-DP ranks over all replicas.
    #[must_use]
    pub fn ranks(&self) -> u32 {
        self.parallelism.attention_data * self.config.parallelism.replicas
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
    /// The draft model of draft-model speculation.
    pub draft: Option<ModelArch>,
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

/// Where `path` (or its nearest present parent) was written in the config.
fn origin_of(root: &Node, path: &str) -> Origin {
    let mut n = root;
    for part in path.split('.') {
        match n.get(part) {
            Some(c) => n = c,
            None => break,
        }
    }
    n.origin.clone()
}

/// The draft model of draft-model speculation, from the catalog: one that shares the target's
/// vocabulary (its drafts are the target's tokens), on workers without pipeline parallelism.
fn draft_model<'a>(
    engine: &crate::config::EngineConfig,
    model: &ModelArch,
    catalog: &'a Catalog,
    root: &Node,
    cx: &mut Cx,
) -> Option<&'a ModelArch> {
    let id = engine.speculation.draft_model()?;
    let path = "engine.speculation.model";
    let Some(d) = catalog.model(id) else {
        cx.report(DiagKind::Domain, path, &origin_of(root, path), catalog.unknown_model("draft model", id));
        return None;
    };
    if d.vocab_size != model.vocab_size {
        cx.report(
            DiagKind::Domain,
            path,
            &origin_of(root, path),
            format!(
                "the draft model {} has a vocabulary of {} tokens and {} one of {}: a draft model must share the target's tokenizer",
                d.id, d.vocab_size, model.id, model.vocab_size
            ),
        );
        return None;
    }
    for (name, role) in engine.workers.roles() {
        if role.parallelism.pipeline > 1 {
            let p = format!("engine.workers.{name}.parallelism.pipeline");
            cx.report(
                DiagKind::Domain,
                &p,
                &origin_of(root, &p),
                "draft-model speculation is simulated without pipeline parallelism",
            );
            return None;
        }
    }
    Some(d)
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
                cx.report(DiagKind::Domain, "engine.model", origin, catalog.unknown_model("model", id));
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
    let at = |path: &str| origin_of(root, path);
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
    let draft = draft_model(engine, model, catalog, root, &mut cx);
    let env = RoleEnv {
        root,
        catalog,
        files,
        engine,
        model,
        draft,
        hardware,
        gemm_quant,
        moe_quant,
        gemm_dtype,
        kv_dtype,
    };
    let mut roles = Vec::new();
    for (name, role) in engine.workers.roles() {
        if let Some(r) = role::prepare_role(&env, &mut cx, name, role)? {
            roles.push(r);
        }
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
    if let Some(pc) = &config.planner {
        check_planner(pc, &roles, root, &mut cx);
        if !cx.diags.is_empty() {
            return Err(config_error(source, cx.diags));
        }
    }
    // The decode (or aggregated) role's KV capacity sizes kv_capacity_fraction loads.
    let Some(load_role) = roles.last() else {
        return Err(ScenarioError::Run { message: "no worker role".into() });
    };
    let kv_tokens = load_role.kv_tokens_per_rank();
    let ranks = load_role.ranks();
    let kv_block = load_role.config.kv_cache.block_size;
    let traffic = build_traffic(&config, root, source, files, (kv_tokens, kv_block), ranks)?;
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
        draft: draft.cloned(),
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

/// The planner's pools must start within its GPU budget and at their minimum size.
fn check_planner(pc: &crate::config::PlannerConfig, roles: &[PreparedRole], root: &Node, cx: &mut Cx) {
    let at = |path: &str| origin_of(root, path);
    let initial: u32 = roles.iter().map(|r| r.config.parallelism.replicas * r.parallelism.gpus()).sum();
    if initial > pc.max_gpus {
        let path = "planner.max_num_gpus";
        cx.report(
            DiagKind::Domain,
            path,
            &at(path),
            format!(
                "({}) is below the {initial} GPUs the configured workers start with; raise it or \
                 start with fewer replicas",
                pc.max_gpus
            ),
        );
    }
    for role in roles {
        let name = role.name;
        let min = pc.min_workers_of(name);
        let replicas = role.config.parallelism.replicas;
        if replicas < min {
            let path = format!("engine.workers.{name}.parallelism.replicas");
            cx.report(
                DiagKind::Domain,
                &path,
                &at(&path),
                format!("({replicas}) is below the planner's minimum of {min} workers for this pool"),
            );
        }
    }
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
                    cfg.host_cache_hit_weight = 0.0;
                    cfg.disk_cache_hit_weight = 0.0;
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
        let prompt_token_s = f.prompt_token_us.map_or(c.frontend_prompt_token_s, |us| us / 1e6);
        // A chunk carries `stream_interval` tokens of one request: its work is spread over them.
        FrontendSpec::new(
            f.processes,
            SimDur::from_secs_f64(request_s),
            SimDur::from_secs_f64(chunk_s / f64::from(f.stream_interval.max(1))),
        )
        .with_prompt_token(SimDur::from_secs_f64(prompt_token_s))
    }

    /// Belady eviction's forecast for one run (`None` under LRU): every request the traffic
    /// will send, generated up front, with its prompt blocks at the engine's block size.
    fn eviction_oracle(&self) -> Option<SharedOracle> {
        if self.config.engine.kv_eviction_policy != KvEvictionPolicy::Belady {
            return None;
        }
        let block_size = self.roles.first().map_or(1, |r| r.config.kv_cache.block_size);
        Some(Rc::new(RefCell::new(DemandOracle::for_traffic(
            &self.traffic,
            self.seed,
            self.frontend_delay,
            block_size,
        ))))
    }

    /// Whether `role`'s engine plans each step while the one before it runs
    /// (`scheduler.plan_ahead`; by default vLLM's async scheduling).
    #[must_use]
    pub fn plans_ahead(&self, role: &PreparedRole) -> bool {
        let s = &role.config.scheduler;
        s.plan_ahead.unwrap_or(
            s.async_scheduling && self.config.engine.backend == servesim_core::engine::Backend::Vllm,
        )
    }

    /// A fresh step timer for `role` (one of `self.roles`): with draft-model speculation, the
    /// target's verify steps plus the draft model's passes, timed the same way.
    #[must_use]
    pub fn timer(&self, role: &PreparedRole) -> Box<dyn StepTimer> {
        let target = self.model_timer(role);
        match (&self.draft, &self.config.engine.speculation) {
            (Some(d), SpeculationConfig::DraftModel { rates, .. }) => {
                let draft = self.draft_timer(role, d);
                #[allow(clippy::cast_possible_truncation)] // At most MAX_DRAFT_TOKENS.
                Box::new(DraftModelTimer::new(target, draft, rates.len() as u32))
            }
            _ => target,
        }
    }

    /// The draft model's own timer on `role`'s GPUs: its shapes over the same kernel tables,
    /// without the serving processes' and host's per-step costs the target's steps carry.
    fn draft_timer(&self, role: &PreparedRole, draft: &ModelArch) -> Box<dyn StepTimer> {
        match &role.timing {
            RoleTiming::OpLevel { setup, db } => {
                let mut s = (**setup).clone();
                s.model = draft.clone();
                s.gemm = draft.gemm_quant;
                s.moe = draft.moe_quant;
                s.draft_layers = 0;
                s.constants = s.constants.kernels_only();
                Box::new(OpLevelTimer::new(s, db.clone()))
            }
            // FPM roles never speculate (refused at validation); roofline times the draft as
            // it times the target.
            RoleTiming::Roofline | RoleTiming::Fpm(_) => Box::new(RooflineTimer::new(
                draft.clone(),
                role.hardware.clone(),
                role.parallelism,
                draft.gemm_quant.dtype(),
                self.kv_dtype,
            )),
        }
    }

    /// A fresh step timer for `role`'s own model.
    fn model_timer(&self, role: &PreparedRole) -> Box<dyn StepTimer> {
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
            SpeculationConfig::Ngram { rates, seed } | SpeculationConfig::DraftModel { rates, seed, .. } => {
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
        let mut pools = Vec::new();
        let mut templates = Vec::new();
        let eviction = self.eviction_oracle();
        for (ti, role) in self.roles.iter().enumerate() {
            let rc = &role.config;
            let cfg = SchedulerConfig {
                backend,
                max_batched_tokens: role.max_batched_tokens,
                max_sequences: role.max_sequences,
                chunked_prefill: self.config.engine.enable_chunked_prefill,
                prefill_schedule_interval: rc.scheduler.prefill_schedule_interval,
                sglang: rc.scheduler.sglang,
                batch_wait: rc.scheduler.batch_wait,
                adp_balance: rc.scheduler.adp_balance,
                frontend: self.frontend_spec(role),
                speculation: self.speculation(),
                plan_ahead: self.plans_ahead(role),
            };
            let template = RankTemplate {
                dp: role.parallelism.attention_data,
                blocks_per_rank: role.blocks_per_rank,
                block_size: rc.kv_cache.block_size,
                prefix_caching: rc.kv_cache.prefix_caching,
                radix: backend == servesim_core::engine::Backend::Sglang,
                host: self.host_spec(role),
                // A fresh shared pool for this run.
                host_pool: self.host_pool_spec(role).map(HostPool::shared),
                g3: self.g3_attach(role),
                prefetch: self.prefetch_spec(role),
                eviction: eviction.clone(),
                state_blocks: role.state.as_ref().map_or(0, |s| s.blocks_per_sequence),
                radix_states: role
                    .state
                    .as_ref()
                    .map(|s| s.slots.map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX))),
            };
            let first_slot = workers.len();
            let slots = self.slots(role);
            for k in 0..slots {
                // Slots beyond the configured replicas get their ranks when the planner starts them.
                let ranks = if k < rc.parallelism.replicas as usize { template.build() } else { Vec::new() };
                #[allow(clippy::cast_possible_truncation)] // Worker counts are small.
                let id = workers.len() as u32;
                workers.push(Worker::new(id, cfg.clone(), ranks, ti));
            }
            if let Some(pc) = &self.config.planner {
                let name = role.name;
                pools.push(PoolSpec {
                    role: match name {
                        "prefill" => PoolRole::Prefill,
                        "decode" => PoolRole::Decode,
                        _ => PoolRole::Aggregated,
                    },
                    first_slot,
                    slots,
                    initial: rc.parallelism.replicas as usize,
                    min_workers: pc.min_workers_of(name) as usize,
                    gpus_per_worker: role.parallelism.gpus(),
                    startup: SimDur::from_secs_f64(rc.startup_seconds),
                });
                templates.push(template);
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
                let (np, nd) = (self.slots(p), self.slots(d));
                Some(PdSetup {
                    prefill_workers: np,
                    decode_router: self.router(true),
                    net: TransferNet::new(t.bandwidth_gb_per_second.map(|g| g * 1e9), t.link_sharing, np, nd),
                    destination_first: backend == servesim_core::engine::Backend::Sglang,
                    bytes_per_token,
                    // A hybrid model's recurrent state moves with the KV (one GPU's share, as
                    // the KV's bytes are).
                    #[allow(clippy::cast_precision_loss)] // State sizes are far below 2^53 bytes.
                    state_bytes: p.state.as_ref().map_or(0.0, |s| s.bytes_per_sequence as f64),
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
            planner: self.config.planner.map(|pc| PlannerSetup {
                spec: PlannerSpec {
                    interval: SimDur::from_secs_f64(pc.interval_seconds),
                    window: pc.window as usize,
                    min_observations: pc.min_observations as usize,
                    down_sensitivity: pc.down_sensitivity_pct / 100.0,
                    ttft_target_ms: self.planner_targets().0,
                    itl_target_ms: self.planner_targets().1,
                    max_gpus: pc.max_gpus,
                    min_gpus: pc.min_gpus.unwrap_or(0),
                    pools,
                },
                ranks: templates,
            }),
        };
        Simulation::new(setup, timers)
    }

    /// Worker slots of `role`: its replicas, or as many workers as the planner's GPU budget
    /// holds when it scales the pool and the other pool keeps its minimum.
    #[must_use]
    pub fn slots(&self, role: &PreparedRole) -> usize {
        let replicas = role.config.parallelism.replicas as usize;
        let Some(pc) = &self.config.planner else { return replicas };
        let others: u32 = self
            .roles
            .iter()
            .filter(|r| r.name != role.name)
            .map(|r| pc.min_workers_of(r.name) * r.parallelism.gpus())
            .sum();
        replicas.max((pc.max_gpus.saturating_sub(others) / role.parallelism.gpus().max(1)) as usize)
    }

    /// The TTFT and ITL (ms) the planner's regressions aim at: the SLA's, else Dynamo's
    /// planner defaults (500 ms, 50 ms; `SLAPlannerDefaults` in `planner/defaults.py`).
    #[must_use]
    pub fn planner_targets(&self) -> (f64, f64) {
        let sla = &self.config.evaluation.sla;
        (sla.ttft_ms.unwrap_or(500.0), sla.itl_ms.unwrap_or(50.0))
    }

    /// Runs a stopped simulation's results into a prediction.
    #[must_use]
    pub fn finish(&self, sim: Simulation) -> Prediction {
        report::build(self, sim.into_result())
    }

    /// Runs the scenario to completion, with its uncertainty band's further replays when it
    /// asks for them ([`crate::uncertainty`]).
    ///
    /// # Errors
    /// [`ScenarioError::Run`] when a simulation fails.
    pub fn run(&self) -> Result<Prediction, ScenarioError> {
        let mut prediction = self.run_once()?;
        let others = (1..=crate::uncertainty::further_replays(self))
            .map(|k| crate::uncertainty::variant(self, k).run_once().map(|p| p.json))
            .collect::<Result<Vec<_>, _>>()?;
        crate::uncertainty::attach(&mut prediction.json, self, &others);
        Ok(prediction)
    }

    /// Runs the scenario to completion once, at its own seed (no uncertainty band).
    ///
    /// # Errors
    /// [`ScenarioError::Run`] when the simulation fails.
    pub fn run_once(&self) -> Result<Prediction, ScenarioError> {
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
