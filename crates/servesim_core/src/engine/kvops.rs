//! KV operations shared by the engine policies. They keep a request's `blocks`, `computed`
//! and the pool consistent: a policy never touches the pool directly.

use crate::kv::BlockPool;
use crate::request::Request;

/// Releases every block a request holds, last block first (so a sequence's tail is evicted
/// before its head, as vLLM does), and forgets its computed tokens.
pub fn free_all(pool: &mut BlockPool, req: &mut Request) {
    pool.release_all(&req.blocks);
    req.blocks.clear();
    pool.release_all(&req.state);
    req.state.clear();
    req.computed = 0;
    req.registered_blocks = 0;
}

/// Grows a running request's blocks to hold `tokens` tokens. False (and no change) when the
/// pool has too few free blocks.
pub fn try_grow(pool: &mut BlockPool, req: &mut Request, tokens: u32) -> bool {
    let need = pool.blocks_for(u64::from(tokens));
    let have = req.blocks.len() as u64;
    // A hybrid model's sequence takes its state's blocks with its first tokens.
    let state = pool.state_blocks().saturating_sub(u32::try_from(req.state.len()).unwrap_or(u32::MAX));
    if need <= have && state == 0 {
        return true;
    }
    if need.saturating_sub(have) + u64::from(state) > u64::from(pool.num_free()) {
        return false;
    }
    if state > 0 && !pool.allocate_many(state, &mut req.state) {
        return false;
    }
    if need <= have {
        return true;
    }
    reserve_block_list(pool, req, need);
    #[allow(clippy::cast_possible_truncation)] // Bounded by the pool's free count, a u32.
    pool.allocate_many((need - have) as u32, &mut req.blocks)
}

/// The prompt chunk vLLM schedules for a hybrid model with prefix caching
/// (`Scheduler._mamba_block_aligned_split`, `mamba_cache_mode: align`): a chunk that does not
/// reach the prompt's last block boundary is cut to whole blocks, and one that crosses it ends
/// there, so the state is checkpointed at a boundary; the tail after it is computed next step.
/// `computed` is where the chunk starts (a waiting request's prefix hit). Decodes, and pools
/// without checkpoints, keep `n`.
#[must_use]
pub fn align_chunk(pool: &BlockPool, req: &Request, computed: u32, n: u32) -> u32 {
    if !pool.checkpoints() {
        return n;
    }
    let known = req.known_tokens();
    if computed >= req.input_tokens.max(known.saturating_sub(1)) {
        return n;
    }
    let bs = pool.block_size();
    let last = known - known % bs;
    let after = computed + n;
    if after < last {
        n / bs * bs
    } else if computed < last && last < after {
        last - computed
    } else {
        n
    }
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
    if pool.checkpoints() && req.public_blocks != u32::MAX {
        // A hybrid model checkpoints its state at every block boundary it reaches, in content
        // only this request holds too: hash every block, so those checkpoints are indexed.
        req.publish_all();
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
    total - hit_blocks + u64::from(probe.free_hits) + u64::from(pool.state_blocks())
}

/// Admits a probed request: references the hit blocks and allocates the rest for
/// `hit + new_tokens` tokens. The caller has checked [`admission_cost`] fits.
pub fn admit(pool: &mut BlockPool, req: &mut Request, probe: Probe, new_tokens: u32, scratch: &[u32]) {
    reserve(pool, req, probe, new_tokens, scratch);
    count_reuse(req, probe.hit_tokens);
    if pool.checkpoints() && !scratch.is_empty() {
        // The restore read this checkpoint: it is evicted last now.
        if let Some(&h) = req.hashes.get(scratch.len() - 1) {
            pool.refresh_checkpoint(h);
        }
    }
}

/// Counts `tokens` of the prompt as served from cache at this admission.
pub fn count_reuse(req: &mut Request, tokens: u32) {
    count_reuse_from_tiers(req, tokens, 0);
}

/// Counts `tokens` of the prompt as served from cache at this admission, the last `tiers` of
/// them brought back from host or storage memory.
pub fn count_reuse_from_tiers(req: &mut Request, tokens: u32, tiers: u32) {
    let reused = tokens.min(req.input_tokens);
    if req.first_admission_reused.is_none() {
        req.first_admission_reused = Some(reused);
        req.first_admission_tier_reused = tiers.min(reused);
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

/// Checkpoints a hybrid model's state when a step has left the request exactly at a block
/// boundary of content others can look up (vLLM's `align` mode caches the state of a step's
/// last token when it is at a multiple of the block size).
pub fn checkpoint_state(pool: &mut BlockPool, req: &mut Request) {
    if !pool.checkpoints() || req.computed == 0 || !req.computed.is_multiple_of(pool.block_size()) {
        return;
    }
    let j = (req.computed / pool.block_size()) as usize - 1;
    if j >= req.registered_blocks as usize {
        return;
    }
    req.hash_known_blocks();
    if let Some(&h) = req.hashes.get(j) {
        pool.checkpoint(h);
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
