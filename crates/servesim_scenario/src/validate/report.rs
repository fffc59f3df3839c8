//! What `servesim validate --silicon` reports besides its table: the notes printed under it,
//! every row's prediction as CSV, and the whole report as a file (`--report FILE`), in JSON
//! or Markdown.

use std::fmt::Write as _;

use serde_json::{json, Value};
use servesim_data::silicon::SiliconRow;

use super::summary::{table, workers_source, Group, Summary};
use super::{Outcome, PROMPT_LOAD_LIMIT, SIZED_PREFILL_UTILIZATION};

/// What ran: the command line, the measured file and the servesim release, written at the
/// head of a report so that it can be reproduced.
#[derive(Clone, Copy, Debug)]
pub struct ReportHead<'a> {
    /// The command as typed (`servesim validate --silicon …`).
    pub command: &'a str,
    /// The measured file.
    pub silicon: &'a str,
    /// servesim's release.
    pub version: &'a str,
}

/// The paragraphs printed under the table: where disaggregated rows' worker counts came
/// from, and the error without the rows whose measurement the kernel data cannot serve.
/// Empty when neither applies.
#[must_use]
pub fn notes(s: &Summary) -> String {
    let mut out = String::new();
    let rows_from = |source: &str| s.disagg_by_workers.get(source).map_or(0, |g| g.rows);
    let (sized, published) = (rows_from("sized"), rows_from("published"));
    if sized + published > 0 {
        let _ = writeln!(
            out,
            "\n{} disaggregated rows do not record their worker counts: {published} replay the deployment \
             InferenceX published for their clients (workers, layouts, decode batch), {sized} get pools sized from \
             the estimate (decode workers to hold the concurrency, prefill workers at most {:.0}% busy); \
             --rows-csv lists them",
            sized + published,
            100.0 * SIZED_PREFILL_UTILIZATION
        );
        // Which share of the disaggregated error the sizing owns.
        for (source, g) in &s.disagg_by_workers {
            let which = match *source {
                "recorded" => "recording their worker counts",
                "published" => "replaying InferenceX's published deployment",
                _ => "with sized pools",
            };
            let _ = writeln!(
                out,
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
        let _ = writeln!(
            out,
            "\nrows whose measurement served more prompts than their prefilling workers' kernels can compute \
             (prompt load > {PROMPT_LOAD_LIMIT:.0}: kernel seconds a second at the measured request rate, \
             --rows-csv column prompt_load): {}",
            counts.join(", ")
        );
        for (c, g) in s.within_kernels.iter().filter(|(c, _)| s.beyond_kernels.contains_key(*c)) {
            let _ = writeln!(
                out,
                "  {c} without them ({} rows): TTFT / TPOT MAPE {:.1}% / {:.1}%, bias {:+.1}% / {:+.1}%",
                g.rows,
                g.ttft_mape(),
                g.tpot_mape(),
                g.ttft_bias(),
                g.tpot_bias()
            );
        }
    }
    out
}

/// The rows that could not be predicted, as `id (line N): why`.
#[must_use]
pub fn not_predicted(rows: &[SiliconRow], outcomes: &[Outcome]) -> Vec<String> {
    rows.iter()
        .zip(outcomes)
        .filter_map(|(r, o)| o.error.as_ref().map(|e| format!("{} (line {}): {e}", r.id, r.line)))
        .collect()
}

/// Every row's prediction and error, one CSV line each (`--rows-csv`).
#[must_use]
pub fn rows_csv(rows: &[SiliconRow], outcomes: &[Outcome]) -> String {
    let mut w = String::from(
        "id,line,model,system,backend,mode,isl,osl,concurrency,measured_ttft_ms,predicted_ttft_ms,\
         measured_tpot_ms,predicted_tpot_ms,sized_workers,workers_source,mtp_drafts,prompt_load,error\n",
    );
    for (r, o) in rows.iter().zip(outcomes) {
        let (pt, pp) = o
            .predicted
            .map_or((String::new(), String::new()), |(a, b)| (format!("{a:.3}"), format!("{b:.3}")));
        let _ = writeln!(
            w,
            "{},{},{},{},{},{},{},{},{},{:.3},{pt},{:.3},{pp},{},{},{},{},\"{}\"",
            r.id,
            r.line,
            r.model,
            r.system,
            r.backend,
            mode(r),
            r.isl,
            r.osl,
            r.concurrency,
            r.ttft_ms,
            r.tpot_ms,
            o.sized.map_or(String::new(), |(p, d)| format!("{p}P+{d}D")),
            workers_source(r, o).unwrap_or(""),
            o.drafts.map_or(String::new(), |n| n.to_string()),
            o.prompt_load.map_or(String::new(), |l| format!("{l:.3}")),
            o.error.as_deref().unwrap_or("").replace('"', "'")
        );
    }
    w
}

fn mode(r: &SiliconRow) -> &'static str {
    if r.disaggregated() {
        "disagg"
    } else {
        "agg"
    }
}

/// A finite number, else JSON null (a group with no predicted row has no error).
fn number(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

fn metrics(g: &Group) -> Value {
    json!({
        "rows": g.rows,
        "predicted": g.predicted,
        "coverage_pct": number(g.coverage()),
        "ttft_mape_pct": number(g.ttft_mape()),
        "tpot_mape_pct": number(g.tpot_mape()),
        "ttft_bias_pct": number(g.ttft_bias()),
        "tpot_bias_pct": number(g.tpot_bias()),
        "ttft_scatter_pct": number(g.ttft_scatter()),
        "tpot_scatter_pct": number(g.tpot_scatter()),
        "shape_points": g.shape_points,
        "ttft_shape_pct": number(g.ttft_shape()),
        "tpot_shape_pct": number(g.tpot_shape()),
    })
}

/// A group's metrics with the fields that name it.
fn named(g: &Group, names: &[(&str, &str)]) -> Value {
    let mut m = metrics(g);
    if let Value::Object(o) = &mut m {
        for (k, v) in names {
            o.insert((*k).into(), json!(v));
        }
    }
    m
}

/// `{key: …, metrics…}` for each entry of a per-class map.
fn by_class<'a>(groups: impl Iterator<Item = (&'a &'static str, &'a Group)>, key: &str) -> Value {
    Value::Array(groups.map(|(c, g)| named(g, &[(key, c)])).collect())
}

/// The whole report as JSON: what ran, the error of every family, class and the total, the
/// same split by kernel-servable load and by worker-count source, and every row with its
/// curve and shape errors.
#[must_use]
pub fn to_json(head: &ReportHead, rows: &[SiliconRow], outcomes: &[Outcome], s: &Summary) -> Value {
    let families: Vec<Value> = s
        .by_config
        .iter()
        .map(|((model, system, engine, mode), g)| {
            named(g, &[("model", model), ("system", system), ("engine", engine), ("mode", mode)])
        })
        .collect();
    let shapes = super::shape_errors(rows, outcomes);
    let per_row: Vec<Value> = rows
        .iter()
        .zip(outcomes)
        .zip(shapes)
        .map(|((r, o), shape)| {
            let error_pct = |p: f64, m: f64| number(100.0 * (p / m - 1.0));
            json!({
                "id": r.id,
                "line": r.line,
                "model": r.model,
                "system": r.system,
                "engine": r.backend,
                "mode": mode(r),
                "measured_by": super::measured_by(r),
                "isl": r.isl,
                "osl": r.osl,
                "concurrency": r.concurrency,
                "measured_ttft_ms": number(r.ttft_ms),
                "predicted_ttft_ms": o.predicted.map(|p| number(p.0)),
                "ttft_error_pct": o.predicted.map(|p| error_pct(p.0, r.ttft_ms)),
                "measured_tpot_ms": number(r.tpot_ms),
                "predicted_tpot_ms": o.predicted.map(|p| number(p.1)),
                "tpot_error_pct": o.predicted.map(|p| error_pct(p.1, r.tpot_ms)),
                "sized_workers": o.sized.map(|(p, d)| json!({"prefill": p, "decode": d})),
                "workers_source": workers_source(r, o),
                "mtp_drafts": o.drafts,
                "prompt_load": o.prompt_load.map(number),
                "curve": o.curve,
                "ttft_shape_pct": shape.map(|(t, _)| number(100.0 * t)),
                "tpot_shape_pct": shape.map(|(_, p)| number(100.0 * p)),
                "error": o.error,
            })
        })
        .collect();
    json!({
        "command": head.command,
        "silicon": head.silicon,
        "servesim_version": head.version,
        "overall": metrics(&s.overall),
        "classes": by_class(s.by_class.iter(), "class"),
        "families": families,
        "within_kernels": by_class(s.within_kernels.iter(), "class"),
        "beyond_kernels": by_class(s.beyond_kernels.iter(), "class"),
        "disaggregated_by_workers": by_class(s.disagg_by_workers.iter(), "workers_source"),
        "prompt_load_limit": PROMPT_LOAD_LIMIT,
        "rows": per_row,
    })
}

/// The report as Markdown: what ran, the table and its notes as printed, and every row that
/// could not be predicted (the terminal shows the first 20).
#[must_use]
pub fn to_markdown(head: &ReportHead, rows: &[SiliconRow], outcomes: &[Outcome], s: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# servesim validate: {}\n", head.silicon);
    let _ = writeln!(out, "```sh\n{}\n```\n", head.command);
    let _ = writeln!(
        out,
        "servesim {}: {} rows, {} predicted ({:.1}% coverage).\n",
        head.version,
        s.overall.rows,
        s.overall.predicted,
        s.overall.coverage()
    );
    out.push_str(&table(s));
    let notes = notes(s);
    if !notes.is_empty() {
        out.push_str(&notes);
    }
    let missing = not_predicted(rows, outcomes);
    if !missing.is_empty() {
        let _ = writeln!(out, "\n## Not predicted ({})\n", missing.len());
        for m in missing {
            let _ = writeln!(out, "- {m}");
        }
    }
    out
}

/// `arg` as a POSIX shell reads it back, for a report's command line: as is when it holds only
/// safe characters, else in single quotes.
#[must_use]
pub fn shell_quoted(arg: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !arg.is_empty() && arg.chars().all(safe) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}
