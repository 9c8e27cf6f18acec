//! The graph's unary functions (`exp`, `sqrt`, `tanh`, `erf`, `log`, `sin`, `cos`): one place for each
//! function's name in the text form, its exact value, and the device's value, operation by
//! operation as the unary kernel of `ipu-kernels` issues it, with the constants both use.
//! The differential tests of `ipu-codegen` compare the device with [`UnaryFn::device`] bit
//! for bit; `docs/numerics.md` ("Transcendental approximations") gives the measured errors
//! against the exact functions.
//!
//! `tanh` and `erf` have two branches computed for every lane and selected without branches
//! (the device's lanes are independent): a short Taylor polynomial for `|x| <= T` and a
//! formula in `exp` and `rcp` above. The selection multiplies by exact weights `w` and
//! `1 - w` (each 0 or 1); a NaN input reaches the result through `0 * NaN`.

/// A one-operand elementwise function of the graph (`OpKind::Unary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnaryFn {
    /// `e^x` (the device's `exp` instruction, f32).
    Exp,
    /// `sqrt(x)` (NaN below zero, as IEEE; the device's `sqrt` is correctly rounded).
    Sqrt,
    /// `tanh(x)`.
    Tanh,
    /// The error function `erf(x) = 2/sqrt(pi) * integral from 0 to x of e^(-t^2) dt`.
    Erf,
    /// The natural logarithm `ln(x)` (`-inf` at zero, NaN below zero, as IEEE).
    Log,
    /// `sin(x)`, radians.
    Sin,
    /// `cos(x)`, radians.
    Cos,
}

impl UnaryFn {
    /// Every function, in text order.
    pub const ALL: [UnaryFn; 7] = [
        UnaryFn::Exp,
        UnaryFn::Sqrt,
        UnaryFn::Tanh,
        UnaryFn::Erf,
        UnaryFn::Log,
        UnaryFn::Sin,
        UnaryFn::Cos,
    ];

    /// The mnemonic in the graph's text form.
    pub fn mnemonic(self) -> &'static str {
        match self {
            UnaryFn::Exp => "exp",
            UnaryFn::Sqrt => "sqrt",
            UnaryFn::Tanh => "tanh",
            UnaryFn::Erf => "erf",
            UnaryFn::Log => "log",
            UnaryFn::Sin => "sin",
            UnaryFn::Cos => "cos",
        }
    }

    /// The function a mnemonic names.
    pub fn from_mnemonic(name: &str) -> Option<UnaryFn> {
        UnaryFn::ALL.into_iter().find(|f| f.mnemonic() == name)
    }

    /// Whether `f(0) = 0`, so a value's zero padding stays zero through it (`exp`, `log`
    /// and `cos` do not: their padding is cleared where something reads it).
    pub fn keeps_zero(self) -> bool {
        !matches!(self, UnaryFn::Exp | UnaryFn::Log | UnaryFn::Cos)
    }

    /// The exact value, rounded once to f32 (`exp` and `sqrt` in f32, correctly rounded or
    /// nearly; the others in f64).
    pub fn exact(self, x: f32) -> f32 {
        match self {
            UnaryFn::Exp => x.exp(),
            UnaryFn::Sqrt => x.sqrt(),
            UnaryFn::Tanh => f64::from(x).tanh() as f32,
            UnaryFn::Erf => erf_exact(f64::from(x)) as f32,
            UnaryFn::Log => f64::from(x).ln() as f32,
            UnaryFn::Sin => f64::from(x).sin() as f32,
            UnaryFn::Cos => f64::from(x).cos() as f32,
        }
    }

    /// The device's value: the f32 operations of the unary kernel, in its order.
    pub fn device(self, x: f32) -> f32 {
        match self {
            UnaryFn::Exp | UnaryFn::Sqrt => self.exact(x),
            UnaryFn::Tanh => tanh_device(x),
            UnaryFn::Erf => erf_device(x),
            UnaryFn::Log => log_device(x),
            UnaryFn::Sin => sin_cos_device(x, 0),
            UnaryFn::Cos => sin_cos_device(x, 1),
        }
    }
}

impl std::fmt::Display for UnaryFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.mnemonic())
    }
}

/// The branch threshold of both functions: small enough that a few Taylor terms are accurate
/// to far below f32 resolution, large enough that the `exp` formula does not lose relative
/// accuracy to cancellation. A power of two, so `x / T` (the sign at `|x| > T`) is exact.
pub const THRESHOLD: f32 = 0.25;

/// Taylor coefficients of `tanh(x) = x + x^3 K3 + x^5 K5 + x^7 K7 + x^9 K9 + ...` (the series
/// of tanh in terms of Bernoulli numbers, e.g. Abramowitz and Stegun 4.5.64): -1/3, 2/15,
/// -17/315, 62/2835. Truncation at `|x| <= 1/4` is below `1382/155925 * 4^-10 = 8.5e-9` relative.
pub const TANH_TAYLOR: [f32; 4] = [-1.0 / 3.0, 2.0 / 15.0, -17.0 / 315.0, 62.0 / 2835.0];

/// Taylor coefficients of `erf(x) = 2/sqrt(pi) (x - x^3/3 + x^5/10 - x^7/42 + ...)`
/// (Abramowitz and Stegun 7.1.5): `2/sqrt(pi) * [1, -1/3, 1/10, -1/42]`. Truncation at
/// `|x| <= 1/4` is below `4^-8 / 216 = 7.1e-8` relative.
pub const ERF_TAYLOR: [f32; 4] = [
    std::f64::consts::FRAC_2_SQRT_PI as f32,
    (-std::f64::consts::FRAC_2_SQRT_PI / 3.0) as f32,
    (std::f64::consts::FRAC_2_SQRT_PI / 10.0) as f32,
    (-std::f64::consts::FRAC_2_SQRT_PI / 42.0) as f32,
];

/// `p` of Abramowitz and Stegun 7.1.26: `erf(x) = 1 - (a1 t + ... + a5 t^5) e^(-x^2)`,
/// `t = 1 / (1 + p x)`, `x >= 0`, `|error| <= 1.5e-7`.
pub const ERF_AS_P: f32 = 0.327_591_1_f64 as f32;

/// `-a1 .. -a5` of Abramowitz and Stegun 7.1.26 (negated: the device adds `-poly * e^(-x^2)`).
pub const ERF_AS_NEG_A: [f32; 5] = [
    // The published decimal digits, rounded to f32.
    -0.254_829_592_f64 as f32,
    0.284_496_736_f64 as f32,
    -1.421_413_741_f64 as f32,
    1.453_152_027_f64 as f32,
    -1.061_405_429_f64 as f32,
];

/// The device's `tanh` of one f32 lane.
pub fn tanh_device(x: f32) -> f32 {
    let (a, c, z, s) = clamped(x);
    let [k3, k5, k7, k9] = TANH_TAYLOR;
    let q = (((z * k9 + k7) * z + k5) * z + k3) * z;
    let p = c.mul_add(q, c);
    let (ws, b) = select(THRESHOLD, a, s, p);
    let e = a + a;
    let e = e.exp() + 1.0;
    let e = 1.0 / e;
    let e = (e + e) * ws;
    b - e
}

/// The device's `erf` of one f32 lane.
pub fn erf_device(x: f32) -> f32 {
    let (a, c, z, s) = clamped(x);
    let [c0, c2, c4, c6] = ERF_TAYLOR;
    let q = ((z * c6 + c4) * z + c2) * z + c0;
    let p = q * c;
    let (ws, b) = select(THRESHOLD, a, s, p);
    let r = a.mul_add(ERF_AS_P, 1.0);
    let r = 1.0 / r;
    let e = -(a * a);
    let e = e.exp() * ws;
    let [n1, n2, n3, n4, n5] = ERF_AS_NEG_A;
    let f = (((r * n5 + n4) * r + n3) * r + n2) * r + n1;
    let f = f * r;
    f.mul_add(e, b)
}

/// What both approximations start from: `|x|`, `x` clamped to the threshold, its square, and
/// four times the clamped `x` (the sign operand of [`select`], two additions as on the device).
fn clamped(x: f32) -> (f32, f32, f32, f32) {
    let t = THRESHOLD;
    let c = x.min(t).max(-t);
    let s = c + c;
    (x.abs(), c, c * c, s + s)
}

/// The branch selection: `w = 1` above the threshold, else 0 (a compare mask taken through
/// `min(mask, 1)`); returns `w * sign` and `w * sign + (1 - w) * small`.
fn select(t: f32, a: f32, sign: f32, small: f32) -> (f32, f32) {
    let mask = if t < a { f32::from_bits(u32::MAX) } else { 0.0 };
    let w = mask.min(1.0);
    let ws = sign * w;
    let v = 1.0 - w;
    (ws, small * v + ws)
}

/// `erf` to f64 accuracy: the Maclaurin series for `|x| < 2.5` (at most ~`e^6.25` of
/// cancellation, 1e-13 relative), and the continued fraction of `erfc` (Abramowitz and Stegun
/// 7.1.14, `erfc(x) = e^(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))`)
/// evaluated bottom-up at depth 80 beyond.
pub fn erf_exact(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        // sum_n (-1)^n x^(2n+1) / (n! (2n+1))
        let z = a * a;
        let (mut term, mut sum) = (a, a);
        for n in 1..200 {
            term *= -z / n as f64;
            let add = term / (2 * n + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else if a < 30.0 {
        let mut f = a;
        for k in (1..=80).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * f)
    } else {
        1.0
    };
    r.copysign(x)
}

/// `2^24 - 1`: a subnormal input of `log` is scaled by `1 + w (2^24 - 1) = 2^24` (exactly)
/// into the normal range, and 24 is taken off its exponent.
pub const LOG_SUBNORMAL_SCALE_MINUS_ONE: f32 = 16_777_215.0;

/// `0x3F80_0000 - bits(sqrt(1/2))`: added to an input's bits, it carries into the exponent field
/// exactly when the significand is at least `sqrt(1/2)`, so the exponent read from the sum
/// leaves a significand `m` in `[sqrt(1/2), sqrt(2))`.
pub const LOG_EXPONENT_BIAS_BITS: u32 = 0x3F80_0000 - 0x3F35_04F3;

/// `ln 2` rounded to f32.
pub const LOG_LN2: f32 = std::f32::consts::LN_2;

/// `1/9, 1/7, 1/5, 1/3`: `ln m = 2 u (1 + u^2/3 + u^4/5 + u^6/7 + u^8/9 + ...)` with
/// `u = (m - 1) / (m + 1)` (the series of `2 atanh u`). At `m` in `[sqrt(1/2), sqrt(2))`,
/// `|u| <= 0.1716`, `u^2 <= 0.0295`, so the first omitted term is below `0.0295^5 / 11 = 2e-9`
/// relative.
pub const LOG_ATANH: [f32; 4] = [1.0 / 9.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0];

/// The device's `log` of one f32 lane, operation by operation as the unary kernel issues it
/// (`ipu_kernels` `unary::log_pair`): a subnormal input is scaled by `2^24`; the scaled input
/// is clamped to `[f32::MIN_POSITIVE, f32::MAX]`, written `2^k m` from its bits (integer
/// arithmetic, `m` in `[sqrt(1/2), sqrt(2))`), and `ln x = k ln 2 + 2 atanh((m - 1)/(m + 1))`.
/// The special inputs come out of a correction that is 0 for every positive normal input:
/// `(sqrt(x') - sqrt(clamped x')) * f32::MAX * f32::MAX` is `-inf` at zero (`0 - sqrt(min)`
/// times `f32::MAX^2` overflows), NaN below zero or at NaN (the square root), `+inf` at `+inf`.
pub fn log_device(x: f32) -> f32 {
    let mask = if x < f32::MIN_POSITIVE {
        f32::from_bits(u32::MAX)
    } else {
        0.0
    };
    let w = mask.min(1.0);
    let f = w.mul_add(LOG_SUBNORMAL_SCALE_MINUS_ONE, 1.0);
    let x1 = x * f;
    // minNum then maxNum, as the device: a NaN becomes f32::MAX here (`clamp` would keep it);
    // the correction carries the NaN to the result.
    #[allow(clippy::manual_clamp)]
    let xc = x1.min(f32::MAX).max(f32::MIN_POSITIVE);
    let corr = ((x1.sqrt() - xc.sqrt()) * f32::MAX) * f32::MAX;
    let bits = xc.to_bits();
    let e = ((bits.wrapping_add(LOG_EXPONENT_BIAS_BITS) >> 23) as i32).wrapping_sub(127);
    let m = f32::from_bits(bits.wrapping_sub((e << 23) as u32));
    let k = w.mul_add(-24.0, e as f32);
    let r = k.mul_add(LOG_LN2, corr);
    let u = (m - 1.0) * (1.0 / (m + 1.0));
    let z = u * u;
    let [c9, c7, c5, c3] = LOG_ATANH;
    let p = (((c9 * z + c7) * z + c5) * z + c3) * z + 1.0;
    let q = p * u;
    r + (q + q)
}

/// `2/pi` rounded to f32: `x * 2/pi` rounded to an integer is the quadrant count `k`.
pub const SIN_TWO_OVER_PI: f32 = std::f32::consts::FRAC_2_PI;

/// `1.5 * 2^23`: added to an f32 of magnitude below `2^22`, it rounds it to an integer (the
/// sum's unit in the last place is 1), and the sum's low significand bits are that integer
/// modulo `2^22` (so its low two bits are the quadrant).
pub const SIN_ROUNDING_SHIFT: f32 = 12_582_912.0;

/// `-pi/2` in three f32 parts (Cody and Waite's reduction): `r = x - k pi/2` is
/// `((x + k P1) + k P2) + k P3`, each step one fused multiply-add. The first part is `-pi/2`
/// rounded to f32, each next part what is left rounded to f32; together they carry about 72
/// bits of `pi/2`, so the reduction stays accurate while `k` has at most 22 bits.
pub const SIN_NEG_HALF_PI: [f32; 3] = {
    const HALF_PI: f64 = std::f64::consts::FRAC_PI_2;
    let p1 = -HALF_PI as f32;
    let rest = -HALF_PI - p1 as f64;
    let p2 = rest as f32;
    // What f64 holds beyond the first two parts: 2^-80 and below are lost, far past f32's
    // reach for any `k` below 2^22.
    let p3 = (rest - p2 as f64) as f32;
    [p1, p2, p3]
};

/// Taylor coefficients of `sin(r) = r + r^3 S3 + r^5 S5 + r^7 S7 + r^9 S9`: `-1/3!`, `1/5!`,
/// `-1/7!`, `1/9!`. At `|r| <= pi/4` the first omitted term is below `(pi/4)^11 / 11! = 1.8e-9`.
pub const SIN_TAYLOR: [f32; 4] = [-1.0 / 6.0, 1.0 / 120.0, -1.0 / 5_040.0, 1.0 / 362_880.0];

/// Taylor coefficients of `cos(r) = 1 + r^2 C2 + r^4 C4 + ... + r^10 C10`: `-1/2!`, `1/4!`,
/// `-1/6!`, `1/8!`, `-1/10!`. At `|r| <= pi/4` the first omitted term is below
/// `(pi/4)^12 / 12! = 1.2e-10`.
pub const COS_TAYLOR: [f32; 5] = [
    -1.0 / 2.0,
    1.0 / 24.0,
    -1.0 / 720.0,
    1.0 / 40_320.0,
    -1.0 / 3_628_800.0,
];

/// The largest `|x|` whose quadrant count the device's reduction finds: `2^22 pi/2`, about
/// 6.6e6. Beyond it the rounding shift no longer rounds `x * 2/pi` to an integer and the
/// device's `sin` and `cos` are wrong (`docs/numerics.md`).
pub const SIN_ARGUMENT_MAX: f32 = 6_588_397.0;

/// The device's `sin` (`quadrant_offset` 0) or `cos` (1) of one f32 lane: `k` = `x * 2/pi`
/// rounded to an integer by the rounding shift, whose sum's low bits plus the offset give
/// the quadrant `q` (bit 0: take the cosine polynomial, bit 1: negate); `r = x - k pi/2` in
/// three fused steps; both polynomials in `r^2`; the selection by exact weights 0 or 1, as in
/// `tanh`. A NaN or infinite input gives NaN through `r`.
pub fn sin_cos_device(x: f32, quadrant_offset: u32) -> f32 {
    let t = x * SIN_TWO_OVER_PI;
    let shifted = t + SIN_ROUNDING_SHIFT;
    let q = shifted.to_bits().wrapping_add(quadrant_offset);
    let odd = (q & 1) as f32;
    let negative = ((q >> 1) & 1) as f32;
    let k = shifted - SIN_ROUNDING_SHIFT;
    let [p1, p2, p3] = SIN_NEG_HALF_PI;
    let r = k.mul_add(p1, x);
    let r = k.mul_add(p2, r);
    let r = k.mul_add(p3, r);
    let z = r * r;
    let [s3, s5, s7, s9] = SIN_TAYLOR;
    let qs = ((z * s9 + s7) * z + s5) * z + s3;
    let qs = qs * z;
    let sin = r.mul_add(qs, r);
    let [c2, c4, c6, c8, c10] = COS_TAYLOR;
    let qc = (((z * c10 + c8) * z + c6) * z + c4) * z + c2;
    let cos = z.mul_add(qc, 1.0);
    let v = sin * (1.0 - odd) + cos * odd;
    v * negative.mul_add(-2.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_erf_matches_known_values() {
        // erf(0.5), erf(1), erf(2), erf(3) to 16 digits (Abramowitz and Stegun table 7.1).
        for (x, e) in [
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
        ] {
            assert!(
                (erf_exact(x) - e).abs() < 1e-14,
                "erf({x}) = {}",
                erf_exact(x)
            );
            assert!((erf_exact(-x) + e).abs() < 1e-14);
        }
        // The two methods agree where they meet.
        let below = erf_exact(2.5 - 1e-12);
        let above = erf_exact(2.5);
        assert!((below - above).abs() < 1e-13);
        assert_eq!(erf_exact(0.0), 0.0);
        assert_eq!(erf_exact(f64::INFINITY), 1.0);
    }

    #[test]
    fn device_functions_keep_zero_sign_limits_and_nan() {
        for f in [tanh_device, erf_device] {
            assert_eq!(f(0.0).to_bits(), 0);
            assert_eq!(f(f32::INFINITY), 1.0);
            assert_eq!(f(f32::NEG_INFINITY), -1.0);
            assert!(f(f32::NAN).is_nan());
            for x in [1e-30f32, 0.1, 0.25, 0.3, 1.0, 5.0, 20.0] {
                assert_eq!(f(-x), -f(x), "odd at {x}");
            }
        }
    }

    #[test]
    fn device_sin_and_cos_follow_the_exact_functions_below_the_argument_limit() {
        let mut worst = 0.0f64;
        // Every 1/1024 in [-16, 16], then magnitudes growing by 0.1 % up to the limit.
        let small = (-16 * 1024..=16 * 1024).map(|i| i as f32 / 1024.0);
        let large = std::iter::successors(Some(16.0f32), |x| Some(x * 1.001))
            .take_while(|x| *x < SIN_ARGUMENT_MAX)
            .flat_map(|x| [x, -x]);
        for x in small.chain(large) {
            for (f, offset) in [(f64::sin as fn(f64) -> f64, 0), (f64::cos, 1)] {
                let d = f64::from(sin_cos_device(x, offset));
                worst = worst.max((d - f(f64::from(x))).abs());
            }
        }
        // Absolute error against f64, in units of f32's resolution at 1.
        assert!(worst < 8.0 * f64::from(f32::EPSILON), "worst {worst:e}");
        for offset in [0, 1] {
            assert!(sin_cos_device(f32::NAN, offset).is_nan());
            assert!(sin_cos_device(f32::INFINITY, offset).is_nan());
            assert!(sin_cos_device(f32::NEG_INFINITY, offset).is_nan());
        }
        assert_eq!(sin_cos_device(0.0, 1), 1.0);
        assert_eq!(sin_cos_device(0.0, 0), 0.0);
    }
}
