use super::*;
use servesim_scenario::validate::{Outcome, SiliconRow};

/// What the worker fetches for the default scenario (H200, vLLM tables).
fn data_for(_config: &str) -> MemFiles {
    let mut m = MemFiles::default();
    macro_rules! add {
        ($($f:literal),*) => {$(
            m.data.insert(
                concat!("perf/h200_sxm/vllm/0.24.0/", $f, ".parquet").to_string(),
                include_bytes!(concat!("../../../data/perf/h200_sxm/vllm/0.24.0/", $f, ".parquet")).to_vec(),
            );
        )*};
    }
    add!("gemm", "context_attention", "generation_attention", "allreduce", "moe");
    m.data.insert(
        "perf/h200_sxm/nccl.parquet".to_string(),
        include_bytes!("../../../data/perf/h200_sxm/nccl.parquet").to_vec(),
    );
    m
}

struct Both(MemFiles);

impl Files for Both {
    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        self.0.read(path)
    }

    fn data(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        self.0.data(path)
    }
}

fn run_default() -> Vec<FromWorker> {
    let mut out = Vec::new();
    let msg =
        ToWorker::Run { id: 7, config: servesim_scenario::DEFAULT_SCENARIO.into(), source: "default".into() };
    handle(
        &mut WorkerState::default(),
        msg,
        &data_for(servesim_scenario::DEFAULT_SCENARIO),
        &|| 0.0,
        &mut |m| out.push(m),
    );
    out
}

#[test]
fn default_run_reports_progress_then_done_with_the_cli_bytes() {
    let out = run_default();
    // The static estimate comes first, as the CLI's `servesim estimate` prints it.
    let Some(FromWorker::Estimate { id: 7, estimate: Some(est), note: None }) = out.first() else {
        panic!("{:?}", out.first())
    };
    let root = parse_with_overrides(servesim_scenario::DEFAULT_SCENARIO, "default", &[]).unwrap();
    let catalog = Catalog::builtin().unwrap();
    let files = data_for(servesim_scenario::DEFAULT_SCENARIO);
    let prepared = prepare(&root, "default", &catalog, None, &files).unwrap();
    let cli_est = servesim_scenario::estimate::estimate(&prepared).unwrap();
    assert_eq!(*est, to_pretty_json(&cli_est.to_json()));
    assert!(matches!(out.get(1), Some(FromWorker::Progress { id: 7, .. })));
    let Some(FromWorker::Done { prediction, time, .. }) = out.last() else { panic!("{out:?}") };
    let cli = servesim_scenario::predict(
        servesim_scenario::DEFAULT_SCENARIO,
        "default",
        &[],
        None,
        &Both(data_for(servesim_scenario::DEFAULT_SCENARIO)),
    )
    .unwrap();
    assert_eq!(*prediction, to_pretty_json(&cli.json));
    // The busy-time lines are those of `--detail time`, which leaves prediction.json alone.
    let mut detailed = cli.clone();
    servesim_scenario::report::add_details(
        &prepared,
        &mut detailed,
        servesim_scenario::report::Details { time: true, ..Default::default() },
    );
    assert_eq!(*time, servesim_scenario::details::time_lines(&detailed.json["details"]["time"]));
    assert_eq!(time.len(), 1);
    assert!(time[0].starts_with("Busy time, aggregated ("), "{time:?}");
}

#[test]
fn the_page_gets_the_run_s_records_and_the_whole_files_on_demand() {
    let mut state = WorkerState::default();
    let files = data_for(servesim_scenario::DEFAULT_SCENARIO);
    let mut out = Vec::new();
    let run =
        ToWorker::Run { id: 3, config: servesim_scenario::DEFAULT_SCENARIO.into(), source: "default".into() };
    handle(&mut state, run, &files, &|| 0.0, &mut |m| out.push(m));
    let Some(FromWorker::Done { requests, requests_total: 100, requests_every: 1, .. }) = out.pop() else {
        panic!("{out:?}")
    };
    let cli = servesim_scenario::predict(
        servesim_scenario::DEFAULT_SCENARIO,
        "default",
        &[],
        None,
        &Both(files.clone()),
    )
    .unwrap();
    let jsonl = servesim_scenario::report::to_jsonl(&cli.requests);
    assert_eq!(requests, jsonl, "a run within PAGE_RECORDS comes whole");
    let file = |state: &mut WorkerState, id: u32, format: &str| {
        let mut out = Vec::new();
        let msg = ToWorker::RequestsFile { id, format: format.into() };
        handle(state, msg, &MemFiles::default(), &|| 0.0, &mut |m| out.push(m));
        out
    };
    let text = |parts: Vec<FromWorker>| -> String {
        let last = parts.len() - 1;
        parts
            .into_iter()
            .enumerate()
            .map(|(i, m)| match m {
                FromWorker::FilePart { id: 3, text, last: l } if l == (i == last) => text,
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(text(file(&mut state, 3, "jsonl")), jsonl);
    let mut csv = Vec::new();
    cli.requests.write_csv(&mut csv).unwrap();
    let got = text(file(&mut state, 3, "csv"));
    assert_eq!(got, String::from_utf8(csv).unwrap());
    assert_eq!(got.lines().count(), 101);
    assert!(got.starts_with("session_id,turn_index,uuid,arrival_time_ms,"), "{}", &got[..80]);
    // Another run's records, or a format nobody writes, are refused with a reason.
    let [FromWorker::Failed { id: 2, message, .. }] = &file(&mut state, 2, "jsonl")[..] else { panic!() };
    assert!(message.contains("run 2's records are gone"), "{message}");
    let [FromWorker::Failed { message, .. }] = &file(&mut state, 3, "xml")[..] else { panic!() };
    assert!(message.contains("unknown requests file format 'xml'"), "{message}");
}

#[test]
fn a_file_is_sent_in_parts_of_whole_lines() {
    let mut sent = Vec::new();
    let mut post = |m: FromWorker| sent.push(m);
    let mut w = PartWriter { id: 1, part_bytes: 8, buf: Vec::new(), post: &mut post };
    std::io::Write::write_all(&mut w, b"aaaa\nbbbbbb").unwrap();
    std::io::Write::write_all(&mut w, b"\ncc\n").unwrap();
    std::io::Write::write_all(&mut w, b"dd\n").unwrap();
    assert_eq!(String::from_utf8(w.buf.clone()).unwrap(), "dd\n");
    let parts: Vec<String> = sent
        .iter()
        .map(|m| match m {
            FromWorker::FilePart { text, last: false, .. } => text.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    // Nothing goes until a line ends past the part size; the short tail waits for the end.
    assert_eq!(parts, ["aaaa\nbbbbbb\ncc\n".to_string()]);
}

/// A small staged search on the default scenario's tables.
const SPEC: &str = "engine: {model: Qwen/Qwen3-32B-FP8, hardware: h200_sxm, backend: vllm,\n  workers: {aggregated: {parallelism: {tensor: {choices: [1, 2, 4]}}}}}\ntraffic: {source: {type: synthetic, input_tokens: 1000, output_tokens: 100},\n  load: {type: poisson, requests_per_second: {choices: [1, 4]}}, stop: {requests: 24}}\noptimization: {target: pareto}\noptimizer: {algorithm: staged}\n";

/// Drives a search as the page does: the coordinator plans, workers evaluate (results
/// returned in reverse order), the coordinator ranks.
fn page_search(spec: &str) -> Vec<FromWorker> {
    let files = data_for(spec);
    let mut coordinator = WorkerState::default();
    let mut pool = [WorkerState::default(), WorkerState::default()];
    let mut seen = Vec::new();
    let mut out = Vec::new();
    handle(
        &mut coordinator,
        ToWorker::Plan { id: 5, spec: spec.into(), source: "spec".into() },
        &files,
        &|| 0.0,
        &mut |m| out.push(m),
    );
    loop {
        let Some(msg) = out.pop() else { panic!("no reply") };
        seen.push(msg.clone());
        let FromWorker::Stage { indices, fidelity, .. } = msg else { break };
        let mut results = Vec::new();
        for (k, index) in indices.iter().enumerate() {
            let m = ToWorker::Evaluate {
                id: 5,
                spec: spec.into(),
                source: "spec".into(),
                indices: vec![*index],
                fidelity: fidelity.clone(),
            };
            handle(&mut pool[k % 2], m, &files, &|| 0.0, &mut |r| {
                let FromWorker::Evaluated { candidate, .. } = r else { panic!("{r:?}") };
                results.push(candidate);
            });
        }
        results.reverse();
        handle(
            &mut coordinator,
            ToWorker::Submit { id: 5, candidates: results },
            &files,
            &|| 0.0,
            &mut |m| out.push(m),
        );
    }
    seen
}

#[test]
fn a_search_across_workers_writes_the_cli_recommendation() {
    let seen = page_search(SPEC);
    let stages: Vec<&str> =
        seen.iter()
            .filter_map(|m| {
                if let FromWorker::Stage { fidelity, .. } = m {
                    Some(fidelity.as_str())
                } else {
                    None
                }
            })
            .collect();
    assert_eq!(stages, ["static", "short", "full"]);
    let Some(FromWorker::Recommended { recommendation, yamls, .. }) = seen.last() else { panic!("{seen:?}") };
    // The CLI's path: threads, the same spec, the same files.
    let root = parse_with_overrides(SPEC, "spec", &[]).unwrap();
    let catalog = Catalog::builtin().unwrap();
    let spec = parse_spec(&root, "spec", &catalog).unwrap();
    let files = data_for(SPEC);
    let (cands, st) = servesim_scenario::recommend::search(&spec, &mut |idx, fid| {
        idx.iter().map(|i| evaluate_at(&spec, *i, "spec", &catalog, &files, fid)).collect()
    });
    let cli = finish(&spec, cands, &config_sha256(&root), &st);
    assert_eq!(*recommendation, to_pretty_json(&cli.json));
    assert_eq!(*yamls, cli.yamls);
    assert!(!yamls.is_empty());
}

#[test]
fn a_bad_spec_or_a_stray_submit_is_answered_with_an_error() {
    let mut st = WorkerState::default();
    let mut out = Vec::new();
    let files = MemFiles::default();
    handle(
        &mut st,
        ToWorker::Plan { id: 1, spec: "x: {choices: []}".into(), source: "spec".into() },
        &files,
        &|| 0.0,
        &mut |m| out.push(m),
    );
    handle(&mut st, ToWorker::Submit { id: 9, candidates: vec![] }, &files, &|| 0.0, &mut |m| out.push(m));
    handle(
        &mut st,
        ToWorker::Evaluate {
            id: 2,
            spec: SPEC.into(),
            source: "spec".into(),
            indices: vec![0],
            fidelity: "fast".into(),
        },
        &files,
        &|| 0.0,
        &mut |m| out.push(m),
    );
    assert!(
        matches!(&out[0], FromWorker::Failed { id: 1, exit_code: 2, message } if message.contains("choices is empty")),
        "{out:?}"
    );
    assert!(
        matches!(&out[1], FromWorker::Failed { id: 9, message, .. } if message.contains("no search 9")),
        "{out:?}"
    );
    assert!(
        matches!(&out[2], FromWorker::Failed { id: 2, message, .. } if message.contains("fidelity")),
        "{out:?}"
    );
}

#[test]
fn a_default_sweep_across_workers_reports_what_the_library_reports() {
    let query = SweepSpec {
        model: "Qwen/Qwen3-8B".into(),
        system: "h200_sxm".into(),
        backend: "vllm".into(),
        total_gpus: 4,
        isl: 1000,
        osl: 100,
        prefix: 0,
        ttft_ms: 500.0,
        tpot_ms: 20.0,
        nextn: 0,
        nextn_accepted: 0.0,
        allreduce: Some("nccl".into()),
        moe_kernel: None,
    };
    let files = data_for("");
    let mut coordinator = WorkerState::default();
    let mut worker = WorkerState::default();
    let mut out = Vec::new();
    handle(
        &mut coordinator,
        ToWorker::Sweep { id: 3, query: query.clone(), replay_top: 1 },
        &files,
        &|| 0.0,
        &mut |m| out.push(m),
    );
    let mut waves = 0;
    let (report, winners) = loop {
        match out.pop() {
            Some(FromWorker::Replays { wave, .. }) => {
                waves += 1;
                let mut replays = Vec::new();
                for (label, yaml, concurrency) in wave {
                    handle(
                        &mut worker,
                        ToWorker::Replay { id: 3, yaml, label, concurrency },
                        &files,
                        &|| 0.0,
                        &mut |m| {
                            let FromWorker::Replayed { replay, .. } = m else { panic!("{m:?}") };
                            replays.push(replay);
                        },
                    );
                }
                handle(
                    &mut coordinator,
                    ToWorker::SubmitReplays { id: 3, replays },
                    &files,
                    &|| 0.0,
                    &mut |m| out.push(m),
                );
            }
            Some(FromWorker::SweepDone { report, winners, .. }) => break (report, winners),
            other => panic!("{other:?}"),
        }
    };
    assert!(waves >= 1);
    // The library driven in one thread, as the CLI drives it on many.
    let catalog = Catalog::builtin().unwrap();
    let sweep = default_sweep(&query, &catalog, &files).unwrap();
    let mut c = Confirm::new(query, sweep, 1);
    loop {
        let wave = c.wave().to_vec();
        if wave.is_empty() {
            break;
        }
        let r = wave
            .iter()
            .map(|w| servesim_scenario::estimate::confirm::replay_point(w, &catalog, &files))
            .collect();
        c.submit(r).unwrap();
    }
    let lib = c.report(0.0, 0.0);
    assert_eq!(report, to_pretty_json(&lib.json()));
    assert_eq!(winners.len(), lib.winners.len());
    assert!(report.contains("\"confirmed_aggregated\": {"), "{report}");
}

#[test]
fn bad_config_fails_with_exit_code_two() {
    let mut out = Vec::new();
    handle(
        &mut WorkerState::default(),
        ToWorker::Run { id: 1, config: "engine: [".into(), source: "page".into() },
        &MemFiles::default(),
        &|| 0.0,
        &mut |m| out.push(m),
    );
    assert!(matches!(&out[..], [FromWorker::Failed { id: 1, exit_code: 2, .. }]), "{out:?}");
}

#[test]
fn garbage_messages_are_answered() {
    assert!(matches!(decode_to_worker("{\"type\":\"nope\"}"), Err(FromWorker::Failed { exit_code: 2, .. })));
    let m = ToWorker::Run { id: 3, config: "x".into(), source: "s".into() };
    assert_eq!(decode_to_worker(&encode(&m)), Ok(m));
}

fn put(st: &mut WorkerState, name: &str, bytes: &[u8]) {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = Vec::new();
    handle(
        st,
        ToWorker::PutFile { name: name.into(), base64: b64 },
        &MemFiles::default(),
        &|| 0.0,
        &mut |m| {
            out.push(m);
        },
    );
    assert!(out.is_empty(), "{out:?}");
}

const TRACE: &str = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 8, \"hash_ids\": [1, 2]}\n\
                     {\"timestamp\": 40, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [1, 3]}\n\
                     {\"timestamp\": 90, \"input_length\": 300, \"output_length\": 9, \"hash_ids\": [1]}\n";

#[test]
fn dropped_trace_runs_by_name_or_by_a_path_ending_in_it() {
    let mut st = WorkerState::default();
    put(&mut st, "tiny.jsonl", TRACE.as_bytes());
    let files = data_for("");
    for path in ["tiny.jsonl", "../../shared/traces/tiny.jsonl"] {
        let config = servesim_scenario::DEFAULT_SCENARIO.replace(
            "  source:\n    type: synthetic\n    input_tokens: 1024\n    output_tokens: 128\n  load:\n    type: concurrency\n    concurrency: 10\n",
            &format!("  source: {{type: trace, paths: [{path}]}}\n  load: {{type: trace_timestamps}}\n"),
        );
        assert!(config.contains("type: trace"), "{config}");
        let mut out = Vec::new();
        handle(&mut st, ToWorker::Run { id: 4, config, source: "page".into() }, &files, &|| 0.0, &mut |m| {
            out.push(m)
        });
        let Some(FromWorker::Done { prediction, .. }) = out.pop() else { panic!("{out:?}") };
        let v: serde_json::Value = serde_json::from_str(&prediction).unwrap();
        assert_eq!(v["num_requests"], 3, "{prediction}");
    }
    // A file that was never dropped is named in the error.
    let mut out = Vec::new();
    let config = "engine: {model: Qwen/Qwen3-32B-FP8, hardware: h200_sxm, workers: {aggregated: {}}}\ntraffic: {source: {type: trace, paths: [gone.jsonl]}, load: {type: trace_timestamps}}\n";
    handle(
        &mut st,
        ToWorker::Run { id: 5, config: config.into(), source: "page".into() },
        &files,
        &|| 0.0,
        &mut |m| out.push(m),
    );
    assert!(
        matches!(&out[..], [FromWorker::Failed { id: 5, message, .. }] if message.contains("gone.jsonl") && message.contains("Data tab")),
        "{out:?}"
    );
}

#[test]
fn dropped_files_are_inspected_like_the_cli_does() {
    let mut st = WorkerState::default();
    put(&mut st, "tiny.jsonl", TRACE.as_bytes());
    put(
        &mut st,
        "broken.jsonl",
        b"{\"timestamp\": 0, \"input_length\": -1, \"output_length\": 3, \"hash_ids\": [1]}\n",
    );
    let mut out = Vec::new();
    let files = MemFiles::default();
    for (id, name) in [(1, "tiny.jsonl"), (2, "broken.jsonl"), (3, "missing.csv")] {
        handle(&mut st, ToWorker::Inspect { id, name: name.into(), slice: 0 }, &files, &|| 0.0, &mut |m| {
            out.push(m)
        });
    }
    let lib = servesim_scenario::inspect("tiny.jsonl", TRACE.as_bytes().to_vec(), None, 0).unwrap();
    match &out[..] {
        [FromWorker::Inspected { id: 1, kind, summary, figure: Some(_), .. }, FromWorker::Failed { id: 2, message: m2, .. }, FromWorker::Failed { id: 3, message: m3, .. }] =>
        {
            assert_eq!(kind, "mooncake_trace");
            assert_eq!(*summary, lib.summary);
            assert!(m2.contains("broken.jsonl:1") && m2.contains("input_length"), "{m2}");
            assert!(m3.contains("missing.csv"), "{m3}");
        }
        other => panic!("{other:?}"),
    }
    // Garbage instead of base64 is refused, naming the file.
    let mut out = Vec::new();
    handle(
        &mut st,
        ToWorker::PutFile { name: "x.jsonl".into(), base64: "%%%".into() },
        &files,
        &|| 0.0,
        &mut |m| out.push(m),
    );
    assert!(
        matches!(&out[..], [FromWorker::Failed { message, .. }] if message.contains("x.jsonl")),
        "{out:?}"
    );
}

#[test]
fn check_lists_each_problem_at_its_path_and_line() {
    let mut st = WorkerState::default();
    let files = data_for("");
    let bad = "engine:\n  model: Qwen/Qwen3-32B-FP8\n  hardware: h200_sxm\n  workers:\n    aggregated:\n      parallelism: {tensor: 0}\ntraffic:\n  load: {type: poisson, requests_per_second: -1}\n";
    let mut out = Vec::new();
    handle(&mut st, ToWorker::Check { id: 8, config: bad.into() }, &files, &|| 0.0, &mut |m| out.push(m));
    let Some(FromWorker::Checked { id: 8, problems, models, hardware }) = out.pop() else {
        panic!("{out:?}")
    };
    let at = |p: &str| problems.iter().find(|x| x.path == p).unwrap_or_else(|| panic!("{p}: {problems:?}"));
    assert_eq!(at("engine.workers.aggregated.parallelism.tensor").line, Some(6));
    assert_eq!(at("traffic.load.requests_per_second").line, Some(8));
    assert!(models.iter().any(|m| m == "Qwen/Qwen3-32B-FP8") && hardware.iter().any(|h| h == "h200_sxm"));
    // The default scenario has none.
    handle(
        &mut st,
        ToWorker::Check { id: 9, config: servesim_scenario::DEFAULT_SCENARIO.into() },
        &files,
        &|| 0.0,
        &mut |m| out.push(m),
    );
    assert!(matches!(out.pop(), Some(FromWorker::Checked { id: 9, problems, .. }) if problems.is_empty()));
}

#[test]
fn a_dropped_aiconfigurator_table_replaces_the_built_in_one() {
    let name = "aic/systems/data/h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet";
    let tpot = |st: &mut WorkerState| {
        let mut out = Vec::new();
        let msg =
            ToWorker::Run { id: 1, config: servesim_scenario::DEFAULT_SCENARIO.into(), source: "d".into() };
        handle(st, msg, &data_for(""), &|| 0.0, &mut |m| out.push(m));
        let Some(FromWorker::Done { prediction, .. }) = out.pop() else { panic!("{out:?}") };
        serde_json::from_str::<serde_json::Value>(&prediction).unwrap()["mean_tpot_ms"].as_f64().unwrap()
    };
    let mut st = WorkerState::default();
    let base = tpot(&mut st);
    put(
        &mut st,
        name,
        include_bytes!(
            "../../../tests/fixtures/aic/systems/data/h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
        ),
    );
    // The fixture's GEMMs are 1.5x the built-in ones (tests/aic_tables.rs).
    let ratio = tpot(&mut st) / base;
    assert!(ratio > 1.3 && ratio < 1.51, "{ratio}");
}

/// The Validate page's messages (`validation::Ask`).
mod validation;
