//! Number formats of the IPU: f16 (through the `half` crate) and the FP8 formats.
//!
//! Graphcore's F143 (1-4-3, bias 8) and F152 (1-5-2, bias 16) are "FNUZ": no infinities, no
//! negative zero, a single NaN at 0x80. Each FP8 tensor carries a power-of-two scale: the value
//! of a code is `decoded(code) * 2^scale`, with `scale` a signed 6-bit integer. ONNX's OCP
//! E4M3FN and E5M2 are provided for interchange.
//!
//! The encodings are the same as those of the ml_dtypes types `float8_e4m3fnuz` (F143),
//! `float8_e5m2fnuz` (F152), `float8_e4m3fn` and `float8_e5m2`; the tests check every code and
//! a large set of f32 probes against golden data produced with ml_dtypes (see
//! `docs/numerics.md` and `scripts/gen_fp8_golden.py`).
//!
//! # Conversions
//!
//! * [`decode`]: code → f32, exact (every FP8 value times `2^scale` for a scale in
//!   [`SCALE_MIN`]`..=`[`SCALE_MAX`] is an f32). NaN codes give NaN; E5M2's infinities give
//!   infinities.
//! * [`encode`]: f32 → code with round-to-nearest, ties to even, of `x / 2^scale`. The division
//!   is exact (done in f64), so there is exactly one rounding. Subnormal FP8 values are produced
//!   where they are nearest.
//! * [`encode_stochastic`]: the same with seeded stochastic rounding ([`StochasticRounder`]).
//! * [`encode_f16`]: f16 → code; the f16 is widened to f32 exactly first, so this too rounds
//!   once.
//!
//! # Special values and overflow
//!
//! | input                          | F143 / F152     | E4M3FN             | E5M2              |
//! |--------------------------------|-----------------|--------------------|-------------------|
//! | `+0.0`                         | `0x00`          | `0x00`             | `0x00`            |
//! | `-0.0`, negative rounding to 0 | `0x00`          | `0x80` (−0)        | `0x80` (−0)       |
//! | NaN (any sign or payload)      | `0x80`          | `0x7f`/`0xff` (sign kept) | `0x7e`/`0xfe` (sign kept) |
//! | ±inf, [`Overflow::Nan`]        | `0x80`          | `0x7f`/`0xff`      | `0x7c`/`0xfc` (±inf) |
//! | ±inf, [`Overflow::Saturate`]   | ±max            | ±max               | ±max              |
//! | finite, rounds beyond max, `Nan` | `0x80`        | `0x7f`/`0xff`      | ±inf              |
//! | finite, rounds beyond max, `Saturate` | ±max     | ±max               | ±max              |
//!
//! "Rounds beyond max" is decided after rounding: F143's largest value is 240 and the next
//! binade step would be 256, so 247.99 encodes to 240 but 248 (the tie, whose even neighbour is
//! 256) overflows. The [`Overflow::Nan`] rows are exactly what ml_dtypes' `astype` from float32
//! does (ml_dtypes does not saturate). The [`Overflow::Saturate`] rows are what the `float8`
//! crate's `from_f32` does and, for finite values, ONNX's `Cast` with `saturate=1`; they equal
//! ml_dtypes' `astype` of the input clipped to ±max.
//!
//! # Example
//!
//! ```
//! use ipu_numerics::{Fp8Format, Overflow, StochasticRounder, decode, encode, encode_stochastic};
//!
//! // 1.0625 lies halfway between F143's 1.0 (0x40) and 1.125 (0x41): ties go to even.
//! assert_eq!(encode(Fp8Format::F143, 1.0625, 0, Overflow::Nan), 0x40);
//! // With scale -4 the code 0x40 stands for 1.0 * 2^-4.
//! assert_eq!(encode(Fp8Format::F143, 0.0625, -4, Overflow::Nan), 0x40);
//! assert_eq!(decode(Fp8Format::F143, 0x40, -4), 0.0625);
//! // Beyond the largest value (240): NaN or saturation, as the caller chooses.
//! assert_eq!(encode(Fp8Format::F143, 300.0, 0, Overflow::Nan), 0x80);
//! assert_eq!(encode(Fp8Format::F143, 300.0, 0, Overflow::Saturate), 0x7f);
//! // Stochastic rounding picks one of the two neighbours, reproducibly for a seed.
//! let mut rng = StochasticRounder::new(42);
//! let code = encode_stochastic(Fp8Format::F143, 1.03, 0, Overflow::Nan, &mut rng);
//! assert!(code == 0x40 || code == 0x41);
//! ```

use std::fmt;

mod codes;
pub mod map;
pub mod unary;
pub use codes::{
    ByteType, EncodeTable, IntFormat, bf16_bits, bf16_value, e8m0_code, e8m0_value, fp4_code,
    fp4_value,
};
pub use map::MapFn;
pub use unary::UnaryFn;

use thiserror::Error;

/// An 8-bit floating-point format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fp8Format {
    /// Graphcore F143: 1 sign, 4 exponent, 3 mantissa bits, bias 8, FNUZ (max 240).
    F143,
    /// Graphcore F152: 1 sign, 5 exponent, 2 mantissa bits, bias 16, FNUZ (max 57344).
    F152,
    /// OCP E4M3FN: bias 7, no infinities, NaN at 0x7F/0xFF, negative zero (max 448).
    E4M3FN,
    /// OCP E5M2: bias 15, IEEE-like with infinities and NaNs (max 57344).
    E5M2,
}

/// How a format spends its special encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Specials {
    /// No infinities, no negative zero, the single NaN 0x80 (F143, F152).
    Fnuz,
    /// No infinities, NaN where every exponent and mantissa bit is set, negative zero (E4M3FN).
    Fn,
    /// IEEE 754 style: the top exponent holds ±inf (mantissa 0) and NaNs (E5M2).
    Ieee,
}

/// The bit layout of a format.
#[derive(Debug, Clone, Copy)]
struct Layout {
    exponent_bits: u32,
    mantissa_bits: u32,
    bias: i32,
    specials: Specials,
}

impl Fp8Format {
    /// Every format, in declaration order.
    pub const ALL: [Fp8Format; 4] = [
        Fp8Format::F143,
        Fp8Format::F152,
        Fp8Format::E4M3FN,
        Fp8Format::E5M2,
    ];

    /// The format's name as used in the text form and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fp8Format::F143 => "f143",
            Fp8Format::F152 => "f152",
            Fp8Format::E4M3FN => "e4m3fn",
            Fp8Format::E5M2 => "e5m2",
        }
    }

    /// The format with the given [`name`](Self::name) (exact, lower case).
    pub fn from_name(s: &str) -> Option<Fp8Format> {
        Fp8Format::ALL.into_iter().find(|f| f.name() == s)
    }

    /// Like [`from_name`](Self::from_name), with an error that lists the known names.
    pub fn parse(s: &str) -> Result<Fp8Format, NumericsError> {
        Fp8Format::from_name(s).ok_or_else(|| NumericsError::UnknownFormat {
            name: s.to_string(),
        })
    }

    fn layout(self) -> Layout {
        // Exponent bits, explicit mantissa bits, bias, special values.
        let (exponent_bits, mantissa_bits, bias, specials) = match self {
            Fp8Format::F143 => (4, 3, 8, Specials::Fnuz),
            Fp8Format::F152 => (5, 2, 16, Specials::Fnuz),
            Fp8Format::E4M3FN => (4, 3, 7, Specials::Fn),
            Fp8Format::E5M2 => (5, 2, 15, Specials::Ieee),
        };
        Layout {
            exponent_bits,
            mantissa_bits,
            bias,
            specials,
        }
    }

    /// Number of exponent bits (4 or 5).
    pub fn exponent_bits(self) -> u32 {
        self.layout().exponent_bits
    }

    /// Number of explicit mantissa bits (3 or 2).
    pub fn mantissa_bits(self) -> u32 {
        self.layout().mantissa_bits
    }

    /// Exponent bias: 8 (F143), 16 (F152), 7 (E4M3FN), 15 (E5M2).
    pub fn bias(self) -> i32 {
        self.layout().bias
    }

    /// Whether the format encodes infinities (only E5M2).
    pub fn has_infinity(self) -> bool {
        self.layout().specials == Specials::Ieee
    }

    /// Whether the format has a negative zero (the OCP formats; not the FNUZ ones).
    pub fn has_negative_zero(self) -> bool {
        self.layout().specials != Specials::Fnuz
    }

    /// The code of the largest finite value: 0x7f (F143, F152), 0x7e (E4M3FN), 0x7b (E5M2).
    pub fn max_code(self) -> u8 {
        match self.layout().specials {
            Specials::Fnuz => 0x7f,
            Specials::Fn => 0x7e,
            Specials::Ieee => 0x7b,
        }
    }

    /// The largest finite value at scale 0: 240, 57344, 448, 57344.
    pub fn max_finite(self) -> f32 {
        decode(self, self.max_code(), 0)
    }

    /// The smallest positive (subnormal) value at scale 0: 2^-10, 2^-17, 2^-9, 2^-16.
    pub fn min_positive(self) -> f32 {
        decode(self, 0x01, 0)
    }

    /// Whether `code` is a NaN of this format (0x80 for FNUZ; 0x7f/0xff for E4M3FN; exponent
    /// all ones with a non-zero mantissa for E5M2).
    pub fn is_nan(self, code: u8) -> bool {
        match self.layout().specials {
            Specials::Fnuz => code == 0x80,
            Specials::Fn => code & 0x7f == 0x7f,
            Specials::Ieee => code & 0x7c == 0x7c && code & 0x03 != 0,
        }
    }

    /// Whether `code` is an infinity (only E5M2 has them: 0x7c and 0xfc).
    pub fn is_infinite(self, code: u8) -> bool {
        self.layout().specials == Specials::Ieee && code & 0x7f == 0x7c
    }

    /// The NaN code [`encode`] produces for a positive NaN: 0x80 (F143, F152), 0x7f (E4M3FN),
    /// 0x7e (E5M2, the quiet NaN). For the OCP formats a negative NaN input keeps its sign bit.
    pub fn nan_code(self) -> u8 {
        match self.layout().specials {
            Specials::Fnuz => 0x80,
            Specials::Fn => 0x7f,
            Specials::Ieee => 0x7e,
        }
    }
}

impl fmt::Display for Fp8Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Fp8Format {
    type Err = NumericsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Fp8Format::parse(s)
    }
}

/// Smallest FP8 tensor scale (signed 6-bit).
pub const SCALE_MIN: i32 = -32;
/// Largest FP8 tensor scale (signed 6-bit).
pub const SCALE_MAX: i32 = 31;

/// What an encoding does with a finite value beyond the format's largest magnitude.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Overflow {
    /// Clamp to the largest finite magnitude of the same sign. Infinite inputs also become
    /// ±max (as the `float8` crate's conversion does); NaN stays NaN.
    Saturate,
    /// Produce NaN (or, for E5M2, infinity of the same sign). This is what ml_dtypes' `astype`
    /// does.
    Nan,
}

/// Errors of the numerics crate.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NumericsError {
    /// An FP8 scale outside the signed 6-bit range.
    #[error("FP8 scale {scale} is out of range {SCALE_MIN}..={SCALE_MAX}")]
    ScaleOutOfRange {
        /// The rejected scale.
        scale: i32,
    },
    /// A format name that is not one of [`Fp8Format::ALL`].
    #[error("unknown FP8 format {name:?}; known formats: f143, f152, e4m3fn, e5m2")]
    UnknownFormat {
        /// The rejected name.
        name: String,
    },
}

/// Checks that `scale` is a valid FP8 tensor scale ([`SCALE_MIN`]`..=`[`SCALE_MAX`]).
pub fn check_scale(scale: i32) -> Result<(), NumericsError> {
    if (SCALE_MIN..=SCALE_MAX).contains(&scale) {
        Ok(())
    } else {
        Err(NumericsError::ScaleOutOfRange { scale })
    }
}

/// Scales are clamped to this magnitude inside the arithmetic. Any scale beyond it already
/// sends every f32 input to zero or overflow (f32 magnitudes lie in 2^-149..2^128 and FP8
/// magnitudes in 2^-17..2^16), so the clamp changes no result while keeping every
/// intermediate a normal f64. It lets the conversions accept any `i32` without panicking;
/// the device range is still [`SCALE_MIN`]`..=`[`SCALE_MAX`], checked by [`check_scale`].
const SCALE_CLAMP: i32 = 400;

/// `2^e` as an f64, exact for `-1022 <= e <= 1023`.
fn pow2(e: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&e));
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// Decodes `code` of `format` to `value * 2^scale` in f32.
///
/// Exact for every scale in [`SCALE_MIN`]`..=`[`SCALE_MAX`]. NaN codes give `f32::NAN`
/// (positive, whatever the code's sign bit); E5M2's 0x7c/0xfc give ±inf; E4M3FN's and E5M2's
/// 0x80 give −0.0. Other scales are accepted and the result is rounded to f32 (it may
/// overflow to infinity or underflow to zero).
pub fn decode(format: Fp8Format, code: u8, scale: i32) -> f32 {
    if format.is_nan(code) {
        return f32::NAN;
    }
    let negative = code & 0x80 != 0;
    if format.is_infinite(code) {
        return if negative {
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        };
    }
    let l = format.layout();
    let exponent_field = i32::from((code & 0x7f) >> l.mantissa_bits);
    let mantissa = i32::from(code) & ((1 << l.mantissa_bits) - 1);
    // value = significand * 2^(exponent - mantissa_bits), the significand an integer.
    let (significand, exponent) = if exponent_field == 0 {
        (mantissa, 1 - l.bias)
    } else {
        (mantissa | (1 << l.mantissa_bits), exponent_field - l.bias)
    };
    let scale = scale.clamp(-SCALE_CLAMP, SCALE_CLAMP);
    let magnitude = f64::from(significand) * pow2(exponent - l.mantissa_bits as i32 + scale);
    let value = if negative { -magnitude } else { magnitude };
    value as f32
}

/// The 256 decoded values of `format` at `scale`, indexed by code.
pub fn decode_table(format: Fp8Format, scale: i32) -> [f32; 256] {
    std::array::from_fn(|code| decode(format, code as u8, scale))
}

/// How [`encode_with`] turns the scaled magnitude into an integer significand.
enum Rounding<'a> {
    NearestEven,
    Stochastic(&'a mut StochasticRounder),
}

/// The code for a NaN input.
fn nan_input_code(format: Fp8Format, negative: bool) -> u8 {
    let sign = if negative { 0x80 } else { 0 };
    match format.layout().specials {
        Specials::Fnuz => 0x80,
        Specials::Fn | Specials::Ieee => format.nan_code() | sign,
    }
}

/// The code for a value whose magnitude is beyond the largest finite one (after rounding).
fn overflow_code(format: Fp8Format, negative: bool, overflow: Overflow) -> u8 {
    let sign = if negative { 0x80 } else { 0 };
    match (overflow, format.layout().specials) {
        (Overflow::Saturate, _) => format.max_code() | sign,
        (Overflow::Nan, Specials::Fnuz) => 0x80,
        (Overflow::Nan, Specials::Fn) => 0x7f | sign,
        (Overflow::Nan, Specials::Ieee) => 0x7c | sign,
    }
}

/// The code of zero with the given sign (FNUZ formats have only +0).
fn zero_code(format: Fp8Format, negative: bool) -> u8 {
    if negative && format.has_negative_zero() {
        0x80
    } else {
        0x00
    }
}

fn encode_with(
    format: Fp8Format,
    x: f32,
    scale: i32,
    overflow: Overflow,
    rounding: Rounding<'_>,
) -> u8 {
    // Draw before any early return, so that each stochastic call advances the generator by
    // exactly one step whatever the input.
    let draw = match rounding {
        Rounding::NearestEven => None,
        Rounding::Stochastic(rng) => Some(rng.next_unit()),
    };
    let negative = x.is_sign_negative();
    if x.is_nan() {
        return nan_input_code(format, negative);
    }
    if x.is_infinite() {
        return overflow_code(format, negative, overflow);
    }
    if x == 0.0 {
        return zero_code(format, negative);
    }
    let l = format.layout();
    let m = l.mantissa_bits as i32;
    let scale = scale.clamp(-SCALE_CLAMP, SCALE_CLAMP);
    // |x| / 2^scale: exact, and a normal f64 (|x| >= 2^-149, |scale| <= 400).
    let a = f64::from(x.abs()) * pow2(-scale);
    let exponent_a = ((a.to_bits() >> 52) as i32) - 1023;
    let exponent_min = 1 - l.bias; // exponent of the smallest normal value
    // The spacing of representable values around `a` is 2^quantum.
    let quantum = exponent_a.max(exponent_min) - m;
    // `steps` = a / 2^quantum is exact; its integer part has at most m + 1 bits.
    let steps = a * pow2(-quantum);
    let significand = match draw {
        None => steps.round_ties_even(),
        Some(u) => {
            let below = steps.floor();
            if u < steps - below {
                below + 1.0
            } else {
                below
            }
        }
    };
    debug_assert!(significand >= 0.0 && significand <= f64::from(2u32 << m));
    let mut significand = significand as i32;
    let mut quantum = quantum;
    if significand == 0 {
        return zero_code(format, negative);
    }
    if significand == 2 << m {
        // Rounded up into the next binade.
        significand = 1 << m;
        quantum += 1;
    }
    let max_significand = i32::from(format.max_code() & ((1 << m) - 1)) | (1 << m);
    let max_exponent = ((i32::from(format.max_code()) >> m) - l.bias) - m;
    if quantum > max_exponent || (quantum == max_exponent && significand > max_significand) {
        return overflow_code(format, negative, overflow);
    }
    let sign = if negative { 0x80u8 } else { 0 };
    let body = if significand < (1 << m) {
        // Subnormal: exponent field 0, only possible at the smallest quantum.
        debug_assert_eq!(quantum, exponent_min - m);
        significand
    } else {
        let exponent_field = quantum + m + l.bias;
        debug_assert!(exponent_field >= 1);
        (exponent_field << m) | (significand - (1 << m))
    };
    debug_assert!((0..0x80).contains(&body));
    sign | body as u8
}

/// Encodes `x * 2^-scale` into `format` with round-to-nearest, ties to even.
///
/// The division by `2^scale` is exact, so the result is the code nearest to `x / 2^scale`
/// (ties to the code with an even mantissa); values below half the smallest subnormal become
/// zero, and values between subnormals round among subnormals. Signs, NaN, infinities and
/// overflow follow the table in the crate documentation; with [`Overflow::Nan`] the result is
/// identical to ml_dtypes' `astype` from float32. The conversion is defined for every
/// `scale`; the device range is checked by [`check_scale`].
pub fn encode(format: Fp8Format, x: f32, scale: i32, overflow: Overflow) -> u8 {
    encode_with(format, x, scale, overflow, Rounding::NearestEven)
}

/// Encodes an f16 value; the f16 is widened to f32 (exactly) and passed to [`encode`], so there
/// is a single rounding, the same as ml_dtypes' `astype` from float16.
pub fn encode_f16(format: Fp8Format, x: half::f16, scale: i32, overflow: Overflow) -> u8 {
    encode(format, x.to_f32(), scale, overflow)
}

/// Encodes `x * 2^-scale` with stochastic rounding.
///
/// With `lo` and `hi` the neighbouring representable magnitudes around `|x| / 2^scale` and
/// `p = (|x| / 2^scale - lo) / (hi - lo)`, the magnitude rounds to `hi` with probability `p`
/// and to `lo` otherwise (so the expected decoded value equals the input when no overflow
/// occurs); exactly representable values are never changed. The uniform draw is
/// [`StochasticRounder::next_unit`], with 53 bits of resolution. Each call takes exactly one
/// draw, whatever the input, so a sequence of calls is reproducible from the seed alone.
/// Zero, NaN, infinity and overflow after rounding behave as in [`encode`].
pub fn encode_stochastic(
    format: Fp8Format,
    x: f32,
    scale: i32,
    overflow: Overflow,
    rng: &mut StochasticRounder,
) -> u8 {
    encode_with(format, x, scale, overflow, Rounding::Stochastic(rng))
}

/// `decode(encode(x))`: `x` rounded to the nearest value of `format` at `scale`.
pub fn quantize(format: Fp8Format, x: f32, scale: i32, overflow: Overflow) -> f32 {
    decode(format, encode(format, x, scale, overflow), scale)
}

/// The seeded generator behind stochastic rounding: SplitMix64 (Steele, Lea and Flood,
/// "Fast splittable pseudorandom number generators", OOPSLA 2014; the constants are those of
/// the published algorithm). Deterministic and portable: the same seed gives the same
/// sequence on every platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StochasticRounder {
    state: u64,
}

/// SplitMix64's state increment (the odd constant nearest 2^64 / golden ratio).
const SPLITMIX_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
/// SplitMix64's first output-mixing multiplier.
const SPLITMIX_MUL_1: u64 = 0xbf58_476d_1ce4_e5b9;
/// SplitMix64's second output-mixing multiplier.
const SPLITMIX_MUL_2: u64 = 0x94d0_49bb_1331_11eb;

impl StochasticRounder {
    /// A generator whose sequence is determined by `seed`.
    pub fn new(seed: u64) -> Self {
        StochasticRounder { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(SPLITMIX_GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(SPLITMIX_MUL_1);
        z = (z ^ (z >> 27)).wrapping_mul(SPLITMIX_MUL_2);
        z ^ (z >> 31)
    }

    /// A uniform draw from `[0, 1)`: the top 53 bits of [`next_u64`](Self::next_u64) times
    /// 2^-53.
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * pow2(-53)
    }
}

/// `x` rounded to the nearest f16 (ties to even, overflow to ±inf, NaN stays NaN), as f32.
pub fn round_to_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// The bits of `x` rounded to the nearest f16 (ties to even).
pub fn f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// The value of the f16 with the given bits, as f32 (exact).
pub fn f16_value(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_constants_match_the_published_ranges() {
        let expected = [
            (Fp8Format::F143, 240.0, 2f32.powi(-10)),
            (Fp8Format::F152, 57344.0, 2f32.powi(-17)),
            (Fp8Format::E4M3FN, 448.0, 2f32.powi(-9)),
            (Fp8Format::E5M2, 57344.0, 2f32.powi(-16)),
        ];
        for (format, max, min) in expected {
            assert_eq!(format.max_finite(), max, "{format}");
            assert_eq!(format.min_positive(), min, "{format}");
            assert!(format.is_nan(format.nan_code()), "{format}");
            assert_eq!(Fp8Format::from_name(format.name()), Some(format));
        }
        assert_eq!(Fp8Format::from_name("F143"), None);
        assert!(
            Fp8Format::parse("fp8")
                .unwrap_err()
                .to_string()
                .contains("f143, f152, e4m3fn, e5m2")
        );
    }

    #[test]
    fn check_scale_accepts_exactly_the_signed_6_bit_range() {
        assert!(check_scale(SCALE_MIN).is_ok());
        assert!(check_scale(SCALE_MAX).is_ok());
        assert_eq!(
            check_scale(32),
            Err(NumericsError::ScaleOutOfRange { scale: 32 })
        );
        assert_eq!(
            check_scale(-33),
            Err(NumericsError::ScaleOutOfRange { scale: -33 })
        );
        assert_eq!(
            check_scale(-33).unwrap_err().to_string(),
            "FP8 scale -33 is out of range -32..=31"
        );
    }

    #[test]
    fn decode_examples() {
        assert_eq!(decode(Fp8Format::F143, 0x44, 0), 1.5);
        assert_eq!(decode(Fp8Format::E4M3FN, 0x3c, 0), 1.5);
        assert_eq!(decode(Fp8Format::F143, 0x44, -3), 1.5 / 8.0);
        assert!(decode(Fp8Format::F152, 0x80, 0).is_nan());
        assert_eq!(decode(Fp8Format::E5M2, 0xfc, 0), f32::NEG_INFINITY);
        assert!(decode(Fp8Format::E5M2, 0x80, 0).is_sign_negative());
        // Scales far outside the device range saturate in f32 instead of panicking.
        assert_eq!(decode(Fp8Format::F152, 0x7f, i32::MAX), f32::INFINITY);
        assert_eq!(decode(Fp8Format::F152, 0x01, i32::MIN), 0.0);
    }

    #[test]
    fn encode_handles_extreme_scales_without_panicking() {
        for format in Fp8Format::ALL {
            assert_eq!(encode(format, 1.0, i32::MAX, Overflow::Nan), 0);
            assert_eq!(
                encode(format, f32::MIN_POSITIVE, i32::MIN, Overflow::Saturate),
                format.max_code()
            );
        }
    }
}
