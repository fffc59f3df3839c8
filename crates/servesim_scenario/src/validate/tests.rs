use super::*;
use servesim_perf::oplevel::{AllReduceImpl, MoeKernel};

mod recipes;

fn row(mode: Mode) -> SiliconRow {
    SiliconRow {
        line: 2,
        id: "r".into(),
        source: String::new(),
        backend: "vllm".into(),
        backend_version: String::new(),
        model: "Qwen/Qwen3-32B".into(),
        system: "h100_sxm".into(),
        precision: "fp8".into(),
        gemm_quant: "fp8".into(),
        moe_quant: "fp8".into(),
        isl: 1024,
        osl: 128,
        concurrency: 8,
        mode,
        ttft_ms: 100.0,
        tpot_ms: 10.0,
    }
}

#[test]
fn gpt_oss_without_fp4_tensor_cores_replays_in_its_mxfp4_checkpoint_formats() {
    let catalog = Catalog::builtin().unwrap();
    let l = Layout { tp: 2, pp: 1, dp: 1, moe_tp: 2, moe_ep: 1, batch: 8 };
    let mut r = row(Mode::Agg { layout: l });
    r.model = "openai/gpt-oss-120b".into();
    r.precision = "fp4".into();
    r.gemm_quant = "nvfp4".into();
    r.moe_quant = "nvfp4".into();
    let yaml = |r: &SiliconRow| {
        scenario_yaml(&interpret(r, &catalog, &Knobs::default()), &Knobs::default(), false, None)
    };
    for (gpu, label) in [("h200_sxm", "nvfp4"), ("h100_sxm", "nvfp4"), ("h100_sxm", "fp8")] {
        r.system = gpu.into();
        r.gemm_quant = label.into();
        r.moe_quant = label.into();
        assert!(yaml(&r).contains("quantization: {kv_cache: fp8}"), "{gpu} {label}: {}", yaml(&r));
    }
    r.gemm_quant = "nvfp4".into();
    r.moe_quant = "nvfp4".into();
    // Blackwell runs NVFP4 kernels: the label stands, as for other models on Hopper.
    r.system = "b200_sxm".into();
    assert!(yaml(&r).contains("quantization: {gemm: nvfp4, moe: nvfp4, kv_cache: fp8}"), "{}", yaml(&r));
    r.system = "h200_sxm".into();
    r.model = "Qwen/Qwen3-30B-A3B".into();
    assert!(yaml(&r).contains("gemm: nvfp4"), "{}", yaml(&r));
}

#[test]
fn mla_layouts_can_be_read_as_attention_data_parallel() {
    let catalog = Catalog::builtin().unwrap();
    let l = Layout { tp: 8, pp: 1, dp: 1, moe_tp: 1, moe_ep: 8, batch: 64 };
    let mut r = row(Mode::Agg { layout: l });
    r.model = "deepseek-ai/DeepSeek-R1".into();
    let on = Knobs { mla_attention_dp: true, ..Knobs::default() };
    let Mode::Agg { layout } = interpret(&r, &catalog, &on).mode else { panic!() };
    assert_eq!((layout.tp, layout.dp, layout.moe_ep), (1, 8, 8));
    // Off by default, and never for models without MLA.
    assert_eq!(interpret(&r, &catalog, &Knobs::default()), r);
    let dense = row(Mode::Agg { layout: l });
    assert_eq!(interpret(&dense, &catalog, &on), dense);
}

#[test]
fn an_mla_tensor_degree_that_does_not_divide_the_heads_is_read_as_attention_data_parallel() {
    let catalog = Catalog::builtin().unwrap();
    let wide = Layout { tp: 36, pp: 1, dp: 1, moe_tp: 36, moe_ep: 1, batch: 32 };
    let fits = Layout { tp: 4, pp: 1, dp: 1, moe_tp: 1, moe_ep: 4, batch: 32 };
    let mut r =
        row(Mode::Disagg { prefill: fits, prefill_workers: None, decode: wide, decode_workers: None });
    r.model = "deepseek-ai/DeepSeek-R1".into();
    let Mode::Disagg { prefill, decode, .. } = interpret(&r, &catalog, &Knobs::default()).mode else {
        panic!()
    };
    // 128 heads: TP36 cannot split them, TP4 can and stays as written.
    assert_eq!((decode.tp, decode.dp, decode.moe_tp, decode.moe_ep), (1, 36, 36, 1));
    assert_eq!(prefill, fits);
    // Models without MLA keep the layout (the scenario check then names the heads).
    let mut gqa = row(Mode::Agg { layout: Layout { tp: 64, moe_tp: 8, moe_ep: 8, ..wide } });
    gqa.model = "Qwen/Qwen3-235B-A22B".into();
    assert_eq!(interpret(&gqa, &catalog, &Knobs::default()), gqa);
    let y = scenario_yaml(&interpret(&r, &catalog, &Knobs::default()), &Knobs::default(), false, None);
    assert!(y.contains("tensor: 1, pipeline: 1, attention_data: 36"), "{y}");
}

#[test]
fn rows_become_closed_loop_scenarios() {
    let l = Layout { tp: 2, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
    let y = scenario_yaml(&row(Mode::Agg { layout: l }), &Knobs::default(), true, None);
    assert!(y.contains("concurrency: 8"), "{y}");
    assert!(y.contains("requests: 80"), "{y}");
    let short = scenario_yaml(
        &row(Mode::Agg { layout: l }),
        &Knobs { requests_per_slot: Some(2), ..Knobs::default() },
        true,
        None,
    );
    assert!(short.contains("stop: {requests: 16}"), "{short}");
    assert!(y.contains("input_tokens: 1024"), "{y}");
    let sampled = scenario_yaml(
        &row(Mode::Agg { layout: l }),
        &Knobs { length_floor: Some(0.8), ..Knobs::default() },
        true,
        None,
    );
    assert!(sampled.contains("input_tokens: {dist: uniform, min: 820, max: 1024}"), "{sampled}");
    // Rows replay without prefix caching; a prompt-pool what-if turns it on and draws the
    // prompts from the pool.
    assert!(y.contains("prefix_caching: false") && !y.contains("prompt_pool"), "{y}");
    let pooled = scenario_yaml(
        &row(Mode::Agg { layout: l }),
        &Knobs { prompt_pool: Some(100), ..Knobs::default() },
        true,
        None,
    );
    assert!(pooled.contains("prefix_caching: true") && pooled.contains(", prompt_pool: 100}"), "{pooled}");
    assert!(y.contains("gemm: fp8"), "{y}");
    assert!(y.contains("max_sequences: 256"), "{y}");
    let d = scenario_yaml(
        &row(Mode::Disagg { prefill: l, prefill_workers: Some(2), decode: l, decode_workers: Some(3) }),
        &Knobs { prefill_scale: Some(1.5), ..Knobs::default() },
        true,
        None,
    );
    assert!(d.contains("timing: {prefill_scale: 1.5}"), "{d}");
    assert!(d.contains("mode: disaggregated") && d.contains("replicas: 3"), "{d}");
    // Decode ranks hold the running requests: max(256, concurrency per rank).
    let mut big =
        row(Mode::Disagg { prefill: l, prefill_workers: Some(2), decode: l, decode_workers: Some(3) });
    big.concurrency = 4096;
    let b = scenario_yaml(&big, &Knobs::default(), true, None);
    assert!(b.contains("max_sequences: 1366"), "{b}");
    assert!(!b.contains("async_scheduling"), "{b}");
    assert!(!b.contains("backend_version"), "{b}");
    let v = scenario_yaml(&big, &Knobs::default(), true, Some("1.0.0rc3"));
    assert!(v.contains("  backend: vllm\n  backend_version: 1.0.0rc3\n"), "{v}");
}

#[test]
fn dynamo_rows_replay_with_the_engine_release_their_runtime_bundles() {
    let l = Layout { tp: 4, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
    let mut r = row(Mode::Agg { layout: l });
    let image = |tag: &str, engine: &str| {
        format!(
            "source_file=2026-03-25.csv; wip=False; image=nvcr.io/nvidia/ai-dynamo/{engine}-runtime:{tag}"
        )
    };
    for (backend, version, source, want) in [
        // InferenceX's Dynamo TensorRT-LLM rows record Dynamo's release, with or without the image.
        ("trtllm", "0.8.1.post2", image("0.8.1.post2", "tensorrtllm"), "1.2.0rc6.post2"),
        ("trtllm", "0.8.1.post1", "source_file=2026-04-06.csv".to_string(), "1.2.0rc6.post1"),
        // A patch the matrix does not list takes its base release's; an unlisted release
        // stays as recorded (TensorRT-LLM 0.21.0 is TensorRT-LLM's own).
        ("trtllm", "0.7.0.post2", image("0.7.0.post2", "tensorrtllm"), "1.2.0rc2"),
        ("trtllm", "0.5.1-rc0.pre3", String::new(), "0.5.1-rc0.pre3"),
        ("sglang", "0.5.1-rc0.pre1", image("0.5.1-rc0.pre1", "sglang"), "0.5.1-rc0.pre1"),
        ("trtllm", "0.21.0", String::new(), "0.21.0"),
        ("vllm", "0.8.0", image("0.8.0", "vllm"), "0.12.0"),
        // A row that records its engine's own release keeps it, in a Dynamo image or not.
        ("vllm", "0.12.0", image("0.8.0", "vllm"), "0.12.0"),
        ("trtllm", "1.3.0rc5", image("0.8.1", "tensorrtllm"), "1.3.0rc5"),
        ("trtllm", "1.0.0rc3", String::new(), "1.0.0rc3"),
    ] {
        (r.backend, r.backend_version, r.source) = (backend.into(), version.into(), source);
        assert_eq!(engine_release(&r), want, "{backend} {version}");
    }
    // A Dynamo 0.8 TensorRT-LLM row replays with the calibration of 1.1 and later, a
    // TensorRT-LLM 1.0 row with its own.
    (r.backend, r.backend_version, r.source) = ("trtllm".into(), "0.8.1.post2".into(), String::new());
    assert_eq!(release_knobs(&r, &Knobs::default()), Knobs::default());
    r.backend_version = "1.0.0rc3".into();
    let k = release_knobs(&r, &Knobs::default());
    assert_eq!((k.prefill_scale, k.frontend_ms, k.step_overhead_ms), (Some(1.25), Some(80.0), Some(0.6)));
    // Its trtllm-serve process is a queue; the replayed scenario says so.
    assert_eq!((k.frontend_request_ms, k.frontend_chunk_us), (Some(6.0), Some(70.0)));
    let yaml = scenario_yaml(&r, &Knobs::default(), true, None);
    assert!(yaml.contains("request_ms: 6") && yaml.contains("chunk_us: 70"), "{yaml}");
    // Knobs given on the command line win.
    let mine = Knobs { step_overhead_ms: Some(0.0), ..Knobs::default() };
    assert_eq!(release_knobs(&r, &mine).step_overhead_ms, Some(0.0));
    // vLLM 0.12 behind Dynamo 0.8 schedules synchronously, as vLLM 0.12 does.
    (r.backend, r.backend_version, r.source) = ("vllm".into(), "0.8.0".into(), image("0.8.0", "vllm"));
    assert!(scenario_yaml(&r, &Knobs::default(), true, None).contains("async_scheduling: false"));
}

#[test]
fn rows_from_vllm_before_0_14_replay_with_synchronous_scheduling() {
    for (backend, version, sync) in [
        ("vllm", "0.12.0", true),
        ("vllm", "0.13.2", true),
        ("vllm", "0.14.0", false),
        ("vllm", "0.19.1", false),
        ("vllm", "", false),
        ("vllm", "nightly-5b8c30d", false),
        ("sglang", "0.5.6.post2", false),
        ("trtllm", "0.8.1.post2", false),
    ] {
        assert_eq!(schedules_synchronously(backend, version), sync, "{backend} {version}");
    }
    let l = Layout { tp: 2, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
    let mut r = row(Mode::Agg { layout: l });
    r.backend_version = "0.12.0".into();
    let y = scenario_yaml(&r, &Knobs::default(), true, None);
    assert!(y.contains("max_sequences: 256, async_scheduling: false}"), "{y}");
}

#[test]
fn tensorrt_llm_1_0_rows_replay_with_their_release_calibration() {
    let l = Layout { tp: 1, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
    let mut r = row(Mode::Agg { layout: l });
    r.backend = "trtllm".into();
    for (version, written) in [("1.0.0rc3", true), ("0.21.0", true), ("1.1.0rc2.post2", false), ("", false)] {
        r.backend_version = version.into();
        let y = scenario_yaml(&r, &Knobs::default(), true, None);
        let release = "timing: {prefill_scale: 1.25, step_overhead_ms: 0.6, frontend_ms: 80}";
        assert_eq!(y.contains(release), written, "{version}: {y}");
    }
    // A constant given on the command line wins over the release's.
    r.backend_version = "1.0.0rc3".into();
    let mine = Knobs { prefill_scale: Some(1.1), allreduce: Some(AllReduceImpl::Custom), ..Knobs::default() };
    let y = scenario_yaml(&r, &mine, true, None);
    assert!(
        y.contains("timing: {prefill_scale: 1.1, step_overhead_ms: 0.6, frontend_ms: 80, allreduce: custom}"),
        "{y}"
    );
    // Other engines' releases share one calibration.
    r.backend = "sglang".into();
    r.backend_version = "0.4.0".into();
    assert!(!scenario_yaml(&r, &Knobs::default(), true, None).contains("timing:"));
}

#[test]
fn groups_compute_mape_bias_and_coverage() {
    let l = Layout { tp: 1, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
    let rows = vec![row(Mode::Agg { layout: l }), row(Mode::Agg { layout: l })];
    let outs = vec![
        Outcome { predicted: Some((110.0, 9.0)), ..Outcome::default() },
        Outcome { error: Some("refused".into()), ..Outcome::default() },
    ];
    let s = summarize(&rows, &outs, &Catalog::builtin().unwrap());
    let g = &s.overall;
    assert!((g.ttft_mape() - 10.0).abs() < 1e-9);
    assert!((g.tpot_bias() + 10.0).abs() < 1e-9);
    assert!((g.coverage() - 50.0).abs() < 1e-9);
    assert!(table(&s).contains("dense aggregated"));
}

#[test]
fn shape_errors_compare_each_curve_with_its_lowest_concurrency() {
    let l = |batch| Layout { tp: 1, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch };
    // One curve at 4, 8 and 16 clients (its batch follows the clients); measured TTFT
    // doubles from 4 to 16 clients.
    let point = |c: u32, ttft: f64, tpot: f64| {
        let mut r = row(Mode::Agg { layout: l(c) });
        (r.concurrency, r.ttft_ms, r.tpot_ms) = (c, ttft, tpot);
        r
    };
    let mut rows = vec![point(8, 150.0, 12.0), point(4, 100.0, 10.0), point(16, 200.0, 15.0)];
    // Predicted twice as slow throughout: the level is off, the shape is right.
    let twice = |r: &SiliconRow| Outcome {
        predicted: Some((2.0 * r.ttft_ms, 2.0 * r.tpot_ms)),
        ..Outcome::default()
    };
    let outs: Vec<Outcome> = rows.iter().map(twice).collect();
    let s = summarize(&rows, &outs, &Catalog::builtin().unwrap());
    assert!((s.overall.ttft_mape() - 100.0).abs() < 1e-9);
    assert_eq!(s.overall.shape_points, 2, "the lowest concurrency is the reference, not a point");
    assert!(s.overall.ttft_shape().abs() < 1e-9 && s.overall.tpot_shape().abs() < 1e-9);
    // Predicted flat at the reference's value: the 16-client point is off by 1/2 − 1, the
    // 8-client one by 100/150 − 1 (TTFT); TPOT 10/15 − 1 and 10/12 − 1.
    let flat = vec![Outcome { predicted: Some((100.0, 10.0)), ..Outcome::default() }; 3];
    let s = summarize(&rows, &flat, &Catalog::builtin().unwrap());
    let want_ttft = 100.0 * (0.5 + (1.0 - 100.0 / 150.0)) / 2.0;
    let want_tpot = 100.0 * ((1.0 - 10.0 / 15.0) + (1.0 - 10.0 / 12.0)) / 2.0;
    assert!((s.overall.ttft_shape() - want_ttft).abs() < 1e-9, "{}", s.overall.ttft_shape());
    assert!((s.overall.tpot_shape() - want_tpot).abs() < 1e-9, "{}", s.overall.tpot_shape());
    let family = s.by_config.values().next().unwrap();
    assert!((family.ttft_shape() - want_ttft).abs() < 1e-9);
    // Another prompt length, another sweep or an unpredicted reference start other curves:
    // each of these rows is alone on its curve.
    rows[0].isl = 2048;
    rows[2].source = "source_file=other.csv".into();
    let s = summarize(&rows, &flat, &Catalog::builtin().unwrap());
    assert_eq!(s.overall.shape_points, 0);
    assert!(s.overall.ttft_shape().is_nan() && table(&s).contains("| n/a | n/a |"));
    let rows = vec![point(4, 100.0, 10.0), point(8, 150.0, 12.0), point(16, 200.0, 15.0)];
    let mut outs = flat;
    outs[0] = Outcome { error: Some("refused".into()), ..Outcome::default() };
    let s = summarize(&rows, &outs, &Catalog::builtin().unwrap());
    assert_eq!(s.overall.shape_points, 1, "the lowest predicted point is the reference");
    assert!((s.overall.ttft_shape() - 100.0 * (1.0 - 0.75)).abs() < 1e-9);
    // Rows written alike that replayed different deployments (InferenceX publishes one per
    // client count) are different curves; rows that replayed the same one share a curve.
    let replayed = |curve: &str| Outcome {
        predicted: Some((100.0, 10.0)),
        curve: Some(curve.into()),
        ..Outcome::default()
    };
    let outs = vec![replayed("a"), replayed("b"), replayed("b")];
    let s = summarize(&rows, &outs, &Catalog::builtin().unwrap());
    assert_eq!(s.overall.shape_points, 1, "the 16-client point against the 8-client one");
    assert!((s.overall.ttft_shape() - 100.0 * (150.0 / 200.0 - 1.0_f64).abs()).abs() < 1e-9);
    assert_eq!(shape_errors(&rows, &outs)[..2], [None, None]);
}

#[test]
fn prompt_load_is_the_measured_rate_times_a_prompts_kernel_floor() {
    let catalog = Catalog::builtin().unwrap();
    let l = Layout { tp: 1, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 64 };
    let mut r = row(Mode::Agg { layout: l });
    (r.isl, r.osl, r.concurrency) = (4096, 128, 64);
    let yaml = scenario_yaml(&interpret(&r, &catalog, &Knobs::default()), &Knobs::default(), true, None);
    let p = prepare(&parse_with_overrides(&yaml, "t", &[]).unwrap(), "t", &catalog, None, &crate::NoFiles)
        .unwrap();
    // One mean prompt's kernels: no faster than the GPU's dense fp8 peak on the linear layers,
    // and a few times it at most.
    let per_prompt_s = crate::estimate::prompt_kernel_load(&p, 1.0).unwrap();
    let m = catalog.model(&r.model).unwrap();
    let isl = crate::estimate::workload(&p).unwrap().isl;
    #[allow(clippy::cast_precision_loss)]
    let peak_s =
        2.0 * m.active_linear_params() as f64 * isl / catalog.gpu("h100_sxm").unwrap().fp8_flops.unwrap();
    assert!(
        per_prompt_s > peak_s && per_prompt_s < 4.0 * peak_s,
        "{per_prompt_s} s against {peak_s} s at peak"
    );
    // The measured rate is Little's law over the replay's mean lengths.
    let osl = crate::estimate::workload(&p).unwrap().osl;
    (r.ttft_ms, r.tpot_ms) = (1000.0, 100.0);
    let slow = measured_prompt_load(&r, &p).unwrap();
    let rate = 64.0 / ((1000.0 + (osl - 1.0) * 100.0) / 1000.0);
    assert!((slow - rate * per_prompt_s).abs() < 1e-9, "{slow}");
    // A client a prompt every 125 ms is 512 prompts of 3.7 k tokens a second on one H100.
    (r.ttft_ms, r.tpot_ms) = (10.0, 1.0);
    let fast = measured_prompt_load(&r, &p).unwrap();
    assert!(slow < PROMPT_LOAD_LIMIT && fast > PROMPT_LOAD_LIMIT, "{slow} {fast}");
    // The summary keeps such rows apart.
    let rows = vec![r.clone(), r];
    let outs = vec![
        Outcome { predicted: Some((10.0, 1.0)), prompt_load: Some(fast), ..Outcome::default() },
        Outcome { predicted: Some((20.0, 1.0)), prompt_load: Some(slow), ..Outcome::default() },
    ];
    let s = summarize(&rows, &outs, &catalog);
    assert_eq!(s.beyond_kernels.get("dense aggregated").map(|g| g.rows), Some(1));
    assert!((s.within_kernels["dense aggregated"].ttft_mape() - 100.0).abs() < 1e-9);
}

#[test]
fn scatter_is_the_error_left_after_each_family_best_scale() {
    let l = Layout { tp: 1, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
    let mut rows = vec![row(Mode::Agg { layout: l }); 5];
    for r in &mut rows[3..] {
        r.system = "h200_sxm".into();
    }
    // Family one: TTFT ratios 1.2, 1.2, 1.5 (best scale 1.2); family two: 0.5 and 0.7 (best
    // scale 0.7: residual 2/7, where the median 0.6 would leave 1/3).
    let out = |ttft: f64| Outcome {
        predicted: Some((ttft * rows[0].ttft_ms, rows[0].tpot_ms)),
        ..Outcome::default()
    };
    let outs = vec![out(1.2), out(1.2), out(1.5), out(0.5), out(0.7)];
    let s = summarize(&rows, &outs, &Catalog::builtin().unwrap());
    let first = s.by_config.values().find(|g| g.rows == 3).unwrap();
    assert!((first.ttft_mape() - 30.0).abs() < 1e-9);
    assert!((first.ttft_scatter() - 100.0 * 0.25 / 3.0).abs() < 1e-9, "{}", first.ttft_scatter());
    // Pooled: each row against its own family's scale, not one for all rows.
    let pooled = 100.0 * (0.25 + 2.0 / 7.0) / 5.0;
    assert!((s.overall.ttft_scatter() - pooled).abs() < 1e-9, "{}", s.overall.ttft_scatter());
    assert!((s.by_class["dense aggregated"].ttft_scatter() - pooled).abs() < 1e-9);
    assert!(s.overall.tpot_scatter().abs() < 1e-12, "exact TPOT everywhere");
    assert!(table(&s).contains("TTFT scatter"));
}

/// `--nextn`/`--nextn-accepted` replay a row with MTP drafts: the scenario names them, and it
/// is a valid prediction.yaml that speculates; without the knob nothing speculates.
#[test]
fn the_speculation_what_if_replays_rows_with_drafts() {
    let l = Layout { tp: 8, pp: 1, dp: 1, moe_tp: 1, moe_ep: 8, batch: 8 };
    let mut r = row(Mode::Agg { layout: l });
    r.model = "deepseek-ai/DeepSeek-R1".into();
    r.system = "b200_sxm".into();
    r.backend = "trtllm".into();
    let knobs = Knobs { speculation: Some((3, 2.2)), ..Knobs::default() };
    let y = scenario_yaml(&r, &knobs, false, None);
    assert!(y.contains("  nextn: 3\n  nextn_accepted: 2.2\n"), "{y}");
    let root = crate::scenario::parse_with_overrides(&y, "row.yaml", &[]).unwrap();
    let mut cx = crate::diag::Cx::default();
    let config = crate::decode::decode(&root, &mut cx).expect("a valid prediction.yaml");
    let want = crate::config::SpeculationConfig::DraftLayers { nextn: 3, accepted: 2.2 };
    assert_eq!(config.engine.speculation, want);
    assert!(!scenario_yaml(&r, &Knobs::default(), false, None).contains("nextn"));
}

/// vLLM's default `gpu_memory_utilization` rose from 0.9 to 0.92 in 0.20, and SGLang derives
/// its own from 0.5.3 on: a config that names its release gets that release's default, and
/// validate writes the row's release's fraction.
#[test]
fn the_default_memory_fraction_follows_the_engine_release() {
    use crate::config::{Capacity, Workers};
    use crate::decode::role::default_memory_fraction;
    let l = Layout { tp: 1, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
    let fraction_of = |backend: &str, version: Option<&str>| {
        default_memory_fraction(Backend::from_name(backend).unwrap(), version)
    };
    assert_eq!(fraction_of("vllm", Some("0.19.1")), Some(0.9));
    assert_eq!(fraction_of("vllm", Some("0.20.0")), Some(0.92));
    assert_eq!(fraction_of("vllm", None), Some(0.92));
    assert_eq!(fraction_of("trtllm", Some("1.0.0rc3")), Some(0.9));
    // SGLang derives its own from 0.5.3 on (then the memory plan does, from the GPU).
    assert_eq!(fraction_of("sglang", Some("0.5.2")), Some(0.88));
    assert_eq!(fraction_of("sglang", Some("0.4.9.post1")), Some(0.88));
    assert_eq!(fraction_of("sglang", Some("0.5.6.post2")), None);
    assert_eq!(fraction_of("sglang", None), None);
    // A config without a fraction leaves it to the release's default when it is prepared.
    let r = row(Mode::Agg { layout: l });
    let y = scenario_yaml(&r, &Knobs::default(), false, None);
    let root = crate::scenario::parse_with_overrides(&y, "row.yaml", &[]).unwrap();
    let mut cx = crate::diag::Cx::default();
    let config = crate::decode::decode(&root, &mut cx).expect("a valid prediction.yaml");
    let Workers::Aggregated(role) = config.engine.workers else { panic!("aggregated") };
    assert_eq!(
        role.kv_cache.capacity,
        Capacity::Default { memory_fraction: None, cuda_graph_reserved_bytes: 0 }
    );
    // Without tables of the release the scenario names no version, but the row's fraction.
    let mut r = row(Mode::Agg { layout: l });
    r.backend_version = "0.11.0".into();
    let y = scenario_yaml(&r, &Knobs::default(), false, None);
    assert!(y.contains("capacity: {type: default, memory_fraction: 0.9}"), "{y}");
    r.backend_version = "0.20.2".into();
    let y = scenario_yaml(&r, &Knobs::default(), false, None);
    assert!(y.contains("capacity: {type: default, memory_fraction: 0.92}"), "{y}");
}

#[test]
fn inferencex_layouts_written_as_the_product_of_tp_and_ep_replay_on_their_gpus() {
    let l = |tp, dp, moe_tp, moe_ep, batch| Layout { tp, pp: 1, dp, moe_tp, moe_ep, batch };
    // `tp 8, ep 8` (TensorRT-LLM, SGLang) written as tp 64 or attention DP 64: 8 GPUs, EP8.
    assert_eq!(expert_parallel_layout(l(64, 1, 8, 8, 8)), l(8, 1, 1, 8, 8));
    assert_eq!(expert_parallel_layout(l(1, 64, 8, 8, 1)), l(1, 8, 1, 8, 8));
    assert_eq!(expert_parallel_layout(l(16, 1, 4, 4, 64)), l(4, 1, 1, 4, 64));
    // vLLM's `-tp 4 --enable-expert-parallel`, written as tp 4, attention DP 4, EP 16.
    assert_eq!(expert_parallel_layout(l(4, 4, 1, 16, 8)), l(4, 1, 1, 4, 32));
    // Layouts that are not such a product stay as written.
    for same in [
        l(8, 1, 8, 1, 8),
        l(8, 1, 1, 8, 8),
        l(8, 1, 2, 4, 8),
        l(2, 8, 4, 4, 8),
        l(1, 8, 1, 8, 8),
        l(2, 2, 2, 2, 8),
    ] {
        assert_eq!(expert_parallel_layout(same), same);
    }
    // Only InferenceX exports write layouts so; other sources replay as recorded.
    let catalog = Catalog::builtin().unwrap();
    let mut r = row(Mode::Agg { layout: l(64, 1, 8, 8, 8) });
    r.model = "deepseek-ai/DeepSeek-R1".into();
    r.source = "source_file=2026-04-06.csv; model=DeepSeek-R1".into();
    assert_eq!(interpret(&r, &catalog, &Knobs::default()).mode, Mode::Agg { layout: l(8, 1, 1, 8, 8) });
    r.source = "source_file=/data/aic-auto-gap-analysis/x.csv".into();
    assert_eq!(interpret(&r, &catalog, &Knobs::default()), r);
}

/// Disaggregated rows are split by where their worker counts came from (the row, InferenceX's
/// published deployment, or the estimate), so the table can say how much of their error the
/// pool sizing owns; aggregated rows are in no group.
#[test]
fn disaggregated_rows_split_by_where_their_worker_counts_came_from() {
    let l = Layout { tp: 8, pp: 1, dp: 1, moe_tp: 1, moe_ep: 8, batch: 8 };
    let disagg = |p: Option<u32>, d: Option<u32>| {
        row(Mode::Disagg { prefill: l, prefill_workers: p, decode: l, decode_workers: d })
    };
    let rows = vec![
        disagg(Some(1), Some(2)),
        disagg(None, None),
        disagg(Some(1), None),
        disagg(None, None),
        row(Mode::Agg { layout: l }),
    ];
    let out = |ttft: f64, published: bool| Outcome {
        predicted: Some((ttft * rows[0].ttft_ms, rows[0].tpot_ms)),
        published,
        ..Outcome::default()
    };
    let outs = vec![out(1.1, false), out(2.0, false), out(3.0, false), out(1.5, true), out(1.0, false)];
    let s = summarize(&rows, &outs, &Catalog::builtin().unwrap());
    let g = &s.disagg_by_workers;
    assert_eq!((g["recorded"].rows, g["sized"].rows, g["published"].rows), (1, 2, 1));
    assert!((g["recorded"].ttft_mape() - 10.0).abs() < 1e-9, "{}", g["recorded"].ttft_mape());
    assert!((g["sized"].ttft_mape() - 150.0).abs() < 1e-9, "{}", g["sized"].ttft_mape());
    assert!((g["published"].ttft_mape() - 50.0).abs() < 1e-9);
    assert_eq!(workers_source(&rows[4], &outs[4]), None);
}

/// An InferenceX disaggregated row that records no worker counts replays the deployment its
/// benchmark configuration published for its clients: DeepSeek-R1 fp4 on B200 at 1k/1k and
/// 2,192 clients ran one DEP4 prefill worker (16 prompts a rank a step) and two DEP8 decode
/// workers of batch 128 (`ctx1_gen2_dep8_batch128`); at 10 clients five TEP8 decode workers
/// on TRTLLM-gen experts. `--no-recipes` sizes the pools instead.
#[test]
fn inferencex_disaggregated_rows_replay_their_published_deployment() {
    let catalog = Catalog::builtin().unwrap();
    let files = crate::NoFiles;
    let l = Layout { tp: 4, pp: 1, dp: 1, moe_tp: 1, moe_ep: 4, batch: 1 };
    let mut r = row(Mode::Disagg { prefill: l, prefill_workers: None, decode: l, decode_workers: None });
    (r.backend, r.model, r.system, r.precision) =
        ("trtllm".into(), "deepseek-ai/DeepSeek-R1".into(), "b200_sxm".into(), "fp4".into());
    (r.gemm_quant, r.moe_quant) = ("nvfp4".into(), "nvfp4".into());
    r.source = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=2192".into();
    (r.isl, r.osl, r.concurrency) = (1024, 1024, 2192);
    let knobs = Knobs::default();
    assert!(replays_published(&r, &knobs));
    let (replayed, sized) = replayed_row(&r, &catalog, &files, &knobs).unwrap();
    assert_eq!(sized, None);
    let Mode::Disagg { prefill, prefill_workers, decode, decode_workers } = replayed.mode else { panic!() };
    // The counts stay blank in the row; the scenario takes them from the deployment.
    assert_eq!((prefill_workers, decode_workers), (None, None));
    assert_eq!(published_workers(&r, &knobs), Some((1, 2)));
    assert_eq!((prefill.tp, prefill.dp, prefill.moe_ep, prefill.batch), (1, 4, 4, 16));
    assert_eq!((decode.tp, decode.dp, decode.moe_ep), (1, 8, 8));
    let y = scenario_yaml(&replayed, &knobs, false, None);
    assert!(y.contains("replicas: 1, tensor: 1, pipeline: 1, attention_data: 4"), "{y}");
    assert!(y.contains("replicas: 2, tensor: 1, pipeline: 1, attention_data: 8"), "{y}");
    assert!(y.contains("max_sequences: 16"), "{y}");
    assert!(y.contains("max_sequences: 128"), "{y}");
    // The DEP8 decode workers run the default experts with the overlap scheduler; the fp4
    // prefill workers TRTLLM-gen experts without it, as srt-slurm's recipes set them.
    let (pre, dec) = y.split_once("    decode:").unwrap();
    assert!(pre.contains("async_scheduling: false") && pre.contains("moe_kernel: min_latency"), "{y}");
    assert!(!dec.contains("async_scheduling") && !dec.contains("min_latency"), "{y}");
    // In fp8 (896 clients: one DEP8 prefill worker, seven DEP8 decode workers) the prefill
    // experts are DeepGEMM's, the default lane.
    let mut r8 = r.clone();
    (r8.precision, r8.gemm_quant, r8.moe_quant) = ("fp8".into(), "fp8".into(), "fp8".into());
    r8.source = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=896".into();
    r8.concurrency = 896;
    let l8 = Layout { tp: 8, pp: 1, dp: 1, moe_tp: 1, moe_ep: 8, batch: 1 };
    r8.mode = Mode::Disagg { prefill: l8, prefill_workers: None, decode: l8, decode_workers: None };
    assert_eq!(published_workers(&r8, &knobs), Some((1, 7)));
    let y8 = scenario_yaml(&replayed_row(&r8, &catalog, &files, &knobs).unwrap().0, &knobs, false, None);
    let (pre8, _) = y8.split_once("    decode:").unwrap();
    assert!(pre8.contains("async_scheduling: false") && !pre8.contains("min_latency"), "{y8}");
    // Ten clients: five TEP8 decode workers, which run TRTLLM-gen experts.
    r.source = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=10".into();
    r.concurrency = 10;
    let (replayed, _) = replayed_row(&r, &catalog, &files, &knobs).unwrap();
    let y = scenario_yaml(&replayed, &knobs, false, None);
    assert!(y.contains("replicas: 5, tensor: 8, pipeline: 1, attention_data: 1"), "{y}");
    assert!(y.contains("timing: {moe_kernel: min_latency}"), "{y}");
    let out = run_row(&r, &catalog, &files, &knobs);
    assert!(out.published && out.sized.is_none() && out.predicted.is_some(), "{out:?}");
    // Its curve is that deployment's, not the layout the file shares with the 2,192-client
    // row (one DEP4 prefill and two DEP8 decode workers).
    let curve = out.curve.clone().unwrap();
    assert!(curve.starts_with(&curve_key(&replayed)) && curve.contains("workers: 5"), "{curve}");
    let mut r2192 = r.clone();
    r2192.source = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=2192".into();
    r2192.concurrency = 2192;
    assert_eq!(curve_key(&r), curve_key(&r2192), "the file writes the two rows alike");
    let other = deployments::replayed(&r2192).unwrap();
    assert!(!curve.contains(&format!("{other:?}")), "{curve}");
    // Ten clients ran with and without MTP alike: no drafts.
    assert!(!y.contains("nextn"), "{y}");
    // 1,214 clients ran only `ctx1_gen2_dep8_batch64_eplb0_mtp2`: two drafts a round, each
    // accepted with the calibrated probability after the one before it; `--nextn` overrides.
    r.source = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=1214".into();
    r.concurrency = 1214;
    let (replayed, _) = replayed_row(&r, &catalog, &files, &knobs).unwrap();
    let y = scenario_yaml(&replayed, &knobs, false, None);
    let p = MTP_DRAFT_ACCEPTANCE;
    assert!(y.contains("  nextn: 2\n"), "{y}");
    assert!(y.contains(&format!("  nextn_accepted: {}\n", p + p * p)), "{y}");
    let what_if = Knobs { speculation: Some((3, 1.5)), ..Knobs::default() };
    let y = scenario_yaml(&replayed, &what_if, false, None);
    assert!(y.contains("  nextn: 3\n") && y.contains("  nextn_accepted: 1.5\n"), "{y}");
    let y = scenario_yaml(&replayed, &Knobs { mtp_acceptance: Some(0.5), ..Knobs::default() }, false, None);
    assert!(y.contains("  nextn_accepted: 0.75\n"), "{y}");
    // Without recipes the row is sized as before, and its layouts are the file's.
    let off = Knobs { no_recipes: true, ..Knobs::default() };
    assert!(!replays_published(&r, &off));
    let (replayed_off, _) = replayed_row(&r, &catalog, &files, &off).unwrap();
    assert!(!scenario_yaml(&replayed_off, &off, false, None).contains("nextn"));
    // A row that records its counts keeps them and its layouts, without the published recipe,
    // even where they are the published deployment's.
    let mut recorded = r.clone();
    recorded.mode = Mode::Disagg {
        prefill: Layout { tp: 1, pp: 1, dp: 4, moe_tp: 1, moe_ep: 4, batch: 16 },
        prefill_workers: Some(1),
        decode: Layout { tp: 1, pp: 1, dp: 8, moe_tp: 1, moe_ep: 8, batch: 64 },
        decode_workers: Some(2),
    };
    assert!(!replays_published(&recorded, &knobs));
    let (replayed, _) = replayed_row(&recorded, &catalog, &files, &knobs).unwrap();
    let y = scenario_yaml(&replayed, &knobs, false, None);
    assert!(!y.contains("nextn") && !y.contains("max_sequences: 64,"), "{y}");
    let (_, sized) = replayed_row(&r, &catalog, &files, &off).unwrap();
    assert!(sized.is_some());
}

/// H200 SGLang DeepSeek-R1 at 1k/1k and 128 clients ran a DEP8 deployment (one prefill, six
/// decode workers) and a TP8 one (one prefill, nine decode workers); a row written `ep 8`
/// replays the first, one written `ep 1` the second.
#[test]
fn inferencex_rows_at_ambiguous_clients_replay_the_deployment_their_layouts_record() {
    let catalog = Catalog::builtin().unwrap();
    let files = crate::NoFiles;
    let knobs = Knobs::default();
    let replay = |ep: u32| {
        let l = Layout { tp: 8, pp: 1, dp: 1, moe_tp: 8 / ep, moe_ep: ep, batch: 1 };
        let mut r = row(Mode::Disagg { prefill: l, prefill_workers: None, decode: l, decode_workers: None });
        (r.backend, r.model, r.system, r.precision) =
            ("sglang".into(), "deepseek-ai/DeepSeek-R1".into(), "h200_sxm".into(), "fp8".into());
        (r.gemm_quant, r.moe_quant) = ("fp8".into(), "fp8_block".into());
        r.source = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=128".into();
        (r.isl, r.osl, r.concurrency) = (1024, 1024, 128);
        assert!(replays_published(&r, &knobs));
        let (replayed, sized) = replayed_row(&r, &catalog, &files, &knobs).unwrap();
        assert_eq!(sized, None);
        (published_workers(&r, &knobs), scenario_yaml(&replayed, &knobs, false, None))
    };
    let (workers, y) = replay(8);
    assert_eq!(workers, Some((1, 6)));
    assert!(y.contains("replicas: 6, tensor: 1, pipeline: 1, attention_data: 8"), "{y}");
    let (workers, y) = replay(1);
    assert_eq!(workers, Some((1, 9)));
    assert!(y.contains("replicas: 9, tensor: 8, pipeline: 1, attention_data: 1"), "{y}");
}

/// InferenceX's GB200 DeepSeek-R1 rows of 2025-11-17 written as one aggregated worker of 20
/// GPUs replay InferenceMAX's disaggregated deployment of the time: a DEP4 prefill worker of
/// four prompts a step and a DEP16 decode worker of batch 64 with three MTP drafts.
/// `--no-recipes` replays the layout as written.
#[test]
fn inferencex_rows_written_as_one_worker_replay_inferencemaxs_deployment() {
    let catalog = Catalog::builtin().unwrap();
    let files = crate::NoFiles;
    let mut r = row(Mode::Agg { layout: Layout { tp: 20, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 512 } });
    (r.backend, r.model, r.system, r.precision) =
        ("trtllm".into(), "deepseek-ai/DeepSeek-R1".into(), "gb200".into(), "fp4".into());
    (r.gemm_quant, r.moe_quant) = ("nvfp4".into(), "nvfp4".into());
    r.source =
        "source_file=2026-04-06.csv; silicon_concurrency=512; measured=2025-11-17T00:00:00.000Z".into();
    (r.isl, r.osl, r.concurrency) = (1024, 1024, 512);
    let knobs = Knobs::default();
    let (replayed, sized) = replayed_row(&r, &catalog, &files, &knobs).unwrap();
    assert_eq!(sized, None);
    let Mode::Disagg { prefill, prefill_workers, decode, decode_workers } = replayed.mode else { panic!() };
    assert_eq!((prefill_workers, decode_workers), (Some(1), Some(1)));
    assert_eq!((prefill.tp, prefill.dp, prefill.moe_ep, prefill.batch), (1, 4, 4, 4));
    assert_eq!((decode.tp, decode.dp, decode.moe_ep, decode.batch), (1, 16, 16, 64));
    let y = scenario_yaml(&replayed, &knobs, false, None);
    assert!(y.contains("  nextn: 3\n"), "{y}");
    assert!(y.contains("max_sequences: 4"), "{y}");
    assert!(y.contains("max_sequences: 64"), "{y}");
    let out = run_row(&r, &catalog, &files, &knobs);
    assert!(out.predicted.is_some() && out.drafts == Some(3), "{out:?}");
    let off = Knobs { no_recipes: true, ..Knobs::default() };
    let (as_written, _) = replayed_row(&r, &catalog, &files, &off).unwrap();
    assert!(matches!(as_written.mode, Mode::Agg { .. }));
    assert!(!scenario_yaml(&as_written, &off, false, None).contains("nextn"));
}

/// A TensorRT-LLM disaggregated row of December 2025 written with both pools as their 32 GPUs
/// replays InferenceMAX's deployment at its clients (six DEP4 prefill workers of one 8k prompt
/// a step, a DEP8 decode worker of batch 256 with one MTP draft), its pools recorded.
#[test]
fn inferencex_disaggregated_rows_of_2025_replay_inferencemaxs_deployment() {
    let catalog = Catalog::builtin().unwrap();
    let files = crate::NoFiles;
    let l = Layout { tp: 32, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 1 };
    let mut r = row(Mode::Disagg { prefill: l, prefill_workers: None, decode: l, decode_workers: None });
    (r.backend, r.model, r.system, r.precision) =
        ("trtllm".into(), "deepseek-ai/DeepSeek-R1".into(), "gb200".into(), "fp4".into());
    (r.gemm_quant, r.moe_quant) = ("nvfp4".into(), "nvfp4".into());
    r.source =
        "source_file=2026-04-06.csv; silicon_concurrency=2150; measured=2025-12-15T00:00:00.000Z".into();
    (r.isl, r.osl, r.concurrency) = (8192, 1024, 2150);
    let knobs = Knobs::default();
    assert!(replays_published(&r, &knobs));
    assert_eq!(published_workers(&r, &knobs), Some((6, 1)));
    let (replayed, sized) = replayed_row(&r, &catalog, &files, &knobs).unwrap();
    assert_eq!(sized, None);
    let Mode::Disagg { prefill, prefill_workers, decode, decode_workers } = replayed.mode else { panic!() };
    assert_eq!((prefill_workers, decode_workers), (Some(6), Some(1)));
    assert_eq!((prefill.dp, prefill.batch, decode.dp, decode.batch), (4, 1, 8, 256));
    let y = scenario_yaml(&replayed, &knobs, false, None);
    assert!(y.contains("  nextn: 1\n"), "{y}");
    assert!(y.contains("replicas: 6, tensor: 1, pipeline: 1, attention_data: 4"), "{y}");
    assert!(y.contains("max_sequences: 256"), "{y}");
    let off = Knobs { no_recipes: true, ..Knobs::default() };
    assert!(!replays_published(&r, &off));
}

/// Expected accepted drafts of a round: p + p² + … + pⁿ, each draft accepted only after the
/// one before it.
#[test]
fn accepted_drafts_sum_the_chain() {
    assert!((accepted_drafts(3, 0.5) - 0.875).abs() < 1e-12);
    assert!((accepted_drafts(1, 0.75) - 0.75).abs() < 1e-12);
    assert!(accepted_drafts(4, 0.0).abs() < 1e-12);
    assert!((accepted_drafts(3, 1.0) - 3.0).abs() < 1e-12);
    assert!((accepted_drafts(2, 2.0) - 2.0).abs() < 1e-12, "clamped to a probability");
}

#[test]
fn every_option_reads_back_what_it_sets() {
    let value = |o: &KnobOption| match o.kind {
        OptionKind::Positive => "1.25",
        OptionKind::NonNegative | OptionKind::Fraction => "0.5",
        OptionKind::Count { min, .. } => {
            if min == 1 {
                "3"
            } else {
                "0"
            }
        }
        OptionKind::Choice(names) => names[names.len() - 1],
        OptionKind::Switch => "true",
    };
    let all: Vec<(&str, &str)> = OPTIONS.iter().map(|o| (o.flag, value(o))).collect();
    let knobs = Knobs::from_options(all.iter().copied()).unwrap();
    let back: Vec<(&str, String)> = all.iter().map(|(f, v)| (*f, (*v).to_string())).collect();
    assert_eq!(knobs.options(), back);
    assert_eq!(knobs.speculation, Some((3, 0.5)));
    assert_eq!(knobs.moe_kernel, Some(MoeKernel::MinLatency));
    assert_eq!(knobs.plan_ahead, Some(false));
    assert!(knobs.flags().contains(" --no-recipes --prompt-pool 3 --nextn 3 --nextn-accepted 0.5 "));
    // Each alone, and the policy itself, which no option spells.
    for (flag, v) in &all {
        let pair = match *flag {
            "nextn" => vec![(*flag, *v), ("nextn-accepted", "1")],
            "nextn-accepted" => vec![("nextn", "1"), (*flag, *v)],
            _ => vec![(*flag, *v)],
        };
        let one = Knobs::from_options(pair.iter().copied()).unwrap();
        assert_eq!(Knobs::from_options(one.options().iter().map(|(f, v)| (*f, v.as_str()))), Ok(one));
    }
    assert_eq!(Knobs::from_options([("frontend-ms", " ")]), Ok(Knobs::replay_policy()));
    assert!(Knobs::replay_policy().options().is_empty());
    // Fixed lengths are a floor of 1.
    assert_eq!(Knobs::default().options(), vec![("length-floor", "1".to_string())]);
}

#[test]
fn a_bad_option_is_refused_by_name() {
    let refused = |pairs: &[(&str, &str)]| Knobs::from_options(pairs.iter().copied()).unwrap_err();
    assert!(refused(&[("frontend-ms", "-1")]).starts_with("--frontend-ms: '-1' is not a finite number"));
    assert!(refused(&[("prefill-scale", "0")]).contains("greater than 0"));
    assert!(
        refused(&[("length-floor", "1.5")]).starts_with("--length-floor: '1.5' is not a number from 0 to 1")
    );
    assert!(refused(&[("requests-per-slot", "0")]).contains("from 1 to 10000"));
    assert!(refused(&[("allreduce", "ring")]).contains("custom, nccl"));
    assert!(refused(&[("no-recipes", "yes")]).contains("true or false"));
    assert!(refused(&[("warp-speed", "9")]).contains("--warp-speed: no such option"));
    assert!(refused(&[("nextn", "2")]).contains("go together"));
    assert!(refused(&[("nextn", "2"), ("nextn-accepted", "2.5")]).contains("more than the 2"));
    let nan = Knobs { frontend_ms: Some(f64::NAN), ..Knobs::replay_policy() };
    assert!(nan.check().unwrap_err().starts_with("--frontend-ms"));
}
