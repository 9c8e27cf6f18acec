//! Matrix products for the reference: the exact path through `matrixmultiply` (f64) and the
//! device path as row kernels that follow the device's accumulation order and rounding.
//!
//! Threading: rows of the output are split into contiguous chunks, one per thread
//! (`std::thread::scope`). Every output element is computed by the same sequence of operations
//! whatever the chunking, so results do not depend on the thread count. `matrixmultiply`'s own
//! threading is process-wide (`MATMUL_NUM_THREADS`, read once); callers that pass `threads > 1`
//! should set `MATMUL_NUM_THREADS=1` so the two do not multiply (the `ipu` CLI does).

use ipu_target::AmpMode;
pub use ipu_target::reduce::{K_SPLITS_MAX, REDUCE_TWO_STAGES_FROM, reduce_plan};

/// f16's smallest normal magnitude, 2^-14.
const F16_MIN_NORMAL: f32 = 6.103_515_6e-5;
/// The midpoint between f16's largest finite value 65504 and 65536: magnitudes from here up
/// round to infinity.
const F16_OVERFLOW_MIDPOINT: f32 = 65520.0;

/// `x` rounded to the nearest f16 value (ties to even), as an f32: the same result as
/// `ipu_numerics::round_to_f16` (tested on every f16 neighbourhood and random f32s), without
/// leaving f32 arithmetic, so the kernels' per-block roundings stay cheap.
#[inline]
pub fn round_to_f16_fast(x: f32) -> f32 {
    let a = x.abs();
    let r = if a < F16_MIN_NORMAL {
        // Subnormal range: multiples of 2^-24, which is the spacing of f32 on [0.5, 1).
        (a + 0.5) - 0.5
    } else if a < F16_OVERFLOW_MIDPOINT {
        // Normal range: round the 23-bit significand to 10 bits, ties to even.
        let b = a.to_bits();
        f32::from_bits((b + 0x0FFF + ((b >> 13) & 1)) & !0x1FFF)
    } else if a.is_nan() {
        return x;
    } else {
        f32::INFINITY
    };
    r.copysign(x)
}

/// The AMP's K block: the AMP multiplies `[N,16] x [16,16]` blocks (the kernel shape of
/// `ipu bench amp` and of Graphcore's published AMP peak-FLOPS measurements), so with f16
/// partials the running sum leaves the unit, rounded to f16, after every 16 products along k.
pub const F16_PARTIALS_K_BLOCK: usize = AmpMode::F16F16.geometry().k as usize;

/// The running partial's type in a device-precision product (see [`AmpRule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partials {
    /// f32 partials.
    F32,
    /// f16 partials: rounded to f16 after every K block.
    F16,
}

/// How the device's AMP forms a product (`docs/isa.md`, section 6): the inputs go through in
/// K blocks of four phases of `lanes` values; every column's accumulator starts at zero in each
/// block, takes the block's products in k order (each product and sum rounded to f32), and
/// takes the running partial from the previous block after the phase that matches the
/// column's chunk (`(column % cols) / chunk_cols`); at the end of the block the accumulator
/// becomes the running partial, rounded to f16 for f16 partials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmpRule {
    /// Inputs per K block (4 phases of `lanes`).
    pub k_block: usize,
    /// Input values per phase.
    pub lanes: usize,
    /// Columns of a weight block.
    pub cols: usize,
    /// Columns whose partials enter per phase.
    pub chunk_cols: usize,
    /// The running partial's type.
    pub partials: Partials,
}

impl AmpRule {
    /// The rule of an AMP mode, from the target description.
    pub const fn of(mode: AmpMode) -> AmpRule {
        let g = mode.geometry();
        AmpRule {
            k_block: g.k as usize,
            lanes: g.lanes as usize,
            cols: g.columns as usize,
            chunk_cols: g.chunk_columns() as usize,
            partials: if g.partial_bytes == 2 {
                Partials::F16
            } else {
                Partials::F32
            },
        }
    }

    /// `f16f16`: 4 f16 lanes, K block 16, 16 columns in chunks of 4.
    pub const F16F16: AmpRule = AmpRule::of(AmpMode::F16F16);
    /// `f16f32`: 4 f16 lanes, K block 16, 8 columns in chunks of 2.
    pub const F16F32: AmpRule = AmpRule::of(AmpMode::F16F32);
    /// `f32f32`: 2 f32 lanes, K block 8, 8 columns in chunks of 2.
    pub const F32F32: AmpRule = AmpRule::of(AmpMode::F32F32);

    /// The rule of a product with f32 (or else f16) operands and `partials`.
    pub fn new(f32_operands: bool, partials: Partials) -> AmpRule {
        match (f32_operands, partials) {
            (_, Partials::F16) => AmpRule::F16F16,
            (true, Partials::F32) => AmpRule::F32F32,
            (false, Partials::F32) => AmpRule::F16F32,
        }
    }
}

/// Rows of the output computed together by the device-precision kernel: each row of `b`
/// is loaded once for this many rows of `a`, which cuts the kernel's memory traffic by the same
/// factor (the order of operations of every element is unchanged).
pub const DEVICE_KERNEL_ROWS: usize = 4;

/// `out[r][j] = sum_k a[r][k] * b[k * ldb + j]` following `rule`, for the rows of `a`
/// (`rows` rows of `k` values) and `out` (as many rows of `n` values). `b` starts at column
/// `col0` of the whole product, which decides each column's chunk; `out` is overwritten.
fn rows_times_matrix(
    a: &[f32],
    k: usize,
    b: &[f32],
    ldb: usize,
    rule: AmpRule,
    col0: usize,
    out: &mut [f32],
) {
    let rows = a.len().checked_div(k).unwrap_or(0);
    if rows == 0 {
        out.fill(0.0);
        return;
    }
    let n = out.len() / rows;
    out.fill(0.0);
    let chunk: Vec<usize> = (0..n)
        .map(|c| ((col0 + c) % rule.cols) / rule.chunk_cols)
        .collect();
    let mut acc = vec![0.0f32; out.len()];
    for k0 in (0..k).step_by(rule.k_block) {
        acc.fill(0.0);
        for phase in 0..4 {
            for j in 0..rule.lanes {
                let kk = k0 + phase * rule.lanes + j;
                if kk >= k {
                    break;
                }
                let b_row = &b[kk * ldb..kk * ldb + n];
                for (r, acc) in acc.chunks_mut(n).enumerate() {
                    let av = a[r * k + kk];
                    for (o, &bv) in acc.iter_mut().zip(b_row) {
                        *o += av * bv;
                    }
                }
            }
            for (acc, run) in acc.chunks_mut(n).zip(out.chunks(n)) {
                for c in (0..n).filter(|&c| chunk[c] == phase) {
                    acc[c] += run[c];
                }
            }
        }
        match rule.partials {
            Partials::F16 => out
                .iter_mut()
                .zip(&acc)
                .for_each(|(o, &a)| *o = round_to_f16_fast(a)),
            Partials::F32 => out.copy_from_slice(&acc),
        }
    }
}

/// Runs `f(first_row, rows_chunk)` over `out` split into row chunks of `row_len` elements on
/// up to `threads` threads.
pub fn for_row_chunks<T, F>(out: &mut [T], row_len: usize, threads: usize, f: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync,
{
    let rows = out.len().checked_div(row_len).unwrap_or(0);
    let threads = threads.clamp(1, rows.max(1));
    if threads == 1 || row_len == 0 {
        f(0, out);
        return;
    }
    let per = rows.div_ceil(threads);
    std::thread::scope(|s| {
        for (i, chunk) in out.chunks_mut(per * row_len).enumerate() {
            let f = &f;
            s.spawn(move || f(i * per, chunk));
        }
    });
}

/// Device-precision `c[m,n] = a[m,k] b[k,n]` (row-major), rows split over `threads`.
pub fn matmul_device(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    (m, k, n): (usize, usize, usize),
    rule: AmpRule,
    threads: usize,
) {
    debug_assert_eq!((a.len(), b.len(), c.len()), (m * k, k * n, m * n));
    for_row_chunks(c, n, threads, |row0, chunk| {
        for (g, out) in chunk.chunks_mut(n * DEVICE_KERNEL_ROWS).enumerate() {
            let i = row0 + g * DEVICE_KERNEL_ROWS;
            let rows = out.len() / n;
            rows_times_matrix(&a[i * k..(i + rows) * k], k, b, n, rule, 0, out);
        }
    });
}

/// Sums `parts` (equal-length vectors) by `plan` (from [`reduce_plan`]): each intermediate
/// stage of depth `d` sums the consecutive runs `parts[len * i / d .. len * (i + 1) / d]` in
/// index order, the last stage sums what is left in index order; every sum is f32, and for
/// f16 partials rounded to f16 after every addition (the device adds them with the f16
/// vector add).
pub fn reduce_partials(parts: Vec<Vec<f32>>, plan: &[usize], partials: Partials) -> Vec<f32> {
    let f16 = partials == Partials::F16;
    let sum_run = |run: &[Vec<f32>]| {
        let mut acc = run[0].clone();
        for p in &run[1..] {
            acc.iter_mut().zip(p).for_each(|(a, &b)| {
                *a += b;
                if f16 {
                    *a = round_to_f16_fast(*a);
                }
            });
        }
        acc
    };
    let mut level = parts;
    for &d in plan.iter().chain(std::iter::once(&1)) {
        let len = level.len();
        assert!(d >= 1 && d <= len, "stage depth {d} of {len} partials");
        level = (0..d)
            .map(|i| sum_run(&level[len * i / d..len * (i + 1) / d]))
            .collect();
    }
    level.pop().unwrap_or_default()
}

/// Device-precision product of a k split into `splits` chunks (a 3-D split): chunk `s` takes
/// the K blocks `kb * s / splits .. kb * (s + 1) / splits` (`kb` = k in K blocks) and forms its
/// partial by [`matmul_device`]'s rule from zero; the partials are then summed by
/// [`reduce_partials`] with the plan [`reduce_plan`]`(splits)`. One split is [`matmul_device`].
pub fn matmul_device_k_split(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    (m, k, n): (usize, usize, usize),
    rule: AmpRule,
    splits: usize,
    threads: usize,
) {
    let kb = k.div_ceil(rule.k_block);
    let splits = splits.clamp(1, kb.max(1));
    if splits == 1 {
        return matmul_device(a, b, c, (m, k, n), rule, threads);
    }
    let parts: Vec<Vec<f32>> = (0..splits)
        .map(|s| {
            let k0 = (kb * s / splits * rule.k_block).min(k);
            let k1 = (kb * (s + 1) / splits * rule.k_block).min(k);
            let kc = k1 - k0;
            let a_chunk: Vec<f32> = (0..m)
                .flat_map(|r| a[r * k + k0..r * k + k1].iter().copied())
                .collect();
            let mut part = vec![0.0f32; m * n];
            matmul_device(
                &a_chunk,
                &b[k0 * n..k1 * n],
                &mut part,
                (m, kc, n),
                rule,
                threads,
            );
            part
        })
        .collect();
    c.copy_from_slice(&reduce_partials(parts, &reduce_plan(splits), rule.partials));
}

/// A `matrixmultiply` kernel (`sgemm`, `dgemm`): `c = alpha a b + beta c` over `m x k` and
/// `k x n` operands, each matrix given by a pointer and its row and column strides.
pub type GemmKernel<T> = unsafe fn(
    usize,
    usize,
    usize,
    T,
    *const T,
    isize,
    isize,
    *const T,
    isize,
    isize,
    T,
    *mut T,
    isize,
    isize,
);

/// An element type `matrixmultiply` multiplies: f64 (`dgemm`, for the exact reference) and
/// f32 (`sgemm`, the raw BLAS speed figure of docs/perf.md).
pub trait GemmElement: Copy + Send + Sync + From<f32> {
    /// The type's `matrixmultiply` kernel.
    const KERNEL: GemmKernel<Self>;
}

impl GemmElement for f64 {
    const KERNEL: GemmKernel<f64> = matrixmultiply::dgemm;
}

impl GemmElement for f32 {
    const KERNEL: GemmKernel<f32> = matrixmultiply::sgemm;
}

/// Row-major `c[m,n] = a[m,k] b[k,n]` through the element type's `matrixmultiply` kernel
/// (exact in f64), rows split over `threads`.
pub fn gemm<T: GemmElement>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    (m, k, n): (usize, usize, usize),
    threads: usize,
) {
    assert_eq!((a.len(), b.len(), c.len()), (m * k, k * n, m * n));
    if m == 0 || n == 0 {
        return;
    }
    for_row_chunks(c, n, threads, |row0, chunk| {
        let rows = chunk.len() / n.max(1);
        // SAFETY: the pointers cover rows*k, k*n and rows*n elements with the given row-major
        // strides, and `chunk` is exclusively borrowed.
        unsafe {
            T::KERNEL(
                rows,
                k,
                n,
                T::from(1.0),
                a[row0 * k..].as_ptr(),
                k as isize,
                1,
                b.as_ptr(),
                n as isize,
                1,
                T::from(0.0),
                chunk.as_mut_ptr(),
                n as isize,
                1,
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::round_to_f16_fast;
    use ipu_numerics::round_to_f16;

    fn same(x: f32) {
        let (fast, slow) = (round_to_f16_fast(x), round_to_f16(x));
        assert!(
            fast.to_bits() == slow.to_bits() || (fast.is_nan() && slow.is_nan()),
            "{x:e} ({:#x}): fast {fast:e}, half {slow:e}",
            x.to_bits()
        );
    }

    /// The reduction plans follow PopLibs' two-stage choice.
    #[test]
    fn reduce_plans_follow_conv_reduce_plan() {
        use super::reduce_plan;
        assert!(reduce_plan(1).is_empty());
        assert!(reduce_plan(15).is_empty());
        assert_eq!(reduce_plan(16), vec![4]);
        assert_eq!(reduce_plan(24), vec![5]);
        assert_eq!(reduce_plan(32), vec![6]);
        assert_eq!(reduce_plan(124), vec![11]);
    }

    /// One split is the unsplit product; a split product sums per-chunk partials in the
    /// plan's order (checked against the sums written out).
    #[test]
    fn k_split_sums_chunk_partials_in_plan_order() {
        use super::{AmpRule, matmul_device, matmul_device_k_split};
        let (m, k, n) = (5, 64, 8);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 3.0)
            .collect();
        for rule in [AmpRule::F16F32, AmpRule::F16F16] {
            let mut whole = vec![0.0; m * n];
            matmul_device(&a, &b, &mut whole, (m, k, n), rule, 1);
            let mut one = vec![0.0; m * n];
            matmul_device_k_split(&a, &b, &mut one, (m, k, n), rule, 1, 1);
            assert_eq!(whole, one);
            // Two chunks of 32: each chunk's partial, then one sum.
            let half = |k0: usize| {
                let ac: Vec<f32> = (0..m)
                    .flat_map(|r| a[r * k + k0..r * k + k0 + 32].to_vec())
                    .collect();
                let mut p = vec![0.0; m * n];
                matmul_device(&ac, &b[k0 * n..(k0 + 32) * n], &mut p, (m, 32, n), rule, 1);
                p
            };
            let (p0, p1) = (half(0), half(32));
            let mut two = vec![0.0; m * n];
            matmul_device_k_split(&a, &b, &mut two, (m, k, n), rule, 2, 3);
            for i in 0..m * n {
                let s = p0[i] + p1[i];
                let s = if rule == AmpRule::F16F16 {
                    super::round_to_f16_fast(s)
                } else {
                    s
                };
                assert_eq!(two[i].to_bits(), s.to_bits(), "element {i}");
            }
        }
    }

    /// Every f16 value, the f32 neighbours of every f16 value and of every midpoint between
    /// neighbouring f16 values, and a sweep of f32 bit patterns.
    #[test]
    fn fast_f16_rounding_matches_half() {
        for h in 0..=u16::MAX {
            let v = half::f16::from_bits(h).to_f32();
            let next = half::f16::from_bits(h.wrapping_add(1)).to_f32();
            for p in [v, (v + next) / 2.0] {
                if !p.is_finite() {
                    same(p);
                    continue;
                }
                let b = p.to_bits();
                for d in [-2i32, -1, 0, 1, 2] {
                    same(f32::from_bits(b.wrapping_add_signed(d)));
                }
            }
        }
        for b in (0..=u32::MAX).step_by(997) {
            same(f32::from_bits(b));
        }
    }
}
