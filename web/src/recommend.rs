//! The Recommend page: a search spec runs on a pool of Web Workers. Worker 0 also coordinates
//! (plans stages, ranks results, writes the CLI's recommendation files); every worker
//! evaluates candidates, one at a time, as the page hands them out. The Pareto plot and the
//! table fill in as results arrive; any row opens in Predict.

use std::collections::{BTreeMap, VecDeque};

use leptos::prelude::*;
use serde_json::Value;

use crate::app::{fmt_num, ProgressBar};
use crate::charts;
use crate::client::{data_uri, now_ms, pool_size, Pool, PoolRun};
use crate::protocol::{FromWorker, ToWorker};
use servesim_scenario::recommend::Fidelity;

/// Search specs offered on the page: (name, spec).
pub const PRESETS: [(&str, &str); 2] = [
    (
        "Qwen3-32B-FP8 on H200: engine × worker shape × load (279 candidates, staged)",
        include_str!("../../data/recommend/qwen3_32b_h200_staged.yaml"),
    ),
    (
        "Qwen3-32B-FP8 on H200: engine × TP × concurrency, Pareto with cost (48 candidates)",
        include_str!("../../data/recommend/qwen3_32b_h200.yaml"),
    ),
];

/// Least time between redraws of the Pareto plot (ms).
const REDRAW_MS: u64 = 250;

/// Rows in the live table while the search runs.
const LIVE_ROWS: usize = 10;

/// Hands out the candidates of one stage to idle workers and gathers the results. Static
/// estimates take milliseconds, so they go out in chunks (a worker then never waits on the
/// page between candidates); replays go one at a time, so the slowest finishes last alone.
#[derive(Clone, Debug, Default)]
pub struct Dispatch {
    queue: VecDeque<usize>,
    fidelity: String,
    chunk: usize,
    outstanding: Vec<usize>,
    results: Vec<String>,
    expected: usize,
}

/// Chunks per worker in a static stage: enough to balance uneven candidates.
const CHUNKS_PER_WORKER: usize = 4;

/// What to do after a result arrived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Send this worker these candidates.
    Send(usize, Vec<usize>),
    /// Results are still out.
    Wait,
    /// The stage is complete: submit these results to the coordinator.
    Submit(Vec<String>),
}

impl Dispatch {
    /// A dispatcher over `workers` idle workers.
    #[must_use]
    pub fn new(workers: usize) -> Self {
        Dispatch { outstanding: vec![0; workers.max(1)], ..Dispatch::default() }
    }

    /// The stage's fidelity (`static`, `short`, `full`).
    #[must_use]
    pub fn fidelity(&self) -> &str {
        &self.fidelity
    }

    fn take(&mut self, worker: usize) -> Option<Vec<usize>> {
        let n = self.chunk.min(self.queue.len());
        if n == 0 {
            return None;
        }
        let batch: Vec<usize> = self.queue.drain(..n).collect();
        if let Some(o) = self.outstanding.get_mut(worker) {
            *o = batch.len();
        }
        Some(batch)
    }

    /// Starts a stage: the first batches to send, per worker.
    pub fn stage(&mut self, indices: &[usize], fidelity: &str) -> Vec<(usize, Vec<usize>)> {
        self.queue = indices.iter().copied().collect();
        self.fidelity = fidelity.to_string();
        self.results.clear();
        self.expected = indices.len();
        let workers = self.outstanding.len();
        self.chunk =
            if fidelity == "static" { indices.len().div_ceil(workers * CHUNKS_PER_WORKER).max(1) } else { 1 };
        (0..workers).filter_map(|w| self.take(w).map(|b| (w, b))).collect()
    }

    /// A result from `worker`.
    pub fn result(&mut self, worker: usize, wire: String) -> Next {
        self.results.push(wire);
        if self.results.len() >= self.expected {
            return Next::Submit(std::mem::take(&mut self.results));
        }
        let left = self.outstanding.get_mut(worker).map_or(0, |o| {
            *o = o.saturating_sub(1);
            *o
        });
        if left == 0 {
            if let Some(b) = self.take(worker) {
                return Next::Send(worker, b);
            }
        }
        Next::Wait
    }
}

/// What the page knows of a search.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Board {
    /// Stage fidelities in order.
    pub plan: Vec<String>,
    /// The current stage (0-based).
    pub stage: usize,
    /// Candidates in the search.
    pub candidates: usize,
    /// Candidates in the current stage.
    pub stage_total: usize,
    /// Of which evaluated.
    pub stage_done: usize,
    /// Every candidate's latest evaluation (`Candidate::to_wire` plus `label`), by index.
    pub latest: BTreeMap<usize, Value>,
    /// The finished recommendation.json.
    pub recommendation: Option<Value>,
    /// recommendation.json text.
    pub recommendation_text: String,
    /// recommendation.csv text.
    pub csv: String,
}

impl Board {
    /// Fraction of the search done, counting each stage equally.
    #[must_use]
    pub fn progress(&self) -> f64 {
        if self.recommendation.is_some() {
            return 1.0;
        }
        if self.plan.is_empty() {
            return 0.0;
        }
        #[allow(clippy::cast_precision_loss)]
        let within =
            if self.stage_total == 0 { 0.0 } else { self.stage_done as f64 / self.stage_total as f64 };
        #[allow(clippy::cast_precision_loss)]
        let p = (self.stage as f64 + within) / self.plan.len() as f64;
        p
    }

    /// The Pareto front of fully replayed feasible candidates (indices).
    #[must_use]
    pub fn front(&self) -> Vec<usize> {
        let full: Vec<(&usize, &Value)> = self
            .latest
            .iter()
            .filter(|(_, c)| c["status"] == "feasible" && c["fidelity"] == "full")
            .collect();
        let pts: Vec<(f64, f64)> = full
            .iter()
            .map(|(_, c)| {
                (
                    c["objectives"]["throughput_per_gpu"].as_f64().unwrap_or(f64::NAN),
                    c["objectives"]["throughput_per_user"].as_f64().unwrap_or(f64::NAN),
                )
            })
            .collect();
        servesim_scenario::recommend::pareto_front(&pts).into_iter().map(|k| *full[k].0).collect()
    }

    /// The table: the recommendation's ranked view once finished, else the best so far by
    /// score at the latest stage.
    #[must_use]
    pub fn rows(&self) -> Vec<usize> {
        if let Some(rec) = &self.recommendation {
            let views = &rec["views"];
            let ids = views["top_n"].as_array().or_else(|| views["pareto_front"].as_array());
            return ids
                .into_iter()
                .flatten()
                .filter_map(|id| id.as_str()?.strip_prefix("candidate-")?.parse().ok())
                .collect();
        }
        let mut feasible: Vec<(&usize, &Value)> =
            self.latest.iter().filter(|(_, c)| c["status"] == "feasible").collect();
        feasible.sort_by(|a, b| {
            let s = |c: &Value| c["score"].as_f64().unwrap_or(f64::NEG_INFINITY);
            s(b.1).total_cmp(&s(a.1)).then(a.0.cmp(b.0))
        });
        feasible.into_iter().take(LIVE_ROWS).map(|(i, _)| *i).collect()
    }
}

/// Where a search stands.
#[derive(Clone, Debug, PartialEq)]
enum Phase {
    Idle,
    Running,
    Done { wall_ms: f64, workers: usize },
    Failed(String),
    Cancelled,
}

/// The Recommend page. `open` puts a candidate's config into Predict and runs it.
#[component]
pub fn RecommendPage(open: Callback<String>) -> impl IntoView {
    let spec = RwSignal::new(PRESETS[0].1.to_string());
    let phase = RwSignal::new(Phase::Idle);
    let board = RwSignal::new(Board::default());
    let pool = PoolRun::default();
    let dispatch = StoredValue::new(Dispatch::default());
    let started = StoredValue::new(0.0f64);
    let workers = StoredValue::new(1usize);

    let send = move |w: usize, msg: &ToWorker| pool.with(|p| p.send(w, msg));

    let on_event = move |k: usize, msg: FromWorker| {
        if let Some(message) = pool.failure(&msg) {
            return phase.set(Phase::Failed(message));
        }
        let current = pool.current();
        match msg {
            FromWorker::Stage { id, stage, plan, candidates, indices, fidelity } if id == current => {
                board.update(|b| {
                    b.plan = plan;
                    b.stage = stage;
                    b.candidates = candidates;
                    b.stage_total = indices.len();
                    b.stage_done = 0;
                });
                let text = spec.get_untracked();
                let jobs = dispatch.try_update_value(|d| d.stage(&indices, &fidelity)).unwrap_or_default();
                for (w, batch) in jobs {
                    let msg = ToWorker::Evaluate {
                        id,
                        spec: text.clone(),
                        source: "spec".into(),
                        indices: batch,
                        fidelity: fidelity.clone(),
                    };
                    send(w, &msg);
                }
            }
            FromWorker::Evaluated { id, candidate } if id == current => {
                if let Ok(v) = serde_json::from_str::<Value>(&candidate) {
                    if let Some(i) = v["index"].as_u64().and_then(|i| usize::try_from(i).ok()) {
                        board.update(|b| {
                            b.latest.insert(i, v);
                            b.stage_done += 1;
                        });
                    }
                }
                let next = dispatch.try_update_value(|d| d.result(k, candidate)).unwrap_or(Next::Wait);
                match next {
                    Next::Send(w, indices) => {
                        let fidelity = dispatch.with_value(|d| d.fidelity().to_string());
                        let msg = ToWorker::Evaluate {
                            id,
                            spec: spec.get_untracked(),
                            source: "spec".into(),
                            indices,
                            fidelity,
                        };
                        send(w, &msg);
                    }
                    Next::Submit(candidates) => send(0, &ToWorker::Submit { id, candidates }),
                    Next::Wait => {}
                }
            }
            FromWorker::Recommended { id, recommendation, csv, .. } if id == current => {
                let parsed = serde_json::from_str(&recommendation).ok();
                board.update(|b| {
                    b.recommendation = parsed;
                    b.recommendation_text = recommendation;
                    b.csv = csv;
                });
                phase.set(Phase::Done {
                    wall_ms: now_ms() - started.get_value(),
                    workers: workers.get_value(),
                });
                pool.stop();
            }
            _ => {}
        }
    };

    let run = move || {
        let id = pool.next();
        let n = pool_size();
        workers.set_value(n);
        match Pool::spawn(n, on_event) {
            Ok(p) => pool.set(p),
            Err(e) => {
                phase.set(Phase::Failed(e));
                return;
            }
        }
        dispatch.set_value(Dispatch::new(n));
        board.set(Board::default());
        started.set_value(now_ms());
        phase.set(Phase::Running);
        send(0, &ToWorker::Plan { id, spec: spec.get_untracked(), source: "spec".into() });
    };
    let cancel = move || {
        pool.cancel();
        phase.set(Phase::Cancelled);
    };

    let running = move || phase.with(|p| *p == Phase::Running);
    let status = move || {
        let p = phase.get();
        board.with(|b| match p {
            Phase::Idle => "Ready: pick a preset or edit the spec, then Search.".to_string(),
            Phase::Running if b.plan.is_empty() => "Planning the search…".to_string(),
            Phase::Running => format!(
                "Stage {} of {} ({}): {}/{} candidates on {} workers",
                b.stage + 1,
                b.plan.len(),
                stage_name(b.plan.get(b.stage).map_or("", String::as_str)),
                b.stage_done,
                b.stage_total,
                workers.get_value()
            ),
            Phase::Done { wall_ms, workers } => {
                let rec = b.recommendation.as_ref();
                let stages = rec
                    .and_then(|r| r["provenance"]["stages"].as_array())
                    .map(|s| {
                        s.iter()
                            .map(|st| {
                                format!("{} {}", st["evaluated"], st["evaluation"].as_str().unwrap_or(""))
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                format!(
                    "Done: {} candidates ({stages}) in {:.2} s on {workers} workers.",
                    b.candidates,
                    wall_ms / 1000.0
                )
            }
            Phase::Failed(_) => "The search failed.".to_string(),
            Phase::Cancelled => "Cancelled.".to_string(),
        })
    };
    let wall = move || match phase.get() {
        Phase::Done { wall_ms, .. } => format!("{wall_ms:.0}"),
        _ => String::new(),
    };
    let error = move || phase.with(|p| if let Phase::Failed(m) = p { Some(m.clone()) } else { None });

    // Redraw at most every REDRAW_MS however fast results arrive: the page must stay free to
    // hand out work.
    let drawing = StoredValue::new(false);
    Effect::new(move |_| {
        // Nothing to draw until a search reports (and plotly.js is not loaded before then).
        if board.with(|b| b.latest.is_empty()) || drawing.get_value() {
            return;
        }
        drawing.set_value(true);
        set_timeout(
            move || {
                drawing.set_value(false);
                let fig = board.with_untracked(|b| {
                    let cands: Vec<&Value> = b.latest.values().collect();
                    charts::pareto(&cands, &b.front())
                });
                crate::plotly::when_ready(move || draw_pareto(&fig, board, open));
            },
            std::time::Duration::from_millis(REDRAW_MS),
        );
    });

    let rows = move || {
        board.with(|b| {
            b.rows()
                .into_iter()
                .enumerate()
                .filter_map(|(rank, i)| b.latest.get(&i).map(|c| (rank + 1, c.clone())))
                .collect::<Vec<_>>()
        })
    };
    let downloads = move || {
        board.with(|b| {
            (b.recommendation.is_some())
                .then(|| (data_uri("application/json", &b.recommendation_text), data_uri("text/csv", &b.csv)))
        })
    };

    view! {
        <main class="layout">
            <section class="panel editor">
                <h2>"Search"</h2>
                <p class="hint">"servesim recommend spec: domains as {choices: [...]} or {range: ...}, an optimization block. Runs on a pool of workers in this tab."</p>
                <label class="hint" for="rec-preset">"Preset"</label>
                <select id="rec-preset" on:change=move |ev| {
                    let k: usize = event_target_value(&ev).parse().unwrap_or(0);
                    if let Some((_, text)) = PRESETS.get(k) {
                        spec.set((*text).to_string());
                    }
                }>
                    {PRESETS.iter().enumerate().map(|(k, (name, _))| view! { <option value=k.to_string()>{*name}</option> }).collect_view()}
                </select>
                <textarea
                    id="spec-yaml"
                    aria-label="Search spec YAML"
                    spellcheck="false"
                    prop:value=move || spec.get()
                    on:input=move |ev| spec.set(event_target_value(&ev))
                ></textarea>
                <div class="actions">
                    <button id="rec-run" on:click=move |_| run() disabled=running>"Search"</button>
                    <button id="rec-cancel" class="secondary" on:click=move |_| cancel() disabled=move || !running()>"Cancel"</button>
                </div>
                <ProgressBar percent=Signal::derive(move || 100.0 * board.with(Board::progress)) />
                <p id="rec-status" class="status" aria-live="polite" data-wall-ms=wall>{status}</p>
                <Show when=move || error().is_some()>
                    <pre id="rec-error" class="error" role="alert">{move || error().unwrap_or_default()}</pre>
                </Show>
            </section>
            <section class="panel results">
                <h2>"Candidates"</h2>
                <div id="pareto-chart" class="chart" data-status="empty"></div>
                <p class="hint">"Click a point or a row's Predict button to open that deployment in Predict."</p>
                <div class="table-wrap">
                    <table id="rec-table">
                        <thead><tr>
                            <th>"#"</th><th>"Candidate"</th><th>"GPUs"</th><th>"TTFT ms"</th><th>"TPOT ms"</th>
                            <th>"tok/s/GPU"</th><th>"tok/s/user"</th><th>"$/M tok"</th><th>"Evaluated by"</th><th></th>
                        </tr></thead>
                        <tbody>
                            {move || rows().into_iter().map(|(rank, c)| {
                                let yaml = config_yaml(&c).unwrap_or_default();
                                view! {
                                    <tr>
                                        <td>{rank}</td>
                                        <td>{c["label"].as_str().unwrap_or("").to_string()}</td>
                                        <td>{c["used_gpus"].to_string()}</td>
                                        <td>{fmt_num(&c["metrics"]["mean_ttft_ms"], 1)}</td>
                                        <td>{fmt_num(&c["metrics"]["mean_tpot_ms"], 2)}</td>
                                        <td class="tpg">{fmt_num(&c["objectives"]["throughput_per_gpu"], 1)}</td>
                                        <td>{fmt_num(&c["objectives"]["throughput_per_user"], 1)}</td>
                                        <td>{fmt_num(&c["objectives"]["cost_per_million_output_tokens_usd"], 3)}</td>
                                        <td>{stage_name(c["fidelity"].as_str().unwrap_or(""))}</td>
                                        <td><button class="secondary small open-predict" on:click=move |_| open.run(yaml.clone())>"Predict"</button></td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                </div>
                <Show when=move || downloads().is_some()>
                    <p>
                        <a id="download-recommendation" download="recommendation.json" href=move || downloads().map(|d| d.0).unwrap_or_default()>"recommendation.json"</a>
                        " · "
                        <a id="download-recommendation-csv" download="recommendation.csv" href=move || downloads().map(|d| d.1).unwrap_or_default()>"recommendation.csv"</a>
                    </p>
                    <details>
                        <summary>"recommendation.json"</summary>
                        <pre id="recommendation-json">{move || board.with(|b| b.recommendation_text.clone())}</pre>
                    </details>
                </Show>
            </section>
        </main>
    }
}

/// Draws the Pareto plot and makes its points open in Predict.
fn draw_pareto(fig: &charts::Figure, board: RwSignal<Board>, open: Callback<String>) {
    if crate::plotly::draw_marked("pareto-chart", fig) {
        crate::plotly::on_click("pareto-chart", move |index| {
            let yaml = board.with_untracked(|b| b.latest.get(&index).and_then(config_yaml));
            if let Some(y) = yaml {
                open.run(y);
            }
        });
    }
}

fn config_yaml(c: &Value) -> Option<String> {
    c["config_yaml"].as_str().map(str::to_string)
}

/// The report name of a stage key (`static` → `static estimate`).
fn stage_name(key: &str) -> &'static str {
    Fidelity::from_key(key).map_or("", Fidelity::name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_keeps_every_worker_busy_and_submits_once() {
        let mut d = Dispatch::new(2);
        // Replays go one by one.
        assert_eq!(d.stage(&[10, 11, 12], "full"), [(0, vec![10]), (1, vec![11])]);
        assert_eq!(d.result(1, "a".into()), Next::Send(1, vec![12]));
        assert_eq!(d.result(0, "b".into()), Next::Wait);
        assert_eq!(d.result(1, "c".into()), Next::Submit(vec!["a".into(), "b".into(), "c".into()]));
        // Static estimates go in chunks: 20 over 2 workers x 4 chunks = chunks of 3.
        let all: Vec<usize> = (0..20).collect();
        let first = d.stage(&all, "static");
        assert_eq!(first, [(0, vec![0, 1, 2]), (1, vec![3, 4, 5])]);
        assert_eq!(d.result(0, "x".into()), Next::Wait);
        assert_eq!(d.result(0, "x".into()), Next::Wait);
        assert_eq!(d.result(0, "x".into()), Next::Send(0, vec![6, 7, 8]));
        let mut submitted = None;
        let mut busy: Vec<(usize, usize)> = vec![(1, 3), (0, 3)];
        while let Some((w, n)) = busy.pop() {
            for _ in 0..n {
                match d.result(w, "x".into()) {
                    Next::Send(w2, b) => busy.push((w2, b.len())),
                    Next::Submit(r) => submitted = Some(r.len()),
                    Next::Wait => {}
                }
            }
        }
        assert_eq!(submitted, Some(20));
    }

    #[test]
    fn board_ranks_live_by_score_then_by_the_recommendation() {
        let mut b = Board {
            plan: vec!["static".into(), "full".into()],
            stage: 1,
            stage_total: 4,
            stage_done: 2,
            ..Board::default()
        };
        assert!((b.progress() - 0.75).abs() < 1e-12);
        for (i, score) in [(0usize, 1.0), (1, 3.0), (2, 2.0)] {
            b.latest.insert(
                i,
                serde_json::json!({"index": i, "status": "feasible", "score": score, "fidelity": "full",
                "objectives": {"throughput_per_gpu": score, "throughput_per_user": 4.0 - score}}),
            );
        }
        assert_eq!(b.rows(), [1, 2, 0]);
        assert_eq!(b.front(), [1, 2, 0]);
        b.recommendation = Some(serde_json::json!({"views": {"top_n": ["candidate-000002"]}}));
        assert_eq!(b.rows(), [2]);
        assert!((b.progress() - 1.0).abs() < 1e-12);
    }
}
