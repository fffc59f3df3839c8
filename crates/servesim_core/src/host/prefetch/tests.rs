//! HiCache's storage tier, with hand-checked times: what is backed up, when a prefetch may
//! stop under each policy, and what has arrived by then.

use alloc::rc::Rc;
use core::cell::RefCell;

use super::{PrefetchGate, PrefetchPolicy, StoragePrefetch};
use crate::host::{G3Spec, G3Store, HostSpec, HostTier, HostWrites};
use crate::radix::Piece;
use crate::units::{SimDur, SimTime};

fn ms(t: u64) -> SimTime {
    SimTime::from_ns(t * 1_000_000)
}

/// Two workers' HiCache tiers (10,000 tokens of 1 kB each, 1 µs a token to host memory)
/// sharing one store whose pages of `page` tokens read in `page_ms` each.
fn pair(page: u32, page_ms: f64, policy: PrefetchPolicy) -> (HostTier, HostTier) {
    pair_sized(10_000, page, page_ms, policy)
}

/// [`pair`] with host memory of `host_tokens` a worker.
fn pair_sized(host_tokens: u32, page: u32, page_ms: f64, policy: PrefetchPolicy) -> (HostTier, HostTier) {
    let host = HostSpec {
        capacity_blocks: host_tokens,
        block_bytes: 1000,
        d2h_bytes_per_s: Some(1e9),
        h2d_bytes_per_s: None,
        first_byte: SimDur::ZERO,
        writes: HostWrites::WriteThrough,
    };
    let page_bytes = 1000 * u64::from(page);
    #[allow(clippy::cast_precision_loss)]
    let read = page_bytes as f64 / (page_ms / 1e3);
    let store = Rc::new(RefCell::new(G3Store::new(G3Spec {
        capacity_blocks: 1000,
        block_bytes: page_bytes,
        read_bytes_per_s: Some(read),
        write_bytes_per_s: None,
        shared_read_bytes_per_s: None,
        shared_write_bytes_per_s: None,
        first_byte: SimDur::ZERO,
    })));
    let cfg = StoragePrefetch { policy, threshold_tokens: 32, page_tokens: page };
    let tier = || HostTier::new(host).with_prefetch(cfg).with_g3(store.clone(), true);
    (tier(), tier())
}

fn stream(id: u64, len: u32) -> [Piece; 1] {
    [Piece { id, start: 0, len }]
}

#[test]
fn a_prompt_another_worker_backed_up_is_read_in_and_waited_for_whole() {
    let (mut a, mut b) = pair(16, 1.0, PrefetchPolicy::WaitComplete);
    // Worker A's 100 tokens reach host memory at 100 µs; their 6 whole pages are backed up.
    a.write_tokens(&stream(7, 100), SimTime::ZERO);
    let g3 = a.g3().map(|(s, _)| s.borrow().stats(ms(1))).unwrap_or_default();
    assert_eq!(g3.written_blocks, 6);
    // The prompt (those 100 tokens and 50 more) reaches worker B at 1 ms: of its 9 whole
    // pages storage holds 6, read in 1 ms each.
    let key = stream(7, 150);
    assert!(b.unseen(0));
    b.arrive(0, &key, 0, 1000, ms(1));
    assert!(!b.unseen(0));
    assert_eq!(b.prefetch_gate(0, &key, ms(3)), PrefetchGate::Wait { wake: Some(ms(7)) });
    assert_eq!(b.prefetch_gate(0, &key, ms(4)), PrefetchGate::Wait { wake: None }, "woken once");
    assert_eq!(b.held_tokens(&key, 150), 0);
    assert_eq!(b.prefetch_gate(0, &key, ms(7)), PrefetchGate::Go);
    assert_eq!(b.held_tokens(&key, 150), 96);
    let st = b.stats();
    assert_eq!((st.prefetches, st.prefetched_tokens, st.prefetch_cut_short), (1, 96, 0));
    // The prefetch is over: the request goes on at once from now on.
    assert_eq!(b.prefetch_gate(0, &key, ms(8)), PrefetchGate::Go);
}

#[test]
fn best_effort_keeps_the_whole_batches_that_have_arrived() {
    // Pages of one token, 1 ms each: 300 of them take from 1 ms to 301 ms. At 200 ms 199
    // have arrived, of which the first batch of 128 is whole.
    let (mut a, mut b) = pair(1, 1.0, PrefetchPolicy::BestEffort);
    a.write_tokens(&stream(3, 300), SimTime::ZERO);
    let key = stream(3, 300);
    b.arrive(0, &key, 0, 1000, ms(1));
    assert_eq!(b.prefetch_gate(0, &key, ms(200)), PrefetchGate::Go);
    assert_eq!(b.held_tokens(&key, 300), 128);
    let st = b.stats();
    assert_eq!((st.prefetched_tokens, st.prefetch_cut_short), (128, 1));
}

#[test]
fn timeout_stops_a_slow_prefetch_at_its_allowance() {
    // 6 pages at 10 ms each end at 61 ms; the allowance is 2 ms + 1 ms a page, so the
    // prefetch may stop just past 9 ms, when no batch has arrived.
    let policy =
        PrefetchPolicy::Timeout { base: SimDur::from_ns(2_000_000), per_page: SimDur::from_ns(1_000_000) };
    let (mut a, mut b) = pair(16, 10.0, policy);
    a.write_tokens(&stream(7, 100), SimTime::ZERO);
    let key = stream(7, 150);
    b.arrive(0, &key, 0, 1000, ms(1));
    assert_eq!(
        b.prefetch_gate(0, &key, ms(5)),
        PrefetchGate::Wait { wake: Some(ms(9) + SimDur::from_ns(1)) }
    );
    assert_eq!(b.prefetch_gate(0, &key, ms(10)), PrefetchGate::Go);
    assert_eq!(b.held_tokens(&key, 150), 0);
    assert_eq!(b.stats().prefetch_cut_short, 1);
}

#[test]
fn too_little_stored_or_asked_for_starts_no_prefetch() {
    let (mut a, mut b) = pair(16, 1.0, PrefetchPolicy::WaitComplete);
    a.write_tokens(&stream(7, 100), SimTime::ZERO);
    // A stream storage lacks: looked up, nothing found, no prefetch.
    b.arrive(0, &stream(8, 150), 0, 1000, ms(1));
    // Host and GPU hold all but 20 tokens of this one: not worth asking for.
    b.arrive(1, &stream(7, 150), 130, 1000, ms(1));
    let st = b.stats();
    assert_eq!((st.prefetches, st.prefetch_revoked), (0, 1));
    assert_eq!(b.prefetch_gate(0, &stream(8, 150), ms(1)), PrefetchGate::Go);
    // Prefetches may hold 80% of what host memory keeps beside the GPU's own tokens: none
    // when the GPU's cache is as large as host memory.
    b.arrive(2, &stream(7, 150), 0, 10_000, ms(1));
    assert_eq!(b.stats().prefetches, 0);
}

#[test]
fn the_prefix_a_prefetch_continues_is_not_evicted_to_make_room_for_it() {
    // Worker B's host memory (200 tokens) holds the first 100 tokens of a prompt whose 260
    // storage holds (16 pages of 16). Fetching the rest from token 96 needs 160 tokens of
    // room: only by evicting that prefix, which the prefetch keeps (`protect_host`), so
    // nothing is fetched and the prefix stays.
    let (mut a, mut b) = pair_sized(400, 16, 1.0, PrefetchPolicy::WaitComplete);
    a.write_tokens(&stream(7, 260), SimTime::ZERO);
    b.write_tokens(&stream(7, 100), SimTime::ZERO);
    let key = stream(7, 260);
    let (mut a2, mut small) = pair_sized(200, 16, 1.0, PrefetchPolicy::WaitComplete);
    a2.write_tokens(&key, SimTime::ZERO);
    small.write_tokens(&stream(7, 100), SimTime::ZERO);
    small.arrive(0, &key, 100, 0, ms(1));
    assert_eq!((small.stats().prefetches, small.held_tokens(&key, 260)), (0, 100));
    // With room beside it (400 tokens) pages 6 to 15 are fetched: tokens 96 to 255, of
    // which the 156 past the held prefix are new.
    b.arrive(0, &key, 100, 0, ms(1));
    assert_eq!(b.prefetch_gate(0, &key, ms(20)), PrefetchGate::Go);
    assert_eq!((b.stats().prefetched_tokens, b.held_tokens(&key, 260)), (156, 256));
}
