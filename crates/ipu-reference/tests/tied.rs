//! Tied tables held once: a lookup table whose transposed twin a matmul reads is dropped for the
//! twin (`gather_columns`), and the graph computes the same outputs; tables that differ in one
//! element, or that another operation reads, stay as they are.

use ipu_graph::tied::share_tied_tables;
use ipu_graph::{DType, Graph, GraphBuilder, OpKind, TensorType};
use ipu_reference::{Precision, Tensor, evaluate};

/// A graph looking up `[v, h]` table `t` by `ids` and multiplying `x` by the `[h, v]` constant
/// `w` (the table's transpose, with `w_changed` elements changed), with `also` a scale of the
/// table as a further output.
fn tied_graph(dtype: DType, v: usize, h: usize, w_changed: usize, also: bool) -> Graph {
    let table: Vec<f32> = (0..v * h).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut w = vec![0.0; v * h];
    for r in 0..v {
        for c in 0..h {
            w[c * v + r] = table[r * h + c];
        }
    }
    for x in w.iter_mut().take(w_changed) {
        *x += 0.5;
    }
    let mut b = GraphBuilder::new("tied");
    let ids = b.input("ids", TensorType::new(DType::I32, [2, 3]));
    let x = b.input("x", TensorType::new(dtype, [4, h]));
    let t = b
        .constant_values("table", TensorType::new(dtype, [v, h]), &table)
        .unwrap();
    let wv = b
        .constant_values("head", TensorType::new(dtype, [h, v]), &w)
        .unwrap();
    let e = b.op("e", OpKind::Gather { axis: 0 }, &[t, ids]).unwrap();
    let mm = OpKind::MatMul {
        partials: DType::F32,
        out: dtype,
    };
    let y = b.op("y", mm, &[x, wv]).unwrap();
    b.output(e);
    b.output(y);
    if also {
        let s = b.op("s", OpKind::Scale { factor: 2.0 }, &[t]).unwrap();
        b.output(s);
    }
    b.finish().unwrap()
}

fn outputs(g: &Graph, v: usize, h: usize, dtype: DType) -> Vec<Tensor> {
    let ids: Vec<f32> = [0, v as i32 - 1, 5, -1, -(v as i32), 2]
        .iter()
        .map(|&i| i as f32)
        .collect();
    let x: Vec<f32> = (0..4 * h).map(|i| (i as f32 * 0.11).cos()).collect();
    let ins = [
        Tensor::new(DType::I32, vec![2, 3], ids).unwrap(),
        Tensor::new(dtype, vec![4, h], x).unwrap(),
    ];
    evaluate(g, &ins, Precision::Exact, 1).unwrap()
}

#[test]
fn a_table_with_a_transposed_twin_is_looked_up_in_the_twin() {
    for dtype in [DType::F32, DType::F16] {
        let (v, h) = (11, 6);
        let g = tied_graph(dtype, v, h, 0, false);
        let (shared, tied) = share_tied_tables(&g).unwrap();
        assert_eq!(tied.len(), 1, "{dtype}");
        assert_eq!(
            (tied[0].table.as_str(), tied[0].held.as_str()),
            ("table", "head")
        );
        assert_eq!(tied[0].lookups, ["e"]);
        assert_eq!(shared.constants().len(), 1, "{dtype}: the table is dropped");
        let text = ipu_graph::print(&shared);
        assert!(text.contains("%e = gather_columns(%head, %ids)"), "{text}");
        assert_eq!(
            outputs(&g, v, h, dtype),
            outputs(&shared, v, h, dtype),
            "{dtype}"
        );
    }
}

#[test]
fn tables_that_differ_or_that_others_read_are_kept() {
    for (changed, also) in [(1, false), (0, true)] {
        let g = tied_graph(DType::F32, 9, 4, changed, also);
        let (shared, tied) = share_tied_tables(&g).unwrap();
        assert!(tied.is_empty(), "changed={changed} also={also}");
        assert_eq!(ipu_graph::print(&shared), ipu_graph::print(&g));
    }
}
