//! Measured kernel-latency tables and how servesim reads between their rows.
//!
//! A [`Table`] holds one op family (GEMM, context attention, …) of one system, engine and
//! engine version. Its rows are split into slices by categorical *keys* (dtype, head size,
//! MoE shape, …); within a slice the numeric *axes* (tokens, batch, sequence length, …) form
//! a [`Grid`], possibly with holes where nothing was measured.
//!
//! Interpolation (our own method, documented here and in ARCHITECTURE.md):
//! - An exact hit returns the measured latency verbatim.
//! - Otherwise each axis is bracketed by its neighbouring grid values and the latency is a
//!   multilinear blend of the bracketing corners. Weights are linear in the axis coordinate,
//!   or in its square for sequence axes of prefill attention ([`Scale::Square`]): kernel
//!   costs are close to multilinear in sizes (a GEMM is exactly `∝ m·n·k`; attention is
//!   `∝ batch·heads·isl²`), so the blend is exact for such costs, and it never makes more
//!   work faster than less when the measurements do not.
//! - A missing corner borrows the measured corner that differs from it on the fewest axes,
//!   scaled by the speed-of-light ratio between the two, and the answer is reported as
//!   *extrapolated* (the tables leave out their largest shapes, so a dropped corner would
//!   lose an axis); if an axis hits a grid value exactly but that point is missing, its two
//!   neighbours stand in.
//! - Outside an axis' range the query is clamped to the edge and scaled by the
//!   speed-of-light ratio `sol(query) / sol(clamped)` the caller supplies (the edge's
//!   efficiency is held). That is reported as *extrapolated*, never silently; with no
//!   measured corner at all the caller falls back to its roofline.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

mod line;
pub use line::GridLine;

/// How a latency was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// A measured row, verbatim.
    Measured,
    /// Blended from measured rows around the query.
    Interpolated,
    /// Outside the measured range: nearest measured utilisation held.
    Extrapolated,
    /// No table covers the op: roofline with sourced efficiencies.
    Roofline,
}

impl Source {
    /// Lower-case name used in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Interpolated => "interpolated",
            Source::Extrapolated => "extrapolated",
            Source::Roofline => "roofline",
        }
    }
}

/// Counts of lookups by [`Source`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Provenance {
    /// Exact hits.
    pub measured: u64,
    /// Interpolated inside the measured range.
    pub interpolated: u64,
    /// Held outside the measured range.
    pub extrapolated: u64,
    /// Roofline fallbacks.
    pub roofline: u64,
}

impl Provenance {
    /// Counts one lookup.
    pub fn count(&mut self, s: Source) {
        match s {
            Source::Measured => self.measured += 1,
            Source::Interpolated => self.interpolated += 1,
            Source::Extrapolated => self.extrapolated += 1,
            Source::Roofline => self.roofline += 1,
        }
    }

    /// Adds another set of counts.
    pub fn add(&mut self, o: &Provenance) {
        self.measured += o.measured;
        self.interpolated += o.interpolated;
        self.extrapolated += o.extrapolated;
        self.roofline += o.roofline;
    }

    /// All lookups.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.measured + self.interpolated + self.extrapolated + self.roofline
    }
}

/// A table could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableError {
    /// What is wrong.
    pub message: String,
}

impl core::fmt::Display for TableError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Dense cells above this are refused: a table that large is not a kernel grid.
const MAX_GRID_CELLS: usize = 1 << 24;

/// Numeric axes of one slice and the latencies (ms) at their grid points.
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    axes: Vec<Vec<u64>>,
    /// Row-major over `axes`; NaN where nothing was measured. What blends read: after
    /// [`Grid::monotone_envelope`], the greatest function of the measurements that never
    /// falls as a work axis grows.
    values: Vec<f64>,
    /// Measured latencies the envelope lowered, by index into `values`, ascending: what
    /// [`Grid::exact`] reports, while lookups there answer with the envelope and say it was
    /// derived ([`Source::Interpolated`]).
    measured_above: Vec<(usize, f64)>,
    /// Index distance between neighbours along each axis in `values`.
    strides: [usize; MAX_DIMS],
    measured_points: usize,
}

/// How an axis' coordinate enters the interpolation weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// Weights linear in the coordinate.
    Linear,
    /// Weights linear in the square of the coordinate (causal attention over a prompt).
    Square,
}

impl Scale {
    fn apply(self, x: f64) -> f64 {
        match self {
            Scale::Linear => x,
            Scale::Square => x * x,
        }
    }
}

/// Most axes a grid has (lookups keep per-axis state on the stack).
const MAX_DIMS: usize = 6;

/// How many grid lines along one axis a blend's unmeasured corner may look for a measured
/// point when its cell has none ([`Grid::borrow_corner`]): the tables' axes mostly double
/// from line to line, so two lines hold the speed-of-light scaling to a factor of about 4.
const MAX_BORROW_STEPS: usize = 2;

/// Brackets of a grid's previous lookup, for [`Grid::lookup_cached`]. One cache serves one
/// grid (a cache moved to another grid gives wrong answers).
#[derive(Clone, Copy, Debug, Default)]
pub struct LookupCache {
    x: [f64; MAX_DIMS],
    br: [Bracket; MAX_DIMS],
    valid: bool,
}

impl LookupCache {
    /// Axis `d`'s bracket for `x` from the previous lookup's, when it still applies: the
    /// same coordinate, or one strictly inside the same interior interval (where
    /// [`Grid::bracket`] would find the same indices and compute the same weight).
    #[allow(clippy::cast_precision_loss, clippy::float_cmp)]
    #[inline]
    fn rebracket(&self, d: usize, axis: &[u64], x: f64, scale: Scale) -> Option<Bracket> {
        let b = self.br[d];
        if self.x[d] == x {
            return Some(b);
        }
        if b.lo == b.hi || b.hi >= axis.len() {
            return None;
        }
        let (lo, hi) = (axis[b.lo] as f64, axis[b.hi] as f64);
        if !(x > lo && x < hi) {
            return None;
        }
        let (a, c) = (scale.apply(lo), scale.apply(hi));
        Some(Bracket { lo: b.lo, hi: b.hi, t: (scale.apply(x) - a) / (c - a), at: x })
    }
}

/// Bracket of one axis: grid indices and the weight of the upper one. It is an exact hit when
/// both indices are one grid line evaluated at the query itself ([`Bracket::hits`]); no flag
/// is stored, so the struct has no padding (a `bool` here made every copy a partial-word
/// store followed by a wider load, a store-forwarding stall on each decode step's lookup).
#[derive(Clone, Copy, Debug, Default)]
struct Bracket {
    lo: usize,
    hi: usize,
    t: f64,
    /// The coordinate the blend is evaluated at (the query, or the edge it was clamped to).
    at: f64,
}

impl Bracket {
    /// Whether this bracket is the grid line at exactly `x`.
    #[allow(clippy::float_cmp)] // `at` is either the query itself or a grid value.
    fn hits(&self, x: f64) -> bool {
        self.lo == self.hi && self.at == x
    }
}

impl Grid {
    /// Builds a grid from `(coordinates, latency_ms)` points. Duplicate coordinates keep the
    /// first value; the number dropped is returned with the grid.
    ///
    /// # Errors
    /// On inconsistent dimensions, non-positive coordinates or latencies, or an oversized grid.
    pub fn from_points(dims: usize, points: &[(Vec<u64>, f64)]) -> Result<(Grid, usize), TableError> {
        let mut coords = Vec::with_capacity(points.len() * dims);
        let mut lats = Vec::with_capacity(points.len());
        for (c, lat) in points {
            if c.len() != dims {
                return Err(TableError {
                    message: format!("point {c:?} has {} coordinates, expected {dims}", c.len()),
                });
            }
            coords.extend_from_slice(c);
            lats.push(*lat);
        }
        Grid::from_flat(dims, &coords, &lats)
    }

    /// [`Grid::from_points`] with the points' coordinates laid end to end (`dims` per point).
    ///
    /// # Errors
    /// As [`Grid::from_points`].
    pub fn from_flat(dims: usize, coords: &[u64], lats: &[f64]) -> Result<(Grid, usize), TableError> {
        if dims == 0 || coords.len() != lats.len() * dims {
            return Err(TableError {
                message: format!("{} coordinates for {} points of {dims} axes", coords.len(), lats.len()),
            });
        }
        let mut axes: Vec<Vec<u64>> = vec![Vec::with_capacity(lats.len()); dims];
        for (c, lat) in coords.chunks_exact(dims).zip(lats) {
            if !(lat.is_finite() && *lat > 0.0) {
                return Err(TableError {
                    message: format!("latency {lat} at {c:?} is not a positive number"),
                });
            }
            for (d, v) in c.iter().enumerate() {
                if *v == 0 {
                    return Err(TableError {
                        message: format!("coordinate 0 at {c:?}: axes must be positive"),
                    });
                }
                axes[d].push(*v);
            }
        }
        for a in &mut axes {
            a.sort_unstable();
            a.dedup();
            a.shrink_to_fit();
        }
        let cells = axes.iter().try_fold(1usize, |acc, a| acc.checked_mul(a.len().max(1)));
        let cells = match cells {
            Some(c) if c <= MAX_GRID_CELLS => c,
            _ => {
                let sizes: Vec<usize> = axes.iter().map(Vec::len).collect();
                return Err(TableError {
                    message: format!("grid of {sizes:?} points is too large to hold densely"),
                });
            }
        };
        let mut strides = [0usize; MAX_DIMS];
        let mut stride = 1usize;
        for d in (0..axes.len().min(MAX_DIMS)).rev() {
            strides[d] = stride;
            stride *= axes[d].len();
        }
        let mut g = Grid {
            axes,
            values: vec![f64::NAN; cells],
            measured_above: Vec::new(),
            strides,
            measured_points: 0,
        };
        let mut duplicates = 0;
        for (c, lat) in coords.chunks_exact(dims).zip(lats) {
            let mut idx = 0;
            for (d, v) in c.iter().enumerate() {
                // Present by construction.
                let i = g.axes[d].binary_search(v).unwrap_or(0);
                idx = idx * g.axes[d].len() + i;
            }
            if g.values[idx].is_nan() {
                g.values[idx] = *lat;
                g.measured_points += 1;
            } else {
                duplicates += 1;
            }
        }
        Ok((g, duplicates))
    }

    /// Lowers each measured point to the least latency measured at or beyond it along the
    /// axes marked `true` (more tokens, longer contexts, larger messages: more work), so that
    /// more work is never timed faster. Kernel tables carry isolated slow measurements:
    /// AIConfigurator's B200 fp8 GEMM at M = 17 takes 37 µs where M = 16 and M = 32 take
    /// 17 µs (N 7,168, K 8,192), and its vLLM B200 TP8 custom all-reduce takes 26 µs for
    /// 131,072 and 262,144 values but 17 µs for 524,288. Read as measured, they made a TP8
    /// Llama-3.1-70B decode step 40% slower at 16–32 requests than at 64, and a blend anchored
    /// on one spread it over every batch up to the next grid line. The result is the greatest
    /// function not above the measurements that never falls along those axes: the time of
    /// more work bounds the time of less (M rows can always be padded to a larger measured M).
    /// A measured row above it is kept for [`Grid::exact`]; lookups there use the envelope and
    /// say so ([`Source::Interpolated`]).
    pub fn monotone_envelope(&mut self, monotone: &[bool]) {
        let dims = self.axes.len();
        // What was measured (an envelope taken before is undone first).
        let original: Vec<f64> = (0..self.values.len()).map(|i| self.measured(i)).collect();
        self.values.clone_from(&original);
        for d in (0..dims.min(MAX_DIMS)).filter(|&d| monotone.get(d).copied().unwrap_or(false)) {
            let (n, stride) = (self.axes[d].len(), self.strides[d]);
            if n < 2 {
                continue;
            }
            // Every line along axis d starts at an index whose coordinate d is 0.
            for start in 0..self.values.len() {
                if (start / stride) % n != 0 {
                    continue;
                }
                let mut least = f64::INFINITY;
                for i in (0..n).rev() {
                    let v = &mut self.values[start + i * stride];
                    if v.is_nan() {
                        continue;
                    }
                    least = least.min(*v);
                    *v = least;
                }
            }
        }
        self.measured_above = original
            .iter()
            .zip(&self.values)
            .enumerate()
            .filter(|(_, (m, e))| !m.is_nan() && m > e)
            .map(|(i, (m, _))| (i, *m))
            .collect();
    }

    /// The measured latency at flat index `i` (NaN for a hole).
    fn measured(&self, i: usize) -> f64 {
        match self.measured_above.binary_search_by_key(&i, |(j, _)| *j) {
            Ok(k) => self.measured_above[k].1,
            Err(_) => self.values.get(i).copied().unwrap_or(f64::NAN),
        }
    }

    /// Whether the envelope lowered the measurement at flat index `i`.
    fn lowered(&self, i: usize) -> bool {
        self.measured_above.binary_search_by_key(&i, |(j, _)| *j).is_ok()
    }

    /// The sorted grid values of each axis.
    #[must_use]
    pub fn axes(&self) -> &[Vec<u64>] {
        &self.axes
    }

    /// Number of measured grid points.
    #[must_use]
    pub fn measured_points(&self) -> usize {
        self.measured_points
    }

    /// The measured latency at exactly these coordinates, if any.
    #[must_use]
    pub fn exact(&self, coords: &[u64]) -> Option<f64> {
        let mut idx = 0;
        for (d, v) in coords.iter().enumerate() {
            let i = self.axes.get(d)?.binary_search(v).ok()?;
            idx = idx * self.axes[d].len() + i;
        }
        Some(self.measured(idx)).filter(|v| !v.is_nan())
    }

    #[allow(clippy::cast_precision_loss, clippy::float_cmp)] // Grid values are integers; hits are exact.
    #[inline]
    fn bracket(axis: &[u64], x: f64, scale: Scale) -> Bracket {
        let n = axis.len();
        let val = |i: usize| axis[i] as f64;
        if x <= val(0) {
            return Bracket { lo: 0, hi: 0, t: 0.0, at: val(0) };
        }
        if x >= val(n - 1) {
            return Bracket { lo: n - 1, hi: n - 1, t: 0.0, at: val(n - 1) };
        }
        // First index with value >= x.
        let hi = axis.partition_point(|v| (*v as f64) < x);
        if val(hi) == x {
            return Bracket { lo: hi, hi, t: 0.0, at: x };
        }
        let lo = hi - 1;
        let (a, b) = (scale.apply(val(lo)), scale.apply(val(hi)));
        Bracket { lo, hi, t: (scale.apply(x) - a) / (b - a), at: x }
    }

    /// Latency (ms) at `x` with how it was obtained, or `None` when no measured point is near.
    /// `scales` gives each axis' weighting; `sol` gives the speed-of-light time (any
    /// consistent unit) at a coordinate, used only to scale beyond the measured range.
    pub fn lookup(&self, x: &[f64], scales: &[Scale], sol: impl Fn(&[f64]) -> f64) -> Option<(f64, Source)> {
        self.lookup_cached(x, scales, sol, &mut LookupCache::default())
    }

    /// [`Grid::lookup`] for a caller that asks about nearby points again and again (decode
    /// attention as KV grows by a token a step): each axis' bracket is kept in `cache` and
    /// reused while the coordinate stays inside it. The answer is bit for bit the same.
    pub fn lookup_cached(
        &self,
        x: &[f64],
        scales: &[Scale],
        sol: impl Fn(&[f64]) -> f64,
        cache: &mut LookupCache,
    ) -> Option<(f64, Source)> {
        let dims = self.axes.len();
        if x.len() != dims || scales.len() != dims || dims == 0 || dims > MAX_DIMS {
            return None;
        }
        // The brackets are computed in the cache itself: lookups run on every simulated step.
        for (d, xv) in x.iter().enumerate() {
            if !(xv.is_finite() && *xv > 0.0) || self.axes[d].is_empty() {
                cache.valid = false;
                return None;
            }
            let kept = if cache.valid { cache.rebracket(d, &self.axes[d], *xv, scales[d]) } else { None };
            cache.br[d] = kept.unwrap_or_else(|| Self::bracket(&self.axes[d], *xv, scales[d]));
            cache.x[d] = *xv;
        }
        cache.valid = true;
        let br = &cache.br[..dims];
        if !br.iter().zip(x).all(|(b, xv)| b.hits(*xv)) {
            return self.blend(br, x, sol);
        }
        let mut lo = [0usize; MAX_DIMS];
        for (l, b) in lo.iter_mut().zip(br.iter()) {
            *l = b.lo;
        }
        if let Some(found) = self.at(&lo[..dims]) {
            return Some(found);
        }
        // The exact point is a hole: let its neighbours stand in (on a copy, so the cache
        // keeps the query's own brackets).
        let mut br_store = cache.br;
        let br = &mut br_store[..dims];
        for (d, b) in br.iter_mut().enumerate() {
            let axis = &self.axes[d];
            #[allow(clippy::cast_precision_loss)]
            if b.lo > 0 && b.lo + 1 < axis.len() {
                let (a, c) = (scales[d].apply(axis[b.lo - 1] as f64), scales[d].apply(axis[b.lo + 1] as f64));
                let t = (scales[d].apply(b.at) - a) / (c - a);
                *b = Bracket { lo: b.lo - 1, hi: b.lo + 1, t, at: b.at };
            } else if b.lo > 0 {
                *b = Bracket { lo: b.lo - 1, hi: b.lo - 1, t: 0.0, at: axis[b.lo - 1] as f64 };
            } else if b.lo + 1 < axis.len() {
                *b = Bracket { lo: 1, hi: 1, t: 0.0, at: axis[1] as f64 };
            }
        }
        self.blend(br, x, sol)
    }

    /// The interpolated latency at `x` from each axis' bracket.
    #[inline]
    fn blend(&self, br: &[Bracket], x: &[f64], sol: impl Fn(&[f64]) -> f64) -> Option<(f64, Source)> {
        // Blend the corners of the bracketing cell. Only axes that are not pinned to one
        // grid line have two sides; corners are visited in the order of a mask over all axes
        // (pinned axes never take their upper side), and each weight is the product of the
        // free axes' sides in axis order.
        let stride = &self.strides;
        let mut base = 0usize;
        let (mut free, mut nfree) = ([0usize; MAX_DIMS], 0usize);
        for (d, b) in br.iter().enumerate() {
            base += b.lo * stride[d];
            if b.lo != b.hi {
                free[nfree] = d;
                nfree += 1;
            }
        }
        let corner = |mask: usize| {
            let (mut w, mut flat) = (1.0, base);
            for (j, &d) in free[..nfree].iter().enumerate() {
                let b = br[d];
                if mask >> j & 1 == 1 {
                    w *= b.t;
                    flat += (b.hi - b.lo) * stride[d];
                } else {
                    w *= 1.0 - b.t;
                }
            }
            (w, flat)
        };
        let (mut acc, mut wsum, mut holes) = (0.0, 0.0, false);
        for mask in 0..(1usize << nfree) {
            let (w, flat) = corner(mask);
            if w <= 0.0 {
                continue;
            }
            if let Some(lat) = self.values.get(flat).copied().filter(|v| !v.is_nan()) {
                acc += w * lat;
                wsum += w;
            } else {
                holes = true;
            }
        }
        if wsum <= 0.0 && !holes {
            return None;
        }
        // Unmeasured corners, added after the measured ones (rare: only near a table's edge).
        let mut borrowed = false;
        for mask in (0..(1usize << nfree)).filter(|_| holes) {
            let (w, flat) = corner(mask);
            if w <= 0.0 || self.values.get(flat).is_some_and(|v| !v.is_nan()) {
                continue;
            }
            if let Some(lat) = self.borrow_corner(br, &free[..nfree], mask, &sol) {
                acc += w * lat;
                wsum += w;
                borrowed = true;
            }
        }
        if wsum <= 0.0 {
            return None;
        }
        #[allow(clippy::float_cmp)] // `at` is either the query itself or a clamped copy.
        let clamped = br.iter().zip(x).any(|(b, xv)| b.at != *xv);
        finish_blend(acc / wsum, x, clamped, borrowed, || bracket_points(br), sol)
    }

    /// A time for the unmeasured corner `mask` of a blend's cell, from a measured grid point
    /// scaled by the speed-of-light ratio between the two: the cell's measured corner that
    /// differs from it on the fewest axes (the first in mask order among equals), else, when
    /// the cell has none (an axis sits on a grid line whose points are all missing), the
    /// nearest measured point along one axis from the corner, at most
    /// [`MAX_BORROW_STEPS`] grid lines away, toward less work first. The tables leave out
    /// the largest shapes (AIConfigurator's decode attention stops near 512 K cached tokens
    /// per batch: 256 requests at 1,023 tokens, 64 at 8,191), and dropping those corners
    /// would time 240 requests at 2,700 tokens as the 128-request corners alone, half the
    /// work. `None` when no donor is found or the ratio is not a positive finite number.
    #[allow(clippy::cast_precision_loss)]
    fn borrow_corner(
        &self,
        br: &[Bracket],
        free: &[usize],
        mask: usize,
        sol: impl Fn(&[f64]) -> f64,
    ) -> Option<f64> {
        let dims = br.len();
        // Grid indices of a cell corner.
        let index_of = |m: usize| {
            let mut idx = [0usize; MAX_DIMS];
            for (d, b) in br.iter().enumerate() {
                let upper = free.iter().position(|&f| f == d).is_some_and(|j| m >> j & 1 == 1);
                idx[d] = if upper { b.hi } else { b.lo };
            }
            idx
        };
        let flat_of = |idx: &[usize; MAX_DIMS]| (0..dims).map(|d| idx[d] * self.strides[d]).sum::<usize>();
        let measured =
            |idx: &[usize; MAX_DIMS]| self.values.get(flat_of(idx)).copied().filter(|v| !v.is_nan());
        let to = index_of(mask);
        let mut donor = None;
        let mut best_dist = u32::MAX;
        for m in 0..(1usize << free.len()) {
            let dist = (m ^ mask).count_ones();
            if m == mask || dist >= best_dist {
                continue;
            }
            let from = index_of(m);
            if let Some(lat) = measured(&from) {
                donor = Some((from, lat));
                best_dist = dist;
            }
        }
        'lines: for steps in 1..=MAX_BORROW_STEPS {
            if donor.is_some() {
                break;
            }
            for up in [false, true] {
                for d in 0..dims {
                    let i = if up { Some(to[d] + steps) } else { to[d].checked_sub(steps) };
                    let Some(i) = i.filter(|&i| i < self.axes[d].len()) else { continue };
                    let mut from = to;
                    from[d] = i;
                    if let Some(lat) = measured(&from) {
                        donor = Some((from, lat));
                        break 'lines;
                    }
                }
            }
        }
        let (from, lat) = donor?;
        let coords = |idx: &[usize; MAX_DIMS]| {
            let mut at = [0.0f64; MAX_DIMS];
            for d in 0..dims {
                at[d] = self.axes[d][idx[d]] as f64;
            }
            at
        };
        let ratio = sol(&coords(&to)[..dims]) / sol(&coords(&from)[..dims]);
        (ratio.is_finite() && ratio > 0.0).then_some(lat * ratio)
    }

    /// A lookup's answer on a grid point: the measurement, or the envelope where a
    /// measurement of more work was faster.
    fn at(&self, idx: &[usize]) -> Option<(f64, Source)> {
        let mut flat = 0;
        for (d, i) in idx.iter().enumerate() {
            flat = flat * self.axes[d].len() + i;
        }
        let v = self.values.get(flat).copied().filter(|v| !v.is_nan())?;
        Some((v, if self.lowered(flat) { Source::Interpolated } else { Source::Measured }))
    }
}

/// The points brackets evaluate a blend at (each axis' query or the edge it was clamped to).
fn bracket_points(br: &[Bracket]) -> [f64; MAX_DIMS] {
    let mut at = [0.0f64; MAX_DIMS];
    for (a, b) in at.iter_mut().zip(br) {
        *a = b.at;
    }
    at
}

/// The end of a blend: the weighted mean `lat` of the corners, scaled by the speed-of-light
/// ratio `sol(query) / sol(clamped point)` when some axis was clamped to the grid's edge.
/// Clamping, or a corner borrowed from a measured one ([`Grid::borrow_corner`]), makes the
/// answer extrapolated.
#[inline]
fn finish_blend(
    mut lat: f64,
    x: &[f64],
    clamped: bool,
    borrowed: bool,
    at: impl FnOnce() -> [f64; MAX_DIMS],
    sol: impl Fn(&[f64]) -> f64,
) -> Option<(f64, Source)> {
    if clamped {
        let at = at();
        let (s_query, s_at) = (sol(x), sol(&at[..x.len()]));
        if !(s_query.is_finite() && s_at.is_finite() && s_query > 0.0 && s_at > 0.0) {
            return None;
        }
        lat *= s_query / s_at;
    }
    if !(lat.is_finite() && lat > 0.0) {
        return None;
    }
    Some((lat, if clamped || borrowed { Source::Extrapolated } else { Source::Interpolated }))
}

/// The op families servesim reads, with their key and axis columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Dense GEMM `m × k` by `k × n`.
    Gemm,
    /// Prefill (context) attention.
    ContextAttention,
    /// Decode (generation) attention.
    GenerationAttention,
    /// The engine's custom all-reduce.
    AllReduce,
    /// NCCL collectives (all-reduce, all-gather, reduce-scatter, all-to-all).
    Nccl,
    /// Fused MoE experts of one layer.
    Moe,
    /// Multi-head latent attention, prefill (DeepSeek family).
    ContextMla,
    /// Multi-head latent attention, decode.
    GenerationMla,
    /// Routed experts of one layer behind DeepEP's normal (prefill) dispatch: SGLang's
    /// DeepGEMM grouped kernels for extend batches under attention data parallelism.
    DeepEpContextMoe,
    /// The same behind DeepEP's low-latency (decode) dispatch: DeepGEMM's masked kernels.
    DeepEpGenerationMoe,
    /// DeepEP's normal-mode dispatch and combine (SGLang's extend batches under attention
    /// data parallelism), by tokens a rank, within one node.
    DeepEpNormal,
    /// DeepEP's low-latency dispatch and combine (SGLang's decode batches), by tokens a rank.
    DeepEpLowLatency,
    /// Gated DeltaNet kernels of one linear-attention layer (Qwen3.5), by kernel: the
    /// prompt's causal convolution and chunked scan, and the decode step's convolution update
    /// and recurrence; per-GPU head counts.
    Gdn,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 13] = [
        Family::Gemm,
        Family::ContextAttention,
        Family::GenerationAttention,
        Family::AllReduce,
        Family::Nccl,
        Family::Moe,
        Family::ContextMla,
        Family::GenerationMla,
        Family::DeepEpContextMoe,
        Family::DeepEpGenerationMoe,
        Family::DeepEpNormal,
        Family::DeepEpLowLatency,
        Family::Gdn,
    ];

    /// The [`Family::Gdn`] kernels: a prompt's causal convolution and chunked scan, a decode
    /// step's convolution update and recurrence.
    pub const GDN_KERNELS: [&'static str; 4] =
        ["context_conv", "context_scan", "generation_conv", "generation_recurrence"];

    /// File stem and report name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Family::Gemm => "gemm",
            Family::ContextAttention => "context_attention",
            Family::GenerationAttention => "generation_attention",
            Family::AllReduce => "allreduce",
            Family::Nccl => "nccl",
            Family::Moe => "moe",
            Family::ContextMla => "context_mla",
            Family::GenerationMla => "generation_mla",
            Family::DeepEpContextMoe => "deepep_context_moe",
            Family::DeepEpGenerationMoe => "deepep_generation_moe",
            Family::DeepEpNormal => "deepep_normal",
            Family::DeepEpLowLatency => "deepep_low_latency",
            Family::Gdn => "gdn",
        }
    }

    /// The family with this name.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == s)
    }

    /// Categorical columns, in slice-key order.
    #[must_use]
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            Family::Gemm => &["dtype"],
            Family::ContextAttention | Family::GenerationAttention => {
                &["kv_dtype", "attn_dtype", "head_dim", "window"]
            }
            Family::AllReduce => &["dtype", "mode"],
            Family::Nccl => &["op", "dtype"],
            Family::Moe | Family::DeepEpContextMoe | Family::DeepEpGenerationMoe => {
                &["dtype", "distribution", "hidden", "inter", "topk", "experts", "moe_tp", "moe_ep"]
            }
            Family::ContextMla | Family::GenerationMla => &["kv_dtype", "mla_dtype"],
            // `phase`: dispatch or combine; `sms`: the streaming multiprocessors the normal
            // kernels were given.
            Family::DeepEpNormal => &["phase", "sms", "hidden", "topk", "experts"],
            Family::DeepEpLowLatency => &["phase", "hidden", "topk", "experts"],
            // `kernel`: one of [`Family::GDN_KERNELS`].
            Family::Gdn => &["kernel", "hidden", "k_heads", "k_head_dim", "v_heads", "v_head_dim", "conv"],
        }
    }

    /// How each axis weights its neighbours: prefill attention is quadratic in the prompt.
    #[must_use]
    pub fn scales(self) -> &'static [Scale] {
        const L: Scale = Scale::Linear;
        match self {
            Family::Gemm => &[L, L, L],
            Family::ContextAttention => &[L, Scale::Square, L, L],
            Family::GenerationAttention => &[L, L, L, L],
            Family::AllReduce | Family::Nccl => &[L, L],
            Family::Moe
            | Family::DeepEpContextMoe
            | Family::DeepEpGenerationMoe
            | Family::DeepEpNormal
            | Family::DeepEpLowLatency => &[L],
            Family::ContextMla => &[L, Scale::Square, L],
            Family::GenerationMla => &[L, L, L],
            Family::Gdn => &[L, L],
        }
    }

    /// Axes along which more is more work, so latency never falls
    /// ([`Grid::monotone_envelope`]): tokens, batch, context length, message size. Head
    /// counts and GPU counts change the kernel's shape, not just its size, and are left be.
    #[must_use]
    pub fn monotone(self) -> &'static [bool] {
        match self {
            Family::Gemm => &[true, true, true],
            Family::ContextAttention | Family::GenerationAttention => &[true, true, false, false],
            Family::AllReduce | Family::Nccl => &[false, true],
            Family::Moe
            | Family::DeepEpContextMoe
            | Family::DeepEpGenerationMoe
            | Family::DeepEpNormal
            | Family::DeepEpLowLatency => &[true],
            Family::ContextMla | Family::GenerationMla => &[true, true, false],
            Family::Gdn => &[true, true],
        }
    }

    /// Numeric axes, in grid order.
    #[must_use]
    pub fn axes(self) -> &'static [&'static str] {
        match self {
            Family::Gemm => &["m", "n", "k"],
            Family::ContextAttention => &["batch", "isl", "heads", "kv_heads"],
            Family::GenerationAttention => &["batch", "kv_len", "heads", "kv_heads"],
            Family::AllReduce => &["gpus", "message_elems"],
            Family::Nccl => &["gpus", "message_bytes"],
            Family::Moe | Family::DeepEpContextMoe | Family::DeepEpGenerationMoe => &["tokens"],
            Family::DeepEpNormal | Family::DeepEpLowLatency => &["tokens_per_rank"],
            Family::ContextMla => &["batch", "isl", "heads"],
            Family::GenerationMla => &["batch", "kv_len", "heads"],
            // Decode kernels have one token a sequence: `seq_len` 1.
            Family::Gdn => &["batch", "seq_len"],
        }
    }
}

/// One op family's measurements, sliced by key.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// Which family.
    pub family: Family,
    slices: BTreeMap<Vec<String>, Rc<Grid>>,
    /// Rows read.
    pub rows: usize,
    /// Rows dropped because an earlier row had the same key and coordinates.
    pub duplicates: usize,
}

/// One row of a table: slice key, axis coordinates, latency in ms.
pub type Row = (Vec<String>, Vec<u64>, f64);

impl Table {
    /// Builds a table from rows (keys and axes in [`Family::keys`] / [`Family::axes`] order).
    ///
    /// # Errors
    /// When a row has the wrong shape or a grid cannot be built (the message names the slice).
    pub fn from_rows(family: Family, rows: Vec<Row>) -> Result<Table, TableError> {
        let (nk, na) = (family.keys().len(), family.axes().len());
        let total = rows.len();
        let mut by_key: BTreeMap<Vec<String>, Vec<(Vec<u64>, f64)>> = BTreeMap::new();
        for (k, a, lat) in rows {
            if k.len() != nk || a.len() != na {
                return Err(TableError {
                    message: format!(
                        "{}: row with {} keys and {} axes, expected {nk} and {na}",
                        family.name(),
                        k.len(),
                        a.len()
                    ),
                });
            }
            by_key.entry(k).or_default().push((a, lat));
        }
        let mut slices = BTreeMap::new();
        let mut duplicates = 0;
        for (k, pts) in by_key {
            let (mut g, dup) = Grid::from_points(na, &pts).map_err(|e| TableError {
                message: format!("{} slice {}: {}", family.name(), k.join("/"), e.message),
            })?;
            g.monotone_envelope(family.monotone());
            duplicates += dup;
            slices.insert(k, Rc::new(g));
        }
        Ok(Table { family, slices, rows: total, duplicates })
    }

    /// Builds a table from rows already grouped by slice key: `(key, coordinates laid end to
    /// end, latencies)`, with `rows` rows in all. Readers use it to avoid a vector per row.
    ///
    /// # Errors
    /// As [`Table::from_rows`].
    pub fn from_groups(
        family: Family,
        groups: Vec<(Vec<String>, Vec<u64>, Vec<f64>)>,
        rows: usize,
    ) -> Result<Table, TableError> {
        let (nk, na) = (family.keys().len(), family.axes().len());
        let mut slices = BTreeMap::new();
        let mut duplicates = 0;
        for (k, coords, lats) in groups {
            if k.len() != nk {
                return Err(TableError {
                    message: format!(
                        "{}: slice key {k:?} has {} parts, expected {nk}",
                        family.name(),
                        k.len()
                    ),
                });
            }
            let (mut g, dup) = Grid::from_flat(na, &coords, &lats).map_err(|e| TableError {
                message: format!("{} slice {}: {}", family.name(), k.join("/"), e.message),
            })?;
            g.monotone_envelope(family.monotone());
            duplicates += dup;
            if slices.insert(k.clone(), Rc::new(g)).is_some() {
                return Err(TableError {
                    message: format!("{}: slice {} given twice", family.name(), k.join("/")),
                });
            }
        }
        Ok(Table { family, slices, rows, duplicates })
    }

    /// The grid of one slice.
    #[must_use]
    pub fn slice(&self, key: &[&str]) -> Option<&Grid> {
        self.slice_rc(key).map(|g| &**g)
    }

    /// The grid of one slice, shared (timers keep the grids they look up on every step).
    #[must_use]
    pub fn slice_rc(&self, key: &[&str]) -> Option<&Rc<Grid>> {
        self.slices.iter().find(|(k, _)| k.iter().map(String::as_str).eq(key.iter().copied())).map(|(_, g)| g)
    }

    /// All slices, in key order.
    pub fn slices(&self) -> impl Iterator<Item = (&Vec<String>, &Grid)> {
        self.slices.iter().map(|(k, g)| (k, &**g))
    }
}

#[cfg(test)]
mod tests;
