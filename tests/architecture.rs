//! ARCHITECTURE.md stays true: its code map names exactly the workspace's crates, and the
//! dependency rules it states hold in the resolved dependency graph (`cargo metadata`).
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;
use servesim_tests::repo_root;

struct Graph {
    /// Workspace member names.
    members: BTreeSet<String>,
    /// Package name → names of its normal (non-dev) dependencies (all versions merged).
    deps: BTreeMap<String, BTreeSet<String>>,
    /// The same by package id (one version each), for exact reachability.
    by_id: BTreeMap<String, BTreeSet<String>>,
    /// Package id → name.
    names: BTreeMap<String, String>,
}

fn graph() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(repo_root())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: BTreeMap<String, String> = v["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap().to_string(), p["name"].as_str().unwrap().to_string()))
        .collect();
    let members = v["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| names[id.as_str().unwrap()].clone())
        .collect();
    let mut deps = BTreeMap::new();
    let mut by_id = BTreeMap::new();
    for node in v["resolve"]["nodes"].as_array().unwrap() {
        let id = node["id"].as_str().unwrap().to_string();
        let ids: BTreeSet<String> = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null()))
            .map(|d| d["pkg"].as_str().unwrap().to_string())
            .collect();
        deps.entry(names[&id].clone())
            .or_insert_with(BTreeSet::new)
            .extend(ids.iter().map(|d| names[d].clone()));
        by_id.insert(id, ids);
    }
    Graph { members, deps, by_id, names }
}

/// Third-party crates whose own dependencies on browser crates are not servesim's reach:
/// `iana-time-zone` (pulled by chrono's `clock` feature, which arrow-array requires) asks the
/// browser for the local time zone on wasm32 — servesim never asks for local time.
const INERT: &[&str] = &["iana-time-zone"];

impl Graph {
    /// Names of every package `root` (a workspace member) reaches, following exact versions.
    fn closure(&self, root: &str) -> BTreeSet<String> {
        let mut seen_ids = BTreeSet::new();
        let mut out = BTreeSet::new();
        let mut stack: Vec<String> =
            self.names.iter().filter(|(_, n)| n.as_str() == root).map(|(id, _)| id.clone()).collect();
        while let Some(id) = stack.pop() {
            if INERT.contains(&self.names[&id].as_str()) {
                continue;
            }
            for d in self.by_id.get(&id).into_iter().flatten() {
                if seen_ids.insert(d.clone()) {
                    out.insert(self.names[d].clone());
                    stack.push(d.clone());
                }
            }
        }
        out
    }
}

fn architecture_md() -> String {
    std::fs::read_to_string(repo_root().join("ARCHITECTURE.md")).unwrap()
}

#[test]
fn code_map_names_exactly_the_workspace_crates() {
    let md = architecture_md();
    let map = md.split("## Code map").nth(1).expect("a '## Code map' section").split("\n## ").next().unwrap();
    let named: BTreeSet<String> = map
        .lines()
        .filter_map(|l| l.strip_prefix("### `").and_then(|r| r.strip_suffix('`')))
        .map(str::to_string)
        .collect();
    assert_eq!(named, graph().members, "ARCHITECTURE.md code map vs workspace members");
}

fn assert_invariant_stated(md: &str, text: &str) {
    assert!(md.contains(text), "ARCHITECTURE.md no longer states: {text}");
}

#[test]
fn core_depends_only_on_libm_and_hashbrown() {
    let md = architecture_md();
    assert_invariant_stated(&md, "`servesim_core` depends only on `libm` and `hashbrown`");
    let g = graph();
    let direct = &g.deps["servesim_core"];
    let allowed: BTreeSet<String> = ["libm", "hashbrown"].iter().map(|s| (*s).to_string()).collect();
    assert!(direct.is_subset(&allowed), "servesim_core depends on {direct:?}");
    let all = g.closure("servesim_core");
    for banned in ["serde", "serde_json", "wasm-bindgen", "web-sys", "js-sys", "getrandom", "leptos"] {
        assert!(!all.contains(banned), "servesim_core reaches {banned}");
    }
}

#[test]
fn perf_depends_only_on_core_and_libm() {
    let md = architecture_md();
    assert_invariant_stated(&md, "`servesim_perf` depends only on `servesim_core` and `libm`");
    let g = graph();
    let allowed: BTreeSet<String> = ["servesim_core", "libm"].iter().map(|s| (*s).to_string()).collect();
    assert!(
        g.deps["servesim_perf"].is_subset(&allowed),
        "servesim_perf depends on {:?}",
        g.deps["servesim_perf"]
    );
}

#[test]
fn data_readers_stay_below_the_scenario_layer() {
    let md = architecture_md();
    assert_invariant_stated(&md, "`servesim_data` never opens a file");
    let g = graph();
    let all = g.closure("servesim_data");
    for banned in ["servesim_scenario", "leptos", "web-sys", "wasm-bindgen", "clap", "saphyr-parser"] {
        assert!(!all.contains(banned), "servesim_data reaches {banned}");
    }
}

#[test]
fn scenario_never_reaches_the_browser_or_the_cli() {
    let md = architecture_md();
    assert_invariant_stated(&md, "`servesim_scenario` is the only library crate that knows serde and YAML");
    let g = graph();
    let all = g.closure("servesim_scenario");
    for banned in ["leptos", "web-sys", "js-sys", "wasm-bindgen", "clap", "servesim_cli", "servesim_web"] {
        assert!(!all.contains(banned), "servesim_scenario reaches {banned}");
    }
    for lib in ["servesim_core", "servesim_perf"] {
        let all = g.closure(lib);
        for serde_crate in ["serde", "serde_json", "saphyr-parser"] {
            assert!(!all.contains(serde_crate), "{lib} reaches {serde_crate}");
        }
    }
}

#[test]
fn only_the_web_crate_knows_the_browser() {
    let md = architecture_md();
    assert_invariant_stated(&md, "`servesim_web` is the only crate that knows Leptos, web-sys or plotly");
    let g = graph();
    for m in &g.members {
        if m == "servesim_web" {
            continue;
        }
        let direct = &g.deps[m];
        for banned in ["leptos", "web-sys", "js-sys", "wasm-bindgen", "plotly"] {
            assert!(!direct.contains(banned), "{m} depends on {banned}");
        }
    }
}

#[test]
fn nothing_depends_on_the_apps() {
    let md = architecture_md();
    assert_invariant_stated(&md, "nothing depends on `servesim_cli`, `servesim_web` or `servesim_tests`");
    let g = graph();
    for (pkg, deps) in &g.deps {
        for app in ["servesim_cli", "servesim_web", "servesim_tests"] {
            assert!(!deps.contains(app), "{pkg} depends on {app}");
        }
    }
}

#[test]
fn only_the_cli_touches_the_filesystem() {
    let md = architecture_md();
    assert_invariant_stated(&md, "only `servesim_cli` touches the filesystem");
    let root = repo_root();
    for dir in
        ["crates/servesim_core/src", "crates/servesim_perf/src", "crates/servesim_scenario/src", "web/src"]
    {
        for entry in walk(&root.join(dir)) {
            let text = std::fs::read_to_string(&entry).unwrap();
            for banned in ["std::fs", "File::open", "read_to_string(", "std::env::var"] {
                assert!(!text.contains(banned), "{} uses {banned}", entry.display());
            }
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}
