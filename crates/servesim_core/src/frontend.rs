//! The serving frontend's host work: the API-server processes in front of an engine replica.
//!
//! A serving process (trtllm-serve's, vLLM's or SGLang's API server) runs one event loop that
//! parses and validates every request and writes every streamed chunk. At high concurrency that
//! loop, not the GPU, limits a replica: TensorRT-LLM PR #16523 measured its request
//! preprocessing wait grow from 54 ms to 1.5 s with the client count while the decode step time
//! stayed flat, and added `num_serve_frontends` to run several such processes.
//!
//! The model: each process is one first-come-first-served server. A request costs it
//! `per_request` when it arrives (it reaches the engine's queue when that work is done), and
//! every output token costs it `per_token` when the engine emits it (a chunk of
//! `stream_interval` tokens costs one chunk's work, spread over its tokens). Token work never
//! delays the tokens themselves (the client-side TPOT stays the engine's); it delays the
//! requests that arrive after it, which is where measured deployments show it. Requests are
//! spread over the processes by their index, as the kernel spreads connections over
//! processes sharing a port.

use alloc::vec::Vec;

use crate::request::ReqId;
use crate::units::{SimDur, SimTime};

/// How much host work a replica's serving processes do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrontendSpec {
    /// Serving processes (each its own queue); at least 1.
    pub processes: u32,
    /// Work per request (parse, validate, tokenise, hand to the engine).
    pub per_request: SimDur,
    /// Work per output token (its share of a streamed chunk's detokenisation and write).
    pub per_token: SimDur,
}

impl FrontendSpec {
    /// Whether the frontend does any work worth simulating.
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.processes > 0 && (self.per_request > SimDur::ZERO || self.per_token > SimDur::ZERO)
    }
}

/// The serving processes of one replica: when each is next free.
#[derive(Clone, Debug)]
pub struct Frontend {
    spec: FrontendSpec,
    free_at: Vec<SimTime>,
    counts: Vec<u64>,
}

impl Frontend {
    /// Idle processes.
    #[must_use]
    pub fn new(spec: FrontendSpec) -> Self {
        let n = spec.processes.max(1) as usize;
        Frontend { spec, free_at: alloc::vec![SimTime::ZERO; n], counts: alloc::vec![0; n] }
    }

    /// The process that serves request `id`.
    #[must_use]
    pub fn process_of(&self, id: ReqId) -> usize {
        id as usize % self.free_at.len()
    }

    /// Queues request `id`'s own work at `now`; returns when it reaches the engine.
    pub fn admit(&mut self, now: SimTime, id: ReqId) -> SimTime {
        let p = self.process_of(id);
        let done = self.free_at[p].max(now).saturating_add(self.spec.per_request);
        self.free_at[p] = done;
        done
    }

    /// Starts counting the tokens of one step (or of each step of a stable run).
    pub fn clear_counts(&mut self) {
        self.counts.fill(0);
    }

    /// Counts one token of request `id` in the step being accounted.
    pub fn count(&mut self, id: ReqId) {
        let p = self.process_of(id);
        self.counts[p] += 1;
    }

    /// Queues the counted tokens' work at `at` (the end of the step that emitted them).
    pub fn stream_counted(&mut self, at: SimTime) {
        for (free, &n) in self.free_at.iter_mut().zip(&self.counts) {
            if n > 0 {
                *free = (*free)
                    .max(at)
                    .saturating_add(SimDur::from_ns(self.spec.per_token.as_ns().saturating_mul(n)));
            }
        }
    }

    /// When each process is next free (for reports and tests).
    #[must_use]
    pub fn free_at(&self) -> &[SimTime] {
        &self.free_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(processes: u32, request_ms: u64, token_us: u64) -> FrontendSpec {
        FrontendSpec {
            processes,
            per_request: SimDur::from_ms(request_ms),
            per_token: SimDur::from_ns(token_us * 1000),
        }
    }

    #[test]
    fn requests_queue_first_come_first_served() {
        let mut f = Frontend::new(spec(1, 10, 0));
        let t0 = SimTime::ZERO + SimDur::from_ms(5);
        assert_eq!(f.admit(t0, 0), t0 + SimDur::from_ms(10));
        assert_eq!(f.admit(t0, 1), t0 + SimDur::from_ms(20));
        // An idle process starts at once.
        let late = SimTime::ZERO + SimDur::from_ms(100);
        assert_eq!(f.admit(late, 2), late + SimDur::from_ms(10));
    }

    #[test]
    fn streamed_tokens_delay_later_requests_only() {
        let mut f = Frontend::new(spec(1, 2, 100));
        let t = SimTime::ZERO + SimDur::from_ms(1);
        f.clear_counts();
        for id in 0..50 {
            f.count(id);
        }
        f.stream_counted(t);
        // 50 tokens × 100 µs = 5 ms of writes, then 2 ms for the new request.
        assert_eq!(f.admit(t, 7), t + SimDur::from_ms(7));
    }

    #[test]
    fn processes_split_the_work_by_request() {
        let mut f = Frontend::new(spec(2, 10, 0));
        let t = SimTime::ZERO;
        assert_eq!(f.admit(t, 0), t + SimDur::from_ms(10));
        assert_eq!(f.admit(t, 1), t + SimDur::from_ms(10));
        assert_eq!(f.admit(t, 2), t + SimDur::from_ms(20));
        assert!(!FrontendSpec { processes: 2, ..FrontendSpec::default() }.is_active());
        assert!(spec(1, 0, 1).is_active());
    }
}
