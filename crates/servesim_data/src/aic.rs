//! Conversion of AIConfigurator 0.12 perf-database tables (AICDB §3.3) into servesim rows.
//!
//! Each AIConfigurator file can hold several *lanes* (kernel implementations, its
//! `kernel_source` column) for the same op. An engine runs one of them; servesim keeps, per
//! slice key, the lane with the most measured rows — the one collected as the engine's
//! default path — and records which lane it kept. All-reduce lanes are kept per launch mode
//! (`graph`: captured in a CUDA graph; `eager`), and MoE's TRTLLM-gen lane
//! (`moe_torch_flow_min_latency`) as slices of its own (`nvfp4:min_latency`). Rows outside what the family means (beam
//! search, non-unit query length in decode attention) are dropped.

use std::collections::{BTreeMap, BTreeSet};

use servesim_perf::oplevel::MoeKernel;
use servesim_perf::tables::{Family, Row};

use crate::perf::{Column, Columns, PerfFileError};

/// The `kernel_source` of AIConfigurator's TRTLLM-gen MoE measurements
/// (`moe_torch_flow_min_latency`), kept apart from the default lane.
pub const MIN_LATENCY_LANE: &str = "min_latency";

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
        // SGLang's wide-EP experts; AIConfigurator 0.12 measured them for SGLang 0.5.10 (and
        // 0.5.6.post2 on Hopper), which the import's backward fill finds for later releases.
        Family::DeepEpContextMoe => ("moe", "wideep_context_moe_perf.parquet"),
        Family::DeepEpGenerationMoe => ("moe", "wideep_generation_moe_perf.parquet"),
        // SGLang's DeepEP dispatch and combine, measured for SGLang 0.5.12 (0.5.6.post2 on
        // Hopper too) within one node; one source row holds both phases.
        Family::DeepEpNormal => ("comm", "wideep_deepep_normal_perf.parquet"),
        Family::DeepEpLowLatency => ("comm", "wideep_deepep_ll_perf.parquet"),
        // Qwen3.5's Gated DeltaNet kernels, measured for vLLM 0.24.0, SGLang 0.5.14 and
        // TensorRT-LLM 1.3.0rc20; one file holds the prompt and decode kernels.
        Family::Gdn => ("linear_attention", "gdn_perf.parquet"),
    }
}

/// The [`Family::GDN_KERNELS`] name of an AIConfigurator GDN row: its `phase` and the
/// kernel's role read from `kernel_source` (each engine names its lane its own way:
/// `chunk_gated_delta_rule_flashinfer`, `fused_recurrent_gated_delta_rule_packed_decode`, …).
/// `None` for a row of neither phase or an unknown kernel.
#[must_use]
pub fn gdn_kernel(phase: &str, kernel_source: &str) -> Option<&'static str> {
    let conv = kernel_source.contains("conv1d");
    match phase {
        "context" if conv => Some("context_conv"),
        "context" if kernel_source.contains("delta_rule") => Some("context_scan"),
        "generation" if conv => Some("generation_conv"),
        "generation" if kernel_source.contains("delta_rule") => Some("generation_recurrence"),
        _ => None,
    }
}

/// An AIConfigurator `(phase, kernel_source)` for a [`Family::GDN_KERNELS`] name: the
/// inverse of [`gdn_kernel`], for [`write_aic`].
fn gdn_source(kernel: &str) -> Option<(&'static str, &'static str)> {
    match kernel {
        "context_conv" => Some(("context", "causal_conv1d_fn")),
        "context_scan" => Some(("context", "chunk_gated_delta_rule")),
        "generation_conv" => Some(("generation", "causal_conv1d_update")),
        "generation_recurrence" => Some(("generation", "fused_recurrent_gated_delta_rule")),
        _ => None,
    }
}

/// Where a file of AIConfigurator's `systems/data` tree goes in servesim's data directory:
/// `…/<system>/<dir>/<backend>/<version>/<file>` → `perf/<system>/<backend>/<version>/<family>.parquet`
/// (NCCL, which has no engine: `…/<system>/comm/nccl/<version>/nccl_perf.parquet` →
/// `perf/<system>/nccl.parquet`). `None` for a path of any other shape.
#[must_use]
pub fn servesim_path(aic_path: &str) -> Option<(Family, String)> {
    let parts: Vec<&str> = aic_path.split(['/', '\\']).filter(|p| !p.is_empty()).collect();
    let [.., system, dir, backend, version, file] = parts.as_slice() else { return None };
    let family = Family::ALL.into_iter().find(|f| source_path(*f) == (*dir, *file))?;
    Some(if family == Family::Nccl {
        (*backend == "nccl").then(|| (family, format!("perf/{system}/nccl.parquet")))?
    } else {
        (family, format!("perf/{system}/{backend}/{version}/{}.parquet", family.name()))
    })
}

/// Converts one AIConfigurator table into a servesim table file (every row kept: no catalog
/// filter), as `servesim data import-aic` would write it for this one file.
///
/// # Errors
/// The file is not a readable AIConfigurator table of `family`.
pub fn to_servesim_table(name: &str, family: Family, bytes: Vec<u8>) -> Result<Vec<u8>, PerfFileError> {
    let cols = crate::perf::read_columns(name, bytes)?;
    let imported = convert(name, family, &cols, &Filter::default())?;
    let meta = vec![("servesim.source".to_string(), format!("AIConfigurator table {name}"))];
    crate::perf::write_table(name, family, &imported.rows, &meta)
}

/// Writes servesim rows back in AIConfigurator's column layout, one kernel lane — the inverse
/// of [`convert`], for test fixtures and for trying a perf database edited by hand (MoE rows of
/// the `…:min_latency` slices go to AIConfigurator's TRTLLM-gen lane; GDN rows to their phase
/// and a kernel name of that role). Not for all-reduce,
/// whose second key AIConfigurator keeps in the lane column, nor DeepEP's two-phase rows.
///
/// # Errors
/// For all-reduce and DeepEP tables, rows of the wrong shape, or an encoding failure.
pub fn write_aic(file: &str, family: Family, rows: &[Row], lane: &str) -> Result<Vec<u8>, PerfFileError> {
    use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
    use std::sync::Arc;
    let err = |m: String| PerfFileError { file: file.into(), message: m };
    if family == Family::AllReduce {
        return Err(err("all-reduce tables keep their launch mode in the lane column; not written".into()));
    }
    if matches!(family, Family::DeepEpNormal | Family::DeepEpLowLatency) {
        return Err(err("DeepEP tables hold both phases in one row; not written".into()));
    }
    let (key_cols, axis_cols) = columns(family);
    if let Some((i, _)) =
        rows.iter().enumerate().find(|(_, r)| r.0.len() != key_cols.len() || r.1.len() != axis_cols.len())
    {
        return Err(err(format!("row {} does not match the {} shape", i + 1, family.name())));
    }
    // A MoE row of the TRTLLM-gen slices goes back to its own lane (see `convert`).
    let min_latency = |r: &Row| min_latency_dtype(family, r).is_some();
    let mut cols: Vec<(&str, ArrayRef)> = Vec::new();
    // A GDN row's kernel goes back to AIConfigurator's phase and kernel name.
    let gdn: Vec<(&str, &str)> = if family == Family::Gdn {
        rows.iter()
            .enumerate()
            .map(|(i, r)| {
                gdn_source(&r.0[0])
                    .ok_or_else(|| err(format!("row {}: unknown GDN kernel '{}'", i + 1, r.0[0])))
            })
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    if family == Family::Gdn {
        cols.push(("phase", Arc::new(StringArray::from(gdn.iter().map(|g| g.0).collect::<Vec<_>>()))));
    }
    for (j, name) in key_cols.iter().enumerate() {
        if family == Family::Gdn && j == 0 {
            continue;
        }
        let v: Vec<&str> = rows
            .iter()
            .map(|r| min_latency_dtype(family, r).filter(|_| j == 0).unwrap_or(r.0[j].as_str()))
            .collect();
        cols.push((name, Arc::new(StringArray::from(v))));
    }
    for (j, name) in axis_cols.iter().enumerate() {
        #[allow(clippy::cast_possible_wrap)]
        let v: Vec<i64> = rows.iter().map(|r| r.1[j] as i64).collect();
        cols.push((name, Arc::new(Int64Array::from(v))));
    }
    let lanes: Vec<&str> = if family == Family::Gdn {
        gdn.iter().map(|g| g.1).collect()
    } else {
        rows.iter().map(|r| if min_latency(r) { "moe_torch_flow_min_latency" } else { lane }).collect()
    };
    cols.push(("kernel_source", Arc::new(StringArray::from(lanes))));
    cols.push(("latency", Arc::new(Float64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>()))));
    let batch = RecordBatch::try_from_iter(cols).map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(parquet::basic::ZstdLevel::default()))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), Some(props))
        .map_err(|e| err(e.to_string()))?;
    w.write(&batch).map_err(|e| err(e.to_string()))?;
    w.close().map_err(|e| err(e.to_string()))?;
    Ok(out)
}

/// The default-lane dtype of a MoE row of the TRTLLM-gen slices (`nvfp4:min_latency` →
/// `nvfp4`), `None` for any other row.
fn min_latency_dtype(family: Family, r: &Row) -> Option<&str> {
    (family == Family::Moe).then(|| r.0[0].strip_suffix(MoeKernel::MIN_LATENCY_SUFFIX)).flatten()
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
        Family::Moe | Family::DeepEpContextMoe | Family::DeepEpGenerationMoe => (
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
        // The first key, `phase`, comes from which latency column a row is read from (see
        // `convert_deepep`); the normal kernels' SM count is the dispatch's (the combine's
        // is the same in every row AIConfigurator collected, and is checked).
        Family::DeepEpNormal => {
            (&["phase", "dispatch_sms", "hidden_size", "num_topk", "num_experts"], &["num_token"])
        }
        Family::DeepEpLowLatency => (&["phase", "hidden_size", "num_topk", "num_experts"], &["num_token"]),
        // The first key, the kernel, is read from `phase` and `kernel_source` (see `gdn_kernel`).
        Family::Gdn => (
            &["kernel_source", "d_model", "num_k_heads", "head_k_dim", "num_v_heads", "head_v_dim", "d_conv"],
            &["batch_size", "seq_len"],
        ),
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
    /// Gated DeltaNet shapes to keep: hidden size and key and value heads per GPU.
    pub gdn_shapes: BTreeSet<(u64, u64, u64)>,
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
    if matches!(family, Family::DeepEpNormal | Family::DeepEpLowLatency) {
        return convert_deepep(file, family, cols, filter);
    }
    let (key_cols, axis_cols) = columns(family);
    let keys: Vec<&Column> = key_cols.iter().map(|k| cols.get(file, k)).collect::<Result<_, _>>()?;
    let axes: Vec<&Column> = axis_cols.iter().map(|k| cols.get(file, k)).collect::<Result<_, _>>()?;
    let lat = cols.get(file, "latency")?;
    let lane_col = cols.columns.get("kernel_source");
    let beam = cols.columns.get("beam_width");
    let isl = cols.columns.get("isl");
    let phase = if family == Family::Gdn { Some(cols.get(file, "phase")?) } else { None };
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
        if let Some(phase) = phase {
            let Some(kernel) = gdn_kernel(&text(file, phase, i, "phase")?, &k[0]) else {
                dropped += 1;
                continue;
            };
            k[0] = kernel.to_string();
            let num = |j: usize| k[j].parse::<u64>().unwrap_or(0);
            if !(filter.gdn_shapes.is_empty() || filter.gdn_shapes.contains(&(num(1), num(2), num(4)))) {
                dropped += 1;
                continue;
            }
        }
        if family == Family::Moe
            && lane_col.and_then(|c| c.text(i)).is_some_and(|l| l.contains(MIN_LATENCY_LANE))
        {
            // TensorRT-LLM's TRTLLM-gen experts are another backend, not a duplicate of the
            // default lane: kept as their own slices (`MoeKernel::MinLatency`).
            k[0].push_str(MoeKernel::MIN_LATENCY_SUFFIX);
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
        if matches!(family, Family::Moe | Family::DeepEpContextMoe | Family::DeepEpGenerationMoe) {
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

/// DeepEP's dispatch and combine tables: each source row gives a `dispatch` and a `combine`
/// row, in ms (the source is in µs: the normal kernels' transmit plus notify time, the
/// low-latency ones' average). Rows of MoE shapes (hidden size, top-k, experts) no catalog
/// model has are dropped with the MoE filter; a row measured on more than one node, or with
/// the combine given other SMs than the dispatch, is not what the family means and is dropped.
fn convert_deepep(
    file: &str,
    family: Family,
    cols: &Columns,
    filter: &Filter,
) -> Result<Imported, PerfFileError> {
    let normal = family == Family::DeepEpNormal;
    let (key_cols, axis_cols) = columns(family);
    let keys: Vec<&Column> = key_cols[1..].iter().map(|k| cols.get(file, k)).collect::<Result<_, _>>()?;
    let tokens = cols.get(file, axis_cols[0])?;
    // The µs columns that add up to one phase's time.
    let parts: &[&str] = if normal { &["transmit_us", "notify_us"] } else { &["avg_t_us"] };
    let latency = |phase: &str| -> Result<Vec<&Column>, PerfFileError> {
        parts.iter().map(|p| cols.get(file, &format!("{phase}_{p}"))).collect()
    };
    let phases = [("dispatch", latency("dispatch")?), ("combine", latency("combine")?)];
    let nodes = cols.columns.get("node_num");
    let combine_sms = if normal { Some(cols.get(file, "combine_sms")?) } else { None };
    let lane = cols.columns.get("kernel_source");
    let mut out = Imported { source_rows: cols.rows, ..Imported::default() };
    for i in 0..cols.rows {
        let mut k = Vec::with_capacity(key_cols.len());
        for (c, name) in keys.iter().zip(&key_cols[1..]) {
            k.push(text(file, c, i, name)?);
        }
        let other_sms = combine_sms.is_some_and(|c| c.text(i).as_deref() != Some(k[0].as_str()));
        let shape = |j: usize| k[k.len() - 3 + j].parse::<u64>().unwrap_or(0);
        let keep_shape = filter.moe_shapes.is_empty()
            || filter.moe_shapes.iter().any(|m| (m.0, m.2, m.3) == (shape(0), shape(1), shape(2)));
        if nodes.and_then(|c| c.int(i)).is_some_and(|n| n != 1) || other_sms || !keep_shape {
            out.dropped_rows += 1;
            continue;
        }
        let t = positive(file, tokens, i, axis_cols[0])?;
        for (phase, parts) in &phases {
            let mut us = 0.0;
            for c in parts {
                us += c.float(i).filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(|| PerfFileError {
                    file: file.into(),
                    message: format!("row {}: '{phase}' latency must be a non-negative number", i + 1),
                })?;
            }
            if us <= 0.0 {
                return Err(PerfFileError {
                    file: file.into(),
                    message: format!("row {}: '{phase}' latency must be positive", i + 1),
                });
            }
            let mut key = vec![(*phase).to_string()];
            key.extend(k.iter().cloned());
            if let Some(l) = lane.and_then(|c| c.text(i)) {
                out.lanes.insert(key.join("/"), l);
            }
            out.rows.push((key, vec![t], us / 1e3));
        }
    }
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

    /// TensorRT-LLM's TRTLLM-gen MoE lane is another backend, not a sparser copy of the
    /// default one: it survives as `<dtype>:min_latency` slices, and writes back to its lane.
    #[test]
    fn the_min_latency_moe_lane_is_kept_beside_the_default_one() {
        let lanes = [
            ("moe_torch_flow_cutlass", 1, 0.3),
            ("moe_torch_flow_cutlass", 16, 0.5),
            ("moe_torch_flow_cutlass", 256, 0.9),
            ("moe_torch_flow_min_latency", 1, 0.1),
            ("moe_torch_flow_min_latency", 16, 0.2),
        ];
        let mut c = Columns { rows: lanes.len(), ..Columns::default() };
        let text = |v: &str| Column::from_strings(lanes.iter().map(|_| Some(v.to_string())).collect());
        for (name, v) in [
            ("moe_dtype", "nvfp4"),
            ("distribution", "power_law_1.01"),
            ("hidden_size", "7168"),
            ("inter_size", "2048"),
            ("topk", "8"),
            ("num_experts", "256"),
            ("moe_tp_size", "1"),
            ("moe_ep_size", "4"),
        ] {
            c.columns.insert(name.into(), text(v));
        }
        c.columns.insert(
            "kernel_source".into(),
            Column::from_strings(lanes.iter().map(|l| Some(l.0.to_string())).collect()),
        );
        c.columns.insert("num_tokens".into(), Column::Int(lanes.iter().map(|l| Some(l.1)).collect()));
        c.columns.insert("latency".into(), Column::Float(lanes.iter().map(|l| Some(l.2)).collect()));
        let out = convert("moe_perf.parquet", Family::Moe, &c, &Filter::default()).unwrap();
        assert_eq!(out.rows.len(), 5);
        assert_eq!(out.dropped_rows, 0);
        let key = "nvfp4:min_latency/power_law_1.01/7168/2048/8/256/1/4";
        assert_eq!(out.lanes.get(key).map(String::as_str), Some("moe_torch_flow_min_latency"));
        assert_eq!(
            out.lanes.get("nvfp4/power_law_1.01/7168/2048/8/256/1/4").map(String::as_str),
            Some("moe_torch_flow_cutlass")
        );
        let bytes = write_aic("moe_perf.parquet", Family::Moe, &out.rows, "moe_torch_flow_cutlass").unwrap();
        let back = crate::perf::read_table(
            "moe",
            to_servesim_table("moe_perf.parquet", Family::Moe, bytes).unwrap(),
        )
        .unwrap();
        let slice: Vec<&str> = key.split('/').collect();
        assert_eq!(back.slice(&slice).unwrap().exact(&[16]), Some(0.2));
        assert_eq!(
            back.slice(&["nvfp4", "power_law_1.01", "7168", "2048", "8", "256", "1", "4"])
                .unwrap()
                .exact(&[16]),
            Some(0.5)
        );
    }

    #[test]
    fn written_tables_convert_back_to_the_same_rows() {
        let rows: Vec<Row> = [(1u64, 0.5), (8, 0.6), (64, 0.9)]
            .iter()
            .map(|(m, l)| (vec!["fp8".to_string()], vec![*m, 512, 1024], *l))
            .collect();
        let bytes = write_aic("g.parquet", Family::Gemm, &rows, "cublas").unwrap();
        let back = to_servesim_table("g.parquet", Family::Gemm, bytes).unwrap();
        let t = crate::perf::read_table("g", back).unwrap();
        assert_eq!(t.slice(&["fp8"]).unwrap().exact(&[8, 512, 1024]), Some(0.6));
        assert!(write_aic("a.parquet", Family::AllReduce, &[], "x").is_err());
    }

    /// A wide-EP expert table converts like the fused-experts one: its MoE shape filter
    /// applies, and its rows come back as written.
    #[test]
    fn deepep_expert_tables_convert_with_the_moe_filter() {
        let key = |ep: &str| -> Vec<String> {
            ["fp8_block", "power_law_1.01", "7168", "2048", "8", "256", "1", ep].map(String::from).to_vec()
        };
        let rows: Vec<Row> =
            vec![(key("4"), vec![4096], 0.886), (key("16"), vec![16384], 0.699), (key("4"), vec![8192], 1.1)];
        let bytes = write_aic("w.parquet", Family::DeepEpContextMoe, &rows, "deepepmoe").unwrap();
        let cols = crate::perf::read_columns("w.parquet", bytes).unwrap();
        let all = convert("w.parquet", Family::DeepEpContextMoe, &cols, &Filter::default()).unwrap();
        assert_eq!(all.rows.len(), 3);
        assert_eq!(
            all.lanes.get("fp8_block/power_law_1.01/7168/2048/8/256/1/4").map(String::as_str),
            Some("deepepmoe")
        );
        let mut other_model = Filter::default();
        other_model.moe_shapes.insert((2880, 2880, 4, 128));
        let none = convert("w.parquet", Family::DeepEpContextMoe, &cols, &other_model).unwrap();
        assert!(none.rows.is_empty() && none.dropped_rows == 3);
    }

    /// GDN rows take their kernel from the phase and the lane's role, whatever the engine
    /// calls it; rows of an unknown kernel or of a shape the filter drops are dropped; the
    /// rows written back in AIConfigurator's layout convert to the same table.
    #[test]
    fn gdn_rows_key_their_kernel_by_phase_and_role() {
        let ints = |v: &[i64]| Column::Int(v.iter().map(|x| Some(*x)).collect());
        let text = |v: &[&str]| Column::from_strings(v.iter().map(|x| Some((*x).to_string())).collect());
        let mut c = Columns { rows: 5, ..Columns::default() };
        c.columns
            .insert("phase".into(), text(&["context", "context", "generation", "generation", "context"]));
        c.columns.insert(
            "kernel_source".into(),
            text(&[
                "causal_conv1d_fn",
                "chunk_gated_delta_rule_flashinfer",
                "fused_recurrent_gated_delta_rule_packed_decode",
                "causal_conv1d_update",
                "some_new_kernel",
            ]),
        );
        c.columns.insert("d_model".into(), ints(&[5120, 5120, 5120, 4096, 5120]));
        c.columns.insert("num_k_heads".into(), ints(&[16, 16, 16, 2, 16]));
        c.columns.insert("head_k_dim".into(), ints(&[128; 5]));
        c.columns.insert("num_v_heads".into(), ints(&[48, 48, 48, 8, 48]));
        c.columns.insert("head_v_dim".into(), ints(&[128; 5]));
        c.columns.insert("d_conv".into(), ints(&[4; 5]));
        c.columns.insert("batch_size".into(), ints(&[2, 2, 64, 64, 2]));
        c.columns.insert("seq_len".into(), ints(&[1024, 1024, 1, 1, 1024]));
        c.columns.insert(
            "latency".into(),
            Column::Float(vec![Some(0.039), Some(0.059), Some(0.10), Some(0.004), Some(1.0)]),
        );
        let all = convert("gdn.parquet", Family::Gdn, &c, &Filter::default()).unwrap();
        let kernels: Vec<&str> = all.rows.iter().map(|r| r.0[0].as_str()).collect();
        assert_eq!(kernels, ["context_conv", "context_scan", "generation_conv", "generation_recurrence"]);
        assert_eq!(all.dropped_rows, 1);
        let mut only_27b = Filter::default();
        only_27b.gdn_shapes.insert((5120, 16, 48));
        let some = convert("gdn.parquet", Family::Gdn, &c, &only_27b).unwrap();
        assert_eq!((some.rows.len(), some.dropped_rows), (3, 2));

        let bytes = write_aic("gdn.parquet", Family::Gdn, &all.rows, "").unwrap();
        let back =
            crate::perf::read_table("gdn", to_servesim_table("gdn.parquet", Family::Gdn, bytes).unwrap())
                .unwrap();
        let key = ["generation_recurrence", "5120", "16", "128", "48", "128", "4"];
        assert_eq!(back.slice(&key).unwrap().exact(&[64, 1]), Some(0.10));
        assert_eq!(back.rows, 4);
        // The phase column is needed.
        let mut no_phase = c;
        no_phase.columns.remove("phase");
        let e = convert("gdn.parquet", Family::Gdn, &no_phase, &Filter::default()).unwrap_err();
        assert!(e.message.contains("missing column 'phase'"), "{e}");
    }

    #[test]
    fn tree_paths_map_to_servesim_paths() {
        assert_eq!(
            servesim_path("aic/systems/data/h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"),
            Some((Family::Gemm, "perf/h200_sxm/vllm/0.24.0/gemm.parquet".into()))
        );
        assert_eq!(
            servesim_path("h100_sxm/attention/sglang/0.5.14/generation_attention_perf.parquet"),
            Some((
                Family::GenerationAttention,
                "perf/h100_sxm/sglang/0.5.14/generation_attention.parquet".into()
            ))
        );
        assert_eq!(
            servesim_path("data/b200_sxm/comm/nccl/2.27/nccl_perf.parquet"),
            Some((Family::Nccl, "perf/b200_sxm/nccl.parquet".into()))
        );
        // SGLang's wide-EP experts, one family per dispatch mode.
        assert_eq!(
            servesim_path("gb200/moe/sglang/0.5.10/wideep_context_moe_perf.parquet"),
            Some((Family::DeepEpContextMoe, "perf/gb200/sglang/0.5.10/deepep_context_moe.parquet".into()))
        );
        assert_eq!(
            servesim_path("gb200/moe/sglang/0.5.10/wideep_generation_moe_perf.parquet"),
            Some((
                Family::DeepEpGenerationMoe,
                "perf/gb200/sglang/0.5.10/deepep_generation_moe.parquet".into()
            ))
        );
        // DeepEP's dispatch and combine, one family per mode.
        assert_eq!(
            servesim_path("gb200/comm/sglang/0.5.12/wideep_deepep_normal_perf.parquet"),
            Some((Family::DeepEpNormal, "perf/gb200/sglang/0.5.12/deepep_normal.parquet".into()))
        );
        assert_eq!(
            servesim_path("gb200/comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet"),
            Some((Family::DeepEpLowLatency, "perf/gb200/sglang/0.5.12/deepep_low_latency.parquet".into()))
        );
        assert_eq!(
            servesim_path("h200_sxm/linear_attention/vllm/0.24.0/gdn_perf.parquet"),
            Some((Family::Gdn, "perf/h200_sxm/vllm/0.24.0/gdn.parquet".into()))
        );
        assert_eq!(servesim_path("gemm_perf.parquet"), None);
        assert_eq!(servesim_path("a/b/gemm/vllm/0.24.0/other.parquet"), None);
        assert_eq!(servesim_path("a/h200/attention/vllm/0.24.0/gemm_perf.parquet"), None);
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

    /// A DeepEP row holds both phases: it becomes a dispatch and a combine row in ms (normal:
    /// transmit plus notify µs; low-latency: the average). Rows measured across nodes, with
    /// the combine on other SMs than the dispatch, or of a shape the MoE filter drops are
    /// dropped; a missing latency column is an error that names it.
    #[test]
    fn deepep_rows_split_into_dispatch_and_combine() {
        let ints = |v: &[i64]| Column::Int(v.iter().map(|x| Some(*x)).collect());
        let floats = |v: &[f64]| Column::Float(v.iter().map(|x| Some(*x)).collect());
        let mut c = Columns { rows: 4, ..Columns::default() };
        c.columns.insert("kernel_source".into(), Column::from_strings(vec![Some("deepep".into()); 4]));
        c.columns.insert("node_num".into(), ints(&[1, 1, 2, 1]));
        c.columns.insert("hidden_size".into(), ints(&[7168, 7168, 7168, 4096]));
        c.columns.insert("num_topk".into(), ints(&[8, 8, 8, 8]));
        c.columns.insert("num_experts".into(), ints(&[256, 256, 256, 128]));
        c.columns.insert("num_token".into(), ints(&[64, 128, 128, 64]));
        c.columns.insert("dispatch_sms".into(), ints(&[20, 20, 20, 20]));
        c.columns.insert("combine_sms".into(), ints(&[20, 24, 20, 20]));
        c.columns.insert("dispatch_transmit_us".into(), floats(&[40.0, 50.0, 60.0, 70.0]));
        c.columns.insert("dispatch_notify_us".into(), floats(&[2.0, 0.0, 0.0, 0.0]));
        c.columns.insert("combine_transmit_us".into(), floats(&[30.0, 35.0, 36.0, 37.0]));
        c.columns.insert("combine_notify_us".into(), floats(&[0.0, 0.0, 0.0, 0.0]));
        let out = convert("n.parquet", Family::DeepEpNormal, &c, &Filter::default()).unwrap();
        // Row 2 gives its combine other SMs, row 3 ran on two nodes.
        assert_eq!((out.rows.len(), out.dropped_rows, out.source_rows), (4, 2, 4));
        let key = |phase: &str, h: &str, e: &str| {
            [phase, "20", h, "8", e].iter().map(|s| (*s).to_string()).collect::<Vec<_>>()
        };
        assert_eq!(out.rows[0], (key("dispatch", "7168", "256"), vec![64], 0.042));
        assert_eq!(out.rows[1], (key("combine", "7168", "256"), vec![64], 0.030));
        assert_eq!(out.rows[3], (key("combine", "4096", "128"), vec![64], 0.037));
        assert_eq!(out.lanes.get("dispatch/20/7168/8/256").map(String::as_str), Some("deepep"));
        // The MoE filter keeps the catalog's shapes: here only 7,168 / top-8 / 256 experts.
        let filter = Filter { moe_shapes: [(7168, 2048, 8, 256)].into(), ..Filter::default() };
        let out = convert("n.parquet", Family::DeepEpNormal, &c, &filter).unwrap();
        assert_eq!((out.rows.len(), out.dropped_rows), (2, 3));
        // Low-latency rows: one average per phase, no SM count in the key.
        let mut l = c.clone();
        l.columns.insert("dispatch_avg_t_us".into(), floats(&[12.0, 13.0, 14.0, 15.0]));
        l.columns.insert("combine_avg_t_us".into(), floats(&[16.0, 17.0, 18.0, 19.0]));
        l.columns.remove("combine_sms");
        let out = convert("l.parquet", Family::DeepEpLowLatency, &l, &Filter::default()).unwrap();
        assert_eq!((out.rows.len(), out.dropped_rows), (6, 1));
        let k: Vec<String> = ["combine", "7168", "8", "256"].iter().map(|s| (*s).to_string()).collect();
        assert_eq!(out.rows[3], (k, vec![128], 0.017));
        l.columns.remove("combine_avg_t_us");
        let e = convert("l.parquet", Family::DeepEpLowLatency, &l, &Filter::default()).unwrap_err();
        assert!(e.to_string().contains("combine_avg_t_us") && e.to_string().contains("l.parquet"), "{e}");
        // Written back: not in AIConfigurator's one-latency layout.
        assert!(write_aic("l.parquet", Family::DeepEpLowLatency, &[], "deepep").is_err());
    }
}
