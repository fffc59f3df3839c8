//! Workspace-level tests (in `tests/*.rs` beside this file):
//! - `golden`: every scenario under `tests/scenarios` and `data/scenarios` against its
//!   human-readable snapshot, plus the byte-exact default prediction.json;
//! - `architecture`: ARCHITECTURE.md's codemap and invariants against `cargo metadata`;
//! - `features`: every `supported`/`limited` entry of features.toml names scenarios that run.
//!
//! Shared helpers live here.

use std::path::{Path, PathBuf};

/// The repository root.
#[must_use]
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The README's capability table, generated from features.toml (grouped by category).
#[must_use]
pub fn features_markdown(features: &toml::Table) -> String {
    let label = |s: &str| match s {
        "supported" => "supported",
        "limited" => "limited",
        "analytical" => "analytical",
        "na" => "n/a",
        _ => "—",
    };
    let mut out = String::from("| Technique | vLLM | SGLang | TensorRT-LLM |\n|---|---|---|---|\n");
    let mut category = "";
    let empty = Vec::new();
    for item in features.get("feature").and_then(toml::Value::as_array).unwrap_or(&empty) {
        let cat = item.get("category").and_then(toml::Value::as_str).unwrap_or("");
        if cat != category {
            category = cat;
            out.push_str(&format!("| **{cat}** | | | |\n"));
        }
        let tech = item.get("technique").and_then(toml::Value::as_str).unwrap_or("");
        let st = |e: &str| {
            item.get(e).and_then(|t| t.get("status")).and_then(toml::Value::as_str).map_or("—", label)
        };
        out.push_str(&format!("| {tech} | {} | {} | {} |\n", st("vllm"), st("sglang"), st("trtllm")));
    }
    out
}
