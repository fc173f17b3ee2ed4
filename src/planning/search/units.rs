//! Exact cost arithmetic for the search.
//!
//! Floating-point sums depend on their order: the same cover reached along two paths, or a
//! restricted search (a baseline) against the full one, can differ in the last bit, so a plan
//! could come out a hair above a baseline it contains. The search therefore adds costs as
//! integers: each cost becomes a whole number of units of `2^scale` seconds, with `scale` chosen
//! per search so that the largest cost keeps at least 60 significant bits and no sum of a
//! cover's costs plus its bound can overflow. Sums of units are exact and order-independent;
//! a total goes back to seconds with one rounding, which is monotone, so a cheaper or equal
//! cover in units is never a dearer one in seconds.
//!
//! A cost is rounded *up* to whole units: a cost with bits below the unit is never worth less
//! than it is, and a positive cost is never worth nothing. So a total is never below the exact
//! sum of its costs, and never below any one of them. The unit follows the largest cost, so the
//! search only takes costs up to [`crate::planning::cost::MAX_SECONDS`] (10^4 s < 2^14 s): for a graph of
//! `n` nodes the unit is then at most `2^(b - 113)` seconds, `b` being the bit length of `2n`
//! (2^-91 s up to a million nodes), and a total is above the exact sum by less than one unit
//! per chosen candidate before its final rounding to the nearest `f64`. Without the bound one
//! cost of 1e300 made the unit 2^878 s and every microsecond cost zero units: totals of 0 and
//! plans chosen by tie-breaking.

/// The unit of one search: `2^scale` seconds.
#[derive(Clone, Copy, Debug)]
pub(super) struct Units {
    scale: i32,
}

/// `x` as `(m, e)` with `x = m * 2^e` exactly (`x` finite and non-negative).
fn split(x: f64) -> (u64, i32) {
    let bits = x.to_bits();
    let field = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    if field == 0 {
        (frac, -1074)
    } else {
        (frac | 1 << 52, field - 1075)
    }
}

impl Units {
    /// Units for costs up to `max` (finite, non-negative) summed over covers of `n` nodes.
    pub(super) fn new(max: f64, n: usize) -> Units {
        let (m, e) = split(max);
        if m == 0 {
            return Units { scale: 0 };
        }
        // `max < 2^top`.
        let top = e + (64 - m.leading_zeros()) as i32;
        // A cover has at most `n` items and a bound at most `n` shares, each at most `max`:
        // every key is below `2n * 2^headroom`, which `headroom` keeps under 2^127.
        let n_bits = 64 - ((2 * n.max(1)) as u64).leading_zeros() as i32;
        let headroom = (127 - n_bits).max(60);
        Units {
            scale: top - headroom,
        }
    }

    /// `x` (finite, non-negative, at most the `max` of [`Units::new`]) in units, rounded up;
    /// exact unless `x` has bits below the unit.
    pub(super) fn of(self, x: f64) -> u128 {
        let (m, e) = split(x);
        let shift = e - self.scale;
        if shift >= 0 {
            // At most `headroom` bits: `x < 2^top`.
            (m as u128).checked_shl(shift as u32).unwrap_or(u128::MAX)
        } else {
            let s = -shift;
            if m == 0 {
                0
            } else if s > 64 {
                1
            } else {
                let m = m as u128;
                (m + (1u128 << s) - 1) >> s
            }
        }
    }

    /// `u` units in seconds, rounded to the nearest; saturates at `f64::MAX` as
    /// [`crate::planning::cost::add_seconds`] does.
    pub(super) fn seconds(self, u: u128) -> f64 {
        let mut x = u as f64;
        // Scale by 2^scale in steps whose factors are normal powers of two: each step is
        // monotone, so the whole conversion is.
        let mut k = self.scale;
        while k != 0 && x != 0.0 && x.is_finite() {
            let step = k.clamp(-1000, 1000);
            x *= f64::powi(2.0, step);
            k -= step;
        }
        if x.is_infinite() {
            f64::MAX
        } else {
            x
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_and_dyadic_costs_are_exact() {
        let u = Units::new(20.0, 8);
        for x in [0.0, 0.5, 1.0, 3.25, 19.0, 20.0] {
            assert_eq!(u.seconds(u.of(x)), x);
        }
        assert_eq!(u.seconds(u.of(1.0) + u.of(0.25) + u.of(2.0)), 3.25);
    }

    #[test]
    fn sums_do_not_depend_on_their_order() {
        let costs = [0.1, 0.7, 1e-9, 3.3, 0.2, 11.65 / 3.0];
        let u = Units::new(3.3, costs.len());
        let fwd: u128 = costs.iter().map(|&c| u.of(c)).sum();
        let rev: u128 = costs.iter().rev().map(|&c| u.of(c)).sum();
        assert_eq!(fwd, rev);
        // Floating point does depend on it here, which is the point.
        let f: f64 = costs.iter().sum();
        let r: f64 = costs.iter().rev().sum();
        assert_ne!(f, r);
        // And the exact total rounds to the correctly rounded sum.
        let exact = u.seconds(fwd);
        assert!((exact - f).abs() <= 2.0 * f64::EPSILON * f);
    }

    #[test]
    fn extreme_magnitudes() {
        let u = Units::new(f64::MAX, 1 << 20);
        assert_eq!(u.seconds(u.of(f64::MAX)), f64::MAX);
        assert_eq!(u.seconds(u.of(f64::MAX) * 4), f64::MAX, "saturates");
        assert_eq!(u.of(1e-300), 1, "far below the unit, yet not nothing");
        let tiny = Units::new(f64::from_bits(1), 3);
        assert_eq!(tiny.seconds(tiny.of(f64::from_bits(1))), f64::from_bits(1));
        assert_eq!(
            tiny.seconds(tiny.of(f64::from_bits(1)) * 2),
            2.0 * f64::from_bits(1)
        );
        let zero = Units::new(0.0, 5);
        assert_eq!(zero.of(0.0), 0);
        assert_eq!(zero.seconds(0), 0.0);
    }

    /// A sum is never below any of its parts, however far apart their magnitudes.
    #[test]
    fn totals_are_never_below_their_parts() {
        for max in [1e4, 1.0, 1e-6, f64::MAX] {
            let costs = [max, 3e-7, 1e-12, 5e-300, f64::from_bits(1), 0.0];
            let u = Units::new(max, 1 << 20);
            let total = u.seconds(costs.iter().map(|&c| u.of(c)).sum());
            for c in costs.iter().filter(|&&c| c <= max) {
                assert!(total >= *c, "{total} < {c} (max {max})");
                assert!(u.seconds(u.of(*c)) >= *c, "{c} (max {max})");
            }
        }
        // Within the ceiling the unit is fine enough for nanoseconds on huge graphs.
        let u = Units::new(crate::planning::cost::MAX_SECONDS, 1 << 20);
        let parts = [1e4, 1e-9, 3e-9];
        let total = u.seconds(parts.iter().map(|&c| u.of(c)).sum());
        assert!(total > 1e4 && total - 1e4 <= 4.1e-9, "{total}");
        assert!(u.seconds(1) <= f64::powi(2.0, -91));
    }

    #[test]
    fn rounding_is_monotone() {
        let u = Units::new(1.0, 1000);
        let mut last = 0;
        let mut x = 1e-40;
        while x < 1.0 {
            let v = u.of(x);
            assert!(v >= last);
            last = v;
            x *= 1.37;
        }
    }
}
