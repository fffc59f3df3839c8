//! `servesim calibrate`: the engine's timing constants fitted to a file of measured rows.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use servesim_scenario::validate::calibrate::{calibrate, Setup};
use servesim_scenario::validate::{run_row, Knobs};

use crate::{DiskFiles, Failure, Format};

/// What `servesim calibrate` was asked.
pub(crate) struct CalibrateArgs<'a> {
    pub(crate) silicon: &'a Path,
    pub(crate) rows: &'a crate::validate::RowSelection,
    pub(crate) fit: &'a [String],
    pub(crate) folds: usize,
    pub(crate) format: Format,
    pub(crate) report: Option<&'a Path>,
    pub(crate) jobs: usize,
    pub(crate) data_dir: Option<PathBuf>,
}

/// `servesim calibrate --silicon FILE`.
pub(crate) fn run(a: &CalibrateArgs<'_>) -> Result<(), Failure> {
    let started = Instant::now();
    let (rows, catalog) = crate::validate::select(a.silicon, a.rows)?;
    let setup = Setup::new(&a.silicon.display().to_string(), &rows, a.fit, a.folds)
        .map_err(|message| Failure { code: 2, message })?;
    let files = DiskFiles { base: PathBuf::from("."), data_dir: a.data_dir.clone() };
    let show = std::io::stderr().is_terminal();
    let mut replays = 0usize;
    let mut eval = |k: &Knobs, idx: &[usize]| -> Vec<Option<(f64, f64)>> {
        replays += 1;
        if show {
            eprint!("\rreplay {replays} of the rows   ");
        }
        servesim_scenario::parallel::map(
            idx.len(),
            a.jobs,
            &|j| run_row(&rows[idx[j]], &catalog, &files, k),
            &|_, _| {},
        )
        .into_iter()
        .map(|o| o.and_then(|o| o.predicted))
        .collect()
    };
    let calibration = calibrate(&setup, &mut eval).map_err(|message| Failure { code: 1, message })?;
    if show {
        eprintln!();
    }
    match a.format {
        Format::Json => {
            let text = serde_json::to_string_pretty(&calibration.to_json())
                .map_err(|e| Failure { code: 1, message: e.to_string() })?;
            say_raw!("{text}\n");
        }
        Format::Table => say_raw!("{}", calibration.table()),
    }
    if let Some(path) = a.report {
        let command = crate::validate::command_line();
        let text = if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
            let mut json = calibration.to_json();
            if let Some(o) = json.as_object_mut() {
                o.insert("command".into(), serde_json::Value::String(command));
            }
            serde_json::to_string_pretty(&json)
                .map(|t| t + "\n")
                .map_err(|e| Failure { code: 1, message: format!("cannot write {}: {e}", path.display()) })?
        } else {
            calibration.to_markdown(&command)
        };
        crate::write_file(path, &text)?;
    }
    eprintln!("wall time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
