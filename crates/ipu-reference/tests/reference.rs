//! The host reference: every operation against hand-computed cases, device against exact
//! precision, determinism across thread counts, inputs, byte layouts and comparison metrics.

#![allow(clippy::cloned_ref_to_slice_refs)] // the operand lists read better as arrays of tensors

use ipu_graph::{DType, Graph, GraphBuilder, OpKind, TensorType, UnaryFn, ValueId, models};
use ipu_reference::{
    Comparison, Precision, ReferenceError, Tensor, Tolerance, compare, evaluate, make_inputs,
    round_to_dtype, tolerance_versus_exact,
};

const F16: DType = DType::F16;
const F32: DType = DType::F32;

fn t(d: DType, s: &[usize]) -> TensorType {
    TensorType::new(d, s.to_vec())
}

fn tensor(d: DType, s: &[usize], data: &[f32]) -> Tensor {
    Tensor::new(d, s.to_vec(), data.to_vec()).unwrap()
}

/// A graph of one operation on the given inputs.
fn single(kind: OpKind, inputs: &[TensorType]) -> Graph {
    let mut b = GraphBuilder::new("single");
    let ids: Vec<ValueId> = inputs
        .iter()
        .enumerate()
        .map(|(i, ty)| b.input(format!("x{i}"), ty.clone()))
        .collect();
    let out = b.op("y", kind, &ids).unwrap();
    b.output(out);
    b.finish().unwrap()
}

fn run(kind: OpKind, inputs: &[Tensor], precision: Precision) -> Tensor {
    let types: Vec<TensorType> = inputs.iter().map(Tensor::ty).collect();
    let g = single(kind, &types);
    evaluate(&g, inputs, precision, 1).unwrap().remove(0)
}

/// A matrix product with `partials` accumulation and `out` results.
fn matmul(partials: DType, out: DType) -> OpKind {
    OpKind::MatMul { partials, out }
}

/// The built-in model `name` with the given parameters.
#[track_caller]
fn model(name: &str, params: &[(&str, &str)]) -> Graph {
    let params: Vec<(String, String)> = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    models::build(name, &params).unwrap()
}

/// Runs in both precisions and checks both give `expected` (exactly representable cases).
fn both(kind: OpKind, inputs: &[Tensor], expected: &[f32]) {
    for p in [Precision::Exact, Precision::Device] {
        let r = run(kind.clone(), inputs, p);
        assert_eq!(r.data, expected, "{kind:?} in {p}");
    }
}

#[test]
fn matmul_small_cases() {
    let a = tensor(F32, &[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = tensor(F32, &[3, 2], &[7., 8., 9., 10., 11., 12.]);
    both(
        matmul(F32, F32),
        &[a.clone(), b.clone()],
        &[58., 64., 139., 154.],
    );
    // batch broadcast: [2,1,2] x [2,1] -> [2,1,1]
    let a = tensor(F16, &[2, 1, 2], &[1., 2., 3., 4.]);
    let b = tensor(F16, &[2, 1], &[0.5, 0.25]);
    both(matmul(F16, F16), &[a, b], &[1.0, 2.5]);
    // [2,2,1] x [1,1,2] (batch 1 broadcast on the right operand)
    let a = tensor(F32, &[2, 2, 1], &[1., 2., 3., 4.]);
    let b = tensor(F32, &[1, 1, 2], &[10., 100.]);
    both(
        matmul(F32, F32),
        &[a, b],
        &[10., 100., 20., 200., 30., 300., 40., 400.],
    );
}

#[test]
fn data_movement_small_cases() {
    let x = tensor(F16, &[2, 3], &[1., 2., 3., 4., 5., 6.]);
    both(
        OpKind::Transpose { perm: vec![1, 0] },
        &[x.clone()],
        &[1., 4., 2., 5., 3., 6.],
    );
    both(
        OpKind::Reshape { shape: vec![3, 2] },
        &[x.clone()],
        &[1., 2., 3., 4., 5., 6.],
    );
    both(
        OpKind::Slice {
            axis: 1,
            start: 1,
            end: 3,
        },
        &[x.clone()],
        &[2., 3., 5., 6.],
    );
    both(
        OpKind::Slice {
            axis: 0,
            start: 1,
            end: 2,
        },
        &[x.clone()],
        &[4., 5., 6.],
    );
    let y = tensor(F16, &[2, 1], &[7., 8.]);
    both(
        OpKind::Concat { axis: 1 },
        &[x.clone(), y],
        &[1., 2., 3., 7., 4., 5., 6., 8.],
    );
    let z = tensor(F16, &[1, 3], &[9., 9., 9.]);
    both(
        OpKind::Concat { axis: 0 },
        &[x.clone(), z],
        &[1., 2., 3., 4., 5., 6., 9., 9., 9.],
    );
    let x3 = tensor(F32, &[2, 2, 2], &[0., 1., 2., 3., 4., 5., 6., 7.]);
    both(
        OpKind::Transpose {
            perm: vec![2, 0, 1],
        },
        &[x3],
        &[0., 2., 4., 6., 1., 3., 5., 7.],
    );
}

#[test]
fn elementwise_small_cases() {
    let a = tensor(F32, &[2, 2], &[1., -2., 3., 8.]);
    let b = tensor(F32, &[2, 2], &[2., 4., -1., 2.]);
    let col = tensor(F32, &[2, 1], &[10., 20.]);
    both(OpKind::Add, &[a.clone(), b.clone()], &[3., 2., 2., 10.]);
    both(OpKind::Sub, &[a.clone(), b.clone()], &[-1., -6., 4., 6.]);
    both(OpKind::Mul, &[a.clone(), b.clone()], &[2., -8., -3., 16.]);
    both(OpKind::Div, &[a.clone(), b.clone()], &[0.5, -0.5, -3., 4.]);
    both(OpKind::Max, &[a.clone(), b.clone()], &[2., 4., 3., 8.]);
    both(OpKind::Add, &[a.clone(), col.clone()], &[11., 8., 23., 28.]);
    both(OpKind::Sub, &[col, a.clone()], &[9., 12., 17., 12.]);
    both(
        OpKind::Scale { factor: -0.5 },
        &[a.clone()],
        &[-0.5, 1., -1.5, -4.],
    );
    both(
        OpKind::Unary(UnaryFn::Exp),
        &[tensor(F32, &[2], &[0., 0.])],
        &[1., 1.],
    );
    both(OpKind::ReduceMax { axis: 1 }, &[a.clone()], &[1., 8.]);
    both(OpKind::ReduceMax { axis: 0 }, &[a.clone()], &[3., 8.]);
    both(OpKind::ReduceSum { axis: 1 }, &[a.clone()], &[-1., 11.]);
    both(OpKind::ReduceSum { axis: 0 }, &[a], &[4., 6.]);
    // softmax of equal entries, and of [0, ln 3] = [1/4, 3/4]
    both(
        OpKind::Softmax { axis: 1 },
        &[tensor(F32, &[1, 4], &[5.; 4])],
        &[0.25; 4],
    );
    let r = run(
        OpKind::Softmax { axis: 0 },
        &[tensor(F32, &[2, 1], &[0., 3f32.ln()])],
        Precision::Exact,
    );
    assert!(
        (r.data[0] - 0.25).abs() < 1e-7 && (r.data[1] - 0.75).abs() < 1e-7,
        "{r:?}"
    );
    // layer norm of [1, 3]: mean 2, var 1 -> [-1, 1]
    both(
        OpKind::LayerNorm { epsilon: 0.0 },
        &[tensor(F32, &[1, 2], &[1., 3.])],
        &[-1., 1.],
    );
    let r = run(
        OpKind::Unary(UnaryFn::Exp),
        &[tensor(F16, &[1], &[1.])],
        Precision::Device,
    );
    assert_eq!(r.data, [round_to_dtype(F16, 1f32.exp())]);
    assert_ne!(r.data[0], 1f32.exp(), "device exp rounds to f16");
    let r = run(
        OpKind::Unary(UnaryFn::Exp),
        &[tensor(F16, &[1], &[1.])],
        Precision::Exact,
    );
    assert_eq!(r.data, [1f32.exp()], "exact exp is not rounded");
}

#[test]
fn cast_rounds_in_device_precision_only() {
    let f8 = DType::F143 { scale: -2 };
    let x = tensor(F32, &[4], &[0.1, 1.0, 100.0, -0.3]);
    let d = run(OpKind::cast(f8), &[x.clone()], Precision::Device);
    // F143 at scale -2: 3 mantissa bits, largest value 240/4 = 60 (saturation)
    assert_eq!(d.data, [0.1015625, 1.0, 60.0, -0.3125]);
    let e = run(OpKind::cast(f8), &[x.clone()], Precision::Exact);
    assert_eq!(e.data, x.data);
    let h = run(OpKind::cast(F16), &[x], Precision::Device);
    assert_eq!(h.data, [0.099975586, 1.0, 100.0, -0.30004883]);
    // back from FP8 to f32 is exact
    let back = run(OpKind::cast(F32), &[d.clone()], Precision::Device);
    assert_eq!(back.data, d.data);
}

#[test]
fn attention_small_cases() {
    // One key: the output is v whatever the scores.
    let q = tensor(F32, &[1, 2, 2], &[1., 2., 3., 4.]);
    let k = tensor(F32, &[1, 1, 2], &[0.5, -1.]);
    let v = tensor(F32, &[1, 1, 3], &[7., 8., 9.]);
    let att = OpKind::Attention {
        scale: 1.0,
        causal: false,
        partials: F32,
        out: F32,
    };
    both(att, &[q, k, v], &[7., 8., 9., 7., 8., 9.]);
    // Two keys with equal scores average v; causal makes row 0 see key 0 only.
    let q = tensor(F16, &[2, 2], &[1., 0., 0., 1.]);
    let k = tensor(F16, &[2, 2], &[0., 0., 0., 0.]);
    let v = tensor(F16, &[2, 2], &[2., 4., 6., 8.]);
    for causal in [false, true] {
        let expected: &[f32] = if causal {
            &[2., 4., 4., 6.]
        } else {
            &[4., 6., 4., 6.]
        };
        let att = OpKind::Attention {
            scale: 0.5,
            causal,
            partials: F16,
            out: F16,
        };
        both(att, &[q.clone(), k.clone(), v.clone()], expected);
        let flash = OpKind::FlashAttention {
            scale: 0.5,
            causal,
            block_q: 1,
            block_k: 1,
            partials: F16,
            out: F16,
        };
        both(flash, &[q.clone(), k.clone(), v.clone()], expected);
    }
}

/// Flash attention: exact precision equals plain attention; device precision stays within
/// f16 tolerance of it for every block size.
#[test]
fn flash_attention_matches_attention() {
    let mut b = GraphBuilder::new("att");
    let ty = t(F16, &[2, 40, 16]);
    let q = b.input("q", ty.clone());
    let k = b.input("k", ty.clone());
    let v = b.input("v", ty);
    let att = OpKind::Attention {
        scale: 0.25,
        causal: true,
        partials: F32,
        out: F16,
    };
    let o = b.op("o", att, &[q, k, v]).unwrap();
    b.output(o);
    let plain = b.finish().unwrap();
    let inputs = make_inputs(&plain, 7);
    let exact = evaluate(&plain, &inputs, Precision::Exact, 1)
        .unwrap()
        .remove(0);
    for block in [1, 7, 16, 64] {
        let flash = OpKind::FlashAttention {
            scale: 0.25,
            causal: true,
            block_q: block,
            block_k: block,
            partials: F32,
            out: F16,
        };
        let g = single(
            flash,
            &[
                t(F16, &[2, 40, 16]),
                t(F16, &[2, 40, 16]),
                t(F16, &[2, 40, 16]),
            ],
        );
        let e = evaluate(&g, &inputs, Precision::Exact, 1)
            .unwrap()
            .remove(0);
        let c = compare(&e, &exact, &Tolerance::for_dtype(F32));
        assert!(c.max_abs_error < 1e-6, "block {block}: {c}");
        let d = evaluate(&g, &inputs, Precision::Device, 1)
            .unwrap()
            .remove(0);
        let c = compare(&d, &exact, &Tolerance::for_dtype(F16));
        assert!(c.pass(), "block {block}: {c}");
        assert!(c.max_abs_error > 0.0, "device rounds");
    }
}

/// An independent scalar model of the device's f16-partials matmul (the AMP's `f16f16` mode,
/// docs/isa.md section 6): per block of 16 k, four phases of 4 products into an accumulator
/// that starts at zero; the running partial enters after the phase of the column's chunk
/// (`(j % 16) / 4`); the block's result, rounded to f16, is the next running partial.
fn f16_partials_naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let chunk = (j % 16) / 4;
            let mut running = 0.0f32;
            for k0 in (0..k).step_by(16) {
                let mut acc = 0.0f32;
                for phase in 0..4 {
                    for lane in 0..4 {
                        let kk = k0 + 4 * phase + lane;
                        if kk < k {
                            acc += a[i * k + kk] * b[kk * n + j];
                        }
                    }
                    if phase == chunk {
                        acc += running;
                    }
                }
                running = half::f16::from_f32(acc).to_f32();
            }
            c[i * n + j] = running;
        }
    }
    c
}

#[test]
fn f16_partials_round_after_every_block_of_16() {
    // Block 1 sums to 2048; blocks 2 and 3 each add 1. f16 has a spacing of 2 at 2048, so each
    // rounded partial ties back to 2048, while f32 partials keep 2050.
    let k = 48;
    let a = tensor(F16, &[1, k], &vec![1.0; k]);
    let b: Vec<f32> = (0..k)
        .map(|i| if i < 16 { 128.0 } else { 0.0625 })
        .collect();
    let b = tensor(F16, &[k, 1], &b);
    let r16 = run(matmul(F16, F16), &[a.clone(), b.clone()], Precision::Device);
    let r32 = run(matmul(F32, F16), &[a.clone(), b.clone()], Precision::Device);
    let ex = run(matmul(F16, F16), &[a, b], Precision::Exact);
    assert_eq!(r16.data, [2048.0]);
    assert_eq!(r32.data, [2050.0]);
    assert_eq!(ex.data, [2050.0]);

    // Random operands: bit-for-bit the scalar model, at several thread counts.
    let g = single(
        matmul(F16, F16),
        &[t(F16, &[3, 5, 100]), t(F16, &[100, 37])],
    );
    let inputs = make_inputs(&g, 3);
    let expected: Vec<f32> = (0..3)
        .flat_map(|bi| {
            f16_partials_naive(
                &inputs[0].data[bi * 500..(bi + 1) * 500],
                &inputs[1].data,
                5,
                100,
                37,
            )
        })
        .collect();
    for threads in [1, 2, 5] {
        let r = evaluate(&g, &inputs, Precision::Device, threads)
            .unwrap()
            .remove(0);
        assert_eq!(r.data, expected, "threads {threads}");
    }
}

#[test]
fn fp8_matmul_decodes_operands_exactly() {
    let f8 = DType::F152 { scale: -1 };
    let a = tensor(f8, &[1, 2], &[0.375, -0.5]);
    let b = tensor(f8, &[2, 1], &[4.0, 1.0]);
    both(matmul(F16, F16), &[a, b], &[1.0]);
}

#[test]
fn results_do_not_depend_on_thread_count() {
    let graphs = [
        model("typed-attention-small-fp8", &[("seq", "48")]),
        model(
            "attention-flash",
            &[("seq", "96"), ("block", "32"), ("causal", "true")],
        ),
        model("mlp", &[("dtype", "f143"), ("batch", "33")]),
        model("attention", &[("seq", "50"), ("dtype", "f32")]),
    ];
    for g in &graphs {
        let inputs = make_inputs(g, 11);
        for p in [Precision::Exact, Precision::Device] {
            let one = evaluate(g, &inputs, p, 1).unwrap();
            for threads in [2, 3] {
                assert_eq!(
                    evaluate(g, &inputs, p, threads).unwrap(),
                    one,
                    "{} {p}",
                    g.name
                );
            }
        }
    }
}

/// Device and exact precision differ as the output dtypes predict, for both presets (the
/// flash preset shrunk to keep the test quick).
#[test]
fn device_versus_exact_is_consistent_with_dtypes() {
    let cases = [
        model("typed-attention-small-fp8", &[]),
        model("attention-flash", &[("seq", "256")]),
        model("matmul", &[("dtype", "f32"), ("k", "512")]),
    ];
    for g in &cases {
        let inputs = make_inputs(g, 0);
        let d = evaluate(g, &inputs, Precision::Device, 2)
            .unwrap()
            .remove(0);
        let e = evaluate(g, &inputs, Precision::Exact, 2).unwrap().remove(0);
        let c = compare(&d, &e, &tolerance_versus_exact(g, g.outputs()[0]));
        assert!(c.pass(), "{}: {c}", g.name);
        assert!(
            c.max_abs_error > 0.0,
            "{}: device rounding must show",
            g.name
        );
        // the error is of the order of the dtype's precision (relative to the output's rms)
        let rms = e.stats().rms;
        let unit = match d.dtype {
            DType::F32 => 2f64.powi(-24),
            DType::F16 => 2f64.powi(-11),
            _ => 2f64.powi(-4),
        };
        assert!(c.rms_error / rms < 8.0 * unit, "{}: {c} rms {rms}", g.name);
        assert!(c.rms_error / rms > 0.05 * unit, "{}: {c} rms {rms}", g.name);
    }
}

#[test]
fn tolerance_versus_exact_follows_the_coarsest_intermediate() {
    let typed = model("typed-attention-small-fp8", &[]);
    let f143 = Tolerance::for_dtype(DType::F143 { scale: 0 });
    assert_eq!(tolerance_versus_exact(&typed, typed.outputs()[0]), f143);
    // an f16 output behind an FP8 cast between layers
    let mlp = model("mlp", &[("dtype", "f143")]);
    assert_eq!(mlp.value(mlp.outputs()[0]).ty.dtype, F16);
    assert_eq!(tolerance_versus_exact(&mlp, mlp.outputs()[0]), f143);
    // FP8 inputs alone do not loosen it
    let mm = model("matmul", &[("dtype", "f152")]);
    assert_eq!(
        tolerance_versus_exact(&mm, mm.outputs()[0]),
        Tolerance::for_dtype(F16)
    );
}

#[test]
fn inputs_are_deterministic_and_follow_the_distribution() {
    let g = model("mlp", &[("dtype", "f143")]);
    let a = make_inputs(&g, 5);
    assert_eq!(a, make_inputs(&g, 5));
    assert_ne!(a, make_inputs(&g, 6));
    assert_ne!(a[1].data, a[2].data, "each input has its own stream");
    for tensor in &a {
        assert!(tensor.data.iter().all(|x| (-1.0..=1.0).contains(x)));
        for &x in &tensor.data {
            assert_eq!(
                round_to_dtype(tensor.dtype, x),
                x,
                "representable in {}",
                tensor.dtype
            );
        }
        let distinct: std::collections::BTreeSet<u32> =
            tensor.data.iter().map(|x| x.to_bits()).collect();
        assert!(
            distinct.len() > 150,
            "FP8 inputs use many codes: {}",
            distinct.len()
        );
        let mean = tensor.stats().mean;
        assert!(mean.abs() < 0.05, "{mean}");
    }
    let f = model("matmul", &[("dtype", "f32")]);
    let x = &make_inputs(&f, 1)[0];
    let s = x.stats();
    assert!(
        s.min >= -1.0 && s.max < 1.0 && (s.rms - (1.0f64 / 3.0).sqrt()).abs() < 0.01,
        "{s:?}"
    );
}

#[test]
fn bytes_round_trip_in_device_layout() {
    for dtype in [
        F32,
        F16,
        DType::F143 { scale: -4 },
        DType::F152 { scale: 3 },
    ] {
        let g = single(OpKind::Unary(UnaryFn::Exp), &[t(dtype, &[3, 7])]);
        let x = make_inputs(&g, 2).remove(0);
        let bytes = x.to_bytes();
        assert_eq!(bytes.len(), 21 * dtype.bytes());
        assert_eq!(Tensor::from_bytes(dtype, vec![3, 7], &bytes).unwrap(), x);
    }
    let x = tensor(F16, &[2], &[1.0, -2.0]);
    assert_eq!(x.to_bytes(), [0x00, 0x3c, 0x00, 0xc0]);
    assert_eq!(tensor(F32, &[1], &[1.0]).to_bytes(), [0, 0, 0x80, 0x3f]);
    let e = Tensor::from_bytes(F16, vec![3], &[0; 4]).unwrap_err();
    assert_eq!(
        e,
        ReferenceError::BadTensor {
            ty: "f16[3]".into(),
            reason: "4 bytes, expected 6".into(),
        }
    );
    assert_eq!(e.to_string(), "tensor f16[3]: 4 bytes, expected 6");
}

#[test]
fn compare_metrics_on_known_inputs() {
    let tol = Tolerance {
        atol: 0.1,
        rtol: 0.1,
        min_cosine: 0.9,
    };
    let e = tensor(F32, &[2, 2], &[1., 0., 0., 2.]);
    let a = tensor(F32, &[2, 2], &[1.15, 0., 0., -2.]);
    let c = compare(&a, &e, &tol);
    assert_eq!(c.checks, 4);
    assert!((c.max_abs_error - 4.0).abs() < 1e-12);
    let rms = ((0.15f64.powi(2) + 16.0) / 4.0).sqrt();
    assert!((c.rms_error - rms).abs() < 1e-6, "{c}");
    // row 0 is parallel (cos 1), row 1 opposite (cos -1)
    assert!((c.min_cosine + 1.0).abs() < 1e-12);
    // |1.15 - 1| = 0.15 <= 0.1 + 0.1 * 1 passes; the sign flip fails
    assert_eq!(c.beyond_tolerance, 1);
    assert!(!c.pass());
    let same = compare(&e, &e, &tol);
    assert_eq!(
        (
            same.max_abs_error,
            same.rms_error,
            same.min_cosine,
            same.beyond_tolerance
        ),
        (0.0, 0.0, 1.0, 0)
    );
    assert!(same.pass());
    let zero_row = compare(
        &tensor(F32, &[1, 2], &[0., 0.]),
        &tensor(F32, &[1, 2], &[0., 1.]),
        &tol,
    );
    assert_eq!(zero_row.min_cosine, 0.0);
    let nan = compare(
        &tensor(F32, &[1], &[f32::NAN]),
        &tensor(F32, &[1], &[1.]),
        &tol,
    );
    assert!(nan.max_abs_error.is_infinite() && nan.beyond_tolerance == 1);
    let shape = compare(
        &tensor(F32, &[2], &[1., 1.]),
        &tensor(F32, &[1, 2], &[1., 1.]),
        &tol,
    );
    assert_eq!(shape.beyond_tolerance, 2);
    let Comparison { checks, .. } = shape;
    assert_eq!(checks, 0);
    assert_eq!(Tolerance::for_dtype(F16).rtol, 1e-2);
}

#[test]
fn bad_inputs_are_errors() {
    let g = single(OpKind::Unary(UnaryFn::Exp), &[t(F16, &[2])]);
    let e = evaluate(&g, &[], Precision::Exact, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("takes 1 inputs, got 0"), "{e}");
    let e = evaluate(&g, &[tensor(F32, &[2], &[0., 0.])], Precision::Exact, 1).unwrap_err();
    assert!(
        e.to_string()
            .contains("input %x0: expected f16[2], got f32[2]"),
        "{e}"
    );
    assert_eq!(
        Tensor::new(F16, vec![3], vec![0.0]),
        Err(ReferenceError::BadTensor {
            ty: "f16[3]".into(),
            reason: "1 values for 3 elements".into(),
        })
    );
    let e = "fast".parse::<Precision>().unwrap_err();
    assert_eq!(e, ReferenceError::BadPrecision("fast".into()));
    assert_eq!(
        e.to_string(),
        "unknown precision `fast` (known: exact, device)"
    );
}

/// A wrapped graph error is shown once: it is part of the message, not also its source, so an
/// error chain (`{:#}` of anyhow) does not print it twice.
#[test]
fn a_graph_error_is_not_also_the_source() {
    use std::error::Error as _;
    let e = ipu_reference::ReferenceError::from(ipu_graph::GraphError::Graph {
        graph: "g".into(),
        reason: "the graph has no outputs".into(),
    });
    assert!(e.source().is_none());
    assert_eq!(
        e.to_string(),
        "invalid graph: graph g: the graph has no outputs"
    );
}

/// A finite value where the reference has an infinity, or NaN against a number, is beyond the
/// tolerance (the relative part of an infinite expected value is infinite too).
#[test]
fn infinities_and_nans_that_differ_are_beyond_tolerance() {
    use ipu_graph::DType;
    use ipu_reference::{Tensor, Tolerance, compare};
    let t = |v: Vec<f32>| Tensor::new(DType::F32, vec![1, v.len()], v).unwrap();
    let tol = Tolerance::for_dtype(DType::F32);
    let c = compare(&t(vec![1.0, 2.0]), &t(vec![f32::INFINITY, 2.0]), &tol);
    assert_eq!(c.beyond_tolerance, 1);
    assert!(!c.pass());
    let c = compare(&t(vec![0.0, 2.0]), &t(vec![f32::NAN, 2.0]), &tol);
    assert_eq!(c.beyond_tolerance, 1);
    let c = compare(
        &t(vec![f32::NAN, f32::INFINITY]),
        &t(vec![f32::NAN, f32::INFINITY]),
        &tol,
    );
    assert_eq!(c.beyond_tolerance, 0);
    assert!(c.pass());
}

/// A softmax row whose every score is -inf (masked) is zeros; a row holding a NaN is NaN, in
/// both precisions (the device's kernels give the same).
#[test]
fn softmax_rows_of_nan_are_nan_and_fully_masked_rows_are_zeros() {
    use ipu_graph::DType;
    use ipu_reference::{Precision, Tensor, evaluate};
    let g = ipu_graph::parse(
        "graph s {\n  input %x: f32[3, 2]\n  %y = softmax(%x) {axis = 1}: f32[3, 2]\n  output %y\n}\n",
        "s.ipug",
    )
    .unwrap();
    let ninf = f32::NEG_INFINITY;
    let x = Tensor::new(
        DType::F32,
        vec![3, 2],
        vec![f32::NAN, 1.0, ninf, ninf, f32::NAN, ninf],
    )
    .unwrap();
    for precision in [Precision::Device, Precision::Exact] {
        let y = &evaluate(&g, std::slice::from_ref(&x), precision, 1).unwrap()[0].data;
        assert!(y[0].is_nan() && y[1].is_nan(), "{y:?}");
        assert_eq!(&y[2..4], &[0.0, 0.0]);
        assert!(y[4].is_nan() && y[5].is_nan(), "{y:?}");
    }
}

fn flash_kind(causal: bool, block: usize) -> OpKind {
    OpKind::FlashAttention {
        scale: 0.25,
        causal,
        block_q: block,
        block_k: block,
        partials: F32,
        out: F16,
    }
}

/// Grouped-query attention is attention with each kv head repeated for its query heads: equal
/// in both precisions (the expansion broadcasts k and v over the group, so every product is
/// the ungrouped one).
#[test]
fn grouped_query_flash_attention_is_attention_with_repeated_kv_heads() {
    let (heads, kv_heads, seq, d) = (6, 2, 24, 16);
    let group = heads / kv_heads;
    for causal in [false, true] {
        let grouped = single(
            flash_kind(causal, 7),
            &[
                t(F16, &[heads, seq, d]),
                t(F16, &[kv_heads, seq, d]),
                t(F16, &[kv_heads, seq, d]),
            ],
        );
        let ins = make_inputs(&grouped, 3);
        let repeat = |x: &Tensor| Tensor {
            dtype: x.dtype,
            shape: vec![heads, seq, d],
            data: (0..heads)
                .flat_map(|h| {
                    let kv = h / group;
                    x.data[kv * seq * d..(kv + 1) * seq * d].to_vec()
                })
                .collect(),
        };
        let plain = single(flash_kind(causal, 7), &vec![t(F16, &[heads, seq, d]); 3]);
        let plain_ins = vec![ins[0].clone(), repeat(&ins[1]), repeat(&ins[2])];
        for precision in [Precision::Exact, Precision::Device] {
            let a = evaluate(&grouped, &ins, precision, 1).unwrap().remove(0);
            let b = evaluate(&plain, &plain_ins, precision, 1)
                .unwrap()
                .remove(0);
            assert_eq!(a.data, b.data, "causal {causal} {precision:?}");
        }
    }
}

/// A bool mask that hides the keys after each query is the causal mask, bit for bit in both
/// precisions (the device precision's lowest finite score and the causal `-inf` both give
/// `exp = 0`, and every row sees key 0); a mask `[1, sq, sk]` broadcasts over the heads.
#[test]
fn a_lower_triangular_bool_mask_is_the_causal_mask() {
    let (heads, seq, d) = (2, 20, 16);
    let qkv = [
        t(F16, &[heads, seq, d]),
        t(F16, &[heads, seq, d]),
        t(F16, &[heads, seq, d]),
    ];
    let causal = single(flash_kind(true, 8), &qkv);
    let ins = make_inputs(&causal, 5);
    for shape in [vec![seq, seq], vec![1, seq, seq]] {
        let mut with_mask = qkv.to_vec();
        with_mask.push(t(DType::Bool, &shape));
        let masked = single(flash_kind(false, 8), &with_mask);
        let mut mins = ins.clone();
        mins.push(Tensor {
            dtype: DType::Bool,
            shape: shape.clone(),
            data: (0..seq * seq)
                .map(|e| f32::from(u8::from(e % seq <= e / seq)))
                .collect(),
        });
        for precision in [Precision::Exact, Precision::Device] {
            let a = evaluate(&causal, &ins, precision, 1).unwrap().remove(0);
            let b = evaluate(&masked, &mins, precision, 1).unwrap().remove(0);
            assert_eq!(a.data, b.data, "mask {shape:?} {precision:?}");
        }
    }
}

/// An additive mask, shared by the heads or per head, per query or shared by the queries, in
/// f32 and f16: the device precision's expansion stays within f16 tolerance of the exact
/// evaluation, which adds it to the scaled scores.
#[test]
fn additive_masks_broadcast_and_agree_with_the_exact_precision() {
    let (heads, seq, d) = (3, 33, 16);
    for (mask_dtype, shape) in [
        (F32, vec![seq, seq]),
        (F16, vec![1, seq]),
        (F32, vec![heads, 1, seq]),
        (F16, vec![heads, seq, seq]),
    ] {
        let mut ins_ty = vec![t(F16, &[heads, seq, d]); 3];
        ins_ty.push(t(mask_dtype, &shape));
        let g = single(flash_kind(false, 16), &ins_ty);
        let mut ins = make_inputs(&g, 9);
        ins[3].data.iter_mut().for_each(|x| *x *= 4.0);
        let exact = evaluate(&g, &ins, Precision::Exact, 1).unwrap().remove(0);
        let device = evaluate(&g, &ins, Precision::Device, 1).unwrap().remove(0);
        let c = compare(&device, &exact, &Tolerance::for_dtype(F16));
        assert!(c.pass(), "{mask_dtype} {shape:?}: {c}");
        // Without the mask the output differs: the mask took part.
        let plain = single(flash_kind(false, 16), &ins_ty[..3]);
        let unmasked = evaluate(&plain, &ins[..3], Precision::Exact, 1)
            .unwrap()
            .remove(0);
        assert_ne!(unmasked.data, exact.data, "{shape:?}");
    }
}
