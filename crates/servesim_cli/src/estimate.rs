//! `servesim estimate`: one config's static estimate, and the `--default` sweep with its
//! confirming replays.

use std::path::{Path, PathBuf};
use std::time::Instant;

use servesim_scenario::catalog::Catalog;
use servesim_scenario::estimate::confirm::{replay_point, Confirm};
use servesim_scenario::estimate::sweep::SweepSpec;
use servesim_scenario::report::to_pretty_json;
use servesim_scenario::scenario::prepare;

use crate::{load_config, DefaultSweepArgs, DiskFiles, Failure, Format};

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
        nextn: a.nextn,
        nextn_accepted: a.nextn_accepted,
        allreduce: a.allreduce.map(|x| x.name().to_string()),
        moe_kernel: a.moe_kernel.map(|x| x.name().to_string()),
    };
    let catalog = Catalog::builtin().map_err(|e| Failure { code: 1, message: e.to_string() })?;
    let files = DiskFiles { base: PathBuf::from("."), data_dir };
    let sweep = servesim_scenario::estimate::sweep::default_sweep(&spec, &catalog, &files)
        .map_err(|e| Failure { code: 2, message: e.to_string() })?;
    let static_s = started.elapsed().as_secs_f64();
    let nothing = sweep.agg.is_empty() && sweep.disagg.is_empty();
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
        .max(1);
    // Confirm with full replays, best first per mode, each wave's replays on `jobs` threads.
    let mut confirm = Confirm::new(spec, sweep, a.replay_top);
    loop {
        let wave = confirm.wave().to_vec();
        if wave.is_empty() {
            break;
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut done = Vec::new();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..jobs.min(wave.len()))
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(w) = wave.get(i) else { break };
                            mine.push((i, replay_point(w, &catalog, &files)));
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
        confirm
            .submit(done.into_iter().map(|(_, r)| r).collect())
            .map_err(|message| Failure { code: 1, message: format!("a replay thread failed: {message}") })?;
    }
    let report = confirm.report(static_s, started.elapsed().as_secs_f64());
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
    if nothing {
        return Err(Failure { code: 1, message: "no deployment meets the TTFT and TPOT limits".into() });
    }
    Ok(())
}
