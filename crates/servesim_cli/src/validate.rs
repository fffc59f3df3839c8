//! `servesim validate`: the fidelity table of a calibration file, its replayed scenarios, and
//! a measured per-request log against a replay.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use servesim_scenario::catalog::Catalog;

use crate::{write_file, DiskFiles, Failure};

/// `servesim validate --requests LOG --config SCENARIO`.
pub(crate) fn requests(log: &Path, config: &Path, data_dir: Option<PathBuf>) -> Result<(), Failure> {
    let name = log.display().to_string();
    let bytes =
        std::fs::read(log).map_err(|e| Failure { code: 2, message: format!("cannot read {name}: {e}") })?;
    let measured = servesim_data::silicon::parse_request_log(&bytes, &name)
        .map_err(|e| Failure { code: 2, message: e.to_string() })?;
    let source = config.display().to_string();
    let text = std::fs::read_to_string(config)
        .map_err(|e| Failure { code: 2, message: format!("cannot read {source}: {e}") })?;
    let catalog = Catalog::builtin().map_err(|e| Failure { code: 1, message: e.to_string() })?;
    let files = DiskFiles::beside(config, data_dir);
    let prediction = servesim_scenario::scenario::predict_with_catalog(&text, &source, &catalog, &files)?;
    let c = servesim_scenario::validate::compare_requests(&measured, &prediction);
    say_raw!("{}", servesim_scenario::validate::requests_table(&c));
    Ok(())
}

/// The rows of a calibration file that `--filter` (any of the texts in a row's id, model,
/// system or engine) and `--class` keep, with the catalog that classed them; none is an
/// error, not an empty table.
pub(crate) fn select(
    silicon: &Path,
    filter: &[String],
    class: Option<&str>,
) -> Result<(Vec<servesim_data::silicon::SiliconRow>, Catalog), Failure> {
    let name = silicon.display().to_string();
    let bytes = std::fs::read(silicon)
        .map_err(|e| Failure { code: 2, message: format!("cannot read {name}: {e}") })?;
    let mut rows = servesim_data::silicon::parse(&bytes, &name)
        .map_err(|e| Failure { code: 2, message: e.to_string() })?;
    let catalog = Catalog::builtin().map_err(|e| Failure { code: 1, message: e.to_string() })?;
    if !filter.is_empty() {
        rows.retain(|r| {
            filter
                .iter()
                .any(|f| [&r.id, &r.model, &r.system, &r.backend].iter().any(|s| s.contains(f.as_str())))
        });
    }
    if let Some(c) = class {
        let want = match c {
            "dense-agg" => "dense aggregated",
            "moe-agg" => "MoE aggregated",
            "dense-disagg" => "dense disaggregated",
            "moe-disagg" => "MoE disaggregated",
            _ => {
                return Err(Failure {
                    code: 2,
                    message: format!("--class {c}: use dense-agg, moe-agg, dense-disagg or moe-disagg"),
                })
            }
        };
        rows.retain(|r| servesim_scenario::validate::class(r, &catalog) == want);
    }
    if rows.is_empty() {
        let mut asked: Vec<String> = filter.iter().map(|f| format!("--filter {f}")).collect();
        asked.extend(class.map(|c| format!("--class {c}")));
        return Err(Failure { code: 2, message: format!("no row of {name} matches {}", asked.join(", ")) });
    }
    Ok((rows, catalog))
}

/// `servesim validate --silicon FILE`: the fidelity table.
pub(crate) fn silicon(
    silicon: &Path,
    filter: &[String],
    class: Option<&str>,
    rows_csv: Option<&Path>,
    data_dir: Option<PathBuf>,
    knobs: &servesim_scenario::validate::Knobs,
    jobs: usize,
) -> Result<(), Failure> {
    use servesim_scenario::validate::{run_row, summarize, table, Outcome};
    let started = Instant::now();
    let (rows, catalog) = select(silicon, filter, class)?;
    let files = DiskFiles { base: PathBuf::from("."), data_dir };
    let show = std::io::stderr().is_terminal();
    let progress = |done: usize, n: usize| {
        if show {
            eprint!("\r{done}/{n} rows   ");
        }
    };
    // Rows are independent replays: the table is the same on any number of threads.
    let outcomes: Vec<Outcome> = servesim_scenario::parallel::map(
        rows.len(),
        jobs,
        &|i| run_row(&rows[i], &catalog, &files, knobs),
        &progress,
    )
    .into_iter()
    .map(|o| {
        o.unwrap_or_else(|| Outcome {
            error: Some("the replay panicked: a bug in servesim (its message is above)".into()),
            ..Outcome::default()
        })
    })
    .collect();
    if show {
        eprintln!();
    }
    let s = summarize(&rows, &outcomes, &catalog);
    say!("servesim validate --silicon {}: {} rows\n", silicon.display(), rows.len());
    say_raw!("{}", table(&s));
    let rows_from = |source: &str| s.disagg_by_workers.get(source).map_or(0, |g| g.rows);
    let (sized, published) = (rows_from("sized"), rows_from("published"));
    if sized + published > 0 {
        say!(
            "\n{} disaggregated rows do not record their worker counts: {published} replay the deployment \
             InferenceX published for their clients (workers, layouts, decode batch), {sized} get pools sized from \
             the estimate (decode workers to hold the concurrency, prefill workers at most {:.0}% busy); \
             --rows-csv lists them",
            sized + published,
            100.0 * servesim_scenario::validate::SIZED_PREFILL_UTILIZATION
        );
        // Which share of the disaggregated error the sizing owns.
        for (source, g) in &s.disagg_by_workers {
            let which = match *source {
                "recorded" => "recording their worker counts",
                "published" => "replaying InferenceX's published deployment",
                _ => "with sized pools",
            };
            say!(
                "  {} disaggregated rows {which}: TTFT / TPOT MAPE {:.1}% / {:.1}%, bias {:+.1}% / {:+.1}% ({} predicted)",
                g.rows,
                g.ttft_mape(),
                g.tpot_mape(),
                g.ttft_bias(),
                g.tpot_bias(),
                g.predicted
            );
        }
    }
    if !s.beyond_kernels.is_empty() {
        let counts: Vec<String> = s.beyond_kernels.iter().map(|(c, g)| format!("{c} {}", g.rows)).collect();
        say!(
            "\nrows whose measurement served more prompts than their prefilling workers' kernels can compute \
             (prompt load > {:.0}: kernel seconds a second at the measured request rate, --rows-csv column \
             prompt_load): {}",
            servesim_scenario::validate::PROMPT_LOAD_LIMIT,
            counts.join(", ")
        );
        for (c, g) in s.within_kernels.iter().filter(|(c, _)| s.beyond_kernels.contains_key(*c)) {
            say!(
                "  {c} without them ({} rows): TTFT / TPOT MAPE {:.1}% / {:.1}%, bias {:+.1}% / {:+.1}%",
                g.rows,
                g.ttft_mape(),
                g.tpot_mape(),
                g.ttft_bias(),
                g.tpot_bias()
            );
        }
    }
    let mut errors: Vec<String> = rows
        .iter()
        .zip(&outcomes)
        .filter_map(|(r, o)| o.error.as_ref().map(|e| format!("{} (line {}): {e}", r.id, r.line)))
        .collect();
    if !errors.is_empty() {
        say!("\nnot predicted ({}):", errors.len());
        errors.truncate(20);
        for e in errors {
            say!("  {e}");
        }
    }
    if let Some(path) = rows_csv {
        let mut w = String::from("id,line,model,system,backend,mode,isl,osl,concurrency,measured_ttft_ms,predicted_ttft_ms,measured_tpot_ms,predicted_tpot_ms,sized_workers,workers_source,mtp_drafts,prompt_load,error\n");
        for (r, o) in rows.iter().zip(&outcomes) {
            let (pt, pp) = o
                .predicted
                .map_or((String::new(), String::new()), |(a, b)| (format!("{a:.3}"), format!("{b:.3}")));
            let _ = std::fmt::Write::write_fmt(
                &mut w,
                format_args!(
                    "{},{},{},{},{},{},{},{},{},{:.3},{pt},{:.3},{pp},{},{},{},{},\"{}\"\n",
                    r.id,
                    r.line,
                    r.model,
                    r.system,
                    r.backend,
                    if r.disaggregated() { "disagg" } else { "agg" },
                    r.isl,
                    r.osl,
                    r.concurrency,
                    r.ttft_ms,
                    r.tpot_ms,
                    o.sized.map_or(String::new(), |(p, d)| format!("{p}P+{d}D")),
                    servesim_scenario::validate::workers_source(r, o).unwrap_or(""),
                    o.drafts.map_or(String::new(), |n| n.to_string()),
                    o.prompt_load.map_or(String::new(), |l| format!("{l:.3}")),
                    o.error.as_deref().unwrap_or("").replace('"', "'")
                ),
            );
        }
        write_file(path, &w)?;
    }
    eprintln!("wall time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// `servesim validate --silicon FILE --show-scenarios`.
pub(crate) fn show_scenarios(
    silicon: &Path,
    filter: &[String],
    class: Option<&str>,
    data_dir: Option<PathBuf>,
    knobs: &servesim_scenario::validate::Knobs,
) -> Result<(), Failure> {
    let (rows, catalog) = select(silicon, filter, class)?;
    let files = DiskFiles { base: PathBuf::from("."), data_dir };
    for r in &rows {
        let dense = catalog.model(&r.model).is_some_and(|m| m.moe.is_none());
        match servesim_scenario::validate::replayed_row(r, &catalog, &files, knobs) {
            Ok((replayed, sized)) => {
                let note = match (sized, servesim_scenario::validate::published_workers(r, knobs)) {
                    (Some((p, d)), _) => format!("# worker counts not recorded: sized to {p} prefill + {d} decode\n"),
                    (None, Some((p, d))) => format!(
                        "# worker counts not recorded: InferenceX's published deployment, {p} prefill + {d} decode\n"
                    ),
                    (None, None) => String::new(),
                };
                let r = replayed;
                let tables = servesim_scenario::validate::tables_version(&r, &files);
                say!(
                    "---\n{note}{}",
                    servesim_scenario::validate::scenario_yaml(&r, knobs, dense, tables.as_deref())
                );
            }
            Err(e) => say!("---\n# {} (line {}): {e}", r.id, r.line),
        }
    }
    Ok(())
}
