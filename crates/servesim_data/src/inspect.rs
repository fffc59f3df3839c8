//! What a data file holds, for `servesim data inspect` and the page's Data tab: the kind of
//! file, a text summary, and a preview to draw (curves and a heatmap of a kernel table's
//! slice, the arrival rate of a trace). Both front ends print the same summary.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use servesim_core::metrics::dist;
use servesim_perf::tables::{Family, Grid, Table};

use crate::perf::{read_columns, read_table, Column, FAMILY_KEY};
use crate::silicon::{self, Mode};
use crate::{aic, fpm, trace};

/// What kind of file it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A servesim kernel table (`data/perf/...`).
    ServesimTable,
    /// An AISimulate FPM forward-pass table.
    Fpm,
    /// The `.metadata.json` sidecar of an FPM table.
    FpmSidecar,
    /// A table of the AIConfigurator perf database.
    AicTable,
    /// Some other Parquet file.
    Parquet,
    /// A Mooncake JSONL trace.
    MooncakeTrace,
    /// An Azure LLM inference CSV trace.
    AzureTrace,
    /// An agentic Mooncake JSONL trace (rows that wait for each other).
    AgenticTrace,
    /// Weka coding-agent conversations (kv-cache-tester, AgentX).
    WekaTrace,
    /// Measured deployments in AIConfigurator's `silicon_sample.csv` columns (what
    /// `servesim validate --silicon` replays).
    Calibration,
    /// A measured per-request log, vLLM's request timestamps (`servesim validate --requests`).
    RequestLog,
}

impl Kind {
    /// Short name (`trace`, `fpm`, ...), stable for callers that branch on it.
    #[must_use]
    pub fn key(self) -> &'static str {
        match self {
            Kind::ServesimTable => "servesim_table",
            Kind::Fpm => "fpm",
            Kind::FpmSidecar => "fpm_sidecar",
            Kind::AicTable => "aic_table",
            Kind::Parquet => "parquet",
            Kind::MooncakeTrace => "mooncake_trace",
            Kind::AzureTrace => "azure_trace",
            Kind::AgenticTrace => "agentic_trace",
            Kind::WekaTrace => "weka_trace",
            Kind::Calibration => "calibration",
            Kind::RequestLog => "request_log",
        }
    }
}

/// One curve.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Abscissae.
    pub x: Vec<f64>,
    /// Ordinates.
    pub y: Vec<f64>,
}

/// A heatmap over two axes (`z[row][col]`, `None` where nothing was measured).
#[derive(Clone, Debug, PartialEq)]
pub struct Heatmap {
    /// Column coordinates.
    pub x: Vec<f64>,
    /// Row coordinates.
    pub y: Vec<f64>,
    /// Values.
    pub z: Vec<Vec<Option<f64>>>,
    /// Row axis name.
    pub y_title: String,
}

/// Something to draw.
#[derive(Clone, Debug, PartialEq)]
pub struct Preview {
    /// Chart title.
    pub title: String,
    /// Abscissa name.
    pub x_title: String,
    /// Ordinate name.
    pub y_title: String,
    /// Logarithmic axes (kernel tables span decades).
    pub log: bool,
    /// Curves.
    pub series: Vec<Series>,
    /// The same data as a heatmap, when there are two axes.
    pub heatmap: Option<Heatmap>,
}

/// What [`inspect`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Inspection {
    /// The kind of file.
    pub kind: Kind,
    /// The text summary (what `servesim data inspect` prints).
    pub summary: String,
    /// A kernel table's slices (key values joined by `/`), in order; empty otherwise.
    pub slices: Vec<String>,
    /// A chart of the file (of slice `slice` for a kernel table).
    pub preview: Option<Preview>,
}

/// Curves drawn at most per preview (more would be unreadable).
const MAX_CURVES: usize = 8;
/// Most bins of a trace's arrival-rate preview.
const RATE_BINS: usize = 60;
/// Mean arrivals per bin the preview aims for at least, so a short trace's rate is not a comb
/// of empty and full bins.
const ARRIVALS_PER_BIN: usize = 5;

fn distinct(c: &Column, limit: usize) -> (usize, Vec<String>) {
    let mut set = BTreeSet::new();
    for i in 0..c.len() {
        if let Some(t) = c.text(i) {
            set.insert(t);
        }
    }
    let n = set.len();
    (n, set.into_iter().take(limit).collect())
}

/// Inspects a file by name and contents. `sidecar` is the text of an FPM table's
/// `.metadata.json` when the caller has it (name, text); `slice` picks which slice of a kernel
/// table to preview.
///
/// # Errors
/// An unsupported file type, or the reader's error naming the file and what is wrong.
pub fn inspect(
    name: &str,
    bytes: Vec<u8>,
    sidecar: Option<(&str, &str)>,
    slice: usize,
) -> Result<Inspection, String> {
    let lower = name.to_ascii_lowercase();
    let ext = lower.rsplit_once('.').map_or("", |(_, e)| e);
    let mut out = String::new();
    match ext {
        "parquet" => {
            let cols = read_columns(name, bytes.clone()).map_err(|e| e.to_string())?;
            if cols.metadata.contains_key(FAMILY_KEY) {
                return servesim_table(name, bytes, &cols.metadata, slice);
            }
            if cols.columns.contains_key("cell_id") && cols.columns.contains_key("workload_kind") {
                fpm_table(name, bytes, sidecar, &mut out)?;
                return Ok(Inspection { kind: Kind::Fpm, summary: out, slices: Vec::new(), preview: None });
            }
            let kind = if cols.columns.contains_key("kernel_source") { Kind::AicTable } else { Kind::Parquet };
            let what = if kind == Kind::AicTable { "AIConfigurator perf table" } else { "Parquet file" };
            let _ = writeln!(out, "{name}: {what}, {} rows, {} columns", cols.rows, cols.columns.len());
            for (k, c) in &cols.columns {
                let (n, sample) = distinct(c, 8);
                let _ = writeln!(out, "  {k:<24} {n:>7} distinct  {}", sample.join(", "));
            }
            // An AIConfigurator table named as in its `systems/data` tree is converted as
            // `servesim data import-aic` would, and its slices drawn like servesim's own.
            let family = Family::ALL.into_iter().find(|f| lower.ends_with(aic::source_path(*f).1));
            let (mut slices, mut preview) = (Vec::new(), None);
            if let (Kind::AicTable, Some(family)) = (kind, family) {
                let imported = aic::convert(name, family, &cols, &aic::Filter::default()).map_err(|e| e.to_string())?;
                let _ = writeln!(
                    out,
                    "  as servesim '{}' rows: {} kept, {} dropped (other kernel lanes, beam width > 1)",
                    family.name(),
                    imported.rows.len(),
                    imported.dropped_rows
                );
                let t = Table::from_rows(family, imported.rows).map_err(|e| format!("{name}: {}", e.message))?;
                (slices, preview) = table_slices(&t, slice, &mut out);
            }
            Ok(Inspection { kind, summary: out, slices, preview })
        }
        "csv" if first_line(&bytes).contains("silicon_ttft_ms") => calibration_file(name, &bytes),
        "jsonl" if is_request_log(&bytes) => request_log_file(name, &bytes),
        "jsonl" | "csv" => trace_file(name, &bytes),
        "json" if trace::TraceFormat::sniff(name, &bytes) == trace::TraceFormat::Weka => trace_file(name, &bytes),
        "json" if lower.ends_with(".metadata.json") => {
            let text = String::from_utf8(bytes).map_err(|_| format!("{name}: not UTF-8 text"))?;
            let sc = fpm::read_sidecar(name, &text).map_err(|e| e.to_string())?;
            let _ = writeln!(
                out,
                "{name}: AISimulate FPM sidecar, schema v{}, {}, parquet sha256 {}",
                sc.schema_version,
                if sc.measurement_policy.is_empty() { "no measurement policy" } else { &sc.measurement_policy },
                sc.parquet_sha256.as_deref().unwrap_or("absent")
            );
            Ok(Inspection { kind: Kind::FpmSidecar, summary: out, slices: Vec::new(), preview: None })
        }
        _ => Err(format!(
            "{name}: unsupported file type (servesim reads .parquet tables, .metadata.json FPM sidecars, .jsonl and .csv traces, .json Weka traces, calibration .csv files and per-request .jsonl logs)"
        )),
    }
}

fn servesim_table(
    name: &str,
    bytes: Vec<u8>,
    metadata: &std::collections::BTreeMap<String, String>,
    slice: usize,
) -> Result<Inspection, String> {
    let t = read_table(name, bytes).map_err(|e| e.to_string())?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{name}: servesim table '{}', {} rows ({} duplicates dropped)",
        t.family.name(),
        t.rows,
        t.duplicates
    );
    for (k, v) in metadata {
        if k.starts_with("servesim.") {
            let _ = writeln!(out, "  {k}: {v}");
        }
    }
    let (slices, preview) = table_slices(&t, slice, &mut out);
    Ok(Inspection { kind: Kind::ServesimTable, summary: out, slices, preview })
}

/// Lists a table's slices into `out`; the slice names and a preview of slice `slice`.
fn table_slices(t: &Table, slice: usize, out: &mut String) -> (Vec<String>, Option<Preview>) {
    let _ = writeln!(out, "  slices ({}): {}", t.family.keys().join("/"), t.slices().count());
    let mut slices = Vec::new();
    let mut preview = None;
    for (i, (k, g)) in t.slices().enumerate() {
        let axes: Vec<String> = t
            .family
            .axes()
            .iter()
            .zip(g.axes())
            .map(|(n, a)| {
                format!("{n} {}..{} ({})", a.first().unwrap_or(&0), a.last().unwrap_or(&0), a.len())
            })
            .collect();
        let label = k.join("/");
        let _ = writeln!(out, "    {label:<40} {:>6} points  {}", g.measured_points(), axes.join(", "));
        if i == slice {
            preview = Some(grid_preview(&format!("{} {label}", t.family.name()), t.family.axes(), g));
        }
        slices.push(label);
    }
    (slices, preview)
}

#[allow(clippy::cast_precision_loss)] // Axis coordinates are far below 2^53.
fn grid_preview(title: &str, names: &[&str], g: &Grid) -> Preview {
    let axes = g.axes();
    let dims = axes.len();
    // Fix every axis beyond the first two where the (0, 1) plane has the most measurements.
    let mut fixed = vec![0usize; dims];
    if dims > 2 {
        let others: Vec<usize> = (2..dims).collect();
        let combos: usize = others.iter().map(|&d| axes[d].len()).product();
        let mut best = (0usize, vec![0usize; dims]);
        for c in 0..combos {
            let mut idx = vec![0usize; dims];
            let mut rest = c;
            for &d in &others {
                idx[d] = rest % axes[d].len();
                rest /= axes[d].len();
            }
            let mut count = 0;
            for i in 0..axes[0].len() {
                for j in 0..axes[1].len() {
                    idx[0] = i;
                    idx[1] = j;
                    if exact_at(g, &idx).is_some() {
                        count += 1;
                    }
                }
            }
            if count > best.0 {
                best = (count, idx);
            }
        }
        fixed = best.1;
    }
    let held: Vec<String> =
        (2..dims).map(|d| format!("{} = {}", names.get(d).unwrap_or(&"?"), axes[d][fixed[d]])).collect();
    let title = if held.is_empty() { title.to_string() } else { format!("{title} ({})", held.join(", ")) };
    let x_title = names.first().unwrap_or(&"x").to_string();
    let curve = |j: Option<usize>| -> Series {
        let mut idx = fixed.clone();
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for (i, &c) in axes[0].iter().enumerate() {
            idx[0] = i;
            if let Some(j) = j {
                idx[1] = j;
            }
            if let Some(v) = exact_at(g, &idx) {
                x.push(c as f64);
                y.push(v);
            }
        }
        let name = match j {
            Some(j) => format!("{} = {}", names.get(1).unwrap_or(&"?"), axes[1][j]),
            None => "latency".to_string(),
        };
        Series { name, x, y }
    };
    if dims < 2 {
        return Preview {
            title,
            x_title,
            y_title: "latency (ms)".into(),
            log: true,
            series: vec![curve(None)],
            heatmap: None,
        };
    }
    let n1 = axes[1].len();
    let step = n1.div_ceil(MAX_CURVES).max(1);
    let series: Vec<Series> =
        (0..n1).step_by(step).map(|j| curve(Some(j))).filter(|s| !s.x.is_empty()).collect();
    let z: Vec<Vec<Option<f64>>> = (0..n1)
        .map(|j| {
            (0..axes[0].len())
                .map(|i| {
                    let mut idx = fixed.clone();
                    idx[0] = i;
                    idx[1] = j;
                    exact_at(g, &idx)
                })
                .collect()
        })
        .collect();
    Preview {
        title,
        x_title,
        y_title: "latency (ms)".into(),
        log: true,
        series,
        heatmap: Some(Heatmap {
            x: axes[0].iter().map(|&c| c as f64).collect(),
            y: axes[1].iter().map(|&c| c as f64).collect(),
            z,
            y_title: names.get(1).unwrap_or(&"y").to_string(),
        }),
    }
}

fn exact_at(g: &Grid, idx: &[usize]) -> Option<f64> {
    let coords: Vec<u64> = idx.iter().zip(g.axes()).map(|(&i, a)| a[i]).collect();
    g.exact(&coords)
}

fn fpm_table(
    name: &str,
    bytes: Vec<u8>,
    sidecar: Option<(&str, &str)>,
    out: &mut String,
) -> Result<(), String> {
    let side_path = fpm::sidecar_path(name);
    let sidecar = match sidecar {
        Some((side_name, text)) => {
            let sc = fpm::read_sidecar(side_name, text).map_err(|e| e.to_string())?;
            let _ = writeln!(
                out,
                "{name}: AISimulate FPM forward-pass table (sidecar {side_name}: schema v{}, {}, sha256 {})",
                sc.schema_version,
                if sc.measurement_policy.is_empty() {
                    "no measurement policy"
                } else {
                    &sc.measurement_policy
                },
                if sc.parquet_sha256.is_some() { "checked" } else { "absent" }
            );
            sc
        }
        None => {
            let _ = writeln!(
                out,
                "{name}: AISimulate FPM forward-pass table (no sidecar at {side_path}: not checked)"
            );
            fpm::Sidecar { schema_version: fpm::SCHEMA_VERSION, ..fpm::Sidecar::default() }
        }
    };
    let cells = fpm::read_fpm(name, bytes, &sidecar).map_err(|e| e.to_string())?;
    for c in &cells {
        let _ = writeln!(out, "  cell {}", c.describe());
        match servesim_perf::fpm::FpmModel::new(&c.data) {
            Ok(m) => {
                let d = m.domain();
                let _ = writeln!(
                    out,
                    "    prefill: batch {}, new tokens {}, cached tokens {}; decode: batch {}, KV tokens {}{}",
                    d.prefill[0],
                    d.prefill[1],
                    d.prefill[2],
                    d.decode[0],
                    d.decode[1],
                    if m.repeated_rows > 0 {
                        format!("; {} repeated rows (median used)", m.repeated_rows)
                    } else {
                        String::new()
                    }
                );
            }
            Err(e) => {
                let _ = writeln!(out, "    not usable: {e}");
            }
        }
    }
    Ok(())
}

/// The first line of a file, lossily decoded (enough to tell CSV dialects apart).
fn first_line(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == b'\n').unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Whether a JSONL file's first record is a per-request log entry (it has `queued_ts`, which
/// no trace format has).
fn is_request_log(bytes: &[u8]) -> bool {
    crate::trace::first_record(bytes).is_some_and(|v| v.get("queued_ts").is_some())
}

/// Smallest and largest of some values, `None` when there are none.
fn span<T: PartialOrd + Copy>(values: impl Iterator<Item = T>) -> Option<(T, T)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((if v < lo { v } else { lo }, if v > hi { v } else { hi })),
    })
}

/// A calibration file: its rows by class, engine and deployment family, and the ranges of
/// lengths, clients and measurements.
fn calibration_file(name: &str, bytes: &[u8]) -> Result<Inspection, String> {
    let rows = silicon::parse(bytes, name).map_err(|e| e.to_string())?;
    let disaggregated = rows.iter().filter(|r| r.disaggregated()).count();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{name}: measured deployments (AIConfigurator silicon_sample.csv columns), {} rows: {} aggregated, {disaggregated} disaggregated",
        rows.len(),
        rows.len() - disaggregated
    );
    let mut engines: BTreeMap<&str, usize> = BTreeMap::new();
    // (model, system, engine, mode) → (rows, fewest clients, most clients).
    type Deployment<'a> = (&'a str, &'a str, &'a str, &'a str);
    let mut families: BTreeMap<Deployment, (usize, u32, u32)> = BTreeMap::new();
    for r in &rows {
        *engines.entry(&r.backend).or_default() += 1;
        let mode = if matches!(r.mode, Mode::Agg { .. }) { "agg" } else { "disagg" };
        let f = families.entry((&r.model, &r.system, &r.backend, mode)).or_insert((0, u32::MAX, 0));
        *f = (f.0 + 1, f.1.min(r.concurrency), f.2.max(r.concurrency));
    }
    let models: BTreeSet<&str> = rows.iter().map(|r| r.model.as_str()).collect();
    let systems: BTreeSet<&str> = rows.iter().map(|r| r.system.as_str()).collect();
    let engine_counts: Vec<String> = engines.iter().map(|(e, n)| format!("{e} {n}")).collect();
    let _ = writeln!(
        out,
        "  engines: {}; {} models on {} systems",
        engine_counts.join(", "),
        models.len(),
        systems.len()
    );
    if let (Some(isl), Some(osl), Some(c), Some(ttft), Some(tpot)) = (
        span(rows.iter().map(|r| r.isl)),
        span(rows.iter().map(|r| r.osl)),
        span(rows.iter().map(|r| r.concurrency)),
        span(rows.iter().map(|r| r.ttft_ms)),
        span(rows.iter().map(|r| r.tpot_ms)),
    ) {
        let _ = writeln!(
            out,
            "  prompt tokens {}–{}, output tokens {}–{}, clients {}–{}; measured TTFT {:.1}–{:.1} ms, TPOT {:.2}–{:.2} ms",
            isl.0, isl.1, osl.0, osl.1, c.0, c.1, ttft.0, ttft.1, tpot.0, tpot.1
        );
    }
    let _ = writeln!(
        out,
        "  {:<40} {:<20} {:<7} {:<6} {:>5}  clients",
        "model", "system", "engine", "mode", "rows"
    );
    for ((model, system, engine, mode), (n, lo, hi)) in &families {
        let _ = writeln!(out, "  {model:<40} {system:<20} {engine:<7} {mode:<6} {n:>5}  {lo}–{hi}");
    }
    let _ = writeln!(out, "  replay and score them: servesim validate --silicon {name}");
    Ok(Inspection { kind: Kind::Calibration, summary: out, slices: Vec::new(), preview: None })
}

/// A per-request log: request and token counts, and the distributions of TTFT and TPOT as
/// `servesim validate --requests` compares them.
#[allow(clippy::cast_precision_loss)] // Token counts are far below 2^53.
fn request_log_file(name: &str, bytes: &[u8]) -> Result<Inspection, String> {
    let reqs = silicon::parse_request_log(bytes, name).map_err(|e| e.to_string())?;
    let of = |f: fn(&silicon::MeasuredRequest) -> f64| dist(&reqs.iter().map(f).collect::<Vec<_>>());
    let (input, output, ttft) =
        (of(|r| r.input_tokens as f64), of(|r| r.output_tokens as f64), of(|r| r.ttft_ms));
    let tpots: Vec<f64> = reqs.iter().filter_map(|r| r.tpot_ms).collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{name}: measured per-request log (vLLM request timestamps), {} requests; input tokens mean {:.0} max {:.0}; output tokens mean {:.0} max {:.0}",
        reqs.len(),
        input.mean,
        input.max,
        output.mean,
        output.max
    );
    let _ = writeln!(
        out,
        "  TTFT ms: mean {:.1}, p50 {:.1}, p90 {:.1}, max {:.1}",
        ttft.mean, ttft.median, ttft.p90, ttft.max
    );
    if tpots.is_empty() {
        let _ = writeln!(out, "  TPOT: no request has two or more output tokens");
    } else {
        let tpot = dist(&tpots);
        let _ = writeln!(
            out,
            "  TPOT ms: mean {:.2}, p50 {:.2}, p90 {:.2}, max {:.2} ({} of the {} requests have two or more output tokens)",
            tpot.mean,
            tpot.median,
            tpot.p90,
            tpot.max,
            tpots.len(),
            reqs.len()
        );
    }
    let _ = writeln!(
        out,
        "  compare with a replay of the same workload: servesim validate --requests {name} -c CONFIG"
    );
    Ok(Inspection { kind: Kind::RequestLog, summary: out, slices: Vec::new(), preview: None })
}

#[allow(clippy::cast_precision_loss)] // Counts are far below 2^53.
fn trace_file(name: &str, bytes: &[u8]) -> Result<Inspection, String> {
    let format = trace::TraceFormat::sniff(name, bytes);
    let block = if format == trace::TraceFormat::Weka { trace::WEKA_BLOCK_TOKENS } else { 512 };
    let t = trace::parse(bytes, name, format, block).map_err(|e| e.to_string())?;
    let rows = &t.trace.rows;
    // A graph's dependent rows start when what they wait for completes, not at a timestamp:
    // its span and arrival rate are its roots'.
    let timed: Vec<&servesim_core::traffic::TraceRow> =
        rows.iter().filter(|r| !t.trace.dag || r.wait_for.is_empty()).collect();
    let inputs: Vec<u64> = rows.iter().map(|r| u64::from(r.input_tokens)).collect();
    let outputs: Vec<u64> = rows.iter().map(|r| u64::from(r.output_tokens)).collect();
    let span_s = timed.iter().map(|r| r.timestamp).max().map_or(0.0, |t| t.as_ms_f64() / 1000.0);
    let mean = |v: &[u64]| if v.is_empty() { 0.0 } else { v.iter().sum::<u64>() as f64 / v.len() as f64 };
    let (kind, what) = match format {
        trace::TraceFormat::AzureCsv => (Kind::AzureTrace, "Azure CSV"),
        trace::TraceFormat::Mooncake => (Kind::MooncakeTrace, "Mooncake JSONL"),
        trace::TraceFormat::AgenticMooncake => (Kind::AgenticTrace, "agentic Mooncake JSONL"),
        trace::TraceFormat::Weka => (Kind::WekaTrace, "Weka coding-agent"),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{name}: {what} trace, {} requests {}over {span_s:.1} s; input tokens mean {:.0} max {:.0}; output tokens mean {:.0} max {:.0}",
        rows.len(),
        if t.trace.dag { format!("whose {} roots start ", timed.len()) } else { String::new() },
        mean(&inputs),
        inputs.iter().max().unwrap_or(&0),
        mean(&outputs),
        outputs.iter().max().unwrap_or(&0)
    );
    let blocks: usize = rows.iter().map(|r| r.hash_ids.len()).sum();
    if blocks > 0 {
        let unique: BTreeSet<u64> = rows.iter().flat_map(|r| r.hash_ids.iter().copied()).collect();
        let _ = writeln!(
            out,
            "  prompt blocks ({} tokens each): {blocks}, of which {} distinct ({:.1}% could be reused)",
            t.trace.block_size,
            unique.len(),
            100.0 * (1.0 - unique.len() as f64 / blocks as f64)
        );
    }
    if t.trace.dag {
        let _ = writeln!(out, "  {}", dag_summary(&t.trace));
    }
    if t.token_id_rows > 0 {
        let _ = writeln!(
            out,
            "  {} rows give their prompts as token ids, hashed here in {}-token blocks; a scenario hashes a file of token ids in the engine's KV block size unless its trace source sets block_size",
            t.token_id_rows, t.trace.block_size
        );
    }
    if let Some(line) = t.untimed_line {
        let _ = writeln!(
            out,
            "  line {line} has no timestamp: replay it under concurrency, not trace_timestamps"
        );
    }
    // Arrival rate over the trace.
    let preview = (span_s > 0.0).then(|| {
        let bins = (timed.len() / ARRIVALS_PER_BIN).clamp(1, RATE_BINS);
        let width = span_s / bins as f64;
        let mut counts = vec![0u64; bins];
        for r in &timed {
            let s = r.timestamp.as_ms_f64() / 1000.0;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let b = ((s / width) as usize).min(bins - 1);
            counts[b] += 1;
        }
        Preview {
            title: format!("{name}: arrivals"),
            x_title: "time (s)".into(),
            y_title: "requests/s".into(),
            log: false,
            series: vec![Series {
                name: if t.trace.dag { "root arrival rate" } else { "arrival rate" }.into(),
                x: (0..bins).map(|b| (b as f64 + 0.5) * width).collect(),
                y: counts.iter().map(|&c| c as f64 / width).collect(),
            }],
            heatmap: None,
        }
    });
    Ok(Inspection { kind, summary: out, slices: Vec::new(), preview })
}

/// A dependency graph's shape: roots, dependent requests, the longest chain and the waits.
#[allow(clippy::cast_precision_loss)] // Counts are far below 2^53.
fn dag_summary(t: &servesim_core::traffic::Trace) -> String {
    let n = t.rows.len();
    let roots = t.rows.iter().filter(|r| r.wait_for.is_empty()).count();
    let trajectories: BTreeSet<u32> = t.rows.iter().filter_map(|r| r.session).collect();
    let fan_in = t.rows.iter().filter(|r| r.wait_for.len() > 1).count();
    let waits: Vec<f64> = t
        .rows
        .iter()
        .filter(|r| !r.wait_for.is_empty())
        .map(|r| r.delay.map_or(0.0, |d| d.as_ms_f64()))
        .collect();
    let mean_wait = if waits.is_empty() { 0.0 } else { waits.iter().sum::<f64>() / waits.len() as f64 };
    format!(
        "dependencies: {roots} roots start at their timestamps, {} requests wait for others ({fan_in} for several: joins), {} trajectories, longest chain {} requests; mean delay + tool wait after dependencies {mean_wait:.0} ms",
        n - roots,
        trajectories.len(),
        t.longest_chain(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_summarised_with_their_arrival_rate() {
        let text = "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 10, \"hash_ids\": [1, 2]}\n\
                    {\"timestamp\": 1000, \"input_length\": 1024, \"output_length\": 30, \"hash_ids\": [1, 3]}\n\
                    {\"timestamp\": 2000, \"input_length\": 512, \"output_length\": 20, \"hash_ids\": [1]}\n";
        let i = inspect("t.jsonl", text.as_bytes().to_vec(), None, 0).unwrap();
        assert_eq!(i.kind, Kind::MooncakeTrace);
        assert!(i.summary.contains("3 requests over 2.0 s"), "{}", i.summary);
        assert!(i.summary.contains("5, of which 3 distinct (40.0% could be reused)"), "{}", i.summary);
        let p = i.preview.unwrap();
        // Three arrivals make one bin over the whole trace: 3 requests / 2 s.
        assert_eq!(p.series[0].y, [1.5]);
    }

    #[test]
    fn agentic_traces_are_recognised_and_their_graph_summarised() {
        let text = "{\"request_id\": \"a\", \"session_id\": \"main\", \"timestamp\": 0, \"output_length\": 10, \"hash_ids\": [1]}\n\
                    {\"request_id\": \"b\", \"session_id\": \"sub\", \"wait_for\": [\"a\"], \"delay\": 100, \"output_length\": 10, \"hash_ids\": [1, 2]}\n\
                    {\"request_id\": \"c\", \"session_id\": \"main\", \"wait_for\": [\"a\", \"b\"], \"tool_wait_ms\": 300, \"output_length\": 10, \"hash_ids\": [1, 3]}\n";
        let i = inspect("agent.jsonl", text.as_bytes().to_vec(), None, 0).unwrap();
        assert_eq!(i.kind, Kind::AgenticTrace);
        assert!(
            i.summary.contains("1 roots start at their timestamps, 2 requests wait for others (1 for several: joins), 2 trajectories, longest chain 3 requests; mean delay + tool wait after dependencies 200 ms"),
            "{}",
            i.summary
        );
    }

    #[test]
    fn weka_conversations_are_recognised_in_a_json_file() {
        let text = r#"{"id": "c1", "block_size": 64, "requests": [
            {"t": 0, "in": 100, "out": 5, "hash_ids": [0, 1], "api_time": 1},
            {"t": 3, "in": 200, "out": 5, "hash_ids": [0, 1, 2, 3]}]}"#;
        let i = inspect("conv.json", text.as_bytes().to_vec(), None, 0).unwrap();
        assert_eq!(i.kind, Kind::WekaTrace);
        assert!(i.summary.starts_with("conv.json: Weka coding-agent trace, 2 requests"), "{}", i.summary);
        assert!(i.summary.contains("prompt blocks (64 tokens each)"), "{}", i.summary);
        assert!(i.summary.contains("mean delay + tool wait after dependencies 2000 ms"), "{}", i.summary);
        // Other JSON is still refused with what servesim reads.
        let e = inspect("x.json", b"{\"a\": 1}".to_vec(), None, 0).unwrap_err();
        assert!(e.contains("unsupported file type") && e.contains(".json Weka traces"), "{e}");
    }

    #[test]
    fn kernel_tables_preview_measured_points_only() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/perf/h200_sxm/vllm/0.24.0/gemm.parquet");
        let bytes = std::fs::read(path).unwrap();
        let i = inspect("gemm.parquet", bytes.clone(), None, 0).unwrap();
        assert_eq!(i.kind, Kind::ServesimTable);
        assert!(!i.slices.is_empty());
        let t = read_table("gemm.parquet", bytes).unwrap();
        let (_, g) = t.slices().next().unwrap();
        let p = i.preview.unwrap();
        let h = p.heatmap.unwrap();
        // Every heatmap cell is a measured point of the slice (or empty), none interpolated.
        let k = p
            .title
            .rsplit_once("k = ")
            .map(|(_, k)| k.trim_end_matches(')').parse::<u64>().unwrap())
            .unwrap();
        let mut filled = 0;
        for (r, row) in h.z.iter().enumerate() {
            for (c, v) in row.iter().enumerate() {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let coords = [h.x[c] as u64, h.y[r] as u64, k];
                assert_eq!(*v, g.exact(&coords));
                filled += usize::from(v.is_some());
            }
        }
        assert!(filled > 10, "{filled}");
        assert!(!p.series.is_empty() && p.series.len() <= MAX_CURVES);
    }

    /// An AIConfigurator-style GEMM table: two kernel lanes, the second denser.
    fn aic_gemm() -> Vec<u8> {
        use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
        use std::sync::Arc;
        let mut rows: Vec<(&str, &str, i64, i64, f64)> = Vec::new();
        for (i, m) in [1i64, 8, 64, 512].iter().enumerate() {
            for n in [1024i64, 4096] {
                #[allow(clippy::cast_precision_loss)]
                let lat = 0.01 * (1.0 + i as f64) * (n as f64 / 1024.0);
                rows.push(("fp8", "cublas", *m, n, lat));
                if *m < 64 {
                    rows.push(("fp8", "other", *m, n, lat * 2.0));
                }
            }
        }
        let cols: Vec<(&str, ArrayRef)> = vec![
            ("gemm_dtype", Arc::new(StringArray::from(rows.iter().map(|r| r.0).collect::<Vec<_>>()))),
            ("kernel_source", Arc::new(StringArray::from(rows.iter().map(|r| r.1).collect::<Vec<_>>()))),
            ("m", Arc::new(Int64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>()))),
            ("n", Arc::new(Int64Array::from(rows.iter().map(|r| r.3).collect::<Vec<_>>()))),
            ("k", Arc::new(Int64Array::from(vec![2048i64; rows.len()]))),
            ("latency", Arc::new(Float64Array::from(rows.iter().map(|r| r.4).collect::<Vec<_>>()))),
        ];
        let batch = RecordBatch::try_from_iter(cols).unwrap();
        let mut out = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        out
    }

    #[test]
    fn aiconfigurator_tables_are_converted_and_drawn() {
        let i = inspect("systems/data/h200_sxm/vllm/0.24.0/gemm_perf.parquet", aic_gemm(), None, 0).unwrap();
        assert_eq!(i.kind, Kind::AicTable);
        assert!(i.summary.contains("as servesim 'gemm' rows: 8 kept, 4 dropped"), "{}", i.summary);
        assert_eq!(i.slices, ["fp8"]);
        let p = i.preview.unwrap();
        let h = p.heatmap.unwrap();
        // The kept lane's latency at m = 64, n = 4096: 0.01 × 3 × 4.
        let (r, c) =
            (h.y.iter().position(|&y| y == 4096.0).unwrap(), h.x.iter().position(|&x| x == 64.0).unwrap());
        assert!((h.z[r][c].unwrap() - 0.12).abs() < 1e-12);
        // Under another name it is only listed (no family to convert to).
        let other = inspect("mystery.parquet", aic_gemm(), None, 0).unwrap();
        assert_eq!(other.kind, Kind::AicTable);
        assert!(other.preview.is_none() && other.slices.is_empty());
    }

    #[test]
    fn calibration_files_are_summarised_by_family() {
        let head = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n";
        let text = format!(
            "{head}a,x,vllm,0.12.0,m/a,h200_sxm,fp8,agg,1000,100,fp8,fp8,8,2,1,1,1,1,,,,,,,,,,,,,,,356.9,54.9\n\
             b,x,vllm,0.12.0,m/a,h200_sxm,fp8,agg,4000,500,fp8,fp8,32,2,1,1,1,1,,,,,,,,,,,,,,,812.5,20.25\n\
             c,x,trtllm,1.1,m/b,gb200,fp4,disagg,8192,1024,nvfp4,nvfp4,,,,,,,1,1,1,1,4,1,4,90,4,8,1,1,1,8,494.5,14.2\n"
        );
        let i = inspect("cal.csv", text.into_bytes(), None, 0).unwrap();
        assert_eq!(i.kind, Kind::Calibration);
        let s = &i.summary;
        assert!(s.contains("3 rows: 2 aggregated, 1 disaggregated"), "{s}");
        assert!(s.contains("engines: trtllm 1, vllm 2; 2 models on 2 systems"), "{s}");
        assert!(s.contains("prompt tokens 1000–8192, output tokens 100–1024, clients 8–360"), "{s}");
        assert!(s.contains("TTFT 356.9–812.5 ms, TPOT 14.20–54.90 ms"), "{s}");
        assert!(s.lines().any(|l| l.contains("m/a") && l.ends_with("2  8–32")), "{s}");
        let e = inspect(
            "cal.csv",
            format!("{head}a,x,vllm,0.12.0,m/a,h200_sxm,fp8,agg,lots,100,,,8,1,1,1,1,1,,,,,,,,,,,,,,,1,1\n")
                .into_bytes(),
            None,
            0,
        )
        .unwrap_err();
        assert!(e.starts_with("cal.csv:2:") && e.contains("'isl'"), "{e}");
    }

    #[test]
    fn request_logs_are_summarised_as_validate_compares_them() {
        let log = "{\"request_id\":\"a\",\"input_toks\":10,\"output_toks\":5,\"queued_ts\":1.0,\"first_token_ts\":1.25,\"last_token_ts\":1.65}\n\
                   {\"request_id\":\"b\",\"input_toks\":30,\"output_toks\":1,\"queued_ts\":2.0,\"first_token_ts\":2.5,\"last_token_ts\":2.5}\n";
        let i = inspect("log.jsonl", log.as_bytes().to_vec(), None, 0).unwrap();
        assert_eq!(i.kind, Kind::RequestLog);
        let s = &i.summary;
        assert!(s.contains("2 requests; input tokens mean 20 max 30; output tokens mean 3 max 5"), "{s}");
        assert!(s.contains("TTFT ms: mean 375.0, p50 500.0, p90 500.0, max 500.0"), "{s}");
        assert!(
            s.contains("TPOT ms: mean 100.00, p50 100.00, p90 100.00, max 100.00 (1 of the 2 requests have"),
            "{s}"
        );
        let e = inspect("log.jsonl", b"{\"queued_ts\": 1}\n".to_vec(), None, 0).unwrap_err();
        assert!(e.starts_with("log.jsonl:1:"), "{e}");
    }

    #[test]
    fn bad_files_are_named() {
        let e = inspect("x.txt", Vec::new(), None, 0).unwrap_err();
        assert!(e.contains("x.txt") && e.contains("unsupported"), "{e}");
        let e = inspect("x.parquet", b"PAR1 not really".to_vec(), None, 0).unwrap_err();
        assert!(e.contains("x.parquet"), "{e}");
        let e = inspect("t.jsonl", b"{\"timestamp\": 0}\n".to_vec(), None, 0).unwrap_err();
        assert!(e.contains("t.jsonl:1"), "{e}");
    }
}
