//! features.toml is honest: every `supported`/`limited` entry names scenarios that exist and
//! run, statuses come from the allowed set, and the README's table matches the file.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use servesim_tests::repo_root;

const ENGINES: [&str; 3] = ["vllm", "sglang", "trtllm"];
const STATUSES: [&str; 5] = ["supported", "limited", "analytical", "not_supported", "na"];

fn features() -> toml::Table {
    let text = std::fs::read_to_string(repo_root().join("features.toml")).unwrap();
    text.parse::<toml::Table>().unwrap()
}

#[test]
fn every_entry_is_well_formed() {
    let f = features();
    assert_eq!(f["schema_version"].as_integer(), Some(1));
    let list = f["feature"].as_array().unwrap();
    assert!(list.len() >= 35, "the seed matrix has at least 35 techniques");
    let mut ids = BTreeSet::new();
    for item in list {
        let id = item["id"].as_str().unwrap();
        assert!(ids.insert(id.to_string()), "duplicate feature id {id}");
        for key in ["category", "technique"] {
            assert!(item[key].as_str().is_some_and(|s| !s.is_empty()), "{id}: missing {key}");
        }
        for e in ENGINES {
            let entry = item.get(e).unwrap_or_else(|| panic!("{id}: no {e} entry")).as_table().unwrap();
            let status = entry["status"].as_str().unwrap();
            assert!(STATUSES.contains(&status), "{id}.{e}: unknown status {status}");
            assert!(entry["note"].as_str().is_some_and(|n| !n.is_empty()), "{id}.{e}: empty note");
            assert!(entry["scenarios"].as_array().is_some(), "{id}.{e}: scenarios must be a list");
        }
    }
}

#[test]
fn supported_and_limited_entries_name_scenarios_that_run() {
    let f = features();
    let root = repo_root();
    let mut ran = BTreeSet::new();
    for item in f["feature"].as_array().unwrap() {
        let id = item["id"].as_str().unwrap();
        for e in ENGINES {
            let entry = &item[e];
            let status = entry["status"].as_str().unwrap();
            let scenarios = entry["scenarios"].as_array().unwrap();
            if !matches!(status, "supported" | "limited") {
                continue;
            }
            assert!(!scenarios.is_empty(), "{id}.{e} is {status} but names no scenario");
            for s in scenarios {
                let rel = s.as_str().unwrap();
                if !ran.insert(rel.to_string()) {
                    continue;
                }
                assert!(root.join(rel).is_file(), "{id}.{e}: no file {rel}");
                let p =
                    servesim_tests::predict_file(rel).unwrap_or_else(|err| panic!("{id}.{e}: {rel}: {err}"));
                assert!(p.summary.completed_requests > 0, "{rel} completed nothing");
                let backend = p.json["servesim"]["deployment"]["backend"].as_str().unwrap();
                assert_eq!(backend, e, "{id}.{e}: {rel} runs backend {backend}");
            }
        }
    }
}

#[test]
fn readme_table_matches_features_toml() {
    let path = repo_root().join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let table = servesim_tests::features_markdown(&features());
    if std::env::var_os("SERVESIM_BLESS").is_some() {
        let (begin, end) = ("<!-- features:begin -->\n", "<!-- features:end -->");
        let (Some(a), Some(b)) = (readme.find(begin), readme.find(end)) else {
            panic!("README lacks the features markers")
        };
        let updated = format!("{}{begin}{table}{}", &readme[..a], &readme[b..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert!(readme.contains(&table), "README.md's feature table is out of date; regenerate it:\n\n{table}");
}

/// The Features page's data: features.toml as JSON, in file order (what the page embeds).
fn page_json(f: &toml::Table) -> String {
    let entries: Vec<serde_json::Value> = f["feature"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let mut engines = serde_json::Map::new();
            for engine in ENGINES {
                let x = &e[engine];
                engines.insert(
                    engine.to_string(),
                    serde_json::json!({
                        "status": x["status"].as_str().unwrap(),
                        "note": x.get("note").and_then(|n| n.as_str()).unwrap_or(""),
                        "scenarios": x.get("scenarios").and_then(|s| s.as_array()).map_or(Vec::new(), |a| {
                            a.iter().map(|s| s.as_str().unwrap().to_string()).collect::<Vec<_>>()
                        }),
                    }),
                );
            }
            serde_json::json!({
                "id": e["id"].as_str().unwrap(),
                "category": e["category"].as_str().unwrap(),
                "technique": e["technique"].as_str().unwrap(),
                "engines": engines,
            })
        })
        .collect();
    serde_json::to_string_pretty(&entries).unwrap() + "\n"
}

#[test]
fn the_pages_features_json_matches_features_toml() {
    let path = repo_root().join("web/features.json");
    let want = page_json(&features());
    if std::env::var_os("SERVESIM_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == want, "web/features.json is out of date; regenerate it with SERVESIM_BLESS=1");
}
