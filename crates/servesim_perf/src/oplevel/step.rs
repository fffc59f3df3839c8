//! [`OpLevelTimer`] as the core's [`StepTimer`]: single steps, decode runs fast-forwarded
//! step by step with the parts that do not change evaluated once, breakdowns and the
//! provenance report.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use servesim_core::timing::{RankLoad, StepBreakdown, StepTimer, TimerReport, TimingError};
use servesim_core::units::{SimDur, SimTime};

use super::ops::GenAttention;
use super::{generation_secs, OpLevelTimer, RunRank, OP_KINDS, PREFILL_SCALE_PART, RUN_BATCH, STAGE_PARTS};
use crate::tables::{Provenance, Source};

/// Checks a step time and converts it.
fn checked_step(s: f64, ranks: &[RankLoad]) -> Result<SimDur, TimingError> {
    if !(s.is_finite() && s >= 0.0) {
        return Err(TimingError {
            message: format!("op-level model produced a step time of {s} s for {ranks:?}"),
        });
    }
    Ok(SimDur::from_secs_f64(s))
}

impl StepTimer for OpLevelTimer {
    fn step_time(&mut self, ranks: &[RankLoad]) -> Result<SimDur, TimingError> {
        checked_step(self.step_seconds(ranks), ranks)
    }

    /// Without pipeline parallelism a decode-only step is `stage_seconds`' sum in which only
    /// generation attention changes from step to step: the rest (linear layers, LM head,
    /// experts, their lookup tallies) is evaluated once for the run, and each step adds the
    /// same terms in the same order, so every step time is bit for bit `step_time`'s.
    fn extend_decode_run(
        &mut self,
        loads: &[RankLoad],
        ends: &mut Vec<SimTime>,
        max_steps: usize,
        max_end: SimTime,
    ) -> Result<(), TimingError> {
        if ends.is_empty() {
            return Ok(());
        }
        if self.s.parallelism.pipeline > 1
            || self.s.draft_layers > 0
            || loads.iter().any(|r| !r.prefill.is_empty())
            || loads.iter().all(RankLoad::is_empty)
        {
            return servesim_core::timing::extend_decode_run_stepwise(self, loads, ends, max_steps, max_end);
        }
        // Per busy rank: linear layers + LM head (+ no context attention), as stage_seconds adds them.
        let (mut fixed, mut tallies) =
            (core::mem::take(&mut self.run_ranks), core::mem::take(&mut self.run_tallies));
        fixed.clear();
        tallies.clear();
        let mut all_tokens = 0u64;
        for r in loads.iter().filter(|r| !r.is_empty()) {
            let t = r.new_tokens();
            all_tokens += t;
            let graph = self.s.graphs.captures(t, false);
            let (dense, td) = self.memo_peek(if graph { 0 } else { 3 }, t);
            let (head, th) = self.memo_peek(1, u64::from(r.decode_requests));
            tallies.extend([td, th]);
            // `attention_part`'s context seconds for a decode-only load, term for term: a
            // hybrid model's Gated DeltaNet decode kernels (`gdn_secs`), which depend on the
            // batch alone.
            let ctx = if self.s.model.linear_attention.is_some() {
                let (gdn, tg) = self.memo_peek(5, u64::from(r.decode_requests));
                tallies.push(tg);
                0.0 + (0.0 + gdn)
            } else {
                0.0
            };
            fixed.push((
                dense + head + ctx,
                r.clone(),
                GenAttention::new(&self.s, r.decode_requests),
                [None, None],
            ));
        }
        let (shared, tm) = self.memo_peek(2, all_tokens);
        tallies.push(tm);
        let overhead = self.s.constants.step_overhead_s;
        let host = self.host_seconds(loads);
        let mut steps = 0u64;
        let layers = self.attention_layers();
        let mut prov = Provenance::default();
        let grid = self.gen_grid.as_deref();
        // One step of any run, through every rank's lookups.
        let step = |fixed: &mut [RunRank], prov: &mut Provenance| {
            let mut worst: f64 = 0.0;
            for (a, r, att, lines) in fixed {
                r.decode_kv_tokens += u64::from(r.decode_requests);
                // The batch's coordinates and grid lines along the KV length (full and
                // sliding-window layers), read as the run's steps read them.
                let gen = match att {
                    Some(att) => generation_secs(r, &layers, prov, |i, kv| att.on(grid, kv, &mut lines[i])),
                    None => 0.0,
                };
                worst = worst.max(*a + gen);
            }
            checked_step(worst + shared + overhead + host, loads)
        };
        // The common run: one busy rank whose attention layers all see the whole KV. Its
        // steps inside the line's cell take the plain blend inline, with `step`'s sums.
        let plain = fixed.len() == 1
            && fixed[0].2.is_some()
            && layers.full_layers > 0.0
            && !(layers.window.is_some() && layers.sliding_layers > 0.0);
        // Plain answers for the next steps, blended ahead in small batches.
        let (mut xs, mut lats) = ([0.0; RUN_BATCH], [0.0; RUN_BATCH]);
        let (mut have, mut used, mut last_dur) = (0, 0, SimDur::ZERO);
        let out = servesim_core::timing::push_run_steps(ends, max_steps, max_end, |steps_left, time_left| {
            steps += 1;
            let d = match &mut fixed[..] {
                [(a, r, _, [Some(line), _])] if plain => {
                    if used == have {
                        // About as many steps as fit in the time left, and the one that would
                        // not: blends past the run's end are wasted work.
                        let fit = time_left.as_ns().checked_div(last_dur.as_ns()).unwrap_or(u64::MAX);
                        let k = RUN_BATCH
                            .min(steps_left)
                            .min(usize::try_from(fit).unwrap_or(usize::MAX).saturating_add(1));
                        let per = u64::from(r.decode_requests);
                        let mut kv = r.decode_kv_tokens;
                        for x in &mut xs[..k] {
                            kv += per;
                            *x = (kv as f64 / f64::from(r.decode_requests)).min(layers.cap).max(1.0);
                        }
                        (have, used) = (line.plain_in_cell_many(&xs[..k], &mut lats[..k]), 0);
                    }
                    if used < have {
                        let ms = lats[used];
                        used += 1;
                        r.decode_kv_tokens += u64::from(r.decode_requests);
                        prov.count(Source::Interpolated);
                        // `0.0 +` and `0.0.max` repeat `generation_secs`' and `step`'s sums
                        // term for term (the same bits, even for a zero).
                        let gen = 0.0 + ms / 1e3 * layers.full_layers;
                        checked_step(0.0f64.max(*a + gen) + shared + overhead + host, loads)?
                    } else {
                        (have, used) = (0, 0);
                        step(&mut fixed, &mut prov)?
                    }
                }
                _ => step(&mut fixed, &mut prov)?,
            };
            last_dur = servesim_core::timing::step_dur(d);
            Ok(d)
        });
        self.used[const { Self::kind("attention") }].add(&prov);
        for &tally in &tallies {
            self.use_tally_times(tally, steps);
        }
        (self.run_ranks, self.run_tallies) = (fixed, tallies);
        out
    }

    /// `step_seconds` by part: the slowest pipeline micro-batch's stage parts scaled to the
    /// cycle (and to the draft layers), then the engine's step overhead and the host time.
    fn breakdown(&mut self, ranks: &[RankLoad]) -> Option<StepBreakdown> {
        // A breakdown re-times a step already counted: its lookups are put back after.
        let (used, uses) = (self.used, self.tally_uses.clone());
        let mut gpu = [0.0; STAGE_PARTS];
        let (mut overhead, mut host) = (0.0, 0.0);
        if !ranks.iter().all(RankLoad::is_empty) {
            let stages = self.s.parallelism.pipeline.max(1);
            let mut slowest = (f64::NEG_INFINITY, [0.0; STAGE_PARTS]);
            let cycle = servesim_core::timing::pipelined_seconds(ranks, stages, &mut |r| {
                let parts = self.stage_parts(r);
                let s: f64 = parts.iter().sum();
                if s > slowest.0 {
                    slowest = (s, parts);
                }
                s
            });
            let scale = if slowest.0 > 0.0 { cycle / slowest.0 * self.s.draft_scale() } else { 0.0 };
            gpu = slowest.1.map(|p| p * scale);
            overhead = self.s.constants.step_overhead_s;
            host = self.host_seconds(ranks);
        }
        self.used = used;
        for (u, old) in self.tally_uses.iter_mut().zip(uses.into_iter().chain(core::iter::repeat(0))) {
            *u = old;
        }
        let mut out: StepBreakdown = OP_KINDS.iter().copied().zip(gpu).collect();
        out.push(("prefill_scale", gpu[PREFILL_SCALE_PART]));
        out.push(("step_overhead", overhead));
        out.push(("host", host));
        Some(out)
    }

    fn report(&self) -> Option<TimerReport> {
        let data = if self.db.tables.is_empty() {
            format!(
                "no measured tables for {} / {} {}: every op on the roofline",
                self.db.system, self.db.backend, self.db.version
            )
        } else {
            // Families grouped by the engine version they were measured with, the asked-for
            // version first.
            let mut by_version: Vec<(&str, Vec<&str>)> = Vec::new();
            for f in self.db.families() {
                let v = self.db.table_version(f);
                match by_version.iter_mut().find(|(seen, _)| *seen == v) {
                    Some((_, names)) => names.push(f.name()),
                    None => by_version.push((v, alloc::vec![f.name()])),
                }
            }
            by_version.sort_by_key(|(v, _)| *v != self.db.version);
            let parts: Vec<String> =
                by_version.iter().map(|(v, names)| format!("{v}: {}", names.join(", "))).collect();
            format!("{} ({})", self.db.source, parts.join("; "))
        };
        Some(TimerReport {
            model: "op_level".into(),
            data,
            lookups: self
                .provenance_by_kind()
                .iter()
                .filter(|(_, p)| p.total() > 0)
                .map(|(k, p)| ((*k).to_string(), [p.measured, p.interpolated, p.extrapolated, p.roofline]))
                .collect(),
        })
    }
}
