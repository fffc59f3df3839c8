//! Seeded snapshots of a dependency-graph trace (AgentX's `agentic_snapshot`, REF §4): each
//! play is cut at a point drawn between 25% and 75% of its span of request start times, and
//! only the requests that start from there on are replayed, so a run begins with plays
//! part-way through, as a service that has been up for a while sees them.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec;
use alloc::vec::Vec;

use super::{Trace, TraceRow};
use crate::rng::{mix2, Rng};
use crate::units::SimDur;

/// Where in its span a play's cut may fall, as fractions from its first request's start:
/// AgentX's 25–75% (REF §4, "`agentic_snapshot{seed}` cuts each lane uniformly at 25–75% of
/// the play's span of request start times").
const CUT_RANGE: (f64, f64) = (0.25, 0.75);

/// Keys the cut draws apart from every other stream of the seed.
const SNAPSHOT_NAMESPACE: u64 = 0x54A9_5407;

/// What a snapshot kept and cut.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// The seed the cuts were drawn from.
    pub seed: u64,
    /// Plays in the trace.
    pub plays: u32,
    /// Plays that lost requests to their cut (a play whose requests all start together has
    /// nothing before any cut).
    pub cut_plays: u32,
    /// Requests that started before their play's cut: history, not replayed.
    pub history_requests: u32,
    /// Requests replayed.
    pub replayed_requests: u32,
    /// Mean of the plays' cuts as a fraction of their spans (plays with a span only).
    pub mean_cut_fraction: f64,
    /// Per conversation (a row's session, or the row alone) that lost requests to the cut,
    /// in session order: its last prompt before the cut as a one-token request, the primer
    /// AgentX's warmup sends ("1-token primers (last historical input per conversation)",
    /// REF §4) so that the replay finds the conversation's history cached.
    pub primers: Vec<TraceRow>,
}

impl Trace {
    /// Each row's nominal start in trace time: a root at its timestamp, any other row its
    /// delay after the latest nominal start among the rows it waits for (as if requests took
    /// no time). `None` for a row on a cycle or waiting for one.
    #[must_use]
    pub fn nominal_starts(&self) -> Vec<Option<SimDur>> {
        let mut start: Vec<Option<SimDur>> = vec![None; self.rows.len()];
        for r in self.dependency_order() {
            let row = &self.rows[r];
            start[r] = Some(if row.wait_for.is_empty() {
                row.timestamp
            } else {
                // Every row it waits for comes before it in the order.
                let latest =
                    row.wait_for.iter().filter_map(|d| start.get(*d as usize).copied().flatten()).max();
                latest.unwrap_or(SimDur::ZERO) + row.delay.unwrap_or(SimDur::ZERO)
            });
        }
        start
    }

    /// The snapshot of this dependency graph for `seed`: each play cut at its own draw
    /// (25-75% of its span of nominal starts, [`Trace::nominal_starts`]), keeping the
    /// rows that start at or after the cut. What a kept row waited for before the cut counts
    /// as done: a row left waiting for nothing starts as a root at its nominal start's
    /// offset from the cut, counted from its play's first start, so plays keep their
    /// places in the trace. The draws depend on the seed and the play (its first row), not
    /// on the other plays. With `lanes` (> 0) only the plays that take the lanes at the start
    /// are cut, the first `lanes` by their first roots' timestamps, as AgentX cuts each lane:
    /// plays that wait for a lane start from their beginning. A trace that is not a graph is
    /// returned as it is.
    #[must_use]
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss, clippy::cast_sign_loss)]
    // Row counts are far below 2^32; spans in ns far below 2^52; a cut lies within its span.
    pub fn snapshot(&self, seed: u64, lanes: u32) -> Trace {
        if !self.dag {
            return self.clone();
        }
        let starts = self.nominal_starts();
        let plays = self.plays();
        // Per play (named by its first row): its first and last nominal starts.
        let mut span: BTreeMap<u32, (SimDur, SimDur)> = BTreeMap::new();
        for (r, s) in starts.iter().enumerate() {
            let Some(s) = *s else { continue };
            let e = span.entry(plays[r]).or_insert((s, s));
            *e = (e.0.min(s), e.1.max(s));
        }
        let mut cut: BTreeMap<u32, SimDur> = BTreeMap::new();
        let (mut fractions, mut spanned) = (0.0, 0u32);
        let first_wave: Option<BTreeSet<u32>> = (lanes > 0).then(|| {
            let jobs = super::dag::dag_plays(self);
            jobs.iter().take(lanes as usize).filter_map(|j| j.first()).map(|r| plays[*r]).collect()
        });
        for (&play, &(lo, hi)) in &span {
            if first_wave.as_ref().is_some_and(|w| !w.contains(&play)) {
                continue;
            }
            let u = Rng::new(mix2(seed ^ SNAPSHOT_NAMESPACE, u64::from(play))).next_f64();
            let f = CUT_RANGE.0 + (CUT_RANGE.1 - CUT_RANGE.0) * u;
            let width = hi.as_ns() - lo.as_ns();
            if width > 0 {
                fractions += f;
                spanned += 1;
            }
            cut.insert(play, SimDur::from_ns(lo.as_ns() + (width as f64 * f) as u64));
        }
        // A row on a cycle has no start; it is kept as it is (the caller refuses cycles).
        let kept: Vec<bool> = starts
            .iter()
            .enumerate()
            .map(|(r, s)| s.is_none_or(|s| cut.get(&plays[r]).is_none_or(|c| s >= *c)))
            .collect();
        let mut new_index = vec![u32::MAX; self.rows.len()];
        for (i, r) in (0..self.rows.len()).filter(|r| kept[*r]).enumerate() {
            new_index[r] = i as u32;
        }
        let mut rows: Vec<TraceRow> = Vec::new();
        let mut ids = Vec::new();
        for (r, row) in self.rows.iter().enumerate().filter(|(r, _)| kept[*r]) {
            let mut out = row.clone();
            out.wait_for = row
                .wait_for
                .iter()
                .filter_map(|d| new_index.get(*d as usize).copied().filter(|i| *i != u32::MAX))
                .collect();
            let (play, start) = (plays[r], starts[r]);
            if out.wait_for.is_empty() {
                if let (Some(s), Some(c), Some(&(lo, _))) = (start, cut.get(&play), span.get(&play)) {
                    out.timestamp = lo + SimDur::from_ns(s.as_ns() - c.as_ns());
                    out.delay = None;
                }
            }
            rows.push(out);
            if let Some(id) = self.request_ids.get(r) {
                ids.push(id.clone());
            }
        }
        // Timestamps start at zero, as a trace's do.
        let first = rows.iter().filter(|r| r.wait_for.is_empty()).map(|r| r.timestamp).min();
        if let Some(first) = first {
            for row in rows.iter_mut().filter(|r| r.wait_for.is_empty()) {
                row.timestamp = SimDur::from_ns(row.timestamp.as_ns() - first.as_ns());
            }
        }
        // Per conversation: its last row before the cut.
        let keys = self.row_keys();
        let mut last: BTreeMap<u32, (SimDur, usize)> = BTreeMap::new();
        for (r, k) in keys.iter().enumerate() {
            if let (false, Some(s)) = (kept[r], starts[r]) {
                let e = last.entry(k.0).or_insert((s, r));
                if (s, r) >= *e {
                    *e = (s, r);
                }
            }
        }
        let primers: Vec<TraceRow> = last
            .values()
            .map(|(_, r)| TraceRow {
                timestamp: SimDur::ZERO,
                output_tokens: 1,
                delay: None,
                wait_for: Vec::new(),
                ..self.rows[*r].clone()
            })
            .collect();
        let history = kept.iter().filter(|k| !**k).count() as u32;
        let cut_plays: BTreeSet<u32> = (0..self.rows.len()).filter(|r| !kept[*r]).map(|r| plays[r]).collect();
        let stats = Snapshot {
            seed,
            plays: span.len() as u32,
            cut_plays: cut_plays.len() as u32,
            history_requests: history,
            replayed_requests: rows.len() as u32,
            mean_cut_fraction: if spanned > 0 { fractions / f64::from(spanned) } else { 0.0 },
            primers,
        };
        let mut t = Trace::dag(rows, self.block_size);
        t.request_ids = ids;
        t.snapshot = Some(stats);
        t
    }
}
