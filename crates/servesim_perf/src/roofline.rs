//! A roofline step timer: each part of a forward step takes the longer of its compute time
//! at an achieved fraction of peak FLOP/s and its memory time at an achieved fraction of
//! HBM bandwidth; parts are summed; attention-DP ranks end at the slowest rank.
//!
//! This is the fallback model for anything no measured table covers. Its constants are
//! global and sourced below, never fitted per case.

use alloc::format;

use servesim_core::timing::{RankLoad, StepTimer, TimingError};
use servesim_core::units::SimDur;

use crate::memory::{kv_bytes_per_token, Parallelism};
use crate::spec::{Dtype, Hardware, ModelArch};

/// Achieved fractions of peak and fixed latencies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RooflineConstants {
    /// Fraction of dense peak a large GEMM achieves. AICDB §3.3 sample: h200 bf16
    /// 8192³ GEMM in 1.36377 ms = 806 TFLOP/s of 989 peak = 0.815.
    pub compute_efficiency: f64,
    /// Fraction of HBM bandwidth memory-bound kernels achieve: AIConfigurator's empirical
    /// `mem_bw` scaling factor 0.8 (AICDB §3.1).
    pub memory_efficiency: f64,
    /// Fixed cost of one memory-bound kernel: AIConfigurator's +3 µs constant (AICDB §3.1).
    pub kernel_latency_s: f64,
    /// Element-wise kernels per layer outside GEMMs and attention: two RMSNorms, two residual
    /// adds, rotary embedding, activation (a Llama/Qwen decoder layer).
    pub elementwise_kernels_per_layer: f64,
    /// Latency of one collective call: AIConfigurator's p2p latency 10 µs (AICDB §3.1).
    pub collective_latency_s: f64,
}

impl Default for RooflineConstants {
    fn default() -> Self {
        RooflineConstants {
            compute_efficiency: 0.815,
            memory_efficiency: 0.8,
            kernel_latency_s: 3.0e-6,
            elementwise_kernels_per_layer: 6.0,
            collective_latency_s: 10.0e-6,
        }
    }
}

/// Times steps of one worker role from first principles.
#[derive(Clone, Debug)]
pub struct RooflineTimer {
    model: ModelArch,
    hw: Hardware,
    p: Parallelism,
    gemm_dtype: Dtype,
    kv_bytes_per_token: f64,
    c: RooflineConstants,
}

impl RooflineTimer {
    /// A timer for `model` on `hw` with layout `p`.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn new(model: ModelArch, hw: Hardware, p: Parallelism, gemm_dtype: Dtype, kv_dtype: Dtype) -> Self {
        let kv = kv_bytes_per_token(&model, p, kv_dtype) as f64;
        RooflineTimer { model, hw, p, gemm_dtype, kv_bytes_per_token: kv, c: RooflineConstants::default() }
    }

    fn roof(&self, flops: f64, bytes: f64, peak: f64) -> f64 {
        let compute = flops / (peak * self.c.compute_efficiency);
        let memory = bytes / (self.hw.hbm_bytes_per_s * self.c.memory_efficiency);
        compute.max(memory)
    }

    /// Seconds one rank spends on its share of a step.
    #[allow(clippy::cast_precision_loss)]
    fn rank_seconds(&self, r: &RankLoad) -> f64 {
        if r.is_empty() {
            return 0.0;
        }
        let m = &self.model;
        let tp = f64::from(self.p.tensor.max(1));
        let layers = f64::from(m.num_layers.div_ceil(self.p.pipeline.max(1)));
        let h = m.hidden_size as f64;
        let tokens = r.new_tokens() as f64;
        let seqs = f64::from(r.decode_requests) + r.prefill.len() as f64;
        let wbytes = self.gemm_dtype.bytes();

        // Linear layers: every new token through the active weights; weights read once.
        let active = m.layer_active_linear_params() as f64;
        let resident = match &m.moe {
            // Experts touched by this step's tokens (at most all of them).
            Some(moe) => {
                let dense = m.layer_active_linear_params() as f64
                    - 3.0 * h * moe.expert_intermediate_size as f64 * f64::from(moe.experts_per_token);
                let per_expert = 3.0 * h * moe.expert_intermediate_size as f64;
                let touched = (tokens * f64::from(moe.experts_per_token)).min(f64::from(moe.num_experts));
                dense + per_expert * touched
            }
            None => m.layer_linear_params() as f64,
        };
        let gemm = self.roof(
            2.0 * tokens * active * layers / tp,
            resident * layers * wbytes / tp,
            self.hw.peak_flops(self.gemm_dtype),
        );
        // LM head for the sequences that sample this step (bf16).
        let head = self.roof(
            2.0 * seqs * m.vocab_size as f64 * h / tp,
            m.vocab_size as f64 * h * 2.0 / tp,
            self.hw.bf16_flops,
        );
        // Attention: causal prefill over context + chunk; decode reads each request's KV.
        let heads = f64::from(m.num_heads) / tp;
        let hd = m.head_dim as f64;
        let mut attn_flops = 0.0;
        let mut kv_tokens_read = 0.0;
        for c in &r.prefill {
            let n = f64::from(c.new_tokens);
            let ctx = f64::from(c.context_tokens);
            attn_flops += 4.0 * heads * hd * n * (ctx + (n + 1.0) / 2.0) * layers;
            kv_tokens_read += ctx + n;
        }
        attn_flops += 4.0 * heads * hd * r.decode_kv_tokens as f64 * layers;
        kv_tokens_read += r.decode_kv_tokens as f64;
        let attention = self.roof(attn_flops, kv_tokens_read * self.kv_bytes_per_token, self.hw.bf16_flops);
        // Element-wise kernels: launch-bound plus a few activation-sized reads and writes.
        let elementwise = layers
            * self.c.elementwise_kernels_per_layer
            * (self.c.kernel_latency_s
                + 2.0 * tokens * h * 2.0 / (self.hw.hbm_bytes_per_s * self.c.memory_efficiency));
        // Two all-reduces per layer under TP (ring: 2(n-1)/n of the message crosses each link).
        let comm = if self.p.tensor > 1 {
            let bytes = tokens * h * 2.0;
            2.0 * layers
                * (self.c.collective_latency_s + 2.0 * (tp - 1.0) / tp * bytes / self.hw.scale_up_bytes_per_s)
        } else {
            0.0
        };
        gemm + head + attention + elementwise + comm
    }
}

impl StepTimer for RooflineTimer {
    fn step_time(&mut self, ranks: &[RankLoad]) -> Result<SimDur, TimingError> {
        let mut worst = 0.0f64;
        for r in ranks {
            worst = worst.max(self.rank_seconds(r));
        }
        if !worst.is_finite() {
            return Err(TimingError {
                message: format!("roofline produced a non-finite step time for {ranks:?}"),
            });
        }
        Ok(SimDur::from_secs_f64(worst))
    }
}
