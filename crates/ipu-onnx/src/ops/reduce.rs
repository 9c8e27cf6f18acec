//! Reductions: `ReduceSum`, `ReduceMax`, `ReduceMin` and `ReduceMean` as the graph's sums and
//! maxima along each axis, `CumSum` as a product with a triangular matrix, and the reductions,
//! pools and selections the device lacks.

use std::collections::BTreeSet;

use ipu_graph::{DType, OpKind};

use super::common::{
    Outs, cast_val, computed_in, fold, input, negate, one, out_name, req, reshape, scale, transpose,
};
use super::handler::Handler;
use crate::OnnxError;
use crate::importer::{Importer, Node, Val, normalize_axis};
use crate::known::{Elem, Known};

pub const HANDLERS: &[Handler] = &[
    Handler::map("ReduceSum", reduce),
    Handler::map("ReduceMax", reduce),
    Handler::map("ReduceMin", reduce),
    Handler::map("ReduceMean", reduce),
    Handler::map("CumSum", cumsum),
    Handler::refuse("ReduceProd", "no product-reduction device operator"),
    Handler::refuse("ArgMax", "no arg-max device operator"),
    Handler::refuse("TopK", "no sort device operator"),
    Handler::refuse("MaxPool", "no pooling device operator"),
    Handler::refuse("AveragePool", "no pooling device operator"),
];

/// The axes of a reduction: from the attribute before opset 18 (`ReduceMax`, `ReduceMin`,
/// `ReduceMean`), from input 1 otherwise (and for `ReduceSum` from opset 13).
fn reduce_axes(
    imp: &Importer<'_>,
    node: &Node<'_>,
    ins: &[Option<Val>],
    rank: usize,
) -> Result<Option<Vec<usize>>, OnnxError> {
    let from_input = node.op_type == "ReduceSum" || imp.opset >= 18;
    let axes = if from_input {
        match input(ins, 1) {
            None => None,
            Some(_) => Some(imp.int_input(node, ins, 1)?),
        }
    } else {
        node.ints("axes")?
    };
    let Some(axes) = axes.filter(|a| !a.is_empty()) else {
        return Ok(None);
    };
    let mut out = BTreeSet::new();
    for a in axes {
        out.insert(normalize_axis(node, "axes", a, rank)?);
    }
    Ok(Some(out.into_iter().collect()))
}

/// `ReduceSum`, `ReduceMax`, `ReduceMin` and `ReduceMean`: one graph reduction per axis
/// (which keeps the axis), the mean as the sum times `1/n` (`scale`), the minimum as
/// `-max(-x)`, and a reshape when `keepdims = 0`.
fn reduce(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    if matches!(node.op_type, "ReduceMax" | "ReduceMin")
        && matches!(input(ins, 0), Some(x) if imp.ty(x).0 == Elem::Bool)
    {
        // Any / all of booleans: the maximum / minimum of 0 and 1, exact in f16.
        return computed_in(imp, node, ins, DType::Bool, DType::F16, |imp, ins| {
            reduce(imp, node, ins)
        });
    }
    let from_input = node.op_type == "ReduceSum" || imp.opset >= 18;
    node.only_attrs(if from_input {
        &["keepdims", "noop_with_empty_axes"]
    } else {
        &["keepdims", "axes"]
    })?;
    let x = req(node, ins, 0)?;
    let shape = imp.shape(x);
    let keepdims = node.int("keepdims", 1)? != 0;
    let axes = match reduce_axes(imp, node, ins, shape.len())? {
        Some(a) => a,
        None if node.int("noop_with_empty_axes", 0)? != 0 => return one(x.clone()),
        None => (0..shape.len()).collect(),
    };
    let name = out_name(imp, node, 0);
    let min = node.op_type == "ReduceMin";
    let mut v = if min {
        negate(imp, node, x, &format!("{name}.neg"))?
    } else {
        x.clone()
    };
    let mut v_id = imp.data(node, 0, &v, &format!("{name}.input"))?;
    let n: usize = axes.iter().map(|&a| shape[a]).product();
    let needs_tail = min || node.op_type == "ReduceMean" || !keepdims;
    for (i, &axis) in axes.iter().enumerate() {
        let kind = match node.op_type {
            "ReduceMax" | "ReduceMin" => OpKind::ReduceMax { axis },
            _ => OpKind::ReduceSum { axis },
        };
        let step = if i + 1 == axes.len() && !needs_tail {
            name.clone()
        } else {
            format!("{name}.axis{axis}")
        };
        v_id = imp.op(node, &step, kind, &[v_id])?;
    }
    v = Val::Graph(v_id);
    // After the reductions: the mean's 1/n, the minimum's negation, keepdims = 0's reshape;
    // the last step takes the output's name.
    enum Tail {
        Scale(f32),
        Negate,
        Squeeze(Vec<usize>),
    }
    let mut tail = Vec::new();
    if node.op_type == "ReduceMean" {
        tail.push(("scaled", Tail::Scale((1.0 / n as f64) as f32)));
    }
    if min {
        tail.push(("min", Tail::Negate));
    }
    if !keepdims {
        let kept: Vec<usize> = shape
            .iter()
            .enumerate()
            .filter(|(a, _)| !axes.contains(a))
            .map(|(_, &d)| d)
            .collect();
        tail.push(("squeeze", Tail::Squeeze(kept)));
    }
    let count = tail.len();
    for (i, (what, step)) in tail.into_iter().enumerate() {
        let step_name = if i + 1 == count {
            name.clone()
        } else {
            format!("{name}.{what}")
        };
        v = match step {
            Tail::Scale(factor) => scale(imp, node, &v, factor, &step_name)?,
            Tail::Negate => negate(imp, node, &v, &step_name)?,
            Tail::Squeeze(kept) => reshape(imp, node, &v, kept, &step_name)?,
        };
    }
    one(v)
}

/// `CumSum(x, axis)` (`exclusive`, `reverse`): at import for a known `x`; on the device as a
/// product with a constant triangular matrix of ones along the axis (moved last), computed in
/// f32 (exact for the integers of a padding mask turned into positions, below 2^24) and cast
/// back to `x`'s type.
fn cumsum(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["exclusive", "reverse"])?;
    let x = req(node, ins, 0)?.clone();
    let shape = imp.shape(&x);
    let axis = imp.int_input(node, ins, 1)?;
    let &[axis] = axis.as_slice() else {
        return Err(node.bad_input(1, "the axis is one integer"));
    };
    let axis = normalize_axis(node, "axis", axis, shape.len())?;
    let (exclusive, reverse) = (node.int("exclusive", 0)? != 0, node.int("reverse", 0)? != 0);
    let n = shape[axis];
    // Output j sums the inputs i with i <= j (reverse: i >= j), i != j if exclusive.
    let summed = |i: usize, j: usize| {
        let inside = if reverse { i >= j } else { i <= j };
        inside && !(exclusive && i == j)
    };
    if let Val::Known(k, _) = &x {
        let v = k.f64s();
        let (outer, inner) = (
            shape[..axis].iter().product::<usize>(),
            shape[axis + 1..].iter().product::<usize>(),
        );
        let mut out = vec![0.0; v.len()];
        for o in 0..outer {
            for j in 0..n {
                for r in 0..inner {
                    out[(o * n + j) * inner + r] = (0..n)
                        .filter(|&i| summed(i, j))
                        .map(|i| v[(o * n + i) * inner + r])
                        .sum();
                }
            }
        }
        return fold(node, Known::from_f64(k.elem, shape, &out));
    }
    let name = out_name(imp, node, 0);
    let Val::Graph(xid) = x else {
        unreachable!("folded above")
    };
    let dtype = imp.b.ty(xid).dtype;
    let rank = shape.len();
    let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
    perm.push(axis);
    let mut last = transpose(imp, node, &x, perm.clone(), &format!("{name}.last"))?;
    if rank == 1 {
        // A matmul operand has rows.
        last = reshape(imp, node, &last, vec![1, n], &format!("{name}.row"))?;
    }
    let f = cast_val(imp, node, &last, DType::F32, &format!("{name}.f32"))?;
    let ones: Vec<f64> = (0..n * n)
        .map(|e| f64::from(u8::from(summed(e / n, e % n))))
        .collect();
    let tri = Known::from_f64(Elem::Float(DType::F32), vec![n, n], &ones)
        .map_err(|e| node.graph_error(e))?;
    let tri = imp.data(node, 1, &Val::known(tri), &format!("{name}.ones"))?;
    let fx = imp.data(node, 0, &f, &format!("{name}.f32"))?;
    let mm = OpKind::MatMul {
        partials: DType::F32,
        out: DType::F32,
    };
    let sums = Val::Graph(imp.op(node, &format!("{name}.sums"), mm, &[fx, tri])?);
    let mut back = cast_val(imp, node, &sums, dtype, &format!("{name}.cast"))?;
    if rank == 1 {
        back = reshape(imp, node, &back, vec![n], &format!("{name}.flat"))?;
    }
    let mut inverse = vec![0; rank];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    one(transpose(imp, node, &back, inverse, &name)?)
}
