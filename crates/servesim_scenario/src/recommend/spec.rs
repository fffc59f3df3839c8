//! The search spec of a recommend config: its search domains, optimisation target, GPU
//! budget and prices ([`parse_spec`]), and the concrete prediction config of each candidate
//! ([`Spec::candidate`]).

use crate::catalog::Catalog;
use crate::node::{Node, Origin, Value};
use crate::scenario::ScenarioError;

use super::output::node_json;
use super::STAGED_ABOVE;

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
    /// best of those ([`super::stage_keep`]).
    Staged,
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
            // The search sizes fixed fleets; a planner would move the GPU count it ranks on.
            "planner"
                if v.get("policy").is_some_and(|p| matches!(&p.value, Value::Str(s) if s == "enabled")) =>
            {
                return Err(spec_error(
                    source,
                    "planner.policy",
                    &v.get("policy").map_or_else(|| o.clone(), |p| p.origin.clone()),
                    "recommend searches fixed fleets; the autoscaling planner is not searched yet \
                     (run the chosen config with the planner in servesim predict)",
                ));
            }
            // Each candidate is one replay; bands of many would multiply the search's cost.
            "evaluation" if v.get("uncertainty").is_some() => {
                return Err(spec_error(
                    source,
                    "evaluation.uncertainty",
                    &v.get("uncertainty").map_or_else(|| o.clone(), |u| u.origin.clone()),
                    "recommend ranks one replay per candidate; uncertainty bands are not searched \
                     (run the chosen config with them in servesim predict)",
                ));
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

/// A value on one line: scalars as written, maps as `key value, key value`.
pub(super) fn compact(n: &Node) -> String {
    match &n.value {
        Value::Map(m) => {
            m.iter().map(|(k, _, v)| format!("{k} {}", compact(v))).collect::<Vec<_>>().join(", ")
        }
        Value::Str(s) => s.clone(),
        _ => node_json(n).to_string(),
    }
}

/// The node at dotted `path` under `n`.
pub(super) fn path_get<'a>(n: &'a Node, path: &str) -> Option<&'a Node> {
    path.split('.').try_fold(n, |cur, k| cur.get(k))
}
