//! Readers for the data files servesim consumes. Each takes the file's bytes and a name for
//! messages, and returns typed rows or an error naming the file, the line and the field.
//! Nothing here opens a file: the CLI reads from disk, the browser from dropped files.
//!
//! - [`trace`]: request traces — Mooncake JSONL (with `hash_ids`) and Azure-style CSV.
//! - [`aic`]: AIConfigurator perf-database tables converted to servesim rows (the importer).
//! - [`silicon`]: measured end-to-end results of real deployments (calibration CSV).
//! - [`fpm`]: AISimulate whole-forward (FPM) tables and their sidecars, read and written.
//! - [`perf`]: kernel-latency tables in Parquet (servesim tables; AIConfigurator columns).
//! - [`inspect`]: what any of these files holds (summary and a chart), for CLI and page.

pub mod aic;
pub mod fpm;
pub mod inspect;
pub mod perf;
pub mod silicon;
pub mod trace;
