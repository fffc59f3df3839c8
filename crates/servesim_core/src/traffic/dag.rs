//! Dependency-graph traces (agentic Mooncake): which rows wait for which, the plays they
//! form, and the traffic's side of replaying them — rows sent as what they wait for
//! completes, plays held in lanes.

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use super::{trace_prompt, Source, Trace, Traffic};
use crate::request::ALL_SHARED;
use crate::units::{SimDur, SimTime};

impl Trace {
    /// In a dependency graph, each row's play: the rows joined to it by `wait_for`, in either
    /// direction, named by their first row's index.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // Row counts are far below 2^32.
    pub fn plays(&self) -> Vec<u32> {
        fn root(parent: &mut [usize], mut r: usize) -> usize {
            while parent[r] != r {
                parent[r] = parent[parent[r]];
                r = parent[r];
            }
            r
        }
        let n = self.rows.len();
        let mut parent: Vec<usize> = (0..n).collect();
        for (r, row) in self.rows.iter().enumerate() {
            for &d in row.wait_for.iter().filter(|d| (**d as usize) < n) {
                let (a, b) = (root(&mut parent, r), root(&mut parent, d as usize));
                parent[a.max(b)] = a.min(b);
            }
        }
        (0..n).map(|r| root(&mut parent, r) as u32).collect()
    }

    /// In a dependency graph, its rows in an order where each comes after every row it waits
    /// for (Kahn's); rows on a cycle or waiting for one, which the caller should have refused,
    /// are left out.
    #[must_use]
    pub fn dependency_order(&self) -> Vec<usize> {
        let n = self.rows.len();
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut left: Vec<usize> = self.rows.iter().map(|r| r.wait_for.len()).collect();
        for (r, row) in self.rows.iter().enumerate() {
            for &d in &row.wait_for {
                if let Some(ds) = dependents.get_mut(d as usize) {
                    ds.push(r);
                }
            }
        }
        let mut order = Vec::with_capacity(n);
        let mut ready: Vec<usize> = (0..n).filter(|r| left[*r] == 0).collect();
        while let Some(r) = ready.pop() {
            order.push(r);
            for &d in &dependents[r] {
                left[d] -= 1;
                if left[d] == 0 {
                    ready.push(d);
                }
            }
        }
        order
    }

    /// In a dependency graph, the requests of its longest chain of `wait_for` (rows on a
    /// cycle left out, [`Trace::dependency_order`]).
    #[must_use]
    pub fn longest_chain(&self) -> usize {
        let mut depth = vec![0usize; self.rows.len()];
        for r in self.dependency_order() {
            let before = self.rows[r].wait_for.iter().filter_map(|d| depth.get(*d as usize)).max();
            depth[r] = before.copied().unwrap_or(0) + 1;
        }
        depth.into_iter().max().unwrap_or(0)
    }

    /// In a dependency graph, the (session, position in the session) each row's request
    /// carries, in row order: a row without a session gets one of its own, numbered after the
    /// trace's sessions; positions follow file order.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // Row counts are far below 2^32.
    pub fn row_keys(&self) -> Vec<(u32, u32)> {
        let mut next_free = self.rows.iter().filter_map(|r| r.session).max().map_or(0, |s| s + 1);
        let mut taken: Vec<u32> = Vec::new();
        self.rows
            .iter()
            .map(|row| {
                let s = row.session.unwrap_or_else(|| {
                    next_free += 1;
                    next_free - 1
                });
                if taken.len() <= s as usize {
                    taken.resize(s as usize + 1, 0);
                }
                taken[s as usize] += 1;
                (s, taken[s as usize] - 1)
            })
            .collect()
    }
}

/// What the replay of a dependency-graph trace keeps: which rows wait for which, and how many
/// of each row's dependencies have yet to complete.
pub(super) struct Dag {
    /// Per row: dependencies not yet complete.
    remaining: Vec<u32>,
    /// Per row: the latest completion among its dependencies so far.
    ready_after: Vec<SimTime>,
    /// The rows waiting for row `r` are `dependents[starts[r]..starts[r + 1]]`.
    starts: Vec<u32>,
    dependents: Vec<u32>,
    /// Per row: the (session, position in the session) its request carries; a row without a
    /// session gets one of its own, numbered after the trace's.
    keys: Vec<(u32, u32)>,
    /// Per session: its rows in file order, so that a finished request names its row.
    session_rows: Vec<Vec<u32>>,
    /// Plays in lanes, when the load limits the plays at once.
    lanes: Option<Lanes>,
}

/// A dependency graph's plays in lanes: each play is a job (its roots, by timestamp).
struct Lanes {
    /// Most plays at once.
    max: u32,
    /// Per row: its play's job.
    job_of_row: Vec<u32>,
    /// Per job: its rows not yet done.
    remaining: Vec<u32>,
    /// Plays started and not yet done.
    in_flight: u32,
    /// The next play is due but waits for a lane.
    waiting: bool,
}

impl Dag {
    #[allow(clippy::cast_possible_truncation)] // Row counts are far below 2^32.
    pub(super) fn new(t: &Trace, jobs: &[Vec<usize>], max_plays: u32) -> Self {
        let n = t.rows.len();
        let mut remaining = vec![0u32; n];
        let mut counts = vec![0u32; n + 1];
        for (r, row) in t.rows.iter().enumerate() {
            remaining[r] = row.wait_for.len() as u32;
            for &d in &row.wait_for {
                if let Some(c) = counts.get_mut(d as usize) {
                    *c += 1;
                }
            }
        }
        let mut starts = Vec::with_capacity(n + 1);
        let mut total = 0u32;
        for c in &counts[..n] {
            starts.push(total);
            total += c;
        }
        starts.push(total);
        let mut fill = starts.clone();
        let mut dependents = vec![0u32; total as usize];
        for (r, row) in t.rows.iter().enumerate() {
            for &d in &row.wait_for {
                if let Some(at) = fill.get_mut(d as usize) {
                    dependents[*at as usize] = r as u32;
                    *at += 1;
                }
            }
        }
        let keys = t.row_keys();
        let mut session_rows: Vec<Vec<u32>> = Vec::new();
        for (r, &(s, _)) in keys.iter().enumerate() {
            if session_rows.len() <= s as usize {
                session_rows.resize(s as usize + 1, Vec::new());
            }
            session_rows[s as usize].push(r as u32);
        }
        let lanes = (max_plays > 0).then(|| {
            // Jobs are plays here: a row's job is its play's, found through the play's roots.
            let plays = t.plays();
            let mut job_of_play = vec![u32::MAX; n];
            for (j, roots) in jobs.iter().enumerate() {
                for &r in roots {
                    job_of_play[plays[r] as usize] = j as u32;
                }
            }
            let job_of_row: Vec<u32> = plays.iter().map(|p| job_of_play[*p as usize]).collect();
            let mut remaining = vec![0u32; jobs.len()];
            for j in &job_of_row {
                if let Some(c) = remaining.get_mut(*j as usize) {
                    *c += 1;
                }
            }
            Lanes { max: max_plays, job_of_row, remaining, in_flight: 0, waiting: false }
        });
        Dag { remaining, ready_after: vec![SimTime::ZERO; n], starts, dependents, keys, session_rows, lanes }
    }

    /// The key the request of row `r` carries.
    pub(super) fn key(&self, r: usize) -> Option<(u32, u32)> {
        self.keys.get(r).copied()
    }

    /// Whether plays run in lanes (each play a job).
    pub(super) fn in_lanes(&self) -> bool {
        self.lanes.is_some()
    }

    /// Whether the arrival of the request of `key` opens a job: a root, or in lanes a play's
    /// first root (`jobs` are the traffic's jobs).
    pub(super) fn opens_job(&self, key: (u32, u32), t: &Trace, jobs: &[Vec<usize>]) -> bool {
        self.row_of(key).is_some_and(|r| match &self.lanes {
            Some(l) => l
                .job_of_row
                .get(r)
                .and_then(|j| jobs.get(*j as usize))
                .is_some_and(|roots| roots.first() == Some(&r)),
            None => t.rows.get(r).is_some_and(|row| row.wait_for.is_empty()),
        })
    }

    /// In lanes with none free, notes that the next play waits for one; true then.
    pub(super) fn wait_for_lane(&mut self) -> bool {
        match self.lanes.as_mut() {
            Some(l) if l.in_flight >= l.max => {
                l.waiting = true;
                true
            }
            _ => false,
        }
    }

    /// The row a request of `key` replays.
    pub(super) fn row_of(&self, key: (u32, u32)) -> Option<usize> {
        self.session_rows.get(key.0 as usize)?.get(key.1 as usize).map(|r| *r as usize)
    }
}

impl Traffic {
    /// Sends trace row `r` of graph `t` at `at`, as the request of `key`.
    fn send_row(&mut self, t: &Trace, r: usize, at: SimTime, key: (u32, u32)) {
        let Some(row) = t.rows.get(r) else { return };
        let public = t.public_tokens.get(r).copied().unwrap_or(ALL_SHARED);
        let prompt = trace_prompt(row, t.block_size, self.stream_id(2 * u64::from(self.requests_sent)));
        let spec = self.request(at, prompt, row.output_tokens, Some(key), public);
        self.pending.push(at, spec);
    }

    /// In a dependency graph, the request of `key` completed at `now`: every row waiting for
    /// it counts one dependency fewer, and a row with none left is sent its delay after the
    /// latest of them. True when nothing waits for the row.
    pub(super) fn release_dependents(&mut self, now: SimTime, key: Option<(u32, u32)>) -> bool {
        let Source::Trace(t) = &self.spec.source else { return true };
        let t = Arc::clone(t);
        let Some(dag) = self.dag.as_mut() else { return true };
        let Some(row) = key.and_then(|k| dag.row_of(k)) else { return true };
        let (from, to) = (dag.starts[row] as usize, dag.starts[row + 1] as usize);
        let mut ready = Vec::new();
        for &d in &dag.dependents[from..to] {
            let d = d as usize;
            dag.ready_after[d] = dag.ready_after[d].max(now);
            dag.remaining[d] = dag.remaining[d].saturating_sub(1);
            if dag.remaining[d] == 0 {
                ready.push((d, dag.ready_after[d], dag.keys[d]));
            }
        }
        for (d, after, key) in ready {
            if self.requests_sent >= self.max_requests {
                break;
            }
            let Some(row) = t.rows.get(d) else { continue };
            let at = after + self.scaled(row.delay.unwrap_or(SimDur::ZERO));
            self.send_row(&t, d, at, key);
        }
        from == to
    }

    /// In lanes, one row of a play is done at `now`: once all are, the play leaves its lane,
    /// and a play waiting for one starts (at its timestamp, if that is later).
    pub(super) fn free_lane(&mut self, now: SimTime, key: Option<(u32, u32)>) {
        let Some(dag) = self.dag.as_mut() else { return };
        let Some(row) = key.and_then(|k| dag.row_of(k)) else { return };
        let Some(lanes) = dag.lanes.as_mut() else { return };
        let Some(left) = lanes.job_of_row.get(row).and_then(|j| lanes.remaining.get_mut(*j as usize)) else {
            return;
        };
        *left = left.saturating_sub(1);
        if *left > 0 {
            return;
        }
        lanes.in_flight = lanes.in_flight.saturating_sub(1);
        if core::mem::take(&mut lanes.waiting) {
            let at = self.trace_job_start(self.jobs_started as usize).max(now);
            self.start_job(at);
        }
    }

    /// In lanes, starts the next play at `at`: its roots, each its timestamp's offset from the
    /// play's first after `at`.
    pub(super) fn start_play(&mut self, at: SimTime) -> bool {
        let Source::Trace(t) = &self.spec.source else { return false };
        let t = Arc::clone(t);
        let Some(roots) = self.trace_jobs.get(self.jobs_started as usize).cloned() else { return false };
        let Some(first) = roots.first().and_then(|r| t.rows.get(*r)) else { return false };
        let base = first.timestamp;
        for r in roots {
            if self.requests_sent >= self.max_requests {
                break;
            }
            let (Some(row), Some(key)) = (t.rows.get(r), self.dag.as_ref().and_then(|d| d.key(r))) else {
                continue;
            };
            let offset = SimDur::from_ns(row.timestamp.as_ns().saturating_sub(base.as_ns()));
            let when = at + self.scaled(offset);
            self.send_row(&t, r, when, key);
        }
        if let Some(l) = self.dag.as_mut().and_then(|d| d.lanes.as_mut()) {
            l.in_flight += 1;
        }
        self.jobs_started += 1;
        self.last_open_start = at;
        true
    }
}

/// A dependency graph's roots (rows that wait for nothing), each a job of one request, in
/// timestamp order (stable).
pub(super) fn dag_roots(t: &Trace) -> Vec<Vec<usize>> {
    let mut roots: Vec<Vec<usize>> =
        t.rows.iter().enumerate().filter(|(_, r)| r.wait_for.is_empty()).map(|(i, _)| vec![i]).collect();
    roots.sort_by_key(|j| j.first().map_or(SimDur::ZERO, |r| t.rows[*r].timestamp));
    roots
}

/// A dependency graph's plays ([`Trace::plays`]) as jobs: each its roots in timestamp order
/// (stable), plays in the order of their first roots (stable).
pub(super) fn dag_plays(t: &Trace) -> Vec<Vec<usize>> {
    let plays = t.plays();
    let mut by_play: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (r, row) in t.rows.iter().enumerate() {
        if row.wait_for.is_empty() {
            by_play.entry(plays[r]).or_default().push(r);
        }
    }
    let mut jobs: Vec<Vec<usize>> = by_play.into_values().collect();
    for j in &mut jobs {
        j.sort_by_key(|r| t.rows[*r].timestamp);
    }
    jobs.sort_by_key(|j| j.first().map_or(SimDur::ZERO, |r| t.rows[*r].timestamp));
    jobs
}
