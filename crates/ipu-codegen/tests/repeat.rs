//! Repeated layers: a run of identical blocks is planned, lowered and emitted once and run
//! once per layer with that layer's weights (`ipu_codegen::repeat`); differential tests
//! against the host reference through "write the package, read it back, run", and the
//! package's support memory, which must not grow with the depth.

mod common;

use ipu_codegen::build;
use ipu_graph::{DType, Graph, GraphBuilder, OpKind, TensorType, UnaryFn};
use ipu_target::Target;

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 2000.0 - 0.25)
        .collect()
}

/// `layers` residual blocks `h + tanh(norm(h) w_l + b_l)` on `[m, k]` rows, each with weights
/// of its own and a bias that is its own only when `own_bias`.
fn layered(layers: usize, dtype: DType, m: usize, k: usize, own_bias: bool) -> Graph {
    let mut g = GraphBuilder::new("layered");
    let x = g.input("x", TensorType::new(dtype, [m, k]));
    let mut h = g.op("h", OpKind::Scale { factor: 0.5 }, &[x]).unwrap();
    for l in 0..layers {
        let w = TensorType::new(dtype, [k, k]);
        let w = g
            .constant_values(format!("w{l}"), w, &values(k * k, l as u32))
            .unwrap();
        let seed = if own_bias { 100 + l as u32 } else { 100 };
        let b = TensorType::new(dtype, [1, k]);
        let b = g
            .constant_values(format!("b{l}"), b, &values(k, seed))
            .unwrap();
        let n = g
            .op(format!("n{l}"), OpKind::LayerNorm { epsilon: 1e-5 }, &[h])
            .unwrap();
        let kind = OpKind::MatMul {
            partials: DType::F32,
            out: dtype,
        };
        let p = g.op(format!("p{l}"), kind, &[n, w]).unwrap();
        let q = g.op(format!("q{l}"), OpKind::Add, &[p, b]).unwrap();
        let t = g
            .op(format!("t{l}"), OpKind::Unary(UnaryFn::Tanh), &[q])
            .unwrap();
        h = g.op(format!("r{l}"), OpKind::Add, &[h, t]).unwrap();
    }
    let y = g.op("y", OpKind::Scale { factor: 2.0 }, &[h]).unwrap();
    g.output(y);
    g.finish().unwrap()
}

#[test]
fn repeated_layers_match_the_reference_on_the_device() {
    for (dtype, tiles, own_bias) in [
        (DType::F32, 4, true),
        (DType::F32, 64, false),
        (DType::F16, 16, true),
    ] {
        let g = layered(4, dtype, 32, 64, own_bias);
        let b = build(&g, &common::gc200(tiles)).unwrap();
        assert_eq!(b.report.repeated_layers, 4, "{dtype} on {tiles} tiles");
        common::run(&g, Target::gc200(), tiles, 5).assert_exact(&format!("{dtype} {tiles}"));
    }
}

#[test]
fn support_memory_does_not_grow_with_the_depth() {
    let support = |layers: usize| {
        let b = build(
            &layered(layers, DType::F32, 32, 64, true),
            &common::gc200(16),
        )
        .unwrap();
        assert_eq!(b.report.repeated_layers, layers);
        let view = b.report.view.expect("a placed build has a view");
        view.tiles.iter().map(|t| t.support_bytes).max().unwrap()
    };
    let (two, eight) = (support(2), support(8));
    // Eight layers add six weight copies and six carries of the result, a few vertex states
    // and table rows each, and nothing per operation of the block.
    assert!(
        eight <= two + 6 * 256,
        "2 layers: {two} bytes, 8 layers: {eight} bytes"
    );
}

#[test]
fn a_single_layer_is_not_repeated() {
    let b = build(&layered(1, DType::F32, 32, 64, true), &common::gc200(4)).unwrap();
    assert_eq!(b.report.repeated_layers, 0);
}
