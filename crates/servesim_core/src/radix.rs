//! A token-granular radix prefix cache (the SGLang model, page size 1).
//!
//! KV memory is counted in tokens. Tokens live either in the tree (shared, reusable) or
//! privately with a running request (allocated for its computation but not inserted yet).
//! A request locks the deepest tree node it uses, which pins the whole path to the root;
//! nodes nobody locks are evictable, leaves first, least recently used first — SGLang's
//! `RadixCache` with `lock_ref` and LRU leaf eviction.
//!
//! Keys are runs of token identities (`Piece`: stream id, start offset, length), so a
//! 10,000-token prompt is a handful of pieces, not 10,000 entries, while matching and
//! splitting stay exact to the token.
//!
//! A hybrid model's cache keeps recurrent states with nodes (SGLang's `MambaRadixCache`): each
//! kept state holds a slot of the state pool, beside the running requests' own, and the least
//! recently used unlocked ones are dropped when a request needs a slot.
//!
//! Invariants (checked by `check_invariants` and the property test against a naive model):
//! `tree_tokens + private_tokens <= capacity`; `evictable_tokens` equals the tokens of
//! unlocked nodes; the LRU set holds exactly the unlocked leaves; the kept-state set holds
//! exactly the nodes keeping a state.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

use hashbrown::HashMap;

use crate::content::Segment;

/// A run of consecutive tokens of one content stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Content stream.
    pub id: u64,
    /// Offset of the first token in the stream.
    pub start: u32,
    /// Tokens in the run.
    pub len: u32,
}

/// The first `limit` tokens of `segments` as pieces.
#[must_use]
pub fn pieces(segments: &[Segment], limit: u32) -> Vec<Piece> {
    pieces_with_last(segments, limit, None)
}

/// [`pieces`], with the last segment taken as `last_len` tokens long when given (a request's
/// output segment, whose stored length may lag behind its emitted tokens).
#[must_use]
pub fn pieces_with_last(segments: &[Segment], limit: u32, last_len: Option<u32>) -> Vec<Piece> {
    let n = segments.len();
    let mut out = Vec::with_capacity(n);
    let mut left = limit;
    for (i, s) in segments.iter().enumerate() {
        if left == 0 {
            break;
        }
        let full = match last_len {
            Some(l) if i + 1 == n => l,
            _ => s.len,
        };
        let len = full.min(left);
        if len > 0 {
            out.push(Piece { id: s.id, start: 0, len });
        }
        left -= len;
    }
    out
}

/// Index of a tree node.
pub type NodeId = u32;

/// The root: always present, holds no tokens, never evicted.
pub const ROOT: NodeId = 0;

#[derive(Clone, Debug, Default)]
struct Node {
    parent: NodeId,
    key: Vec<Piece>,
    len: u32,
    children: HashMap<(u64, u32), NodeId>,
    lock: u32,
    last_access: u64,
    alive: bool,
    /// A hybrid model's recurrent state after this node's last token is kept with it.
    state: bool,
    /// Inserts that covered the node ([`RadixCache::count_hits`]; HiCache's `hit_count`).
    hits: u32,
}

/// Token-granular radix cache with a fixed token capacity.
#[derive(Clone, Debug)]
pub struct RadixCache {
    nodes: Vec<Node>,
    free_ids: Vec<NodeId>,
    capacity: u64,
    tree_tokens: u64,
    private_tokens: u64,
    evictable_tokens: u64,
    lru: BTreeSet<(u64, NodeId)>,
    clock: u64,
    enabled: bool,
    evicted_tokens: u64,
    /// A hybrid model's cache: a prefix is reused only up to a node that keeps a state.
    states: bool,
    /// Nodes keeping a state, by last access (the state pool's LRU order).
    kept: BTreeSet<(u64, NodeId)>,
    /// Slots of the state pool, shared by kept states and running requests (`u32::MAX`:
    /// unbounded).
    state_slots: u32,
    /// Kept states dropped to free a slot, so far.
    dropped_states: u64,
    /// The paths (root to node) of the nodes evicted since they were last taken, when logged
    /// ([`RadixCache::log_evictions`]: HiCache's write-back writes them to host memory).
    evicted_paths: Option<Vec<Vec<Piece>>>,
}

/// Tokens shared by the start of two piece lists, stopping at `limit`.
fn common_tokens(a: &[Piece], b: &[Piece], limit: u32) -> u32 {
    let (mut i, mut j, mut oa, mut ob, mut n) = (0usize, 0usize, 0u32, 0u32, 0u32);
    while i < a.len() && j < b.len() && n < limit {
        let (pa, pb) = (a[i], b[j]);
        if pa.id != pb.id || pa.start + oa != pb.start + ob {
            break;
        }
        let take = (pa.len - oa).min(pb.len - ob).min(limit - n);
        n += take;
        oa += take;
        ob += take;
        if oa == pa.len {
            i += 1;
            oa = 0;
        }
        if ob == pb.len {
            j += 1;
            ob = 0;
        }
    }
    n
}

/// Splits a piece list after `at` tokens.
fn split_pieces(p: &[Piece], at: u32) -> (Vec<Piece>, Vec<Piece>) {
    let (mut head, mut tail) = (Vec::new(), Vec::new());
    let mut left = at;
    for x in p {
        if left >= x.len {
            head.push(*x);
            left -= x.len;
        } else if left > 0 {
            head.push(Piece { len: left, ..*x });
            tail.push(Piece { start: x.start + left, len: x.len - left, ..*x });
            left = 0;
        } else {
            tail.push(*x);
        }
    }
    (head, tail)
}

/// The first `n` tokens of a piece list.
#[must_use]
pub fn head_tokens(p: &[Piece], n: u32) -> Vec<Piece> {
    split_pieces(p, n).0
}

/// Drops the first `n` tokens of a piece list.
fn skip_tokens(p: &[Piece], n: u32) -> Vec<Piece> {
    split_pieces(p, n).1
}

fn first_key(p: &[Piece]) -> Option<(u64, u32)> {
    p.first().map(|x| (x.id, x.start))
}

impl RadixCache {
    /// A cache of `capacity` tokens; with `enabled = false` nothing is ever reused.
    #[must_use]
    pub fn new(capacity: u64, enabled: bool) -> Self {
        RadixCache {
            nodes: alloc::vec![Node { alive: true, ..Node::default() }],
            free_ids: Vec::new(),
            capacity,
            tree_tokens: 0,
            private_tokens: 0,
            evictable_tokens: 0,
            lru: BTreeSet::new(),
            clock: 0,
            enabled,
            evicted_tokens: 0,
            states: false,
            kept: BTreeSet::new(),
            state_slots: u32::MAX,
            dropped_states: 0,
            evicted_paths: None,
        }
    }

    /// Keeps the path of every node evicted from now on, for [`RadixCache::take_evicted`].
    pub fn log_evictions(&mut self) {
        self.evicted_paths.get_or_insert_with(Vec::new);
    }

    /// The paths (root to node) of the nodes evicted since the last call, oldest first (none
    /// unless [`RadixCache::log_evictions`] was called).
    pub fn take_evicted(&mut self) -> Vec<Vec<Piece>> {
        self.evicted_paths.as_mut().map(core::mem::take).unwrap_or_default()
    }

    /// The tokens from the root to the end of node `n`.
    fn path_to(&self, n: NodeId) -> Vec<Piece> {
        let mut chain = Vec::new();
        let mut cur = n;
        while cur != ROOT {
            chain.push(cur);
            cur = self.nodes[cur as usize].parent;
        }
        chain.iter().rev().flat_map(|&c| self.nodes[c as usize].key.iter().copied()).collect()
    }

    /// The same cache for a hybrid model (SGLang's `MambaRadixCache`,
    /// `mamba_scheduler_strategy: no_buffer`): a prefix is reused only up to the end of a node
    /// that keeps a recurrent state ([`RadixCache::keep_state`]), since the state cannot be
    /// rebuilt from the tokens' KV.
    #[must_use]
    pub fn with_states(mut self) -> Self {
        self.resume_at_states();
        self
    }

    /// From now on a match ends at a node keeping a state ([`RadixCache::with_states`]).
    pub fn resume_at_states(&mut self) {
        self.states = true;
    }

    /// Bounds the state pool to `slots` slots (SGLang's `mamba_pool`, per attention-DP rank):
    /// kept states and running requests share them ([`RadixCache::make_state_room`]).
    pub fn limit_states(&mut self, slots: u32) {
        self.state_slots = slots;
    }

    /// Frees state slots for `running` requests (the one being admitted included) by
    /// dropping the least recently used kept states of unlocked nodes, as SGLang's
    /// `evict_mamba` does when a request's slot cannot be allocated. A node that drops its
    /// state keeps its KV; a later match ends at an earlier state. False (nothing more dropped)
    /// when the states left are all locked and still too many.
    pub fn make_state_room(&mut self, running: u32) -> bool {
        let room = self.state_slots.saturating_sub(running) as usize;
        while self.kept.len() > room {
            let Some(&(t, n)) = self.kept.iter().find(|(_, n)| self.nodes[*n as usize].lock == 0) else {
                return false;
            };
            self.kept.remove(&(t, n));
            self.nodes[n as usize].state = false;
            self.dropped_states += 1;
        }
        true
    }

    /// States kept with nodes now.
    #[must_use]
    pub fn kept_states(&self) -> usize {
        self.kept.len()
    }

    /// Kept states dropped so far to free a slot.
    #[must_use]
    pub fn dropped_states(&self) -> u64 {
        self.dropped_states
    }

    /// Whether reuse must end where a state is kept.
    #[must_use]
    pub fn states(&self) -> bool {
        self.states
    }

    /// Keeps a recurrent state after node `n`'s last token (a finished request's sequence
    /// ends there); it lives as long as the node.
    pub fn keep_state(&mut self, n: NodeId) {
        if self.states && n != ROOT && !self.nodes[n as usize].state {
            self.nodes[n as usize].state = true;
            self.kept.insert((self.nodes[n as usize].last_access, n));
        }
    }

    /// Whether reuse is on.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Token capacity.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Tokens not held by anyone.
    #[must_use]
    pub fn free_tokens(&self) -> u64 {
        self.capacity - self.tree_tokens - self.private_tokens
    }

    /// Free plus evictable tokens: what allocations can get.
    #[must_use]
    pub fn available_tokens(&self) -> u64 {
        self.free_tokens() + self.evictable_tokens
    }

    /// Tokens held by requests or pinned by their locks.
    #[must_use]
    pub fn used_tokens(&self) -> u64 {
        self.tree_tokens + self.private_tokens - self.evictable_tokens
    }

    /// Tokens cached in the tree.
    #[must_use]
    pub fn tree_tokens(&self) -> u64 {
        self.tree_tokens
    }

    /// Tokens evicted so far.
    #[must_use]
    pub fn evicted_tokens(&self) -> u64 {
        self.evicted_tokens
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn is_leaf(&self, n: NodeId) -> bool {
        self.nodes[n as usize].children.is_empty()
    }

    fn touch(&mut self, n: NodeId, t: u64) {
        let node = &self.nodes[n as usize];
        if self.lru.remove(&(node.last_access, n)) {
            self.lru.insert((t, n));
        }
        if node.state && self.kept.remove(&(node.last_access, n)) {
            self.kept.insert((t, n));
        }
        self.nodes[n as usize].last_access = t;
    }

    /// Longest cached prefix of `key`, at most `limit` tokens, without changing anything.
    #[must_use]
    pub fn peek(&self, key: &[Piece], limit: u32) -> u32 {
        if !self.enabled {
            return 0;
        }
        let mut node = ROOT;
        let mut rest = key.to_vec();
        let mut matched = 0;
        let mut resumable = 0;
        while matched < limit {
            let Some(&child) = first_key(&rest).and_then(|k| self.nodes[node as usize].children.get(&k))
            else {
                break;
            };
            let c = &self.nodes[child as usize];
            let n = common_tokens(&c.key, &rest, limit - matched);
            matched += n;
            if n < c.len {
                break;
            }
            if c.state {
                resumable = matched;
            }
            rest = skip_tokens(&rest, n);
            node = child;
        }
        if self.states {
            resumable
        } else {
            matched
        }
    }

    /// Matches `key` (at most `limit` tokens), splitting a node so the match ends on a node
    /// boundary, and marks the path used. Returns the matched tokens and the deepest node.
    pub fn match_prefix(&mut self, key: &[Piece], limit: u32) -> (u32, NodeId) {
        self.walk(key, limit, self.states)
    }

    /// [`RadixCache::match_prefix`]; `resumable`: the match ends at the deepest node keeping a
    /// state.
    fn walk(&mut self, key: &[Piece], limit: u32, resumable_only: bool) -> (u32, NodeId) {
        if !self.enabled {
            return (0, ROOT);
        }
        let t = self.tick();
        let mut node = ROOT;
        let mut rest = key.to_vec();
        let mut matched = 0;
        let mut resumable = (0, ROOT);
        while matched < limit {
            let Some(&child) = first_key(&rest).and_then(|k| self.nodes[node as usize].children.get(&k))
            else {
                break;
            };
            let n = common_tokens(&self.nodes[child as usize].key, &rest, limit - matched);
            if n == 0 {
                break;
            }
            if resumable_only && n < self.nodes[child as usize].len {
                // A node's state is at its end: a match ending inside it cannot resume there.
                break;
            }
            let child = if n < self.nodes[child as usize].len { self.split(child, n) } else { child };
            self.touch(child, t);
            matched += n;
            if self.nodes[child as usize].state {
                resumable = (matched, child);
            }
            rest = skip_tokens(&rest, n);
            node = child;
        }
        if resumable_only {
            resumable
        } else {
            (matched, node)
        }
    }

    /// Splits `n` so its first `at` tokens become a new parent node; returns that parent.
    fn split(&mut self, n: NodeId, at: u32) -> NodeId {
        let (head, tail) = split_pieces(&self.nodes[n as usize].key, at);
        let parent = self.nodes[n as usize].parent;
        let old = self.nodes[n as usize].clone();
        let id = self.new_node(Node {
            parent,
            key: head,
            len: at,
            children: HashMap::new(),
            lock: old.lock,
            last_access: old.last_access,
            alive: true,
            state: false,
            hits: old.hits,
        });
        if let Some(k) = first_key(&old.key) {
            self.nodes[parent as usize].children.insert(k, id);
        }
        let tail_key = first_key(&tail);
        {
            let nn = &mut self.nodes[n as usize];
            nn.key = tail;
            nn.len = old.len - at;
            nn.parent = id;
        }
        if let Some(k) = tail_key {
            self.nodes[id as usize].children.insert(k, n);
        }
        // Token counts are unchanged; the new inner node is never an LRU leaf, and the old
        // node keeps its leaf status (and its place in the LRU set, if any).
        id
    }

    fn new_node(&mut self, node: Node) -> NodeId {
        if let Some(id) = self.free_ids.pop() {
            self.nodes[id as usize] = node;
            id
        } else {
            self.nodes.push(node);
            #[allow(clippy::cast_possible_truncation)] // Node counts stay far below 2^32.
            let id = (self.nodes.len() - 1) as NodeId;
            id
        }
    }

    /// Inserts `key` below the root, reusing whatever is already cached. Returns the deepest
    /// node and how many of the key's tokens were already in the tree (the caller frees its
    /// private copies of those). New tokens move from `private` to the tree.
    pub fn insert(&mut self, key: &[Piece]) -> (NodeId, u32) {
        let total: u32 = key.iter().map(|p| p.len).sum();
        if !self.enabled || total == 0 {
            return (ROOT, 0);
        }
        let (matched, node) = self.walk(key, total, false);
        if matched == total {
            return (node, matched);
        }
        let t = self.tick();
        let rest = skip_tokens(key, matched);
        let len = total - matched;
        let Some(k) = first_key(&rest) else { return (node, matched) };
        let parent_was_lru_leaf = self.is_leaf(node) && self.nodes[node as usize].lock == 0 && node != ROOT;
        let id = self.new_node(Node {
            parent: node,
            key: rest,
            len,
            children: HashMap::new(),
            lock: 0,
            last_access: t,
            alive: true,
            state: false,
            hits: 0,
        });
        self.nodes[node as usize].children.insert(k, id);
        if parent_was_lru_leaf {
            let pa = self.nodes[node as usize].last_access;
            self.lru.remove(&(pa, node));
        }
        self.tree_tokens += u64::from(len);
        self.private_tokens = self.private_tokens.saturating_sub(u64::from(len));
        self.evictable_tokens += u64::from(len);
        self.lru.insert((t, id));
        (id, matched)
    }

    /// Counts a hit on every node `key` (inserted already, so its path ends on a node
    /// boundary) covers whole, as HiCache's insert does (`_inc_hit_count`).
    pub fn count_hits(&mut self, key: &[Piece]) {
        let mut node = ROOT;
        let mut rest = key.to_vec();
        while let Some(&child) = first_key(&rest).and_then(|k| self.nodes[node as usize].children.get(&k)) {
            let c = &self.nodes[child as usize];
            let n = common_tokens(&c.key, &rest, u32::MAX);
            if n < c.len {
                break;
            }
            self.nodes[child as usize].hits += 1;
            rest = skip_tokens(&rest, n);
            node = child;
        }
    }

    /// Tokens of `key` from the first along nodes with at least `min_hits` hits each, stopping
    /// at the first node with fewer or not covered whole.
    #[must_use]
    pub fn hot_prefix(&self, key: &[Piece], min_hits: u32) -> u32 {
        let mut node = ROOT;
        let mut rest = key.to_vec();
        let mut tokens = 0;
        while let Some(&child) = first_key(&rest).and_then(|k| self.nodes[node as usize].children.get(&k)) {
            let c = &self.nodes[child as usize];
            let n = common_tokens(&c.key, &rest, u32::MAX);
            if n < c.len || c.hits < min_hits {
                break;
            }
            tokens += n;
            rest = skip_tokens(&rest, n);
            node = child;
        }
        tokens
    }

    /// Pins the path from `n` to the root.
    pub fn lock(&mut self, n: NodeId) {
        let mut cur = n;
        while cur != ROOT {
            let node = &mut self.nodes[cur as usize];
            node.lock += 1;
            if node.lock == 1 {
                self.evictable_tokens -= u64::from(node.len);
                let key = (node.last_access, cur);
                self.lru.remove(&key);
            }
            cur = self.nodes[cur as usize].parent;
        }
    }

    /// Releases a [`RadixCache::lock`].
    pub fn unlock(&mut self, n: NodeId) {
        let mut cur = n;
        while cur != ROOT {
            let leaf = self.is_leaf(cur);
            let node = &mut self.nodes[cur as usize];
            debug_assert!(node.lock > 0, "unlock of an unlocked node");
            node.lock = node.lock.saturating_sub(1);
            if node.lock == 0 {
                self.evictable_tokens += u64::from(node.len);
                if leaf {
                    self.lru.insert((node.last_access, cur));
                }
            }
            cur = self.nodes[cur as usize].parent;
        }
    }

    /// Evicts least recently used unlocked leaves until `tokens` more are free (or nothing
    /// evictable is left).
    pub fn evict(&mut self, tokens: u64) {
        let target = self.free_tokens() + tokens;
        while self.free_tokens() < target {
            let Some(&(t, n)) = self.lru.iter().next() else { break };
            self.lru.remove(&(t, n));
            if self.evicted_paths.is_some() {
                let path = self.path_to(n);
                if let Some(log) = self.evicted_paths.as_mut() {
                    log.push(path);
                }
            }
            let node = core::mem::take(&mut self.nodes[n as usize]);
            if node.state {
                self.kept.remove(&(node.last_access, n));
            }
            self.tree_tokens -= u64::from(node.len);
            self.evictable_tokens -= u64::from(node.len);
            self.evicted_tokens += u64::from(node.len);
            let parent = node.parent;
            if let Some(k) = first_key(&node.key) {
                self.nodes[parent as usize].children.remove(&k);
            }
            self.free_ids.push(n);
            if parent != ROOT && self.is_leaf(parent) && self.nodes[parent as usize].lock == 0 {
                let pa = self.nodes[parent as usize].last_access;
                self.lru.insert((pa, parent));
            }
        }
    }

    /// Takes `n` private tokens, evicting if needed. False (nothing changes) when even
    /// evicting everything unlocked would not make room.
    pub fn alloc(&mut self, n: u64) -> bool {
        if self.available_tokens() < n {
            return false;
        }
        if self.free_tokens() < n {
            self.evict(n - self.free_tokens());
        }
        self.private_tokens += n;
        true
    }

    /// Returns `n` private tokens.
    pub fn free_private(&mut self, n: u64) {
        debug_assert!(self.private_tokens >= n);
        self.private_tokens = self.private_tokens.saturating_sub(n);
    }

    /// Checks every structural invariant.
    ///
    /// # Panics
    /// When an invariant is broken.
    pub fn check_invariants(&self) {
        assert!(self.tree_tokens + self.private_tokens <= self.capacity, "over capacity");
        let mut tree = 0u64;
        let mut evictable = 0u64;
        let mut leaves = BTreeSet::new();
        let mut kept = BTreeSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.alive || i == 0 {
                continue;
            }
            #[allow(clippy::cast_possible_truncation)]
            let id = i as NodeId;
            assert_eq!(n.len, n.key.iter().map(|p| p.len).sum::<u32>(), "node {id} length");
            assert!(n.len > 0, "empty node {id}");
            assert_eq!(
                self.nodes[n.parent as usize].children.get(&first_key(&n.key).unwrap_or((0, 0))),
                Some(&id)
            );
            tree += u64::from(n.len);
            if n.state {
                kept.insert((n.last_access, id));
            }
            if n.lock == 0 {
                evictable += u64::from(n.len);
                if n.children.is_empty() {
                    leaves.insert((n.last_access, id));
                }
            } else {
                assert!(
                    self.nodes[n.parent as usize].lock >= n.lock || n.parent == ROOT,
                    "lock not pinned up the path"
                );
            }
        }
        assert_eq!(tree, self.tree_tokens, "tree tokens");
        assert_eq!(evictable, self.evictable_tokens, "evictable tokens");
        assert_eq!(leaves, self.lru, "LRU set must hold exactly the unlocked leaves");
        assert_eq!(kept, self.kept, "the kept-state set must hold exactly the nodes keeping a state");
    }
}

#[cfg(test)]
mod tests;
