//! Shape and type inference of every operation, and the verifier's messages on malformed
//! graphs (they name the operation and the operand).

#![allow(clippy::cloned_ref_to_slice_refs)] // the operand lists read better as arrays of owned types

use ipu_graph::{
    DType, GraphBuilder, OpKind, Operation, OperationId, TensorType, UnaryFn, Value, ValueId, infer,
};

const F16: DType = DType::F16;
const F32: DType = DType::F32;
const F8: DType = DType::F143 { scale: -3 };

fn t(d: DType, s: &[usize]) -> TensorType {
    TensorType::new(d, s.to_vec())
}

fn ok(kind: OpKind, ins: &[TensorType]) -> TensorType {
    let refs: Vec<&TensorType> = ins.iter().collect();
    infer(&kind, &refs).unwrap_or_else(|e| panic!("{kind:?}: {e:?}"))
}

/// The error message and offending operand of an invalid combination.
fn bad(kind: OpKind, ins: &[TensorType]) -> (Option<usize>, String) {
    let refs: Vec<&TensorType> = ins.iter().collect();
    let e = infer(&kind, &refs).expect_err("invalid");
    (e.operand, e.reason)
}

fn mm(partials: DType, out: DType) -> OpKind {
    OpKind::MatMul { partials, out }
}

#[test]
fn matmul_inference() {
    assert_eq!(
        ok(mm(F32, F16), &[t(F16, &[4, 8]), t(F16, &[8, 3])]),
        t(F16, &[4, 3])
    );
    // batch dims broadcast from the right
    assert_eq!(
        ok(mm(F32, F32), &[t(F32, &[2, 5, 4, 8]), t(F32, &[8, 3])]),
        t(F32, &[2, 5, 4, 3])
    );
    assert_eq!(
        ok(mm(F32, F32), &[t(F32, &[2, 1, 4, 8]), t(F32, &[5, 8, 3])]),
        t(F32, &[2, 5, 4, 3])
    );
    // FP8 operands of different formats and scales, f16 partials
    assert_eq!(
        ok(
            mm(F16, F8),
            &[t(F8, &[4, 8]), t(DType::F152 { scale: 2 }, &[8, 3])]
        ),
        t(F8, &[4, 3])
    );
    let (o, r) = bad(mm(F32, F16), &[t(F16, &[4, 8]), t(F16, &[7, 3])]);
    assert_eq!(o, Some(1));
    assert!(r.contains("inner dimensions differ"), "{r}");
    let (o, r) = bad(mm(F32, F16), &[t(F16, &[8]), t(F16, &[8, 3])]);
    assert_eq!(o, Some(0));
    assert!(r.contains("rank >= 2"), "{r}");
    let (_, r) = bad(mm(F32, F16), &[t(F16, &[2, 4, 8]), t(F16, &[3, 8, 3])]);
    assert!(r.contains("batch dimensions differ"), "{r}");
    let (_, r) = bad(mm(F32, F16), &[t(F16, &[4, 8]), t(F32, &[8, 3])]);
    assert!(r.contains("do not match"), "{r}");
    let (o, r) = bad(mm(F16, F16), &[t(F32, &[4, 8]), t(F32, &[8, 3])]);
    assert_eq!(o, Some(0));
    assert!(r.contains("f16 partials need"), "{r}");
    let (_, r) = bad(mm(F8, F16), &[t(F16, &[4, 8]), t(F16, &[8, 3])]);
    assert!(r.contains("partials must be f32 or f16"), "{r}");
    let (_, r) = bad(mm(F32, F16), &[t(F16, &[4, 8])]);
    assert!(r.contains("takes 2 operands, got 1"), "{r}");
}

#[test]
fn data_movement_inference() {
    let x = t(F16, &[2, 3, 4]);
    assert_eq!(
        ok(
            OpKind::Transpose {
                perm: vec![2, 0, 1]
            },
            &[x.clone()]
        ),
        t(F16, &[4, 2, 3])
    );
    let (_, r) = bad(
        OpKind::Transpose {
            perm: vec![0, 0, 1],
        },
        &[x.clone()],
    );
    assert!(r.contains("not a permutation"), "{r}");
    assert_eq!(
        ok(OpKind::Reshape { shape: vec![6, 4] }, &[x.clone()]),
        t(F16, &[6, 4])
    );
    let (_, r) = bad(OpKind::Reshape { shape: vec![5, 4] }, &[x.clone()]);
    let slice = |axis, start, end| OpKind::Slice { axis, start, end };
    assert!(r.contains("20 elements but f16[2, 3, 4] has 24"), "{r}");
    assert_eq!(ok(slice(1, 1, 3), &[x.clone()]), t(F16, &[2, 2, 4]));
    let (_, r) = bad(slice(1, 2, 4), &[x.clone()]);
    assert!(r.contains("outside 0..3"), "{r}");
    let (o, r) = bad(slice(3, 0, 1), &[x.clone()]);
    assert_eq!(o, Some(0));
    assert!(r.contains("axis 3 out of range"), "{r}");
    assert_eq!(
        ok(OpKind::Concat { axis: 2 }, &[x.clone(), t(F16, &[2, 3, 1])]),
        t(F16, &[2, 3, 5])
    );
    let (o, _) = bad(OpKind::Concat { axis: 2 }, &[x.clone(), t(F16, &[2, 2, 1])]);
    assert_eq!(o, Some(1));
    let (o, _) = bad(OpKind::Concat { axis: 0 }, &[x.clone(), t(F32, &[2, 3, 4])]);
    assert_eq!(o, Some(1));
    let (_, r) = bad(OpKind::Concat { axis: 0 }, &[]);
    assert!(r.contains("at least 1"), "{r}");
}

#[test]
fn elementwise_and_reduction_inference() {
    let x = t(F16, &[2, 3, 4]);
    for kind in [
        OpKind::Add,
        OpKind::Sub,
        OpKind::Mul,
        OpKind::Div,
        OpKind::Max,
    ] {
        assert_eq!(ok(kind.clone(), &[x.clone(), x.clone()]), x);
        assert_eq!(ok(kind.clone(), &[x.clone(), t(F16, &[2, 3, 1])]), x);
        assert_eq!(
            ok(kind.clone(), &[t(F16, &[1, 3, 4]), t(F16, &[2, 1, 4])]),
            x
        );
        let (o, r) = bad(kind.clone(), &[x.clone(), t(F16, &[2, 2, 4])]);
        assert_eq!(o, Some(1));
        assert!(r.contains("do not broadcast"), "{r}");
        let (_, r) = bad(kind.clone(), &[x.clone(), t(F16, &[3, 4])]);
        assert!(r.contains("do not broadcast"), "{r}");
        let (_, r) = bad(kind, &[x.clone(), t(F32, &[2, 3, 4])]);
        assert!(r.contains("dtype f32 differs from f16"), "{r}");
    }
    assert_eq!(ok(OpKind::Scale { factor: 2.0 }, &[x.clone()]), x);
    let (_, r) = bad(OpKind::Scale { factor: f32::NAN }, &[x.clone()]);
    assert!(r.contains("not finite"), "{r}");
    assert_eq!(ok(OpKind::Unary(UnaryFn::Exp), &[x.clone()]), x);
    for kind in [
        OpKind::Unary(UnaryFn::Sqrt),
        OpKind::Unary(UnaryFn::Tanh),
        OpKind::Unary(UnaryFn::Erf),
        OpKind::Unary(UnaryFn::Log),
    ] {
        assert_eq!(ok(kind.clone(), &[x.clone()]), x);
        let (_, r) = bad(kind, &[x.clone(), x.clone()]);
        assert!(r.contains("takes 1 operands, got 2"), "{r}");
    }
    let (_, r) = bad(OpKind::Unary(UnaryFn::Exp), &[x.clone(), x.clone()]);
    assert!(r.contains("takes 1 operands, got 2"), "{r}");
    assert_eq!(
        ok(OpKind::ReduceMax { axis: 1 }, &[x.clone()]),
        t(F16, &[2, 1, 4])
    );
    assert_eq!(
        ok(OpKind::ReduceSum { axis: 2 }, &[x.clone()]),
        t(F16, &[2, 3, 1])
    );
    assert!(
        bad(OpKind::ReduceSum { axis: 3 }, &[x.clone()])
            .1
            .contains("axis 3")
    );
    assert_eq!(ok(OpKind::Softmax { axis: 2 }, &[x.clone()]), x);
    assert!(
        bad(OpKind::Softmax { axis: 5 }, &[x.clone()])
            .1
            .contains("axis 5")
    );
    assert_eq!(ok(OpKind::cast(F8), &[x.clone()]), t(F8, &[2, 3, 4]));
    let (_, r) = bad(OpKind::cast(DType::F152 { scale: 40 }), &[x.clone()]);
    assert!(r.contains("FP8 scale 40 outside"), "{r}");
    assert_eq!(ok(OpKind::LayerNorm { epsilon: 1e-5 }, &[x.clone()]), x);
    assert!(
        bad(OpKind::LayerNorm { epsilon: -1.0 }, &[x.clone()])
            .1
            .contains("epsilon")
    );
    assert!(
        bad(OpKind::LayerNorm { epsilon: 1e-5 }, &[t(F16, &[])])
            .1
            .contains("rank >= 1")
    );
}

#[test]
fn attention_inference() {
    let att = |causal| OpKind::Attention {
        scale: 0.125,
        causal,
        partials: F16,
        out: F16,
    };
    let flash = |b| OpKind::FlashAttention {
        scale: 0.125,
        causal: false,
        block_q: b,
        block_k: b,
        partials: F32,
        out: F32,
    };
    let q = t(F8, &[2, 16, 8]);
    let k = t(F8, &[2, 32, 8]);
    let v = t(F16, &[2, 32, 4]);
    assert_eq!(
        ok(att(false), &[q.clone(), k.clone(), v.clone()]),
        t(F16, &[2, 16, 4])
    );
    assert_eq!(
        ok(flash(4), &[q.clone(), k.clone(), v.clone()]),
        t(F32, &[2, 16, 4])
    );
    let (o, r) = bad(att(true), &[q.clone(), k.clone(), v.clone()]);
    assert_eq!(o, Some(1));
    assert!(r.contains("causal"), "{r}");
    let (o, r) = bad(att(false), &[q.clone(), t(F8, &[2, 32, 7]), v.clone()]);
    assert_eq!(o, Some(1));
    assert!(r.contains("head dimension"), "{r}");
    let (o, r) = bad(att(false), &[q.clone(), k.clone(), t(F16, &[2, 31, 4])]);
    assert_eq!(o, Some(2));
    assert!(r.contains("sequence length of v"), "{r}");
    let (o, r) = bad(att(false), &[q.clone(), t(F8, &[3, 32, 8]), v.clone()]);
    assert_eq!(o, Some(1));
    assert!(r.contains("batch dimensions"), "{r}");
    let (o, _) = bad(att(false), &[t(F32, &[2, 16, 8]), k.clone(), v.clone()]);
    assert_eq!(o, Some(0), "f16 partials reject f32 operands");
    assert!(
        bad(flash(0), &[q.clone(), k.clone(), v.clone()])
            .1
            .contains("block sizes")
    );
    assert!(
        bad(att(false), &[q.clone(), k])
            .1
            .contains("takes 3 operands")
    );
}

fn small() -> (GraphBuilder, ValueId, ValueId) {
    let mut b = GraphBuilder::new("g");
    let a = b.input("a", t(F16, &[4, 8]));
    let w = b.input("w", t(F16, &[8, 2]));
    (b, a, w)
}

/// [`small`] with `%c = exp(%a)` as its output, not verified.
fn exp_of_a() -> (ipu_graph::Graph, ValueId) {
    let (mut b, a, _) = small();
    let c = b.op("c", OpKind::Unary(UnaryFn::Exp), &[a]).unwrap();
    b.output(c);
    (b.finish_unverified(), c)
}

#[test]
fn builder_errors_name_operation_and_operand() {
    let (mut b, a, w) = small();
    let e = b.matmul("c", w, a, F32, F16).unwrap_err().to_string();
    assert_eq!(
        e,
        "operation %c (matmul), operand #1 %a: inner dimensions differ: f16[8, 2] x f16[4, 8] (2 vs 4)"
    );
    let e = b
        .op("d", OpKind::Add, &[a, ValueId(9)])
        .unwrap_err()
        .to_string();
    assert_eq!(e, "operation %d (add), operand #1: unknown value v9");
}

#[test]
fn verifier_rejects_malformed_graphs() {
    // A stale annotation.
    let (mut b, a, w) = small();
    let c = b.matmul("c", a, w, F32, F16).unwrap();
    b.output(c);
    let mut g = b.finish().unwrap();
    assert!(g.verify().is_ok());
    g.parts_mut().0[c.0 as usize].ty.shape = vec![4, 3];
    assert_eq!(
        g.verify().unwrap_err().to_string(),
        "operation %c (matmul): result %c is annotated f16[4, 3] but the operation gives f16[4, 2]"
    );

    // An operand used before it is defined.
    let (mut b, a, w) = small();
    let c = b.matmul("c", a, w, F32, F16).unwrap();
    let d = b.op("d", OpKind::Unary(UnaryFn::Exp), &[c]).unwrap();
    b.output(d);
    let mut g = b.finish_unverified();
    g.parts_mut().1.swap(0, 1);
    let e = g.verify().unwrap_err().to_string();
    assert_eq!(
        e,
        "operation %d (exp), operand #0 %c: used before it is defined"
    );

    // Duplicate names, no outputs, a value nobody defines.
    let (mut b, a, _) = small();
    let c = b.op("a", OpKind::Unary(UnaryFn::Exp), &[a]).unwrap();
    b.output(c);
    assert_eq!(
        b.finish().unwrap_err().to_string(),
        "value %a: defined more than once"
    );
    let (b, _, _) = small();
    assert_eq!(
        b.finish().unwrap_err().to_string(),
        "graph g: the graph has no outputs"
    );
    let (mut b, a, _) = small();
    b.output(a);
    let mut g = b.finish_unverified();
    g.parts_mut().0.push(Value {
        name: "ghost".into(),
        ty: t(F16, &[1]),
        producer: None,
    });
    assert_eq!(
        g.verify().unwrap_err().to_string(),
        "value %ghost: is neither a graph input, a constant nor produced by an operation"
    );

    // An operation with two results, and a wrong producer link.
    let (mut g, c) = exp_of_a();
    let (values, ops, _, _) = g.parts_mut();
    values.push(Value {
        name: "c2".into(),
        ty: t(F16, &[4, 8]),
        producer: Some(OperationId(0)),
    });
    ops[0] = Operation {
        outputs: vec![c, ValueId(3)],
        ..ops[0].clone()
    };
    assert_eq!(
        g.verify().unwrap_err().to_string(),
        "operation %c (exp): has 2 results, expected 1"
    );
    let (mut g, c) = exp_of_a();
    g.parts_mut().0[c.0 as usize].producer = Some(OperationId(7));
    assert!(
        g.verify()
            .unwrap_err()
            .to_string()
            .contains("defined twice")
    );
}

#[test]
fn ids_display_and_types() {
    assert_eq!(ValueId(3).to_string(), "v3");
    assert_eq!(OperationId(0).to_string(), "op0");
    assert_eq!(t(F8, &[2, 3]).to_string(), "f143@-3[2, 3]");
    assert_eq!(t(F8, &[2, 3]).bytes(), 6);
    assert_eq!(t(F32, &[2, 3]).bytes(), 24);
    assert_eq!(t(F16, &[]).elements(), 1);
    assert_eq!(DType::from_name("f152@-2"), Some(DType::F152 { scale: -2 }));
    assert_eq!(DType::from_name("f143"), Some(DType::F143 { scale: 0 }));
    assert_eq!(DType::from_name("f16@1"), None);
    assert_eq!(DType::F143 { scale: 5 }.name(), "f143@5");
}

#[test]
fn flash_attention_grouped_query_heads_and_masks() {
    let flash = OpKind::FlashAttention {
        scale: 0.125,
        causal: true,
        block_q: 16,
        block_k: 16,
        partials: F32,
        out: F16,
    };
    let q = t(F16, &[2, 8, 32, 16]);
    let kv = t(F16, &[2, 2, 32, 16]);
    assert_eq!(
        ok(flash.clone(), &[q.clone(), kv.clone(), kv.clone()]),
        t(F16, &[2, 8, 32, 16])
    );
    // kv heads that do not divide the query heads name the operand.
    let (o, r) = bad(
        flash.clone(),
        &[q.clone(), t(F16, &[2, 3, 32, 16]), t(F16, &[2, 3, 32, 16])],
    );
    assert_eq!(o, Some(1));
    assert!(r.contains("does not divide"), "{r}");
    let (o, r) = bad(
        flash.clone(),
        &[q.clone(), kv.clone(), t(F16, &[2, 4, 32, 16])],
    );
    assert_eq!(o, Some(2), "{r}");
    // Masks: bool or f32/f16, broadcastable to the scores [2, 8, 32, 32].
    for (d, shape) in [
        (DType::Bool, vec![32, 32]),
        (F32, vec![1, 32]),
        (F16, vec![8, 32, 1]),
        (DType::Bool, vec![2, 1, 32, 32]),
    ] {
        ok(
            flash.clone(),
            &[q.clone(), kv.clone(), kv.clone(), t(d, &shape)],
        );
    }
    for (d, shape, why) in [
        (DType::Bool, vec![32, 31], "does not broadcast"),
        (DType::Bool, vec![32], "does not broadcast"),
        (F32, vec![1, 2, 1, 32, 32], "does not broadcast"),
        (DType::U8, vec![32, 32], "bool or an additive"),
        (F8, vec![32, 32], "bool or an additive"),
    ] {
        let (o, r) = bad(
            flash.clone(),
            &[q.clone(), kv.clone(), kv.clone(), t(d, &shape)],
        );
        assert_eq!(o, Some(3), "{r}");
        assert!(r.contains(why), "{shape:?}: {r}");
    }
    // Plain attention takes neither.
    let att = OpKind::Attention {
        scale: 0.125,
        causal: false,
        partials: F32,
        out: F16,
    };
    assert_eq!(
        bad(att.clone(), &[q.clone(), kv.clone(), kv.clone()]).0,
        Some(1)
    );
    assert!(
        bad(att, &[q.clone(), q.clone(), q.clone(), t(F32, &[32, 32])])
            .1
            .contains("takes 3")
    );
}
