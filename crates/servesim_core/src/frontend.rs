//! The serving frontend's host work: the API-server processes in front of an engine replica.
//!
//! A serving process (trtllm-serve's, vLLM's or SGLang's API server) runs one event loop that
//! parses and validates every request and writes every streamed chunk. At high concurrency that
//! loop, not the GPU, limits a replica: TensorRT-LLM PR #16523 measured its request
//! preprocessing wait grow from 54 ms to 1.5 s with the client count while the decode step time
//! stayed flat, and added `num_serve_frontends` to run several such processes.
//!
//! The model: each process is one first-come-first-served server. A request costs it
//! `per_request` plus `per_prompt_token` for every prompt token (tokenising the prompt) when it
//! arrives (it reaches the engine's queue when that work is done), and
//! every output token costs it `per_token` when the engine emits it (a chunk of
//! `stream_interval` tokens costs one chunk's work, spread over its tokens). The tokens of one
//! engine step reach their clients when the process has written them all, so a busy process
//! delays the tokens (client-side TTFT, TPOT and ITL) and the requests that arrive after them
//! (a closed-loop client sends its next request when it has its last token). Requests are
//! spread over the processes by their index, as the kernel spreads connections over processes
//! sharing a port.

use alloc::vec::Vec;

use crate::request::ReqSeq;
use crate::units::{SimDur, SimTime};

/// How much host work a replica's serving processes do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrontendSpec {
    /// Serving processes (each its own queue); at least 1.
    pub processes: u32,
    /// Work per request (parse, validate, hand to the engine).
    pub per_request: SimDur,
    /// Work per prompt token (tokenising the prompt); zero unless set
    /// ([`FrontendSpec::with_prompt_token`]).
    pub per_prompt_token: SimDur,
    /// Work per output token (its share of a streamed chunk's detokenisation and write).
    pub per_token: SimDur,
}

impl FrontendSpec {
    /// `processes` serving processes with these costs.
    #[must_use]
    pub const fn new(processes: u32, per_request: SimDur, per_token: SimDur) -> Self {
        FrontendSpec { processes, per_request, per_prompt_token: SimDur::ZERO, per_token }
    }

    /// These costs, with `per_prompt_token` of work for every prompt token.
    #[must_use]
    pub const fn with_prompt_token(self, per_prompt_token: SimDur) -> Self {
        FrontendSpec { per_prompt_token, ..self }
    }

    /// A request's own work: `per_request` plus its prompt's tokenisation.
    #[must_use]
    pub fn request_work(&self, prompt_tokens: u32) -> SimDur {
        let tokenise = self.per_prompt_token.as_ns().saturating_mul(u64::from(prompt_tokens));
        SimDur::from_ns(self.per_request.as_ns().saturating_add(tokenise))
    }

    /// Whether the frontend does any work worth simulating.
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.processes > 0
            && (self.per_request > SimDur::ZERO
                || self.per_prompt_token > SimDur::ZERO
                || self.per_token > SimDur::ZERO)
    }
}

/// What a replica's serving processes did over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrontendStats {
    /// Serving processes.
    pub processes: u32,
    /// Work done, all processes together.
    pub busy_ns: u64,
    /// Requests admitted.
    pub requests: u64,
    /// Time requests waited for their process before its work on them began.
    pub request_wait_ns: u64,
    /// Tokens written.
    pub tokens: u64,
    /// Time from the engine emitting each token to its client getting it, summed.
    pub token_delay_ns: u64,
}

impl FrontendStats {
    /// Adds another replica's counters.
    pub fn add(&mut self, o: &FrontendStats) {
        self.processes += o.processes;
        self.busy_ns += o.busy_ns;
        self.requests += o.requests;
        self.request_wait_ns += o.request_wait_ns;
        self.tokens += o.tokens;
        self.token_delay_ns += o.token_delay_ns;
    }
}

/// The serving processes of one replica: when each is next free.
#[derive(Clone, Debug)]
pub struct Frontend {
    spec: FrontendSpec,
    free_at: Vec<SimTime>,
    counts: Vec<u64>,
    /// Per process: when the first of the accounted steps' tokens were written.
    first_written: Vec<SimTime>,
    stats: FrontendStats,
}

impl Frontend {
    /// Idle processes.
    #[must_use]
    pub fn new(spec: FrontendSpec) -> Self {
        let n = spec.processes.max(1) as usize;
        Frontend {
            spec,
            free_at: alloc::vec![SimTime::ZERO; n],
            counts: alloc::vec![0; n],
            first_written: alloc::vec![SimTime::ZERO; n],
            stats: FrontendStats { processes: spec.processes.max(1), ..FrontendStats::default() },
        }
    }

    /// The process that serves the request that arrived `seq`-th (round robin).
    #[must_use]
    pub fn process_of(&self, seq: ReqSeq) -> usize {
        seq as usize % self.free_at.len()
    }

    /// Queues the own work of request `seq` (with `prompt_tokens` to tokenise) at `now`;
    /// returns when it reaches the engine.
    pub fn admit(&mut self, now: SimTime, seq: ReqSeq, prompt_tokens: u32) -> SimTime {
        let p = self.process_of(seq);
        let start = self.free_at[p].max(now);
        let work = self.spec.request_work(prompt_tokens);
        let done = start.saturating_add(work);
        self.free_at[p] = done;
        self.stats.requests += 1;
        self.stats.request_wait_ns += start.since(now).as_ns();
        self.stats.busy_ns += work.as_ns();
        done
    }

    /// Queues the work of one token of each request in `seqs` per step ending at each of
    /// `ends` (a step, or the steps of a stable run, which emit the same tokens every step),
    /// and reports the gap between consecutive steps' writes with the number of tokens that
    /// saw it. Afterwards [`Frontend::first_written`] and [`Frontend::last_written`] say when
    /// each process finished the first and last step.
    pub fn stream(
        &mut self,
        seqs: impl IntoIterator<Item = ReqSeq>,
        ends: &[SimTime],
        mut gap: impl FnMut(SimDur, u64),
    ) {
        self.counts.fill(0);
        for seq in seqs {
            let p = self.process_of(seq);
            self.counts[p] += 1;
        }
        for (p, &n) in self.counts.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let work = SimDur::from_ns(self.spec.per_token.as_ns().saturating_mul(n));
            let mut prev: Option<SimTime> = None;
            for &at in ends {
                let written = self.free_at[p].max(at).saturating_add(work);
                self.free_at[p] = written;
                self.stats.busy_ns += work.as_ns();
                self.stats.tokens += n;
                self.stats.token_delay_ns += written.since(at).as_ns().saturating_mul(n);
                match prev {
                    None => self.first_written[p] = written,
                    Some(w) => gap(written.since(w), n),
                }
                prev = Some(written);
            }
        }
    }

    /// When process `p` finished writing the first accounted step's tokens.
    #[must_use]
    pub fn first_written(&self, p: usize) -> SimTime {
        self.first_written[p]
    }

    /// When process `p` finished writing the last accounted step's tokens.
    #[must_use]
    pub fn last_written(&self, p: usize) -> SimTime {
        self.free_at[p]
    }

    /// What the processes did so far.
    #[must_use]
    pub fn stats(&self) -> FrontendStats {
        self.stats
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
        FrontendSpec::new(processes, SimDur::from_ms(request_ms), SimDur::from_ns(token_us * 1000))
    }

    #[test]
    fn requests_queue_first_come_first_served() {
        let mut f = Frontend::new(spec(1, 10, 0));
        let t0 = SimTime::ZERO + SimDur::from_ms(5);
        assert_eq!(f.admit(t0, 0, 0), t0 + SimDur::from_ms(10));
        assert_eq!(f.admit(t0, 1, 0), t0 + SimDur::from_ms(20));
        // An idle process starts at once.
        let late = SimTime::ZERO + SimDur::from_ms(100);
        assert_eq!(f.admit(late, 2, 0), late + SimDur::from_ms(10));
    }

    #[test]
    fn streamed_tokens_delay_later_requests_only() {
        let mut f = Frontend::new(spec(1, 2, 100));
        let t = SimTime::ZERO + SimDur::from_ms(1);
        f.stream(0..50, &[t], |_, _| {});
        // 50 tokens × 100 µs = 5 ms of writes, then 2 ms for the new request.
        assert_eq!(f.admit(t, 7, 0), t + SimDur::from_ms(7));
        let s = f.stats();
        assert_eq!((s.tokens, s.requests), (50, 1));
        assert_eq!(s.busy_ns, 7_000_000);
        assert_eq!(s.request_wait_ns, 5_000_000);
        assert_eq!(s.token_delay_ns, 50 * 5_000_000);
    }

    #[test]
    fn a_prompt_costs_its_tokenisation_in_the_queue() {
        let tokenise = SimDur::from_ns(5_000);
        let mut f = Frontend::new(spec(1, 2, 0).with_prompt_token(tokenise));
        assert!(spec(1, 0, 0).with_prompt_token(tokenise).is_active());
        let t = SimTime::ZERO;
        // 2 ms + 4,000 × 5 µs = 22 ms; the next request's 1,000 tokens wait behind it.
        assert_eq!(f.admit(t, 0, 4_000), t + SimDur::from_ms(22));
        assert_eq!(f.admit(t, 1, 1_000), t + SimDur::from_ms(29));
        let s = f.stats();
        assert_eq!((s.busy_ns, s.request_wait_ns), (29_000_000, 22_000_000));
    }

    #[test]
    fn a_run_of_steps_writes_like_single_steps() {
        let ends: Vec<SimTime> = (1..=6).map(|k| SimTime::ZERO + SimDur::from_ms(k)).collect();
        let mut run = Frontend::new(spec(2, 0, 300));
        let mut gaps = Vec::new();
        run.stream(0..5, &ends, |g, n| gaps.push((g, n)));
        let mut single = Frontend::new(spec(2, 0, 300));
        let mut firsts = Vec::new();
        for &e in &ends {
            single.stream(0..5, &[e], |_, _| {});
            firsts.push((single.last_written(0), single.last_written(1)));
        }
        assert_eq!(run.free_at(), single.free_at());
        // Process 0 writes three tokens a step (0.9 ms, under the 1 ms step), process 1 two.
        assert_eq!(run.first_written(0), SimTime::ZERO + SimDur::from_ns(1_900_000));
        assert_eq!(run.first_written(1), firsts[0].1);
        assert_eq!(run.last_written(0), firsts[5].0);
        assert_eq!(gaps.len(), 10);
        assert!(gaps.iter().all(|&(g, _)| g == SimDur::from_ms(1)));
        assert_eq!(gaps.iter().map(|g| g.1).sum::<u64>(), 5 * 5);
    }

    #[test]
    fn a_saturated_process_falls_behind_the_steps() {
        let ends: Vec<SimTime> = (1..=4).map(|k| SimTime::ZERO + SimDur::from_ms(k)).collect();
        let mut f = Frontend::new(spec(1, 0, 500));
        let mut gaps = Vec::new();
        f.stream(0..4, &ends, |g, n| gaps.push((g, n)));
        // 2 ms of writes a 1 ms step: the backlog grows by 1 ms a step.
        assert_eq!(f.first_written(0), SimTime::ZERO + SimDur::from_ms(3));
        assert_eq!(f.last_written(0), SimTime::ZERO + SimDur::from_ms(9));
        assert!(gaps.iter().all(|&(g, n)| g == SimDur::from_ms(2) && n == 4));
    }

    #[test]
    fn processes_split_the_work_by_request() {
        let mut f = Frontend::new(spec(2, 10, 0));
        let t = SimTime::ZERO;
        assert_eq!(f.admit(t, 0, 0), t + SimDur::from_ms(10));
        assert_eq!(f.admit(t, 1, 0), t + SimDur::from_ms(10));
        assert_eq!(f.admit(t, 2, 0), t + SimDur::from_ms(20));
        assert!(!FrontendSpec { processes: 2, ..FrontendSpec::default() }.is_active());
        assert!(spec(1, 0, 1).is_active());
    }
}
