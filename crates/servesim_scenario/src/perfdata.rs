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

/// AIConfigurator tables used as they are: where one goes in the data directory, and the
/// servesim table it converts to.
pub use servesim_data::aic::{servesim_path as aic_path, to_servesim_table as aic_table};

/// Where an FPM table's `.metadata.json` sidecar sits (same stem).
pub use servesim_data::fpm::sidecar_path as fpm_sidecar_path;

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

/// Loads the tables of `system` × `backend` × `version` (missing families are simply absent),
/// then, for each family `version` lacks, the table of `fallback` (the engine's default
/// version, which the shipped data always holds) — so a config naming an older release is
/// timed with that release's tables where AIConfigurator measured them (often only the
/// communication kernels) and with the default release's elsewhere. The report names each
/// family's version.
///
/// # Errors
/// When a file exists but cannot be read or decoded (the message names it).
pub fn load(
    files: &dyn Files,
    system: &str,
    backend: &str,
    version: &str,
    fallback: &str,
) -> Result<PerfDb, ScenarioError> {
    let mut db = PerfDb::new(
        system,
        backend,
        version,
        &format!("servesim data/perf/{system}/{backend}/{version} (AIConfigurator 0.12 tables)"),
    );
    let read = |path: &str| match files.data(path) {
        Ok(Some(bytes)) => decode(path, bytes).map(Some),
        Ok(None) => Ok(None),
        Err(message) => Err(ScenarioError::Run { message }),
    };
    for (_, path) in table_paths(system, backend, version) {
        if let Some(t) = read(&path)? {
            db.insert(t);
        }
    }
    if fallback != version {
        for (family, path) in table_paths(system, backend, fallback) {
            if db.table(family).is_none() {
                if let Some(t) = read(&path)? {
                    db.insert_borrowed(t, fallback);
                }
            }
        }
    }
    Ok(db)
}

/// Whether the data holds any engine table (NCCL aside) of `system` × `backend` × `version`.
#[must_use]
pub fn holds_version(files: &dyn Files, system: &str, backend: &str, version: &str) -> bool {
    table_paths(system, backend, version)
        .into_iter()
        .any(|(f, p)| f != Family::Nccl && files.data(&p).ok().flatten().is_some())
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
        out.extend(table_paths(&sys, b.name(), &version).into_iter().map(|(_, p)| p));
        if version != default_version(b) {
            // The default release fills the families the named one lacks.
            for (f, p) in table_paths(&sys, b.name(), default_version(b)) {
                if f != Family::Nccl {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// The deployment an FPM cell must describe (AISimulate's cell identity, as far as servesim
/// models it).
#[derive(Clone, Debug)]
pub struct FpmWant<'a> {
    /// Model id (`Qwen/Qwen3-8B`).
    pub model: &'a str,
    /// Hardware id (`h200_sxm`).
    pub system: &'a str,
    /// Engine (`vllm`, `sglang`, `trtllm`).
    pub backend: &'a str,
    /// `[tp, pp, dp, moe_tp, moe_ep, cp]`.
    pub shape: [u32; 6],
    /// GEMM quantization as the tables name it (`bfloat16`, `fp8`, `fp8_block`, `nvfp4`).
    pub gemm: &'a str,
    /// KV-cache dtype as the tables name it (`bfloat16`, `fp8`).
    pub kv: &'a str,
}

impl FpmWant<'_> {
    fn describe(&self) -> String {
        let [tp, pp, dp, mtp, mep, cp] = self.shape;
        format!(
            "{}, {} on {}, tp {tp} pp {pp} dp {dp} moe_tp {mtp} moe_ep {mep} cp {cp}, gemm {}, kv {}",
            self.model, self.backend, self.system, self.gemm, self.kv
        )
    }

    /// Why `cell` is not this deployment, or `None` when it is.
    fn mismatch(&self, cell: &servesim_data::fpm::Cell) -> Option<String> {
        let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_ascii_lowercase();
        if cell.model_path != self.model && base(&cell.model_path) != base(self.model) {
            return Some(format!("model_path '{}' is not {}", cell.model_path, self.model));
        }
        if !cell.system.is_empty() && cell.system != self.system {
            return Some(format!("system '{}' is not {}", cell.system, self.system));
        }
        if !cell.backend.is_empty() && cell.backend != self.backend {
            return Some(format!("backend '{}' is not {}", cell.backend, self.backend));
        }
        for (name, want) in ["tp", "pp", "dp", "moe_tp", "moe_ep", "cp"].iter().zip(self.shape) {
            let have = cell.get(name).unwrap_or("");
            if have.parse::<u32>().ok() != Some(want) {
                return Some(format!("{name} is {have}, the deployment has {want}"));
            }
        }
        for (name, want) in [("gemm_quant_mode", self.gemm), ("kv_cache_dtype", self.kv)] {
            let have = cell.get(name).unwrap_or("");
            if !have.eq_ignore_ascii_case(want) {
                return Some(format!("{name} is '{have}', the deployment uses '{want}'"));
            }
        }
        None
    }
}

/// Reads an FPM table pair and picks the cell of this deployment: exact identity, never a
/// neighbour (AISimulate's "fail closed"). `cell_id` chooses among several matching cells
/// (e.g. different attention backends, which servesim does not model).
///
/// # Errors
/// A message naming the file and, when no cell fits, every cell it has.
pub fn load_fpm(
    files: &dyn Files,
    parquet: &str,
    cell_id: Option<&str>,
    want: &FpmWant<'_>,
) -> Result<servesim_perf::fpm::FpmModel, String> {
    use servesim_data::fpm;
    let side_path = fpm::sidecar_path(parquet);
    let side = files.read(&side_path).map_err(|e| format!("{e} (the sidecar of {parquet})"))?;
    let side = String::from_utf8(side).map_err(|_| format!("{side_path}: not UTF-8 text"))?;
    let sidecar = fpm::read_sidecar(&side_path, &side).map_err(|e| e.to_string())?;
    let bytes = files.read(parquet)?;
    let cells = fpm::read_fpm(parquet, bytes, &sidecar).map_err(|e| e.to_string())?;
    let listing = || cells.iter().map(|c| format!("\n  - {}", c.describe())).collect::<String>();
    let chosen = if let Some(id) = cell_id {
        let Some(c) = cells.iter().find(|c| c.cell_id == id) else {
            return Err(format!("{parquet} has no cell '{id}'; its cells:{}", listing()));
        };
        if let Some(why) = want.mismatch(c) {
            return Err(format!("{parquet}: cell '{id}' does not describe this deployment ({})", why));
        }
        c
    } else {
        let fits: Vec<&servesim_data::fpm::Cell> =
            cells.iter().filter(|c| want.mismatch(c).is_none()).collect();
        match fits[..] {
            [c] => c,
            [] => {
                return Err(format!(
                    "{parquet} has no cell for {} (FPM cells are never borrowed across deployments); its cells:{}",
                    want.describe(),
                    listing()
                ))
            }
            _ => {
                let ids: Vec<String> = fits.iter().map(|c| c.describe()).collect();
                return Err(format!(
                    "{parquet} has {} cells for {}; choose one with timing.fpm_cell_id:\n  - {}",
                    fits.len(),
                    want.describe(),
                    ids.join("\n  - ")
                ));
            }
        }
    };
    servesim_perf::fpm::FpmModel::new(&chosen.data).map_err(|e| e.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_asks_for_its_tables_and_for_the_default_ones_when_it_names_another_version() {
        let base = "engine:\n  model: m\n  hardware: H200_SXM\n  backend: sglang\n";
        let paths = paths_for_config(base);
        assert!(paths.contains(&"perf/h200_sxm/sglang/0.5.14/gemm.parquet".to_string()), "{paths:?}");
        assert!(paths.contains(&"perf/h200_sxm/nccl.parquet".to_string()), "{paths:?}");
        assert_eq!(paths.len(), Family::ALL.len());
        let other = paths_for_config(&format!("{base}  backend_version: 0.5.6\n"));
        assert!(other.contains(&"perf/h200_sxm/sglang/0.5.6/gemm.parquet".to_string()), "{other:?}");
        assert!(other.contains(&"perf/h200_sxm/sglang/0.5.14/gemm.parquet".to_string()), "{other:?}");
        // Every engine table of both releases, the GPU's one NCCL table once.
        assert_eq!(other.len(), 2 * Family::ALL.len() - 1);
    }
}
