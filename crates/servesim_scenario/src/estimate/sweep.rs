//! `servesim estimate --default`: AIConfigurator's `default` question — the best aggregated
//! and the best disaggregated deployment of a model on N GPUs of one type, under mean TTFT
//! and TPOT limits, ranked by output tokens per second per GPU.
//!
//! Aggregated: every worker shape (tensor parallel; for MoE models also TP+EP and attention
//! DP+EP) of 1–16 GPUs, with as many replicas as the budget holds, at every batch of
//! [`BATCHES`] per attention-DP rank that fits, each estimated with the full static model.
//! Disaggregated: every pair of prefill and decode shapes and every split of the budget into
//! prefill and decode workers, screened by arithmetic on each pair's step times (prefill
//! capacity per worker, decode step time per batch); the best [`REFINE`] screened points are
//! then estimated with the full model at their own replica counts. Each point is a concrete
//! prediction config, so the caller can replay the winners.
//!
//! The limits apply to steady state, as AIConfigurator's do: a closed-loop benchmark also
//! starts every client at once, and that first wave's queueing is reported but not judged.

use std::fmt::Write as _;

use crate::catalog::Catalog;
use crate::estimate::{Aggregated, Disaggregated, Estimate, Operating, Workload, CLOSED_LOOP_CA2};
use crate::scenario::{parse_with_overrides, prepare, Files, ScenarioError};
use servesim_perf::oplevel::{AllReduceImpl, MoeKernel};

/// Requests in flight per attention-DP rank that the sweep tries: doubling steps with
/// midpoints from 1 to 512 (512 is the largest `max_sequences` the sweep configures).
pub const BATCHES: [u32; 17] = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512];

/// Worker sizes tried (GPUs), as recommend's `preset: default` (REF §6).
const WORKER_GPUS: [u32; 5] = [1, 2, 4, 8, 16];

/// Screened disaggregated points estimated with the full model.
pub const REFINE: usize = 24;

/// Replays run as many requests per concurrency slot as `validate`'s (AISimulate's replay
/// policy, REF §7).
pub use crate::validate::REQUESTS_PER_SLOT as REPLAY_REQUESTS_PER_SLOT;

/// Lengths in the replay configs vary ±10% around nominal (same mean) so that a closed loop
/// of identical requests does not lock into phase; the estimate uses the mean.
const LENGTH_SPREAD: f64 = 0.1;

/// What to sweep (also a page ↔ worker message, hence serde).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SweepSpec {
    /// Model id.
    pub model: String,
    /// Hardware id.
    pub system: String,
    /// `vllm`, `sglang` or `trtllm`.
    pub backend: String,
    /// GPU budget.
    pub total_gpus: u32,
    /// Prompt tokens.
    pub isl: u32,
    /// Output tokens.
    pub osl: u32,
    /// Shared prefix tokens.
    pub prefix: u32,
    /// Mean TTFT limit (ms).
    pub ttft_ms: f64,
    /// Mean TPOT limit (ms).
    pub tpot_ms: f64,
    /// MTP/EAGLE draft tokens a round (0: no speculative decoding), as `engine.nextn`.
    #[serde(default)]
    pub nextn: u32,
    /// Drafts accepted per round on average, as `engine.nextn_accepted`.
    #[serde(default)]
    pub nextn_accepted: f64,
    /// All-reduce kernels of every worker, as `timing.allreduce` (`custom`, `nccl`); none:
    /// the engine's default.
    #[serde(default)]
    pub allreduce: Option<String>,
    /// Routed-expert kernels of every worker, as `timing.moe_kernel` (`default`,
    /// `min_latency`); none: the tables' default lane.
    #[serde(default)]
    pub moe_kernel: Option<String>,
}

/// One worker layout.
#[derive(Clone, Debug, PartialEq)]
struct Shape {
    label: String,
    yaml: String,
    gpus: u32,
    dp: u32,
}

fn shapes(moe: bool, max_gpus: u32) -> Vec<Shape> {
    let mut out = Vec::new();
    for g in WORKER_GPUS.into_iter().filter(|g| *g <= max_gpus) {
        out.push(Shape { label: format!("tp{g}"), yaml: format!("tensor: {g}"), gpus: g, dp: 1 });
        if moe && g > 1 {
            out.push(Shape {
                label: format!("tp{g}-ep{g}"),
                yaml: format!("tensor: {g}, moe_expert: {g}"),
                gpus: g,
                dp: 1,
            });
            out.push(Shape {
                label: format!("dp{g}-ep{g}"),
                yaml: format!("attention_data: {g}, moe_expert: {g}"),
                gpus: g,
                dp: g,
            });
        }
    }
    out
}

/// One evaluated deployment.
#[derive(Clone, Debug)]
pub struct SweepPoint {
    /// `aggregated` or `disaggregated`.
    pub mode: &'static str,
    /// What it is, e.g. `8 x tp4, 16 per rank`.
    pub label: String,
    /// A prediction config that replays it.
    pub yaml: String,
    /// The static estimate.
    pub estimate: Estimate,
}

impl SweepPoint {
    /// True when the estimate meets the limits in steady state.
    #[must_use]
    pub fn meets(&self, spec: &SweepSpec) -> bool {
        !self.estimate.overloaded
            && self.estimate.steady_ttft_ms <= spec.ttft_ms
            && self.estimate.tpot_ms <= spec.tpot_ms
    }
}

/// The sweep's answer.
#[derive(Clone, Debug, Default)]
pub struct Sweep {
    /// Aggregated points meeting the limits, best tok/s/GPU first.
    pub agg: Vec<SweepPoint>,
    /// Disaggregated points meeting the limits, best first.
    pub disagg: Vec<SweepPoint>,
    /// Aggregated points estimated.
    pub agg_evaluated: usize,
    /// Disaggregated points screened by arithmetic.
    pub disagg_screened: usize,
    /// Screened points that met the limits.
    pub disagg_screen_passed: usize,
    /// Disaggregated points estimated with the full model.
    pub disagg_refined: usize,
    /// Shapes that cannot run, with the reason (memory, head divisibility, ...).
    pub rejected: Vec<String>,
}

fn role_yaml(
    out: &mut String,
    role: &str,
    shape: &Shape,
    replicas: u32,
    max_seqs: Option<u32>,
    spec: &SweepSpec,
) {
    let _ = writeln!(out, "    {role}:");
    let _ = writeln!(out, "      parallelism: {{replicas: {replicas}, {}}}", shape.yaml);
    if let Some(s) = max_seqs {
        let _ = writeln!(out, "      scheduler: {{max_sequences: {s}}}");
    }
    let timing: Vec<String> = [("allreduce", &spec.allreduce), ("moe_kernel", &spec.moe_kernel)]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}: {v}")))
        .collect();
    if !timing.is_empty() {
        let _ = writeln!(out, "      timing: {{{}}}", timing.join(", "));
    }
}

fn config_yaml(
    spec: &SweepSpec,
    roles: &[(&str, &Shape, u32, Option<u32>)],
    concurrency: u32,
    header: &str,
) -> String {
    let mut y = String::new();
    let _ = writeln!(y, "# {header}");
    let _ = writeln!(y, "engine:");
    let _ = writeln!(y, "  model: {}", spec.model);
    let _ = writeln!(y, "  hardware: {}", spec.system);
    let _ = writeln!(y, "  backend: {}", spec.backend);
    let mode = if roles.len() == 2 { "disaggregated" } else { "aggregated" };
    let _ = writeln!(y, "  mode: {mode}");
    if spec.nextn > 0 {
        let _ = writeln!(y, "  nextn: {}", spec.nextn);
        let _ = writeln!(y, "  nextn_accepted: {}", spec.nextn_accepted);
    }
    let _ = writeln!(y, "  workers:");
    for (role, shape, replicas, seqs) in roles {
        role_yaml(&mut y, role, shape, *replicas, *seqs, spec);
    }
    let spread = |n: u32| {
        let d = (f64::from(n) * LENGTH_SPREAD).floor();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let d = d as u32;
        if d == 0 {
            format!("{n}")
        } else {
            format!("{{dist: uniform, min: {}, max: {}}}", n - d, n + d)
        }
    };
    let _ = writeln!(y, "traffic:");
    let _ = writeln!(
        y,
        "  source: {{type: synthetic, input_tokens: {}, output_tokens: {}, shared_prefix_tokens: {}}}",
        spread(spec.isl),
        spread(spec.osl),
        spec.prefix
    );
    let _ = writeln!(y, "  load: {{type: concurrency, concurrency: {concurrency}}}");
    let _ = writeln!(y, "  stop: {{requests: {}}}", concurrency.max(1) * REPLAY_REQUESTS_PER_SLOT);
    let _ = writeln!(y, "evaluation:");
    let _ = writeln!(y, "  sla: {{ttft_ms: {}, itl_ms: {}}}", spec.ttft_ms, spec.tpot_ms);
    y
}

fn workload(spec: &SweepSpec) -> Workload {
    // The replay configs spread lengths ±10%, so clients do not lock step.
    Workload {
        isl: f64::from(spec.isl),
        osl: f64::from(spec.osl),
        shared_prefix: f64::from(spec.prefix),
        pool_reuse: 0.0,
        fixed_lengths: false,
    }
}

fn check(spec: &SweepSpec, catalog: &Catalog) -> Result<bool, ScenarioError> {
    let bad = |m: String| ScenarioError::Run { message: m };
    let model = catalog.model(&spec.model).ok_or_else(|| {
        let hint =
            catalog.suggest_model(&spec.model).map(|m| format!(" (did you mean {m}?)")).unwrap_or_default();
        bad(format!("unknown model '{}'{hint}", spec.model))
    })?;
    if catalog.gpu(&spec.system).is_none() {
        return Err(bad(format!(
            "unknown system '{}' (a hardware id of data/catalog/hardware.yaml)",
            spec.system
        )));
    }
    if !["vllm", "sglang", "trtllm"].contains(&spec.backend.as_str()) {
        return Err(bad(format!("unknown backend '{}' (vllm, sglang or trtllm)", spec.backend)));
    }
    if spec.total_gpus == 0 {
        return Err(bad("--total-gpus must be at least 1".into()));
    }
    if spec.isl == 0 || spec.osl == 0 {
        return Err(bad("--isl and --osl must be at least 1".into()));
    }
    if spec.prefix >= spec.isl {
        return Err(bad(format!("--prefix {} must be below --isl {}", spec.prefix, spec.isl)));
    }
    if !(spec.ttft_ms > 0.0 && spec.tpot_ms > 0.0) {
        return Err(bad("--ttft and --tpot must be positive".into()));
    }
    #[allow(clippy::cast_possible_truncation)] // MAX_DRAFT_TOKENS is 5.
    let most = servesim_core::engine::MAX_DRAFT_TOKENS as u32;
    if spec.nextn > most {
        return Err(bad(format!("--nextn {} must be between 0 and {most}", spec.nextn)));
    }
    if spec.nextn > 0 && !(0.0..=f64::from(spec.nextn)).contains(&spec.nextn_accepted) {
        return Err(bad(format!(
            "--nextn-accepted {} must be between 0 and --nextn {}",
            spec.nextn_accepted, spec.nextn
        )));
    }
    if let Some(a) = spec.allreduce.as_deref().filter(|a| AllReduceImpl::from_name(a).is_none()) {
        return Err(bad(format!("--allreduce {a} must be one of {}", AllReduceImpl::NAMES.join(", "))));
    }
    if let Some(k) = spec.moe_kernel.as_deref().filter(|k| MoeKernel::from_name(k).is_none()) {
        return Err(bad(format!("--moe-kernel {k} must be one of {}", MoeKernel::NAMES.join(", "))));
    }
    Ok(model.moe.is_some())
}

/// Runs the sweep.
///
/// # Errors
/// Unknown model or hardware, bad limits, or a timing failure.
pub fn default_sweep(spec: &SweepSpec, catalog: &Catalog, files: &dyn Files) -> Result<Sweep, ScenarioError> {
    let moe = check(spec, catalog)?;
    let w = workload(spec);
    let mut out = Sweep::default();
    let source = "estimate --default";
    let prep = |yaml: &str| -> Result<crate::scenario::Prepared, ScenarioError> {
        let root = parse_with_overrides(yaml, source, &[])?;
        prepare(&root, source, catalog, None, files)
    };
    let all = shapes(moe, spec.total_gpus);
    let max_seqs = BATCHES[BATCHES.len() - 1];

    // Aggregated: full estimates at every batch.
    for s in &all {
        let replicas = spec.total_gpus / s.gpus;
        let yaml = config_yaml(spec, &[("aggregated", s, replicas, Some(max_seqs))], 1, "");
        let p = match prep(&yaml) {
            Ok(p) => p,
            Err(e) => {
                out.rejected.push(format!("aggregated {}: {}", s.label, first_line(&e)));
                continue;
            }
        };
        let mut agg = match Aggregated::new(&p, &p.roles[0], w) {
            Ok(a) => a,
            Err(e) => {
                out.rejected.push(format!("aggregated {}: {}", s.label, first_line(&e)));
                continue;
            }
        };
        let b_max = agg.b_max;
        for b in BATCHES.into_iter().filter(|b| f64::from(*b) <= b_max) {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let n = (f64::from(b) * agg.ranks) as u32;
            agg.total_requests = f64::from(n.max(1) * REPLAY_REQUESTS_PER_SLOT);
            let e = agg.solve(Operating::Concurrency(f64::from(n)))?;
            out.agg_evaluated += 1;
            let label = format!("{replicas} x {}, {b} per rank", s.label);
            let header = format!("servesim estimate --default: aggregated {label}");
            let point = SweepPoint {
                mode: "aggregated",
                yaml: config_yaml(spec, &[("aggregated", s, replicas, Some(max_seqs))], n, &header),
                label,
                estimate: e,
            };
            if point.meets(spec) {
                out.agg.push(point);
            }
        }
    }
    rank(&mut out.agg);

    // Disaggregated: screen by arithmetic per shape pair, then refine the best.
    struct Screened {
        per_gpu: f64,
        pre: usize,
        dec: usize,
        x: u32,
        y: u32,
        b: u32,
    }
    let mut screened: Vec<Screened> = Vec::new();
    for (pi, ps) in all.iter().enumerate() {
        for (di, ds) in all.iter().enumerate() {
            if ps.gpus + ds.gpus > spec.total_gpus {
                continue;
            }
            let yaml =
                config_yaml(spec, &[("prefill", ps, 1, None), ("decode", ds, 1, Some(max_seqs))], 1, "");
            let label = format!("prefill {} + decode {}", ps.label, ds.label);
            let p = match prep(&yaml) {
                Ok(p) => p,
                Err(e) => {
                    out.rejected.push(format!("disaggregated {label}: {}", first_line(&e)));
                    continue;
                }
            };
            let mut d = match Disaggregated::new(&p, &p.roles[0], &p.roles[1], w) {
                Ok(d) => d,
                Err(e) => {
                    out.rejected.push(format!("disaggregated {label}: {}", first_line(&e)));
                    continue;
                }
            };
            let pre_rate = d.prefill_capacity();
            let pre_ms = d.prefill_ms(1.0)?;
            let b_max = d.dec_b_max;
            for b in BATCHES.into_iter().filter(|b| f64::from(*b) <= b_max) {
                let tpot = d.decode_token_ms(f64::from(b))?;
                let ttft = d.frontend_ms + pre_ms + d.transfer_ms + 1.5 * d.decode_step_ms(f64::from(b))?;
                if tpot > spec.tpot_ms || ttft > spec.ttft_ms {
                    out.disagg_screened += 1;
                    continue;
                }
                let dec_rate = d.dec_ranks * f64::from(b) / (w.osl * tpot / 1000.0);
                for y in 1..=(spec.total_gpus - ps.gpus) / ds.gpus {
                    for x in 1..=(spec.total_gpus - y * ds.gpus) / ps.gpus {
                        out.disagg_screened += 1;
                        let rate = (f64::from(x) * pre_rate).min(f64::from(y) * dec_rate);
                        // The refined estimate's prefill queueing (Kingman), so the screen
                        // does not pass prefill pools run near saturation.
                        let u = rate / (f64::from(x) * pre_rate);
                        let wait = if u < 1.0 {
                            CLOSED_LOOP_CA2 / 2.0 * u / (1.0 - u) * 1000.0 / pre_rate
                        } else {
                            f64::INFINITY
                        };
                        if ttft + wait > spec.ttft_ms {
                            continue;
                        }
                        let gpus = x * ps.gpus + y * ds.gpus;
                        screened.push(Screened {
                            per_gpu: rate * w.osl / f64::from(gpus),
                            pre: pi,
                            dec: di,
                            x,
                            y,
                            b,
                        });
                    }
                }
            }
        }
    }
    out.disagg_screen_passed = screened.len();
    screened.sort_by(|a, b| {
        b.per_gpu.total_cmp(&a.per_gpu).then(
            (a.x * all[a.pre].gpus + a.y * all[a.dec].gpus)
                .cmp(&(b.x * all[b.pre].gpus + b.y * all[b.dec].gpus)),
        )
    });
    for s in screened.iter().take(REFINE) {
        let (ps, ds) = (&all[s.pre], &all[s.dec]);
        let n = s.y * ds.dp * s.b;
        let label = format!(
            "{} x prefill {} + {} x decode {}, {} per decode rank",
            s.x, ps.label, s.y, ds.label, s.b
        );
        let header = format!("servesim estimate --default: disaggregated {label}");
        let yaml =
            config_yaml(spec, &[("prefill", ps, s.x, None), ("decode", ds, s.y, Some(max_seqs))], n, &header);
        let p = prep(&yaml)?;
        let e = crate::estimate::estimate_at(&p, w, Operating::Concurrency(f64::from(n)))?;
        out.disagg_refined += 1;
        let point = SweepPoint { mode: "disaggregated", label, yaml, estimate: e };
        if point.meets(spec) {
            out.disagg.push(point);
        }
    }
    rank(&mut out.disagg);
    Ok(out)
}

/// Best tok/s/GPU first; ties to fewer GPUs, then lower TTFT.
fn rank(points: &mut [SweepPoint]) {
    points.sort_by(|a, b| {
        b.estimate
            .per_gpu()
            .total_cmp(&a.estimate.per_gpu())
            .then(a.estimate.gpus.cmp(&b.estimate.gpus))
            .then(a.estimate.ttft_ms.total_cmp(&b.estimate.ttft_ms))
    });
}

fn first_line(e: &ScenarioError) -> String {
    e.to_string().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}
