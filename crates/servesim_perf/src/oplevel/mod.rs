//! The op-level step timer: a forward step is the sum of its kernels, each timed from
//! measured tables ([`crate::tables`]) with a roofline fallback.
//!
//! One step on one attention-DP rank runs, for every decoder layer of this GPU's pipeline
//! stage:
//! - norms and residual adds (element-wise, analytic: bytes at 80% of HBM bandwidth plus
//!   3 µs per kernel, AIConfigurator's empirical rule, AICDB §3.3);
//! - attention projections as GEMMs over all new tokens (`m` = tokens), with per-GPU shapes
//!   under tensor parallelism; MLA models run their down/up projections instead;
//! - context attention for the prefill chunks (one batched lookup whose length gives the same
//!   number of causal query–key pairs as the chunks on top of their cached context) and
//!   generation attention for the decode requests (batch × mean KV length); sliding-window
//!   layers see at most the window, sparse (DSA) layers at most their top-k keys;
//! - in a hybrid model's linear-attention layers, the input and output projections as GEMMs
//!   and the Gated DeltaNet kernels from their own table (`gdn`: the prompt chunks' causal
//!   convolution and chunked scan, the decode requests' convolution update and recurrence);
//! - the MLP (gate/up GEMM, activation, down GEMM) or, in MoE layers, the router GEMM, the
//!   fused-experts kernel over the tokens of every attention-DP rank, and shared experts;
//! - tensor-parallel all-reduces after attention and MLP (the engine's custom all-reduce
//!   table), or an all-to-all dispatch and combine when experts are spread over
//!   attention-DP ranks (NCCL table);
//!
//! plus the embedding gather, the final norm and the LM head for the sequences that sample.
//! Attention-DP ranks run in lockstep, so the step lasts as long as the slowest rank's
//! attention plus the shared MoE kernels. A fixed per-step engine overhead (scheduling,
//! sampling, launch) is added; its value per engine is calibrated (see `docs/validation.md`).
//!
//! Results that depend only on token counts are memoised, so a step costs a few lookups.
//!
//! Layout: `setup` describes the deployment and holds the constants, `ops` times single
//! kernels, this module composes them into a step's parts, and `step` implements the core's
//! `StepTimer` with them (single steps, decode runs, breakdowns, the report).

use alloc::collections::BTreeMap;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use servesim_core::timing::RankLoad;

use crate::spec::GemmQuant;
use crate::tables::{Family, Grid, GridLine, LookupCache, Provenance, Source, Table};

mod gdn;
mod ops;
use ops::GenAttention;
mod setup;
mod step;

pub use setup::{
    release_before, release_triple, AllReduceImpl, EngineCalibration, GraphPolicy, MoeKernel, OpConstants,
    OpLevelSetup, SGLANG, SYNC_HOST_S_PER_SEQUENCE, SYNC_HOST_S_PER_STEP, TRTLLM, TRTLLM_1_0, VLLM,
    VLLM_0_12,
};

/// Measured tables of one system, engine and engine version.
#[derive(Clone, Debug, Default)]
pub struct PerfDb {
    /// GPU id (`h200_sxm`).
    pub system: String,
    /// Engine (`vllm`, `sglang`, `trtllm`).
    pub backend: String,
    /// Engine version the tables were measured with.
    pub version: String,
    /// Where the tables came from (for provenance reports).
    pub source: String,
    tables: BTreeMap<Family, Rc<Table>>,
    /// Families whose table was measured with another engine version than `version` (the
    /// data held none for `version`), and that version.
    borrowed: BTreeMap<Family, String>,
}

impl PerfDb {
    /// An empty database (everything falls back to the roofline).
    #[must_use]
    pub fn new(system: &str, backend: &str, version: &str, source: &str) -> Self {
        PerfDb {
            system: system.to_string(),
            backend: backend.to_string(),
            version: version.to_string(),
            source: source.to_string(),
            tables: BTreeMap::new(),
            borrowed: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) a family's table, measured with `version`.
    pub fn insert(&mut self, t: Rc<Table>) {
        self.borrowed.remove(&t.family);
        self.tables.insert(t.family, t);
    }

    /// Adds a family's table measured with another engine `version`, for a family the data
    /// holds no table of `version` for.
    pub fn insert_borrowed(&mut self, t: Rc<Table>, version: &str) {
        self.borrowed.insert(t.family, version.to_string());
        self.tables.insert(t.family, t);
    }

    /// The engine version a family's table was measured with.
    #[must_use]
    pub fn table_version(&self, f: Family) -> &str {
        self.borrowed.get(&f).map_or(&self.version, String::as_str)
    }

    /// The table of a family, if loaded.
    #[must_use]
    pub fn table(&self, f: Family) -> Option<&Table> {
        self.tables.get(&f).map(|t| &**t)
    }

    /// Families loaded.
    pub fn families(&self) -> impl Iterator<Item = Family> + '_ {
        self.tables.keys().copied()
    }
}

/// The kinds of op a step is made of, for provenance reports.
pub const OP_KINDS: [&str; 7] = ["gemm", "attention", "allreduce", "moe", "nccl", "elementwise", "p2p"];

/// Expected number of expert-parallel ranks a token's `top_k` experts land on, with
/// `experts` spread evenly over `ranks` and drawn without repeats: each rank misses all of
/// them with probability C(E − E/R, k) / C(E, k).
#[allow(clippy::cast_precision_loss)]
fn distinct_ranks(experts: u32, top_k: u32, ranks: u32) -> f64 {
    let (e, r) = (f64::from(experts.max(1)), f64::from(ranks.max(1)));
    let per_rank = e / r;
    let miss: f64 = (0..top_k.min(experts))
        .map(|i| ((e - per_rank - f64::from(i)) / (e - f64::from(i))).max(0.0))
        .product();
    r * (1.0 - miss)
}

/// Byte-wise string equality usable in constants.
const fn const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Lookups by op kind and source, as counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally([[u32; 4]; 7]);

impl Tally {
    fn count(&mut self, kind: usize, src: Source) {
        self.0[kind][src as usize] += 1;
    }
}

/// A pipeline stage's attention layers (see `OpLevelTimer::attention_layers`).
#[derive(Clone, Copy)]
struct AttentionLayers {
    full_layers: f64,
    sliding_layers: f64,
    window: Option<(u64, u32)>,
    cap: f64,
}

/// Seconds of a part of a step by op kind ([`OP_KINDS`] order).
type KindSeconds = [f64; 7];

/// A part's seconds and lookups, without its split by op kind.
fn total((secs, tally, _): (f64, Tally, KindSeconds)) -> (f64, Tally) {
    (secs, tally)
}

/// A memo slot: seconds and the index of the tally of the lookups behind it.
type Memo = Option<(f64, u16)>;

/// Times steps of one worker role from its measured tables.
#[derive(Clone, Debug)]
pub struct OpLevelTimer {
    s: OpLevelSetup,
    db: Rc<PerfDb>,
    /// Token-count-dependent per-rank cost (linear layers, norms, all-reduces) by tokens,
    /// for graph-captured steps and for eager ones.
    dense_by_tokens: Vec<Memo>,
    dense_eager_by_tokens: Vec<Memo>,
    /// LM head by sampling sequences.
    head_by_seqs: Vec<Memo>,
    /// MoE experts (and their all-to-all) by tokens over all ranks, for decode steps and
    /// for steps that extend a prompt (which differ where the experts run DeepEP).
    moe_by_tokens: Vec<Memo>,
    moe_extend_by_tokens: Vec<Memo>,
    /// A hybrid model's Gated DeltaNet decode kernels by decode requests.
    gdn_decode_by_seqs: Vec<Memo>,
    /// Distinct tallies memo slots refer to, and how many times each was used: a step adds
    /// one to a count instead of its tally's 28 counts to `used`.
    tallies: Vec<Tally>,
    tally_uses: Vec<u64>,
    /// Op evaluations so far outside the tallies, by kind and source.
    used: [Provenance; 7],
    /// The generation-attention grid, resolved once, and the brackets of its last lookup for
    /// full and sliding-window layers.
    gen_grid: Option<Rc<Grid>>,
    gen_caches: [LookupCache; 2],
    /// Buffers of `extend_decode_run`, kept between runs (a replay forms runs by the
    /// hundred thousand).
    run_ranks: Vec<RunRank>,
    run_tallies: Vec<u16>,
    /// Whether the routed experts run SGLang's DeepEP path ([`OpLevelTimer::runs_deepep`]),
    /// decided once: every step asks.
    deepep: bool,
    /// The measured grids of a hybrid model's Gated DeltaNet kernels, resolved once.
    gdn: gdn::GdnGrids,
}

/// A busy rank during a decode run: the seconds that stay the same every step, its load
/// (whose KV grows by a token per request each step) and its attention grid lines.
type RunRank = (f64, RankLoad, Option<GenAttention>, [Option<GridLine>; 2]);

/// Decode steps whose attention a run blends ahead at a time: enough for the divisions of
/// neighbouring steps to overlap, few enough that little is wasted past a run's end.
const RUN_BATCH: usize = 8;

/// Memo tables grow to this many entries; larger counts are computed every time.
const MEMO_LIMIT: usize = 1 << 17;

impl OpLevelTimer {
    /// A timer for `setup` over the tables in `db`.
    #[must_use]
    pub fn new(setup: OpLevelSetup, db: Rc<PerfDb>) -> Self {
        let mut t = OpLevelTimer {
            s: setup,
            db,
            dense_by_tokens: Vec::new(),
            dense_eager_by_tokens: Vec::new(),
            head_by_seqs: Vec::new(),
            moe_by_tokens: Vec::new(),
            moe_extend_by_tokens: Vec::new(),
            gdn_decode_by_seqs: Vec::new(),
            tallies: Vec::new(),
            tally_uses: Vec::new(),
            used: [Provenance::default(); 7],
            gen_grid: None,
            gen_caches: [LookupCache::default(); 2],
            run_ranks: Vec::new(),
            run_tallies: Vec::new(),
            deepep: false,
            gdn: gdn::GdnGrids::default(),
        };
        t.gen_grid = t.generation_grid();
        t.gdn = t.gdn_grids();
        t.deepep = t.deepep_layout();
        t
    }

    /// Replaces the modelling constants (e.g. to compare raw kernel sums).
    pub fn set_constants(&mut self, c: OpConstants) {
        self.s.constants = c;
    }

    /// Op evaluations of every step timed so far, by how each op was timed.
    #[must_use]
    pub fn provenance(&self) -> Provenance {
        let mut p = Provenance::default();
        for (_, u) in &self.provenance_by_kind() {
            p.add(u);
        }
        p
    }

    /// Same as [`OpLevelTimer::provenance`], per op kind ([`OP_KINDS`] order).
    #[must_use]
    pub fn provenance_by_kind(&self) -> [(&'static str, Provenance); 7] {
        let mut out = [("", Provenance::default()); 7];
        for (i, k) in OP_KINDS.iter().enumerate() {
            out[i] = (k, self.used[i]);
        }
        for (t, &n) in self.tallies.iter().zip(&self.tally_uses) {
            for (kind, row) in t.0.iter().enumerate() {
                let u = &mut out[kind].1;
                u.measured += u64::from(row[0]) * n;
                u.interpolated += u64::from(row[1]) * n;
                u.extrapolated += u64::from(row[2]) * n;
                u.roofline += u64::from(row[3]) * n;
            }
        }
        out
    }

    /// Counts the lookups of tally `t` as used `n` more times (nothing for the tally-less
    /// index `u16::MAX`).
    fn use_tally_times(&mut self, t: u16, n: u64) {
        if let Some(u) = self.tally_uses.get_mut(usize::from(t)) {
            *u += n;
        }
    }

    /// The index of tally `t` (`u16::MAX`, counting nothing, past 65,535 distinct ones).
    fn intern(&mut self, t: Tally) -> u16 {
        if let Some(i) = self.tallies.iter().position(|x| *x == t) {
            return u16::try_from(i).unwrap_or(u16::MAX);
        }
        let i = match u16::try_from(self.tallies.len()) {
            Ok(i) if i < u16::MAX => i,
            _ => return u16::MAX,
        };
        self.tallies.push(t);
        self.tally_uses.push(0);
        i
    }

    /// The tables in use.
    #[must_use]
    pub fn db(&self) -> &PerfDb {
        &self.db
    }

    fn tp(&self) -> u32 {
        self.s.parallelism.tensor.max(1)
    }

    fn bw(&self) -> f64 {
        self.s.hardware.hbm_bytes_per_s
    }

    // ---- memoised parts of a step ----

    /// Index of an op kind in [`OP_KINDS`] (0 for an unknown name). A `const fn`, so the hot
    /// paths name their kind in a `const` block instead of searching strings every step.
    const fn kind(name: &str) -> usize {
        let mut i = 0;
        while i < OP_KINDS.len() {
            if const_str_eq(OP_KINDS[i], name) {
                return i;
            }
            i += 1;
        }
        0
    }

    /// Per-rank cost that depends only on the rank's new tokens: linear layers, norms,
    /// activations, all-reduces, embedding.
    #[allow(clippy::cast_precision_loss, clippy::too_many_lines)]
    fn dense_part(&mut self, tokens: u64, graph: bool) -> (f64, Tally, KindSeconds) {
        let mut prov = Tally::default();
        let mut by_kind = KindSeconds::default();
        let m = self.s.model.clone();
        let p = self.s.parallelism;
        let tp = u64::from(self.tp());
        let pp = f64::from(p.pipeline.max(1));
        let t = tokens;
        let tf = t as f64;
        let h = m.hidden_size;
        let gq = self.s.gemm;
        let mut secs = 0.0;
        let mut add =
            |_: &mut Self, fam: &'static str, (s, src): (f64, Source), times: f64, prov: &mut Tally| {
                if s > 0.0 {
                    prov.count(Self::kind(fam), src);
                }
                secs += s * times;
                by_kind[Self::kind(fam)] += s * times;
            };
        let attn_layers = f64::from(m.attention_layers()) / pp;
        let linear_layers = f64::from(m.num_layers - m.attention_layers()) / pp;
        let moe_layers = f64::from(m.moe_layers()) / pp;
        let dense_mlp_layers = f64::from(m.num_layers - m.moe_layers()) / pp;
        let all_layers = f64::from(m.num_layers) / pp;
        // Embedding gather and final norm (one each per step).
        let e = self.elementwise(tf * h as f64 * 2.0);
        add(self, "elementwise", (e, Source::Roofline), 2.0, &mut prov);
        // Two norms with residual adds per layer.
        let e = self.elementwise(tf * (2 * h) as f64 * 2.0);
        add(self, "elementwise", (e, Source::Roofline), 2.0 * all_layers, &mut prov);
        // Attention projections.
        let heads = u64::from(m.num_heads).div_ceil(tp);
        if let Some(mla) = &m.mla {
            let qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
            if mla.q_lora_rank > 0 {
                let g = self.gemm(t, mla.q_lora_rank, h, gq);
                add(self, "gemm", g, attn_layers, &mut prov);
                let g = self.gemm(t, heads * qk, mla.q_lora_rank, gq);
                add(self, "gemm", g, attn_layers, &mut prov);
            } else {
                let g = self.gemm(t, heads * qk, h, gq);
                add(self, "gemm", g, attn_layers, &mut prov);
            }
            let g = self.gemm(t, mla.kv_lora_rank + mla.qk_rope_head_dim, h, gq);
            add(self, "gemm", g, attn_layers, &mut prov);
            let g = self.gemm(t, heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank, gq);
            add(self, "gemm", g, attn_layers, &mut prov);
            let g = self.gemm(t, h, heads * mla.v_head_dim, gq);
            add(self, "gemm", g, attn_layers, &mut prov);
        } else {
            let kvh = u64::from(m.num_kv_heads.div_ceil(self.tp()).max(1));
            // An output gate widens the query projection by the queries' width.
            let gate = if m.attn_output_gate { heads } else { 0 };
            let g = self.gemm(t, (heads + gate + 2 * kvh) * m.head_dim, h, gq);
            add(self, "gemm", g, attn_layers, &mut prov);
            let g = self.gemm(t, h, heads * m.head_dim, gq);
            add(self, "gemm", g, attn_layers, &mut prov);
            // Rotary embedding on queries and keys.
            let e = self.elementwise(tf * ((heads + kvh) * m.head_dim) as f64 * 2.0 * 2.0);
            add(self, "elementwise", (e, Source::Roofline), attn_layers, &mut prov);
        }
        if let Some(la) = &m.linear_attention {
            let k = u64::from(la.key_heads) * la.key_head_dim / tp;
            let v = u64::from(la.value_heads) * la.value_head_dim / tp;
            let g = self.gemm(t, 2 * k + 2 * v + 2 * u64::from(la.value_heads) / tp, h, gq);
            add(self, "gemm", g, linear_layers, &mut prov);
            let g = self.gemm(t, h, v, gq);
            add(self, "gemm", g, linear_layers, &mut prov);
            // The convolution and the recurrence depend on the sequences, not just the
            // tokens: `attention_part` times them (`gdn_secs`).
        }
        // All-reduce after attention (every layer) and after the MLP (dense layers, and MoE
        // layers whose experts are tensor-sharded inside the TP group).
        let ar = self.allreduce(t * h, self.tp(), graph);
        add(self, "allreduce", ar, all_layers + dense_mlp_layers, &mut prov);
        // Dense MLP layers.
        if dense_mlp_layers > 0.0 && m.intermediate_size > 0 {
            let i = m.intermediate_size.div_ceil(tp);
            let g = self.gemm(t, 2 * i, h, gq);
            add(self, "gemm", g, dense_mlp_layers, &mut prov);
            let e = self.elementwise(tf * (3 * i) as f64 * 2.0);
            add(self, "elementwise", (e, Source::Roofline), dense_mlp_layers, &mut prov);
            let g = self.gemm(t, h, i, gq);
            add(self, "gemm", g, dense_mlp_layers, &mut prov);
        }
        // MoE layers: router and shared experts here; routed experts in `moe_part`.
        if let Some(moe) = &m.moe {
            if moe_layers > 0.0 {
                let g = self.gemm(t, u64::from(moe.num_experts), h, GemmQuant::Bf16);
                add(self, "gemm", g, moe_layers, &mut prov);
                if moe.shared_intermediate_size > 0 {
                    let i = moe.shared_intermediate_size.div_ceil(tp);
                    let g = self.gemm(t, 2 * i, h, gq);
                    add(self, "gemm", g, moe_layers, &mut prov);
                    let g = self.gemm(t, h, i, gq);
                    add(self, "gemm", g, moe_layers, &mut prov);
                }
                if p.attention_data <= 1 {
                    let ar = self.allreduce(t * h, self.tp(), graph);
                    add(self, "allreduce", ar, moe_layers, &mut prov);
                }
            }
        }
        // Pipeline stages hand activations on: (stages − 1) transfers per cycle, a share of
        // them per stage (the cycle is stages × one stage's time).
        if p.pipeline > 1 {
            let hw = &self.s.hardware;
            let link =
                if p.gpus() <= hw.gpus_per_node { hw.scale_up_bytes_per_s } else { hw.scale_out_bytes_per_s };
            let s = tf * h as f64 * 2.0 / link + self.s.constants.link_latency_s;
            add(self, "p2p", (s, Source::Roofline), (pp - 1.0) / pp, &mut prov);
        }
        (secs, prov, by_kind)
    }

    /// LM head (and the final norm of the sampled rows) for `seqs` sampling sequences.
    fn head_part(&mut self, seqs: u64) -> (f64, Tally) {
        let mut prov = Tally::default();
        let m = &self.s.model;
        let n = m.vocab_size.div_ceil(u64::from(self.tp()));
        let g = self.gemm(seqs, n, m.hidden_size, GemmQuant::Bf16);
        if g.0 > 0.0 {
            prov.count(const { Self::kind("gemm") }, g.1);
        }
        (g.0, prov)
    }

    /// Whether the routed experts' tokens cross attention-DP ranks by all-to-all: SGLang's
    /// DeepEP path, which its attention-DP deployments run (`--moe-a2a-backend deepep`), and
    /// TensorRT-LLM's NVLink all-to-all where the NVLink domain spans nodes (NVL72: scale-out
    /// at scale-up bandwidth) and experts are not split by tensor (AICDB §5, MoEDispatch).
    /// Otherwise (vLLM's default backend, TensorRT-LLM within a node) every rank gathers all
    /// ranks' tokens and reduce-scatters the outputs.
    fn moe_all_to_all(&self) -> bool {
        let hw = &self.s.hardware;
        match self.db.backend.as_str() {
            "sglang" => true,
            "trtllm" => {
                self.s.parallelism.moe_tensor <= 1 && hw.scale_out_bytes_per_s >= hw.scale_up_bytes_per_s
            }
            _ => false,
        }
    }

    /// Routed experts over `tokens` tokens of all ranks, with the traffic that brings the
    /// tokens to them and their outputs back; `extend` for a step that extends a prompt.
    #[allow(clippy::cast_precision_loss)]
    fn moe_part(&mut self, tokens: u64, extend: bool) -> (f64, Tally, KindSeconds) {
        let mut prov = Tally::default();
        let mut by_kind = KindSeconds::default();
        let Some(moe) = self.s.model.moe.clone() else { return (0.0, prov, by_kind) };
        let p = self.s.parallelism;
        let layers = f64::from(self.s.model.moe_layers()) / f64::from(p.pipeline.max(1));
        let e = self.deepep_experts(tokens, extend).unwrap_or_else(|| self.moe_experts(tokens));
        if e.0 > 0.0 {
            prov.count(const { Self::kind("moe") }, e.1);
        }
        let mut secs = e.0 * layers;
        by_kind[const { Self::kind("moe") }] = secs;
        if p.attention_data > 1 {
            let gpus = p.attention_data * p.tensor.max(1);
            let hidden = self.s.model.hidden_size;
            // The dispatched activations: TensorRT-LLM on Blackwell (the GPUs with FP4 tensor
            // cores) quantises them before they travel, to NVFP4 (4 bits and one fp8 scale per
            // 16 values) or fp8 (AICDB §5, MoEDispatch); elsewhere, and the other engines, send
            // bf16. Outputs come back in bf16.
            let blackwell = self.s.hardware.fp4_flops.is_some();
            let pre_bytes = |elems: u64| match (self.db.backend.as_str(), self.s.moe) {
                ("trtllm", crate::spec::MoeQuant::Nvfp4) if blackwell => elems / 2 + elems / 16,
                ("trtllm", crate::spec::MoeQuant::Fp8 | crate::spec::MoeQuant::Fp8Block) if blackwell => {
                    elems
                }
                _ => elems * 2,
            };
            let per_rank = tokens / u64::from(p.attention_data);
            let (pre, post) = if let Some([dispatch, combine]) = self.deepep_transfer(per_rank, extend) {
                (dispatch, combine)
            } else if self.moe_all_to_all() {
                // Dispatch and combine: each rank sends a token's hidden state once to every
                // rank holding one of its experts, and gets the partial outputs back.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let elems = libm::round(
                    per_rank as f64
                        * hidden as f64
                        * distinct_ranks(moe.num_experts, moe.experts_per_token, p.moe_expert.max(1)),
                ) as u64;
                (
                    self.collective("alltoall", pre_bytes(elems), gpus),
                    self.collective("alltoall", elems * 2, gpus),
                )
            } else {
                // Every rank gathers all ranks' tokens before the experts and reduce-scatters
                // their bf16 outputs after (AICDB §5: MoEDispatch with attention DP > 1).
                let elems = tokens * hidden;
                (
                    self.collective("all_gather", pre_bytes(elems), gpus),
                    self.collective("reduce_scatter", elems * 2, gpus),
                )
            };
            for part in [pre, post] {
                if part.0 > 0.0 {
                    prov.count(const { Self::kind("nccl") }, part.1);
                }
            }
            secs += (pre.0 + post.0) * layers;
            by_kind[const { Self::kind("nccl") }] = (pre.0 + post.0) * layers;
        }
        (secs, prov, by_kind)
    }

    /// The memo of a step's routed experts: 4 for a step that extends a prompt on experts that
    /// run DeepEP (whose kernels differ by phase), else 2.
    fn moe_memo(&self, ranks: &[RankLoad]) -> u8 {
        if self.runs_deepep() && ranks.iter().any(|r| !r.prefill.is_empty()) {
            4
        } else {
            2
        }
    }

    fn memo(&mut self, which: u8, key: u64) -> f64 {
        let (s, tally) = self.memo_peek(which, key);
        self.use_tally_times(tally, 1);
        s
    }

    /// A memoised part and the tally of its lookups, without counting them as used.
    fn memo_peek(&mut self, which: u8, key: u64) -> (f64, u16) {
        let idx = usize::try_from(key).unwrap_or(usize::MAX);
        let cached = match which {
            0 => self.dense_by_tokens.get(idx),
            1 => self.head_by_seqs.get(idx),
            3 => self.dense_eager_by_tokens.get(idx),
            4 => self.moe_extend_by_tokens.get(idx),
            5 => self.gdn_decode_by_seqs.get(idx),
            _ => self.moe_by_tokens.get(idx),
        }
        .copied()
        .flatten();
        if let Some((s, ti)) = cached {
            return (s, ti);
        }
        let (s, tally) = match which {
            0 => total(self.dense_part(key, true)),
            1 => self.head_part(key),
            3 => total(self.dense_part(key, false)),
            4 => total(self.moe_part(key, true)),
            5 => self.gdn_decode_part(key),
            _ => total(self.moe_part(key, false)),
        };
        let prov = self.intern(tally);
        if idx < MEMO_LIMIT {
            let v = match which {
                0 => &mut self.dense_by_tokens,
                1 => &mut self.head_by_seqs,
                3 => &mut self.dense_eager_by_tokens,
                4 => &mut self.moe_extend_by_tokens,
                5 => &mut self.gdn_decode_by_seqs,
                _ => &mut self.moe_by_tokens,
            };
            if v.len() <= idx {
                v.resize(idx + 1, None);
            }
            v[idx] = Some((s, prov));
        }
        (s, prov)
    }

    /// How this stage's attention layers split into full and sliding-window ones, and the
    /// most keys a query sees (sparse attention's top-k, else unbounded).
    #[allow(clippy::cast_precision_loss)]
    fn attention_layers(&self) -> AttentionLayers {
        let m = &self.s.model;
        let pp = f64::from(self.s.parallelism.pipeline.max(1));
        let attn_layers = f64::from(m.attention_layers()) / pp;
        let window = m.sliding_window;
        let sliding_layers = window.map_or(0.0, |(_, n)| f64::from(n) / pp).min(attn_layers);
        AttentionLayers {
            full_layers: attn_layers - sliding_layers,
            sliding_layers,
            window,
            cap: m.sparse_attention_topk.map_or(f64::INFINITY, |k| k as f64),
        }
    }

    /// Attention of one rank for one step (all attention layers of this stage): context
    /// (prefill, and a hybrid model's Gated DeltaNet kernels) and generation (decode) seconds.
    #[allow(clippy::cast_precision_loss)]
    fn attention_part(&mut self, r: &RankLoad) -> (f64, f64) {
        let AttentionLayers { full_layers, sliding_layers, window, cap } = self.attention_layers();
        let mut ctx_secs = 0.0;
        let mut prov = Provenance::default();
        // Prefill chunks: causal pairs on top of cached context.
        if !r.prefill.is_empty() {
            let b = u32::try_from(r.prefill.len()).unwrap_or(u32::MAX);
            let pairs_with = |limit: f64| -> f64 {
                r.prefill
                    .iter()
                    .map(|c| {
                        let (n, ctx) = (f64::from(c.new_tokens), f64::from(c.context_tokens));
                        // Query i (1-based) sees ctx + i keys, at most `limit`.
                        if ctx + n <= limit {
                            n * ctx + n * (n + 1.0) / 2.0
                        } else if ctx >= limit {
                            n * limit
                        } else {
                            let free = limit - ctx;
                            free * ctx + free * (free + 1.0) / 2.0 + (n - free) * limit
                        }
                    })
                    .sum()
            };
            if full_layers > 0.0 {
                let (s, src) = self.context_attention(b, pairs_with(cap));
                prov.count(src);
                ctx_secs += s * full_layers;
            }
            if let Some((w, _)) = window.filter(|_| sliding_layers > 0.0) {
                let (s, src) = self.context_attention(b, pairs_with(w as f64));
                prov.count(src);
                ctx_secs += s * sliding_layers;
            }
        }
        // A hybrid model's linear-attention layers, prefill and decode alike (counted with
        // the context part: a decode run evaluates it once, as it does the linear layers).
        if self.s.model.linear_attention.is_some() {
            ctx_secs += self.gdn_secs(r, &mut prov);
        }
        self.used[const { Self::kind("attention") }].add(&prov);
        (ctx_secs, self.generation_part(r))
    }

    /// Generation attention of one rank for one step (all attention layers of this stage).
    #[allow(clippy::cast_precision_loss)]
    fn generation_part(&mut self, r: &RankLoad) -> f64 {
        let layers = self.attention_layers();
        let mut prov = Provenance::default();
        let secs = self.generation_part_in(r, &layers, &mut prov);
        self.used[const { Self::kind("attention") }].add(&prov);
        secs
    }

    /// [`OpLevelTimer::generation_part`] with the layer split given and the lookups counted
    /// into `prov`, through the timer's bracket caches.
    fn generation_part_in(&mut self, r: &RankLoad, layers: &AttentionLayers, prov: &mut Provenance) -> f64 {
        let Some(att) = GenAttention::new(&self.s, r.decode_requests) else { return 0.0 };
        let (grid, caches) = (self.gen_grid.as_deref(), &mut self.gen_caches);
        generation_secs(r, layers, prov, |i, kv| att.cached(grid, kv, &mut caches[i]))
    }

    /// Seconds of one step: a pipeline cycle over the stages' micro-batches
    /// ([`servesim_core::timing::pipelined_seconds`]), plus the engine's per-step overhead.
    fn step_seconds(&mut self, ranks: &[RankLoad]) -> f64 {
        if ranks.iter().all(RankLoad::is_empty) {
            return 0.0;
        }
        let stages = self.s.parallelism.pipeline.max(1);
        let draft = self.s.draft_scale();
        servesim_core::timing::pipelined_seconds(ranks, stages, &mut |r| self.stage_seconds(r)) * draft
            + self.s.constants.step_overhead_s
            + self.host_seconds(ranks)
    }

    /// Host time a step waits for when the engine schedules synchronously: each attention-DP
    /// rank's engine process handles its own sequences, so the busiest rank sets it.
    #[allow(clippy::cast_precision_loss)] // Sequence counts are far below 2^52.
    fn host_seconds(&self, ranks: &[RankLoad]) -> f64 {
        let (step, per) = (self.s.constants.host_s_per_step, self.s.constants.host_s_per_sequence);
        if step <= 0.0 && per <= 0.0 {
            return 0.0;
        }
        let seqs = ranks.iter().map(|r| u64::from(r.decode_requests) + r.prefill.len() as u64).max();
        step + per * seqs.unwrap_or(0) as f64
    }

    /// Seconds one pipeline stage (the whole model without PP) spends on a step's loads.
    fn stage_seconds(&mut self, ranks: &[RankLoad]) -> f64 {
        let mut worst: f64 = 0.0;
        let mut all_tokens = 0u64;
        for r in ranks {
            if r.is_empty() {
                continue;
            }
            let t = r.new_tokens();
            all_tokens += t;
            let seqs = u64::from(r.decode_requests) + r.prefill.len() as u64;
            let graph = self.s.graphs.captures(t, !r.prefill.is_empty());
            let dense = self.memo(if graph { 0 } else { 3 }, t);
            let (ctx, gen) = self.attention_part(r);
            // Only the last pipeline stage samples: its LM head counts once per cycle.
            let head = self.memo(1, seqs) / f64::from(self.s.parallelism.pipeline.max(1));
            let mut s = dense + head + ctx + gen;
            #[allow(clippy::float_cmp)] // 1.0 exactly means "no scaling".
            if !r.prefill.is_empty() && self.s.constants.prefill_scale != 1.0 {
                // The prefill share: linear layers beyond the decode tokens, context attention.
                let d = u64::from(r.decode_requests);
                let decode_only = if d > 0 { self.memo(if graph { 0 } else { 3 }, d) } else { 0.0 };
                s += (self.s.constants.prefill_scale - 1.0) * ((dense - decode_only).max(0.0) + ctx);
            }
            worst = worst.max(s);
        }
        if all_tokens == 0 {
            return 0.0;
        }
        worst + self.memo(self.moe_memo(ranks), all_tokens)
    }

    /// `stage_seconds` split into [`StageParts`]: the same terms of the same (slowest) rank,
    /// evaluated without the memo so that each keeps its op kinds. Counts lookups into `used`
    /// (attention); [`StepTimer::breakdown`] puts the counts back.
    fn stage_parts(&mut self, ranks: &[RankLoad]) -> StageParts {
        const GEMM: usize = OpLevelTimer::kind("gemm");
        const ATTENTION: usize = OpLevelTimer::kind("attention");
        let mut worst = (0.0, [0.0; STAGE_PARTS]);
        let mut all_tokens = 0u64;
        for r in ranks {
            if r.is_empty() {
                continue;
            }
            let t = r.new_tokens();
            all_tokens += t;
            let seqs = u64::from(r.decode_requests) + r.prefill.len() as u64;
            let graph = self.s.graphs.captures(t, !r.prefill.is_empty());
            let (dense, _, kinds) = self.dense_part(t, graph);
            let (ctx, gen) = self.attention_part(r);
            let head = self.head_part(seqs).0 / f64::from(self.s.parallelism.pipeline.max(1));
            let mut parts = [0.0; STAGE_PARTS];
            parts[..OP_KINDS.len()].copy_from_slice(&kinds);
            parts[GEMM] += head;
            parts[ATTENTION] += ctx + gen;
            let mut s = dense + head + ctx + gen;
            #[allow(clippy::float_cmp)] // 1.0 exactly means "no scaling", as in `stage_seconds`.
            if !r.prefill.is_empty() && self.s.constants.prefill_scale != 1.0 {
                let d = u64::from(r.decode_requests);
                let decode_only = if d > 0 { self.dense_part(d, graph).0 } else { 0.0 };
                let share = (self.s.constants.prefill_scale - 1.0) * ((dense - decode_only).max(0.0) + ctx);
                parts[PREFILL_SCALE_PART] = share;
                s += share;
            }
            if s > worst.0 {
                worst = (s, parts);
            }
        }
        let mut parts = worst.1;
        if all_tokens > 0 {
            let extend = self.moe_memo(ranks) == 4;
            let (_, _, moe) = self.moe_part(all_tokens, extend);
            for (p, m) in parts.iter_mut().zip(moe) {
                *p += m;
            }
        }
        parts
    }
}

/// Parts of a pipeline stage's step: [`OP_KINDS`], then the prefill share the calibration
/// adds beyond the tables.
const STAGE_PARTS: usize = OP_KINDS.len() + 1;
const PREFILL_SCALE_PART: usize = OP_KINDS.len();
type StageParts = [f64; STAGE_PARTS];

/// Generation attention seconds of one rank's decode batch `r` over the stage's `layers`,
/// each kind of layer timed by `attention(kind, mean KV length)` (0: full, 1: sliding
/// window) and counted into `prov`. Inlined into both callers: a decode run calls it once per
/// step.
#[inline(always)]
#[allow(clippy::cast_precision_loss)] // KV token sums are far below 2^52.
fn generation_secs(
    r: &RankLoad,
    layers: &AttentionLayers,
    prov: &mut Provenance,
    mut attention: impl FnMut(usize, f64) -> (f64, Source),
) -> f64 {
    let mut secs = 0.0;
    if r.decode_requests == 0 {
        return secs;
    }
    let AttentionLayers { full_layers, sliding_layers, window, cap } = *layers;
    let mean = r.decode_kv_tokens as f64 / f64::from(r.decode_requests);
    if full_layers > 0.0 {
        let (s, src) = attention(0, mean.min(cap));
        prov.count(src);
        secs += s * full_layers;
    }
    if let Some((w, _)) = window.filter(|_| sliding_layers > 0.0) {
        let (s, src) = attention(1, mean.min(w as f64));
        prov.count(src);
        secs += s * sliding_layers;
    }
    secs
}

#[cfg(test)]
mod tests;
