//! Browser tests (`cargo test -p servesim_web --target wasm32-unknown-unknown`, run by
//! wasm-bindgen-test-runner in headless Chromium).
#![cfg(target_arch = "wasm32")]
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use servesim_web::protocol::{handle, FromWorker, MemFiles, ToWorker, WorkerState};
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

async fn sleep_ms(ms: i32) {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        let _ =
            web_sys::window().unwrap().set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
    });
    let _ = wasm_bindgen_futures::JsFuture::from(p).await;
}

/// The kernel tables the golden scenarios use (H200 and H100, every engine), as the worker
/// would fetch them.
fn data() -> MemFiles {
    let mut m = MemFiles::default();
    macro_rules! table {
        ($sys:literal, $be:literal, $ver:literal, [$($fam:literal),*]) => {$(
            m.data.insert(
                concat!("perf/", $sys, "/", $be, "/", $ver, "/", $fam, ".parquet").to_string(),
                include_bytes!(concat!("../../data/perf/", $sys, "/", $be, "/", $ver, "/", $fam, ".parquet")).to_vec(),
            );
        )*};
    }
    macro_rules! nccl {
        ($($sys:literal),*) => {$(
            m.data.insert(
                concat!("perf/", $sys, "/nccl.parquet").to_string(),
                include_bytes!(concat!("../../data/perf/", $sys, "/nccl.parquet")).to_vec(),
            );
        )*};
    }
    table!(
        "h200_sxm",
        "vllm",
        "0.24.0",
        ["gemm", "context_attention", "generation_attention", "allreduce", "moe", "gdn"]
    );
    table!(
        "h200_sxm",
        "sglang",
        "0.5.14",
        [
            "gemm",
            "context_attention",
            "generation_attention",
            "allreduce",
            "moe",
            "context_mla",
            "generation_mla",
            "deepep_context_moe",
            "deepep_generation_moe",
            "deepep_normal",
            "deepep_low_latency",
            "gdn"
        ]
    );
    table!(
        "h200_sxm",
        "trtllm",
        "1.3.0rc20",
        [
            "gemm",
            "context_attention",
            "generation_attention",
            "allreduce",
            "moe",
            "context_mla",
            "generation_mla",
            "gdn"
        ]
    );
    table!(
        "h100_sxm",
        "sglang",
        "0.5.14",
        [
            "gemm",
            "context_attention",
            "generation_attention",
            "allreduce",
            "moe",
            "context_mla",
            "generation_mla",
            "deepep_context_moe",
            "deepep_generation_moe",
            "deepep_normal",
            "deepep_low_latency",
            "gdn"
        ]
    );
    nccl!("h200_sxm", "h100_sxm");
    m
}

/// The same seed gives the same bytes natively and in WebAssembly: the native golden test
/// (`tests/golden.rs`, `BYTE_GOLDENS`) checks these very files.
#[wasm_bindgen_test]
fn predictions_are_byte_identical_to_native() {
    let cases = [
        (servesim_scenario::DEFAULT_SCENARIO, include_str!("../../tests/golden/default.prediction.json")),
        (
            include_str!("../../tests/scenarios/sglang_default.yaml"),
            include_str!("../../tests/golden/sglang_default.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/trtllm_tp4_poisson.yaml"),
            include_str!("../../tests/golden/trtllm_tp4_poisson.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/pd_vllm.yaml"),
            include_str!("../../tests/golden/pd_vllm.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/pd_sglang_kv_aware.yaml"),
            include_str!("../../tests/golden/pd_sglang_kv_aware.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/spec_eagle_sglang.yaml"),
            include_str!("../../tests/golden/spec_eagle_sglang.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/vllm_host_offload.yaml"),
            include_str!("../../tests/golden/vllm_host_offload.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/trtllm_host_offload.yaml"),
            include_str!("../../tests/golden/trtllm_host_offload.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/sglang_hicache.yaml"),
            include_str!("../../tests/golden/sglang_hicache.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/sglang_hicache_storage.yaml"),
            include_str!("../../tests/golden/sglang_hicache_storage.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/vllm_g3_shared.yaml"),
            include_str!("../../tests/golden/vllm_g3_shared.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/pd_vllm_host_offload.yaml"),
            include_str!("../../tests/golden/pd_vllm_host_offload.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/vllm_host_offload_shared.yaml"),
            include_str!("../../tests/golden/vllm_host_offload_shared.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/vllm_belady_prompt_pool.yaml"),
            include_str!("../../tests/golden/vllm_belady_prompt_pool.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/hybrid_qwen35_vllm_sessions.yaml"),
            include_str!("../../tests/golden/hybrid_qwen35_vllm_sessions.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/planner_vllm_ramp.yaml"),
            include_str!("../../tests/golden/planner_vllm_ramp.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/agentic_coding_vllm.yaml"),
            include_str!("../../tests/golden/agentic_coding_vllm.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/agentic_coding_vllm_warmup.yaml"),
            include_str!("../../tests/golden/agentic_coding_vllm_warmup.prediction.json"),
        ),
        (
            include_str!("../../tests/scenarios/uncertainty_vllm_poisson.yaml"),
            include_str!("../../tests/golden/uncertainty_vllm_poisson.prediction.json"),
        ),
    ];
    let files = data();
    // The agentic scenario's trace, as the page holds a dropped file.
    let mut state = WorkerState::default();
    let trace = include_bytes!("../../tests/fixtures/traces/agentic_coding.jsonl");
    handle(
        &mut state,
        ToWorker::PutFile {
            name: "agentic_coding.jsonl".into(),
            base64: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, trace),
        },
        &files,
        &|| 0.0,
        &mut |m| panic!("{m:?}"),
    );
    for (i, (config, want)) in cases.into_iter().enumerate() {
        let mut out = Vec::new();
        #[allow(clippy::cast_possible_truncation)]
        let id = i as u32;
        handle(
            &mut state,
            ToWorker::Run { id, config: config.into(), source: "golden".into() },
            &files,
            &|| 0.0,
            &mut |m| out.push(m),
        );
        let Some(FromWorker::Done { prediction, .. }) = out.pop() else { panic!("case {i} failed: {out:?}") };
        if prediction != want {
            let line = prediction.lines().zip(want.lines()).position(|(a, b)| a != b).unwrap_or(0);
            let got = prediction.lines().nth(line).unwrap_or("");
            let exp = want.lines().nth(line).unwrap_or("");
            panic!("case {i}: wasm prediction differs from native at line {}: {got:?} vs {exp:?}", line + 1);
        }
    }
}

#[wasm_bindgen_test]
fn worker_protocol_reports_config_errors() {
    let mut out = Vec::new();
    let bad = "engine:\n  model: nope/nope\n  hardware: h200_sxm\n  workers: {aggregated: {}}\n";
    handle(
        &mut WorkerState::default(),
        ToWorker::Run { id: 2, config: bad.into(), source: "page".into() },
        &MemFiles::default(),
        &|| 0.0,
        &mut |m| out.push(m),
    );
    match &out[..] {
        [FromWorker::Failed { id: 2, exit_code: 2, message }] => {
            assert!(message.contains("engine.model"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

/// The page mounts, shows the default scenario, and — with no worker script served in this
/// test harness — reports the failed worker instead of waiting forever.
#[wasm_bindgen_test]
async fn app_mounts_and_never_hangs_without_a_worker() {
    let doc = web_sys::window().unwrap().document().unwrap();
    let host: web_sys::HtmlElement = doc.create_element("div").unwrap().unchecked_into();
    doc.body().unwrap().append_child(&host).unwrap();
    let handle = leptos::mount::mount_to(host, servesim_web::app::App);
    sleep_ms(20).await;
    let yaml: web_sys::HtmlTextAreaElement = doc.get_element_by_id("scenario-yaml").unwrap().unchecked_into();
    assert!(yaml.value().contains("Qwen/Qwen3-32B-FP8"));
    let mut status = String::new();
    for _ in 0..100 {
        sleep_ms(50).await;
        status = doc.get_element_by_id("status").unwrap().text_content().unwrap_or_default();
        if status.contains("failed") {
            break;
        }
    }
    assert!(status.contains("failed"), "status: {status}");
    let err = doc.get_element_by_id("run-error").unwrap().text_content().unwrap_or_default();
    assert!(err.contains("worker"), "{err}");
    drop(handle);
}

/// The scenario form is bound to the YAML text: the default scenario's values show in its
/// fields, and a change to a field edits only that value of the text.
#[wasm_bindgen_test]
async fn form_fields_show_and_edit_the_yaml() {
    let doc = web_sys::window().unwrap().document().unwrap();
    let host: web_sys::HtmlElement = doc.create_element("div").unwrap().unchecked_into();
    doc.body().unwrap().append_child(&host).unwrap();
    let handle = leptos::mount::mount_to(host, servesim_web::app::App);
    sleep_ms(20).await;
    let input =
        |id: &str| -> web_sys::HtmlInputElement { doc.get_element_by_id(id).unwrap().unchecked_into() };
    assert_eq!(input("f-traffic-load-concurrency").value(), "10");
    assert_eq!(input("f-engine-model").value(), "Qwen/Qwen3-32B-FP8");
    let field = input("f-traffic-stop-requests");
    field.set_value("42");
    field.dispatch_event(&web_sys::Event::new("change").unwrap()).unwrap();
    sleep_ms(20).await;
    let yaml: web_sys::HtmlTextAreaElement = doc.get_element_by_id("scenario-yaml").unwrap().unchecked_into();
    assert_eq!(yaml.value(), servesim_scenario::DEFAULT_SCENARIO.replace("requests: 100", "requests: 42"));
    drop(handle);
}

/// A trace handed to the worker as a dropped file runs in WebAssembly, found by base name.
#[wasm_bindgen_test]
fn dropped_trace_runs_in_wasm() {
    use base64::Engine as _;
    let trace = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 8, \"hash_ids\": [1, 2]}\n\
                 {\"timestamp\": 40, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [1, 3]}\n";
    let mut st = WorkerState::default();
    let files = data();
    let mut out = Vec::new();
    let b64 = base64::engine::general_purpose::STANDARD.encode(trace);
    handle(&mut st, ToWorker::PutFile { name: "t.jsonl".into(), base64: b64 }, &files, &|| 0.0, &mut |m| {
        out.push(m)
    });
    let config = "engine: {model: Qwen/Qwen3-32B-FP8, hardware: h200_sxm, workers: {aggregated: {}}}\n\
                  traffic: {source: {type: trace, paths: [traces/t.jsonl]}, load: {type: trace_timestamps}}\n";
    handle(
        &mut st,
        ToWorker::Run { id: 1, config: config.into(), source: "page".into() },
        &files,
        &|| 0.0,
        &mut |m| {
            out.push(m);
        },
    );
    match out.pop() {
        Some(FromWorker::Done { prediction, .. }) => {
            assert!(prediction.contains("\"num_requests\": 2"), "{prediction}")
        }
        other => panic!("{other:?}"),
    }
}
