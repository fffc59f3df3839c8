//! The servesim browser app (Leptos, client-side rendered) and its simulation Web Worker.
//!
//! - [`protocol`]: page ↔ worker messages and the worker's handler (pure; tested natively).
//! - [`charts`]: plotly figures built from a prediction (pure; tested natively).
//! - [`client`]: spawning, feeding and cancelling the worker.
//! - [`plotly`]: the single call into plotly.js.
//! - [`app`]: the page's shell and the Predict page.
//! - [`recommend`]: the Recommend page and its worker pool.
//! - [`sweep`]: the aggregated-vs-disaggregated page (`servesim estimate --default`).

pub mod app;
pub mod charts;
pub mod client;
pub mod plotly;
pub mod protocol;
pub mod recommend;
pub mod sweep;
