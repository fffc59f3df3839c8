//! The TensorRT-LLM scheduler: `GUARANTEED_NO_EVICT` capacity scheduling with the
//! micro-batch scheduler's `max_batch_size` / `max_num_tokens` limits.
//!
//! - A request is admitted only if the blocks it needs to run to completion,
//!   `ceil((prompt + max_output) / block) − cached`, fit after every running request's
//!   remaining to-completion blocks are reserved. Nothing is ever preempted.
//! - Each step: running requests first (one decode token, or the next context chunk), then
//!   admissions in FCFS order while `max_batch_size` and the token budget allow; context is
//!   chunked to the budget (chunked context on by default here, as AISimulate assumes).
//! - Batch waiting (`BatchWait`, off by default): with decodes in the step, its context
//!   requests are held back (they keep their admission) until the step's tokens reach the
//!   ratio of the token budget or the timeout in steps has passed, as `PyExecutor.
//!   _waiting_requests` does; context tokens count whole prompts.
//! - KV-cache block reuse (`enable_block_reuse`) is block-granular like vLLM's.
//! - Host offloading (`host_cache_size`, a host tier written [`HostWrites::OnEviction`]): a
//!   block GPU memory evicts is copied to host memory, and an admission continues its GPU
//!   prefix hit with the blocks held there, which move back to GPU memory. The step waits for
//!   both copies before it runs (`KVCacheTransferManager::syncTransfers`).
//! - Partial block reuse (TensorRT-LLM's default) is not modelled.

use crate::engine::kvops;
use crate::engine::{
    AdpBalance, AdpBalanceState, BatchWait, KvStore, Planned, PolicyState, Rank, RankPlan, SchedulerConfig,
};
use crate::host::{HostTier, HostWrites};
use crate::kv::BlockPool;
use crate::request::{Request, Status};

/// Fills `plan` for one rank.
pub fn schedule(cfg: &SchedulerConfig, rank: &mut Rank, reqs: &mut [Request], plan: &mut RankPlan) {
    let Rank { waiting, running, loading, kv, scratch, state, host, .. } = rank;
    let KvStore::Paged(pool) = kv else { return };
    let mut host = host.as_deref_mut().filter(|h| h.spec().writes == HostWrites::OnEviction);
    if host.is_some() {
        pool.log_evictions();
    }
    let mut budget = cfg.max_batched_tokens;

    for &id in running.iter() {
        if budget == 0 {
            break;
        }
        let r = &mut reqs[id as usize];
        let n = r.pending_tokens().min(budget);
        // Draft tokens are verified in the same pass and count against `max_num_tokens`;
        // they never reach past the request's reserved output.
        let drafts = cfg.speculation.lookahead(r);
        // Growth was reserved at admission, so this succeeds unless the reservation was
        // undercut (then the request simply waits a step rather than evicting anyone).
        if n == 0 || !kvops::try_grow(pool, r, r.computed + n + drafts) {
            continue;
        }
        plan.items.push(Planned {
            req: id,
            new_tokens: n,
            context_tokens: r.computed,
            decode: r.is_decoding(),
        });
        budget -= (n + drafts).min(budget);
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
        let onboard = host.as_deref().map_or(0, |h| onboard_len(h, pool, r, probe));
        let cached = probe.hit_tokens + onboard * pool.block_size();
        let remaining = r.known_tokens() - cached;
        if !cfg.chunked_prefill && remaining > budget {
            break;
        }
        let n = remaining.min(budget);
        match host.as_deref_mut() {
            Some(h) if onboard > 0 => {
                let from = (probe.hit_tokens / pool.block_size()) as usize;
                h.onboard(&r.hashes[from..from + onboard as usize], h.clock());
                kvops::reserve(pool, r, probe, onboard * pool.block_size() + n, scratch);
                kvops::count_reuse_from_tiers(r, cached, onboard * pool.block_size());
                r.computed = cached;
                kvops::register_full_blocks(pool, r);
            }
            _ => kvops::admit(pool, r, probe, n, scratch),
        }
        reserved += pool.blocks_for(u64::from(r.max_tokens())).saturating_sub(r.blocks.len() as u64);
        r.status = Status::Running;
        waiting.pop_front();
        running.push(id);
        plan.items.push(Planned { req: id, new_tokens: n, context_tokens: r.computed, decode: false });
        budget -= n;
    }
    if let Some(h) = host {
        offload_evicted(h, pool);
        plan.copies_end = h.copies_end();
    }
    hold_context(cfg.batch_wait, cfg.max_batched_tokens, state, reqs, plan);
}

/// How many blocks past the GPU hit `probe` the host tier holds for `r`, short of the last
/// prompt token (a forward pass must compute one to sample from).
fn onboard_len(host: &HostTier, pool: &BlockPool, r: &Request, probe: kvops::Probe) -> u32 {
    let bs = pool.block_size();
    let from = (probe.hit_tokens / bs) as usize;
    let most = ((r.known_tokens().saturating_sub(1)) / bs) as usize;
    let keys = r.hashes.get(from..r.hashes.len().min(most)).unwrap_or(&[]);
    #[allow(clippy::cast_possible_truncation)] // At most the prompt's blocks.
    let n = host.held_prefix(keys) as u32;
    n
}

/// Copies the blocks GPU memory evicted while this step was planned to host memory, in the
/// order they were evicted.
fn offload_evicted(host: &mut HostTier, pool: &mut BlockPool) {
    let mut evicted = alloc::vec::Vec::new();
    pool.take_evicted(&mut evicted);
    let now = host.clock();
    host.offer_all(&evicted, now);
}

/// Batch waiting: drops the plan's context items while the step also decodes, its tokens
/// (whole prompts for context, one per decode) stay under the ratio of the budget and the
/// context has been held fewer than `timeout_iters` steps.
fn hold_context(
    wait: BatchWait,
    budget: u32,
    state: &mut PolicyState,
    reqs: &[Request],
    plan: &mut RankPlan,
) {
    // Without a timeout nothing is ever held (PyExecutor stops waiting once iters >= timeout).
    if wait.timeout_iters == 0 {
        return;
    }
    let (mut context, mut decodes) = (0u64, 0u64);
    for p in &plan.items {
        if p.decode {
            decodes += 1;
        } else {
            context += u64::from(reqs[p.req as usize].known_tokens());
        }
    }
    if context == 0 || decodes == 0 {
        return;
    }
    #[allow(clippy::cast_precision_loss)] // Token counts are far below 2^52.
    let enough = (context + decodes) as f64 >= wait.max_tokens_ratio * f64::from(budget);
    if state.batch_wait_iters >= wait.timeout_iters || enough {
        state.batch_wait_iters = 0;
    } else {
        state.batch_wait_iters += 1;
        plan.items.retain(|p| p.decode);
    }
}

/// Applies [`AdpBalance`] to a step's plans for all of a worker's ranks: when the step's
/// context is held, every plan keeps only its decodes (the held requests keep their
/// admission and run in a later step). `max_sequences` is the engine's `max_batch_size`.
pub fn balance_adp(cfg: AdpBalance, state: &mut AdpBalanceState, max_sequences: u32, plans: &mut [RankPlan]) {
    let count = |p: &RankPlan| {
        let decodes = p.items.iter().filter(|i| i.decode).count();
        (p.items.len() - decodes, decodes)
    };
    let (mut all_context, mut all_decode, mut all_free) = (true, true, true);
    for p in plans.iter() {
        let (context, decodes) = count(p);
        all_context &= context > 0;
        all_decode &= decodes > 0;
        all_free &= (decodes as u64) < u64::from(max_sequences);
    }
    let hold = if all_free && all_context {
        state.waiting_iters = 0;
        if all_decode && state.batching_iters < cfg.batching_wait_iters {
            state.batching_iters += 1;
            true
        } else {
            if all_decode {
                state.batching_iters = 0;
            }
            false
        }
    } else {
        state.waiting_iters += 1;
        if state.waiting_iters >= cfg.timeout_iters || !all_decode {
            state.waiting_iters = 0;
            false
        } else {
            true
        }
    };
    if hold {
        for p in plans.iter_mut() {
            p.items.retain(|i| i.decode);
        }
    }
}

/// Advances [`AdpBalance`]'s counters over `steps` steps with no context on any rank (a
/// fast-forwarded decode run), as [`balance_adp`] would step by step: PyExecutor counts
/// every step in which not every rank has context, and restarts the count at the timeout or
/// when some rank has nothing to decode.
pub fn balance_adp_decode_steps(
    cfg: AdpBalance,
    state: &mut AdpBalanceState,
    every_rank_decodes: bool,
    steps: u64,
) {
    state.waiting_iters = if every_rank_decodes && cfg.timeout_iters > 0 {
        let t = u64::from(cfg.timeout_iters);
        u32::try_from((u64::from(state.waiting_iters) + steps) % t).unwrap_or(0)
    } else {
        0
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::Segment;
    use crate::engine::Backend;
    use crate::kv::BlockPool;
    use crate::request::RequestSpec;
    use crate::units::SimTime;
    use alloc::vec;
    use alloc::vec::Vec;

    fn req(id: u64, prompt: u32) -> Request {
        Request::new(
            RequestSpec {
                arrival: SimTime::ZERO,
                prompt: vec![Segment { id, len: prompt }],
                output_tokens: 50,
                output_stream: id + 1000,
                session: None,
                public_tokens: crate::request::ALL_SHARED,
                warmup: false,
            },
            1,
        )
    }

    fn cfg(wait: BatchWait) -> SchedulerConfig {
        SchedulerConfig {
            max_batched_tokens: 1000,
            batch_wait: wait,
            ..crate::engine::test_config(Backend::TrtLlm)
        }
    }

    /// Runs `steps` scheduling rounds with one request decoding throughout and a `prompt`-token
    /// request waiting; returns, per round, whether the prompt was in the plan.
    fn context_scheduled(wait: BatchWait, prompt: u32, steps: usize) -> Vec<bool> {
        let mut rank = Rank::new(KvStore::Paged(BlockPool::new(1000, 32, false)));
        let mut reqs = vec![req(1, 100), req(2, prompt)];
        // Request 0 has its prompt computed and one token out: it decodes.
        rank.waiting.push_back(0);
        let mut plan = RankPlan::default();
        schedule(&cfg(wait), &mut rank, &mut reqs, &mut plan);
        assert_eq!(plan.items.len(), 1, "a lone prompt is never held: nothing else would run");
        reqs[0].computed = 100;
        reqs[0].emitted = 1;
        rank.waiting.push_back(1);
        let cfg = cfg(wait);
        (0..steps)
            .map(|_| {
                plan.clear();
                schedule(&cfg, &mut rank, &mut reqs, &mut plan);
                assert!(plan.items.iter().any(|p| p.req == 0 && p.decode), "decodes always run");
                plan.items.iter().any(|p| p.req == 1)
            })
            .collect()
    }

    #[test]
    fn batch_waiting_holds_context_beside_decodes_until_its_timeout() {
        // Off: the prompt joins the first step.
        assert_eq!(context_scheduled(BatchWait::default(), 100, 2), [true, true]);
        // 101 tokens (the prompt and one decode) < 0.5 × 1000: held for 3 steps, scheduled in
        // the 4th.
        let wait = BatchWait { timeout_iters: 3, max_tokens_ratio: 0.5 };
        assert_eq!(context_scheduled(wait, 100, 4), [false, false, false, true]);
        // 601 tokens reach the ratio: scheduled at once.
        assert_eq!(context_scheduled(wait, 600, 1), [true]);
        // A ratio without a timeout never holds anything (PyExecutor: iters >= 0 stops waiting).
        let ratio_only = BatchWait { timeout_iters: 0, max_tokens_ratio: 0.9 };
        assert_eq!(context_scheduled(ratio_only, 100, 2), [true, true]);
    }

    /// Plans for ranks given as (context items, decode items).
    fn plans(shape: &[(u32, u32)]) -> alloc::vec::Vec<crate::engine::RankPlan> {
        let mut id = 0;
        shape
            .iter()
            .map(|&(context, decodes)| {
                let mut p = crate::engine::RankPlan::default();
                for i in 0..context + decodes {
                    id += 1;
                    let decode = i >= context;
                    p.items.push(crate::engine::Planned {
                        req: id,
                        new_tokens: 1,
                        context_tokens: 0,
                        decode,
                    });
                }
                p
            })
            .collect()
    }

    /// Whether each of `steps` consecutive steps shaped `shape` ran its context.
    fn runs_context(
        cfg: crate::engine::AdpBalance,
        shape: &[(u32, u32)],
        max_sequences: u32,
        steps: usize,
    ) -> alloc::vec::Vec<bool> {
        let mut state = crate::engine::AdpBalanceState::default();
        (0..steps)
            .map(|_| {
                let mut p = plans(shape);
                super::balance_adp(cfg, &mut state, max_sequences, &mut p);
                let decodes: usize = p.iter().map(|q| q.items.iter().filter(|i| i.decode).count()).sum();
                let wanted: u32 = shape.iter().map(|s| s.1).sum();
                assert_eq!(decodes, wanted as usize, "decodes always run");
                p.iter().any(|q| q.items.iter().any(|i| !i.decode))
            })
            .collect()
    }

    #[test]
    fn adp_balance_holds_context_until_every_rank_has_some() {
        let cfg = crate::engine::AdpBalance { timeout_iters: 3, batching_wait_iters: 0 };
        // One rank of two has a prompt while both decode: held twice, run at the timeout.
        assert_eq!(runs_context(cfg, &[(1, 2), (0, 2)], 16, 4), [false, false, true, false]);
        // Every rank has one: run at once.
        assert_eq!(runs_context(cfg, &[(1, 2), (1, 2)], 16, 2), [true, true]);
        // A rank with nothing to decode has nothing to stall: run at once.
        assert_eq!(runs_context(cfg, &[(1, 2), (0, 0)], 16, 2), [true, true]);
        // A rank whose batch is full cannot take context: wait as if it had none.
        assert_eq!(runs_context(cfg, &[(1, 2), (1, 16)], 16, 3), [false, false, true]);
        // No timeout: never held.
        let none = crate::engine::AdpBalance { timeout_iters: 0, ..cfg };
        assert_eq!(runs_context(none, &[(1, 2), (0, 2)], 16, 2), [true, true]);
        // With batching waits, context ready on every rank still waits that many steps.
        let batching = crate::engine::AdpBalance { timeout_iters: 3, batching_wait_iters: 2 };
        assert_eq!(runs_context(batching, &[(1, 2), (1, 2)], 16, 4), [false, false, true, false]);
        // ... unless some rank has no decodes.
        assert_eq!(runs_context(batching, &[(1, 2), (1, 0)], 16, 2), [true, true]);
    }

    /// Runs one scheduling round at `ms` with `waiting` queued, computes every planned chunk
    /// and finishes the requests: the plan's (request, new tokens, cached context) and when
    /// its copies end.
    fn round(
        rank: &mut Rank,
        reqs: &mut [Request],
        waiting: &[u32],
        ms: u64,
    ) -> (Vec<(u32, u32, u32)>, SimTime) {
        let at = SimTime::from_ns(ms * 1_000_000);
        if let Some(h) = rank.host.as_deref_mut() {
            h.set_clock(at);
        }
        rank.waiting.extend(waiting.iter().copied());
        let mut plan = RankPlan::default();
        schedule(&cfg(BatchWait::default()), rank, reqs, &mut plan);
        let items = plan.items.iter().map(|p| (p.req, p.new_tokens, p.context_tokens)).collect();
        for p in &plan.items {
            let r = &mut reqs[p.req as usize];
            r.computed += p.new_tokens;
            crate::engine::register_and_offer(rank, r, at);
            let KvStore::Paged(pool) = &mut rank.kv else { unreachable!() };
            kvops::free_all(pool, r);
        }
        rank.running.clear();
        (items, plan.copies_end)
    }

    #[test]
    fn host_offloading_copies_out_what_gpu_memory_evicts_and_a_reuse_moves_it_back() {
        // 8 GPU blocks of 16 tokens; a 64-token prompt with 50 output tokens needs 8 to
        // completion, so each admission reclaims the cached blocks of the one before last.
        // 1 MB blocks over 1 GB/s links: 1 ms a block each way.
        let spec = crate::host::HostSpec {
            capacity_blocks: 16,
            block_bytes: 1_000_000,
            d2h_bytes_per_s: Some(1e9),
            h2d_bytes_per_s: Some(1e9),
            first_byte: crate::units::SimDur::ZERO,
            writes: HostWrites::OnEviction,
        };
        let mut rank = Rank::new(KvStore::Paged(BlockPool::new(8, 16, true)));
        rank.host = Some(alloc::boxed::Box::new(HostTier::new(spec)));
        let mut reqs = vec![req(7, 64), req(9, 64), req(11, 64), req(7, 64)];
        let ms = |t: u64| SimTime::from_ns(t * 1_000_000);
        // A and B fill all eight blocks; nothing is evicted, nothing copied, no wait.
        assert_eq!(round(&mut rank, &mut reqs, &[0], 0), (vec![(0, 64, 0)], SimTime::ZERO));
        assert_eq!(round(&mut rank, &mut reqs, &[1], 1), (vec![(1, 64, 0)], SimTime::ZERO));
        // C reclaims A's four cached blocks: they go to host memory, and the step waits 4 ms.
        assert_eq!(round(&mut rank, &mut reqs, &[2], 10), (vec![(2, 64, 0)], ms(14)));
        // A's prompt again: GPU memory lost it, host memory holds it. Its first three blocks
        // (all but the block of the last token) move back (3 ms over the host-to-device link)
        // and only 16 tokens are computed; its new blocks reclaim B's four, copied out over
        // the device-to-host link meanwhile (4 ms): the step waits for the slower.
        assert_eq!(round(&mut rank, &mut reqs, &[3], 20), (vec![(3, 16, 48)], ms(24)));
        assert_eq!(reqs[3].first_admission_reused, Some(48));
        let stats = rank.host.as_ref().map(|h| h.stats()).unwrap_or_default();
        assert_eq!((stats.written_blocks, stats.restored_blocks, stats.resident_blocks), (8, 3, 5));
        // Without host memory the same prompt is computed whole.
        let mut rank = Rank::new(KvStore::Paged(BlockPool::new(8, 16, true)));
        let mut reqs = vec![req(7, 64), req(9, 64), req(11, 64), req(7, 64)];
        for (i, t) in [0u64, 1, 10].iter().enumerate() {
            round(&mut rank, &mut reqs, &[i as u32], *t);
        }
        assert_eq!(round(&mut rank, &mut reqs, &[3], 20), (vec![(3, 64, 0)], SimTime::ZERO));
    }
}
