//! The AMP: the tile's unit (its mode and weights), a worker context's accumulators, and one
//! phase of the pipeline ([`amp_step`]).

use ipu_isa::{AmpMode, Fp8Format};

use crate::fault::FaultKind;

use super::float::{f, h, numerics_format, to_h};
use super::trap::{R, trap};

/// Largest number of AMP weights (K x columns) of any mode: 32 x 16 (FP8 inputs).
pub(super) const AMP_WEIGHTS_MAX: usize = 512;

/// A worker context's AMP accumulators: the row being accumulated and the last completed row.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub(crate) struct AmpAcc {
    pub acc: [f32; 16],
    pub prev: [f32; 16],
}

/// The tile's AMP: mode and weights (decoded to f32, k-major: `w[k * columns + c]`).
#[derive(Clone, Debug)]
pub(crate) struct AmpUnit {
    pub mode: Option<AmpMode>,
    /// Whether the host runs the vectorised `f16f16` step (same results, see `simd`).
    pub simd: bool,
    pub weights: [f32; AMP_WEIGHTS_MAX],
}

/// One AMP phase (see `docs/isa.md`): accumulates the input lanes of chunk `phase` of the
/// current row against the weights into every column, adds the partials-in to the columns of
/// chunk `phase`, and returns the chunk-`phase` columns of the previously completed row,
/// rounded to the partials type. Phase 3 completes the row.
#[inline(always)]
pub(crate) fn amp_step(
    unit: &AmpUnit,
    acc: &mut AmpAcc,
    input: [u32; 2],
    partials: [u32; 2],
    phase: u8,
    fp8: (Fp8Format, i8),
) -> R<[u32; 2]> {
    let Some(mode) = unit.mode else {
        return Err(trap(FaultKind::AmpNotConfigured, None));
    };
    if phase > 3 {
        return Err(trap(FaultKind::IllegalOperands("amp phase above 3"), None));
    }
    Ok(amp_run(
        unit,
        mode,
        acc,
        input,
        partials,
        phase as usize,
        fp8,
    ))
}

/// [`amp_step`] once the mode and phase (below 4) are known good.
#[inline]
pub(super) fn amp_run(
    unit: &AmpUnit,
    mode: AmpMode,
    acc: &mut AmpAcc,
    input: [u32; 2],
    partials: [u32; 2],
    p: usize,
    fp8: (Fp8Format, i8),
) -> [u32; 2] {
    let phase = p as u8;
    #[cfg(target_arch = "x86_64")]
    if unit.simd {
        match mode {
            AmpMode::F16F16 => {
                return crate::simd::amp_f16f16(&unit.weights, acc, input, partials, p);
            }
            AmpMode::F16F32 => {
                return crate::simd::amp_f16f32(&unit.weights, acc, input, partials, p);
            }
            _ => {}
        }
    }
    let g = mode.geometry();
    let mut x = [0f32; 8];
    match mode {
        AmpMode::F16F16 | AmpMode::F16F32 => {
            for (i, v) in x.iter_mut().take(4).enumerate() {
                *v = h(input[i / 2] >> (16 * (i % 2)));
            }
        }
        AmpMode::F32F32 => {
            x[0] = f(input[0]);
            x[1] = f(input[1]);
        }
        AmpMode::F8F16 => {
            let fmt = numerics_format(fp8.0);
            for (i, v) in x.iter_mut().enumerate() {
                let code = (input[i / 4] >> (8 * (i % 4))) as u8;
                *v = ipu_numerics::decode(fmt, code, fp8.1 as i32);
            }
        }
    }
    let k0 = p * g.lanes as usize;
    match mode {
        AmpMode::F16F16 => mac::<16, 4>(&mut acc.acc, &x, &unit.weights, k0),
        AmpMode::F16F32 => mac::<8, 4>(&mut acc.acc, &x, &unit.weights, k0),
        AmpMode::F32F32 => mac::<8, 2>(&mut acc.acc, &x, &unit.weights, k0),
        AmpMode::F8F16 => mac::<16, 8>(&mut acc.acc, &x, &unit.weights, k0),
    }
    let out = match mode {
        AmpMode::F16F16 | AmpMode::F8F16 => {
            let c0 = p * 4;
            for i in 0..4 {
                acc.acc[c0 + i] += h(partials[i / 2] >> (16 * (i % 2)));
            }
            let pv = &acc.prev;
            [
                to_h(pv[c0]) | to_h(pv[c0 + 1]) << 16,
                to_h(pv[c0 + 2]) | to_h(pv[c0 + 3]) << 16,
            ]
        }
        AmpMode::F16F32 | AmpMode::F32F32 => {
            let c0 = p * 2;
            acc.acc[c0] += f(partials[0]);
            acc.acc[c0 + 1] += f(partials[1]);
            [acc.prev[c0].to_bits(), acc.prev[c0 + 1].to_bits()]
        }
    };
    if phase == 3 {
        acc.prev = acc.acc;
        acc.acc = [0.0; 16];
    }
    out
}

/// `acc[c] += x[j] * w[k0 + j][c]` for every column, lanes in order (each column's sum is
/// accumulated in K order; the loop order only lets the columns run in parallel).
#[inline(always)]
fn mac<const COLS: usize, const LANES: usize>(
    acc: &mut [f32; 16],
    x: &[f32; 8],
    w: &[f32; AMP_WEIGHTS_MAX],
    k0: usize,
) {
    let acc: &mut [f32; COLS] = (&mut acc[..COLS]).try_into().expect("COLS <= 16");
    for (j, &xv) in x.iter().take(LANES).enumerate() {
        let row: &[f32; COLS] = w[(k0 + j) * COLS..(k0 + j + 1) * COLS]
            .try_into()
            .expect("in range");
        for c in 0..COLS {
            acc[c] += xv * row[c];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::xorshift;
    use super::*;

    /// An f16 bit pattern from one draw: ordinary values, subnormals, large values,
    /// infinities, NaNs.
    fn half_bits(n: &mut dyn FnMut() -> u64) -> u32 {
        let r = n();
        match r % 16 {
            0 => (r >> 8) as u32 & 0x83FF,            // zero or subnormal
            1 => 0x7C00 | ((r >> 8) as u32 & 0x8000), // infinity
            2 => 0x7C01 | ((r >> 8) as u32 & 0x83FF), // NaN
            3 => 0x7800 | ((r >> 8) as u32 & 0x83FF), // large
            _ => (r >> 8) as u32 & 0xBFFF,            // |x| < 2
        }
    }

    #[test]
    fn vectorised_f16f16_step_matches_the_portable_step() {
        if !crate::simd::available() {
            return;
        }
        let mut next = xorshift(0x1234_5678_9ABC_DEF1);
        for case in 0..200 {
            let mut weights = [0f32; AMP_WEIGHTS_MAX];
            for w in weights.iter_mut().take(256) {
                *w = h(half_bits(&mut next));
            }
            let unit = |simd| AmpUnit {
                mode: Some(AmpMode::F16F16),
                simd,
                weights,
            };
            let (portable, fast) = (unit(false), unit(true));
            let (mut a, mut b) = (AmpAcc::default(), AmpAcc::default());
            for step in 0..16u8 {
                let mut pair = || {
                    [
                        half_bits(&mut next) | half_bits(&mut next) << 16,
                        half_bits(&mut next) | half_bits(&mut next) << 16,
                    ]
                };
                let (input, partials) = (pair(), pair());
                let fp8 = (Fp8Format::F143, 0);
                let x = amp_step(&portable, &mut a, input, partials, step % 4, fp8).unwrap();
                let y = amp_step(&fast, &mut b, input, partials, step % 4, fp8).unwrap();
                let same_h = |p: u32, q: u32| p == q || (h(p).is_nan() && h(q).is_nan());
                for i in 0..2 {
                    for s in [0, 16] {
                        assert!(
                            same_h(x[i] >> s & 0xFFFF, y[i] >> s & 0xFFFF),
                            "case {case}"
                        );
                    }
                }
                for (p, q) in a.acc.iter().chain(&a.prev).zip(b.acc.iter().chain(&b.prev)) {
                    assert!(
                        p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()),
                        "case {case}"
                    );
                }
            }
        }
    }

    #[test]
    fn vectorised_f16f32_step_matches_the_portable_step() {
        if !crate::simd::available() {
            return;
        }
        let mut next = xorshift(0x0F1E_2D3C_4B5A_6978);
        for case in 0..300 {
            let mut weights = [0f32; AMP_WEIGHTS_MAX];
            for w in weights.iter_mut().take(128) {
                *w = h(half_bits(&mut next));
            }
            let unit = |simd| AmpUnit {
                mode: Some(AmpMode::F16F32),
                simd,
                weights,
            };
            let (portable, fast) = (unit(false), unit(true));
            let (mut a, mut b) = (AmpAcc::default(), AmpAcc::default());
            for step in 0..16u8 {
                let input = [
                    half_bits(&mut next) | half_bits(&mut next) << 16,
                    half_bits(&mut next) | half_bits(&mut next) << 16,
                ];
                let partials = [
                    h(half_bits(&mut next)).to_bits(),
                    h(half_bits(&mut next)).to_bits(),
                ];
                let fp8 = (Fp8Format::F143, 0);
                let x = amp_step(&portable, &mut a, input, partials, step % 4, fp8).unwrap();
                let y = amp_step(&fast, &mut b, input, partials, step % 4, fp8).unwrap();
                // Equal bits, except that which NaN's payload survives may differ (see `simd`).
                let same = |p: u32, q: u32| p == q || (f(p).is_nan() && f(q).is_nan());
                assert!(same(x[0], y[0]) && same(x[1], y[1]), "case {case}");
                for (p, q) in a.acc.iter().chain(&a.prev).zip(b.acc.iter().chain(&b.prev)) {
                    assert!(same(p.to_bits(), q.to_bits()), "case {case} step {step}");
                }
            }
        }
    }
}
