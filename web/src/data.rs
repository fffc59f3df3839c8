//! The Data page: files the user drops or picks — traces, kernel and FPM tables, configs —
//! are read in the tab (nothing is uploaded), described as `servesim data inspect` would,
//! drawn, and put to use in a scenario. Dropped files are handed to every simulation worker,
//! so a config naming `mooncake_trace.jsonl` runs once that file is here.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use leptos::prelude::*;
use serde_json::Value;
use servesim_scenario::edit;
use servesim_scenario::node::{self, Node, Origin};
use wasm_bindgen::JsCast;

use crate::charts::Figure;
use crate::client::{SimWorker, WORKER_URL};
use crate::protocol::{FromWorker, ToWorker};

/// A file the user gave the page.
#[derive(Clone, Debug, PartialEq)]
pub struct Dropped {
    /// Its name (with its folder path when a folder was picked).
    pub name: String,
    /// Bytes.
    pub size: usize,
    /// Its contents, base64 (how workers receive it).
    pub base64: Arc<str>,
}

/// Sends worker `w` the dropped files it has not had yet (`sent` remembers which, by
/// identity, so a file dropped again with new contents goes again).
pub fn sync_files(w: &SimWorker, files: &[Dropped], sent: &mut Vec<Arc<str>>) {
    for f in files {
        if !sent.iter().any(|s| Arc::ptr_eq(s, &f.base64)) {
            w.send(&ToWorker::PutFile { name: f.name.clone(), base64: f.base64.to_string() });
            sent.push(f.base64.clone());
        }
    }
}

/// What the page knows of a dropped file.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    /// Being read or described.
    Reading,
    /// A scenario config (opened in Predict, not given to the worker).
    Config(Arc<str>),
    /// Described by the worker.
    Inspected {
        /// `inspect::Kind::key`.
        kind: String,
        /// `servesim data inspect`'s text.
        summary: String,
        /// A kernel table's slices.
        slices: Vec<String>,
        /// `{"curves", "heatmap"}` figures.
        figure: Option<Value>,
    },
    /// Unreadable or unsupported, and why.
    Failed(String),
}

/// One row of the page.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// File name.
    pub name: String,
    /// Bytes.
    pub size: usize,
    /// What it is.
    pub status: Status,
    /// Slice previewed (kernel tables).
    pub slice: usize,
}

/// True for files that are scenario configs rather than data.
#[must_use]
pub fn is_config(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.ends_with(".yaml") || n.ends_with(".yml") || (n.ends_with(".json") && !n.ends_with(".metadata.json"))
}

/// Whether a dropped file is a scenario config: a config's name ([`is_config`]) on anything
/// but a Weka trace, which is JSON too.
#[must_use]
pub fn is_config_file(name: &str, bytes: &[u8]) -> bool {
    is_config(name)
        && servesim_scenario::TraceFileFormat::sniff(name, bytes) != servesim_scenario::TraceFileFormat::Weka
}

fn str_node(s: &str) -> Node {
    Node::builtin(node::Value::Str(s.to_string()))
}

fn map(entries: Vec<(&str, Node)>) -> node::Value {
    node::Value::Map(entries.into_iter().map(|(k, n)| (k.to_string(), Origin::Builtin, n)).collect())
}

/// The scenario replaying trace `name` at its own timestamps (the rest of `config` kept).
///
/// # Errors
/// `config` does not parse.
pub fn use_trace(config: &str, name: &str, kind: &str) -> Result<String, String> {
    let format = match kind {
        "azure_trace" => "azure_csv",
        "agentic_trace" => "agentic_mooncake",
        "weka_trace" => "weka",
        _ => "mooncake",
    };
    let source = map(vec![
        ("type", str_node("trace")),
        ("paths", Node::builtin(node::Value::Seq(vec![str_node(name)]))),
        ("format", str_node(format)),
    ]);
    let out = edit::set(config, "traffic.source", Some(&source))?;
    edit::set(&out, "traffic.load", Some(&map(vec![("type", str_node("trace_timestamps"))])))
}

/// The scenario timing every worker role from FPM table `name` (AISimulate's
/// `forward_model: fpm`).
///
/// # Errors
/// `config` does not parse or names no worker role.
pub fn use_fpm(config: &str, name: &str) -> Result<String, String> {
    let root = node::parse(config, None).map_err(|e| e.to_string())?;
    let roles: Vec<String> = match edit::lookup(&root, "engine.workers").map(|n| &n.value) {
        Some(node::Value::Map(m)) => m.iter().map(|(k, _, _)| k.clone()).collect(),
        _ => return Err("the scenario has no engine.workers to time with the FPM table".into()),
    };
    let mut out = config.to_string();
    for role in roles {
        let timing = format!("engine.workers.{role}.timing");
        out = edit::set(&out, &format!("{timing}.forward_model"), Some(&node::Value::Str("fpm".into())))?;
        out = edit::set(&out, &format!("{timing}.fpm_parquet_path"), Some(&node::Value::Str(name.into())))?;
    }
    Ok(out)
}

/// The scenario on the GPU, engine and version of AIConfigurator table `name` (from its place
/// in a `systems/data` tree), so its runs are timed with it.
///
/// # Errors
/// `name` is not placed in such a tree, or `config` does not parse.
pub fn use_aic(config: &str, name: &str) -> Result<String, String> {
    let (_, path) = servesim_scenario::perfdata::aic_path(name).ok_or_else(|| {
        format!("{name}: not inside an AIConfigurator systems/data/<gpu>/<op>/<engine>/<version>/ folder, so its GPU and engine are unknown; pick the folder instead")
    })?;
    let parts: Vec<&str> = path.split('/').collect();
    let s = |v: &str| node::Value::Str(v.to_string());
    let mut out = edit::set(config, "engine.hardware", Some(&s(parts[1])))?;
    // perf/<gpu>/<engine>/<version>/<family>.parquet (NCCL tables have no engine).
    if let [_, _, backend, version, _] = parts.as_slice() {
        out = edit::set(&out, "engine.backend", Some(&s(backend)))?;
        out = edit::set(&out, "engine.backend_version", Some(&s(version)))?;
    }
    Ok(out)
}

/// Human size (`1.2 MB`).
#[must_use]
pub fn human_size(bytes: usize) -> String {
    #[allow(clippy::cast_precision_loss)]
    let b = bytes as f64;
    if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) async fn read_file(f: &web_sys::File) -> Result<Vec<u8>, String> {
    let buf = wasm_bindgen_futures::JsFuture::from(f.array_buffer())
        .await
        .map_err(|e| format!("{}: cannot read: {e:?}", f.name()))?;
    Ok(js_sys::Uint8Array::new(&buf).to_vec())
}

/// A picked file's name: its path inside a picked folder (`webkitRelativePath`), else its name.
fn relative_name(f: &web_sys::File) -> String {
    let rel = js_sys::Reflect::get(f, &wasm_bindgen::JsValue::from_str("webkitRelativePath"))
        .ok()
        .and_then(|v| v.as_string())
        .unwrap_or_default();
    if rel.is_empty() {
        f.name()
    } else {
        rel
    }
}

fn call(
    obj: &wasm_bindgen::JsValue,
    method: &str,
    args: &[&wasm_bindgen::JsValue],
) -> Result<wasm_bindgen::JsValue, String> {
    let f: js_sys::Function = js_sys::Reflect::get(obj, &wasm_bindgen::JsValue::from_str(method))
        .ok()
        .and_then(|f| f.dyn_into().ok())
        .ok_or_else(|| format!("the browser has no {method}()"))?;
    let r = match args {
        [] => f.call0(obj),
        [a] => f.call1(obj, a),
        [a, b] => f.call2(obj, a, b),
        _ => return Err(format!("{method}: too many arguments")),
    };
    r.map_err(|e| format!("{method}: {e:?}"))
}

/// The file-system entries of a drop (files and folders), taken during the event.
fn drop_entries(dt: &web_sys::DataTransfer) -> Vec<wasm_bindgen::JsValue> {
    let Ok(items) = js_sys::Reflect::get(dt, &wasm_bindgen::JsValue::from_str("items")) else {
        return Vec::new();
    };
    let n = js_sys::Reflect::get(&items, &wasm_bindgen::JsValue::from_str("length"))
        .ok()
        .and_then(|v| v.as_f64())
        .unwrap_or(0.0);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let n = n as u32;
    (0..n)
        .filter_map(|i| js_sys::Reflect::get_u32(&items, i).ok())
        .filter_map(|item| call(&item, "webkitGetAsEntry", &[]).ok())
        .filter(|e| !e.is_null() && !e.is_undefined())
        .collect()
}

/// Calls a callback-style method (`success`, `error` arguments) and awaits its result.
async fn callback(obj: &wasm_bindgen::JsValue, method: &str) -> Result<wasm_bindgen::JsValue, String> {
    let mut failed = None;
    let p = js_sys::Promise::new(&mut |resolve, reject| {
        if let Err(e) = call(obj, method, &[&resolve, &reject]) {
            failed = Some(e);
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    wasm_bindgen_futures::JsFuture::from(p).await.map_err(|e| format!("{method}: {e:?}"))
}

/// Every file under the dropped entries, named by its path (a folder's files keep the folder's
/// name in front, as “Choose folder…” gives them).
async fn files_under(mut stack: Vec<wasm_bindgen::JsValue>) -> Result<Vec<(String, web_sys::File)>, String> {
    let flag = |e: &wasm_bindgen::JsValue, k: &str| {
        js_sys::Reflect::get(e, &wasm_bindgen::JsValue::from_str(k))
            .ok()
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    };
    let mut out = Vec::new();
    while let Some(e) = stack.pop() {
        if flag(&e, "isFile") {
            let file: web_sys::File =
                callback(&e, "file").await?.dyn_into().map_err(|_| "not a file".to_string())?;
            let path = js_sys::Reflect::get(&e, &wasm_bindgen::JsValue::from_str("fullPath"))
                .ok()
                .and_then(|v| v.as_string())
                .unwrap_or_else(|| file.name());
            out.push((path.trim_start_matches('/').to_string(), file));
        } else if flag(&e, "isDirectory") {
            let reader = call(&e, "createReader", &[])?;
            // readEntries returns a batch at a time until an empty one.
            loop {
                let batch: js_sys::Array = callback(&reader, "readEntries")
                    .await?
                    .dyn_into()
                    .map_err(|_| "not a list".to_string())?;
                if batch.length() == 0 {
                    break;
                }
                stack.extend(batch.iter());
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn figure(v: &Value) -> Option<Figure> {
    (v.is_object()).then(|| Figure { data: v["data"].clone(), layout: v["layout"].clone() })
}

/// The Data page. `files` is shared with every page that runs scenarios; `config` is the
/// Predict scenario, which `open` replaces and runs.
#[component]
pub fn DataPage(
    files: RwSignal<Vec<Dropped>>,
    config: RwSignal<String>,
    open: Callback<String>,
) -> impl IntoView {
    let entries: RwSignal<Vec<Entry>> = RwSignal::new(Vec::new());
    let worker: StoredValue<Option<SimWorker>, LocalStorage> = StoredValue::new_local(None);
    let pending: StoredValue<BTreeMap<u32, String>> = StoredValue::new(BTreeMap::new());
    let next_id = StoredValue::new(0u32);
    let action_error = RwSignal::new(String::new());
    let dragging = RwSignal::new(false);

    let set_status = move |name: &str, status: Status| {
        entries.update(|es| {
            if let Some(e) = es.iter_mut().find(|e| e.name == name) {
                e.status = status;
            }
        });
    };
    let on_event: Rc<dyn Fn(FromWorker)> = Rc::new(move |msg| match msg {
        FromWorker::Inspected { id, name, kind, summary, slices, figure } => {
            pending.update_value(|p| {
                p.remove(&id);
            });
            set_status(&name, Status::Inspected { kind, summary, slices, figure: figure.map(|f| *f) });
        }
        FromWorker::Failed { id, message, .. } => {
            let name = pending.try_update_value(|p| p.remove(&id)).flatten();
            match name {
                Some(n) => {
                    set_status(&n, Status::Failed(message));
                    // A file that crashed the worker (a wasm trap in a decoder) took it down:
                    // the next file gets a fresh one.
                    worker.update_value(|w| {
                        if w.as_ref().is_some_and(SimWorker::crashed) {
                            if let Some(w) = w.take() {
                                w.terminate();
                            }
                        }
                    });
                }
                // The worker itself failed: every file waiting on it fails with it.
                None => {
                    let waiting: Vec<String> =
                        pending.try_update_value(std::mem::take).unwrap_or_default().into_values().collect();
                    for n in waiting {
                        set_status(&n, Status::Failed(message.clone()));
                    }
                    worker.update_value(|w| {
                        if let Some(w) = w.take() {
                            w.terminate();
                        }
                    });
                }
            }
        }
        _ => {}
    });
    let send = {
        let on_event = on_event.clone();
        move |msg: ToWorker| {
            worker.update_value(|w| {
                if w.is_none() {
                    match SimWorker::spawn(WORKER_URL, on_event.clone()) {
                        Ok(new) => {
                            // A fresh worker gets every file dropped so far.
                            sync_files(&new, &files.get_untracked(), &mut Vec::new());
                            *w = Some(new);
                        }
                        Err(e) => action_error.set(e),
                    }
                }
                if let Some(w) = w {
                    w.send(&msg);
                }
            });
        }
    };
    let send: StoredValue<_, LocalStorage> = StoredValue::new_local(send);
    let inspect = move |name: String, slice: usize| {
        let id = next_id.get_value() + 1;
        next_id.set_value(id);
        pending.update_value(|p| {
            p.insert(id, name.clone());
        });
        send.with_value(|s| s(ToWorker::Inspect { id, name, slice }));
    };

    let add = move |list: Vec<(String, web_sys::File)>| {
        for (name, f) in list {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let size = f.size() as usize;
            entries.update(|es| {
                es.retain(|e| e.name != name);
                es.push(Entry { name: name.clone(), size, status: Status::Reading, slice: 0 });
            });
            wasm_bindgen_futures::spawn_local(async move {
                let bytes = match read_file(&f).await {
                    Ok(b) => b,
                    Err(m) => return set_status(&name, Status::Failed(m)),
                };
                if is_config_file(&name, &bytes) {
                    let status = match String::from_utf8(bytes) {
                        Ok(t) => Status::Config(Arc::from(t)),
                        Err(_) => Status::Failed(format!("{name}: a config must be UTF-8 text")),
                    };
                    return set_status(&name, status);
                }
                let b64: Arc<str> = Arc::from(base64(&bytes));
                files.update(|fs| {
                    fs.retain(|d| d.name != name);
                    fs.push(Dropped { name: name.clone(), size, base64: b64.clone() });
                });
                send.with_value(|s| s(ToWorker::PutFile { name: name.clone(), base64: b64.to_string() }));
                inspect(name, 0);
            });
        }
    };
    let from_input = move |ev: leptos::ev::Event| {
        let Some(input) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()) else {
            return;
        };
        if let Some(list) = input.files() {
            add((0..list.length()).filter_map(|i| list.get(i)).map(|f| (relative_name(&f), f)).collect());
        }
        // The same file picked again (after editing it) is read again.
        input.set_value("");
    };
    let on_drop = move |ev: leptos::ev::DragEvent| {
        ev.prevent_default();
        dragging.set(false);
        let Some(dt) = ev.data_transfer() else { return };
        // Entries must be taken while the event lasts; folders are then read at leisure.
        let entries = drop_entries(&dt);
        if entries.is_empty() {
            // No file-system entries (a drop made by a script): the plain file list.
            if let Some(list) = dt.files() {
                add((0..list.length()).filter_map(|i| list.get(i)).map(|f| (f.name(), f)).collect());
            }
            return;
        }
        wasm_bindgen_futures::spawn_local(async move {
            match files_under(entries).await {
                Ok(found) if found.is_empty() => action_error.set("nothing readable was dropped".into()),
                Ok(found) => add(found),
                Err(e) => action_error.set(e),
            }
        });
    };

    // Draw each described file's figures.
    Effect::new(move |_| {
        let figs: Vec<(String, Figure)> = entries.with(|es| {
            es.iter()
                .enumerate()
                .filter_map(|(k, e)| match &e.status {
                    Status::Inspected { figure: Some(f), .. } => Some((k, f)),
                    _ => None,
                })
                .flat_map(|(k, f)| {
                    let mut v = Vec::new();
                    if let Some(c) = figure(&f["curves"]) {
                        v.push((format!("data-curves-{k}"), c));
                    }
                    if let Some(h) = figure(&f["heatmap"]) {
                        v.push((format!("data-heatmap-{k}"), h));
                    }
                    v
                })
                .collect()
        });
        if !figs.is_empty() {
            crate::plotly::when_ready(move || {
                for (id, fig) in figs {
                    crate::plotly::draw_marked(&id, &fig);
                }
            });
        }
    });

    let apply = move |what: Result<String, String>| match what {
        Ok(yaml) => {
            action_error.set(String::new());
            open.run(yaml);
        }
        Err(e) => action_error.set(e),
    };
    let row = move |k: usize, e: Entry| {
        let name = e.name.clone();
        let actions = match &e.status {
            Status::Config(text) => {
                let text = text.to_string();
                view! { <button class="open-config" on:click=move |_| apply(Ok(text.clone()))>"Open in Predict"</button> }.into_any()
            }
            Status::Inspected { kind, .. } if kind.ends_with("_trace") => {
                let (n, kind) = (name.clone(), kind.clone());
                view! { <button class="use-trace" on:click=move |_| apply(use_trace(&config.get_untracked(), &n, &kind))>"Replay in Predict"</button> }.into_any()
            }
            Status::Inspected { kind, .. }
                if kind == "aic_table" && servesim_scenario::perfdata::aic_path(&name).is_some() =>
            {
                let n = name.clone();
                view! { <button class="use-aic" title="Runs on this table's GPU, engine and version use it in place of servesim's own" on:click=move |_| apply(use_aic(&config.get_untracked(), &n))>"Time Predict with this table"</button> }.into_any()
            }
            Status::Inspected { kind, .. } if kind == "fpm" => {
                let n = name.clone();
                view! { <button class="use-fpm" on:click=move |_| apply(use_fpm(&config.get_untracked(), &n))>"Time Predict with this table"</button> }.into_any()
            }
            _ => ().into_any(),
        };
        let slices = match &e.status {
            Status::Inspected { slices, .. } if slices.len() > 1 => {
                let n = name.clone();
                let current = e.slice;
                view! {
                    <label class="hint">"Slice "
                        <select class="slice" on:change=move |ev| {
                            let s: usize = event_target_value(&ev).parse().unwrap_or(0);
                            entries.update(|es| if let Some(e) = es.iter_mut().find(|e| e.name == n) { e.slice = s; });
                            inspect(n.clone(), s);
                        }>
                            {slices.iter().enumerate().map(|(i, s)| view! { <option value=i.to_string() selected=i == current>{s.clone()}</option> }).collect_view()}
                        </select>
                    </label>
                }
                .into_any()
            }
            _ => ().into_any(),
        };
        let (kind, body, failed) = match &e.status {
            Status::Reading => ("reading…".to_string(), String::new(), false),
            Status::Config(t) => {
                ("scenario config".to_string(), t.lines().take(12).collect::<Vec<_>>().join("\n"), false)
            }
            Status::Inspected { kind, summary, .. } => (kind.replace('_', " "), summary.clone(), false),
            Status::Failed(m) => ("not usable".to_string(), m.clone(), true),
        };
        let key = match &e.status {
            Status::Reading => "reading".to_string(),
            Status::Config(_) => "config".to_string(),
            Status::Inspected { kind, .. } => kind.clone(),
            Status::Failed(_) => "failed".to_string(),
        };
        let has_fig = matches!(&e.status, Status::Inspected { figure: Some(_), .. });
        let has_heat =
            matches!(&e.status, Status::Inspected { figure: Some(f), .. } if f["heatmap"].is_object());
        view! {
            <li class="data-file" data-name=name.clone() data-kind=key>
                <div class="data-head"><strong>{name.clone()}</strong>" · "{human_size(e.size)}" · "<span class="kind">{kind}</span></div>
                <pre class="summary" class:error=failed role=if failed { "alert" } else { "" }>{body}</pre>
                <div class="actions">{actions}{slices}</div>
                <Show when=move || has_fig>
                    <div class="chart-grid">
                        <div id=format!("data-curves-{k}") class="chart small" data-status="empty"></div>
                        <Show when=move || has_heat>
                            <div id=format!("data-heatmap-{k}") class="chart small" data-status="empty"></div>
                        </Show>
                    </div>
                </Show>
            </li>
        }
    };

    // `webkitdirectory` (pick a folder) is not an attribute the view macro knows.
    let folder = NodeRef::<leptos::html::Input>::new();
    Effect::new(move |_| {
        if let Some(el) = folder.get() {
            let _ = el.set_attribute("webkitdirectory", "");
        }
    });
    view! {
        <main class="layout single">
            <section class="panel">
                <h2>"Data"</h2>
                <p class="hint">
                    "Traces (Mooncake and agentic Mooncake .jsonl, Weka .json or .jsonl, Azure .csv), servesim and AIConfigurator Parquet tables, AISimulate FPM tables with their .metadata.json, measured results (AIConfigurator calibration .csv, vLLM per-request .jsonl logs) and scenario configs (.yaml, .json). "
                    "Files are read in this tab and never uploaded; a config that names a dropped file by name (or by a path ending in its name) runs with it. "
                    "Tables of the AIConfigurator perf database picked with their folders (systems/data/<gpu>/<op>/<engine>/<version>/) replace servesim's own tables for that GPU, engine and version in every run until the page is reloaded."
                </p>
                <div id="drop-zone" class="drop-zone" class:dragging=move || dragging.get()
                    on:dragover=move |ev: leptos::ev::DragEvent| { ev.prevent_default(); dragging.set(true); }
                    on:dragleave=move |_| dragging.set(false)
                    on:drop=on_drop>
                    <p>"Drop files or folders here, or "</p>
                    <label class="button">"Choose files…"<input id="data-files" type="file" multiple class="visually-hidden" on:change=from_input /></label>
                    " "
                    <label class="button secondary">"Choose folder…"<input id="data-folder" type="file" multiple node_ref=folder class="visually-hidden" on:change=from_input /></label>
                </div>
                <Show when=move || !action_error.get().is_empty()>
                    <p id="data-error" class="error" role="alert">{move || action_error.get()}</p>
                </Show>
                <ul id="data-list" class="data-list">
                    {move || entries.get().into_iter().enumerate().map(|(k, e)| row(k, e)).collect_view()}
                </ul>
            </section>
        </main>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_replaces_the_source_and_load_and_keeps_the_rest() {
        let out = use_trace(servesim_scenario::DEFAULT_SCENARIO, "conv.jsonl", "mooncake_trace").unwrap();
        let root = node::parse(&out, None).unwrap();
        let get = |p: &str| edit::lookup(&root, p).map(|n| n.value.clone());
        assert_eq!(get("traffic.source.type"), Some(node::Value::Str("trace".into())));
        assert_eq!(get("traffic.source.format"), Some(node::Value::Str("mooncake".into())));
        assert_eq!(get("traffic.load.type"), Some(node::Value::Str("trace_timestamps".into())));
        assert_eq!(get("traffic.stop.requests"), Some(node::Value::Int(100)));
        assert!(out.starts_with("# The default servesim scenario"), "comments kept: {out}");
        let csv = use_trace(servesim_scenario::DEFAULT_SCENARIO, "a.csv", "azure_trace").unwrap();
        assert!(csv.contains("format: azure_csv"), "{csv}");
        let graph = use_trace(servesim_scenario::DEFAULT_SCENARIO, "agent.jsonl", "agentic_trace").unwrap();
        assert!(graph.contains("format: agentic_mooncake"), "{graph}");
        let weka = use_trace(servesim_scenario::DEFAULT_SCENARIO, "conv.json", "weka_trace").unwrap();
        assert!(weka.contains("format: weka") && weka.contains("trace_timestamps"), "{weka}");
    }

    #[test]
    fn an_fpm_table_times_every_role() {
        let pd = include_str!("../../tests/scenarios/pd_vllm.yaml");
        let out = use_fpm(pd, "fpm.parquet").unwrap();
        let root = node::parse(&out, None).unwrap();
        for role in ["prefill", "decode"] {
            let t = edit::lookup(&root, &format!("engine.workers.{role}.timing")).unwrap();
            assert_eq!(t.get("forward_model").unwrap().value, node::Value::Str("fpm".into()));
            assert_eq!(t.get("fpm_parquet_path").unwrap().value, node::Value::Str("fpm.parquet".into()));
        }
        assert!(use_fpm("traffic: {}\n", "x.parquet").unwrap_err().contains("engine.workers"));
    }

    #[test]
    fn an_aiconfigurator_table_sets_its_gpu_engine_and_version() {
        let out = use_aic(
            servesim_scenario::DEFAULT_SCENARIO,
            "aic/systems/data/h100_sxm/gemm/sglang/0.5.14/gemm_perf.parquet",
        )
        .unwrap();
        let root = node::parse(&out, None).unwrap();
        let get = |p: &str| edit::lookup(&root, p).map(|n| n.value.clone());
        assert_eq!(get("engine.hardware"), Some(node::Value::Str("h100_sxm".into())));
        assert_eq!(get("engine.backend"), Some(node::Value::Str("sglang".into())));
        assert_eq!(get("engine.backend_version"), Some(node::Value::Str("0.5.14".into())));
        let nccl =
            use_aic(servesim_scenario::DEFAULT_SCENARIO, "x/b200_sxm/comm/nccl/2.27/nccl_perf.parquet")
                .unwrap();
        assert!(nccl.contains("hardware: b200_sxm") && nccl.contains("backend: vllm"), "{nccl}");
        assert!(use_aic(servesim_scenario::DEFAULT_SCENARIO, "gemm_perf.parquet")
            .unwrap_err()
            .contains("pick the folder"));
    }

    #[test]
    fn configs_are_told_from_data() {
        assert!(is_config("a.yaml") && is_config("b.YML") && is_config("c.json"));
        assert!(is_config_file("c.json", b"{\"engine\": {}}"));
        assert!(!is_config_file("conv.json", br#"{"id": "c", "requests": [{"t": 0, "in": 5, "out": 1}]}"#));
        assert!(
            !is_config("fpm_forward_perf.metadata.json") && !is_config("t.jsonl") && !is_config("g.parquet")
        );
        assert_eq!(human_size(1_234_567), "1.2 MB");
        assert_eq!(human_size(999), "999 B");
    }
}
