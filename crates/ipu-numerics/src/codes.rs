//! Element formats the device stores but does not compute in: bfloat16, the MX formats FP4
//! (E2M1) and E8M0, and the integers of 16 bits or fewer. Every value of each is an f32, so the
//! host holds them as f32 like the others; the device converts them with table-driven code
//! ([`EncodeTable`]) or integer arithmetic.
//!
//! The conversions from f32 are those of ONNX's `Cast` as its reference implementation
//! (`onnx/reference/ops/op_cast.py`) computes them: NumPy's and ml_dtypes' `astype`, and for
//! E8M0 `onnx.numpy_helper.to_float8e8m0`.

/// The bits of `x` rounded to the nearest bfloat16 (ties to even); NaN gives the quiet NaN
/// 0x7FC0 (0xFFC0 for a negative NaN), as ml_dtypes' `astype(bfloat16)` does.
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) as u16 & 0x8000) | 0x7FC0;
    }
    let rounded = b.wrapping_add(0x7FFF + ((b >> 16) & 1));
    (rounded >> 16) as u16
}

/// The value of the bfloat16 with the given bits (exact).
pub fn bf16_value(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// The magnitudes of FP4 E2M1, indexed by the three low bits of a code (the OCP MX
/// specification v1.0, section 5.3.3: no infinities, no NaN).
const FP4_MAGNITUDES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// The value of an FP4 E2M1 code (bit 3 the sign; higher bits ignored).
pub fn fp4_value(code: u8) -> f32 {
    let m = FP4_MAGNITUDES[usize::from(code & 7)];
    if code & 8 != 0 { -m } else { m }
}

/// `x` as FP4 E2M1: round to nearest, ties to even, saturating at ±6 (also for ±inf). A NaN
/// has no code: ml_dtypes gives the zero of the opposite sign (0x8 for a positive NaN), and so
/// does this.
pub fn fp4_code(x: f32) -> u8 {
    let sign = if x.is_sign_negative() { 8 } else { 0 };
    if x.is_nan() {
        return sign ^ 8;
    }
    let a = x.abs();
    // The midpoints between neighbouring magnitudes; at a tie the even code (bit 0 clear) wins.
    let mut code = 0u8;
    for (i, pair) in FP4_MAGNITUDES.windows(2).enumerate() {
        let mid = (pair[0] + pair[1]) / 2.0;
        let up_on_tie = (i + 1) % 2 == 0;
        if a > mid || (a == mid && up_on_tie) {
            code = i as u8 + 1;
        }
    }
    sign | code
}

/// The value of an E8M0 code: `2^(code - 127)`, 0xFF is NaN (the OCP MX specification v1.0,
/// section 5.4.1).
pub fn e8m0_value(code: u8) -> f32 {
    if code == 0xFF {
        return f32::NAN;
    }
    f32::from_bits(if code == 0 {
        // 2^-127 is an f32 subnormal.
        0x0040_0000
    } else {
        u32::from(code) << 23
    })
}

/// `x` as E8M0 with `onnx.numpy_helper.to_float8e8m0(x, saturate=True, round_mode="up")`'s
/// rules: the sign is ignored, the code is the f32 biased exponent, plus one when any fraction
/// bit is set (never past 0xFE); NaN and ±inf give 0xFF. (Subnormal inputs have the exponent
/// field 0 and round up to code 1; zero gives 0.)
pub fn e8m0_code(x: f32) -> u8 {
    let b = x.to_bits();
    let exponent = (b >> 23) & 0xFF;
    if exponent == 0xFF {
        return 0xFF;
    }
    let up = u32::from(b & 0x7F_FFFF != 0 && exponent != 0xFE);
    (exponent + up) as u8
}

/// An integer element format: its width in bits and signedness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IntFormat {
    /// Bits: 2, 4, 8 or 16.
    pub bits: u32,
    /// Two's complement if true.
    pub signed: bool,
}

impl IntFormat {
    /// The smallest value.
    pub fn min(self) -> i32 {
        if self.signed {
            -(1 << (self.bits - 1))
        } else {
            0
        }
    }

    /// The largest value.
    pub fn max(self) -> i32 {
        if self.signed {
            (1 << (self.bits - 1)) - 1
        } else {
            (1 << self.bits) - 1
        }
    }

    /// `v` wrapped to the format (two's complement modulo `2^bits`).
    pub fn wrap(self, v: i64) -> i32 {
        let m = 1i64 << self.bits;
        let r = v.rem_euclid(m);
        if self.signed && r > i64::from(self.max()) {
            (r - m) as i32
        } else {
            r as i32
        }
    }

    /// `x` converted as NumPy's and ml_dtypes' `astype` converts a float: truncated toward
    /// zero; for 8 and 16 bits wrapped to the width (the truncated value first saturated to the
    /// i32 range, where C leaves it undefined), for 2 and 4 bits 0 when out of range (ml_dtypes'
    /// rule); NaN gives 0.
    pub fn from_f32(self, x: f32) -> i32 {
        if x.is_nan() {
            return 0;
        }
        let t = x.trunc();
        let t = if t >= 2_147_483_648.0 {
            i64::from(i32::MAX)
        } else if t < -2_147_483_648.0 {
            i64::from(i32::MIN)
        } else {
            t as i64
        };
        if self.bits >= 8 {
            self.wrap(t)
        } else if (i64::from(self.min())..=i64::from(self.max())).contains(&t) {
            t as i32
        } else {
            0
        }
    }
}

/// What the device's table-driven encoder needs to turn an f32 into a code of a format whose
/// codes, as functions of `|x|`, are constant on intervals (every rounding conversion is): the
/// interval starts, the code of each interval for a positive and a negative `x`, and the codes
/// of a positive and a negative NaN. Built from the host's encoder itself, so the device and
/// the host agree by construction.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodeTable {
    /// `starts[i]` is the smallest `|x|` of interval `i`; `starts[0] = 0`. The length is a
    /// power of two; entries past the last interval are NaN (no `|x|` reaches them).
    pub starts: Vec<f32>,
    /// The code of interval `i` for a non-negative `x` (low byte) and a negative one (next
    /// byte); entries past the last interval repeat the last.
    pub codes: Vec<u32>,
    /// The codes of a positive NaN (low byte) and a negative NaN (next byte).
    pub nan: u32,
}

impl EncodeTable {
    /// The table of `encode`, whose value as a function of `|x|` over `[0, +inf]` must be
    /// non-decreasing in `order` (`order(code)`: the decoded value, NaN codes ordered last).
    /// Intervals are found by bisection over the f32 bit patterns, so building costs about
    /// 32 encodings per interval.
    pub fn build(encode: impl Fn(f32) -> u8, order: impl Fn(u8) -> f64) -> EncodeTable {
        let inf = f32::INFINITY.to_bits();
        let key = |bits: u32| order(encode(f32::from_bits(bits)));
        let mut starts = vec![0u32];
        loop {
            let lo = *starts.last().expect("one start");
            let k = key(lo);
            if key(inf) <= k {
                break;
            }
            // The first bit pattern above `lo` whose key is larger.
            let (mut a, mut b) = (lo, inf);
            while b - a > 1 {
                let mid = a + (b - a) / 2;
                if key(mid) > k { b = mid } else { a = mid }
            }
            starts.push(b);
        }
        let n = starts.len().next_power_of_two();
        let pair = |bits: u32| {
            let x = f32::from_bits(bits);
            u32::from(encode(x)) | u32::from(encode(-x)) << 8
        };
        let mut codes: Vec<u32> = starts.iter().map(|&s| pair(s)).collect();
        let last = *codes.last().expect("one interval");
        codes.resize(n, last);
        let mut starts: Vec<f32> = starts.into_iter().map(f32::from_bits).collect();
        starts.resize(n, f32::NAN);
        let nan = u32::from(encode(f32::NAN)) | u32::from(encode(-f32::NAN)) << 8;
        EncodeTable { starts, codes, nan }
    }

    /// The code the table gives for `x`: the device's algorithm, for tests.
    pub fn lookup(&self, x: f32) -> u8 {
        let shift = if x.is_sign_negative() { 8 } else { 0 };
        if x.is_nan() {
            return (self.nan >> shift) as u8;
        }
        let a = x.abs();
        let mut i = 0;
        let mut step = self.starts.len() / 2;
        while step > 0 {
            if self.starts[i + step] <= a {
                i += step;
            }
            step /= 2;
        }
        (self.codes[i] >> shift) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fp8Format, Overflow, decode, encode};

    fn probes() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
        ];
        let mut s = 0x1234_5678u32;
        for _ in 0..20000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            v.push(f32::from_bits(s));
        }
        for e in -140..=130 {
            for m in [1.0f32, 1.25, 1.5, 1.75, 1.0625, 1.125] {
                let x = m * 2f32.powi(e);
                v.extend([
                    x,
                    -x,
                    f32::from_bits(x.to_bits() + 1),
                    f32::from_bits(x.to_bits().saturating_sub(1)),
                ]);
            }
        }
        v.retain(|x| !x.is_nan());
        v
    }

    fn check(table: &EncodeTable, encode: impl Fn(f32) -> u8) {
        for x in probes() {
            assert_eq!(table.lookup(x), encode(x), "x = {x:e}");
        }
        for s in &table.starts {
            if s.is_finite() {
                let below = f32::from_bits(s.to_bits().saturating_sub(1));
                for y in [*s, -*s, below, -below] {
                    assert_eq!(table.lookup(y), encode(y), "y = {y:e}");
                }
            }
        }
        assert_eq!(table.lookup(f32::NAN), encode(f32::NAN));
        assert_eq!(table.lookup(-f32::NAN), encode(-f32::NAN));
    }

    #[test]
    fn fp8_tables_agree_with_the_encoder() {
        for format in Fp8Format::ALL {
            for overflow in [Overflow::Saturate, Overflow::Nan] {
                for scale in [-3, 0, 5] {
                    let enc = |x: f32| encode(format, x, scale, overflow);
                    let order = |c: u8| {
                        let v = f64::from(decode(format, c, scale)).abs();
                        if v.is_nan() { f64::INFINITY * 2.0 } else { v }
                    };
                    let t = EncodeTable::build(enc, order);
                    assert!(t.starts.len() <= 256);
                    check(&t, enc);
                }
            }
        }
    }

    fn nan_last(v: f32) -> f64 {
        if v.is_nan() {
            f64::MAX
        } else {
            f64::from(v.abs())
        }
    }

    #[test]
    fn fp4_and_e8m0_tables_agree() {
        let t = EncodeTable::build(fp4_code, |c| nan_last(fp4_value(c)));
        check(&t, fp4_code);
        let t = EncodeTable::build(e8m0_code, |c| nan_last(e8m0_value(c)));
        check(&t, e8m0_code);
    }

    #[test]
    fn fp4_matches_ml_dtypes() {
        // From ml_dtypes 0.7 `astype(float4_e2m1fn)`: 2.5 -> 2 (tie to even), 3.5 -> 4,
        // 1e6 -> 6, NaN -> 0x8, -NaN -> 0, inf -> 6, 0.25 -> 0, 0.2500001 -> 0.5, 0.75 -> 1.
        let cases = [
            (2.5, 4),
            (3.5, 6),
            (-2.5, 0xC),
            (1e6, 7),
            (f32::NAN, 8),
            (-f32::NAN, 0),
            (f32::INFINITY, 7),
            (f32::NEG_INFINITY, 15),
            (-0.0, 8),
            (0.25, 0),
            (0.250_000_03, 1),
            (0.75, 2),
            (5.0, 6),
        ];
        for (x, code) in cases {
            assert_eq!(fp4_code(x), code, "{x}");
        }
    }

    #[test]
    fn ints_match_numpy_and_ml_dtypes() {
        let i4 = IntFormat {
            bits: 4,
            signed: true,
        };
        let u4 = IntFormat {
            bits: 4,
            signed: false,
        };
        let i2 = IntFormat {
            bits: 2,
            signed: true,
        };
        let i8 = IntFormat {
            bits: 8,
            signed: true,
        };
        let u8 = IntFormat {
            bits: 8,
            signed: false,
        };
        // ml_dtypes 0.7: int4 of [2.7, -8.6, 8, -9, nan] = [2, -8, 0, 0, 0].
        assert_eq!(
            [2.7, -8.6, 8.0, -9.0, f32::NAN].map(|x| i4.from_f32(x)),
            [2, -8, 0, 0, 0]
        );
        assert_eq!([-2.5, 15.9, 16.0].map(|x| u4.from_f32(x)), [0, 15, 0]);
        assert_eq!([2.5, -2.5, 1.9].map(|x| i2.from_f32(x)), [0, -2, 1]);
        // NumPy: int8 of [1.5, -1.5, 300, -3] = [1, -1, 44, -3]; uint8 = [1, 255, 44, 253].
        assert_eq!(
            [1.5, -1.5, 300.0, -3.0].map(|x| i8.from_f32(x)),
            [1, -1, 44, -3]
        );
        assert_eq!(
            [1.5, -1.5, 300.0, -3.0].map(|x| u8.from_f32(x)),
            [1, 255, 44, 253]
        );
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_bits(1.0), 0x3F80);
        assert_eq!(bf16_value(bf16_bits(0.478_925_47)), 0.478_515_63);
        assert_eq!(bf16_bits(f32::from_bits(0x3F80_8000)), 0x3F80); // tie, even
        assert_eq!(bf16_bits(f32::from_bits(0x3F81_8000)), 0x3F82); // tie, up to even
        assert_eq!(bf16_bits(f32::NAN), 0x7FC0);
        assert_eq!(bf16_bits(f32::INFINITY), 0x7F80);
        assert_eq!(bf16_bits(f32::MAX), 0x7F80);
    }

    #[test]
    fn e8m0_rounds_up() {
        assert_eq!(
            [0.0, 0.124, 0.25, 1.1, 8.0].map(e8m0_code),
            [0, 124, 125, 128, 130]
        );
        assert_eq!(e8m0_code(f32::NAN), 0xFF);
        assert_eq!(e8m0_value(127), 1.0);
        assert_eq!(e8m0_value(0), 2f32.powi(-127));
    }
}

/// One-byte element formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ByteType {
    /// FP8 of any of the four formats, with its scale.
    Fp8(crate::Fp8Format, i8),
    /// OCP MX FP4 E2M1, the code in the low nibble.
    F4E2M1,
    /// OCP MX E8M0.
    E8M0,
    /// 0 or 1.
    Bool,
    /// An integer of 2, 4 or 8 bits (signed ones sign-extended to the byte).
    Int {
        /// Bits.
        bits: u8,
        /// Two's complement.
        signed: bool,
    },
}

impl ByteType {
    /// The value of byte `b`.
    pub fn value(self, b: u8) -> f32 {
        match self {
            ByteType::Fp8(f, s) => crate::decode(f, b, i32::from(s)),
            ByteType::F4E2M1 => fp4_value(b),
            ByteType::E8M0 => e8m0_value(b),
            ByteType::Bool => f32::from(u8::from(b != 0)),
            ByteType::Int { signed: true, .. } => f32::from(b as i8),
            ByteType::Int { signed: false, .. } => f32::from(b),
        }
    }

    /// The value of every byte.
    pub fn values(self) -> [f32; 256] {
        std::array::from_fn(|i| self.value(i as u8))
    }
}
