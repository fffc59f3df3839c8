//! The Compare page: two scenarios run side by side (a worker each), a delta table of their
//! headline figures and overlaid distributions.

use std::rc::Rc;

use leptos::prelude::*;
use serde_json::{json, Value};

use crate::app::fmt_num;
use crate::charts::{self, Figure};
use crate::client::{SimWorker, WORKER_URL};
use crate::protocol::{FromWorker, ToWorker};
use crate::requests::Row;

/// Figures compared: (prediction.json key, label, decimals).
pub const ROWS: [(&str, &str, usize); 12] = [
    ("mean_ttft_ms", "mean TTFT (ms)", 2),
    ("p90_ttft_ms", "p90 TTFT (ms)", 2),
    ("p99_ttft_ms", "p99 TTFT (ms)", 2),
    ("mean_tpot_ms", "mean TPOT (ms)", 2),
    ("p90_tpot_ms", "p90 TPOT (ms)", 2),
    ("mean_itl_ms", "mean ITL (ms)", 2),
    ("mean_e2e_latency_ms", "mean E2E (ms)", 1),
    ("request_throughput_rps", "requests/s", 3),
    ("output_throughput_tok_s", "output tok/s", 1),
    ("goodput_request_throughput_rps", "goodput req/s", 3),
    ("prefix_cache_reused_ratio", "prefix reuse", 3),
    ("gpu_hours", "GPU-hours", 4),
];

/// One row of the delta table: label, A, B, B − A and the change in percent of A.
#[derive(Clone, Debug, PartialEq)]
pub struct Delta {
    /// What is compared.
    pub label: &'static str,
    /// Scenario A's figure.
    pub a: String,
    /// Scenario B's figure.
    pub b: String,
    /// B − A.
    pub delta: String,
    /// (B − A) / A in percent (`–` when A is zero or a figure is missing).
    pub pct: String,
}

/// The delta table of two prediction.json documents.
#[must_use]
pub fn deltas(a: &Value, b: &Value) -> Vec<Delta> {
    ROWS.iter()
        .map(|(k, label, d)| {
            let (x, y) = (a[*k].as_f64(), b[*k].as_f64());
            let (delta, pct) = match (x, y) {
                (Some(x), Some(y)) => (
                    format!("{:+.*}", *d, y - x),
                    if x == 0.0 { "–".to_string() } else { format!("{:+.1}%", 100.0 * (y - x) / x) },
                ),
                _ => ("–".to_string(), "–".to_string()),
            };
            Delta { label, a: fmt_num(&a[*k], *d), b: fmt_num(&b[*k], *d), delta, pct }
        })
        .collect()
}

/// Two CDFs of a per-request figure on one plot, A in blue and B in orange.
#[must_use]
pub fn overlay(a: &[Row], b: &[Row], key: &str, title: &str, unit: &str) -> Figure {
    let mut fa = charts::cdf(a, key, title, unit);
    let fb = charts::cdf(b, key, title, unit);
    let mut trace_b = fb.data[0].clone();
    fa.data[0]["name"] = json!("A");
    trace_b["name"] = json!("B");
    trace_b["line"]["color"] = json!("#f97316");
    if let Some(arr) = fa.data.as_array_mut() {
        arr.push(trace_b);
    }
    fa.layout["showlegend"] = json!(true);
    fa
}

/// One side of the comparison.
#[derive(Clone, Debug, PartialEq)]
enum Side {
    Idle,
    Running,
    Done { prediction: Value, requests: Rc<Vec<Row>> },
    Failed(String),
}

/// The page. `initial` is scenario A (B starts as a copy with a different load); `files` are
/// the Data page's dropped files, given to both workers.
#[component]
pub fn ComparePage(initial: String, files: RwSignal<Vec<crate::data::Dropped>>) -> impl IntoView {
    let b_text = initial.replacen("concurrency: 10", "concurrency: 20", 1);
    let texts = [RwSignal::new(initial), RwSignal::new(b_text)];
    let sides = [RwSignal::new_local(Side::Idle), RwSignal::new_local(Side::Idle)];
    let workers: StoredValue<[Option<SimWorker>; 2], LocalStorage> = StoredValue::new_local([None, None]);
    let run_id = StoredValue::new(0u32);

    let run = move || {
        let id = run_id.get_value() + 1;
        run_id.set_value(id);
        for k in 0..2 {
            let side = sides[k];
            let on_event: Rc<dyn Fn(FromWorker)> = Rc::new(move |msg| match msg {
                FromWorker::Done { id: i, prediction, requests, .. } if i == run_id.get_value() => {
                    let p = serde_json::from_str(&prediction).unwrap_or(Value::Null);
                    let rows = crate::requests::Records::parse(&requests).rows;
                    side.set(Side::Done { prediction: p, requests: Rc::new(rows) });
                }
                FromWorker::Failed { id: i, message, .. } if i == run_id.get_value() || i == 0 => {
                    side.set(Side::Failed(message));
                }
                _ => {}
            });
            workers.update_value(|w| {
                if let Some(old) = w[k].take() {
                    old.terminate();
                }
                match SimWorker::spawn(WORKER_URL, on_event) {
                    Ok(new) => {
                        crate::data::sync_files(&new, &files.get_untracked(), &mut Vec::new());
                        let name = if k == 0 { "scenario A" } else { "scenario B" };
                        new.send(&ToWorker::Run {
                            id,
                            config: texts[k].get_untracked(),
                            source: name.into(),
                        });
                        w[k] = Some(new);
                        side.set(Side::Running);
                    }
                    Err(e) => side.set(Side::Failed(e)),
                }
            });
        }
    };
    let running = move || sides.iter().any(|s| s.with(|s| *s == Side::Running));
    let both = move || match (sides[0].get(), sides[1].get()) {
        (Side::Done { prediction: pa, requests: ra }, Side::Done { prediction: pb, requests: rb }) => {
            Some((pa, ra, pb, rb))
        }
        _ => None,
    };
    let status = move |k: usize| {
        move || match sides[k].get() {
            Side::Idle => String::new(),
            Side::Running => "running…".to_string(),
            // A side whose requests were refused says so beside its count.
            Side::Done { prediction, .. } => {
                match servesim_scenario::report::rejection_line(&prediction["servesim"]) {
                    Some(why) => format!("done: {} requests; {why}", prediction["num_requests"]),
                    None => format!("done: {} requests", prediction["num_requests"]),
                }
            }
            Side::Failed(m) => format!("failed: {m}"),
        }
    };

    Effect::new(move |_| {
        if let Some((_, ra, _, rb)) = both() {
            let figs = [
                ("cmp-ttft-chart", overlay(&ra, &rb, "ttft_ms", "TTFT distribution", "TTFT (ms)")),
                (
                    "cmp-itl-chart",
                    overlay(&ra, &rb, "itl_ms", "Mean inter-token latency per request", "ITL (ms)"),
                ),
                ("cmp-e2e-chart", overlay(&ra, &rb, "e2e_latency_ms", "End-to-end latency", "E2E (ms)")),
            ];
            crate::plotly::when_ready(move || {
                for (id, fig) in figs {
                    let ok = crate::plotly::draw(id, &fig).is_ok();
                    if let Some(el) = document().get_element_by_id(id) {
                        let _ = el.set_attribute("data-status", if ok { "rendered" } else { "failed" });
                    }
                }
            });
        }
    });

    let editor = move |k: usize| {
        let (name, id) = if k == 0 { ("A", "compare-a") } else { ("B", "compare-b") };
        let text = texts[k];
        view! {
            <section class="panel editor">
                <h2>{format!("Scenario {name}")}</h2>
                <textarea id=id aria-label=format!("Scenario {name} YAML") spellcheck="false"
                    prop:value=move || text.get() on:input=move |ev| text.set(event_target_value(&ev))></textarea>
                <p id=format!("{id}-status") class="status" aria-live="polite">{status(k)}</p>
            </section>
        }
    };

    view! {
        <main class="layout compare">
            {editor(0)}
            {editor(1)}
        </main>
        <div class="single">
            <div class="actions">
                <button id="compare-run" on:click=move |_| run() disabled=running>"Run both"</button>
            </div>
            <section class="panel">
                <h2>"A vs B"</h2>
                <table id="compare-table">
                    <thead><tr><th></th><th>"A"</th><th>"B"</th><th>"B − A"</th><th>"change"</th></tr></thead>
                    <tbody>
                        {move || both().map(|(pa, _, pb, _)| deltas(&pa, &pb).into_iter().map(|d| view! {
                            <tr><th scope="row">{d.label}</th><td>{d.a}</td><td>{d.b}</td><td>{d.delta}</td><td>{d.pct}</td></tr>
                        }).collect_view())}
                    </tbody>
                </table>
                <div class="chart-grid">
                    <div id="cmp-ttft-chart" class="chart small" data-status="empty"></div>
                    <div id="cmp-itl-chart" class="chart small" data-status="empty"></div>
                    <div id="cmp-e2e-chart" class="chart small" data-status="empty"></div>
                </div>
            </section>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_show_both_figures_and_the_change() {
        let a = json!({"mean_ttft_ms": 100.0, "gpu_hours": 0.0});
        let b = json!({"mean_ttft_ms": 150.0, "gpu_hours": 1.0});
        let d = deltas(&a, &b);
        assert_eq!(
            d[0],
            Delta {
                label: "mean TTFT (ms)",
                a: "100.00".into(),
                b: "150.00".into(),
                delta: "+50.00".into(),
                pct: "+50.0%".into()
            }
        );
        let g = d.iter().find(|x| x.label == "GPU-hours").unwrap();
        assert_eq!(g.pct, "–");
        assert_eq!(d[1].delta, "–", "missing figures are not invented");
    }

    #[test]
    fn overlay_puts_b_over_a() {
        let a = "{\"ttft_ms\": 1.0}\n";
        let b = "{\"ttft_ms\": 2.0}\n{\"ttft_ms\": 3.0}\n";
        let rows = |t| crate::requests::Records::parse(t).rows;
        let f = overlay(&rows(a), &rows(b), "ttft_ms", "TTFT", "ms");
        assert_eq!(f.data[0]["name"], "A");
        assert_eq!(f.data[1]["name"], "B");
        assert_eq!(f.data[1]["x"], json!([2.0, 3.0]));
    }
}
