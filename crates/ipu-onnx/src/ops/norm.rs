//! Normalisations: `Softmax`, `LayerNormalization` and `RMSNormalization`.

use ipu_graph::{DType, OpKind, UnaryFn};

use super::common::{
    Outs, binary_op, cast_val, fill_like, float_dtype, input, one, one_over, out_name, req, scale,
    unary_op,
};
use super::handler::Handler;
use crate::OnnxError;
use crate::importer::{Importer, Node, Val, normalize_axis};

pub const HANDLERS: &[Handler] = &[
    Handler::map("Softmax", softmax),
    Handler::map("LayerNormalization", layer_norm).since(17),
    Handler::map("RMSNormalization", rms_norm).since(23),
];

/// The mean of `v` over its axes from `axis` on, kept with size 1, as ReduceMean does it: a
/// sum per axis, then `1/n`. Steps are named from `label`, the result `out`.
fn mean_over(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    v: &Val,
    axis: usize,
    label: &str,
    out: &str,
) -> Result<Val, OnnxError> {
    let shape = imp.shape(v);
    let count: usize = shape[axis..].iter().product();
    let mut id = imp.data(node, 0, v, &format!("{label}_input"))?;
    for a in axis..shape.len() {
        id = imp.op(
            node,
            &format!("{label}_sum{a}"),
            OpKind::ReduceSum { axis: a },
            &[id],
        )?;
    }
    scale(imp, node, &Val::Graph(id), (1.0 / count as f64) as f32, out)
}

/// `1 / sqrt(v + epsilon)`, its steps named `names`: the sum, the root, the result.
fn inverse_root(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    v: &Val,
    epsilon: f32,
    names: [&str; 3],
) -> Result<Val, OnnxError> {
    let eps = fill_like(imp, v, f64::from(epsilon))?;
    let sum = binary_op(imp, node, OpKind::Add, v, &eps, names[0])?;
    let root = unary_op(imp, node, OpKind::Unary(UnaryFn::Sqrt), &sum, 0, names[1])?;
    one_over(imp, node, &root, names[2])
}

/// `RMSNormalization` (opset 23), by the function body of the operator specification with
/// the statistics in f32 (`stash_type` 1): `x` in f32, `ms = ReduceMean(x * x)` over the
/// axes from `axis` on, `Y = (x * (1 / sqrt(ms + epsilon)))` in `X`'s type, times `scale`.
fn rms_norm(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["axis", "epsilon", "stash_type"])?;
    let x = req(node, ins, 0)?;
    let rank = imp.shape(x).len();
    let axis = normalize_axis(node, "axis", node.int("axis", -1)?, rank)?;
    if node.int("stash_type", 1)? != 1 {
        return Err(node.bad_attr("stash_type", "only 1 (statistics in float) is supported"));
    }
    let epsilon = node.float("epsilon", 1e-5)?;
    let dtype = float_dtype(node, imp, x, 0)?;
    let s = req(node, ins, 1)?;
    let name = out_name(imp, node, 0);
    let n = |step: &str| format!("{name}.{step}");
    let xf = cast_val(imp, node, x, DType::F32, &n("stashed"))?;
    let squares = binary_op(imp, node, OpKind::Mul, &xf, &xf, &n("squared"))?;
    let ms = mean_over(
        imp,
        node,
        &squares,
        axis,
        &n("mean_square"),
        &n("mean_square"),
    )?;
    let inv = inverse_root(
        imp,
        node,
        &ms,
        epsilon,
        [&n("mean_square_epsilon"), &n("rms"), &n("inverse_rms")],
    )?;
    let norm = binary_op(imp, node, OpKind::Mul, &xf, &inv, &n("normalized_f32"))?;
    let norm = cast_val(imp, node, &norm, dtype, &n("normalized"))?;
    Ok(vec![Some(binary_op(
        imp,
        node,
        OpKind::Mul,
        &norm,
        s,
        &name,
    )?)])
}

/// `Softmax` (opset 13): along one axis.
fn softmax(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["axis"])?;
    let x = req(node, ins, 0)?;
    let axis = normalize_axis(node, "axis", node.int("axis", -1)?, imp.shape(x).len())?;
    let name = out_name(imp, node, 0);
    one(unary_op(imp, node, OpKind::Softmax { axis }, x, 0, &name)?)
}

/// `LayerNormalization` (opset 17). Over the last axis with only `Y` read it is the graph's
/// `layer_norm`, then the scale and the bias. Over more axes (`axis` before the last), or with
/// the `Mean` or `InvStdDev` output read, it is the function body of the operator
/// specification, step by step: `mean = ReduceMean(X)` over the axes from `axis` on (kept with
/// size 1; a sum per axis, then `1/n`), `d = X - mean`, `var = ReduceMean(d * d)`,
/// `inv = 1 / sqrt(var + epsilon)`, `Y = d * inv * scale + bias`; `Mean` is `mean` and
/// `InvStdDev` is `inv`, both of `X`'s rank with the normalised axes of size 1.
fn layer_norm(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["axis", "epsilon", "stash_type"])?;
    let x = req(node, ins, 0)?;
    let shape = imp.shape(x);
    let rank = shape.len();
    let axis = normalize_axis(node, "axis", node.int("axis", -1)?, rank)?;
    if node.int("stash_type", 1)? != 1 {
        return Err(node.bad_attr("stash_type", "only 1 (statistics in float) is supported"));
    }
    let is_read = |i: usize| node.output_read(i);
    let statistics_read = is_read(1) || is_read(2);
    let epsilon = node.float("epsilon", 1e-5)?;
    let name = out_name(imp, node, 0);
    let n = |step: &str| format!("{name}.{step}");
    let has_bias = input(ins, 2).is_some();
    let s = req(node, ins, 1)?;
    let affine = |imp: &mut Importer<'_>, norm: &Val| -> Result<Val, OnnxError> {
        let scaled_name = if has_bias { n("scaled") } else { name.clone() };
        let scaled = binary_op(imp, node, OpKind::Mul, norm, s, &scaled_name)?;
        match input(ins, 2) {
            Some(bias) => binary_op(imp, node, OpKind::Add, &scaled, bias, &name),
            None => Ok(scaled),
        }
    };
    if axis + 1 == rank && !statistics_read {
        let norm = unary_op(
            imp,
            node,
            OpKind::LayerNorm { epsilon },
            x,
            0,
            &n("normalized"),
        )?;
        return Ok(vec![Some(affine(imp, &norm)?), None, None]);
    }
    float_dtype(node, imp, x, 0)?;
    let mean_of = |imp: &mut Importer<'_>, v: &Val, label: &str, out: String| {
        mean_over(imp, node, v, axis, &format!("{name}.{label}"), &out)
    };
    let mean_name = if is_read(1) {
        out_name(imp, node, 1)
    } else {
        n("mean")
    };
    let mean = mean_of(imp, x, "mean", mean_name)?;
    let d = binary_op(imp, node, OpKind::Sub, x, &mean, &n("centered"))?;
    let dd = binary_op(imp, node, OpKind::Mul, &d, &d, &n("squared"))?;
    let var = mean_of(imp, &dd, "variance", n("variance"))?;
    let inv_name = if is_read(2) {
        out_name(imp, node, 2)
    } else {
        n("inverse_deviation")
    };
    let inv = inverse_root(
        imp,
        node,
        &var,
        epsilon,
        [&n("variance_epsilon"), &n("deviation"), &inv_name],
    )?;
    let norm = binary_op(imp, node, OpKind::Mul, &d, &inv, &n("normalized"))?;
    let y = affine(imp, &norm)?;
    imp.notes.push(format!(
        "node `{}`: LayerNormalization over axes {axis}..{rank} by its function body",
        node.name
    ));
    Ok(vec![
        Some(y),
        is_read(1).then_some(mean),
        is_read(2).then_some(inv),
    ])
}
