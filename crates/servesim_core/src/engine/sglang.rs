//! The SGLang scheduler (`python/sglang/srt/managers/scheduler.py`, `schedule_policy.py`),
//! one rank at a time, over a token-granular radix cache.
//!
//! - A step is either a prefill ("extend") batch or a decode batch. Prefill wins whenever a
//!   request can be admitted. With `--enable-mixed-chunk` (off upstream by default) a prefill
//!   batch also carries one decode token for every running request (`mix_with_running`), and
//!   the adder's budgets (`max_prefill_tokens`, the chunk and the KV room) shrink by as many
//!   tokens; the decode-only path (retraction, ratio decay) runs only when nothing is admitted.
//! - Admission (`PrefillAdder`): the waiting queue in FCFS or longest-prefix-match order;
//!   each request reserves its uncached prompt plus `min(max_new, 4096)` output tokens
//!   against the free-plus-evictable KV, after running requests reserve
//!   `min(remaining, 4096) × new_token_ratio` each. A prefill batch takes at most
//!   `max_prefill_tokens` new tokens; a prompt longer than `chunked_prefill_size` is chunked,
//!   one chunked request at a time.
//! - Decode: one token per running request. If KV cannot hold that, requests are retracted
//!   (fewest outputs first, then longest prompt) until `retract_decode_steps` tokens per
//!   remaining request are free, and `new_token_ratio` is raised to
//!   `(decoded + 20 × remaining) / Σ max_new`; otherwise it decays linearly to its minimum
//!   over 600 decode steps.
//! - The radix cache keeps prompts after prefill and whole sequences after completion or
//!   retraction, so later requests (and re-admitted ones) reuse them token by token.
//!
//! - HiCache (`--enable-hierarchical-cache`, a host tier of tokens,
//!   [`crate::host::HostWrites::tokens`]): what enters the tree is copied to host memory
//!   (`write_through`; `write_through_selective` once two inserts have covered it), and an
//!   admission whose prompt continues in host memory past its GPU hit by at least
//!   [`LOAD_BACK_MIN_TOKENS`] loads that part back into the tree (`init_load_back`) when GPU
//!   memory can hold it beside the request's own tokens; the prefill budgets count only the
//!   tokens left to compute, the KV budget the loaded ones too (`PrefillAdder.add_one_req`).
//!   With a storage tier (L3, [`crate::host::StoragePrefetch`]) a request is looked up there
//!   when it reaches the scheduler and the pages found are read into host memory; the
//!   admission loop passes over a request whose prefetch its policy does not let stop yet
//!   (`check_prefetch_progress`), and admits later ones.
//!
//!   With `write_back` ([`crate::host::HostWrites::WriteBack`]) host memory is written only
//!   with what the GPU's tree evicts, and the step that evicted it waits for the copy.
//!
//! Not modelled: in-batch duplicate-prefix deprioritisation, priority scheduling.

use alloc::vec::Vec;

use crate::engine::{KvStore, Planned, Rank, RankPlan, SchedulerConfig, SglangPolicy};
use crate::host::{HostTier, HostWrites, PrefetchGate, LOAD_BACK_MIN_TOKENS};
use crate::radix::{RadixCache, ROOT};
use crate::request::{Request, Status};
use crate::units::SimTime;

/// HiCache's insert of `req`'s computed tokens at `at`, if the rank has HiCache: they enter
/// the tree, each node they cover counts a hit, and host memory gets the part from the first
/// token whose nodes have enough ([`crate::host::HostWrites::min_hits`]; SGLang writes a node
/// only once its parent is written).
pub fn write_through(host: Option<&mut HostTier>, cache: &mut RadixCache, req: &mut Request, at: SimTime) {
    let Some(h) = host.filter(|h| h.spec().writes.through()) else { return };
    cache_computed(cache, req);
    let key = req.pieces(req.computed);
    cache.count_hits(&key);
    let hot = cache.hot_prefix(&key, h.spec().writes.min_hits());
    if hot > 0 {
        h.write_tokens(&req.pieces(hot), at);
    }
}

/// Moves a request's computed tokens into the tree and re-locks its path there.
pub fn cache_computed(cache: &mut RadixCache, req: &mut Request) {
    let computed = req.computed;
    let before = req.radix_tokens;
    if !cache.enabled() {
        return;
    }
    let (node, matched) = cache.insert(&req.pieces(computed));
    // Tokens this request computed that someone else had already cached: drop our copies.
    cache.free_private(u64::from(matched.saturating_sub(before)));
    req.private_tokens = req.private_tokens.saturating_sub(computed.saturating_sub(before));
    cache.lock(node);
    if req.radix_node != ROOT {
        cache.unlock(req.radix_node);
    }
    req.radix_node = node;
    req.radix_tokens = computed;
}

/// Caches a finished (or retracted) request's computed tokens and releases everything it holds.
/// A hybrid model's finished request leaves its recurrent state with its sequence's last node
/// (`MambaRadixCache.cache_finished_req`); a retracted one keeps none.
pub fn release(cache: &mut RadixCache, req: &mut Request, finished: bool) {
    if cache.enabled() {
        cache_computed(cache, req);
        if finished {
            cache.keep_state(req.radix_node);
        }
    }
    cache.free_private(u64::from(req.private_tokens));
    if req.radix_node != ROOT {
        cache.unlock(req.radix_node);
    }
    req.private_tokens = 0;
    req.radix_node = ROOT;
    req.radix_tokens = 0;
    req.computed = 0;
}

fn clip(cfg: &SchedulerConfig, r: &Request) -> u32 {
    r.output_target().saturating_sub(r.emitted).min(cfg.sglang.clip_max_new_tokens)
}

/// Fills `plan` for one rank.
pub fn schedule(cfg: &SchedulerConfig, rank: &mut Rank, reqs: &mut [Request], plan: &mut RankPlan) {
    let write_back = rank.host.as_deref().is_some_and(|h| h.spec().writes == HostWrites::WriteBack);
    if let (true, KvStore::Radix(cache)) = (write_back, &mut rank.kv) {
        cache.log_evictions();
    }
    plan_step(cfg, rank, reqs, plan);
    if write_back {
        write_back_evicted(rank, plan);
    }
}

/// HiCache's `write_back`: what the GPU's tree evicted while the step was planned is copied
/// to host memory first, and the step waits for the copies (`writing_check(write_back=True)`
/// before the GPU memory is freed).
fn write_back_evicted(rank: &mut Rank, plan: &mut RankPlan) {
    let (KvStore::Radix(cache), Some(h)) = (&mut rank.kv, rank.host.as_deref_mut()) else { return };
    let now = h.clock();
    for path in cache.take_evicted() {
        if let Some(done) = h.write_tokens_until(&path, now) {
            plan.copies_end = plan.copies_end.max(done);
        }
    }
}

/// Fills `plan` for one rank (the step's batch; [`schedule`] adds HiCache's write-back).
#[allow(clippy::too_many_lines)]
fn plan_step(cfg: &SchedulerConfig, rank: &mut Rank, reqs: &mut [Request], plan: &mut RankPlan) {
    let Rank { waiting, running, kv, state, host, .. } = rank;
    let KvStore::Radix(cache) = kv else { return };
    let mut host = host.as_deref_mut().filter(|h| h.spec().writes.tokens());
    let k = cfg.sglang;
    let min_ratio = k.init_new_token_ratio * k.min_new_token_ratio_factor;
    if state.new_token_ratio <= 0.0 || (running.is_empty() && waiting.is_empty()) {
        state.new_token_ratio = k.init_new_token_ratio;
    }
    let decoding_now = running.iter().filter(|id| reqs[**id as usize].is_decoding()).count();
    let any_decoding = decoding_now > 0;
    // `is_mixed_chunk` needs a chunk size; speculative decoding turns it off (`server_args`).
    let mixed = k.mixed_chunk && cfg.chunked_prefill && !cfg.speculation.is_on();

    // Requests new to the scheduler start their prefetches from storage.
    if let Some(h) = host.as_deref_mut().filter(|h| h.prefetches()) {
        let now = h.clock();
        for &id in waiting.iter() {
            let r = &reqs[id as usize];
            if !h.unseen(r.seq) {
                continue;
            }
            let known = r.known_tokens();
            let key = r.pieces(known);
            let limit = known.saturating_sub(1);
            let matched = cache.peek(&key, limit).max(h.held_tokens(&key, limit));
            h.arrive(r.seq, &key, matched, cache.capacity(), now);
        }
    }

    // 1. A prefill batch, unless decode rounds are forced after the last one.
    let prefill_allowed = state.decode_rounds_left == 0 || !any_decoding;
    if prefill_allowed {
        #[allow(clippy::cast_precision_loss)]
        let reserved: f64 = running
            .iter()
            .map(|id| &reqs[*id as usize])
            .filter(|r| r.is_decoding())
            .map(|r| f64::from(clip(cfg, r)) * state.new_token_ratio)
            .sum();
        // Mixed batches take one decode token per running request out of every budget
        // (`PrefillAdder(mixed_with_decode_tokens = running_bs)`).
        let beside = if mixed { decoding_now } else { 0 };
        #[allow(clippy::cast_precision_loss)]
        let mut rem_total = cache.available_tokens() as f64 - reserved - beside as f64;
        let beside = i64::try_from(beside).unwrap_or(i64::MAX);
        let mut rem_input = i64::from(k.max_prefill_tokens).saturating_sub(beside);
        let mut rem_chunk = i64::from(k.chunked_prefill_size).saturating_sub(beside);

        // A request left mid-prompt by the previous prefill batch continues first; that
        // includes a retracted request recomputing its prompt and earlier outputs.
        if let Some(&id) = running.iter().find(|id| {
            let r = &reqs[**id as usize];
            !r.is_decoding() && r.pending_tokens() > 0
        }) {
            let r = &mut reqs[id as usize];
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let n = r.pending_tokens().min(rem_chunk.max(0) as u32);
            if n > 0 && cache.alloc(u64::from(n)) {
                r.private_tokens += n;
                plan.items.push(Planned {
                    req: id,
                    new_tokens: n,
                    context_tokens: r.computed,
                    decode: false,
                });
                rem_input -= i64::from(n);
                rem_chunk -= i64::from(n);
                rem_total -= f64::from(n);
            }
        }
        let chunk_in_flight = !plan.items.is_empty()
            && plan.items.iter().any(|p| reqs[p.req as usize].pending_tokens() > p.new_tokens);

        if !chunk_in_flight {
            // Longest cached prefix first, unless the queue is long (the sort is skipped upstream).
            if k.policy == SglangPolicy::Lpm && waiting.len() <= 128 && cache.enabled() {
                let mut order: Vec<(u32, usize, u32)> = waiting
                    .iter()
                    .enumerate()
                    .map(|(i, id)| {
                        let r = &reqs[*id as usize];
                        let known = r.known_tokens();
                        (cache.peek(&r.pieces(known), known.saturating_sub(1)), i, *id)
                    })
                    .collect();
                order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                waiting.clear();
                waiting.extend(order.into_iter().map(|(_, _, id)| id));
            }
            let mut admitted = 0u32;
            // Requests passed over while their prefetch runs stay ahead of `next`.
            let mut next = 0;
            while let Some(&id) = waiting.get(next) {
                if (running.len() as u64) + u64::from(admitted) >= u64::from(cfg.max_sequences) {
                    break;
                }
                if rem_input <= 0 || rem_chunk <= 0 {
                    break;
                }
                let r = &mut reqs[id as usize];
                let known = r.known_tokens();
                let key = r.pieces(known);
                if let Some(h) = host.as_deref_mut() {
                    if let PrefetchGate::Wait { wake } = h.prefetch_gate(r.seq, &key, h.clock()) {
                        // The scheduler looks again when the policy lets the prefetch stop.
                        plan.restores.extend(wake.map(|at| (id, at)));
                        next += 1;
                        continue;
                    }
                }
                let prefix = cache.peek(&key, known.saturating_sub(1));
                // The KV budget counts tokens loaded from host memory; the prefill budgets
                // only those left to compute.
                let extend = known - prefix;
                let host_hit =
                    host.as_deref().map_or(prefix, |h| h.held_tokens(&key, known.saturating_sub(1)));
                let mut loaded = host_hit.saturating_sub(prefix);
                if loaded < LOAD_BACK_MIN_TOKENS {
                    loaded = 0;
                }
                let reserve = clip(cfg, r);
                if f64::from(extend) + f64::from(reserve) >= rem_total {
                    break;
                }
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let chunk = rem_chunk as u32;
                // The tokens this step computes, and whether that is a chunk of them.
                let compute = |loaded: u32| {
                    let left = extend - loaded;
                    if cfg.chunked_prefill && left > chunk {
                        Some((chunk, true))
                    } else if !cfg.chunked_prefill && i64::from(left) > rem_input {
                        None
                    } else {
                        Some((left, false))
                    }
                };
                let Some(mut step) = compute(loaded) else { break };
                let (matched, node) = cache.match_prefix(&key, known.saturating_sub(1));
                cache.lock(node);
                // A load needs GPU room for itself beside the request's tokens
                // (`load_back`'s memory quota), or the request computes it again.
                if loaded > 0 && cache.available_tokens() < u64::from(loaded) + u64::from(step.0) {
                    loaded = 0;
                    let Some(again) = compute(0) else {
                        cache.unlock(node);
                        break;
                    };
                    step = again;
                }
                let (n, chunked) = step;
                // A hybrid model's request takes a state slot, dropping kept states if needed.
                let running_after =
                    u32::try_from(running.len()).unwrap_or(u32::MAX).saturating_add(admitted + 1);
                if !cache.make_state_room(running_after) || !cache.alloc(u64::from(n)) {
                    cache.unlock(node);
                    break;
                }
                let gpu_matched = matched;
                let (matched, node) = match host.as_deref_mut() {
                    Some(h) if loaded > 0 => {
                        let upto = matched + loaded;
                        let done = h.load_tokens(&key, matched, upto, h.clock());
                        plan.loads_end = plan.loads_end.max(done);
                        // The loaded tokens join the tree where the request's path ends.
                        let ok = cache.alloc(u64::from(loaded));
                        debug_assert!(ok, "the room was checked with the node locked");
                        let (deep, _) = cache.insert(&r.pieces(upto));
                        cache.lock(deep);
                        cache.unlock(node);
                        (upto, deep)
                    }
                    _ => (matched, node),
                };
                r.radix_node = node;
                r.radix_tokens = matched;
                r.computed = matched;
                r.private_tokens = n;
                super::kvops::count_reuse_from_tiers(r, matched, matched - gpu_matched);
                r.status = Status::Running;
                waiting.remove(next);
                running.push(id);
                plan.items.push(Planned { req: id, new_tokens: n, context_tokens: matched, decode: false });
                admitted += 1;
                rem_input -= i64::from(n);
                rem_chunk -= i64::from(n);
                rem_total -= f64::from(n + loaded) + if chunked { 0.0 } else { f64::from(reserve) };
                if chunked {
                    break;
                }
            }
        }
        if !plan.items.is_empty() {
            state.decode_rounds_left = k.prefill_decode_interval;
            if mixed {
                // The running batch rides along: one token each, allocated without the
                // decode path's memory check (the adder already set their tokens aside).
                let prefilling = plan.items.len();
                for &id in running.iter() {
                    let r = &mut reqs[id as usize];
                    if !r.is_decoding() || plan.items[..prefilling].iter().any(|p| p.req == id) {
                        continue;
                    }
                    if !cache.alloc(1) {
                        break;
                    }
                    r.private_tokens += 1;
                    plan.items.push(Planned {
                        req: id,
                        new_tokens: 1,
                        context_tokens: r.computed,
                        decode: true,
                    });
                }
            }
            return;
        }
    }

    // 2. A decode batch: one token for every request past its prompt.
    state.decode_rounds_left = state.decode_rounds_left.saturating_sub(1);
    let mut decoding: Vec<u32> =
        running.iter().copied().filter(|id| reqs[*id as usize].is_decoding()).collect();
    if decoding.is_empty() {
        return;
    }
    let per_request = u64::from(1 + cfg.speculation.draft_tokens);
    if cache.available_tokens() < decoding.len() as u64 * per_request {
        // Retract: fewest generated tokens first, then the longest prompt.
        decoding.sort_by(|a, b| {
            let (ra, rb) = (&reqs[*a as usize], &reqs[*b as usize]);
            rb.emitted.cmp(&ra.emitted).then(ra.input_tokens.cmp(&rb.input_tokens))
        });
        while decoding.len() > 1
            && cache.available_tokens() < decoding.len() as u64 * u64::from(k.retract_decode_steps)
        {
            let Some(victim) = decoding.pop() else { break };
            let v = &mut reqs[victim as usize];
            release(cache, v, false);
            v.status = Status::Waiting;
            v.preemptions += 1;
            running.retain(|x| *x != victim);
            waiting.push_front(victim);
            plan.preemptions += 1;
        }
        let decoded: u64 = decoding.iter().map(|id| u64::from(reqs[*id as usize].emitted)).sum();
        let total: u64 = decoding.iter().map(|id| u64::from(reqs[*id as usize].output_target())).sum();
        #[allow(clippy::cast_precision_loss)]
        let ratio = (decoded + u64::from(k.retract_decode_steps) * decoding.len() as u64) as f64
            / total.max(1) as f64;
        state.new_token_ratio = ratio.min(1.0);
        // Keep the running order stable for the plan.
        decoding.sort_by_key(|id| running.iter().position(|x| x == id).unwrap_or(usize::MAX));
    } else {
        state.new_token_ratio = (state.new_token_ratio
            - (k.init_new_token_ratio - min_ratio) / k.new_token_ratio_decay_steps)
            .max(min_ratio);
    }
    for id in decoding {
        // With speculative decoding the drafts' slots are taken for the pass and the rejected
        // ones returned after it (`Worker::finish_step`).
        let slots = 1 + cfg.speculation.lookahead(&reqs[id as usize]);
        if !cache.alloc(u64::from(slots)) {
            break;
        }
        let r = &mut reqs[id as usize];
        r.private_tokens += slots;
        plan.items.push(Planned { req: id, new_tokens: 1, context_tokens: r.computed, decode: true });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::Segment;
    use crate::engine::{Backend, BatchWait, KvStore, SglangKnobs};
    use crate::radix::RadixCache;
    use crate::request::RequestSpec;
    use crate::units::SimTime;
    use alloc::vec;

    fn req(prefix_id: u64, prefix: u32, own: u64) -> Request {
        Request::new(
            RequestSpec {
                arrival: SimTime::ZERO,
                prompt: vec![Segment { id: prefix_id, len: prefix }, Segment { id: own, len: 100 }],
                output_tokens: 10,
                output_stream: own + 1000,
                session: None,
                public_tokens: crate::request::ALL_SHARED,
                warmup: false,
            },
            1,
        )
    }

    fn sglang_cfg() -> SchedulerConfig {
        SchedulerConfig {
            backend: Backend::Sglang,
            max_batched_tokens: 8192,
            max_sequences: 64,
            chunked_prefill: true,
            prefill_schedule_interval: 1,
            sglang: SglangKnobs { chunked_prefill_size: 1000, ..SglangKnobs::default() },
            batch_wait: BatchWait::default(),
            adp_balance: None,
            frontend: crate::frontend::FrontendSpec::default(),
            plan_ahead: false,
            speculation: crate::engine::Speculation::default(),
        }
    }

    /// Three requests past their prompts (one output token each, 110 tokens in the KV) and a
    /// 2,000-token prompt waiting.
    fn decoding_three_and_one_waiting() -> (Rank, Vec<Request>) {
        let mut cache = RadixCache::new(100_000, false);
        let mut reqs: Vec<Request> = (0..3).map(|i| req(100 + i, 10, 200 + i)).collect();
        for r in &mut reqs {
            assert!(cache.alloc(110));
            r.computed = 110;
            r.emitted = 1;
            r.private_tokens = 110;
            r.status = Status::Running;
            assert!(r.is_decoding());
        }
        reqs.push(req(300, 1900, 301));
        let mut rank = Rank::new(KvStore::Radix(cache));
        rank.running.extend([0, 1, 2]);
        rank.waiting.push_back(3);
        (rank, reqs)
    }

    #[test]
    fn mixed_chunks_carry_the_running_decodes_and_shrink_the_chunk_by_them() {
        let mut cfg = sglang_cfg();
        let mut plan = RankPlan::default();
        // Off (SGLang's default): the prompt's first 1,000-token chunk alone.
        let (mut rank, mut reqs) = decoding_three_and_one_waiting();
        schedule(&cfg, &mut rank, &mut reqs, &mut plan);
        let items: Vec<(u32, u32, bool)> =
            plan.items.iter().map(|p| (p.req, p.new_tokens, p.decode)).collect();
        assert_eq!(items, [(3, 1000, false)]);
        // On: 1,000 − 3 prompt tokens, then one decode token for each running request.
        cfg.sglang.mixed_chunk = true;
        let (mut rank, mut reqs) = decoding_three_and_one_waiting();
        let free = match &rank.kv {
            KvStore::Radix(c) => c.available_tokens(),
            KvStore::Paged(_) => unreachable!(),
        };
        plan.clear();
        schedule(&cfg, &mut rank, &mut reqs, &mut plan);
        let items: Vec<(u32, u32, bool)> =
            plan.items.iter().map(|p| (p.req, p.new_tokens, p.decode)).collect();
        assert_eq!(items, [(3, 997, false), (0, 1, true), (1, 1, true), (2, 1, true)]);
        let KvStore::Radix(c) = &rank.kv else { unreachable!() };
        assert_eq!(free - c.available_tokens(), 1000, "the step's KV: the chunk and three tokens");
        // Nothing to admit: a plain decode batch, as without mixing.
        let (mut rank, mut reqs) = decoding_three_and_one_waiting();
        rank.waiting.clear();
        plan.clear();
        schedule(&cfg, &mut rank, &mut reqs, &mut plan);
        assert!(plan.items.len() == 3 && plan.items.iter().all(|p| p.decode));
        // Speculative decoding turns mixing off, as SGLang's server arguments do.
        cfg.speculation.draft_tokens = 2;
        let (mut rank, mut reqs) = decoding_three_and_one_waiting();
        plan.clear();
        schedule(&cfg, &mut rank, &mut reqs, &mut plan);
        assert_eq!(plan.items.len(), 1);
        assert_eq!(plan.items[0].new_tokens, 1000);
    }

    #[test]
    fn hicache_writes_what_enters_the_tree_and_an_admission_loads_its_evicted_prefix_back() {
        use crate::host::{HostSpec, HostTier, HostWrites};
        use crate::units::SimDur;
        // 1 MB a token over 1 GB/s links: 1 ms a token each way. The GPU holds 150 tokens,
        // host memory 400.
        let spec = HostSpec {
            capacity_blocks: 400,
            block_bytes: 1_000_000,
            d2h_bytes_per_s: Some(1e9),
            h2d_bytes_per_s: Some(1e9),
            first_byte: SimDur::ZERO,
            writes: HostWrites::WriteThrough,
        };
        let ms = |t: u64| SimTime::from_ns(t * 1_000_000);
        let cfg = SchedulerConfig {
            max_sequences: 1,
            ..crate::engine::test_config(crate::engine::Backend::Sglang)
        };
        let run = |host: bool| {
            let mut rank = Rank::new(KvStore::Radix(RadixCache::new(150, true)));
            if host {
                rank.host = Some(alloc::boxed::Box::new(HostTier::new(spec)));
            }
            // A: 10 shared + 100 own tokens; B: 10 shared + 100 others (A's leave the GPU);
            // then A's prompt again.
            let mut reqs = vec![req(5, 10, 1), req(5, 10, 2), req(5, 10, 1)];
            let mut plan = RankPlan::default();
            let mut out = Vec::new();
            for id in 0..3u32 {
                rank.waiting.push_back(id);
                if let Some(h) = rank.host.as_deref_mut() {
                    h.set_clock(ms(100 * u64::from(id)));
                }
                plan.clear();
                schedule(&cfg, &mut rank, &mut reqs, &mut plan);
                let p = plan.items[0];
                out.push((p.new_tokens, p.context_tokens, plan.loads_end));
                // The prompt is computed; the request ends without output (its tokens enter
                // the tree and host memory at the step's end).
                let at = ms(100 * u64::from(id) + 50);
                let r = &mut reqs[id as usize];
                r.computed += p.new_tokens;
                crate::engine::after_compute(&mut rank, r, &p, at);
                crate::engine::release(&mut rank, r, at);
                rank.running.clear();
            }
            (out, rank.host.map(|h| h.stats()))
        };
        let (with, stats) = run(true);
        // A's 110 tokens are written after its step (110 ms of copying); B's 100 new ones
        // after its own. A's return finds 10 tokens on the GPU and the next 99 (all but the
        // last) in host memory: loaded from 200 ms, they end at 299 ms, and one token is
        // computed.
        assert_eq!(with, vec![(110, 0, SimTime::ZERO), (100, 10, SimTime::ZERO), (1, 109, ms(299))]);
        let stats = stats.unwrap_or_default();
        assert_eq!((stats.written_blocks, stats.restores, stats.restored_blocks), (210, 1, 99));
        assert_eq!(stats.resident_blocks, 210, "the host copy stays");
        // Without host memory A's own tokens are computed again.
        let (without, _) = run(false);
        assert_eq!(without[2], (100, 10, SimTime::ZERO));
    }

    #[test]
    fn a_request_waiting_for_its_storage_prefetch_is_passed_over_and_the_next_admitted() {
        use crate::host::{G3Spec, G3Store, HostSpec, HostTier, HostWrites, PrefetchPolicy, StoragePrefetch};
        use crate::units::SimDur;
        let ms = |t: u64| SimTime::from_ns(t * 1_000_000);
        let host = HostSpec {
            capacity_blocks: 1000,
            block_bytes: 1000,
            d2h_bytes_per_s: None,
            h2d_bytes_per_s: None,
            first_byte: SimDur::ZERO,
            writes: HostWrites::WriteThrough,
        };
        // Pages of 10 tokens (10 kB) read at 10 MB/s: 1 ms a page.
        let store = alloc::rc::Rc::new(core::cell::RefCell::new(G3Store::new(G3Spec {
            capacity_blocks: 100,
            block_bytes: 10_000,
            read_bytes_per_s: Some(1e7),
            write_bytes_per_s: None,
            shared_read_bytes_per_s: None,
            shared_write_bytes_per_s: None,
            first_byte: SimDur::ZERO,
        })));
        let prefetch =
            StoragePrefetch { policy: PrefetchPolicy::WaitComplete, threshold_tokens: 32, page_tokens: 10 };
        // Another worker has backed up request 0's 110-token prompt (11 pages).
        let mut other = HostTier::new(host).with_prefetch(prefetch).with_g3(store.clone(), true);
        let mut reqs = vec![req(5, 10, 1), req(6, 10, 2)];
        reqs[1].seq = 1;
        other.write_tokens(&reqs[0].pieces(110), SimTime::ZERO);
        let mut tier = HostTier::new(host).with_prefetch(prefetch).with_g3(store, true);
        tier.set_clock(ms(1));
        let mut rank = Rank::new(KvStore::Radix(RadixCache::new(500, true)));
        rank.host = Some(alloc::boxed::Box::new(tier));
        rank.waiting.extend([0, 1]);
        let cfg = crate::engine::test_config(crate::engine::Backend::Sglang);
        let mut plan = RankPlan::default();
        schedule(&cfg, &mut rank, &mut reqs, &mut plan);
        // Request 0's 11 pages arrive at 12 ms: it is passed over, and request 1 admitted.
        assert_eq!(plan.items.iter().map(|p| p.req).collect::<Vec<_>>(), [1]);
        assert_eq!(plan.restores, [(0, ms(12))]);
        assert_eq!(rank.waiting, [0]);
        // Request 1's prompt is computed; at 12 ms request 0 loads the 109 tokens (all but
        // its last) from host memory and computes one.
        reqs[1].computed = 110;
        if let Some(h) = rank.host.as_deref_mut() {
            h.set_clock(ms(12));
        }
        plan.clear();
        schedule(&cfg, &mut rank, &mut reqs, &mut plan);
        let p = plan.items.iter().find(|p| p.req == 0).copied();
        assert_eq!(p.map(|p| (p.new_tokens, p.context_tokens)), Some((1, 109)));
        assert_eq!(plan.loads_end, ms(12), "host memory to GPU is unlimited here");
    }

    #[test]
    fn hicache_loads_back_ten_tokens_or_more_only() {
        use crate::host::{HostSpec, HostTier, HostWrites};
        let spec = HostSpec {
            capacity_blocks: 400,
            block_bytes: 1,
            d2h_bytes_per_s: None,
            h2d_bytes_per_s: None,
            first_byte: crate::units::SimDur::ZERO,
            writes: HostWrites::WriteThrough,
        };
        let cfg = crate::engine::test_config(crate::engine::Backend::Sglang);
        // Host memory holds the whole 110-token prompt, the GPU its first `on_gpu` tokens:
        // the host hit past them (to the token before the last) is 109 − on_gpu.
        for (on_gpu, computed) in [(95, 1), (100, 10)] {
            let r = req(5, 10, 1);
            let mut cache = RadixCache::new(1000, true);
            assert!(cache.alloc(on_gpu));
            cache.insert(&r.pieces(u32::try_from(on_gpu).unwrap()));
            let mut rank = Rank::new(KvStore::Radix(cache));
            let mut host = HostTier::new(spec);
            host.write_tokens(&r.pieces(110), SimTime::ZERO);
            rank.host = Some(alloc::boxed::Box::new(host));
            let mut reqs = vec![r];
            rank.waiting.push_back(0);
            let mut plan = RankPlan::default();
            schedule(&cfg, &mut rank, &mut reqs, &mut plan);
            assert_eq!(plan.items[0].new_tokens, computed, "{on_gpu} tokens on the GPU");
        }
    }

    #[test]
    fn lpm_admits_the_longest_cached_prefix_first() {
        let mut cache = RadixCache::new(10_000, true);
        // Cache 500 tokens of stream 7.
        assert!(cache.alloc(500));
        cache.insert(&crate::radix::pieces(&[Segment { id: 7, len: 500 }], 500));
        let mut rank = Rank::new(KvStore::Radix(cache));
        let mut reqs = vec![req(1, 400, 11), req(7, 500, 12)];
        rank.waiting.extend([0, 1]);
        let mut cfg = SchedulerConfig { max_sequences: 1, ..crate::engine::test_config(Backend::Sglang) };
        let mut plan = RankPlan::default();
        let mut fifo_rank = rank.clone();
        let mut fifo_reqs = reqs.clone();
        schedule(&cfg, &mut fifo_rank, &mut fifo_reqs, &mut plan);
        assert_eq!(plan.items[0].req, 0, "FIFO takes the head");
        plan.clear();
        cfg.sglang.policy = SglangPolicy::Lpm;
        schedule(&cfg, &mut rank, &mut reqs, &mut plan);
        assert_eq!(plan.items[0].req, 1, "LPM takes the cached one");
        assert_eq!(plan.items[0].context_tokens, 500);
        assert_eq!(plan.items[0].new_tokens, 100);
    }

    /// A disaggregated decode rank admits a handed-off prompt only while its KV keeps
    /// `decode_reserved_tokens` free for each request it holds and for the new one
    /// (SGLang's `DecodePreallocQueue`); nothing changes when it refuses.
    #[test]
    fn decode_ranks_keep_headroom_for_the_decode_tokens_of_every_request() {
        let cfg = sglang_cfg();
        let reserve = u64::from(cfg.sglang.decode_reserved_tokens);
        // Three running requests hold 330 tokens; the new prompt is 2,000 tokens and the
        // rank then holds four requests: 330 + 2,000 + 4 × 512 tokens are needed.
        let need = 330 + 2000 + 4 * reserve;
        for (capacity, admitted) in [(need - 1, false), (need, true)] {
            let (mut rank, mut reqs) = decoding_three_and_one_waiting();
            rank.waiting.clear();
            let KvStore::Radix(cache) = &mut rank.kv else { unreachable!() };
            *cache = RadixCache::new(capacity, false);
            assert!(cache.alloc(330));
            let got = crate::engine::reserve_destination(&cfg, &mut rank, &mut reqs, 3);
            assert_eq!(got.is_some(), admitted, "capacity {capacity}");
            let KvStore::Radix(cache) = &rank.kv else { unreachable!() };
            assert_eq!(cache.used_tokens(), if admitted { 2330 } else { 330 });
        }
        // Without the reserve the prompt alone decides.
        let mut cfg = sglang_cfg();
        cfg.sglang.decode_reserved_tokens = 0;
        let (mut rank, mut reqs) = decoding_three_and_one_waiting();
        rank.waiting.clear();
        let KvStore::Radix(cache) = &mut rank.kv else { unreachable!() };
        *cache = RadixCache::new(2330, false);
        assert!(cache.alloc(330));
        assert!(crate::engine::reserve_destination(&cfg, &mut rank, &mut reqs, 3).is_some());
    }
}
