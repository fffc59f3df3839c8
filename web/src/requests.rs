//! The per-request table under Predict: requests.jsonl sorted and filtered in the page, with
//! downloads in the CLI's formats (requests.jsonl, a CSV of the same records, the scenario).
//! A long run's page holds an even sample of its records; the downloads come whole from the
//! worker that ran it.

use std::sync::Arc;

use leptos::prelude::*;

use crate::client::data_uri;
use serde::Deserialize;

/// Columns shown: (record key, heading, decimals).
pub const COLUMNS: [(&str, &str, usize); 10] = [
    ("uuid", "request", 0),
    ("arrival_time_ms", "arrival ms", 1),
    ("ttft_ms", "TTFT ms", 2),
    ("itl_ms", "ITL ms", 2),
    ("e2e_latency_ms", "E2E ms", 1),
    ("input_length", "input", 0),
    ("output_length", "output", 0),
    ("reused_input_tokens", "cached", 0),
    ("num_preemptions", "preempted", 0),
    ("terminal_status", "status", 0),
];

/// What the table calls a warmup primer (`"warmup": true` in requests.jsonl).
pub const WARMUP: &str = "warmup primer";

/// Rows shown at once; the rest are a sort or a filter away (and in the downloads).
pub const SHOWN: usize = 100;

/// Which records of a run the page holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Records in the run.
    pub total: u64,
    /// Every how many the page holds one (1: all).
    pub every: u64,
}

/// Records a requests file saved from the page may hold (about 1.5 GB of requests.jsonl):
/// Chromium cancels a download past its Blob storage quota (a 7.6 GB requests.jsonl of 10
/// million requests was cancelled; 765 MB of a million saves in 7-10 s).
pub const MAX_FILE_RECORDS: u64 = 2_000_000;

impl Sample {
    /// Why the page will not save the run's requests files, if it will not.
    #[must_use]
    pub fn too_large(&self) -> Option<String> {
        (self.total > MAX_FILE_RECORDS).then(|| {
            format!(
                "{} requests are more than a browser can save ({MAX_FILE_RECORDS} at most): `servesim predict --capture-per-request` writes their requests.jsonl.",
                self.total
            )
        })
    }

    /// What the table shows of the run, when it is a sample.
    #[must_use]
    pub fn note(&self) -> Option<String> {
        (self.every > 1).then(|| {
            let downloads = if self.too_large().is_some() { "" } else { "; the downloads hold all of them" };
            format!(
                "A sample: every {} of {} requests by arrival. The figures above count all of them{downloads}.",
                ordinal(self.every),
                self.total
            )
        })
    }
}

/// `2nd`, `3rd`, `11th`, `21st`...
fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// One request of requests.jsonl: what the table shows and the charts draw (a few hundred
/// bytes, where the whole record as a JSON object took about 4 KB).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Row {
    /// Request id.
    pub uuid: String,
    /// Session, if any.
    pub session_id: Option<String>,
    /// The request's name in its trace (agentic traces), if any.
    pub request_id: Option<String>,
    /// A warmup primer sent before an agentic snapshot's replay, not measured.
    pub warmup: bool,
    /// `completed`, `rejected` or `canceled`.
    pub terminal_status: String,
    /// Arrival (ms from the start).
    pub arrival_time_ms: Option<f64>,
    /// Time to first token.
    pub ttft_ms: Option<f64>,
    /// Mean inter-token latency.
    pub itl_ms: Option<f64>,
    /// End-to-end latency.
    pub e2e_latency_ms: Option<f64>,
    /// Prompt tokens.
    pub input_length: Option<f64>,
    /// Output tokens generated.
    pub output_length: Option<f64>,
    /// Prompt tokens served from the prefix cache.
    pub reused_input_tokens: Option<f64>,
    /// Times preempted.
    pub num_preemptions: Option<f64>,
}

/// A cell of a [`Row`] by its requests.jsonl key.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cell<'a> {
    /// A number (`None`: null or absent).
    Num(Option<f64>),
    /// Text (`None`: null or absent).
    Text(Option<&'a str>),
}

impl Row {
    /// The cell under `key` (`Num(None)` for a key the page does not keep).
    #[must_use]
    pub fn get(&self, key: &str) -> Cell<'_> {
        match key {
            "uuid" => Cell::Text(Some(&self.uuid)),
            "session_id" => Cell::Text(self.session_id.as_deref()),
            // A primer has no name in the trace; the page names what it is.
            "request_id" if self.warmup => Cell::Text(Some(self.request_id.as_deref().unwrap_or(WARMUP))),
            "request_id" => Cell::Text(self.request_id.as_deref()),
            "terminal_status" => Cell::Text(Some(&self.terminal_status)),
            _ => Cell::Num(self.num(key)),
        }
    }

    /// The number under `key`.
    #[must_use]
    pub fn num(&self, key: &str) -> Option<f64> {
        match key {
            "arrival_time_ms" => self.arrival_time_ms,
            "ttft_ms" => self.ttft_ms,
            "itl_ms" => self.itl_ms,
            "e2e_latency_ms" => self.e2e_latency_ms,
            "input_length" => self.input_length,
            "output_length" => self.output_length,
            "reused_input_tokens" => self.reused_input_tokens,
            "num_preemptions" => self.num_preemptions,
            _ => None,
        }
    }
}

/// Parsed requests.jsonl.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Records {
    /// One row per request.
    pub rows: Vec<Row>,
}

impl Records {
    /// Reads requests.jsonl (lines that are not request records are skipped).
    #[must_use]
    pub fn parse(jsonl: &str) -> Self {
        Records { rows: jsonl.lines().filter_map(|l| serde_json::from_str::<Row>(l).ok()).collect() }
    }

    /// Row indices matching `filter` (a substring of the request id, status, session or name in
    /// the trace, any case), sorted by `key` (numbers numerically, nulls last), at most
    /// `limit`; and how many matched.
    #[must_use]
    pub fn select(&self, key: &str, descending: bool, filter: &str, limit: usize) -> (Vec<usize>, usize) {
        let f = filter.trim().to_ascii_lowercase();
        let mut idx: Vec<usize> = (0..self.rows.len())
            .filter(|i| {
                let r = &self.rows[*i];
                f.is_empty()
                    || [
                        Some(r.uuid.as_str()),
                        Some(r.terminal_status.as_str()),
                        r.session_id.as_deref(),
                        r.request_id.as_deref(),
                        r.warmup.then_some(WARMUP),
                    ]
                    .into_iter()
                    .flatten()
                    .any(|s| s.to_ascii_lowercase().contains(&f))
            })
            .collect();
        let n = idx.len();
        idx.sort_by(|a, b| {
            let (x, y) = (self.rows[*a].get(key), self.rows[*b].get(key));
            let (ord, has_null) = match (x, y) {
                (Cell::Num(Some(p)), Cell::Num(Some(q))) => (p.total_cmp(&q), false),
                (Cell::Num(Some(_)), _) => (std::cmp::Ordering::Less, true),
                (_, Cell::Num(Some(_))) => (std::cmp::Ordering::Greater, true),
                (Cell::Text(p), Cell::Text(q)) => {
                    (p.unwrap_or("").cmp(q.unwrap_or("")), p.is_none() || q.is_none())
                }
                _ => (std::cmp::Ordering::Equal, true),
            };
            let ord = if descending && !has_null { ord.reverse() } else { ord };
            ord.then(a.cmp(b))
        });
        idx.truncate(limit);
        (idx, n)
    }
}

/// A cell as the table shows it: numbers with `decimals` (as they are when 0), `–` for null.
#[must_use]
pub fn cell_text(c: Cell<'_>, decimals: usize) -> String {
    match c {
        Cell::Num(Some(x)) if decimals > 0 => format!("{x:.decimals$}"),
        Cell::Num(Some(x)) => format!("{x}"),
        Cell::Text(Some(s)) => s.to_string(),
        Cell::Num(None) | Cell::Text(None) => "–".to_string(),
    }
}

/// The table. `records` are the finished run's requests.jsonl records (or a sample of them)
/// and which records they are; `scenario` its config text; `fetch` asks for the whole file as
/// `jsonl` or `csv`.
#[component]
pub fn RequestTable(
    records: Signal<Option<(Arc<Records>, Sample)>>,
    scenario: Signal<String>,
    fetch: Callback<&'static str>,
) -> impl IntoView {
    let note = move || records.with(|j| j.as_ref().and_then(|(_, s)| s.note()));
    // Why the run's requests files cannot be saved from the page (a run too large for it).
    let refused = move || records.with(|j| j.as_ref().and_then(|(_, s)| s.too_large()));
    let records = Memo::new(move |_| records.get().map(|(r, _)| r));
    let sort = RwSignal::new(("arrival_time_ms", false));
    let filter = RwSignal::new(String::new());
    let selected = move || {
        records.with(|r| {
            r.as_ref().map(|r| {
                let (key, desc) = sort.get();
                let (idx, n) = r.select(key, desc, &filter.get(), SHOWN);
                (idx.into_iter().map(|i| r.rows[i].clone()).collect::<Vec<_>>(), n)
            })
        })
    };
    let header = move |(key, label, _): (&'static str, &'static str, usize)| {
        let arrow = move || match sort.get() {
            (k, false) if k == key => " ▲",
            (k, true) if k == key => " ▼",
            _ => "",
        };
        view! {
            <th>
                <button class="sort" data-key=key on:click=move |_| sort.update(|s| *s = (key, s.0 == key && !s.1))>
                    {label}{arrow}
                </button>
            </th>
        }
    };
    view! {
        <Show when=move || records.with(Option::is_some)>
            <h3>"Requests"</h3>
            <div class="table-tools">
                <input id="request-filter" type="search" placeholder="filter by request id or status" aria-label="Filter requests"
                    prop:value=move || filter.get() on:input=move |ev| filter.set(event_target_value(&ev)) />
                <span id="request-count" class="hint">{move || selected().map_or(String::new(), |(rows, n)| format!("{} of {n} shown", rows.len()))}</span>
                <button id="download-requests" class="link" disabled=move || refused().is_some() on:click=move |_| fetch.run("jsonl")>"requests.jsonl"</button>
                <button id="download-requests-csv" class="link" disabled=move || refused().is_some() on:click=move |_| fetch.run("csv")>"requests.csv"</button>
                <a id="download-scenario" download="scenario.yaml" href=move || data_uri("application/yaml", &scenario.get())>"scenario.yaml"</a>
            </div>
            <Show when=move || note().is_some()>
                <p id="request-sample" class="hint">{note}</p>
            </Show>
            <Show when=move || refused().is_some()>
                <p id="request-file-refused" class="hint">{refused}</p>
            </Show>
            <div class="table-wrap requests">
                <table id="request-table">
                    <thead><tr>{COLUMNS.into_iter().map(header).collect_view()}</tr></thead>
                    <tbody>
                        {move || selected().map(|(rows, _)| rows.into_iter().map(|r| view! {
                            <tr>{COLUMNS.iter().map(|(k, _, d)| view! { <td>{cell_text(r.get(k), *d)}</td> }).collect_view()}</tr>
                        }).collect_view())}
                    </tbody>
                </table>
            </div>
        </Show>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSONL: &str = "{\"uuid\": \"r-2\", \"ttft_ms\": 30.5, \"terminal_status\": \"completed\", \"note\": \"a,b\"}\n{\"uuid\": \"r-1\", \"ttft_ms\": null, \"terminal_status\": \"rejected\", \"note\": null}\nnot json\n[1, 2]\n{\"uuid\": \"r-3\", \"ttft_ms\": 4.0, \"terminal_status\": \"completed\", \"session_id\": \"session_7\", \"request_id\": \"play3/sub2.0/t1\", \"input_length\": 512}\n";

    #[test]
    fn records_sort_numerically_with_nulls_last_and_filter_by_text() {
        let r = Records::parse(JSONL);
        assert_eq!(r.rows.len(), 3, "the line that is no record is skipped");
        assert_eq!(r.rows[0].get("note"), Cell::Num(None), "keys the page does not keep read as null");
        assert_eq!(r.select("ttft_ms", false, "", 10), (vec![2, 0, 1], 3));
        assert_eq!(r.select("ttft_ms", true, "", 10), (vec![0, 2, 1], 3));
        assert_eq!(r.select("ttft_ms", false, "REJECT", 10), (vec![1], 1));
        assert_eq!(r.select("uuid", false, "", 2), (vec![1, 0], 3));
        assert_eq!(r.select("ttft_ms", false, "SESSION_7", 10), (vec![2], 1));
        assert_eq!(r.select("ttft_ms", false, "SUB2.0", 10), (vec![2], 1), "by the name in the trace");
        assert_eq!(cell_text(r.rows[2].get("input_length"), 0), "512");
        assert_eq!(cell_text(r.rows[0].get("ttft_ms"), 2), "30.50");
        assert_eq!(cell_text(r.rows[1].get("ttft_ms"), 2), "–");
        assert_eq!(cell_text(r.rows[1].get("uuid"), 0), "r-1");
        // A warmup primer is named for what it is, and found by it.
        let w = Records::parse("{\"uuid\": \"r-0\", \"terminal_status\": \"completed\", \"warmup\": true}\n");
        assert_eq!(w.rows[0].get("request_id"), Cell::Text(Some(WARMUP)));
        assert_eq!(w.select("uuid", false, "primer", 10), (vec![0], 1));
        assert_eq!(r.rows[2].get("request_id"), Cell::Text(Some("play3/sub2.0/t1")));
    }

    #[test]
    fn a_sample_says_which_records_it_holds() {
        assert_eq!(Sample { total: 100, every: 1 }.note(), None);
        assert_eq!(Sample { total: MAX_FILE_RECORDS, every: 20 }.too_large(), None);
        let big = Sample { total: 10_000_000, every: 100 }.too_large().unwrap_or_default();
        assert!(big.starts_with("10000000 requests are more than a browser can save"), "{big}");
        let n = Sample { total: 1_000_000, every: 10 }.note().unwrap_or_default();
        assert!(n.starts_with("A sample: every 10th of 1000000 requests"), "{n}");
        assert!(n.ends_with("the downloads hold all of them."), "{n}");
        let n = Sample { total: 10_000_000, every: 100 }.note().unwrap_or_default();
        assert!(n.ends_with("The figures above count all of them."), "{n}");
        assert_eq!(
            [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111].map(ordinal).join(" "),
            "1st 2nd 3rd 4th 11th 12th 13th 21st 22nd 101st 111th"
        );
    }
}
