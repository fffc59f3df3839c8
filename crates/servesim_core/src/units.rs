//! Simulated time in integer nanoseconds.
//!
//! Time never goes through `f64` inside the event loop: performance models return
//! durations as `f64` milliseconds, which are rounded once, explicitly, into [`SimDur`].

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point on the simulated clock, in nanoseconds since the run started.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(u64);

/// A span of simulated time, in nanoseconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimDur(u64);

/// Nanoseconds per millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;

impl SimTime {
    /// The start of every run.
    pub const ZERO: SimTime = SimTime(0);
    /// The largest representable time (about 584 years), used as "never".
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// A time from nanoseconds since the start.
    #[must_use]
    pub const fn from_ns(ns: u64) -> Self {
        SimTime(ns)
    }

    /// Nanoseconds since the start.
    #[must_use]
    pub const fn as_ns(self) -> u64 {
        self.0
    }

    /// A time `ms` whole milliseconds after the start.
    #[must_use]
    pub const fn from_ms(ms: u64) -> Self {
        SimTime(ms.saturating_mul(NS_PER_MS))
    }

    /// Milliseconds since the start, for reports.
    #[must_use]
    #[allow(clippy::cast_precision_loss)] // 2^53 ns is 104 days of simulated time.
    pub fn as_ms_f64(self) -> f64 {
        self.0 as f64 / NS_PER_MS as f64
    }

    /// The time `d` later, saturating at [`SimTime::MAX`].
    #[must_use]
    pub const fn saturating_add(self, d: SimDur) -> Self {
        SimTime(self.0.saturating_add(d.0))
    }

    /// The span from `earlier` to `self` (zero if `earlier` is later).
    #[must_use]
    pub const fn since(self, earlier: SimTime) -> SimDur {
        SimDur(self.0.saturating_sub(earlier.0))
    }
}

/// 2^63 as a double (exact: a power of two).
#[allow(clippy::cast_precision_loss)]
const TWO_POW_63: f64 = (1u64 << 63) as f64;

/// `libm::round` for `0 <= x < 2^64` as an integer, without its bit-level emulation (every
/// simulated step is rounded): truncation is exact, and so is the fraction left below 2^53
/// (above it every double is an integer and the fraction is 0).
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss,
    clippy::cast_possible_wrap
)]
#[inline]
fn round_half_away(x: f64) -> u64 {
    // Below 2^63 (every duration shorter than 292 years) the signed conversions are single
    // instructions on x86-64, where the unsigned ones take a dozen; the values are the same.
    if x < TWO_POW_63 {
        let t = x as i64;
        return if x - t as f64 >= 0.5 { t as u64 + 1 } else { t as u64 };
    }
    let t = x as u64;
    if x - t as f64 >= 0.5 {
        t + 1
    } else {
        t
    }
}

impl SimDur {
    /// No time at all.
    pub const ZERO: SimDur = SimDur(0);

    /// A duration of `ns` nanoseconds.
    #[must_use]
    pub const fn from_ns(ns: u64) -> Self {
        SimDur(ns)
    }

    /// A duration of `ms` whole milliseconds.
    #[must_use]
    pub const fn from_ms(ms: u64) -> Self {
        SimDur(ms.saturating_mul(NS_PER_MS))
    }

    /// Rounds a model's millisecond figure to the nearest nanosecond.
    ///
    /// Negative and NaN inputs become zero and values beyond the clock saturate, so a
    /// faulty model can never move time backwards.
    #[must_use]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Range checked above the cast.
    #[inline]
    pub fn from_ms_f64(ms: f64) -> Self {
        let ns = ms * 1.0e6;
        if ns.is_nan() || ns <= 0.0 {
            SimDur(0)
        } else if ns >= 1.8e19 {
            SimDur(u64::MAX)
        } else {
            SimDur(round_half_away(ns))
        }
    }

    /// Rounds seconds to the nearest nanosecond (same rules as [`SimDur::from_ms_f64`]).
    #[must_use]
    #[inline]
    pub fn from_secs_f64(secs: f64) -> Self {
        Self::from_ms_f64(secs * 1.0e3)
    }

    /// Nanoseconds.
    #[must_use]
    pub const fn as_ns(self) -> u64 {
        self.0
    }

    /// Milliseconds, for reports.
    #[must_use]
    #[allow(clippy::cast_precision_loss)] // Exact below 2^53 ns.
    pub fn as_ms_f64(self) -> f64 {
        self.0 as f64 / NS_PER_MS as f64
    }

    /// Seconds, for rates.
    #[must_use]
    #[allow(clippy::cast_precision_loss)] // Exact below 2^53 ns.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / NS_PER_S as f64
    }

    /// Sum, saturating.
    #[must_use]
    pub const fn saturating_add(self, other: SimDur) -> Self {
        SimDur(self.0.saturating_add(other.0))
    }
}

impl Add<SimDur> for SimTime {
    type Output = SimTime;
    fn add(self, d: SimDur) -> SimTime {
        self.saturating_add(d)
    }
}

impl AddAssign<SimDur> for SimTime {
    fn add_assign(&mut self, d: SimDur) {
        *self = self.saturating_add(d);
    }
}

impl Sub for SimTime {
    type Output = SimDur;
    fn sub(self, earlier: SimTime) -> SimDur {
        self.since(earlier)
    }
}

impl Add for SimDur {
    type Output = SimDur;
    fn add(self, other: SimDur) -> SimDur {
        self.saturating_add(other)
    }
}

impl fmt::Debug for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={}ns", self.0)
    }
}

impl fmt::Debug for SimDur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ns", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn libm_round(x: f64) -> u64 {
        libm::round(x) as u64
    }

    #[test]
    fn rounding_matches_libm_at_the_edges() {
        let two52 = 4_503_599_627_370_496.0_f64;
        for x in [
            0.0,
            0.49999999999999994,
            0.5,
            1.5,
            2.5,
            two52 - 0.5,
            two52 - 1.5,
            two52 + 1.0,
            2.0 * two52 - 1.0,
            // Either side of 2^63, where the signed shortcut stops.
            TWO_POW_63 - 1024.0,
            TWO_POW_63,
            TWO_POW_63 + 2048.0,
            1.79e19,
        ] {
            assert_eq!(round_half_away(x), libm_round(x), "{x}");
        }
    }

    proptest::proptest! {
        #[test]
        fn rounding_matches_libm(bits in 0u64..0x43F0_0000_0000_0000, x in 0.0f64..1e12) {
            let y = f64::from_bits(bits);
            proptest::prop_assert_eq!(round_half_away(y), libm_round(y), "{}", y);
            proptest::prop_assert_eq!(round_half_away(x), libm_round(x), "{}", x);
        }
    }

    #[test]
    fn rounding_is_explicit_and_never_negative() {
        assert_eq!(SimDur::from_ms_f64(1.000_000_4).as_ns(), 1_000_000);
        assert_eq!(SimDur::from_ms_f64(1.000_000_6).as_ns(), 1_000_001);
        assert_eq!(SimDur::from_ms_f64(-3.0), SimDur::ZERO);
        assert_eq!(SimDur::from_ms_f64(f64::NAN), SimDur::ZERO);
        assert_eq!(SimDur::from_ms_f64(f64::INFINITY).as_ns(), u64::MAX);
        assert_eq!(SimDur::from_secs_f64(0.25).as_ns(), 250_000_000);
    }

    #[test]
    fn time_arithmetic_saturates() {
        let t = SimTime::from_ns(10);
        assert_eq!((t + SimDur::from_ns(5)).as_ns(), 15);
        assert_eq!(SimTime::MAX + SimDur::from_ns(1), SimTime::MAX);
        assert_eq!(t - SimTime::from_ns(20), SimDur::ZERO);
        assert!((SimTime::from_ns(1_500_000).as_ms_f64() - 1.5).abs() < 1e-12);
    }
}
