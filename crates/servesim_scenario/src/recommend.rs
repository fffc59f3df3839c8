//! `servesim recommend`: search deployments by replaying candidates in full.
//!
//! A recommend config is a prediction config with search domains in place of values
//! (`{choices: [...]}` or `{range: {min, max, step, scale}}`, REF §6), an `optimization`
//! block (target, GPU budget, SLA strictness) and optionally `parallelism: {preset: default}`
//! on a worker role (every feasible worker shape of 1, 2, 4, 8 or 16 GPUs with replicas up to
//! the budget). Every combination is materialised as a concrete prediction config and rejected
//! early when it cannot run (GPU budget, memory, topology) with a reason category. A small
//! search replays every other candidate; a large one ([`STAGED_ABOVE`], or
//! `optimizer.algorithm: staged`) runs in stages ([`search`]): the static estimate of every
//! candidate, short replays of the best (open loops only), full replays of the best of those.
//! Scores, the top-N and the Pareto front (output tok/s/GPU vs tok/s/user) always come from
//! full replays.
//!
//! Evaluation is independent per candidate, so callers run each stage's candidates in parallel
//! (the CLI on threads, the page on Web Workers) and hand the results to [`finish`].

use std::fmt::Write as _;

use serde_json::{json, Map, Value as Json};

use crate::catalog::Catalog;
use crate::node::{self, Node, Origin, Value};
use crate::scenario::{prepare, Files, ScenarioError};

/// Most candidates one search may materialise (an exhaustive search beyond this is a spec error).
pub const MAX_CANDIDATES: usize = 20_000;

/// Worker sizes `preset: default` tries (REF §6).
const PRESET_GPUS: [u32; 5] = [1, 2, 4, 8, 16];

/// What to optimise (`optimization.target`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Output tokens per second.
    Throughput,
    /// Output tokens per second per GPU.
    ThroughputPerGpu,
    /// Mean output tokens per second per user.
    ThroughputPerUser,
    /// Requests per second meeting the SLA.
    Goodput,
    /// Goodput per GPU.
    GoodputPerGpu,
    /// Lowest mean TTFT.
    Ttft,
    /// Lowest mean end-to-end latency.
    E2eLatency,
    /// Fewest GPUs meeting the SLA.
    MinGpus,
    /// Pareto front of (tok/s/GPU, tok/s/user).
    Pareto,
    /// Lowest cost per million output tokens (servesim extension; needs `gpu_hour_usd`).
    Cost,
}

impl Target {
    const NAMES: [(&'static str, Target); 10] = [
        ("throughput", Target::Throughput),
        ("throughput_per_gpu", Target::ThroughputPerGpu),
        ("throughput_per_user", Target::ThroughputPerUser),
        ("goodput", Target::Goodput),
        ("goodput_per_gpu", Target::GoodputPerGpu),
        ("ttft", Target::Ttft),
        ("e2e_latency", Target::E2eLatency),
        ("min_gpus", Target::MinGpus),
        ("pareto", Target::Pareto),
        ("cost", Target::Cost),
    ];

    /// The config name.
    #[must_use]
    pub fn name(self) -> &'static str {
        Target::NAMES.iter().find(|(_, t)| *t == self).map_or("pareto", |(n, _)| n)
    }

    fn needs_sla(self) -> bool {
        matches!(self, Target::Goodput | Target::GoodputPerGpu | Target::MinGpus)
    }
}

/// One searched value: where it goes and what it may be.
#[derive(Clone, Debug, PartialEq)]
pub struct Domain {
    /// Dotted path in the config.
    pub path: String,
    /// The values, in search order.
    pub values: Vec<Node>,
}

/// A parsed search.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The config without `optimization`/`optimizer`, domains still in place.
    pub base: Node,
    /// The searched values.
    pub domains: Vec<Domain>,
    /// `optimization.target` (default `pareto`).
    pub target: Target,
    /// `optimization.constraints.min_candidate_gpus` (1).
    pub min_gpus: u32,
    /// `optimization.constraints.max_candidate_gpus` (32).
    pub max_gpus: u32,
    /// `optimization.constraints.min_goodput_rps`.
    pub min_goodput_rps: Option<f64>,
    /// `optimization.strict_sla`: drop candidates whose mean TTFT/TPOT/E2E exceed the SLA.
    pub strict_sla: bool,
    /// `optimization.top_n` (servesim extension, 5): how many ranked configs to write.
    pub top_n: usize,
    /// `optimization.gpu_hour_usd` (servesim extension): price per GPU-hour, one number or one
    /// per hardware id, for cost per million output tokens (and the `cost` target).
    pub gpu_hour_usd: Vec<(Option<String>, f64)>,
    /// How candidates are searched (`optimizer.algorithm`).
    pub strategy: Strategy,
}

/// How a search evaluates its candidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Every candidate replayed in full.
    Exhaustive,
    /// Static estimates of every candidate, short replays of the best, full replays of the
    /// best of those ([`stage_keep`]).
    Staged,
}

/// Above this many candidates the default (`optimizer.algorithm: auto`) is staged.
pub const STAGED_ABOVE: usize = 64;

/// Candidates kept after a stage that evaluated `feasible` ones: a quarter after the static
/// estimate (at least 16), half after the short replays (at least 8).
#[must_use]
pub fn stage_keep(after: Fidelity, feasible: usize) -> usize {
    match after {
        Fidelity::Static => feasible.div_ceil(4).max(16),
        Fidelity::Short => feasible.div_ceil(2).max(8),
        Fidelity::Full => feasible,
    }
}

fn spec_error(source: &str, path: &str, origin: &Origin, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Config {
        source: source.to_string(),
        diagnostics: vec![crate::diag::Diagnostic {
            path: path.to_string(),
            origin: origin.clone(),
            message: message.into(),
            kind: crate::diag::DiagKind::Domain,
        }],
    }
}

fn num(n: &Node) -> Option<f64> {
    match n.value {
        Value::Int(i) => Some(i as f64),
        Value::Float(f) => Some(f),
        _ => None,
    }
}

/// Expands a `{range: {min, max, step, scale}}` into values.
fn range_values(r: &Node, path: &str, source: &str) -> Result<Vec<Node>, ScenarioError> {
    let bad = |m: &str| spec_error(source, path, &r.origin, m.to_string());
    let get = |k: &str| r.get(k).and_then(num);
    let (Some(min), Some(max)) = (get("min"), get("max")) else {
        return Err(bad("a range needs numeric min and max"));
    };
    if !(min.is_finite() && max.is_finite()) || min > max {
        return Err(bad("a range needs min <= max"));
    }
    let log = match r.get("scale").map(|n| &n.value) {
        None => false,
        Some(Value::Str(s)) if s == "linear" => false,
        Some(Value::Str(s)) if s == "log" => true,
        Some(_) => return Err(bad("scale must be linear or log")),
    };
    let ints = [r.get("min"), r.get("max"), r.get("step")]
        .iter()
        .flatten()
        .all(|n| matches!(n.value, Value::Int(_)));
    let step = get("step").unwrap_or(if log { 2.0 } else { 1.0 });
    if (log && step <= 1.0) || (!log && step <= 0.0) || !step.is_finite() {
        return Err(bad(if log {
            "a log range needs a step (factor) > 1"
        } else {
            "a range needs a step > 0"
        }));
    }
    if min <= 0.0 && log {
        return Err(bad("a log range needs min > 0"));
    }
    let mut out = Vec::new();
    let mut v = min;
    while v <= max * (1.0 + 1e-12) {
        #[allow(clippy::cast_possible_truncation)]
        let value = if ints { Value::Int(v.round() as i64) } else { Value::Float(v) };
        out.push(Node { value, origin: r.origin.clone() });
        if out.len() > MAX_CANDIDATES {
            return Err(bad("the range has too many values"));
        }
        v = if log { v * step } else { v + step };
    }
    Ok(out)
}

/// Finds every domain under `node` (depth first, document order).
fn find_domains(node: &Node, path: &str, source: &str, out: &mut Vec<Domain>) -> Result<(), ScenarioError> {
    let Value::Map(entries) = &node.value else { return Ok(()) };
    if entries.len() == 1 {
        let (key, _, inner) = &entries[0];
        match key.as_str() {
            "choices" => {
                let Value::Seq(values) = &inner.value else {
                    return Err(spec_error(source, path, &inner.origin, "choices must be a list"));
                };
                if values.is_empty() {
                    return Err(spec_error(
                        source,
                        path,
                        &inner.origin,
                        "choices is empty: nothing to search",
                    ));
                }
                out.push(Domain { path: path.to_string(), values: values.clone() });
                return Ok(());
            }
            "range" => {
                out.push(Domain { path: path.to_string(), values: range_values(inner, path, source)? });
                return Ok(());
            }
            _ => {}
        }
    }
    for (k, _, v) in entries {
        let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
        find_domains(v, &p, source, out)?;
    }
    Ok(())
}

fn map(entries: &[(&str, Node)]) -> Node {
    Node::builtin(Value::Map(
        entries.iter().map(|(k, v)| ((*k).to_string(), Origin::Builtin, v.clone())).collect(),
    ))
}

fn int(i: u32) -> Node {
    Node::builtin(Value::Int(i64::from(i)))
}

/// The worker shapes of `parallelism: {preset: default}` for a model: tensor parallel for
/// every model, plus expert-parallel (TEP) and attention-data-parallel (DEP) for MoE, each
/// with 1 to `max_gpus / size` replicas.
fn preset_shapes(moe: bool, max_gpus: u32) -> Vec<Node> {
    let mut out = Vec::new();
    for g in PRESET_GPUS.iter().copied().filter(|g| *g <= max_gpus) {
        let mut shapes = vec![vec![("tensor", int(g))]];
        if moe && g > 1 {
            shapes.push(vec![("tensor", int(g)), ("moe_expert", int(g))]);
            shapes.push(vec![("attention_data", int(g)), ("moe_expert", int(g))]);
        }
        for s in shapes {
            for r in 1..=max_gpus / g {
                let mut e = s.clone();
                e.push(("replicas", int(r)));
                out.push(map(&e));
            }
        }
    }
    out
}

/// Reads a recommend config: the `optimization` block, domains and presets.
///
/// # Errors
/// Bad optimization values, empty or malformed domains, impossible budgets, too many
/// candidates, a target that needs an SLA without one.
pub fn parse_spec(root: &Node, source: &str, catalog: &Catalog) -> Result<Spec, ScenarioError> {
    let Value::Map(entries) = &root.value else {
        return Err(spec_error(source, "", &root.origin, "a recommend config is a mapping"));
    };
    let mut base_entries = Vec::new();
    let mut opt: Option<Node> = None;
    let mut algorithm: Option<(String, Origin)> = None;
    for (k, o, v) in entries {
        match k.as_str() {
            "optimization" => opt = Some(v.clone()),
            // Of AISimulate's optimizer settings only the algorithm applies: servesim searches
            // exhaustively or in stages; `bayesian`/`random` (and trial budgets) mean `auto`.
            "optimizer" => {
                if let Some(a) = v.get("algorithm") {
                    match &a.value {
                        Value::Str(x) => algorithm = Some((x.clone(), a.origin.clone())),
                        _ => {
                            return Err(spec_error(
                                source,
                                "optimizer.algorithm",
                                &a.origin,
                                "expected a name",
                            ))
                        }
                    }
                }
            }
            _ => base_entries.push((k.clone(), o.clone(), v.clone())),
        }
    }
    let mut base = Node { value: Value::Map(base_entries), origin: root.origin.clone() };
    let opt = opt.unwrap_or_else(|| Node::builtin(Value::Map(Vec::new())));
    let known = ["target", "hardware", "constraints", "strict_sla", "top_n", "gpu_hour_usd"];
    if let Value::Map(m) = &opt.value {
        if let Some((k, o, _)) = m.iter().find(|(k, _, _)| !known.contains(&k.as_str())) {
            return Err(spec_error(
                source,
                &format!("optimization.{k}"),
                o,
                format!("unknown key (known: {})", known.join(", ")),
            ));
        }
    }
    let target = match opt.get("target") {
        None => Target::Pareto,
        Some(n) => match &n.value {
            Value::Str(s) => {
                Target::NAMES.iter().find(|(name, _)| name == s).map(|(_, t)| *t).ok_or_else(|| {
                    let names: Vec<&str> = Target::NAMES.iter().map(|(n, _)| *n).collect();
                    spec_error(
                        source,
                        "optimization.target",
                        &n.origin,
                        format!("'{s}' is not one of: {}", names.join(", ")),
                    )
                })?
            }
            _ => return Err(spec_error(source, "optimization.target", &n.origin, "expected a target name")),
        },
    };
    let c = opt.get("constraints");
    let cnum = |k: &str| c.and_then(|c| c.get(k)).and_then(num);
    let budget = |k: &str, default: f64| -> Result<u32, ScenarioError> {
        let v = cnum(k).unwrap_or(default);
        if v.fract() != 0.0 || !(1.0..=100_000.0).contains(&v) {
            return Err(spec_error(
                source,
                &format!("optimization.constraints.{k}"),
                &opt.origin,
                "expected a whole number of GPUs >= 1",
            ));
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(v as u32)
    };
    let (min_gpus, max_gpus) = (budget("min_candidate_gpus", 1.0)?, budget("max_candidate_gpus", 32.0)?);
    if min_gpus > max_gpus {
        return Err(spec_error(
            source,
            "optimization.constraints",
            &opt.origin,
            format!("min_candidate_gpus {min_gpus} > max_candidate_gpus {max_gpus}: no candidate can fit"),
        ));
    }
    let strict_sla = matches!(opt.get("strict_sla").map(|n| &n.value), Some(Value::Bool(true)));
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let top_n = opt.get("top_n").and_then(num).map_or(5, |v| v.max(1.0) as usize);
    let gpu_hour_usd = match opt.get("gpu_hour_usd") {
        None => Vec::new(),
        Some(n) => match &n.value {
            Value::Map(m) => {
                let mut out = Vec::new();
                for (hw, o, v) in m {
                    match num(v).filter(|x| *x > 0.0 && x.is_finite()) {
                        Some(x) => out.push((Some(hw.clone()), x)),
                        None => {
                            return Err(spec_error(
                                source,
                                &format!("optimization.gpu_hour_usd.{hw}"),
                                o,
                                "expected a price > 0",
                            ))
                        }
                    }
                }
                out
            }
            _ => match num(n).filter(|x| *x > 0.0 && x.is_finite()) {
                Some(x) => vec![(None, x)],
                None => {
                    return Err(spec_error(
                        source,
                        "optimization.gpu_hour_usd",
                        &n.origin,
                        "expected a price > 0, or one per hardware id",
                    ))
                }
            },
        },
    };
    if target == Target::Cost && gpu_hour_usd.is_empty() {
        return Err(spec_error(
            source,
            "optimization.gpu_hour_usd",
            &opt.origin,
            "target cost needs gpu_hour_usd",
        ));
    }
    // Presets: `parallelism: {preset: default}` on a role becomes a domain of shapes.
    let model_id = root.get("engine").and_then(|e| e.get("model")).and_then(|m| match &m.value {
        Value::Str(s) => Some(s.clone()),
        _ => None,
    });
    let moe = model_id.as_deref().and_then(|m| catalog.model(m)).is_some_and(|m| m.moe.is_some());
    let roles: Vec<String> = match base.get("engine").and_then(|e| e.get("workers")).map(|w| &w.value) {
        Some(Value::Map(m)) => m.iter().map(|(k, _, _)| k.clone()).collect(),
        _ => Vec::new(),
    };
    for role in roles {
        let path = format!("engine.workers.{role}.parallelism");
        let preset = base
            .get("engine")
            .and_then(|e| e.get("workers"))
            .and_then(|w| w.get(&role))
            .and_then(|r| r.get("parallelism"))
            .and_then(|p| p.get("preset"))
            .map(|n| n.value.clone());
        match preset {
            None => {}
            Some(Value::Str(s)) if s == "default" => {
                let choices = Node::builtin(Value::Seq(preset_shapes(moe, max_gpus)));
                base.set_path(&path, map(&[("choices", choices)]))
                    .map_err(|m| spec_error(source, &path, &root.origin, m))?;
            }
            Some(_) => {
                return Err(spec_error(
                    source,
                    &format!("{path}.preset"),
                    &root.origin,
                    "the only preset is 'default'",
                ))
            }
        }
    }
    hardware_auto(&mut base, &opt, source, catalog)?;
    let mut domains = Vec::new();
    find_domains(&base, "", source, &mut domains)?;
    let total = domains
        .iter()
        .try_fold(1usize, |acc, d| acc.checked_mul(d.values.len()).filter(|n| *n <= MAX_CANDIDATES));
    if total.is_none() {
        return Err(spec_error(
            source,
            "",
            &root.origin,
            format!("the search has more than {MAX_CANDIDATES} combinations; narrow the domains"),
        ));
    }
    let has_sla = root
        .get("evaluation")
        .and_then(|e| e.get("sla"))
        .is_some_and(|s| matches!(&s.value, Value::Map(m) if !m.is_empty()));
    if (target.needs_sla() || strict_sla) && !has_sla {
        return Err(spec_error(
            source,
            "evaluation.sla",
            &root.origin,
            format!("target {} needs evaluation.sla (ttft_ms, itl_ms or e2e_ms)", target.name()),
        ));
    }
    let min_goodput_rps = cnum("min_goodput_rps");
    let n: usize = domains.iter().map(|d| d.values.len()).product();
    let strategy = match algorithm.as_ref().map(|(a, o)| (a.as_str(), o)) {
        Some(("exhaustive", _)) => Strategy::Exhaustive,
        Some(("staged", _)) => Strategy::Staged,
        None | Some(("auto" | "bayesian" | "random", _)) => {
            if n > STAGED_ABOVE {
                Strategy::Staged
            } else {
                Strategy::Exhaustive
            }
        }
        Some((other, o)) => {
            return Err(spec_error(
                source,
                "optimizer.algorithm",
                o,
                format!("'{other}' is not one of: auto, exhaustive, staged (bayesian and random mean auto)"),
            ))
        }
    };
    Ok(Spec {
        base,
        domains,
        target,
        min_gpus,
        max_gpus,
        min_goodput_rps,
        strict_sla,
        top_n,
        gpu_hour_usd,
        strategy,
    })
}

/// `engine.hardware: auto` searches the GPU types of `optimization.hardware` (one id or a
/// list), as AISimulate's recommend does: it becomes a domain over them.
fn hardware_auto(base: &mut Node, opt: &Node, source: &str, catalog: &Catalog) -> Result<(), ScenarioError> {
    let hw = base.get("engine").and_then(|e| e.get("hardware"));
    let auto = matches!(hw.map(|n| &n.value), Some(Value::Str(s)) if s == "auto");
    let Some(list) = opt.get("hardware") else {
        if let (true, Some(h)) = (auto, hw) {
            return Err(spec_error(
                source,
                "engine.hardware",
                &h.origin,
                "hardware: auto searches the GPU types of optimization.hardware, which is not set",
            ));
        }
        return Ok(());
    };
    let ids: Vec<&Node> = match &list.value {
        Value::Seq(v) => v.iter().collect(),
        _ => vec![list],
    };
    let mut choices = Vec::new();
    for (i, n) in ids.iter().enumerate() {
        let path = if matches!(list.value, Value::Seq(_)) {
            format!("optimization.hardware[{i}]")
        } else {
            "optimization.hardware".to_string()
        };
        let Value::Str(id) = &n.value else {
            return Err(spec_error(source, &path, &n.origin, "expected a GPU id such as h200_sxm"));
        };
        if catalog.gpu(id).is_none() {
            let known: Vec<&str> = catalog.hardware.iter().map(|h| h.id.as_str()).collect();
            return Err(spec_error(
                source,
                &path,
                &n.origin,
                format!("unknown GPU '{id}' (known: {})", known.join(", ")),
            ));
        }
        choices.push((*n).clone());
    }
    if choices.is_empty() {
        return Err(spec_error(source, "optimization.hardware", &list.origin, "lists no GPU type"));
    }
    if !auto {
        return Err(spec_error(
            source,
            "optimization.hardware",
            &list.origin,
            "set engine.hardware: auto to search these GPU types (or list them as engine.hardware: {choices: [...]})",
        ));
    }
    let domain = map(&[("choices", Node::builtin(Value::Seq(choices)))]);
    base.set_path("engine.hardware", domain)
        .map_err(|m| spec_error(source, "engine.hardware", &list.origin, m))
}

impl Spec {
    /// True when every candidate's traffic is a closed loop (`traffic.load.type: concurrency`).
    #[must_use]
    pub fn closed_loop(&self) -> bool {
        let kind = path_get(&self.base, "traffic.load.type");
        matches!(kind.map(|n| &n.value), Some(Value::Str(k)) if k == "concurrency")
    }

    /// Number of candidates.
    #[must_use]
    pub fn len(&self) -> usize {
        self.domains.iter().map(|d| d.values.len()).product()
    }

    /// True when there is nothing to search.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A short name for candidate `i`: each searched value after the last part of its path
    /// (`backend sglang · tensor 4 · concurrency 16`).
    #[must_use]
    pub fn label(&self, i: usize) -> String {
        let mut parts = Vec::with_capacity(self.domains.len());
        let mut rest = i;
        for d in self.domains.iter().rev() {
            let n = d.values.len().max(1);
            let name = d.path.rsplit('.').next().unwrap_or(&d.path);
            let value = d.values.get(rest % n).map_or_else(String::new, compact);
            parts.push(format!("{name} {value}"));
            rest /= n;
        }
        parts.reverse();
        parts.join(" · ")
    }

    /// Candidate `i` (mixed-radix over the domains, last domain fastest) as a concrete config.
    ///
    /// # Errors
    /// When a value cannot be placed at its path.
    pub fn candidate(&self, i: usize) -> Result<Node, String> {
        let mut node = self.base.clone();
        let mut rest = i;
        for d in self.domains.iter().rev() {
            let n = d.values.len();
            node.set_path(&d.path, d.values[rest % n].clone())?;
            rest /= n;
        }
        Ok(node)
    }
}

/// The outcome of one candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Index in the search.
    pub index: usize,
    /// `feasible`, `infeasible`, `unsupported` or `failed`.
    pub status: &'static str,
    /// Reason category (REF §2.3) when not feasible.
    pub reason_category: Option<&'static str>,
    /// Reason text.
    pub reason: Option<String>,
    /// GPUs the candidate uses (0 when unknown).
    pub used_gpus: u32,
    /// The concrete config.
    pub config: Node,
    /// Summary metrics (prediction.json keys).
    pub metrics: Map<String, Json>,
    /// `throughput_per_gpu`, `throughput_per_user` (and `cost_per_million_output_tokens_usd`).
    pub objectives: Map<String, Json>,
    /// Signed score, higher is better (`None` unless feasible).
    pub score: Option<f64>,
    /// How it was evaluated (the last stage it reached).
    pub fidelity: Fidelity,
}

/// Every status a candidate can have.
pub const STATUSES: [&str; 5] = ["feasible", "infeasible", "unsupported", "failed", "pruned"];

/// Every reason category a candidate can give (REF §2.3, and `search_pruned`/`estimate`).
pub const REASON_CATEGORIES: [&str; 11] = [
    "candidate_materialization",
    "kv_capacity",
    "backend_topology",
    "unknown",
    "gpu_budget",
    "estimate",
    "replay_runtime",
    "no_samples",
    "sla_constraint",
    "invalid_metrics",
    "search_pruned",
];

impl Candidate {
    /// The candidate as JSON for another Web Worker or thread: everything but the config,
    /// which the receiver rebuilds from the spec, plus the config as YAML for display.
    #[must_use]
    pub fn to_wire(&self) -> Json {
        json!({
            "index": self.index,
            "status": self.status,
            "reason_category": self.reason_category,
            "reason": self.reason,
            "used_gpus": self.used_gpus,
            "metrics": self.metrics,
            "objectives": self.objectives,
            "score": self.score,
            "fidelity": self.fidelity.key(),
            "config_yaml": node::to_yaml(&self.config),
        })
    }

    /// Rebuilds a candidate of `spec` from [`Candidate::to_wire`].
    ///
    /// # Errors
    /// When a field is missing or names an unknown status, category or fidelity.
    pub fn from_wire(spec: &Spec, v: &Json) -> Result<Candidate, String> {
        let field = |k: &str| v.get(k).ok_or_else(|| format!("candidate message lacks '{k}'"));
        let index = field("index")?
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .filter(|i| *i < spec.len())
            .ok_or("candidate message has no valid 'index'")?;
        let known = |k: &str, list: &[&'static str]| -> Result<Option<&'static str>, String> {
            match field(k)? {
                Json::Null => Ok(None),
                Json::String(s) => list
                    .iter()
                    .find(|x| **x == s.as_str())
                    .map(|x| Some(*x))
                    .ok_or_else(|| format!("candidate message has an unknown {k} '{s}'")),
                other => Err(format!("candidate message has a non-text {k}: {other}")),
            }
        };
        let status = known("status", &STATUSES)?.ok_or("candidate message has no status")?;
        let object = |k: &str| -> Result<Map<String, Json>, String> {
            field(k)?
                .as_object()
                .cloned()
                .ok_or_else(|| format!("candidate message's '{k}' is not an object"))
        };
        let fidelity = field("fidelity")?
            .as_str()
            .and_then(Fidelity::from_key)
            .ok_or("candidate message has an unknown fidelity")?;
        Ok(Candidate {
            index,
            status,
            reason_category: known("reason_category", &REASON_CATEGORIES)?,
            reason: field("reason")?.as_str().map(str::to_string),
            used_gpus: field("used_gpus")?
                .as_u64()
                .and_then(|g| u32::try_from(g).ok())
                .ok_or("candidate message has no valid 'used_gpus'")?,
            config: spec.candidate(index)?,
            metrics: object("metrics")?,
            objectives: object("objectives")?,
            score: field("score")?.as_f64(),
            fidelity,
        })
    }
}

const METRIC_KEYS: [&str; 13] = [
    "completed_requests",
    "request_throughput_rps",
    "output_throughput_tok_s",
    "mean_ttft_ms",
    "p90_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p90_tpot_ms",
    "mean_itl_ms",
    "mean_e2e_latency_ms",
    "p90_e2e_latency_ms",
    "mean_output_token_throughput_per_user",
    "gpu_hours",
];

fn f(m: &Map<String, Json>, k: &str) -> f64 {
    m.get(k).and_then(Json::as_f64).unwrap_or(f64::NAN)
}

/// How closely a candidate is evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fidelity {
    /// The static estimate (`servesim estimate`): milliseconds, no replay.
    Static,
    /// A replay of a quarter of the requests (at least [`SHORT_MIN_REQUESTS`]).
    Short,
    /// The full replay.
    Full,
}

impl Fidelity {
    /// The stage name in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Fidelity::Static => "static estimate",
            Fidelity::Short => "short replay",
            Fidelity::Full => "full replay",
        }
    }

    /// The short name used in messages (`static`, `short`, `full`).
    #[must_use]
    pub fn key(self) -> &'static str {
        match self {
            Fidelity::Static => "static",
            Fidelity::Short => "short",
            Fidelity::Full => "full",
        }
    }

    /// The fidelity named by [`Fidelity::key`].
    #[must_use]
    pub fn from_key(k: &str) -> Option<Fidelity> {
        [Fidelity::Static, Fidelity::Short, Fidelity::Full].into_iter().find(|f| f.key() == k)
    }
}

/// Fewest requests a short replay sends.
pub const SHORT_MIN_REQUESTS: u32 = 64;

/// Fewest requests per closed-loop client a short replay sends.
pub const SHORT_REQUESTS_PER_CLIENT: u32 = 4;

/// Screening stages judge SLA bounds this much looser than the final replay: the static
/// estimate's TTFT is within 25% of its replay (`tests/estimate.rs`), and a screen must not
/// drop a candidate the full replay would keep.
pub const SCREEN_SLA_SLACK: f64 = 1.25;

/// Prepares and, if it can run, simulates candidate `index` in full.
#[must_use]
pub fn evaluate(spec: &Spec, index: usize, source: &str, catalog: &Catalog, files: &dyn Files) -> Candidate {
    evaluate_at(spec, index, source, catalog, files, Fidelity::Full)
}

/// What one evaluation measured, whatever its fidelity.
struct Measured {
    metrics: Map<String, Json>,
    /// `(request_throughput_rps, output_throughput_tok_s)` of requests meeting the SLA.
    goodput: Option<(f64, f64)>,
    completed: u64,
}

fn measure(prepared: &mut crate::scenario::Prepared, fidelity: Fidelity) -> Result<Measured, ScenarioError> {
    if fidelity == Fidelity::Static {
        let e = crate::estimate::estimate(prepared)?;
        let mut metrics = Map::new();
        for (k, v) in [
            ("request_throughput_rps", e.request_rate_rps),
            ("output_throughput_tok_s", e.output_tok_s),
            ("mean_ttft_ms", e.ttft_ms),
            ("mean_tpot_ms", e.tpot_ms),
            ("mean_itl_ms", e.tpot_ms),
            ("mean_e2e_latency_ms", e.e2e_ms),
            ("mean_output_token_throughput_per_user", e.per_user()),
        ] {
            metrics.insert(k.to_string(), json!(v));
        }
        // Static goodput: every request when the means meet the SLA, none otherwise.
        let sla = prepared.config.evaluation.sla;
        let meets = [(e.ttft_ms, sla.ttft_ms), (e.tpot_ms, sla.itl_ms), (e.e2e_ms, sla.e2e_ms)]
            .iter()
            .all(|(v, b)| b.is_none_or(|b| *v <= b));
        let served = if meets && !e.overloaded { (e.request_rate_rps, e.output_tok_s) } else { (0.0, 0.0) };
        let goodput = sla.is_set().then_some(served);
        return Ok(Measured { metrics, goodput, completed: u64::from(!e.overloaded) });
    }
    if fidelity == Fidelity::Short {
        // A closed loop's first wave (every client at once) must stay a small share of the
        // run, or its queueing decides the screen: keep at least four requests per client.
        let per_client = match prepared.traffic.load {
            servesim_core::traffic::Load::Concurrency(c) => c.saturating_mul(SHORT_REQUESTS_PER_CLIENT),
            _ => 0,
        };
        let stop = &mut prepared.traffic.stop;
        stop.max_requests =
            (stop.max_requests / 4).max(SHORT_MIN_REQUESTS).max(per_client).min(stop.max_requests);
    }
    let prediction = prepared.run()?;
    let mut metrics = Map::new();
    for k in METRIC_KEYS {
        if let Some(v) = prediction.json.get(k) {
            metrics.insert(k.to_string(), v.clone());
        }
    }
    let goodput =
        prediction.summary.goodput.as_ref().map(|g| (g.request_throughput_rps, g.output_throughput_tok_s));
    Ok(Measured { metrics, goodput, completed: prediction.summary.completed_requests })
}

/// Prepares and evaluates candidate `index` at `fidelity`.
#[must_use]
pub fn evaluate_at(
    spec: &Spec,
    index: usize,
    source: &str,
    catalog: &Catalog,
    files: &dyn Files,
    fidelity: Fidelity,
) -> Candidate {
    let mut c = Candidate {
        index,
        status: "failed",
        reason_category: Some("candidate_materialization"),
        reason: None,
        used_gpus: 0,
        config: spec.base.clone(),
        metrics: Map::new(),
        objectives: Map::new(),
        score: None,
        fidelity,
    };
    let node = match spec.candidate(index) {
        Ok(n) => n,
        Err(m) => {
            c.reason = Some(m);
            return c;
        }
    };
    c.config = node;
    let mut prepared = match prepare(&c.config, source, catalog, None, files) {
        Ok(p) => p,
        Err(e) => {
            let (status, cat) = match &e {
                ScenarioError::Resource { .. } => ("infeasible", "kv_capacity"),
                ScenarioError::Config { .. } => ("unsupported", "backend_topology"),
                ScenarioError::Run { .. } => ("failed", "unknown"),
            };
            c.status = status;
            c.reason_category = Some(cat);
            c.reason = Some(e.to_string().lines().collect::<Vec<_>>().join(" "));
            return c;
        }
    };
    c.used_gpus = prepared.roles.iter().map(crate::scenario::PreparedRole::gpus).sum();
    let prepared_hw: Vec<(String, u32)> =
        prepared.roles.iter().map(|r| (r.hardware.id.clone(), r.gpus())).collect();
    if c.used_gpus > spec.max_gpus || c.used_gpus < spec.min_gpus {
        c.status = "infeasible";
        c.reason_category = Some("gpu_budget");
        c.reason = Some(format!("uses {} GPUs, outside {}..={}", c.used_gpus, spec.min_gpus, spec.max_gpus));
        return c;
    }
    let sla = prepared.config.evaluation.sla;
    let measured = match measure(&mut prepared, fidelity) {
        Ok(m) => m,
        Err(e) => {
            c.status = "failed";
            c.reason_category =
                Some(if fidelity == Fidelity::Static { "estimate" } else { "replay_runtime" });
            c.reason = Some(e.to_string());
            return c;
        }
    };
    c.metrics = measured.metrics;
    let goodput = measured.goodput;
    if let Some((rps, tps)) = goodput {
        c.metrics.insert("goodput_request_throughput_rps".into(), json!(rps));
        c.metrics.insert("goodput_output_throughput_tok_s".into(), json!(tps));
    }
    let gpus = f64::from(c.used_gpus.max(1));
    let out_tps = f(&c.metrics, "output_throughput_tok_s");
    c.objectives.insert("throughput_per_gpu".into(), json!(out_tps / gpus));
    c.objectives
        .insert("throughput_per_user".into(), json!(f(&c.metrics, "mean_output_token_throughput_per_user")));
    // $ per hour for the fleet over output tokens per hour, per million tokens.
    let price = |hw: &str| {
        spec.gpu_hour_usd
            .iter()
            .find(|(h, _)| h.as_deref() == Some(hw))
            .or_else(|| spec.gpu_hour_usd.iter().find(|(h, _)| h.is_none()))
            .map(|(_, p)| *p)
    };
    let fleet_usd: Option<f64> =
        prepared_hw.iter().map(|(hw, g)| price(hw).map(|p| p * f64::from(*g))).sum::<Option<f64>>();
    let cost = fleet_usd.filter(|_| !spec.gpu_hour_usd.is_empty()).map(|usd| usd / (out_tps * 3600.0) * 1e6);
    if let Some(cost) = cost {
        c.objectives.insert("cost_per_million_output_tokens_usd".into(), json!(cost));
    }
    if measured.completed == 0 || !out_tps.is_finite() {
        c.status = "failed";
        c.reason_category = Some("no_samples");
        c.reason = Some("no request completed".into());
        return c;
    }
    // SLA gates: aggregate means (REF §6), for strict_sla and for SLA-bound targets.
    if spec.strict_sla || spec.target == Target::MinGpus {
        let checks = [
            ("mean TTFT", f(&c.metrics, "mean_ttft_ms"), sla.ttft_ms),
            ("mean TPOT", f(&c.metrics, "mean_tpot_ms"), sla.itl_ms),
            ("mean E2E", f(&c.metrics, "mean_e2e_latency_ms"), sla.e2e_ms),
        ];
        let slack = if fidelity == Fidelity::Full { 1.0 } else { SCREEN_SLA_SLACK };
        if let Some((name, v, Some(bound))) =
            checks.iter().find(|(_, v, b)| b.is_some_and(|b| *v > b * slack))
        {
            c.status = "infeasible";
            c.reason_category = Some("sla_constraint");
            c.reason = Some(format!("{name} {v:.1} ms exceeds the SLA's {bound} ms"));
            return c;
        }
    }
    let good_rps = goodput.map_or(0.0, |g| g.0);
    if let Some(min) = spec.min_goodput_rps {
        if good_rps < min {
            c.status = "infeasible";
            c.reason_category = Some("sla_constraint");
            c.reason = Some(format!("goodput {good_rps:.3} req/s is below min_goodput_rps {min}"));
            return c;
        }
    }
    c.score = Some(match spec.target {
        Target::Throughput => out_tps,
        Target::ThroughputPerGpu | Target::Pareto => out_tps / gpus,
        Target::ThroughputPerUser => f(&c.metrics, "mean_output_token_throughput_per_user"),
        Target::Goodput => good_rps,
        Target::GoodputPerGpu => good_rps / gpus,
        Target::Ttft => -f(&c.metrics, "mean_ttft_ms"),
        Target::E2eLatency => -f(&c.metrics, "mean_e2e_latency_ms"),
        Target::MinGpus => -gpus,
        Target::Cost => match cost {
            Some(x) => -x,
            None => {
                c.status = "failed";
                c.reason_category = Some("invalid_metrics");
                c.reason = Some(format!("no gpu_hour_usd for {:?}", prepared_hw));
                return c;
            }
        },
    });
    c.status = "feasible";
    c.reason_category = None;
    c
}

/// The best `keep` feasible candidates of a stage, as candidate indices: by score, or for
/// `pareto` by successive Pareto fronts (the front, then the front of the rest, ...).
#[must_use]
pub fn survivors(spec: &Spec, cands: &[Candidate], keep: usize) -> Vec<usize> {
    let feasible: Vec<&Candidate> = cands.iter().filter(|c| c.status == "feasible").collect();
    let mut out: Vec<usize> = Vec::new();
    best_of(spec, feasible, keep, &mut out);
    out.sort_unstable();
    out
}

fn best_of(spec: &Spec, feasible: Vec<&Candidate>, keep: usize, out: &mut Vec<usize>) {
    let start = out.len();
    if spec.target == Target::Pareto {
        let mut rest = feasible;
        while out.len() - start < keep && !rest.is_empty() {
            let pts: Vec<(f64, f64)> = rest
                .iter()
                .map(|c| (f(&c.objectives, "throughput_per_gpu"), f(&c.objectives, "throughput_per_user")))
                .collect();
            let mut front = pareto_front(&pts);
            if front.is_empty() {
                break;
            }
            front.sort_unstable();
            out.extend(front.iter().map(|k| rest[*k].index));
            let mut k = 0;
            rest.retain(|_| {
                let drop = front.binary_search(&k).is_ok();
                k += 1;
                !drop
            });
        }
    } else {
        let mut ranked = feasible;
        ranked.sort_by(|a, b| {
            b.score
                .unwrap_or(f64::NEG_INFINITY)
                .total_cmp(&a.score.unwrap_or(f64::NEG_INFINITY))
                .then(a.index.cmp(&b.index))
        });
        out.extend(ranked.iter().take(keep).map(|c| c.index));
    }
}

/// Evaluates `indices` at `fidelity` on `jobs` native threads; `progress(done, of)` after each.
/// Candidates whose thread panicked are missing from the result (a bug, reported by the caller
/// comparing lengths). Native only: the page runs candidates on Web Workers instead.
#[must_use]
#[allow(clippy::too_many_arguments)]
pub fn evaluate_parallel(
    spec: &Spec,
    indices: &[usize],
    fidelity: Fidelity,
    source: &str,
    catalog: &Catalog,
    files: &(dyn Files + Sync),
    jobs: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Vec<Candidate> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let n = indices.len();
    let mut results = Vec::with_capacity(n);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs.clamp(1, n.max(1)))
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    while let Some(i) = indices.get(next.fetch_add(1, Ordering::Relaxed)) {
                        mine.push(evaluate_at(spec, *i, source, catalog, files, fidelity));
                        progress(done.fetch_add(1, Ordering::Relaxed) + 1, n);
                    }
                    mine
                })
            })
            .collect();
        for w in workers {
            if let Ok(mine) = w.join() {
                results.extend(mine);
            }
        }
    });
    results.sort_by_key(|c| c.index);
    results
}

/// What one stage of a search did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageReport {
    /// How it evaluated.
    pub fidelity: Fidelity,
    /// Candidates evaluated.
    pub evaluated: usize,
    /// Feasible at this fidelity.
    pub feasible: usize,
    /// Passed on to the next stage (or, for the last, ranked).
    pub kept: usize,
}

/// A search in progress, driven by its caller: ask [`Search::pending`] which candidates to
/// evaluate at which fidelity, evaluate them however suits (threads natively, a pool of Web
/// Workers in the page), hand the results to [`Search::submit`], repeat until nothing is
/// pending, then take [`Search::into_results`]. Deterministic: the same spec and results give
/// the same stages whatever order candidates were evaluated in.
#[derive(Clone, Debug)]
pub struct Search {
    plan: Vec<Fidelity>,
    stage: usize,
    next: Vec<usize>,
    latest: Vec<Option<Candidate>>,
    stages: Vec<StageReport>,
}

impl Search {
    /// Starts a search of `spec`.
    #[must_use]
    pub fn new(spec: &Spec) -> Self {
        // A shorter closed loop is not a smaller sample of the same run: its first wave (every
        // client at once) weighs more in the means. Closed loops go from the screen to full
        // replays.
        let plan = match spec.strategy {
            Strategy::Exhaustive => vec![Fidelity::Full],
            Strategy::Staged if spec.closed_loop() => vec![Fidelity::Static, Fidelity::Full],
            Strategy::Staged => vec![Fidelity::Static, Fidelity::Short, Fidelity::Full],
        };
        let n = spec.len();
        Search { plan, stage: 0, next: (0..n).collect(), latest: vec![None; n], stages: Vec::new() }
    }

    /// The stages this search runs, in order.
    #[must_use]
    pub fn plan(&self) -> &[Fidelity] {
        &self.plan
    }

    /// The candidates to evaluate next and how, or `None` when the search is over.
    #[must_use]
    pub fn pending(&self) -> Option<(&[usize], Fidelity)> {
        let fidelity = *self.plan.get(self.stage)?;
        (!self.next.is_empty()).then_some((self.next.as_slice(), fidelity))
    }

    /// Takes the results of the pending stage (one per pending index, any order) and decides
    /// which candidates go on.
    pub fn submit(&mut self, spec: &Spec, mut cands: Vec<Candidate>) {
        let Some(&fidelity) = self.plan.get(self.stage) else { return };
        cands.sort_by_key(|c| c.index);
        let feasible = cands.iter().filter(|c| c.status == "feasible").count();
        let last = self.stage + 1 == self.plan.len();
        let keep = stage_keep(fidelity, feasible);
        let mut kept: Vec<usize> = if last {
            cands.iter().filter(|c| c.status == "feasible").map(|c| c.index).collect()
        } else {
            survivors(spec, &cands, keep)
        };
        // Candidates the estimate cannot describe (sessions, traces) go on to be replayed.
        if fidelity == Fidelity::Static {
            kept.extend(cands.iter().filter(|c| c.reason_category == Some("estimate")).map(|c| c.index));
            kept.sort_unstable();
        }
        self.stages.push(StageReport { fidelity, evaluated: cands.len(), feasible, kept: kept.len() });
        for mut c in cands {
            if !last && c.status == "feasible" && kept.binary_search(&c.index).is_err() {
                c.status = "pruned";
                c.reason_category = Some("search_pruned");
                c.reason = Some(format!("not among the best {keep} after the {}", fidelity.name()));
                c.score = None;
            }
            let i = c.index;
            if let Some(slot) = self.latest.get_mut(i) {
                *slot = Some(c);
            }
        }
        self.next = if last { Vec::new() } else { kept };
        self.stage += 1;
    }

    /// What each stage did so far.
    #[must_use]
    pub fn stages(&self) -> &[StageReport] {
        &self.stages
    }

    /// Every candidate in its last stage's form (`pruned` when a screen dropped it), and what
    /// each stage did.
    #[must_use]
    pub fn into_results(self) -> (Vec<Candidate>, Vec<StageReport>) {
        (self.latest.into_iter().flatten().collect(), self.stages)
    }
}

/// Runs a search with a synchronous evaluator: `run` evaluates a list of candidate indices at
/// a fidelity (callers run them in parallel) and returns one [`Candidate`] per index.
pub fn search(
    spec: &Spec,
    run: &mut dyn FnMut(&[usize], Fidelity) -> Vec<Candidate>,
) -> (Vec<Candidate>, Vec<StageReport>) {
    let mut s = Search::new(spec);
    while let Some((indices, fidelity)) = s.pending() {
        let cands = run(indices, fidelity);
        s.submit(spec, cands);
    }
    s.into_results()
}

/// Indices of the Pareto-optimal points (maximising both coordinates): a point is dropped when
/// another is at least as good in both and better in one. Sorted by the second coordinate.
#[must_use]
pub fn pareto_front(points: &[(f64, f64)]) -> Vec<usize> {
    let mut idx: Vec<usize> =
        (0..points.len()).filter(|i| points[*i].0.is_finite() && points[*i].1.is_finite()).collect();
    // Sort by x descending (ties: y descending); sweep keeping points that raise the best y.
    idx.sort_by(|a, b| {
        points[*b].0.total_cmp(&points[*a].0).then(points[*b].1.total_cmp(&points[*a].1)).then(a.cmp(b))
    });
    let mut front = Vec::new();
    let mut best_y = f64::NEG_INFINITY;
    let mut last: Option<(f64, f64)> = None;
    for i in idx {
        let p = points[i];
        if p.1 > best_y {
            front.push(i);
            best_y = p.1;
            last = Some(p);
        } else if last == Some(p) {
            // An exact duplicate of a front point is not dominated by it.
            front.push(i);
        }
    }
    front.sort_by(|a, b| points[*a].1.total_cmp(&points[*b].1).then(a.cmp(b)));
    front
}

/// The finished search: files to write.
#[derive(Clone, Debug)]
pub struct Recommendation {
    /// `recommendation.json`.
    pub json: Json,
    /// `recommendation.csv`.
    pub csv: String,
    /// `recommendations/NNNN.yaml`, in view order.
    pub yamls: Vec<(String, String)>,
    /// A text summary for the terminal.
    pub summary: String,
}

fn candidate_id(i: usize) -> String {
    format!("candidate-{i:06}")
}

fn node_json(n: &Node) -> Json {
    match &n.value {
        Value::Null => Json::Null,
        Value::Bool(b) => json!(b),
        Value::Int(i) => json!(i),
        Value::Float(x) => json!(x),
        Value::Str(s) => json!(s),
        Value::Seq(v) => Json::Array(v.iter().map(node_json).collect()),
        Value::Map(m) => Json::Object(m.iter().map(|(k, _, v)| (k.clone(), node_json(v))).collect()),
    }
}

/// The `config_sha256` of a search's provenance: the parsed spec (overrides applied) as YAML.
#[must_use]
pub fn config_sha256(root: &Node) -> String {
    servesim_data::fpm::sha256_hex(node::to_yaml(root).as_bytes())
}

/// Ranks candidates and builds the outputs. `config_sha256` identifies the input config.
#[must_use]
pub fn finish(
    spec: &Spec,
    mut cands: Vec<Candidate>,
    config_sha256: &str,
    stages: &[StageReport],
) -> Recommendation {
    cands.sort_by_key(|c| c.index);
    let feasible: Vec<usize> = (0..cands.len()).filter(|i| cands[*i].status == "feasible").collect();
    let view: Vec<usize> = if spec.target == Target::Pareto {
        let pts: Vec<(f64, f64)> = feasible
            .iter()
            .map(|i| {
                (
                    f(&cands[*i].objectives, "throughput_per_gpu"),
                    f(&cands[*i].objectives, "throughput_per_user"),
                )
            })
            .collect();
        pareto_front(&pts).into_iter().map(|k| feasible[k]).collect()
    } else {
        let mut ranked = feasible.clone();
        ranked.sort_by(|a, b| {
            let (ca, cb) = (&cands[*a], &cands[*b]);
            let score =
                cb.score.unwrap_or(f64::NEG_INFINITY).total_cmp(&ca.score.unwrap_or(f64::NEG_INFINITY));
            let good = |c: &Candidate| f(&c.metrics, "goodput_output_throughput_tok_s");
            let tie = if spec.target == Target::MinGpus {
                good(cb).total_cmp(&good(ca)).then(
                    f(&ca.metrics, "mean_e2e_latency_ms").total_cmp(&f(&cb.metrics, "mean_e2e_latency_ms")),
                )
            } else {
                ca.used_gpus.cmp(&cb.used_gpus)
            };
            score.then(tie).then(ca.index.cmp(&cb.index))
        });
        ranked.truncate(spec.top_n);
        ranked
    };
    let mut counts = [0usize; 5];
    for c in &cands {
        let k = STATUSES.iter().position(|s| *s == c.status).unwrap_or(3);
        counts[k] += 1;
    }
    let mut yamls = Vec::new();
    for (rank, i) in view.iter().enumerate() {
        let c = &cands[*i];
        let header = format!(
            "# {} ({} GPUs), rank {} of servesim recommend, target {}: replay with servesim predict -c\n",
            candidate_id(c.index),
            c.used_gpus,
            rank + 1,
            spec.target.name()
        );
        yamls.push((format!("{:04}.yaml", rank + 1), header + &node::to_yaml(&c.config)));
    }
    let cand_json = |c: &Candidate| {
        json!({
            "candidate_id": candidate_id(c.index),
            "status": c.status,
            "reason_category": c.reason_category,
            "reason": c.reason,
            "used_gpus": c.used_gpus,
            "score": c.score,
            "config": node_json(&c.config),
            "metrics": c.metrics,
            "objectives": c.objectives,
            "evaluation": c.fidelity.name(),
        })
    };
    let view_ids: Vec<String> = view.iter().map(|i| candidate_id(cands[*i].index)).collect();
    let views = if spec.target == Target::Pareto {
        json!({ "pareto_front": view_ids })
    } else {
        json!({ "top_n": view_ids })
    };
    let json = json!({
        "schema_version": "1.1",
        "candidate_retention": "all",
        "counts": {
            "evaluated": cands.len(),
            "feasible": counts[0],
            "infeasible": counts[1],
            "unsupported": counts[2],
            "timed_out": 0,
            "failed": counts[3],
            "pruned": counts[4],
            "cache_hits": 0,
            "resource_limited": 0,
        },
        "candidates": cands.iter().map(cand_json).collect::<Vec<_>>(),
        "views": views,
        "provenance": {
            "strategy": match spec.strategy { Strategy::Exhaustive => "exhaustive", Strategy::Staged => "staged" },
            "stages": stages.iter().map(|st| json!({
                "evaluation": st.fidelity.name(),
                "evaluated": st.evaluated,
                "feasible": st.feasible,
                "kept": st.kept,
            })).collect::<Vec<_>>(),
            "target": spec.target.name(),
            "gpu_budget": [spec.min_gpus, spec.max_gpus],
            "config_sha256": config_sha256,
            "searched": spec.domains.iter().map(|d| json!({"path": d.path, "values": d.values.len()})).collect::<Vec<_>>(),
        },
    });
    let mut csv = String::from("schema_version,candidate_id,status,reason_category,reason,used_gpus,score,config_json,metrics_json,objectives_json,is_top_n,is_pareto\n");
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    for (i, c) in cands.iter().enumerate() {
        let in_view = view.contains(&i);
        let _ = writeln!(
            csv,
            "1.1,{},{},{},{},{},{},{},{},{},{},{}",
            candidate_id(c.index),
            c.status,
            c.reason_category.unwrap_or(""),
            q(c.reason.as_deref().unwrap_or("")),
            c.used_gpus,
            c.score.map_or(String::new(), |s| s.to_string()),
            q(&node_json(&c.config).to_string()),
            q(&Json::Object(c.metrics.clone()).to_string()),
            q(&Json::Object(c.objectives.clone()).to_string()),
            in_view && spec.target != Target::Pareto,
            in_view && spec.target == Target::Pareto,
        );
    }
    let mut summary = String::new();
    let _ = writeln!(
        summary,
        "{} candidates: {} feasible, {} infeasible, {} unsupported, {} failed, {} pruned (target {})",
        cands.len(),
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        counts[4],
        spec.target.name()
    );
    if spec.strategy == Strategy::Staged {
        let st: Vec<String> = stages
            .iter()
            .map(|st| {
                format!(
                    "{}: {} evaluated, {} feasible, {} kept",
                    st.fidelity.name(),
                    st.evaluated,
                    st.feasible,
                    st.kept
                )
            })
            .collect();
        let _ = writeln!(summary, "staged search: {}", st.join("; "));
    }
    let priced = !spec.gpu_hour_usd.is_empty();
    let _ = writeln!(
        summary,
        "{:<5} {:<17} {:>5} {:>12} {:>12} {:>10} {:>10}{}  searched values",
        "rank",
        "candidate",
        "GPUs",
        "tok/s/GPU",
        "tok/s/user",
        "TTFT ms",
        "TPOT ms",
        if priced { "   $/M tok" } else { "" }
    );
    for (rank, i) in view.iter().enumerate() {
        let c = &cands[*i];
        let chosen: Vec<String> = spec
            .domains
            .iter()
            .map(|d| {
                let v = path_get(&c.config, &d.path).map_or(Json::Null, node_json);
                format!("{}={}", d.path.rsplit('.').next().unwrap_or(&d.path), v)
            })
            .collect();
        let cost = if priced {
            format!(" {:>10.3}", f(&c.objectives, "cost_per_million_output_tokens_usd"))
        } else {
            String::new()
        };
        let _ = writeln!(
            summary,
            "{:<5} {:<17} {:>5} {:>12.1} {:>12.1} {:>10.1} {:>10.2}{cost}  {}",
            rank + 1,
            candidate_id(c.index),
            c.used_gpus,
            f(&c.objectives, "throughput_per_gpu"),
            f(&c.objectives, "throughput_per_user"),
            f(&c.metrics, "mean_ttft_ms"),
            f(&c.metrics, "mean_tpot_ms"),
            chosen.join(" ")
        );
    }
    Recommendation { json, csv, yamls, summary }
}

/// A value on one line: scalars as written, maps as `key value, key value`.
fn compact(n: &Node) -> String {
    match &n.value {
        Value::Map(m) => {
            m.iter().map(|(k, _, v)| format!("{k} {}", compact(v))).collect::<Vec<_>>().join(", ")
        }
        Value::Str(s) => s.clone(),
        _ => node_json(n).to_string(),
    }
}

fn path_get<'a>(n: &'a Node, path: &str) -> Option<&'a Node> {
    path.split('.').try_fold(n, |cur, k| cur.get(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn brute(points: &[(f64, f64)]) -> Vec<usize> {
        let mut out: Vec<usize> = (0..points.len())
            .filter(|i| {
                let p = points[*i];
                !points.iter().any(|q| q.0 >= p.0 && q.1 >= p.1 && (q.0 > p.0 || q.1 > p.1))
            })
            .collect();
        out.sort_by(|a, b| points[*a].1.total_cmp(&points[*b].1).then(a.cmp(b)));
        out
    }

    proptest! {
        #[test]
        fn pareto_front_matches_brute_force(pts in proptest::collection::vec((0u8..20, 0u8..20), 0..40)) {
            let points: Vec<(f64, f64)> = pts.iter().map(|(a, b)| (f64::from(*a), f64::from(*b))).collect();
            prop_assert_eq!(pareto_front(&points), brute(&points));
        }
    }

    fn spec(text: &str) -> Result<Spec, ScenarioError> {
        let root = node::parse(text, None).unwrap();
        parse_spec(&root, "t.yaml", &Catalog::builtin().unwrap())
    }

    #[test]
    fn domains_expand_in_mixed_radix_order() {
        let s = spec("engine: {model: Qwen/Qwen3-8B, workers: {aggregated: {parallelism: {tensor: {choices: [1, 2]}, replicas: {range: {min: 1, max: 4, step: 1}}}}}}\noptimization: {target: throughput}").unwrap();
        assert_eq!(s.len(), 8);
        let c = s.candidate(5).unwrap();
        let par = path_get(&c, "engine.workers.aggregated.parallelism").unwrap();
        assert_eq!(par.get("tensor").unwrap().value, Value::Int(2));
        assert_eq!(par.get("replicas").unwrap().value, Value::Int(2));
        let s = spec("x: {range: {min: 1, max: 16, step: 2, scale: log}}").unwrap();
        assert_eq!(s.domains[0].values.len(), 5);
    }

    #[test]
    fn bad_specs_are_clear_errors() {
        let e = |t: &str| spec(t).unwrap_err().to_string();
        assert!(e("x: {choices: []}").contains("choices is empty"));
        assert!(e("x: {range: {min: 4, max: 1}}").contains("min <= max"));
        assert!(e("optimization: {constraints: {min_candidate_gpus: 8, max_candidate_gpus: 4}}")
            .contains("no candidate can fit"));
        assert!(e("optimization: {target: fastest}").contains("not one of"));
        assert!(e("optimization: {target: min_gpus}").contains("needs evaluation.sla"));
        assert!(e("optimization: {budget: 3}").contains("optimization.budget"));
        assert!(e("a: {range: {min: 1, max: 1000}}\nb: {range: {min: 1, max: 1000}}").contains("more than"));
    }

    #[test]
    fn hardware_auto_searches_the_optimization_hardware_list() {
        let s = spec("engine: {model: Qwen/Qwen3-8B, hardware: auto, workers: {aggregated: {parallelism: {tensor: {choices: [1, 2]}}}}}\noptimization: {hardware: [h100_sxm, h200_sxm, b200_sxm]}").unwrap();
        assert_eq!(s.len(), 6);
        assert!(s.label(2).starts_with("hardware h200_sxm"), "{}", s.label(2));
        let e = |t: &str| spec(t).unwrap_err().to_string();
        assert!(e("engine: {hardware: auto}").contains("optimization.hardware, which is not set"));
        assert!(e("engine: {hardware: auto}\noptimization: {hardware: [h100_sxm, h300]}")
            .contains("optimization.hardware[1]"));
        assert!(e("engine: {hardware: h100_sxm}\noptimization: {hardware: h200_sxm}")
            .contains("engine.hardware: auto"));
    }

    #[test]
    fn the_default_preset_spans_shapes_and_replicas_within_budget() {
        let s = spec("engine: {model: Qwen/Qwen3-8B, workers: {aggregated: {parallelism: {preset: default}}}}\noptimization: {constraints: {max_candidate_gpus: 8}}").unwrap();
        // TP1 x 1..8, TP2 x 1..4, TP4 x 1..2, TP8 x 1.
        assert_eq!(s.len(), 8 + 4 + 2 + 1);
        let s = spec("engine: {model: Qwen/Qwen3-30B-A3B, workers: {aggregated: {parallelism: {preset: default}}}}\noptimization: {constraints: {max_candidate_gpus: 4}}").unwrap();
        // MoE adds TEP and DEP shapes for 2 and 4 GPUs.
        assert_eq!(s.len(), 4 + 3 * 2 + 3);
    }
}
