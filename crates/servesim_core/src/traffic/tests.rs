//! Unit tests of the traffic sources, loads and prompt pools.

use super::*;
use alloc::collections::BTreeSet;

/// Every request a traffic sends, in dispatch order.
fn drain(mut t: Traffic) -> Vec<RequestSpec> {
    core::iter::from_fn(|| t.next_arrival().map(|at| t.pop_due(at))).flatten().collect()
}

fn spec(load: Load, n: u32) -> TrafficSpec {
    TrafficSpec {
        source: Source::Synthetic {
            input_tokens: LengthDist::Fixed(100),
            output_tokens: LengthDist::Fixed(10),
            shared_prefix_tokens: 0,
            prompt_pool: 0,
        },
        load,
        stop: Stop { max_requests: n, max_sessions: u32::MAX },
        all_content_shared: false,
        rate_changes: Vec::new(),
    }
}

#[test]
fn constant_rate_is_evenly_spaced() {
    let times = arrival_times(&spec(Load::ConstantRate(4.0), 5), 1);
    let ns: Vec<u64> = times.iter().map(|t| t.as_ns()).collect();
    assert_eq!(ns, [0, 250_000_000, 500_000_000, 750_000_000, 1_000_000_000]);
}

#[test]
fn a_rate_schedule_changes_the_pace_at_its_times_and_carries_a_gap_across_them() {
    // 1 a second, 4 a second from 2.5 s: the gap that spans the change is half a unit at
    // each rate (0.5 s, then 0.125 s), and arrivals go on every 0.25 s.
    let mut s = spec(Load::ConstantRate(1.0), 6);
    s.rate_changes = vec![(SimTime::from_ms(2500), 4.0)];
    let ms: Vec<u64> = arrival_times(&s, 1).iter().map(|t| t.as_ns() / 1_000_000).collect();
    assert_eq!(ms, [0, 1000, 2000, 2625, 2875, 3125]);
    // Poisson: the counts follow each segment's rate (2 a second for 100 s, 20 a second
    // for 100 s, then 5 a second).
    let mut s = spec(Load::Poisson(2.0), 3000);
    s.rate_changes = vec![(SimTime::from_ms(100_000), 20.0), (SimTime::from_ms(200_000), 5.0)];
    let t = arrival_times(&s, 5);
    let count =
        |a: u64, b: u64| t.iter().filter(|x| (a * 1000..b * 1000).contains(&(x.as_ns() / 1_000_000))).count();
    let (first, second, third) = (count(0, 100), count(100, 200), count(200, 300));
    assert!((170..=230).contains(&first), "{first}");
    assert!((1850..=2150).contains(&second), "{second}");
    assert!((400..=600).contains(&third), "{third}");
    // Gamma gaps keep their burstiness within a segment and their mean rate.
    let mut s = spec(Load::Gamma { rate: 10.0, cv: 2.0 }, 4000);
    s.rate_changes = vec![(SimTime::from_ms(50_000), 40.0)];
    let t = arrival_times(&s, 5);
    let before = t.iter().filter(|x| x.as_ns() < 50_000_000_000).count();
    assert!((400..=600).contains(&before), "{before}");
}

#[test]
fn frontend_delays_vary_around_their_mean_and_leave_arrivals_alone() {
    // Poisson arrivals faster than the frontend's delay: each request leaves the frontend
    // between 0 and 2 × 50 ms after it arrives, 50 ms on average, and the arrival process
    // is the one the traffic has without a frontend.
    let s = spec(Load::Poisson(100.0), 4000);
    let mean = SimDur::from_ms(50);
    let mut t = Traffic::with_frontend(s.clone(), 7, mean);
    let (mut arrivals, mut delays) = (Vec::new(), Vec::new());
    while let Some(now) = t.next_arrival() {
        while let Some(r) = t.pop_due(now) {
            delays.push((now - r.arrival).as_ms_f64());
            arrivals.push(r.arrival);
        }
    }
    arrivals.sort_unstable();
    assert_eq!(arrivals, arrival_times(&s, 7));
    assert!(delays.iter().all(|d| (0.0..=100.0).contains(d)), "{delays:?}");
    let m = delays.iter().sum::<f64>() / delays.len() as f64;
    assert!((m - 50.0).abs() < 2.0, "mean delay {m} ms");
    // Not a constant: about half of them lie within 25 ms of either end.
    let edges = delays.iter().filter(|d| **d < 25.0 || **d > 75.0).count();
    assert!(edges * 3 > delays.len(), "{edges} of {}", delays.len());
}

#[test]
fn poisson_rate_and_gamma_burstiness() {
    let n = 20_000;
    let mean_gap = |t: &[SimTime]| t.last().unwrap().as_ms_f64() / (t.len() - 1) as f64;
    let cv_of = |t: &[SimTime]| {
        let gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]).as_ms_f64()).collect();
        let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let v = gaps.iter().map(|g| (g - m) * (g - m)).sum::<f64>() / gaps.len() as f64;
        v.sqrt() / m
    };
    let p = arrival_times(&spec(Load::Poisson(10.0), n), 3);
    assert!((mean_gap(&p) - 100.0).abs() < 3.0);
    assert!((cv_of(&p) - 1.0).abs() < 0.05);
    let g = arrival_times(&spec(Load::Gamma { rate: 10.0, cv: 3.0 }, n), 3);
    assert!((mean_gap(&g) - 100.0).abs() < 8.0, "gamma mean gap {}", mean_gap(&g));
    assert!((cv_of(&g) - 3.0).abs() < 0.3, "gamma cv {}", cv_of(&g));
}

#[test]
fn concurrency_sends_the_first_wave_at_zero_then_on_completion() {
    let mut t = Traffic::new(spec(Load::Concurrency(3), 5), 9);
    let mut first = Vec::new();
    while let Some(r) = t.pop_due(SimTime::ZERO) {
        first.push(r);
    }
    assert_eq!(first.len(), 3);
    assert!(t.next_arrival().is_none());
    t.on_request_done(SimTime::from_ns(50), (None, false), &[]);
    assert_eq!(t.next_arrival(), Some(SimTime::from_ns(50)));
    t.on_request_done(SimTime::from_ns(60), (None, false), &[]);
    t.on_request_done(SimTime::from_ns(70), (None, false), &[]); // Beyond the stop rule: ignored.
    assert_eq!(t.generated(), 5);
}

fn session_spec(turns: u32, ratio: f64) -> TrafficSpec {
    TrafficSpec {
        source: Source::Sessions(SessionSpec {
            new_input_tokens: LengthDist::Fixed(100),
            output_tokens: LengthDist::Fixed(10),
            turns,
            shared_prefix_ratio: ratio,
            prefix_groups: 0,
            think_time: SimDur::from_ms(500),
        }),
        load: Load::Concurrency(2),
        stop: Stop { max_requests: u32::MAX, max_sessions: 3 },
        all_content_shared: false,
        rate_changes: Vec::new(),
    }
}

#[test]
fn sessions_send_the_next_turn_after_think_time_with_the_history_as_prefix() {
    let mut t = Traffic::new(session_spec(3, 0.5), 1);
    assert_eq!(t.total(), 9);
    let a = t.pop_due(SimTime::ZERO).unwrap();
    let b = t.pop_due(SimTime::ZERO).unwrap();
    assert!(t.pop_due(SimTime::ZERO).is_none(), "two sessions in flight");
    assert_eq!((a.session, b.session), (Some((0, 0)), Some((1, 0))));
    // Both first turns share a 50-token prefix (one prefix group).
    assert_eq!(a.prompt[0], b.prompt[0]);
    assert_eq!(a.prompt[0].len, 50);
    // Turn 0 of session 0 ends at 1 s having generated 10 tokens.
    let mut done = a.prompt.clone();
    done.push(Segment { id: a.output_stream, len: 10 });
    t.on_request_done(SimTime::from_ms(1000), (a.session, false), &done);
    assert_eq!(t.next_arrival(), Some(SimTime::from_ms(1500)));
    let next = t.pop_due(SimTime::from_ms(1500)).unwrap();
    assert_eq!(next.session, Some((0, 1)));
    assert_eq!(next.input_tokens(), 100 + 10 + 100);
    assert_eq!(next.prompt[..done.len()], done[..]);
}

#[test]
fn each_source_states_the_content_other_requests_may_share() {
    // Multi-turn: every turn but the last is embedded by the next one; the last shares
    // only the history it was given.
    let mut t = Traffic::new(session_spec(2, 0.5), 1);
    let a = t.pop_due(SimTime::ZERO).unwrap();
    assert_eq!(a.public_tokens, ALL_SHARED);
    let mut done = a.prompt.clone();
    done.push(Segment { id: a.output_stream, len: 10 });
    t.pop_due(SimTime::ZERO).unwrap();
    t.on_request_done(SimTime::from_ms(1000), (a.session, false), &done);
    let last = t.pop_due(SimTime::from_ms(1500)).unwrap();
    assert_eq!(last.session, Some((0, 1)));
    assert_eq!(last.public_tokens, 110, "the first turn's prompt and output");
    // A lone turn shares its group prefix.
    let mut t = Traffic::new(session_spec(1, 0.5), 1);
    assert_eq!(t.pop_due(SimTime::ZERO).unwrap().public_tokens, 50);
    // Independent requests share the common system prompt only.
    let mut s = spec(Load::ConstantRate(1.0), 1);
    if let Source::Synthetic { shared_prefix_tokens, .. } = &mut s.source {
        *shared_prefix_tokens = 30;
    }
    assert_eq!(Traffic::new(s.clone(), 1).pop_due(SimTime::ZERO).unwrap().public_tokens, 30);
    // Indexing everything is one switch away.
    s.all_content_shared = true;
    assert_eq!(Traffic::new(s, 1).pop_due(SimTime::ZERO).unwrap().public_tokens, ALL_SHARED);
}

#[test]
fn a_finished_session_frees_its_slot() {
    let mut t = Traffic::new(session_spec(1, 0.0), 1);
    let a = t.pop_due(SimTime::ZERO).unwrap();
    let _b = t.pop_due(SimTime::ZERO).unwrap();
    t.on_request_done(SimTime::from_ms(10), (a.session, false), &a.prompt);
    let c = t.pop_due(SimTime::from_ms(10)).unwrap();
    assert_eq!(c.session, Some((2, 0)));
    t.on_request_done(SimTime::from_ms(20), (c.session, false), &c.prompt);
    assert!(t.next_arrival().is_none(), "max_sessions reached");
}

fn trace() -> Arc<Trace> {
    let row = |ts: u64, session: Option<u32>, ids: Vec<u64>, input: u32, delay: Option<u64>| TraceRow {
        timestamp: SimDur::from_ms(ts),
        session,
        input_tokens: input,
        output_tokens: 5,
        hash_ids: ids,
        delay: delay.map(SimDur::from_ms),
        wait_for: Vec::new(),
    };
    Arc::new(Trace::new(
        vec![
            row(0, None, vec![1, 2], 1000, None),
            row(100, Some(7), vec![1, 3], 600, None),
            row(0, Some(7), vec![1, 3, 4], 1200, Some(50)),
            row(300, None, vec![], 64, None),
        ],
        512,
    ))
}

#[test]
fn a_trace_row_shares_the_ids_another_row_starts_with() {
    let t = trace();
    // Rows 0-2 all start with id 1; rows 1 and 2 also share id 3, of which row 1 uses 88
    // tokens and row 2 a whole block (overstated for row 2, which is safe). Row 3 has no ids.
    assert_eq!(t.public_tokens, vec![512, 600, 1024, 0]);
    let mut traffic = Traffic::new(
        TrafficSpec {
            source: Source::Trace(t),
            load: Load::TraceTimestamps { speedup: 1.0, max_plays: 0 },
            stop: Stop { max_requests: u32::MAX, max_sessions: u32::MAX },
            all_content_shared: false,
            rate_changes: Vec::new(),
        },
        1,
    );
    let first = traffic.pop_due(SimTime::ZERO).unwrap();
    assert_eq!((first.input_tokens(), first.public_tokens), (1000, 512));
}

#[test]
fn trace_timestamps_with_speedup_and_session_delays() {
    let spec = TrafficSpec {
        source: Source::Trace(trace()),
        load: Load::TraceTimestamps { speedup: 2.0, max_plays: 0 },
        stop: Stop { max_requests: u32::MAX, max_sessions: u32::MAX },
        all_content_shared: false,
        rate_changes: Vec::new(),
    };
    let mut t = Traffic::new(spec, 1);
    assert_eq!(t.total(), 4);
    let r0 = t.pop_due(SimTime::ZERO).unwrap();
    assert_eq!(r0.prompt.iter().map(|s| s.len).collect::<Vec<_>>(), [512, 488]);
    let r1 = t.pop_due(SimTime::from_ms(50)).unwrap();
    assert_eq!(r1.session, Some((1, 0)));
    // The first 512-token block is the same content in both rows.
    assert_eq!(r0.prompt[0], r1.prompt[0]);
    assert_eq!(t.next_arrival(), Some(SimTime::from_ms(150)));
    // The session's second turn arrives 50 ms / 2 after its first completes.
    t.on_request_done(SimTime::from_ms(120), (r1.session, false), &r1.prompt);
    assert_eq!(t.next_arrival(), Some(SimTime::from_ms(145)));
    let r2 = t.pop_due(SimTime::from_ms(145)).unwrap();
    assert_eq!(r2.session, Some((1, 1)));
    assert_eq!(r2.input_tokens(), 1200);
    let r3 = t.pop_due(SimTime::from_ms(150)).unwrap();
    assert_eq!(r3.input_tokens(), 64);
    assert!(t.next_arrival().is_none());
}

#[test]
fn length_distributions_respect_their_bounds() {
    let mut r = Rng::new(5);
    let d = LengthDist::LogNormal { mean: 1000.0, std: 800.0, min: 10, max: 4000 };
    let xs: Vec<u32> = (0..10_000).map(|_| d.sample(&mut r)).collect();
    assert!(xs.iter().all(|x| (10..=4000).contains(x)));
    let u = LengthDist::Uniform { min: 3, max: 5 };
    assert!((0..1000).map(|_| u.sample(&mut r)).all(|x| (3..=5).contains(&x)));
}

#[test]
fn a_prompt_pool_repeats_each_prompt_once_a_pass_in_a_fresh_order() {
    let mut s = spec(Load::ConstantRate(1.0), 12);
    if let Source::Synthetic { input_tokens, prompt_pool, .. } = &mut s.source {
        *input_tokens = LengthDist::Uniform { min: 50, max: 500 };
        *prompt_pool = 4;
    }
    let got = drain(Traffic::new(s.clone(), 7));
    assert_eq!(got.len(), 12);
    // Every pass of 4 requests takes each of the 4 prompts once; a prompt keeps its length.
    let mut lengths = BTreeMap::new();
    let passes: Vec<Vec<u64>> = got
        .chunks(4)
        .map(|pass| {
            let mut ids: Vec<u64> = pass.iter().map(|r| r.prompt[0].id).collect();
            for r in pass {
                assert_eq!(*lengths.entry(r.prompt[0].id).or_insert(r.prompt[0].len), r.prompt[0].len);
                // The whole prompt may be another request's; the output is its own.
                assert_eq!(r.public_tokens, r.prompt[0].len);
            }
            let order = ids.clone();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), 4, "a pass repeats a prompt");
            order
        })
        .collect();
    assert_eq!(lengths.len(), 4);
    assert!(passes[0] != passes[1] || passes[1] != passes[2], "the order is reshuffled each pass");
    // Outputs are never shared, and one seed gives one sequence.
    let outputs: BTreeSet<u64> = got.iter().map(|r| r.output_stream).collect();
    assert_eq!(outputs.len(), 12);
    let again: Vec<u64> = drain(Traffic::new(s, 7)).iter().map(|r| r.prompt[0].id).collect();
    assert_eq!(again, got.iter().map(|r| r.prompt[0].id).collect::<Vec<_>>());
    // A pool larger than the run never repeats a prompt (and holds one entry a request).
    let mut big = spec(Load::ConstantRate(1.0), 12);
    if let Source::Synthetic { prompt_pool, .. } = &mut big.source {
        *prompt_pool = 10_000_000;
    }
    let t = Traffic::new(big.clone(), 7);
    assert_eq!(t.pool.as_ref().map(|p| p.entries.len()), Some(12));
    let ids: BTreeSet<u64> = drain(Traffic::new(big, 7)).iter().map(|r| r.prompt[0].id).collect();
    assert_eq!(ids.len(), 12);
}

/// A root, two rows that wait for it and a join that waits for both, at speedup 2.
fn dag() -> Arc<Trace> {
    let row = |ts: u64, session: Option<u32>, delay: u64, wait_for: Vec<u32>| TraceRow {
        timestamp: SimDur::from_ms(ts),
        session,
        input_tokens: 600,
        output_tokens: 5,
        hash_ids: vec![1, 2],
        delay: Some(SimDur::from_ms(delay)),
        wait_for,
    };
    Arc::new(Trace::dag(
        vec![
            row(100, Some(0), 0, vec![]),
            // Waits for the join below it in the file: the graph, not the file, orders rows.
            row(0, Some(0), 10, vec![3]),
            row(0, Some(1), 40, vec![0]),
            row(0, None, 20, vec![0, 2]),
            row(300, None, 0, vec![]),
        ],
        512,
    ))
}

#[test]
fn a_dependency_graph_sends_each_row_after_what_it_waits_for() {
    let spec = TrafficSpec {
        source: Source::Trace(dag()),
        load: Load::TraceTimestamps { speedup: 2.0, max_plays: 0 },
        stop: Stop { max_requests: u32::MAX, max_sessions: u32::MAX },
        all_content_shared: false,
        rate_changes: Vec::new(),
    };
    // Row 0, then 2, then the join 3, then row 1.
    assert_eq!(dag().longest_chain(), 4);
    let mut t = Traffic::new(spec, 1);
    // Roots at their timestamps / 2: row 0 at 50 ms, row 4 at 150 ms; nothing else yet.
    let root = t.pop_due(SimTime::from_ms(50)).unwrap();
    assert_eq!(root.session, Some((0, 0)));
    assert_eq!(t.next_arrival(), Some(SimTime::from_ms(150)));
    // The root completes at 60 ms: row 3 still waits for row 2, which is sent 40 / 2 ms later.
    t.on_request_done(SimTime::from_ms(60), (root.session, false), &root.prompt);
    let b = t.pop_due(SimTime::from_ms(80)).unwrap();
    assert_eq!((b.arrival, b.session), (SimTime::from_ms(80), Some((1, 0))));
    let lone = t.pop_due(SimTime::from_ms(150)).unwrap();
    assert_eq!(lone.session, Some((3, 0)), "a row without a session gets its own after the trace's");
    // Row 2 completes at 200 ms: the join (row 3) goes 20 / 2 ms after the later dependency.
    t.on_request_done(SimTime::from_ms(200), (b.session, false), &b.prompt);
    let join = t.pop_due(SimTime::from_ms(210)).unwrap();
    assert_eq!((join.arrival, join.session), (SimTime::from_ms(210), Some((2, 0))));
    assert!(t.next_arrival().is_none());
    // Row 1, listed second, waits for the join; finishing the lone root releases nothing.
    t.on_request_done(SimTime::from_ms(220), (lone.session, false), &lone.prompt);
    assert!(t.next_arrival().is_none());
    t.on_request_done(SimTime::from_ms(300), (join.session, false), &join.prompt);
    let last = t.pop_due(SimTime::from_ms(305)).unwrap();
    assert_eq!((last.arrival, last.session), (SimTime::from_ms(305), Some((0, 1))));
    assert_eq!(t.generated(), 5);
    // Every request of the graph is a full prompt of its own hash_ids: the shared blocks match.
    assert_eq!(last.prompt[0], root.prompt[0]);
}

#[test]
fn a_dependency_graph_stops_at_the_request_limit() {
    let spec = TrafficSpec {
        source: Source::Trace(dag()),
        load: Load::TraceTimestamps { speedup: 1.0, max_plays: 0 },
        stop: Stop { max_requests: 2, max_sessions: u32::MAX },
        all_content_shared: false,
        rate_changes: Vec::new(),
    };
    let mut t = Traffic::new(spec, 1);
    // Requests count once created: the second root is created when the first arrives.
    let root = t.pop_due(SimTime::from_ms(100)).unwrap();
    t.on_request_done(SimTime::from_ms(110), (root.session, false), &root.prompt);
    assert_eq!(t.next_arrival(), Some(SimTime::from_ms(300)), "row 2 is past the limit");
    let lone = t.pop_due(SimTime::from_ms(300)).unwrap();
    assert_eq!(lone.session, Some((3, 0)));
    assert!(t.next_arrival().is_none());
}

#[test]
fn in_one_lane_a_play_starts_when_the_play_before_it_is_done() {
    let t = dag();
    // Rows 0-3 are one play, row 4 another.
    assert_eq!(t.plays(), [0, 0, 0, 0, 4]);
    let spec = TrafficSpec {
        source: Source::Trace(t),
        load: Load::TraceTimestamps { speedup: 1.0, max_plays: 1 },
        stop: Stop { max_requests: u32::MAX, max_sessions: u32::MAX },
        all_content_shared: false,
        rate_changes: Vec::new(),
    };
    let mut t = Traffic::new(spec, 1);
    let root = t.pop_due(SimTime::from_ms(100)).unwrap();
    t.on_request_done(SimTime::from_ms(110), (root.session, false), &root.prompt);
    // Row 2, 40 ms later; row 4's timestamp (300 ms) passes while its lane is taken.
    let b = t.pop_due(SimTime::from_ms(150)).unwrap();
    assert_eq!(t.next_arrival(), None);
    t.on_request_done(SimTime::from_ms(400), (b.session, false), &b.prompt);
    let join = t.pop_due(SimTime::from_ms(420)).unwrap();
    t.on_request_done(SimTime::from_ms(500), (join.session, false), &join.prompt);
    let last = t.pop_due(SimTime::from_ms(510)).unwrap();
    assert_eq!(last.session, Some((0, 1)));
    assert_eq!(t.next_arrival(), None, "the play is not done until its last row is");
    t.on_request_done(SimTime::from_ms(600), (last.session, false), &last.prompt);
    let next = t.pop_due(SimTime::from_ms(600)).unwrap();
    assert_eq!((next.arrival, next.session), (SimTime::from_ms(600), Some((3, 0))));
}

/// One play that is a chain of eleven requests, 10 s apart in nominal start (0 .. 100 s, the
/// root at 5 s), named r0 .. r10; a lone root r11 at 500 s is a play of its own.
fn chain() -> Trace {
    let mut rows: Vec<TraceRow> = (0..11u32)
        .map(|i| TraceRow {
            timestamp: SimDur::from_ms(if i == 0 { 5_000 } else { 0 }),
            session: Some(i % 2),
            input_tokens: 1000 * (i + 1),
            output_tokens: 10,
            hash_ids: (0..u64::from(i + 1)).collect(),
            delay: (i > 0).then(|| SimDur::from_ms(10_000)),
            wait_for: if i == 0 { vec![] } else { vec![i - 1] },
        })
        .collect();
    rows.push(TraceRow {
        timestamp: SimDur::from_ms(500_000),
        session: None,
        input_tokens: 100,
        output_tokens: 10,
        hash_ids: vec![99],
        delay: None,
        wait_for: vec![],
    });
    let mut t = Trace::dag(rows, 1000);
    t.request_ids = (0..12).map(|i| alloc::format!("r{i}")).collect();
    t
}

#[test]
fn nominal_starts_add_each_rows_delay_to_the_latest_of_what_it_waits_for() {
    let starts = chain().nominal_starts();
    assert_eq!(starts[0], Some(SimDur::from_ms(5_000)));
    assert_eq!(starts[10], Some(SimDur::from_ms(105_000)));
    // The graph of `dag()`: row 3 joins rows 0 (100 ms) and 2 (100 + 40 ms), then waits 20 ms.
    let d = dag().nominal_starts();
    assert_eq!(d[3], Some(SimDur::from_ms(160)));
    assert_eq!(d[1], Some(SimDur::from_ms(170)));
}

#[test]
fn a_snapshot_cuts_each_play_between_a_quarter_and_three_quarters_of_its_span() {
    let full = chain();
    let mut histories = BTreeSet::new();
    for seed in 0..64 {
        let t = full.snapshot(seed, 0);
        let s = t.snapshot.clone().unwrap();
        assert_eq!(t, full.snapshot(seed, 0), "one seed, one snapshot");
        // The chain's cut lies 25-75 s into its 100 s span: rows starting before it are history.
        let history = s.history_requests as usize;
        assert!((3..=8).contains(&history), "seed {seed}: {history} rows cut");
        assert!((0.25..=0.75).contains(&s.mean_cut_fraction));
        histories.insert(history);
        assert_eq!((s.plays, s.cut_plays), (2, 1), "the lone root has no span to cut");
        assert_eq!(s.replayed_requests as usize + history, full.rows.len());
        // The kept rows are the chain's tail and the lone root, in file order.
        let kept: Vec<usize> = t.request_ids.iter().map(|id| id[1..].parse().unwrap()).collect();
        assert_eq!(kept, (history..12).collect::<Vec<_>>());
        // The first kept row waited for a cut one: it is a root now, at its nominal start's
        // offset from the cut (at most 10 s), counted from the play's first start.
        let first = &t.rows[0];
        assert!(first.wait_for.is_empty() && first.delay.is_none());
        assert!(t.rows[1..11 - history].iter().enumerate().all(|(i, r)| r.wait_for == [i as u32]));
        let lone = t.rows.last().unwrap();
        // The lone root keeps its place: 495 s after the chain's first start, less the
        // chain's first kept row's offset from the cut (under 10 s).
        assert_eq!(first.timestamp, SimDur::ZERO);
        assert!((485_000..=495_000).contains(&(lone.timestamp.as_ns() / 1_000_000)), "{:?}", lone.timestamp);
        // Each conversation's last cut prompt, as a one-token primer (sessions alternate along
        // the chain, so those are the last two cut rows).
        let mut primed: Vec<u32> = s.primers.iter().map(|p| p.input_tokens / 1000 - 1).collect();
        primed.sort_unstable();
        assert_eq!(primed, [history as u32 - 2, history as u32 - 1]);
        assert!(s.primers.iter().all(|p| p.output_tokens == 1 && p.wait_for.is_empty()));
        let row = &full.rows[history - 1];
        assert!(s.primers.iter().any(|p| p.hash_ids == row.hash_ids && p.session == row.session));
    }
    assert!(histories.len() >= 4, "the cut moves with the seed: {histories:?}");
}

#[test]
fn a_snapshot_keeps_what_a_kept_row_waits_for_after_the_cut() {
    // dag(): rows 0-3 (and 1) form a play whose starts span 100-170 ms; row 4 is alone.
    let full = dag();
    for seed in 0..32 {
        let t = full.snapshot(seed, 0);
        let s = t.snapshot.clone().unwrap();
        // Root 0 starts at the span's first instant and always goes; row 1 (170 ms) always stays.
        assert!(s.history_requests >= 1);
        assert_eq!(t.rows.len() as u32, s.replayed_requests);
        for row in &t.rows {
            assert!(row.wait_for.iter().all(|d| (*d as usize) < t.rows.len()));
        }
        // Whatever is kept, every kept row is sent: the graph has no dangling dependency.
        let spec = TrafficSpec {
            source: Source::Trace(Arc::new(t.clone())),
            load: Load::TraceTimestamps { speedup: 1.0, max_plays: 0 },
            stop: Stop { max_requests: u32::MAX, max_sessions: u32::MAX },
            all_content_shared: false,
            rate_changes: Vec::new(),
        };
        let mut traffic = Traffic::new(spec, 1);
        let mut sent = 0;
        while let Some(at) = traffic.next_arrival() {
            if let Some(r) = traffic.pop_due(at) {
                sent += 1;
                traffic.on_request_done(at + SimDur::from_ms(1), (r.session, false), &r.prompt);
            }
        }
        assert_eq!(sent, t.rows.len(), "seed {seed}");
    }
}

#[test]
fn a_warmup_sends_its_primers_first_and_the_replay_when_the_last_is_done() {
    let t = chain().snapshot(3, 0);
    let s = t.snapshot.clone().unwrap();
    let t = t.with_warmup(s.primers.clone());
    let kept_first = t.rows[0].clone();
    let spec = TrafficSpec {
        source: Source::Trace(Arc::new(t)),
        load: Load::TraceTimestamps { speedup: 1.0, max_plays: 0 },
        stop: Stop { max_requests: u32::MAX, max_sessions: u32::MAX },
        all_content_shared: false,
        rate_changes: Vec::new(),
    };
    let mut traffic = Traffic::new(spec, 1);
    assert_eq!(traffic.total(), s.replayed_requests + 2, "two conversations, two primers");
    let a = traffic.pop_due(SimTime::ZERO).unwrap();
    let b = traffic.pop_due(SimTime::ZERO).unwrap();
    assert!(a.warmup && b.warmup && a.output_tokens == 1 && a.session.is_none());
    // Nothing of the replay is due while a primer is out, however long it takes.
    assert_eq!(traffic.next_arrival(), None);
    traffic.on_request_done(SimTime::from_ms(700), (a.session, true), &a.prompt);
    assert_eq!(traffic.next_arrival(), None);
    traffic.on_request_done(SimTime::from_ms(900), (b.session, true), &b.prompt);
    // The replay's trace time starts at the barrier: its first root (at zero) goes then.
    let first = traffic.pop_due(SimTime::from_ms(900)).unwrap();
    assert!(!first.warmup);
    assert_eq!(first.input_tokens(), kept_first.input_tokens);
    // The later primer primes the cut row right before the first kept one: same blocks.
    let primer = if b.input_tokens() + 1000 == first.input_tokens() { &b } else { &a };
    assert_eq!(first.prompt[..primer.prompt.len() - 1], primer.prompt[..primer.prompt.len() - 1]);
    // The lone root keeps its place, counted from the barrier too.
    let lone = drain(traffic).into_iter().find(|r| r.input_tokens() == 100).unwrap();
    assert!(lone.arrival >= SimTime::from_ms(900 + 485_000), "{:?}", lone.arrival);
}

#[test]
fn a_rows_shared_prefix_counts_what_a_warmup_shares_with_it() {
    // A row alone shares nothing; a primer of the same blocks, sent before it, shares all.
    let row = dag().rows[4].clone();
    let alone = Trace::dag(vec![row.clone()], 512);
    assert_eq!(alone.public_tokens, [0]);
    let primed = alone.with_warmup(vec![TraceRow { output_tokens: 1, ..row }]);
    assert_eq!(primed.public_tokens, [600], "the primer's blocks are the row's whole prompt");
    assert_eq!(primed.warmup.len(), 1);
}
