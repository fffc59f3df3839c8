//! `servesim estimate`: the static model against hand-computed steps and against replays, its
//! limits and errors, and the `--default` sweep on AIConfigurator's README case.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use servesim_scenario::catalog::Catalog;
use servesim_scenario::estimate::sweep::{default_sweep, SweepSpec};
use servesim_scenario::estimate::{estimate, estimate_at, Estimate, Operating};
use servesim_scenario::scenario::{parse_with_overrides, prepare, Prepared};
use servesim_tests::DataOnly;

fn prepared(yaml: &str) -> Prepared {
    let root = parse_with_overrides(yaml, "t.yaml", &[]).unwrap();
    prepare(&root, "t.yaml", &Catalog::builtin().unwrap(), None, &DataOnly).unwrap()
}

fn replay(p: &Prepared) -> serde_json::Value {
    p.run().unwrap().json
}

fn f(j: &serde_json::Value, k: &str) -> f64 {
    j[k].as_f64().unwrap()
}

/// The scenario with no serving-frontend delay.
fn no_frontend(yaml: &str) -> String {
    yaml.replace(
        "      parallelism: {tensor: 4}",
        "      parallelism: {tensor: 4}\n      timing: {frontend_ms: 0}",
    )
}

const AGG: &str = "
engine:
  model: Qwen/Qwen3-32B-FP8
  hardware: h200_sxm
  backend: trtllm
  workers:
    aggregated:
      parallelism: {tensor: 4}
traffic:
  source: {type: synthetic, input_tokens: {dist: uniform, min: 3600, max: 4400}, output_tokens: {dist: uniform, min: 450, max: 550}}
  load: {type: concurrency, concurrency: 16}
  stop: {requests: 160}
";

#[test]
fn a_lone_request_costs_its_prefill_step_and_its_decode_steps() {
    let yaml = AGG.replace("concurrency: 16", "concurrency: 1").replace("requests: 160", "requests: 3");
    let yaml = yaml
        .replace("{dist: uniform, min: 3600, max: 4400}", "2000")
        .replace("{dist: uniform, min: 450, max: 550}", "100");
    let p = prepared(&yaml);
    let e = estimate(&p).unwrap();
    let d = |k: &str| e.detail.iter().find(|(n, _)| *n == k).unwrap().1;
    // One request: one mixed step (its whole prompt, no decodes beside it), 99 decode steps.
    assert_eq!(d("mixed_steps_per_cycle"), 1.0);
    assert_eq!(d("decode_steps_per_cycle"), 99.0);
    let frontend = p.frontend_delay.as_secs_f64() * 1000.0;
    let mean_step = (d("mixed_step_ms") + 99.0 * d("decode_step_ms")) / 100.0;
    assert!((e.ttft_ms - (frontend + mean_step / 2.0 + d("mixed_step_ms"))).abs() < 1e-9);
    assert!((e.tpot_ms - d("decode_step_ms")).abs() < 1e-9);
    // Its typical steps by part add up to the steps the estimate used (up to the step
    // time's nanosecond), TP4's all-reduces among the parts.
    let step = |name: &str| e.steps.iter().find(|s| s.step == name).unwrap();
    let (decode, mixed) = (step("decode"), step("mixed"));
    assert!((decode.step_ms() - d("decode_step_ms")).abs() < 1e-5, "{decode:?}");
    assert!((mixed.step_ms() - d("mixed_step_ms")).abs() < 1e-5, "{mixed:?}");
    assert_eq!((decode.decode_requests, decode.prefill_tokens), (1, 0));
    assert_eq!((mixed.decode_requests, mixed.prefill_tokens), (0, 2000));
    for s in [decode, mixed] {
        for kind in ["gemm", "attention", "allreduce"] {
            assert!(s.parts_ms.iter().any(|(k, ms)| *k == kind && *ms > 0.0), "{kind}: {s:?}");
        }
    }
    assert!(e.summary().contains(&format!(
        "decode step (1 decodes, 0 prompt tokens per rank) {:.2} ms: ",
        decode.step_ms()
    )));
    // A replay of the same lone requests: TTFT is the prefill step plus the frontend delay,
    // TPOT the decode step (the estimate adds half a step of arrival phase). Each request
    // draws its own frontend delay around the mean, so three of them replay without one.
    let j = replay(&prepared(&no_frontend(&yaml)));
    let want = e.ttft_ms - mean_step / 2.0 - frontend;
    assert!(
        (f(&j, "mean_tpot_ms") / e.tpot_ms - 1.0).abs() < 0.02,
        "{} vs {}",
        f(&j, "mean_tpot_ms"),
        e.tpot_ms
    );
    assert!((f(&j, "mean_ttft_ms") / want - 1.0).abs() < 0.02, "{} vs {want}", f(&j, "mean_ttft_ms"));
}

#[test]
fn the_estimate_tracks_the_replay_of_a_closed_loop() {
    let p = prepared(AGG);
    let e = estimate(&p).unwrap();
    let j = replay(&p);
    let err = |k: &str, v: f64| (v / f(&j, k) - 1.0).abs();
    assert!(err("mean_tpot_ms", e.tpot_ms) < 0.05, "TPOT {} vs replay {}", e.tpot_ms, f(&j, "mean_tpot_ms"));
    assert!(
        err("mean_e2e_latency_ms", e.e2e_ms) < 0.05,
        "E2E {} vs {}",
        e.e2e_ms,
        f(&j, "mean_e2e_latency_ms")
    );
    assert!(err("output_throughput_tok_s", e.output_tok_s) < 0.08);
    assert!(err("mean_ttft_ms", e.ttft_ms) < 0.25, "TTFT {} vs replay {}", e.ttft_ms, f(&j, "mean_ttft_ms"));
}

fn at(p: &Prepared, op: Operating) -> Estimate {
    let w = servesim_scenario::estimate::workload(p).unwrap();
    estimate_at(p, w, op).unwrap()
}

#[test]
fn more_load_never_lowers_latency_and_rates_beyond_capacity_overload() {
    let p = prepared(AGG);
    let mut last: Option<Estimate> = None;
    for n in [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0] {
        let e = at(&p, Operating::Concurrency(n));
        let peak = e.detail.iter().find(|(k, _)| *k == "peak_batch_per_rank").unwrap().1;
        if let Some(l) = &last {
            // Within the tables' interpolation noise (a step with a few more tokens can land
            // on a measured point a fraction of a percent faster).
            assert!(e.ttft_ms >= l.ttft_ms * 0.99 && e.tpot_ms >= l.tpot_ms * 0.99, "at {n}");
            // The rate grows up to the peak batch (past it, every step carries a prompt and
            // more decodes slow those steps).
            if n <= peak {
                assert!(e.request_rate_rps >= l.request_rate_rps * (1.0 - 1e-9), "at {n}");
            }
        }
        assert!(e.request_rate_rps <= e.capacity_rps * (1.0 + 1e-9), "at {n}");
        last = Some(e);
    }
    let cap = last.unwrap().capacity_rps;
    let half = at(&p, Operating::Rate(cap / 2.0));
    assert!(!half.overloaded);
    assert!((half.request_rate_rps - cap / 2.0).abs() < 1e-9);
    // Little's law holds at the solved batch.
    assert!((half.concurrency - half.request_rate_rps * half.e2e_ms / 1000.0).abs() < 1e-6);
    let over = at(&p, Operating::Rate(cap * 1.5));
    assert!(over.overloaded && over.bottleneck != "none");
    assert!(over.summary().contains("OVERLOADED"));
}

#[test]
fn a_poisson_load_estimate_tracks_its_replay() {
    let yaml = AGG
        .replace("{type: concurrency, concurrency: 16}", "{type: poisson, requests_per_second: 2.0, seed: 3}")
        .replace("requests: 160", "requests: 400");
    let p = prepared(&yaml);
    let e = estimate(&p).unwrap();
    let j = replay(&p);
    assert!(
        (e.tpot_ms / f(&j, "mean_tpot_ms") - 1.0).abs() < 0.10,
        "TPOT {} vs {}",
        e.tpot_ms,
        f(&j, "mean_tpot_ms")
    );
    assert!((e.output_tok_s / f(&j, "output_throughput_tok_s") - 1.0).abs() < 0.10);
}

#[test]
fn disaggregated_estimates_track_their_replay() {
    let yaml = "
engine:
  model: Qwen/Qwen3-32B-FP8
  hardware: h200_sxm
  backend: trtllm
  mode: disaggregated
  workers:
    prefill: {parallelism: {replicas: 3, tensor: 4}}
    decode: {parallelism: {replicas: 1, tensor: 4}}
traffic:
  source: {type: synthetic, input_tokens: {dist: uniform, min: 3600, max: 4400}, output_tokens: {dist: uniform, min: 450, max: 550}, shared_prefix_tokens: 500}
  load: {type: concurrency, concurrency: 48}
  stop: {requests: 480}
";
    let p = prepared(yaml);
    let e = estimate(&p).unwrap();
    assert_eq!(e.mode, "disaggregated");
    assert_eq!(e.gpus, 16);
    let steps: Vec<(&str, bool, bool)> =
        e.steps.iter().map(|s| (s.step, s.decode_requests > 0, s.prefill_tokens > 0)).collect();
    assert_eq!(steps, [("prefill", false, true), ("decode", true, false)]);
    let j = replay(&p);
    let err = |k: &str, v: f64| (v / f(&j, k) - 1.0).abs();
    assert!(err("mean_tpot_ms", e.tpot_ms) < 0.05, "TPOT {} vs {}", e.tpot_ms, f(&j, "mean_tpot_ms"));
    assert!(err("output_throughput_tok_s", e.output_tok_s) < 0.08);
    assert!(err("mean_ttft_ms", e.ttft_ms) < 0.25, "TTFT {} vs {}", e.ttft_ms, f(&j, "mean_ttft_ms"));
}

/// A prefill role runs one prompt a step unless told otherwise (its `max_sequences` defaults
/// to 1), however many the token budget would hold: with short prompts and one prefill worker
/// the estimate is bound by prefill at the replay's rate, not at eight prompts a step.
#[test]
fn a_prefill_role_runs_as_many_prompts_a_step_as_its_max_sequences() {
    let yaml = "
engine:
  model: Qwen/Qwen3-32B-FP8
  hardware: h200_sxm
  backend: trtllm
  mode: disaggregated
  workers:
    prefill: {parallelism: {replicas: 1, tensor: 2}}
    decode: {parallelism: {replicas: 2, tensor: 2}}
traffic:
  source: {type: synthetic, input_tokens: {dist: uniform, min: 800, max: 1000}, output_tokens: {dist: uniform, min: 160, max: 200}}
  load: {type: concurrency, concurrency: 128}
  stop: {requests: 1280}
";
    let p = prepared(yaml);
    let e = estimate(&p).unwrap();
    let d = |k: &str| e.detail.iter().find(|(n, _)| *n == k).map(|(_, v)| *v).unwrap();
    // The prefill worker is the pool that binds.
    assert!(d("prefill_capacity_rps") < 1.05 * e.request_rate_rps, "{}", e.summary());
    let j = replay(&p);
    let err = |k: &str, v: f64| (v / f(&j, k) - 1.0).abs();
    assert!(
        err("output_throughput_tok_s", e.output_tok_s) < 0.08,
        "{} tok/s vs replay {}",
        e.output_tok_s,
        f(&j, "output_throughput_tok_s")
    );
    assert!(err("mean_ttft_ms", e.ttft_ms) < 0.25, "TTFT {} vs {}", e.ttft_ms, f(&j, "mean_ttft_ms"));
}

/// SGLang's receive interval: a prompt waits for the next intake, half the interval in
/// decode steps when prefill steps are rare; the estimate's TTFT tracks the replay's with and
/// without it, and the interval's added wait is what the replay adds.
#[test]
fn the_estimate_waits_for_sglangs_next_intake() {
    let yaml = |interval: u32| {
        format!(
            "
engine:
  model: meta-llama/Llama-3.1-8B-Instruct
  hardware: h200_sxm
  backend: sglang
  workers:
    aggregated: {{scheduler: {{scheduler_recv_interval: {interval}}}}}
traffic:
  source: {{type: synthetic, input_tokens: {{dist: uniform, min: 820, max: 1024}}, output_tokens: {{dist: uniform, min: 820, max: 1024}}}}
  load: {{type: concurrency, concurrency: 16}}
  stop: {{requests: 160}}
"
        )
    };
    let mut added = Vec::new();
    for interval in [1, 30] {
        let p = prepared(&yaml(interval));
        let e = estimate(&p).unwrap();
        let j = replay(&p);
        let steady = |j: &serde_json::Value| f(j, "mean_ttft_ms");
        added.push((e.steady_ttft_ms, e.ttft_ms, steady(&j)));
        let err = (e.ttft_ms / steady(&j) - 1.0).abs();
        assert!(err < 0.25, "interval {interval}: TTFT {} vs replay {}", e.ttft_ms, steady(&j));
    }
    let (est, rep) = (added[1].1 - added[0].1, added[1].2 - added[0].2);
    assert!(est > 0.0 && (est / rep - 1.0).abs() < 0.3, "added {est} ms, replay {rep} ms");
}

/// The estimate splits SGLang prompts by SGLang's chunk, as the replay does, not by
/// `max_batched_tokens`: on B200 (16,384) a 12k-token prompt is one step, and a smaller
/// `max_batched_tokens` changes nothing.
#[test]
fn the_estimate_chunks_sglang_prompts_by_its_chunked_prefill_size() {
    let yaml = |scheduler: &str| {
        format!(
            "
engine:
  model: meta-llama/Llama-3.1-8B-Instruct
  hardware: b200_sxm
  backend: sglang
  workers:
    aggregated: {{scheduler: {{{scheduler}}}}}
traffic:
  source: {{type: synthetic, input_tokens: 12000, output_tokens: 200}}
  load: {{type: concurrency, concurrency: 1}}
  stop: {{requests: 10}}
"
        )
    };
    let ttft = |s: &str| estimate(&prepared(&yaml(s))).unwrap().ttft_ms;
    let default = ttft("");
    assert!((default - ttft("max_batched_tokens: 2048")).abs() < 1e-9);
    assert!((default - ttft("chunked_prefill_size: 16384")).abs() < 1e-9);
    // Two chunks of 8,192 and 3,808 are timed as two steps.
    let two = ttft("chunked_prefill_size: 8192");
    assert!((two - default).abs() > 1e-3, "{two} ms in two chunks, {default} ms in one");
    let replay_ttft = f(&replay(&prepared(&yaml(""))), "mean_ttft_ms");
    assert!((default / replay_ttft - 1.0).abs() < 0.1, "estimate {default} ms, replay {replay_ttft} ms");
}

/// TensorRT-LLM runs up to 2,048 requests by default, so this deployment is held by KV (842
/// a rank). But 4,000-token prompts fill every step long before that, and each added decode
/// slows those steps: the rate peaks at a smaller batch (near 500, on a plateau from about
/// 256), which is the capacity an open loop is measured against.
#[test]
fn capacity_is_the_peak_rate_below_the_batch_limit() {
    let p = prepared(AGG);
    let e = at(&p, Operating::Concurrency(512.0));
    let d = |k: &str| e.detail.iter().find(|(n, _)| *n == k).unwrap().1;
    let (peak, limit) = (d("peak_batch_per_rank"), d("max_batch_per_rank"));
    assert!(peak < 0.7 * limit, "peak {peak}, limit {limit}");
    let full = at(&p, Operating::Concurrency(limit));
    assert!(full.request_rate_rps < 0.95 * e.capacity_rps, "a full batch serves well below the peak");
    let served = at(&p, Operating::Rate(e.capacity_rps * 0.999));
    assert!(!served.overloaded);
    let over = at(&p, Operating::Rate(e.capacity_rps * 1.01));
    assert!(over.overloaded && over.bottleneck == "prefill", "{}", over.bottleneck);
}

#[test]
fn traffic_the_estimate_cannot_describe_is_a_clear_error() {
    let yaml = AGG.replace(
        "source: {type: synthetic, input_tokens: {dist: uniform, min: 3600, max: 4400}, output_tokens: {dist: uniform, min: 450, max: 550}}",
        "source: {type: synthetic-session, new_input_tokens_per_turn: 400, output_tokens_per_turn: 100, session: {turns: 3}}",
    ).replace("requests: 160", "sessions: 16");
    let root = parse_with_overrides(&yaml, "t.yaml", &[]).unwrap();
    match prepare(&root, "t.yaml", &Catalog::builtin().unwrap(), None, &DataOnly) {
        Ok(p) => assert!(estimate(&p).unwrap_err().to_string().contains("multi-turn")),
        // The sessions schema moved: the test must exercise the estimate, not the decoder.
        Err(e) => panic!("fixture does not decode: {e}"),
    }
    let p = prepared(AGG);
    let w = servesim_scenario::estimate::workload(&p).unwrap();
    assert!(estimate_at(&p, w, Operating::Rate(0.0)).is_err());
    // Requests longer than the model's context: the replay rejects them, the estimate says so.
    let mut long = w;
    long.osl = 200_000.0;
    let err = estimate_at(&p, long, Operating::Concurrency(4.0)).unwrap_err().to_string();
    assert!(err.contains("(4000 + 200000 tokens) is longer than the model's context of"), "{err}");
}

fn readme_case() -> SweepSpec {
    SweepSpec {
        model: "Qwen/Qwen3-32B-FP8".into(),
        system: "h200_sxm".into(),
        backend: "trtllm".into(),
        total_gpus: 32,
        isl: 4000,
        osl: 500,
        prefix: 500,
        ttft_ms: 300.0,
        tpot_ms: 10.0,
        nextn: 0,
        nextn_accepted: 0.0,
        allreduce: None,
        moe_kernel: None,
    }
}

#[test]
fn the_default_sweep_answers_the_aiconfigurator_readme_case() {
    let catalog = Catalog::builtin().unwrap();
    let spec = readme_case();
    let s = default_sweep(&spec, &catalog, &DataOnly).unwrap();
    // Every point kept meets the limits, best tok/s/GPU first.
    for list in [&s.agg, &s.disagg] {
        assert!(!list.is_empty());
        assert!(list.iter().all(|p| p.meets(&spec)));
        assert!(list.windows(2).all(|w| w[0].estimate.per_gpu() >= w[1].estimate.per_gpu()));
        assert!(list.iter().all(|p| p.estimate.gpus <= 32));
    }
    // The aggregated winner is AIConfigurator's: 8 replicas of TP4 at 16 requests each.
    assert_eq!(s.agg[0].label, "8 x tp4, 16 per rank");
    // Every winner is a config that replays, and the replay meets the TPOT limit it was
    // chosen for (TTFT queueing is what the replay adds).
    for p in [&s.agg[0], &s.disagg[0]] {
        let j = servesim_scenario::scenario::predict_with_catalog(&p.yaml, &p.label, &catalog, &DataOnly)
            .unwrap()
            .json;
        assert!(f(&j, "mean_tpot_ms") <= spec.tpot_ms * 1.05, "{}: {}", p.label, f(&j, "mean_tpot_ms"));
        let tps = f(&j, "output_throughput_tok_s");
        assert!(
            (p.estimate.output_tok_s / tps - 1.0).abs() < 0.12,
            "{}: {} vs {tps}",
            p.label,
            p.estimate.output_tok_s
        );
    }
    // Tighter limits never raise the best throughput.
    let tight =
        default_sweep(&SweepSpec { ttft_ms: 200.0, tpot_ms: 8.0, ..readme_case() }, &catalog, &DataOnly)
            .unwrap();
    let best = |l: &[servesim_scenario::estimate::sweep::SweepPoint]| {
        l.first().map_or(0.0, |p| p.estimate.per_gpu())
    };
    assert!(best(&tight.agg) <= best(&s.agg) && best(&tight.disagg) <= best(&s.disagg));
}

/// `--moe-kernel min-latency` reaches every candidate: nvfp4 DeepSeek-R1 on B200 with
/// TensorRT-LLM's TRTLLM-gen experts serves several times the tokens per GPU under the same
/// limits (253.5 → 1,203.1 tok/s/GPU aggregated in docs/estimate.md), and every candidate's
/// config names the kernels.
#[test]
fn the_default_sweep_writes_the_moe_kernels_into_every_candidate() {
    let catalog = Catalog::builtin().unwrap();
    let spec = SweepSpec {
        model: "nvidia/DeepSeek-R1-NVFP4".into(),
        system: "b200_sxm".into(),
        total_gpus: 8,
        isl: 1024,
        osl: 1024,
        prefix: 0,
        ttft_ms: 1000.0,
        tpot_ms: 20.0,
        ..readme_case()
    };
    let best = |s: &SweepSpec| {
        let sweep = default_sweep(s, &catalog, &DataOnly).unwrap();
        assert!(sweep.agg.iter().chain(&sweep.disagg).all(|p| {
            p.yaml.contains("moe_kernel: min_latency") == (s.moe_kernel.as_deref() == Some("min_latency"))
        }));
        sweep.agg[0].estimate.per_gpu()
    };
    let (cutlass, trtllm_gen) =
        (best(&spec), best(&SweepSpec { moe_kernel: Some("min_latency".into()), ..spec.clone() }));
    assert!(trtllm_gen > 3.0 * cutlass, "{trtllm_gen} vs {cutlass} tok/s/GPU");
}

#[test]
fn bad_sweep_queries_are_clear_errors() {
    let catalog = Catalog::builtin().unwrap();
    let e = |s: SweepSpec| default_sweep(&s, &catalog, &DataOnly).unwrap_err().to_string();
    assert!(e(SweepSpec { model: "Qwen/Qwen3-33B".into(), ..readme_case() }).contains("unknown model"));
    assert!(e(SweepSpec { system: "h900".into(), ..readme_case() }).contains("unknown system"));
    assert!(e(SweepSpec { backend: "tgi".into(), ..readme_case() }).contains("unknown backend"));
    assert!(e(SweepSpec { total_gpus: 0, ..readme_case() }).contains("total-gpus"));
    assert!(e(SweepSpec { prefix: 4000, ..readme_case() }).contains("--prefix"));
    assert!(e(SweepSpec { ttft_ms: -1.0, ..readme_case() }).contains("positive"));
    let bad_kernel = e(SweepSpec { moe_kernel: Some("trtllm".into()), ..readme_case() });
    assert!(bad_kernel.contains("--moe-kernel trtllm must be one of default, min_latency"), "{bad_kernel}");
}

#[test]
fn identical_requests_in_a_closed_loop_queue_at_most_in_lock_step() {
    // Fixed lengths: the clients start together and would finish together, every wave
    // queueing for prefill like the first; that is the estimate's mean TTFT. The frontend's
    // delay varies from request to request and loosens the step, so the replay lands
    // between the steady state and that bound.
    let yaml = AGG
        .replace("{dist: uniform, min: 3600, max: 4400}", "4000")
        .replace("{dist: uniform, min: 450, max: 550}", "500");
    let p = prepared(&yaml);
    let e = estimate(&p).unwrap();
    assert!(e.workload.fixed_lengths);
    assert!(e.ttft_ms > 3.0 * e.steady_ttft_ms, "{} vs steady {}", e.ttft_ms, e.steady_ttft_ms);
    let ttft = f(&replay(&p), "mean_ttft_ms");
    assert!(
        e.steady_ttft_ms * 1.5 < ttft && ttft < e.ttft_ms,
        "replay {ttft} vs {} .. {}",
        e.steady_ttft_ms,
        e.ttft_ms
    );
}

/// The serving processes: below saturation a request's own work and its step's burst of tokens
/// add to TTFT; when the processes serve fewer requests than the engine could, they set the
/// rate and the other clients wait in front of them. Both track the replay.
#[test]
fn the_estimate_follows_the_serving_processes_into_saturation() {
    let with = |costs: &str| {
        prepared(&AGG.replace(
            "parallelism: {tensor: 4}",
            &format!("parallelism: {{tensor: 4}}\n      frontend: {{{costs}}}"),
        ))
    };
    let base = estimate(&prepared(AGG)).unwrap();
    let d = |e: &Estimate, k: &str| e.detail.iter().find(|(n, _)| *n == k).unwrap().1;
    // Light work: 2 ms a request and 50 µs a token, 16 tokens a step in one process.
    let p = with("request_ms: 2, chunk_us: 50");
    let light = estimate(&p).unwrap();
    assert_eq!(light.bottleneck, base.bottleneck);
    let added = d(&light, "serving_first_token_ms");
    assert!((added - (2.0 + 16.0 * 0.05)).abs() < 1e-6, "{added}");
    assert!((light.steady_ttft_ms - base.steady_ttft_ms - added).abs() < 0.05 * added, "{light:?}");
    assert!((light.tpot_ms - base.tpot_ms).abs() < 1e-9);
    let j = replay(&p);
    let err = |j: &serde_json::Value, k: &str, v: f64| (v / f(j, k) - 1.0).abs();
    assert!(
        err(&j, "mean_ttft_ms", light.ttft_ms) < 0.25,
        "TTFT {} vs {}",
        light.ttft_ms,
        f(&j, "mean_ttft_ms")
    );
    // Heavy work: 600 ms a request caps one process near 1.6 requests/s, below what the
    // engine serves at 16 clients.
    let p = with("request_ms: 600, chunk_us: 50");
    let heavy = estimate(&p).unwrap();
    assert_eq!(heavy.bottleneck, "frontend");
    let cap = 1000.0 / (600.0 + 500.0 * 0.05);
    assert!((heavy.capacity_rps - cap).abs() < 1e-6 * cap, "{heavy:?}");
    assert!(
        (heavy.request_rate_rps - cap).abs() < 1e-6 * cap && heavy.request_rate_rps < base.request_rate_rps
    );
    assert!(d(&heavy, "queue_wait_ms") > 0.0);
    let j = replay(&p);
    let rate = f(&j, "request_throughput_rps");
    assert!(
        (heavy.request_rate_rps / rate - 1.0).abs() < 0.1,
        "rate {} vs replay {rate}",
        heavy.request_rate_rps
    );
    assert!(
        err(&j, "mean_ttft_ms", heavy.ttft_ms) < 0.25,
        "TTFT {} vs {}",
        heavy.ttft_ms,
        f(&j, "mean_ttft_ms")
    );
    assert!(
        err(&j, "mean_tpot_ms", heavy.tpot_ms) < 0.1,
        "TPOT {} vs {}",
        heavy.tpot_ms,
        f(&j, "mean_tpot_ms")
    );
    // An open loop past the processes' capacity is overloaded by them.
    let over = at(&p, Operating::Rate(cap * 1.2));
    assert!(over.overloaded && over.bottleneck == "frontend");
}

/// Speculative decoding: the estimate's decode steps verify the drafts and emit the expected
/// tokens a round, so its TPOT and throughput track the replay's with MTP on an aggregated
/// worker and on a disaggregated decode pool, and n-gram lookup on vLLM.
#[test]
fn speculative_estimates_track_their_replay() {
    let agg = "
engine:
  model: deepseek-ai/DeepSeek-R1
  hardware: b200_sxm
  backend: trtllm
  nextn: 3
  nextn_accepted: 2.2
  workers:
    aggregated: {parallelism: {tensor: 8, moe_expert: 8}}
traffic:
  source: {type: synthetic, input_tokens: {dist: uniform, min: 820, max: 1024}, output_tokens: {dist: uniform, min: 820, max: 1024}}
  load: {type: concurrency, concurrency: 32}
  stop: {requests: 160}
";
    let disagg = "
engine:
  model: Qwen/Qwen3-32B-FP8
  hardware: h200_sxm
  backend: trtllm
  mode: disaggregated
  nextn: 2
  nextn_accepted: 1.5
  workers:
    prefill: {parallelism: {replicas: 3, tensor: 4}}
    decode: {parallelism: {replicas: 1, tensor: 4}}
traffic:
  source: {type: synthetic, input_tokens: {dist: uniform, min: 3600, max: 4400}, output_tokens: {dist: uniform, min: 450, max: 550}}
  load: {type: concurrency, concurrency: 48}
  stop: {requests: 480}
";
    let ngram = "
engine:
  model: meta-llama/Llama-3.1-8B-Instruct
  hardware: h100_sxm
  backend: vllm
  speculation: {kind: ngram, num_speculative_tokens: 3, acceptance_rates: [0.8, 0.6, 0.4]}
  workers:
    aggregated: {}
traffic:
  source: {type: synthetic, input_tokens: 1000, output_tokens: 300}
  load: {type: concurrency, concurrency: 16}
  stop: {requests: 160}
";
    for yaml in [agg, disagg, ngram] {
        let p = prepared(yaml);
        let e = estimate(&p).unwrap();
        let j = replay(&p);
        let err = |k: &str, v: f64| (v / f(&j, k) - 1.0).abs();
        let tpot = f(&j, "mean_tpot_ms");
        assert!(err("mean_tpot_ms", e.tpot_ms) < 0.12, "{}: TPOT {} vs {tpot}", e.mode, e.tpot_ms);
        assert!(err("output_throughput_tok_s", e.output_tok_s) < 0.12, "{}: throughput", e.mode);
    }
}

/// The sweep with MTP: every candidate speculates (its replay configs say so), decode steps
/// emit the expected tokens, so under the same TPOT limit the best deployments serve more
/// per GPU; out-of-range draft settings are refused by name.
#[test]
fn the_default_sweep_with_mtp_serves_more_under_the_same_limits() {
    let catalog = Catalog::builtin().unwrap();
    let spec = SweepSpec { total_gpus: 8, ..readme_case() };
    let plain = default_sweep(&spec, &catalog, &DataOnly).unwrap();
    let mtp = SweepSpec { nextn: 2, nextn_accepted: 1.5, ..spec.clone() };
    let fast = default_sweep(&mtp, &catalog, &DataOnly).unwrap();
    let best = |l: &[servesim_scenario::estimate::sweep::SweepPoint]| {
        l.first().map_or(0.0, |p| p.estimate.per_gpu())
    };
    assert!(best(&fast.agg) > 1.2 * best(&plain.agg), "{} vs {}", best(&fast.agg), best(&plain.agg));
    assert!(fast.agg.iter().all(|p| p.yaml.contains("nextn: 2\n  nextn_accepted: 1.5")));
    let e = |s: SweepSpec| default_sweep(&s, &catalog, &DataOnly).unwrap_err().to_string();
    assert!(e(SweepSpec { nextn: 6, ..mtp.clone() }).contains("--nextn 6"));
    assert!(e(SweepSpec { nextn_accepted: 2.5, ..mtp }).contains("--nextn-accepted 2.5"));
}

/// `--allreduce nccl`: every candidate's workers time their all-reduces with NCCL (their
/// replay configs say so), which changes the multi-GPU estimates; an unknown name is refused.
#[test]
fn the_default_sweep_times_all_reduces_with_the_chosen_kernels() {
    let catalog = Catalog::builtin().unwrap();
    let spec = SweepSpec { total_gpus: 8, ..readme_case() };
    let plain = default_sweep(&spec, &catalog, &DataOnly).unwrap();
    let nccl = SweepSpec { allreduce: Some("nccl".into()), ..spec.clone() };
    let with = default_sweep(&nccl, &catalog, &DataOnly).unwrap();
    assert!(!with.agg.is_empty());
    assert!(with.agg.iter().chain(&with.disagg).all(|p| p.yaml.contains("timing: {allreduce: nccl}")));
    assert!(plain.agg.iter().all(|p| !p.yaml.contains("allreduce")));
    let per_gpu = |l: &[servesim_scenario::estimate::sweep::SweepPoint], label: &str| {
        l.iter().find(|p| p.label == label).map(|p| p.estimate.per_gpu())
    };
    let label = &with.agg.iter().find(|p| !p.label.contains("tp1,")).unwrap().label;
    assert_ne!(per_gpu(&with.agg, label), per_gpu(&plain.agg, label), "{label}");
    let e = default_sweep(&SweepSpec { allreduce: Some("mpi".into()), ..spec }, &catalog, &DataOnly)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--allreduce mpi must be one of custom, nccl"), "{e}");
}
