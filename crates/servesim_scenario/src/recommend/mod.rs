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

use serde_json::{json, Map, Value as Json};

use crate::catalog::Catalog;
use crate::node::{self, Node};
use crate::scenario::{prepare, Files, ScenarioError};

mod output;
mod spec;

pub use output::{config_sha256, finish, pareto_front, Recommendation};
pub use spec::{parse_spec, Domain, Spec, Strategy, Target, MAX_CANDIDATES};

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
/// Candidates whose evaluation panicked are missing from the result (a bug, reported by the
/// caller comparing lengths). Native only: the page runs candidates on Web Workers instead.
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
    let mut results: Vec<Candidate> = crate::parallel::map(
        indices.len(),
        jobs,
        &|k| evaluate_at(spec, indices[k], source, catalog, files, fidelity),
        progress,
    )
    .into_iter()
    .flatten()
    .collect();
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

#[cfg(test)]
mod tests {
    use super::spec::path_get;
    use super::*;
    use crate::node::Value;
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
        assert!(e("planner: {policy: enabled}").contains("planner.policy"));
        assert!(spec("planner: {policy: disabled}").is_ok());
        assert!(e("evaluation: {uncertainty: {seeds: 4}}").contains("evaluation.uncertainty"));
        assert!(spec("evaluation: {sla: {ttft_ms: 500}}").is_ok());
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
