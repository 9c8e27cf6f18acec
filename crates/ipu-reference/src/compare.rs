//! Comparison metrics between a result and its reference, and per-dtype tolerances.
//!
//! The tolerance of a comparison follows the dtype of the expected tensor (the graph output's
//! dtype); the values and their reasoning are in docs/numerics.md ("Accuracy checks and
//! thresholds").

use ipu_graph::{DType, Graph, ValueId};

use crate::Tensor;

/// Per-element and per-row limits for a comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Absolute part of the element limit.
    pub atol: f64,
    /// Relative part of the element limit: an element fails when `|a - e| > atol + rtol |e|`.
    pub rtol: f64,
    /// Lowest acceptable cosine similarity of any row (last axis).
    pub min_cosine: f64,
}

/// f32 outputs: f32 keeps 24 bits; device and exact differ by f32 accumulation order and
/// rounding of intermediate results, a few units of 2^-24 relative per term.
pub const TOLERANCE_F32: Tolerance = Tolerance {
    atol: 1e-5,
    rtol: 1e-4,
    min_cosine: 0.999_99,
};
/// f16 outputs: unit roundoff 2^-11 = 4.9e-4; the output rounding alone costs half of it, f16
/// partials and f16 intermediates add a few more units.
pub const TOLERANCE_F16: Tolerance = Tolerance {
    atol: 1e-3,
    rtol: 1e-2,
    min_cosine: 0.999,
};
/// F143 outputs (3 mantissa bits, unit roundoff 2^-4): one step of the format relative
/// (`rtol`), and an absolute floor of two F143 steps at magnitude 1 (`atol` = 2 x 2^-3): FP8
/// graphs quantise intermediates to 3 bits, and each quantisation's error (up to 2^-4 of the
/// intermediate) reaches the output as an absolute error on the scale of the data, which in
/// the built-ins is of order 1. The FP8 scale does not change these limits.
pub const TOLERANCE_F143: Tolerance = Tolerance {
    atol: 0.25,
    rtol: 0.125,
    min_cosine: 0.99,
};
/// F152 outputs (2 mantissa bits, unit roundoff 2^-3): as F143 with one bit less.
pub const TOLERANCE_F152: Tolerance = Tolerance {
    atol: 0.5,
    rtol: 0.25,
    min_cosine: 0.98,
};

/// bf16 outputs (7 mantissa bits, unit roundoff 2^-8): the f16 limits scaled by the 8 times
/// larger roundoff.
pub const TOLERANCE_BF16: Tolerance = Tolerance {
    atol: 8e-3,
    rtol: 8e-2,
    min_cosine: 0.999,
};
/// FP4 E2M1 outputs (1 mantissa bit): one step at magnitude 1 (0.5) absolute, half a step
/// relative.
pub const TOLERANCE_F4E2M1: Tolerance = Tolerance {
    atol: 0.5,
    rtol: 0.25,
    min_cosine: 0.9,
};
/// E8M0 outputs (powers of two): one step relative.
pub const TOLERANCE_E8M0: Tolerance = Tolerance {
    atol: 0.0,
    rtol: 1.0,
    min_cosine: 0.9,
};
/// Integer and bool outputs: equal.
pub const TOLERANCE_EXACT: Tolerance = Tolerance {
    atol: 0.0,
    rtol: 0.0,
    min_cosine: 0.0,
};

impl Tolerance {
    /// The tolerance for outputs of `dtype`.
    pub fn for_dtype(dtype: DType) -> Tolerance {
        match dtype {
            DType::F32 => TOLERANCE_F32,
            DType::F16 => TOLERANCE_F16,
            DType::F143 { .. } => TOLERANCE_F143,
            DType::F152 { .. } => TOLERANCE_F152,
            DType::Bf16 => TOLERANCE_BF16,
            DType::E4M3FN => TOLERANCE_F143,
            DType::E5M2 => TOLERANCE_F152,
            DType::F4E2M1 => TOLERANCE_F4E2M1,
            // A power of two: one step is a factor of two.
            DType::E8M0 => TOLERANCE_E8M0,
            // Integers and bool are exact.
            _ => TOLERANCE_EXACT,
        }
    }
}

/// The tolerance for comparing a device-precision result with the exact one: the loosest of
/// [`Tolerance::for_dtype`] over the output and every operation result it depends on. Graph
/// inputs are left out (both precisions see the same input values); an FP8 intermediate, for
/// instance, limits an f16 output to FP8 accuracy.
pub fn tolerance_versus_exact(graph: &Graph, output: ValueId) -> Tolerance {
    let out_dtype = graph.value(output).ty.dtype;
    let mut tol = Tolerance::for_dtype(out_dtype);
    let mut from_non_integer = false;
    let mut seen = vec![false; graph.values().len()];
    let mut stack = vec![output];
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut seen[v.0 as usize], true) {
            continue;
        }
        let Some(op) = graph.value(v).producer else {
            continue;
        };
        let t = Tolerance::for_dtype(graph.value(v).ty.dtype);
        if t.rtol > tol.rtol {
            tol = t;
        }
        stack.extend(graph.operation(op).inputs.iter().copied());
        for &i in &graph.operation(op).inputs {
            let d = graph.value(i).ty.dtype;
            if !matches!(d.class(), ipu_graph::DTypeClass::Int(_)) {
                from_non_integer = true;
            }
        }
    }
    // An integer computed from other values can differ by one step where the unrounded
    // values fall on the other side of a rounding or truncation boundary.
    if from_non_integer && matches!(out_dtype.class(), ipu_graph::DTypeClass::Int(_)) {
        tol.atol = tol.atol.max(1.0);
    }
    tol
}

/// The metrics of one comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Elements compared.
    pub checks: usize,
    /// Largest `|actual - expected|` (infinite when a NaN appears on one side only).
    pub max_abs_error: f64,
    /// Root mean square of `actual - expected`.
    pub rms_error: f64,
    /// Smallest cosine similarity between corresponding rows (last axis); two zero rows count
    /// as 1, one zero row as 0.
    pub min_cosine: f64,
    /// Elements with `|a - e| > atol + rtol |e|`.
    pub beyond_tolerance: usize,
    /// The tolerance used.
    pub tolerance: Tolerance,
}

impl Comparison {
    /// Pass when no element is beyond tolerance and every row's cosine is high enough.
    pub fn pass(&self) -> bool {
        self.beyond_tolerance == 0 && self.min_cosine >= self.tolerance.min_cosine
    }
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "checks={} max_abs_error={:.6e} rms_error={:.6e} min_cosine={:.9} beyond_tolerance={} atol={:e} rtol={:e} result={}",
            self.checks,
            self.max_abs_error,
            self.rms_error,
            self.min_cosine,
            self.beyond_tolerance,
            self.tolerance.atol,
            self.tolerance.rtol,
            if self.pass() { "PASS" } else { "FAIL" }
        )
    }
}

/// Compares `actual` with `expected` element by element. Tensors of different shapes compare
/// as everything wrong.
pub fn compare(actual: &Tensor, expected: &Tensor, tolerance: &Tolerance) -> Comparison {
    let n = expected.data.len();
    if actual.shape != expected.shape || actual.data.len() != n {
        return Comparison {
            checks: 0,
            max_abs_error: f64::INFINITY,
            rms_error: f64::INFINITY,
            min_cosine: 0.0,
            beyond_tolerance: n.max(actual.data.len()),
            tolerance: *tolerance,
        };
    }
    let (mut max_abs, mut sum_sq, mut beyond) = (0.0f64, 0.0f64, 0usize);
    for (&a, &e) in actual.data.iter().zip(&expected.data) {
        let (a, e) = (f64::from(a), f64::from(e));
        let diff = if a.is_nan() && e.is_nan() || a == e {
            0.0
        } else if a.is_nan() || e.is_nan() {
            f64::INFINITY
        } else {
            (a - e).abs()
        };
        max_abs = max_abs.max(diff);
        sum_sq += diff * diff;
        // An infinite difference (one side infinite or NaN, the other not the same) is beyond
        // any tolerance, even where the expected value's own size is infinite.
        if diff > tolerance.atol + tolerance.rtol * e.abs() || !diff.is_finite() {
            beyond += 1;
        }
    }
    let row = expected.shape.last().copied().unwrap_or(1).max(1);
    let mut min_cosine = 1.0f64;
    for (ra, re) in actual.data.chunks(row).zip(expected.data.chunks(row)) {
        // A row equal element for element (infinities and NaNs included, as masked attention
        // scores have) has cosine 1; the formula would give NaN.
        if ra
            .iter()
            .zip(re)
            .all(|(a, e)| a == e || a.is_nan() && e.is_nan())
        {
            continue;
        }
        let (mut dot, mut na, mut ne) = (0.0f64, 0.0f64, 0.0f64);
        for (&a, &e) in ra.iter().zip(re) {
            let (a, e) = (f64::from(a), f64::from(e));
            dot += a * e;
            na += a * a;
            ne += e * e;
        }
        let cos = match (na == 0.0, ne == 0.0) {
            (true, true) => 1.0,
            (true, false) | (false, true) => 0.0,
            _ => dot / (na.sqrt() * ne.sqrt()),
        };
        // NaN cosines (NaN data) count as 0.
        min_cosine = min_cosine.min(if cos.is_nan() { 0.0 } else { cos });
    }
    Comparison {
        checks: n,
        max_abs_error: max_abs,
        rms_error: if n == 0 {
            0.0
        } else {
            (sum_sq / n as f64).sqrt()
        },
        min_cosine,
        beyond_tolerance: beyond,
        tolerance: *tolerance,
    }
}

/// Summary statistics of a tensor's values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Smallest value (NaN if any value is NaN).
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Mean.
    pub mean: f64,
    /// Root mean square.
    pub rms: f64,
}

pub(crate) fn stats(data: &[f32]) -> Stats {
    if data.is_empty() {
        return Stats {
            min: 0.0,
            max: 0.0,
            mean: 0.0,
            rms: 0.0,
        };
    }
    let (mut min, mut max, mut sum, mut sum_sq) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0.0);
    let mut nan = false;
    for &x in data {
        let x = f64::from(x);
        nan |= x.is_nan();
        min = min.min(x);
        max = max.max(x);
        sum += x;
        sum_sq += x * x;
    }
    let n = data.len() as f64;
    if nan {
        return Stats {
            min: f64::NAN,
            max: f64::NAN,
            mean: f64::NAN,
            rms: f64::NAN,
        };
    }
    Stats {
        min,
        max,
        mean: sum / n,
        rms: (sum_sq / n).sqrt(),
    }
}
