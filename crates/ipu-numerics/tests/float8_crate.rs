//! Cross-check of the OCP formats against an independent implementation, the `float8` crate
//! (a port of NVIDIA's `cuda_fp8.hpp` conversions). Its `from_f32` saturates finite values and
//! maps infinities to ±max, which is [`Overflow::Saturate`].

use float8::{F8E4M3, F8E5M2};
use ipu_numerics::{Fp8Format, Overflow, decode, encode};

#[test]
fn every_code_decodes_like_the_float8_crate() {
    for code in 0..=255u8 {
        let ours = decode(Fp8Format::E4M3FN, code, 0);
        let theirs = F8E4M3::from_bits(code).to_f32();
        assert!(
            ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()),
            "e4m3fn {code:#04x}"
        );
        let ours = decode(Fp8Format::E5M2, code, 0);
        let theirs = F8E5M2::from_bits(code).to_f32();
        assert!(
            ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()),
            "e5m2 {code:#04x}"
        );
    }
}

fn check(x: f32) {
    if x.is_nan() {
        // The float8 crate copies f64 payload bits into E5M2 NaNs; only NaN-ness is compared.
        assert!(Fp8Format::E4M3FN.is_nan(encode(Fp8Format::E4M3FN, x, 0, Overflow::Saturate)));
        assert!(Fp8Format::E5M2.is_nan(encode(Fp8Format::E5M2, x, 0, Overflow::Saturate)));
        return;
    }
    assert_eq!(
        encode(Fp8Format::E4M3FN, x, 0, Overflow::Saturate),
        F8E4M3::from_f32(x).to_bits(),
        "e4m3fn x={x:e} ({:08x})",
        x.to_bits()
    );
    assert_eq!(
        encode(Fp8Format::E5M2, x, 0, Overflow::Saturate),
        F8E5M2::from_f32(x).to_bits(),
        "e5m2 x={x:e} ({:08x})",
        x.to_bits()
    );
}

#[test]
fn encoding_agrees_with_the_float8_crate_on_a_sweep_of_f32() {
    // Every 251st f32 bit pattern: about 17 million values touching every exponent.
    let mut bits = 0u32;
    while let Some(next) = bits.checked_add(251) {
        check(f32::from_bits(bits));
        bits = next;
    }
}

#[test]
fn encoding_agrees_with_the_float8_crate_on_every_f16() {
    for bits in 0..=u16::MAX {
        check(half::f16::from_bits(bits).to_f32());
    }
}
