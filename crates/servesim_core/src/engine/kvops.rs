//! KV operations shared by the engine policies. They keep a request's `blocks`, `computed`
//! and the pool consistent: a policy never touches the pool directly.

use crate::kv::BlockPool;
use crate::request::Request;

/// Releases every block a request holds, last block first (so a sequence's tail is evicted
/// before its head, as vLLM does), and forgets its computed tokens.
pub fn free_all(pool: &mut BlockPool, req: &mut Request) {
    pool.release_all(&req.blocks);
    req.blocks.clear();
    req.computed = 0;
    req.registered_blocks = 0;
}

/// Grows a running request's blocks to hold `tokens` tokens. False (and no change) when the
/// pool has too few free blocks.
pub fn try_grow(pool: &mut BlockPool, req: &mut Request, tokens: u32) -> bool {
    let need = pool.blocks_for(u64::from(tokens));
    let have = req.blocks.len() as u64;
    if need <= have {
        return true;
    }
    if need - have > u64::from(pool.num_free()) {
        return false;
    }
    reserve_block_list(pool, req, need);
    #[allow(clippy::cast_possible_truncation)] // Bounded by the pool's free count, a u32.
    pool.allocate_many((need - have) as u32, &mut req.blocks)
}

/// Makes room in a request's block list for at least `need` blocks, and then at once for every
/// block it can hold: growing by each prefill chunk and then by doubling cost a reallocation
/// and a copy each time. (Never more than the pool has, whatever output length was asked for.)
fn reserve_block_list(pool: &BlockPool, req: &mut Request, need: u64) {
    if (req.blocks.capacity() as u64) < need {
        let most = pool.blocks_for(u64::from(req.max_tokens())).min(u64::from(pool.capacity())).max(need);
        req.blocks.reserve_exact(usize::try_from(most).unwrap_or(usize::MAX) - req.blocks.len());
    }
}

/// The prefix-cache hit a waiting request would get if admitted now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Leading tokens served from cache.
    pub hit_tokens: u32,
    /// How many of the hit blocks are currently free (they leave the free queue on admission).
    pub free_hits: u32,
}

/// Looks up a waiting request's known content in the prefix cache. The hit is capped so at
/// least one token is computed (the engine needs a forward pass to sample from), and is
/// block-granular. The hit blocks are left in `scratch`.
pub fn probe(pool: &mut BlockPool, req: &mut Request, scratch: &mut alloc::vec::Vec<u32>) -> Probe {
    scratch.clear();
    if !pool.prefix_caching() {
        return Probe { hit_tokens: 0, free_hits: 0 };
    }
    req.hash_known_blocks();
    let bs = pool.block_size();
    let max_blocks = ((req.known_tokens().saturating_sub(1)) / bs) as usize;
    let n = req.hashes.len().min(max_blocks);
    let free_hits = pool.find_prefix(&req.hashes[..n], scratch);
    // Blocks past the shareable prefix are not hashed: none of them can be resident yet.
    let looked_up = (req.known_tokens() / bs) as usize;
    pool.count_unhashed_lookups(looked_up.min(max_blocks).saturating_sub(n) as u64);
    #[allow(clippy::cast_possible_truncation)] // At most known_tokens / block_size blocks.
    let hit_tokens = scratch.len() as u32 * bs;
    Probe { hit_tokens, free_hits }
}

/// Blocks that admitting with `probe` and computing `new_tokens` would take from the free queue.
#[must_use]
pub fn admission_cost(pool: &BlockPool, probe: Probe, new_tokens: u32) -> u64 {
    let total = pool.blocks_for(u64::from(probe.hit_tokens) + u64::from(new_tokens));
    let hit_blocks = u64::from(probe.hit_tokens / pool.block_size());
    total - hit_blocks + u64::from(probe.free_hits)
}

/// Admits a probed request: references the hit blocks and allocates the rest for
/// `hit + new_tokens` tokens. The caller has checked [`admission_cost`] fits.
pub fn admit(pool: &mut BlockPool, req: &mut Request, probe: Probe, new_tokens: u32, scratch: &[u32]) {
    reserve(pool, req, probe, new_tokens, scratch);
    count_reuse(req, probe.hit_tokens);
}

/// Counts `tokens` of the prompt as served from cache at this admission.
pub fn count_reuse(req: &mut Request, tokens: u32) {
    let reused = tokens.min(req.input_tokens);
    if req.first_admission_reused.is_none() {
        req.first_admission_reused = Some(reused);
    }
    req.reused_max = req.reused_max.max(reused);
}

/// Like [`admit`] without counting prefix reuse (a P/D destination reservation).
pub fn reserve(pool: &mut BlockPool, req: &mut Request, probe: Probe, new_tokens: u32, scratch: &[u32]) {
    debug_assert!(req.blocks.is_empty());
    reserve_block_list(pool, req, scratch.len() as u64);
    for &b in scratch {
        pool.touch(b);
        req.blocks.push(b);
    }
    req.computed = probe.hit_tokens;
    req.registered_blocks = u32::try_from(scratch.len()).unwrap_or(u32::MAX);
    let ok = try_grow(pool, req, probe.hit_tokens + new_tokens);
    debug_assert!(ok, "admission was checked to fit");
}

/// Registers every newly completed block of a request in the prefix index.
pub fn register_full_blocks(pool: &mut BlockPool, req: &mut Request) {
    if !pool.prefix_caching() {
        return;
    }
    let full = req.computed / pool.block_size();
    if full <= req.registered_blocks {
        return;
    }
    req.hash_known_blocks();
    let upto = (full as usize).min(req.blocks.len());
    let hashed = upto.min(req.hashes.len());
    let from = req.registered_blocks as usize;
    for j in from..hashed {
        pool.register(req.blocks[j], req.hashes[j]);
    }
    let mut done = hashed.max(from);
    if req.hashes.len() >= req.public_blocks as usize {
        // Past the shareable prefix: content only this request can look up.
        for &b in &req.blocks[done..upto] {
            pool.mark_private(b);
        }
        done = upto;
    }
    #[allow(clippy::cast_possible_truncation)] // Bounded by `full`, a u32.
    {
        req.registered_blocks = done as u32;
    }
}

/// Indexes a request's private blocks before it is preempted: when it is admitted again it
/// looks its own content up like any other. It is hashed in full from then on.
pub fn publish_private(pool: &mut BlockPool, req: &mut Request) {
    if !pool.prefix_caching() || req.public_blocks == u32::MAX {
        return;
    }
    let first_private = req.public_blocks as usize;
    req.publish_all();
    let upto = (req.registered_blocks as usize).min(req.hashes.len()).min(req.blocks.len());
    for j in first_private.min(upto)..upto {
        pool.index_private(req.blocks[j], req.hashes[j]);
    }
}
