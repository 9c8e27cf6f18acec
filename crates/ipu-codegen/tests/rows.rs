//! Differential tests of the row operations and data movement: reshape, transpose, slice,
//! concat, broadcasting binary operations, reductions, softmax, layer norm and the unfused
//! attention expansion. Each graph runs the whole way (build, package bytes written and read
//! back, simulated device, host reference in device precision) on odd shapes and on 1, 13 and
//! 64 tiles.

mod common;

use ipu_codegen::{CodegenError, build};
use ipu_graph::{DType, Graph, GraphBuilder, OpKind, TensorType};
use ipu_target::Target;

const F32: DType = DType::F32;
const F16: DType = DType::F16;
const F143: DType = DType::F143 { scale: -2 };

/// One operation on fresh inputs of the given types.
fn single(kind: OpKind, inputs: &[(DType, &[usize])]) -> Graph {
    let mut b = GraphBuilder::new("rows");
    let ids: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, (d, s))| b.input(format!("x{i}"), TensorType::new(*d, s.to_vec())))
        .collect();
    let y = b.op("y", kind, &ids).expect("a valid operation");
    b.output(y);
    b.finish().expect("a valid graph")
}

/// Runs `g` on each tile count: within tolerance, and bit-exact with the device-precision
/// reference when `exact`.
fn check_with(g: &Graph, tiles: &[u32], what: &str, exact: bool) {
    for &t in tiles {
        let o = common::run(g, Target::gc200(), t, 7);
        let what = format!("{what} on {t} tiles");
        if exact {
            o.assert_exact(&what);
        } else {
            o.assert_pass(&what);
        }
    }
}

/// [`check_with`], bit-exact.
fn check(g: &Graph, tiles: &[u32], what: &str) {
    check_with(g, tiles, what, true);
}

#[test]
fn transposes_keep_every_element() {
    let perms: [&[usize]; 5] = [&[1, 0, 2], &[0, 2, 1], &[1, 2, 0], &[2, 0, 1], &[2, 1, 0]];
    for perm in perms {
        for (dtype, shape) in [(F16, [5usize, 6, 7]), (F32, [3, 4, 9]), (F143, [3, 9, 8])] {
            let g = single(
                OpKind::Transpose {
                    perm: perm.to_vec(),
                },
                &[(dtype, &shape)],
            );
            check(
                &g,
                &[1, 13],
                &format!("transpose {perm:?} of {shape:?} {dtype:?}"),
            );
        }
    }
    let g = single(OpKind::Transpose { perm: vec![1, 0] }, &[(F16, &[67, 45])]);
    check(&g, &[64], "transpose 67x45");
}

#[test]
fn reshapes_slices_and_concats_move_runs() {
    type Operands = Vec<(DType, Vec<usize>)>;
    let cases: Vec<(OpKind, Operands)> = vec![
        (
            OpKind::Reshape { shape: vec![4, 12] },
            vec![(F16, vec![6, 8])],
        ),
        (
            OpKind::Reshape { shape: vec![6, 5] },
            vec![(F32, vec![2, 3, 5])],
        ),
        (
            OpKind::Reshape { shape: vec![16, 8] },
            vec![(F143, vec![8, 16])],
        ),
        (
            OpKind::Slice {
                axis: 0,
                start: 1,
                end: 4,
            },
            vec![(F16, vec![5, 7])],
        ),
        (
            OpKind::Slice {
                axis: 1,
                start: 4,
                end: 11,
            },
            vec![(F16, vec![5, 11])],
        ),
        (
            OpKind::Concat { axis: 0 },
            vec![(F16, vec![3, 7]), (F16, vec![2, 7])],
        ),
        (
            OpKind::Concat { axis: 1 },
            vec![(F32, vec![3, 8]), (F32, vec![3, 5])],
        ),
    ];
    check_cases(cases);
}

#[test]
fn gathers_of_whole_words_that_are_not_whole_units() {
    // f32 elements are whole words, f16 pairs too: slices, concats and reshapes whose runs
    // start or end off a 4-element unit.
    type Operands = Vec<(DType, Vec<usize>)>;
    let slice = |axis, start, end| OpKind::Slice { axis, start, end };
    let cases: Vec<(OpKind, Operands)> = vec![
        (slice(1, 3, 4), vec![(F32, vec![3, 5])]),
        (slice(1, 1, 3), vec![(F32, vec![7, 5])]),
        (slice(1, 2, 5), vec![(F32, vec![4, 5])]),
        (slice(2, 0, 1), vec![(F32, vec![2, 3, 3])]),
        (slice(1, 2, 6), vec![(F16, vec![5, 7])]),
        (slice(1, 2, 7), vec![(F16, vec![5, 7])]),
        (
            OpKind::Concat { axis: 1 },
            vec![(F32, vec![3, 1]), (F32, vec![3, 2]), (F32, vec![3, 3])],
        ),
        (
            OpKind::Concat { axis: 1 },
            vec![(F16, vec![9, 2]), (F16, vec![9, 5])],
        ),
        (
            OpKind::Reshape { shape: vec![5, 3] },
            vec![(F32, vec![3, 5])],
        ),
        (
            OpKind::Reshape { shape: vec![2, 60] },
            vec![(F32, vec![2, 3, 4, 5])],
        ),
        (
            OpKind::Reshape { shape: vec![30, 2] },
            vec![(F32, vec![4, 15])],
        ),
        (
            OpKind::Reshape { shape: vec![3, 10] },
            vec![(F16, vec![5, 6])],
        ),
    ];
    check_cases(cases);
}

/// An operation and its operands' types and shapes.
type Case = (OpKind, Vec<(DType, Vec<usize>)>);

/// Each operation on its operands, built alone and checked on 1, 13 and 64 tiles.
fn check_cases(cases: Vec<Case>) {
    for (kind, ins) in cases {
        let ins: Vec<(DType, &[usize])> = ins.iter().map(|(d, s)| (*d, s.as_slice())).collect();
        let g = single(kind.clone(), &ins);
        check(&g, &[1, 13, 64], &format!("{kind:?} of {ins:?}"));
    }
}

#[test]
fn sub_word_gathers_are_refused_at_planning() {
    // Odd f16 runs and FP8 runs off a 4-element unit would need sub-word writes.
    let slice = |start, end| OpKind::Slice {
        axis: 1,
        start,
        end,
    };
    type Operands<'a> = Vec<(DType, &'a [usize])>;
    let cases: Vec<(OpKind, Operands)> = vec![
        (slice(1, 3), vec![(F16, &[3, 5])]),
        (slice(2, 4), vec![(F143, &[3, 8])]),
        (
            OpKind::Concat { axis: 1 },
            vec![(F16, &[3, 3]), (F16, &[3, 2])],
        ),
    ];
    for (kind, ins) in cases {
        let g = single(kind.clone(), &ins);
        let e = build(&g, &common::gc200(4)).unwrap_err();
        let CodegenError::Unsupported { reason, .. } = &e else {
            panic!("{kind:?}: {e}");
        };
        assert!(reason.contains("word"), "{kind:?}: {e}");
    }
}

#[test]
fn unaligned_reshape_is_refused_at_planning() {
    let g = single(OpKind::Reshape { shape: vec![5, 3] }, &[(F16, &[3, 5])]);
    let e = build(&g, &common::gc200(4)).unwrap_err();
    let CodegenError::Unsupported { op, reason } = &e else {
        panic!("{e}");
    };
    assert!(op.starts_with('%'), "{e}");
    assert!(reason.contains("reshape"), "{e}");
}

#[test]
fn reductions_over_the_last_axis() {
    for dtype in [F32, F16] {
        for shape in [[3usize, 5, 37], [2, 4, 1], [1, 9, 64]] {
            for kind in [OpKind::ReduceMax { axis: 2 }, OpKind::ReduceSum { axis: 2 }] {
                let g = single(kind.clone(), &[(dtype, &shape)]);
                check(&g, &[1, 13, 64], &format!("{kind:?} {shape:?} {dtype:?}"));
            }
        }
    }
}

#[test]
fn reductions_and_softmax_along_other_axes() {
    for dtype in [F32, F16] {
        for axis in [0usize, 1] {
            for kind in [
                OpKind::ReduceMax { axis },
                OpKind::ReduceSum { axis },
                OpKind::Softmax { axis },
            ] {
                let g = single(kind.clone(), &[(dtype, &[5, 6, 7])]);
                check(&g, &[1, 13, 64], &format!("{kind:?} {dtype:?}"));
            }
        }
    }
}

#[test]
fn reshapes_to_and_from_single_columns() {
    for (from, to) in [
        (vec![9usize, 1], vec![1usize, 9]),
        (vec![3, 7], vec![21, 1]),
    ] {
        let g = single(OpKind::Reshape { shape: to.clone() }, &[(F16, &from)]);
        check(&g, &[1, 13], &format!("reshape {from:?} -> {to:?}"));
    }
}

#[test]
fn broadcasting_binary_operations() {
    use OpKind::*;
    for dtype in [F32, F16] {
        for kind in [Add, Sub, Mul, Div, Max] {
            for (a, b) in [
                (vec![3usize, 5, 13], vec![3usize, 5, 1]),
                (vec![3, 5, 1], vec![3, 5, 13]),
                (vec![3, 5, 13], vec![1, 5, 13]),
                (vec![2, 6, 1], vec![1, 6, 1]),
            ] {
                let g = single(kind.clone(), &[(dtype, &a), (dtype, &b)]);
                check(&g, &[1, 13, 64], &format!("{kind:?} {a:?} {b:?} {dtype:?}"));
            }
        }
    }
}

#[test]
fn a_row_vector_or_scalar_operand_keeps_the_other_operands_layout() {
    // A bias `[1, .., N]` or a scalar `[1, .., 1]` over `[.., N]`: the result keeps the first
    // operand's layout (here the input's, balanced over the tiles in its column groups), every
    // tile gathering the columns of the bias its pieces read, or the scalar; ragged last groups
    // (37, 45 columns) read the bias's zero padding or none, and a scalar's padding is cleared.
    use OpKind::*;
    for dtype in [F32, F16] {
        for kind in [Add, Sub, Mul, Div, Max] {
            for (a, b) in [
                (vec![5usize, 37], vec![1usize, 37]),
                (vec![2, 3, 45], vec![1, 1, 45]),
                (vec![64, 16], vec![1, 16]),
                (vec![5, 37], vec![1, 1]),
                (vec![2, 3, 45], vec![1, 1, 1]),
            ] {
                let g = single(kind.clone(), &[(dtype, &a), (dtype, &b)]);
                let p = ipu_codegen::plan::plan(&g, &Target::gc200(), 13).unwrap();
                assert!(
                    matches!(
                        p.ops[0].kind.downcast_ref(),
                        Some(ipu_codegen::ops::elementwise::Elementwise::Binary(_))
                    ),
                    "expected an elementwise operation: {:?}",
                    p.ops[0].kind
                );
                check(&g, &[1, 13, 64], &format!("{kind:?} {a:?} {b:?} {dtype:?}"));
            }
        }
    }
}

#[test]
fn softmax_and_layer_norm_along_rows() {
    for dtype in [F32, F16] {
        for shape in [[3usize, 7, 45], [2, 2, 1], [1, 30, 128]] {
            let g = single(OpKind::Softmax { axis: 2 }, &[(dtype, &shape)]);
            check(&g, &[1, 13, 64], &format!("softmax {shape:?} {dtype:?}"));
            let g = single(OpKind::LayerNorm { epsilon: 1e-5 }, &[(dtype, &shape)]);
            check(&g, &[1, 13, 64], &format!("layer_norm {shape:?} {dtype:?}"));
        }
    }
}

#[test]
fn attention_expands_over_dtypes_and_masks() {
    for dtype in ["f32", "f16", "f143", "f152"] {
        for causal in ["false", "true"] {
            let g = common::model(
                "attention",
                &[
                    ("seq", "21"),
                    ("heads", "2"),
                    ("head_dim", "16"),
                    ("dtype", dtype),
                    ("causal", causal),
                ],
            );
            // f16 attention has f32 partials: the reference forms the probabilities-times-v
            // product in the f16 x f16 -> f32 AMP order (K block 16), while the device's
            // probabilities are f32 and take the f32 AMP mode (K block 8); the two f32 sums
            // differ in the last bits, within the f16 tolerance. Every other type is bit-exact.
            check_with(
                &g,
                &[1, 13],
                &format!("attention {dtype} causal={causal}"),
                dtype != "f16",
            );
        }
    }
    let g = common::model(
        "attention",
        &[
            ("seq", "64"),
            ("heads", "3"),
            ("head_dim", "64"),
            ("causal", "true"),
        ],
    );
    check_with(&g, &[64], "attention seq 64 causal", false);
}

#[test]
fn typed_attention_small_fp8_runs() {
    let g = common::model(
        "typed-attention-small-fp8",
        &[("seq", "24"), ("heads", "2"), ("head_dim", "16")],
    );
    check(&g, &[1, 13, 64], "typed-attention-small-fp8 small");
}

#[test]
fn attention_too_large_for_the_chip_is_refused_at_planning() {
    let g = common::model(
        "attention",
        &[("seq", "4096"), ("heads", "16"), ("dtype", "f32")],
    );
    let (e, _, detail) = common::does_not_fit(&g, 1472, "%out");
    assert!(detail.contains("score matrix"), "{e}");
    assert!(e.to_string().contains("bytes over"), "{e}");
}

#[test]
fn typed_attention_builds_deterministically() {
    let g = common::model(
        "typed-attention-small-fp8",
        &[("seq", "32"), ("heads", "2"), ("head_dim", "16")],
    );
    let bytes = || common::package_bytes(&g, &common::gc200(13));
    assert!(bytes() == bytes(), "two builds of the same graph differ");
}
