//! `servesim estimate`: one config's static estimate, and the `--default` sweep with its
//! confirming replays.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;
use servesim_scenario::catalog::Catalog;
use servesim_scenario::estimate::sweep::{Sweep, SweepPoint, SweepSpec};
use servesim_scenario::report::to_pretty_json;
use servesim_scenario::scenario::prepare;

use crate::{load_config, DefaultSweepArgs, DiskFiles, Failure, Format};

/// Replays tried per mode before giving up on confirming one.
const MAX_REPLAYS_PER_MODE: usize = 12;

/// `servesim estimate -c FILE`.
pub(crate) fn single(
    config: &Path,
    set: &[String],
    format: Format,
    data_dir: Option<PathBuf>,
) -> Result<(), Failure> {
    let (source, root, catalog) = load_config(config, set)?;
    let files = DiskFiles::beside(config, data_dir);
    let prepared = prepare(&root, &source, &catalog, None, &files)?;
    let e = servesim_scenario::estimate::estimate(&prepared)?;
    match format {
        Format::Json => say!("{}", to_pretty_json(&e.to_json())),
        Format::Table => say_raw!("{}", e.summary()),
    }
    Ok(())
}

/// A confirming replay of a sweep winner: (mean TTFT, mean TPOT, output tok/s) or the error.
type Replay = Result<ReplayFigures, String>;

/// What a confirming replay measured.
#[derive(Clone, Copy, Debug)]
struct ReplayFigures {
    /// Mean TTFT over every request (as `predict` reports it).
    ttft_ms: f64,
    /// Mean TTFT without the first wave (the first `concurrency` arrivals).
    steady_ttft_ms: f64,
    tpot_ms: f64,
    tok_s: f64,
}

fn replay_meets(r: &Replay, spec: &SweepSpec) -> bool {
    matches!(r, Ok(f) if f.steady_ttft_ms <= spec.ttft_ms && f.tpot_ms <= spec.tpot_ms)
}

/// Replays a sweep point.
fn replay_point(w: &SweepPoint, catalog: &Catalog, files: &DiskFiles) -> Replay {
    let p = servesim_scenario::scenario::predict_with_catalog(&w.yaml, &w.label, catalog, files)
        .map_err(|e| e.to_string())?;
    let g = |k: &str| p.json.get(k).and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN);
    // Records are sorted by arrival: the first `concurrency` are the first wave.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let wave = w.estimate.concurrency.round() as usize;
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

/// `servesim estimate --default`.
pub(crate) fn default_sweep(
    a: &DefaultSweepArgs,
    format: Format,
    data_dir: Option<PathBuf>,
) -> Result<(), Failure> {
    let started = Instant::now();
    let (Some(model), Some(system), Some(total_gpus)) = (&a.model, &a.system, a.total_gpus) else {
        return Err(Failure {
            code: 2,
            message: "--default needs --model, --system and --total-gpus".into(),
        });
    };
    let spec = SweepSpec {
        model: model.clone(),
        system: system.clone(),
        backend: a.backend.clone(),
        total_gpus,
        isl: a.isl,
        osl: a.osl,
        prefix: a.prefix,
        ttft_ms: a.ttft,
        tpot_ms: a.tpot,
    };
    let catalog = Catalog::builtin().map_err(|e| Failure { code: 1, message: e.to_string() })?;
    let files = DiskFiles { base: PathBuf::from("."), data_dir };
    let sweep = servesim_scenario::estimate::sweep::default_sweep(&spec, &catalog, &files)
        .map_err(|e| Failure { code: 2, message: e.to_string() })?;
    let static_s = started.elapsed().as_secs_f64();
    // Confirm with full replays, best first per mode, in waves of `jobs`: a mode is settled
    // once `replay_top` of its points meet the limits on replay, or after MAX_REPLAYS_PER_MODE.
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
        .max(1);
    let mut winners: Vec<&SweepPoint> = Vec::new();
    let mut replays: Vec<Replay> = Vec::new();
    let mut cursor = [0usize; 2];
    let lists = [&sweep.agg, &sweep.disagg];
    let meets = |r: &Replay| replay_meets(r, &spec);
    loop {
        let mut wave: Vec<&SweepPoint> = Vec::new();
        for (m, list) in lists.iter().enumerate() {
            let confirmed = winners
                .iter()
                .zip(&replays)
                .filter(|(w, r)| w.mode == list.first().map_or("", |p| p.mode) && meets(r))
                .count();
            let budget = if a.replay_top == 0 || confirmed >= a.replay_top {
                0
            } else {
                MAX_REPLAYS_PER_MODE.saturating_sub(cursor[m])
            };
            let take = budget.min(jobs.div_ceil(2).max(1)).min(list.len().saturating_sub(cursor[m]));
            wave.extend(list[cursor[m]..cursor[m] + take].iter());
            cursor[m] += take;
        }
        if wave.is_empty() {
            break;
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut done: Vec<(usize, Replay)> = Vec::new();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..jobs.min(wave.len()))
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(w) = wave.get(i) else { break };
                            let r = replay_point(w, &catalog, &files);
                            mine.push((i, r));
                        }
                        mine
                    })
                })
                .collect();
            for h in handles {
                if let Ok(mine) = h.join() {
                    done.extend(mine);
                }
            }
        });
        done.sort_by_key(|(i, _)| *i);
        if done.len() != wave.len() {
            return Err(Failure { code: 1, message: "a replay thread failed".into() });
        }
        winners.extend(wave);
        replays.extend(done.into_iter().map(|(_, r)| r));
    }
    if a.replay_top == 0 {
        winners.extend(sweep.agg.first());
        winners.extend(sweep.disagg.first());
    }
    let report = DefaultReport {
        spec: &spec,
        sweep: &sweep,
        winners,
        replays,
        static_s,
        total_s: started.elapsed().as_secs_f64(),
    };
    let json = report.json();
    if let Some(dir) = &a.output_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure { code: 1, message: format!("cannot create {}: {e}", dir.display()) })?;
        let write = |p: PathBuf, text: &str| {
            std::fs::write(&p, text)
                .map_err(|e| Failure { code: 1, message: format!("cannot write {}: {e}", p.display()) })
        };
        write(dir.join("estimate-default.json"), &(to_pretty_json(&json) + "\n"))?;
        for (i, w) in report.winners.iter().enumerate() {
            write(
                dir.join(format!("{}-{}.yaml", if w.mode == "aggregated" { "agg" } else { "disagg" }, i + 1)),
                &w.yaml,
            )?;
        }
    }
    match format {
        Format::Json => say!("{}", to_pretty_json(&json)),
        Format::Table => say_raw!("{}", report.table()),
    }
    if sweep.agg.is_empty() && sweep.disagg.is_empty() {
        return Err(Failure { code: 1, message: "no deployment meets the TTFT and TPOT limits".into() });
    }
    Ok(())
}

/// The sweep, the points replayed (best first per mode, in replay order) and their replays.
struct DefaultReport<'a> {
    spec: &'a SweepSpec,
    sweep: &'a Sweep,
    winners: Vec<&'a SweepPoint>,
    replays: Vec<Replay>,
    static_s: f64,
    total_s: f64,
}

impl DefaultReport<'_> {
    fn replay(&self, i: usize) -> Option<Replay> {
        self.replays.get(i).cloned()
    }

    /// The best point of `mode` (static), and the best that met the limits on replay.
    fn best(&self, mode: &str) -> (Option<usize>, Option<usize>) {
        let of_mode = |i: &usize| self.winners[*i].mode == mode;
        let first = (0..self.winners.len()).find(of_mode);
        let confirmed = (0..self.winners.len())
            .filter(of_mode)
            .find(|i| self.replay(*i).is_some_and(|r| replay_meets(&r, self.spec)));
        (first, confirmed)
    }

    fn json(&self) -> serde_json::Value {
        let (spec, sweep, winners) = (self.spec, self.sweep, &self.winners);
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
            },
            "best_aggregated": agg_best.map(|i| point(winners[i], replay_of(i))),
            "best_disaggregated": dis_best.map(|i| point(winners[i], replay_of(i))),
            "disagg_over_agg": match (per_gpu(dis_best), per_gpu(agg_best)) { (Some(d), Some(a)) if a > 0.0 => Some(d / a), _ => None },
            "confirmed_aggregated": agg_confirmed.map(|i| point(winners[i], replay_of(i))),
            "confirmed_disaggregated": dis_confirmed.map(|i| point(winners[i], replay_of(i))),
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

    fn table(&self) -> String {
        use std::fmt::Write as _;
        let (spec, sweep, winners, static_s, total_s) =
            (self.spec, self.sweep, &self.winners, self.static_s, self.total_s);
        let replay_of = |i: usize| self.replay(i);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} on {} x {} ({}), ISL {}, OSL {}, prefix {}; limits: mean TTFT <= {} ms, mean TPOT <= {} ms",
            spec.model,
            spec.total_gpus,
            spec.system,
            spec.backend,
            spec.isl,
            spec.osl,
            spec.prefix,
            spec.ttft_ms,
            spec.tpot_ms
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
            servesim_scenario::estimate::sweep::REPLAY_REQUESTS_PER_SLOT
        );
        s
    }
}
