//! The page's handle on the simulation Web Worker: spawn, send, cancel, and never hang.
//!
//! The worker announces `Ready` once its wasm is loaded; messages sent earlier are queued
//! (a message posted before the worker installs its handler would be lost). A crash in the
//! worker (script error, wasm trap) is turned into a `Failed` event, so the page never waits
//! forever.

use std::cell::RefCell;
use std::rc::Rc;

use leptos::prelude::{GetValue, LocalStorage, SetValue, StoredValue, UpdateValue, WithValue};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{ErrorEvent, MessageEvent, Worker};

use crate::protocol::{encode, FromWorker, ToWorker};

/// Where Trunk puts the worker's loader shim, relative to the page.
pub const WORKER_URL: &str = "./worker_loader.js";

struct Shared {
    ready: bool,
    queue: Vec<String>,
    current_id: u32,
    /// The worker died (script error or wasm trap): it can serve nothing more.
    crashed: bool,
}

/// A running simulation worker.
pub struct SimWorker {
    worker: Worker,
    shared: Rc<RefCell<Shared>>,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_error: Closure<dyn FnMut(ErrorEvent)>,
}

impl SimWorker {
    /// Starts a worker; `on_event` receives every message from it.
    ///
    /// # Errors
    /// When the browser refuses to create the worker.
    pub fn spawn(url: &str, on_event: Rc<dyn Fn(FromWorker)>) -> Result<Self, String> {
        let worker = Worker::new(url).map_err(|e| format!("cannot start the simulation worker: {e:?}"))?;
        let shared =
            Rc::new(RefCell::new(Shared { ready: false, queue: Vec::new(), current_id: 0, crashed: false }));

        let (w, s, cb) = (worker.clone(), shared.clone(), on_event.clone());
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
            let Some(text) = e.data().as_string() else {
                cb(FromWorker::Failed {
                    id: s.borrow().current_id,
                    message: "worker sent a non-text message".into(),
                    exit_code: 1,
                });
                return;
            };
            let msg: FromWorker = match serde_json::from_str(&text) {
                Ok(m) => m,
                Err(err) => FromWorker::Failed {
                    id: s.borrow().current_id,
                    message: format!("unreadable message from the worker: {err}"),
                    exit_code: 1,
                },
            };
            if msg == FromWorker::Ready {
                let queued: Vec<String> = {
                    let mut sh = s.borrow_mut();
                    sh.ready = true;
                    std::mem::take(&mut sh.queue)
                };
                for q in queued {
                    let _ = w.post_message(&JsValue::from_str(&q));
                }
            }
            cb(msg);
        });
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));

        let (s, cb) = (shared.clone(), on_event);
        let on_error = Closure::<dyn FnMut(ErrorEvent)>::new(move |e: ErrorEvent| {
            e.prevent_default();
            s.borrow_mut().crashed = true;
            let what = if e.message().is_empty() {
                "the worker script failed to load".to_string()
            } else {
                e.message()
            };
            cb(FromWorker::Failed {
                id: s.borrow().current_id,
                message: format!("the simulation worker stopped: {what}"),
                exit_code: 1,
            });
        });
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));

        Ok(SimWorker { worker, shared, _on_message: on_message, _on_error: on_error })
    }

    /// Sends a request (queued until the worker is ready).
    pub fn send(&self, msg: &ToWorker) {
        let text = encode(msg);
        let mut sh = self.shared.borrow_mut();
        sh.current_id = msg.id();
        if sh.ready {
            let _ = self.worker.post_message(&JsValue::from_str(&text));
        } else {
            sh.queue.push(text);
        }
    }

    /// True once the worker has died; a page replaces it before sending more.
    #[must_use]
    pub fn crashed(&self) -> bool {
        self.shared.borrow().crashed
    }

    /// Stops the worker at once, whatever it is doing.
    pub fn terminate(&self) {
        self.worker.set_onmessage(None);
        self.worker.set_onerror(None);
        self.worker.terminate();
    }
}

/// Host time since navigation (ms), for wall-clock figures the page reports.
#[must_use]
pub fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

/// A `data:` URI of `text`, for download links (nothing is uploaded or fetched).
#[must_use]
pub fn data_uri(mime: &str, text: &str) -> String {
    format!("data:{mime};charset=utf-8,{}", js_sys::encode_uri_component(text))
}

thread_local! {
    /// The object URL of the last download, released when the next one is made (releasing it
    /// at once could cancel the download it started).
    static LAST_DOWNLOAD: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Parts of a file between two folds into its Blob (64 MB of 4 MB parts).
const PARTS_PER_FOLD: u32 = 16;

/// A file arriving in parts, saved through a Blob when the last one is in: the text never
/// enters the page's wasm memory, and every few parts are folded into the Blob so the
/// JavaScript heap holds at most a fold's worth of strings (the browser keeps a large Blob on
/// disk; a 7.6 GB requests.jsonl as strings crashed the tab).
pub struct IncomingFile {
    name: String,
    blob: Option<web_sys::Blob>,
    pending: js_sys::Array,
}

impl IncomingFile {
    /// A file to be saved as `name`.
    #[must_use]
    pub fn new(name: &str) -> Self {
        IncomingFile { name: name.to_string(), blob: None, pending: js_sys::Array::new() }
    }

    /// Appends a part.
    ///
    /// # Errors
    /// When the browser refuses the Blob.
    pub fn push(&mut self, text: &str) -> Result<(), String> {
        self.pending.push(&JsValue::from_str(text));
        if self.pending.length() >= PARTS_PER_FOLD {
            self.fold()?;
        }
        Ok(())
    }

    /// Moves the pending strings into the Blob, and returns it.
    fn fold(&mut self) -> Result<&web_sys::Blob, String> {
        let parts = js_sys::Array::new();
        if let Some(b) = &self.blob {
            parts.push(b);
        }
        for p in self.pending.iter() {
            parts.push(&p);
        }
        let blob = web_sys::Blob::new_with_blob_sequence(&parts)
            .map_err(|e| format!("cannot save {}: {e:?}", self.name))?;
        self.pending = js_sys::Array::new();
        Ok(self.blob.insert(blob))
    }

    /// Saves the file (the browser's download).
    ///
    /// # Errors
    /// When the browser refuses the Blob or the link.
    pub fn save(mut self) -> Result<(), String> {
        let blob = self.fold()?.clone();
        save_blob(&self.name, &blob)
    }
}

/// Hands `blob` to the browser as a download named `name`.
fn save_blob(name: &str, blob: &web_sys::Blob) -> Result<(), String> {
    let fail = |e: JsValue| format!("cannot save {name}: {e:?}");
    let url = web_sys::Url::create_object_url_with_blob(blob).map_err(fail)?;
    let document = web_sys::window().and_then(|w| w.document()).ok_or("cannot save without a document")?;
    let a: web_sys::HtmlAnchorElement =
        document.create_element("a").map_err(fail)?.dyn_into().map_err(|_| "not a link".to_string())?;
    a.set_href(&url);
    a.set_download(name);
    a.click();
    if let Some(old) = LAST_DOWNLOAD.with(|l| l.replace(Some(url))) {
        let _ = web_sys::Url::revoke_object_url(&old);
    }
    Ok(())
}

/// Where the service worker is served, relative to the page (its scope: the page's folder).
const SERVICE_WORKER_URL: &str = "./sw.js";

/// Registers the service worker that keeps the app usable offline (static/sw.js). Where the
/// browser has none (insecure origin, `file:`), the page simply works online only.
pub fn register_service_worker() {
    use js_sys::Reflect;
    let Some(nav) = web_sys::window().map(|w| w.navigator()) else { return };
    let Ok(container) = Reflect::get(&nav, &JsValue::from_str("serviceWorker")) else { return };
    if container.is_undefined() {
        return;
    }
    let Ok(register) = Reflect::get(&container, &JsValue::from_str("register"))
        .and_then(|f| f.dyn_into::<js_sys::Function>())
    else {
        return;
    };
    if let Ok(p) = register.call1(&container, &JsValue::from_str(SERVICE_WORKER_URL)) {
        if let Ok(p) = p.dyn_into::<js_sys::Promise>() {
            // A refusal (no HTTPS, blocked by policy) leaves the page as it is.
            let ignore = Closure::<dyn FnMut(JsValue)>::new(|_: JsValue| {});
            let _ = p.catch(&ignore);
            ignore.forget();
        }
    }
}

/// Most workers a pool starts, however many cores the machine reports: each holds its own
/// copy of the kernel tables.
pub const MAX_POOL: usize = 8;

/// How many workers a pool should have here: the machine's cores, at most [`MAX_POOL`].
#[must_use]
pub fn pool_size() -> usize {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let cores = web_sys::window().map_or(1.0, |w| w.navigator().hardware_concurrency()) as usize;
    cores.clamp(1, MAX_POOL)
}

/// A pool of simulation workers; `on_event` learns which worker spoke.
#[derive(Default)]
pub struct Pool {
    workers: Vec<SimWorker>,
}

impl Pool {
    /// Starts `n` workers.
    ///
    /// # Errors
    /// When the browser refuses to create one (none is left running).
    pub fn spawn(n: usize, on_event: impl Fn(usize, FromWorker) + Clone + 'static) -> Result<Pool, String> {
        let mut workers = Vec::with_capacity(n);
        for k in 0..n {
            let f = on_event.clone();
            let cb: Rc<dyn Fn(FromWorker)> = Rc::new(move |m| f(k, m));
            match SimWorker::spawn(WORKER_URL, cb) {
                Ok(w) => workers.push(w),
                Err(e) => {
                    for w in workers {
                        w.terminate();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Pool { workers })
    }

    /// Workers in the pool.
    #[must_use]
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// True when the pool has no worker.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Sends worker `k` a message.
    pub fn send(&self, k: usize, msg: &ToWorker) {
        if let Some(w) = self.workers.get(k) {
            w.send(msg);
        }
    }

    /// Stops every worker at once.
    pub fn terminate(&mut self) {
        for w in self.workers.drain(..) {
            w.terminate();
        }
    }
}

/// A page's worker pool and the number of its current run. A new run or a cancel stops the
/// last run's workers and moves the number on, so their late messages are ignored.
#[derive(Clone, Copy)]
pub struct PoolRun {
    pool: StoredValue<Pool, LocalStorage>,
    id: StoredValue<u32>,
}

impl Default for PoolRun {
    fn default() -> Self {
        PoolRun { pool: StoredValue::new_local(Pool::default()), id: StoredValue::new(0) }
    }
}

impl PoolRun {
    /// The current run's number (0 before the first).
    #[must_use]
    pub fn current(self) -> u32 {
        self.id.get_value()
    }

    /// Stops the workers; the run keeps its number (it has ended).
    pub fn stop(self) {
        self.pool.update_value(Pool::terminate);
    }

    /// Stops the last run's workers and numbers a new run: its number.
    #[must_use]
    pub fn next(self) -> u32 {
        self.stop();
        let id = self.id.get_value() + 1;
        self.id.set_value(id);
        id
    }

    /// Stops the run in flight; its late messages are ignored from now on.
    pub fn cancel(self) {
        let _ = self.next();
    }

    /// Gives the current run its workers.
    pub fn set(self, pool: Pool) {
        self.pool.set_value(pool);
    }

    /// Uses the current run's workers.
    pub fn with<R>(self, f: impl FnOnce(&Pool) -> R) -> R {
        self.pool.with_value(f)
    }

    /// The message of a failure that ends the current run, its workers stopped: one of the
    /// run's own, or a worker's that names no run (0: it failed loading or outside any
    /// request). `None` for any other message.
    #[must_use]
    pub fn failure(self, msg: &FromWorker) -> Option<String> {
        match msg {
            FromWorker::Failed { id, message, .. } if *id == self.current() || *id == 0 => {
                self.stop();
                Some(message.clone())
            }
            _ => None,
        }
    }
}

thread_local! {
    /// The request the worker is serving (named by a panic's report).
    static SERVING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Data files fetched so far (a worker serves many runs; each file is fetched once).
    static DATA: RefCell<crate::protocol::MemFiles> = RefCell::new(crate::protocol::MemFiles::default());
    /// What the worker keeps between messages (catalog, search spec, a coordinated search).
    static STATE: RefCell<crate::protocol::WorkerState> = RefCell::new(crate::protocol::WorkerState::default());
    /// Paths listed in `data/perf/manifest.json` (`None` until read).
    static LISTED: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// Where the data directory is served, relative to the worker script.
const DATA_URL: &str = "./data/";

async fn fetch_bytes(scope: &web_sys::WorkerGlobalScope, url: &str) -> Result<Option<Vec<u8>>, String> {
    let resp = wasm_bindgen_futures::JsFuture::from(scope.fetch_with_str(url))
        .await
        .map_err(|e| format!("cannot fetch {url}: {e:?}"))?;
    let resp: web_sys::Response =
        resp.dyn_into().map_err(|_| format!("cannot fetch {url}: not a response"))?;
    if resp.status() == 404 {
        return Ok(None);
    }
    if !resp.ok() {
        return Err(format!("cannot fetch {url}: HTTP {}", resp.status()));
    }
    let buf = wasm_bindgen_futures::JsFuture::from(
        resp.array_buffer().map_err(|e| format!("cannot read {url}: {e:?}"))?,
    )
    .await
    .map_err(|e| format!("cannot read {url}: {e:?}"))?;
    Ok(Some(js_sys::Uint8Array::new(&buf).to_vec()))
}

/// The paths the data manifest lists (so a host that answers unknown paths with the page
/// itself is never asked for a file that does not exist).
async fn listed(scope: &web_sys::WorkerGlobalScope) -> Result<Vec<String>, String> {
    if let Some(l) = LISTED.with(|l| l.borrow().clone()) {
        return Ok(l);
    }
    let url = format!("{DATA_URL}perf/manifest.json");
    let list = match fetch_bytes(scope, &url).await? {
        Some(bytes) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(v) => v["files"]
                .as_array()
                .map(|a| a.iter().filter_map(|f| f["path"].as_str()).map(|p| format!("perf/{p}")).collect())
                .unwrap_or_default(),
            // Not JSON: no data directory is served here.
            Err(_) => Vec::new(),
        },
        None => Vec::new(),
    };
    LISTED.with(|l| *l.borrow_mut() = Some(list.clone()));
    Ok(list)
}

/// Fetches the data files a config needs that are not cached yet.
async fn fetch_data(scope: &web_sys::WorkerGlobalScope, config: &str) -> Result<(), String> {
    let available = listed(scope).await?;
    for path in servesim_scenario::perfdata::paths_for_config(config) {
        let have = DATA.with(|d| d.borrow().data.contains_key(&path));
        if have || !available.contains(&path) {
            continue;
        }
        if let Some(bytes) = fetch_bytes(scope, &format!("{DATA_URL}{path}")).await? {
            DATA.with(|d| d.borrow_mut().data.insert(path, bytes));
        }
    }
    Ok(())
}

/// The worker side: installs the message handler and announces readiness.
pub fn worker_main() {
    // A panic aborts the wasm instance, and the page only learns "unreachable". Tell it what
    // failed first, for the request being served (the page then replaces this worker).
    std::panic::set_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info.location().map(|l| format!(" ({}:{})", l.file(), l.line())).unwrap_or_default();
        let failed = FromWorker::Failed {
            id: SERVING.with(std::cell::Cell::get),
            message: format!("the simulation worker hit an internal error: {what}{at}"),
            exit_code: 1,
        };
        let scope: web_sys::DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
        let _ = scope.post_message(&JsValue::from_str(&encode(&failed)));
    }));
    let scope: web_sys::DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    let reply_scope = scope.clone();
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
        let scope = reply_scope.clone();
        let post = move |m: FromWorker| {
            let _ = scope.post_message(&JsValue::from_str(&encode(&m)));
        };
        match e.data().as_string().map(|t| crate::protocol::decode_to_worker(&t)) {
            Some(Ok(msg)) => {
                let scope = reply_scope.clone();
                wasm_bindgen_futures::spawn_local(async move {
                    let mut post = post;
                    let id = msg.id();
                    SERVING.with(|c| c.set(id));
                    let configs = STATE.with(|st| msg.configs(&mut st.borrow_mut()));
                    for config in configs {
                        if let Err(message) = fetch_data(&scope, &config).await {
                            post(FromWorker::Failed { id, message, exit_code: 1 });
                            return;
                        }
                    }
                    let perf = scope.performance();
                    let now = move || perf.as_ref().map_or(0.0, web_sys::Performance::now);
                    DATA.with(|d| {
                        let files = d.borrow();
                        STATE.with(|st| {
                            crate::protocol::handle(&mut st.borrow_mut(), msg, &*files, &now, &mut post);
                        });
                    });
                });
            }
            Some(Err(reply)) => post(reply),
            None => post(FromWorker::Failed {
                id: 0,
                message: "worker received a non-text message".into(),
                exit_code: 2,
            }),
        }
    });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    on_message.forget();
    let _ = scope.post_message(&JsValue::from_str(&encode(&FromWorker::Ready)));
}
