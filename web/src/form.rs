//! The scenario form beside the YAML editor. The YAML text is the one source of truth: each
//! field shows the value at its dotted path, and a change edits only that value in the text
//! (`servesim_scenario::edit`, comments and layout kept), so the two never disagree. A field
//! left empty removes its key (the engine default applies). Problems the worker's validator
//! finds are shown at the field of their path.

use leptos::prelude::*;
use servesim_scenario::edit;
use servesim_scenario::node::{self, Node, Value};

use crate::protocol::Problem;

/// How a field reads and writes its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Free text (a string).
    Text,
    /// A whole number.
    Int,
    /// A number.
    Float,
    /// One of a list (`""`: not set).
    Choice(&'static [&'static str]),
    /// `true`/`false` (`""`: not set).
    Bool,
}

/// A form field: where its value lives, its label and how to read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Dotted path below its section's prefix.
    pub path: &'static str,
    /// Label.
    pub label: &'static str,
    /// Value kind.
    pub kind: Kind,
}

const fn field(path: &'static str, label: &'static str, kind: Kind) -> Field {
    Field { path, label, kind }
}

/// Engine fields (below `engine.`).
pub const ENGINE: [Field; 8] = [
    field("model", "Model", Kind::Text),
    field("hardware", "GPU", Kind::Text),
    field("backend", "Engine", Kind::Choice(&["vllm", "sglang", "trtllm"])),
    field("backend_version", "Engine version", Kind::Text),
    field("enable_chunked_prefill", "Chunked prefill", Kind::Bool),
    field("nextn", "MTP/EAGLE drafts (nextn)", Kind::Int),
    field("nextn_accepted", "Drafts accepted per round", Kind::Float),
    field("kv_eviction_policy", "KV eviction", Kind::Choice(&["lru", "belady"])),
];

/// Fields of each worker role (below `engine.workers.<role>.`). The last seven are SGLang's
/// and TensorRT-LLM's (the validator says so at the field under another engine).
pub const ROLE: [Field; 19] = [
    field("parallelism.replicas", "Replicas", Kind::Int),
    field("parallelism.tensor", "Tensor parallel", Kind::Int),
    field("parallelism.pipeline", "Pipeline parallel", Kind::Int),
    field("parallelism.expert", "Expert parallel", Kind::Int),
    field("parallelism.attention_data", "Attention DP", Kind::Int),
    field("scheduler.max_sequences", "Max sequences", Kind::Int),
    field("scheduler.max_batched_tokens", "Max batched tokens", Kind::Int),
    field("kv_cache.prefix_caching", "Prefix caching", Kind::Bool),
    field("scheduler.async_scheduling", "Async scheduling", Kind::Bool),
    field("startup_seconds", "Startup s (autoscaling)", Kind::Float),
    field("timing.allreduce", "All-reduce", Kind::Choice(&["custom", "nccl"])),
    field("timing.moe_kernel", "MoE kernels", Kind::Choice(&["default", "min_latency"])),
    field("scheduler.schedule_policy", "Policy (SGLang)", Kind::Choice(&["fifo", "lpm"])),
    field("scheduler.chunked_prefill_size", "Chunk size (SGLang)", Kind::Int),
    field("scheduler.scheduler_recv_interval", "Recv interval (SGLang)", Kind::Int),
    field("scheduler.enable_mixed_chunk", "Mixed chunk (SGLang)", Kind::Bool),
    field("scheduler.batch_wait_timeout_iters", "Batch wait steps (TRT-LLM)", Kind::Int),
    field("scheduler.batch_wait_max_tokens_ratio", "Batch wait token share (TRT-LLM)", Kind::Float),
    field("scheduler.attention_dp_config.enable_balance", "Attention-DP balance (TRT-LLM)", Kind::Bool),
];

/// Serving-frontend fields of the aggregated role (below `engine.workers.aggregated.`): the
/// frontend queue is not modelled for disaggregated roles.
pub const FRONTEND: [Field; 4] = [
    field("frontend.processes", "Serving processes", Kind::Int),
    field("frontend.stream_interval", "Stream interval (tokens)", Kind::Int),
    field("frontend.request_ms", "Frontend ms / request", Kind::Float),
    field("frontend.chunk_us", "Frontend us / chunk", Kind::Float),
];

/// Traffic, router, SLA and autoscaling fields (full paths).
pub const TRAFFIC: [Field; 17] = [
    field("traffic.source.type", "Source", Kind::Choice(&["synthetic", "synthetic-session", "trace"])),
    field("traffic.source.input_tokens", "Input tokens", Kind::Int),
    field("traffic.source.output_tokens", "Output tokens", Kind::Int),
    field("traffic.source.shared_prefix_tokens", "Shared prefix tokens", Kind::Int),
    field("traffic.source.prompt_pool", "Prompt pool (0: every prompt new)", Kind::Int),
    field(
        "traffic.load.type",
        "Load",
        Kind::Choice(&[
            "concurrency",
            "poisson",
            "constant_rate",
            "gamma",
            "kv_capacity_fraction",
            "trace_timestamps",
        ]),
    ),
    field("traffic.load.concurrency", "Concurrency", Kind::Int),
    field("traffic.load.requests_per_second", "Requests/s", Kind::Float),
    field("traffic.load.cv", "Burstiness (cv)", Kind::Float),
    field("traffic.stop.requests", "Stop after requests", Kind::Int),
    field("traffic.stop.max_virtual_time_seconds", "Stop after seconds", Kind::Float),
    field(
        "router.policy",
        "Router",
        Kind::Choice(&["round_robin", "least_loaded", "kv_aware", "kv_router", "session_affinity"]),
    ),
    field("evaluation.sla.ttft_ms", "SLA TTFT (ms)", Kind::Float),
    field("evaluation.sla.itl_ms", "SLA ITL (ms)", Kind::Float),
    field("planner.policy", "Autoscaling (planner)", Kind::Choice(&["disabled", "enabled"])),
    field("planner.max_num_gpus", "Planner max GPUs", Kind::Int),
    field("evaluation.uncertainty.seeds", "Uncertainty band (seeds)", Kind::Int),
];

/// What a field shows for the value at its path: the text to edit, or `None` when the value
/// is a list or mapping (edited in the YAML only).
#[must_use]
pub fn shown(root: &Node, path: &str) -> Option<String> {
    match edit::lookup(root, path).map(|n| &n.value) {
        None | Some(Value::Null) => Some(String::new()),
        Some(Value::Bool(b)) => Some(b.to_string()),
        Some(Value::Int(i)) => Some(i.to_string()),
        Some(Value::Float(f)) => Some(format!("{f}")),
        Some(Value::Str(s)) => Some(s.clone()),
        Some(Value::Seq(_) | Value::Map(_)) => None,
    }
}

/// The value a field's text stands for (`None`: remove the key). Text that is not of the
/// field's kind is written as a string, so the validator names it at the field.
#[must_use]
pub fn parsed(kind: Kind, text: &str) -> Option<Value> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    Some(match kind {
        Kind::Int => t.parse::<i64>().map_or_else(|_| Value::Str(t.into()), Value::Int),
        Kind::Float => match t.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => t.parse::<f64>().map_or_else(|_| Value::Str(t.into()), Value::Float),
        },
        Kind::Bool => match t {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            other => Value::Str(other.into()),
        },
        Kind::Text | Kind::Choice(_) => Value::Str(t.into()),
    })
}

/// The worker roles of a config (`aggregated`, or `prefill` and `decode`).
#[must_use]
pub fn roles(root: &Node) -> Vec<String> {
    match edit::lookup(root, "engine.workers").map(|n| &n.value) {
        Some(Value::Map(m)) if !m.is_empty() => m.iter().map(|(k, _, _)| k.clone()).collect(),
        _ => vec!["aggregated".to_string()],
    }
}

/// Switches between aggregated and disaggregated serving: the aggregated worker's settings
/// become both the prefill and the decode pool's, and back (prefill's settings kept).
///
/// # Errors
/// The text does not parse.
pub fn switch_mode(text: &str, disaggregated: bool) -> Result<String, String> {
    let root = node::parse(text, None).map_err(|e| e.to_string())?;
    let role = |name: &str| edit::lookup(&root, &format!("engine.workers.{name}")).cloned();
    let empty = || Node::builtin(Value::Map(Vec::new()));
    let entry = |k: &str, n: Node| (k.to_string(), node::Origin::Builtin, n);
    let (mode, workers) = if disaggregated {
        let base = role("aggregated").unwrap_or_else(empty);
        let prefill = role("prefill").unwrap_or_else(|| base.clone());
        let decode = role("decode").unwrap_or(base);
        ("disaggregated", vec![entry("prefill", prefill), entry("decode", decode)])
    } else {
        let base = role("aggregated").or_else(|| role("prefill")).unwrap_or_else(empty);
        ("aggregated", vec![entry("aggregated", base)])
    };
    let out = edit::set(text, "engine.workers", Some(&Value::Map(workers)))?;
    let out = edit::set(&out, "engine.mode", Some(&Value::Str(mode.into())))?;
    // The disaggregated-only KV link means nothing to one pool.
    if disaggregated {
        Ok(out)
    } else {
        edit::set(&out, "engine.kv_transfer", None)
    }
}

/// The problems at `path` or below it.
#[must_use]
pub fn problems_at(problems: &[Problem], path: &str) -> Vec<String> {
    problems
        .iter()
        .filter(|p| p.path == path || p.path.strip_prefix(path).is_some_and(|r| r.starts_with('.')))
        .map(|p| p.message.clone())
        .collect()
}

/// Whether `path` is shown by some field of the form for these roles.
#[must_use]
pub fn covered(path: &str, roles: &[String]) -> bool {
    let under = |f: &str| path == f || path.strip_prefix(f).is_some_and(|r| r.starts_with('.'));
    ENGINE.iter().any(|f| under(&format!("engine.{}", f.path)))
        || path == "engine.mode"
        || roles.iter().any(|r| ROLE.iter().any(|f| under(&format!("engine.workers.{r}.{}", f.path))))
        || (roles.iter().any(|r| r == "aggregated")
            && FRONTEND.iter().any(|f| under(&format!("engine.workers.aggregated.{}", f.path))))
        || TRAFFIC.iter().any(|f| under(f.path))
}

fn dom_id(path: &str) -> String {
    format!("f-{}", path.replace(['.', '_'], "-"))
}

/// One field bound to `path` in `config`.
#[component]
fn FieldInput(
    config: RwSignal<String>,
    tree: Memo<Result<Node, String>>,
    problems: Signal<Vec<Problem>>,
    path: String,
    label: &'static str,
    kind: Kind,
    #[prop(optional)] list: Option<&'static str>,
) -> impl IntoView {
    let id = dom_id(&path);
    let p = path.clone();
    let value = Memo::new(move |_| tree.with(|t| t.as_ref().ok().map(|n| shown(n, &p))));
    let p = path.clone();
    let errors = Signal::derive(move || problems.with(|ps| problems_at(ps, &p)));
    let on_change = move |ev: leptos::ev::Event| {
        let text = event_target_value(&ev);
        let v = parsed(kind, &text);
        let current = config.get_untracked();
        if let Ok(next) = edit::set(&current, &path, v.as_ref()) {
            if next != current {
                config.set(next);
            }
        }
    };
    // Disabled while the YAML does not parse, or when the value is a list or mapping.
    let disabled = move || !matches!(value.get(), Some(Some(_)));
    let text = move || value.get().flatten().unwrap_or_default();
    let title = move || match value.get() {
        Some(None) => "set in the YAML (a list or mapping)".to_string(),
        None => "fix the YAML first".to_string(),
        Some(Some(_)) => String::new(),
    };
    let input = match kind {
        Kind::Choice(options) => view! {
            <select id=id.clone() prop:value=text on:change=on_change disabled=disabled title=title
                aria-invalid=move || (!errors.get().is_empty()).to_string()>
                <option value="">"(default)"</option>
                {options.iter().map(|o| view! { <option value=*o>{*o}</option> }).collect_view()}
            </select>
        }
        .into_any(),
        Kind::Bool => view! {
            <select id=id.clone() prop:value=text on:change=on_change disabled=disabled title=title
                aria-invalid=move || (!errors.get().is_empty()).to_string()>
                <option value="">"(default)"</option>
                <option value="true">"on"</option>
                <option value="false">"off"</option>
            </select>
        }
        .into_any(),
        _ => view! {
            <input id=id.clone() type="text" prop:value=text on:change=on_change disabled=disabled title=title
                placeholder="default" list=list.unwrap_or_default()
                inputmode=if matches!(kind, Kind::Int) { "numeric" } else if matches!(kind, Kind::Float) { "decimal" } else { "text" }
                aria-invalid=move || (!errors.get().is_empty()).to_string() />
        }
        .into_any(),
    };
    let error_id = format!("{id}-error");
    view! {
        <label class="field" for=id.clone()>
            {label}
            {input}
            <Show when=move || !errors.get().is_empty()>
                <span class="field-error" id=error_id.clone() role="alert">{move || errors.get().join("; ")}</span>
            </Show>
        </label>
    }
}

/// The form. `models` and `hardware` are the catalog's ids (offered as suggestions).
#[component]
pub fn ScenarioForm(
    config: RwSignal<String>,
    problems: Signal<Vec<Problem>>,
    models: Signal<Vec<String>>,
    hardware: Signal<Vec<String>>,
) -> impl IntoView {
    let tree = Memo::new(move |_| config.with(|c| node::parse(c, None).map_err(|e| e.to_string())));
    // Re-rendered only when the set of roles changes, so typing never recreates an input.
    let role_names = Memo::new(move |_| tree.with(|t| t.as_ref().map(roles).unwrap_or_default()));
    let disaggregated =
        Memo::new(move |_| role_names.with(|r| r.iter().any(|n| n == "prefill" || n == "decode")));
    let syntax = move || tree.with(|t| t.as_ref().err().cloned());
    let mode_error = RwSignal::new(String::new());
    let on_mode = move |ev: leptos::ev::Event| {
        let dis = event_target_value(&ev) == "disaggregated";
        match switch_mode(&config.get_untracked(), dis) {
            Ok(t) => {
                mode_error.set(String::new());
                config.set(t);
            }
            Err(e) => mode_error.set(e),
        }
    };
    let others = Signal::derive(move || {
        let r = role_names.get();
        problems.with(|ps| ps.iter().filter(|p| !covered(&p.path, &r)).cloned().collect::<Vec<_>>())
    });
    let fi = move |path: String, f: Field, list: Option<&'static str>| match list {
        Some(l) => {
            view! { <FieldInput config tree problems path label=f.label kind=f.kind list=l /> }.into_any()
        }
        None => view! { <FieldInput config tree problems path label=f.label kind=f.kind /> }.into_any(),
    };
    view! {
        <div id="scenario-form" class="scenario-form">
            <Show when=move || syntax().is_some()>
                <p id="form-syntax" class="error" role="alert">{move || format!("The YAML does not parse ({}); the form waits for it.", syntax().unwrap_or_default())}</p>
            </Show>
            <datalist id="model-ids">{move || models.get().into_iter().map(|m| view! { <option value=m></option> }).collect_view()}</datalist>
            <datalist id="gpu-ids">{move || hardware.get().into_iter().map(|m| view! { <option value=m></option> }).collect_view()}</datalist>
            <fieldset>
                <legend>"Deployment"</legend>
                <div class="form-grid">
                    {ENGINE.iter().map(|f| {
                        let list = match f.path { "model" => Some("model-ids"), "hardware" => Some("gpu-ids"), _ => None };
                        fi(format!("engine.{}", f.path), *f, list)
                    }).collect_view()}
                    <label class="field" for="f-engine-mode">"Serving"
                        <select id="f-engine-mode" prop:value=move || if disaggregated.get() { "disaggregated" } else { "aggregated" } on:change=on_mode>
                            <option value="aggregated">"aggregated"</option>
                            <option value="disaggregated">"prefill/decode disaggregated"</option>
                        </select>
                    </label>
                </div>
                <Show when=move || !mode_error.get().is_empty()>
                    <p class="error" role="alert">{move || mode_error.get()}</p>
                </Show>
            </fieldset>
            {move || role_names.get().into_iter().map(|role| view! {
                <fieldset>
                    <legend>{format!("Workers: {role}")}</legend>
                    <div class="form-grid">
                        {ROLE.iter().map(|f| fi(format!("engine.workers.{role}.{}", f.path), *f, None)).collect_view()}
                        {(role == "aggregated").then(|| FRONTEND.iter().map(|f| fi(format!("engine.workers.aggregated.{}", f.path), *f, None)).collect_view())}
                    </div>
                </fieldset>
            }).collect_view()}
            <fieldset>
                <legend>"Traffic, routing and SLA"</legend>
                <div class="form-grid">
                    {TRAFFIC.iter().map(|f| fi(f.path.to_string(), *f, None)).collect_view()}
                </div>
            </fieldset>
            <Show when=move || !others.get().is_empty()>
                <ul id="other-problems" class="error problems" role="alert">
                    {move || others.get().into_iter().map(|p| {
                        let at = match (p.line, p.col) { (Some(l), Some(c)) => format!(" (line {l}, column {c})"), _ => String::new() };
                        let path = if p.path.is_empty() { "(document)".to_string() } else { p.path.clone() };
                        view! { <li>{format!("{path}{at}: {}", p.message)}</li> }
                    }).collect_view()}
                </ul>
            </Show>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(t: &str) -> Node {
        node::parse(t, None).unwrap()
    }

    #[test]
    fn fields_show_and_parse_values() {
        let r = root(servesim_scenario::DEFAULT_SCENARIO);
        assert_eq!(shown(&r, "engine.backend").as_deref(), Some("vllm"));
        assert_eq!(shown(&r, "traffic.load.concurrency").as_deref(), Some("10"));
        assert_eq!(shown(&r, "router.policy").as_deref(), Some(""));
        assert_eq!(shown(&r, "engine.workers"), None);
        assert_eq!(parsed(Kind::Int, " 12 "), Some(Value::Int(12)));
        assert_eq!(parsed(Kind::Int, "twelve"), Some(Value::Str("twelve".into())));
        assert_eq!(parsed(Kind::Float, "2.5"), Some(Value::Float(2.5)));
        assert_eq!(parsed(Kind::Float, "3"), Some(Value::Int(3)));
        assert_eq!(parsed(Kind::Bool, "false"), Some(Value::Bool(false)));
        assert_eq!(parsed(Kind::Choice(&["a"]), ""), None);
    }

    #[test]
    fn every_field_round_trips_through_the_text() {
        // Setting each field and reading it back gives what was typed, for every field kind.
        let mut text = servesim_scenario::DEFAULT_SCENARIO.to_string();
        let paths: Vec<(String, Kind)> = ENGINE
            .iter()
            .map(|f| (format!("engine.{}", f.path), f.kind))
            .chain(ROLE.iter().map(|f| (format!("engine.workers.aggregated.{}", f.path), f.kind)))
            .chain(FRONTEND.iter().map(|f| (format!("engine.workers.aggregated.{}", f.path), f.kind)))
            .chain(TRAFFIC.iter().map(|f| (f.path.to_string(), f.kind)))
            .collect();
        for (path, kind) in &paths {
            let typed = match kind {
                Kind::Int => "7",
                Kind::Float => "2.5",
                Kind::Bool => "false",
                Kind::Choice(o) => o[o.len() - 1],
                Kind::Text => "x-y",
            };
            text = edit::set(&text, path, parsed(*kind, typed).as_ref()).unwrap();
            assert_eq!(shown(&root(&text), path).as_deref(), Some(typed), "{path}: {text}");
        }
        assert!(text.starts_with("# The default servesim scenario"));
        // Clearing a field removes its key.
        let cleared = edit::set(&text, "traffic.load.concurrency", None).unwrap();
        assert_eq!(shown(&root(&cleared), "traffic.load.concurrency").as_deref(), Some(""));
    }

    #[test]
    fn mode_switch_keeps_worker_settings() {
        let agg = "engine:\n  model: m\n  workers:\n    aggregated:\n      parallelism: {tensor: 2}\n";
        let dis = switch_mode(agg, true).unwrap();
        let r = root(&dis);
        assert_eq!(roles(&r), ["prefill", "decode"]);
        assert_eq!(shown(&r, "engine.workers.decode.parallelism.tensor").as_deref(), Some("2"));
        assert_eq!(shown(&r, "engine.mode").as_deref(), Some("disaggregated"));
        let back = switch_mode(&dis, false).unwrap();
        let r = root(&back);
        assert_eq!(roles(&r), ["aggregated"]);
        assert_eq!(shown(&r, "engine.workers.aggregated.parallelism.tensor").as_deref(), Some("2"));
        assert_eq!(shown(&r, "engine.mode").as_deref(), Some("aggregated"));
        assert!(switch_mode("a: [", true).is_err());
    }

    #[test]
    fn problems_land_at_their_field_or_in_the_list() {
        let p = |path: &str| Problem {
            path: path.into(),
            line: Some(1),
            col: Some(1),
            message: format!("bad {path}"),
        };
        let all = vec![
            p("engine.workers.aggregated.parallelism.tensor"),
            p("traffic.source.input_tokens.mean"),
            p("engine.speculation"),
        ];
        assert_eq!(problems_at(&all, "engine.workers.aggregated.parallelism.tensor").len(), 1);
        assert_eq!(
            problems_at(&all, "traffic.source.input_tokens"),
            ["bad traffic.source.input_tokens.mean"]
        );
        assert!(problems_at(&all, "traffic.source.input").is_empty());
        let roles = vec!["aggregated".to_string()];
        assert!(covered("engine.workers.aggregated.parallelism.tensor", &roles));
        assert!(!covered("engine.workers.prefill.parallelism.tensor", &roles));
        assert!(!covered("engine.speculation", &roles));
    }
}
