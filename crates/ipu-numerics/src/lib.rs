//! Number formats of the IPU: f16 (through the `half` crate) and the FP8 formats.
//!
//! Graphcore's F143 (1-4-3, bias 8) and F152 (1-5-2, bias 16) are "FNUZ": no infinities, no
//! negative zero, a single NaN at 0x80. Each FP8 tensor carries a power-of-two scale: the value
//! of a code is `decoded(code) * 2^scale`, with `scale` a signed 6-bit integer. ONNX's OCP
//! E4M3FN and E5M2 are provided for interchange.

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

/// Smallest FP8 tensor scale (signed 6-bit).
pub const SCALE_MIN: i32 = -32;
/// Largest FP8 tensor scale (signed 6-bit).
pub const SCALE_MAX: i32 = 31;

/// What an encoding does with a finite value beyond the format's largest magnitude.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Overflow {
    /// Clamp to the largest finite magnitude of the same sign.
    Saturate,
    /// Produce NaN (or, for E5M2, infinity of the same sign).
    Nan,
}
