//! Measured kernel tables for a deployment: which files, loaded once.
//!
//! Tables live under servesim's data directory as
//! `perf/<system>/<backend>/<version>/<family>.parquet` plus `perf/<system>/nccl.parquet`
//! (what `servesim data import-aic` writes). Callers supply bytes through
//! [`Files::data`]; decoded tables are cached per content, so repeated runs (validation,
//! sweeps, a browser session) decode each file once.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use servesim_core::engine::Backend;
use servesim_perf::oplevel::PerfDb;
use servesim_perf::tables::{Family, Table};

use crate::scenario::{Files, ScenarioError};

/// The engine versions whose tables ship in `data/perf` and are used when a config sets no
/// `backend_version`: AIConfigurator 0.12's defaults (AICDB §3.1).
#[must_use]
pub fn default_version(backend: Backend) -> &'static str {
    match backend {
        Backend::Vllm => "0.24.0",
        Backend::Sglang => "0.5.14",
        Backend::TrtLlm => "1.3.0rc20",
    }
}

/// The data-directory name of an engine.
#[must_use]
pub fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Vllm => "vllm",
        Backend::Sglang => "sglang",
        Backend::TrtLlm => "trtllm",
    }
}

/// Paths (relative to the data directory) of every table a role could use.
#[must_use]
pub fn table_paths(system: &str, backend: &str, version: &str) -> Vec<(Family, String)> {
    Family::ALL
        .iter()
        .map(|f| {
            let path = if *f == Family::Nccl {
                format!("perf/{system}/nccl.parquet")
            } else {
                format!("perf/{system}/{backend}/{version}/{}.parquet", f.name())
            };
            (*f, path)
        })
        .collect()
}

/// 64-bit FNV-1a: identifies file contents for the cache.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

thread_local! {
    /// Decoded tables by (path, content hash, length).
    static TABLES: RefCell<BTreeMap<(String, u64, usize), Rc<Table>>> = const { RefCell::new(BTreeMap::new()) };
}

fn decode(path: &str, bytes: Vec<u8>) -> Result<Rc<Table>, ScenarioError> {
    let key = (path.to_string(), fnv1a(&bytes), bytes.len());
    if let Some(t) = TABLES.with(|c| c.borrow().get(&key).cloned()) {
        return Ok(t);
    }
    let t = servesim_data::perf::read_table(path, bytes)
        .map_err(|e| ScenarioError::Run { message: e.to_string() })?;
    let t = Rc::new(t);
    TABLES.with(|c| {
        let mut c = c.borrow_mut();
        // A long browser session loading many table sets stays bounded.
        if c.len() > 64 {
            c.clear();
        }
        c.insert(key, t.clone());
    });
    Ok(t)
}

/// Loads the tables of `system` × `backend` × `version` (missing families are simply absent).
///
/// # Errors
/// When a file exists but cannot be read or decoded (the message names it).
pub fn load(files: &dyn Files, system: &str, backend: &str, version: &str) -> Result<PerfDb, ScenarioError> {
    let mut db = PerfDb::new(
        system,
        backend,
        version,
        &format!("servesim data/perf/{system}/{backend}/{version} (AIConfigurator 0.12 tables)"),
    );
    for (_, path) in table_paths(system, backend, version) {
        match files.data(&path) {
            Ok(Some(bytes)) => {
                let t = decode(&path, bytes)?;
                db.insert(t);
            }
            Ok(None) => {}
            Err(message) => return Err(ScenarioError::Run { message }),
        }
    }
    Ok(db)
}

/// Table paths (relative to the data directory) a config may need, read from the raw config
/// without validating it: every role's GPU × the engine × its version. The browser fetches
/// these before a run; anything wrong with the config is reported by the run itself.
#[must_use]
pub fn paths_for_config(text: &str) -> Vec<String> {
    let Ok(root) = crate::node::parse(text, None) else { return Vec::new() };
    let s = |n: Option<&crate::node::Node>| match n.map(|n| &n.value) {
        Some(crate::node::Value::Str(v)) => Some(v.clone()),
        _ => None,
    };
    let engine = root.get("engine");
    let backend =
        s(engine.and_then(|e| e.get("backend"))).unwrap_or_else(|| "vllm".into()).to_ascii_lowercase();
    let b = match backend.as_str() {
        "sglang" => Backend::Sglang,
        "trtllm" | "tensorrt_llm" | "tensorrt-llm" => Backend::TrtLlm,
        _ => Backend::Vllm,
    };
    let version =
        s(engine.and_then(|e| e.get("backend_version"))).unwrap_or_else(|| default_version(b).to_string());
    let mut systems: Vec<String> = Vec::new();
    if let Some(h) = s(engine.and_then(|e| e.get("hardware"))) {
        systems.push(h.to_ascii_lowercase());
    }
    for role in ["aggregated", "prefill", "decode"] {
        if let Some(h) =
            s(engine.and_then(|e| e.get("workers")).and_then(|w| w.get(role)).and_then(|r| r.get("hardware")))
        {
            systems.push(h.to_ascii_lowercase());
        }
    }
    systems.sort();
    systems.dedup();
    let mut out = Vec::new();
    for sys in systems {
        out.extend(table_paths(&sys, backend_name(b), &version).into_iter().map(|(_, p)| p));
    }
    out
}
