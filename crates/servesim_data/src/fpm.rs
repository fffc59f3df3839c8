//! AISimulate / AIConfigurator FPM tables: `fpm_forward_perf.parquet` and its same-stem
//! `.metadata.json` sidecar (schema `aic_fpm_forward_perf`, coordinates
//! `iteration_totals_balanced_v1`).
//!
//! Reading checks the sidecar against the Parquet file (row count, sha256), every row's
//! columns and values, and groups rows into cells by their identity. Writing produces the same
//! pair, so servesim can export op-level predictions as FPM grids.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::perf::{read_columns, Column, Columns, PerfFileError};
use servesim_perf::fpm::{DecodePoint, FpmCell, PrefillPoint};

/// `schema_name` of the sidecar.
pub const SCHEMA_NAME: &str = "aic_fpm_forward_perf";
/// Newest sidecar `schema_version` this build knows (older ones are read too).
pub const SCHEMA_VERSION: u64 = 6;
/// The only coordinate system defined so far: per attention-DP rank iteration totals.
pub const COORDINATES: &str = "iteration_totals_balanced_v1";

/// The identity columns that select a cell besides `model_path`, in AISimulate's order.
pub const CELL_COLUMNS: [&str; 15] = [
    "gemm_quant_mode",
    "moe_quant_mode",
    "fmha_quant_mode",
    "comm_quant_mode",
    "kv_cache_dtype",
    "tp",
    "pp",
    "dp",
    "moe_tp",
    "moe_ep",
    "cp",
    "moe_backend",
    "attention_backend",
    "enable_wideep",
    "enable_eplb",
];

/// Columns read as text besides the identity.
const TEXT_COLUMNS: [&str; 6] =
    ["cell_id", "model_path", "system", "backend", "backend_version", "workload_kind"];

fn err(file: &str, message: impl Into<String>) -> PerfFileError {
    PerfFileError { file: file.to_string(), message: message.into() }
}

/// The sidecar's fields servesim uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sidecar {
    /// `schema_version`.
    pub schema_version: u64,
    /// `measurement_policy` (e.g. `dynamo_native_single_sample_v1`).
    pub measurement_policy: String,
    /// `parquet_sha256`, when given.
    pub parquet_sha256: Option<String>,
    /// `row_count`, when given.
    pub row_count: Option<u64>,
    /// `system`.
    pub system: String,
    /// `backend`.
    pub backend: String,
    /// `backend_version`.
    pub backend_version: String,
}

/// Parses and checks a sidecar.
///
/// # Errors
/// When it is not JSON, or names another schema or coordinate system.
pub fn read_sidecar(file: &str, text: &str) -> Result<Sidecar, PerfFileError> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| err(file, format!("not valid JSON at line {}, column {}: {e}", e.line(), e.column())))?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    match s("schema_name").as_deref() {
        Some(SCHEMA_NAME) => {}
        Some(other) => {
            return Err(err(file, format!("'schema_name' is '{other}', expected '{SCHEMA_NAME}'")))
        }
        None => return Err(err(file, format!("missing 'schema_name' (expected '{SCHEMA_NAME}')"))),
    }
    let schema_version = v
        .get("schema_version")
        .and_then(Value::as_u64)
        .ok_or_else(|| err(file, "missing or non-integer 'schema_version'"))?;
    if schema_version == 0 || schema_version > SCHEMA_VERSION {
        return Err(err(
            file,
            format!("'schema_version' {schema_version} is not supported (1..={SCHEMA_VERSION})"),
        ));
    }
    match s("coordinate_system").as_deref() {
        Some(COORDINATES) | None => {}
        Some(other) => {
            return Err(err(
                file,
                format!("'coordinate_system' is '{other}'; servesim reads '{COORDINATES}'"),
            ));
        }
    }
    Ok(Sidecar {
        schema_version,
        measurement_policy: s("measurement_policy").unwrap_or_default(),
        parquet_sha256: s("parquet_sha256"),
        row_count: v.get("row_count").and_then(Value::as_u64),
        system: s("system").unwrap_or_default(),
        backend: s("backend").unwrap_or_default(),
        backend_version: s("backend_version").unwrap_or_default(),
    })
}

/// Lowercase hex sha256 of `bytes`.
#[must_use]
pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(64);
    for b in Sha256::digest(bytes) {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// One FPM cell: identity and measurements.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// `cell_id` (first row's).
    pub cell_id: String,
    /// `model_path`.
    pub model_path: String,
    /// `system`.
    pub system: String,
    /// `backend`.
    pub backend: String,
    /// `backend_version`.
    pub backend_version: String,
    /// The identity columns, in [`CELL_COLUMNS`] order, as text (`True`/`False` for booleans).
    pub identity: Vec<String>,
    /// The measurements.
    pub data: FpmCell,
}

impl Cell {
    /// Identity column `name` (one of [`CELL_COLUMNS`]).
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&str> {
        CELL_COLUMNS.iter().position(|c| *c == name).and_then(|i| self.identity.get(i)).map(String::as_str)
    }

    /// A one-line description: id, model and the parallel shape.
    #[must_use]
    pub fn describe(&self) -> String {
        let g = |k| self.get(k).unwrap_or("?");
        format!(
            "{} ({}, {} {} on {}, tp {} pp {} dp {} moe_tp {} moe_ep {}, gemm {}, kv {}; {} prefill + {} decode rows)",
            self.cell_id,
            self.model_path,
            self.backend,
            self.backend_version,
            self.system,
            g("tp"),
            g("pp"),
            g("dp"),
            g("moe_tp"),
            g("moe_ep"),
            g("gemm_quant_mode"),
            g("kv_cache_dtype"),
            self.data.prefill.len(),
            self.data.decode.len()
        )
    }
}

/// Normalises identity text: booleans as Python prints them, missing as empty.
fn identity_text(col: &Column, i: usize) -> String {
    match col.text(i) {
        Some(t) if t == "true" => "True".into(),
        Some(t) if t == "false" => "False".into(),
        Some(t) => t,
        None => String::new(),
    }
}

fn text_col<'a>(cols: &'a Columns, file: &str, name: &str) -> Result<&'a Column, PerfFileError> {
    cols.get(file, name)
}

/// Reads an FPM Parquet file into cells, checking it against its sidecar.
///
/// # Errors
/// A missing column, a value of the wrong type or range (naming the row), a row count or
/// sha256 that differs from the sidecar's, or a file that is not Parquet.
pub fn read_fpm(file: &str, bytes: Vec<u8>, sidecar: &Sidecar) -> Result<Vec<Cell>, PerfFileError> {
    if let Some(want) = &sidecar.parquet_sha256 {
        let have = sha256_hex(&bytes);
        if !want.eq_ignore_ascii_case(&have) {
            return Err(err(
                file,
                format!("sha256 is {have} but the sidecar says {want}: the pair does not belong together"),
            ));
        }
    }
    let cols = read_columns(file, bytes)?;
    if let Some(n) = sidecar.row_count {
        if n != cols.rows as u64 {
            return Err(err(file, format!("has {} rows but the sidecar says {n}", cols.rows)));
        }
    }
    for name in TEXT_COLUMNS.iter().chain(CELL_COLUMNS.iter()) {
        text_col(&cols, file, name)?;
    }
    let num = |name: &str| cols.get(file, name);
    let (batch, prefill, kv, latency) =
        (num("batch_size")?, num("total_prefill_tokens")?, num("total_kv_read_tokens")?, num("latency_ms")?);
    let kind = cols.get(file, "workload_kind")?;
    let mut cells: BTreeMap<(String, Vec<String>), Cell> = BTreeMap::new();
    for i in 0..cols.rows {
        let row = i + 1;
        let int = |c: &Column, name: &str, min: i64| -> Result<u64, PerfFileError> {
            c.int(i)
                .filter(|v| *v >= min)
                .and_then(|v| u64::try_from(v).ok())
                .ok_or_else(|| err(file, format!("row {row}: '{name}' must be an integer >= {min}")))
        };
        let b = u32::try_from(int(batch, "batch_size", 1)?)
            .map_err(|_| err(file, format!("row {row}: 'batch_size' is too large")))?;
        let t = int(prefill, "total_prefill_tokens", 0)?;
        let k = int(kv, "total_kv_read_tokens", 0)?;
        let ms = latency
            .float(i)
            .filter(|v| v.is_finite() && *v > 0.0)
            .ok_or_else(|| err(file, format!("row {row}: 'latency_ms' must be a number > 0")))?;
        let text = |name: &str| cols.columns.get(name).and_then(|c| c.text(i)).unwrap_or_default();
        let model_path = text("model_path");
        let identity: Vec<String> = CELL_COLUMNS
            .iter()
            .map(|c| cols.columns.get(*c).map(|col| identity_text(col, i)).unwrap_or_default())
            .collect();
        let cell = cells.entry((model_path.clone(), identity.clone())).or_insert_with(|| Cell {
            cell_id: text("cell_id"),
            model_path,
            system: text("system"),
            backend: text("backend"),
            backend_version: text("backend_version"),
            identity,
            data: FpmCell::default(),
        });
        match kind.text(i).as_deref() {
            Some("prefill") => {
                if t == 0 {
                    return Err(err(
                        file,
                        format!("row {row}: a prefill row needs 'total_prefill_tokens' > 0"),
                    ));
                }
                cell.data.prefill.push(PrefillPoint {
                    batch: b,
                    prefill_tokens: t,
                    kv_tokens: k,
                    latency_ms: ms,
                });
            }
            Some("decode") => {
                if t != 0 {
                    return Err(err(
                        file,
                        format!("row {row}: a decode row has 'total_prefill_tokens' {t}, not 0"),
                    ));
                }
                cell.data.decode.push(DecodePoint { batch: b, kv_tokens: k, latency_ms: ms });
            }
            other => {
                return Err(err(
                    file,
                    format!("row {row}: 'workload_kind' is {other:?}, expected \"prefill\" or \"decode\""),
                ));
            }
        }
    }
    let mut out: Vec<Cell> = cells.into_values().collect();
    for c in &mut out {
        c.data.label = format!("{} in {file}", c.cell_id);
    }
    Ok(out)
}

/// One output row: cell, workload kind, batch, new tokens, KV tokens, latency.
struct OutRow<'a>(&'a Cell, &'static str, u64, u64, u64, f64);

/// Writes cells as an FPM Parquet file plus its sidecar JSON (with the file's sha256).
///
/// # Errors
/// When Parquet encoding fails or a cell's identity does not have [`CELL_COLUMNS`] entries.
pub fn write_fpm(
    file: &str,
    cells: &[Cell],
    measurement_policy: &str,
) -> Result<(Vec<u8>, String), PerfFileError> {
    let mut rows: Vec<OutRow<'_>> = Vec::new();
    for c in cells {
        if c.identity.len() != CELL_COLUMNS.len() {
            return Err(err(file, format!("cell {} has {} identity values", c.cell_id, c.identity.len())));
        }
        for p in &c.data.prefill {
            rows.push(OutRow(c, "prefill", u64::from(p.batch), p.prefill_tokens, p.kv_tokens, p.latency_ms));
        }
        for d in &c.data.decode {
            rows.push(OutRow(c, "decode", u64::from(d.batch), 0, d.kv_tokens, d.latency_ms));
        }
    }
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    let mut text = |name: &str, f: &dyn Fn(&OutRow<'_>) -> String| {
        fields.push(Field::new(name, DataType::Utf8, false));
        arrays.push(Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<String>>())));
    };
    text("cell_id", &|r| r.0.cell_id.clone());
    text("model_path", &|r| r.0.model_path.clone());
    text("system", &|r| r.0.system.clone());
    text("backend", &|r| r.0.backend.clone());
    text("backend_version", &|r| r.0.backend_version.clone());
    text("workload_kind", &|r| r.1.to_string());
    text("partition_policy", &|_| "balanced_v1".to_string());
    for (j, name) in CELL_COLUMNS.iter().enumerate() {
        match *name {
            "tp" | "pp" | "dp" | "moe_tp" | "moe_ep" | "cp" => {
                fields.push(Field::new(*name, DataType::Int64, false));
                let v: Vec<i64> = rows.iter().map(|r| r.0.identity[j].parse().unwrap_or(1)).collect();
                arrays.push(Arc::new(Int64Array::from(v)));
            }
            "enable_wideep" | "enable_eplb" => {
                fields.push(Field::new(*name, DataType::Boolean, false));
                let v: Vec<bool> = rows.iter().map(|r| r.0.identity[j] == "True").collect();
                arrays.push(Arc::new(BooleanArray::from(v)));
            }
            _ => {
                fields.push(Field::new(*name, DataType::Utf8, false));
                let v: Vec<&str> = rows.iter().map(|r| r.0.identity[j].as_str()).collect();
                arrays.push(Arc::new(StringArray::from(v)));
            }
        }
    }
    #[allow(clippy::cast_possible_wrap)]
    let int = |f: &dyn Fn(&OutRow<'_>) -> u64| -> ArrayRef {
        Arc::new(Int64Array::from(rows.iter().map(|r| f(r) as i64).collect::<Vec<i64>>()))
    };
    fields.push(Field::new("batch_size", DataType::Int64, false));
    arrays.push(int(&|r| r.2));
    fields.push(Field::new("total_prefill_tokens", DataType::Int64, false));
    arrays.push(int(&|r| r.3));
    fields.push(Field::new("total_kv_read_tokens", DataType::Int64, false));
    arrays.push(int(&|r| r.4));
    fields.push(Field::new("latency_ms", DataType::Float64, false));
    arrays.push(Arc::new(Float64Array::from(rows.iter().map(|r| r.5).collect::<Vec<f64>>())));
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), arrays).map_err(|e| err(file, e.to_string()))?;
    let level = ZstdLevel::try_new(9).map_err(|e| err(file, e.to_string()))?;
    let props = WriterProperties::builder().set_compression(Compression::ZSTD(level)).build();
    let mut bytes = Vec::new();
    let mut w =
        ArrowWriter::try_new(&mut bytes, schema, Some(props)).map_err(|e| err(file, e.to_string()))?;
    w.write(&batch).map_err(|e| err(file, e.to_string()))?;
    w.close().map_err(|e| err(file, e.to_string()))?;
    let first = cells.first();
    let sidecar = serde_json::json!({
        "schema_name": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "coordinate_system": COORDINATES,
        "measurement_policy": measurement_policy,
        "parquet_sha256": sha256_hex(&bytes),
        "row_count": rows.len(),
        "system": first.map_or("", |c| c.system.as_str()),
        "backend": first.map_or("", |c| c.backend.as_str()),
        "backend_version": first.map_or("", |c| c.backend_version.as_str()),
    });
    let text = serde_json::to_string_pretty(&sidecar).map_err(|e| err(file, e.to_string()))? + "\n";
    Ok((bytes, text))
}

/// The sidecar path of an FPM Parquet path: same stem, `.metadata.json`.
#[must_use]
pub fn sidecar_path(parquet: &str) -> String {
    let stem = parquet.strip_suffix(".parquet").unwrap_or(parquet);
    format!("{stem}.metadata.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(id: &str, tp: &str) -> Cell {
        let mut identity: Vec<String> = [
            "bfloat16", "bfloat16", "bfloat16", "half", "bfloat16", tp, "1", "1", "1", "1", "1", "auto",
            "auto", "False", "False",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        identity[5] = tp.to_string();
        Cell {
            cell_id: id.into(),
            model_path: "Qwen/Qwen3-8B".into(),
            system: "h200_sxm".into(),
            backend: "vllm".into(),
            backend_version: "0.24.0".into(),
            identity,
            data: FpmCell {
                label: String::new(),
                prefill: vec![
                    PrefillPoint { batch: 1, prefill_tokens: 128, kv_tokens: 0, latency_ms: 8.5 },
                    PrefillPoint { batch: 1, prefill_tokens: 1024, kv_tokens: 0, latency_ms: 30.25 },
                ],
                decode: vec![
                    DecodePoint { batch: 1, kv_tokens: 128, latency_ms: 6.0 },
                    DecodePoint { batch: 8, kv_tokens: 8192, latency_ms: 7.5 },
                ],
            },
        }
    }

    #[test]
    fn written_files_read_back_cell_by_cell() {
        let cells = vec![cell("a", "1"), cell("b", "2")];
        let (bytes, side) = write_fpm("f.parquet", &cells, "test").unwrap();
        let sc = read_sidecar("f.metadata.json", &side).unwrap();
        assert_eq!(sc.row_count, Some(8));
        let back = read_fpm("f.parquet", bytes, &sc).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].cell_id, "a");
        assert_eq!(back[1].get("tp"), Some("2"));
        assert_eq!(back[1].get("enable_eplb"), Some("False"));
        assert_eq!(back[0].data.prefill, cells[0].data.prefill);
        assert_eq!(back[0].data.decode, cells[0].data.decode);
        assert_eq!(sidecar_path("x/fpm_forward_perf.parquet"), "x/fpm_forward_perf.metadata.json");
    }

    #[test]
    fn mismatched_or_corrupt_pairs_are_clear_errors() {
        let (bytes, side) = write_fpm("f.parquet", &[cell("a", "1")], "test").unwrap();
        let sc = read_sidecar("s.json", &side).unwrap();
        // Another file's sidecar.
        let mut other = bytes.clone();
        let n = other.len();
        other[n / 2] ^= 0xff;
        let e = read_fpm("f.parquet", other, &sc).unwrap_err();
        assert!(e.message.contains("sha256"), "{e}");
        // Truncated, without a sha to catch it first.
        let loose = Sidecar { parquet_sha256: None, ..sc.clone() };
        let e = read_fpm("cut.parquet", bytes[..n / 2].to_vec(), &loose).unwrap_err();
        assert!(e.to_string().starts_with("cut.parquet: "), "{e}");
        // Row count.
        let wrong = Sidecar { row_count: Some(99), parquet_sha256: None, ..sc };
        assert!(read_fpm("f.parquet", bytes, &wrong).unwrap_err().message.contains("sidecar says 99"));
        // A bad value names its row.
        let mut bad = cell("a", "1");
        bad.data.decode[1].latency_ms = -1.0;
        let (bytes, side) = write_fpm("f.parquet", &[bad], "test").unwrap();
        let sc = read_sidecar("s.json", &side).unwrap();
        let e = read_fpm("f.parquet", bytes, &sc).unwrap_err();
        assert!(e.message.contains("row 4: 'latency_ms'"), "{e}");
        // Sidecars.
        assert!(read_sidecar("s.json", "{").unwrap_err().message.contains("line 1"));
        assert!(read_sidecar("s.json", r#"{"schema_name":"x","schema_version":6}"#)
            .unwrap_err()
            .message
            .contains("'x'"));
        assert!(read_sidecar("s.json", r#"{"schema_name":"aic_fpm_forward_perf","schema_version":9}"#)
            .unwrap_err()
            .message
            .contains("not supported"));
        assert!(read_sidecar(
            "s.json",
            r#"{"schema_name":"aic_fpm_forward_perf","schema_version":6,"coordinate_system":"per_request"}"#
        )
        .unwrap_err()
        .message
        .contains("per_request"));
    }

    #[test]
    fn a_parquet_file_without_fpm_columns_names_the_missing_one() {
        let t = crate::perf::write_table(
            "g.parquet",
            servesim_perf::tables::Family::Gemm,
            &[(vec!["bfloat16".into()], vec![1, 2, 3], 0.5)],
            &[],
        )
        .unwrap();
        let sc = Sidecar { schema_version: 6, ..Sidecar::default() };
        let e = read_fpm("g.parquet", t, &sc).unwrap_err();
        assert!(e.message.contains("missing column 'cell_id'"), "{e}");
    }
}
