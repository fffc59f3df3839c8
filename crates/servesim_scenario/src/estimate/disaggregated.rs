//! The disaggregated steady state: a prefill pool feeding a decode pool over a KV transfer.

use servesim_core::timing::PrefillChunk;

use super::{
    bisect, kv_need, run_error, to_u32, wave_share, wave_wait_ms, Estimate, Operating, RoleSteps, StepParts,
    Workload,
};
use crate::scenario::{Prepared, PreparedRole, ScenarioError};

/// A disaggregated deployment: its prefill and decode pools, the KV transfer between them and
/// the prompt chunks a prefill step holds, ready to solve at an operating point.
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
        // The prefill workers' caches hold the shared prefix and the pooled prompts.
        let shared = if pre.config.kv_cache.prefix_caching { w.shared_prefix } else { 0.0 };
        let cached = shared + w.pool_reuse;
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
