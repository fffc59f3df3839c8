use super::*;
use crate::kv::BlockPool;
use alloc::vec;
use proptest::prelude::*;

fn shared(o: DemandOracle) -> SharedOracle {
    Rc::new(RefCell::new(o))
}

#[test]
fn the_next_demand_is_the_first_request_whose_demand_has_not_ended() {
    let mut o = DemandOracle::new([vec![1, 2], vec![2, 3], vec![1], vec![2]]);
    assert_eq!((o.requests(), o.blocks()), (4, 3));
    assert_eq!(
        [o.next_demand(1), o.next_demand(2), o.next_demand(3), o.next_demand(9)],
        [0, 0, 1, NO_DEMAND]
    );
    // Out of order: request 1 ends first, then 0.
    o.retire(1);
    assert_eq!([o.next_demand(1), o.next_demand(2), o.next_demand(3)], [0, 0, NO_DEMAND]);
    o.retire(0);
    assert_eq!([o.next_demand(1), o.next_demand(2)], [2, 3]);
    o.retire(0);
    o.retire(17);
    assert_eq!(o.retired(), 2);
    o.retire(2);
    o.retire(3);
    assert_eq!([o.next_demand(1), o.next_demand(2)], [NO_DEMAND, NO_DEMAND]);
}

#[test]
fn a_pool_evicts_the_block_needed_last_and_lru_breaks_ties() {
    // Requests: 0 and 1 compute blocks 10, 20, 30; 2 asks for 30, 3 for 10; 20 is never
    // asked for again.
    let oracle = shared(DemandOracle::new([vec![10, 20], vec![30], vec![30], vec![10]]));
    let mut p = BlockPool::new(3, 16, true).with_belady(oracle.clone());
    let blocks: Vec<BlockId> = (0..3).map(|_| p.allocate().unwrap()).collect();
    for (b, h) in blocks.iter().zip([10, 20, 30]) {
        p.register(*b, h);
    }
    oracle.borrow_mut().retire(0);
    oracle.borrow_mut().retire(1);
    p.release_all(&blocks);
    // 20 (no demand) goes first, then 10 (request 3) before 30 (request 2).
    assert_eq!(p.allocate(), Some(blocks[1]));
    assert_eq!(p.allocate(), Some(blocks[0]));
    assert!(p.contains(30) && !p.contains(10));
    p.check_invariants();
}

#[test]
fn a_free_block_is_re_ranked_when_a_request_on_another_pool_ends_its_demand() {
    // Block 10 is asked for by request 1 (soon) and 3; block 20 by request 2.
    let oracle = shared(DemandOracle::new([vec![10, 20], vec![10], vec![20], vec![10]]));
    let mut a = BlockPool::new(2, 16, true).with_belady(oracle.clone());
    let mut b = BlockPool::new(1, 16, true).with_belady(oracle.clone());
    let held: Vec<BlockId> = (0..2).map(|_| a.allocate().unwrap()).collect();
    a.register(held[0], 10);
    a.register(held[1], 20);
    a.retire_demand(0);
    a.release_all(&held);
    // Request 1 runs on the other pool: 10's next demand moves from 1 to 3, past 20's.
    let x = b.allocate().unwrap();
    b.register(x, 10);
    b.retire_demand(1);
    assert_eq!(a.allocate(), Some(held[0]), "10 is now needed after 20");
    assert!(a.contains(20));
    a.check_invariants();
    b.check_invariants();
}

/// Operations the random test applies to the pool and to the naive model.
#[derive(Clone, Debug)]
enum Op {
    /// Admit the next request of the run (its first prefill ends its demand).
    Admit,
    /// Refuse the next request of the run (its demand ends unserved).
    Refuse,
    /// Finish the live request at this position (modulo the live count).
    Finish(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![4 => Just(Op::Admit), 1 => Just(Op::Refuse), 4 => any::<u8>().prop_map(Op::Finish)]
}

/// A request's prompt: `blocks` leading blocks of family `family`, skipping block `gap` so
/// later blocks may be resident while an earlier one is not.
fn prompt() -> impl Strategy<Value = Vec<u64>> {
    (0u64..3, 1u64..6, 0u64..8).prop_map(|(family, blocks, gap)| {
        (0..=blocks).filter(|i| *i != gap).take(blocks as usize).map(|i| family * 1000 + i).collect()
    })
}

/// Naive model: slots with optional content, reference counts and a "freed at" clock; the
/// next demand is a scan of every request, and eviction a scan of every free slot.
struct Naive {
    slots: Vec<(Option<u64>, u32, u64)>,
    clock: u64,
    prompts: Vec<Vec<u64>>,
    ended: Vec<bool>,
}

impl Naive {
    fn next_demand(&self, h: Option<u64>) -> u32 {
        let Some(h) = h else { return NO_DEMAND };
        (0..self.prompts.len())
            .find(|&s| !self.ended[s] && self.prompts[s].contains(&h))
            .map_or(NO_DEMAND, |s| s as u32)
    }
    fn find(&self, h: u64) -> Option<usize> {
        self.slots.iter().position(|s| s.0 == Some(h))
    }
    fn allocate(&mut self) -> usize {
        let (i, _) = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.1 == 0)
            .min_by_key(|(_, s)| (NO_DEMAND - self.next_demand(s.0), s.2))
            .unwrap();
        self.slots[i] = (None, 1, 0);
        i
    }
    fn release(&mut self, i: usize) {
        self.slots[i].1 -= 1;
        if self.slots[i].1 == 0 {
            self.slots[i].2 = self.clock;
            self.clock += 1;
        }
    }
}

proptest! {
    #[test]
    fn belady_pool_matches_naive_model(
        prompts in proptest::collection::vec(prompt(), 1..40),
        ops in proptest::collection::vec(op(), 1..120),
        capacity in 1u32..16,
    ) {
        let oracle = shared(DemandOracle::new(&prompts));
        let mut pool = BlockPool::new(capacity, 16, true).with_belady(oracle.clone());
        let mut naive = Naive {
            slots: (0..u64::from(capacity)).map(|i| (None, 0, i)).collect(),
            clock: u64::from(capacity),
            ended: vec![false; prompts.len()],
            prompts: prompts.clone(),
        };
        let mut next = 0usize;
        let mut live: Vec<Vec<BlockId>> = Vec::new();
        for op in ops {
            match op {
                Op::Admit | Op::Refuse if next == prompts.len() => continue,
                Op::Refuse => {
                    oracle.borrow_mut().retire(next as u32);
                    naive.ended[next] = true;
                    next += 1;
                }
                Op::Admit => {
                    let hashes = &prompts[next];
                    let mut found = Vec::new();
                    let free_hits = pool.find_prefix(hashes, &mut found);
                    let naive_hits: Vec<usize> = hashes.iter().map_while(|h| naive.find(*h)).collect();
                    prop_assert_eq!(found.iter().map(|b| *b as usize).collect::<Vec<_>>(), naive_hits.clone());
                    let new_blocks = hashes.len() - found.len();
                    if new_blocks > (pool.num_free() - free_hits) as usize {
                        continue; // Refused for now: it stays next in line.
                    }
                    let mut held = Vec::new();
                    for &b in &found {
                        pool.touch(b);
                        naive.slots[b as usize].1 += 1;
                        held.push(b);
                    }
                    for &h in &hashes[found.len()..] {
                        let b = pool.allocate().expect("capacity was checked");
                        prop_assert_eq!(b as usize, naive.allocate(), "eviction choice");
                        pool.register(b, h);
                        if naive.find(h).is_none() {
                            naive.slots[b as usize].0 = Some(h);
                        }
                        held.push(b);
                    }
                    pool.retire_demand(next as u32);
                    naive.ended[next] = true;
                    next += 1;
                    live.push(held);
                }
                Op::Finish(k) => {
                    if live.is_empty() { continue; }
                    let held = live.remove(k as usize % live.len());
                    pool.release_all(&held);
                    for b in held.into_iter().rev() {
                        naive.release(b as usize);
                    }
                }
            }
            pool.check_invariants();
            for h in prompts.iter().flatten() {
                prop_assert_eq!(pool.contains(*h), naive.find(*h).is_some(), "residency of {}", h);
            }
        }
    }
}
