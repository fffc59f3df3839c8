//! The storage tier against a naive model: a list in LRU order, searched linearly.

use alloc::vec::Vec;

use proptest::prelude::*;

use super::{G3Spec, G3Stats, G3Store};
use crate::host::transfer;
use crate::units::{SimDur, SimTime};

/// One held block of the naive model.
#[derive(Clone, Debug, PartialEq)]
struct Held {
    key: u64,
    ready_at: SimTime,
    read_until: SimTime,
}

/// The naive store: `held` in LRU order (front evicted first), with each block's writer.
struct Naive {
    spec: G3Spec,
    held: Vec<(Held, u32)>,
    links: Vec<[SimTime; 2]>,
    stats: G3Stats,
}

impl Naive {
    fn link(&mut self, port: u32, dir: usize, bytes: u64, at: SimTime) -> SimTime {
        let start = at.max(self.links[port as usize][dir]);
        let (own, shared) = if dir == 0 {
            (self.spec.read_bytes_per_s, self.spec.shared_read_bytes_per_s)
        } else {
            (self.spec.write_bytes_per_s, self.spec.shared_write_bytes_per_s)
        };
        let rate = shared.map_or(own, |total| {
            let busy =
                (0..self.links.len()).filter(|&p| p != port as usize && self.links[p][dir] > start).count();
            let share = total / (busy + 1) as f64;
            Some(own.map_or(share, |o| o.min(share)))
        });
        let done = start + transfer(bytes, rate);
        self.links[port as usize][dir] = done;
        done
    }

    fn write(&mut self, port: u32, key: u64, at: SimTime) {
        if self.held.iter().any(|(h, _)| h.key == key) {
            return;
        }
        if self.held.len() >= self.spec.capacity_blocks as usize {
            let idle = |(h, _): &(Held, u32)| h.ready_at <= at && h.read_until <= at;
            let Some(victim) = self.held.iter().position(idle) else {
                self.stats.dropped_blocks += 1;
                return;
            };
            self.held.remove(victim);
            self.stats.evicted_blocks += 1;
        }
        let done = self.link(port, 1, self.spec.block_bytes, at);
        let h = Held { key, ready_at: done + self.spec.first_byte, read_until: SimTime::ZERO };
        self.held.push((h, port));
        self.stats.written_blocks += 1;
    }

    fn lookup(&mut self, keys: &[u64], now: SimTime) -> usize {
        let mut found = 0;
        for k in keys {
            self.stats.lookup_probes += 1;
            match self.held.iter().find(|(h, _)| h.key == *k) {
                Some((h, _)) if h.ready_at <= now => found += 1,
                Some(_) => {
                    self.stats.lookup_pending += 1;
                    break;
                }
                None => break,
            }
        }
        self.stats.lookup_hits += found as u64;
        for k in keys[..found].iter().rev() {
            let i = self.held.iter().position(|(h, _)| h.key == *k).expect("found blocks are held");
            let h = self.held.remove(i);
            self.held.push(h);
        }
        found
    }

    fn read(&mut self, port: u32, keys: &[u64], now: SimTime) -> SimTime {
        let done = self.link(port, 0, self.spec.block_bytes * keys.len() as u64, now) + self.spec.first_byte;
        for k in keys {
            let (h, writer) = self.held.iter_mut().find(|(h, _)| h.key == *k).expect("read blocks are held");
            h.read_until = h.read_until.max(done);
            self.stats.cross_worker_read_blocks += u64::from(*writer != port);
        }
        self.stats.read_jobs += 1;
        self.stats.read_blocks += keys.len() as u64;
        done
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Port `port` writes block `key` after `dt` ns.
    Write { port: u32, key: u64, dt: u64 },
    /// After `dt` ns, port `port` looks these keys up and reads what it finds.
    Read { port: u32, keys: Vec<u64>, dt: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u32..3, 0u64..20, 0u64..2_000).prop_map(|(port, key, dt)| Op::Write { port, key, dt }),
        2 => (0u32..3, proptest::collection::vec(0u64..20, 1..6), 0u64..2_000)
            .prop_map(|(port, keys, dt)| Op::Read { port, keys, dt }),
    ]
}

proptest! {
    #[test]
    fn the_store_keeps_what_a_naive_lru_list_keeps(
        capacity in 1u32..10,
        bw in prop_oneof![Just(None), (1u32..4).prop_map(|g| Some(f64::from(g) * 1e6))],
        shared in prop_oneof![Just(None), (1u32..6).prop_map(|g| Some(f64::from(g) * 1e6))],
        first_byte in 0u64..300,
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let spec = G3Spec {
            capacity_blocks: capacity,
            block_bytes: 1000,
            read_bytes_per_s: bw,
            write_bytes_per_s: bw,
            shared_read_bytes_per_s: shared,
            shared_write_bytes_per_s: shared,
            first_byte: SimDur::from_ns(first_byte),
        };
        let mut store = G3Store::new(spec);
        for p in 0..3 {
            prop_assert_eq!(store.attach(), p);
        }
        let mut naive = Naive {
            spec,
            held: Vec::new(),
            links: alloc::vec![[SimTime::ZERO; 2]; 3],
            stats: G3Stats { capacity_blocks: u64::from(capacity), ..G3Stats::default() },
        };
        let mut now = SimTime::ZERO;
        for op in ops {
            match op {
                Op::Write { port, key, dt } => {
                    now += SimDur::from_ns(dt);
                    store.write(port, key, now);
                    naive.write(port, key, now);
                }
                Op::Read { port, keys, dt } => {
                    now += SimDur::from_ns(dt);
                    let n = store.lookup(&keys, now);
                    prop_assert_eq!(n, naive.lookup(&keys, now));
                    if n > 0 {
                        prop_assert_eq!(store.read(port, &keys[..n], now), naive.read(port, &keys[..n], now));
                    }
                }
            }
            prop_assert!(store.blocks.len() <= capacity as usize);
            let order: Vec<Held> = store
                .blocks
                .in_order()
                .map(|e| Held { key: e.key, ready_at: e.ready_at, read_until: e.read_until })
                .collect();
            let want: Vec<Held> = naive.held.iter().map(|(h, _)| h.clone()).collect();
            prop_assert_eq!(order, want);
            let pending = naive.held.iter().filter(|(h, _)| h.ready_at > now).count() as u64;
            prop_assert_eq!(
                store.stats(now),
                G3Stats { resident_blocks: naive.held.len() as u64, pending_blocks: pending, ..naive.stats }
            );
        }
    }
}

#[test]
fn ports_moving_data_at_once_share_the_stores_bandwidth() {
    // 1 MB blocks; each port writes at 1 GB/s, the store takes 1.5 GB/s in all.
    let spec = G3Spec {
        capacity_blocks: 8,
        block_bytes: 1_000_000,
        read_bytes_per_s: Some(1e9),
        write_bytes_per_s: Some(1e9),
        shared_read_bytes_per_s: Some(1.5e9),
        shared_write_bytes_per_s: Some(1.5e9),
        first_byte: SimDur::ZERO,
    };
    let mut s = G3Store::new(spec);
    let (a, b) = (s.attach(), s.attach());
    // Port a alone: its own 1 GB/s, 1 ms.
    s.write(a, 1, SimTime::ZERO);
    assert!(s.holds(1, SimTime::from_ns(1_000_000)));
    // Port b starts while a is busy: half of 1.5 GB/s, 1.333 ms.
    s.write(a, 2, SimTime::from_ns(1_000_000));
    s.write(b, 3, SimTime::from_ns(1_500_000));
    assert!(!s.holds(3, SimTime::from_ns(2_800_000)));
    assert!(s.holds(3, SimTime::from_ns(2_834_000)));
    // A block b wrote and a reads counts as read across workers.
    assert_eq!(s.lookup(&[3, 1, 9], SimTime::from_ns(3_000_000)), 2);
    let _ = s.read(a, &[3, 1], SimTime::from_ns(3_000_000));
    let st = s.stats(SimTime::from_ns(3_000_000));
    assert_eq!((st.cross_worker_read_blocks, st.read_blocks, st.lookup_probes, st.lookup_hits), (1, 2, 3, 2));
}

#[test]
fn blocks_being_read_are_not_evicted() {
    let spec = G3Spec {
        capacity_blocks: 1,
        block_bytes: 1_000_000,
        read_bytes_per_s: Some(1e9),
        write_bytes_per_s: None,
        shared_read_bytes_per_s: None,
        shared_write_bytes_per_s: None,
        first_byte: SimDur::ZERO,
    };
    let mut s = G3Store::new(spec);
    let p = s.attach();
    s.write(p, 1, SimTime::ZERO);
    assert_eq!(s.lookup(&[1], SimTime::ZERO), 1);
    let done = s.read(p, &[1], SimTime::ZERO);
    assert_eq!(done, SimTime::from_ns(1_000_000));
    s.write(p, 2, SimTime::from_ns(500_000));
    assert_eq!(s.stats(done).dropped_blocks, 1);
    s.write(p, 2, done);
    assert!(s.holds(2, done) && !s.holds(1, done));
}
