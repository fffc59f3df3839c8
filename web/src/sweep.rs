//! The "Agg vs disagg" page: AIConfigurator's `default` question (`servesim estimate
//! --default`) in the browser. Worker 0 sweeps every aggregated and disaggregated deployment
//! with the static model and plans waves of confirming replays; the pool replays them.

use leptos::prelude::*;
use serde_json::Value;

use crate::app::fmt_num;
use crate::client::{now_ms, pool_size, Pool, PoolRun};
use crate::protocol::{FromWorker, ToWorker};
use servesim_scenario::estimate::sweep::SweepSpec;

/// Where a sweep stands.
#[derive(Clone, Debug, PartialEq)]
enum Phase {
    Idle,
    Sweeping,
    Replaying { done: usize, of: usize },
    Done { wall_ms: f64 },
    Failed(String),
    Cancelled,
}

/// The replays of one wave, gathered in wave order.
#[derive(Clone, Debug, Default)]
struct Wave {
    results: Vec<Option<String>>,
}

/// A finished sweep.
#[derive(Clone, Debug, Default, PartialEq)]
struct Answer {
    report: Value,
    report_text: String,
    table: String,
    winners: Vec<(String, String, String)>,
}

#[component]
fn NumField(id: &'static str, label: &'static str, value: RwSignal<String>) -> impl IntoView {
    view! {
        <label class="field" for=id>
            <span>{label}</span>
            <input id=id type="text" inputmode="decimal" prop:value=move || value.get()
                on:input=move |ev| value.set(event_target_value(&ev)) />
        </label>
    }
}

/// A drop-down of `(value, text)` options bound to `value`.
#[component]
pub(crate) fn ChoiceField(
    id: &'static str,
    label: &'static str,
    value: RwSignal<String>,
    options: &'static [(&'static str, &'static str)],
) -> impl IntoView {
    view! {
        <label class="field" for=id>
            <span>{label}</span>
            <select id=id on:change=move |ev| value.set(event_target_value(&ev))>
                {options
                    .iter()
                    .map(|&(v, text)| view! { <option value=v selected=move || value.get() == v>{text}</option> })
                    .collect_view()}
            </select>
        </label>
    }
}

/// The page. `open` puts a deployment's config into Predict and runs it.
#[component]
pub fn SweepPage(open: Callback<String>) -> impl IntoView {
    let model = RwSignal::new("Qwen/Qwen3-32B-FP8".to_string());
    let system = RwSignal::new("h200_sxm".to_string());
    let backend = RwSignal::new("trtllm".to_string());
    let gpus = RwSignal::new("32".to_string());
    let isl = RwSignal::new("4000".to_string());
    let osl = RwSignal::new("500".to_string());
    let prefix = RwSignal::new("500".to_string());
    let ttft = RwSignal::new("300".to_string());
    let tpot = RwSignal::new("10".to_string());
    let nextn = RwSignal::new("0".to_string());
    let nextn_accepted = RwSignal::new("0".to_string());
    // Empty: the engine's own all-reduce kernels.
    let allreduce = RwSignal::new(String::new());
    // Empty: the tables' default expert kernels.
    let moe_kernel = RwSignal::new(String::new());

    let phase = RwSignal::new(Phase::Idle);
    let answer: RwSignal<Option<Answer>> = RwSignal::new(None);
    let pool = PoolRun::default();
    let wave = StoredValue::new(Wave::default());
    let started = StoredValue::new(0.0f64);

    let on_event = move |k: usize, msg: FromWorker| {
        if let Some(message) = pool.failure(&msg) {
            return phase.set(Phase::Failed(message));
        }
        let current = pool.current();
        match msg {
            FromWorker::Replays { id, wave: points, .. } if id == current => {
                let n = pool.with(Pool::len).max(1);
                wave.set_value(Wave { results: vec![None; points.len()] });
                phase.set(Phase::Replaying { done: 0, of: points.len() });
                // Worker k replays points k, k + n, ... and answers in order.
                for (i, (label, yaml, concurrency)) in points.into_iter().enumerate() {
                    pool.with(|p| p.send(i % n, &ToWorker::Replay { id, yaml, label, concurrency }));
                }
            }
            FromWorker::Replayed { id, replay } if id == current => {
                let n = pool.with(Pool::len).max(1);
                let complete = wave
                    .try_update_value(|w| {
                        // Worker k replays points k, k + n, ...: the first still open is this one.
                        if let Some(slot) = (k..w.results.len()).step_by(n).find(|i| w.results[*i].is_none())
                        {
                            w.results[slot] = Some(replay);
                        }
                        let done = w.results.iter().filter(|r| r.is_some()).count();
                        (done, w.results.len())
                    })
                    .unwrap_or((0, 1));
                phase.set(Phase::Replaying { done: complete.0, of: complete.1 });
                if complete.0 == complete.1 {
                    let replays: Vec<String> = wave
                        .with_value(|w| w.results.iter().map(|r| r.clone().unwrap_or_default()).collect());
                    pool.with(|p| p.send(0, &ToWorker::SubmitReplays { id, replays }));
                }
            }
            FromWorker::SweepDone { id, report, table, winners } if id == current => {
                answer.set(Some(Answer {
                    report: serde_json::from_str(&report).unwrap_or(Value::Null),
                    report_text: report,
                    table,
                    winners,
                }));
                phase.set(Phase::Done { wall_ms: now_ms() - started.get_value() });
                pool.stop();
            }
            _ => {}
        }
    };

    let query = move || -> Result<SweepSpec, String> {
        fn num<T: std::str::FromStr>(name: &str, s: &str) -> Result<T, String> {
            s.trim().parse().map_err(|_| format!("{name}: '{s}' is not a valid number"))
        }
        let q = SweepSpec {
            model: model.get_untracked().trim().to_string(),
            system: system.get_untracked().trim().to_string(),
            backend: backend.get_untracked(),
            total_gpus: num("GPUs", &gpus.get_untracked())?,
            isl: num("ISL", &isl.get_untracked())?,
            osl: num("OSL", &osl.get_untracked())?,
            prefix: num("prefix", &prefix.get_untracked())?,
            ttft_ms: num("TTFT limit", &ttft.get_untracked())?,
            tpot_ms: num("TPOT limit", &tpot.get_untracked())?,
            nextn: num("MTP/EAGLE drafts", &nextn.get_untracked())?,
            nextn_accepted: num("drafts accepted", &nextn_accepted.get_untracked())?,
            allreduce: Some(allreduce.get_untracked()).filter(|a| !a.is_empty()),
            moe_kernel: Some(moe_kernel.get_untracked()).filter(|k| !k.is_empty()),
        };
        if q.total_gpus == 0 {
            return Err("GPUs: must be at least 1".into());
        }
        Ok(q)
    };
    let run = move || {
        let id = pool.next();
        answer.set(None);
        let q = match query() {
            Ok(q) => q,
            Err(e) => {
                phase.set(Phase::Failed(e));
                return;
            }
        };
        match Pool::spawn(pool_size(), on_event) {
            Ok(p) => pool.set(p),
            Err(e) => {
                phase.set(Phase::Failed(e));
                return;
            }
        }
        started.set_value(now_ms());
        phase.set(Phase::Sweeping);
        pool.with(|p| p.send(0, &ToWorker::Sweep { id, query: q, replay_top: 1 }));
    };
    let cancel = move || {
        pool.cancel();
        phase.set(Phase::Cancelled);
    };

    let busy = move || phase.with(|p| matches!(p, Phase::Sweeping | Phase::Replaying { .. }));
    let status = move || match phase.get() {
        Phase::Idle => "Ready: AIConfigurator's README case is filled in; press Find best.".to_string(),
        Phase::Sweeping => "Estimating every aggregated and disaggregated deployment…".to_string(),
        Phase::Replaying { done, of } => format!("Confirming the winners by replay: {done}/{of}…"),
        Phase::Done { wall_ms } => format!("Done in {:.2} s.", wall_ms / 1000.0),
        Phase::Failed(_) => "The sweep failed.".to_string(),
        Phase::Cancelled => "Cancelled.".to_string(),
    };
    let wall = move || match phase.get() {
        Phase::Done { wall_ms } => format!("{wall_ms:.0}"),
        _ => String::new(),
    };
    let error = move || phase.with(|p| if let Phase::Failed(m) = p { Some(m.clone()) } else { None });
    let best = move |key: &'static str| {
        move || {
            answer.with(|a| {
                let Some(a) = a else { return "–".to_string() };
                let p = &a.report[key];
                if p.is_null() {
                    return "none meets the limits".to_string();
                }
                format!(
                    "{} — {} tok/s/GPU static, {} replayed",
                    p["deployment"].as_str().unwrap_or(""),
                    fmt_num(&p["estimate"]["output_throughput_tok_s_per_gpu"], 1),
                    fmt_num(&p["replay"]["output_throughput_tok_s_per_gpu"], 1)
                )
            })
        }
    };

    view! {
        <main class="layout">
            <section class="panel editor">
                <h2>"Best aggregated vs disaggregated"</h2>
                <p class="hint">"AIConfigurator's default question: the best deployment of each kind within a GPU budget under mean TTFT and TPOT limits, by output tok/s/GPU. Every shape is estimated; the winners are confirmed by full replays on a pool of workers."</p>
                <div class="form-grid">
                    <label class="field wide" for="def-model"><span>"Model"</span>
                        <input id="def-model" type="text" prop:value=move || model.get() on:input=move |ev| model.set(event_target_value(&ev)) />
                    </label>
                    <label class="field" for="def-system"><span>"GPU"</span>
                        <input id="def-system" type="text" prop:value=move || system.get() on:input=move |ev| system.set(event_target_value(&ev)) />
                    </label>
                    <ChoiceField id="def-backend" label="Engine" value=backend
                        options=&[("trtllm", "TensorRT-LLM"), ("vllm", "vLLM"), ("sglang", "SGLang")] />
                    <NumField id="def-gpus" label="GPUs" value=gpus />
                    <NumField id="def-isl" label="ISL (tokens)" value=isl />
                    <NumField id="def-osl" label="OSL (tokens)" value=osl />
                    <NumField id="def-prefix" label="Shared prefix" value=prefix />
                    <NumField id="def-ttft" label="TTFT limit (ms)" value=ttft />
                    <NumField id="def-tpot" label="TPOT limit (ms)" value=tpot />
                    <NumField id="def-nextn" label="MTP/EAGLE drafts" value=nextn />
                    <NumField id="def-nextn-accepted" label="Drafts accepted" value=nextn_accepted />
                    <ChoiceField id="def-allreduce" label="All-reduce" value=allreduce
                        options=&[("", "Engine default"), ("custom", "Custom kernels"), ("nccl", "NCCL")] />
                    <ChoiceField id="def-moe-kernel" label="MoE kernels" value=moe_kernel
                        options=&[("", "Default"), ("min_latency", "TRTLLM-gen (min latency)")] />
                </div>
                <div class="actions">
                    <button id="def-run" on:click=move |_| run() disabled=busy>"Find best"</button>
                    <button id="def-cancel" class="secondary" on:click=move |_| cancel() disabled=move || !busy()>"Cancel"</button>
                </div>
                <p id="def-status" class="status" aria-live="polite" data-wall-ms=wall>{status}</p>
                <Show when=move || error().is_some()>
                    <pre id="def-error" class="error" role="alert">{move || error().unwrap_or_default()}</pre>
                </Show>
            </section>
            <section class="panel results">
                <h2>"Answer"</h2>
                <dl class="answer">
                    <dt>"Best aggregated"</dt><dd id="def-agg">{best("best_aggregated")}</dd>
                    <dt>"Best disaggregated"</dt><dd id="def-disagg">{best("best_disaggregated")}</dd>
                    <dt>"Disaggregated / aggregated (static)"</dt>
                    <dd id="def-ratio">{move || answer.with(|a| a.as_ref().map_or("–".to_string(), |a| fmt_num(&a.report["disagg_over_agg"], 2)))}</dd>
                </dl>
                <ul class="winners">
                    {move || answer.with(|a| a.iter().flat_map(|a| a.winners.clone()).map(|(label, mode, yaml)| {
                        view! {
                            <li>
                                <button class="secondary small open-predict" on:click=move |_| open.run(yaml.clone())>"Predict"</button>
                                " " {mode} ": " {label}
                            </li>
                        }
                    }).collect_view())}
                </ul>
                <pre id="def-table" class="table-text">{move || answer.with(|a| a.as_ref().map(|a| a.table.clone()).unwrap_or_default())}</pre>
                <details>
                    <summary>"estimate-default.json"</summary>
                    <pre id="def-json">{move || answer.with(|a| a.as_ref().map(|a| a.report_text.clone()).unwrap_or_default())}</pre>
                </details>
            </section>
        </main>
    }
}
