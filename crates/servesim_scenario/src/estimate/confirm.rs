//! Confirming `estimate --default` winners by replay: which points to replay in which waves,
//! what a replay measured, and the report. Callers run each wave's replays however suits them
//! (threads natively, Web Workers in the page); the waves do not depend on how many run at
//! once, so every caller replays the same points and prints the same report.

use serde_json::json;

use crate::catalog::Catalog;
use crate::estimate::sweep::{Sweep, SweepPoint, SweepSpec, REPLAY_REQUESTS_PER_SLOT};
use crate::scenario::Files;

/// Replays tried per mode before giving up on confirming one.
pub const MAX_REPLAYS_PER_MODE: usize = 12;

/// Points per mode replayed in one wave: the best unconfirmed one. Most answers need one wave
/// (the best point of each mode meets the limits on replay too), so this is also the fastest.
pub const REPLAYS_PER_MODE_PER_WAVE: usize = 1;

/// A confirming replay: its figures, or why it failed.
pub type Replay = Result<ReplayFigures, String>;

/// What a confirming replay measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplayFigures {
    /// Mean TTFT over every request (as `predict` reports it).
    pub ttft_ms: f64,
    /// Mean TTFT without the first wave (the first `concurrency` arrivals).
    pub steady_ttft_ms: f64,
    /// Mean TPOT.
    pub tpot_ms: f64,
    /// Output tokens per second.
    pub tok_s: f64,
}

/// A replay as JSON (for Web Workers): the figures, or `{"error": ...}`.
#[must_use]
pub fn replay_to_json(r: &Replay) -> serde_json::Value {
    match r {
        Ok(f) => {
            json!({"ttft_ms": f.ttft_ms, "steady_ttft_ms": f.steady_ttft_ms, "tpot_ms": f.tpot_ms, "tok_s": f.tok_s})
        }
        Err(e) => json!({"error": e}),
    }
}

/// Reads [`replay_to_json`].
///
/// # Errors
/// When a figure is missing.
pub fn replay_from_json(v: &serde_json::Value) -> Result<Replay, String> {
    if let Some(e) = v.get("error") {
        return Ok(Err(e.as_str().unwrap_or("replay failed").to_string()));
    }
    // A figure that is not a number is NaN (JSON has no NaN; serde writes null).
    let g = |k: &str| -> Result<f64, String> {
        match v.get(k) {
            Some(serde_json::Value::Null) => Ok(f64::NAN),
            Some(x) => x.as_f64().ok_or_else(|| format!("replay figure '{k}' is not a number")),
            None => Err(format!("replay message lacks '{k}'")),
        }
    };
    Ok(Ok(ReplayFigures {
        ttft_ms: g("ttft_ms")?,
        steady_ttft_ms: g("steady_ttft_ms")?,
        tpot_ms: g("tpot_ms")?,
        tok_s: g("tok_s")?,
    }))
}

/// True when a replay meets the sweep's limits (steady-state TTFT, as the sweep judges).
#[must_use]
pub fn replay_meets(r: &Replay, spec: &SweepSpec) -> bool {
    matches!(r, Ok(f) if f.steady_ttft_ms <= spec.ttft_ms && f.tpot_ms <= spec.tpot_ms)
}

/// Replays a sweep point's config. `concurrency` clients start at once: the first that many
/// requests are the first wave, left out of the steady TTFT.
pub fn replay(yaml: &str, label: &str, concurrency: f64, catalog: &Catalog, files: &dyn Files) -> Replay {
    let p = crate::scenario::predict_with_catalog(yaml, label, catalog, files).map_err(|e| e.to_string())?;
    let g = |k: &str| p.json.get(k).and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN);
    // Records are sorted by arrival: the first `concurrency` are the first wave.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let wave = concurrency.round() as usize;
    let steady: Vec<f64> = p.requests.iter().skip(wave).filter_map(|r| r.ttft_ms).collect();
    #[allow(clippy::cast_precision_loss)]
    let steady_ttft_ms =
        if steady.is_empty() { f64::NAN } else { steady.iter().sum::<f64>() / steady.len() as f64 };
    Ok(ReplayFigures {
        ttft_ms: g("mean_ttft_ms"),
        steady_ttft_ms,
        tpot_ms: g("mean_tpot_ms"),
        tok_s: g("output_throughput_tok_s"),
    })
}

/// Replays [`SweepPoint`] `w`.
pub fn replay_point(w: &SweepPoint, catalog: &Catalog, files: &dyn Files) -> Replay {
    replay(&w.yaml, &w.label, w.estimate.concurrency, catalog, files)
}

/// The confirming replays in progress: ask [`Confirm::wave`] for points to replay, hand their
/// replays to [`Confirm::submit`], until the wave is empty; then [`Confirm::report`].
#[derive(Clone, Debug)]
pub struct Confirm {
    spec: SweepSpec,
    sweep: Sweep,
    replay_top: usize,
    cursor: [usize; 2],
    winners: Vec<SweepPoint>,
    replays: Vec<Replay>,
    pending: Vec<SweepPoint>,
}

impl Confirm {
    /// Starts confirming `sweep`: until `replay_top` points per mode meet the limits on replay
    /// (0: no replays), or [`MAX_REPLAYS_PER_MODE`] were tried.
    #[must_use]
    pub fn new(spec: SweepSpec, sweep: Sweep, replay_top: usize) -> Self {
        Confirm {
            spec,
            sweep,
            replay_top,
            cursor: [0; 2],
            winners: Vec::new(),
            replays: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// The next points to replay (empty when done).
    pub fn wave(&mut self) -> &[SweepPoint] {
        self.pending.clear();
        for m in 0..2 {
            let list = if m == 0 { &self.sweep.agg } else { &self.sweep.disagg };
            let mode = list.first().map_or("", |p| p.mode);
            let confirmed = self
                .winners
                .iter()
                .zip(&self.replays)
                .filter(|(w, r)| w.mode == mode && replay_meets(r, &self.spec))
                .count();
            let budget = if self.replay_top == 0 || confirmed >= self.replay_top {
                0
            } else {
                MAX_REPLAYS_PER_MODE.saturating_sub(self.cursor[m])
            };
            let take = budget.min(REPLAYS_PER_MODE_PER_WAVE).min(list.len().saturating_sub(self.cursor[m]));
            self.pending.extend(list[self.cursor[m]..self.cursor[m] + take].iter().cloned());
            self.cursor[m] += take;
        }
        &self.pending
    }

    /// The replays of the last wave, in its order.
    ///
    /// # Errors
    /// When the count does not match the wave.
    pub fn submit(&mut self, replays: Vec<Replay>) -> Result<(), String> {
        if replays.len() != self.pending.len() {
            return Err(format!(
                "the wave has {} points, {} replays came back",
                self.pending.len(),
                replays.len()
            ));
        }
        self.winners.append(&mut self.pending);
        self.replays.extend(replays);
        Ok(())
    }

    /// The sweep's answer.
    #[must_use]
    pub fn sweep(&self) -> &Sweep {
        &self.sweep
    }

    /// The report; `static_s` and `total_s` are the host times of the sweep and of everything.
    #[must_use]
    pub fn report(self, static_s: f64, total_s: f64) -> DefaultReport {
        let mut winners = self.winners;
        if self.replay_top == 0 {
            winners.extend(self.sweep.agg.first().cloned());
            winners.extend(self.sweep.disagg.first().cloned());
        }
        DefaultReport {
            spec: self.spec,
            sweep: self.sweep,
            winners,
            replays: self.replays,
            static_s,
            total_s,
        }
    }
}

/// The sweep, the points replayed (best first per mode, in replay order) and their replays.
#[derive(Clone, Debug)]
pub struct DefaultReport {
    spec: SweepSpec,
    sweep: Sweep,
    /// The points replayed (or, without replays, each mode's best), in order.
    pub winners: Vec<SweepPoint>,
    replays: Vec<Replay>,
    static_s: f64,
    total_s: f64,
}

impl DefaultReport {
    fn replay(&self, i: usize) -> Option<Replay> {
        self.replays.get(i).cloned()
    }

    /// The best point of `mode` (static), and the best that met the limits on replay.
    #[must_use]
    pub fn best(&self, mode: &str) -> (Option<usize>, Option<usize>) {
        let of_mode = |i: &usize| self.winners[*i].mode == mode;
        let first = (0..self.winners.len()).find(of_mode);
        let confirmed = (0..self.winners.len())
            .filter(of_mode)
            .find(|i| self.replay(*i).is_some_and(|r| replay_meets(&r, &self.spec)));
        (first, confirmed)
    }

    /// `estimate-default.json`.
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        let (spec, sweep, winners) = (&self.spec, &self.sweep, &self.winners);
        let replay_of = |i: usize| self.replay(i);
        let point = |p: &SweepPoint, replay: Option<Replay>| {
            let mut v = json!({"mode": p.mode, "deployment": p.label, "estimate": p.estimate.to_json()});
            if let Some(r) = replay {
                v["replay"] = match r {
                    Ok(f) => json!({
                        "mean_ttft_ms": f.ttft_ms,
                        "steady_ttft_ms": f.steady_ttft_ms,
                        "mean_tpot_ms": f.tpot_ms,
                        "output_throughput_tok_s": f.tok_s,
                        "output_throughput_tok_s_per_gpu": f.tok_s / f64::from(p.estimate.gpus.max(1)),
                        "meets_limits": replay_meets(&Ok(f), spec),
                    }),
                    Err(e) => json!({"error": e}),
                };
            }
            v
        };
        let (agg_best, agg_confirmed) = self.best("aggregated");
        let (dis_best, dis_confirmed) = self.best("disaggregated");
        let per_gpu = |i: Option<usize>| i.map(|i| winners[i].estimate.per_gpu());
        json!({
            "query": {
                "model": spec.model, "system": spec.system, "backend": spec.backend, "total_gpus": spec.total_gpus,
                "isl": spec.isl, "osl": spec.osl, "prefix": spec.prefix, "ttft_ms": spec.ttft_ms, "tpot_ms": spec.tpot_ms,
                "nextn": spec.nextn, "nextn_accepted": spec.nextn_accepted, "allreduce": spec.allreduce,
                "moe_kernel": spec.moe_kernel,
            },
            "best_aggregated": agg_best.map(|i| point(&winners[i], replay_of(i))),
            "best_disaggregated": dis_best.map(|i| point(&winners[i], replay_of(i))),
            "disagg_over_agg": match (per_gpu(dis_best), per_gpu(agg_best)) { (Some(d), Some(a)) if a > 0.0 => Some(d / a), _ => None },
            "confirmed_aggregated": agg_confirmed.map(|i| point(&winners[i], replay_of(i))),
            "confirmed_disaggregated": dis_confirmed.map(|i| point(&winners[i], replay_of(i))),
            "replayed": winners.iter().enumerate().map(|(i, w)| point(w, replay_of(i))).collect::<Vec<_>>(),
            "counts": {
                "aggregated_estimated": sweep.agg_evaluated,
                "aggregated_meeting_limits": sweep.agg.len(),
                "disaggregated_screened": sweep.disagg_screened,
                "disaggregated_screen_passed": sweep.disagg_screen_passed,
                "disaggregated_estimated": sweep.disagg_refined,
                "disaggregated_meeting_limits": sweep.disagg.len(),
            },
            "rejected_shapes": sweep.rejected,
            "wall_seconds": {"static": self.static_s, "total": self.total_s},
        })
    }

    /// The terminal table.
    #[must_use]
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let (spec, sweep, winners, static_s, total_s) =
            (&self.spec, &self.sweep, &self.winners, self.static_s, self.total_s);
        let replay_of = |i: usize| self.replay(i);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} on {} x {} ({}), ISL {}, OSL {}, prefix {}; limits: mean TTFT <= {} ms, mean TPOT <= {} ms{}{}{}",
            spec.model,
            spec.total_gpus,
            spec.system,
            spec.backend,
            spec.isl,
            spec.osl,
            spec.prefix,
            spec.ttft_ms,
            spec.tpot_ms,
            if spec.nextn > 0 {
                format!("; {} drafts a round, {} accepted", spec.nextn, spec.nextn_accepted)
            } else {
                String::new()
            },
            spec.allreduce.as_deref().map_or(String::new(), |a| format!("; all-reduce: {a}")),
            spec.moe_kernel.as_deref().map_or(String::new(), |k| format!("; MoE kernels: {k}"))
        );
        let _ = writeln!(
        s,
        "aggregated: {} estimated, {} meet the limits; disaggregated: {} screened, {} pass the screen, {} estimated, {} meet the limits ({:.2} s)",
        sweep.agg_evaluated,
        sweep.agg.len(),
        sweep.disagg_screened,
        sweep.disagg_screen_passed,
        sweep.disagg_refined,
        sweep.disagg.len(),
        static_s
    );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<14} {:<52} {:>4} {:>5} {:>10} {:>10} {:>8} {:>8} {:>7} | {:>10} {:>8} {:>8} {:>7}",
            "mode",
            "deployment",
            "GPUs",
            "conc",
            "tok/s/GPU",
            "tok/s/user",
            "TTFT",
            "(all)",
            "TPOT",
            "replay t/G",
            "TTFT",
            "(all)",
            "TPOT"
        );
        for (i, w) in winners.iter().enumerate() {
            let e = &w.estimate;
            let replay = match replay_of(i) {
                Some(Ok(f)) => {
                    let ok = if replay_meets(&Ok(f), spec) { "" } else { "  (misses limits)" };
                    format!(
                        "{:>10.1} {:>8.1} {:>8.1} {:>7.2}{ok}",
                        f.tok_s / f64::from(e.gpus.max(1)),
                        f.steady_ttft_ms,
                        f.ttft_ms,
                        f.tpot_ms
                    )
                }
                Some(Err(m)) => format!("replay failed: {m}"),
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "{:<14} {:<52} {:>4} {:>5.0} {:>10.1} {:>10.1} {:>8.1} {:>8.1} {:>7.2} | {replay}",
                w.mode,
                w.label,
                e.gpus,
                e.concurrency,
                e.per_gpu(),
                e.per_user(),
                e.steady_ttft_ms,
                e.ttft_ms,
                e.tpot_ms
            );
        }
        let best = |mode: &str| self.best(mode).0.map(|i| winners[i].estimate.per_gpu());
        match (best("aggregated"), best("disaggregated")) {
            (Some(a), Some(d)) => {
                let (mode, ratio) = if d >= a { ("disaggregated", d / a) } else { ("aggregated", a / d) };
                let _ = writeln!(s, "\nbest (static): {mode}, {ratio:.2}x the other mode's tok/s/GPU");
            }
            (Some(_), None) => {
                let _ =
                    writeln!(s, "\nbest (static): aggregated; no disaggregated deployment meets the limits");
            }
            (None, Some(_)) => {
                let _ =
                    writeln!(s, "\nbest (static): disaggregated; no aggregated deployment meets the limits");
            }
            (None, None) => {}
        }
        for mode in ["aggregated", "disaggregated"] {
            match self.best(mode).1 {
                Some(i) => {
                    let tps = match replay_of(i) {
                        Some(Ok(f)) => f.tok_s / f64::from(winners[i].estimate.gpus.max(1)),
                        _ => f64::NAN,
                    };
                    let _ = writeln!(
                        s,
                        "best {mode} confirmed by replay: {} ({tps:.1} tok/s/GPU replayed)",
                        winners[i].label
                    );
                }
                None if replay_of(0).is_some() => {
                    let _ = writeln!(s, "no {mode} deployment replayed here meets the limits");
                }
                None => {}
            }
        }
        let _ = writeln!(
            s,
            "done in {total_s:.2} s (replays: {} requests per concurrency slot)",
            REPLAY_REQUESTS_PER_SLOT
        );
        s
    }
}
