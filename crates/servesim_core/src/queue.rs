//! The event queue: a binary heap ordered by `(time, key, insertion sequence)`.
//!
//! With the default key (0) equal times pop in insertion order (FIFO): no event-type
//! priorities, so the order of same-time events is defined in exactly one place. The
//! simulation pushes with `key = (push time, push phase)`, which orders exactly like
//! insertion when every push happens at its real time, and lets a fast-forwarded run push
//! an event with the virtual push time of the step that would have pushed it.

use alloc::collections::BinaryHeap;
use core::cmp::Ordering;

use crate::units::SimTime;

struct Entry<E> {
    time: SimTime,
    key: u128,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.key == other.key && self.seq == other.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    // Reversed: BinaryHeap is a max-heap and we want the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .time
            .cmp(&self.time)
            .then_with(|| other.key.cmp(&self.key))
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// The key of an event pushed at `pushed` in phase `phase` (0: while handling events;
/// 1 + w: worker w's step scheduled when the instant settles).
#[must_use]
pub fn event_key(pushed: SimTime, phase: u32) -> u128 {
    (u128::from(pushed.as_ns()) << 32) | u128::from(phase)
}

/// A min-queue of events keyed by `(time, seq)`.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    #[must_use]
    pub fn new() -> Self {
        EventQueue { heap: BinaryHeap::new(), next_seq: 0 }
    }

    /// Schedules `event` at `time`, after every event already scheduled at that time.
    pub fn push(&mut self, time: SimTime, event: E) {
        self.push_keyed(time, 0, event);
    }

    /// Schedules `event` at `time`; same-time events pop by `key`, then insertion order.
    pub fn push_keyed(&mut self, time: SimTime, key: u128, event: E) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry { time, key, seq, event });
    }

    /// Removes and returns the earliest event.
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        self.heap.pop().map(|e| (e.time, e.event))
    }

    /// Removes and returns the earliest event with its key.
    pub fn pop_keyed(&mut self) -> Option<(SimTime, u128, E)> {
        self.heap.pop().map(|e| (e.time, e.key, e.event))
    }

    /// The time of the earliest event.
    #[must_use]
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|e| e.time)
    }

    /// Number of pending events.
    #[must_use]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is scheduled.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    proptest! {
        /// Against a naive model: a Vec sorted stably by time gives the same pop order.
        #[test]
        fn pops_in_time_then_insertion_order(times in proptest::collection::vec(0u64..20, 0..200)) {
            let mut q = EventQueue::new();
            for (i, t) in times.iter().enumerate() {
                q.push(SimTime::from_ns(*t), i);
            }
            let mut naive: Vec<(u64, usize)> = times.iter().copied().zip(0..).collect();
            naive.sort_by_key(|(t, _)| *t); // stable: equal times keep insertion order
            let mut got = Vec::new();
            while let Some((t, e)) = q.pop() {
                got.push((t.as_ns(), e));
            }
            prop_assert_eq!(got, naive);
        }

        /// Interleaved pushes and pops against a naive model.
        #[test]
        fn interleaved_operations(ops in proptest::collection::vec((any::<bool>(), 0u64..50), 0..300)) {
            let mut q = EventQueue::new();
            let mut naive: Vec<(u64, u64, u64)> = Vec::new(); // (time, seq, payload)
            let mut seq = 0u64;
            for (is_push, t) in ops {
                if is_push {
                    q.push(SimTime::from_ns(t), seq);
                    naive.push((t, seq, seq));
                    seq += 1;
                } else {
                    naive.sort_unstable();
                    let expect = if naive.is_empty() { None } else { Some(naive.remove(0)) };
                    let got = q.pop();
                    prop_assert_eq!(got.map(|(t, e)| (t.as_ns(), e)), expect.map(|(t, _, e)| (t, e)));
                }
                prop_assert_eq!(q.len(), naive.len());
            }
        }
    }
}
