//! Reference GEMM speed: `cargo bench -p ipu-reference --bench gemm [-- SIZE]`.
//!
//! Prints one `key=value` line per measurement: the raw f32 GEMM (`matrixmultiply::sgemm`),
//! and a one-matmul graph evaluated in exact precision (f64 `dgemm`) and in device precision
//! (f32 partials in k order; f16 partials with block rounding), at 1 and 2 threads. Each figure
//! is the best of `REPEATS` runs.

use std::time::Instant;

use ipu_graph::{DType, GraphBuilder, OpKind, TensorType};
use ipu_reference::{Precision, evaluate, gemm, make_inputs};

/// Runs per measurement; the best is reported (the first run also warms caches and pages).
const REPEATS: usize = 3;

fn best_seconds(mut f: impl FnMut()) -> f64 {
    (0..REPEATS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    // SAFETY: single-threaded at this point; keeps matrixmultiply's own pool out of the way so
    // the thread count below is the one measured.
    unsafe { std::env::set_var("MATMUL_NUM_THREADS", "1") };
    let size: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1024);
    let flops = 2.0 * (size as f64).powi(3);
    let a: Vec<f32> = (0..size * size)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
        .collect();
    let b: Vec<f32> = (0..size * size)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0)
        .collect();
    let mut c = vec![0.0f32; size * size];
    for threads in [1, 2] {
        let s = best_seconds(|| gemm::gemm::<f32>(&a, &b, &mut c, (size, size, size), threads));
        println!(
            "gemm=sgemm m={size} k={size} n={size} dtype=f32 threads={threads} seconds={s:.4} gflops={:.2}",
            flops / s / 1e9
        );
    }
    let cases = [
        ("exact", DType::F32, DType::F32, Precision::Exact),
        (
            "device-f32-partials",
            DType::F32,
            DType::F32,
            Precision::Device,
        ),
        (
            "device-f16-partials",
            DType::F16,
            DType::F16,
            Precision::Device,
        ),
    ];
    for (name, dtype, partials, precision) in cases {
        let mut g = GraphBuilder::new("gemm");
        let x = g.input("a", TensorType::new(dtype, [size, size]));
        let y = g.input("b", TensorType::new(dtype, [size, size]));
        let z = g
            .op(
                "c",
                OpKind::MatMul {
                    partials,
                    out: dtype,
                },
                &[x, y],
            )
            .unwrap();
        g.output(z);
        let g = g.finish().unwrap();
        let inputs = make_inputs(&g, 0);
        for threads in [1, 2] {
            let s = best_seconds(|| {
                evaluate(&g, &inputs, precision, threads).unwrap();
            });
            println!(
                "gemm=reference-{name} m={size} k={size} n={size} dtype={dtype} threads={threads} seconds={s:.4} gflops={:.2}",
                flops / s / 1e9
            );
        }
    }
}
