//! The vLLM v1 scheduler (vllm/v1/core/sched/scheduler.py), one rank at a time.
//!
//! - One token budget per step (`max_num_batched_tokens`) shared by running and waiting work.
//! - Running requests first, in order: each gets its remaining prefill (chunked to the budget)
//!   or one decode token. If KV runs out, the lowest-priority running request (the last one)
//!   is preempted: its blocks are freed and it goes back to the front of the waiting queue to
//!   be recomputed later (cached full blocks may still serve it then).
//! - Then waiting requests in FCFS order while `max_num_seqs` and the budget allow, each
//!   starting from its longest cached prefix of full blocks. Admission is optimistic: only
//!   the blocks needed now are allocated. No admissions in a step that preempted.
//! - `prefill_schedule_interval` N > 1 (attention DP): new prompts only every N-th step.
//! - With speculative decoding a decode also takes its draft tokens' budget and KV slots.
//! - With a host tier (KV offloading), a prompt's GPU prefix hit is continued with the blocks
//!   host memory holds: the request takes GPU blocks for them and waits, outside the queue and
//!   without budget, while they are copied back (`WAITING_FOR_REMOTE_KVS`); the requests
//!   behind it are scheduled meanwhile ([`crate::host`]).

use crate::engine::kvops;
use crate::engine::{KvStore, Planned, Rank, RankPlan, SchedulerConfig};
use crate::request::{Request, Status};

/// Fills `plan` for one rank.
pub fn schedule(cfg: &SchedulerConfig, rank: &mut Rank, reqs: &mut [Request], plan: &mut RankPlan) {
    let Rank { waiting, running, kv, scratch, state, host, restoring, .. } = rank;
    let KvStore::Paged(pool) = kv else { return };
    state.steps += 1;
    let mut budget = cfg.max_batched_tokens;
    let mut preempted = false;

    let mut i = 0;
    while i < running.len() && budget > 0 {
        let id = running[i];
        let r = &reqs[id as usize];
        let n = r.pending_tokens().min(budget);
        // Draft tokens take budget and KV slots alongside the pending token (vLLM's
        // `num_lookahead_tokens`).
        let drafts = cfg.speculation.lookahead(r);
        let target = r.computed + n + drafts;
        let mut scheduled = false;
        loop {
            if kvops::try_grow(pool, &mut reqs[id as usize], target) {
                scheduled = true;
                break;
            }
            // Out of KV: preempt the lowest-priority running request and retry.
            let Some(victim) = running.pop() else { break };
            let v = &mut reqs[victim as usize];
            kvops::publish_private(pool, v);
            kvops::free_all(pool, v);
            v.status = Status::Waiting;
            v.preemptions += 1;
            waiting.push_front(victim);
            plan.preemptions += 1;
            preempted = true;
            if victim == id {
                break;
            }
        }
        if !scheduled {
            break;
        }
        let r = &reqs[id as usize];
        plan.items.push(Planned {
            req: id,
            new_tokens: n,
            context_tokens: r.computed,
            decode: r.is_decoding(),
        });
        budget -= (n + drafts).min(budget);
        i += 1;
    }

    // No admissions in a step that preempted; with a prefill schedule interval (attention
    // DP), only every N-th step admits new prompts (vLLM commit e2fa285).
    if preempted
        || (cfg.prefill_schedule_interval > 1 && state.steps % u64::from(cfg.prefill_schedule_interval) != 0)
    {
        return;
    }
    while budget > 0 && (running.len() as u64) < u64::from(cfg.max_sequences) {
        let Some(&id) = waiting.front() else { break };
        let r = &mut reqs[id as usize];
        if !r.blocks.is_empty() {
            // A P/D handoff whose KV arrived: its blocks are reserved; compute what is left
            // (the last prompt token) to sample the first output token.
            let n = r.pending_tokens().min(budget);
            if !kvops::try_grow(pool, r, r.computed + n) {
                break;
            }
            r.status = Status::Running;
            waiting.pop_front();
            running.push(id);
            plan.items.push(Planned { req: id, new_tokens: n, context_tokens: r.computed, decode: false });
            budget -= n;
            continue;
        }
        let probe = kvops::probe(pool, r, scratch);
        if let Some(host) = host.as_mut() {
            // The blocks after the GPU hit that host memory holds, short of the last token
            // (a forward pass must compute one to sample from).
            let bs = pool.block_size();
            let from = probe.hit_tokens / bs;
            let most = ((r.known_tokens().saturating_sub(1)) / bs) as usize;
            let keys = r.hashes.get(from as usize..r.hashes.len().min(most)).unwrap_or(&[]);
            #[allow(clippy::cast_possible_truncation)] // At most the prompt's blocks.
            let found = host.match_prefix(keys, host.clock()) as u32;
            if found > 0 {
                let tokens = found * bs;
                if kvops::admission_cost(pool, probe, tokens) > u64::from(pool.num_free()) {
                    break;
                }
                kvops::reserve(pool, r, probe, tokens, scratch);
                kvops::count_reuse(r, probe.hit_tokens + tokens);
                let now = host.clock();
                // vLLM stores every block of a request the tier lacks, its prefix hits too.
                for &h in &r.hashes[..from as usize] {
                    host.offer(h, now);
                }
                let keys = &r.hashes[from as usize..(from + found) as usize];
                let done = host.begin_restore(keys, now);
                waiting.pop_front();
                restoring.push((id, from, found));
                plan.restores.push((id, done));
                continue;
            }
        }
        let remaining = r.known_tokens() - probe.hit_tokens;
        if !cfg.chunked_prefill && remaining > budget {
            break;
        }
        let n = remaining.min(budget);
        if kvops::admission_cost(pool, probe, n) > u64::from(pool.num_free()) {
            break;
        }
        kvops::admit(pool, r, probe, n, scratch);
        if let Some(host) = host.as_mut() {
            let now = host.clock();
            for &h in &r.hashes[..(probe.hit_tokens / pool.block_size()) as usize] {
                host.offer(h, now);
            }
        }
        r.status = Status::Running;
        waiting.pop_front();
        running.push(id);
        plan.items.push(Planned { req: id, new_tokens: n, context_tokens: r.computed, decode: false });
        budget -= n;
    }
}
