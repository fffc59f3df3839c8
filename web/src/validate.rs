//! The Validate page: `servesim validate --silicon` in the browser. The calibration file the
//! user picks (AIConfigurator `silicon_sample.csv` columns) is replayed row by row on a pool of
//! workers, each row as the CLI replays it; the page shows the CLI's error table and notes,
//! predicted against measured TTFT and TPOT, a table of every row's errors, and the report as
//! JSON, Markdown and per-row CSV. What-if fields set the CLI's replay options, read in the
//! page with the CLI's ranges before any worker starts. Worker 0 also selects the rows and
//! builds the report (`protocol::select_rows`, `protocol::validation_answer`), so the page
//! itself links none of the simulator. The calibration and per-request panels are
//! `crate::calibrate` and `crate::request_log`.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::calibrate::CalibratePanel;
use crate::charts;
use crate::client::{data_uri, now_ms, pool_size, Pool, PoolRun};
use crate::protocol::{
    command_line, knobs, shown_rows, Answer, Ask, FromWorker, RowOrder, RowResult, RowsWanted, ToWorker,
    ValidationAnswer,
};
use crate::request_log::RequestLogPanel;
use crate::sweep::ChoiceField;
use servesim_scenario::validate::{KnobOption, OptionKind, Outcome, OPTIONS};

/// Where a validation stands.
#[derive(Clone, Debug, PartialEq)]
enum Phase {
    Idle,
    Selecting,
    Running { done: usize, of: usize },
    Reporting,
    Done { rows: usize, wall_ms: f64 },
    Failed(String),
    Cancelled,
}

/// The validation in flight: the file, the rows sent and what came back.
#[derive(Clone, Debug, Default)]
struct Job {
    csv: String,
    name: String,
    wanted: RowsWanted,
    /// The what-if options, `(flag, value)`.
    options: Vec<(String, String)>,
    /// Each row's position among the file's data rows, in the order sent.
    positions: Vec<usize>,
    outcomes: Vec<Option<Outcome>>,
}

/// The page. `files` are the files dropped on the Data page (kernel tables among them), which
/// every worker of the pool receives; `open` shows a row's replayed scenario in Predict.
#[component]
pub fn ValidatePage(files: RwSignal<Vec<crate::data::Dropped>>, open: Callback<String>) -> impl IntoView {
    let csv = RwSignal::new(String::new());
    let name = RwSignal::new("calibration.csv".to_string());
    let filter = RwSignal::new(String::new());
    let class = RwSignal::new(String::new());
    let measured_by = RwSignal::new(String::new());
    let single_node = RwSignal::new(false);
    let phase = RwSignal::new(Phase::Idle);
    let result: RwSignal<Option<ValidationAnswer>> = RwSignal::new(None);
    // The last calibration's table and JSON (`CalibratePanel`).
    let calibration: RwSignal<Option<(String, String)>> = RwSignal::new(None);
    let pool = PoolRun::default();
    let job = StoredValue::new(Job::default());
    let started = StoredValue::new(0.0f64);

    let on_event = move |_k: usize, msg: FromWorker| {
        if let Some(message) = pool.failure(&msg) {
            return phase.set(Phase::Failed(message));
        }
        let current = pool.current();
        match msg {
            FromWorker::Validation { id, answer: Answer::RowsSelected { indices } } if id == current => {
                let (csv, name, options) =
                    job.with_value(|j| (j.csv.clone(), j.name.clone(), j.options.clone()));
                job.update_value(|j| {
                    j.outcomes = vec![None; indices.len()];
                    j.positions.clone_from(&indices);
                });
                phase.set(Phase::Running { done: 0, of: indices.len() });
                pool.with(|p| replay_on_pool(p, id, &csv, &name, &indices, &options));
            }
            FromWorker::Validation { id, answer: Answer::Validated { index, outcome } } if id == current => {
                let (done, of) = job
                    .try_update_value(|j| {
                        if let Some(slot) = j.positions.iter().position(|p| *p == index) {
                            j.outcomes[slot] = Some(outcome);
                        }
                        (j.outcomes.iter().filter(|o| o.is_some()).count(), j.outcomes.len())
                    })
                    .unwrap_or((0, 1));
                if done < of {
                    phase.set(Phase::Running { done, of });
                    return;
                }
                phase.set(Phase::Reporting);
                let ask = job.with_value(|j| Ask::Report {
                    csv: j.csv.clone(),
                    source: j.name.clone(),
                    indices: j.positions.clone(),
                    outcomes: j.outcomes.iter().map(|o| o.clone().unwrap_or_default()).collect(),
                    wanted: j.wanted.clone(),
                    options: j.options.clone(),
                });
                let msg = ToWorker::Validation { id, ask };
                pool.with(|p| p.send(0, &msg));
            }
            FromWorker::Validation { id, answer: Answer::Report { report } } if id == current => {
                pool.stop();
                let (ttft, tpot) =
                    (charts::parity(&report.ttft, "TTFT", "ms"), charts::parity(&report.tpot, "TPOT", "ms"));
                let rows = job.with_value(|j| j.positions.len());
                result.set(Some(*report));
                phase.set(Phase::Done { rows, wall_ms: now_ms() - started.get_value() });
                crate::plotly::when_ready(move || {
                    crate::plotly::draw_marked("val-ttft-chart", &ttft);
                    crate::plotly::draw_marked("val-tpot-chart", &tpot);
                });
            }
            _ => {}
        }
    };

    // One field per replay option of the CLI, empty while unset.
    let what_if: Vec<(KnobOption, RwSignal<String>)> =
        OPTIONS.iter().map(|o| (*o, RwSignal::new(String::new()))).collect();
    let what_if = StoredValue::new(what_if);
    let options = move || -> Vec<(String, String)> {
        what_if.with_value(|w| {
            w.iter()
                .map(|(o, v)| (o.flag.to_string(), v.get()))
                .filter(|(_, t)| !t.trim().is_empty())
                .collect()
        })
    };
    let wanted = move || RowsWanted {
        filter: filter.get(),
        class: class.get(),
        measured_by: measured_by.get(),
        single_node: single_node.get(),
    };
    // What the CLI would run, or why the options cannot be read.
    let command = move || knobs(&options()).map(|k| command_line(&name.get(), &wanted(), &k));

    // A row's replayed scenario, built by a worker of its own (the pool has stopped by then)
    // with the tables of the row's GPU and engine, opens in Predict.
    let opener: StoredValue<Pool, LocalStorage> = StoredValue::new_local(Pool::default());
    let open_row = Callback::new(move |index: usize| {
        opener.update_value(Pool::terminate);
        let id = pool.current();
        let on_answer = move |_k: usize, msg: FromWorker| match msg {
            FromWorker::Validation { answer: Answer::Scenario { yaml, .. }, .. } => {
                opener.update_value(Pool::terminate);
                open.run(yaml);
            }
            FromWorker::Failed { message, .. } => {
                opener.update_value(Pool::terminate);
                phase.set(Phase::Failed(message));
            }
            _ => {}
        };
        match Pool::spawn(1, on_answer) {
            Ok(p) => opener.set_value(p),
            Err(e) => return phase.set(Phase::Failed(e)),
        }
        let dropped = files.get_untracked();
        let ask = job.with_value(|j| Ask::Scenario {
            csv: j.csv.clone(),
            source: j.name.clone(),
            index,
            options: j.options.clone(),
        });
        opener.with_value(|p| {
            for f in &dropped {
                p.send(0, &ToWorker::PutFile { name: f.name.clone(), base64: f.base64.to_string() });
            }
            p.send(0, &ToWorker::Validation { id, ask });
        });
    });

    let run = move || {
        let id = pool.next();
        result.set(None);
        let (wanted, options) = untrack(|| (wanted(), options()));
        // Options out of range are refused before any worker starts, as the CLI refuses them.
        if let Err(e) = knobs(&options) {
            return phase.set(Phase::Failed(e));
        }
        let (text, file) = (csv.get_untracked(), name.get_untracked());
        match Pool::spawn(pool_size(), on_event) {
            Ok(p) => pool.set(p),
            Err(e) => return phase.set(Phase::Failed(e)),
        }
        job.set_value(Job {
            csv: text.clone(),
            name: file.clone(),
            wanted: wanted.clone(),
            options,
            ..Job::default()
        });
        started.set_value(now_ms());
        phase.set(Phase::Selecting);
        let dropped = files.get_untracked();
        pool.with(|p| {
            for k in 0..p.len() {
                for f in &dropped {
                    p.send(k, &ToWorker::PutFile { name: f.name.clone(), base64: f.base64.to_string() });
                }
            }
            p.send(0, &ToWorker::Validation { id, ask: Ask::SelectRows { csv: text, source: file, wanted } });
        });
    };
    let cancel = move || {
        pool.cancel();
        phase.set(Phase::Cancelled);
    };
    let pick = move |ev: leptos::ev::Event| {
        pick_text(&ev, "a calibration file", move |picked| match picked {
            Ok((file, text)) => {
                name.set(file);
                csv.set(text);
                phase.set(Phase::Idle);
            }
            Err(e) => phase.set(Phase::Failed(e)),
        });
    };

    let busy =
        move || phase.with(|p| matches!(p, Phase::Selecting | Phase::Running { .. } | Phase::Reporting));
    let status = move || match phase.get() {
        Phase::Idle => "Pick or paste a calibration file, then press Validate.".to_string(),
        Phase::Selecting => "Reading the file…".to_string(),
        Phase::Running { done, of } => format!("Replaying rows: {done}/{of}…"),
        Phase::Reporting => "Summarising…".to_string(),
        Phase::Done { rows, wall_ms } => {
            format!("Done: {rows} row{} in {:.1} s.", if rows == 1 { "" } else { "s" }, wall_ms / 1000.0)
        }
        Phase::Failed(_) => "Validation failed.".to_string(),
        Phase::Cancelled => "Cancelled.".to_string(),
    };
    let error = move || phase.with(|p| if let Phase::Failed(m) = p { Some(m.clone()) } else { None });
    let field = move |f: fn(&ValidationAnswer) -> &String| {
        move || result.with(|a| a.as_ref().map(|a| f(a).clone()).unwrap_or_default())
    };
    let link = move |mime: &'static str, f: fn(&ValidationAnswer) -> &String| {
        move || result.with(|a| a.as_ref().map(|a| data_uri(mime, f(a))).unwrap_or_default())
    };

    view! {
        <main class="layout">
            <section class="panel editor">
                <h2>"Measured runs"</h2>
                <p class="hint">"servesim validate in the page: each row of a calibration file (AIConfigurator silicon_sample.csv columns, as in InferenceX exports) is replayed as closed-loop traffic at its concurrency, lengths, parallelism, engine and quantisation, on a pool of workers. Kernel tables dropped on the Data page are used for the GPUs and releases the page does not ship. Nothing leaves this tab."</p>
                <div class="actions">
                    <label class="button">"Choose file…"<input id="val-file" type="file" accept=".csv,text/csv" class="visually-hidden" on:change=pick /></label>
                    <span id="val-name" class="hint">{move || name.get()}</span>
                </div>
                <label class="field wide" for="val-csv"><span>"Calibration CSV"</span>
                    <textarea id="val-csv" rows="10" spellcheck="false" prop:value=move || csv.get()
                        on:input=move |ev| csv.set(event_target_value(&ev))></textarea>
                </label>
                <label class="field wide" for="val-filter"><span>"Only rows containing (comma-separated, any)"</span>
                    <input id="val-filter" type="text" prop:value=move || filter.get()
                        on:input=move |ev| filter.set(event_target_value(&ev)) />
                </label>
                <div class="form-grid">
                    <ChoiceField id="val-class" label="Class" value=class
                        options=&[("", "Any"), ("dense-agg", "Dense aggregated"), ("moe-agg", "MoE aggregated"),
                                  ("dense-disagg", "Dense disaggregated"), ("moe-disagg", "MoE disaggregated")] />
                    <ChoiceField id="val-source" label="Measured by" value=measured_by
                        options=&[("", "Anyone"), ("inferencex", "InferenceX"),
                                  ("aiconfigurator", "AIConfigurator's harness"), ("other", "Other")] />
                    <label class="field" for="val-single-node"><span>"Single node only"</span>
                        <input id="val-single-node" type="checkbox" prop:checked=move || single_node.get()
                            on:change=move |ev| single_node.set(event_target_checked(&ev)) />
                    </label>
                </div>
                <details id="val-what-if">
                    <summary>"What-if: replay options (the CLI's, empty for the replay policy)"</summary>
                    <div class="form-grid">
                        {what_if.get_value().into_iter().map(|(o, v)| view! { <OptionField option=o value=v /> }).collect_view()}
                    </div>
                </details>
                <p class="hint">"Same as "<code id="val-command">{move || command().unwrap_or_else(|e| e)}</code></p>
                <RunControls prefix="val" label="Validate" run=Callback::new(move |()| run()) cancel=Callback::new(move |()| cancel())
                    disabled=Signal::derive(move || busy() || csv.with(String::is_empty)) busy=Signal::derive(busy)
                    status=Signal::derive(status) error=Signal::derive(error) />
                <CalibratePanel files=files csv=csv name=name wanted=Signal::derive(wanted) report=calibration />
                <RequestLogPanel files=files />
            </section>
            <section class="panel results">
                <h2>"Error"</h2>
                <pre id="val-table" class="table-text">{field(|a| &a.table)}</pre>
                <pre id="val-notes" class="table-text">{field(|a| &a.notes)}</pre>
                <div class="chart-grid">
                    <div id="val-ttft-chart" class="chart" data-status="empty"></div>
                    <div id="val-tpot-chart" class="chart" data-status="empty"></div>
                </div>
                <Show when=move || result.with(Option::is_some)>
                    <p class="downloads">
                        <a id="download-validation-json" download="validation-report.json" href=link("application/json", |a| &a.json)>"validation-report.json"</a>
                        " · "
                        <a id="download-validation-md" download="validation-report.md" href=link("text/markdown", |a| &a.markdown)>"validation-report.md"</a>
                        " · "
                        <a id="download-validation-rows" download="validation-rows.csv" href=link("text/csv", |a| &a.rows_csv)>"validation-rows.csv"</a>
                    </p>
                </Show>
                <Show when=move || result.with(Option::is_some)>
                    <RowTable rows=Signal::derive(move || result.with(|a| a.as_ref().map(|a| a.rows.clone()).unwrap_or_default()))
                        open=open_row />
                </Show>
                <details>
                    <summary>"validation-report.json"</summary>
                    <pre id="val-json">{field(|a| &a.json)}</pre>
                </details>
                <Show when=move || calibration.with(Option::is_some)>
                    <h2>"Calibration"</h2>
                    <pre id="cal-table" class="table-text">{move || calibration.with(|c| c.as_ref().map(|(t, _)| t.clone()).unwrap_or_default())}</pre>
                    <p class="downloads">
                        <a id="download-calibration-json" download="calibration.json"
                            href=move || calibration.with(|c| c.as_ref().map(|(_, j)| data_uri("application/json", j)).unwrap_or_default())>"calibration.json"</a>
                    </p>
                </Show>
            </section>
        </main>
    }
}

/// One replay option's field, named after the CLI's flag: a menu of its names, a box for a
/// switch, else a number (empty: unset; the placeholder says what applies then).
#[component]
fn OptionField(option: KnobOption, value: RwSignal<String>) -> impl IntoView {
    let id = format!("val-opt-{}", option.flag);
    let mut label = format!("{} (--{})", option.label, option.flag);
    // The labels are written to follow a flag in help text; a field's starts a sentence.
    label[..1].make_ascii_uppercase();
    let input = match option.kind {
        OptionKind::Choice(names) => view! {
            <select id=id.clone() prop:value=move || value.get() on:change=move |ev| value.set(event_target_value(&ev))>
                <option value="">{format!("unset: {}", option.unset)}</option>
                {names.iter().map(|n| view! { <option value=*n>{*n}</option> }).collect_view()}
            </select>
        }
        .into_any(),
        OptionKind::Switch => view! {
            <input id=id.clone() type="checkbox" prop:checked=move || value.get() == "true"
                on:change=move |ev| value.set(if event_target_checked(&ev) { "true".into() } else { String::new() }) />
        }
        .into_any(),
        _ => view! {
            <input id=id.clone() type="text" inputmode="decimal" placeholder=option.unset prop:value=move || value.get()
                on:input=move |ev| value.set(event_target_value(&ev)) />
        }
        .into_any(),
    };
    view! { <label class="field" for=id><span>{label}</span>{input}</label> }
}

/// Sends `indices` of a calibration file's rows to be replayed with `options`, worker k taking
/// rows k, k + n, …: neighbouring rows (often one sweep, of similar cost) spread over the pool.
pub(crate) fn replay_on_pool(
    pool: &Pool,
    id: u32,
    csv: &str,
    source: &str,
    indices: &[usize],
    options: &[(String, String)],
) {
    for k in 0..pool.len() {
        let mine: Vec<usize> = indices.iter().skip(k).step_by(pool.len()).copied().collect();
        if !mine.is_empty() {
            let ask = Ask::Validate {
                csv: csv.to_string(),
                source: source.to_string(),
                indices: mine,
                options: options.to_vec(),
            };
            let msg = ToWorker::Validation { id, ask };
            pool.send(k, &msg);
        }
    }
}

/// A pool page's Run and Cancel buttons, its status line and its error, with the ids
/// `{prefix}-run`, `{prefix}-cancel`, `{prefix}-status` and `{prefix}-error`.
#[component]
pub(crate) fn RunControls(
    prefix: &'static str,
    label: &'static str,
    run: Callback<()>,
    cancel: Callback<()>,
    /// Whether Run is unavailable (a run in flight, or nothing to run).
    disabled: Signal<bool>,
    /// Whether a run is in flight (Cancel is available).
    busy: Signal<bool>,
    status: Signal<String>,
    error: Signal<Option<String>>,
) -> impl IntoView {
    view! {
        <div class="actions">
            <button id=format!("{prefix}-run") on:click=move |_| run.run(()) disabled=move || disabled.get()>{label}</button>
            <button id=format!("{prefix}-cancel") class="secondary" on:click=move |_| cancel.run(()) disabled=move || !busy.get()>"Cancel"</button>
        </div>
        <p id=format!("{prefix}-status") class="status" aria-live="polite">{move || status.get()}</p>
        <Show when=move || error.with(Option::is_some)>
            <pre id=format!("{prefix}-error") class="error" role="alert">{move || error.get().unwrap_or_default()}</pre>
        </Show>
    }
}

/// Reads the text file an `<input type=file>` change picked and hands `done` its name and
/// text, or why it cannot be read (`what` names the kind of file in the message).
pub(crate) fn pick_text(
    ev: &leptos::ev::Event,
    what: &'static str,
    done: impl FnOnce(Result<(String, String), String>) + 'static,
) {
    let Some(input) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()) else {
        return;
    };
    let Some(f) = input.files().and_then(|l| l.get(0)) else { return };
    wasm_bindgen_futures::spawn_local(async move {
        let text = crate::data::read_file(&f).await.and_then(|b| {
            String::from_utf8(b).map_err(|_| format!("{}: {what} must be UTF-8 text", f.name()))
        });
        done(text.map(|t| (f.name(), t)));
    });
}

/// Rows the table shows at once; the rest are a filter away (and in the downloads).
const ROWS_SHOWN: usize = 200;

/// Every row's measurement, prediction and error, filterable and ordered by either error, so
/// the rows that carry a family's error are found.
#[component]
fn RowTable(rows: Signal<Vec<RowResult>>, open: Callback<usize>) -> impl IntoView {
    let filter = RwSignal::new(String::new());
    let order = RwSignal::new(RowOrder::Ttft);
    let shown = move || {
        rows.with(|all| {
            let kept: Vec<RowResult> =
                filter.with(|f| shown_rows(all, f, order.get()).into_iter().cloned().collect());
            (kept.len(), all.len(), kept.into_iter().take(ROWS_SHOWN).collect::<Vec<_>>())
        })
    };
    let cells = |r: &RowResult| {
        let pct = |x: f64| format!("{x:+.1}%");
        let (mt, mp) = r.measured;
        match (r.predicted, r.errors_pct()) {
            (Some((pt, pp)), Some((et, ep))) => view! {
                <td>{format!("{mt:.1}")}</td><td>{format!("{pt:.1}")}</td><td class="num">{pct(et)}</td>
                <td>{format!("{mp:.2}")}</td><td>{format!("{pp:.2}")}</td><td class="num">{pct(ep)}</td>
            }
            .into_any(),
            _ => {
                view! { <td colspan="6" class="error">{r.error.clone().unwrap_or_default()}</td> }.into_any()
            }
        }
    };
    let button = move |key: RowOrder, label: &'static str| {
        view! {
            <button class=move || if order.get() == key { "" } else { "secondary" } aria-pressed=move || (order.get() == key).to_string()
                on:click=move |_| order.set(key)>{label}</button>
        }
    };
    view! {
        <h3>"Rows"</h3>
        <div class="actions">
            <input id="val-rows-filter" type="text" placeholder="filter by id, model, GPU, engine or class"
                prop:value=move || filter.get() on:input=move |ev| filter.set(event_target_value(&ev)) />
            <span class="hint">"order by"</span>
            {button(RowOrder::Ttft, "TTFT error")}
            {button(RowOrder::Tpot, "TPOT error")}
            {button(RowOrder::File, "file")}
            <span id="val-rows-count" class="hint">{move || {
                let (kept, all, _) = shown();
                format!("{} of {kept} shown ({all} rows)", kept.min(ROWS_SHOWN))
            }}</span>
        </div>
        <div class="table-wrap">
            <table id="val-rows">
                <thead><tr>
                    <th>"row"</th><th>"deployment"</th><th>"ISL/OSL × clients"</th>
                    <th>"TTFT measured (ms)"</th><th>"predicted"</th><th>"error"</th>
                    <th>"TPOT measured (ms)"</th><th>"predicted"</th><th>"error"</th><th></th>
                </tr></thead>
                <tbody>
                    {move || shown().2.into_iter().map(|r| {
                        let index = r.index;
                        view! {
                            <tr data-id=r.id.clone()>
                                <td>{r.id.clone()}</td><td>{r.deployment.clone()}</td><td>{r.workload.clone()}</td>
                                {cells(&r)}
                                <td><button class="secondary small open-predict" title="Open the scenario this row replays as in Predict"
                                    on:click=move |_| open.run(index)>"Predict"</button></td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}
