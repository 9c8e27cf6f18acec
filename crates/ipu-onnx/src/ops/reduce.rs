//! Reductions: `ReduceSum`, `ReduceMax`, `ReduceMin` and `ReduceMean` as the graph's sums and
//! maxima along each axis, and the reductions, pools and selections the device lacks.

use std::collections::BTreeSet;

use ipu_graph::{DType, OpKind};

use super::common::{Outs, computed_in, input, negate, one, out_name, req, reshape, scale};
use super::handler::Handler;
use crate::OnnxError;
use crate::importer::{Importer, Node, Val, normalize_axis};
use crate::known::Elem;

pub const HANDLERS: &[Handler] = &[
    Handler::map("ReduceSum", reduce),
    Handler::map("ReduceMax", reduce),
    Handler::map("ReduceMin", reduce),
    Handler::map("ReduceMean", reduce),
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
