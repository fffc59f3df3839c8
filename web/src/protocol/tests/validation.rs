//! The Validate page's sub-protocol: selecting, replaying and reporting rows, calibrating,
//! opening a row's scenario and comparing a per-request log, each as the CLI does it.

use super::*;

/// A calibration file of two rows: one the H200 vLLM tables predict, one naming a model the
/// catalog does not know.
const SILICON: &str = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms
agg8,,vllm,0.24.0,meta-llama/Llama-3.1-8B-Instruct,h200_sxm,,agg,1024,128,,,8,1,1,1,1,1,,,,,,,,,,,,,,,40,6
nope,,vllm,,acme/NoSuchModel,h200_sxm,,agg,1024,128,,,8,1,1,1,1,1,,,,,,,,,,,,,,,40,6
";

#[test]
fn validate_replays_each_row_as_the_cli_does_and_names_what_it_fetches() {
    let msg = ToWorker::Validation {
        id: 4,
        ask: Ask::Validate {
            csv: SILICON.into(),
            source: "cal.csv".into(),
            indices: vec![1, 0],
            options: Vec::new(),
        },
    };
    // The tables of each row's GPU, engine and release.
    let configs = msg.configs(&mut WorkerState::default());
    assert_eq!(configs.len(), 2, "{configs:?}");
    assert!(
        configs.iter().any(|c| c.contains("backend_version: '0.24.0'") && c.contains("h200_sxm")),
        "{configs:?}"
    );
    // A row that names no release fetches the default release's tables.
    for config in &configs {
        let paths = servesim_scenario::perfdata::paths_for_config(config);
        assert!(paths.iter().any(|p| p.starts_with("perf/h200_sxm/vllm/0.24.0/")), "{config}: {paths:?}");
    }
    let files = data_for("");
    let mut out = Vec::new();
    handle(&mut WorkerState::default(), msg, &files, &|| 0.0, &mut |m| out.push(m));
    // One reply a row, in the order asked, each what `servesim validate` computes.
    let rows = servesim_scenario::validate::parse_silicon(SILICON.as_bytes(), "cal.csv").unwrap();
    let catalog = Catalog::builtin().unwrap();
    let knobs = servesim_scenario::validate::Knobs::replay_policy();
    let [FromWorker::Validation { id: 4, answer: Answer::Validated { index: 1, outcome: nope } }, FromWorker::Validation { id: 4, answer: Answer::Validated { index: 0, outcome: agg } }] =
        out.as_slice()
    else {
        panic!("{out:?}")
    };
    assert_eq!(*agg, servesim_scenario::validate::run_row(&rows[0], &catalog, &files, &knobs));
    assert!(agg.predicted.is_some_and(|(ttft, tpot)| ttft > 0.0 && tpot > 0.0), "{agg:?}");
    assert!(nope.error.as_deref().is_some_and(|e| e.contains("acme/NoSuchModel")), "{nope:?}");
    // The outcome crosses to the page as JSON and back unchanged.
    let back: FromWorker = serde_json::from_str(&encode(&out[1])).unwrap();
    assert_eq!(back, out[1]);
    // The scenario a row replays as runs to the row's prediction (the page opens it in Predict).
    let ask = Ask::Scenario { csv: SILICON.into(), source: "cal.csv".into(), index: 0, options: Vec::new() };
    let msg = ToWorker::Validation { id: 4, ask };
    assert!(msg.configs(&mut WorkerState::default()).iter().any(|c| c.contains("backend_version: '0.24.0'")));
    let mut got = Vec::new();
    handle(&mut WorkerState::default(), msg, &files, &|| 0.0, &mut |m| got.push(m));
    let Some(FromWorker::Validation { id: 4, answer: Answer::Scenario { index: 0, yaml } }) = got.pop()
    else {
        panic!("{got:?}")
    };
    let replayed =
        servesim_scenario::scenario::predict_with_catalog(&yaml, "row.yaml", &catalog, &files).unwrap();
    assert_eq!(Some((replayed.summary.ttft.mean, replayed.summary.tpot.mean)), agg.predicted);
    let ask = Ask::Scenario { csv: SILICON.into(), source: "cal.csv".into(), index: 1, options: Vec::new() };
    handle(&mut WorkerState::default(), ToWorker::Validation { id: 4, ask }, &files, &|| 0.0, &mut |m| {
        got.push(m)
    });
    // A row not predicted opens too, and Predict says why.
    let Some(FromWorker::Validation { answer: Answer::Scenario { index: 1, yaml }, .. }) = got.pop() else {
        panic!()
    };
    let refused =
        servesim_scenario::scenario::predict_with_catalog(&yaml, "row.yaml", &catalog, &files).unwrap_err();
    assert!(refused.to_string().contains("acme/NoSuchModel"), "{refused}");
    // With what-if options, as `servesim validate --frontend-ms 300 --length-floor 1`.
    let options = vec![("frontend-ms".to_string(), "300".to_string()), ("length-floor".into(), "1".into())];
    let msg = ToWorker::Validation {
        id: 6,
        ask: Ask::Validate { csv: SILICON.into(), source: "cal.csv".into(), indices: vec![0], options },
    };
    let mut out = Vec::new();
    handle(&mut WorkerState::default(), msg, &files, &|| 0.0, &mut |m| out.push(m));
    let [FromWorker::Validation { id: 6, answer: Answer::Validated { index: 0, outcome } }] = out.as_slice()
    else {
        panic!("{out:?}")
    };
    let what_if = servesim_scenario::validate::Knobs {
        frontend_ms: Some(300.0),
        length_floor: Some(1.0),
        ..servesim_scenario::validate::Knobs::replay_policy()
    };
    assert_eq!(*outcome, servesim_scenario::validate::run_row(&rows[0], &catalog, &files, &what_if));
    let (slow, policy) = (outcome.predicted.unwrap().0, agg.predicted.unwrap().0);
    assert!(slow > policy + 200.0, "a 300 ms frontend: {slow} against {policy} ms");
}

#[test]
fn a_bad_calibration_file_or_row_fails_by_name() {
    let run = |csv: &str, indices: Vec<usize>| {
        let mut out = Vec::new();
        let options = Vec::new();
        let msg = ToWorker::Validation {
            id: 5,
            ask: Ask::Validate { csv: csv.into(), source: "cal.csv".into(), indices, options },
        };
        handle(&mut WorkerState::default(), msg, &data_for(""), &|| 0.0, &mut |m| out.push(m));
        out
    };
    // An option out of its range is refused by its flag, as the CLI refuses it.
    let mut out = Vec::new();
    let options = vec![("frontend-ms".to_string(), "-5".to_string())];
    let msg = ToWorker::Validation {
        id: 5,
        ask: Ask::Validate { csv: SILICON.into(), source: "cal.csv".into(), indices: vec![0], options },
    };
    handle(&mut WorkerState::default(), msg, &data_for(""), &|| 0.0, &mut |m| out.push(m));
    let [FromWorker::Failed { id: 5, message, exit_code: 2 }] = out.as_slice() else { panic!("{out:?}") };
    assert!(message.starts_with("--frontend-ms: '-5'"), "{message}");
    let out = run("id,backend\nx,vllm\n", vec![0]);
    let [FromWorker::Failed { id: 5, message, exit_code: 2 }] = out.as_slice() else { panic!("{out:?}") };
    assert!(message.contains("cal.csv"), "{message}");
    let out = run(SILICON, vec![7]);
    let [FromWorker::Failed { id: 5, message, exit_code: 2 }] = out.as_slice() else { panic!("{out:?}") };
    assert!(message.contains("no data row 7") && message.contains("has 2"), "{message}");
}

fn file() -> String {
    format!(
        "{}\na8,,vllm,,meta-llama/Llama-3.1-8B-Instruct,h200_sxm,,agg,1024,128,,,8,1,1,1,1,1,,,,,,,,,,,,,,,40,6\n\
         q32,,sglang,,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,8,2,1,1,1,1,,,,,,,,,,,,,,,90,12\n",
        SILICON.lines().next().unwrap()
    )
}

/// `select_rows` of [`file`] with the page's fields.
fn pick(filter: &str, class: &str, measured_by: &str, single_node: bool) -> Result<Vec<usize>, String> {
    let wanted = RowsWanted {
        filter: filter.into(),
        class: class.into(),
        measured_by: measured_by.into(),
        single_node,
    };
    let kept = select_rows(&file(), "f.csv", &wanted, &Catalog::builtin().unwrap())?;
    Ok(kept.into_iter().map(|(i, _)| i).collect())
}

#[test]
fn the_selection_keeps_rows_as_the_clis_options_do_with_their_positions() {
    let wanted = RowsWanted::default();
    let all = select_rows(&file(), "f.csv", &wanted, &Catalog::builtin().unwrap()).unwrap();
    assert_eq!(all.iter().map(|(i, r)| (*i, r.id.as_str())).collect::<Vec<_>>(), [(0, "a8"), (1, "q32")]);
    assert_eq!(pick(" sglang ", "", "", false), Ok(vec![1]));
    assert_eq!(pick("nothing, Qwen3", "", "", false), Ok(vec![1]));
    assert_eq!(pick("", "dense-agg", "other", true), Ok(vec![0, 1]));
    let none = pick("b300", "", "", false).unwrap_err();
    assert!(none.contains("no row of f.csv matches the selection (filter 'b300')"), "{none}");
    let none = pick("", "moe-agg", "inferencex", true).unwrap_err();
    assert!(none.contains("(class moe-agg, source inferencex, single node)"), "{none}");
    assert!(pick("", "moe", "", false).unwrap_err().contains("class moe: use dense-agg"));
    assert!(pick("", "", "me", false).unwrap_err().contains("source me: use inferencex"));
    let bad = select_rows("id\nx\n", "bad.csv", &wanted, &Catalog::builtin().unwrap()).unwrap_err();
    assert!(bad.contains("bad.csv"), "{bad}");
}

#[test]
fn the_answer_is_the_clis_table_report_and_rows() {
    let rows: Vec<SiliconRow> =
        servesim_scenario::validate::parse_silicon(file().as_bytes(), "f.csv").unwrap();
    let outcomes = vec![
        Outcome { predicted: Some((44.0, 5.4)), ..Outcome::default() },
        Outcome { error: Some("refused".into()), ..Outcome::default() },
    ];
    let catalog = Catalog::builtin().unwrap();
    let a = validation_answer(
        "servesim validate --silicon f.csv",
        "f.csv",
        (&[0, 1], &rows),
        &outcomes,
        &catalog,
    );
    let s = servesim_scenario::validate::summarize(&rows, &outcomes, &catalog);
    assert_eq!(a.table, servesim_scenario::validate::table(&s));
    assert_eq!(a.rows_csv, servesim_scenario::validate::rows_csv(&rows, &outcomes));
    let json: serde_json::Value = serde_json::from_str(&a.json).unwrap();
    assert_eq!(json["command"], "servesim validate --silicon f.csv");
    assert_eq!(json["overall"]["predicted"], 1);
    assert!(a.markdown.contains("## Not predicted (1)"), "{}", a.markdown);
    // Only predicted rows are drawn.
    assert_eq!(a.ttft, [("a8".to_string(), 40.0, 44.0)]);
    assert_eq!(a.tpot, [("a8".to_string(), 6.0, 5.4)]);
    // Every row is in the table, the one not predicted with why.
    assert_eq!(a.rows.len(), 2);
    assert_eq!(a.rows[0].deployment, "meta-llama/Llama-3.1-8B-Instruct on h200_sxm, vllm, dense aggregated");
    assert_eq!(a.rows[0].workload, "1024/128 × 8");
    let (ttft, tpot) = a.rows[0].errors_pct().unwrap();
    assert!((ttft - 10.0).abs() < 1e-9 && (tpot + 10.0).abs() < 1e-9, "{ttft} {tpot}");
    assert_eq!(a.rows[1].error.as_deref(), Some("refused"));
}

#[test]
fn the_row_table_filters_and_puts_the_largest_errors_first() {
    let row = |id: &str, deployment: &str, predicted: Option<(f64, f64)>| RowResult {
        index: 0,
        id: id.into(),
        deployment: deployment.into(),
        workload: String::new(),
        measured: (100.0, 10.0),
        predicted,
        error: predicted.is_none().then(|| "refused".to_string()),
    };
    let rows = [
        row("a", "Qwen on h100_sxm", Some((120.0, 10.5))),
        row("b", "Qwen on h200_sxm", None),
        row("c", "Llama on h100_sxm", Some((50.0, 10.1))),
        row("d", "Llama on h200_sxm", Some((90.0, 13.0))),
    ];
    let ids = |shown: Vec<&RowResult>| shown.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(shown_rows(&rows, "", RowOrder::Ttft)), ["c", "a", "d", "b"]);
    assert_eq!(ids(shown_rows(&rows, "", RowOrder::Tpot)), ["d", "a", "c", "b"]);
    assert_eq!(ids(shown_rows(&rows, "", RowOrder::File)), ["a", "b", "c", "d"]);
    assert_eq!(ids(shown_rows(&rows, " H100 ", RowOrder::Ttft)), ["c", "a"]);
    assert!(shown_rows(&rows, "b300", RowOrder::Ttft).is_empty());
}

#[test]
fn the_coordinator_selects_rows_and_reports_them_by_message() {
    let mut st = WorkerState::default();
    let mut out = Vec::new();
    let wanted = |filter: &str| RowsWanted { filter: filter.into(), ..RowsWanted::default() };
    let ask = ToWorker::Validation {
        id: 3,
        ask: Ask::SelectRows { csv: file(), source: "f.csv".into(), wanted: wanted("Qwen3") },
    };
    handle(&mut st, ask, &data_for(""), &|| 0.0, &mut |m| out.push(m));
    assert_eq!(
        out.pop(),
        Some(FromWorker::Validation { id: 3, answer: Answer::RowsSelected { indices: vec![1] } })
    );
    let ask = ToWorker::Validation {
        id: 3,
        ask: Ask::SelectRows { csv: file(), source: "f.csv".into(), wanted: wanted("b300") },
    };
    handle(&mut st, ask, &data_for(""), &|| 0.0, &mut |m| out.push(m));
    assert!(
        matches!(out.pop(), Some(FromWorker::Failed { id: 3, exit_code: 2, message }) if message.contains("b300"))
    );
    let outcome = Outcome { predicted: Some((100.0, 10.0)), ..Outcome::default() };
    let report = |indices: Vec<usize>, outcomes: Vec<Outcome>| ToWorker::Validation {
        id: 3,
        ask: Ask::Report {
            csv: file(),
            source: "f.csv".into(),
            indices,
            outcomes,
            wanted: wanted("Qwen3"),
            options: vec![("no-recipes".into(), "true".into())],
        },
    };
    handle(&mut st, report(vec![1], vec![outcome.clone()]), &data_for(""), &|| 0.0, &mut |m| out.push(m));
    let Some(FromWorker::Validation { id: 3, answer: Answer::Report { report: a } }) = out.pop() else {
        panic!("{out:?}")
    };
    assert_eq!(a.ttft, [("q32".to_string(), 90.0, 100.0)]);
    // The report's command replays the rows as the page did.
    let json: serde_json::Value = serde_json::from_str(&a.json).unwrap();
    assert_eq!(json["command"], "servesim validate --silicon f.csv --filter Qwen3 --no-recipes");
    // Outcomes that do not match the rows are refused, not summarised.
    handle(&mut st, report(vec![0, 1], vec![outcome]), &data_for(""), &|| 0.0, &mut |m| out.push(m));
    assert!(
        matches!(out.pop(), Some(FromWorker::Failed { id: 3, message, .. }) if message.contains("1 outcomes for 2 rows"))
    );
}

#[test]
fn the_command_line_spells_the_selection_and_the_options_as_the_cli_takes_them() {
    let wanted = RowsWanted {
        filter: "h100 , Qwen's 32B,".into(),
        class: "dense-agg".into(),
        measured_by: "aiconfigurator".into(),
        single_node: true,
    };
    let pairs =
        [("frontend-ms", "80"), ("length-floor", "1.0"), ("allreduce", "nccl"), ("mla-attention-dp", "true")];
    let options: Vec<(String, String)> = pairs.iter().map(|(f, v)| ((*f).into(), (*v).into())).collect();
    let knobs = crate::protocol::knobs(&options).unwrap();
    assert_eq!(
        crate::protocol::command_line("my runs.csv", &wanted, &knobs),
        "servesim validate --silicon 'my runs.csv' --filter h100 --filter 'Qwen'\\''s 32B' --class dense-agg \
         --source aiconfigurator --single-node --frontend-ms 80 --allreduce nccl --length-floor 1 --mla-attention-dp"
    );
    let policy = crate::protocol::knobs(&[]).unwrap();
    assert_eq!(
        crate::protocol::command_line("f.csv", &RowsWanted::default(), &policy),
        "servesim validate --silicon f.csv"
    );
}

#[test]
fn a_calibration_asks_the_pool_for_replays_until_it_has_the_clis_report() {
    use servesim_scenario::validate::calibrate::{calibrate, Setup};
    let files = data_for("");
    let (mut coordinator, mut replayer) = (WorkerState::default(), WorkerState::default());
    let wanted = RowsWanted { filter: "agg8".into(), ..RowsWanted::default() };
    let fit = vec!["frontend_ms".to_string()];
    let mut ask = ToWorker::Validation {
        id: 9,
        ask: Ask::Calibrate { csv: SILICON.into(), source: "cal.csv".into(), wanted, fit, folds: 0 },
    };
    let mut needs = 0;
    let report = loop {
        let mut out = Vec::new();
        handle(&mut coordinator, ask, &files, &|| 0.0, &mut |m| out.push(m));
        match out.pop() {
            Some(FromWorker::Validation {
                id: 9,
                answer: Answer::CalibrationNeeds { options, indices, .. },
            }) => {
                needs += 1;
                assert_eq!(indices, [0], "only the selected row");
                // A pool worker replays them as `Validate` does.
                let mut replies = Vec::new();
                let replay = ToWorker::Validation {
                    id: 9,
                    ask: Ask::Validate {
                        csv: SILICON.into(),
                        source: "cal.csv".into(),
                        indices: indices.clone(),
                        options: options.clone(),
                    },
                };
                handle(&mut replayer, replay, &files, &|| 0.0, &mut |m| replies.push(m));
                let predicted = replies
                    .into_iter()
                    .filter_map(|m| match m {
                        FromWorker::Validation {
                            answer: Answer::Validated { index, outcome, .. }, ..
                        } => Some((index, outcome.predicted)),
                        _ => None,
                    })
                    .collect();
                ask = ToWorker::Validation { id: 9, ask: Ask::Calibrated { options, predicted } };
            }
            Some(FromWorker::Validation { id: 9, answer: Answer::CalibrationReport { table, json } }) => {
                break (table, json)
            }
            other => panic!("{other:?}"),
        }
    };
    // The same calibration run directly, as the CLI runs it.
    let rows = servesim_scenario::validate::parse_silicon(SILICON.as_bytes(), "cal.csv").unwrap();
    let catalog = Catalog::builtin().unwrap();
    let setup = Setup::new("cal.csv", &rows[..1], &["frontend_ms".to_string()], 0).unwrap();
    let mut eval = |k: &servesim_scenario::validate::Knobs, idx: &[usize]| {
        idx.iter()
            .map(|&i| servesim_scenario::validate::run_row(&rows[i], &catalog, &files, k).predicted)
            .collect()
    };
    let direct = calibrate(&setup, &mut eval).unwrap();
    assert_eq!(report.0, direct.table());
    assert_eq!(serde_json::from_str::<serde_json::Value>(&report.1).unwrap(), direct.to_json());
    assert!(needs > 5 && needs <= direct.replays, "{needs} needs for {} replays", direct.replays);
}

#[test]
fn a_calibration_that_cannot_run_says_why() {
    let mut st = WorkerState::default();
    let run = |st: &mut WorkerState, filter: &str, fit: &str, folds: usize| {
        let wanted = RowsWanted { filter: filter.into(), ..RowsWanted::default() };
        let msg = ToWorker::Validation {
            id: 2,
            ask: Ask::Calibrate {
                csv: file(),
                source: "f.csv".into(),
                wanted,
                fit: vec![fit.to_string()],
                folds,
            },
        };
        let mut out = Vec::new();
        handle(st, msg, &data_for(""), &|| 0.0, &mut |m| out.push(m));
        match out.pop() {
            Some(FromWorker::Failed { id: 2, message, exit_code: 2 }) => message,
            other => panic!("{other:?}"),
        }
    };
    assert!(run(&mut st, "", "frontend_ms", 0).contains("ran on 2 engines (sglang, vllm)"));
    assert!(run(&mut st, "a8", "warp", 0).contains("--fit warp: not a constant"));
    assert!(run(&mut st, "a8", "frontend_ms", 1).contains("--folds 1: use 0"));
    assert!(run(&mut st, "b300", "frontend_ms", 0).contains("no row of f.csv matches"));
    // Replays for a calibration that is not running are refused.
    let mut out = Vec::new();
    let late = ToWorker::Validation {
        id: 7,
        ask: Ask::Calibrated { options: Vec::new(), predicted: vec![(0, None)] },
    };
    handle(&mut st, late, &data_for(""), &|| 0.0, &mut |m| out.push(m));
    assert!(matches!(out.pop(), Some(FromWorker::Failed { id: 7, .. })));
}

#[test]
fn a_request_log_is_compared_with_its_replay_as_the_cli_compares_it() {
    let log = "{\"request_id\":\"a\",\"input_toks\":10,\"output_toks\":5,\"queued_ts\":1.0,\"first_token_ts\":1.25,\"last_token_ts\":1.65}\n\
               {\"request_id\":\"b\",\"input_toks\":30,\"output_toks\":9,\"queued_ts\":2.0,\"first_token_ts\":2.5,\"last_token_ts\":3.3}\n";
    let files = data_for("");
    let ask = |log: &str, config: &str| {
        let mut out = Vec::new();
        let msg = ToWorker::Validation {
            id: 8,
            ask: Ask::CompareRequests {
                log: log.into(),
                log_name: "log.jsonl".into(),
                config: config.into(),
                source: "replay.yaml".into(),
            },
        };
        assert_eq!(msg.configs(&mut WorkerState::default()), [config.to_string()], "its tables are fetched");
        handle(&mut WorkerState::default(), msg, &files, &|| 0.0, &mut |m| out.push(m));
        out.pop()
    };
    let Some(FromWorker::Validation { id: 8, answer: Answer::RequestsCompared { table } }) =
        ask(log, servesim_scenario::DEFAULT_SCENARIO)
    else {
        panic!()
    };
    let measured = servesim_scenario::validate::parse_request_log(log.as_bytes(), "log.jsonl").unwrap();
    let prediction = servesim_scenario::scenario::predict_with_catalog(
        servesim_scenario::DEFAULT_SCENARIO,
        "replay.yaml",
        &Catalog::builtin().unwrap(),
        &files,
    )
    .unwrap();
    let cli = servesim_scenario::validate::requests_table(&servesim_scenario::validate::compare_requests(
        &measured,
        &prediction,
    ));
    assert_eq!(table, cli);
    assert!(table.starts_with("requests: 2 measured, "), "{table}");
    // A bad log line or a bad config is refused by name.
    let Some(FromWorker::Failed { message, exit_code: 2, .. }) = ask("{\"request_id\":\"a\"}\n", "x") else {
        panic!()
    };
    assert_eq!(message, "log.jsonl:1: missing number 'queued_ts'");
    let Some(FromWorker::Failed { message, exit_code: 2, .. }) = ask(log, "engine: [") else { panic!() };
    assert!(message.contains("replay.yaml"), "{message}");
}
