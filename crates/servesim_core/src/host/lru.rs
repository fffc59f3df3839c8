//! The block bookkeeping the host tier (G2) and the storage tier (G3) share: a fixed number of
//! slots holding blocks by key, in least-recently-used order, where a block being copied in
//! or read out is never evicted and keeps its place.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::kv::PremixedMap;
use crate::units::SimTime;

/// Dead LRU entries tolerated beyond the live ones before the queue is compacted.
const DEAD_ENTRY_SLACK: usize = 64;

/// One held block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) key: u64,
    /// When its copy into the tier ends (it is found from then on).
    pub(crate) ready_at: SimTime,
    /// Until when a read holds it (it is not evicted before); time-bound reads use this,
    /// reads ended explicitly use `readers`.
    pub(crate) read_until: SimTime,
    /// Reads holding it until they end.
    pub(crate) readers: u32,
    /// Bumped whenever the entry moves in the LRU queue or its slot is reused.
    epoch: u32,
    live: bool,
}

impl Entry {
    /// Neither being copied in at `at` nor read.
    fn idle(&self, at: SimTime) -> bool {
        self.live && self.readers == 0 && self.ready_at <= at && self.read_until <= at
    }
}

/// What [`BlockLru::insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Inserted {
    /// Into a slot of its own, evicting the least recently used idle block if `evicted`.
    Slot { slot: u32, evicted: bool },
    /// Not held: every held block is busy.
    Dropped,
}

/// Blocks by key in LRU order, at most `capacity` of them.
#[derive(Clone, Debug)]
pub(crate) struct BlockLru {
    capacity: usize,
    entries: Vec<Entry>,
    index: PremixedMap<u32>,
    /// Held blocks in LRU order (front: evicted first) as `(slot, epoch)`, with dead entries.
    lru: VecDeque<(u32, u32)>,
    /// Slots freed by [`BlockLru::remove`], taken again before new ones.
    vacant: Vec<u32>,
}

impl BlockLru {
    /// An empty set of `capacity` slots.
    pub(crate) fn new(capacity: usize) -> Self {
        BlockLru {
            capacity,
            entries: Vec::new(),
            index: PremixedMap::default(),
            lru: VecDeque::new(),
            vacant: Vec::new(),
        }
    }

    /// Blocks held (being copied in included).
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// The slot holding `key`.
    pub(crate) fn slot(&self, key: u64) -> Option<u32> {
        self.index.get(&key).copied()
    }

    /// The block in `slot`.
    pub(crate) fn entry(&self, slot: u32) -> &Entry {
        &self.entries[slot as usize]
    }

    /// The block in `slot`, to change its times or readers.
    pub(crate) fn entry_mut(&mut self, slot: u32) -> &mut Entry {
        &mut self.entries[slot as usize]
    }

    /// Whether `key` is held and its copy has ended by `now`.
    pub(crate) fn holds(&self, key: u64, now: SimTime) -> bool {
        self.index.get(&key).is_some_and(|&s| self.entries[s as usize].ready_at <= now)
    }

    /// Takes a slot for `key` (not held) at `at`, as the most recently used block, ready at
    /// `at` until the caller sets its copy's end.
    pub(crate) fn insert(&mut self, key: u64, at: SimTime) -> Inserted {
        // Eviction reuses its slot at once; below capacity a new block takes a slot a removal
        // freed, or a new one.
        let (slot, evicted) = if self.index.len() < self.capacity {
            let s = self.vacant.pop().unwrap_or_else(|| {
                #[allow(clippy::cast_possible_truncation)] // At most `capacity` (a u32 count) slots.
                let s = self.entries.len() as u32;
                self.entries.push(Entry {
                    key,
                    ready_at: at,
                    read_until: SimTime::ZERO,
                    readers: 0,
                    epoch: 0,
                    live: false,
                });
                s
            });
            (s, false)
        } else {
            match self.evict(at) {
                Some(s) => (s, true),
                None => return Inserted::Dropped,
            }
        };
        let e = &mut self.entries[slot as usize];
        e.key = key;
        e.ready_at = at;
        e.read_until = SimTime::ZERO;
        e.readers = 0;
        e.epoch = e.epoch.wrapping_add(1);
        e.live = true;
        self.lru.push_back((slot, e.epoch));
        self.index.insert(key, slot);
        self.compact();
        Inserted::Slot { slot, evicted }
    }

    /// [`BlockLru::insert`], counting an eviction in `evicted` or a drop in `dropped`: the
    /// block's slot, unless dropped.
    pub(crate) fn insert_counted(
        &mut self,
        key: u64,
        at: SimTime,
        evicted: &mut u64,
        dropped: &mut u64,
    ) -> Option<u32> {
        match self.insert(key, at) {
            Inserted::Slot { slot, evicted: e } => {
                *evicted += u64::from(e);
                Some(slot)
            }
            Inserted::Dropped => {
                *dropped += 1;
                None
            }
        }
    }

    /// Frees the least recently used idle block at `at`; busy blocks keep their places.
    /// `None` when all are busy.
    fn evict(&mut self, at: SimTime) -> Option<u32> {
        let current = |e: &Entry, epoch: u32| e.live && e.epoch == epoch;
        // Dead entries at the front go; the front block is most often the one to evict.
        let slot = loop {
            let &(slot, epoch) = self.lru.front()?;
            let e = &self.entries[slot as usize];
            if !current(e, epoch) {
                self.lru.pop_front();
                continue;
            }
            if e.idle(at) {
                self.lru.pop_front();
                break slot;
            }
            // Busy blocks are passed over where they stand.
            let entries = &self.entries;
            let i = self.lru.iter().position(|&(slot, epoch)| {
                let e = &entries[slot as usize];
                current(e, epoch) && e.idle(at)
            })?;
            break self.lru.remove(i)?.0;
        };
        let e = &mut self.entries[slot as usize];
        e.live = false;
        let key = e.key;
        self.index.remove(&key);
        Some(slot)
    }

    /// Stops holding `key` (its block moved elsewhere), freeing its slot; its queue entry dies.
    pub(crate) fn remove(&mut self, key: u64) -> bool {
        let Some(slot) = self.index.remove(&key) else { return false };
        let e = &mut self.entries[slot as usize];
        e.live = false;
        e.epoch = e.epoch.wrapping_add(1);
        self.vacant.push(slot);
        self.compact();
        true
    }

    /// Makes the block in `slot` the most recently used.
    pub(crate) fn promote(&mut self, slot: u32) {
        let e = &mut self.entries[slot as usize];
        e.epoch = e.epoch.wrapping_add(1);
        self.lru.push_back((slot, e.epoch));
        self.compact();
    }

    /// Marks the held blocks among `keys` (a request's blocks in order) as just used, the
    /// first last, so that it is the most recently used.
    pub(crate) fn touch(&mut self, keys: &[u64]) {
        for k in keys.iter().rev() {
            if let Some(slot) = self.slot(*k) {
                self.promote(slot);
            }
        }
    }

    /// The held blocks, in no particular order.
    pub(crate) fn held(&self) -> impl Iterator<Item = &Entry> {
        self.index.values().map(|&s| &self.entries[s as usize])
    }

    /// The held blocks, least recently used first.
    #[cfg(test)]
    pub(crate) fn in_order(&self) -> impl Iterator<Item = &Entry> {
        self.lru.iter().filter_map(|&(slot, epoch)| {
            let e = &self.entries[slot as usize];
            (e.live && e.epoch == epoch).then_some(e)
        })
    }

    /// Drops dead queue entries once they outnumber the live ones.
    fn compact(&mut self) {
        if self.lru.len() <= 2 * self.index.len() + DEAD_ENTRY_SLACK {
            return;
        }
        let entries = &self.entries;
        self.lru.retain(|&(slot, epoch)| {
            let e = &entries[slot as usize];
            e.live && e.epoch == epoch
        });
    }
}
