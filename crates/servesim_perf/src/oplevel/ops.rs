//! Single kernels of a step, each timed from its measured table with a roofline fallback:
//! GEMMs (with the quantized-GEMM floor), all-reduce, all-to-all, context and generation
//! attention (GQA and MLA), the fused-experts kernel and element-wise ops.

use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::spec::{Dtype, GemmQuant, Moe, MoeQuant};
use crate::tables::{Family, Grid, GridLine, LookupCache, Scale, Source, Table};

use super::{AllReduceImpl, MoeKernel, OpLevelSetup, OpLevelTimer};

impl OpLevelTimer {
    /// Seconds of an element-wise kernel moving `bytes` (AIConfigurator's empirical rule).
    #[must_use]
    pub fn elementwise(&self, bytes: f64) -> f64 {
        bytes / (self.bw() * self.s.constants.memory_efficiency) + self.s.constants.kernel_latency_s
    }

    /// Seconds of a GEMM `m × k · k × n` in `quant` (activations in the same class).
    #[allow(clippy::cast_precision_loss)]
    #[must_use]
    pub fn gemm(&self, m: u64, n: u64, k: u64, quant: GemmQuant) -> (f64, Source) {
        if m == 0 || n == 0 || k == 0 {
            return (0.0, Source::Measured);
        }
        let hw = &self.s.hardware;
        let dt = quant.dtype();
        let peak = hw.peak_flops(dt);
        let bw = self.bw();
        let sol = |c: &[f64]| {
            let (m, n, k) = (c[0], c[1], c[2]);
            let flops = 2.0 * m * n * k / peak;
            let bytes = ((m * k + n * k) * dt.bytes() + m * n * 2.0) / bw;
            flops.max(bytes)
        };
        let x = [m as f64, n as f64, k as f64];
        if let Some(g) = self.db.table(Family::Gemm).and_then(|t| t.slice(&[quant.table_name()])) {
            if let Some((ms, src)) = g.lookup(&x, Family::Gemm.scales(), sol) {
                let mut best = (ms, src);
                for bound in [self.quantized_floor_ms(&x, quant, &sol), self.sibling_bound_ms(&x, quant)] {
                    if let Some(b) = bound.filter(|b| b.0 < best.0) {
                        best = b;
                    }
                }
                return (best.0 / 1e3, best.1);
            }
        }
        (sol(&x) / self.s.constants.compute_efficiency, Source::Roofline)
    }

    /// The least time a weight-bound quantized GEMM takes under
    /// [`OpConstants::quantized_gemm_floor`]: the bf16 table's time at the same shape, scaled
    /// by the ratio of the two speed-of-light times, over the relative efficiency.
    #[allow(clippy::similar_names)]
    fn quantized_floor_ms(
        &self,
        x: &[f64; 3],
        quant: GemmQuant,
        sol_q: &dyn Fn(&[f64]) -> f64,
    ) -> Option<(f64, Source)> {
        let r = self.s.constants.quantized_gemm_floor?;
        // fp8 only: NVFP4 rows floored the same way came out 19% too fast (its block scales
        // and younger kernels do not reach bf16's efficiency).
        if quant.dtype() != Dtype::Fp8 || r <= 0.0 {
            return None;
        }
        let hw = &self.s.hardware;
        let (peak_b, bw) = (hw.peak_flops(Dtype::Bf16), self.bw());
        // Only where the quantized GEMM is bound by its weight and activation traffic.
        if !self.gemm_memory_bound(x, quant.dtype()) {
            return None;
        }
        let sol_b = |c: &[f64]| {
            let (m, n, k) = (c[0], c[1], c[2]);
            (2.0 * m * n * k / peak_b).max(((m * k + n * k) * 2.0 + m * n * 2.0) / bw)
        };
        let g = self.db.table(Family::Gemm)?.slice(&[GemmQuant::Bf16.table_name()])?;
        let (ms, src) = g.lookup(x, Family::Gemm.scales(), sol_b)?;
        Some((ms * sol_q(x) / sol_b(x) / r, derived(src)))
    }

    /// Whether an `m × n × k` GEMM on `dt` operands is bound by its memory traffic rather than
    /// by compute (its speed of light is the bytes term).
    fn gemm_memory_bound(&self, x: &[f64; 3], dt: Dtype) -> bool {
        let (m, n, k) = (x[0], x[1], x[2]);
        2.0 * m * n * k / self.s.hardware.peak_flops(dt)
            <= ((m * k + n * k) * dt.bytes() + m * n * 2.0) / self.bw()
    }

    /// The fastest time another table gives for the same GEMM, bounding a quantized one: the
    /// bf16 kernel (a quantized kernel moves at most half its bytes at twice its peak) and,
    /// where the GEMM is bound by its memory traffic, the other fp8 scaling (per-tensor and
    /// 128×128-block fp8 move the same bytes, block scales add 1/16,384 of them; where compute
    /// binds, block scaling costs real work in the main loop), and for nvfp4 either fp8 (4.5
    /// bits a weight with its scales against 8). A table timing the quantized
    /// kernel slower than that measured a fallback path, not what a serving engine runs.
    /// AIConfigurator 0.12's vLLM 0.24 `fp8_block` tables are such: 0.08–0.09 ms on H100/H200 and 0.17–0.55 ms on
    /// B200/B300/GB200/GB300 whatever the shape (n 2048, k 3072: bf16 and per-tensor fp8 take
    /// 0.006–0.009 ms); with them MiniMax-M2.5 fp8 decode steps on 4 B200s came out at 25 ms
    /// for 4 requests, measured 8–10 ms.
    fn sibling_bound_ms(&self, x: &[f64; 3], quant: GemmQuant) -> Option<(f64, Source)> {
        let siblings: &[GemmQuant] = match quant {
            GemmQuant::Bf16 => &[],
            GemmQuant::Fp8 => &[GemmQuant::Bf16, GemmQuant::Fp8Block],
            GemmQuant::Fp8Block => &[GemmQuant::Bf16, GemmQuant::Fp8],
            GemmQuant::Nvfp4 => &[GemmQuant::Bf16, GemmQuant::Fp8, GemmQuant::Fp8Block],
        };
        let table = self.db.table(Family::Gemm)?;
        let bw = self.bw();
        let memory_bound = self.gemm_memory_bound(x, quant.dtype());
        let mut best: Option<(f64, Source)> = None;
        for &q in siblings.iter().filter(|&&q| q == GemmQuant::Bf16 || memory_bound) {
            let (peak, bytes) = (self.s.hardware.peak_flops(q.dtype()), q.dtype().bytes());
            let sol = |c: &[f64]| {
                let (m, n, k) = (c[0], c[1], c[2]);
                (2.0 * m * n * k / peak).max(((m * k + n * k) * bytes + m * n * 2.0) / bw)
            };
            let Some((ms, src)) =
                table.slice(&[q.table_name()]).and_then(|g| g.lookup(x, Family::Gemm.scales(), sol))
            else {
                continue;
            };
            if best.is_none_or(|b| ms < b.0) {
                best = Some((ms, derived(src)));
            }
        }
        best
    }

    /// Tensor-parallel all-reduce of `elems` bf16 values over `gpus`, in a CUDA graph or
    /// launched eagerly, by the implementation [`super::OpConstants::allreduce`] names.
    #[allow(clippy::cast_precision_loss)]
    #[must_use]
    pub fn allreduce(&self, elems: u64, gpus: u32, graph: bool) -> (f64, Source) {
        if gpus <= 1 || elems == 0 {
            return (0.0, Source::Measured);
        }
        let hw = &self.s.hardware;
        // Beyond one node the ring crosses the scale-out links.
        let link = if gpus <= hw.gpus_per_node { hw.scale_up_bytes_per_s } else { hw.scale_out_bytes_per_s };
        let lat = self.s.constants.link_latency_s;
        let n = f64::from(gpus);
        // The custom kernels' table counts elements, NCCL's counts bytes (AICDB §3.3; NCCL's
        // largest all-reduce, 512 MiB on 8 H100s in 2.67 ms, is 352 GB/s of ring bandwidth as
        // bytes and an impossible 704 GB/s as bf16 elements).
        let (x, slice, bytes_per_unit) = if self.s.constants.allreduce == AllReduceImpl::Nccl {
            let slice = self.db.table(Family::Nccl).and_then(|t| t.slice(&["all_reduce", "half"]));
            ([n, (elems * 2) as f64], slice, 1.0)
        } else {
            let mode = if graph { "graph" } else { "eager" };
            let table = self.db.table(Family::AllReduce);
            let slice =
                table.and_then(|t| t.slice(&["bfloat16", mode]).or_else(|| t.slice(&["bfloat16", "graph"])));
            ([n, elems as f64], slice, 2.0)
        };
        let sol = move |c: &[f64]| 2.0 * (c[0] - 1.0) / c[0] * c[1] * bytes_per_unit / link + lat;
        if let Some(g) = slice {
            // Both tables interpolate linearly in GPUs and message size.
            if let Some((ms, src)) = g.lookup(&x, Family::AllReduce.scales(), sol) {
                return (ms / 1e3, src);
            }
        }
        (sol(&x), Source::Roofline)
    }

    /// NCCL collective `op` (`alltoall`, `all_gather`, `reduce_scatter`: the table's names)
    /// over `gpus` with a message of `bytes`: per GPU for the all-to-all, the whole gathered
    /// (or scattered) buffer for the other two, as nccl-tests size them.
    #[allow(clippy::cast_precision_loss)]
    #[must_use]
    pub fn collective(&self, op: &str, bytes: u64, gpus: u32) -> (f64, Source) {
        if gpus <= 1 || bytes == 0 {
            return (0.0, Source::Measured);
        }
        let hw = &self.s.hardware;
        let link = if gpus <= hw.gpus_per_node { hw.scale_up_bytes_per_s } else { hw.scale_out_bytes_per_s };
        let lat = self.s.constants.link_latency_s;
        // Each GPU sends or receives all but its own share of the message.
        let sol = move |c: &[f64]| (c[0] - 1.0) / c[0] * c[1] / link + lat;
        let x = [f64::from(gpus), bytes as f64];
        if let Some(g) = self.db.table(Family::Nccl).and_then(|t| t.slice(&[op, "half"])) {
            if let Some((ms, src)) = g.lookup(&x, Family::Nccl.scales(), sol) {
                return (ms / 1e3, src);
            }
        }
        (sol(&x), Source::Roofline)
    }

    fn attn_slice<'a>(&self, t: &'a Table, head_dim: u64) -> Option<&'a crate::tables::Grid> {
        let kv = if self.s.kv == Dtype::Fp8 { "fp8" } else { "bfloat16" };
        let hd = head_dim.to_string();
        let want = if self.s.attention_fp8 && kv == "fp8" { "fp8" } else { "bfloat16" };
        t.slice(&[kv, want, &hd, "0"])
            .or_else(|| t.slice(&[kv, "bfloat16", &hd, "0"]))
            .or_else(|| t.slice(&[kv, "fp8", &hd, "0"]))
    }

    /// Context attention of one layer: `batch` sequences whose causal work equals `pairs`
    /// query–key pairs in total.
    #[allow(clippy::cast_precision_loss)]
    #[must_use]
    pub fn context_attention(&self, batch: u32, pairs: f64) -> (f64, Source) {
        if batch == 0 || pairs <= 0.0 {
            return (0.0, Source::Measured);
        }
        let b = f64::from(batch);
        // Equal-length prompts of `isl` tokens have b·isl·(isl+1)/2 causal pairs.
        let isl = ((-1.0 + libm::sqrt(1.0 + 8.0 * pairs / b)) / 2.0).max(1.0);
        let m = &self.s.model;
        let tp = f64::from(self.tp());
        let peak = self.s.hardware.peak_flops(if self.s.attention_fp8 { Dtype::Fp8 } else { Dtype::Bf16 });
        let bw = self.bw();
        if let Some(mla) = &m.mla {
            let heads = (f64::from(m.num_heads) / tp).max(1.0);
            let qk = (mla.qk_nope_head_dim + mla.qk_rope_head_dim) as f64;
            let v = mla.v_head_dim as f64;
            let sol = move |c: &[f64]| {
                let (b, s, h) = (c[0], c[1], c[2]);
                (b * s * (s + 1.0) / 2.0 * 2.0 * h * (qk + v) / peak)
                    .max(b * s * h * (2.0 * qk + 2.0 * v) * 2.0 / bw)
            };
            let x = [b, isl, heads];
            let kv = if self.s.kv == Dtype::Fp8 { "fp8" } else { "bfloat16" };
            if let Some(g) = self.db.table(Family::ContextMla).and_then(|t| t.slice(&[kv, "bfloat16"])) {
                if let Some((ms, src)) = g.lookup(&x, Family::ContextMla.scales(), sol) {
                    return (ms / 1e3, src);
                }
            }
            return (sol(&x) / self.s.constants.compute_efficiency, Source::Roofline);
        }
        let heads = (f64::from(m.num_heads) / tp).max(1.0);
        let kvh = f64::from(m.num_kv_heads.div_ceil(self.tp()).max(1));
        let d = m.head_dim as f64;
        let sol = move |c: &[f64]| {
            let (b, s, h, kh) = (c[0], c[1], c[2], c[3]);
            (b * s * (s + 1.0) / 2.0 * 4.0 * h * d / peak).max(b * s * (2.0 * h + 2.0 * kh) * d * 2.0 / bw)
        };
        let x = [b, isl, heads, kvh];
        if let Some(g) = self.db.table(Family::ContextAttention).and_then(|t| self.attn_slice(t, m.head_dim))
        {
            if let Some((ms, src)) = g.lookup(&x, Family::ContextAttention.scales(), sol) {
                return (ms / 1e3, src);
            }
        }
        (sol(&x) / self.s.constants.compute_efficiency, Source::Roofline)
    }

    /// The measured grid generation attention is looked up in, if any.
    pub(super) fn generation_grid(&self) -> Option<Rc<Grid>> {
        let m = &self.s.model;
        if m.mla.is_some() {
            let kv = if self.s.kv == Dtype::Fp8 { "fp8" } else { "bfloat16" };
            return self.db.table(Family::GenerationMla).and_then(|t| t.slice_rc(&[kv, "bfloat16"])).cloned();
        }
        let t = self.db.table(Family::GenerationAttention)?;
        let kv = if self.s.kv == Dtype::Fp8 { "fp8" } else { "bfloat16" };
        let hd = m.head_dim.to_string();
        let want = if self.s.attention_fp8 && kv == "fp8" { "fp8" } else { "bfloat16" };
        t.slice_rc(&[kv, want, &hd, "0"])
            .or_else(|| t.slice_rc(&[kv, "bfloat16", &hd, "0"]))
            .or_else(|| t.slice_rc(&[kv, "fp8", &hd, "0"]))
            .cloned()
    }

    /// Generation attention of one layer: `batch` requests with mean KV length `kv_len`.
    #[must_use]
    pub fn generation_attention(&self, batch: u32, kv_len: f64) -> (f64, Source) {
        let grid = self.generation_grid();
        Self::generation_attention_in(&self.s, grid.as_deref(), batch, kv_len, &mut LookupCache::default())
    }

    /// [`OpLevelTimer::generation_attention`] in an already resolved grid, reusing the
    /// brackets of the previous lookup through `cache`.
    pub(super) fn generation_attention_in(
        setup: &OpLevelSetup,
        grid: Option<&Grid>,
        batch: u32,
        kv_len: f64,
        cache: &mut LookupCache,
    ) -> (f64, Source) {
        match GenAttention::new(setup, batch) {
            Some(g) => g.cached(grid, kv_len, cache),
            None => (0.0, Source::Measured),
        }
    }

    /// The fused-experts kernel of one MoE layer over `tokens` tokens.
    #[allow(clippy::cast_precision_loss)]
    #[must_use]
    pub fn moe_experts(&self, tokens: u64) -> (f64, Source) {
        let Some(moe) = &self.s.model.moe else { return (0.0, Source::Measured) };
        if tokens == 0 {
            return (0.0, Source::Measured);
        }
        let p = self.s.parallelism;
        let (mtp, mep) = (p.moe_tensor.max(1), p.moe_expert.max(1));
        let h = self.s.model.hidden_size as f64;
        let inter = moe.expert_intermediate_size as f64;
        let topk = f64::from(moe.experts_per_token);
        let experts = f64::from(moe.num_experts);
        let bw = self.bw();
        let shards = f64::from(mtp * mep);
        let hw = &self.s.hardware;
        // Speed of light for weights stored as `dt`, computed at `peak`.
        let sol_for = |dt: Dtype, peak: f64| {
            move |c: &[f64]| {
                let t = c[0];
                let flops = 2.0 * 3.0 * h * inter * topk * t / shards / peak;
                // Experts this GPU holds that at least one token reaches.
                let touched = (t * topk).min(experts) / f64::from(mep);
                let bytes = touched * 3.0 * h * inter / f64::from(mtp) * dt.bytes() / bw;
                flops.max(bytes)
            }
        };
        let dt = self.s.moe.dtype();
        let weight_only = self.s.moe == MoeQuant::W4a16Mxfp4 || self.s.moe == MoeQuant::Int4Wo;
        let sol = sol_for(dt, hw.peak_flops(if weight_only { Dtype::Bf16 } else { dt }));
        let x = [tokens as f64];
        if let Some(t) = self.db.table(Family::Moe) {
            let mut key = self.expert_key(moe, mtp, mep);
            let slice = |key: &[String], sol: &dyn Fn(&[f64]) -> f64| {
                let key: Vec<&str> = key.iter().map(String::as_str).collect();
                t.slice(&key).and_then(|g| g.lookup(&x, Family::Moe.scales(), sol))
            };
            // TRTLLM-gen kernels: their own slice, else the default lane's stands in.
            let stand_in = self.s.constants.moe_kernel == MoeKernel::MinLatency;
            if stand_in {
                let mut own = key.clone();
                own[0].push_str(MoeKernel::MIN_LATENCY_SUFFIX);
                if let Some((ms, src)) = slice(&own, &sol) {
                    return (ms / 1e3, src);
                }
            }
            if let Some((ms, src)) = slice(&key, &sol) {
                // As for GEMMs (`sibling_bound_ms`): a quantized expert kernel timed slower than
                // bf16 or the other fp8 scaling at the same layout measured a fallback path.
                // AIConfigurator 0.12's vLLM 0.24 per-tensor `fp8` MoE table on H200 is 4× its
                // bf16 one and 7× its `fp8_block` one (Qwen3-235B experts, 4 tokens, no
                // parallelism: 1.20 ms against 0.30 and 0.18 ms).
                let siblings: &[MoeQuant] = match self.s.moe {
                    MoeQuant::Bf16 => &[],
                    MoeQuant::Fp8 => &[MoeQuant::Bf16, MoeQuant::Fp8Block],
                    MoeQuant::Fp8Block => &[MoeQuant::Bf16, MoeQuant::Fp8],
                    MoeQuant::Nvfp4 | MoeQuant::W4a16Mxfp4 | MoeQuant::Int4Wo => &[MoeQuant::Bf16],
                };
                let mut best = (ms, src);
                // The other fp8 scaling only where the experts' weights bind (as for GEMMs).
                let memory_bound = {
                    let t = x[0];
                    let touched = (t * topk).min(experts) / f64::from(mep);
                    2.0 * 3.0 * h * inter * topk * t / shards / hw.peak_flops(dt)
                        <= touched * 3.0 * h * inter / f64::from(mtp) * dt.bytes() / bw
                };
                for &q in siblings.iter().filter(|&&q| q == MoeQuant::Bf16 || memory_bound) {
                    key[0] = q.table_name().to_string();
                    let sol_q = sol_for(q.dtype(), hw.peak_flops(q.dtype()));
                    if let Some((b, bsrc)) = slice(&key, &sol_q).filter(|b| b.0 < best.0) {
                        best = (b, derived(bsrc));
                    }
                }
                return (best.0 / 1e3, if stand_in { Source::Extrapolated } else { best.1 });
            }
            // No slice at this split of the experts: the time measured at another split over
            // as many GPUs (all expert-parallel, then all tensor-parallel), whose speed of light
            // is the same (each GPU moves 1/(tp·ep) of the touched experts' weights and does
            // 1/(tp·ep) of their work). AIConfigurator 0.12 measured gpt-oss's MXFP4 experts on
            // Hopper at expert parallelism only, and its w4a16 kernel reaches about a third of
            // the roofline at decode sizes (H200, 8 tokens over 2 GPUs: 0.154 ms against
            // 0.055 ms): the roofline timed those layers 2-3x too fast.
            for (otp, oep) in [(1, mtp * mep), (mtp * mep, 1)] {
                if (otp, oep) == (mtp, mep) {
                    continue;
                }
                key[6] = otp.to_string();
                key[7] = oep.to_string();
                if let Some((ms, _)) = slice(&key, &sol) {
                    return (ms / 1e3, Source::Extrapolated);
                }
            }
        }
        (sol(&x) / self.s.constants.compute_efficiency, Source::Roofline)
    }
}

impl OpLevelTimer {
    /// The slice key of these experts in an MoE table (the routing distribution the import
    /// keeps, `power_law_1.01`) at `moe_tp`-way tensor and `moe_ep`-way expert parallelism.
    fn expert_key(&self, moe: &Moe, moe_tp: u32, moe_ep: u32) -> [String; 8] {
        [
            self.s.moe.table_name().to_string(),
            "power_law_1.01".to_string(),
            self.s.model.hidden_size.to_string(),
            moe.expert_intermediate_size.to_string(),
            moe.experts_per_token.to_string(),
            moe.num_experts.to_string(),
            moe_tp.to_string(),
            moe_ep.to_string(),
        ]
    }

    /// Whether the routed experts run SGLang's DeepEP kernels: SGLang under attention data
    /// parallelism with experts split by expert parallelism only (`--moe-a2a-backend deepep`,
    /// which its attention-DP deployments run, `moe_all_to_all`).
    pub(super) fn runs_deepep(&self) -> bool {
        self.deepep
    }

    /// [`OpLevelTimer::runs_deepep`] from the engine and the layout.
    pub(super) fn deepep_layout(&self) -> bool {
        let p = self.s.parallelism;
        self.db.backend == "sglang" && p.attention_data > 1 && p.moe_tensor <= 1 && p.moe_expert > 1
    }

    /// SGLang's DeepEP experts of one MoE layer over `tokens` tokens of all ranks, from
    /// AIConfigurator's wide-EP tables (num_tokens there is every rank's tokens, as here):
    /// DeepGEMM's grouped kernels behind the normal dispatch for a step that extends a
    /// prompt (`extend`), its masked ones behind the low-latency dispatch for a decode step.
    /// An expert degree the tables lack (they skip EP8 on Blackwell) blends the nearest
    /// measured degrees below and above at the same tokens a rank, linearly in log2 of the
    /// degree. `None` where the deployment does not run DeepEP or no table holds its experts
    /// (the fused-experts table then times them, [`OpLevelTimer::moe_experts`]).
    #[allow(clippy::cast_precision_loss)]
    #[must_use]
    pub fn deepep_experts(&self, tokens: u64, extend: bool) -> Option<(f64, Source)> {
        let moe = self.s.model.moe.as_ref()?;
        if tokens == 0 || !self.runs_deepep() {
            return None;
        }
        let family = if extend { Family::DeepEpContextMoe } else { Family::DeepEpGenerationMoe };
        let table = self.db.table(family)?;
        let ep = self.s.parallelism.moe_expert;
        let key = self.expert_key(moe, 1, ep);
        let (h, inter) = (self.s.model.hidden_size as f64, moe.expert_intermediate_size as f64);
        let (topk, experts) = (f64::from(moe.experts_per_token), f64::from(moe.num_experts));
        let dt = self.s.moe.dtype();
        let (peak, bw) = (self.s.hardware.peak_flops(dt), self.bw());
        // Speed of light of one rank at `ranks`-way expert parallelism.
        let sol_at = |ranks: f64| {
            move |c: &[f64]| {
                let t = c[0];
                let flops = 2.0 * 3.0 * h * inter * topk * t / ranks / peak;
                let touched = (t * topk).min(experts) / ranks;
                flops.max(touched * 3.0 * h * inter * dt.bytes() / bw)
            }
        };
        // The measured expert degrees of these experts.
        let mut degrees: Vec<u32> = table
            .slices()
            .filter(|(k, _)| k.len() == 8 && k[..7] == key[..7])
            .filter_map(|(k, _)| k[7].parse().ok())
            .collect();
        degrees.sort_unstable();
        let at = |d: u32| -> Option<(f64, Source)> {
            let ds = d.to_string();
            let mut k: Vec<&str> = key.iter().map(String::as_str).collect();
            k[7] = &ds;
            // The same tokens a rank as the deployment's.
            let t = tokens as f64 * f64::from(d) / f64::from(ep);
            table.slice(&k)?.lookup(&[t], family.scales(), sol_at(f64::from(d)))
        };
        if degrees.contains(&ep) {
            return at(ep).map(|(ms, src)| (ms / 1e3, src));
        }
        let below = degrees.iter().copied().filter(|d| *d < ep).max();
        let above = degrees.iter().copied().filter(|d| *d > ep).min();
        match (below, above) {
            (Some(lo), Some(hi)) => {
                let (a, b) = (at(lo)?, at(hi)?);
                let log = |d: u32| libm::log2(f64::from(d));
                let w = (log(ep) - log(lo)) / (log(hi) - log(lo));
                let src = if a.1 == Source::Extrapolated || b.1 == Source::Extrapolated {
                    Source::Extrapolated
                } else {
                    Source::Interpolated
                };
                Some((a.0 + (b.0 - a.0) * w, src))
            }
            (Some(d), None) | (None, Some(d)) => at(d).map(|(ms, _)| (ms, Source::Extrapolated)),
            (None, None) => None,
        }
        .map(|(ms, src)| (ms / 1e3, src))
    }

    /// SGLang's DeepEP dispatch and combine of one MoE layer for `per_rank` tokens a rank,
    /// from AIConfigurator's DeepEP tables: the normal kernels for a step that extends a
    /// prompt (`extend`; SGLang's `--deepep-mode auto`), the low-latency ones for a decode step.
    /// The normal kernels run on DeepEP's default 20 SMs (`Buffer.num_sms`), which SGLang keeps
    /// unless given `--deepep-config`. The tables were measured within one node, so they time
    /// only an expert group inside the NVLink domain (one node, or NVL72's racks); `None`
    /// elsewhere, or where the deployment does not run DeepEP or no table holds its shape (the
    /// NCCL all-to-all then times the traffic).
    #[allow(clippy::cast_precision_loss)]
    #[must_use]
    pub fn deepep_transfer(&self, per_rank: u64, extend: bool) -> Option<[(f64, Source); 2]> {
        let moe = self.s.model.moe.as_ref()?;
        let p = self.s.parallelism;
        let hw = &self.s.hardware;
        let gpus = p.attention_data * p.tensor.max(1);
        let nvlink = gpus <= hw.gpus_per_node || hw.scale_out_bytes_per_s >= hw.scale_up_bytes_per_s;
        if per_rank == 0 || !self.runs_deepep() || !nvlink {
            return None;
        }
        let family = if extend { Family::DeepEpNormal } else { Family::DeepEpLowLatency };
        let table = self.db.table(family)?;
        let (hidden, topk, experts) = (
            self.s.model.hidden_size.to_string(),
            moe.experts_per_token.to_string(),
            moe.num_experts.to_string(),
        );
        // Each token's hidden state travels once per chosen expert, in bf16 at most.
        let (h, k) = (self.s.model.hidden_size as f64, f64::from(moe.experts_per_token));
        let (link, lat) = (hw.scale_up_bytes_per_s, self.s.constants.link_latency_s * 1e3);
        let sol = move |c: &[f64]| c[0] * k * h * 2.0 / link * 1e3 + lat;
        let one = |phase: &str| {
            let normal = [phase, DEEPEP_NORMAL_SMS, &hidden, &topk, &experts];
            let key = if extend { &normal[..] } else { &[phase, &hidden, &topk, &experts][..] };
            let (ms, src) = table.slice(key)?.lookup(&[per_rank as f64], family.scales(), sol)?;
            Some((ms / 1e3, src))
        };
        Some([one("dispatch")?, one("combine")?])
    }
}

/// SMs DeepEP's normal kernels run on unless configured: `deep_ep.Buffer.num_sms`'s default.
const DEEPEP_NORMAL_SMS: &str = "20";

/// A time taken from another table's measurement is at best an interpolation.
fn derived(src: Source) -> Source {
    if src == Source::Measured {
        Source::Interpolated
    } else {
        src
    }
}

/// Generation attention of one layer for a fixed batch (`batch` requests, heads per GPU):
/// its grid coordinates but the KV length, and its speed of light. Built once per step, or
/// once per rank for a decode run's steps.
#[derive(Clone, Copy, Debug)]
pub(super) struct GenAttention {
    /// Grid coordinates; `x[1]`, the KV length, is set per lookup.
    x: [f64; 4],
    mla: Option<(f64, f64)>,
    head_dim: f64,
    kv_bytes: f64,
    hbm_bytes_per_s: f64,
    peak_flops: f64,
    memory_efficiency: f64,
}

impl GenAttention {
    /// `None` for an empty batch (no attention to time).
    #[allow(clippy::cast_precision_loss)]
    pub(super) fn new(setup: &OpLevelSetup, batch: u32) -> Option<Self> {
        if batch == 0 {
            return None;
        }
        let m = &setup.model;
        let tp = f64::from(setup.parallelism.tensor.max(1));
        let heads = (f64::from(m.num_heads) / tp).max(1.0);
        let (mla, kvh) = match &m.mla {
            Some(mla) => {
                (Some(((mla.kv_lora_rank + mla.qk_rope_head_dim) as f64, mla.kv_lora_rank as f64)), 0.0)
            }
            None => (None, f64::from(m.num_kv_heads.div_ceil(setup.parallelism.tensor.max(1)).max(1))),
        };
        Some(GenAttention {
            x: [f64::from(batch), 1.0, heads, kvh],
            mla,
            head_dim: m.head_dim as f64,
            kv_bytes: setup.kv.bytes(),
            hbm_bytes_per_s: setup.hardware.hbm_bytes_per_s,
            peak_flops: setup.hardware.peak_flops(Dtype::Bf16),
            memory_efficiency: setup.constants.memory_efficiency,
        })
    }

    /// The grid's axes: MLA tables have no KV-head axis.
    fn dims(&self) -> (usize, &'static [Scale]) {
        match self.mla {
            Some(_) => (3, Family::GenerationMla.scales()),
            None => (4, Family::GenerationAttention.scales()),
        }
    }

    /// Speed-of-light seconds at grid coordinates `c`: KV bytes over HBM bandwidth, or the
    /// attention FLOPs over the bf16 peak, whichever is longer.
    fn sol(&self, c: &[f64]) -> f64 {
        let (kvb, bw, peak) = (self.kv_bytes, self.hbm_bytes_per_s, self.peak_flops);
        match self.mla {
            Some((latent, r)) => {
                let (b, s, h) = (c[0], c[1], c[2]);
                (b * s * latent * kvb / bw).max(b * s * h * 2.0 * (latent + r) / peak)
            }
            None => {
                let (b, s, h, kh, d) = (c[0], c[1], c[2], c[3], self.head_dim);
                (b * s * kh * d * 2.0 * kvb / bw).max(b * s * h * d * 4.0 / peak)
            }
        }
    }

    /// Seconds and source at mean KV length `kv_len` from `look` (the grid's milliseconds),
    /// or on the roofline.
    #[inline]
    fn time(
        &self,
        grid: Option<&Grid>,
        kv_len: f64,
        look: impl FnOnce(&Grid, &[f64], &'static [Scale]) -> Option<(f64, Source)>,
    ) -> (f64, Source) {
        let mut x = self.x;
        x[1] = kv_len.max(1.0);
        let (dims, scales) = self.dims();
        if let Some(g) = grid {
            if let Some((ms, src)) = look(g, &x[..dims], scales) {
                return (ms / 1e3, src);
            }
        }
        (self.sol(&x[..dims]) / self.memory_efficiency, Source::Roofline)
    }

    /// Through a bracket cache.
    pub(super) fn cached(&self, grid: Option<&Grid>, kv_len: f64, cache: &mut LookupCache) -> (f64, Source) {
        self.time(grid, kv_len, |g, x, scales| g.lookup_cached(x, scales, |c| self.sol(c), cache))
    }

    /// On a line of the grid along the KV length, made on first use (the same answer).
    #[inline(always)]
    pub(super) fn on(&self, grid: Option<&Grid>, kv_len: f64, line: &mut Option<GridLine>) -> (f64, Source) {
        // Most steps of a run stay inside the line's last interval: answer without the rest
        // (inlined into the run's step loop; the rest is not).
        if let Some(Some((ms, src))) = line.as_ref().and_then(|l| l.in_cell(kv_len.max(1.0), |c| self.sol(c)))
        {
            return (ms / 1e3, src);
        }
        self.on_line(grid, kv_len, line)
    }

    /// [`GenAttention::on`] outside the line's last interval.
    #[inline(never)]
    fn on_line(&self, grid: Option<&Grid>, kv_len: f64, line: &mut Option<GridLine>) -> (f64, Source) {
        self.time(grid, kv_len, |g, x, scales| {
            if line.is_none() {
                *line = g.line(x, 1, scales);
            }
            g.lookup_on(line.as_mut()?, x[1], |c| self.sol(c))
        })
    }
}
