//! `servesim data`: import the AIConfigurator perf database, inspect data files.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::json;
use servesim_data::aic::{self, Filter};
use servesim_data::perf::{read_columns, write_table};
use servesim_perf::tables::Family;
use servesim_scenario::catalog::Catalog;
use sha2::{Digest, Sha256};

use crate::Failure;

/// The AIConfigurator release the importer was written against (AICDB).
const AIC_VERSION: &str = "0.12.0";
/// Its default ("current") engine versions per `systems/query_versions.yaml` (AICDB §3.1).
const DEFAULT_VERSIONS: [(&str, &str); 3] =
    [("vllm", "0.24.0"), ("sglang", "0.5.14"), ("trtllm", "1.3.0rc20")];
/// MoE routing distribution kept: AIConfigurator's default workload (`power_law`, alpha 1.01).
const MOE_DISTRIBUTION: &str = "power_law_1.01";

fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure { code, message: message.into() }
}

fn sha256(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in d {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Orders version strings by their digit runs ("1.3.0rc20" > "1.3.0rc5" > "1.2.0").
fn version_key(v: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut num = String::new();
    let mut word = String::new();
    for c in v.chars() {
        if c.is_ascii_digit() {
            if !word.is_empty() {
                out.push((0, std::mem::take(&mut word)));
            }
            num.push(c);
        } else {
            if !num.is_empty() {
                out.push((num.parse().unwrap_or(0), String::new()));
                num.clear();
            }
            if c != '.' {
                word.push(c);
            }
        }
    }
    if !num.is_empty() {
        out.push((num.parse().unwrap_or(0), String::new()));
    }
    if !word.is_empty() {
        out.push((0, word));
    }
    out
}

/// Version directories under `dir` that contain `file`, newest first.
fn versions_with(dir: &Path, file: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().join(file).is_file())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    v.sort_by_key(|x| std::cmp::Reverse(version_key(x)));
    v
}

/// Finds the `systems/data` directory from whatever the user pointed at.
fn data_root(from: &Path) -> Result<PathBuf, Failure> {
    for c in [
        from.join("data"),
        from.join("systems/data"),
        from.join("aiconfigurator_core/systems/data"),
        from.to_path_buf(),
    ] {
        if c.join("h200_sxm").is_dir() || c.join("h100_sxm").is_dir() || c.join("b200_sxm").is_dir() {
            return Ok(c);
        }
    }
    Err(fail(
        2,
        format!(
            "{}: not an AIConfigurator systems directory (expected data/<system>/...; point --from at \
             aiconfigurator_core/systems from `pip download --no-deps aiconfigurator-core=={AIC_VERSION}`)",
            from.display()
        ),
    ))
}

/// What to import.
pub struct ImportArgs {
    pub from: PathBuf,
    pub out: PathBuf,
    pub systems: Vec<String>,
    pub backends: Vec<String>,
    pub versions: Vec<String>,
    pub all_shapes: bool,
}

/// `servesim data import-aic`.
pub fn import_aic(a: &ImportArgs) -> Result<(), Failure> {
    let root = data_root(&a.from)?;
    let catalog = Catalog::builtin().map_err(|e| fail(1, e.to_string()))?;
    let mut filter = Filter::default();
    if !a.all_shapes {
        filter.windows.insert(0);
        // KV heads per GPU of GQA models at any TP (8 is the most any catalog model has).
        filter.max_kv_heads = Some(8);
    }
    for m in catalog.models.iter().filter(|_| !a.all_shapes) {
        if m.mla.is_none() {
            filter.head_dims.insert(m.head_dim);
        }
        if let Some((w, _)) = m.sliding_window {
            filter.windows.insert(w);
        }
        if let Some(la) = &m.linear_attention {
            // Heads per GPU at every tensor-parallel size that splits them evenly.
            for tp in
                [1, 2, 4, 8, 16].into_iter().filter(|tp| la.key_heads % tp == 0 && la.value_heads % tp == 0)
            {
                filter.gdn_shapes.insert((
                    m.hidden_size,
                    u64::from(la.key_heads / tp),
                    u64::from(la.value_heads / tp),
                ));
            }
        }
        if let Some(moe) = &m.moe {
            filter.moe_shapes.insert((
                m.hidden_size,
                moe.expert_intermediate_size,
                u64::from(moe.experts_per_token),
                u64::from(moe.num_experts),
            ));
        }
    }
    if !a.all_shapes {
        filter.moe_distributions.insert(MOE_DISTRIBUTION.to_string());
    }
    let mut versions: BTreeMap<String, String> =
        DEFAULT_VERSIONS.iter().map(|(b, v)| ((*b).to_string(), (*v).to_string())).collect();
    for v in &a.versions {
        let Some((b, ver)) = v.split_once('=') else {
            return Err(fail(2, format!("--version '{v}': expected BACKEND=VERSION")));
        };
        versions.insert(b.to_string(), ver.to_string());
    }
    let mut files = Vec::new();
    let mut total_bytes = 0u64;
    for system in &a.systems {
        let sys_dir = root.join(system);
        if !sys_dir.is_dir() {
            return Err(fail(2, format!("{}: no such system in {}", system, root.display())));
        }
        let mut jobs: Vec<(Family, Option<&str>, PathBuf, String, PathBuf)> = Vec::new();
        for backend in &a.backends {
            let Some(version) = versions.get(backend) else {
                return Err(fail(2, format!("unknown backend '{backend}' (vllm, sglang, trtllm)")));
            };
            for family in Family::ALL {
                if family == Family::Nccl {
                    continue;
                }
                let (dir, file) = aic::source_path(family);
                let base = sys_dir.join(dir).join(backend);
                // Backward fill: the requested version, else the newest older one holding it.
                let found =
                    versions_with(&base, file).into_iter().find(|v| version_key(v) <= version_key(version));
                if let Some(v) = found {
                    let src = base.join(&v).join(file);
                    let dst = a
                        .out
                        .join(system)
                        .join(backend)
                        .join(version)
                        .join(format!("{}.parquet", family.name()));
                    jobs.push((family, Some(backend.as_str()), src, v, dst));
                }
            }
        }
        let (dir, file) = aic::source_path(Family::Nccl);
        if let Some(v) = versions_with(&sys_dir.join(dir).join("nccl"), file).first() {
            let src = sys_dir.join(dir).join("nccl").join(v).join(file);
            jobs.push((Family::Nccl, None, src, v.clone(), a.out.join(system).join("nccl.parquet")));
        }
        for (family, backend, src, src_version, dst) in jobs {
            let bytes =
                std::fs::read(&src).map_err(|e| fail(1, format!("cannot read {}: {e}", src.display())))?;
            let src_sha = sha256(&bytes);
            let name = src.display().to_string();
            let cols = read_columns(&name, bytes).map_err(|e| fail(1, e.to_string()))?;
            let imported = aic::convert(&name, family, &cols, &filter).map_err(|e| fail(1, e.to_string()))?;
            if imported.rows.is_empty() {
                continue;
            }
            let rel_src = src.strip_prefix(&root).unwrap_or(&src).display().to_string();
            let meta = vec![
                (
                    "servesim.source".to_string(),
                    format!("aiconfigurator-core {AIC_VERSION} systems/data/{rel_src}"),
                ),
                ("servesim.source_sha256".to_string(), src_sha.clone()),
                ("servesim.system".to_string(), system.clone()),
                ("servesim.backend".to_string(), backend.unwrap_or("nccl").to_string()),
                ("servesim.license".to_string(), "Apache-2.0 (aiconfigurator-core, NVIDIA)".to_string()),
            ];
            let out = write_table(&dst.display().to_string(), family, &imported.rows, &meta)
                .map_err(|e| fail(1, e.to_string()))?;
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| fail(1, format!("cannot create {}: {e}", parent.display())))?;
            }
            std::fs::write(&dst, &out)
                .map_err(|e| fail(1, format!("cannot write {}: {e}", dst.display())))?;
            total_bytes += out.len() as u64;
            let rel = dst.strip_prefix(&a.out).unwrap_or(&dst).display().to_string();
            say!(
                "{rel:<58} {:>7} rows (of {:>7}) {:>9} B  from {}",
                imported.rows.len(),
                imported.source_rows,
                out.len(),
                rel_src
            );
            files.push(json!({
                "path": rel,
                "family": family.name(),
                "system": system,
                "backend": backend,
                "version": backend.map(|b| versions.get(b).cloned().unwrap_or_default()),
                "source": format!("aiconfigurator-core=={AIC_VERSION}: systems/data/{rel_src}"),
                "source_version": src_version,
                "source_sha256": src_sha,
                "sha256": sha256(&out),
                "bytes": out.len(),
                "rows": imported.rows.len(),
                "source_rows": imported.source_rows,
                "lanes": imported.lanes,
            }));
        }
    }
    // Keep what earlier imports into the same directory wrote (other systems or engines).
    let path = a.out.join("manifest.json");
    let mut selections = vec![json!({
        "systems": a.systems,
        "backends": a.backends,
        "versions": versions,
        "lane": "per slice key, the kernel_source with the most measured rows (all-reduce: per launch mode; MoE: TensorRT-LLM's TRTLLM-gen lane, moe_torch_flow_min_latency, also, as the `<dtype>:min_latency` slices)",
        "moe_distribution": MOE_DISTRIBUTION,
        "shapes": if a.all_shapes { "all" } else { "those of the built-in model catalog: its MoE shapes, attention head sizes and windows, up to 8 KV heads per GPU, its Gated DeltaNet heads per GPU at TP 1-16" },
    })];
    if let Ok(old) = std::fs::read_to_string(&path) {
        if let Ok(old) = serde_json::from_str::<serde_json::Value>(&old) {
            let mine: BTreeSet<String> =
                files.iter().filter_map(|f| f["path"].as_str().map(str::to_string)).collect();
            for f in old["files"].as_array().into_iter().flatten() {
                if f["path"].as_str().is_some_and(|p| !mine.contains(p)) {
                    files.push(f.clone());
                }
            }
            // Manifests before the merge had one `selection` object.
            let legacy = old.get("selection").into_iter();
            for sel in old["selections"].as_array().into_iter().flatten().chain(legacy) {
                if !selections.contains(sel) {
                    selections.push(sel.clone());
                }
            }
        }
    }
    files.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    let manifest = json!({
        "schema_version": 1,
        "generated_by": "servesim data import-aic",
        "source": {
            "package": "aiconfigurator-core",
            "version": AIC_VERSION,
            "license": "Apache-2.0",
            "how": format!("pip download --no-deps aiconfigurator-core=={AIC_VERSION}"),
        },
        "selections": selections,
        "files": files,
    });
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| fail(1, e.to_string()))? + "\n";
    std::fs::write(&path, text).map_err(|e| fail(1, format!("cannot write {}: {e}", path.display())))?;
    say!("wrote {} ({} files; this import {:.2} MB)", path.display(), files.len(), total_bytes as f64 / 1e6);
    Ok(())
}

/// `servesim data inspect FILE`: what a data file holds (the page's Data tab shows the same).
pub fn inspect(path: &Path) -> Result<(), Failure> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| fail(2, format!("cannot read {name}: {e}")))?;
    // An FPM table's sidecar sits beside it; other files ignore it.
    let side_path = servesim_data::fpm::sidecar_path(&name);
    let side_text = if name.ends_with(".parquet") { std::fs::read_to_string(&side_path).ok() } else { None };
    let sidecar = side_text.as_deref().map(|t| (side_path.as_str(), t));
    let found = servesim_data::inspect::inspect(&name, bytes, sidecar, 0).map_err(|e| fail(2, e))?;
    say_raw!("{}", found.summary);
    Ok(())
}
