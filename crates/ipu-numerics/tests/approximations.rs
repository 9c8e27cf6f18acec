//! The accuracy of the device's `tanh` and `erf` sequences against the exact functions, over
//! every f16 value and a dense sweep of f32 bit patterns. The printed maxima are the figures in
//! `docs/numerics.md`:
//!
//! `cargo test -p ipu-numerics --test approximations -- --nocapture`

use ipu_numerics::unary::{erf_device, erf_exact, log_device, tanh_device};

/// Largest errors of `device` against `exact` over `xs`: absolute, and relative to `|exact|`
/// where the exact result is a normal f32 (below, f32 itself has no relative accuracy).
fn errors(
    xs: impl Iterator<Item = f32>,
    device: fn(f32) -> f32,
    exact: fn(f64) -> f64,
) -> (f64, f64, f32, f32) {
    let (mut abs, mut rel, mut at_abs, mut at_rel) = (0.0f64, 0.0f64, 0.0f32, 0.0f32);
    for x in xs.filter(|x| x.is_finite()) {
        let d = f64::from(device(x));
        let e = exact(f64::from(x));
        let err = (d - e).abs();
        if err > abs {
            (abs, at_abs) = (err, x);
        }
        if e.abs() >= f64::from(f32::MIN_POSITIVE) && err / e.abs() > rel {
            (rel, at_rel) = (err / e.abs(), x);
        }
    }
    (abs, rel, at_abs, at_rel)
}

fn every_f16() -> impl Iterator<Item = f32> {
    (0..=u16::MAX).map(|b| half::f16::from_bits(b).to_f32())
}

/// Every 61st f32 bit pattern of either sign (a prime stride reaches every mantissa pattern
/// class), about 70 million points.
fn f32_sweep() -> impl Iterator<Item = f32> {
    (0..0x7F80_0000u32)
        .step_by(61)
        .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
}

fn check(name: &str, device: fn(f32) -> f32, exact: fn(f64) -> f64, rel_max: f64, abs_max: f64) {
    for (set, (abs, rel, at_abs, at_rel)) in [
        ("every f16 value", errors(every_f16(), device, exact)),
        ("f32 sweep", errors(f32_sweep(), device, exact)),
    ] {
        println!(
            "{name} over {set}: max abs error {abs:.3e} (at {at_abs:e}), max rel error {rel:.3e} (at {at_rel:e})"
        );
        assert!(rel <= rel_max && abs <= abs_max, "{name} over {set}");
    }
}

#[test]
fn tanh_is_accurate_to_a_few_f32_ulps() {
    check("tanh", tanh_device, f64::tanh, 5e-7, 1e-7);
}

#[test]
fn erf_is_accurate_to_the_published_bound() {
    check("erf", erf_device, erf_exact, 2e-6, 5e-7);
}

#[test]
fn sqrt_is_correctly_rounded() {
    for x in f32_sweep().filter(|x| *x >= 0.0) {
        assert_eq!(x.sqrt(), f64::from(x).sqrt() as f32);
    }
}

#[test]
fn log_is_accurate_to_a_few_f32_ulps_and_ieee_at_the_special_values() {
    check("log", log_device, f64::ln, 5e-7, 1e-5);
    // Subnormal inputs are scaled into the normal range.
    for b in (1..0x0080_0000u32).step_by(997) {
        let x = f32::from_bits(b);
        let (d, e) = (f64::from(log_device(x)), f64::from(x).ln());
        assert!((d - e).abs() <= 5e-7 * e.abs(), "log({x:e}) = {d} vs {e}");
    }
    assert_eq!(log_device(0.0), f32::NEG_INFINITY);
    assert_eq!(log_device(-0.0), f32::NEG_INFINITY);
    assert_eq!(log_device(f32::INFINITY), f32::INFINITY);
    assert_eq!(log_device(1.0), 0.0);
    for x in [-1.0, -f32::MIN_POSITIVE, f32::NEG_INFINITY, f32::NAN] {
        assert!(log_device(x).is_nan(), "log({x})");
    }
}

/// `sin` and `cos` below the reduction's limit (`SIN_ARGUMENT_MAX`, about 6.6e6), against f64:
/// absolute error only (near a zero of the function the exact result is as small as the
/// reduction's error, so a relative bound says nothing there).
#[test]
fn sin_and_cos_are_accurate_to_a_few_f32_ulps_below_the_argument_limit() {
    use ipu_numerics::unary::{SIN_ARGUMENT_MAX, sin_cos_device};
    let below = |x: &f32| x.abs() < SIN_ARGUMENT_MAX;
    for (name, offset, exact) in [("sin", 0, f64::sin as fn(f64) -> f64), ("cos", 1, f64::cos)] {
        let device = |x: f32| sin_cos_device(x, offset);
        for (set, xs) in [
            (
                "every f16 value",
                every_f16().filter(below).collect::<Vec<_>>(),
            ),
            ("f32 sweep", f32_sweep().filter(below).collect::<Vec<_>>()),
        ] {
            let (mut abs, mut at) = (0.0f64, 0.0f32);
            for &x in &xs {
                let err = (f64::from(device(x)) - exact(f64::from(x))).abs();
                if err > abs {
                    (abs, at) = (err, x);
                }
            }
            println!("{name} over {set} below the limit: max abs error {abs:.3e} (at {at:e})");
            assert!(abs <= 4e-7, "{name} over {set}: {abs:e} at {at:e}");
        }
    }
}
