//! The servesim browser app (Leptos, client-side rendered) and its simulation Web Worker.
//!
//! - [`protocol`]: page ↔ worker messages and the worker's handler (pure; tested natively).
//! - [`charts`]: plotly figures built from a prediction (pure; tested natively).
//! - [`client`]: spawning, feeding and cancelling the worker.
//! - [`plotly`]: the single call into plotly.js.
//! - [`app`]: the page's shell and the Predict page.
//! - [`recommend`]: the Recommend page and its worker pool.
//! - [`compare`]: two scenarios side by side.
//! - [`data`]: files the user drops (traces, tables, configs), described and put to use.
//! - [`features`]: the capability matrix page.
//! - [`form`]: the scenario form, kept in step with the YAML text.
//! - [`playback`]: a finished run's timeline, scrubbed or played worker by worker.
//! - [`requests`]: the per-request table and downloads.
//! - [`summary`]: latency percentiles, SLA attainment, memory and timing provenance of a run.
//! - [`share`]: share links (the scenario in the URL fragment).
//! - [`sweep`]: the aggregated-vs-disaggregated page (`servesim estimate --default`).
//! - [`validate`]: measured runs replayed against a calibration file (`servesim validate`).

pub mod app;
pub mod calibrate;
pub mod charts;
pub mod client;
pub mod compare;
pub mod data;
pub mod features;
pub mod form;
pub mod playback;
pub mod plotly;
pub mod protocol;
pub mod recommend;
pub mod request_log;
pub mod requests;
pub mod share;
pub mod summary;
pub mod sweep;
pub mod validate;
