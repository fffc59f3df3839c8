//! Requests: what arrives (a [`RequestSpec`]) and what the simulator tracks while serving it.

use alloc::vec::Vec;

use crate::content::{BlockHasher, Segment};
use crate::kv::BlockId;
use crate::units::SimTime;

/// Slot of a live request in the simulation's arena. A slot is reused once its request has
/// finished, so the arena holds the requests in flight, not every request of the run.
pub type ReqId = u32;

/// A request's number in order of arrival (0 for the first): its identity for the whole run
/// and in the report, and the index of its [`crate::record::Record`].
pub type ReqSeq = u32;

/// A request as the traffic source produces it.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSpec {
    /// When the client sends it.
    pub arrival: SimTime,
    /// Prompt content (its total length is the input length).
    pub prompt: Vec<Segment>,
    /// Output tokens the request will generate before it stops.
    pub output_tokens: u32,
    /// Content stream of the generated tokens (so a later turn that embeds them can reuse them).
    pub output_stream: u64,
    /// Session this request belongs to, if any, and its turn index within the session.
    pub session: Option<(u32, u32)>,
    /// Leading tokens of this request's content (prompt, then output) that some other request
    /// may also contain; [`ALL_SHARED`] when the source cannot tell. A full KV block past it
    /// can only ever be looked up by this request itself, so the prefix cache need not index
    /// it. The source may overstate it (that only costs time), never understate it.
    pub public_tokens: u32,
    /// Sent before the measured replay to bring its caches to where the replay begins
    /// (AgentX's warmup primers, [`crate::traffic::Trace::warmup`]); left out of the metrics.
    pub warmup: bool,
}

/// [`RequestSpec::public_tokens`] when any of a request's content may be shared.
pub const ALL_SHARED: u32 = u32::MAX;

impl RequestSpec {
    /// Prompt length in tokens.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // Prompt lengths are validated to fit u32.
    pub fn input_tokens(&self) -> u32 {
        crate::content::total_len(&self.prompt).min(u64::from(u32::MAX)) as u32
    }
}

/// Where a request is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Queued at a worker, not holding KV.
    Waiting,
    /// Between prefill and decode workers (P/D): waiting for a destination, or moving.
    Transferring,
    /// Admitted: holds KV and is scheduled each step.
    Running,
    /// All output tokens generated.
    Completed,
    /// Refused without being served (e.g. it can never fit in KV cache).
    Rejected,
}

/// Which part of the serving path a request is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// One aggregated worker serves it start to end.
    Serve,
    /// On a prefill worker: prompt plus one hidden bootstrap token.
    Prefill,
    /// KV moving from the prefill worker to the decode worker.
    Transfer,
    /// On a decode worker.
    Decode,
}

/// The KV a request holds on one side of a P/D handoff.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvHold {
    /// Tokens computed on that side.
    pub computed: u32,
    /// Paged blocks held.
    pub blocks: Vec<BlockId>,
    /// Leading blocks registered in the prefix index.
    pub registered_blocks: u32,
    /// Radix: locked node.
    pub radix_node: u32,
    /// Radix: tokens in the tree under the lock.
    pub radix_tokens: u32,
    /// Radix: private tokens.
    pub private_tokens: u32,
    /// Paged blocks of recurrent state held (hybrid models).
    pub state: Vec<BlockId>,
}

/// P/D milestones ([`NEVER`] until they happen).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PdStamps {
    /// Prefill finished; the source KV is held from now on.
    pub prefill_done: SimTime,
    /// The decode worker reserved KV for the request.
    pub dest_reserved: SimTime,
    /// The KV arrived and the request became schedulable on the decode worker.
    pub dest_activated: SimTime,
    /// The prefill worker released the source KV.
    pub source_released: SimTime,
    /// First decode-worker step that included the request.
    pub decode_admit: SimTime,
}

impl Default for PdStamps {
    fn default() -> Self {
        PdStamps {
            prefill_done: NEVER,
            dest_reserved: NEVER,
            dest_activated: NEVER,
            source_released: NEVER,
            decode_admit: NEVER,
        }
    }
}

/// Sentinel for "has not happened".
pub const NEVER: SimTime = SimTime::MAX;

/// Timestamps of a request's milestones ([`NEVER`] until they happen).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamps {
    /// First time a scheduler admitted it.
    pub first_admit: SimTime,
    /// First output token.
    pub first_token: SimTime,
    /// Second output token.
    pub second_token: SimTime,
    /// Latest output token.
    pub last_token: SimTime,
}

impl Default for Stamps {
    fn default() -> Self {
        Stamps { first_admit: NEVER, first_token: NEVER, second_token: NEVER, last_token: NEVER }
    }
}

/// A request being served, and afterwards its record.
///
/// Laid out in declaration order (`repr(C)`) so that the fields every step reads and writes
/// share the first two cache lines (what a scheduler checks in the first 64 bytes: counters,
/// state and the block list): a step touches hundreds of requests scattered over the arena,
/// and the cold P/D and record-keeping fields would otherwise sit between the hot ones. Each
/// request starts on a cache line (`align(64)`, the line size of x86-64 and Arm cores).
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Request {
    /// Tokens whose KV is computed and resident.
    pub computed: u32,
    /// Output tokens generated so far.
    pub emitted: u32,
    /// Prompt length (cached from the spec).
    pub input_tokens: u32,
    /// Output tokens to generate (`spec.output_tokens`, kept here for the hot path; change it
    /// only through [`Request::cap_output`]).
    output_tokens: u32,
    /// Lifecycle state.
    pub status: Status,
    /// Serving phase.
    pub phase: Phase,
    /// KV blocks held, in token order.
    pub blocks: Vec<BlockId>,
    /// Blocks holding this request's recurrent state (hybrid models on a paged pool).
    pub state: Vec<BlockId>,
    /// Worker it was routed to.
    pub worker: u32,
    /// Attention-DP rank within that worker.
    pub rank: u32,
    /// Leading full blocks already registered in the prefix index.
    pub registered_blocks: u32,
    /// Radix cache: the deepest tree node this request locks.
    pub radix_node: u32,
    /// Radix cache: leading tokens of this request held in the tree under its lock.
    pub radix_tokens: u32,
    /// Radix cache: tokens allocated to this request outside the tree.
    pub private_tokens: u32,
    /// Milestones.
    pub stamps: Stamps,
    /// Hashes of the full blocks of `content` computed so far (at most `public_blocks`).
    pub hashes: Vec<u64>,
    /// Leading full blocks of content another request may share: later blocks are not
    /// hashed. Lifted for good once the request is preempted (it may look its own content up
    /// when it is admitted again).
    pub public_blocks: u32,
    /// Prompt plus generated tokens, for prefix hashing. The output segment's length lags
    /// behind `emitted` (a step need not touch this heap block for every request); read it
    /// through [`Request::content`] or [`Request::pieces`], which bring it up to date.
    content: Vec<Segment>,
    hasher: BlockHasher,
    /// What arrived.
    pub spec: RequestSpec,
    /// Prompt tokens served from the prefix cache at the first admission.
    pub first_admission_reused: Option<u32>,
    /// Of those, the tokens host or storage memory gave back (a KV tier beyond the GPU's).
    pub first_admission_tier_reused: u32,
    /// Largest prefix-cache reuse over all admissions (preemption re-admits).
    pub reused_max: u32,
    /// Times the request lost its KV and had to be recomputed.
    pub preemptions: u32,
    /// Prompt tokens cached on the chosen worker when the router placed the request.
    pub route_overlap_tokens: u32,
    /// P/D: the source-side KV while the request is handed off.
    pub source: KvHold,
    /// P/D (destination first): the decode-side reservation while the prompt is prefilled.
    pub dest: KvHold,
    /// P/D: prefill worker (global index) and rank.
    pub prefill_worker: Option<u32>,
    /// P/D: prefill rank.
    pub prefill_rank: u32,
    /// Attention-DP rank of the decode worker holding the request's reserved KV (P/D).
    pub decode_rank: u32,
    /// P/D: decode worker (global index).
    pub decode_worker: Option<u32>,
    /// P/D milestones.
    pub pd: PdStamps,
    /// P/D: prompt tokens the decode worker already had cached (not transferred).
    pub decode_reused: u32,
    /// P/D: prompt tokens cached on the prefill worker when routed.
    pub prefill_route_overlap_tokens: u32,
    /// P/D: KV tokens moved from prefill to decode worker.
    pub transferred_tokens: u32,
    /// Number in order of arrival.
    pub seq: ReqSeq,
}

impl Request {
    /// A request that has just arrived; `block_size` is its worker's KV block size.
    #[must_use]
    pub fn new(spec: RequestSpec, block_size: u32) -> Self {
        let input_tokens = spec.input_tokens();
        // Room for the output segment the first token appends.
        let mut content = Vec::with_capacity(spec.prompt.len() + 1);
        content.extend_from_slice(&spec.prompt);
        let public_blocks = spec.public_tokens / block_size.max(1);
        Request {
            output_tokens: spec.output_tokens,
            spec,
            input_tokens,
            status: Status::Waiting,
            worker: 0,
            rank: 0,
            computed: 0,
            emitted: 0,
            blocks: Vec::new(),
            state: Vec::new(),
            content,
            hashes: Vec::new(),
            public_blocks,
            hasher: BlockHasher::new(block_size),
            registered_blocks: 0,
            stamps: Stamps::default(),
            first_admission_reused: None,
            first_admission_tier_reused: 0,
            reused_max: 0,
            preemptions: 0,
            route_overlap_tokens: 0,
            radix_node: 0,
            radix_tokens: 0,
            private_tokens: 0,
            phase: Phase::Serve,
            source: KvHold::default(),
            dest: KvHold::default(),
            prefill_worker: None,
            prefill_rank: 0,
            decode_rank: 0,
            decode_worker: None,
            pd: PdStamps::default(),
            decode_reused: 0,
            prefill_route_overlap_tokens: 0,
            transferred_tokens: 0,
            seq: 0,
        }
    }

    /// Tokens whose identity is known: the prompt plus outputs generated so far.
    #[must_use]
    pub fn known_tokens(&self) -> u32 {
        self.input_tokens + self.emitted
    }

    /// Tokens still to compute before the next output token can be sampled.
    #[must_use]
    pub fn pending_tokens(&self) -> u32 {
        self.known_tokens() - self.computed
    }

    /// Output tokens this phase generates: one hidden bootstrap token on a prefill worker,
    /// the request's output otherwise.
    #[must_use]
    pub fn output_target(&self) -> u32 {
        if self.phase == Phase::Prefill {
            1
        } else {
            self.output_tokens
        }
    }

    /// Lowers the output to `n` tokens (an engine that clamps outputs to its KV pool).
    pub fn cap_output(&mut self, n: u32) {
        self.spec.output_tokens = n;
        self.output_tokens = n;
    }

    /// Tokens the request holds in KV when it finishes (for admission that reserves to completion).
    #[must_use]
    pub fn max_tokens(&self) -> u32 {
        self.input_tokens.saturating_add(self.output_target())
    }

    /// Swaps the live KV state with `hold` (P/D: park the source side, or bring it back to
    /// release it).
    pub fn swap_kv(&mut self, hold: &mut KvHold) {
        core::mem::swap(&mut self.computed, &mut hold.computed);
        core::mem::swap(&mut self.blocks, &mut hold.blocks);
        core::mem::swap(&mut self.registered_blocks, &mut hold.registered_blocks);
        core::mem::swap(&mut self.radix_node, &mut hold.radix_node);
        core::mem::swap(&mut self.radix_tokens, &mut hold.radix_tokens);
        core::mem::swap(&mut self.private_tokens, &mut hold.private_tokens);
        core::mem::swap(&mut self.state, &mut hold.state);
    }

    /// Parks the live KV as the decode-side reservation (destination-first P/D).
    pub fn park_dest(&mut self) {
        let mut hold = core::mem::take(&mut self.dest);
        self.swap_kv(&mut hold);
        self.dest = hold;
    }

    /// Brings a parked decode-side reservation back as the live KV.
    pub fn unpark_dest(&mut self) {
        self.park_dest();
    }

    /// Parks the live KV as the source side (P/D handoff).
    pub fn park_source(&mut self) {
        let mut hold = core::mem::take(&mut self.source);
        self.swap_kv(&mut hold);
        self.source = hold;
    }

    /// Brings the output segment's length up to `emitted`.
    fn sync_content(&mut self) {
        if self.emitted > 0 {
            if let Some(last) = self.content.last_mut() {
                last.len = self.emitted;
            }
        }
    }

    /// Prompt plus generated tokens so far.
    pub fn content(&mut self) -> &[Segment] {
        self.sync_content();
        &self.content
    }

    /// The first `limit` known tokens as radix-tree pieces.
    #[must_use]
    pub fn pieces(&self, limit: u32) -> Vec<crate::radix::Piece> {
        crate::radix::pieces_with_last(&self.content, limit, (self.emitted > 0).then_some(self.emitted))
    }

    /// Extends `hashes` to cover every full block of known content another request may
    /// share (every full block once the request is [published](Request::publish_all)).
    pub fn hash_known_blocks(&mut self) {
        self.sync_content();
        // One allocation for the blocks known now (pushing one at a time doubled the vector
        // about seven times for a 12,000-token prompt).
        let bs = self.hasher.block_size() as usize;
        let known = (self.known_tokens() as usize / bs).min(self.public_blocks as usize);
        self.hashes.reserve(known.saturating_sub(self.hashes.len()));
        while self.hashes.len() < self.public_blocks as usize {
            let room = self.public_blocks as usize - self.hashes.len();
            if self.hasher.extend_in_segment(&self.content, room, &mut self.hashes) > 0 {
                continue;
            }
            // A block across segments, or none left.
            match self.hasher.next_block(&self.content) {
                Some(h) => self.hashes.push(h),
                None => break,
            }
        }
    }

    /// From now on every block of this request is hashed and indexed (it was preempted).
    pub fn publish_all(&mut self) {
        self.public_blocks = u32::MAX;
        self.hash_known_blocks();
    }

    /// Records one generated token. Returns true when it was the last one.
    pub fn emit_token(&mut self, now: SimTime) -> bool {
        if self.emitted == 0 {
            self.content.push(Segment { id: self.spec.output_stream, len: 0 });
            self.stamps.first_token = now;
        } else if self.emitted == 1 {
            self.stamps.second_token = now;
        }
        self.emitted += 1;
        self.stamps.last_token = now;
        self.emitted >= self.output_target()
    }

    /// Drops the content descriptions of a finished request, keeping its record small.
    pub fn release_content(&mut self) {
        self.spec.prompt = Vec::new();
        self.content = Vec::new();
        self.hashes = Vec::new();
        self.blocks = Vec::new();
        self.source = KvHold::default();
        self.dest = KvHold::default();
    }

    /// True when the request is in the decode phase: one new token on top of its context.
    #[must_use]
    pub fn is_decoding(&self) -> bool {
        self.emitted > 0 && self.pending_tokens() == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn the_fields_every_step_touches_share_the_first_cache_line() {
        let r = Request::new(
            RequestSpec {
                arrival: SimTime::ZERO,
                prompt: Vec::new(),
                output_tokens: 1,
                output_stream: 0,
                session: None,
                public_tokens: ALL_SHARED,
                warmup: false,
            },
            16,
        );
        let base = core::ptr::addr_of!(r) as usize;
        let end = |p: usize, size: usize| p - base + size;
        assert_eq!(core::mem::align_of::<Request>(), 64);
        assert!(end(core::ptr::addr_of!(r.blocks) as usize, core::mem::size_of::<Vec<BlockId>>()) <= 64);
        assert!(end(core::ptr::addr_of!(r.phase) as usize, 1) <= 64);
        assert!(end(core::ptr::addr_of!(r.stamps) as usize, core::mem::size_of::<Stamps>()) <= 128);
    }

    #[test]
    fn content_and_pieces_include_every_emitted_token() {
        let spec = RequestSpec {
            arrival: SimTime::ZERO,
            prompt: vec![Segment { id: 1, len: 10 }],
            output_tokens: 5,
            output_stream: 9,
            session: None,
            public_tokens: ALL_SHARED,
            warmup: false,
        };
        let mut r = Request::new(spec, 4);
        for t in 0..3 {
            r.emit_token(SimTime::from_ns(t));
        }
        let total: u32 = r.pieces(u32::MAX).iter().map(|p| p.len).sum();
        assert_eq!(total, 13);
        assert_eq!(r.pieces(12).iter().map(|p| p.len).sum::<u32>(), 12);
        assert_eq!(r.content(), &[Segment { id: 1, len: 10 }, Segment { id: 9, len: 3 }]);
        r.hash_known_blocks();
        assert_eq!(r.hashes.len(), 3, "13 known tokens fill three 4-token blocks");
    }

    #[test]
    fn only_shareable_blocks_are_hashed_until_the_request_is_published() {
        let spec = |public_tokens| RequestSpec {
            arrival: SimTime::ZERO,
            prompt: vec![Segment { id: 1, len: 10 }, Segment { id: 2, len: 10 }],
            output_tokens: 5,
            output_stream: 9,
            session: None,
            public_tokens,
            warmup: false,
        };
        let mut all = Request::new(spec(ALL_SHARED), 4);
        all.hash_known_blocks();
        assert_eq!(all.hashes.len(), 5);
        // 11 shareable tokens: blocks 0 and 1 lie inside them, block 2 straddles the end.
        let mut part = Request::new(spec(11), 4);
        part.hash_known_blocks();
        assert_eq!(part.hashes, all.hashes[..2]);
        part.publish_all();
        assert_eq!(part.hashes, all.hashes, "published: the same chain, every block");
    }
}
