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

/// Which rows of a calibration file `validate` and `calibrate` replay.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct RowSelection {
    /// Only rows whose id, model, system or engine contains this text (repeatable: any).
    #[arg(long, value_name = "TEXT")]
    pub(crate) filter: Vec<String>,
    /// Only rows of this class: dense-agg, moe-agg, dense-disagg, moe-disagg (repeatable: any).
    #[arg(long, value_name = "CLASS")]
    pub(crate) class: Vec<String>,
    /// Only rows measured by this source: inferencex (its dated exports and database dump),
    /// aiconfigurator (its gap-analysis harness) or other.
    #[arg(long, value_name = "SOURCE")]
    pub(crate) source: Option<String>,
    /// Only rows each of whose workers fits in one node of its GPU (tensor × pipeline ×
    /// attention-DP degree within the catalog's GPUs per node: 8, or 4 on GB200 and GB300).
    #[arg(long)]
    pub(crate) single_node: bool,
}

impl RowSelection {
    /// The library's selection; a class or source it does not know is refused by name.
    fn selection(&self) -> Result<servesim_scenario::validate::Selection, Failure> {
        let mut keep = servesim_scenario::validate::Selection {
            filters: self.filter.clone(),
            single_node: self.single_node,
            ..Default::default()
        };
        let refused = |message: String| Failure { code: 2, message: format!("--{message}") };
        for c in &self.class {
            keep.add_class(c).map_err(refused)?;
        }
        if let Some(source) = &self.source {
            keep.set_source(source).map_err(refused)?;
        }
        Ok(keep)
    }

    /// The options as typed, for the message when no row matches.
    fn asked(&self) -> String {
        let mut asked: Vec<String> = self.filter.iter().map(|f| format!("--filter {f}")).collect();
        asked.extend(self.class.iter().map(|c| format!("--class {c}")));
        asked.extend(self.source.as_ref().map(|s| format!("--source {s}")));
        if self.single_node {
            asked.push("--single-node".into());
        }
        asked.join(", ")
    }
}

/// The rows of a calibration file that the selection keeps, with the catalog that classed
/// them; none is an error, not an empty table.
pub(crate) fn select(
    silicon: &Path,
    sel: &RowSelection,
) -> Result<(Vec<servesim_data::silicon::SiliconRow>, Catalog), Failure> {
    let name = silicon.display().to_string();
    let bytes = std::fs::read(silicon)
        .map_err(|e| Failure { code: 2, message: format!("cannot read {name}: {e}") })?;
    let mut rows = servesim_data::silicon::parse(&bytes, &name)
        .map_err(|e| Failure { code: 2, message: e.to_string() })?;
    let catalog = Catalog::builtin().map_err(|e| Failure { code: 1, message: e.to_string() })?;
    let keep = sel.selection()?;
    rows.retain(|r| keep.keeps(r, &catalog));
    if rows.is_empty() {
        return Err(Failure { code: 2, message: format!("no row of {name} matches {}", sel.asked()) });
    }
    Ok((rows, catalog))
}

/// The files `servesim validate --silicon` writes besides its table.
#[derive(Clone, Copy, Default)]
pub(crate) struct Outputs<'a> {
    /// Every row's prediction and error as CSV (`--rows-csv`).
    pub(crate) rows_csv: Option<&'a Path>,
    /// The report, JSON or Markdown by its extension (`--report`).
    pub(crate) report: Option<&'a Path>,
}

/// `servesim validate --silicon FILE`: the fidelity table.
pub(crate) fn silicon(
    silicon: &Path,
    sel: &RowSelection,
    out: Outputs,
    data_dir: Option<PathBuf>,
    knobs: &servesim_scenario::validate::Knobs,
    jobs: usize,
) -> Result<(), Failure> {
    use servesim_scenario::validate::{run_row, summarize, table, Outcome};
    let started = Instant::now();
    let (rows, catalog) = select(silicon, sel)?;
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
    let n = rows.len();
    say!("servesim validate --silicon {}: {n} row{}\n", silicon.display(), if n == 1 { "" } else { "s" });
    say_raw!("{}", table(&s));
    say_raw!("{}", servesim_scenario::validate::notes(&s));
    let mut errors = servesim_scenario::validate::not_predicted(&rows, &outcomes);
    if !errors.is_empty() {
        say!("\nnot predicted ({}):", errors.len());
        errors.truncate(20);
        for e in errors {
            say!("  {e}");
        }
    }
    if let Some(path) = out.rows_csv {
        write_file(path, &servesim_scenario::validate::rows_csv(&rows, &outcomes))?;
    }
    if let Some(path) = out.report {
        let command = command_line();
        let head = servesim_scenario::validate::ReportHead {
            command: &command,
            silicon: &silicon.display().to_string(),
            version: env!("CARGO_PKG_VERSION"),
        };
        let text = if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
            let json = servesim_scenario::validate::to_json(&head, &rows, &outcomes, &s);
            serde_json::to_string_pretty(&json)
                .map(|t| t + "\n")
                .map_err(|e| Failure { code: 1, message: format!("cannot write {}: {e}", path.display()) })?
        } else {
            servesim_scenario::validate::to_markdown(&head, &rows, &outcomes, &s)
        };
        write_file(path, &text)?;
    }
    eprintln!("wall time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The command as typed, for a report's head: `servesim` and its arguments, each quoted for a
/// POSIX shell where it needs to be.
pub(crate) fn command_line() -> String {
    std::iter::once("servesim".to_string())
        .chain(std::env::args().skip(1).map(|a| servesim_scenario::validate::shell_quoted(&a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `servesim validate --silicon FILE --show-scenarios`.
pub(crate) fn show_scenarios(
    silicon: &Path,
    sel: &RowSelection,
    data_dir: Option<PathBuf>,
    knobs: &servesim_scenario::validate::Knobs,
) -> Result<(), Failure> {
    let (rows, catalog) = select(silicon, sel)?;
    let files = DiskFiles { base: PathBuf::from("."), data_dir };
    for r in &rows {
        // The very scenario `run_row` runs.
        match servesim_scenario::validate::replay_scenario(r, &catalog, &files, knobs) {
            Ok(replay) => {
                let note = match (replay.sized, servesim_scenario::validate::published_workers(r, knobs)) {
                    (Some((p, d)), _) => format!("# worker counts not recorded: sized to {p} prefill + {d} decode\n"),
                    (None, Some((p, d))) => format!(
                        "# worker counts not recorded: InferenceX's published deployment, {p} prefill + {d} decode\n"
                    ),
                    (None, None) => String::new(),
                };
                say!("---\n{note}{}", replay.yaml);
            }
            Err(e) => say!("---\n# {} (line {}): {e}", r.id, r.line),
        }
    }
    Ok(())
}
