//! Cases small enough to check by hand, with a fixed-cost step timer:
//! 1 ms per step + 0.01 ms per prefill token + 0.1 ms per decode request.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use servesim_core::engine::{Backend, BatchWait, SchedulerConfig, SglangKnobs, Speculation};
use servesim_core::frontend::FrontendSpec;
use servesim_core::host::{HostSpec, HostTier};
use servesim_core::metrics::{Fleet, Sla};
use servesim_core::request::Status;
use servesim_core::router::Router;
use servesim_core::sim::{make_ranks, Limits, RunResult, SimSetup, Simulation, StopReason};
use servesim_core::timing::{FixedTimer, StepTimer};
use servesim_core::traffic::{LengthDist, Load, Source, Stop, TrafficSpec};
use servesim_core::units::SimDur;
use servesim_core::worker::Worker;

struct Case {
    input: u32,
    output: u32,
    load: Load,
    requests: u32,
    blocks: u32,
    block_size: u32,
    budget: u32,
    dp: u32,
    backend: Backend,
    frontend: FrontendSpec,
    fast_forward: bool,
    sample_interval: SimDur,
    recv_interval: u32,
    speculation: Speculation,
    plan_ahead: bool,
    prompt_pool: u32,
    host: Option<HostSpec>,
}

impl Default for Case {
    fn default() -> Self {
        Case {
            input: 100,
            output: 5,
            load: Load::Concurrency(1),
            requests: 1,
            blocks: 10_000,
            block_size: 16,
            budget: 8192,
            dp: 1,
            backend: Backend::Vllm,
            frontend: FrontendSpec::default(),
            fast_forward: true,
            sample_interval: SimDur::from_ms(1),
            recv_interval: 1,
            speculation: Speculation::default(),
            plan_ahead: false,
            prompt_pool: 0,
            host: None,
        }
    }
}

fn timer() -> Box<dyn StepTimer> {
    Box::new(FixedTimer {
        step_overhead: SimDur::from_ms(1),
        per_prefill_token: SimDur::from_ns(10_000),
        per_decode_request: SimDur::from_ns(100_000),
    })
}

fn run(c: Case) -> RunResult {
    let mut sim = start(c);
    let p = sim.run().unwrap();
    assert_eq!(p.stopped, Some(StopReason::Drained));
    sim.into_result()
}

fn start(c: Case) -> Simulation {
    let cfg = SchedulerConfig {
        backend: c.backend,
        max_batched_tokens: c.budget,
        max_sequences: 256,
        chunked_prefill: true,
        prefill_schedule_interval: 1,
        sglang: SglangKnobs { recv_interval: c.recv_interval, ..SglangKnobs::default() },
        batch_wait: BatchWait::default(),
        adp_balance: None,
        frontend: c.frontend,
        speculation: c.speculation,
        plan_ahead: c.plan_ahead,
    };
    let radix = c.backend == Backend::Sglang;
    // SGLang's radix cache counts tokens: the same memory as blocks x block size.
    let (blocks, bs) = if radix { (c.blocks * c.block_size, 1) } else { (c.blocks, c.block_size) };
    let mut ranks = make_ranks(c.dp, blocks, bs, true, radix);
    for r in &mut ranks {
        r.host = c.host.map(|h| Box::new(HostTier::new(h)));
    }
    let workers = vec![Worker::new(0, cfg, ranks, 0)];
    let setup = SimSetup {
        seed: 1,
        traffic: TrafficSpec {
            source: Source::Synthetic {
                input_tokens: LengthDist::Fixed(c.input),
                output_tokens: LengthDist::Fixed(c.output),
                shared_prefix_tokens: 0,
                prompt_pool: c.prompt_pool,
            },
            load: c.load,
            stop: Stop { max_requests: c.requests, max_sessions: u32::MAX },
            all_content_shared: false,
            rate_changes: Vec::new(),
        },
        workers,
        router: Router::round_robin(),
        block_size: bs,
        limits: Limits::default(),
        sample_interval: c.sample_interval,
        sla: Sla::default(),
        fleet: Fleet {
            prefill_workers: 0,
            prefill_gpus_per_worker: 0,
            decode_workers: 1,
            decode_gpus_per_worker: 1,
        },
        context_limit: None,
        fast_forward: c.fast_forward,
        frontend_delay: SimDur::ZERO,
        planner: None,
        pd: None,
    };
    Simulation::new(setup, vec![timer()])
}

#[test]
fn a_prefix_evicted_from_gpu_memory_is_restored_from_the_host_tier() {
    // Two prompts of 100 tokens (a pool of two), one client at a time, and a GPU pool of 7
    // blocks of 16 tokens: exactly one request's 105 tokens, so each prompt evicts the other's
    // six full blocks. The host tier copies each full block (1 MB) at 10 GB/s: 0.1 ms a block.
    let host = HostSpec {
        capacity_blocks: 64,
        block_bytes: 1_000_000,
        d2h_bytes_per_s: Some(1e10),
        h2d_bytes_per_s: Some(1e10),
        first_byte: SimDur::ZERO,
        writes: servesim_core::host::HostWrites::AfterCompute,
    };
    let case = |host| Case { requests: 3, prompt_pool: 2, blocks: 7, host, ..Case::default() };
    let without = run(case(None));
    let with = run(case(Some(host)));
    let ttfts = |r: &RunResult| -> Vec<u64> {
        r.records.iter().map(|q| (q.stamps.first_token - q.arrival).as_ns() / 10_000).collect()
    };
    // The first two prompts are cold: 1 ms + 100 x 0.01 ms. The pool's second pass drew the
    // first prompt again (seed 1), whose blocks the second request evicted from GPU memory.
    // (In units of 0.01 ms.)
    assert_eq!(ttfts(&without), [200, 200, 200]);
    // With the host tier, its six blocks (96 tokens, all but the last token's block) come back
    // over the link in 0.6 ms, and the step computes the other 4 tokens: 1 ms + 0.04 ms.
    assert_eq!(ttfts(&with), [200, 200, 60 + 104]);
    let st = with.worker_stats[0].host.unwrap();
    assert_eq!((st.restores, st.restored_blocks, st.written_blocks, st.evicted_blocks), (1, 6, 12, 0));
    assert_eq!(st.restore_wait_ns, 600_000);
    assert_eq!(
        with.records.iter().map(|q| q.first_admission_reused().unwrap()).collect::<Vec<_>>(),
        [0, 0, 96]
    );
    assert!(without.worker_stats[0].host.is_none());
}

#[test]
fn a_restore_waits_for_the_host_link_and_its_first_byte() {
    // As above with a slow link (1 GB/s: 1 ms a block), 0.05 ms to its first byte, and writes
    // at once.
    let host = HostSpec {
        capacity_blocks: 64,
        block_bytes: 1_000_000,
        d2h_bytes_per_s: None,
        h2d_bytes_per_s: Some(1e9),
        first_byte: SimDur::from_ns(50_000),
        writes: servesim_core::host::HostWrites::AfterCompute,
    };
    let r = run(Case { requests: 3, prompt_pool: 2, blocks: 7, host: Some(host), ..Case::default() });
    let st = r.worker_stats[0].host.unwrap();
    assert_eq!((st.restores, st.restored_blocks), (1, 6));
    // 6 ms on the link and 0.05 ms to its first byte, then the 4-token step.
    let third = r.records.get(2).unwrap();
    assert_eq!((third.stamps.first_token - third.arrival).as_ns(), 6_050_000 + 1_040_000);
    // Fast-forwarding decode runs gives the same results as stepping.
    let stepped = run(Case {
        requests: 3,
        prompt_pool: 2,
        blocks: 7,
        host: Some(host),
        fast_forward: false,
        ..Case::default()
    });
    assert_eq!(format!("{:?}", stepped.summary), format!("{:?}", r.summary));
    assert_eq!(stepped.worker_stats[0].host, r.worker_stats[0].host);
}

#[test]
fn one_request_alone() {
    let r = run(Case::default());
    let s = &r.summary;
    // Prefill: 1 ms + 100 x 0.01 ms = 2 ms; each of the 4 decode steps: 1 ms + 0.1 ms.
    assert_eq!(s.ttft.mean, 2.0);
    assert_eq!(s.tpot.mean, 1.1);
    assert_eq!(s.e2e_latency.mean, 2.0 + 4.0 * 1.1);
    assert_eq!(s.itl.count, 4);
    assert_eq!(s.ttst.mean, 1.1);
    assert_eq!(s.duration_ms, 6.4);
}

#[test]
fn an_engine_that_plans_ahead_takes_a_new_prompt_one_step_later() {
    // Request 1 arrives at 2.5 ms, while request 0's first decode step (2.0–3.1 ms) runs.
    let case =
        |plan_ahead| Case { requests: 2, load: Load::ConstantRate(400.0), plan_ahead, ..Case::default() };
    let now = run(case(false));
    // Planned at 3.1 ms, the mixed step (1 + 100 × 0.01 + 0.1 ms) ends at 5.2: TTFT 2.7 ms.
    assert_eq!(now.summary.ttft.max, 2.7);
    let ahead = run(case(true));
    // The 3.1 ms step was planned at 2.0, before it came: it joins the one at 4.2, ending at
    // 6.3 ms (TTFT 3.8 ms). Request 0, arriving at an idle engine, starts at once either way.
    assert_eq!(ahead.summary.ttft.max, 3.8);
    assert_eq!(ahead.summary.ttft.min, 2.0);
    let stepwise = run(Case { fast_forward: false, ..case(true) });
    assert_eq!(stepwise.summary.ttft.max, 3.8);
}

fn frontend(processes: u32, request_ms: u64, token_us: u64) -> FrontendSpec {
    FrontendSpec::new(processes, SimDur::from_ms(request_ms), SimDur::from_ns(token_us * 1000))
}

#[test]
fn the_serving_process_adds_its_request_work_to_ttft() {
    let r = run(Case { frontend: frontend(1, 3, 0), ..Case::default() });
    // 3 ms in the serving process, then the 2 ms prefill step; decode is untouched.
    assert_eq!(r.summary.ttft.mean, 5.0);
    assert_eq!(r.summary.tpot.mean, 1.1);
}

#[test]
fn streamed_tokens_reach_the_client_when_written() {
    let r = run(Case { requests: 2, frontend: frontend(1, 0, 1000), ..Case::default() });
    // Request 1's five tokens leave the engine at 2.0, 3.1, 4.2, 5.3 and 6.4 ms; writing each
    // takes the process 1 ms, so its client sees them at 3.0, 4.1, 5.2, 6.3 and 7.4 ms.
    // The closed loop sends request 2 at 7.4 ms, and it goes the same way.
    assert_eq!(r.summary.ttft.min, 3.0);
    assert_eq!(r.summary.ttft.max, 3.0);
    assert_eq!(r.summary.tpot.mean, 1.1);
    assert_eq!(r.summary.duration_ms, 2.0 * 7.4);
}

#[test]
fn a_busy_serving_process_delays_tokens_and_the_next_request() {
    // Four clients: each step's four tokens take the process 2 ms to write against a 1.4 ms
    // decode step, so the writes fall behind and the clients see a 2 ms TPOT.
    let r = run(Case {
        requests: 4,
        load: Load::Concurrency(4),
        frontend: frontend(1, 0, 500),
        ..Case::default()
    });
    assert_eq!(r.summary.tpot.mean, 2.0);
    // Prefill (5 ms) emits all four first tokens at once; the last of them is written at 7 ms.
    assert_eq!(r.summary.ttft.max, 7.0);
}

#[test]
fn a_saturated_serving_process_caps_the_request_rate() {
    let case = |processes, fast_forward| Case {
        requests: 200,
        load: Load::Concurrency(64),
        frontend: frontend(processes, 10, 0),
        fast_forward,
        ..Case::default()
    };
    let one = run(case(1, true));
    // 10 ms a request: at most 100 requests/s whatever the engine could do.
    assert!(one.summary.request_throughput_rps <= 100.0, "{}", one.summary.request_throughput_rps);
    assert!(one.summary.request_throughput_rps > 95.0, "{}", one.summary.request_throughput_rps);
    // The wait is in TTFT; the engine's own decode steps stay short.
    assert!(one.summary.ttft.mean > 500.0, "{}", one.summary.ttft.mean);
    assert!(one.summary.tpot.mean < 2.0, "{}", one.summary.tpot.mean);
    // Four processes share the work: four times the rate.
    let four = run(case(4, true));
    assert!(four.summary.request_throughput_rps > 3.5 * one.summary.request_throughput_rps);
    // Decode runs give the same answer as stepping one step at a time.
    let stepped = run(case(1, false));
    assert_eq!(format!("{:?}", stepped.summary), format!("{:?}", one.summary));
}

#[test]
fn decode_runs_charge_streamed_tokens_as_stepping_does() {
    let case = |fast_forward| Case {
        requests: 24,
        output: 400,
        load: Load::Concurrency(8),
        frontend: frontend(2, 1, 600),
        fast_forward,
        // Sparse samples, so that runs are applied many steps at a time.
        sample_interval: SimDur::from_ms(1000),
        ..Case::default()
    };
    let (runs, stepped) = (run(case(true)), run(case(false)));
    assert!(runs.events < stepped.events, "runs formed: {} vs {} events", runs.events, stepped.events);
    assert_eq!(format!("{:?}", runs.summary), format!("{:?}", stepped.summary));
    // The token work matters here: without it the same load queues less.
    let quiet = run(Case { frontend: frontend(2, 1, 0), ..case(true) });
    assert!(
        runs.summary.ttft.mean > quiet.summary.ttft.mean + 1.0,
        "{} vs {}",
        runs.summary.ttft.mean,
        quiet.summary.ttft.mean
    );
}

#[test]
fn long_prompt_is_chunked_to_the_token_budget() {
    let r = run(Case { input: 20_000, output: 1, ..Case::default() });
    // Chunks of 8192, 8192, 3616 tokens: 3 steps of 1 ms + 20,000 x 0.01 ms.
    assert_eq!(r.summary.ttft.mean, 203.0);
    assert_eq!(r.worker_stats[0].steps, 3);
}

#[test]
fn concurrency_one_never_queues() {
    let r = run(Case { requests: 5, ..Case::default() });
    assert_eq!(r.summary.ttft.min, 2.0);
    assert_eq!(r.summary.ttft.max, 2.0);
    assert_eq!(r.summary.completed_requests, 5);
    // Back-to-back: each request starts when the previous one ends.
    assert_eq!(r.summary.duration_ms, 5.0 * 6.4);
}

#[test]
fn simultaneous_arrivals_are_batched_together() {
    let r = run(Case { requests: 4, load: Load::Concurrency(4), ..Case::default() });
    // One prefill step for all four: 1 ms + 400 x 0.01 ms = 5 ms.
    assert_eq!(r.summary.ttft.min, 5.0);
    assert_eq!(r.summary.ttft.max, 5.0);
    // Then four decode steps of 1 ms + 4 x 0.1 ms.
    assert_eq!(r.summary.tpot.mean, 1.4);
}

#[test]
fn kv_pressure_preempts_and_everything_still_completes() {
    // 8 requests of 100 + 60 tokens need 10 blocks of 16 each at the end; 40 blocks hold 4.
    let r = run(Case {
        input: 100,
        output: 60,
        requests: 8,
        load: Load::Concurrency(8),
        blocks: 40,
        ..Case::default()
    });
    assert_eq!(r.summary.completed_requests, 8);
    assert!(r.summary.num_preemptions > 0, "expected preemptions");
    assert!(r.records.iter().all(|q| q.status == Status::Completed));
}

#[test]
fn finished_requests_give_their_slots_to_new_arrivals() {
    // 200 requests, at most 4 in flight: the arena holds 4 requests, the log 200 records.
    let mut sim = start(Case { requests: 200, load: Load::Concurrency(4), ..Case::default() });
    sim.run().unwrap();
    assert_eq!(sim.request_slots(), 4);
    let r = sim.into_result();
    assert_eq!(r.records.len(), 200);
    assert_eq!(r.summary.completed_requests, 200);
    assert!(r.records.iter().all(|q| q.status == Status::Completed && q.emitted == 5));
    // Records are by arrival number: arrivals never go back in time.
    assert!(r.records.iter().zip(r.records.iter().skip(1)).all(|(a, b)| a.arrival <= b.arrival));
}

#[test]
fn request_larger_than_the_cache_is_rejected_not_hung() {
    let r = run(Case { input: 1000, output: 10, blocks: 10, ..Case::default() });
    assert_eq!(r.summary.completed_requests, 0);
    assert_eq!(r.records[0].status, Status::Rejected);
}

#[test]
fn attention_dp_ranks_share_the_load_and_step_in_lockstep() {
    let r1 = run(Case { requests: 4, load: Load::Concurrency(4), ..Case::default() });
    let r2 = run(Case { requests: 4, load: Load::Concurrency(4), dp: 2, ..Case::default() });
    // Two ranks of two requests each: the prefill step is 1 ms + 200 x 0.01 ms.
    assert_eq!(r2.summary.ttft.max, 3.0);
    assert!(r2.summary.ttft.max < r1.summary.ttft.max);
}

#[test]
fn open_loop_poisson_is_reproducible() {
    let case = || Case { requests: 300, load: Load::Poisson(50.0), ..Case::default() };
    let a = run(case());
    let b = run(case());
    assert_eq!(a.summary, b.summary);
    assert_eq!(a.summary.completed_requests, 300);
}

/// Request A is decoding when B arrives (at 3 ms, during A's first decode step 2.0–3.1 ms).
/// vLLM runs B's prompt in the same step as A's next decode (1 + 1 + 0.1 = 2.1 ms); SGLang
/// runs B's prefill alone (2 ms) and A's decode waits.
#[test]
fn sglang_never_mixes_prefill_into_decode_steps_and_vllm_does() {
    let case =
        |backend| Case { requests: 2, load: Load::ConstantRate(1000.0 / 3.0), backend, ..Case::default() };
    let v = run(case(Backend::Vllm));
    let s = run(case(Backend::Sglang));
    let ttft_b = |r: &RunResult| (r.records[1].stamps.first_token - r.records[1].arrival).as_ms_f64();
    // B waits for the step in flight to end at 3.1 ms.
    assert!((ttft_b(&v) - 2.2).abs() < 1e-9, "vLLM {}", ttft_b(&v));
    assert!((ttft_b(&s) - 2.1).abs() < 1e-9, "SGLang {}", ttft_b(&s));
    // A's longest gap: vLLM 3.1 -> 5.2 ms (the mixed step); SGLang 3.1 -> 6.3 ms (prefill
    // step, then a decode step for both).
    assert!((v.summary.itl.max - 2.1).abs() < 1e-9, "vLLM {}", v.summary.itl.max);
    assert!((s.summary.itl.max - 3.2).abs() < 1e-9, "SGLang {}", s.summary.itl.max);
}

#[test]
fn sglang_alone_matches_the_single_request_arithmetic() {
    let r = run(Case { backend: Backend::Sglang, ..Case::default() });
    assert_eq!(r.summary.ttft.mean, 2.0);
    assert_eq!(r.summary.tpot.mean, 1.1);
}

/// SGLang's receive interval, by hand: request 1 (prefill 2 ms, then 1.1 ms decode steps from
/// t = 2 ms) takes requests in at t = 2 (after its prefill), then every 4 decode steps: at 6.4
/// and 10.8 ms. Request 2 arrives at 8 ms and waits for the intake at 10.8 ms, then its 2 ms
/// prefill: TTFT 4.8 ms. Without the interval it is prefilled after the decode step in
/// flight (7.5–8.6 ms): TTFT 2.6 ms. Stepping one step at a time gives the same.
#[test]
fn sglang_takes_requests_in_every_recv_interval_decode_steps() {
    let case = |recv_interval: u32, fast_forward: bool| Case {
        backend: Backend::Sglang,
        load: Load::ConstantRate(125.0),
        requests: 2,
        output: 20,
        recv_interval,
        fast_forward,
        ..Case::default()
    };
    let ttft = |r: &RunResult, i: usize| {
        let q = &r.records[i];
        (q.stamps.first_token - q.arrival).as_ms_f64()
    };
    for fast_forward in [true, false] {
        let gated = run(case(4, fast_forward));
        assert_eq!(ttft(&gated, 0), 2.0);
        assert!((ttft(&gated, 1) - 4.8).abs() < 1e-9, "{}", ttft(&gated, 1));
        let open = run(case(1, fast_forward));
        assert!((ttft(&open, 1) - 2.6).abs() < 1e-9, "{}", ttft(&open, 1));
    }
}

#[test]
fn trtllm_reserves_to_completion_and_never_preempts() {
    // 8 requests of 100 + 60 tokens need 10 blocks each; 40 blocks hold four at a time.
    let case = |backend| Case {
        input: 100,
        output: 60,
        requests: 8,
        load: Load::Concurrency(8),
        blocks: 40,
        backend,
        ..Case::default()
    };
    let t = run(case(Backend::TrtLlm));
    let v = run(case(Backend::Vllm));
    assert_eq!(t.summary.completed_requests, 8);
    assert_eq!(t.summary.num_preemptions, 0);
    assert!(v.summary.num_preemptions > 0);
    // Four admitted at once, the other four after the first wave finishes.
    assert_eq!(t.summary.ttft.min, 5.0);
}

#[test]
fn trtllm_clamps_outputs_to_the_pool_and_vllm_rejects() {
    let case = |backend| Case { input: 100, output: 1000, blocks: 20, backend, ..Case::default() };
    let t = run(case(Backend::TrtLlm));
    assert_eq!(t.summary.completed_requests, 1);
    assert_eq!(t.records[0].emitted, 20 * 16 - 100);
    let v = run(case(Backend::Vllm));
    assert_eq!(v.summary.completed_requests, 0);
}

#[test]
fn sglang_retracts_under_kv_pressure_and_everything_completes() {
    let r = run(Case {
        input: 100,
        output: 200,
        requests: 12,
        load: Load::Concurrency(12),
        blocks: 120,
        backend: Backend::Sglang,
        ..Case::default()
    });
    assert_eq!(r.summary.completed_requests, 12);
    assert!(r.summary.num_preemptions > 0, "expected retractions");
}

/// One prefill and one decode worker; 1,000 bytes of KV per token over 100 MB/s links.
fn run_pd(backend: Backend, requests: u32, sharing: servesim_core::transfer::Sharing) -> RunResult {
    use servesim_core::sim::PdSetup;
    use servesim_core::transfer::TransferNet;
    let cfg = SchedulerConfig {
        backend,
        max_batched_tokens: 8192,
        max_sequences: 256,
        chunked_prefill: true,
        prefill_schedule_interval: 1,
        sglang: SglangKnobs::default(),
        batch_wait: BatchWait::default(),
        adp_balance: None,
        frontend: servesim_core::frontend::FrontendSpec::default(),
        plan_ahead: false,
        speculation: Speculation::default(),
    };
    let radix = backend == Backend::Sglang;
    let (blocks, bs) = if radix { (160_000, 1) } else { (10_000, 16) };
    let workers = vec![
        Worker::new(0, cfg.clone(), make_ranks(1, blocks, bs, true, radix), 0),
        Worker::new(1, cfg, make_ranks(1, blocks, bs, true, radix), 0),
    ];
    let setup = SimSetup {
        seed: 1,
        traffic: TrafficSpec {
            source: Source::Synthetic {
                input_tokens: LengthDist::Fixed(100),
                output_tokens: LengthDist::Fixed(5),
                shared_prefix_tokens: 0,
                prompt_pool: 0,
            },
            load: Load::Concurrency(requests),
            stop: Stop { max_requests: requests, max_sessions: u32::MAX },
            all_content_shared: false,
            rate_changes: Vec::new(),
        },
        workers,
        router: Router::round_robin(),
        block_size: bs,
        limits: Limits::default(),
        sample_interval: SimDur::from_ms(1),
        sla: Sla::default(),
        fleet: Fleet {
            prefill_workers: 1,
            prefill_gpus_per_worker: 1,
            decode_workers: 1,
            decode_gpus_per_worker: 1,
        },
        context_limit: None,
        fast_forward: true,
        frontend_delay: SimDur::ZERO,
        planner: None,
        pd: Some(PdSetup {
            prefill_workers: 1,
            decode_router: Router::round_robin(),
            net: TransferNet::new(Some(1e8), sharing, 1, 1),
            destination_first: backend == Backend::Sglang,
            bytes_per_token: 1000.0,
            state_bytes: 0.0,
            missing_only: true,
        }),
    };
    let mut sim = Simulation::new(setup, vec![timer()]);
    sim.run().unwrap();
    sim.into_result()
}

#[test]
fn pd_vllm_source_first_arithmetic() {
    let r = run_pd(Backend::Vllm, 1, servesim_core::transfer::Sharing::MaxMin);
    let q = &r.records[0];
    // Prefill 2 ms; 99 tokens (vLLM recomputes the last one) = 99 kB at 100 MB/s = 0.99 ms;
    // the decode worker's 1-token step (1.01 ms) samples the first token at 4.00 ms.
    assert_eq!(q.pd.prefill_done.as_ms_f64(), 2.0);
    assert_eq!(q.pd.dest_reserved.as_ms_f64(), 2.0);
    assert!((q.pd.dest_activated.as_ms_f64() - 2.99).abs() < 1e-9);
    assert!((r.summary.ttft.mean - 4.0).abs() < 1e-9, "{}", r.summary.ttft.mean);
    assert_eq!(q.transferred_tokens, 99);
    assert!((r.summary.tpot.mean - 1.1).abs() < 1e-9);
    assert_eq!(q.pd.source_released, q.pd.dest_activated);
}

#[test]
fn pd_sglang_destination_first_arithmetic() {
    let r = run_pd(Backend::Sglang, 1, servesim_core::transfer::Sharing::MaxMin);
    let q = &r.records[0];
    // The decode worker reserves at arrival; prefill 2 ms; 100 tokens move in 1 ms and the
    // first token arrives with them.
    assert_eq!(q.pd.dest_reserved.as_ms_f64(), 0.0);
    assert_eq!(q.pd.prefill_done.as_ms_f64(), 2.0);
    assert!((r.summary.ttft.mean - 3.0).abs() < 1e-9, "{}", r.summary.ttft.mean);
    assert_eq!(q.transferred_tokens, 100);
    assert!((r.summary.e2e_latency.mean - (3.0 + 4.0 * 1.1)).abs() < 1e-9);
}

#[test]
fn pd_concurrent_transfers_share_the_link() {
    use servesim_core::transfer::Sharing;
    // Two requests prefilled together finish at 3 ms; their transfers overlap.
    let shared = run_pd(Backend::Vllm, 2, Sharing::MaxMin);
    let indep = run_pd(Backend::Vllm, 2, Sharing::Independent);
    let act = |r: &RunResult| r.records.iter().map(|q| q.pd.dest_activated.as_ms_f64()).fold(0.0, f64::max);
    // Independent: each 99 kB at 100 MB/s ends 0.99 ms after 3 ms; shared: both at 50 MB/s, 1.98 ms.
    assert!((act(&indep) - 3.99).abs() < 1e-9, "{}", act(&indep));
    assert!((act(&shared) - 4.98).abs() < 1e-9, "{}", act(&shared));
    assert!(shared.summary.ttft.mean > indep.summary.ttft.mean);
}

/// Speculative decoding with every draft accepted: after the 2 ms prefill (first token),
/// each round verifies 1 + 2 positions in one step (1 ms + 3 × 0.1 ms = 1.3 ms) and emits
/// 3 tokens, so tokens 2–7 take two rounds: E2E 2 + 2 × 1.3 = 4.6 ms, TPOT 2.6 / 6 ms. The
/// accepted drafts arrive in their round's chunk: one inter-token gap of 1.3 ms per round.
/// Every engine gives the same for one request; an output ending inside a round stops there
/// (6 tokens: 4.6 ms too).
#[test]
fn speculative_rounds_emit_their_accepted_drafts_together() {
    for backend in [Backend::Vllm, Backend::Sglang, Backend::TrtLlm] {
        for output in [7, 6] {
            let r = run(Case {
                backend,
                output,
                speculation: Speculation::mean_accepted(2, 2.0, 7),
                ..Case::default()
            });
            let s = &r.summary;
            assert_eq!(s.completed_requests, 1, "{backend:?}");
            assert_eq!(s.total_output_tokens, u64::from(output));
            assert!((s.e2e_latency.mean - 4.6).abs() < 1e-9, "{backend:?} {output}: {}", s.e2e_latency.mean);
            assert!((s.tpot.mean - 2.6 / f64::from(output - 1)).abs() < 1e-9, "{}", s.tpot.mean);
            assert!((s.ttst.mean - 1.3).abs() < 1e-9);
            assert_eq!(s.itl.count, 2);
            assert!((s.itl.min - 1.3).abs() < 1e-9 && (s.itl.max - 1.3).abs() < 1e-9);
        }
    }
}

/// No draft accepted: every round emits one token but still verifies two drafts, so it costs
/// 1.3 ms instead of 1.1 ms (speculation that never pays off is slower than none).
#[test]
fn rejected_drafts_cost_their_verification() {
    let r = run(Case { output: 5, speculation: Speculation::mean_accepted(2, 0.0, 7), ..Case::default() });
    assert!((r.summary.tpot.mean - 1.3).abs() < 1e-9, "{}", r.summary.tpot.mean);
    let plain = run(Case { output: 5, ..Case::default() });
    assert!((plain.summary.tpot.mean - 1.1).abs() < 1e-9);
}

/// Half the rounds accept their one draft: 1.5 tokens a round on average. One request alone
/// runs one prefill step and then one step per round.
#[test]
fn fractional_acceptance_averages_out_over_rounds() {
    for backend in [Backend::Vllm, Backend::Sglang, Backend::TrtLlm] {
        let r = run(Case {
            backend,
            output: 3001,
            speculation: Speculation::mean_accepted(1, 0.5, 11),
            ..Case::default()
        });
        let rounds = r.worker_stats[0].steps - 1;
        #[allow(clippy::cast_precision_loss)]
        let per_round = 3000.0 / rounds as f64;
        assert!((per_round - 1.5).abs() < 0.04, "{backend:?}: {per_round} tokens a round");
    }
}

/// Under KV pressure the drafts' slots are taken and returned exactly: every request
/// completes with its whole output (vLLM preempts, SGLang retracts, TensorRT-LLM waits).
#[test]
fn speculation_under_kv_pressure_completes_every_request() {
    for backend in [Backend::Vllm, Backend::Sglang, Backend::TrtLlm] {
        let r = run(Case {
            backend,
            output: 300,
            requests: 40,
            load: Load::Concurrency(8),
            blocks: 100,
            speculation: Speculation::conditional(&[0.8, 0.6, 0.4], 3),
            ..Case::default()
        });
        let s = &r.summary;
        assert_eq!(s.completed_requests, 40, "{backend:?}");
        assert_eq!(s.total_output_tokens, 40 * 300, "{backend:?}");
    }
}

/// One request alone, by kind: a 2 ms prefill step of its 100 tokens, then 4 decode steps of
/// 1.1 ms whose one row sees 101, 102, 103 and 104 keys. A fast-forwarded run counts what the
/// same steps count one at a time.
#[test]
fn steps_are_tallied_by_kind_alike_with_and_without_runs() {
    use servesim_core::timing::{StepKind, StepTally};
    for fast_forward in [true, false] {
        let r = run(Case { fast_forward, ..Case::default() });
        let st = &r.worker_stats[0];
        let prefill = StepTally {
            steps: 1,
            busy_ns: 2_000_000,
            busy_ranks: 1,
            prefill_chunks: 1,
            prefill_tokens: 100,
            ..StepTally::default()
        };
        let decode = StepTally {
            steps: 4,
            busy_ns: 4_400_000,
            busy_ranks: 4,
            decode_rows: 4,
            decode_kv_tokens: 101 + 102 + 103 + 104,
            ..StepTally::default()
        };
        assert_eq!(*st.of_kind(StepKind::Prefill), prefill, "fast_forward {fast_forward}");
        assert_eq!(*st.of_kind(StepKind::Decode), decode, "fast_forward {fast_forward}");
        assert_eq!(*st.of_kind(StepKind::Mixed), StepTally::default());
        let mut both = prefill;
        both.merge(&decode);
        assert_eq!((both.steps, both.busy_ns, both.busy_ranks), (5, 6_400_000, 5));
        assert_eq!((both.prefill_tokens, both.decode_kv_tokens), (100, 410));
        let typical = decode.typical();
        assert_eq!(typical.len(), 1);
        assert_eq!((typical[0].decode_requests, typical[0].decode_kv_tokens), (1, 103));
    }
}

/// The kinds add up to the worker's steps and busy time, and vLLM's prompt beside a decode
/// is a mixed step, which SGLang never runs (the case of
/// `sglang_never_mixes_prefill_into_decode_steps_and_vllm_does`).
#[test]
fn step_kinds_add_up_and_tell_mixed_steps_apart() {
    use servesim_core::timing::StepKind;
    for backend in [Backend::Vllm, Backend::Sglang] {
        for load in [Load::ConstantRate(1000.0 / 3.0), Load::Concurrency(8), Load::Poisson(300.0)] {
            let r = run(Case { requests: 40, output: 20, load: load.clone(), backend, ..Case::default() });
            let st = &r.worker_stats[0];
            let kinds = StepKind::ALL.map(|k| *st.of_kind(k));
            assert_eq!(kinds.iter().map(|t| t.steps).sum::<u64>(), st.steps, "{backend:?} {load:?}");
            assert_eq!(kinds.iter().map(|t| t.busy_ns).sum::<u64>(), st.busy_ns, "{backend:?} {load:?}");
            assert_eq!(kinds.iter().map(|t| t.prefill_tokens).sum::<u64>(), st.prefill_tokens);
            assert_eq!(kinds.iter().map(|t| t.decode_rows).sum::<u64>(), st.decode_rounds);
        }
        let r = run(Case { requests: 2, load: Load::ConstantRate(1000.0 / 3.0), backend, ..Case::default() });
        let mixed = r.worker_stats[0].of_kind(StepKind::Mixed);
        if backend == Backend::Sglang {
            assert_eq!(mixed.steps, 0);
        } else {
            // B's 100-token prompt beside A's decode: 1 + 1 + 0.1 ms.
            assert_eq!(
                (mixed.steps, mixed.busy_ns, mixed.prefill_tokens, mixed.decode_rows),
                (1, 2_100_000, 100, 1)
            );
        }
    }
}
