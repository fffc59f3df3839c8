//! Tests of the measured tables: exact hits, blends, the monotone envelope and scales.

use super::*;
use alloc::string::ToString;
use proptest::strategy::Strategy as _;

const LL: [Scale; 2] = [Scale::Linear, Scale::Linear];

fn pts(v: &[(u64, u64, f64)]) -> Vec<(Vec<u64>, f64)> {
    v.iter().map(|(a, b, l)| (vec![*a, *b], *l)).collect()
}

#[test]
fn a_spike_is_kept_at_its_point_but_not_spread_between_points() {
    // M = 17 measured twice as slow as M = 16 and M = 32 (AIConfigurator's B200 fp8 GEMM).
    let rows = [(16u64, 0.0168), (17, 0.0373), (32, 0.0172), (48, 0.0172), (64, 0.0175)]
        .iter()
        .map(|&(m, l)| (vec!["fp8".to_string()], vec![m, 8192, 7168], l))
        .collect();
    let t = Table::from_rows(Family::Gemm, rows).unwrap();
    let g = t.slice(&["fp8"]).unwrap();
    let sol = |c: &[f64]| c[0] * c[1] * c[2];
    let at = |m: f64| g.lookup(&[m, 8192.0, 7168.0], Family::Gemm.scales(), sol).unwrap();
    // The table keeps what was measured; a lookup takes the least time measured at 17
    // rows or more, and says it did not read the row as it stands.
    assert_eq!(g.exact(&[17, 8192, 7168]), Some(0.0373));
    assert_eq!(at(17.0), (0.0172, Source::Interpolated));
    assert_eq!(at(16.0), (0.0168, Source::Measured));
    // Taking the envelope again (here over N only) starts from the measurements.
    let mut again = g.clone();
    again.monotone_envelope(&[false, true, true]);
    assert_eq!(again.exact(&[17, 8192, 7168]), Some(0.0373));
    let (spike, src) = again.lookup(&[17.0, 8192.0, 7168.0], Family::Gemm.scales(), sol).unwrap();
    assert_eq!((spike, src), (0.0373, Source::Measured));
    let (mid, src) = at(24.0);
    assert_eq!(src, Source::Interpolated);
    assert!((mid - 0.0172).abs() < 1e-12, "{mid}");
    // Below the spike the blend rises from 16 to the envelope's 17.
    let (below, _) = at(16.5);
    assert!(below > 0.0168 && below <= 0.0172, "{below}");
    // Axes that are not work (GPU counts) are left as measured.
    let rows = [(2u64, 1024u64, 0.02), (4, 1024, 0.01), (2, 2048, 0.03), (4, 2048, 0.04)]
        .iter()
        .map(|&(g, n, l)| (vec!["bfloat16".to_string(), "graph".to_string()], vec![g, n], l))
        .collect();
    let t = Table::from_rows(Family::AllReduce, rows).unwrap();
    let g = t.slice(&["bfloat16", "graph"]).unwrap();
    let (l, _) = g.lookup(&[3.0, 1024.0], Family::AllReduce.scales(), |c| c[1]).unwrap();
    assert!((l - 0.015).abs() < 1e-12, "{l}");
}

#[test]
fn exact_hits_are_verbatim() {
    let (g, dup) =
        Grid::from_points(2, &pts(&[(1, 1, 0.1), (1, 4, 0.2), (4, 1, 0.3), (4, 4, 0.123_456_789)])).unwrap();
    assert_eq!(dup, 0);
    let r = g.lookup(&[4.0, 4.0], &LL, |c| c[0] * c[1]).unwrap();
    assert_eq!(r, (0.123_456_789, Source::Measured));
}

#[test]
fn multilinear_costs_interpolate_exactly_and_extrapolate_by_sol() {
    // latency = 0.01 * a * b: multilinear, so any interior point is exact.
    let mut p = Vec::new();
    for a in [1u64, 4, 16] {
        for b in [2u64, 8] {
            #[allow(clippy::cast_precision_loss)]
            p.push((vec![a, b], 0.01 * (a * b) as f64));
        }
    }
    let (g, _) = Grid::from_points(2, &p).unwrap();
    let (lat, src) = g.lookup(&[6.0, 5.0], &LL, |c| c[0] * c[1]).unwrap();
    assert!((lat - 0.3).abs() < 1e-12, "{lat}");
    assert_eq!(src, Source::Interpolated);
    let (lat, src) = g.lookup(&[32.0, 5.0], &LL, |c| c[0] * c[1]).unwrap();
    assert!((lat - 1.6).abs() < 1e-12);
    assert_eq!(src, Source::Extrapolated);
}

#[test]
fn square_scale_is_exact_for_quadratic_costs() {
    let p: Vec<(Vec<u64>, f64)> =
        [1024u64, 4096].iter().map(|s| (vec![*s], 1.0 + 1e-6 * (*s * *s) as f64)).collect();
    let (g, _) = Grid::from_points(1, &p).unwrap();
    let (lat, _) = g.lookup(&[3000.0], &[Scale::Square], |_| 1.0).unwrap();
    assert!((lat - (1.0 + 9.0)).abs() < 1e-9, "{lat}");
}

#[test]
fn holes_borrow_a_measured_corner_and_exact_holes_use_neighbours() {
    let (g, _) =
        Grid::from_points(2, &pts(&[(1, 1, 1.0), (2, 2, 1.0), (4, 4, 1.0), (2, 1, 1.0), (2, 4, 1.0)]))
            .unwrap();
    assert!(g.exact(&[4, 1]).is_none());
    let (lat, src) = g.lookup(&[4.0, 1.0], &LL, |_| 1.0).unwrap();
    assert!((lat - 1.0).abs() < 1e-12);
    assert_ne!(src, Source::Measured);
    let (lat, _) = g.lookup(&[3.0, 3.0], &LL, |_| 1.0).unwrap();
    assert!((lat - 1.0).abs() < 1e-12);
}

/// A table that stops short of its largest shapes (AIConfigurator's decode attention: 256
/// requests only up to 1,023 cached tokens, 128 up to 4,095) is read along both axes: the
/// missing corner takes its measured neighbour's time scaled by the speed-of-light ratio,
/// instead of the batch axis being dropped from the blend.
#[test]
fn a_missing_upper_corner_is_scaled_from_its_neighbour_not_dropped() {
    // Cost ∝ batch × KV (1 ms per million cached tokens), with (256, 4096) not measured.
    let cost = |b: u64, kv: u64| (b * kv) as f64 / 1e6;
    let (g, _) = Grid::from_points(
        2,
        &pts(&[(128, 1024, cost(128, 1024)), (128, 4096, cost(128, 4096)), (256, 1024, cost(256, 1024))]),
    )
    .unwrap();
    let sol = |c: &[f64]| c[0] * c[1];
    // 192 requests at 4,096 tokens: half-way along batch on the KV grid line.
    let (lat, src) = g.lookup(&[192.0, 4096.0], &LL, sol).unwrap();
    assert!((lat - cost(192, 4096)).abs() < 1e-12, "{lat}");
    assert_eq!(src, Source::Extrapolated);
    // Inside the cell: the full blend of three measured corners and the borrowed fourth.
    let (lat, _) = g.lookup(&[240.0, 2700.0], &LL, sol).unwrap();
    assert!((lat - 240.0 * 2700.0 / 1e6).abs() < 1e-9, "{lat}");
    // Where every corner is measured nothing is borrowed.
    assert_eq!(g.lookup(&[192.0, 1024.0], &LL, sol).unwrap().1, Source::Interpolated);
    // A line along the KV axis answers as the full lookup (the fast path steps aside).
    let mut line = g.line(&[240.0, 2000.0], 1, &LL).unwrap();
    for kv in [2000.0, 2001.0, 3000.5, 4095.0] {
        assert_eq!(g.lookup_on(&mut line, kv, sol), g.lookup(&[240.0, kv], &LL, sol));
    }
}

/// On a grid line whose points are all missing in the query's cell (256 requests, whose
/// table stops at 1,024 tokens) each corner borrows the measured point one line down the
/// batch axis, instead of the lookup falling back to the roofline.
#[test]
fn a_cell_with_no_measured_corner_borrows_along_an_axis() {
    let cost = |b: u64, kv: u64| (b * kv) as f64 / 1e6;
    let measured = [(128, 1024), (128, 4096), (128, 8192), (256, 1024)];
    let (g, _) = Grid::from_points(2, &pts(&measured.map(|(b, kv)| (b, kv, cost(b, kv))))).unwrap();
    let sol = |c: &[f64]| c[0] * c[1];
    let (lat, src) = g.lookup(&[256.0, 6000.0], &LL, sol).unwrap();
    assert!((lat - cost(256, 6000)).abs() < 1e-9, "{lat}");
    assert_eq!(src, Source::Extrapolated);
    // Donors are looked for at most MAX_BORROW_STEPS lines away; beyond, the caller's
    // roofline answers.
    let (g, _) = Grid::from_points(
        2,
        // Batch lines 64, 128, 256, 512; KV lines 1, 2, 3, 4,096, 8,192.
        &pts(&[
            (64, 4096, 1.0),
            (64, 8192, 2.0),
            (64, 2, 0.1),
            (64, 3, 0.1),
            (128, 1, 0.1),
            (256, 1, 0.1),
            (512, 1, 0.1),
        ]),
    )
    .unwrap();
    assert!(g.lookup(&[256.0, 6000.0], &LL, sol).is_some(), "two lines down the batch axis");
    assert!(g.lookup(&[512.0, 6000.0], &LL, sol).is_none(), "three lines down: too far");
}

#[test]
fn duplicates_keep_the_first_and_are_counted() {
    let (g, dup) = Grid::from_points(1, &[(vec![2], 1.0), (vec![2], 5.0)]).unwrap();
    assert_eq!(dup, 1);
    assert_eq!(g.exact(&[2]), Some(1.0));
}

#[test]
fn bad_points_are_refused() {
    assert!(Grid::from_points(1, &[(vec![0], 1.0)]).is_err());
    assert!(Grid::from_points(1, &[(vec![1], -1.0)]).is_err());
    assert!(Grid::from_points(1, &[(vec![1], f64::NAN)]).is_err());
    assert!(Grid::from_points(2, &[(vec![1], 1.0)]).is_err());
    let e = Table::from_rows(Family::Gemm, vec![(vec!["bf16".into()], vec![1, 2], 1.0)]).unwrap_err();
    assert!(e.message.contains("expected 1 and 3"), "{e}");
}

/// A 5×4×3 grid with a hole wherever `values` has `None` (`None` when all are holes).
fn holey_grid(values: &[Option<f64>]) -> Option<Grid> {
    let (ax, ay, az) = ([1u64, 2, 8, 16, 64], [1u64, 4, 16, 32], [1u64, 2, 4]);
    let mut p = Vec::new();
    for (i, a) in ax.iter().enumerate() {
        for (j, b) in ay.iter().enumerate() {
            for (k, c) in az.iter().enumerate() {
                if let Some(v) = values[(i * ay.len() + j) * az.len() + k] {
                    p.push((vec![*a, *b, *c], v));
                }
            }
        }
    }
    (!p.is_empty()).then(|| Grid::from_points(3, &p).unwrap().0)
}

proptest::proptest! {
    /// A cached lookup answers bit for bit as a fresh one, whatever came before: a walk of
    /// queries (repeats, small steps inside a cell, jumps, grid lines, beyond the edges)
    /// over a 3-D grid with holes, one cache throughout.
    #[test]
    fn cached_lookups_equal_fresh_ones(
        values in proptest::collection::vec(proptest::option::weighted(0.85, 0.01f64..5.0), 60),
        walk in proptest::collection::vec((0u8..4, 0.5f64..90.0, 0.5f64..50.0, 1u64..6), 1..60),
    ) {
        let Some(g) = holey_grid(&values) else { return Ok(()) };
        let scales = [Scale::Linear, Scale::Square, Scale::Linear];
        let sol = |c: &[f64]| c[0] * c[1] * c[1] + c[2];
        let mut cache = LookupCache::default();
        let mut x = [3.0, 3.0, 2.0];
        for (kind, a, b, c) in walk {
            match kind {
                0 => x[1] += 1.0,
                1 => x = [a, b, c as f64],
                2 => x[0] = a.round(),
                _ => {}
            }
            let fresh = g.lookup(&x, &scales, sol);
            let cached = g.lookup_cached(&x, &scales, sol, &mut cache);
            proptest::prop_assert_eq!(
                fresh.map(|(v, s)| (v.to_bits(), s)),
                cached.map(|(v, s)| (v.to_bits(), s)),
                "at {:?}", x
            );
        }
    }

    /// A line's lookups are fresh lookups, bit for bit: along each axis of a 3-D grid with
    /// holes, from fixed coordinates on, between and beyond grid lines, walking by whole
    /// and fractional steps, jumping, landing on grid lines and leaving the range.
    #[test]
    fn line_lookups_equal_fresh_ones(
        values in proptest::collection::vec(proptest::option::weighted(0.85, 0.01f64..5.0), 60),
        vary in 0usize..3,
        start in proptest::collection::vec(proptest::prop_oneof![
            (0usize..5).prop_map(|i| [1.0, 2.0, 4.0, 16.0, 64.0][i]),
            0.5f64..90.0,
        ], 3),
        walk in proptest::collection::vec((0u8..5, 0.5f64..90.0), 1..80),
    ) {
        let Some(g) = holey_grid(&values) else { return Ok(()) };
        let scales = [Scale::Linear, Scale::Square, Scale::Linear];
        let sol = |c: &[f64]| c[0] * c[1] * c[1] + c[2];
        let mut x = [start[0], start[1], start[2]];
        let mut line = g.line(&x, vary, &scales).unwrap();
        for (kind, a) in walk {
            match kind {
                0 | 1 => x[vary] += 1.0,
                2 => x[vary] += a / 64.0,
                3 => x[vary] = a.round(),
                _ => x[vary] = a,
            }
            // The plain blends ahead from the line's current cell, at this point and a
            // few beyond: each answer is the fresh lookup's, and a plain in-cell answer
            // at the first point is never left out.
            let ahead: Vec<f64> = (0..4).map(|k| x[vary] + f64::from(k) * a / 64.0).collect();
            let mut plain = [0.0; 4];
            let answered = line.plain_in_cell_many(&ahead, &mut plain);
            for (xv, lat) in ahead.iter().zip(plain).take(answered) {
                let mut at = x;
                at[vary] = *xv;
                proptest::prop_assert_eq!(
                    g.lookup(&at, &scales, sol).map(|(v, s)| (v.to_bits(), s)),
                    Some((lat.to_bits(), Source::Interpolated)),
                    "plain blend at {:?} along {}", at, vary
                );
            }
            if let Some(Some((_, Source::Interpolated))) = line.in_cell(x[vary], sol) {
                proptest::prop_assert!(answered > 0, "a plain blend at {:?} left out", x);
            }
            let fresh = g.lookup(&x, &scales, sol);
            let on = g.lookup_on(&mut line, x[vary], sol);
            proptest::prop_assert_eq!(
                fresh.map(|(v, s)| (v.to_bits(), s)),
                on.map(|(v, s)| (v.to_bits(), s)),
                "at {:?} along {}", x, vary
            );
        }
    }

    /// More work is never faster when the measurements are monotone: along each axis of
    /// a random monotone 2-D grid, interpolated and extrapolated latencies never decrease.
    #[test]
    /// Whatever was measured, lookups along a work axis never fall (on grid points and
    /// between them), and never exceed the slowest measurement.
    fn blends_along_work_axes_never_fall(
        values in proptest::collection::vec(0.001f64..1.0, 18),
        ms in proptest::collection::vec(1.0f64..72.0, 2..40),
        n in 1.0f64..32.0,
    ) {
        let (am, an) = ([1u64, 2, 8, 16, 64, 72], [1u64, 4, 32]);
        let mut rows = Vec::new();
        for (i, m) in am.iter().enumerate() {
            for (j, nn) in an.iter().enumerate() {
                rows.push((vec!["bfloat16".to_string()], vec![*m, *nn, 64], values[i * 3 + j]));
            }
        }
        let t = Table::from_rows(Family::Gemm, rows).unwrap();
        let g = t.slice(&["bfloat16"]).unwrap();
        let mut ms = ms;
        ms.sort_by(f64::total_cmp);
        let mut last = 0.0;
        for m in ms {
            let (lat, _) = g.lookup(&[m.round(), n, 64.0], Family::Gemm.scales(), |c| c[0] * c[1]).unwrap();
            proptest::prop_assert!(lat + 1e-12 >= last, "m={m}: {lat} < {last}");
            proptest::prop_assert!(lat <= values.iter().copied().fold(0.0, f64::max) + 1e-12);
            last = lat;
        }
    }

    fn monotone_measurements_give_monotone_lookups(
        base in proptest::collection::vec(0.001f64..1.0, 12),
        xs in proptest::collection::vec(1.0f64..80.0, 2..40),
        y in 1.0f64..40.0,
    ) {
        let ax = [1u64, 2, 8, 16, 64, 72];
        let ay = [1u64, 4, 32];
        let mut p = Vec::new();
        for (i, a) in ax.iter().enumerate() {
            for (j, b) in ay.iter().enumerate() {
                // Cumulative sums keep the table monotone along both axes.
                let v: f64 = base[..=i].iter().sum::<f64>() + base[6..=6 + j].iter().sum::<f64>();
                p.push((vec![*a, *b], v));
            }
        }
        let (g, _) = Grid::from_points(2, &p).unwrap();
        let mut xs = xs;
        xs.sort_by(f64::total_cmp);
        let mut last = 0.0;
        for x in xs {
            let (lat, _) = g.lookup(&[x, y], &LL, |c| c[0].max(8.0) * c[1]).unwrap();
            proptest::prop_assert!(lat + 1e-12 >= last, "x={x}: {lat} < {last}");
            last = lat;
        }
    }
}
