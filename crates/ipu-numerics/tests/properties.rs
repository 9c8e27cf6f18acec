//! Property tests: round-to-nearest is monotonic and within half a step of the input.

use ipu_numerics::{Fp8Format, Overflow, SCALE_MAX, SCALE_MIN, decode, encode, quantize};
use proptest::prelude::*;

fn format() -> impl Strategy<Value = Fp8Format> {
    prop::sample::select(Fp8Format::ALL.to_vec())
}

proptest! {
    #[test]
    fn rounding_is_monotonic(format in format(), scale in SCALE_MIN..=SCALE_MAX, a in -1e6f32..1e6, b in -1e6f32..1e6) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let (q_lo, q_hi) = (
            quantize(format, lo, scale, Overflow::Saturate),
            quantize(format, hi, scale, Overflow::Saturate),
        );
        prop_assert!(q_lo <= q_hi, "{format} scale {scale}: q({lo}) = {q_lo} > q({hi}) = {q_hi}");
    }

    #[test]
    fn the_nearest_code_is_nearest(format in format(), scale in -8i32..=8, x in any::<f32>().prop_filter("finite", |x| x.is_finite())) {
        let code = encode(format, x, scale, Overflow::Saturate);
        let q = f64::from(decode(format, code, scale));
        let max = f64::from(format.max_finite()) * 2f64.powi(scale);
        prop_assume!(f64::from(x).abs() <= max);
        // No other finite code is strictly nearer.
        for other in 0..=255u8 {
            let v = f64::from(decode(format, other, scale));
            if v.is_finite() {
                prop_assert!((v - f64::from(x)).abs() >= (q - f64::from(x)).abs(), "{format}: {x} -> {q}, but {v} is nearer");
            }
        }
    }
}
