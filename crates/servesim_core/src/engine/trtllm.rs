//! The TensorRT-LLM scheduler: `GUARANTEED_NO_EVICT` capacity scheduling with the
//! micro-batch scheduler's `max_batch_size` / `max_num_tokens` limits.
//!
//! - A request is admitted only if the blocks it needs to run to completion,
//!   `ceil((prompt + max_output) / block) − cached`, fit after every running request's
//!   remaining to-completion blocks are reserved. Nothing is ever preempted.
//! - Each step: running requests first (one decode token, or the next context chunk), then
//!   admissions in FCFS order while `max_batch_size` and the token budget allow; context is
//!   chunked to the budget (chunked context on by default here, as AISimulate assumes).
//! - KV-cache block reuse (`enable_block_reuse`) is block-granular like vLLM's.
//! - Partial block reuse (TensorRT-LLM's default) is not modelled.

use crate::engine::kvops;
use crate::engine::{KvStore, Planned, Rank, RankPlan, SchedulerConfig};
use crate::request::{Request, Status};

/// Fills `plan` for one rank.
pub fn schedule(cfg: &SchedulerConfig, rank: &mut Rank, reqs: &mut [Request], plan: &mut RankPlan) {
    let Rank { waiting, running, loading, kv, scratch, .. } = rank;
    let KvStore::Paged(pool) = kv else { return };
    let mut budget = cfg.max_batched_tokens;

    for &id in running.iter() {
        if budget == 0 {
            break;
        }
        let r = &mut reqs[id as usize];
        let n = r.pending_tokens().min(budget);
        // Growth was reserved at admission, so this succeeds unless the reservation was
        // undercut (then the request simply waits a step rather than evicting anyone).
        if n == 0 || !kvops::try_grow(pool, r, r.computed + n) {
            continue;
        }
        plan.items.push(Planned {
            req: id,
            new_tokens: n,
            context_tokens: r.computed,
            decode: r.is_decoding(),
        });
        budget -= n;
    }

    // Blocks running requests may still need to finish.
    let mut reserved: u64 = running
        .iter()
        .chain(loading.iter())
        .map(|id| {
            let r = &reqs[*id as usize];
            pool.blocks_for(u64::from(r.max_tokens())).saturating_sub(r.blocks.len() as u64)
        })
        .sum();
    while budget > 0 && (running.len() as u64) < u64::from(cfg.max_sequences) {
        let Some(&id) = waiting.front() else { break };
        let r = &mut reqs[id as usize];
        let probe = kvops::probe(pool, r, scratch);
        let hit_blocks = u64::from(probe.hit_tokens / pool.block_size());
        let to_completion = pool.blocks_for(u64::from(r.max_tokens())).saturating_sub(hit_blocks)
            + u64::from(probe.free_hits);
        if to_completion + reserved > u64::from(pool.num_free()) {
            break;
        }
        let remaining = r.known_tokens() - probe.hit_tokens;
        if !cfg.chunked_prefill && remaining > budget {
            break;
        }
        let n = remaining.min(budget);
        kvops::admit(pool, r, probe, n, scratch);
        reserved += pool.blocks_for(u64::from(r.max_tokens())).saturating_sub(r.blocks.len() as u64);
        r.status = Status::Running;
        waiting.pop_front();
        running.push(id);
        plan.items.push(Planned { req: id, new_tokens: n, context_tokens: r.computed, decode: false });
        budget -= n;
    }
}
