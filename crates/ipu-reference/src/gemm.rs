//! Matrix products for the reference: the exact path through `matrixmultiply` (f64) and the
//! device path as row kernels that follow the device's accumulation order and rounding.
//!
//! Threading: rows of the output are split into contiguous chunks, one per thread
//! (`std::thread::scope`). Every output element is computed by the same sequence of operations
//! whatever the chunking, so results do not depend on the thread count. `matrixmultiply`'s own
//! threading is process-wide (`MATMUL_NUM_THREADS`, read once); callers that pass `threads > 1`
//! should set `MATMUL_NUM_THREADS=1` so the two do not multiply (the `ipu` CLI does).

use ipu_numerics::round_to_f16;

/// The AMP's K block: with f16 partials the device rounds the running partial sum to f16 after
/// every 16 products (the depth of one AMP f16 accumulation pass, see docs/numerics.md).
pub const F16_PARTIALS_K_BLOCK: usize = 16;

/// Accumulation rule of a device-precision product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partials {
    /// Products and sums in f32, in k order.
    F32,
    /// Sums in f32 within blocks of [`F16_PARTIALS_K_BLOCK`] k, the running partial rounded to
    /// f16 after each block.
    F16,
}

/// `out[j] = sum_k a_row[k] * b[k * ldb + j]` for `j in 0..out.len()`, following `partials`.
/// `b` starts at the first column wanted; `out` is overwritten.
pub fn row_times_matrix(a_row: &[f32], b: &[f32], ldb: usize, partials: Partials, out: &mut [f32]) {
    let n = out.len();
    out.fill(0.0);
    match partials {
        Partials::F32 => {
            for (k, &a) in a_row.iter().enumerate() {
                let b_row = &b[k * ldb..k * ldb + n];
                for (o, &bv) in out.iter_mut().zip(b_row) {
                    *o += a * bv;
                }
            }
        }
        Partials::F16 => {
            for block in (0..a_row.len()).step_by(F16_PARTIALS_K_BLOCK) {
                let end = (block + F16_PARTIALS_K_BLOCK).min(a_row.len());
                for (k, &a) in a_row.iter().enumerate().take(end).skip(block) {
                    let b_row = &b[k * ldb..k * ldb + n];
                    for (o, &bv) in out.iter_mut().zip(b_row) {
                        *o += a * bv;
                    }
                }
                for o in out.iter_mut() {
                    *o = round_to_f16(*o);
                }
            }
        }
    }
}

/// Runs `f(first_row, rows_chunk)` over `out` split into row chunks of `row_len` elements on
/// up to `threads` threads.
pub fn for_row_chunks<F>(out: &mut [f32], row_len: usize, threads: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
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
    partials: Partials,
    threads: usize,
) {
    debug_assert_eq!((a.len(), b.len(), c.len()), (m * k, k * n, m * n));
    for_row_chunks(c, n, threads, |row0, chunk| {
        for (r, out) in chunk.chunks_mut(n).enumerate() {
            let i = row0 + r;
            row_times_matrix(&a[i * k..(i + 1) * k], b, n, partials, out);
        }
    });
}

/// Exact `c[m,n] = a[m,k] b[k,n]` in f64 through `matrixmultiply::dgemm`, rows split over
/// `threads`.
pub fn matmul_f64(
    a: &[f64],
    b: &[f64],
    c: &mut [f64],
    (m, k, n): (usize, usize, usize),
    threads: usize,
) {
    debug_assert_eq!((a.len(), b.len(), c.len()), (m * k, k * n, m * n));
    if m == 0 || n == 0 {
        return;
    }
    let rows = m;
    let threads = threads.clamp(1, rows);
    let per = rows.div_ceil(threads);
    let run = |row0: usize, chunk: &mut [f64]| {
        let rows = chunk.len() / n;
        // SAFETY: the pointers cover rows*k, k*n and rows*n elements with the given row-major
        // strides, and `chunk` is exclusively borrowed.
        unsafe {
            matrixmultiply::dgemm(
                rows,
                k,
                n,
                1.0,
                a[row0 * k..].as_ptr(),
                k as isize,
                1,
                b.as_ptr(),
                n as isize,
                1,
                0.0,
                chunk.as_mut_ptr(),
                n as isize,
                1,
            );
        }
    };
    if threads == 1 {
        run(0, c);
        return;
    }
    std::thread::scope(|s| {
        for (i, chunk) in c.chunks_mut(per * n).enumerate() {
            let run = &run;
            s.spawn(move || run(i * per, chunk));
        }
    });
}

/// f32 `c[m,n] = a[m,k] b[k,n]` through `matrixmultiply::sgemm`, rows split over `threads`
/// (the raw BLAS speed figure of docs/perf.md).
pub fn sgemm(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    (m, k, n): (usize, usize, usize),
    threads: usize,
) {
    assert_eq!((a.len(), b.len(), c.len()), (m * k, k * n, m * n));
    for_row_chunks(c, n, threads, |row0, chunk| {
        let rows = chunk.len() / n.max(1);
        // SAFETY: as in `matmul_f64`.
        unsafe {
            matrixmultiply::sgemm(
                rows,
                k,
                n,
                1.0,
                a[row0 * k..].as_ptr(),
                k as isize,
                1,
                b.as_ptr(),
                n as isize,
                1,
                0.0,
                chunk.as_mut_ptr(),
                n as isize,
                1,
            );
        }
    });
}
