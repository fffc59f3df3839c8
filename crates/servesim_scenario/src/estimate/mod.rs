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

use crate::config::RouterPolicy;
use crate::scenario::{Prepared, PreparedRole, ScenarioError};

mod aggregated;
pub mod confirm;
mod disaggregated;

use aggregated::Aggregated;
use disaggregated::Disaggregated;
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
    /// Mean prompt tokens beyond the shared prefix that a request finds cached from an earlier
    /// request of the same prompt (a prompt pool, [`workload`]); unlike the shared prefix each
    /// running request holds its own copy.
    pub pool_reuse: f64,
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
            "prompt_pool_reused_tokens": self.workload.pool_reuse,
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
            "static estimate ({}, {} GPUs, {load}, ISL {:.0}, OSL {:.0}, shared prefix {:.0}{})",
            self.mode,
            self.gpus,
            self.workload.isl,
            self.workload.osl,
            self.workload.shared_prefix,
            if self.workload.pool_reuse > 0.0 {
                format!(", {:.0} more reused from the prompt pool", self.workload.pool_reuse)
            } else {
                String::new()
            }
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
            kv_tokens: role.kv_tokens_per_rank() as f64,
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

    /// Kernel seconds of one step with the same prompts on every rank and no decodes: the
    /// timing model's parts without [`CALIBRATED_PARTS`].
    fn kernel_s(&mut self, chunks: &[PrefillChunk]) -> Result<f64, ScenarioError> {
        self.fill(chunks, 0, 0.0);
        let parts = self
            .timer
            .breakdown(&self.loads)
            .ok_or_else(|| run_error("the timing model does not break a step into kernels"))?;
        Ok(parts.iter().filter(|(k, _)| !CALIBRATED_PARTS.contains(k)).map(|(_, s)| s).sum())
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
        Source::Synthetic { input_tokens, output_tokens, shared_prefix_tokens, prompt_pool } => {
            let isl = input_tokens.nominal_mean().max(1.0);
            // A hybrid model resumes only where a state was kept, never where a shared prefix
            // ends (see `scenario::state`).
            let hybrid = p.roles.first().is_some_and(|r| r.state.is_some());
            let shared_prefix =
                if hybrid { 0.0 } else { f64::from(*shared_prefix_tokens).min(isl - 1.0).max(0.0) };
            Ok(Workload {
                isl,
                osl: output_tokens.nominal_mean().max(1.0),
                shared_prefix,
                pool_reuse: pool_reuse(p, *prompt_pool, (isl, output_tokens.nominal_mean()), shared_prefix),
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

/// Mean prompt tokens beyond a `shared` prefix that a request of a prompt pool of `size`
/// entries finds cached, its prompts and outputs `isl` and `osl` tokens on average (0 without
/// a pool or without prefix caching). A hit reuses all of its prompt but the last token, in
/// whole blocks (SGLang's are one token). The first role's ranks cache the prompts (the
/// prefill role's in P/D):
///
/// - First uses miss: each entry once with the KV-aware router, which sends a prompt to the
///   rank holding it; once on every rank with the others, which spread requests evenly.
/// - A later use hits if its prompt is still cached. A rank's cache holds `c·size` prompts
///   (its KV pool less what an aggregated closed loop's running requests hold, over a
///   prompt's blocks plus one for the recomputed last-token block each use leaves cached).
///   Under passes in a fresh random order with LRU eviction, the prompts drawn between two
///   uses of one are a fraction `1 − xy` of the pool, `x` and `y` uniform (the rest of the
///   earlier pass, the start of the next, less their overlap), so a use hits with probability
///   P(xy > 1 − c) = c + t·ln t, t = 1 − c, and always once c ≥ 1.
///
/// Against the replay (one H200, Llama-3.1-8B, 100 prompts of 1,024 tokens, one client, 2,000
/// requests): reuse 2.9 / 12.0 / 30.4 / 42.8 / 60.8 / 84.0% at 400 / 800 / 1,200 / 1,400 /
/// 1,600 / 1,800 blocks of 64, estimated 2.5 / 11.4 / 29.8 / 44.6 / 66.6 / 89.1%; with room for
/// every prompt on 2 and 4 replicas behind the round-robin router 84.4 / 75.1%, estimated
/// 84.4 / 75.0%.
fn pool_reuse(p: &Prepared, size: u32, (isl, osl): (f64, f64), shared: f64) -> f64 {
    let Some(role) = p.roles.first() else { return 0.0 };
    // SGLang keeps a hybrid model's state only at the end of a finished sequence, which a
    // repeated prompt never reaches.
    let sglang_hybrid = role.state.is_some() && p.config.engine.backend == Backend::Sglang;
    if size == 0 || !role.config.kv_cache.prefix_caching || sglang_hybrid {
        return 0.0;
    }
    let size = f64::from(size);
    let block = f64::from(role.config.kv_cache.block_size.max(1));
    let ranks = f64::from(role.ranks().max(1));
    // An aggregated rank's running requests hold their KV; a prefill rank's pass theirs on.
    let running = match p.traffic.load {
        Load::Concurrency(c) if p.roles.len() == 1 => f64::from(c) / ranks * (isl + osl),
        _ => 0.0,
    };
    #[allow(clippy::cast_precision_loss)] // KV token counts are far below 2^52.
    let room = (role.kv_tokens_per_rank() as f64 - running).max(0.0);
    // A vLLM hybrid model's cached prompt also keeps its state's checkpoint.
    let state_blocks = f64::from(role.state.as_ref().map_or(0, |s| s.blocks_per_sequence));
    let entry = ((isl / block).ceil() + if block > 1.0 { 1.0 } else { 0.0 } + state_blocks) * block;
    let c = room / entry / size;
    let hit = if c >= 1.0 {
        1.0
    } else {
        let t = 1.0 - c;
        c + t * libm::log(t)
    };
    let first_uses =
        if matches!(p.config.router.policy, RouterPolicy::KvAware(_)) { size } else { size * ranks };
    let requests = f64::from(p.traffic.max_requests().max(1));
    let repeats = (1.0 - first_uses / requests).max(0.0);
    repeats * hit * (((isl - 1.0) / block).floor() * block - shared).max(0.0)
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
    if p.config.planner.is_some() {
        return Err(run_error(
            "estimate sizes a fixed fleet; the autoscaling planner's fleet needs a replay (servesim predict)",
        ));
    }
    if !p.traffic.rate_changes.is_empty() {
        return Err(run_error(
            "estimate assumes one steady rate; a rate_schedule needs a replay (servesim predict)",
        ));
    }
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
    // The replay refuses a request longer than the context; so does the estimate, for the mean.
    if let Some(limit) = p.context_limit.filter(|&l| w.isl + w.osl > f64::from(l)) {
        return Err(run_error(format!(
            "the mean request ({:.0} + {:.0} tokens) is longer than the model's context of {limit} tokens; the engine would reject it",
            w.isl, w.osl
        )));
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

/// Parts of a step's breakdown that are calibrated constants rather than kernel time: the
/// prefill scale's share, the per-step overhead and the synchronous host time
/// (`servesim_perf::oplevel::OpLevelTimer::breakdown`).
const CALIBRATED_PARTS: [&str; 3] = ["prefill_scale", "step_overhead", "host"];

/// Kernel seconds the prompts of a deployment's prefilling workers need per second at
/// `rate` requests a second: each mean prompt (no cached prefix) is timed in the step that
/// packs the most whole prompts into one rank's token budget (a longer prompt: its chunks,
/// one step each), on every attention-DP rank, counting only the timing model's kernel parts
/// (its tables, or roofline where none); the calibrated overheads, host time and prefill
/// scale are left out, so the figure is a floor. Above 1 no replay on these kernels can
/// serve `rate`: the prompts alone need more than all of the workers' time. The first role
/// prefills (aggregated, or disaggregated prefill), over all its replicas.
///
/// # Errors
/// Traffic the estimate cannot describe, a timing model without a breakdown (FPM tables), or
/// a step it cannot time.
pub fn prompt_kernel_load(p: &Prepared, rate: f64) -> Result<f64, ScenarioError> {
    let w = workload(p)?;
    let role = p.roles.first().ok_or_else(|| run_error("a deployment has no workers"))?;
    let mut steps = RoleSteps::new(p, role);
    let (chunks, fit) = steps.plan(w.isl, 0.0, 0.0);
    let per_prompt_s = match chunks.as_slice() {
        [one] => steps.kernel_s(&vec![*one; fit.max(1) as usize])? / f64::from(fit.max(1)),
        several => {
            let mut total = 0.0;
            for c in several {
                total += steps.kernel_s(core::slice::from_ref(c))?;
            }
            total
        }
    };
    let workers = f64::from(role.config.parallelism.replicas.max(1)) * steps.dp as f64;
    Ok(rate * per_prompt_s / workers)
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
