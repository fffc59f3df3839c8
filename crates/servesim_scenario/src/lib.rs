//! servesim's IO boundary: the config (AISimulate's `prediction.yaml`, YAML or JSON) with
//! strict validation, the hardware and model catalogs, and the prediction report.
//!
//! The pipeline is: text → [`node::Node`] (positions kept) → `--set` overrides →
//! [`decode`] into a [`config::Config`] (every problem collected) → [`scenario::prepare`]
//! against the [`catalog::Catalog`] (memory plan, refusal if it does not fit) →
//! a `servesim_core` simulation → [`report::Prediction`].
//!
//! This is the only crate that knows serde and YAML. It does no file IO: callers pass text.

pub mod catalog;
pub mod config;
pub mod decode;
pub mod details;
pub mod diag;
pub mod edit;
pub mod estimate;
pub mod fpmgrid;
pub mod node;
pub mod parallel;
pub mod perfdata;
pub mod recommend;
pub mod report;
pub mod scenario;
pub mod uncertainty;
pub mod validate;

pub use report::Prediction;
pub use scenario::{predict, Files, NoFiles, Override, Prepared, ScenarioError};
pub use servesim_data::inspect::{inspect, Heatmap, Inspection, Kind as FileKind, Preview, Series};
pub use servesim_data::trace::TraceFormat as TraceFileFormat;

/// The default scenario: the one the app preloads and the README quick start runs.
pub const DEFAULT_SCENARIO: &str = include_str!("../../../data/scenarios/default.yaml");
