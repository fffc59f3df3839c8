//! Engine schedulers: which requests run in the next forward step, and with how many tokens.
//!
//! Each backend's policy is a separate module with one entry point, `schedule`, that fills a
//! [`RankPlan`] for one attention-DP rank. Policies read and change the rank's queues and KV
//! pool only through the helpers in [`kvops`], which keep the cache's invariants.
//! Dispatch is a `match` on [`Backend`]: exhaustive, static, no registry.

pub mod kvops;
pub mod vllm;

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::kv::{BlockId, BlockPool};
use crate::request::{ReqId, Request};

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

/// Scheduler knobs of one worker role (REF §1.2 defaults are applied by the scenario layer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Engine semantics.
    pub backend: Backend,
    /// Token budget per step and rank (`max_num_batched_tokens`).
    pub max_batched_tokens: u32,
    /// Running requests per rank (`max_num_seqs`).
    pub max_sequences: u32,
    /// Whether long prompts are split across steps.
    pub chunked_prefill: bool,
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
}

impl RankPlan {
    /// Empties the plan, keeping its allocation.
    pub fn clear(&mut self) {
        self.items.clear();
        self.preemptions = 0;
    }
}

/// One attention-DP rank: its queues and its share of KV cache.
#[derive(Clone, Debug)]
pub struct Rank {
    /// Requests not holding KV, in service order.
    pub waiting: VecDeque<ReqId>,
    /// Requests holding KV, in priority order (last is preempted first).
    pub running: Vec<ReqId>,
    /// KV cache of this rank.
    pub kv: BlockPool,
    /// Scratch buffer for prefix lookups.
    pub(crate) scratch: Vec<BlockId>,
}

impl Rank {
    /// An idle rank with the given KV pool.
    #[must_use]
    pub fn new(kv: BlockPool) -> Self {
        Rank { waiting: VecDeque::new(), running: Vec::new(), kv, scratch: Vec::new() }
    }

    /// Requests queued or running here.
    #[must_use]
    pub fn load(&self) -> usize {
        self.waiting.len() + self.running.len()
    }
}

/// Forms the next step's plan for one rank under `cfg`'s engine semantics.
pub fn schedule(cfg: &SchedulerConfig, rank: &mut Rank, reqs: &mut [Request], plan: &mut RankPlan) {
    plan.clear();
    match cfg.backend {
        // SGLang and TensorRT-LLM get their own policies with the simulation-core issue;
        // until then the scenario layer refuses them, so this arm is never reached in a run.
        Backend::Vllm | Backend::Sglang | Backend::TrtLlm => vllm::schedule(cfg, rank, reqs, plan),
    }
}
