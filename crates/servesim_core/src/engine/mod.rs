//! Engine schedulers: which requests run in the next forward step, and with how many tokens.
//!
//! Each backend's policy is a separate module with one entry point, `schedule`, that fills a
//! [`RankPlan`] for one attention-DP rank. Policies read and change the rank's queues and KV
//! pool only through the helpers in [`kvops`], which keep the cache's invariants.
//! Dispatch is a `match` on [`Backend`]: exhaustive, static, no registry.

pub mod kvops;
pub mod sglang;
pub mod trtllm;
pub mod vllm;

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::kv::{BlockId, BlockPool};
use crate::radix::RadixCache;
use crate::request::{ReqId, ReqSeq, Request};

/// The serving engine whose scheduler semantics apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// vLLM (v1 scheduler).
    Vllm,
    /// SGLang.
    Sglang,
    /// TensorRT-LLM.
    TrtLlm,
}

impl Backend {
    /// Every backend by its config name (`engine.backend`).
    pub const NAMES: [&'static str; 3] = ["vllm", "sglang", "trtllm"];

    /// The config name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Vllm => "vllm",
            Backend::Sglang => "sglang",
            Backend::TrtLlm => "trtllm",
        }
    }

    /// The backend of a config name, if it is one.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        [Backend::Vllm, Backend::Sglang, Backend::TrtLlm].into_iter().find(|b| b.name() == name)
    }
}

/// SGLang's waiting-queue order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SglangPolicy {
    /// First come, first served.
    Fifo,
    /// Longest cached prefix first (FIFO when more than 128 wait).
    Lpm,
}

/// SGLang scheduler knobs (defaults: SGLang's server arguments and global config).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SglangKnobs {
    /// `schedule_policy` (fcfs).
    pub policy: SglangPolicy,
    /// `max_prefill_tokens` (16384): new tokens of one prefill batch.
    pub max_prefill_tokens: u32,
    /// `chunked_prefill_size` (8192) per rank; longer prompts are split.
    pub chunked_prefill_size: u32,
    /// `CLIP_MAX_NEW_TOKENS` (4096): cap on the output reserve per request.
    pub clip_max_new_tokens: u32,
    /// `init_new_token_ratio` (0.7) × `schedule_conservativeness` (1.0).
    pub init_new_token_ratio: f64,
    /// `min_new_token_ratio_factor` (0.14).
    pub min_new_token_ratio_factor: f64,
    /// `new_token_ratio_decay_steps` (600).
    pub new_token_ratio_decay_steps: f64,
    /// `retract_decode_steps` (20): headroom (tokens per request) a retraction restores.
    pub retract_decode_steps: u32,
    /// `prefill_decode_interval` (0): decode rounds forced after each prefill batch.
    pub prefill_decode_interval: u32,
    /// `scheduler_recv_interval` (1): new requests are taken in every N decode steps.
    pub recv_interval: u32,
    /// `enable_mixed_chunk` (false): a prefill batch also carries a decode token for every
    /// running request (`ForwardMode.MIXED`); SGLang turns it off without chunked prefill or
    /// with speculative decoding.
    pub mixed_chunk: bool,
    /// `SGLANG_NUM_RESERVED_DECODE_TOKENS` (512): a disaggregated decode rank admits a
    /// handed-off prompt only while its KV leaves this many tokens of headroom for every
    /// request it holds and for the new one (`DecodePreallocQueue`).
    pub decode_reserved_tokens: u32,
}

impl Default for SglangKnobs {
    fn default() -> Self {
        SglangKnobs {
            policy: SglangPolicy::Fifo,
            max_prefill_tokens: 16_384,
            chunked_prefill_size: 8192,
            clip_max_new_tokens: 4096,
            init_new_token_ratio: 0.7,
            min_new_token_ratio_factor: 0.14,
            new_token_ratio_decay_steps: 600.0,
            retract_decode_steps: 20,
            prefill_decode_interval: 0,
            recv_interval: 1,
            mixed_chunk: false,
            decode_reserved_tokens: 512,
        }
    }
}

/// Scheduler knobs of one worker role (REF §1.2 defaults are applied by the scenario layer).
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Engine semantics.
    pub backend: Backend,
    /// Token budget per step and rank (`max_num_batched_tokens`; TRT-LLM `max_num_tokens`).
    pub max_batched_tokens: u32,
    /// Running requests per rank (`max_num_seqs`; TRT-LLM `max_batch_size`).
    pub max_sequences: u32,
    /// Whether long prompts are split across steps.
    pub chunked_prefill: bool,
    /// vLLM with attention DP: new prompts are admitted only every N-th step (1 = always).
    pub prefill_schedule_interval: u32,
    /// SGLang-only knobs.
    pub sglang: SglangKnobs,
    /// TensorRT-LLM batch waiting (off by default).
    pub batch_wait: BatchWait,
    /// TensorRT-LLM's attention-DP balance across the worker's ranks (off: `None`).
    pub adp_balance: Option<AdpBalance>,
    /// The serving processes' host work in front of this replica.
    pub frontend: crate::frontend::FrontendSpec,
    /// The engine plans each step while the one before it runs (vLLM's async scheduling,
    /// TensorRT-LLM's and SGLang's overlap schedulers), so a request that arrives during a
    /// step joins the step after next ([`crate::worker::Worker::enqueue`]).
    pub plan_ahead: bool,
    /// Speculative decoding (off by default).
    pub speculation: Speculation,
}

/// Most draft tokens one decode round verifies: AISimulate's bound on `nextn` and on
/// `speculation.num_speculative_tokens` (REF §1.2).
pub const MAX_DRAFT_TOKENS: usize = 5;

/// Speculative decoding (REF §5.6). Each decode round runs one target pass over the pending
/// token and `draft_tokens` proposed ones; the drafts are accepted in order until the first
/// rejection, and the round emits the accepted drafts and the token the target samples after
/// them. KV is held for the drafts while they are verified (vLLM's lookahead slots; SGLang
/// frees the rejected ones after the pass).
///
/// Acceptance is drawn per request and round from a counter-based hash of the seed, the
/// request and its output position, so a round's outcome does not depend on what else ran,
/// and native and WebAssembly runs agree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speculation {
    /// Draft tokens verified per decode round (0: off).
    pub draft_tokens: u32,
    /// `accept[i]`: probability that draft `i` is accepted given that every draft before it was.
    pub accept: [f64; MAX_DRAFT_TOKENS],
    /// Key of the acceptance draws (derived from a seed).
    pub key: u64,
}

impl Default for Speculation {
    fn default() -> Self {
        Speculation { draft_tokens: 0, accept: [0.0; MAX_DRAFT_TOKENS], key: 0 }
    }
}

impl Speculation {
    /// Per-position conditional acceptance rates (vLLM's n-gram proposer in AISimulate:
    /// `acceptance_rates`); at most [`MAX_DRAFT_TOKENS`] are used, each clamped to [0, 1].
    #[must_use]
    pub fn conditional(rates: &[f64], key: u64) -> Self {
        let mut accept = [0.0; MAX_DRAFT_TOKENS];
        let n = rates.len().min(MAX_DRAFT_TOKENS);
        for (a, r) in accept.iter_mut().zip(rates) {
            *a = r.clamp(0.0, 1.0);
        }
        #[allow(clippy::cast_possible_truncation)] // At most MAX_DRAFT_TOKENS.
        Speculation { draft_tokens: n as u32, accept, key }
    }

    /// MTP or EAGLE with `nextn` drafts and `mean_accepted` accepted per round (AISimulate's
    /// `nextn_accepted`): the integer part is always accepted and the fractional part is the
    /// probability of one more (2.2 accepts 2 or 3 drafts, emitting 3 or 4 tokens).
    #[must_use]
    pub fn mean_accepted(nextn: u32, mean_accepted: f64, key: u64) -> Self {
        let n = (nextn as usize).min(MAX_DRAFT_TOKENS);
        let m = mean_accepted.clamp(0.0, n as f64);
        let whole = libm::floor(m);
        let mut rates = [0.0; MAX_DRAFT_TOKENS];
        for (i, r) in rates.iter_mut().enumerate().take(n) {
            #[allow(clippy::cast_precision_loss)] // i < 5.
            let i = i as f64;
            *r = if i < whole {
                1.0
            } else if i < whole + 1.0 {
                m - whole
            } else {
                0.0
            };
        }
        Self::conditional(&rates[..n], key)
    }

    /// True when decode rounds verify drafts.
    #[must_use]
    pub fn is_on(&self) -> bool {
        self.draft_tokens > 0
    }

    /// Expected tokens a round emits when the output is not about to end:
    /// 1 + a₁ + a₁a₂ + … (e.g. rates 0.8, 0.6, 0.4 give 2.472).
    #[must_use]
    pub fn expected_tokens(&self) -> f64 {
        let mut p = 1.0;
        let mut sum = 1.0;
        for a in &self.accept[..self.draft_tokens as usize] {
            p *= a;
            sum += p;
        }
        sum
    }

    /// Drafts accepted in request `seq`'s round that follows output token `emitted`.
    #[must_use]
    pub fn accepted(&self, seq: ReqSeq, emitted: u32) -> u32 {
        /// 2^-53: maps the top 53 bits of a hash to [0, 1).
        const UNIT: f64 = 1.0 / (1u64 << 53) as f64;
        let base = crate::rng::mix2(self.key, u64::from(seq));
        for i in 0..self.draft_tokens {
            let h = crate::rng::mix2(base, u64::from(emitted) << 3 | u64::from(i));
            #[allow(clippy::cast_precision_loss)] // 53 bits are exact in an f64.
            let u = (h >> 11) as f64 * UNIT;
            if u >= self.accept[i as usize] {
                return i;
            }
        }
        self.draft_tokens
    }

    /// Draft tokens a decode step of `r` holds KV for: all of them, except where the output
    /// ends sooner (a draft past the last output token would never be kept).
    #[must_use]
    pub fn lookahead(&self, r: &Request) -> u32 {
        if !r.is_decoding() {
            return 0;
        }
        self.draft_tokens.min(r.max_tokens().saturating_sub(r.computed + 1))
    }
}

/// TensorRT-LLM's batch waiting (`batch_wait_timeout_iters`, `batch_wait_max_tokens_ratio`;
/// both 0, off, by default): while decodes are running, context requests are held back until
/// the step's tokens reach `max_tokens_ratio × max_num_tokens` or they have been held
/// `timeout_iters` steps, so prompts are prefilled in fewer, larger batches. TensorRT-LLM
/// ignores it under attention data parallelism.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchWait {
    /// `batch_wait_timeout_iters`: the most steps context is held (0 never holds it).
    pub timeout_iters: u32,
    /// `batch_wait_max_tokens_ratio`: the share of the token budget that releases it.
    pub max_tokens_ratio: f64,
}

/// TensorRT-LLM's attention-DP balance (`attention_dp_config: {enable_balance: true,
/// timeout_iters, batching_wait_iters}`; `PyExecutor._balance_adp_requests`, described in
/// its "ADP Balance Strategy" tech blog). With every rank's step decided together, a step's
/// context requests are held back on all ranks until every rank has context to run (or
/// `timeout_iters` steps have passed, or some rank has nothing to decode), so that prompts
/// are prefilled on all ranks in the same step instead of one rank's prefill stalling the
/// others' decodes step after step; once every rank has context and decodes, it waits
/// `batching_wait_iters` more steps for larger context batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdpBalance {
    /// `timeout_iters`: the most steps context waits for every rank to have some.
    pub timeout_iters: u32,
    /// `batching_wait_iters`: further steps it waits, once every rank has some, to batch more.
    pub batching_wait_iters: u32,
}

impl Default for AdpBalance {
    /// TensorRT-LLM's `AttentionDpConfig` defaults (`llmapi/llm_args.py`): 50 and 10.
    fn default() -> Self {
        AdpBalance { timeout_iters: 50, batching_wait_iters: 10 }
    }
}

/// The counters [`AdpBalance`] keeps between steps (one per worker: every rank computes the
/// same decision from the same all-gathered counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdpBalanceState {
    /// Consecutive steps context has waited for every rank to have some.
    pub waiting_iters: u32,
    /// Consecutive steps context has waited to batch more.
    pub batching_iters: u32,
}

/// One request's share of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    /// The request.
    pub req: ReqId,
    /// Tokens computed in this step.
    pub new_tokens: u32,
    /// Tokens already in KV before the step.
    pub context_tokens: u32,
    /// True for a decode (one token on top of its context after the first output).
    pub decode: bool,
}

/// What one rank runs in a step.
#[derive(Clone, Debug, Default)]
pub struct RankPlan {
    /// Scheduled requests in order.
    pub items: Vec<Planned>,
    /// Requests preempted while forming this plan.
    pub preemptions: u32,
    /// Restores from the host tier started while forming this plan, with when each ends; for
    /// SGLang's HiCache, requests passed over while their storage prefetch runs, with when it
    /// may stop (the worker is woken then to plan again).
    pub restores: Vec<(ReqId, crate::units::SimTime)>,
    /// When the host-tier copies this step waits for end (TensorRT-LLM's `syncTransfers`
    /// before the forward pass); [`crate::units::SimTime::ZERO`] when it waits for none.
    pub copies_end: crate::units::SimTime,
    /// When the host-tier loads this step's forward pass overlaps end (SGLang's HiCache
    /// loads a layer's KV while earlier layers compute): the step ends no earlier.
    /// [`crate::units::SimTime::ZERO`] when it loads nothing.
    pub loads_end: crate::units::SimTime,
}

impl RankPlan {
    /// Empties the plan, keeping its allocation.
    pub fn clear(&mut self) {
        self.items.clear();
        self.preemptions = 0;
        self.restores.clear();
        self.copies_end = crate::units::SimTime::ZERO;
        self.loads_end = crate::units::SimTime::ZERO;
    }
}

/// A rank's KV cache: paged blocks with a hash-chain prefix index (vLLM, TensorRT-LLM) or a
/// token-granular radix tree (SGLang).
#[derive(Clone, Debug)]
pub enum KvStore {
    /// Paged blocks.
    Paged(BlockPool),
    /// Radix tree, one token per slot.
    Radix(RadixCache),
}

impl KvStore {
    /// Tokens per allocation unit (1 for the radix tree).
    #[must_use]
    pub fn block_size(&self) -> u32 {
        match self {
            KvStore::Paged(p) => p.block_size(),
            KvStore::Radix(_) => 1,
        }
    }

    /// Tokens one sequence can hold: the whole pool, less a hybrid model's state blocks.
    #[must_use]
    pub fn capacity_tokens(&self) -> u64 {
        match self {
            KvStore::Paged(p) => {
                u64::from(p.capacity().saturating_sub(p.state_blocks())) * u64::from(p.block_size())
            }
            KvStore::Radix(r) => r.capacity(),
        }
    }

    /// Allocation units in use (blocks, or tokens for the radix tree).
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // Radix capacities are token counts below 2^32.
    pub fn used_units(&self) -> u32 {
        match self {
            KvStore::Paged(p) => p.num_used(),
            KvStore::Radix(r) => r.used_tokens().min(u64::from(u32::MAX)) as u32,
        }
    }

    /// Cached tokens dropped to make room so far (whole blocks for a paged pool).
    #[must_use]
    pub fn evicted_tokens(&self) -> u64 {
        match self {
            KvStore::Paged(p) => p.stats().evictions * u64::from(p.block_size()),
            KvStore::Radix(r) => r.evicted_tokens(),
        }
    }

    /// A hybrid model's kept recurrent states dropped to free a state slot so far (a radix
    /// cache's; a paged pool keeps states in its blocks and counts them as evictions).
    #[must_use]
    pub fn dropped_states(&self) -> u64 {
        match self {
            KvStore::Paged(_) => 0,
            KvStore::Radix(r) => r.dropped_states(),
        }
    }

    /// The forecast a paged pool evicts by (Belady), if it does.
    #[must_use]
    pub fn eviction_oracle(&self) -> Option<&crate::kv::belady::SharedOracle> {
        match self {
            KvStore::Paged(p) => p.eviction_oracle(),
            KvStore::Radix(_) => None,
        }
    }

    /// Whether reuse across requests is on.
    #[must_use]
    pub fn prefix_caching(&self) -> bool {
        match self {
            KvStore::Paged(p) => p.prefix_caching(),
            KvStore::Radix(r) => r.enabled(),
        }
    }

    /// Leading tokens of the request's known content cached here now (no side effects; the
    /// request's known blocks must be hashed already).
    #[must_use]
    pub fn cached_prefix_tokens(&self, req: &Request) -> u32 {
        match self {
            KvStore::Paged(p) => {
                if !p.prefix_caching() {
                    return 0;
                }
                #[allow(clippy::cast_possible_truncation)] // Bounded by the prompt length.
                let t = (p.match_len(&req.hashes) as u32).saturating_mul(p.block_size());
                t.min(req.known_tokens())
            }
            KvStore::Radix(r) => r.peek(&req.pieces(req.known_tokens()), req.known_tokens()),
        }
    }
}

/// Per-rank state a policy keeps between steps.
#[derive(Clone, Debug, Default)]
pub struct PolicyState {
    /// SGLang: current new-token ratio (0 until first used).
    pub new_token_ratio: f64,
    /// SGLang: decode rounds still forced before the next prefill batch.
    pub decode_rounds_left: u32,
    /// Steps planned so far (vLLM's prefill schedule interval).
    pub steps: u64,
    /// TensorRT-LLM: consecutive steps context has been held back by batch waiting.
    pub batch_wait_iters: u32,
}

/// One attention-DP rank: its queues and its share of KV cache.
#[derive(Clone, Debug)]
pub struct Rank {
    /// Requests not holding KV, in service order.
    pub waiting: VecDeque<ReqId>,
    /// Requests holding KV, in priority order (last is preempted first).
    pub running: Vec<ReqId>,
    /// P/D decode side: requests waiting for a KV reservation, in arrival order.
    pub handoffs: VecDeque<ReqId>,
    /// P/D decode side: requests with KV reserved while their KV arrives.
    pub loading: Vec<ReqId>,
    /// Requests holding GPU blocks while their prefix is restored from the host tier, with the
    /// first block restored and how many.
    pub restoring: Vec<(ReqId, u32, u32)>,
    /// KV cache of this rank.
    pub kv: KvStore,
    /// The rank's host-memory KV tier (G2), when it has one (boxed: most ranks have none, and
    /// a rank's hot fields stay together).
    pub host: Option<alloc::boxed::Box<crate::host::HostTier>>,
    /// Policy state.
    pub state: PolicyState,
    /// Scratch buffer for prefix lookups.
    pub(crate) scratch: Vec<BlockId>,
}

impl Rank {
    /// An idle rank with the given KV store.
    #[must_use]
    pub fn new(kv: KvStore) -> Self {
        Rank {
            waiting: VecDeque::new(),
            running: Vec::new(),
            handoffs: VecDeque::new(),
            loading: Vec::new(),
            restoring: Vec::new(),
            kv,
            host: None,
            state: PolicyState::default(),
            scratch: Vec::new(),
        }
    }

    /// Requests queued, running, being handed to this rank or restoring their prefix from its
    /// host tier.
    #[must_use]
    pub fn load(&self) -> usize {
        self.waiting.len()
            + self.running.len()
            + self.handoffs.len()
            + self.loading.len()
            + self.restoring.len()
    }
}

/// Ends the host-tier restore of request `id` on its rank: its restored blocks are computed
/// and enter the prefix cache, and it goes back to the front of the waiting queue (vLLM
/// prepends the requests it skipped while their KV loaded) to compute the rest of its prompt.
pub fn finish_restore(rank: &mut Rank, req: &mut Request, id: ReqId) {
    let Some(i) = rank.restoring.iter().position(|x| x.0 == id) else { return };
    let (_, from, blocks) = rank.restoring.swap_remove(i);
    let (Some(host), KvStore::Paged(pool)) = (rank.host.as_deref_mut(), &mut rank.kv) else { return };
    let to = (from as usize + blocks as usize).min(req.hashes.len());
    host.end_restore(&req.hashes[(from as usize).min(to)..to]);
    req.computed += blocks * pool.block_size();
    // The restored blocks are in host memory already: registering them offers nothing new.
    kvops::register_full_blocks(pool, req);
    rank.waiting.push_front(id);
}

/// Registers a paged rank's newly full blocks of `req` in its prefix index and offers them
/// to its host tier, if it has one that is written after compute, as filled by the step that
/// ended at `at`.
pub fn register_and_offer(rank: &mut Rank, req: &mut Request, at: crate::units::SimTime) {
    let KvStore::Paged(pool) = &mut rank.kv else { return };
    let from = req.registered_blocks;
    kvops::register_full_blocks(pool, req);
    kvops::checkpoint_state(pool, req);
    if let Some(host) = rank.host.as_deref_mut() {
        if host.spec().writes == crate::host::HostWrites::AfterCompute {
            offer_blocks(host, req, from, at);
        }
    }
}

/// Offers a host tier `req`'s registered blocks from block `from` on, filled (or, for prefix
/// hits, found) at `at`.
// Out of line: inlined into a step's loop over its requests, its loop cost that loop's
// registers on ranks without a tier too.
#[inline(never)]
fn offer_blocks(host: &mut crate::host::HostTier, req: &Request, from: u32, at: crate::units::SimTime) {
    let upto = (req.registered_blocks as usize).min(req.hashes.len());
    host.offer_all(&req.hashes[(from as usize).min(upto)..upto], at);
}

/// Forms the next step's plan for one rank under `cfg`'s engine semantics.
pub fn schedule(cfg: &SchedulerConfig, rank: &mut Rank, reqs: &mut [Request], plan: &mut RankPlan) {
    plan.clear();
    match cfg.backend {
        Backend::Vllm => vllm::schedule(cfg, rank, reqs, plan),
        Backend::Sglang => sglang::schedule(cfg, rank, reqs, plan),
        Backend::TrtLlm => trtllm::schedule(cfg, rank, reqs, plan),
    }
}

/// Records that a planned chunk was computed (`req.computed` already advanced) in the step
/// that ended at `at`: new full blocks or prompt tokens become reusable.
pub fn after_compute(rank: &mut Rank, req: &mut Request, planned: &Planned, at: crate::units::SimTime) {
    match &mut rank.kv {
        KvStore::Paged(pool) => {
            // A committed prefill chunk ends the request's forecast demand (Belady).
            if !planned.decode {
                pool.retire_demand(req.seq);
            }
            register_and_offer(rank, req, at);
        }
        KvStore::Radix(cache) => {
            if !planned.decode {
                sglang::cache_computed(cache, req);
                // HiCache writes a prompt once its last chunk is in (a chunked request's
                // inserts leave the hit counts, and so the writes, alone).
                if req.pending_tokens() == 0 {
                    sglang::write_through(rank.host.as_deref_mut(), cache, req, at);
                }
            }
        }
    }
}

/// Reserves KV on a decode rank for a handed-off request's prompt, reusing what this rank
/// already caches. Returns the cached prompt tokens (not transferred), or `None` when the
/// rank cannot hold it now (nothing changes then). TensorRT-LLM keeps its no-evict rule:
/// the request's KV to completion must fit after every admitted request's; SGLang keeps
/// [`SglangKnobs::decode_reserved_tokens`] free for each request the rank holds.
pub fn reserve_destination(
    cfg: &SchedulerConfig,
    rank: &mut Rank,
    reqs: &mut [Request],
    id: ReqId,
) -> Option<u32> {
    let active = (rank.running.len() + rank.loading.len()) as u64;
    if active >= u64::from(cfg.max_sequences) {
        return None;
    }
    let input = reqs[id as usize].input_tokens;
    match &mut rank.kv {
        KvStore::Paged(pool) => {
            let probe = kvops::probe(pool, &mut reqs[id as usize], &mut rank.scratch);
            let n = input - probe.hit_tokens;
            let mut need = kvops::admission_cost(pool, probe, n);
            if cfg.backend == Backend::TrtLlm {
                let reserved: u64 = rank
                    .running
                    .iter()
                    .chain(&rank.loading)
                    .map(|q| {
                        let r = &reqs[*q as usize];
                        pool.blocks_for(u64::from(r.max_tokens())).saturating_sub(r.blocks.len() as u64)
                    })
                    .sum();
                let r = &reqs[id as usize];
                let hit_blocks = u64::from(probe.hit_tokens / pool.block_size());
                need = pool.blocks_for(u64::from(r.max_tokens())).saturating_sub(hit_blocks)
                    + u64::from(probe.free_hits)
                    + reserved;
            }
            if need > u64::from(pool.num_free()) {
                return None;
            }
            kvops::reserve(pool, &mut reqs[id as usize], probe, n, &rank.scratch);
            Some(probe.hit_tokens)
        }
        KvStore::Radix(cache) => {
            let r = &mut reqs[id as usize];
            let key = r.pieces(input);
            let (matched, node) = cache.match_prefix(&key, input.saturating_sub(1));
            cache.lock(node);
            // SGLang's decode rank keeps headroom for the decode tokens of every request it
            // holds and of this one.
            let held = active + rank.waiting.len() as u64 + 1;
            let headroom = u64::from(cfg.sglang.decode_reserved_tokens) * held;
            let n = u64::from(input - matched);
            let running_after = u32::try_from(active + 1).unwrap_or(u32::MAX);
            if cache.available_tokens() < n + headroom
                || !cache.make_state_room(running_after)
                || !cache.alloc(n)
            {
                cache.unlock(node);
                return None;
            }
            r.radix_node = node;
            r.radix_tokens = matched;
            r.private_tokens = input - matched;
            r.computed = matched;
            Some(matched)
        }
    }
}

/// Makes a request whose KV arrived schedulable on its decode rank. vLLM recomputes the last
/// prompt token there to sample the first output token; SGLang and TensorRT-LLM receive the
/// first token with the KV, so it is emitted now. Returns true when that token was the
/// request's last (it finished).
pub fn activate(
    cfg: &SchedulerConfig,
    rank: &mut Rank,
    reqs: &mut [Request],
    id: ReqId,
    now: crate::units::SimTime,
) -> bool {
    rank.loading.retain(|x| *x != id);
    let r = &mut reqs[id as usize];
    r.phase = crate::request::Phase::Decode;
    match cfg.backend {
        Backend::Vllm => {
            r.computed = r.input_tokens - 1;
            if let KvStore::Paged(pool) = &mut rank.kv {
                kvops::register_full_blocks(pool, r);
            }
            r.status = crate::request::Status::Waiting;
            rank.waiting.push_front(id);
            false
        }
        Backend::Sglang | Backend::TrtLlm => {
            r.computed = r.input_tokens;
            if let KvStore::Paged(pool) = &mut rank.kv {
                kvops::register_full_blocks(pool, r);
            }
            if r.emit_token(now) {
                r.status = crate::request::Status::Completed;
                release(rank, r, now);
                return true;
            }
            r.status = crate::request::Status::Running;
            rank.running.push(id);
            false
        }
    }
}

/// Releases the source-side KV of a handed-off request on its prefill rank at `now`, when
/// its transfer ended (a HiCache host tier there copies what it lacks from then on).
pub fn release_source(rank: &mut Rank, req: &mut Request, now: crate::units::SimTime) {
    let mut hold = core::mem::take(&mut req.source);
    req.swap_kv(&mut hold);
    release(rank, req, now);
    req.swap_kv(&mut hold);
}

/// Releases everything a request that finished at `at` holds (its KV stays cached where the
/// engine caches it, HiCache's host memory included).
pub fn release(rank: &mut Rank, req: &mut Request, at: crate::units::SimTime) {
    match &mut rank.kv {
        KvStore::Paged(pool) => kvops::free_all(pool, req),
        KvStore::Radix(cache) => {
            sglang::write_through(rank.host.as_deref_mut(), cache, req, at);
            sglang::release(cache, req, true);
        }
    }
}

/// A scheduler configuration for unit tests: 8,192 tokens and 16 sequences a step, chunked
/// prefill, everything else off.
#[cfg(test)]
pub(crate) fn test_config(backend: Backend) -> SchedulerConfig {
    SchedulerConfig {
        backend,
        max_batched_tokens: 8192,
        max_sequences: 16,
        chunked_prefill: true,
        prefill_schedule_interval: 1,
        sglang: SglangKnobs::default(),
        batch_wait: BatchWait::default(),
        adp_balance: None,
        frontend: crate::frontend::FrontendSpec::default(),
        plan_ahead: false,
        speculation: Speculation::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::{Backend, Speculation};

    #[test]
    fn backends_round_trip_their_config_names() {
        for name in Backend::NAMES {
            assert_eq!(Backend::from_name(name).map(Backend::name), Some(name));
        }
        assert_eq!(Backend::from_name("tgi"), None);
    }

    /// Accepted-draft counts over many rounds, as a histogram by count.
    fn histogram(s: &Speculation) -> [u32; 6] {
        let mut h = [0u32; 6];
        for req in 0..200u32 {
            for emitted in 1..=500u32 {
                h[s.accepted(req, emitted) as usize] += 1;
            }
        }
        h
    }

    #[test]
    #[allow(clippy::cast_precision_loss)]
    fn conditional_rates_give_the_reference_expected_tokens() {
        // REF §5.6: rates 0.8, 0.6, 0.4 give 1 + 0.8 + 0.48 + 0.192 = 2.472 tokens a round.
        let s = Speculation::conditional(&[0.8, 0.6, 0.4], 42);
        assert!((s.expected_tokens() - 2.472).abs() < 1e-12);
        let h = histogram(&s);
        let rounds = f64::from(h.iter().sum::<u32>());
        let mean = h.iter().enumerate().map(|(i, n)| i as f64 * f64::from(*n)).sum::<f64>() / rounds;
        assert!((1.0 + mean - 2.472).abs() < 0.01, "{mean}");
        // P(no draft) = 0.2; P(all three) = 0.8 × 0.6 × 0.4.
        assert!((f64::from(h[0]) / rounds - 0.2).abs() < 0.005);
        assert!((f64::from(h[3]) / rounds - 0.192).abs() < 0.005);
    }

    #[test]
    fn a_mean_accepted_count_takes_its_integer_part_always_and_one_more_at_its_fraction() {
        let s = Speculation::mean_accepted(3, 2.2, 1);
        assert_eq!((s.accept[0], s.accept[1], s.draft_tokens), (1.0, 1.0, 3));
        assert!((s.accept[2] - 0.2).abs() < 1e-12);
        let h = histogram(&s);
        assert_eq!(h[0] + h[1], 0);
        let rounds = f64::from(h[2] + h[3]);
        assert!((f64::from(h[3]) / rounds - 0.2).abs() < 0.005, "{h:?}");
        assert!((s.expected_tokens() - 3.2).abs() < 1e-12);
        // Whole numbers and the bounds are exact; more than nextn is clamped.
        assert_eq!(histogram(&Speculation::mean_accepted(2, 2.0, 5))[2], 100_000);
        assert_eq!(histogram(&Speculation::mean_accepted(2, 0.0, 5))[0], 100_000);
        assert_eq!(Speculation::mean_accepted(2, 7.0, 5).expected_tokens(), 3.0);
        assert!(!Speculation::default().is_on());
    }

    #[test]
    fn draws_depend_on_the_key_request_and_round_only() {
        let a = Speculation::mean_accepted(1, 0.5, 9);
        let b = Speculation::mean_accepted(1, 0.5, 10);
        let seq = |s: &Speculation, req| (0..64).map(|e| s.accepted(req, e)).collect::<alloc::vec::Vec<_>>();
        assert_eq!(seq(&a, 3), seq(&a, 3));
        assert_ne!(seq(&a, 3), seq(&a, 4));
        assert_ne!(seq(&a, 3), seq(&b, 3));
    }
}
