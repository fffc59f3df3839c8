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
//! - Hybrid models with prefix caching (`mamba_cache_mode: align`): prompt chunks end at block
//!   boundaries, where the recurrent state is checkpointed ([`kvops::align_chunk`]).
//! - With a host tier (KV offloading), a prompt's GPU prefix hit is continued with the blocks
//!   host memory holds: the request takes GPU blocks for them and waits, outside the queue and
//!   without budget, while they are copied back (`WAITING_FOR_REMOTE_KVS`); the requests
//!   behind it are scheduled meanwhile ([`crate::host`]).

use crate::engine::kvops;
use crate::engine::{KvStore, Planned, Rank, RankPlan, SchedulerConfig};
use crate::host::HostTier;
use crate::kv::BlockPool;
use crate::request::{ReqId, Request, Status};
use alloc::vec::Vec;

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
        let n = kvops::align_chunk(pool, r, r.computed, r.pending_tokens().min(budget));
        if n == 0 {
            // Less budget than a whole block is left for a hybrid model's aligned chunk.
            i += 1;
            continue;
        }
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
    // Requests passed over this step (their host blocks are being read for another), put
    // back at the front afterwards as vLLM prepends its skipped requests.
    let mut skipped: Vec<ReqId> = Vec::new();
    while budget > 0 && (running.len() as u64) < u64::from(cfg.max_sequences) {
        let Some(&id) = waiting.front() else { break };
        let r = &mut reqs[id as usize];
        if !r.blocks.is_empty() {
            // A P/D handoff whose KV arrived, or a prompt restored from the host tier: its
            // blocks are reserved; compute what is left (for a handoff, the last prompt token,
            // to sample the first output token).
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
        if let Some(host) = host.as_deref_mut() {
            let busy = restoring.len() as u64 >= u64::from(cfg.max_sequences);
            match restore_from_host(host, pool, r, probe, scratch, busy) {
                Restore::None => {}
                Restore::Wait => {
                    waiting.pop_front();
                    skipped.push(id);
                    continue;
                }
                Restore::NoRoom => break,
                Restore::Started { from, blocks, done } => {
                    waiting.pop_front();
                    restoring.push((id, from, blocks));
                    plan.restores.push((id, done));
                    continue;
                }
            }
        }
        let remaining = r.known_tokens() - probe.hit_tokens;
        if !cfg.chunked_prefill && remaining > budget {
            break;
        }
        let n = kvops::align_chunk(pool, r, probe.hit_tokens, remaining.min(budget));
        if n == 0 {
            break;
        }
        if kvops::admission_cost(pool, probe, n) > u64::from(pool.num_free()) {
            break;
        }
        kvops::admit(pool, r, probe, n, scratch);
        if let Some(host) = host.as_deref_mut() {
            // vLLM stores every block of a request the tier lacks, its prefix hits too.
            host.offer_all(&r.hashes[..(probe.hit_tokens / pool.block_size()) as usize], host.clock());
        }
        r.status = Status::Running;
        waiting.pop_front();
        running.push(id);
        plan.items.push(Planned { req: id, new_tokens: n, context_tokens: r.computed, decode: false });
        budget -= n;
    }
    for id in skipped.into_iter().rev() {
        waiting.push_front(id);
    }
}

/// What the host tier does for a waiting request at admission.
enum Restore {
    /// It holds nothing past the GPU hit: admit as usual.
    None,
    /// Its blocks are being read for another request, or as many requests restore as may run
    /// (vLLM's `max_concurrent_loads`): pass it over this step.
    Wait,
    /// GPU memory cannot hold the blocks to restore yet.
    NoRoom,
    /// `blocks` blocks from block `from` come back at `done`; the request holds their GPU blocks.
    Started { from: u32, blocks: u32, done: crate::units::SimTime },
}

/// vLLM's connector marks every block of the request it holds as used, then continues the
/// GPU hit `probe` with the blocks it holds, short of the last token (a forward pass must
/// compute one to sample from), and with those a storage tier behind it holds, and starts
/// restoring them when GPU memory has room. `busy`: the rank restores as many requests as
/// may run.
fn restore_from_host(
    host: &mut HostTier,
    pool: &mut BlockPool,
    r: &mut Request,
    probe: kvops::Probe,
    scratch: &[u32],
    busy: bool,
) -> Restore {
    host.touch(&r.hashes);
    let bs = pool.block_size();
    let from = probe.hit_tokens / bs;
    let most = ((r.known_tokens().saturating_sub(1)) / bs) as usize;
    let keys = r.hashes.get(from as usize..r.hashes.len().min(most)).unwrap_or(&[]);
    let now = host.clock();
    let found = host.match_prefix(keys, now);
    // Blocks the host tier is still writing, or reading in from storage for another
    // restore, come before any storage lookup.
    let (span, stored) = if host.g3().is_some() {
        (host.held_prefix(keys), host.lookup_g3(&keys[found..], now))
    } else {
        (found, 0)
    };
    // A prompt whose blocks another restore is reading (or reading in from storage) waits
    // for that one: they come back once.
    let reading = host.any_being_read(&keys[..span]);
    if found + stored == 0 && !reading {
        return Restore::None;
    }
    if busy || reading {
        return Restore::Wait;
    }
    #[allow(clippy::cast_possible_truncation)] // At most the prompt's blocks.
    let most_tokens = (found + stored) as u32 * bs;
    if kvops::admission_cost(pool, probe, most_tokens) > u64::from(pool.num_free()) {
        return Restore::NoRoom;
    }
    // vLLM stores every block of a request the tier lacks, its prefix hits too.
    host.offer_all(&r.hashes[..from as usize], now);
    let Some((n, done)) = host.begin_tiered_restore(&keys[..found], &keys[found..found + stored], now) else {
        return Restore::None;
    };
    #[allow(clippy::cast_possible_truncation)] // At most the prompt's blocks.
    let blocks = n as u32;
    let tokens = blocks * bs;
    kvops::reserve(pool, r, probe, tokens, scratch);
    kvops::count_reuse_from_tiers(r, probe.hit_tokens + tokens, tokens);
    Restore::Started { from, blocks, done }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::Segment;
    use crate::engine::{Backend, KvStore, Rank};
    use crate::host::{HostSpec, HostTier};
    use crate::kv::BlockPool;
    use crate::request::RequestSpec;
    use crate::units::{SimDur, SimTime};
    use alloc::boxed::Box;
    use alloc::vec;

    /// A request whose prompt is `len` tokens of content stream `stream`, in blocks of 16.
    fn req(stream: u64, len: u32) -> Request {
        let mut r = Request::new(
            RequestSpec {
                arrival: SimTime::ZERO,
                prompt: vec![Segment { id: stream, len }],
                output_tokens: 4,
                output_stream: stream + 1000,
                session: None,
                public_tokens: crate::request::ALL_SHARED,
                warmup: false,
            },
            16,
        );
        r.hash_known_blocks();
        r
    }

    fn cfg() -> SchedulerConfig {
        crate::engine::test_config(Backend::Vllm)
    }

    /// Computes a plan's chunks as a step would and records them.
    fn compute(rank: &mut Rank, reqs: &mut [Request], plan: &RankPlan) {
        for p in &plan.items {
            let r = &mut reqs[p.req as usize];
            r.computed += p.new_tokens;
            crate::engine::after_compute(rank, r, p, SimTime::ZERO);
        }
    }

    #[test]
    fn a_hybrid_prompt_stops_at_its_last_block_boundary_and_a_twin_resumes_from_the_checkpoint() {
        // A hybrid model whose state takes two blocks; 100-token prompts in blocks of 16.
        let mut rank = Rank::new(KvStore::Paged(BlockPool::new(100, 16, true).with_state(2)));
        let shared_head = |tail: u64| {
            let mut r = Request::new(
                RequestSpec {
                    arrival: SimTime::ZERO,
                    prompt: vec![Segment { id: 7, len: 64 }, Segment { id: tail, len: 36 }],
                    output_tokens: 4,
                    output_stream: tail + 1000,
                    session: None,
                    public_tokens: crate::request::ALL_SHARED,
                    warmup: false,
                },
                16,
            );
            r.hash_known_blocks();
            r
        };
        let mut reqs = vec![req(7, 100), req(7, 100), shared_head(8)];
        rank.waiting.push_back(0);
        let mut plan = RankPlan::default();
        schedule(&cfg(), &mut rank, &mut reqs, &mut plan);
        // The chunk ends at token 96, the last block boundary, where the state is kept.
        assert_eq!((plan.items[0].req, plan.items[0].new_tokens), (0, 96));
        assert_eq!(reqs[0].state.len(), 2);
        compute(&mut rank, &mut reqs, &plan);
        let KvStore::Paged(pool) = &rank.kv else { unreachable!() };
        assert!(pool.has_checkpoint(reqs[0].hashes[5]));
        // Its last four tokens next; the twin resumes from the checkpoint at 96, and the prompt
        // that shares only the first 64 tokens has no state to resume from.
        rank.waiting.extend([1, 2]);
        plan.clear();
        schedule(&cfg(), &mut rank, &mut reqs, &mut plan);
        let items: Vec<(u32, u32)> = plan.items.iter().map(|p| (p.req, p.new_tokens)).collect();
        assert_eq!(items, [(0, 4), (1, 4), (2, 96)]);
        assert_eq!(reqs[1].first_admission_reused, Some(96));
        assert_eq!(reqs[2].first_admission_reused, Some(0));
    }

    #[test]
    fn a_hybrid_chunk_short_of_the_last_boundary_is_whole_blocks() {
        let pool = BlockPool::new(100, 16, true).with_state(1);
        // One sequence holds the pool less its state's block.
        assert_eq!(KvStore::Paged(pool.clone()).capacity_tokens(), 99 * 16);
        let r = req(7, 100);
        // Budget 50 from 0: short of 96, cut to 48; from 48 with budget 60: crosses 96, ends there.
        assert_eq!(kvops::align_chunk(&pool, &r, 0, 50), 48);
        assert_eq!(kvops::align_chunk(&pool, &r, 48, 60), 48);
        // Past the boundary: the tail as asked; under a block: nothing this step.
        assert_eq!(kvops::align_chunk(&pool, &r, 96, 4), 4);
        assert_eq!(kvops::align_chunk(&pool, &r, 0, 10), 0);
        // Without prefix caching the engine does not align.
        let plain = BlockPool::new(100, 16, false).with_state(1);
        assert_eq!(kvops::align_chunk(&plain, &r, 0, 50), 50);
    }

    #[test]
    fn a_prompt_whose_blocks_another_request_is_restoring_waits_and_the_queue_behind_runs() {
        // Requests 0 and 1 share a 100-token prompt whose six full blocks only host memory
        // holds; request 2 has a prompt of its own. 1 MB blocks at 1 GB/s: 1 ms a block.
        let spec = HostSpec {
            capacity_blocks: 64,
            block_bytes: 1_000_000,
            d2h_bytes_per_s: None,
            h2d_bytes_per_s: Some(1e9),
            first_byte: SimDur::ZERO,
            writes: crate::host::HostWrites::AfterCompute,
        };
        let mut rank = Rank::new(KvStore::Paged(BlockPool::new(100, 16, true)));
        let mut host = HostTier::new(spec);
        let mut reqs = vec![req(7, 100), req(7, 100), req(9, 100)];
        for &h in &reqs[0].hashes {
            host.offer(h, SimTime::ZERO);
        }
        rank.host = Some(Box::new(host));
        rank.waiting.extend([0, 1, 2]);
        let mut plan = RankPlan::default();
        schedule(&cfg(), &mut rank, &mut reqs, &mut plan);
        // Request 0 restores its six blocks (6 ms); request 1 waits for them at the front of
        // the queue; request 2 is prefilled meanwhile.
        assert_eq!(plan.restores, [(0, SimTime::from_ns(6_000_000))]);
        assert_eq!(rank.restoring, [(0, 0, 6)]);
        assert_eq!(plan.items.len(), 1);
        assert_eq!((plan.items[0].req, plan.items[0].new_tokens), (2, 100));
        assert_eq!(rank.waiting, [1]);
        assert_eq!(reqs[0].first_admission_reused, Some(96));
        // Once the blocks are back they are in the GPU prefix cache: request 0 computes its
        // last 4 tokens and request 1 reuses all six blocks from GPU memory.
        crate::engine::finish_restore(&mut rank, &mut reqs[0], 0);
        assert_eq!(rank.waiting, [0, 1]);
        plan.clear();
        schedule(&cfg(), &mut rank, &mut reqs, &mut plan);
        let items: Vec<(u32, u32)> = plan.items.iter().map(|p| (p.req, p.new_tokens)).collect();
        assert!(items.contains(&(0, 4)) && items.contains(&(1, 4)), "{items:?}");
        assert_eq!(reqs[1].first_admission_reused, Some(96));
        assert!(plan.restores.is_empty());
    }

    #[test]
    fn a_prompt_only_storage_holds_is_read_in_then_restored_and_its_twin_waits_for_it() {
        // Requests 0 and 1 share a 100-token prompt whose six full blocks only the storage
        // tier behind host memory holds. 1 MB blocks: storage reads at 2 GB/s (3 ms for six,
        // plus 0.1 ms to the first byte), host to device at 1 GB/s (6 ms).
        let host_spec = HostSpec {
            capacity_blocks: 64,
            block_bytes: 1_000_000,
            d2h_bytes_per_s: None,
            h2d_bytes_per_s: Some(1e9),
            first_byte: SimDur::ZERO,
            writes: crate::host::HostWrites::AfterCompute,
        };
        let g3_spec = crate::host::G3Spec {
            capacity_blocks: 64,
            block_bytes: 1_000_000,
            read_bytes_per_s: Some(2e9),
            write_bytes_per_s: None,
            shared_read_bytes_per_s: None,
            shared_write_bytes_per_s: None,
            first_byte: SimDur::from_ns(100_000),
        };
        let store = alloc::rc::Rc::new(core::cell::RefCell::new(crate::host::G3Store::new(g3_spec)));
        let writer = store.borrow_mut().attach();
        let mut reqs = vec![req(7, 100), req(7, 100)];
        for &h in &reqs[0].hashes {
            store.borrow_mut().write(writer, h, SimTime::ZERO);
        }
        let mut rank = Rank::new(KvStore::Paged(BlockPool::new(100, 16, true)));
        let mut host = HostTier::new(host_spec).with_g3(store.clone(), true);
        // The writes end 0.1 ms in (their first byte); the scheduler plans at 1 ms.
        host.set_clock(SimTime::from_ns(1_000_000));
        rank.host = Some(Box::new(host));
        rank.waiting.extend([0, 1]);
        let mut plan = RankPlan::default();
        schedule(&cfg(), &mut rank, &mut reqs, &mut plan);
        // Request 0 reads six blocks in (3.1 ms), then restores them (6 ms more); request 1,
        // whose blocks are on their way into host memory, waits rather than recomputing.
        assert_eq!(plan.restores, [(0, SimTime::from_ns(10_100_000))]);
        assert_eq!(rank.restoring, [(0, 0, 6)]);
        assert!(plan.items.is_empty());
        assert_eq!(rank.waiting, [1]);
        let st = store.borrow().stats(SimTime::ZERO);
        assert_eq!((st.read_jobs, st.read_blocks, st.cross_worker_read_blocks), (1, 6, 6));
        crate::engine::finish_restore(&mut rank, &mut reqs[0], 0);
        plan.clear();
        schedule(&cfg(), &mut rank, &mut reqs, &mut plan);
        let items: Vec<(u32, u32)> = plan.items.iter().map(|p| (p.req, p.new_tokens)).collect();
        assert!(items.contains(&(0, 4)) && items.contains(&(1, 4)), "{items:?}");
        assert_eq!(store.borrow().stats(SimTime::ZERO).read_jobs, 1);
    }
}
