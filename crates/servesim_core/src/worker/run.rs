//! Fast-forwarded decode runs of a [`Worker`].
//!
//! When every running request is decoding and nothing waits, the next steps are predictable
//! until the first request completes: each step advances every request by one token, KV grows
//! by one token each, and step times follow from the timer. Such a *run* of k steps is
//! scheduled as one event. Its steps are applied in bulk, in O(requests + steps + new blocks)
//! instead of O(requests × steps), whenever something must observe the worker (an arrival, a
//! time-series sample, the run's end). An arrival routed here truncates the run after the step
//! in flight; while arrivals wait for SGLang's next intake (`scheduler_recv_interval`), a run
//! ends at the step after which it happens. Allocation order, eviction order, token times,
//! inter-token gaps and the blocks offered to host tiers are exactly those of stepping one
//! token at a time; a test runs every golden scenario both ways and compares the reports byte
//! for byte.

use alloc::vec::Vec;

use super::{StepEnd, Worker};
use crate::engine::{self, kvops, KvStore};
use crate::host::HostWrites;
use crate::metrics::ItlSamples;
use crate::queue::event_key;
use crate::request::{Request, NEVER};
use crate::timing::{StepKind, StepTimer, TimingError};
use crate::units::SimTime;

/// Longest run formed at once (bounds the memory of a run's step times).
const MAX_RUN_STEPS: usize = 1 << 16;

/// A run of decode-only steps in flight.
#[derive(Clone, Debug, Default)]
pub(super) struct Run {
    /// Start time of step 1.
    start: SimTime,
    /// End time of each step (`ends[j - 1]` is step j's end).
    pub(super) ends: Vec<SimTime>,
    /// Steps whose tokens are applied.
    applied: usize,
    /// Steps whose KV is allocated (step 1 was allocated when it was scheduled).
    allocated: usize,
    /// `computed` of each planned request when step 1 started, per rank in plan order.
    start_computed: Vec<Vec<u32>>,
    /// For paged ranks: requests (plan indices) by the step phase at which they need a new
    /// block: request `i` crosses a block boundary at step `s` iff `s % bs == phase[i]`.
    phases: Vec<Phases>,
}

/// Plan indices grouped by phase: those of phase `p` are `order[starts[p]..starts[p + 1]]`,
/// in plan order (one allocation per rank instead of one per phase).
#[derive(Clone, Debug, Default)]
struct Phases {
    order: Vec<u32>,
    starts: Vec<u32>,
}

impl Phases {
    /// Groups plan indices by `phase_of(i)`, which lies in `0..phases`, in the vectors this
    /// grouping already has (a worker reuses its last run's).
    fn regroup(&mut self, n: usize, phases: usize, phase_of: impl Fn(usize) -> usize) {
        let (starts, order) = (&mut self.starts, &mut self.order);
        starts.clear();
        starts.resize(phases + 1, 0);
        for i in 0..n {
            starts[phase_of(i) + 1] += 1;
        }
        for p in 0..phases {
            starts[p + 1] += starts[p];
        }
        order.clear();
        order.resize(n, 0);
        // `starts[p]` serves as phase p's cursor, ending at phase p + 1's start; shifting the
        // cursors up one place restores the starts.
        for i in 0..n {
            let p = phase_of(i);
            #[allow(clippy::cast_possible_truncation)] // Plan sizes are far below u32::MAX.
            {
                order[starts[p] as usize] = i as u32;
            }
            starts[p] += 1;
        }
        for p in (0..phases).rev() {
            starts[p + 1] = starts[p];
        }
        starts[0] = 0;
    }

    fn of(&self, p: usize) -> &[u32] {
        &self.order[self.starts[p] as usize..self.starts[p + 1] as usize]
    }
}

impl Run {
    /// Steps in the run.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// When step `step` (from 1) starts.
    pub(super) fn step_start(&self, step: usize) -> SimTime {
        if step <= 1 {
            self.start
        } else {
            self.ends[step - 2]
        }
    }
}

impl Worker {
    /// A run starting with the planned step, when the plan is a stable decode batch.
    pub(super) fn form_run(
        &mut self,
        start: SimTime,
        first_end: SimTime,
        reqs: &[Request],
        timer: &mut dyn StepTimer,
        max_end: SimTime,
    ) -> Result<Option<Run>, TimingError> {
        if self.cfg.speculation.is_on() {
            // Each round advances a request by a drawn number of tokens: step by step.
            return Ok(None);
        }
        if !self.late.is_empty() {
            // The next step is planned without them, the one after takes them in.
            return Ok(None);
        }
        if self.ranks.iter().any(|r| matches!(&r.kv, KvStore::Paged(pool) if pool.checkpoints())) {
            // A hybrid model's decodes checkpoint their state at every block boundary they
            // reach, taking blocks as they go: step by step.
            return Ok(None);
        }
        if self
            .ranks
            .iter()
            .any(|r| r.host.as_deref().is_some_and(|h| h.spec().writes != HostWrites::AfterCompute))
        {
            // A decode that takes a block may evict a cached one, whose copy to host memory
            // the next step waits for; HiCache writes a sequence when it finishes, at its
            // step's end: step by step.
            return Ok(None);
        }
        let mut k = MAX_RUN_STEPS;
        if !self.recv.inbox.is_empty() {
            // The run ends with the decode step after which the scheduler takes them in.
            k = k.min(self.cfg.sglang.recv_interval.saturating_sub(self.recv.counter) as usize);
        }
        for (rank, plan) in self.ranks.iter().zip(&self.plans) {
            let stable = rank.waiting.is_empty()
                && rank.handoffs.is_empty()
                && plan.preemptions == 0
                && plan.items.len() == rank.running.len()
                && plan.items.iter().all(|p| p.decode);
            if !stable {
                return Ok(None);
            }
            let n = plan.items.len();
            if n == 0 {
                continue;
            }
            // The run ends with the step in which the first request emits its last token.
            for p in &plan.items {
                let r = &reqs[p.req as usize];
                k = k.min(r.output_target().saturating_sub(r.emitted) as usize);
            }
            // KV headroom: every later step's allocation must succeed without preemption.
            k = k.min(match &rank.kv {
                KvStore::Radix(cache) => usize::try_from(cache.available_tokens() / n as u64)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1),
                KvStore::Paged(pool) => {
                    let need = |steps: usize| -> u64 {
                        plan.items
                            .iter()
                            .map(|p| {
                                let c = u64::from(reqs[p.req as usize].computed);
                                pool.blocks_for(c + steps as u64).saturating_sub(pool.blocks_for(c + 1))
                            })
                            .sum()
                    };
                    let free = u64::from(pool.num_free());
                    let (mut lo, mut hi) = (1usize, k.max(1));
                    while lo < hi {
                        let mid = lo + (hi - lo).div_ceil(2);
                        if need(mid) <= free {
                            lo = mid;
                        } else {
                            hi = mid - 1;
                        }
                    }
                    lo
                }
            });
        }
        if k < 2 {
            return Ok(None);
        }
        // Step times: the same decode batch, one more KV token per request each step. The
        // vectors are the last run's, kept for this (a replay forms tens of thousands).
        let mut run = self.spare_run.take().unwrap_or_default();
        run.ends.clear();
        run.ends.reserve(k.min(1024));
        run.ends.push(first_end);
        timer.extend_decode_run(&self.loads, &mut run.ends, k, max_end)?;
        if run.ends.len() < 2 {
            self.spare_run = Some(run);
            return Ok(None);
        }
        let ranks = self.plans.len();
        run.start_computed.resize_with(ranks, Vec::new);
        run.phases.resize_with(ranks, Phases::default);
        for (((plan, rank), cs), phases) in
            self.plans.iter().zip(&self.ranks).zip(&mut run.start_computed).zip(&mut run.phases)
        {
            cs.clear();
            cs.extend(plan.items.iter().map(|p| reqs[p.req as usize].computed));
            match &rank.kv {
                KvStore::Paged(pool) => {
                    let bs = pool.block_size();
                    // Step s computes token c + s - 1, which starts a block iff (c + s - 1) % bs == 0.
                    phases.regroup(cs.len(), bs as usize, |i| ((1 + bs - cs[i] % bs) % bs) as usize);
                }
                KvStore::Radix(_) => phases.regroup(0, 0, |_| 0),
            }
        }
        (run.start, run.applied, run.allocated) = (start, 0, 1);
        Ok(Some(run))
    }

    /// Brings a run up to the event at time `t` with queue key `key`: applies every step that
    /// ends before `t`, and a step ending exactly at `t` whose own completion event would have
    /// popped first (a smaller key). `None` (time-series samples) takes only steps that end
    /// strictly before `t`.
    pub fn materialize(&mut self, t: SimTime, key: Option<u128>, reqs: &mut [Request], itl: &mut ItlSamples) {
        let Some(run) = &self.run else { return };
        let phase = 1 + self.id;
        let mut m = run.applied;
        while m < run.len() {
            let end = run.ends[m];
            let started = run.step_start(m + 1);
            let due = end < t || (end == t && key.is_some_and(|k| event_key(started, phase) < k));
            if !due {
                break;
            }
            m += 1;
        }
        if m > run.applied && m < run.len() {
            self.apply_run_steps(m, reqs, itl);
        }
    }

    /// Ends a run after the step in flight (a request was routed here). Returns the new end
    /// when it changed, so the caller can schedule a fresh completion event.
    pub fn truncate_run(&mut self) -> Option<StepEnd> {
        let run = self.run.as_mut()?;
        let keep = run.applied + 1;
        if keep >= run.len() {
            return None;
        }
        run.ends.truncate(keep);
        self.generation += 1;
        let run = self.run.as_ref()?;
        Some(StepEnd { end: run.ends[keep - 1], pushed: run.step_start(keep) })
    }

    /// Allocates KV for run steps up to `upto`, in the order step-by-step scheduling would,
    /// and advances per-step policy state.
    fn allocate_run_steps(&mut self, upto: usize, reqs: &mut [Request]) {
        let balance = self.adp_balance();
        let Some(run) = self.run.as_mut() else { return };
        let upto = upto.min(run.len());
        if upto <= run.allocated {
            return;
        }
        let from = run.allocated + 1;
        if let Some(balance) = balance {
            let every_rank_decodes = self.plans.iter().all(|p| !p.items.is_empty());
            engine::trtllm::balance_adp_decode_steps(
                balance,
                &mut self.adp,
                every_rank_decodes,
                (upto - from + 1) as u64,
            );
        }
        for (r, ((rank, plan), phases)) in self.ranks.iter_mut().zip(&self.plans).zip(&run.phases).enumerate()
        {
            let n = plan.items.len();
            if n == 0 {
                continue;
            }
            let steps = upto - from + 1;
            match &mut rank.kv {
                KvStore::Paged(pool) => {
                    let bs = pool.block_size() as usize;
                    for s in from..=upto {
                        for &i in phases.of(s % bs) {
                            let p = &plan.items[i as usize];
                            let c = run.start_computed[r][i as usize];
                            let req = &mut reqs[p.req as usize];
                            let ok = kvops::try_grow(pool, req, c + u32::try_from(s).unwrap_or(u32::MAX));
                            debug_assert!(ok, "run KV headroom was checked");
                        }
                    }
                    rank.state.steps += steps as u64;
                }
                KvStore::Radix(cache) => {
                    let ok = cache.alloc((steps * n) as u64);
                    debug_assert!(ok, "run KV headroom was checked");
                    for p in &plan.items {
                        reqs[p.req as usize].private_tokens += u32::try_from(steps).unwrap_or(u32::MAX);
                    }
                    let k = self.cfg.sglang;
                    let min_ratio = k.init_new_token_ratio * k.min_new_token_ratio_factor;
                    for _ in 0..steps {
                        rank.state.decode_rounds_left = rank.state.decode_rounds_left.saturating_sub(1);
                        rank.state.new_token_ratio = (rank.state.new_token_ratio
                            - (k.init_new_token_ratio - min_ratio) / k.new_token_ratio_decay_steps)
                            .max(min_ratio);
                    }
                }
            }
        }
        run.allocated = upto;
    }

    /// Applies run steps `applied + 1 ..= m` (tokens, times, gaps, cache registration).
    pub(super) fn apply_run_steps(&mut self, m: usize, reqs: &mut [Request], itl: &mut ItlSamples) {
        // The step after `m` is in flight by then, so its KV was allocated when it started.
        self.allocate_run_steps(m + 1, reqs);
        let Some(run) = self.run.as_mut() else { return };
        let first = run.applied + 1;
        if m < first {
            return;
        }
        let steps = u32::try_from(m - run.applied).unwrap_or(u32::MAX);
        let first_end = run.ends[first - 1];
        let last_end = run.ends[m - 1];
        if let Some(fe) = &mut self.frontend {
            // The batch is the same in every step of a run: each step streams one token of
            // every planned request at its end, and clients see them as they are written.
            let seqs = self.plans.iter().flat_map(|plan| &plan.items).map(|p| reqs[p.req as usize].seq);
            fe.stream(seqs, &run.ends[first - 1..m], |gap, n| itl.add(gap, n));
        }
        let mut total = 0u64;
        let mut common = 0u64;
        // Keys the run's decode rows see over these steps: each request's KV grows by one a
        // step from its length at the first of them (itself included).
        let mut kv_tokens = 0u64;
        let n = u64::from(steps);
        let mut offers = core::mem::take(&mut self.host_offers);
        for (rank, plan) in self.ranks.iter_mut().zip(&self.plans) {
            offers.clear();
            for (i, p) in plan.items.iter().enumerate() {
                let r = &mut reqs[p.req as usize];
                let computed_before = r.computed;
                let registered_before = r.registered_blocks;
                kv_tokens += n * (u64::from(r.computed) + 1) + n * (n - 1) / 2;
                let prev = r.stamps.last_token;
                let (first_seen, last_seen) = match &self.frontend {
                    Some(fe) => {
                        let q = fe.process_of(r.seq);
                        let first_seen = fe.first_written(q);
                        if prev != NEVER {
                            itl.add(first_seen.since(prev), 1);
                        }
                        (first_seen, fe.last_written(q))
                    }
                    None => {
                        if prev == self.last_step_end {
                            common += 1;
                        } else if prev != NEVER {
                            itl.add(first_end - prev, 1);
                        }
                        (first_end, last_end)
                    }
                };
                if r.emitted == 1 {
                    r.stamps.second_token = first_seen;
                }
                r.computed += steps;
                r.emitted += steps;
                r.stamps.last_token = last_seen;
                if let KvStore::Paged(pool) = &mut rank.kv {
                    kvops::register_full_blocks(pool, r);
                    if rank.host.is_some() {
                        // Each new block was filled by the step whose token completed it.
                        let bs = pool.block_size();
                        let upto = (r.registered_blocks as usize).min(r.hashes.len());
                        for j in (registered_before as usize).min(upto)..upto {
                            #[allow(clippy::cast_possible_truncation)] // Block indices fit u32.
                            let filled =
                                ((j as u32 + 1) * bs).saturating_sub(computed_before).clamp(1, steps);
                            #[allow(clippy::cast_possible_truncation)] // Plan sizes fit u32.
                            offers.push((run.ends[first + filled as usize - 2], i as u32, r.hashes[j]));
                        }
                    }
                }
                total += 1;
            }
            if let Some(host) = rank.host.as_mut() {
                // In the order stepping one step at a time offers them: by step, then plan.
                offers.sort_unstable_by_key(|&(at, i, _)| (at, i));
                for &(at, _, key) in &offers {
                    host.offer(key, at);
                }
            }
        }
        self.host_offers = offers;
        if self.frontend.is_none() {
            itl.add(first_end - self.last_step_end, common);
            let mut prev_end = first_end;
            for j in first..m {
                let e = run.ends[j];
                itl.add(e - prev_end, total);
                prev_end = e;
            }
        }
        self.stats.steps += u64::from(steps);
        self.stats.busy_ns += (last_end - run.step_start(first)).as_ns();
        self.stats.decode_tokens += u64::from(steps) * total;
        self.stats.decode_rounds += u64::from(steps) * total;
        let busy_ns = (last_end - run.step_start(first)).as_ns();
        let t = &mut self.stats.by_kind[StepKind::Decode as usize];
        t.steps += n;
        t.busy_ns += busy_ns;
        t.busy_ranks += n * self.plans.iter().filter(|plan| !plan.items.is_empty()).count() as u64;
        t.decode_rows += n * total;
        t.decode_kv_tokens += kv_tokens;
        self.last_step_end = last_end;
        run.applied = m;
    }
}

#[cfg(test)]
mod tests {
    use super::Phases;
    use alloc::vec::Vec;

    proptest::proptest! {
        /// Regrouping, again and again in the same vectors, lists each phase's indices in
        /// order, as filtering the indices by phase does.
        #[test]
        fn regrouped_phases_list_each_phase_in_order(
            groupings in proptest::collection::vec(
                (1usize..70, proptest::collection::vec(0usize..1000, 0..40)), 1..6),
        ) {
            let mut phases = Phases::default();
            for (count, raw) in groupings {
                let phase_of = |i: usize| raw[i] % count;
                phases.regroup(raw.len(), count, phase_of);
                for p in 0..count {
                    #[allow(clippy::cast_possible_truncation)]
                    let want: Vec<u32> = (0..raw.len()).filter(|&i| phase_of(i) == p).map(|i| i as u32).collect();
                    proptest::prop_assert_eq!(phases.of(p), &want[..], "phase {}", p);
                }
            }
        }
    }
}
