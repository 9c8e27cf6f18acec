//! What the numerics test suites share.

#![allow(dead_code)]

use ipu_numerics::{Fp8Format, Overflow, encode};

/// Asserts the codes `x` encodes to in `format` at `scale`: `nan` when overflow gives NaN (or
/// infinity), `saturate` when it saturates.
#[track_caller]
pub fn assert_codes(format: Fp8Format, x: f32, scale: i32, (nan, saturate): (u8, u8), what: &str) {
    assert_eq!(encode(format, x, scale, Overflow::Nan), nan, "{what}");
    assert_eq!(
        encode(format, x, scale, Overflow::Saturate),
        saturate,
        "{what}"
    );
}
