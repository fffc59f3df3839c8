//! The page: a scenario editor, Run/Cancel, result cards and charts. State is plain signals;
//! numbers come from the worker's prediction.json, never recomputed here.

use std::rc::Rc;
use std::sync::Arc;

use leptos::prelude::*;
use serde_json::Value;

use crate::charts;
use crate::client::{SimWorker, WORKER_URL};
use crate::protocol::{FromWorker, ToWorker};

/// A progress bar (0–100 %), announced to assistive technology.
#[component]
pub fn ProgressBar(percent: Signal<f64>) -> impl IntoView {
    view! {
        <div class="progress" role="progressbar" aria-valuemin="0" aria-valuemax="100" aria-valuenow=move || format!("{:.0}", percent.get())>
            <div class="bar" style:width=move || format!("{:.1}%", percent.get())></div>
        </div>
    }
}

/// Scenarios offered on the Predict page: (name, config). The first is the default.
pub const PRESETS: [(&str, &str); 17] = [
    ("Qwen3-32B-FP8 on one H200, vLLM, 10 clients (default)", servesim_scenario::DEFAULT_SCENARIO),
    (
        "Llama-3.1-70B, 2 x TP4 on H200, vLLM, Poisson",
        include_str!("../../tests/scenarios/vllm_tp4_replicas_poisson.yaml"),
    ),
    (
        "Llama-3.1-70B, TP4 x PP2 on H200, vLLM, Poisson",
        include_str!("../../tests/scenarios/vllm_tp4_pp2_poisson.yaml"),
    ),
    ("Prefill/decode disaggregated, Qwen3-32B-FP8, vLLM", include_str!("../../tests/scenarios/pd_vllm.yaml")),
    (
        "SGLang multi-turn sessions with shared prompts (LPM)",
        include_str!("../../tests/scenarios/sglang_lpm_sessions.yaml"),
    ),
    ("Qwen3-30B-A3B MoE, EP2 on H200, vLLM", include_str!("../../tests/scenarios/moe_qwen3_30b_ep2.yaml")),
    (
        "DeepSeek-V3 (MLA), DP8 + EP8 on H200, SGLang",
        include_str!("../../tests/scenarios/mla_deepseek_dp8_ep8.yaml"),
    ),
    (
        "Long conversations offloading KV to host memory (G2), vLLM",
        include_str!("../../tests/scenarios/vllm_host_offload.yaml"),
    ),
    (
        "Autoscaling through a traffic peak (Dynamo planner), vLLM",
        include_str!("../../tests/scenarios/planner_vllm_ramp.yaml"),
    ),
    (
        "Two replicas sharing a storage KV tier (G3) behind host memory, vLLM",
        include_str!("../../tests/scenarios/vllm_g3_shared.yaml"),
    ),
    (
        "A benchmark dataset twice the KV cache, Belady eviction, vLLM",
        include_str!("../../tests/scenarios/vllm_belady_prompt_pool.yaml"),
    ),
    (
        "Hybrid model (Qwen3.5-27B, recurrent state) in multi-turn sessions, vLLM",
        include_str!("../../tests/scenarios/hybrid_qwen35_vllm_sessions.yaml"),
    ),
    (
        "Long conversations offloading evicted KV to host memory (G2), TensorRT-LLM",
        include_str!("../../tests/scenarios/trtllm_host_offload.yaml"),
    ),
    (
        "Long conversations with a hierarchical KV cache in host memory (HiCache), SGLang",
        include_str!("../../tests/scenarios/sglang_hicache.yaml"),
    ),
    (
        "Two replicas sharing HiCache's storage tier (L3), prefetched before admission, SGLang",
        include_str!("../../tests/scenarios/sglang_hicache_storage.yaml"),
    ),
    (
        "Disaggregated prefill workers keeping histories in host memory (G2), vLLM",
        include_str!("../../tests/scenarios/pd_vllm_host_offload.yaml"),
    ),
    (
        "Two replicas sharing one host KV pool (G2, cluster_shared), vLLM",
        include_str!("../../tests/scenarios/vllm_host_offload_shared.yaml"),
    ),
];

/// The Predict page's chart divs below the TTFT scatter, in order.
const PREDICT_CHARTS: [&str; 8] = [
    "offered-chart",
    "workers-chart",
    "ttft-cdf-chart",
    "itl-cdf-chart",
    "waiting-chart",
    "running-chart",
    "kv-chart",
    "tokens-chart",
];

/// Bins of the offered-load histogram.
const LOAD_BINS: usize = 60;

/// Every Predict chart of a finished run: (div id, figure). `requests` holds every `every`-th
/// record of the run.
fn predict_charts(
    prediction: &Value,
    requests: &[crate::requests::Row],
    every: u64,
) -> Vec<(&'static str, charts::Figure)> {
    let [offered, workers, ttft_cdf, itl_cdf, waiting, running, kv, tokens] = PREDICT_CHARTS;
    vec![
        ("ttft-chart", charts::ttft_by_arrival(requests)),
        (offered, charts::offered_load(requests, LOAD_BINS, every)),
        (workers, charts::fleet(prediction)),
        (ttft_cdf, charts::cdf(requests, "ttft_ms", "TTFT distribution", "TTFT (ms)")),
        (itl_cdf, charts::cdf(requests, "itl_ms", "Mean inter-token latency per request", "ITL (ms)")),
        (waiting, charts::worker_series(prediction, "waiting", "Queue depth per worker", "requests waiting")),
        (
            running,
            charts::worker_series(prediction, "running", "Running batch per worker", "requests running"),
        ),
        (kv, charts::worker_series(prediction, "kv_blocks_used", "KV blocks in use per worker", "blocks")),
        (tokens, charts::worker_series(prediction, "tokens_per_s", "Throughput per worker", "tokens/s")),
    ]
}

/// Where a run stands.
#[derive(Clone, Debug, PartialEq)]
pub enum RunState {
    /// Nothing run yet.
    Idle,
    /// A run is in progress.
    Running {
        /// Requests finished.
        finished: u64,
        /// Requests in total.
        total: u64,
    },
    /// The last run finished.
    Done(Arc<Outcome>),
    /// The last run failed (message lists every problem).
    Failed(String),
    /// The user cancelled the last run.
    Cancelled,
}

/// A finished run.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    /// prediction.json as parsed.
    pub prediction: Value,
    /// prediction.json text.
    pub prediction_text: String,
    /// requests.jsonl's records, parsed once for every chart and the table: all of them, or
    /// every `sample.every`-th of a long run.
    pub records: Arc<crate::requests::Records>,
    /// Records in the run, and every how many `records` keeps one (1: all).
    pub sample: crate::requests::Sample,
    /// Where each role's GPU time went (`servesim predict --detail time`'s lines).
    pub time: Vec<String>,
    /// Host time of the run (ms).
    pub wall_ms: f64,
}

/// Formats a prediction figure with `digits` decimals (`–` when absent).
#[must_use]
pub fn fmt_num(v: &Value, digits: usize) -> String {
    v.as_f64().map_or_else(|| "–".to_string(), |x| format!("{x:.digits$}"))
}

#[component]
fn Card(label: &'static str, id: &'static str, value: Signal<String>, unit: &'static str) -> impl IntoView {
    view! {
        <div class="card">
            <div class="card-label">{label}</div>
            <div class="card-value"><span id=id>{value}</span>" "<span class="unit">{unit}</span></div>
        </div>
    }
}

/// The page on show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    /// One scenario, replayed.
    Predict,
    /// A search over deployments.
    Recommend,
    /// The best aggregated and disaggregated deployments (`estimate --default`).
    Sweep,
    /// Two scenarios side by side.
    Compare,
    /// Measured runs replayed against a calibration file (`servesim validate`).
    Validate,
    /// Files the user dropped: traces, tables, configs.
    Data,
    /// The capability matrix.
    Features,
}

/// The application root.
#[component]
pub fn App() -> impl IntoView {
    let tab = RwSignal::new(Tab::Predict);
    let location = window().location();
    let embed = location.search().is_ok_and(|q| q.trim_start_matches('?').split('&').any(|k| k == "embed"));
    // A share link carries its scenario in the fragment; a damaged one says so and the page
    // falls back to the default scenario.
    let (initial, share_error) = match crate::share::decode(&location.hash().unwrap_or_default()) {
        Some(Ok(yaml)) => (yaml, None),
        Some(Err(e)) => (servesim_scenario::DEFAULT_SCENARIO.to_string(), Some(e)),
        None => (servesim_scenario::DEFAULT_SCENARIO.to_string(), None),
    };
    let share_error = StoredValue::new(share_error);
    let config = RwSignal::new(initial);
    let share_url = RwSignal::new(String::new());
    let state = RwSignal::new(RunState::Idle);
    // The static estimate of the current run: its JSON, or why there is none.
    let estimate: RwSignal<Option<Result<Value, String>>> = RwSignal::new(None);
    let worker: StoredValue<Option<SimWorker>, LocalStorage> = StoredValue::new_local(None);
    let run_id = StoredValue::new(0u32);
    // Files dropped on the Data page, and those the Predict worker has been given.
    let files: RwSignal<Vec<crate::data::Dropped>> = RwSignal::new(Vec::new());
    let sent: StoredValue<Vec<Arc<str>>> = StoredValue::new(Vec::new());
    // Requests files asked of the worker, oldest first, each with what has arrived of it. The
    // worker answers in order, one file's parts after another's, so a part belongs to the
    // front one.
    let files_coming: StoredValue<std::collections::VecDeque<crate::client::IncomingFile>, LocalStorage> =
        StoredValue::new_local(std::collections::VecDeque::new());

    let on_event: Rc<dyn Fn(FromWorker)> = Rc::new(move |msg: FromWorker| {
        let current = run_id.get_value();
        match msg {
            FromWorker::Ready => {}
            FromWorker::Estimate { id, estimate: e, note } if id == current => {
                let parsed = e.and_then(|t| serde_json::from_str::<Value>(&t).ok());
                estimate.set(Some(parsed.ok_or_else(|| note.unwrap_or_default())));
            }
            FromWorker::Progress { id, finished, total, .. } if id == current => {
                state.set(RunState::Running { finished, total });
            }
            FromWorker::FilePart { id, text, last } if id == current => {
                let pushed = files_coming.try_update_value(|f| f.front_mut().map(|file| file.push(&text)));
                if let Some(Some(Err(e))) = pushed {
                    leptos::logging::warn!("{e}");
                }
                if last {
                    if let Some(file) = files_coming.try_update_value(|f| f.pop_front()).flatten() {
                        if let Err(e) = file.save() {
                            leptos::logging::warn!("{e}");
                        }
                    }
                }
            }
            FromWorker::Done { id, prediction, requests, requests_total, requests_every, time, wall_ms }
                if id == current =>
            {
                let parsed = serde_json::from_str(&prediction).unwrap_or(Value::Null);
                state.set(RunState::Done(Arc::new(Outcome {
                    prediction: parsed,
                    prediction_text: prediction,
                    records: Arc::new(crate::requests::Records::parse(&requests)),
                    sample: crate::requests::Sample { total: requests_total, every: requests_every.max(1) },
                    time,
                    wall_ms,
                })));
                // When the result was on screen, since navigation (for the load benchmark).
                if let (Some(el), Some(p)) = (document().get_element_by_id("status"), window().performance())
                {
                    let _ = el.set_attribute("data-done-ms", &format!("{:.0}", p.now()));
                }
            }
            FromWorker::Failed { id, message, .. } if id == current || id == 0 => {
                // A crashed worker is discarded; the next run starts a fresh one.
                worker.update_value(|w| {
                    if let Some(w) = w.take() {
                        w.terminate();
                    }
                });
                state.set(RunState::Failed(message));
            }
            _ => {}
        }
    });

    let run = {
        let on_event = on_event.clone();
        move || {
            let id = run_id.get_value() + 1;
            run_id.set_value(id);
            estimate.set(None);
            // Files of the last run still coming are dropped with it (their parts carry its id).
            files_coming.update_value(std::collections::VecDeque::clear);
            let mut failed = None;
            worker.update_value(|w| {
                if w.is_none() {
                    match SimWorker::spawn(WORKER_URL, on_event.clone()) {
                        Ok(new) => {
                            sent.set_value(Vec::new());
                            *w = Some(new);
                        }
                        Err(e) => failed = Some(e),
                    }
                }
                if let Some(w) = w {
                    sent.update_value(|s| files.with_untracked(|f| crate::data::sync_files(w, f, s)));
                    w.send(&ToWorker::Run { id, config: config.get_untracked(), source: "scenario".into() });
                }
            });
            match failed {
                Some(e) => state.set(RunState::Failed(e)),
                None => state.set(RunState::Running { finished: 0, total: 0 }),
            }
        }
    };
    // The whole requests.jsonl or CSV of the run on screen, from the worker that ran it.
    let fetch_file = Callback::new(move |format: &'static str| {
        if !matches!(state.get_untracked(), RunState::Done(_)) {
            return;
        }
        let name = if format == "csv" { "requests.csv" } else { "requests.jsonl" };
        files_coming.update_value(|f| f.push_back(crate::client::IncomingFile::new(name)));
        worker.with_value(|w| {
            if let Some(w) = w {
                w.send(&ToWorker::RequestsFile { id: run_id.get_value(), format: format.to_string() });
            }
        });
    });
    let cancel = move || {
        worker.update_value(|w| {
            if let Some(w) = w.take() {
                w.terminate();
            }
        });
        run_id.set_value(run_id.get_value() + 1);
        files_coming.update_value(std::collections::VecDeque::clear);
        state.set(RunState::Cancelled);
    };

    // Files dropped later reach a live worker at once (a run may name them next).
    Effect::new(move |_| {
        files.with(|f| {
            worker.with_value(|w| {
                if let Some(w) = w {
                    sent.update_value(|s| crate::data::sync_files(w, f, s));
                }
            });
        });
    });

    // The form's problems and choices come from a second worker that only validates, so a
    // long run never delays them. Checks are debounced: one per pause in typing.
    let problems: RwSignal<Vec<crate::protocol::Problem>> = RwSignal::new(Vec::new());
    let models: RwSignal<Vec<String>> = RwSignal::new(Vec::new());
    let hardware: RwSignal<Vec<String>> = RwSignal::new(Vec::new());
    let checker: StoredValue<Option<SimWorker>, LocalStorage> = StoredValue::new_local(None);
    let checker_sent: StoredValue<Vec<Arc<str>>> = StoredValue::new(Vec::new());
    let check_id = StoredValue::new(0u32);
    let on_check: Rc<dyn Fn(FromWorker)> = Rc::new(move |msg| match msg {
        FromWorker::Checked { id, problems: ps, models: m, hardware: h } if id == check_id.get_value() => {
            problems.set(ps);
            if models.with_untracked(Vec::is_empty) {
                models.set(m);
                hardware.set(h);
            }
        }
        FromWorker::Failed { id: 0, .. } => checker.update_value(|w| {
            if let Some(w) = w.take() {
                w.terminate();
            }
        }),
        _ => {}
    });
    let check = move |id: u32| {
        if id != check_id.get_value() {
            return;
        }
        checker.update_value(|w| {
            if w.is_none() {
                if let Ok(new) = SimWorker::spawn(WORKER_URL, on_check.clone()) {
                    checker_sent.set_value(Vec::new());
                    *w = Some(new);
                }
            }
            if let Some(w) = w {
                checker_sent.update_value(|s| files.with_untracked(|f| crate::data::sync_files(w, f, s)));
                w.send(&ToWorker::Check { id, config: config.get_untracked() });
            }
        });
    };
    let check: StoredValue<_, LocalStorage> = StoredValue::new_local(check);
    /// Pause in typing before the scenario is validated.
    const CHECK_DELAY: std::time::Duration = std::time::Duration::from_millis(250);
    // Not on load: the first run validates the scenario itself, and a second worker compiling
    // its wasm then would slow the first result.
    Effect::new(move |first: Option<()>| {
        config.track();
        files.track();
        if first.is_some() {
            let id = check_id.get_value() + 1;
            check_id.set_value(id);
            set_timeout(move || check.with_value(|c| c(id)), CHECK_DELAY);
        }
    });

    // The scenario (default or shared) runs as soon as the page loads.
    run();
    let share = move || {
        let frag = crate::share::encode(&config.get_untracked());
        let loc = window().location();
        let base = format!(
            "{}{}{}",
            loc.origin().unwrap_or_default(),
            loc.pathname().unwrap_or_default(),
            loc.search().unwrap_or_default()
        );
        let url = format!("{base}#{frag}");
        if let Ok(h) = window().history() {
            let _ = h.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url));
        }
        crate::plotly::copy_text(&url);
        share_url.set(url);
    };
    let full_page = move || {
        let loc = window().location();
        format!(
            "{}{}#{}",
            loc.origin().unwrap_or_default(),
            loc.pathname().unwrap_or_default(),
            crate::share::encode(&config.get())
        )
    };

    let field = move |key: &'static str, digits: usize| {
        Signal::derive(move || {
            state.with(|s| match s {
                RunState::Done(o) => fmt_num(&o.prediction[key], digits),
                _ => "–".to_string(),
            })
        })
    };
    let est_field = move |key: &'static str, digits: usize| {
        move || {
            estimate.with(|e| match e {
                Some(Ok(v)) => fmt_num(&v[key], digits),
                _ => "–".to_string(),
            })
        }
    };
    let est_note = move || {
        estimate.with(|e| match e {
            Some(Ok(v)) => format!("bottleneck: {}", v["bottleneck"].as_str().unwrap_or("–")),
            Some(Err(m)) => format!("not available: {m}"),
            None => String::new(),
        })
    };
    // Where the estimate's typical steps spend their time (op kinds, overheads).
    let est_steps = move || {
        estimate.with(|e| match e {
            Some(Ok(v)) => servesim_scenario::estimate::step_lines(v),
            _ => Vec::new(),
        })
    };
    // Each role's busy time by kind of step and by op, from the finished run.
    let busy_time =
        move || state.with(|s| if let RunState::Done(o) = s { o.time.clone() } else { Vec::new() });
    let running = move || state.with(|s| matches!(s, RunState::Running { .. }));
    let status = move || {
        state.with(|s| match s {
            RunState::Idle => "Ready.".to_string(),
            RunState::Running { finished, total } if *total > 0 => {
                format!("Simulating… {finished}/{total} requests")
            }
            RunState::Running { .. } => "Starting the simulation worker…".to_string(),
            RunState::Done(o) => {
                format!("Done: {} requests simulated in {:.0} ms.", o.prediction["num_requests"], o.wall_ms)
            }
            RunState::Failed(_) => "The run failed.".to_string(),
            RunState::Cancelled => "Cancelled.".to_string(),
        })
    };
    // Requests the engine refused (too long for the context or any KV pool) never ran; a
    // result built on the rest must say so where the user looks.
    let rejected = move || {
        state.with(|s| match s {
            RunState::Done(o) => servesim_scenario::report::rejection_line(&o.prediction["servesim"]),
            _ => None,
        })
    };
    let progress = move || {
        state.with(|s| match s {
            RunState::Running { finished, total } if *total > 0 => {
                #[allow(clippy::cast_precision_loss)]
                let pct = 100.0 * *finished as f64 / *total as f64;
                pct
            }
            RunState::Done(_) => 100.0,
            _ => 0.0,
        })
    };
    let error = move || state.with(|s| if let RunState::Failed(m) = s { Some(m.clone()) } else { None });
    let prediction_text = move || {
        state.with(|s| if let RunState::Done(o) = s { o.prediction_text.clone() } else { String::new() })
    };
    let download = move || {
        state.with(|s| match s {
            RunState::Done(o) => crate::client::data_uri("application/json", &o.prediction_text),
            _ => String::new(),
        })
    };

    // Every chart of a finished run, drawn in the next frame (the divs exist by then).
    Effect::new(move |_| {
        let figs = state.with(|s| match s {
            RunState::Done(o) => Some(predict_charts(&o.prediction, &o.records.rows, o.sample.every)),
            _ => None,
        });
        if let Some(figs) = figs {
            crate::plotly::when_ready(move || {
                for (id, fig) in figs {
                    crate::plotly::draw_marked(id, &fig);
                }
            });
        }
    });
    let request_records = Signal::derive(move || {
        state.with(|s| if let RunState::Done(o) = s { Some((o.records.clone(), o.sample)) } else { None })
    });

    let timeline = Memo::new(move |_| {
        state.with(|s| match s {
            RunState::Done(o) => {
                crate::playback::Timeline::read(&o.prediction, &o.records.rows, o.sample.every).map(Arc::new)
            }
            _ => None,
        })
    });

    let run_click = run.clone();
    let preset_run: StoredValue<_, LocalStorage> = StoredValue::new_local(run.clone());
    // Callbacks must be Send; the run closure holds the worker's Rc, so it stays in local storage.
    let run_stored: StoredValue<_, LocalStorage> = StoredValue::new_local(run.clone());
    let open_in_predict = Callback::new(move |yaml: String| {
        config.set(yaml);
        tab.set(Tab::Predict);
        run_stored.with_value(|r| r());
    });
    let tab_button = move |which: Tab, id: &'static str, label: &'static str| {
        view! {
            <button id=id role="tab" class="tab" aria-selected=move || (tab.get() == which).to_string()
                on:click=move |_| tab.set(which)>{label}</button>
        }
    };
    view! {
        <div class="app" class:embed=embed>
        <header class="top">
            <h1>"servesim"</h1>
            <Show when=move || embed>
                <a id="open-full" class="open-full" href=full_page target="_blank" rel="noopener">"Open in servesim ↗"</a>
            </Show>
            <p class="tagline">"Predict how an LLM serving deployment behaves — simulated request by request, entirely in your browser."</p>
            <nav class="tabs" role="tablist" aria-label="Pages">
                {tab_button(Tab::Predict, "tab-predict", "Predict")}
                {tab_button(Tab::Recommend, "tab-recommend", "Recommend")}
                {tab_button(Tab::Sweep, "tab-sweep", "Agg vs disagg")}
                {tab_button(Tab::Compare, "tab-compare", "Compare")}
                {tab_button(Tab::Validate, "tab-validate", "Validate")}
                {tab_button(Tab::Data, "tab-data", "Data")}
                {tab_button(Tab::Features, "tab-features", "Features")}
            </nav>
        </header>
        <div id="page-predict" class:hidden=move || tab.get() != Tab::Predict>
        <main class="layout">
            <section class="panel editor">
                <h2>"Scenario"</h2>
                <p class="hint">"AISimulate prediction.yaml schema. Edit and press Run; nothing leaves this tab."</p>
                <label class="hint" for="preset">"Preset"</label>
                <select id="preset" on:change=move |ev| {
                    let k: usize = event_target_value(&ev).parse().unwrap_or(0);
                    if let Some((_, text)) = PRESETS.get(k) {
                        config.set((*text).to_string());
                        preset_run.with_value(|r| r());
                    }
                }>
                    {PRESETS.iter().enumerate().map(|(k, (name, _))| view! { <option value=k.to_string()>{*name}</option> }).collect_view()}
                </select>
                <crate::form::ScenarioForm config=config problems=problems.into() models=models.into() hardware=hardware.into() />
                <textarea
                    id="scenario-yaml"
                    aria-label="Scenario YAML"
                    spellcheck="false"
                    prop:value=move || config.get()
                    on:input=move |ev| config.set(event_target_value(&ev))
                ></textarea>
                <div class="actions">
                    <button id="run" on:click=move |_| run_click() disabled=running>"Run"</button>
                    <button id="cancel" class="secondary" on:click=move |_| cancel() disabled=move || !running()>"Cancel"</button>
                    <button id="share" class="secondary" on:click=move |_| share() title="A link that reproduces this scenario (it stays in the link; nothing is uploaded)">"Share link"</button>
                </div>
                <Show when=move || !share_url.get().is_empty()>
                    <input id="share-url" class="share-url" type="text" readonly aria-label="Share link" prop:value=move || share_url.get() />
                </Show>
                <Show when=move || share_error.with_value(Option::is_some)>
                    <p id="share-error" class="error" role="alert">{share_error.get_value().unwrap_or_default()}</p>
                </Show>
                <ProgressBar percent=Signal::derive(progress) />
                <p id="status" class="status" aria-live="polite">{status}</p>
                <Show when=move || rejected().is_some()>
                    <p id="rejected" class="error" role="alert">{move || rejected().unwrap_or_default()}</p>
                </Show>
                <Show when=move || error().is_some()>
                    <pre id="run-error" class="error" role="alert">{move || error().unwrap_or_default()}</pre>
                </Show>
            </section>
            <section class="panel results">
                <h2>"Results"</h2>
                <div class="cards">
                    <Card label="Mean TTFT" id="mean-ttft" value=field("mean_ttft_ms", 2) unit="ms" />
                    <Card label="Mean TPOT" id="mean-tpot" value=field("mean_tpot_ms", 2) unit="ms" />
                    <Card label="p99 TTFT" id="p99-ttft" value=field("p99_ttft_ms", 2) unit="ms" />
                    <Card label="Output throughput" id="output-throughput" value=field("output_throughput_tok_s", 1) unit="tok/s" />
                    <Card label="Requests/s" id="request-throughput" value=field("request_throughput_rps", 3) unit="req/s" />
                    <Card label="GPU-hours" id="gpu-hours" value=field("gpu_hours", 4) unit="h" />
                </div>
                <p id="estimate" class="hint">
                    "Static estimate (no replay, servesim estimate): TTFT "
                    <span id="est-ttft">{est_field("mean_ttft_ms", 2)}</span>
                    " ms · TPOT "
                    <span id="est-tpot">{est_field("mean_tpot_ms", 2)}</span>
                    " ms · "
                    <span id="est-throughput">{est_field("output_throughput_tok_s", 1)}</span>
                    " tok/s · "
                    <span id="est-note">{est_note}</span>
                </p>
                <ul id="est-steps" class="hint">
                    {move || est_steps().into_iter().map(|line| view! { <li>{line}</li> }).collect_view()}
                </ul>
                <crate::summary::Summary prediction=Signal::derive(move || state.with(|s| if let RunState::Done(o) = s { Some(o.prediction.clone()) } else { None })) />
                <Show when=move || !busy_time().is_empty()>
                    <details id="time-details">
                        <summary>"Where the GPU time went"</summary>
                        <ul id="busy-time" class="hint">
                            {move || busy_time().into_iter().map(|line| view! { <li>{line}</li> }).collect_view()}
                        </ul>
                    </details>
                </Show>
                <div id="ttft-chart" class="chart" data-status="empty"></div>
                <div class="chart-grid">
                    {PREDICT_CHARTS.iter().map(|id| view! { <div id=*id class="chart small" data-status="empty"></div> }).collect_view()}
                </div>
                <crate::playback::Playback timeline=timeline.into() />
                <details>
                    <summary>"prediction.json"</summary>
                    <a id="download-prediction" download="prediction.json" href=download>"Download prediction.json"</a>
                    <pre id="prediction-json">{prediction_text}</pre>
                </details>
                <crate::requests::RequestTable records=request_records scenario=Signal::derive(move || config.get()) fetch=fetch_file />
            </section>
        </main>
        </div>
        <div id="page-recommend" class:hidden=move || tab.get() != Tab::Recommend>
            <crate::recommend::RecommendPage open=open_in_predict />
        </div>
        <div id="page-sweep" class:hidden=move || tab.get() != Tab::Sweep>
            <crate::sweep::SweepPage open=open_in_predict />
        </div>
        <div id="page-compare" class:hidden=move || tab.get() != Tab::Compare>
            <crate::compare::ComparePage initial=servesim_scenario::DEFAULT_SCENARIO.to_string() files=files />
        </div>
        <div id="page-validate" class:hidden=move || tab.get() != Tab::Validate>
            <crate::validate::ValidatePage files=files open=open_in_predict />
        </div>
        <div id="page-data" class:hidden=move || tab.get() != Tab::Data>
            <crate::data::DataPage files=files config=config open=open_in_predict />
        </div>
        <div id="page-features" class:hidden=move || tab.get() != Tab::Features>
            <crate::features::FeaturesPage />
        </div>
        <footer class="foot">
            "servesim — Apache-2.0. Runs offline; no request leaves this page's origin."
        </footer>
        </div>
    }
}
