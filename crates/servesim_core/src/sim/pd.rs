//! Prefill/decode disaggregation in the event loop: a new request's prefill placement, the
//! hand-off of a finished prefill to a decode worker (a reservation there, then the KV
//! transfer over the links) and the decode side taking over when the transfer ends.

use alloc::vec::Vec;

use super::{Event, Simulation};
use crate::engine::Backend;
use crate::queue::event_key;
use crate::record::Record;
use crate::request::{ReqId, Status};
use crate::worker::Worker;

impl Simulation {
    pub(super) fn is_decode_worker(&self, w: usize) -> bool {
        self.pd.as_ref().is_some_and(|pd| w >= pd.prefill_workers)
    }

    /// Routes a new request in a disaggregated deployment.
    pub(super) fn arrive_disaggregated(&mut self, spec: crate::request::RequestSpec) {
        let Some(np) = self.pd.as_ref().map(|pd| pd.prefill_workers) else { return };
        let id = self.next_slot();
        let mut req = self.admit_record(spec);
        req.phase = crate::request::Phase::Prefill;
        if self.prefix_caching {
            req.hash_known_blocks();
        }
        // A request either pool could never hold is refused, as an engine refuses a prompt
        // beyond its context.
        let cap = |ws: &[Worker]| {
            ws.iter().filter_map(|w| w.ranks.first()).map(|r| r.kv.capacity_tokens()).min().unwrap_or(0)
        };
        let fits = u64::from(req.input_tokens.saturating_add(req.spec.output_tokens))
            <= cap(&self.workers[..np]).min(cap(&self.workers[np..]));
        let too_long =
            self.context_limit.is_some_and(|l| req.input_tokens.saturating_add(req.spec.output_tokens) > l);
        if !fits || too_long {
            req.status = Status::Rejected;
            self.traffic.on_request_done(self.now, (req.spec.session, req.spec.warmup), req.content());
            self.records.set(req.seq, Record::from(&req));
            self.finished += 1;
            return;
        }
        let p = self.router.route(&req, &self.workers[..np], &self.requests);
        req.prefill_route_overlap_tokens = p.overlap_tokens;
        #[allow(clippy::cast_possible_truncation)]
        {
            req.prefill_worker = Some(p.worker as u32);
        }
        let Some(pd) = self.pd.as_mut() else { return };
        if pd.destination_first {
            let d = pd.decode_router.route(&req, &self.workers[np..], &self.requests);
            let dw = np + d.worker;
            req.route_overlap_tokens = d.overlap_tokens;
            #[allow(clippy::cast_possible_truncation)]
            {
                req.decode_worker = Some(dw as u32);
            }
            self.interrupt(dw);
            self.workers[dw].enqueue_handoff(id, &mut req);
            self.store(id, req);
            self.try_reserve(dw);
        } else {
            self.interrupt(p.worker);
            self.workers[p.worker].enqueue(self.now, id, &mut req);
            self.store(id, req);
            self.dirty[p.worker] = true;
        }
    }

    /// A prefill finished: find the KV a destination and start moving it.
    pub(super) fn hand_off(&mut self, id: ReqId) {
        let Some(pd) = self.pd.as_mut() else { return };
        let np = pd.prefill_workers;
        let r = &mut self.requests[id as usize];
        r.prefill_rank = r.rank;
        r.hash_known_blocks();
        if pd.destination_first {
            // The decode worker reserved KV before prefill started, on its own rank (the
            // prefill worker's rank numbering is another worker's).
            r.unpark_dest();
            if let Some(dw) = r.decode_worker {
                r.worker = dw;
            }
            r.rank = r.decode_rank;
            self.start_transfer(id);
            return;
        }
        let d = pd.decode_router.route(&self.requests[id as usize], &self.workers[np..], &self.requests);
        let dw = np + d.worker;
        let r = &mut self.requests[id as usize];
        r.route_overlap_tokens = d.overlap_tokens;
        #[allow(clippy::cast_possible_truncation)]
        {
            r.decode_worker = Some(dw as u32);
        }
        self.interrupt(dw);
        self.workers[dw].enqueue_handoff(id, &mut self.requests[id as usize]);
        self.try_reserve(dw);
    }

    /// Reserves decode KV for queued handoffs on worker `w`, in order, as long as they fit.
    pub(super) fn try_reserve(&mut self, w: usize) {
        let Some(dest_first) = self.pd.as_ref().map(|pd| pd.destination_first) else { return };
        let mut reserved = Vec::new();
        {
            let worker = &mut self.workers[w];
            for rank in &mut worker.ranks {
                while let Some(&id) = rank.handoffs.front() {
                    let Some(hit) =
                        crate::engine::reserve_destination(&worker.cfg, rank, &mut self.requests, id)
                    else {
                        break;
                    };
                    rank.handoffs.pop_front();
                    rank.loading.push(id);
                    let r = &mut self.requests[id as usize];
                    r.pd.dest_reserved = self.now;
                    r.decode_reused = hit.min(r.input_tokens);
                    reserved.push(id);
                }
            }
        }
        if reserved.is_empty() {
            return;
        }
        self.interrupt(w);
        for id in reserved {
            if dest_first {
                // Keep the reservation aside and send the prompt to its prefill worker.
                let r = &mut self.requests[id as usize];
                r.park_dest();
                let Some(p) = r.prefill_worker.map(|p| p as usize) else { continue };
                r.status = Status::Waiting;
                self.interrupt(p);
                self.workers[p].enqueue(self.now, id, &mut self.requests[id as usize]);
                self.dirty[p] = true;
            } else {
                self.start_transfer(id);
            }
        }
    }

    fn start_transfer(&mut self, id: ReqId) {
        let Some(pd) = self.pd.as_mut() else { return };
        let np = pd.prefill_workers;
        let r = &mut self.requests[id as usize];
        // vLLM's decode worker recomputes the last prompt token, so its KV is not moved.
        let recompute = self.workers.get(np).is_some_and(|w| w.cfg.backend == Backend::Vllm);
        let present = if pd.missing_only { r.decode_reused } else { 0 };
        let tokens = r.input_tokens.saturating_sub(u32::from(recompute)).saturating_sub(present);
        r.transferred_tokens = tokens;
        let (Some(p), Some(d)) = (r.prefill_worker, r.decode_worker) else { return };
        #[allow(clippy::cast_precision_loss)]
        let bytes = f64::from(tokens) * pd.bytes_per_token + pd.state_bytes;
        let (_, completions) = pd.net.start(self.now, id, p as usize, d as usize - np, bytes);
        self.push_completions(&completions);
    }

    fn push_completions(&mut self, completions: &[crate::transfer::Completion]) {
        for c in completions {
            #[allow(clippy::cast_possible_truncation)] // Transfer slots stay far below 2^32.
            let slot = c.id as u32;
            self.queue.push_keyed(
                c.at,
                event_key(self.now, 0),
                Event::TransferDone { slot, generation: c.generation },
            );
        }
    }

    pub(super) fn on_transfer_done(&mut self, slot: usize, generation: u64) {
        let Some(pd) = self.pd.as_mut() else { return };
        if pd.net.get(slot).is_none_or(|t| t.generation != generation) {
            return;
        }
        let (done, completions) = pd.net.finish(self.now, slot);
        self.push_completions(&completions);
        let Some(t) = done else { return };
        let id = t.req;
        self.materialize_all(Some(self.cur_key));
        // The source KV is released on the prefill worker...
        let (p, prank) = {
            let r = &self.requests[id as usize];
            (r.prefill_worker.unwrap_or(0) as usize, r.prefill_rank as usize)
        };
        self.interrupt(p);
        if let Some(rank) = self.workers[p].ranks.get_mut(prank) {
            crate::engine::release_source(rank, &mut self.requests[id as usize], self.now);
        }
        self.requests[id as usize].pd.source_released = self.now;
        self.dirty[p] = true;
        // ...and the request becomes schedulable on its decode worker.
        let (dw, drank) = {
            let r = &self.requests[id as usize];
            (r.decode_worker.unwrap_or(0) as usize, r.rank as usize)
        };
        self.interrupt(dw);
        self.requests[id as usize].pd.dest_activated = self.now;
        let worker = &mut self.workers[dw];
        let finished = match worker.ranks.get_mut(drank) {
            Some(rank) => crate::engine::activate(&worker.cfg, rank, &mut self.requests, id, self.now),
            None => false,
        };
        self.dirty[dw] = true;
        // SGLang and TensorRT-LLM hand the prefill's first token over with the KV.
        self.observe_first_token(id, p);
        if finished {
            self.complete(id);
            self.try_reserve(dw);
        }
        self.schedule_next_arrival();
    }
}
