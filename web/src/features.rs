//! The Features page: the capability matrix of `features.toml` (embedded as `web/features.json`,
//! which a test keeps equal to the TOML), one row per technique, one column per engine.

use leptos::prelude::*;
use serde_json::Value;

/// features.toml as JSON, in file order.
pub const FEATURES_JSON: &str = include_str!("../features.json");

/// Engines, in column order: (key, heading).
const ENGINES: [(&str, &str); 3] = [("vllm", "vLLM"), ("sglang", "SGLang"), ("trtllm", "TensorRT-LLM")];

/// The entries grouped by category, categories in first-appearance order.
#[must_use]
pub fn by_category(entries: &[Value]) -> Vec<(String, Vec<Value>)> {
    let mut out: Vec<(String, Vec<Value>)> = Vec::new();
    for e in entries {
        let cat = e["category"].as_str().unwrap_or("Other").to_string();
        match out.iter_mut().find(|(c, _)| *c == cat) {
            Some((_, list)) => list.push(e.clone()),
            None => out.push((cat, vec![e.clone()])),
        }
    }
    out
}

/// How a status reads in the table.
#[must_use]
pub fn status_label(status: &str) -> &'static str {
    match status {
        "supported" => "supported",
        "limited" => "limited",
        "analytical" => "estimated",
        "not_supported" => "not yet",
        "na" => "—",
        _ => "?",
    }
}

/// The page.
#[component]
pub fn FeaturesPage() -> impl IntoView {
    let entries: Vec<Value> = serde_json::from_str(FEATURES_JSON).unwrap_or_default();
    let groups = by_category(&entries);
    let count = entries.len();
    view! {
        <main class="single">
            <section class="panel">
                <h2>"What servesim simulates"</h2>
                <p class="hint">
                    {format!("{count} techniques × 3 engines, from features.toml. ")}
                    "supported: a golden scenario checks a number that would change without it; limited: within the stated limits; estimated: by formula, not replayed; not yet: refused with a clear error. Open a cell for its note and scenarios."
                </p>
                <div class="table-wrap">
                    <table id="features-table">
                        <thead><tr><th>"Technique"</th>{ENGINES.iter().map(|(_, h)| view! { <th>{*h}</th> }).collect_view()}</tr></thead>
                        <tbody>
                            {groups.into_iter().map(|(cat, list)| view! {
                                <tr class="category"><th colspan="4" scope="colgroup">{cat}</th></tr>
                                {list.into_iter().map(|e| {
                                    let technique = e["technique"].as_str().unwrap_or("").to_string();
                                    view! {
                                        <tr data-feature=e["id"].as_str().unwrap_or("").to_string()>
                                            <th scope="row">{technique}</th>
                                            {ENGINES.iter().map(|(k, _)| {
                                                let x = &e["engines"][*k];
                                                let status = x["status"].as_str().unwrap_or("").to_string();
                                                let note = x["note"].as_str().unwrap_or("").to_string();
                                                let scenarios: Vec<String> = x["scenarios"].as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default();
                                                view! {
                                                    <td>
                                                        <details>
                                                            <summary><span class=format!("badge {status}")>{status_label(&status)}</span></summary>
                                                            <p class="note">{note}</p>
                                                            {(!scenarios.is_empty()).then(|| view! { <p class="note"><code>{scenarios.join(", ")}</code></p> })}
                                                        </details>
                                                    </td>
                                                }
                                            }).collect_view()}
                                        </tr>
                                    }
                                }).collect_view()}
                            }).collect_view()}
                        </tbody>
                    </table>
                </div>
            </section>
        </main>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_matrix_parses_and_groups_in_file_order() {
        let entries: Vec<Value> = serde_json::from_str(FEATURES_JSON).unwrap();
        assert!(entries.len() > 20);
        let groups = by_category(&entries);
        assert_eq!(groups[0].0, entries[0]["category"].as_str().unwrap());
        assert_eq!(groups.iter().map(|(_, l)| l.len()).sum::<usize>(), entries.len());
        for e in &entries {
            for (k, _) in ENGINES {
                assert_ne!(status_label(e["engines"][k]["status"].as_str().unwrap()), "?", "{e}");
            }
        }
    }
}
