//! The Validate page's calibration panel: `servesim calibrate` in the browser. Worker 0
//! coordinates (`Ask::Calibrate`): it selects the rows, checks what was asked, and asks for
//! each point of the search in turn (`Answer::CalibrationNeeds`), which the pool replays as
//! `Ask::Validate` replays rows; the answers go back to it (`Ask::Calibrated`)
//! until it has the CLI's report.

use leptos::prelude::*;

use crate::client::{now_ms, pool_size, Pool, PoolRun};
use crate::protocol::{Answer, Ask, FromWorker, RowsWanted, ToWorker};
use crate::validate::{replay_on_pool, RunControls};
use servesim_scenario::validate::calibrate::Param;

/// Where a calibration stands.
#[derive(Clone, Debug, PartialEq)]
enum Phase {
    Idle,
    Starting,
    Replaying { done: usize },
    Done { wall_ms: f64 },
    Failed(String),
    Cancelled,
}

/// The replays of one point the coordinator asked for, as they come back.
#[derive(Clone, Debug, Default)]
struct Point {
    options: Vec<(String, String)>,
    asked: usize,
    predicted: Vec<(usize, Option<(f64, f64)>)>,
}

/// The panel's controls. `csv` and `name` are the page's calibration file, `wanted` its row
/// selection; `files` the files dropped on the Data page, which every worker receives. The
/// finished report (table, JSON) goes to `report`, which the page shows beside its results.
#[component]
pub fn CalibratePanel(
    files: RwSignal<Vec<crate::data::Dropped>>,
    csv: RwSignal<String>,
    name: RwSignal<String>,
    wanted: Signal<RowsWanted>,
    report: RwSignal<Option<(String, String)>>,
) -> impl IntoView {
    let fit: Vec<(Param, RwSignal<bool>)> = Param::ALL.iter().map(|p| (*p, RwSignal::new(true))).collect();
    let fit = StoredValue::new(fit);
    let folds = RwSignal::new("0".to_string());
    let phase = RwSignal::new(Phase::Idle);
    let pool = PoolRun::default();
    let point = StoredValue::new(Point::default());
    let job = StoredValue::new((String::new(), String::new()));
    let started = StoredValue::new(0.0f64);

    let on_event = move |_k: usize, msg: FromWorker| {
        if let Some(message) = pool.failure(&msg) {
            return phase.set(Phase::Failed(message));
        }
        let current = pool.current();
        match msg {
            FromWorker::Validation { id, answer: Answer::CalibrationNeeds { options, indices, done } }
                if id == current =>
            {
                phase.set(Phase::Replaying { done });
                point.set_value(Point {
                    options: options.clone(),
                    asked: indices.len(),
                    predicted: Vec::new(),
                });
                let (csv, name) = job.get_value();
                pool.with(|p| replay_on_pool(p, id, &csv, &name, &indices, &options));
            }
            FromWorker::Validation { id, answer: Answer::Validated { index, outcome } } if id == current => {
                let complete = point
                    .try_update_value(|p| {
                        p.predicted.push((index, outcome.predicted));
                        p.predicted.len() == p.asked
                    })
                    .unwrap_or(false);
                if complete {
                    let Point { options, predicted, .. } = point.get_value();
                    pool.with(|p| {
                        p.send(0, &ToWorker::Validation { id, ask: Ask::Calibrated { options, predicted } })
                    });
                }
            }
            FromWorker::Validation { id, answer: Answer::CalibrationReport { table, json } }
                if id == current =>
            {
                pool.stop();
                report.set(Some((table, json)));
                phase.set(Phase::Done { wall_ms: now_ms() - started.get_value() });
            }
            _ => {}
        }
    };

    let run = move || {
        let id = pool.next();
        report.set(None);
        let folds = match folds.get_untracked().trim().parse::<usize>() {
            Ok(f) => f,
            Err(_) => {
                return phase.set(Phase::Failed("--folds: a whole number (0: no cross-validation)".into()))
            }
        };
        let fit: Vec<String> = fit.with_value(|f| {
            f.iter().filter(|(_, on)| on.get_untracked()).map(|(p, _)| p.name().to_string()).collect()
        });
        let (text, file) = (csv.get_untracked(), name.get_untracked());
        match Pool::spawn(pool_size(), on_event) {
            Ok(p) => pool.set(p),
            Err(e) => return phase.set(Phase::Failed(e)),
        }
        job.set_value((text.clone(), file.clone()));
        started.set_value(now_ms());
        phase.set(Phase::Starting);
        let dropped = files.get_untracked();
        let wanted = wanted.get_untracked();
        pool.with(|p| {
            for k in 0..p.len() {
                for f in &dropped {
                    p.send(k, &ToWorker::PutFile { name: f.name.clone(), base64: f.base64.to_string() });
                }
            }
            p.send(
                0,
                &ToWorker::Validation {
                    id,
                    ask: Ask::Calibrate { csv: text, source: file, wanted, fit, folds },
                },
            );
        });
    };
    let cancel = move || {
        pool.cancel();
        phase.set(Phase::Cancelled);
    };

    let busy = move || phase.with(|p| matches!(p, Phase::Starting | Phase::Replaying { .. }));
    let status = move || match phase.get() {
        Phase::Idle => "Fits the constants on the rows selected above (one engine's).".to_string(),
        Phase::Starting => "Reading the file…".to_string(),
        Phase::Replaying { done } => format!("Searching: {done} replays of the rows so far…"),
        Phase::Done { wall_ms } => format!("Done in {:.1} s.", wall_ms / 1000.0),
        Phase::Failed(_) => "Calibration failed.".to_string(),
        Phase::Cancelled => "Cancelled.".to_string(),
    };
    let error = move || phase.with(|p| if let Phase::Failed(m) = p { Some(m.clone()) } else { None });

    view! {
        <h3>"Calibrate the engine's constants"</h3>
        <p class="hint">"servesim calibrate in the page: the selected rows (all of one engine) replay for every point the search tries, on the worker pool, and the report shows the error before and after, and with folds on rows each fit did not see."</p>
        <div class="form-grid">
            {fit.get_value().into_iter().map(|(p, on)| {
                let id = format!("cal-fit-{}", p.name());
                let input_id = id.clone();
                view! {
                    <label class="field" for=id><span>{format!("Fit {}", p.name())}</span>
                        <input id=input_id type="checkbox" prop:checked=move || on.get()
                            on:change=move |ev| on.set(event_target_checked(&ev)) />
                    </label>
                }
            }).collect_view()}
            <label class="field" for="cal-folds"><span>"Folds (--folds, 0: none)"</span>
                <input id="cal-folds" type="text" inputmode="numeric" prop:value=move || folds.get()
                    on:input=move |ev| folds.set(event_target_value(&ev)) />
            </label>
        </div>
        <RunControls prefix="cal" label="Calibrate" run=Callback::new(move |()| run()) cancel=Callback::new(move |()| cancel())
            disabled=Signal::derive(move || busy() || csv.with(String::is_empty)) busy=Signal::derive(busy)
            status=Signal::derive(status) error=Signal::derive(error) />
    }
}
