//! KV transfers between prefill and decode workers.
//!
//! Each transfer moves a request's KV from a prefill worker to a decode worker. Every worker
//! has one link of the configured bandwidth (egress on prefill workers, ingress on decode
//! workers). With `Sharing::MaxMin`, concurrent transfers share links max-min fairly
//! (progressive filling: the most contended link fixes its flows' rates, its capacity is
//! removed from their other links, repeat), re-divided whenever a transfer starts or
//! finishes. `Sharing::Independent` gives every transfer the full bandwidth, as AISimulate
//! does ("bandwidth applies to each transfer independently"). Without a bandwidth, transfers
//! take no time.

use alloc::vec::Vec;

use crate::request::ReqId;
use crate::units::{SimDur, SimTime};

/// How concurrent transfers share bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Max-min fair sharing of each worker's link.
    MaxMin,
    /// Every transfer at full bandwidth.
    Independent,
}

/// One transfer in flight.
#[derive(Clone, Debug, PartialEq)]
pub struct Transfer {
    /// The request whose KV moves.
    pub req: ReqId,
    /// Prefill worker (index in the prefill pool).
    pub src: usize,
    /// Decode worker (index in the decode pool).
    pub dst: usize,
    /// Bytes still to move.
    pub remaining: f64,
    /// Current rate (bytes/s).
    pub rate: f64,
    /// Completion-event generation (older events are stale).
    pub generation: u64,
}

/// All transfers of a run and their links.
#[derive(Clone, Debug)]
pub struct TransferNet {
    bandwidth: Option<f64>,
    sharing: Sharing,
    prefill_workers: usize,
    decode_workers: usize,
    slots: Vec<Option<Transfer>>,
    last_update: SimTime,
    /// Bytes moved so far.
    pub bytes_moved: f64,
}

/// A transfer's (re)scheduled completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Slot of the transfer.
    pub id: usize,
    /// When it completes at current rates.
    pub at: SimTime,
    /// Its generation.
    pub generation: u64,
}

impl TransferNet {
    /// A network between `prefill_workers` and `decode_workers` with per-link `bandwidth`
    /// in bytes/s (`None`: instant transfers).
    #[must_use]
    pub fn new(
        bandwidth: Option<f64>,
        sharing: Sharing,
        prefill_workers: usize,
        decode_workers: usize,
    ) -> Self {
        TransferNet {
            bandwidth: bandwidth.filter(|b| *b > 0.0 && b.is_finite()),
            sharing,
            prefill_workers,
            decode_workers,
            slots: Vec::new(),
            last_update: SimTime::ZERO,
            bytes_moved: 0.0,
        }
    }

    /// Transfers in flight.
    #[must_use]
    pub fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// The transfer in slot `id`.
    #[must_use]
    pub fn get(&self, id: usize) -> Option<&Transfer> {
        self.slots.get(id).and_then(Option::as_ref)
    }

    /// Advances every transfer's progress to `now` at its current rate.
    fn advance(&mut self, now: SimTime) {
        #[allow(clippy::cast_precision_loss)]
        let dt = (now - self.last_update).as_secs_f64();
        if dt > 0.0 {
            for t in self.slots.iter_mut().flatten() {
                let moved = (t.rate * dt).min(t.remaining);
                t.remaining -= moved;
                self.bytes_moved += moved;
            }
        }
        self.last_update = now;
    }

    /// Recomputes rates and returns every transfer's completion at the new rates (all
    /// generations bumped, so previously scheduled completions become stale).
    fn reschedule(&mut self, now: SimTime) -> Vec<Completion> {
        let rates = self.rates();
        let mut out = Vec::new();
        for (id, slot) in self.slots.iter_mut().enumerate() {
            let Some(t) = slot else { continue };
            t.rate = rates[id];
            t.generation += 1;
            let at = if t.remaining <= 0.0 || t.rate.is_infinite() {
                now
            } else {
                now + SimDur::from_secs_f64(t.remaining / t.rate)
            };
            out.push(Completion { id, at, generation: t.generation });
        }
        out
    }

    /// Starts moving `bytes` for `req` from prefill worker `src` to decode worker `dst`.
    /// Returns the new slot and every transfer's completion (rates re-divided).
    pub fn start(
        &mut self,
        now: SimTime,
        req: ReqId,
        src: usize,
        dst: usize,
        bytes: f64,
    ) -> (usize, Vec<Completion>) {
        self.advance(now);
        let t = Transfer { req, src, dst, remaining: bytes.max(0.0), rate: 0.0, generation: 0 };
        let id = match self.slots.iter().position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(t);
                i
            }
            None => {
                self.slots.push(Some(t));
                self.slots.len() - 1
            }
        };
        (id, self.reschedule(now))
    }

    /// Completes transfer `id` (its completion event fired with the current generation).
    /// Returns the transfer and the other transfers' new completions.
    pub fn finish(&mut self, now: SimTime, id: usize) -> (Option<Transfer>, Vec<Completion>) {
        self.advance(now);
        let done = self.slots.get_mut(id).and_then(Option::take);
        if let Some(t) = &done {
            self.bytes_moved += t.remaining.max(0.0);
        }
        (done, self.reschedule(now))
    }

    /// Rates per slot (bytes/s).
    fn rates(&self) -> Vec<f64> {
        let n = self.slots.len();
        let Some(bw) = self.bandwidth else { return alloc::vec![f64::INFINITY; n] };
        if self.sharing == Sharing::Independent {
            return alloc::vec![bw; n];
        }
        // Links 0..P are prefill egress, P..P+D decode ingress.
        let links = self.prefill_workers + self.decode_workers;
        let mut cap = alloc::vec![bw; links];
        let mut rate = alloc::vec![0.0; n];
        let mut frozen: Vec<bool> = self.slots.iter().map(Option::is_none).collect();
        loop {
            let mut count = alloc::vec![0usize; links];
            for (i, s) in self.slots.iter().enumerate() {
                if let (false, Some(t)) = (frozen[i], s) {
                    count[t.src] += 1;
                    count[self.prefill_workers + t.dst] += 1;
                }
            }
            // The bottleneck: the link with the smallest fair share (lowest index on ties).
            let mut best: Option<(usize, f64)> = None;
            for (l, c) in count.iter().enumerate() {
                if *c == 0 {
                    continue;
                }
                #[allow(clippy::cast_precision_loss)]
                let share = cap[l] / *c as f64;
                if best.is_none_or(|(_, s)| share < s) {
                    best = Some((l, share));
                }
            }
            let Some((link, share)) = best else { break };
            for (i, s) in self.slots.iter().enumerate() {
                let Some(t) = s else { continue };
                if frozen[i] {
                    continue;
                }
                let (a, b) = (t.src, self.prefill_workers + t.dst);
                if a == link || b == link {
                    rate[i] = share;
                    frozen[i] = true;
                    cap[a] = (cap[a] - share).max(0.0);
                    cap[b] = (cap[b] - share).max(0.0);
                }
            }
        }
        rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: f64 = 1e9;

    #[test]
    fn a_lone_transfer_runs_at_full_bandwidth() {
        let mut net = TransferNet::new(Some(10.0 * GB), Sharing::MaxMin, 2, 2);
        let (_, c) = net.start(SimTime::ZERO, 0, 0, 0, 5.0 * GB);
        assert_eq!(c[0].at, SimTime::from_ms(500));
    }

    #[test]
    fn two_transfers_on_one_link_share_it_and_speed_up_when_one_ends() {
        let mut net = TransferNet::new(Some(10.0 * GB), Sharing::MaxMin, 1, 2);
        let (a, _) = net.start(SimTime::ZERO, 0, 0, 0, 5.0 * GB);
        // At 100 ms, a has moved 1 GB; b joins on the same prefill egress.
        let (b, c) = net.start(SimTime::from_ms(100), 1, 0, 1, 1.0 * GB);
        let at = |id| c.iter().find(|x| x.id == id).unwrap().at;
        // Each gets 5 GB/s: b needs 200 ms; a has 4 GB left.
        assert_eq!(at(b), SimTime::from_ms(300));
        let (done, c) = net.finish(SimTime::from_ms(300), b);
        assert_eq!(done.unwrap().req, 1);
        // a moved 1 GB more by 300 ms; its last 3 GB at the full 10 GB/s: 300 ms.
        assert_eq!(c.iter().find(|x| x.id == a).unwrap().at, SimTime::from_ms(600));
        // Independent sharing would have finished a at 500 ms regardless.
        let mut ind = TransferNet::new(Some(10.0 * GB), Sharing::Independent, 1, 2);
        ind.start(SimTime::ZERO, 0, 0, 0, 5.0 * GB);
        let (_, c) = ind.start(SimTime::from_ms(100), 1, 0, 1, 1.0 * GB);
        assert_eq!(c.iter().find(|x| x.id == 0).unwrap().at, SimTime::from_ms(500));
    }

    #[test]
    fn max_min_gives_spare_capacity_to_the_less_contended_flow() {
        // f1: P0->D0, f2: P1->D0, f3: P2->D0 share D0's ingress (1/3 each); f4: P0->D1 shares
        // P0's egress with f1 only, so it gets the 2/3 that f1 cannot use.
        let mut net = TransferNet::new(Some(3.0 * GB), Sharing::MaxMin, 3, 2);
        for (req, src, dst) in [(1, 0, 0), (2, 1, 0), (3, 2, 0), (4, 0, 1)] {
            net.start(SimTime::ZERO, req, src, dst, 1.0 * GB);
        }
        let rates: Vec<f64> = (0..4).map(|i| net.get(i).unwrap().rate / GB).collect();
        assert!(
            (rates[0] - 1.0).abs() < 1e-9 && (rates[1] - 1.0).abs() < 1e-9 && (rates[2] - 1.0).abs() < 1e-9
        );
        assert!((rates[3] - 2.0).abs() < 1e-9, "{rates:?}");
    }

    #[test]
    fn no_bandwidth_means_instant() {
        let mut net = TransferNet::new(None, Sharing::MaxMin, 1, 1);
        let (_, c) = net.start(SimTime::from_ms(7), 0, 0, 0, 1e12);
        assert_eq!(c[0].at, SimTime::from_ms(7));
    }
}
