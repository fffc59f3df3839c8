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
//! - Missing corners are dropped and the weights renormalised; if an axis hits a grid value
//!   exactly but that point is missing, its two neighbours stand in.
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
        let (mut acc, mut wsum) = (0.0, 0.0);
        for mask in 0..(1usize << nfree) {
            let mut w = 1.0;
            let mut flat = base;
            for (j, &d) in free[..nfree].iter().enumerate() {
                let b = br[d];
                if mask >> j & 1 == 1 {
                    w *= b.t;
                    flat += (b.hi - b.lo) * stride[d];
                } else {
                    w *= 1.0 - b.t;
                }
            }
            if w <= 0.0 {
                continue;
            }
            if let Some(lat) = self.values.get(flat).copied().filter(|v| !v.is_nan()) {
                acc += w * lat;
                wsum += w;
            }
        }
        if wsum <= 0.0 {
            return None;
        }
        #[allow(clippy::float_cmp)] // `at` is either the query itself or a clamped copy.
        let clamped = br.iter().zip(x).any(|(b, xv)| b.at != *xv);
        finish_blend(acc / wsum, x, clamped, || bracket_points(br), sol)
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
#[inline]
fn finish_blend(
    mut lat: f64,
    x: &[f64],
    clamped: bool,
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
    Some((lat, if clamped { Source::Extrapolated } else { Source::Interpolated }))
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
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 8] = [
        Family::Gemm,
        Family::ContextAttention,
        Family::GenerationAttention,
        Family::AllReduce,
        Family::Nccl,
        Family::Moe,
        Family::ContextMla,
        Family::GenerationMla,
    ];

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
            Family::Moe => {
                &["dtype", "distribution", "hidden", "inter", "topk", "experts", "moe_tp", "moe_ep"]
            }
            Family::ContextMla | Family::GenerationMla => &["kv_dtype", "mla_dtype"],
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
            Family::Moe => &[L],
            Family::ContextMla => &[L, Scale::Square, L],
            Family::GenerationMla => &[L, L, L],
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
            Family::Moe => &[true],
            Family::ContextMla | Family::GenerationMla => &[true, true, false],
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
            Family::Moe => &["tokens"],
            Family::ContextMla => &["batch", "isl", "heads"],
            Family::GenerationMla => &["batch", "kv_len", "heads"],
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
mod tests {
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
            Grid::from_points(2, &pts(&[(1, 1, 0.1), (1, 4, 0.2), (4, 1, 0.3), (4, 4, 0.123_456_789)]))
                .unwrap();
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
    fn holes_are_skipped_and_exact_holes_use_neighbours() {
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
}
