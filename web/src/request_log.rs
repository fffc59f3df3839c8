//! The Validate page's per-request panel: `servesim validate --requests LOG --config CONFIG`
//! in the browser. A worker replays the scenario (with any trace it names dropped on the Data
//! page) and compares mean, p50 and p90 TTFT and TPOT with the measured log
//! (`Ask::CompareRequests`).

use leptos::prelude::*;

use crate::client::{Pool, PoolRun};
use crate::protocol::{Answer, Ask, FromWorker, ToWorker};
use crate::validate::{pick_text, RunControls};

/// Where a comparison stands.
#[derive(Clone, Debug, PartialEq)]
enum Phase {
    Idle,
    Running,
    Done(String),
    Failed(String),
    Cancelled,
}

/// The panel. `files` are the files dropped on the Data page (a trace the scenario names),
/// which the worker receives.
#[component]
pub fn RequestLogPanel(files: RwSignal<Vec<crate::data::Dropped>>) -> impl IntoView {
    let log = RwSignal::new(String::new());
    let log_name = RwSignal::new(String::new());
    let config = RwSignal::new(String::new());
    let config_name = RwSignal::new("replay.yaml".to_string());
    let phase = RwSignal::new(Phase::Idle);
    let pool = PoolRun::default();

    let on_event = move |_k: usize, msg: FromWorker| {
        if let Some(message) = pool.failure(&msg) {
            return phase.set(Phase::Failed(message));
        }
        let current = pool.current();
        match msg {
            FromWorker::Validation { id, answer: Answer::RequestsCompared { table } } if id == current => {
                pool.stop();
                phase.set(Phase::Done(table));
            }
            _ => {}
        }
    };
    let run = move || {
        let id = pool.next();
        // One scenario: one worker.
        match Pool::spawn(1, on_event) {
            Ok(p) => pool.set(p),
            Err(e) => return phase.set(Phase::Failed(e)),
        }
        phase.set(Phase::Running);
        let dropped = files.get_untracked();
        let ask = Ask::CompareRequests {
            log: log.get_untracked(),
            log_name: log_name.get_untracked(),
            config: config.get_untracked(),
            source: config_name.get_untracked(),
        };
        let msg = ToWorker::Validation { id, ask };
        pool.with(|p| {
            for f in &dropped {
                p.send(0, &ToWorker::PutFile { name: f.name.clone(), base64: f.base64.to_string() });
            }
            p.send(0, &msg);
        });
    };
    let cancel = move || {
        pool.cancel();
        phase.set(Phase::Cancelled);
    };
    let pick_log = move |ev: leptos::ev::Event| {
        pick_text(&ev, "a request log", move |picked| match picked {
            Ok((name, text)) => {
                log_name.set(name);
                log.set(text);
            }
            Err(e) => phase.set(Phase::Failed(e)),
        });
    };
    let pick_config = move |ev: leptos::ev::Event| {
        pick_text(&ev, "a scenario", move |picked| match picked {
            Ok((name, text)) => {
                config_name.set(name);
                config.set(text);
            }
            Err(e) => phase.set(Phase::Failed(e)),
        });
    };

    let busy = move || phase.with(|p| matches!(p, Phase::Running));
    let status = move || match phase.get() {
        Phase::Idle => "Pick a log and the scenario that replays its workload.".to_string(),
        Phase::Running => "Replaying the scenario…".to_string(),
        Phase::Done(_) => "Done.".to_string(),
        Phase::Failed(_) => "Comparison failed.".to_string(),
        Phase::Cancelled => "Cancelled.".to_string(),
    };
    let error = move || phase.with(|p| if let Phase::Failed(m) = p { Some(m.clone()) } else { None });
    let table = move || phase.with(|p| if let Phase::Done(t) = p { Some(t.clone()) } else { None });

    view! {
        <h3>"Compare a per-request log"</h3>
        <p class="hint">"servesim validate --requests in the page: a vLLM per-request log (JSONL with queued_ts, first_token_ts and last_token_ts) against a replay of the scenario that reproduces its workload. Drop a trace the scenario names on the Data page first."</p>
        <div class="actions">
            <label class="button">"Choose log…"<input id="req-log-file" type="file" accept=".jsonl,.json,application/json" class="visually-hidden" on:change=pick_log /></label>
            <span id="req-log-name" class="hint">{move || log_name.get()}</span>
            <label class="button secondary">"Choose scenario…"<input id="req-config-file" type="file" accept=".yaml,.yml,.json" class="visually-hidden" on:change=pick_config /></label>
        </div>
        <label class="field wide" for="req-config"><span>"Scenario (YAML or JSON)"</span>
            <textarea id="req-config" rows="8" spellcheck="false" prop:value=move || config.get()
                on:input=move |ev| config.set(event_target_value(&ev))></textarea>
        </label>
        <RunControls prefix="req" label="Compare" run=Callback::new(move |()| run()) cancel=Callback::new(move |()| cancel())
            disabled=Signal::derive(move || busy() || log.with(String::is_empty) || config.with(String::is_empty))
            busy=Signal::derive(busy) status=Signal::derive(status) error=Signal::derive(error) />
        <Show when=move || table().is_some()>
            <pre id="req-table" class="table-text">{move || table().unwrap_or_default()}</pre>
        </Show>
    }
}
