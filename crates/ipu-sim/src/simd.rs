//! The `f16f16` and `f16f32` AMP steps with x86 F16C/AVX instructions, when the host has them.
//!
//! They perform exactly the operations of the portable step (`exec::amp::amp_step`): each product
//! and each sum rounded to f32, in K order per column (no fused multiply-add), f16 conversions
//! rounding to nearest even. Tests compare the two on random and special values.
//! The one freedom IEEE leaves, which NaN's payload survives when both operands of an
//! operation are NaNs, may differ between the paths; a host always takes the same path, so
//! results stay bit-identical from run to run and at any thread count.

use crate::exec::amp::AmpAcc;

/// Whether the host can run [`amp_f16f16`].
#[inline(always)]
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx") && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// One `f16f16` AMP phase. Callers check [`available`] first.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn amp_f16f16(
    weights: &[f32; 512],
    acc: &mut AmpAcc,
    input: [u32; 2],
    partials: [u32; 2],
    phase: usize,
) -> [u32; 2] {
    debug_assert!(available() && phase < 4);
    let rows: &[f32; 64] = weights[64 * phase..][..64]
        .try_into()
        .expect("four rows of 16");
    let as_i64 = |v: [u32; 2]| (v[0] as u64 | (v[1] as u64) << 32) as i64;
    // SAFETY: the caller checked that the host supports AVX and F16C.
    let bits = unsafe { step(acc, rows, as_i64(input), as_i64(partials), phase) };
    [bits as u32, (bits >> 32) as u32]
}

/// [`amp_f16f16`] on the phase's four weight rows, with the input and partials as the bits of
/// four f16 each; returns the four f16 results' bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
fn step(acc: &mut AmpAcc, rows: &[f32; 64], input: i64, partials: i64, phase: usize) -> u64 {
    use std::arch::x86_64::*;
    let x = _mm_cvtph_ps(_mm_set_epi64x(0, input));
    let mut xs = [0f32; 4];
    // SAFETY (all loads and stores below): every pointer comes from an array whose length
    // covers the access: rows j * 16 .. + 16 <= 64, acc and prev (4p .. 4p + 4) of 16 f32.
    unsafe {
        _mm_storeu_ps(xs.as_mut_ptr(), x);
        let a = acc.acc.as_mut_ptr();
        let mut lo = _mm256_loadu_ps(a);
        let mut hi = _mm256_loadu_ps(a.add(8));
        for (j, &xj) in xs.iter().enumerate() {
            let w = rows.as_ptr().add(j * 16);
            let b = _mm256_set1_ps(xj);
            lo = _mm256_add_ps(lo, _mm256_mul_ps(b, _mm256_loadu_ps(w)));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(b, _mm256_loadu_ps(w.add(8))));
        }
        // The partials are added to columns 4p .. 4p + 4 in the vectors, the other lanes
        // adding -0.0, which leaves every value as it is (see `step_f16f32`): a narrower
        // store into the accumulators would stall the next step's vector loads.
        let p = _mm_cvtph_ps(_mm_set_epi64x(0, partials));
        let neg = _mm_set1_ps(-0.0);
        let none = _mm256_set1_ps(-0.0);
        let (plo, phi) = match phase {
            0 => (_mm256_set_m128(neg, p), none),
            1 => (_mm256_set_m128(p, neg), none),
            2 => (none, _mm256_set_m128(neg, p)),
            _ => (none, _mm256_set_m128(p, neg)),
        };
        lo = _mm256_add_ps(lo, plo);
        hi = _mm256_add_ps(hi, phi);
        _mm256_storeu_ps(a, lo);
        _mm256_storeu_ps(a.add(8), hi);
        let out = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_loadu_ps(
            acc.prev.as_ptr().add(4 * phase),
        ));
        let bits = _mm_cvtsi128_si64(out) as u64;
        if phase == 3 {
            acc.prev = acc.acc;
            acc.acc = [0.0; 16];
        }
        bits
    }
}

/// One `f16f32` AMP phase (8 columns, four f16 input lanes, f32 partials). Callers check
/// [`available`] first.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn amp_f16f32(
    weights: &[f32; 512],
    acc: &mut AmpAcc,
    input: [u32; 2],
    partials: [u32; 2],
    phase: usize,
) -> [u32; 2] {
    debug_assert!(available() && phase < 4);
    let rows: &[f32; 32] = weights[32 * phase..][..32]
        .try_into()
        .expect("four rows of 8");
    let input = (input[0] as u64 | (input[1] as u64) << 32) as i64;
    // SAFETY: the caller checked that the host supports AVX and F16C.
    unsafe { step_f16f32(acc, rows, input, partials, phase) }
}

/// [`amp_f16f32`] on the phase's four weight rows of 8 columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
fn step_f16f32(
    acc: &mut AmpAcc,
    rows: &[f32; 32],
    input: i64,
    partials: [u32; 2],
    phase: usize,
) -> [u32; 2] {
    use std::arch::x86_64::*;
    let x = _mm_cvtph_ps(_mm_set_epi64x(0, input));
    let mut xs = [0f32; 4];
    // SAFETY (all loads and stores below): rows j * 8 .. + 8 <= 32, acc 0 .. 8 of 16 f32.
    unsafe {
        _mm_storeu_ps(xs.as_mut_ptr(), x);
        let a = acc.acc.as_mut_ptr();
        let mut v = _mm256_loadu_ps(a);
        for (j, &xj) in xs.iter().enumerate() {
            let w = _mm256_loadu_ps(rows.as_ptr().add(j * 8));
            v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_set1_ps(xj), w));
        }
        // The partials are added to columns 2p and 2p + 1 in the vector, the other lanes
        // adding -0.0, which leaves every value as it is (-0.0 + -0.0 is -0.0, and the
        // accumulators hold no signalling NaN): a scalar store into the accumulators here
        // would stall the next step's vector load.
        let pair = (partials[0] as u64 | (partials[1] as u64) << 32) as i64;
        let neg_zeros = 0x8000_0000_8000_0000u64 as i64;
        let lane = |q: usize| if q == phase { pair } else { neg_zeros };
        let pv = _mm256_castsi256_ps(_mm256_set_epi64x(lane(3), lane(2), lane(1), lane(0)));
        v = _mm256_add_ps(v, pv);
        _mm256_storeu_ps(a, v);
    }
    let c0 = 2 * phase;
    let out = [acc.prev[c0].to_bits(), acc.prev[c0 + 1].to_bits()];
    if phase == 3 {
        acc.prev = acc.acc;
        acc.acc = [0.0; 16];
    }
    out
}
