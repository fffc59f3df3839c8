use super::*;
use alloc::vec;

fn pool(role: PoolRole, first_slot: usize, slots: usize, initial: usize, startup_s: u64) -> PoolSpec {
    PoolSpec {
        role,
        first_slot,
        slots,
        initial,
        min_workers: 1,
        gpus_per_worker: 1,
        startup: SimDur::from_ms(startup_s * 1000),
    }
}

fn spec(pools: Vec<PoolSpec>, max_gpus: u32) -> PlannerSpec {
    PlannerSpec {
        interval: SimDur::from_ms(1000),
        window: 50,
        min_observations: 3,
        down_sensitivity: 0.8,
        ttft_target_ms: 500.0,
        itl_target_ms: 50.0,
        max_gpus,
        min_gpus: 0,
        pools,
    }
}

fn load(slot: usize, prefill: f64, decode: f64) -> LoadSample {
    LoadSample { slot, active_prefill_tokens: prefill, active_decode_blocks: decode, ..LoadSample::default() }
}

/// Runs one adjustment interval: `SAMPLES_PER_INTERVAL` samples of the same loads, the last
/// of which decides. Returns the actions and the time of the decision.
fn interval(p: &mut Planner, loads: &[LoadSample]) -> (Vec<Action>, SimTime) {
    let mut out = Vec::new();
    let mut at = p.due();
    for _ in 0..SAMPLES_PER_INTERVAL {
        at = p.due();
        out = p.sample(at, loads.to_vec());
    }
    (out, at)
}

#[test]
fn the_regression_fits_a_line_and_solves_for_the_load_that_meets_a_target() {
    let mut r = Regression::new(4, 3);
    r.observe(1000.0, 150.0);
    r.observe(2000.0, 250.0);
    assert_eq!(r.fit(), None, "below the minimum observations");
    assert_eq!(r.x_for(500.0), None);
    r.observe(3000.0, 350.0);
    let (m, b) = r.fit().unwrap();
    assert!((m - 0.1).abs() < 1e-12 && (b - 50.0).abs() < 1e-9, "{m} {b}");
    // 500 ms at 0.1 ms a token over 50 ms: 4,500 tokens.
    assert!((r.x_for(500.0).unwrap() - 4500.0).abs() < 1e-6);
    // A target below the intercept asks for no load at all, not a negative one.
    assert_eq!(r.x_for(10.0), Some(0.0));
    // The window keeps the last 4 points: the first is dropped.
    r.observe(4000.0, 450.0);
    r.observe(5000.0, 1000.0);
    assert_eq!(r.len(), 4);
    let (m2, _) = r.fit().unwrap();
    assert!(m2 > 0.1, "the steeper recent points weigh in: {m2}");
}

#[test]
fn a_flat_or_falling_regression_falls_back_to_the_smallest_load_seen_under_the_target() {
    let mut r = Regression::new(10, 3);
    for (x, y) in [(3000.0, 400.0), (1000.0, 600.0), (2000.0, 300.0), (5000.0, 200.0)] {
        r.observe(x, y);
    }
    assert!(r.fit().unwrap().0 <= 0.0);
    assert_eq!(r.x_for(500.0), Some(2000.0), "smallest x with y below 500");
    assert_eq!(r.x_for(100.0), Some(1000.0), "none below: smallest x at all");
    // Equal x everywhere: slope 0, as scikit-learn fits it.
    let mut flat = Regression::new(10, 2);
    flat.observe(7.0, 1.0);
    flat.observe(7.0, 3.0);
    assert_eq!(flat.fit(), Some((0.0, 2.0)));
}

/// TTFT grows 0.1 ms a pending token: with 1,000-token prompts the 500 ms target allows
/// 4,000 pending tokens a worker.
fn teach_ttft(p: &mut Planner, slots: &[usize], loads: &[f64]) -> (Vec<Action>, SimTime) {
    let mut last = (Vec::new(), SimTime::ZERO);
    for &x in loads {
        for &s in slots {
            p.observe_ttft(s, 0.1 * (x + 1000.0), 1000);
        }
        let samples: Vec<LoadSample> = slots.iter().map(|&s| load(s, x, 0.0)).collect();
        last = interval(p, &samples);
        if !last.0.is_empty() {
            return last;
        }
    }
    last
}

#[test]
fn a_pool_grows_by_one_when_every_worker_is_above_target_and_waits_for_the_new_one() {
    let mut p = Planner::new(spec(vec![pool(PoolRole::Prefill, 0, 4, 1, 30)], 8), 4);
    assert_eq!(p.state(0), SlotState::Serving);
    assert_eq!(p.state(1), SlotState::Off);
    // Below target (4,000): no decision, however many observations.
    let (a, _) = teach_ttft(&mut p, &[0], &[1000.0, 2000.0, 3000.0, 3500.0]);
    assert!(a.is_empty());
    let (a, at) = teach_ttft(&mut p, &[0], &[6000.0]);
    let ready = at.saturating_add(SimDur::from_ms(30_000));
    assert_eq!(a, vec![Action::Start { slot: 1, ready }]);
    assert_eq!(p.state(1), SlotState::Starting { ready });
    let d = p.decisions()[0];
    assert_eq!((d.from, d.to), (1, 2));
    assert!(matches!(d.reason, Reason::PrefillAbove { target } if (target - 4000.0).abs() < 1e-6));
    // While it starts the pool decides nothing, however loaded.
    let (a, _) = teach_ttft(&mut p, &[0], &[9000.0, 9000.0]);
    assert!(a.is_empty());
    p.ready(ready, 1);
    assert_eq!(p.state(1), SlotState::Serving);
    // Both above: a third; one below: none.
    let (a, _) = teach_ttft(&mut p, &[0, 1], &[9000.0]);
    assert!(matches!(a[..], [Action::Start { slot: 2, .. }]), "{a:?}");
}

#[test]
fn one_worker_below_target_holds_the_pool_and_all_below_the_boundary_shrink_it_last_started_first() {
    let mut p = Planner::new(spec(vec![pool(PoolRole::Prefill, 0, 4, 3, 0)], 8), 4);
    // Between the scale-down boundary (4,000 x 2/3 x 0.8 = 2,133) and the target: no change.
    let (a, _) = teach_ttft(&mut p, &[0, 1, 2], &[3000.0, 3500.0, 3900.0]);
    assert!(a.is_empty(), "{a:?}");
    // Mixed loads: one above target (4,000) and two below: nothing happens.
    for (s, x) in [(0, 5000.0), (1, 100.0), (2, 100.0)] {
        p.observe_ttft(s, 0.1 * (x + 1000.0), 1000);
    }
    let (a, _) = interval(&mut p, &[load(0, 5000.0, 0.0), load(1, 100.0, 0.0), load(2, 100.0, 0.0)]);
    assert!(a.is_empty(), "{a:?}");
    // Everyone below 4,000 x 2/3 x 0.8 = 2,133: the slot started last (2) drains.
    for s in 0..3 {
        p.observe_ttft(s, 300.0, 1000);
    }
    let (a, at) = interval(&mut p, &[load(0, 2000.0, 0.0), load(1, 2000.0, 0.0), load(2, 2000.0, 0.0)]);
    assert_eq!(a, vec![Action::Drain { slot: 2 }]);
    assert!(p.any_draining());
    p.retire(at.saturating_add(SimDur::from_ms(2000)), 2);
    assert_eq!(p.state(2), SlotState::Off);
    assert!(!p.any_draining());
    // A slot started later drains before the initial ones.
    let (_, report) = p.reports().next().unwrap();
    assert_eq!(report.peak, 3);
    assert_eq!(report.timeline.last().map(|t| (t.1, t.2)), Some((2, 2)));
}

#[test]
fn the_gpu_budget_caps_growth_and_the_minimum_stops_shrinking() {
    // Two pools of 2-GPU workers under a 6-GPU budget: 1 + 1 workers start (4 GPUs).
    let mut pools = vec![pool(PoolRole::Prefill, 0, 3, 1, 0), pool(PoolRole::Decode, 3, 3, 1, 0)];
    for p in &mut pools {
        p.gpus_per_worker = 2;
    }
    let mut p = Planner::new(spec(pools, 6), 6);
    let (a, _) = teach_ttft(&mut p, &[0], &[1000.0, 2000.0, 3000.0, 6000.0]);
    assert!(matches!(a[..], [Action::Start { slot: 1, .. }]), "{a:?}");
    // 6 GPUs held: the prefill pool cannot grow again.
    let (a, _) = teach_ttft(&mut p, &[0, 1], &[9000.0, 9000.0]);
    assert!(a.is_empty(), "{a:?}");
    // A pool at its minimum never shrinks.
    let mut q = Planner::new(spec(vec![pool(PoolRole::Prefill, 0, 2, 1, 0)], 8), 2);
    let (a, _) = teach_ttft(&mut q, &[0], &[1000.0, 2000.0, 3000.0, 0.0, 0.0]);
    assert!(a.is_empty(), "{a:?}");
}

#[test]
fn an_aggregated_pool_grows_when_either_regression_asks_and_shrinks_only_when_both_do() {
    let mut p = Planner::new(spec(vec![pool(PoolRole::Aggregated, 0, 4, 2, 0)], 8), 4);
    // ITL 10 ms + 0.01 ms a block: the 50 ms target allows 4,000 blocks.
    let teach = |p: &mut Planner, prefill: f64, blocks: f64| {
        for s in 0..2 {
            p.observe_ttft(s, 0.1 * (prefill + 1000.0), 1000);
            p.observe_itl(s, 10.0 + 0.01 * blocks);
        }
        interval(p, &[load(0, prefill, blocks), load(1, prefill, blocks)]).0
    };
    for k in 1..=3 {
        assert!(teach(&mut p, 1000.0 * f64::from(k), 1000.0 * f64::from(k)).is_empty());
    }
    // Decode above target, prefill below: up.
    let a = teach(&mut p, 2500.0, 5000.0);
    assert!(matches!(a[..], [Action::Start { slot: 2, .. }]), "{a:?}");
    assert!(matches!(p.decisions()[0].reason, Reason::DecodeAbove { .. }));
    // Prefill far below but decode only a little below its boundary (4,000 x 2/3 x 0.8):
    // no shrink until both are.
    let mut p = Planner::new(spec(vec![pool(PoolRole::Aggregated, 0, 4, 2, 0)], 8), 4);
    for k in 1..=3 {
        teach(&mut p, 1000.0 * f64::from(k), 1000.0 * f64::from(k));
    }
    assert!(teach(&mut p, 10.0, 3000.0).is_empty());
    let a = teach(&mut p, 10.0, 1000.0);
    assert_eq!(a, vec![Action::Drain { slot: 1 }]);
}

#[test]
fn provisioned_time_integrates_starting_serving_and_draining_workers() {
    let s = |x: u64| SimTime::from_ms(x * 1000);
    let mut p = Planner::new(spec(vec![pool(PoolRole::Prefill, 0, 3, 1, 10)], 8), 3);
    // Slot 1 starts at the first decision (its 10 s to start count), serves, drains and leaves.
    let (a, at) = teach_ttft(&mut p, &[0], &[1000.0, 2000.0, 3000.0, 6000.0]);
    assert!(matches!(a[..], [Action::Start { slot: 1, .. }]), "{a:?}");
    p.ready(at.saturating_add(SimDur::from_ms(10_000)), 1);
    p.states[1] = SlotState::Draining;
    p.draining += 1;
    let gone = at.saturating_add(SimDur::from_ms(30_000));
    p.retire(gone, 1);
    let end = s(100);
    assert_eq!(p.provisioned(0, end), SimDur::from_ms(100_000));
    assert_eq!(p.provisioned(1, end), SimDur::from_ms(30_000));
    assert_eq!(p.provisioned(2, end), SimDur::ZERO);
    assert!((p.worker_seconds(0, end) - 130.0).abs() < 1e-9);
    // Up to a time before the start, only slot 0 counts.
    assert!((p.worker_seconds(0, s(1)) - 1.0).abs() < 1e-9);
}
