//! The aggregated steady state: one role that prefills and decodes, per attention-DP rank.

use servesim_core::engine::Backend;
use servesim_core::timing::PrefillChunk;

use super::{
    bisect, kv_need, run_error, to_u32, wave_share, wave_wait_ms, Estimate, Operating, RoleSteps, StepParts,
    Workload, BISECTION_STEPS, GOLDEN, PEAK_GRID, PEAK_MARGIN,
};
use crate::scenario::{Prepared, PreparedRole, ScenarioError};

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

/// An aggregated deployment per attention-DP rank: its step costs, limits (batch, KV) and
/// serving processes, ready to solve at an operating point.
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
    /// Steps already planned when a prompt arrives (1 for an engine that plans ahead).
    planned_steps: f64,
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

impl Aggregated {
    pub(crate) fn new(p: &Prepared, role: &PreparedRole, w: Workload) -> Result<Self, ScenarioError> {
        let steps = RoleSteps::new(p, role);
        let shared = if role.config.kv_cache.prefix_caching { w.shared_prefix } else { 0.0 };
        // Shared prefix blocks are held once per rank; a pooled prompt's by each request.
        let kv_room = (steps.kv_tokens - shared).max(0.0);
        // A vLLM hybrid model's request also holds its state's blocks.
        let state_tokens = role
            .state
            .as_ref()
            .map_or(0.0, |s| f64::from(s.blocks_per_sequence) * f64::from(role.config.kv_cache.block_size));
        let by_kv = (kv_room / (kv_need(p.config.engine.backend, &w, shared) + state_tokens)).floor();
        let cached = shared + w.pool_reuse;
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
                // Tokenising the whole prompt, cached prefix included, is the request's work.
                request_ms: spec.request_work(w.isl.round() as u32).as_secs_f64() * 1000.0,
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
            planned_steps: if p.plans_ahead(role) { 1.0 } else { 0.0 },
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
        // An engine that plans ahead had planned the next step before the prompt came: it
        // waits one step more.
        let wait_ms =
            (intake_steps / 2.0 + self.planned_steps) * mean_step + (cycle_steps - life) * mean_step;
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
