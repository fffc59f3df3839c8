//! `servesim estimate`: the steady state of one deployment from its step times, without a replay.
//!
//! A static estimate answers in milliseconds where a replay takes seconds, so it suits quick
//! what-ifs and the first screen of a large search. It uses the same step-time model, memory
//! plan and scheduler budgets as `predict`, but replaces the event loop with a steady-state
//! balance (the model is written up in `docs/estimate.md`):
//!
//! - **Aggregated**, per attention-DP rank with `b` requests in flight: each request spends
//!   `k` steps prefilling (its prompt minus cached shared prefix, in chunks of the token
//!   budget left beside the decodes) and `osl − 1` steps decoding. Per cycle of the batch
//!   there are `b·k/q` mixed steps (`q` prompts packed into one step when they fit) and the
//!   rest are decode-only; when mixed steps outnumber a request's own steps, prefill is the
//!   bottleneck and requests wait for prefill slots. TTFT is half a step of arrival phase, the
//!   request's own prefill steps and the frontend delay; TPOT is the mean time of the other
//!   steps. Throughput follows from Little's law, `b / E2E` per rank.
//! - **Disaggregated**: a prefill rank serves `q` prompts per step; a decode rank holds `b_d =
//!   λ_d · osl · TPOT(b_d)` requests (solved by bisection); TTFT adds the KV transfer and the
//!   first decode step. The closed-loop rate solves `λ · E2E(λ) = concurrency`.
//! - **Serving processes** (aggregated): a request's first token also waits for its own work
//!   and its step's burst of tokens; when the processes serve fewer requests than the engine
//!   could, they set the rate and a closed loop's other clients wait in front of them.
//! - **Limits**: a rank holds at most `max_sequences` requests and as many as its KV capacity
//!   allows (reserved to completion for TensorRT-LLM, half the output on average for vLLM and
//!   SGLang's optimistic admission). Beyond capacity a closed loop's excess requests wait
//!   (added to TTFT) and an open loop is overloaded.
//!
//! Queueing below saturation (bursts, phase locking, preemption) is not estimated: that is what
//! the replay is for, and `servesim estimate --default` replays its winners to show the gap.

use std::fmt::Write as _;

use serde_json::{json, Value as Json};

use servesim_core::engine::Backend;
use servesim_core::timing::{PrefillChunk, RankLoad, StepBreakdown, StepTimer};
use servesim_core::traffic::{LengthDist, Load, Source};

use crate::scenario::{Prepared, PreparedRole, ScenarioError};

pub mod confirm;
pub mod sweep;

/// Bisection steps for the steady-state solves (2⁻⁶⁰ of the bracket: far below any figure
/// the estimate reports).
const BISECTION_STEPS: usize = 60;

/// Batches the throughput peak is first looked for among (geometrically spaced up to the
/// limit; enough that the golden-section search starts next to the peak).
const PEAK_GRID: usize = 32;

/// How much more an earlier batch must serve to count as the peak rather than the limit
/// (interpolation noise in the step tables is a fraction of a percent).
const PEAK_MARGIN: f64 = 1e-3;

/// The golden section, (√5 − 1) / 2.
const GOLDEN: f64 = 0.618_033_988_749_894_9;

/// Bisects `[lo, hi]` for where `below(x)` stops holding (it holds at the low end and not at
/// the high end, once), and returns the final bracket.
fn bisect(
    (mut lo, mut hi): (f64, f64),
    mut below: impl FnMut(f64) -> Result<bool, ScenarioError>,
) -> Result<(f64, f64), ScenarioError> {
    for _ in 0..BISECTION_STEPS {
        let mid = (lo + hi) / 2.0;
        if below(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo, hi))
}

/// Squared coefficient of variation of a closed loop's arrivals at the prefill pool. A finished
/// request is replaced at once, so arrivals follow decode completions and are far more regular
/// than Poisson (1). Fitted to servesim's own replays (docs/estimate.md): the prefill queueing
/// of two disaggregated closed loops at utilisations 0.38 and 0.85 implies 0.17 and 0.21.
pub const CLOSED_LOOP_CA2: f64 = 0.2;

/// What the estimate is for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operating {
    /// Closed loop: this many requests in flight.
    Concurrency(f64),
    /// Open loop at this many requests per second.
    Rate(f64),
}

/// The mean request of the traffic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    /// Mean prompt tokens.
    pub isl: f64,
    /// Mean output tokens.
    pub osl: f64,
    /// Leading prompt tokens shared by every request.
    pub shared_prefix: f64,
    /// Every request has the same prompt and output length: a closed loop's clients, started
    /// together, would finish together and stay in lock step, every wave like the first (an
    /// upper bound: a frontend delay that varies per request loosens the step).
    pub fixed_lengths: bool,
}

/// A static estimate of one deployment.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// `aggregated` or `disaggregated`.
    pub mode: &'static str,
    /// GPUs used.
    pub gpus: u32,
    /// The mean request.
    pub workload: Workload,
    /// The operating point asked for.
    pub operating: Operating,
    /// Requests in flight (closed loop: as asked; open loop: by Little's law).
    pub concurrency: f64,
    /// Completed requests per second.
    pub request_rate_rps: f64,
    /// Mean time to first token over the whole run, as `predict` reports it: a closed loop's
    /// first wave (every client starting at once) weighs in by its share of the requests.
    pub ttft_ms: f64,
    /// Mean time to first token in steady state (without the first wave).
    pub steady_ttft_ms: f64,
    /// Mean time per output token after the first.
    pub tpot_ms: f64,
    /// Mean end-to-end latency.
    pub e2e_ms: f64,
    /// Output tokens per second.
    pub output_tok_s: f64,
    /// What limits throughput: `none`, `prefill`, `decode`, `kv_capacity`, `max_sequences` or
    /// `frontend` (the serving processes).
    pub bottleneck: &'static str,
    /// Open loop only: the offered rate exceeds capacity (latencies are those at capacity and
    /// queues grow without bound).
    pub overloaded: bool,
    /// Most requests per second the deployment serves.
    pub capacity_rps: f64,
    /// Step-level figures (ms, counts) behind the estimate, in a stable order.
    pub detail: Vec<(&'static str, f64)>,
    /// The typical steps, each split into where its time goes (empty when the timing model
    /// has no parts, as with whole-forward tables).
    pub steps: Vec<StepParts>,
}

/// A typical step of an estimate and where its time goes.
#[derive(Clone, Debug, PartialEq)]
pub struct StepParts {
    /// `decode` (decode-only), `mixed` (a prompt beside the decodes) or `prefill`.
    pub step: &'static str,
    /// Decode requests per rank in the step.
    pub decode_requests: u32,
    /// Prompt tokens per rank computed in the step.
    pub prefill_tokens: u32,
    /// Milliseconds by part, adding up to the step (the timing model's breakdown).
    pub parts_ms: StepBreakdown,
}

impl StepParts {
    /// The whole step (ms).
    #[must_use]
    pub fn step_ms(&self) -> f64 {
        self.parts_ms.iter().map(|(_, ms)| ms).sum()
    }

    fn to_json(&self) -> Json {
        let parts: serde_json::Map<String, Json> =
            self.parts_ms.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect();
        json!({
            "step": self.step,
            "decode_requests": self.decode_requests,
            "prefill_tokens": self.prefill_tokens,
            "step_ms": self.step_ms(),
            "parts_ms": parts,
        })
    }

    /// One line: the step and its parts above 0.5% of it, largest first.
    fn line(&self) -> String {
        let parts: Vec<(&str, f64)> = self.parts_ms.iter().map(|(k, ms)| (*k, *ms)).collect();
        describe_step(self.step, u64::from(self.decode_requests), u64::from(self.prefill_tokens), parts)
    }
}

/// The summary line of each step in `estimate.json`'s `step_breakdown` (as `servesim
/// estimate` prints them), for pages that hold the JSON.
#[must_use]
pub fn step_lines(estimate: &Json) -> Vec<String> {
    let Some(steps) = estimate["step_breakdown"].as_array() else { return Vec::new() };
    steps
        .iter()
        .map(|v| {
            let parts: Vec<(&str, f64)> = v["parts_ms"]
                .as_object()
                .map(|o| o.iter().map(|(k, ms)| (k.as_str(), ms.as_f64().unwrap_or(0.0))).collect())
                .unwrap_or_default();
            let count = |key: &str| v[key].as_u64().unwrap_or(0);
            describe_step(
                v["step"].as_str().unwrap_or("?"),
                count("decode_requests"),
                count("prefill_tokens"),
                parts,
            )
        })
        .collect()
}

fn describe_step(step: &str, decodes: u64, prompt_tokens: u64, mut parts: Vec<(&str, f64)>) -> String {
    let total: f64 = parts.iter().map(|(_, ms)| ms).sum();
    parts.retain(|(_, ms)| *ms > total * PART_SHOWN_SHARE);
    parts.sort_by(|a, b| b.1.total_cmp(&a.1));
    let shown: Vec<String> = parts.iter().map(|(k, ms)| format!("{k} {ms:.2}")).collect();
    format!(
        "{step} step ({decodes} decodes, {prompt_tokens} prompt tokens per rank) {total:.2} ms: {}",
        shown.join(", ")
    )
}

/// Parts smaller than this share of their step are left out of the summary line (the JSON
/// has them all).
const PART_SHOWN_SHARE: f64 = 0.005;

impl Estimate {
    /// Output tokens per second per GPU.
    #[must_use]
    pub fn per_gpu(&self) -> f64 {
        self.output_tok_s / f64::from(self.gpus.max(1))
    }

    /// Output tokens per second per user (1000 / TPOT).
    #[must_use]
    pub fn per_user(&self) -> f64 {
        if self.tpot_ms > 0.0 {
            1000.0 / self.tpot_ms
        } else {
            f64::NAN
        }
    }

    /// `estimate.json`.
    #[must_use]
    pub fn to_json(&self) -> Json {
        let (kind, value) = match self.operating {
            Operating::Concurrency(c) => ("concurrency", c),
            Operating::Rate(r) => ("requests_per_second", r),
        };
        let detail: serde_json::Map<String, Json> =
            self.detail.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect();
        json!({
            "mode": self.mode,
            "gpus": self.gpus,
            "input_tokens": self.workload.isl,
            "output_tokens": self.workload.osl,
            "shared_prefix_tokens": self.workload.shared_prefix,
            "load": {"type": kind, "value": value},
            "concurrency": self.concurrency,
            "request_throughput_rps": self.request_rate_rps,
            "capacity_rps": self.capacity_rps,
            "mean_ttft_ms": self.ttft_ms,
            "steady_ttft_ms": self.steady_ttft_ms,
            "mean_tpot_ms": self.tpot_ms,
            "mean_e2e_latency_ms": self.e2e_ms,
            "output_throughput_tok_s": self.output_tok_s,
            "output_throughput_tok_s_per_gpu": self.per_gpu(),
            "output_throughput_tok_s_per_user": self.per_user(),
            "bottleneck": self.bottleneck,
            "overloaded": self.overloaded,
            "detail": detail,
            "step_breakdown": self.steps.iter().map(StepParts::to_json).collect::<Vec<_>>(),
        })
    }

    /// A short table for the terminal.
    #[must_use]
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let load = match self.operating {
            Operating::Concurrency(c) => format!("concurrency {c}"),
            Operating::Rate(r) => format!("{r} req/s offered"),
        };
        let _ = writeln!(
            s,
            "static estimate ({}, {} GPUs, {load}, ISL {:.0}, OSL {:.0}, shared prefix {:.0})",
            self.mode, self.gpus, self.workload.isl, self.workload.osl, self.workload.shared_prefix
        );
        if self.overloaded {
            let _ = writeln!(
                s,
                "OVERLOADED: capacity is {:.3} req/s; queues grow without bound (latencies below are at capacity)",
                self.capacity_rps
            );
        }
        let _ = writeln!(
            s,
            "TTFT {:.1} ms (steady state {:.1} ms)  TPOT {:.2} ms  E2E {:.1} ms",
            self.ttft_ms, self.steady_ttft_ms, self.tpot_ms, self.e2e_ms
        );
        let _ = writeln!(
            s,
            "{:.3} req/s (capacity {:.3}), {:.1} output tok/s, {:.1} tok/s/GPU, {:.1} tok/s/user, {:.1} in flight, bottleneck {}",
            self.request_rate_rps,
            self.capacity_rps,
            self.output_tok_s,
            self.per_gpu(),
            self.per_user(),
            self.concurrency,
            self.bottleneck
        );
        for step in &self.steps {
            let _ = writeln!(s, "{}", step.line());
        }
        s
    }
}

fn run_error(message: impl Into<String>) -> ScenarioError {
    ScenarioError::Run { message: message.into() }
}

/// One role's step times and limits, per attention-DP rank.
struct RoleSteps {
    timer: Box<dyn StepTimer>,
    dp: usize,
    /// Token budget per step and rank (`max_batched_tokens`; SGLang's chunk).
    budget: u32,
    chunked: bool,
    max_seqs: f64,
    kv_tokens: f64,
    loads: Vec<RankLoad>,
    /// Query rows a decode request takes in a step: 1 + its draft tokens when speculating.
    rows: u32,
    /// Output tokens a decode step emits per request on average (speculation's accepted
    /// drafts plus one).
    tokens_per_step: f64,
}

impl RoleSteps {
    fn new(p: &Prepared, role: &PreparedRole) -> Self {
        let dp = role.parallelism.attention_data.max(1) as usize;
        let spec = p.speculation();
        RoleSteps {
            timer: p.timer(role),
            dp,
            budget: role.max_batched_tokens.max(1),
            chunked: p.config.engine.enable_chunked_prefill,
            max_seqs: f64::from(role.max_sequences.max(1)),
            kv_tokens: f64::from(role.blocks_per_rank) * f64::from(role.config.kv_cache.block_size),
            loads: vec![RankLoad::default(); dp],
            rows: 1 + spec.draft_tokens,
            tokens_per_step: spec.expected_tokens(),
        }
    }

    /// One step with the same work on every rank (ms).
    fn step_ms(
        &mut self,
        chunks: &[PrefillChunk],
        decodes: u32,
        kv_per_decode: f64,
    ) -> Result<f64, ScenarioError> {
        self.fill(chunks, decodes, kv_per_decode);
        let d = self.timer.step_time(&self.loads).map_err(|e| run_error(e.message))?;
        Ok(d.as_secs_f64() * 1000.0)
    }

    /// Lays out one step with the same work on every rank in `loads`.
    fn fill(&mut self, chunks: &[PrefillChunk], decodes: u32, kv_per_decode: f64) {
        // A speculating request verifies `rows` positions, each seeing one more key than the
        // one before, as the replay's worker lays them out.
        let q = f64::from(self.rows);
        let kv_per_request = q * kv_per_decode + q * (q - 1.0) / 2.0;
        for l in &mut self.loads {
            l.clear();
            l.prefill.extend_from_slice(chunks);
            l.decode_requests = decodes * self.rows;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            {
                l.decode_kv_tokens = (f64::from(decodes) * kv_per_request).round() as u64;
            }
        }
    }

    /// The step `step_ms` times, by part, when the timing model has parts.
    fn parts(
        &mut self,
        step: &'static str,
        chunks: &[PrefillChunk],
        decodes: u32,
        kv_per_decode: f64,
    ) -> Option<StepParts> {
        self.fill(chunks, decodes, kv_per_decode);
        let parts = self.timer.breakdown(&self.loads)?;
        Some(StepParts {
            step,
            decode_requests: decodes,
            prefill_tokens: chunks.iter().map(|c| c.new_tokens).sum(),
            parts_ms: parts.into_iter().map(|(k, secs)| (k, secs * 1000.0)).collect(),
        })
    }

    /// A decode-only step for `b` requests (linear between whole batch sizes; at least one).
    fn gen_ms(&mut self, b: f64, kv_per_decode: f64) -> Result<f64, ScenarioError> {
        let b = b.max(1.0);
        let lo = b.floor();
        let t_lo = self.step_ms(&[], to_u32(lo), kv_per_decode)?;
        if b == lo {
            return Ok(t_lo);
        }
        let t_hi = self.step_ms(&[], to_u32(lo + 1.0), kv_per_decode)?;
        Ok(t_lo + (t_hi - t_lo) * (b - lo))
    }

    /// A decode-only step's time per output token for `b` requests (ms): the step over the
    /// tokens a request emits in it.
    fn token_ms(&mut self, b: f64, kv_per_decode: f64) -> Result<f64, ScenarioError> {
        Ok(self.gen_ms(b, kv_per_decode)? / self.tokens_per_step)
    }

    /// How a prompt of `new` tokens after `cached` ones is split into chunks when `beside`
    /// other tokens share the step: the chunks, and how many whole prompts fit in one step.
    fn plan(&self, new: f64, cached: f64, beside: f64) -> (Vec<PrefillChunk>, u32) {
        let new = to_u32(new.max(1.0));
        let cached = to_u32(cached);
        let room = if self.chunked { (f64::from(self.budget) - beside).max(1.0) } else { f64::INFINITY };
        if f64::from(new) > room {
            let size = to_u32(room);
            let mut chunks = Vec::new();
            let mut done = 0;
            while done < new {
                let n = size.min(new - done);
                chunks.push(PrefillChunk { new_tokens: n, context_tokens: cached + done });
                done += n;
            }
            (chunks, 1)
        } else {
            // As many whole prompts as the budget holds, and no more than may run at once (a
            // prefill role runs one at a time by default, as its replay does).
            let fit = ((f64::from(self.budget) - beside).max(0.0) / f64::from(new)).min(self.max_seqs);
            (vec![PrefillChunk { new_tokens: new, context_tokens: cached }], to_u32(fit.floor().max(1.0)))
        }
    }
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn to_u32(x: f64) -> u32 {
    x.clamp(0.0, f64::from(u32::MAX)).round() as u32
}

/// The mean request of a prepared scenario's traffic.
///
/// # Errors
/// Sessions and trace replays: their prefix reuse and pacing need the replay.
pub fn workload(p: &Prepared) -> Result<Workload, ScenarioError> {
    match &p.traffic.source {
        Source::Synthetic { input_tokens, output_tokens, shared_prefix_tokens } => {
            let isl = input_tokens.nominal_mean().max(1.0);
            Ok(Workload {
                isl,
                osl: output_tokens.nominal_mean().max(1.0),
                shared_prefix: f64::from(*shared_prefix_tokens).min(isl - 1.0).max(0.0),
                fixed_lengths: matches!(
                    (input_tokens, output_tokens),
                    (LengthDist::Fixed(_), LengthDist::Fixed(_))
                ),
            })
        }
        Source::Sessions(_) => Err(run_error(
            "estimate needs synthetic single-turn traffic; multi-turn sessions need a replay (servesim predict)",
        )),
        Source::Trace(_) => Err(run_error("estimate needs synthetic traffic; trace replays need servesim predict")),
    }
}

/// The operating point of a prepared scenario's load.
///
/// # Errors
/// Trace-timestamp pacing.
pub fn operating(p: &Prepared) -> Result<Operating, ScenarioError> {
    match p.traffic.load {
        Load::Concurrency(c) => Ok(Operating::Concurrency(f64::from(c))),
        // Static: bursts (gamma cv) change queueing, not the mean rate.
        Load::Poisson(r) | Load::ConstantRate(r) | Load::Gamma { rate: r, .. } => Ok(Operating::Rate(r)),
        Load::TraceTimestamps { .. } => Err(run_error("estimate cannot pace by trace timestamps")),
    }
}

/// Estimates a prepared scenario at its own traffic.
///
/// # Errors
/// Traffic the estimate cannot describe, or a step the timing model cannot time.
pub fn estimate(p: &Prepared) -> Result<Estimate, ScenarioError> {
    estimate_at(p, workload(p)?, operating(p)?)
}

/// Estimates a prepared deployment for a given mean request and operating point.
///
/// # Errors
/// A step the timing model cannot time, or a non-positive operating point.
pub fn estimate_at(p: &Prepared, w: Workload, op: Operating) -> Result<Estimate, ScenarioError> {
    match op {
        Operating::Concurrency(c) | Operating::Rate(c) if !(c > 0.0 && c.is_finite()) => {
            return Err(run_error("the load must be positive"));
        }
        _ => {}
    }
    match &p.roles[..] {
        [a] => Aggregated::new(p, a, w)?.solve(op),
        [pre, dec] => {
            let mut d = Disaggregated::new(p, pre, dec, w)?;
            d.arrival_ca2 = match (op, &p.traffic.load) {
                (Operating::Concurrency(_), _) => CLOSED_LOOP_CA2,
                (_, Load::ConstantRate(_)) => 0.0,
                (_, Load::Gamma { cv, .. }) => cv * cv,
                _ => 1.0,
            };
            d.solve(op)
        }
        _ => Err(run_error("a deployment has one role (aggregated) or two (prefill, decode)")),
    }
}

/// Per-rank steady state of an aggregated worker at `b` requests in flight.
#[derive(Clone, Copy, Debug)]
struct AggPoint {
    ttft_ms: f64,
    tpot_ms: f64,
    e2e_ms: f64,
    prefill_bound: bool,
    mix_ms: f64,
    gen_ms: f64,
    mix_steps: f64,
    gen_steps: f64,
}

pub(crate) struct Aggregated {
    steps: RoleSteps,
    w: Workload,
    pub(crate) ranks: f64,
    gpus: u32,
    /// Prompt tokens each request computes (the shared prefix comes from the cache).
    new_tokens: f64,
    cached: f64,
    kv_mean: f64,
    pub(crate) b_max: f64,
    kv_limited: bool,
    frontend_ms: f64,
    /// The replica's serving processes ([`ServingProcesses`]).
    serving: ServingProcesses,
    /// SGLang's `scheduler_recv_interval` (1 elsewhere): decode steps between intakes.
    recv_interval: f64,
    /// Requests the traffic sends (the start-up wave's share of the mean).
    pub(crate) total_requests: f64,
    /// The batch per rank that serves the most requests per second, and that rate (found
    /// once, [`Aggregated::peak`]).
    peak: Option<(f64, f64)>,
}

/// A replica's serving processes in steady state (`servesim_core::frontend`): each writes the
/// tokens of its requests at the end of every engine step and does each request's own work when
/// it arrives. Below saturation a request waits for its own work and for its process to write
/// its step's burst of tokens before its client sees the first one (queueing behind other
/// bursts is not estimated, as elsewhere in the estimate); at saturation the processes cap the
/// request rate and a closed loop's other clients wait in front of them.
#[derive(Clone, Copy, Debug, Default)]
struct ServingProcesses {
    /// Processes per replica (0: no serving work is modelled).
    processes: f64,
    /// Work per request, ms.
    request_ms: f64,
    /// Work per output token, ms.
    token_ms: f64,
    /// Attention-DP ranks per replica, whose tokens the same processes write.
    ranks_per_replica: f64,
}

impl ServingProcesses {
    /// Client-side delay a request's first token sees at `b` requests per rank emitting
    /// `tokens_per_step` each a step: its own work and its process's burst of tokens.
    fn first_token_delay_ms(&self, b: f64, tokens_per_step: f64) -> f64 {
        if self.processes <= 0.0 {
            return 0.0;
        }
        let burst = b * self.ranks_per_replica * tokens_per_step / self.processes * self.token_ms;
        self.request_ms + burst
    }

    /// Most requests per second one rank's share of the processes serves (infinite without
    /// serving work).
    fn rank_capacity_rps(&self, osl: f64) -> f64 {
        let work_ms = self.request_ms + osl * self.token_ms;
        if self.processes <= 0.0 || work_ms <= 0.0 {
            return f64::INFINITY;
        }
        self.processes / self.ranks_per_replica / (work_ms / 1000.0)
    }
}

/// Mean time until a prompt of a wave of `b` (arriving together on an idle rank) is prefilled:
/// groups of `q` prompts (or one prompt's `chunks`) one step after another, the last group
/// holding what is left.
fn wave_wait_ms(
    steps: &mut RoleSteps,
    chunks: &[PrefillChunk],
    q: u32,
    b: f64,
) -> Result<f64, ScenarioError> {
    let total = to_u32(b.max(1.0));
    let (mut left, mut clock, mut sum) = (total, 0.0, 0.0);
    while left > 0 {
        let g = q.min(left);
        for c in chunks {
            let packed: Vec<PrefillChunk> = if chunks.len() == 1 { vec![*c; g as usize] } else { vec![*c] };
            clock += steps.step_ms(&packed, 0, 0.0)?;
        }
        sum += f64::from(g) * clock;
        left -= g;
    }
    Ok(sum / f64::from(total))
}

/// The share of a closed loop's requests that see first-wave queueing: the first wave's, or
/// all of them when identical requests keep the clients in lock step.
fn wave_share(w: &Workload, n: f64, total: f64) -> f64 {
    if w.fixed_lengths {
        1.0
    } else {
        (n / total).min(1.0)
    }
}

/// KV a request holds on average (or, for reserve-to-completion admission, at most).
fn kv_need(backend: Backend, w: &Workload, cached: f64) -> f64 {
    let out = if backend == Backend::TrtLlm { w.osl } else { w.osl / 2.0 };
    (w.isl - cached + out).max(1.0)
}

impl Aggregated {
    pub(crate) fn new(p: &Prepared, role: &PreparedRole, w: Workload) -> Result<Self, ScenarioError> {
        let steps = RoleSteps::new(p, role);
        let cached = if role.config.kv_cache.prefix_caching { w.shared_prefix } else { 0.0 };
        // Shared prefix blocks are held once per rank.
        let kv_room = (steps.kv_tokens - cached).max(0.0);
        let by_kv = (kv_room / kv_need(p.config.engine.backend, &w, cached)).floor();
        if by_kv < 1.0 {
            return Err(run_error(format!(
                "one request ({:.0} + {:.0} tokens) does not fit in a rank's KV cache ({:.0} tokens)",
                w.isl, w.osl, steps.kv_tokens
            )));
        }
        let b_max = by_kv.min(steps.max_seqs);
        let spec = p.frontend_spec(role);
        let serving = if spec.is_active() {
            ServingProcesses {
                processes: f64::from(spec.processes),
                request_ms: spec.per_request.as_secs_f64() * 1000.0,
                token_ms: spec.per_token.as_secs_f64() * 1000.0,
                ranks_per_replica: steps.dp as f64,
            }
        } else {
            ServingProcesses::default()
        };
        Ok(Aggregated {
            serving,
            ranks: f64::from(role.config.parallelism.replicas) * steps.dp as f64,
            gpus: role.gpus(),
            new_tokens: (w.isl - cached).max(1.0),
            cached,
            kv_mean: w.isl + w.osl / 2.0,
            kv_limited: by_kv < steps.max_seqs,
            b_max,
            frontend_ms: p.frontend_delay.as_secs_f64() * 1000.0,
            recv_interval: if p.config.engine.backend == Backend::Sglang {
                f64::from(role.config.scheduler.sglang.recv_interval.max(1))
            } else {
                1.0
            },
            total_requests: f64::from(p.traffic.max_requests()),
            peak: None,
            steps,
            w,
        })
    }

    /// The mixed steps at `b` requests per rank: a prompt's chunks, how many prompts share a
    /// step, how many decodes run beside them, and a request's life in steps.
    fn mix_plan(&self, b: f64) -> (Vec<PrefillChunk>, f64, f64, f64) {
        let rows = f64::from(self.steps.rows);
        let (chunks, fit) = self.steps.plan(self.new_tokens, self.cached, (b - 1.0) * rows);
        let k = chunks.len() as f64;
        // Decode steps emit `tokens_per_step` tokens each (more than one when speculating).
        let life = k + (self.w.osl - 1.0) / self.steps.tokens_per_step;
        // Prompts share a step only when more of them start per step than one: about b·k/life
        // requests enter prefill each step in steady state.
        let q = (b * k / life).ceil().clamp(1.0, f64::from(fit).min(b));
        // The mixed steps: q prompts (or one chunk) beside the others' decodes.
        (chunks, q, (b - q).max(0.0), life)
    }

    /// The typical steps at `b` requests per rank by part: decode-only, and the first of a
    /// prompt's mixed steps.
    fn step_parts(&mut self, b: f64) -> Vec<StepParts> {
        let b = b.max(1.0);
        let (chunks, q, beside, _) = self.mix_plan(b);
        let packed: Vec<PrefillChunk> =
            if chunks.len() == 1 { vec![chunks[0]; to_u32(q) as usize] } else { chunks[..1].to_vec() };
        let kv = self.kv_mean;
        [
            self.steps.parts("decode", &[], to_u32(b), kv),
            self.steps.parts("mixed", &packed, to_u32(beside), kv),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn point(&mut self, b: f64) -> Result<AggPoint, ScenarioError> {
        let b = b.max(1.0);
        let osl = self.w.osl;
        let per_step = self.steps.tokens_per_step;
        let (chunks, q, decodes_beside, life) = self.mix_plan(b);
        let k = chunks.len() as f64;
        let mut own_ms = 0.0;
        let mut mix_sum = 0.0;
        for c in &chunks {
            let packed: Vec<PrefillChunk> =
                if chunks.len() == 1 { vec![*c; to_u32(q) as usize] } else { vec![*c] };
            let t = self.steps.step_ms(&packed, to_u32(decodes_beside), self.kv_mean)?;
            own_ms += t;
            mix_sum += t;
        }
        let mix_ms = mix_sum / k;
        let gen_ms = self.steps.gen_ms(b, self.kv_mean)?;
        let mix_steps = b * k / q;
        let cycle_steps = life.max(mix_steps);
        let gen_steps = (cycle_steps - mix_steps).max(0.0);
        let cycle_ms = mix_steps * mix_ms + gen_steps * gen_ms;
        let mean_step = cycle_ms / cycle_steps;
        // A prompt waits for the scheduler's next intake: the next step (half a step on
        // average), or with SGLang's receive interval the next of the intakes every that many
        // decode steps and right after each prefill step, whichever comes first.
        let intake_steps = self.recv_interval.min(cycle_steps / mix_steps.max(f64::MIN_POSITIVE)).max(1.0);
        let wait_ms = intake_steps * mean_step / 2.0 + (cycle_steps - life) * mean_step;
        let tpot_ms = if osl > 1.0 {
            (cycle_ms - own_ms).max(0.0) / (cycle_steps - k).max(1.0) / per_step
        } else {
            0.0
        };
        let ttft_ms = self.frontend_ms + wait_ms + own_ms + self.serving.first_token_delay_ms(b, per_step);
        Ok(AggPoint {
            ttft_ms,
            tpot_ms,
            e2e_ms: ttft_ms + (osl - 1.0) * tpot_ms,
            prefill_bound: mix_steps > life,
            mix_ms,
            gen_ms,
            mix_steps,
            gen_steps,
        })
    }

    /// Mean TTFT of a closed loop's first wave: `b` prompts arrive together on an idle rank
    /// and are prefilled in groups of as many as fit in a step.
    fn start_wave_ttft(&mut self, b: f64) -> Result<f64, ScenarioError> {
        let (chunks, fit) = self.steps.plan(self.new_tokens, self.cached, 0.0);
        let q = if chunks.len() > 1 { 1 } else { fit.max(1) };
        let wait = wave_wait_ms(&mut self.steps, &chunks, q, b)?;
        Ok(self.frontend_ms + wait + self.serving.first_token_delay_ms(b, self.steps.tokens_per_step))
    }

    fn wave_share(&self, n: f64) -> f64 {
        wave_share(&self.w, n, self.total_requests)
    }

    fn rate(&mut self, b: f64) -> Result<f64, ScenarioError> {
        Ok(b / (self.point(b)?.e2e_ms / 1000.0))
    }

    /// The batch per rank that serves the most requests per second, and that rate. The rate
    /// grows with the batch until a limit, except where prompts fill every step: then each
    /// added decode slows the steps that carry the prompts, and the rate peaks below the
    /// limit. A geometric scan of the batches finds the best, and a golden-section search
    /// narrows an interior best between its neighbours.
    fn peak(&mut self) -> Result<(f64, f64), ScenarioError> {
        if let Some(p) = self.peak {
            return Ok(p);
        }
        let grid: Vec<f64> =
            (0..=PEAK_GRID).map(|i| libm::pow(self.b_max, i as f64 / PEAK_GRID as f64)).collect();
        let mut rates = Vec::with_capacity(grid.len());
        for &b in &grid {
            rates.push(self.rate(b)?);
        }
        let last = grid.len() - 1;
        let top = (0..grid.len()).fold(last, |a, i| if rates[i] > rates[a] { i } else { a });
        let best = if rates[top] > rates[last] * (1.0 + PEAK_MARGIN) { top } else { last };
        let mut peak = (grid[best], rates[best]);
        if best + 1 < grid.len() {
            let (mut lo, mut hi) = (grid[best.saturating_sub(1)], grid[best + 1]);
            for _ in 0..BISECTION_STEPS {
                let a = hi - GOLDEN * (hi - lo);
                let b = lo + GOLDEN * (hi - lo);
                if self.rate(a)? < self.rate(b)? {
                    lo = a;
                } else {
                    hi = b;
                }
            }
            let b = (lo + hi) / 2.0;
            let r = self.rate(b)?;
            if r > peak.1 {
                peak = (b, r);
            }
        }
        self.peak = Some(peak);
        Ok(peak)
    }

    /// The batch per rank that serves `target` requests per second, at most `b_peak` (the
    /// rate grows with the batch up to the peak, so bisection finds it).
    fn batch_for_rate(&mut self, target: f64, b_peak: f64) -> Result<f64, ScenarioError> {
        Ok(bisect((0.0, b_peak), |b| Ok(self.rate(b)? < target))?.1)
    }

    /// The batch per rank when the serving processes pass `rate` requests per second to the
    /// engine: by Little's law over the time a request spends in the engine, which excludes
    /// the frontend delay and the processes' own work before it and after its last token.
    fn batch_behind_serving(&mut self, rate: f64, b_peak: f64) -> Result<f64, ScenarioError> {
        let below = |b: f64| {
            let b = b.max(1.0);
            let outside_ms =
                self.frontend_ms + self.serving.first_token_delay_ms(b, self.steps.tokens_per_step);
            let in_engine_s = ((self.point(b)?.e2e_ms - outside_ms) / 1000.0).max(f64::MIN_POSITIVE);
            Ok(b / in_engine_s < rate)
        };
        Ok(bisect((0.0, b_peak), below)?.1)
    }

    pub(crate) fn solve(&mut self, op: Operating) -> Result<Estimate, ScenarioError> {
        let (b_peak, engine_peak) = self.peak()?;
        // The serving processes may serve fewer requests than the engine could: then they set
        // the rate, at the batch that serves just that.
        let serving_cap = self.serving.rank_capacity_rps(self.w.osl);
        let frontend_bound = serving_cap < engine_peak;
        let (b_top, peak_rate) = if frontend_bound {
            (self.batch_behind_serving(serving_cap, b_peak)?, serving_cap)
        } else {
            (b_peak, engine_peak)
        };
        let capacity_rps = peak_rate * self.ranks;
        let limit = if self.kv_limited { "kv_capacity" } else { "max_sequences" };
        // Past an interior peak it is the prompts that bound the rate, not the limit.
        let rate_limit = if frontend_bound {
            "frontend"
        } else if b_peak < self.b_max {
            "prefill"
        } else {
            limit
        };
        let (b, extra_wait_ms, overloaded, bound) = match op {
            Operating::Concurrency(n) => {
                let per_rank = n / self.ranks;
                if frontend_bound && self.rate(per_rank.min(self.b_max))? > serving_cap {
                    // The clients the processes cannot serve wait in front of them.
                    let at = self.point(b_top)?;
                    (b_top, (per_rank / serving_cap * 1000.0 - at.e2e_ms).max(0.0), false, Some("frontend"))
                } else if per_rank > self.b_max {
                    let at = self.point(self.b_max)?;
                    let served_rps = self.b_max / (at.e2e_ms / 1000.0);
                    (self.b_max, (per_rank / served_rps * 1000.0 - at.e2e_ms).max(0.0), false, Some(limit))
                } else {
                    (per_rank, 0.0, false, None)
                }
            }
            Operating::Rate(r) => {
                let target = r / self.ranks;
                if peak_rate < target {
                    (b_top, 0.0, true, Some(rate_limit))
                } else {
                    (self.batch_for_rate(target, b_peak)?, 0.0, false, None)
                }
            }
        };
        let at = self.point(b)?;
        // A closed loop starts every client at once: that first wave queues for prefill and
        // weighs in the benchmark's mean by its share of the requests.
        let (wave_ms, share) = match op {
            Operating::Concurrency(n) if self.total_requests > 0.0 => {
                (self.start_wave_ttft(b)?, self.wave_share(n))
            }
            _ => (0.0, 0.0),
        };
        let steady_ttft = at.ttft_ms + extra_wait_ms;
        let ttft_ms = share * wave_ms.max(steady_ttft) + (1.0 - share) * steady_ttft;
        let e2e_ms = at.e2e_ms + extra_wait_ms + (ttft_ms - steady_ttft);
        // Behind saturated serving processes the engine's batch serves just what they pass on.
        let served_rps = if bound == Some("frontend") { serving_cap } else { b / (at.e2e_ms / 1000.0) };
        let request_rate_rps = match op {
            Operating::Rate(r) if !overloaded => r,
            _ => served_rps * self.ranks,
        };
        let bottleneck = bound.unwrap_or(if at.prefill_bound { "prefill" } else { "none" });
        Ok(Estimate {
            mode: "aggregated",
            gpus: self.gpus,
            workload: self.w,
            operating: op,
            concurrency: match op {
                Operating::Concurrency(n) => n,
                Operating::Rate(_) => request_rate_rps * e2e_ms / 1000.0,
            },
            request_rate_rps,
            ttft_ms,
            steady_ttft_ms: steady_ttft,
            tpot_ms: at.tpot_ms,
            e2e_ms,
            output_tok_s: request_rate_rps * self.w.osl,
            bottleneck,
            overloaded,
            capacity_rps,
            detail: vec![
                ("batch_per_rank", b),
                ("ranks", self.ranks),
                ("max_batch_per_rank", self.b_max),
                ("peak_batch_per_rank", b_peak),
                ("mixed_step_ms", at.mix_ms),
                ("decode_step_ms", at.gen_ms),
                ("mixed_steps_per_cycle", at.mix_steps),
                ("decode_steps_per_cycle", at.gen_steps),
                ("queue_wait_ms", extra_wait_ms),
                ("serving_first_token_ms", self.serving.first_token_delay_ms(b, self.steps.tokens_per_step)),
                (
                    "serving_capacity_rps",
                    if serving_cap.is_finite() { serving_cap * self.ranks } else { 0.0 },
                ),
                ("steady_ttft_ms", steady_ttft),
                ("start_wave_ttft_ms", wave_ms),
                ("start_wave_share", share),
            ],
            steps: self.step_parts(b),
        })
    }
}

pub(crate) struct Disaggregated {
    pre: RoleSteps,
    dec: RoleSteps,
    w: Workload,
    pub(crate) pre_ranks: f64,
    pub(crate) dec_ranks: f64,
    gpus: u32,
    new_tokens: f64,
    kv_mean: f64,
    pub(crate) dec_b_max: f64,
    dec_kv_limited: bool,
    pub(crate) transfer_ms: f64,
    pub(crate) frontend_ms: f64,
    /// Squared coefficient of variation of arrivals at the prefill pool.
    pub(crate) arrival_ca2: f64,
    /// Prompts per second one prefill rank serves when they queue (fixed per deployment).
    pre_rank_rps: f64,
    /// Requests the traffic sends (the start-up wave's share of the mean).
    total_requests: f64,
    /// Prefill: the chunks of one prompt, and prompts per step.
    chunks: Vec<PrefillChunk>,
    fit: f64,
}

/// Disaggregated steady state at a request rate.
#[derive(Clone, Copy, Debug)]
struct PdPoint {
    ttft_ms: f64,
    tpot_ms: f64,
    /// A decode step (a round of every request), which TPOT divides among its tokens.
    step_ms: f64,
    e2e_ms: f64,
    prefill_ms: f64,
    prefill_queue_ms: f64,
    decode_batch: f64,
}

impl Disaggregated {
    pub(crate) fn new(
        p: &Prepared,
        pre: &PreparedRole,
        dec: &PreparedRole,
        w: Workload,
    ) -> Result<Self, ScenarioError> {
        let pre_steps = RoleSteps::new(p, pre);
        let dec_steps = RoleSteps::new(p, dec);
        let cached = if pre.config.kv_cache.prefix_caching { w.shared_prefix } else { 0.0 };
        let by_kv = (dec_steps.kv_tokens / kv_need(p.config.engine.backend, &w, 0.0)).floor();
        if by_kv < 1.0 {
            return Err(run_error(format!(
                "one request ({:.0} + {:.0} tokens) does not fit in a decode rank's KV cache ({:.0} tokens)",
                w.isl, w.osl, dec_steps.kv_tokens
            )));
        }
        if pre_steps.kv_tokens < w.isl {
            return Err(run_error(format!(
                "one prompt ({:.0} tokens) does not fit in a prefill rank's KV cache ({:.0} tokens)",
                w.isl, pre_steps.kv_tokens
            )));
        }
        let t = p.config.engine.kv_transfer;
        #[allow(clippy::cast_precision_loss)]
        let bytes_per_token = t.bytes_per_token.unwrap_or(pre.memory.kv_bytes_per_token) as f64;
        // Without a configured bandwidth the replay moves KV instantly; so does the estimate.
        let transfer_ms = t
            .bandwidth_gb_per_second
            .filter(|g| *g > 0.0)
            .map_or(0.0, |g| w.isl * bytes_per_token / (g * 1e9) * 1000.0);
        let new_tokens = (w.isl - cached).max(1.0);
        let (chunks, fit) = pre_steps.plan(new_tokens, cached, 0.0);
        let mut d = Disaggregated {
            pre_ranks: f64::from(pre.config.parallelism.replicas) * pre_steps.dp as f64,
            dec_ranks: f64::from(dec.config.parallelism.replicas) * dec_steps.dp as f64,
            gpus: pre.gpus() + dec.gpus(),
            new_tokens,
            kv_mean: w.isl + w.osl / 2.0,
            dec_b_max: by_kv.min(dec_steps.max_seqs),
            dec_kv_limited: by_kv < dec_steps.max_seqs,
            transfer_ms,
            frontend_ms: p.frontend_delay.as_secs_f64() * 1000.0,
            chunks,
            fit: f64::from(fit),
            arrival_ca2: 1.0,
            pre_rank_rps: 0.0,
            total_requests: f64::from(p.traffic.max_requests()),
            pre: pre_steps,
            dec: dec_steps,
            w,
        };
        let q = if d.chunks.len() > 1 { 1.0 } else { d.fit };
        d.pre_rank_rps = q / (d.prefill_ms(q)? / 1000.0);
        Ok(d)
    }

    /// Prefill time of one step carrying `q` prompts (or one prompt's chunks).
    pub(crate) fn prefill_ms(&mut self, q: f64) -> Result<f64, ScenarioError> {
        if self.chunks.len() > 1 {
            let mut total = 0.0;
            for c in self.chunks.clone() {
                total += self.pre.step_ms(&[c], 0, 0.0)?;
            }
            return Ok(total);
        }
        let c = self.chunks[0];
        self.pre.step_ms(&vec![c; to_u32(q.max(1.0)) as usize], 0, 0.0)
    }

    /// Requests per second the prefill pool can serve.
    pub(crate) fn prefill_capacity(&self) -> f64 {
        self.pre_rank_rps * self.pre_ranks
    }

    /// Decode-only step time at `b` requests per rank (ms).
    pub(crate) fn decode_step_ms(&mut self, b: f64) -> Result<f64, ScenarioError> {
        self.dec.gen_ms(b, self.kv_mean)
    }

    /// Decode time per output token at `b` requests per rank (ms): the step time, or less
    /// when speculation emits several tokens a step.
    pub(crate) fn decode_token_ms(&mut self, b: f64) -> Result<f64, ScenarioError> {
        self.dec.token_ms(b, self.kv_mean)
    }

    /// Requests per second the decode pool can serve.
    fn decode_capacity(&mut self) -> Result<f64, ScenarioError> {
        let t = self.dec.token_ms(self.dec_b_max, self.kv_mean)?;
        Ok(self.dec_b_max / (self.w.osl * t / 1000.0) * self.dec_ranks)
    }

    fn point(&mut self, rate: f64) -> Result<PdPoint, ScenarioError> {
        // Prefill: prompts arriving during one step share the next one.
        let per_pre = rate / self.pre_ranks;
        let single = self.prefill_ms(1.0)?;
        let q =
            if self.chunks.len() > 1 { 1.0 } else { (per_pre * single / 1000.0).ceil().clamp(1.0, self.fit) };
        let prefill_ms = self.prefill_ms(q)?;
        // Decode: b requests per rank, each resident for osl steps of TPOT(b).
        let per_dec = rate / self.dec_ranks;
        let (_, b) = bisect((0.0, self.dec_b_max), |b| {
            Ok(per_dec * self.w.osl * self.dec.token_ms(b, self.kv_mean)? / 1000.0 > b)
        })?;
        let tpot_ms = self.dec.token_ms(b, self.kv_mean)?;
        let step_ms = self.dec.gen_ms(b, self.kv_mean)?;
        // Prompts queue for a prefill rank: Kingman's G/D/1 wait with the arrivals' variability.
        let mu = self.pre_rank_rps;
        let u = per_pre / mu;
        let queue_ms =
            if u < 1.0 { self.arrival_ca2 / 2.0 * u / (1.0 - u) * 1000.0 / mu } else { f64::INFINITY };
        // An idle prefill rank starts a prompt at once; waiting behind busy ones is the queue.
        let ttft_ms = self.frontend_ms + queue_ms + prefill_ms + self.transfer_ms + step_ms * 1.5;
        Ok(PdPoint {
            ttft_ms,
            tpot_ms,
            step_ms,
            e2e_ms: ttft_ms + (self.w.osl - 1.0) * tpot_ms,
            prefill_ms,
            prefill_queue_ms: queue_ms,
            decode_batch: b,
        })
    }

    pub(crate) fn solve(&mut self, op: Operating) -> Result<Estimate, ScenarioError> {
        let pre_cap = self.prefill_capacity();
        let dec_cap = self.decode_capacity()?;
        let capacity = pre_cap.min(dec_cap);
        let limit = if pre_cap <= dec_cap {
            "prefill"
        } else if self.dec_kv_limited {
            "kv_capacity"
        } else {
            "decode"
        };
        let (rate, extra_wait_ms, overloaded, bound) = match op {
            Operating::Rate(r) if r > capacity => (capacity, 0.0, true, Some(limit)),
            Operating::Rate(r) => (r, 0.0, false, None),
            Operating::Concurrency(n) => {
                let at_cap = self.point(capacity)?;
                if capacity * at_cap.e2e_ms / 1000.0 <= n {
                    (capacity, (n / capacity * 1000.0 - at_cap.e2e_ms).max(0.0), false, Some(limit))
                } else {
                    // λ·E2E(λ) grows with λ: bisect for the rate that keeps n in flight.
                    let (lo, _) = bisect((0.0, capacity), |r| Ok(r * self.point(r)?.e2e_ms / 1000.0 < n))?;
                    (lo, 0.0, false, None)
                }
            }
        };
        let at = self.point(rate)?;
        // The closed loop's first wave: every prompt arrives at once and the prefill ranks
        // work through them in groups (as for aggregated workers).
        let (wave_ms, share) = match op {
            Operating::Concurrency(n) if self.total_requests > 0.0 => {
                let q = if self.chunks.len() > 1 { 1 } else { to_u32(self.fit).max(1) };
                let chunks = self.chunks.clone();
                let wait = wave_wait_ms(&mut self.pre, &chunks, q, n / self.pre_ranks)?;
                let wave = self.frontend_ms + wait + self.transfer_ms + at.step_ms * 1.5;
                (wave, wave_share(&self.w, n, self.total_requests))
            }
            _ => (0.0, 0.0),
        };
        let steady_ttft = at.ttft_ms + extra_wait_ms;
        let ttft_ms = share * wave_ms.max(steady_ttft) + (1.0 - share) * steady_ttft;
        let e2e_ms = at.e2e_ms + extra_wait_ms + (ttft_ms - steady_ttft);
        Ok(Estimate {
            mode: "disaggregated",
            gpus: self.gpus,
            workload: self.w,
            operating: op,
            concurrency: match op {
                Operating::Concurrency(n) => n,
                Operating::Rate(_) => rate * e2e_ms / 1000.0,
            },
            request_rate_rps: rate,
            ttft_ms,
            steady_ttft_ms: steady_ttft,
            tpot_ms: at.tpot_ms,
            e2e_ms,
            output_tok_s: rate * self.w.osl,
            bottleneck: bound.unwrap_or("none"),
            overloaded,
            capacity_rps: capacity,
            detail: vec![
                ("prefill_ranks", self.pre_ranks),
                ("decode_ranks", self.dec_ranks),
                ("prefill_step_ms", at.prefill_ms),
                ("prefill_queue_ms", at.prefill_queue_ms),
                ("prefill_capacity_rps", pre_cap),
                ("decode_batch_per_rank", at.decode_batch),
                ("max_decode_batch_per_rank", self.dec_b_max),
                ("decode_step_ms", at.step_ms),
                ("decode_capacity_rps", dec_cap),
                ("kv_transfer_ms", self.transfer_ms),
                ("prefill_new_tokens", self.new_tokens),
                ("queue_wait_ms", extra_wait_ms),
                ("steady_ttft_ms", steady_ttft),
                ("start_wave_ttft_ms", wave_ms),
                ("start_wave_share", share),
            ],
            steps: self.step_parts(at.decode_batch),
        })
    }

    /// The typical steps by part: a prefill step (its prompts, or a long prompt's first
    /// chunk) and a decode step at `b` requests per rank.
    fn step_parts(&mut self, b: f64) -> Vec<StepParts> {
        let q = if self.chunks.len() > 1 { 1.0 } else { self.fit.max(1.0) };
        let prefill: Vec<PrefillChunk> = if self.chunks.len() > 1 {
            self.chunks[..1].to_vec()
        } else {
            vec![self.chunks[0]; to_u32(q) as usize]
        };
        let kv = self.kv_mean;
        [self.pre.parts("prefill", &prefill, 0, 0.0), self.dec.parts("decode", &[], to_u32(b.max(1.0)), kv)]
            .into_iter()
            .flatten()
            .collect()
    }
}
