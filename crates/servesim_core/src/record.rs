//! What is kept of each request after it leaves the simulation: a compact [`Record`] per
//! arrival, in a [`RecordLog`] that grows in fixed chunks. The full [`Request`] state lives
//! only while the request is in flight.

use alloc::vec::Vec;

use crate::request::{PdStamps, ReqSeq, Request, Stamps, Status};
use crate::units::SimTime;

/// What the report needs of a request once it has left the simulation (or when the run
/// stops): a third of a [`Request`]'s size and nothing on the heap, so a run of millions of
/// requests keeps one of these each and the full state only for those in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// When the client sent it.
    pub arrival: SimTime,
    /// Milestones.
    pub stamps: Stamps,
    /// P/D milestones.
    pub pd: PdStamps,
    /// Session and turn, if any.
    pub session: Option<(u32, u32)>,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens asked for (after an engine's clamp to its KV pool).
    pub requested_output_tokens: u32,
    /// Output tokens generated.
    pub emitted: u32,
    /// Largest prefix-cache reuse over all admissions.
    pub reused_max: u32,
    /// Prompt tokens served from the prefix cache at the first admission, [`NOT_ADMITTED`]
    /// before any (a sentinel rather than an `Option`, which would take the record past 160
    /// bytes beside the next field): read through [`Record::first_admission_reused`].
    first_reused: u32,
    /// Of those, the tokens host or storage memory gave back.
    pub first_admission_tier_reused: u32,
    /// Times the request lost its KV.
    pub preemptions: u32,
    /// Prompt tokens cached on the chosen worker when the router placed it.
    pub route_overlap_tokens: u32,
    /// P/D: prompt tokens cached on the prefill worker when routed.
    pub prefill_route_overlap_tokens: u32,
    /// P/D: prompt tokens the decode worker already had cached.
    pub decode_reused: u32,
    /// P/D: KV tokens moved from prefill to decode worker.
    pub transferred_tokens: u32,
    /// Worker it was routed to (aggregated).
    pub worker: u32,
    /// P/D: prefill worker (global index).
    pub prefill_worker: Option<u32>,
    /// P/D: decode worker (global index).
    pub decode_worker: Option<u32>,
    /// State when it was recorded.
    pub status: Status,
    /// A warmup request ([`crate::request::RequestSpec::warmup`]), not measured.
    pub warmup: bool,
}

/// [`Record`]'s first-admission reuse before any admission.
const NOT_ADMITTED: u32 = u32::MAX;

impl Record {
    /// Prompt tokens served from the prefix cache at the first admission (`None` if never
    /// admitted).
    #[must_use]
    pub fn first_admission_reused(&self) -> Option<u32> {
        (self.first_reused != NOT_ADMITTED).then_some(self.first_reused)
    }
}

impl From<&Request> for Record {
    fn from(r: &Request) -> Self {
        Record {
            arrival: r.spec.arrival,
            stamps: r.stamps,
            pd: r.pd,
            session: r.spec.session,
            input_tokens: r.input_tokens,
            requested_output_tokens: r.spec.output_tokens,
            emitted: r.emitted,
            reused_max: r.reused_max,
            first_reused: r.first_admission_reused.unwrap_or(NOT_ADMITTED),
            first_admission_tier_reused: r.first_admission_tier_reused,
            preemptions: r.preemptions,
            route_overlap_tokens: r.route_overlap_tokens,
            prefill_route_overlap_tokens: r.prefill_route_overlap_tokens,
            decode_reused: r.decode_reused,
            transferred_tokens: r.transferred_tokens,
            worker: r.worker,
            prefill_worker: r.prefill_worker,
            decode_worker: r.decode_worker,
            status: r.status,
            warmup: r.spec.warmup,
        }
    }
}

/// Records per chunk of a [`RecordLog`] (640 KiB): large enough that the chunk list stays
/// short, small enough that the last chunk's unused tail is negligible.
const CHUNK: usize = 4096;

/// Every arrived request's [`Record`], indexed by [`ReqSeq`]. It grows a chunk at a time, so
/// a long run neither copies its records as a doubling vector would nor holds up to twice
/// their size in spare capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordLog {
    chunks: Vec<Vec<Record>>,
    len: usize,
}

impl RecordLog {
    /// Appends the record of the next arrival.
    pub fn push(&mut self, r: Record) {
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(last) = self.chunks.last_mut() {
            last.push(r);
            self.len += 1;
        }
    }

    /// Records so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True before the first arrival.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The record of request `seq`.
    #[must_use]
    pub fn get(&self, seq: ReqSeq) -> Option<&Record> {
        let i = seq as usize;
        self.chunks.get(i / CHUNK).and_then(|c| c.get(i % CHUNK))
    }

    /// Replaces the record of request `seq` (no-op past the end).
    pub fn set(&mut self, seq: ReqSeq, r: Record) {
        let i = seq as usize;
        if let Some(slot) = self.chunks.get_mut(i / CHUNK).and_then(|c| c.get_mut(i % CHUNK)) {
            *slot = r;
        }
    }

    /// Every record in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = &Record> + '_ {
        self.chunks.iter().flatten()
    }
}

impl core::ops::Index<usize> for RecordLog {
    type Output = Record;

    fn index(&self, i: usize) -> &Record {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::NEVER;

    fn rec(n: u32) -> Record {
        Record {
            arrival: SimTime::from_ns(u64::from(n)),
            stamps: Stamps::default(),
            pd: PdStamps::default(),
            session: None,
            input_tokens: n,
            requested_output_tokens: 1,
            emitted: 0,
            reused_max: 0,
            first_reused: NOT_ADMITTED,
            first_admission_tier_reused: 0,
            preemptions: 0,
            route_overlap_tokens: 0,
            prefill_route_overlap_tokens: 0,
            decode_reused: 0,
            transferred_tokens: 0,
            worker: 0,
            prefill_worker: None,
            decode_worker: None,
            status: Status::Waiting,
            warmup: false,
        }
    }

    #[test]
    fn a_record_takes_160_bytes() {
        // ARCHITECTURE.md states the size: a run keeps one per arrival.
        assert_eq!(core::mem::size_of::<Record>(), 160);
    }

    #[test]
    fn a_log_across_chunks_reads_back_what_was_written() {
        let mut log = RecordLog::default();
        let n = 2 * CHUNK as u32 + 7;
        for i in 0..n {
            log.push(rec(i));
        }
        assert_eq!(log.len(), n as usize);
        let mut done = rec(CHUNK as u32);
        done.status = Status::Completed;
        done.stamps.first_token = SimTime::from_ns(5);
        log.set(CHUNK as u32, done);
        log.set(n, rec(0)); // past the end: ignored
        assert_eq!(log.len(), n as usize);
        assert_eq!(log[CHUNK], done);
        assert_eq!(log.get(CHUNK as u32 + 1), Some(&rec(CHUNK as u32 + 1)));
        assert_eq!(log.get(n), None);
        let inputs: Vec<u32> = log.iter().map(|r| r.input_tokens).collect();
        assert_eq!(inputs, (0..n).collect::<Vec<_>>());
        assert_eq!(log.chunks.len(), 3);
        assert!(log.chunks.iter().all(|c| c.capacity() == CHUNK), "chunks never reallocate");
        assert_eq!(log[0].stamps.first_token, NEVER);
    }
}
