//! Agreement with ml_dtypes, through the golden files in `tests/data/` that
//! `scripts/gen_fp8_golden.py` generates (the file headers name the ml_dtypes version). Python is
//! not needed to run these tests.

mod common;

use ipu_numerics::{Fp8Format, Overflow, decode, encode, f16_bits, f16_value};

const DECODE: &str = include_str!("data/fp8_decode.txt");
const ENCODE: &str = include_str!("data/fp8_encode.txt");

/// Scales at which the scale-0 golden encodings are checked again, with inputs multiplied by
/// `2^scale` (when that product is exact in f32).
const SCALES: [i32; 8] = [-32, -17, -5, -1, 1, 4, 19, 31];

fn rows(text: &str) -> impl Iterator<Item = (usize, Vec<u32>)> + '_ {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#'))
        .map(|(i, l)| {
            let fields = l
                .split_whitespace()
                .map(|f| {
                    u32::from_str_radix(f, 16).unwrap_or_else(|e| panic!("line {}: {e}", i + 1))
                })
                .collect();
            (i + 1, fields)
        })
}

#[test]
fn golden_files_name_their_generator() {
    for text in [DECODE, ENCODE] {
        let first = text.lines().next().unwrap();
        assert!(first.contains("scripts/gen_fp8_golden.py"), "{first}");
        assert!(first.contains("ml_dtypes"), "{first}");
    }
}

#[test]
fn every_code_decodes_like_ml_dtypes() {
    let mut checked = 0;
    for (line, fields) in rows(DECODE) {
        assert_eq!(fields.len(), 1 + Fp8Format::ALL.len(), "line {line}");
        let code = u8::try_from(fields[0]).unwrap();
        for (format, &bits) in Fp8Format::ALL.iter().zip(&fields[1..]) {
            let expected = f32::from_bits(bits);
            let got = decode(*format, code, 0);
            if expected.is_nan() {
                assert!(
                    got.is_nan(),
                    "{format} {code:#04x}: got {got}, ml_dtypes NaN"
                );
                assert!(format.is_nan(code), "{format} {code:#04x}");
            } else {
                assert_eq!(
                    got.to_bits(),
                    bits,
                    "{format} {code:#04x}: got {got}, ml_dtypes {expected}"
                );
                assert!(!format.is_nan(code), "{format} {code:#04x}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 256 * 4);
}

#[test]
fn every_code_decodes_like_ml_dtypes_at_every_scale() {
    for (_, fields) in rows(DECODE) {
        let code = u8::try_from(fields[0]).unwrap();
        for (format, &bits) in Fp8Format::ALL.iter().zip(&fields[1..]) {
            let expected = f32::from_bits(bits);
            for scale in ipu_numerics::SCALE_MIN..=ipu_numerics::SCALE_MAX {
                let got = decode(*format, code, scale);
                let want = f64::from(expected) * 2f64.powi(scale);
                if want.is_nan() {
                    assert!(got.is_nan());
                } else {
                    assert_eq!(f64::from(got), want, "{format} {code:#04x} scale {scale}");
                }
            }
        }
    }
}

#[test]
fn round_to_nearest_encoding_agrees_with_ml_dtypes() {
    let mut probes = 0;
    let mut scaled = 0;
    for (line, fields) in rows(ENCODE) {
        assert_eq!(fields.len(), 2 + 2 * Fp8Format::ALL.len(), "line {line}");
        let x = f32::from_bits(fields[0]);
        for (i, format) in Fp8Format::ALL.into_iter().enumerate() {
            let want_nan = fields[2 + 2 * i] as u8;
            let want_sat = fields[3 + 2 * i] as u8;
            let got_nan = encode(format, x, 0, Overflow::Nan);
            let got_sat = encode(format, x, 0, Overflow::Saturate);
            assert_eq!(
                got_nan, want_nan,
                "line {line}: {format} x={x:e} ({:08x}) Overflow::Nan",
                fields[0]
            );
            assert_eq!(
                got_sat, want_sat,
                "line {line}: {format} x={x:e} ({:08x}) Overflow::Saturate",
                fields[0]
            );
            for scale in SCALES {
                let y = f64::from(x) * 2f64.powi(scale);
                if !x.is_finite() || (y as f32).is_infinite() || f64::from(y as f32) != y {
                    continue;
                }
                let y = y as f32;
                let what = format!("line {line}: {format} scale {scale}");
                common::assert_codes(format, y, scale, (want_nan, want_sat), &what);
                scaled += 1;
            }
        }
        probes += 1;
    }
    assert!(probes > 4000, "{probes} probes");
    assert!(scaled > 100_000, "{scaled} scaled checks");
}

#[test]
fn f16_rounding_agrees_with_numpy() {
    for (line, fields) in rows(ENCODE) {
        let x = f32::from_bits(fields[0]);
        let want = fields[1] as u16;
        let got = f16_bits(x);
        if x.is_nan() {
            assert!(f16_value(got).is_nan(), "line {line}");
        } else {
            assert_eq!(got, want, "line {line}: x={x:e}");
        }
    }
}
