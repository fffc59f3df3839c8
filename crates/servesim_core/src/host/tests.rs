//! The host tier against a naive model: a list in LRU order, searched linearly.

use alloc::vec::Vec;

use proptest::prelude::*;

use super::{transfer, HostSpec, HostStats, HostTier, HostWrites};
use crate::units::{SimDur, SimTime};

/// One held block of the naive model.
#[derive(Clone, Debug, PartialEq)]
struct Held {
    key: u64,
    ready_at: SimTime,
    readers: u32,
}

/// The naive tier: `held` in LRU order (front evicted first).
struct Naive {
    spec: HostSpec,
    held: Vec<Held>,
    d2h_free: SimTime,
    h2d_free: SimTime,
    stats: HostStats,
}

impl Naive {
    fn offer(&mut self, key: u64, at: SimTime) {
        if self.held.iter().any(|h| h.key == key) {
            return;
        }
        if self.held.len() >= self.spec.capacity_blocks as usize {
            let idle = |h: &Held| h.readers == 0 && h.ready_at <= at;
            let Some(victim) = self.held.iter().position(idle) else {
                self.stats.dropped_blocks += 1;
                return;
            };
            self.held.remove(victim);
            self.stats.evicted_blocks += 1;
        }
        let done = at.max(self.d2h_free) + transfer(self.spec.block_bytes, self.spec.d2h_bytes_per_s);
        self.d2h_free = done;
        self.held.push(Held { key, ready_at: done + self.spec.first_byte, readers: 0 });
        self.stats.written_blocks += 1;
    }

    fn restore(&mut self, keys: &[u64], now: SimTime) -> SimTime {
        for k in keys {
            let i = self.held.iter().position(|h| h.key == *k).expect("restored blocks are held");
            let mut h = self.held.remove(i);
            h.readers += 1;
            self.held.push(h);
        }
        self.copy_back(keys.len(), now, now)
    }

    /// Copies `blocks` blocks to the GPU from `start` for a restore decided at `now`.
    fn copy_back(&mut self, blocks: usize, now: SimTime, start: SimTime) -> SimTime {
        let bytes = self.spec.block_bytes * blocks as u64;
        let link_done = start.max(self.h2d_free) + transfer(bytes, self.spec.h2d_bytes_per_s);
        self.h2d_free = link_done;
        self.stats.restores += 1;
        self.stats.restored_blocks += blocks as u64;
        let done = link_done + self.spec.first_byte;
        self.stats.restore_wait_ns += done.since(now).as_ns();
        done
    }

    fn onboard(&mut self, keys: &[u64], now: SimTime) -> SimTime {
        let mut start = now;
        for k in keys {
            let i = self.held.iter().position(|h| h.key == *k).expect("onboarded blocks are held");
            start = start.max(self.held.remove(i).ready_at);
        }
        self.copy_back(keys.len(), now, start)
    }

    fn touch(&mut self, keys: &[u64]) {
        for k in keys.iter().rev() {
            if let Some(i) = self.held.iter().position(|h| h.key == *k) {
                let h = self.held.remove(i);
                self.held.push(h);
            }
        }
    }

    fn end(&mut self, keys: &[u64]) {
        for k in keys {
            if let Some(h) = self.held.iter_mut().find(|h| h.key == *k) {
                h.readers -= 1;
            }
        }
    }
}

/// The tier's held blocks in LRU order, from its queue.
fn lru_order(t: &HostTier) -> Vec<Held> {
    t.pool
        .borrow()
        .blocks
        .in_order()
        .map(|e| Held { key: e.key, ready_at: e.ready_at, readers: e.readers })
        .collect()
}

#[derive(Clone, Debug)]
enum Op {
    /// Offer block `key` after `dt` ns.
    Offer { key: u64, dt: u64 },
    /// After `dt` ns, restore the held prefix of these candidate keys.
    Restore { keys: Vec<u64>, dt: u64 },
    /// After `dt` ns, move the held prefix of these candidate keys back (TensorRT-LLM).
    Onboard { keys: Vec<u64>, dt: u64 },
    /// End the n-th restore in flight.
    End { n: usize },
    /// Touch these keys.
    Touch { keys: Vec<u64> },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..24, 0u64..3_000).prop_map(|(key, dt)| Op::Offer { key, dt }),
        2 => (proptest::collection::vec(0u64..24, 1..6), 0u64..3_000).prop_map(|(keys, dt)| Op::Restore { keys, dt }),
        // A prompt's block hashes are distinct (each chains its predecessors).
        1 => (proptest::collection::vec(0u64..24, 1..6), 0u64..3_000).prop_map(|(mut keys, dt)| {
            let mut seen = Vec::new();
            keys.retain(|k| if seen.contains(k) { false } else { seen.push(*k); true });
            Op::Onboard { keys, dt }
        }),
        1 => (0usize..4).prop_map(|n| Op::End { n }),
        1 => proptest::collection::vec(0u64..24, 1..6).prop_map(|keys| Op::Touch { keys }),
    ]
}

proptest! {
    #[test]
    fn the_tier_keeps_what_a_naive_lru_list_keeps(
        capacity in 1u32..10,
        d2h in prop_oneof![Just(None), (1u32..4).prop_map(|g| Some(f64::from(g) * 1e6))],
        h2d in prop_oneof![Just(None), (1u32..4).prop_map(|g| Some(f64::from(g) * 1e6))],
        first_byte in 0u64..500,
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let spec = HostSpec {
            capacity_blocks: capacity,
            block_bytes: 1000,
            d2h_bytes_per_s: d2h,
            h2d_bytes_per_s: h2d,
            first_byte: SimDur::from_ns(first_byte),
            writes: HostWrites::AfterCompute,
        };
        let mut tier = HostTier::new(spec);
        let mut naive = Naive {
            spec,
            held: Vec::new(),
            d2h_free: SimTime::ZERO,
            h2d_free: SimTime::ZERO,
            stats: HostStats { capacity_blocks: u64::from(capacity), ..HostStats::default() },
        };
        let mut now = SimTime::ZERO;
        let mut reading: Vec<Vec<u64>> = Vec::new();
        for op in ops {
            match op {
                Op::Offer { key, dt } => {
                    now += SimDur::from_ns(dt);
                    tier.offer(key, now);
                    naive.offer(key, now);
                }
                Op::Restore { keys, dt } => {
                    now += SimDur::from_ns(dt);
                    let n = tier.match_prefix(&keys, now);
                    let want = keys.iter().take_while(|k| naive.held.iter().any(|h| h.key == **k && h.ready_at <= now)).count();
                    prop_assert_eq!(n, want);
                    if n > 0 {
                        let done = tier.begin_restore(&keys[..n], now);
                        prop_assert_eq!(done, naive.restore(&keys[..n], now));
                        reading.push(keys[..n].to_vec());
                    }
                }
                Op::Onboard { keys, dt } => {
                    now += SimDur::from_ns(dt);
                    let n = tier.held_prefix(&keys);
                    let want = keys.iter().take_while(|k| naive.held.iter().any(|h| h.key == **k)).count();
                    prop_assert_eq!(n, want);
                    // The engine that onboards never reads asynchronously; skip blocks a
                    // restore of the other kind holds.
                    if n > 0 && !tier.any_being_read(&keys[..n]) {
                        let done = tier.onboard(&keys[..n], now);
                        prop_assert_eq!(done, naive.onboard(&keys[..n], now));
                        prop_assert!(tier.copies_end() >= done);
                    }
                }
                Op::Touch { keys } => {
                    let busy = keys.iter().any(|k| naive.held.iter().any(|h| h.key == *k && h.readers > 0));
                    prop_assert_eq!(tier.any_being_read(&keys), busy);
                    tier.touch(&keys);
                    naive.touch(&keys);
                }
                Op::End { n } => {
                    if !reading.is_empty() {
                        let keys = reading.remove(n % reading.len());
                        tier.end_restore(&keys);
                        naive.end(&keys);
                    }
                }
            }
            prop_assert!(tier.resident() <= capacity as usize);
            prop_assert_eq!(lru_order(&tier), naive.held.clone());
            prop_assert_eq!(tier.stats(), HostStats { resident_blocks: naive.held.len() as u64, ..naive.stats });
        }
    }
}

#[test]
fn a_restore_waits_for_the_link_and_its_first_byte() {
    // 2 MB blocks over 32 GB/s take 62.5 µs each; the second restore queues behind the first.
    let spec = HostSpec {
        capacity_blocks: 8,
        block_bytes: 2_000_000,
        d2h_bytes_per_s: Some(32e9),
        h2d_bytes_per_s: Some(32e9),
        first_byte: SimDur::from_ns(1_000),
        writes: HostWrites::AfterCompute,
    };
    let mut t = HostTier::new(spec);
    t.offer(1, SimTime::ZERO);
    t.offer(2, SimTime::ZERO);
    // The second write waits for the first: ready at 2 × 62.5 µs + 1 µs.
    assert!(!t.holds(2, SimTime::from_ns(125_000)));
    assert!(t.holds(2, SimTime::from_ns(126_000)));
    let now = SimTime::from_ns(200_000);
    assert_eq!(t.match_prefix(&[1, 2, 3], now), 2);
    assert_eq!(t.begin_restore(&[1, 2], now), SimTime::from_ns(200_000 + 125_000 + 1_000));
    assert_eq!(t.begin_restore(&[1], now), SimTime::from_ns(200_000 + 125_000 + 62_500 + 1_000));
}

#[test]
fn blocks_being_read_are_not_evicted_and_a_full_busy_tier_drops_writes() {
    let spec = HostSpec {
        capacity_blocks: 2,
        block_bytes: 1,
        d2h_bytes_per_s: None,
        h2d_bytes_per_s: None,
        first_byte: SimDur::ZERO,
        writes: HostWrites::AfterCompute,
    };
    let mut t = HostTier::new(spec);
    t.offer(1, SimTime::ZERO);
    t.offer(2, SimTime::ZERO);
    let _ = t.begin_restore(&[1, 2], SimTime::ZERO);
    t.offer(3, SimTime::ZERO);
    assert_eq!((t.stats().dropped_blocks, t.resident()), (1, 2));
    t.end_restore(&[1]);
    t.offer(3, SimTime::ZERO);
    assert!(t.holds(3, SimTime::ZERO) && t.holds(2, SimTime::ZERO) && !t.holds(1, SimTime::ZERO));
}

/// A naive HiCache for unrelated streams, each written longer each time: a stream's held
/// tokens are the runs its writes added, each with its last use; room is made by dropping the
/// least recently used last run of any other stream (the radix tree's leaves).
#[derive(Default)]
struct NaiveTokens {
    runs: alloc::collections::BTreeMap<u64, Vec<(u32, u64)>>,
    clock: u64,
}

impl NaiveTokens {
    fn held(&self) -> u64 {
        self.runs.values().flatten().map(|r| u64::from(r.0)).sum()
    }

    fn have(&self, stream: u64) -> u32 {
        self.runs.get(&stream).map_or(0, |v| v.iter().map(|r| r.0).sum())
    }

    fn touch(&mut self, stream: u64) {
        self.clock += 1;
        let c = self.clock;
        for r in self.runs.get_mut(&stream).into_iter().flatten() {
            r.1 = c;
        }
    }

    fn write(&mut self, stream: u64, len: u32, capacity: u32) -> (u64, u64) {
        let have = self.have(stream);
        self.touch(stream);
        let need = u64::from(len - have);
        if need > u64::from(capacity - have) {
            return (0, 0);
        }
        let mut evicted = 0;
        while u64::from(capacity) - self.held() < need {
            let victim = self
                .runs
                .iter()
                .filter(|(s, v)| **s != stream && !v.is_empty())
                .min_by_key(|(_, v)| v.last().map_or(0, |r| r.1))
                .map(|(s, _)| *s);
            let Some(v) = victim else { break };
            let runs = self.runs.entry(v).or_default();
            evicted += runs.pop().map_or(0, |r| u64::from(r.0));
        }
        self.clock += 1;
        let c = self.clock;
        self.runs.entry(stream).or_default().push((len - have, c));
        (need, evicted)
    }
}

proptest! {
    /// HiCache's tree against the naive model: it never holds more than its capacity, holds
    /// what the naive model holds after every write and load, evicts the same tokens, and its
    /// counters add up (written − evicted = resident).
    #[test]
    fn hicache_keeps_the_streams_a_naive_lru_keeps(
        capacity in 20u32..300,
        ops in proptest::collection::vec((0u64..6, 1u32..80, any::<bool>()), 1..80),
    ) {
        use crate::radix::Piece;
        let spec = HostSpec {
            capacity_blocks: capacity,
            block_bytes: 1000,
            d2h_bytes_per_s: None,
            h2d_bytes_per_s: None,
            first_byte: SimDur::ZERO,
            writes: HostWrites::WriteThrough,
        };
        let mut tier = HostTier::new(spec);
        let mut naive = NaiveTokens::default();
        let (mut written, mut evicted) = (0u64, 0u64);
        for (i, &(stream, grow, load)) in ops.iter().enumerate() {
            let at = SimTime::from_ns(i as u64);
            let have = naive.have(stream);
            if load {
                let key = [Piece { id: stream, start: 0, len: have + grow }];
                prop_assert_eq!(tier.held_tokens(&key, have + grow), have);
                if have > 0 {
                    tier.load_tokens(&key, 0, have, at);
                    naive.touch(stream);
                }
                continue;
            }
            let len = have + grow;
            let key = [Piece { id: stream, start: 0, len }];
            tier.write_tokens(&key, at);
            let (w, e) = naive.write(stream, len, capacity);
            written += w;
            evicted += e;
            prop_assert!(tier.resident() as u64 <= u64::from(capacity));
            prop_assert_eq!(tier.resident() as u64, naive.held());
            for s in 0..6u64 {
                let h = naive.have(s);
                prop_assert_eq!(tier.held_tokens(&[Piece { id: s, start: 0, len: h + 1 }], h + 1), h);
            }
        }
        let st = tier.stats();
        prop_assert_eq!((st.written_blocks, st.evicted_blocks), (written, evicted));
        prop_assert_eq!(st.written_blocks - st.evicted_blocks, st.resident_blocks);
    }
}

/// Two ranks' tiers in one pool of `capacity` blocks of 1,000 bytes, each rank's links at
/// 1 MB/s (1 ms a block), the pool's own host-to-device bandwidth `shared_h2d`.
fn two_ranks_sharing(capacity: u32, shared_h2d: Option<f64>) -> (HostTier, HostTier, super::SharedHostPool) {
    let spec = HostSpec {
        capacity_blocks: capacity,
        block_bytes: 1000,
        d2h_bytes_per_s: Some(1e6),
        h2d_bytes_per_s: Some(1e6),
        first_byte: SimDur::ZERO,
        writes: HostWrites::AfterCompute,
    };
    let pool = super::HostPool::shared(super::HostPoolSpec {
        capacity_blocks: capacity,
        shared_d2h_bytes_per_s: None,
        shared_h2d_bytes_per_s: shared_h2d,
    });
    (HostTier::in_pool(spec, pool.clone()), HostTier::in_pool(spec, pool.clone()), pool)
}

#[test]
fn ranks_sharing_a_pool_find_each_others_blocks_and_write_each_once() {
    let ms = |n: u64| SimTime::from_ns(n * 1_000_000);
    let (mut a, mut b, pool) = two_ranks_sharing(4, None);
    a.offer_all(&[1, 2], ms(0));
    // Rank A's copies end at 1 and 2 ms; rank B finds them from then on.
    assert_eq!(b.match_prefix(&[1, 2], ms(1)), 1);
    assert_eq!(b.match_prefix(&[1, 2], ms(2)), 2);
    // A block the pool holds is not written again by another rank.
    b.offer_all(&[1, 2], ms(2));
    assert_eq!(b.stats().written_blocks, 0);
    assert_eq!(a.stats().written_blocks, 2);
    // Rank B restores what rank A wrote, over its own link (2 ms for two blocks).
    assert_eq!(b.begin_restore(&[1, 2], ms(3)), ms(5));
    // The pool is full after two more blocks; a fifth, once their copies have ended, evicts
    // the least recently used idle one (3): blocks 1 and 2 are being read.
    b.offer_all(&[3, 4], ms(3));
    b.offer(5, ms(9));
    assert_eq!(a.match_prefix(&[1, 2], ms(9)), 2);
    assert_eq!(a.held_prefix(&[3]), 0);
    assert_eq!(a.held_prefix(&[4, 5]), 2);
    // Size and contents are the pool's, counted once, not per rank.
    assert_eq!((a.stats().capacity_blocks, a.stats().resident_blocks), (0, 0));
    let s = pool.borrow().stats();
    assert_eq!((s.capacity_blocks, s.resident_blocks, s.ports, s.cross_rank_restored_blocks), (4, 4, 2, 2));
    assert!(a.shared_pool().is_some() && HostTier::new(*a.spec()).shared_pool().is_none());
}

#[test]
fn ranks_restoring_at_once_split_the_pools_bandwidth() {
    let us = |n: u64| SimTime::from_ns(n * 1_000);
    // Each rank holds one block of its own, written by 1 ms.
    let run = |shared_h2d| {
        let (mut a, mut b, _pool) = two_ranks_sharing(4, shared_h2d);
        a.offer(1, SimTime::ZERO);
        b.offer(2, SimTime::ZERO);
        let first = a.begin_restore(&[1], us(1_000));
        let second = b.begin_restore(&[2], us(1_500));
        (first, second)
    };
    // Without a pool cap each rank's own 1 MB/s link sets the pace.
    assert_eq!(run(None), (us(2_000), us(2_500)));
    // With 1 MB/s in all, A's restore has it alone (1 ms); B's starts while A's runs and gets
    // half (2 ms), fixed at its start.
    assert_eq!(run(Some(1e6)), (us(2_000), us(3_500)));
}
