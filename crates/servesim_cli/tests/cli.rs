//! The `servesim` binary end to end: files, formats, overrides, exit codes.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn servesim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_servesim")).args(args).current_dir(repo()).output().unwrap()
}

/// A test's scratch space: `path` (not created) inside a fresh directory of its own, so files
/// beside it (`path.with_extension(..)`) stay inside too; all removed when the test ends.
struct Scratch {
    root: PathBuf,
    path: PathBuf,
}

impl std::ops::Deref for Scratch {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn tmp(name: &str) -> Scratch {
    let root = std::env::temp_dir().join(format!("servesim-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    Scratch { path: root.join("out"), root }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn predict_writes_prediction_and_requests_and_is_deterministic() {
    let (a, b) = (tmp("a"), tmp("b"));
    for dir in [&a, &b] {
        let out = servesim(&[
            "predict",
            "-c",
            "data/scenarios/default.yaml",
            "--output-dir",
            dir.to_str().unwrap(),
            "--capture-per-request",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains("TTFT (ms)"));
    }
    let pa = std::fs::read(a.join("prediction.json")).unwrap();
    assert_eq!(pa, std::fs::read(b.join("prediction.json")).unwrap(), "same seed, same bytes");
    assert_eq!(
        std::fs::read(a.join("requests.jsonl")).unwrap(),
        std::fs::read(b.join("requests.jsonl")).unwrap()
    );
    let lines = std::fs::read_to_string(a.join("requests.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 100);
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    for key in [
        "uuid",
        "arrival_time_ms",
        "ttft_ms",
        "e2e_latency_ms",
        "itl_ms",
        "input_length",
        "output_length",
        "terminal_status",
    ] {
        assert!(first.get(key).is_some(), "requests.jsonl lacks {key}");
    }
    let runtime: serde_json::Value =
        serde_json::from_slice(&std::fs::read(a.join("resource-runtime.json")).unwrap()).unwrap();
    assert!(runtime["wall_time_ms"].as_f64().unwrap() >= 0.0);
}

#[test]
fn format_json_prints_prediction_json() {
    let d = tmp("json");
    let out = servesim(&[
        "predict",
        "-c",
        "data/scenarios/default.yaml",
        "--output-dir",
        d.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(out.status.success());
    assert_eq!(out.stdout, std::fs::read(d.join("prediction.json")).unwrap());
}

#[test]
fn overrides_apply_left_to_right_and_seed_changes_random_streams() {
    let d = tmp("set");
    let out = servesim(&[
        "predict",
        "-c",
        "data/scenarios/default.yaml",
        "--output-dir",
        d.to_str().unwrap(),
        "--format",
        "json",
        "--set",
        "traffic.load={type: poisson, requests_per_second: 3}",
        "--set",
        "traffic.load.requests_per_second=5",
        "--seed",
        "9",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["servesim"]["seed"], 9);
    let d2 = tmp("set2");
    let out2 = servesim(&[
        "predict",
        "-c",
        "data/scenarios/default.yaml",
        "--output-dir",
        d2.to_str().unwrap(),
        "--format",
        "json",
        "--set",
        "traffic.load={type: poisson, requests_per_second: 5}",
        "--seed",
        "10",
    ]);
    let v2: serde_json::Value = serde_json::from_slice(&out2.stdout).unwrap();
    assert_ne!(v["duration_ms"], v2["duration_ms"], "a different seed gives different Poisson arrivals");
}

#[test]
fn bad_config_exits_2_naming_every_field() {
    let d = tmp("bad");
    let cfg = d.with_extension("yaml");
    std::fs::write(&cfg, "engine:\n  model: Qwen/Qwen3-32B-FP8\n  hardware: h200_sxm\n  workers: {aggregated: {parallelism: {tensr: 2}}}\ntraffic:\n  load: {type: poisson, requests_per_second: -4}\n").unwrap();
    let out = servesim(&["predict", "-c", cfg.to_str().unwrap(), "--output-dir", d.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("engine.workers.aggregated.parallelism.tensr (line 4, column 40): unknown key (did you mean 'tensor'?)"), "{err}");
    assert!(
        err.contains("traffic.load.requests_per_second (line 6, column 46): must be greater than 0"),
        "{err}"
    );
    assert!(!err.contains("panicked"));
}

#[test]
fn a_missing_data_dir_exits_2_and_the_table_names_the_timing_data() {
    let d = tmp("datadir");
    let missing = d.with_extension("nowhere");
    for args in [
        &["predict", "-c", "data/scenarios/default.yaml", "--output-dir", d.to_str().unwrap()][..],
        &["estimate", "-c", "data/scenarios/default.yaml"][..],
        &["validate", "--silicon", "no-such.csv"][..],
    ] {
        let mut args = args.to_vec();
        args.extend(["--data-dir", missing.to_str().unwrap()]);
        let out = servesim(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(&format!("--data-dir {}: no such directory", missing.display())), "{err}");
    }
    assert!(!d.exists(), "nothing ran");

    // A directory without the deployment's tables runs, and the table says every op was on
    // the roofline; the built-in data says where its tables came from.
    let empty = d.with_extension("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = servesim(&[
        "predict",
        "-c",
        "data/scenarios/default.yaml",
        "--output-dir",
        d.to_str().unwrap(),
        "--data-dir",
        empty.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains("every op on the roofline; kernel lookups 0% measured, 0% interpolated, 0% extrapolated, 100% roofline"), "{table}");
    let out = servesim(&[
        "predict",
        "-c",
        "data/scenarios/default.yaml",
        "--output-dir",
        d.to_str().unwrap(),
        "--overwrite",
    ]);
    let table = text(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.starts_with("timing, aggregated: op_level, servesim data/perf/"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(!line.contains("0% measured, 0% interpolated"), "{line}");
}

#[test]
fn malformed_yaml_and_bad_overrides_exit_2() {
    let d = tmp("syntax");
    let cfg = d.with_extension("yaml");
    std::fs::write(&cfg, "engine: {model: x\n").unwrap();
    let out = servesim(&["predict", "-c", cfg.to_str().unwrap(), "--output-dir", d.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("line"), "{}", text(&out.stderr));
    let out = servesim(&[
        "predict",
        "-c",
        "data/scenarios/default.yaml",
        "--output-dir",
        d.to_str().unwrap(),
        "--set",
        "traffic.stop.requests=-1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("traffic.stop.requests (--set #1)"), "{}", text(&out.stderr));
    let out = servesim(&["predict", "-c", "data/scenarios/default.yaml", "--set", "no-equals-sign"]);
    assert_eq!(out.status.code(), Some(2));
    let out = servesim(&["predict", "-c", "does/not/exist.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("does/not/exist.yaml"));
    let out = servesim(&["validate", "--silicon", "x.csv", "--mtp-acceptance", "1.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("expected a probability from 0 to 1, got '1.5'"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn model_that_does_not_fit_exits_3_with_the_numbers() {
    let d = tmp("fit");
    let out = servesim(&[
        "predict",
        "-c",
        "data/scenarios/default.yaml",
        "--output-dir",
        d.to_str().unwrap(),
        "--set",
        "engine.model=meta-llama/Llama-3.1-70B-Instruct",
        "--set",
        "engine.hardware=h100_sxm",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(err.contains("does not fit") && err.contains("weights 131.41 GiB"), "{err}");
}

#[test]
fn existing_output_needs_overwrite() {
    let d = tmp("over");
    let args = ["predict", "-c", "data/scenarios/default.yaml", "--output-dir", d.to_str().unwrap()];
    assert!(servesim(&args).status.success());
    assert_eq!(servesim(&args).status.code(), Some(2));
    let mut with = args.to_vec();
    with.push("--overwrite");
    assert!(servesim(&with).status.success());
}

#[test]
fn detail_memory_adds_the_breakdown_and_unknown_details_exit_2() {
    let d = tmp("detail");
    let out = servesim(&[
        "predict",
        "-c",
        "data/scenarios/default.yaml",
        "--output-dir",
        d.to_str().unwrap(),
        "--format",
        "json",
        "--detail",
        "memory",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &v["details"]["memory"]["aggregated"];
    assert_eq!(m["memory_breakdown"]["weights_bytes"], 34_317_271_040u64);
    // vLLM's recent default fraction, 0.92; at AISimulate's 0.9 the plan gives its published
    // 11,528 blocks (servesim_perf's `memory_plan_matches_aisimulate_published_example`).
    assert_eq!(m["estimated_num_gpu_blocks"], 11_889);
    let out = servesim(&["predict", "-c", "data/scenarios/default.yaml", "--detail", "energy"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("carry no energy figures"));
}

/// `--detail time`: each role's steps and busy time by kind add up to its workers' own
/// counters, and the op parts to the busy time (aggregated, P/D, attention DP with MoE, and
/// a speculating engine); the summary prints one line per role.
#[test]
fn detail_time_accounts_for_every_step_of_every_role() {
    for (i, config) in [
        "data/scenarios/default.yaml",
        "tests/scenarios/pd_vllm.yaml",
        "tests/scenarios/mla_deepseek_dp8_ep8.yaml",
        "tests/scenarios/spec_mtp_sglang.yaml",
    ]
    .into_iter()
    .enumerate()
    {
        let d = tmp(&format!("detail-time-{i}"));
        let out =
            servesim(&["predict", "-c", config, "--output-dir", d.to_str().unwrap(), "--detail", "all"]);
        assert!(out.status.success(), "{config}: {}", String::from_utf8_lossy(&out.stderr));
        let table = String::from_utf8_lossy(&out.stdout).to_string();
        let text = std::fs::read_to_string(d.join("prediction.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let details = &v["details"];
        assert!(details["memory"].is_object() && details["source"].is_object(), "{config}");
        let roles = details["time"]["roles"].as_object().unwrap();
        let workers = v["servesim"]["time_series"]["workers"].as_array().unwrap();
        for (name, r) in roles {
            let mine: Vec<&serde_json::Value> =
                workers.iter().filter(|w| w["role"] == name.as_str()).collect();
            assert_eq!(r["workers"].as_u64().unwrap() as usize, mine.len(), "{config} {name}");
            let steps: u64 = mine.iter().map(|w| w["steps"].as_u64().unwrap()).sum();
            let busy: f64 = mine.iter().map(|w| w["busy_ms"].as_f64().unwrap()).sum();
            let kinds = r["by_step"].as_array().unwrap();
            assert!(!kinds.is_empty(), "{config} {name}");
            assert_eq!(
                kinds.iter().map(|k| k["steps"].as_u64().unwrap()).sum::<u64>(),
                steps,
                "{config} {name}"
            );
            let kind_busy: f64 = kinds.iter().map(|k| k["busy_ms"].as_f64().unwrap()).sum();
            assert!((kind_busy - busy).abs() <= 1e-6 * busy, "{config} {name}: {kind_busy} vs {busy}");
            let parts: f64 = r["parts_ms"].as_object().unwrap().values().map(|x| x.as_f64().unwrap()).sum();
            assert!((parts - busy).abs() <= 1e-6 * busy, "{config} {name}: parts {parts} vs {busy}");
            assert!(table.contains(&format!("Busy time, {name} (")), "{config}: {table}");
        }
        if config.contains("pd_") {
            assert!(roles.contains_key("prefill") && roles.contains_key("decode"), "{config}");
            assert_eq!(roles["prefill"]["by_step"][0]["step"], "prefill");
        }
    }
}

/// The columns of AIConfigurator's `silicon_sample.csv`, as `servesim validate` reads them.
const SILICON_HEADER: &str = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n";

#[test]
fn validate_reports_scatter_and_sizes_unrecorded_pools() {
    let dir = tmp("validate");
    std::fs::create_dir_all(&*dir).unwrap();
    let head = SILICON_HEADER;
    let csv = format!(
        "{head}agg8,,sglang,,meta-llama/Llama-3.1-8B-Instruct,h200_sxm,,agg,1024,128,,,16,1,1,1,1,1,,,,,,,,,,,,,,,40,6\n\
         pd32,x; silicon_concurrency=512,trtllm,,Qwen/Qwen3-32B,h200_sxm,,disagg,4096,512,,,,,,,,,1,,2,1,1,2,1,,,2,1,1,2,1,900,30\n\
         mtp4,source_file=2026-03-25.csv; silicon_concurrency=4; image=nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3,\
         trtllm,1.2.0rc6.post3,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,agg,1024,128,fp8,fp8,4,8,1,1,8,1,,,,,,,,,,,,,,,200,5\n"
    );
    let file = dir.join("rows.csv");
    std::fs::write(&file, csv).unwrap();
    let rows_csv = dir.join("out.csv");
    let out = servesim(&[
        "validate",
        "--silicon",
        file.to_str().unwrap(),
        "--rows-csv",
        rows_csv.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains("TTFT scatter") && table.contains("TPOT scatter"), "{table}");
    assert!(table.contains("1 disaggregated rows do not record their worker counts"), "{table}");
    assert!(table.contains("1 disaggregated rows with sized pools: TTFT / TPOT MAPE"), "{table}");
    let rows = std::fs::read_to_string(&rows_csv).unwrap();
    let header: Vec<&str> = rows.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "sized_workers").unwrap();
    let pd = rows.lines().find(|l| l.starts_with("pd32,")).unwrap();
    let sized = pd.split(',').nth(col).unwrap();
    assert!(sized.ends_with('D') && sized.contains("P+"), "{pd}");
    let agg = rows.lines().find(|l| l.starts_with("agg8,")).unwrap();
    assert_eq!(agg.split(',').nth(col).unwrap(), "", "aggregated rows are not sized");
    // A row run on InferenceX's MTP-only image replays three drafts a round; the others none.
    let drafts = header.iter().position(|h| *h == "mtp_drafts").unwrap();
    let mtp = rows.lines().find(|l| l.starts_with("mtp4,")).unwrap();
    assert_eq!(mtp.split(',').nth(drafts).unwrap(), "3", "{mtp}");
    assert_eq!(agg.split(',').nth(drafts).unwrap(), "", "{agg}");
    // Each row's prompt load: a share of its prefilling workers' kernel time, here below 1.
    let load = header.iter().position(|h| *h == "prompt_load").unwrap();
    let agg_load: f64 = agg.split(',').nth(load).unwrap().parse().unwrap();
    assert!(agg_load > 0.0 && agg_load < 1.0, "{agg}");
    assert!(!table.contains("prompt load >"), "{table}");
    // Rows replay in parallel; one thread gives the same rows, in the same order.
    let serial = dir.join("serial.csv");
    let out = servesim(&[
        "validate",
        "--silicon",
        file.to_str().unwrap(),
        "--rows-csv",
        serial.to_str().unwrap(),
        "--jobs",
        "1",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&serial).unwrap(), rows);
    assert_eq!(text(&out.stdout), table);
    // The sized pools are what --show-scenarios prints.
    let out =
        servesim(&["validate", "--silicon", file.to_str().unwrap(), "--show-scenarios", "--filter", "pd32"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout)
        .contains(&format!("sized to {}", sized.replace("P+", " prefill + ").replace('D', " decode"))));
    // A bad count names the line and column.
    std::fs::write(
        &file,
        format!(
            "{head}pd,,trtllm,,Qwen/Qwen3-32B,h200_sxm,,disagg,8,8,,,,,,,,,1,two,2,1,1,2,1,,,2,1,1,2,1,9,3\n"
        ),
    )
    .unwrap();
    let out = servesim(&["validate", "--silicon", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("prefill_num_workers") && text(&out.stderr).contains("rows.csv:2:"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn validate_writes_its_report_as_json_or_markdown() {
    let dir = tmp("validate-report");
    std::fs::create_dir_all(&*dir).unwrap();
    let head = SILICON_HEADER;
    // One row servesim predicts, one it cannot (a model it does not know).
    let csv = format!(
        "{head}agg8,,sglang,,meta-llama/Llama-3.1-8B-Instruct,h200_sxm,,agg,1024,128,,,16,1,1,1,1,1,,,,,,,,,,,,,,,40,6\n\
         nope,,vllm,,acme/NoSuchModel,h200_sxm,,agg,1024,128,,,16,1,1,1,1,1,,,,,,,,,,,,,,,40,6\n"
    );
    let file = dir.join("rows.csv");
    std::fs::write(&file, csv).unwrap();
    let (json_path, md_path, rows_path) =
        (dir.join("report.json"), dir.join("report.md"), dir.join("rows.out.csv"));
    let run = |report: &Path| {
        let out = servesim(&[
            "validate",
            "--silicon",
            file.to_str().unwrap(),
            "--rows-csv",
            rows_path.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let table = run(&json_path);
    // A family with no predicted row shows no error rather than NaN.
    assert!(!table.contains("NaN"), "{table}");
    assert!(table.contains("| acme/NoSuchModel | h200_sxm | vllm | agg | 1 | 0.0% | n/a |"), "{table}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let command = report["command"].as_str().unwrap();
    assert!(command.starts_with("servesim validate --silicon ") && command.contains("--report"), "{command}");
    assert_eq!(report["overall"]["rows"], 2);
    assert_eq!(report["overall"]["predicted"], 1);
    assert_eq!(report["overall"]["coverage_pct"], 50.0);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    // The predicted row carries the same figures as --rows-csv and the table.
    let agg = &rows[0];
    assert_eq!(agg["id"], "agg8");
    assert_eq!(agg["measured_by"], "other", "{agg}");
    let predicted = agg["predicted_ttft_ms"].as_f64().unwrap();
    let csv_line = std::fs::read_to_string(&rows_path).unwrap();
    let csv_line = csv_line.lines().find(|l| l.starts_with("agg8,")).unwrap().to_string();
    assert!(csv_line.contains(&format!(",40.000,{predicted:.3},")), "{csv_line} vs {predicted}");
    let error = agg["ttft_error_pct"].as_f64().unwrap();
    assert!((error - 100.0 * (predicted / 40.0 - 1.0)).abs() < 1e-9);
    let family = report["families"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["model"] == "meta-llama/Llama-3.1-8B-Instruct")
        .unwrap();
    assert!(table.contains(&format!("| {:.1}% |", family["ttft_mape_pct"].as_f64().unwrap())), "{table}");
    assert_eq!(report["classes"][0]["class"], "dense aggregated");
    // No deployment here is measured at two concurrencies, so there is no curve to shape.
    assert_eq!(report["overall"]["shape_points"], 0);
    assert!(report["overall"]["ttft_shape_pct"].is_null(), "{}", report["overall"]);
    // Each row names its curve as replayed; alone on it, it has no shape error.
    let curve = agg["curve"].as_str().unwrap();
    assert!(curve.contains("Llama-3.1-8B-Instruct|h200_sxm|sglang") && curve.contains("1024x128"), "{curve}");
    assert!(agg["ttft_shape_pct"].is_null() && agg["tpot_shape_pct"].is_null(), "{agg}");
    // The unpredicted row says why and has no prediction.
    let nope = &rows[1];
    assert!(nope["predicted_ttft_ms"].is_null() && nope["ttft_error_pct"].is_null());
    assert!(nope["curve"].as_str().unwrap().starts_with("acme/NoSuchModel|"), "{nope}");
    assert!(nope["error"].as_str().unwrap().contains("unknown model 'acme/NoSuchModel'"), "{nope}");
    let empty =
        report["families"].as_array().unwrap().iter().find(|f| f["model"] == "acme/NoSuchModel").unwrap();
    assert!(empty["ttft_mape_pct"].is_null(), "{empty}");
    // Markdown: the printed table, and every row not predicted.
    let printed = run(&md_path);
    let md = std::fs::read_to_string(&md_path).unwrap();
    let table_only: String =
        printed.lines().filter(|l| l.starts_with('|')).map(|l| format!("{l}\n")).collect();
    assert!(md.contains(&table_only), "{md}");
    assert!(md.contains("## Not predicted (1)") && md.contains("- nope (line 3): "), "{md}");
    assert!(md.contains("servesim validate --silicon "), "{md}");
    // A report that cannot be written is an error naming the file.
    let out = servesim(&[
        "validate",
        "--silicon",
        file.to_str().unwrap(),
        "--report",
        dir.join("no/such/dir/r.md").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot write") && text(&out.stderr).contains("r.md"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn validate_selects_rows_by_source_node_and_classes() {
    let dir = tmp("validate-select");
    std::fs::create_dir_all(&*dir).unwrap();
    let head = SILICON_HEADER;
    let ix = "source_file=2026-04-06.csv; silicon_concurrency=8";
    let aic =
        "source_file=/x/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/x.csv; silicon_concurrency=8";
    let mut csv = head.to_string();
    for (id, source, system, tp) in [
        ("ix8", ix, "h100_sxm", 8),
        ("ix16", ix, "h100_sxm", 16),
        ("gb8", ix, "gb200", 8),
        ("aic1", aic, "h100_sxm", 1),
        ("oth1", "", "h100_sxm", 1),
    ] {
        csv += &format!(
            "{id},{source},trtllm,,meta-llama/Llama-3.1-8B-Instruct,{system},,agg,1024,128,,,8,{tp},1,1,1,1,,,,,,,,,,,,,,,40,6\n"
        );
    }
    let file = dir.join("rows.csv");
    std::fs::write(&file, csv).unwrap();
    // --show-scenarios lists the rows a selection keeps without replaying them.
    let kept = |args: &[&str]| -> Vec<&'static str> {
        let mut all = vec!["validate", "--silicon", file.to_str().unwrap(), "--show-scenarios"];
        all.extend_from_slice(args);
        let out = servesim(&all);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let printed = text(&out.stdout);
        ["ix8", "ix16", "gb8", "aic1", "oth1"]
            .into_iter()
            .filter(|id| printed.contains(&format!("# {id} (line")))
            .collect()
    };
    assert_eq!(kept(&["--source", "inferencex"]), ["ix8", "ix16", "gb8"]);
    // A node holds 8 H100s but 4 GB200s.
    assert_eq!(kept(&["--source", "inferencex", "--single-node"]), ["ix8"]);
    assert_eq!(kept(&["--source", "aiconfigurator"]), ["aic1"]);
    assert_eq!(kept(&["--source", "other"]), ["oth1"]);
    assert_eq!(
        kept(&["--class", "moe-agg", "--class", "dense-agg", "--single-node"]),
        ["ix8", "aic1", "oth1"]
    );
    let out = servesim(&["validate", "--silicon", file.to_str().unwrap(), "--source", "nvidia"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--source nvidia: use inferencex, aiconfigurator or other"));
    let out = servesim(&[
        "validate",
        "--silicon",
        file.to_str().unwrap(),
        "--source",
        "other",
        "--class",
        "moe-agg",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("matches --class moe-agg, --source other"), "{}", text(&out.stderr));
    // calibrate selects the same way.
    let out = servesim(&[
        "calibrate",
        "--silicon",
        file.to_str().unwrap(),
        "--source",
        "aiconfigurator",
        "--single-node",
        "--class",
        "moe-agg",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("matches --class moe-agg, --source aiconfigurator, --single-node"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn validate_refuses_knobs_that_are_not_numbers_in_range() {
    // NaN and out-of-range knobs were written into every row's scenario (each row refused) or
    // clamped without a word; they are the command line's error now.
    for (flag, value, needle) in [
        ("--step-overhead-ms", "nan", "a finite number of at least 0, got 'nan'"),
        ("--frontend-chunk-us", "-1", "a finite number of at least 0, got '-1'"),
        ("--prefill-scale", "0", "greater than 0, got '0'"),
        ("--length-floor", "5", "a fraction from 0 to 1, got '5'"),
    ] {
        let arg = format!("{flag}={value}");
        let out = servesim(&["validate", "--silicon", "../shared/validation/calibration.csv", &arg]);
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let err = text(&out.stderr);
        assert!(err.contains(flag) && err.contains(needle), "{flag}: {err}");
    }
}

#[test]
fn validate_says_when_no_row_matches_and_show_scenarios_keeps_the_class() {
    let cal = "../shared/validation/calibration.csv";
    if !repo().join(cal).exists() {
        return;
    }
    // Was a table of one "all rows" line of NaN%.
    let out = servesim(&["validate", "--silicon", cal, "--filter", "no-such-row", "--class", "dense-agg"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(
        "no row of ../shared/validation/calibration.csv matches --filter no-such-row, --class dense-agg"
    ));
    // --show-scenarios honours --class (it printed every class).
    let out = servesim(&[
        "validate",
        "--silicon",
        cal,
        "--filter",
        "Llama-3.1-70B",
        "--class",
        "moe-agg",
        "--show-scenarios",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
}

/// Each row's measured (TTFT, TPOT) by id.
type Measured<'a> = &'a dyn Fn(&str) -> (f64, f64);

/// Writes the rows `rows` makes to `file`, replays them with `servesim validate` and `knobs`,
/// and writes them again with those replays as their measurements: rows that servesim
/// reproduces exactly at the constants the knobs give.
fn write_self_measured(file: &Path, rows: &dyn Fn(Measured) -> String, knobs: &[&str]) {
    std::fs::write(file, rows(&|_| (100.0, 10.0))).unwrap();
    let replayed = file.with_extension("replayed.csv");
    let mut args =
        vec!["validate", "--silicon", file.to_str().unwrap(), "--rows-csv", replayed.to_str().unwrap()];
    args.extend_from_slice(knobs);
    let out = servesim(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let replayed = std::fs::read_to_string(&replayed).unwrap();
    let predicted = |id: &str| -> (f64, f64) {
        let line = replayed.lines().find(|l| l.starts_with(&format!("{id},"))).unwrap();
        let cols: Vec<&str> = line.split(',').collect();
        (cols[10].parse().unwrap(), cols[12].parse().unwrap())
    };
    std::fs::write(file, rows(&predicted)).unwrap();
}

#[test]
fn calibrate_recovers_the_constants_that_produced_the_rows() {
    let dir = tmp("calibrate");
    std::fs::create_dir_all(&*dir).unwrap();
    let head = SILICON_HEADER;
    // Four deployments whose prompts differ in length, so that a longer frontend and a slower
    // prefill are told apart; their "measurements" are servesim's own replays at known constants.
    let shapes = [("a", 512, 64, 2), ("b", 4096, 64, 2), ("c", 2048, 32, 4), ("d", 8192, 32, 1)];
    let rows = |measured: &dyn Fn(&str) -> (f64, f64)| {
        let mut csv = head.to_string();
        for (id, isl, osl, c) in shapes {
            let (ttft, tpot) = measured(id);
            csv += &format!(
                "{id},,vllm,,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,{isl},{osl},,,{c},1,1,1,1,1,,,,,,,,,,,,,,,{ttft},{tpot}\n"
            );
        }
        csv
    };
    let file = dir.join("rows.csv");
    write_self_measured(&file, &rows, &["--prefill-scale", "1.4", "--frontend-ms", "120"]);
    let out = servesim(&[
        "calibrate",
        "--silicon",
        file.to_str().unwrap(),
        "--fit",
        "prefill_scale,frontend_ms",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let prefill = j["timing"]["prefill_scale"].as_f64().unwrap();
    let frontend = j["timing"]["frontend_ms"].as_f64().unwrap();
    assert!((prefill - 1.4).abs() <= 0.05 && (frontend - 120.0).abs() <= 10.0, "{j}");
    assert!(j["timing"].get("step_overhead_ms").is_none(), "{j}");
    let (before, after) = (&j["engine_constants"], &j["fitted"]);
    assert!(before["ttft_mape_pct"].as_f64().unwrap() > 10.0, "{j}");
    assert!(
        after["ttft_mape_pct"].as_f64().unwrap() < 1.0 && after["tpot_mape_pct"].as_f64().unwrap() < 1.0,
        "{j}"
    );
    assert_eq!(j["constants"][0]["engine"], 1.0, "vLLM's calibrated prefill multiplier: {j}");
    assert!(j["held_out"].is_null());
    assert_eq!(j["engine_releases_better"], false, "one release: the fit starts from its constants: {j}");
    // The table says where the constants go.
    // The table says where the constants go, and --report keeps it with its command.
    let (md, json) = (dir.join("cal.md"), dir.join("cal.json"));
    let fit = [
        "calibrate",
        "--silicon",
        file.to_str().unwrap(),
        "--fit",
        "frontend_ms",
        "--folds",
        "2",
        "--report",
    ];
    let out = servesim(&[&fit[..], &[md.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.contains("engine.workers.<role>.timing: {frontend_ms: ")
            && table.contains("held out (2 folds)"),
        "{table}"
    );
    let report = std::fs::read_to_string(&md).unwrap();
    assert!(report.starts_with("# servesim calibrate\n\n`servesim calibrate --silicon "), "{report}");
    assert!(report.contains(&format!("```text\n{table}```")), "{report}");
    let out = servesim(&[&fit[..4], &["frontend_ms", "--report", json.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let command = j["command"].as_str().unwrap();
    assert!(command.ends_with(&format!("--fit frontend_ms --report {}", json.display())), "{j}");
    assert!(j["held_out"].is_null() && j["timing"]["frontend_ms"].is_number(), "{j}");
}

#[test]
fn calibrate_says_when_the_releases_own_constants_beat_one_set() {
    let dir = tmp("calibrate-releases");
    std::fs::create_dir_all(&*dir).unwrap();
    let head = SILICON_HEADER;
    // Two TensorRT-LLM releases with different calibrated constants, each row "measured" as
    // servesim replays it with its own release's: no single set of constants does as well.
    let rows = |measured: &dyn Fn(&str) -> (f64, f64)| {
        let mut csv = head.to_string();
        for (id, release, isl) in [("old", "1.0.0rc3", 2048), ("new", "", 4096)] {
            let (ttft, tpot) = measured(id);
            csv += &format!(
                "{id},,trtllm,{release},meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,{isl},64,,,2,1,1,1,1,1,,,,,,,,,,,,,,,{ttft},{tpot}\n"
            );
        }
        csv
    };
    let file = dir.join("rows.csv");
    write_self_measured(&file, &rows, &[]);
    let out =
        servesim(&["calibrate", "--silicon", file.to_str().unwrap(), "--fit", "prefill_scale,frontend_ms"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains("per release"), "{table}");
    assert!(table.contains("score better than any one set found: keep them"), "{table}");
}

#[test]
fn calibrate_refuses_what_it_cannot_fit() {
    let cal = "../shared/validation/calibration.csv";
    let out = servesim(&["calibrate", "--silicon", cal, "--filter", "h100_sxm", "--fit", "frontend_ms"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("engines (") && text(&out.stderr).contains("calibrate one at a time"),
        "{}",
        text(&out.stderr)
    );
    let out = servesim(&["calibrate", "--silicon", cal, "--fit", "prefill"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--fit prefill: not a constant"), "{}", text(&out.stderr));
    let out =
        servesim(&["calibrate", "--silicon", cal, "--filter", "qwen3_32b_h100_sxm_vllm", "--folds", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--folds 1"), "{}", text(&out.stderr));
    let out = servesim(&["calibrate", "--silicon", "no-such.csv"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no-such.csv"), "{}", text(&out.stderr));
}

#[test]
fn validate_refuses_more_drafts_accepted_than_proposed_before_replaying() {
    let out =
        servesim(&["validate", "--silicon", "no-such-file.csv", "--nextn", "2", "--nextn-accepted", "2.5"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("--nextn-accepted: 2.5 drafts accepted a round is more than the 2"), "{err}");
}
