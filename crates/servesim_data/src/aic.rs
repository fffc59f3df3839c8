//! Conversion of AIConfigurator 0.12 perf-database tables (AICDB §3.3) into servesim rows.
//!
//! Each AIConfigurator file can hold several *lanes* (kernel implementations, its
//! `kernel_source` column) for the same op. An engine runs one of them; servesim keeps, per
//! slice key, the lane with the most measured rows — the one collected as the engine's
//! default path — and records which lane it kept. All-reduce lanes are kept per launch mode
//! (`graph`: captured in a CUDA graph; `eager`). Rows outside what the family means (beam
//! search, non-unit query length in decode attention) are dropped.

use std::collections::{BTreeMap, BTreeSet};

use servesim_perf::tables::{Family, Row};

use crate::perf::{Column, Columns, PerfFileError};

/// Where a family lives in AIConfigurator's `systems/data/<system>/` tree.
#[must_use]
pub fn source_path(family: Family) -> (&'static str, &'static str) {
    match family {
        Family::Gemm => ("gemm", "gemm_perf.parquet"),
        Family::ContextAttention => ("attention", "context_attention_perf.parquet"),
        Family::GenerationAttention => ("attention", "generation_attention_perf.parquet"),
        Family::AllReduce => ("comm", "custom_allreduce_perf.parquet"),
        Family::Nccl => ("comm", "nccl_perf.parquet"),
        Family::Moe => ("moe", "moe_perf.parquet"),
        Family::ContextMla => ("mla", "context_mla_perf.parquet"),
        Family::GenerationMla => ("mla", "generation_mla_perf.parquet"),
    }
}

/// Source columns of each family's keys and axes, in [`Family::keys`] / [`Family::axes`] order.
fn columns(family: Family) -> (&'static [&'static str], &'static [&'static str]) {
    match family {
        Family::Gemm => (&["gemm_dtype"], &["m", "n", "k"]),
        Family::ContextAttention => (
            &["kv_cache_dtype", "attn_dtype", "head_dim", "window_size"],
            &["batch_size", "isl", "num_heads", "num_key_value_heads"],
        ),
        Family::GenerationAttention => (
            &["kv_cache_dtype", "attn_dtype", "head_dim", "window_size"],
            &["batch_size", "step", "num_heads", "num_key_value_heads"],
        ),
        // The second key, `mode`, is derived from the lane (see `convert`).
        Family::AllReduce => (&["allreduce_dtype", "kernel_source"], &["num_gpus", "message_size"]),
        Family::Nccl => (&["op_name", "nccl_dtype"], &["num_gpus", "message_size"]),
        Family::Moe => (
            &[
                "moe_dtype",
                "distribution",
                "hidden_size",
                "inter_size",
                "topk",
                "num_experts",
                "moe_tp_size",
                "moe_ep_size",
            ],
            &["num_tokens"],
        ),
        Family::ContextMla => (&["kv_cache_dtype", "mla_dtype"], &["batch_size", "isl", "num_heads"]),
        Family::GenerationMla => (&["kv_cache_dtype", "mla_dtype"], &["batch_size", "step", "num_heads"]),
    }
}

/// Which rows to keep; empty sets keep everything.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Attention head dimensions to keep.
    pub head_dims: BTreeSet<u64>,
    /// Attention windows to keep (0 = full attention).
    pub windows: BTreeSet<u64>,
    /// Largest KV-head count per GPU to keep.
    pub max_kv_heads: Option<u64>,
    /// MoE shapes of the models the import is for.
    pub moe_shapes: BTreeSet<(u64, u64, u64, u64)>,
    /// MoE routing distributions to keep (empty keeps all).
    pub moe_distributions: BTreeSet<String>,
}

/// Rows converted from one AIConfigurator file.
#[derive(Clone, Debug, Default)]
pub struct Imported {
    /// The rows, in the family's key/axis order.
    pub rows: Vec<Row>,
    /// Kept lane (`kernel_source`) per slice key, `key/key/...` → lane.
    pub lanes: BTreeMap<String, String>,
    /// Rows read from the file.
    pub source_rows: usize,
    /// Rows dropped (other lanes, filters, out-of-family rows).
    pub dropped_rows: usize,
}

fn text(file: &str, c: &Column, i: usize, name: &str) -> Result<String, PerfFileError> {
    c.text(i).ok_or_else(|| PerfFileError {
        file: file.into(),
        message: format!("row {}: '{name}' is empty", i + 1),
    })
}

fn positive(file: &str, c: &Column, i: usize, name: &str) -> Result<u64, PerfFileError> {
    match c.int(i) {
        #[allow(clippy::cast_sign_loss)]
        Some(v) if v > 0 => Ok(v as u64),
        _ => Err(PerfFileError {
            file: file.into(),
            message: format!("row {}: '{name}' must be a positive integer", i + 1),
        }),
    }
}

/// Converts one AIConfigurator table into servesim rows for `family`.
///
/// # Errors
/// When a needed column is missing or a value is malformed (naming the row and column).
pub fn convert(
    file: &str,
    family: Family,
    cols: &Columns,
    filter: &Filter,
) -> Result<Imported, PerfFileError> {
    let (key_cols, axis_cols) = columns(family);
    let keys: Vec<&Column> = key_cols.iter().map(|k| cols.get(file, k)).collect::<Result<_, _>>()?;
    let axes: Vec<&Column> = axis_cols.iter().map(|k| cols.get(file, k)).collect::<Result<_, _>>()?;
    let lat = cols.get(file, "latency")?;
    let lane_col = cols.columns.get("kernel_source");
    let beam = cols.columns.get("beam_width");
    let isl = cols.columns.get("isl");
    // (key, lane) → rows.
    let mut by_lane: BTreeMap<(Vec<String>, String), Vec<Row>> = BTreeMap::new();
    let mut dropped = 0;
    for i in 0..cols.rows {
        if beam.and_then(|b| b.int(i)).is_some_and(|b| b != 1) {
            dropped += 1;
            continue;
        }
        if matches!(family, Family::GenerationAttention | Family::GenerationMla)
            && isl.and_then(|c| c.int(i)).is_some_and(|v| v != 1)
        {
            dropped += 1;
            continue;
        }
        let mut k = Vec::with_capacity(keys.len());
        for (c, name) in keys.iter().zip(key_cols) {
            k.push(text(file, c, i, name)?);
        }
        if family == Family::AllReduce {
            // Engines time all-reduces captured in CUDA graphs and launched eagerly apart;
            // a lane that does not say is the engine's only (graph-capable) one.
            k[1] = if k[1].to_ascii_lowercase().contains("eager") { "eager".into() } else { "graph".into() };
        }
        if matches!(family, Family::ContextAttention | Family::GenerationAttention) {
            let num = |j: usize| k[j].parse::<u64>().unwrap_or(0);
            let kv = axes[3].int(i).unwrap_or(0);
            #[allow(clippy::cast_sign_loss)]
            let keep = (filter.head_dims.is_empty() || filter.head_dims.contains(&num(2)))
                && (filter.windows.is_empty() || filter.windows.contains(&num(3)))
                && filter.max_kv_heads.is_none_or(|m| kv as u64 <= m);
            if !keep {
                dropped += 1;
                continue;
            }
        }
        if family == Family::Moe {
            let num = |j: usize| k[j].parse::<u64>().unwrap_or(0);
            let shape = (num(2), num(3), num(4), num(5));
            let keep_shape = filter.moe_shapes.is_empty() || filter.moe_shapes.contains(&shape);
            let keep_dist = filter.moe_distributions.is_empty() || filter.moe_distributions.contains(&k[1]);
            if !(keep_shape && keep_dist) {
                dropped += 1;
                continue;
            }
        }
        let mut a = Vec::with_capacity(axes.len());
        for (c, name) in axes.iter().zip(axis_cols) {
            a.push(positive(file, c, i, name)?);
        }
        let l = lat.float(i).filter(|l| l.is_finite() && *l > 0.0).ok_or_else(|| PerfFileError {
            file: file.into(),
            message: format!("row {}: 'latency' must be a positive number", i + 1),
        })?;
        let lane = lane_col.and_then(|c| c.text(i)).unwrap_or_default();
        by_lane.entry((k, lane)).or_default().push((Vec::new(), a, l));
    }
    // Densest lane per key; ties go to the lane name that sorts first (deterministic).
    let mut best: BTreeMap<Vec<String>, (String, usize)> = BTreeMap::new();
    for ((k, lane), rows) in &by_lane {
        let e = best.entry(k.clone()).or_insert_with(|| (lane.clone(), 0));
        if rows.len() > e.1 {
            *e = (lane.clone(), rows.len());
        }
    }
    let mut out = Imported { source_rows: cols.rows, ..Imported::default() };
    for ((k, lane), rows) in by_lane {
        if best.get(&k).is_some_and(|(l, _)| *l == lane) {
            out.lanes.insert(k.join("/"), lane);
            out.rows.extend(rows.into_iter().map(|(_, a, l)| (k.clone(), a, l)));
        } else {
            dropped += rows.len();
        }
    }
    out.dropped_rows = dropped;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(rows: &[(&str, &str, i64, f64)]) -> Columns {
        let mut c = Columns { rows: rows.len(), ..Columns::default() };
        c.columns.insert(
            "gemm_dtype".into(),
            Column::from_strings(rows.iter().map(|r| Some(r.0.to_string())).collect()),
        );
        c.columns.insert(
            "kernel_source".into(),
            Column::from_strings(rows.iter().map(|r| Some(r.1.to_string())).collect()),
        );
        c.columns.insert("m".into(), Column::Int(rows.iter().map(|r| Some(r.2)).collect()));
        c.columns.insert("n".into(), Column::Int(rows.iter().map(|_| Some(64)).collect()));
        c.columns.insert("k".into(), Column::Int(rows.iter().map(|_| Some(64)).collect()));
        c.columns.insert("latency".into(), Column::Float(rows.iter().map(|r| Some(r.3)).collect()));
        c
    }

    #[test]
    fn keeps_the_densest_lane_per_key() {
        let c = cols(&[
            ("fp8", "a", 1, 0.1),
            ("fp8", "b", 1, 0.2),
            ("fp8", "b", 2, 0.3),
            ("bfloat16", "a", 1, 0.4),
        ]);
        let out = convert("g.parquet", Family::Gemm, &c, &Filter::default()).unwrap();
        assert_eq!(out.lanes.get("fp8").map(String::as_str), Some("b"));
        assert_eq!(out.lanes.get("bfloat16").map(String::as_str), Some("a"));
        assert_eq!(out.rows.len(), 3);
        assert_eq!(out.dropped_rows, 1);
    }

    #[test]
    fn missing_columns_and_bad_values_are_named() {
        let mut c = cols(&[("fp8", "a", 1, 0.1)]);
        c.columns.remove("k");
        let e = convert("g.parquet", Family::Gemm, &c, &Filter::default()).unwrap_err();
        assert!(e.message.contains("missing column 'k'"), "{e}");
        let c = cols(&[("fp8", "a", 0, 0.1)]);
        let e = convert("g.parquet", Family::Gemm, &c, &Filter::default()).unwrap_err();
        assert!(e.message.contains("row 1: 'm'"), "{e}");
    }
}
