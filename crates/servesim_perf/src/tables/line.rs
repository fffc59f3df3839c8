//! Lookups along one grid axis with the others fixed ([`GridLine`]): a decode run's
//! attention, where batch and heads stay and the KV length grows by a token a step.

use super::{bracket_points, finish_blend, Bracket, Grid, LookupCache, Scale, Source, MAX_DIMS};

/// Lookups along one axis of a grid with every other coordinate fixed: decode attention over
/// a run of steps, where the batch and head counts stay and the KV length grows. Each answer
/// is bit for bit [`Grid::lookup`]'s: the fixed axes are bracketed once, and when at most
/// one of them lies between grid lines (before the varying axis) and the rest sit on one,
/// a step's blend visits the same corners in the same order with the same weights as
/// `Grid::blend` (a pinned axis' weight is 1, and multiplying by 1 is exact). Anything
/// else (exact hits, holes, other shapes) takes [`Grid::lookup_cached`]. One line serves
/// one grid.
#[derive(Clone, Copy, Debug)]
pub struct GridLine {
    x: [f64; MAX_DIMS],
    scales: [Scale; MAX_DIMS],
    dims: usize,
    vary: usize,
    /// The fixed axes' brackets (the varying axis' entry is the last lookup's).
    br: [Bracket; MAX_DIMS],
    /// Whether the fixed part fits the fast blend, and its pieces: the free fixed axis
    /// (its stride and weight of the upper side; stride 0 when none is free), the flat
    /// index of the fixed axes' lower corner, and whether a fixed axis was clamped.
    fast: bool,
    free_stride: usize,
    free_t: f64,
    base: usize,
    fixed_clamped: bool,
    fixed_hit: bool,
    /// The varying axis' interval when the last query was strictly inside one.
    cell: Option<LineCell>,
    fallback: LookupCache,
}

/// An interval of a line's varying axis and what a blend inside it reads.
#[derive(Clone, Copy, Debug)]
struct LineCell {
    /// Its edges as coordinates; the scaled lower edge and width, as [`Grid::bracket`]
    /// computes a weight from them.
    lo_x: f64,
    hi_x: f64,
    a: f64,
    w: f64,
    /// Latencies at the cell's corners in blend order, `2 × varying side + fixed side`
    /// (NaN where nothing was measured; the upper fixed side unused when no fixed axis is free).
    corners: [f64; 4],
}

impl GridLine {
    /// [`Grid::lookup_on`]'s answer at `xv` when `xv` lies strictly inside the interval of
    /// the line's last lookup (`None` when it does not): `Grid::blend`'s corners, weights and
    /// sums in its order, with nothing to bracket. A decode run's steps mostly land here.
    #[inline(always)]
    pub fn in_cell(&self, xv: f64, sol: impl Fn(&[f64]) -> f64) -> Option<Option<(f64, Source)>> {
        let c = self.cell.as_ref()?;
        if !(xv > c.lo_x && xv < c.hi_x) {
            return None;
        }
        let (v, dims) = (self.vary, self.dims);
        let t = (self.scales[v].apply(xv) - c.a) / c.w;
        let (acc, wsum) = blend_corners(&c.corners, &[1.0 - t, t], self.free_t, self.free_stride != 0);
        if wsum <= 0.0 {
            return Some(None);
        }
        let mut x = self.x;
        x[v] = xv;
        let at = || {
            let mut at = bracket_points(&self.br[..dims]);
            at[v] = xv;
            at
        };
        Some(finish_blend(acc / wsum, &x[..dims], self.fixed_clamped, false, at, sol))
    }

    /// [`GridLine::in_cell`]'s latencies at `xs` while each is a plain blend: the point
    /// strictly inside the cell, no fixed axis clamped, the latency positive and finite (its
    /// source is then [`Source::Interpolated`]). Writes them to `out` and returns how many
    /// leading points it answered; the first it could not is left to `in_cell` and the full
    /// lookup. The same arithmetic in the same order as `in_cell`, so each answer is bit for
    /// bit its; the points are blended without branches first and checked after, so the
    /// divisions of neighbouring points overlap.
    pub fn plain_in_cell_many(&self, xs: &[f64], out: &mut [f64]) -> usize {
        let Some(c) = self.cell.as_ref() else { return 0 };
        if self.fixed_clamped {
            return 0;
        }
        let n = xs.len().min(out.len());
        let (scale, free) = (self.scales[self.vary], self.free_stride != 0);
        for (&xv, o) in xs[..n].iter().zip(&mut out[..n]) {
            let t = (scale.apply(xv) - c.a) / c.w;
            let (acc, wsum) = blend_corners(&c.corners, &[1.0 - t, t], self.free_t, free);
            *o = if wsum > 0.0 { acc / wsum } else { f64::NAN };
        }
        xs[..n]
            .iter()
            .zip(&out[..n])
            .take_while(|&(&xv, &lat)| xv > c.lo_x && xv < c.hi_x && lat.is_finite() && lat > 0.0)
            .count()
    }
}

impl Grid {
    /// A line through `x` along axis `vary` (see [`GridLine`]); `None` when `x` is not a
    /// point [`Grid::lookup`] can answer at (wrong length, a non-positive coordinate).
    #[must_use]
    #[allow(clippy::float_cmp)] // `at` is either the query itself or a grid value.
    pub fn line(&self, x: &[f64], vary: usize, scales: &[Scale]) -> Option<GridLine> {
        let dims = self.axes.len();
        if x.len() != dims || scales.len() != dims || dims == 0 || dims > MAX_DIMS || vary >= dims {
            return None;
        }
        let mut line = GridLine {
            x: [0.0; MAX_DIMS],
            scales: [Scale::Linear; MAX_DIMS],
            dims,
            vary,
            br: [Bracket::default(); MAX_DIMS],
            fast: true,
            free_stride: 0,
            free_t: 0.0,
            base: 0,
            fixed_clamped: false,
            fixed_hit: true,
            cell: None,
            fallback: LookupCache::default(),
        };
        let mut free = 0;
        for d in 0..dims {
            let xv = x[d];
            if !(xv.is_finite() && xv > 0.0) || self.axes[d].is_empty() {
                return None;
            }
            line.x[d] = xv;
            line.scales[d] = scales[d];
            if d == vary {
                continue;
            }
            let b = Self::bracket(&self.axes[d], xv, scales[d]);
            line.base += b.lo * self.strides[d];
            line.fixed_clamped |= b.at != xv;
            line.fixed_hit &= b.hits(xv);
            if b.lo != b.hi {
                free += 1;
                line.free_stride = (b.hi - b.lo) * self.strides[d];
                line.free_t = b.t;
                line.fast &= d < vary;
            }
            line.br[d] = b;
        }
        line.fast &= free <= 1;
        Some(line)
    }

    /// [`Grid::lookup`] at the line's point with the varying coordinate set to `xv`.
    #[allow(clippy::float_cmp, clippy::cast_precision_loss)]
    pub fn lookup_on(
        &self,
        line: &mut GridLine,
        xv: f64,
        sol: impl Fn(&[f64]) -> f64,
    ) -> Option<(f64, Source)> {
        let (v, dims) = (line.vary, line.dims);
        line.x[v] = xv;
        if !(xv.is_finite() && xv > 0.0) {
            line.cell = None;
            return None;
        }
        if let Some(found) = line.in_cell(xv, &sol) {
            return found;
        }
        let b = Self::bracket(&self.axes[v], xv, line.scales[v]);
        line.br[v] = b;
        line.cell = None;
        if !line.fast || (line.fixed_hit && b.hits(xv)) {
            return self.lookup_cached(&line.x[..dims], &line.scales[..dims], sol, &mut line.fallback);
        }
        let vs = (b.hi - b.lo) * self.strides[v];
        let fs = line.free_stride;
        let flat0 = line.base + b.lo * self.strides[v];
        let at = |i: usize| self.values.get(i).copied().unwrap_or(f64::NAN);
        let corners = [at(flat0), at(flat0 + fs), at(flat0 + vs), at(flat0 + vs + fs)];
        if corners.iter().any(|c| c.is_nan()) {
            // A hole's corner is borrowed from a measured one, which only the full blend does.
            return self.lookup_cached(&line.x[..dims], &line.scales[..dims], sol, &mut line.fallback);
        }
        if b.lo != b.hi {
            let (lo_x, hi_x) = (self.axes[v][b.lo] as f64, self.axes[v][b.hi] as f64);
            let a = line.scales[v].apply(lo_x);
            line.cell = Some(LineCell { lo_x, hi_x, a, w: line.scales[v].apply(hi_x) - a, corners });
        }
        // The varying axis may sit on a grid line (one side, weight 1).
        let vw: &[f64] = if vs == 0 { &[1.0] } else { &[1.0 - b.t, b.t] };
        #[allow(clippy::float_cmp)] // `at` is either the query itself or a grid value.
        let clamped = line.fixed_clamped || b.at != xv;
        line_blend(line, &corners, vw, clamped, sol)
    }
}

/// [`Grid::blend`] over a line's cell: `corners` (index `2 × varying side + fixed side`)
/// weighted by `vw` (the varying axis' sides) times the free fixed axis' sides, visited,
/// multiplied and summed in `blend`'s order, then [`finish_blend`].
#[inline]
fn line_blend(
    line: &GridLine,
    corners: &[f64; 4],
    vw: &[f64],
    clamped: bool,
    sol: impl Fn(&[f64]) -> f64,
) -> Option<(f64, Source)> {
    let (acc, wsum) = blend_corners(corners, vw, line.free_t, line.free_stride != 0);
    if wsum <= 0.0 {
        return None;
    }
    let dims = line.dims;
    finish_blend(acc / wsum, &line.x[..dims], clamped, false, || bracket_points(&line.br[..dims]), sol)
}

/// The weighted sum and total weight of a line cell's `corners` (index `2 × varying side +
/// fixed side`): varying sides weighted `vw`, the free fixed axis' sides (when `free`) `1 − t`
/// and `t`, in [`Grid::blend`]'s order; NaN corners and zero weights are skipped.
#[inline(always)]
fn blend_corners(corners: &[f64; 4], vw: &[f64], t: f64, free: bool) -> (f64, f64) {
    let fw = [1.0 - t, t];
    let sides = if free { 2 } else { 1 };
    let (mut acc, mut wsum) = (0.0, 0.0);
    for (vside, wv) in vw.iter().enumerate() {
        for (fside, fwv) in fw.iter().enumerate().take(sides) {
            let w = if free { fwv * wv } else { *wv };
            let lat = corners[2 * vside + fside];
            if w > 0.0 && !lat.is_nan() {
                acc += w * lat;
                wsum += w;
            }
        }
    }
    (acc, wsum)
}
