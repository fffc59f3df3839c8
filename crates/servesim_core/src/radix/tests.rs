//! The radix cache against naive models: matches, splits, eviction order and its log,
//! hit counts, hybrid models' kept states.

use super::*;
use alloc::vec;
use proptest::prelude::*;

fn key(parts: &[(u64, u32)]) -> Vec<Piece> {
    parts.iter().map(|(id, len)| Piece { id: *id, start: 0, len: *len }).collect()
}

#[test]
fn insert_match_split_and_evict() {
    let mut c = RadixCache::new(1000, true);
    assert!(c.alloc(150));
    let (a, dup) = c.insert(&key(&[(1, 100), (2, 50)]));
    assert_eq!(dup, 0);
    assert_eq!(c.tree_tokens(), 150);
    assert_eq!(c.free_tokens(), 850);
    // A request sharing 120 tokens (stream 1 and 20 tokens of stream 2).
    let (m, n) = c.match_prefix(&key(&[(1, 100), (2, 20), (3, 5)]), 1000);
    assert_eq!(m, 120);
    assert_ne!(n, a, "the node was split at the match");
    c.lock(n);
    c.check_invariants();
    assert_eq!(c.available_tokens(), 850 + 30);
    c.evict(10_000);
    assert_eq!(c.tree_tokens(), 120, "only the locked path survives");
    c.unlock(n);
    c.evict(10_000);
    assert_eq!(c.tree_tokens(), 0);
    c.check_invariants();
}

#[test]
fn hits_count_the_inserts_covering_a_node_and_survive_a_split() {
    let mut c = RadixCache::new(1000, true);
    let a = key(&[(1, 100), (2, 50)]);
    assert!(c.alloc(150));
    c.insert(&a);
    c.count_hits(&a);
    assert_eq!((c.hot_prefix(&a, 1), c.hot_prefix(&a, 2)), (150, 0));
    // A second sequence shares 120 tokens: the insert splits the node at 120, and both
    // halves keep its hit; then the shared part has two, the new 30 tokens one.
    let b = key(&[(1, 100), (2, 20), (3, 30)]);
    assert!(c.alloc(30));
    c.insert(&b);
    c.count_hits(&b);
    assert_eq!((c.hot_prefix(&b, 2), c.hot_prefix(&b, 1)), (120, 150));
    assert_eq!(c.hot_prefix(&a, 2), 120, "A's last 30 tokens were covered once");
    c.check_invariants();
}

#[test]
fn logged_evictions_give_each_evicted_node_its_whole_path() {
    let mut c = RadixCache::new(1000, true);
    assert!(c.take_evicted().is_empty(), "nothing is logged unless asked");
    c.log_evictions();
    // Two sequences share 100 tokens: a node of 100 with two leaves of 50 and 30.
    let (a, b) = (key(&[(1, 100), (2, 50)]), key(&[(1, 100), (3, 30)]));
    assert!(c.alloc(150));
    c.insert(&a);
    assert!(c.alloc(30));
    c.insert(&b);
    // Touch B so that A's leaf is the least recently used.
    c.match_prefix(&b, 130);
    c.evict(10);
    assert_eq!(c.take_evicted(), vec![a.clone()], "A's leaf, named by its path from the root");
    assert!(c.take_evicted().is_empty(), "taken once");
    c.evict(10_000);
    // B's leaf goes, then the shared node it leaves childless.
    assert_eq!(c.take_evicted(), vec![b, key(&[(1, 100)])]);
    c.check_invariants();
}

#[test]
fn match_respects_the_limit_and_disabled_cache() {
    let mut c = RadixCache::new(100, true);
    c.alloc(40);
    c.insert(&key(&[(1, 40)]));
    assert_eq!(c.peek(&key(&[(1, 40)]), 39), 39);
    let mut off = RadixCache::new(100, false);
    off.alloc(40);
    off.insert(&key(&[(1, 40)]));
    assert_eq!(off.peek(&key(&[(1, 40)]), 40), 0);
}

#[test]
fn a_hybrid_cache_resumes_only_where_a_finished_sequence_left_its_state() {
    let mut c = RadixCache::new(1000, true).with_states();
    c.alloc(150);
    let (done, _) = c.insert(&key(&[(1, 100), (2, 50)]));
    // Cached tokens without a state are no use to a hybrid model.
    assert_eq!(c.peek(&key(&[(1, 100), (2, 50), (3, 9)]), 1000), 0);
    assert_eq!(c.match_prefix(&key(&[(1, 100), (2, 50), (3, 9)]), 1000).0, 0);
    c.keep_state(done);
    // The whole sequence resumes (its next turn); a prompt sharing part of it does not.
    assert_eq!(c.peek(&key(&[(1, 100), (2, 50), (3, 9)]), 1000), 150);
    let (m, n) = c.match_prefix(&key(&[(1, 100), (2, 50), (3, 9)]), 1000);
    assert_eq!((m, n), (150, done));
    assert_eq!(c.peek(&key(&[(1, 100), (4, 9)]), 1000), 0);
    assert_eq!(c.match_prefix(&key(&[(1, 100), (4, 9)]), 1000).0, 0);
    // Inserting still shares the tokens, and the state stays at its node's end.
    c.alloc(20);
    let (_, dup) = c.insert(&key(&[(1, 100), (5, 20)]));
    assert_eq!(dup, 100);
    assert_eq!(c.peek(&key(&[(1, 100), (2, 50)]), 1000), 150);
    // Evicting the node drops its state.
    c.evict(1000);
    assert_eq!(c.peek(&key(&[(1, 100), (2, 50)]), 1000), 0);
    c.check_invariants();
}

/// Kept states share the state pool with the running requests: making room for them
/// drops the least recently used states of unlocked nodes (their KV stays), never a locked
/// node's, and says so when the locked ones alone are too many.
#[test]
fn kept_states_share_the_state_pool_with_running_requests() {
    let mut c = RadixCache::new(1000, true).with_states();
    c.limit_states(4);
    let mut ends = Vec::new();
    for s in 1..=3u64 {
        c.alloc(100);
        let (n, _) = c.insert(&key(&[(s, 100)]));
        c.keep_state(n);
        c.keep_state(n);
        ends.push(n);
    }
    assert_eq!(c.kept_states(), 3);
    // Sequence 1 is used again: sequence 2's state is now the least recently used.
    let (m, n1) = c.match_prefix(&key(&[(1, 100), (9, 5)]), 1000);
    assert_eq!((m, n1), (100, ends[0]));
    c.lock(n1);
    assert!(c.make_state_room(1), "one running request leaves room for all three");
    assert!(c.make_state_room(2));
    assert_eq!((c.kept_states(), c.dropped_states()), (2, 1));
    assert_eq!(c.peek(&key(&[(2, 100), (9, 5)]), 1000), 0, "sequence 2 lost its state");
    assert_eq!(c.tree_tokens(), 300, "its KV stays");
    assert_eq!(c.peek(&key(&[(3, 100), (9, 5)]), 1000), 100);
    // Sequence 3 goes next; sequence 1's node is locked, so four running requests find
    // no room, and its state stays.
    assert!(!c.make_state_room(4));
    assert_eq!(c.kept_states(), 1);
    assert_eq!(c.peek(&key(&[(1, 100), (9, 5)]), 1000), 100);
    c.unlock(n1);
    assert!(c.make_state_room(4));
    assert_eq!((c.kept_states(), c.dropped_states()), (0, 3));
    c.check_invariants();
    // Without a bound nothing is dropped.
    let mut free = RadixCache::new(1000, true).with_states();
    free.alloc(100);
    let (n, _) = free.insert(&key(&[(1, 100)]));
    free.keep_state(n);
    assert!(free.make_state_room(1000));
    assert_eq!(free.kept_states(), 1);
}

#[test]
fn alloc_fails_cleanly_when_everything_is_locked() {
    let mut c = RadixCache::new(100, true);
    assert!(c.alloc(80));
    let (n, _) = c.insert(&key(&[(1, 80)]));
    c.lock(n);
    assert!(!c.alloc(30));
    assert!(c.alloc(20));
    c.check_invariants();
}

/// Naive model: a list of cached token sequences (as (stream, offset) lists), each with a
/// lock count and last use; eviction removes the least recently used unlocked sequence
/// that is not a proper prefix of another. Sizes and matches must agree.
#[derive(Clone, Debug)]
enum Op {
    Insert(u8, u8, u8),
    Match(u8, u8, u8),
    Unlock(u8),
    Evict(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, 0u8..4, 1u8..40).prop_map(|(a, b, n)| Op::Insert(a, b, n)),
        (0u8..4, 0u8..4, 1u8..40).prop_map(|(a, b, n)| Op::Match(a, b, n)),
        any::<u8>().prop_map(Op::Unlock),
        (1u8..60).prop_map(Op::Evict),
    ]
}

fn tokens(a: u8, b: u8, n: u8) -> Vec<(u64, u32)> {
    // Prefix family a (30 tokens of stream a), then n tokens of stream 10 + b.
    let mut t: Vec<(u64, u32)> = (0..30).map(|i| (u64::from(a), i)).collect();
    t.extend((0..u32::from(n)).map(|i| (10 + u64::from(b), i)));
    t
}

fn as_key(a: u8, b: u8, n: u8) -> Vec<Piece> {
    key(&[(u64::from(a), 30), (10 + u64::from(b), u32::from(n))])
}

proptest! {
    #[test]
    fn radix_matches_naive_token_set(ops in proptest::collection::vec(op(), 1..80)) {
        let mut c = RadixCache::new(400, true);
        // Naive: the set of cached token-prefixes is the union of inserted sequences'
        // prefixes; we track only what must hold regardless of eviction order:
        // a match never exceeds what was inserted, locked prefixes always match fully,
        // and token accounting stays within capacity.
        let mut locks: Vec<(NodeId, Vec<(u64, u32)>)> = Vec::new();
        let mut inserted: Vec<Vec<(u64, u32)>> = Vec::new();
        for op in ops {
            match op {
                Op::Insert(a, b, n) => {
                    let t = tokens(a, b, n);
                    #[allow(clippy::cast_possible_truncation)]
                    let len = t.len() as u64;
                    if c.alloc(len) {
                        let (_, dup) = c.insert(&as_key(a, b, n));
                        c.free_private(u64::from(dup));
                        inserted.push(t);
                    }
                }
                Op::Match(a, b, n) => {
                    let t = tokens(a, b, n);
                    let k = as_key(a, b, n);
                    #[allow(clippy::cast_possible_truncation)]
                    let (m, node) = c.match_prefix(&k, t.len() as u32);
                    // Naive upper bound: the longest common prefix with anything inserted.
                    let best = inserted.iter().map(|s| s.iter().zip(&t).take_while(|(x, y)| x == y).count()).max().unwrap_or(0);
                    prop_assert!(m as usize <= best, "matched {} > naive {}", m, best);
                    prop_assert_eq!(c.peek(&k, m), m);
                    if m > 0 {
                        c.lock(node);
                        locks.push((node, t[..m as usize].to_vec()));
                    }
                }
                Op::Unlock(i) => {
                    if !locks.is_empty() {
                        let (n, _) = locks.remove(i as usize % locks.len());
                        c.unlock(n);
                    }
                }
                Op::Evict(n) => c.evict(u64::from(n)),
            }
            c.check_invariants();
            // Every locked prefix is still fully cached (reuse never claims evicted KV).
            for (_, t) in &locks {
                let k: Vec<Piece> = {
                    let mut v: Vec<Piece> = Vec::new();
                    for (id, off) in t {
                        match v.last_mut() {
                            Some(p) if p.id == *id && p.start + p.len == *off => p.len += 1,
                            _ => v.push(Piece { id: *id, start: *off, len: 1 }),
                        }
                    }
                    v
                };
                #[allow(clippy::cast_possible_truncation)]
                let want = t.len() as u32;
                prop_assert_eq!(c.peek(&k, want), want);
            }
        }
        for (n, _) in locks.drain(..) {
            c.unlock(n);
        }
        c.evict(u64::MAX / 2);
        prop_assert_eq!(c.tree_tokens(), 0);
        c.check_invariants();
        let _ = vec![0u8];
    }

    /// A hybrid cache with a bounded state pool: inserted sequences keep their state,
    /// `Unlock` and `Evict` as above, and `Evict` with a small count makes room for that
    /// many running requests instead. A match is always the length of a sequence that
    /// kept a state, locked matches stay resumable, and after making room the states
    /// fit beside the running requests unless the locked ones alone do not.
    #[test]
    fn hybrid_states_stay_within_the_pool(ops in proptest::collection::vec(op(), 1..80), slots in 1u32..6) {
        let mut c = RadixCache::new(400, true).with_states();
        c.limit_states(slots);
        let mut locks: Vec<(NodeId, Vec<Piece>, u32)> = Vec::new();
        let mut kept_lens: Vec<(Vec<Piece>, u32)> = Vec::new();
        for op in ops {
            match op {
                Op::Insert(a, b, n) => {
                    let k = as_key(a, b, n);
                    let len = 30 + u32::from(n);
                    if c.alloc(u64::from(len)) {
                        let (node, dup) = c.insert(&k);
                        c.free_private(u64::from(dup));
                        c.keep_state(node);
                        kept_lens.push((k, len));
                    }
                }
                Op::Match(a, b, n) => {
                    let k = as_key(a, b, n);
                    let (m, node) = c.match_prefix(&k, 30 + u32::from(n));
                    let possible = m == 0 || kept_lens.iter().any(|(s, len)| {
                        *len == m && common_tokens(s, &k, m) == m
                    });
                    prop_assert!(possible, "matched {} tokens: no kept sequence is that prefix", m);
                    if m > 0 {
                        c.lock(node);
                        locks.push((node, k, m));
                    }
                }
                Op::Unlock(i) => {
                    if !locks.is_empty() {
                        let (n, _, _) = locks.remove(i as usize % locks.len());
                        c.unlock(n);
                    }
                }
                Op::Evict(n) if n < 8 => {
                    let running = u32::from(n);
                    let ok = c.make_state_room(running);
                    let room = slots.saturating_sub(running) as usize;
                    if ok {
                        prop_assert!(c.kept_states() <= room);
                    } else {
                        prop_assert!(c.kept_states() > room);
                    }
                }
                Op::Evict(n) => c.evict(u64::from(n)),
            }
            c.check_invariants();
            for (_, k, m) in &locks {
                prop_assert_eq!(c.peek(k, *m), *m, "a locked match stays resumable");
            }
        }
    }
}
