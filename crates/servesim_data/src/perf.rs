//! Kernel-latency tables in Parquet.
//!
//! **servesim tables** are what `data/perf` ships and what `servesim data import-aic` writes:
//! one file per op family, with key-value metadata `servesim.family` (a
//! [`Family`] name) and `servesim.schema_version` (`1`), one UTF-8 column per family key, one
//! integer column per family axis and `latency_ms` (float64). [`read_table`] checks all of it.
//!
//! **AIConfigurator tables** (`aiconfigurator_core/systems/data/...`, AICDB §3.3) are read by
//! [`read_columns`] for the importer: any column by name, whatever its physical type.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use servesim_perf::tables::{Family, Row, Table};

/// Metadata key naming the family of a servesim table.
pub const FAMILY_KEY: &str = "servesim.family";
/// Metadata key with the servesim table schema version.
pub const SCHEMA_KEY: &str = "servesim.schema_version";
/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: &str = "1";
/// zstd level for written tables: small files, decoding speed is unaffected.
const ZSTD_LEVEL: i32 = 19;

/// A Parquet file could not be read or written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct PerfFileError {
    /// File name as given.
    pub file: String,
    /// What is wrong (names the column or row where there is one).
    pub message: String,
}

impl fmt::Display for PerfFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.message)
    }
}

fn err(file: &str, message: impl Into<String>) -> PerfFileError {
    PerfFileError { file: file.to_string(), message: message.into() }
}

/// A column read out of a Parquet file, whatever its physical type.
#[derive(Clone, Debug, PartialEq)]
pub enum Column {
    /// Strings (UTF-8, large UTF-8 or dictionary-encoded), and booleans as `true`/`false`,
    /// held once each: kernel tables repeat a handful of dtypes and shapes over thousands of
    /// rows, and a string per row was most of the cost of reading them.
    Text {
        /// The distinct strings.
        values: Vec<String>,
        /// Each row's string (`None`: null).
        codes: Vec<Option<u32>>,
    },
    /// Integers of any width.
    Int(Vec<Option<i64>>),
    /// Floats of any width.
    Float(Vec<Option<f64>>),
}

impl Column {
    /// A text column from one string per row.
    #[must_use]
    pub fn from_strings(rows: Vec<Option<String>>) -> Column {
        let mut b = TextBuilder::default();
        for r in &rows {
            b.push(r.as_deref());
        }
        b.finish()
    }

    /// Row `i` as a string slice, when it is a text value.
    #[must_use]
    pub fn str_at(&self, i: usize) -> Option<&str> {
        match self {
            Column::Text { values, codes } => {
                codes.get(i).copied().flatten().map(|c| values[c as usize].as_str())
            }
            _ => None,
        }
    }

    /// True when row `i` reads as `text` (as [`Column::text`] would give it).
    #[must_use]
    pub fn text_is(&self, i: usize, text: &str) -> bool {
        match self {
            Column::Text { .. } => self.str_at(i) == Some(text),
            Column::Int(v) => v.get(i).copied().flatten().is_some_and(|x| text.parse() == Ok(x)),
            Column::Float(_) => self.text(i).as_deref() == Some(text),
        }
    }

    /// Number of rows.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Column::Text { codes, .. } => codes.len(),
            Column::Int(v) => v.len(),
            Column::Float(v) => v.len(),
        }
    }

    /// True when the column has no rows.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i` as text (numbers in their shortest decimal form).
    #[must_use]
    pub fn text(&self, i: usize) -> Option<String> {
        match self {
            Column::Text { .. } => self.str_at(i).map(str::to_string),
            Column::Int(v) => v.get(i).copied().flatten().map(|x| x.to_string()),
            Column::Float(v) => v.get(i).copied().flatten().map(|x| x.to_string()),
        }
    }

    /// Row `i` as an integer (floats only when integral).
    #[must_use]
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    pub fn int(&self, i: usize) -> Option<i64> {
        match self {
            Column::Int(v) => v.get(i).copied().flatten(),
            Column::Float(v) => {
                v.get(i).copied().flatten().filter(|x| x.fract() == 0.0 && x.abs() < 9e15).map(|x| x as i64)
            }
            Column::Text { .. } => self.str_at(i).and_then(|s| s.trim().parse().ok()),
        }
    }

    /// Row `i` as a float.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn float(&self, i: usize) -> Option<f64> {
        match self {
            Column::Float(v) => v.get(i).copied().flatten(),
            Column::Int(v) => v.get(i).copied().flatten().map(|x| x as f64),
            Column::Text { .. } => self.str_at(i).and_then(|s| s.trim().parse().ok()),
        }
    }
}

/// Builds a text column, storing each distinct string once.
#[derive(Default)]
struct TextBuilder {
    values: Vec<String>,
    index: std::collections::HashMap<String, u32>,
    codes: Vec<Option<u32>>,
}

impl TextBuilder {
    fn of(c: &mut Column) -> Option<TextBuilder> {
        match c {
            Column::Text { values, codes } => {
                let values = std::mem::take(values);
                let index = values.iter().enumerate().map(|(i, v)| (v.clone(), i as u32)).collect();
                Some(TextBuilder { values, index, codes: std::mem::take(codes) })
            }
            _ => None,
        }
    }

    fn code(&mut self, s: &str) -> u32 {
        if let Some(c) = self.index.get(s) {
            return *c;
        }
        // A column never has 4 billion distinct strings: its rows are counted in u32 too.
        #[allow(clippy::cast_possible_truncation)]
        let c = self.values.len() as u32;
        self.values.push(s.to_string());
        self.index.insert(s.to_string(), c);
        c
    }

    fn push(&mut self, s: Option<&str>) {
        let c = s.map(|s| self.code(s));
        self.codes.push(c);
    }

    fn finish(self) -> Column {
        Column::Text { values: self.values, codes: self.codes }
    }
}

/// Columns by name plus the file's key-value metadata.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Columns {
    /// Every column, by name.
    pub columns: BTreeMap<String, Column>,
    /// Key-value metadata of the file.
    pub metadata: BTreeMap<String, String>,
    /// Rows in the file.
    pub rows: usize,
}

impl Columns {
    /// The column `name`, or an error naming the file and the columns it does have.
    ///
    /// # Errors
    /// When the column is absent.
    pub fn get(&self, file: &str, name: &str) -> Result<&Column, PerfFileError> {
        self.columns.get(name).ok_or_else(|| {
            let have: Vec<&str> = self.columns.keys().map(String::as_str).collect();
            err(file, format!("missing column '{name}' (columns: {})", have.join(", ")))
        })
    }
}

fn append(dst: &mut Column, a: &ArrayRef, file: &str, name: &str) -> Result<(), PerfFileError> {
    macro_rules! ints {
        ($t:ty) => {{
            let Column::Int(v) = dst else { return Err(err(file, format!("column '{name}' changes type"))) };
            let arr = a.as_primitive::<$t>();
            #[allow(clippy::cast_possible_wrap)]
            v.extend((0..arr.len()).map(|i| arr.is_valid(i).then(|| arr.value(i) as i64)));
        }};
    }
    match a.data_type() {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Dictionary(_, _)
        | DataType::Boolean => {
            let Some(mut v) = TextBuilder::of(dst) else {
                return Err(err(file, format!("column '{name}' changes type")));
            };
            match a.data_type() {
                DataType::Utf8 => {
                    let s = a.as_string::<i32>();
                    (0..s.len()).for_each(|i| v.push(s.is_valid(i).then(|| s.value(i))));
                }
                DataType::LargeUtf8 => {
                    let s = a.as_string::<i64>();
                    (0..s.len()).for_each(|i| v.push(s.is_valid(i).then(|| s.value(i))));
                }
                DataType::Utf8View => {
                    let s = a.as_string_view();
                    (0..s.len()).for_each(|i| v.push(s.is_valid(i).then(|| s.value(i))));
                }
                DataType::Boolean => {
                    let b = a.as_boolean();
                    (0..b.len()).for_each(|i| {
                        v.push(b.is_valid(i).then(|| if b.value(i) { "true" } else { "false" }))
                    });
                }
                DataType::Dictionary(k, val)
                    if matches!(val.as_ref(), DataType::Utf8 | DataType::LargeUtf8) =>
                {
                    let keys: Vec<Option<usize>> = match k.as_ref() {
                        DataType::Int8 => dict_keys::<Int8Type>(a),
                        DataType::Int16 => dict_keys::<Int16Type>(a),
                        DataType::Int32 => dict_keys::<Int32Type>(a),
                        DataType::Int64 => dict_keys::<Int64Type>(a),
                        DataType::UInt32 => dict_keys::<UInt32Type>(a),
                        other => {
                            *dst = v.finish();
                            return Err(err(
                                file,
                                format!("column '{name}': unsupported dictionary key {other}"),
                            ));
                        }
                    };
                    let values = dict_values(a);
                    // The file's dictionary, translated to this column's codes once.
                    let codes: Vec<u32> = match values.data_type() {
                        DataType::Utf8 => {
                            let s = values.as_string::<i32>();
                            (0..s.len()).map(|i| v.code(s.value(i))).collect()
                        }
                        _ => {
                            let s = values.as_string::<i64>();
                            (0..s.len()).map(|i| v.code(s.value(i))).collect()
                        }
                    };
                    for k in keys {
                        v.codes.push(k.and_then(|k| codes.get(k).copied()));
                    }
                }
                other => {
                    *dst = v.finish();
                    return Err(err(file, format!("column '{name}': unsupported type {other}")));
                }
            }
            *dst = v.finish();
        }
        DataType::Int8 => ints!(Int8Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::Int64 => ints!(Int64Type),
        DataType::UInt32 => ints!(UInt32Type),
        DataType::UInt64 => ints!(UInt64Type),
        DataType::Float32 => {
            let Column::Float(v) = dst else {
                return Err(err(file, format!("column '{name}' changes type")));
            };
            let arr = a.as_primitive::<Float32Type>();
            v.extend((0..arr.len()).map(|i| arr.is_valid(i).then(|| f64::from(arr.value(i)))));
        }
        DataType::Float64 => {
            let Column::Float(v) = dst else {
                return Err(err(file, format!("column '{name}' changes type")));
            };
            let arr = a.as_primitive::<Float64Type>();
            v.extend((0..arr.len()).map(|i| arr.is_valid(i).then(|| arr.value(i))));
        }
        other => return Err(err(file, format!("column '{name}': unsupported type {other}"))),
    }
    Ok(())
}

fn dict_keys<K: arrow_array::types::ArrowDictionaryKeyType>(a: &ArrayRef) -> Vec<Option<usize>> {
    use arrow_buffer::ArrowNativeType as _;
    let d = a.as_dictionary::<K>();
    let keys = d.keys();
    (0..keys.len()).map(|i| keys.is_valid(i).then(|| keys.value(i).as_usize())).collect()
}

fn dict_values(a: &ArrayRef) -> ArrayRef {
    match a.data_type() {
        DataType::Dictionary(k, _) => match k.as_ref() {
            DataType::Int8 => a.as_dictionary::<Int8Type>().values().clone(),
            DataType::Int16 => a.as_dictionary::<Int16Type>().values().clone(),
            DataType::Int64 => a.as_dictionary::<Int64Type>().values().clone(),
            DataType::UInt32 => a.as_dictionary::<UInt32Type>().values().clone(),
            _ => a.as_dictionary::<Int32Type>().values().clone(),
        },
        _ => a.clone(),
    }
}

fn empty_column(t: &DataType) -> Option<Column> {
    match t {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Dictionary(_, _)
        | DataType::Boolean => Some(Column::Text { values: Vec::new(), codes: Vec::new() }),
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt32
        | DataType::UInt64 => Some(Column::Int(Vec::new())),
        DataType::Float32 | DataType::Float64 => Some(Column::Float(Vec::new())),
        _ => None,
    }
}

/// Reads every supported column of a Parquet file (columns of other types are skipped).
///
/// # Errors
/// A [`PerfFileError`] when the bytes are not a readable Parquet file.
pub fn read_columns(file: &str, bytes: Vec<u8>) -> Result<Columns, PerfFileError> {
    // The parquet crate still panics on some corrupt pages (e.g. a data page that names a
    // dictionary the chunk lacks: arrow-rs issues #7102, #9434). A file is user input, so a
    // panic there becomes this file's error. (On wasm a panic aborts; the page's worker
    // then reports the crash and is replaced.)
    match guard::quietly(|| decode_columns(file, bytes)) {
        Ok(result) => result,
        Err(reason) => {
            Err(err(file, format!("cannot decode (corrupt file?): the Parquet reader failed: {reason}")))
        }
    }
}

/// Runs a closure and turns its panic into an error message, without the panic's report on
/// standard error (the caller reports it as an error instead).
mod guard {
    use std::cell::Cell;
    use std::panic::{self, AssertUnwindSafe};
    use std::sync::Once;

    thread_local! {
        /// Set while this thread runs a guarded decode.
        static QUIET: Cell<bool> = const { Cell::new(false) };
    }

    pub(super) fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
        if cfg!(panic = "abort") {
            // Nothing can be caught (wasm): the panic's report is all the user will get.
            return Ok(f());
        }
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            // Every other panic is reported as before.
            let previous = panic::take_hook();
            panic::set_hook(Box::new(move |info| {
                if !QUIET.with(Cell::get) {
                    previous(info);
                }
            }));
        });
        let was = QUIET.with(|q| q.replace(true));
        let out = panic::catch_unwind(AssertUnwindSafe(f));
        QUIET.with(|q| q.set(was));
        out.map_err(|payload| {
            payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "an unexplained internal error".to_string())
        })
    }
}

fn decode_columns(file: &str, bytes: Vec<u8>) -> Result<Columns, PerfFileError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(bytes))
        .map_err(|e| err(file, format!("not a readable Parquet file: {e}")))?;
    let mut out = Columns::default();
    if let Some(kv) = builder.metadata().file_metadata().key_value_metadata() {
        for k in kv {
            out.metadata.insert(k.key.clone(), k.value.clone().unwrap_or_default());
        }
    }
    let schema = builder.schema().clone();
    let mut keep: Vec<(usize, String)> = Vec::new();
    for (i, f) in schema.fields().iter().enumerate() {
        if let Some(c) = empty_column(f.data_type()) {
            out.columns.insert(f.name().clone(), c);
            keep.push((i, f.name().clone()));
        }
    }
    let reader =
        builder.with_batch_size(65_536).build().map_err(|e| err(file, format!("cannot decode: {e}")))?;
    for batch in reader {
        let batch = batch.map_err(|e| err(file, format!("cannot decode (truncated or corrupt?): {e}")))?;
        out.rows += batch.num_rows();
        for (i, name) in &keep {
            if let Some(dst) = out.columns.get_mut(name) {
                append(dst, batch.column(*i), file, name)?;
            }
        }
    }
    Ok(out)
}

/// Reads a servesim table file.
///
/// # Errors
/// When the file is not a servesim table, has another schema version, misses a column, or
/// holds a value the table cannot take (the message names the column and row).
pub fn read_table(file: &str, bytes: Vec<u8>) -> Result<Table, PerfFileError> {
    let cols = read_columns(file, bytes)?;
    let Some(family) = cols.metadata.get(FAMILY_KEY) else {
        return Err(err(file, format!("not a servesim table (no '{FAMILY_KEY}' metadata); AIConfigurator files are imported with `servesim data import-aic`")));
    };
    let Some(fam) = Family::from_name(family) else {
        return Err(err(file, format!("unknown table family '{family}'")));
    };
    match cols.metadata.get(SCHEMA_KEY).map(String::as_str) {
        Some(SCHEMA_VERSION) => {}
        other => {
            return Err(err(
                file,
                format!("schema version {other:?} is not supported (this build reads {SCHEMA_VERSION})"),
            ))
        }
    }
    let keys: Vec<&Column> = fam.keys().iter().map(|k| cols.get(file, k)).collect::<Result<_, _>>()?;
    let axes: Vec<&Column> = fam.axes().iter().map(|k| cols.get(file, k)).collect::<Result<_, _>>()?;
    let lat = cols.get(file, "latency_ms")?;
    // Rows grouped by slice key with no allocation per row: the files are written sorted by
    // key, so a row's key is nearly always the previous row's.
    let mut groups: Vec<(Vec<String>, Vec<u64>, Vec<f64>)> = Vec::new();
    let mut index: BTreeMap<Vec<String>, usize> = BTreeMap::new();
    let mut current: Option<usize> = None;
    for i in 0..cols.rows {
        let same = current.filter(|&g| keys.iter().zip(&groups[g].0).all(|(c, k)| c.text_is(i, k)));
        let g = match same {
            Some(g) => g,
            None => {
                let mut k = Vec::with_capacity(keys.len());
                for (c, name) in keys.iter().zip(fam.keys()) {
                    k.push(c.text(i).ok_or_else(|| err(file, format!("row {}: '{name}' is empty", i + 1)))?);
                }
                let g = match index.get(&k) {
                    Some(g) => *g,
                    None => {
                        index.insert(k.clone(), groups.len());
                        groups.push((k, Vec::new(), Vec::new()));
                        groups.len() - 1
                    }
                };
                current = Some(g);
                g
            }
        };
        let (_, coords, lats) = &mut groups[g];
        for (c, name) in axes.iter().zip(fam.axes()) {
            let v = c
                .int(i)
                .filter(|v| *v > 0)
                .ok_or_else(|| err(file, format!("row {}: '{name}' must be a positive integer", i + 1)))?;
            #[allow(clippy::cast_sign_loss)]
            coords.push(v as u64);
        }
        let l = lat
            .float(i)
            .filter(|l| l.is_finite() && *l > 0.0)
            .ok_or_else(|| err(file, format!("row {}: 'latency_ms' must be a positive number", i + 1)))?;
        lats.push(l);
    }
    Table::from_groups(fam, groups, cols.rows).map_err(|e| err(file, e.message))
}

/// Writes rows as a servesim table (zstd), with extra key-value metadata (provenance).
///
/// # Errors
/// When the rows do not match the family's shape or Parquet encoding fails.
pub fn write_table(
    file: &str,
    family: Family,
    rows: &[Row],
    metadata: &[(String, String)],
) -> Result<Vec<u8>, PerfFileError> {
    let (nk, na) = (family.keys().len(), family.axes().len());
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for (j, name) in family.keys().iter().enumerate() {
        fields.push(Field::new(*name, DataType::Utf8, false));
        let v: Vec<&str> = rows.iter().map(|r| r.0.get(j).map_or("", String::as_str)).collect();
        arrays.push(Arc::new(StringArray::from(v)));
    }
    for (j, name) in family.axes().iter().enumerate() {
        fields.push(Field::new(*name, DataType::Int64, false));
        #[allow(clippy::cast_possible_wrap)]
        let v: Vec<i64> = rows.iter().map(|r| r.1.get(j).map_or(0, |x| *x as i64)).collect();
        arrays.push(Arc::new(Int64Array::from(v)));
    }
    fields.push(Field::new("latency_ms", DataType::Float64, false));
    arrays.push(Arc::new(Float64Array::from(rows.iter().map(|r| r.2).collect::<Vec<f64>>())));
    if let Some((i, _)) = rows.iter().enumerate().find(|(_, r)| r.0.len() != nk || r.1.len() != na) {
        return Err(err(file, format!("row {} does not match the {} table shape", i + 1, family.name())));
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), arrays).map_err(|e| err(file, e.to_string()))?;
    let mut kv = vec![
        KeyValue::new(FAMILY_KEY.to_string(), family.name().to_string()),
        KeyValue::new(SCHEMA_KEY.to_string(), SCHEMA_VERSION.to_string()),
    ];
    kv.extend(metadata.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())));
    let level = ZstdLevel::try_new(ZSTD_LEVEL).map_err(|e| err(file, e.to_string()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_key_value_metadata(Some(kv))
        .build();
    let mut out = Vec::new();
    let mut w = ArrowWriter::try_new(&mut out, schema, Some(props)).map_err(|e| err(file, e.to_string()))?;
    w.write(&batch).map_err(|e| err(file, e.to_string()))?;
    w.close().map_err(|e| err(file, e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_the_parquet_reader_is_this_files_error() {
        // One byte of a data page changed (found by flipping bytes of the SGLang FPM fixture):
        // parquet 60 panics "Decoder for dict should have been set".
        let path =
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/fpm/sglang/fpm_forward_perf.parquet");
        let mut bytes = std::fs::read(path).unwrap();
        assert!(read_columns("fpm.parquet", bytes.clone()).is_ok());
        bytes[102_042] = 163;
        let e = read_columns("fpm.parquet", bytes).unwrap_err().to_string();
        assert!(e.starts_with("fpm.parquet: cannot decode"), "{e}");
        // The guard itself: a panic's message comes back, and the thread is quiet again after.
        assert_eq!(guard::quietly(|| panic!("boom {}", 7)).unwrap_err(), "boom 7");
        assert_eq!(guard::quietly(|| 5), Ok(5));
    }

    fn gemm_rows() -> Vec<Row> {
        let mut rows = Vec::new();
        for (m, l) in [(1u64, 0.01), (16, 0.012), (256, 0.05)] {
            rows.push((vec!["bfloat16".to_string()], vec![m, 4096, 4096], l));
        }
        rows
    }

    #[test]
    fn tables_round_trip_with_metadata() {
        let bytes = write_table("t.parquet", Family::Gemm, &gemm_rows(), &[("source".into(), "test".into())])
            .unwrap();
        let cols = read_columns("t.parquet", bytes.clone()).unwrap();
        assert_eq!(cols.metadata.get("source").map(String::as_str), Some("test"));
        let t = read_table("t.parquet", bytes).unwrap();
        assert_eq!(t.family, Family::Gemm);
        assert_eq!(t.rows, 3);
        assert_eq!(t.slice(&["bfloat16"]).unwrap().exact(&[16, 4096, 4096]), Some(0.012));
    }

    proptest::proptest! {
        /// Reading a table groups rows by key without a vector per row; whatever the row order
        /// (keys interleaved, duplicates), the table equals the one built row by row.
        #[test]
        fn read_table_equals_building_from_rows(
            raw in proptest::collection::vec((0usize..3, 1u64..6, 1u64..4, 1u32..1000), 1..60)
        ) {
            let dtypes = ["bfloat16", "fp8", "fp8_block"];
            let rows: Vec<Row> = raw
                .iter()
                .map(|(d, m, n, l)| (vec![dtypes[*d].to_string()], vec![*m, *n, 64], f64::from(*l) / 100.0))
                .collect();
            let bytes = write_table("p.parquet", Family::Gemm, &rows, &[]).unwrap();
            let read = read_table("p.parquet", bytes).unwrap();
            let built = Table::from_rows(Family::Gemm, rows).unwrap();
            // Debug text: grids hold NaN where nothing was measured, and NaN != NaN.
            proptest::prop_assert_eq!(format!("{read:?}"), format!("{built:?}"));
        }
    }

    #[test]
    fn corrupt_and_mismatched_files_are_clear_errors() {
        let good = write_table("t.parquet", Family::Gemm, &gemm_rows(), &[]).unwrap();
        // Truncated.
        let e = read_table("cut.parquet", good[..good.len() / 2].to_vec()).unwrap_err();
        assert!(e.to_string().starts_with("cut.parquet: "), "{e}");
        // Not Parquet at all.
        let e = read_table("x.parquet", b"hello".to_vec()).unwrap_err();
        assert!(e.message.contains("not a readable Parquet file"), "{e}");
        // A valid Parquet file that is not a servesim table.
        let schema = Arc::new(Schema::new(vec![Field::new("m", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1i64]))]).unwrap();
        let mut raw = Vec::new();
        let mut w = ArrowWriter::try_new(&mut raw, schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let e = read_table("aic.parquet", raw).unwrap_err();
        assert!(e.message.contains("import-aic"), "{e}");
        // Right family, wrong columns: a generation-attention label on GEMM columns.
        let mut bytes = write_table("t.parquet", Family::Gemm, &gemm_rows(), &[]).unwrap();
        let from = b"\x04gemm";
        if let Some(pos) = bytes.windows(from.len()).position(|w| w == from) {
            // Same-length swap keeps the footer valid: 'gemm' -> 'nccl'.
            bytes[pos + 1..pos + 5].copy_from_slice(b"nccl");
            let e = read_table("swapped.parquet", bytes).unwrap_err();
            assert!(e.message.contains("missing column 'op'"), "{e}");
        }
    }

    #[test]
    fn bad_values_name_the_row_and_column() {
        let mut rows = gemm_rows();
        rows[1].2 = -1.0;
        let bytes = write_table("t.parquet", Family::Gemm, &rows, &[]).unwrap();
        let e = read_table("t.parquet", bytes).unwrap_err();
        assert!(e.message.contains("row 2: 'latency_ms'"), "{e}");
    }
}
