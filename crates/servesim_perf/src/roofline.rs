//! A roofline step timer: each part of a forward step takes the longer of its compute time
//! at an achieved fraction of peak FLOP/s and its memory time at an achieved fraction of
//! HBM bandwidth; parts are summed; attention-DP ranks end at the slowest rank.
//!
//! This is the fallback model for anything no measured table covers. Its constants are
//! global and sourced below, never fitted per case.

use alloc::format;
use alloc::vec;

use servesim_core::timing::{RankLoad, StepBreakdown, StepTimer, TimingError};
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
    c: RooflineConstants,
    /// Seconds per byte of HBM traffic at the achieved bandwidth.
    s_per_byte: f64,
    /// Seconds per FLOP of GEMMs at the achieved rate (checkpoint format).
    s_per_gemm_flop: f64,
    /// Seconds per FLOP of bf16 work (attention, LM head).
    s_per_bf16_flop: f64,
    /// Linear FLOPs per token for all layers on one GPU (2 × active params / TP / PP).
    gemm_flops_per_token: f64,
    /// Dense weight bytes read per step on one GPU (MoE experts are added per step).
    dense_weight_bytes: f64,
    /// MoE: (experts, experts per token, bytes of one expert across layers on one GPU).
    moe: Option<(f64, f64, f64)>,
    /// LM-head FLOPs per sampling sequence and its weight bytes, on one GPU.
    head_flops_per_seq: f64,
    head_bytes: f64,
    /// Attention FLOPs per (query token × context token) across layers on one GPU.
    attn_flops_per_pair: f64,
    /// KV bytes per token on one GPU.
    kv_bytes_per_token: f64,
    /// Fixed element-wise cost per step and per token (seconds).
    elementwise_fixed: f64,
    elementwise_per_token: f64,
    /// Tensor-parallel all-reduce cost per step and per token (seconds; zero without TP).
    comm_fixed: f64,
    comm_per_token: f64,
    /// Pipeline stages (the figures above are one stage's).
    stages: u32,
    /// Model layers, and the factor draft layers add ([`RooflineTimer::with_draft_layers`]).
    layers: u32,
    draft_scale: f64,
}

impl RooflineTimer {
    /// A timer for `model` on `hw` with layout `p`.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn new(model: ModelArch, hw: Hardware, p: Parallelism, gemm_dtype: Dtype, kv_dtype: Dtype) -> Self {
        let c = RooflineConstants::default();
        let tp = f64::from(p.tensor.max(1));
        let pp = f64::from(p.pipeline.max(1));
        let layers = f64::from(model.num_layers.div_ceil(p.pipeline.max(1)));
        let h = model.hidden_size as f64;
        let wbytes = gemm_dtype.bytes();
        // Whole-model figures, then this GPU's share (one pipeline stage, one TP shard).
        let active = model.active_linear_params() as f64 / pp;
        let dense_params = model.dense_linear_params() as f64 / pp;
        let moe = model.moe.as_ref().map(|m| {
            let shards = f64::from((p.moe_tensor.max(1) * p.moe_expert.max(1)).max(1));
            let per_expert = 3.0 * h * m.expert_intermediate_size as f64 * f64::from(model.moe_layers()) / pp;
            (
                f64::from(m.num_experts),
                f64::from(m.experts_per_token),
                per_expert * model.moe_quant.dtype().bytes() / shards,
            )
        });
        let bf16_rate = hw.bf16_flops * c.compute_efficiency;
        let s_per_byte = 1.0 / (hw.hbm_bytes_per_s * c.memory_efficiency);
        let (comm_fixed, comm_per_token) = if p.tensor > 1 {
            // Two all-reduces per layer; ring: 2(n-1)/n of each message crosses each link.
            (
                2.0 * layers * c.collective_latency_s,
                2.0 * layers * 2.0 * (tp - 1.0) / tp * h * 2.0 / hw.scale_up_bytes_per_s,
            )
        } else {
            (0.0, 0.0)
        };
        RooflineTimer {
            s_per_byte,
            s_per_gemm_flop: 1.0 / (hw.peak_flops(gemm_dtype) * c.compute_efficiency),
            s_per_bf16_flop: 1.0 / bf16_rate,
            gemm_flops_per_token: 2.0 * active / tp,
            dense_weight_bytes: dense_params * wbytes / tp,
            moe,
            head_flops_per_seq: 2.0 * model.vocab_size as f64 * h / tp,
            head_bytes: model.vocab_size as f64 * h * 2.0 / tp,
            attn_flops_per_pair: 2.0
                * (f64::from(model.num_heads) / tp)
                * model.mla.as_ref().map_or(2.0 * model.head_dim as f64, |m| {
                    (m.kv_lora_rank + m.qk_rope_head_dim + m.kv_lora_rank) as f64
                })
                * f64::from(model.attention_layers().div_ceil(p.pipeline.max(1))),
            kv_bytes_per_token: kv_bytes_per_token(&model, p, kv_dtype) as f64,
            elementwise_fixed: layers * c.elementwise_kernels_per_layer * c.kernel_latency_s,
            elementwise_per_token: layers * c.elementwise_kernels_per_layer * 2.0 * h * 2.0 * s_per_byte,
            comm_fixed,
            comm_per_token,
            stages: p.pipeline.max(1),
            layers: model.num_layers.max(1),
            draft_scale: 1.0,
            c,
        }
    }

    /// Speculative decoding's draft layers (MTP, EAGLE): each step also runs `n`
    /// decoder-sized layers, scaling its model time by (layers + n) / layers as
    /// AIConfigurator does for MTP.
    #[must_use]
    pub fn with_draft_layers(mut self, n: u32) -> Self {
        self.draft_scale = f64::from(self.layers + n) / f64::from(self.layers);
        self
    }

    /// The efficiency and latency constants in use.
    #[must_use]
    pub fn constants(&self) -> RooflineConstants {
        self.c
    }

    fn roof(flops: f64, s_per_flop: f64, bytes: f64, s_per_byte: f64) -> f64 {
        (flops * s_per_flop).max(bytes * s_per_byte)
    }

    /// Seconds one rank spends on its share of a step.
    fn rank_seconds(&self, r: &RankLoad) -> f64 {
        let [gemm, head, attention, elementwise, comm] = self.rank_parts(r);
        gemm + head + attention + elementwise + comm
    }

    /// [`RooflineTimer::rank_seconds`] by part: linear layers (experts included), LM head,
    /// attention, element-wise kernels, communication.
    #[allow(clippy::cast_precision_loss)]
    fn rank_parts(&self, r: &RankLoad) -> [f64; 5] {
        if r.is_empty() {
            return [0.0; 5];
        }
        let tokens = r.new_tokens() as f64;
        let seqs = f64::from(r.decode_requests) + r.prefill.len() as f64;
        // Linear layers: every new token through the active weights; weights read once
        // (MoE: only the experts this step's tokens touch, at most all of them).
        let weight_bytes = match self.moe {
            Some((experts, per_token, expert_bytes)) => {
                self.dense_weight_bytes + expert_bytes * (tokens * per_token).min(experts)
            }
            None => self.dense_weight_bytes,
        };
        let gemm = Self::roof(
            tokens * self.gemm_flops_per_token,
            self.s_per_gemm_flop,
            weight_bytes,
            self.s_per_byte,
        );
        // LM head for the sequences that sample this step (bf16).
        let head = Self::roof(
            seqs * self.head_flops_per_seq,
            self.s_per_bf16_flop,
            self.head_bytes,
            self.s_per_byte,
        );
        // Attention: causal prefill over context + chunk; decode reads each request's KV.
        let mut pairs = r.decode_kv_tokens as f64;
        let mut kv_tokens_read = r.decode_kv_tokens as f64;
        for c in &r.prefill {
            let n = f64::from(c.new_tokens);
            let ctx = f64::from(c.context_tokens);
            pairs += n * (ctx + (n + 1.0) / 2.0);
            kv_tokens_read += ctx + n;
        }
        let attention = Self::roof(
            pairs * self.attn_flops_per_pair,
            self.s_per_bf16_flop,
            kv_tokens_read * self.kv_bytes_per_token,
            self.s_per_byte,
        );
        // Element-wise kernels: launch-bound plus a few activation-sized reads and writes.
        let elementwise = self.elementwise_fixed + tokens * self.elementwise_per_token;
        let comm = self.comm_fixed + tokens * self.comm_per_token;
        [gemm, head, attention, elementwise, comm]
    }
}

impl StepTimer for RooflineTimer {
    fn step_time(&mut self, ranks: &[RankLoad]) -> Result<SimDur, TimingError> {
        let mut stage = |r: &[RankLoad]| r.iter().map(|x| self.rank_seconds(x)).fold(0.0f64, f64::max);
        let worst =
            servesim_core::timing::pipelined_seconds(ranks, self.stages, &mut stage) * self.draft_scale;
        if !worst.is_finite() {
            return Err(TimingError {
                message: format!("roofline produced a non-finite step time for {ranks:?}"),
            });
        }
        Ok(SimDur::from_secs_f64(worst))
    }

    /// The step by part: the slowest rank of the slowest pipeline micro-batch, scaled to the
    /// cycle (GEMMs with the LM head and, for MoE, the experts the step touches; attention;
    /// element-wise kernels; the all-reduces' estimate).
    fn breakdown(&mut self, ranks: &[RankLoad]) -> Option<StepBreakdown> {
        let mut slowest = (f64::NEG_INFINITY, [0.0; 5]);
        let cycle = servesim_core::timing::pipelined_seconds(ranks, self.stages, &mut |micro| {
            let mut worst = (0.0f64, [0.0; 5]);
            for r in micro {
                let parts = self.rank_parts(r);
                let s: f64 = parts.iter().sum();
                if s > worst.0 {
                    worst = (s, parts);
                }
            }
            if worst.0 > slowest.0 {
                slowest = worst;
            }
            worst.0
        });
        let scale = if slowest.0 > 0.0 { cycle / slowest.0 * self.draft_scale } else { 0.0 };
        let [gemm, head, attention, elementwise, comm] = slowest.1.map(|x| x * scale);
        Some(vec![
            ("gemm", gemm + head),
            ("attention", attention),
            ("allreduce", comm),
            ("elementwise", elementwise),
        ])
    }
}
