//! The block pool against naive models: LRU order, prefix hits, private content and hybrid
//! models' state checkpoints.

use super::*;
use alloc::vec;
use proptest::prelude::*;

#[test]
fn a_block_record_is_24_bytes() {
    assert_eq!(core::mem::size_of::<Block>(), 24);
}

#[test]
fn lru_eviction_order() {
    let mut p = BlockPool::new(3, 16, true);
    let a = p.allocate().unwrap();
    let b = p.allocate().unwrap();
    p.register(a, 100);
    p.register(b, 200);
    p.release(a);
    p.release(b);
    let mut found = Vec::new();
    assert_eq!(p.find_prefix(&[100, 200], &mut found), 2);
    // The never-used block 2 goes first, then a (freed first), then b.
    assert_eq!(p.allocate(), Some(2));
    assert_eq!(p.allocate(), Some(a));
    assert!(!p.contains(100));
    assert!(p.contains(200));
    assert_eq!(p.stats().evictions, 1);
    p.check_invariants();
}

#[test]
fn touching_a_cached_block_removes_it_from_the_free_queue() {
    let mut p = BlockPool::new(2, 16, true);
    let a = p.allocate().unwrap();
    p.register(a, 7);
    p.release(a);
    assert_eq!(p.num_free(), 2);
    let mut found = vec![];
    p.find_prefix(&[7, 8], &mut found);
    assert_eq!(found, vec![a]);
    p.touch(a);
    assert_eq!(p.num_free(), 1);
    assert_eq!(p.ref_count(a), 1);
    p.check_invariants();
}

#[test]
fn without_prefix_caching_nothing_is_found() {
    let mut p = BlockPool::new(2, 16, false);
    let a = p.allocate().unwrap();
    p.register(a, 7);
    p.release(a);
    let mut found = vec![];
    assert_eq!(p.find_prefix(&[7], &mut found), 0);
    assert!(found.is_empty());
}

/// Operations a random test applies to both the pool and the naive model.
#[derive(Clone, Debug)]
enum Op {
    /// Admit a request whose prompt is `blocks` blocks of content family `family`,
    /// skipping block `gap` so later blocks may be resident while an earlier one is not.
    Admit { family: u8, blocks: u8, gap: u8 },
    /// Finish the live request at this position (modulo the live count).
    Finish(u8),
}

/// An [`Op::Admit`]'s block hashes: `blocks` of family `family`, block `gap` skipped.
fn prompt_hashes(family: u8, blocks: u8, gap: u8) -> Vec<u64> {
    (0..u64::from(blocks) + 1)
        .filter(|i| *i != u64::from(gap))
        .take(usize::from(blocks))
        .map(|i| u64::from(family) * 1000 + i)
        .collect()
}

/// [`Op::Finish`]: releases the live request at position `k` (modulo the live count) in
/// both the pool and the naive model, last block first.
fn finish_both(pool: &mut BlockPool, naive: &mut Naive, live: &mut Vec<Vec<(BlockId, usize)>>, k: u8) {
    if live.is_empty() {
        return;
    }
    let held = live.remove(k as usize % live.len());
    for (b, i) in held.into_iter().rev() {
        pool.release(b);
        naive.release(i);
    }
}

/// The hashes [`Op::Admit`] prompts draw from (every family's first 8 blocks).
fn universe() -> Vec<u64> {
    (0..4u64).flat_map(|f| (0..8u64).map(move |i| f * 1000 + i)).collect()
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, 1u8..6, 0u8..8).prop_map(|(family, blocks, gap)| Op::Admit { family, blocks, gap }),
        any::<u8>().prop_map(Op::Finish),
    ]
}

/// Naive model: slots with optional content, reference counts and a "freed at" clock.
/// Lookup is a linear scan and eviction picks the free slot freed longest ago.
struct Naive {
    slots: Vec<(Option<u64>, u32, u64)>,
    clock: u64,
}

impl Naive {
    fn new(capacity: usize) -> Self {
        Naive { slots: (0..capacity as u64).map(|i| (None, 0, i)).collect(), clock: capacity as u64 }
    }
    fn find(&self, h: u64) -> Option<usize> {
        self.slots.iter().position(|s| s.0 == Some(h))
    }
    fn free(&self) -> usize {
        self.slots.iter().filter(|s| s.1 == 0).count()
    }
    fn used(&self) -> usize {
        self.slots.len() - self.free()
    }
    fn allocate(&mut self) -> usize {
        let (i, _) =
            self.slots.iter().enumerate().filter(|(_, s)| s.1 == 0).min_by_key(|(_, s)| s.2).unwrap();
        self.slots[i] = (None, 1, 0);
        i
    }
    fn register(&mut self, i: usize, h: u64) {
        if self.slots[i].0.is_none() && self.find(h).is_none() {
            self.slots[i].0 = Some(h);
        }
    }
    fn release(&mut self, i: usize) {
        self.slots[i].1 -= 1;
        if self.slots[i].1 == 0 {
            self.slots[i].2 = self.clock;
            self.clock += 1;
        }
    }
}

/// Operations on a pool that indexes every block and one that marks private blocks.
#[derive(Clone, Debug)]
enum LazyOp {
    /// A new request: `blocks` shareable blocks of family `family`, then `own` blocks only
    /// it can contain.
    Admit { family: u8, blocks: u8, own: u8 },
    /// Finish the live request at this position.
    Finish(u8),
    /// Preempt the live request at this position (it keeps its content and comes back).
    Preempt(u8),
    /// Admit again the preempted request at this position.
    Readmit(u8),
}

fn lazy_op() -> impl Strategy<Value = LazyOp> {
    prop_oneof![
        (0u8..3, 0u8..5, 0u8..5).prop_map(|(family, blocks, own)| LazyOp::Admit { family, blocks, own }),
        any::<u8>().prop_map(LazyOp::Finish),
        any::<u8>().prop_map(LazyOp::Preempt),
        any::<u8>().prop_map(LazyOp::Readmit),
    ]
}

/// A request in the side-by-side test: its hashes, how many are shareable, whether it was
/// published, and the blocks it holds (equal in both pools).
struct Held {
    hashes: Vec<u64>,
    public: usize,
    published: bool,
    blocks: Vec<BlockId>,
}

/// Admits `r` into both pools; false (and no change) when it does not fit.
fn admit_both(eager: &mut BlockPool, lazy: &mut BlockPool, r: &mut Held) -> Result<bool, TestCaseError> {
    let lookup = if r.published { r.hashes.len() } else { r.public };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let free_a = eager.find_prefix(&r.hashes, &mut a);
    let free_b = lazy.find_prefix(&r.hashes[..lookup], &mut b);
    lazy.count_unhashed_lookups((r.hashes.len() - lookup) as u64);
    prop_assert_eq!(&a, &b, "prefix hits");
    prop_assert_eq!(free_a, free_b);
    let new_blocks = r.hashes.len() - a.len();
    if new_blocks > (eager.num_free() - free_a) as usize {
        return Ok(false);
    }
    for &x in &a {
        eager.touch(x);
        lazy.touch(x);
    }
    r.blocks = a;
    // The new blocks are handed out first, then filled (as a step allocates, then
    // registers what it computed): one at a time in one pool, all at once in the other.
    let hits = r.blocks.len();
    let mut batch = Vec::new();
    prop_assert!(lazy.allocate_many((r.hashes.len() - hits) as u32, &mut batch));
    for &y in &batch {
        prop_assert_eq!(eager.allocate(), Some(y), "allocation order");
    }
    for (j, (&h, &x)) in r.hashes[hits..].iter().zip(&batch).enumerate().map(|(j, p)| (j + hits, p)) {
        eager.register(x, h);
        if r.published || j < r.public {
            lazy.register(x, h);
        } else {
            lazy.mark_private(x);
        }
        r.blocks.push(x);
    }
    Ok(true)
}

proptest! {
    /// Marking private blocks instead of indexing them changes nothing anyone can observe:
    /// allocation order, hits, counters, and the residency of any content another request
    /// (or a preempted request itself) can look up.
    #[test]
    fn marking_private_blocks_is_indistinguishable_from_indexing_them(
        ops in proptest::collection::vec(lazy_op(), 1..150),
        capacity in 1u32..24,
    ) {
        let mut eager = BlockPool::new(capacity, 16, true);
        let mut lazy = BlockPool::new(capacity, 16, true);
        let (mut live, mut preempted): (Vec<Held>, Vec<Held>) = (Vec::new(), Vec::new());
        let mut next_own = 1_000_000u64;
        let mut lookable: Vec<u64> = (0..3u64).flat_map(|f| (0..5u64).map(move |i| f * 1000 + i)).collect();
        for op in ops {
            match op {
                LazyOp::Admit { family, blocks, own } => {
                    let mut hashes: Vec<u64> = (0..u64::from(blocks)).map(|i| u64::from(family) * 1000 + i).collect();
                    for _ in 0..own {
                        hashes.push(next_own);
                        next_own += 1;
                    }
                    let mut r = Held { hashes, public: usize::from(blocks), published: false, blocks: Vec::new() };
                    if admit_both(&mut eager, &mut lazy, &mut r)? {
                        live.push(r);
                    }
                }
                LazyOp::Finish(k) | LazyOp::Preempt(k) => {
                    if live.is_empty() { continue; }
                    let mut r = live.remove(k as usize % live.len());
                    if matches!(op, LazyOp::Preempt(_)) && !r.published {
                        for j in r.public..r.blocks.len() {
                            lazy.index_private(r.blocks[j], r.hashes[j]);
                        }
                        r.published = true;
                        lookable.extend_from_slice(&r.hashes);
                    }
                    for b in r.blocks.drain(..).rev() {
                        eager.release(b);
                        lazy.release(b);
                    }
                    if matches!(op, LazyOp::Preempt(_)) {
                        preempted.push(r);
                    }
                }
                LazyOp::Readmit(k) => {
                    if preempted.is_empty() { continue; }
                    let i = k as usize % preempted.len();
                    if admit_both(&mut eager, &mut lazy, &mut preempted[i])? {
                        live.push(preempted.remove(i));
                    }
                }
            }
            eager.check_invariants();
            lazy.check_invariants();
            prop_assert_eq!(eager.num_free(), lazy.num_free());
            prop_assert_eq!(eager.stats(), lazy.stats());
            for h in &lookable {
                prop_assert_eq!(eager.contains(*h), lazy.contains(*h), "residency of {}", h);
            }
        }
    }
}

proptest! {
    #[test]
    fn pool_matches_naive_model(ops in proptest::collection::vec(op(), 1..150), capacity in 1u32..24) {
        let mut pool = BlockPool::new(capacity, 16, true);
        let mut naive = Naive::new(capacity as usize);
        let mut live: Vec<Vec<(BlockId, usize)>> = Vec::new();
        let universe = universe();
        for op in ops {
            match op {
                Op::Admit { family, blocks, gap } => {
                    let hashes = prompt_hashes(family, blocks, gap);
                    let mut found = Vec::new();
                    let free_hits = pool.find_prefix(&hashes, &mut found);
                    let naive_hits: Vec<usize> = hashes.iter().map_while(|h| naive.find(*h)).collect();
                    prop_assert_eq!(found.len(), naive_hits.len(), "hit length");
                    let naive_free_hits = naive_hits.iter().filter(|i| naive.slots[**i].1 == 0).count();
                    prop_assert_eq!(free_hits as usize, naive_free_hits);
                    let new_blocks = hashes.len() - found.len();
                    let fits = new_blocks <= (pool.num_free() - free_hits) as usize;
                    prop_assert_eq!(fits, new_blocks + naive_free_hits <= naive.free());
                    if !fits {
                        continue; // Admission refused: nothing changes.
                    }
                    let mut held = Vec::new();
                    for (b, i) in found.iter().zip(&naive_hits) {
                        pool.touch(*b);
                        naive.slots[*i].1 += 1;
                        held.push((*b, *i));
                    }
                    for h in &hashes[found.len()..] {
                        let b = pool.allocate().expect("capacity was checked");
                        let i = naive.allocate();
                        pool.register(b, *h);
                        naive.register(i, *h);
                        held.push((b, i));
                    }
                    live.push(held);
                }
                Op::Finish(k) => finish_both(&mut pool, &mut naive, &mut live, k),
            }
            pool.check_invariants();
            prop_assert!(pool.num_used() <= pool.capacity(), "in use exceeds capacity");
            prop_assert_eq!(pool.num_used() as usize, naive.used(), "blocks in use");
            for h in &universe {
                // Reuse never claims evicted content, and nothing resident is forgotten.
                prop_assert_eq!(pool.contains(*h), naive.find(*h).is_some(), "residency of {}", h);
            }
        }
        // Every allocated block is freed.
        for held in live.drain(..) {
            for (b, _) in held.into_iter().rev() { pool.release(b); }
        }
        prop_assert_eq!(pool.num_used(), 0);
        pool.check_invariants();
    }
}

#[test]
fn a_hybrid_prefix_hit_ends_at_its_last_resident_checkpoint() {
    let mut p = BlockPool::new(8, 16, true).with_state(2);
    assert!(p.checkpoints());
    let mut held = Vec::new();
    for h in [10, 11, 12] {
        let b = p.allocate().unwrap();
        p.register(b, h);
        held.push(b);
    }
    // The state after the second block is checkpointed (two blocks, free and cached).
    p.checkpoint(11);
    assert!(p.has_checkpoint(11));
    assert_eq!(p.num_free(), 5);
    for &b in held.iter().rev() {
        p.release(b);
    }
    let mut found = Vec::new();
    assert_eq!(p.find_prefix(&[10, 11, 12], &mut found), 2);
    assert_eq!(found.len(), 2, "the third block's tokens are cached but no state after it");
    assert_eq!(p.match_len(&[10, 11, 12]), 2);
    // Losing one slot of the checkpoint loses the whole hit.
    let mut taken = Vec::new();
    assert!(p.allocate_many(6, &mut taken));
    assert!(!p.has_checkpoint(11));
    assert_eq!(p.find_prefix(&[10, 11, 12], &mut found), 0);
    assert!(found.is_empty());
    p.release_all(&taken);
    p.check_invariants();
}

#[test]
fn without_prefix_caching_a_hybrid_pool_takes_no_checkpoint() {
    let mut p = BlockPool::new(4, 16, false).with_state(1);
    assert!(!p.checkpoints());
    p.checkpoint(5);
    assert!(!p.contains(state_key(5, 0)));
    assert_eq!(p.num_free(), 4);
}

proptest! {
    /// A hybrid model's pool against the naive model: token blocks and state checkpoints
    /// share one LRU order, a hit ends at the last block whose checkpoint is resident in
    /// full, every sequence holds its state's blocks, and a request that ends at a block
    /// boundary leaves a checkpoint there (or refreshes the one already resident).
    #[test]
    fn hybrid_pool_matches_naive_model(
        ops in proptest::collection::vec(op(), 1..150),
        capacity in 1u32..24,
        state in 1u32..3,
    ) {
        let mut pool = BlockPool::new(capacity, 16, true).with_state(state);
        let mut naive = Naive::new(capacity as usize);
        let naive_has = |n: &Naive, h: u64| (0..state).all(|s| n.find(state_key(h, s)).is_some());
        let mut live: Vec<Vec<(BlockId, usize)>> = Vec::new();
        let universe = universe();
        for op in ops {
            match op {
                Op::Admit { family, blocks, gap } => {
                    let hashes = prompt_hashes(family, blocks, gap);
                    let mut found = Vec::new();
                    let free_hits = pool.find_prefix(&hashes, &mut found);
                    let run: Vec<usize> = hashes.iter().map_while(|h| naive.find(*h)).collect();
                    let k = (1..=run.len()).rev().find(|&k| naive_has(&naive, hashes[k - 1])).unwrap_or(0);
                    let naive_hits = &run[..k];
                    prop_assert_eq!(found.len(), k, "hit length");
                    let naive_free_hits = naive_hits.iter().filter(|i| naive.slots[**i].1 == 0).count();
                    prop_assert_eq!(free_hits as usize, naive_free_hits);
                    let new_blocks = hashes.len() - k + state as usize;
                    let fits = new_blocks <= (pool.num_free() - free_hits) as usize;
                    prop_assert_eq!(fits, new_blocks + naive_free_hits <= naive.free());
                    if !fits {
                        continue;
                    }
                    let mut held = Vec::new();
                    for (b, i) in found.iter().zip(naive_hits) {
                        pool.touch(*b);
                        naive.slots[*i].1 += 1;
                        held.push((*b, *i));
                    }
                    for _ in 0..state {
                        held.push((pool.allocate().expect("capacity was checked"), naive.allocate()));
                    }
                    for h in &hashes[k..] {
                        let b = pool.allocate().expect("capacity was checked");
                        let i = naive.allocate();
                        pool.register(b, *h);
                        naive.register(i, *h);
                        held.push((b, i));
                    }
                    // The prompt ends at a block boundary: its state is checkpointed.
                    if let Some(&last) = hashes.last() {
                        pool.checkpoint(last);
                        if naive_has(&naive, last) {
                            for s in 0..state {
                                let i = naive.find(state_key(last, s)).unwrap_or(0);
                                if naive.slots[i].1 == 0 {
                                    naive.slots[i].2 = naive.clock;
                                    naive.clock += 1;
                                }
                            }
                        } else if naive.free() >= state as usize {
                            let copy: Vec<usize> = (0..state).map(|_| naive.allocate()).collect();
                            for (s, &i) in (0..).zip(&copy) {
                                naive.register(i, state_key(last, s));
                            }
                            for &i in &copy {
                                naive.release(i);
                            }
                        }
                    }
                    live.push(held);
                }
                Op::Finish(k) => finish_both(&mut pool, &mut naive, &mut live, k),
            }
            pool.check_invariants();
            prop_assert_eq!(pool.num_used() as usize, naive.used(), "blocks in use");
            for h in &universe {
                prop_assert_eq!(pool.contains(*h), naive.find(*h).is_some(), "residency of {}", h);
                prop_assert_eq!(pool.has_checkpoint(*h), naive_has(&naive, *h), "checkpoint after {}", h);
            }
        }
        for held in live.drain(..) {
            for (b, _) in held.into_iter().rev() { pool.release(b); }
        }
        prop_assert_eq!(pool.num_used(), 0);
    }
}
