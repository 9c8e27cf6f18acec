//! `sqrt`, `tanh` and `erf` on the device against the device-precision reference, bit for bit,
//! through "write the package, read it back, run": random inputs (scaled to reach both
//! branches of the approximations) and constants holding zeros, tiny, branch-threshold,
//! large, infinite and negative values, in f32 and f16, at several shapes and tile counts.

mod common;

use ipu_graph::{DType, Graph, GraphBuilder, OpKind, TensorType, UnaryFn, ValueId};
use ipu_target::Target;

/// `factor x` as the operation `name`.
fn scale(g: &mut GraphBuilder, name: &str, factor: f32, x: ValueId) -> ValueId {
    g.op(name, OpKind::Scale { factor }, &[x]).unwrap()
}

/// Special arguments: signed zeros, subnormal and tiny values, both sides of the branch
/// threshold 1/4, the ranges where tanh and erf saturate, huge values and infinities.
const SPECIAL: [f32; 22] = [
    0.0,
    -0.0,
    1e-40,
    1e-30,
    6e-8,
    1e-4,
    0.1,
    0.2499,
    0.25,
    0.2501,
    0.5,
    0.9,
    1.0,
    2.0,
    3.5,
    5.0,
    9.0,
    20.0,
    100.0,
    6.0e4,
    1e30,
    f32::INFINITY,
];

fn special_values(n: usize, dtype: DType) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let v = SPECIAL[(i / 2) % SPECIAL.len()] * if i % 2 == 1 { -1.0 } else { 1.0 };
            match dtype {
                DType::F16 => half::f16::from_f32(v).to_f32(),
                _ => v,
            }
        })
        .collect()
}

/// `f(k)` for the special constant `k`, `f(4 x)` for the random input `x`, and for `sqrt`
/// also `sqrt(x * x)` (non-negative arguments; the others give NaN on both sides).
fn unary_graph(kind: OpKind, dtype: DType, rows: usize, cols: usize) -> Graph {
    let ty = TensorType::new(dtype, [rows, cols]);
    let mut g = GraphBuilder::new(kind.mnemonic());
    let x = g.input("x", ty.clone());
    let k = g
        .constant_values("k", ty.clone(), &special_values(rows * cols, dtype))
        .unwrap();
    let fk = g.op("fk", kind.clone(), &[k]).unwrap();
    let x4 = g.op("x4", OpKind::Scale { factor: 4.0 }, &[x]).unwrap();
    let fx = g.op("fx", kind.clone(), &[x4]).unwrap();
    g.output(fk);
    g.output(fx);
    if kind == OpKind::Unary(UnaryFn::Sqrt) {
        let xx = g.op("xx", OpKind::Mul, &[x, x]).unwrap();
        let r = g.op("r", OpKind::Unary(UnaryFn::Sqrt), &[xx]).unwrap();
        g.output(r);
    }
    g.finish().unwrap()
}

/// Every unary function of the graph, with special values and random ones, against the
/// reference's device model: a new function is checked here without a line of its own.
#[test]
fn every_unary_function_is_bit_exact_in_f32_and_f16() {
    for kind in UnaryFn::ALL.map(OpKind::Unary) {
        for dtype in [DType::F32, DType::F16] {
            for (rows, cols, tiles) in [(1, 3, 1), (37, 21, 13), (16, 40, 64), (3, 5, 1472)] {
                let g = unary_graph(kind.clone(), dtype, rows, cols);
                common::run(&g, Target::gc200(), tiles, 17).assert_exact(&format!(
                    "{} {dtype} {rows}x{cols} on {tiles} tiles",
                    kind.mnemonic()
                ));
            }
        }
    }
}

/// Both forms of GELU as graph operations, one after the other, with an odd column count (so
/// the padding the activations keep at zero is read by the next operation).
#[test]
fn gelu_forms_are_bit_exact() {
    for dtype in [DType::F32, DType::F16] {
        let ty = TensorType::new(dtype, [9, 30]);
        let mut g = GraphBuilder::new("gelu");
        let x = g.input("x", ty.clone());
        let x3 = scale(&mut g, "x3", 3.0, x);
        let ones = g
            .constant_values("ones", TensorType::new(dtype, [1, 30]), &[1.0; 30])
            .unwrap();
        // 0.5 x (1 + erf(x / sqrt(2)))
        let d = scale(&mut g, "d", std::f32::consts::FRAC_1_SQRT_2, x3);
        let e = g.op("e", OpKind::Unary(UnaryFn::Erf), &[d]).unwrap();
        let e1 = g.op("e1", OpKind::Add, &[e, ones]).unwrap();
        let m = g.op("m", OpKind::Mul, &[x3, e1]).unwrap();
        let erf_gelu = scale(&mut g, "erf_gelu", 0.5, m);
        // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        let sq = g.op("sq", OpKind::Mul, &[erf_gelu, erf_gelu]).unwrap();
        let cube = g.op("cube", OpKind::Mul, &[sq, erf_gelu]).unwrap();
        let c = scale(&mut g, "c", 0.044715, cube);
        let inner = g.op("inner", OpKind::Add, &[erf_gelu, c]).unwrap();
        let s = scale(&mut g, "s", (2.0 / std::f32::consts::PI).sqrt(), inner);
        let t = g.op("t", OpKind::Unary(UnaryFn::Tanh), &[s]).unwrap();
        let t1 = g.op("t1", OpKind::Add, &[t, ones]).unwrap();
        let m2 = g.op("m2", OpKind::Mul, &[erf_gelu, t1]).unwrap();
        let tanh_gelu = scale(&mut g, "tanh_gelu", 0.5, m2);
        g.output(erf_gelu);
        g.output(tanh_gelu);
        let g = g.finish().unwrap();
        common::run_within(&g, &[1, 7], 23, &format!("gelu {dtype}"), 0.0);
    }
}

#[test]
fn fp8_operands_are_refused_with_a_reason() {
    for kind in UnaryFn::ALL.map(OpKind::Unary) {
        let ty = TensorType::new(DType::F143 { scale: -4 }, [4, 8]);
        let mut g = GraphBuilder::new("fp8");
        let x = g.input("x", ty);
        let y = g.op("y", kind.clone(), &[x]).unwrap();
        g.output(y);
        let g = g.finish().unwrap();
        let err = ipu_codegen::build(&g, &common::gc200(4)).expect_err("FP8 is refused");
        let text = err.to_string();
        assert!(
            text.contains("%y") && text.contains(kind.mnemonic()) && text.contains("FP8"),
            "{text}"
        );
    }
}

/// `log` on the special constants (zeros, subnormals, infinities and negative values give
/// -inf, finite values, +inf and NaN), on `4 x` (half of it negative: NaN on both sides), and
/// on `exp(x)` with an odd column count, whose result is read by an addition (the padding
/// `log` turns into -inf is cleared).
#[test]
fn log_is_bit_exact_in_f32_and_f16() {
    for dtype in [DType::F32, DType::F16] {
        for (rows, cols, tiles) in [(1, 3, 1), (37, 21, 13), (16, 40, 64)] {
            let g = unary_graph(OpKind::Unary(UnaryFn::Log), dtype, rows, cols);
            common::run(&g, Target::gc200(), tiles, 17)
                .assert_exact(&format!("log {dtype} {rows}x{cols} on {tiles} tiles"));
        }
        let ty = TensorType::new(dtype, [7, 13]);
        let mut g = GraphBuilder::new("log_exp");
        let x = g.input("x", ty.clone());
        let e = g.op("e", OpKind::Unary(UnaryFn::Exp), &[x]).unwrap();
        let l = g.op("l", OpKind::Unary(UnaryFn::Log), &[e]).unwrap();
        let y = g.op("y", OpKind::Add, &[l, x]).unwrap();
        let t = g
            .op("t", OpKind::Transpose { perm: vec![1, 0] }, &[l])
            .unwrap();
        g.output(y);
        g.output(t);
        let g = g.finish().unwrap();
        for tiles in [1, 5] {
            common::run(&g, Target::gc200(), tiles, 29)
                .assert_exact(&format!("log(exp(x)) {dtype} on {tiles} tiles"));
        }
    }
}
