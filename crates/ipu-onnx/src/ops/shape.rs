//! Shape operators: `Shape`, `Size`, `ConstantOfShape` and `Range` (known at import), the
//! reshapes (`Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`), `Transpose`, `Concat`, `Slice`,
//! `Split` and `Expand` (the gathers are in `gather`). Their shapes, axes and indices must be known at import.

use std::collections::BTreeSet;
use std::rc::Rc;

use ipu_graph::{DType, OpKind, ValueId};

use super::common::{
    Outs, broadcast_to, fold, input, one, out_name, req, reshape, slice_graph, transpose,
};
use super::handler::{ALL, Handler, evaluated, given, required, required_ints};
use crate::OnnxError;
use crate::importer::{Importer, Node, Val, normalize_axis};
use crate::known::{self, Elem, IntKind, Known, checked_elements};

pub const HANDLERS: &[Handler] = &[
    // Known from the input's shape (or, for ConstantOfShape, its known input) whatever the
    // input is.
    Handler::map("Shape", shape),
    Handler::map("Size", size),
    Handler::map("ConstantOfShape", constant_of_shape),
    Handler::refuse(
        "Range",
        "the length of its output depends on the values of start, limit and delta, which must be known at import",
    ).fold(ALL, range_fold),
    // A known input is reshaped, transposed, sliced or taken from at import by the mapping.
    Handler::map("Reshape", reshape_op),
    Handler::map("Flatten", flatten),
    Handler::map("Squeeze", squeeze),
    Handler::map("Unsqueeze", unsqueeze),
    Handler::map("Transpose", transpose_op),
    Handler::map("Slice", slice),
    Handler::map("Split", split),
    Handler::map("Concat", concat).fold(ALL, concat_fold),
    Handler::map("Expand", expand).fold(2, expand_fold),
];

/// `Range(start, limit, delta)` of the given inputs.
fn range_fold(node: &Node<'_>, ins: &[Option<Rc<Known>>]) -> Result<Known, OnnxError> {
    node.only_attrs(&[])?;
    evaluated(node, range(&given(ins)))
}

/// `Concat` of known tensors.
fn concat_fold(node: &Node<'_>, ins: &[Option<Rc<Known>>]) -> Result<Known, OnnxError> {
    node.only_attrs(&["axis"])?;
    let first = required(node, ins, 0)?;
    let axis = node
        .attr("axis")
        .ok_or_else(|| node.bad_attr("axis", "is required"))?;
    let axis = normalize_axis(node, "axis", axis.i(), first.shape.len())?;
    let parts = given(ins);
    let refs: Vec<&Known> = parts.iter().map(|k| k.as_ref()).collect();
    evaluated(node, Known::concat(&refs, axis))
}

/// `Expand` of a known tensor.
fn expand_fold(node: &Node<'_>, ins: &[Option<Rc<Known>>]) -> Result<Known, OnnxError> {
    node.only_attrs(&[])?;
    let x = required(node, ins, 0)?;
    let spec = required_ints(node, ins, 1)?;
    let target = expand_target(node, &x.shape, spec)?;
    evaluated(node, x.broadcast_to(&target))
}

/// The shape `Expand` broadcasts `shape` to: NumPy's broadcast of it and `spec`.
fn expand_target(
    node: &Node<'_>,
    shape: &[usize],
    spec: Vec<i64>,
) -> Result<Vec<usize>, OnnxError> {
    let mut dims = Vec::with_capacity(spec.len());
    for d in spec {
        dims.push(
            usize::try_from(d).map_err(|_| node.bad_input(1, format!("negative dimension {d}")))?,
        );
    }
    known::broadcast_shapes(shape, &dims)
        .ok_or_else(|| node.bad_input(1, format!("{shape:?} does not broadcast to {dims:?}")))
}

/// `Shape` (opset 15 adds `start` and `end`): known from the input's shape.
fn shape(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["start", "end"])?;
    let shape = imp.shape(req(node, ins, 0)?);
    let r = shape.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(node.int("start", 0)?);
    let end = clamp(node.int("end", r)?);
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let dims = if start < end {
        &dims[start..end]
    } else {
        &[][..]
    };
    one(Val::known(Known::int64s(dims)))
}

/// `Size`: known from the input's shape.
fn size(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let n = imp.shape(req(node, ins, 0)?).iter().product::<usize>() as i64;
    one(Val::known(Known::from_ints(
        Elem::Int(IntKind::I64),
        vec![],
        &[n],
    )))
}

/// `ConstantOfShape` of a known shape: known.
fn constant_of_shape(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["value"])?;
    let dims = imp.int_input(node, ins, 0)?;
    let mut shape = Vec::with_capacity(dims.len());
    for d in dims {
        shape.push(
            usize::try_from(d).map_err(|_| node.bad_input(0, format!("negative dimension {d}")))?,
        );
    }
    checked_elements(&shape).map_err(|e| node.graph_error(e))?;
    let value = match node.attr("value") {
        Some(a) => {
            let t =
                a.t.as_ref()
                    .ok_or_else(|| node.bad_attr("value", "must be a tensor"))?;
            let k = crate::tensor::decode(t, "value", imp.options)?;
            if k.elements() != 1 {
                return Err(node.bad_attr("value", "must hold one element"));
            }
            k.reshaped(vec![])
        }
        None => Known::from_f64(Elem::Float(DType::F32), vec![], &[0.0])
            .map_err(|e| node.graph_error(e))?,
    };
    fold(node, value.broadcast_to(&shape))
}

/// `Reshape` (opset 14 adds `allowzero`) to a known shape.
fn reshape_op(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["allowzero"])?;
    let x = req(node, ins, 0)?;
    let spec = imp.int_input(node, ins, 1)?;
    let target = reshape_target(node, &imp.shape(x), &spec, node.int("allowzero", 0)? != 0)?;
    let name = out_name(imp, node, 0);
    one(reshape(imp, node, x, target, &name)?)
}

/// `Flatten` to two dimensions.
fn flatten(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["axis"])?;
    let x = req(node, ins, 0)?;
    let shape = imp.shape(x);
    let r = shape.len() as i64;
    let axis = node.int("axis", 1)?;
    if !(-r..=r).contains(&axis) {
        return Err(node.bad_attr("axis", format!("axis {axis} is outside -{r}..={r}")));
    }
    let axis = if axis < 0 { axis + r } else { axis } as usize;
    let target = vec![
        shape[..axis].iter().product(),
        shape[axis..].iter().product(),
    ];
    let name = out_name(imp, node, 0);
    one(reshape(imp, node, x, target, &name)?)
}

/// `Squeeze`: the axes as input 1 from opset 13.
fn squeeze(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let x = req(node, ins, 0)?;
    let shape = imp.shape(x);
    let axes: Vec<usize> = match input(ins, 1) {
        Some(_) => {
            let mut a = Vec::new();
            for v in imp.int_input(node, ins, 1)? {
                let axis = normalize_axis(node, "axes", v, shape.len())?;
                if shape[axis] != 1 {
                    return Err(
                        node.bad_input(1, format!("axis {v} has size {}, not 1", shape[axis]))
                    );
                }
                a.push(axis);
            }
            a
        }
        None => (0..shape.len()).filter(|&a| shape[a] == 1).collect(),
    };
    let target = shape
        .iter()
        .enumerate()
        .filter(|(a, _)| !axes.contains(a))
        .map(|(_, &d)| d)
        .collect();
    let name = out_name(imp, node, 0);
    one(reshape(imp, node, x, target, &name)?)
}

/// `Unsqueeze`: the axes as input 1 from opset 13.
fn unsqueeze(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let x = req(node, ins, 0)?;
    let shape = imp.shape(x);
    let axes = imp.int_input(node, ins, 1)?;
    let r = shape.len() + axes.len();
    let mut at = BTreeSet::new();
    for v in axes {
        if !at.insert(normalize_axis(node, "axes", v, r)?) {
            return Err(node.bad_input(1, format!("axis {v} is repeated")));
        }
    }
    // Every axis is in 0..r (normalize_axis) and none repeats (refused above), so `at` holds
    // axes.len() positions of 0..r and the other r - axes.len() = shape.len() take the
    // dimensions of x in order: `dims` ends exactly with the last position, whatever the model.
    debug_assert_eq!(at.len() + shape.len(), r);
    let mut dims = shape.iter();
    let target = (0..r)
        .map(|a| {
            if at.contains(&a) {
                1
            } else {
                *dims.next().expect("rank adds up")
            }
        })
        .collect();
    let name = out_name(imp, node, 0);
    one(reshape(imp, node, x, target, &name)?)
}

/// `Transpose` by `perm`, reversed by default.
fn transpose_op(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["perm"])?;
    let x = req(node, ins, 0)?;
    let r = imp.shape(x).len();
    let perm: Vec<usize> = match node.ints("perm")? {
        Some(p) => {
            let mut seen = vec![false; r];
            let mut out = Vec::with_capacity(r);
            for v in &p {
                match usize::try_from(*v).ok().filter(|&a| a < r && !seen[a]) {
                    Some(a) => {
                        seen[a] = true;
                        out.push(a);
                    }
                    None => {
                        return Err(
                            node.bad_attr("perm", format!("{p:?} is not a permutation of 0..{r}"))
                        );
                    }
                }
            }
            if out.len() != r {
                return Err(node.bad_attr("perm", format!("{p:?} is not a permutation of 0..{r}")));
            }
            out
        }
        None => (0..r).rev().collect(),
    };
    let name = out_name(imp, node, 0);
    one(transpose(imp, node, x, perm, &name)?)
}

/// `Concat` of graph values (inputs empty along the axis left out).
fn concat(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["axis"])?;
    let first = req(node, ins, 0)?;
    let axis = node
        .attr("axis")
        .ok_or_else(|| node.bad_attr("axis", "is required"))?;
    let axis = normalize_axis(node, "axis", axis.i(), imp.shape(first).len())?;
    let name = out_name(imp, node, 0);
    let mut ids = Vec::new();
    for (i, v) in ins.iter().enumerate() {
        let Some(v) = v else { continue };
        if imp.shape(v).get(axis) == Some(&0) {
            continue;
        }
        ids.push(imp.data(node, i, v, &format!("{name}.part{i}"))?);
    }
    if ids.len() == 1 {
        return one(Val::Graph(ids[0]));
    }
    one(Val::Graph(imp.op(
        node,
        &name,
        OpKind::Concat { axis },
        &ids,
    )?))
}

/// `Slice` (opset 13): starts, ends, axes and steps as known inputs.
fn slice(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let x = req(node, ins, 0)?;
    let shape = imp.shape(x);
    let starts = imp.int_input(node, ins, 1)?;
    let ends = imp.int_input(node, ins, 2)?;
    let axes = match input(ins, 3) {
        Some(_) => imp.int_input(node, ins, 3)?,
        None => (0..starts.len() as i64).collect(),
    };
    let steps = match input(ins, 4) {
        Some(_) => imp.int_input(node, ins, 4)?,
        None => vec![1; starts.len()],
    };
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(node.bad_input(1, "starts, ends, axes and steps differ in length"));
    }
    let name = out_name(imp, node, 0);
    let mut seen = BTreeSet::new();
    let mut v = x.clone();
    for (i, &a) in axes.iter().enumerate() {
        let axis = normalize_axis(node, "axes", a, shape.len())?;
        if !seen.insert(axis) {
            return Err(node.bad_input(3, format!("axis {a} is repeated")));
        }
        let step = steps[i];
        if step == 0 {
            return Err(node.bad_input(4, "a step is 0"));
        }
        let (start, end) = clamp_slice(shape[axis], starts[i], ends[i], step);
        v = match &v {
            Val::Known(k, _) => Val::known(k.sliced(axis, start, end, step)),
            Val::Graph(id) => {
                let step_name = if seen.len() == axes.len() {
                    name.clone()
                } else {
                    format!("{name}.axis{axis}")
                };
                if step != 1 {
                    v = Val::Graph(strided_slice(
                        imp, node, *id, axis, start, end, step, &step_name,
                    )?);
                    continue;
                }
                if start >= end {
                    return Err(node.bad_input(
                        1,
                        format!("the slice {start}..{end} of axis {axis} is empty"),
                    ));
                }
                Val::Graph(slice_graph(
                    imp,
                    node,
                    *id,
                    axis,
                    start as usize,
                    end as usize,
                    &step_name,
                )?)
            }
        };
    }
    one(v)
}

/// `Split`: sizes from input 1 (opset 13) or `num_outputs` (opset 18; the last part is
/// smaller when the axis does not divide).
fn split(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["axis", "num_outputs"])?;
    let x = req(node, ins, 0)?;
    let shape = imp.shape(x);
    let axis = normalize_axis(node, "axis", node.int("axis", 0)?, shape.len())?;
    let n = node.proto.output.len();
    let dim = shape[axis];
    let sizes: Vec<usize> = match input(ins, 1) {
        Some(_) => {
            let s = imp.int_input(node, ins, 1)?;
            let total = s.iter().try_fold(0i64, |a, &v| a.checked_add(v));
            if s.len() != n || s.iter().any(|&v| v < 0) || total != i64::try_from(dim).ok() {
                return Err(node.bad_input(
                    1,
                    format!("split {s:?} does not divide {dim} into {n} parts"),
                ));
            }
            s.iter().map(|&v| v as usize).collect()
        }
        None => {
            let parts = match node.attr("num_outputs") {
                Some(a) => usize::try_from(a.i())
                    .ok()
                    .filter(|&p| p == n)
                    .ok_or_else(|| {
                        node.bad_attr(
                            "num_outputs",
                            format!("{} differs from the {n} outputs", a.i()),
                        )
                    })?,
                None => n,
            };
            if parts == 0 {
                return Err(node.graph_error("Split has no outputs"));
            }
            let chunk = dim.div_ceil(parts);
            (0..parts)
                .map(|i| chunk.min(dim.saturating_sub(i * chunk)))
                .collect()
        }
    };
    let mut outs = Vec::with_capacity(n);
    let mut start = 0;
    for (i, &size) in sizes.iter().enumerate() {
        let end = start + size;
        let v = match x {
            Val::Known(k, _) => Val::known(k.sliced(axis, start as i64, end as i64, 1)),
            Val::Graph(id) => {
                if size == 0 {
                    return Err(node.graph_error(format!("output {i} would be empty")));
                }
                let name = out_name(imp, node, i);
                Val::Graph(slice_graph(imp, node, *id, axis, start, end, &name)?)
            }
        };
        outs.push(Some(v));
        start = end;
    }
    Ok(outs)
}

/// `Expand` of a graph value: NumPy broadcast to a known shape, copies joined by concat
/// along each broadcast axis.
fn expand(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let x = req(node, ins, 0)?;
    let spec = imp.int_input(node, ins, 1)?;
    let target = expand_target(node, &imp.shape(x), spec)?;
    checked_elements(&target).map_err(|e| node.graph_error(e))?;
    let name = out_name(imp, node, 0);
    one(broadcast_to(imp, node, x, &target, &name)?)
}

/// The output shape of `Reshape` (ONNX rules: 0 copies the input dimension unless
/// `allowzero`, -1 is inferred).
fn reshape_target(
    node: &Node<'_>,
    input: &[usize],
    spec: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>, OnnxError> {
    let total: usize = input.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        out.push(match s {
            0 if !allowzero => *input.get(i).ok_or_else(|| {
                node.bad_input(
                    1,
                    format!(
                        "0 at position {i} copies a dimension the input {input:?} does not have"
                    ),
                )
            })?,
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            s if s >= 0 => s as usize,
            s => return Err(node.bad_input(1, format!("invalid dimension {s} in {spec:?}"))),
        });
    }
    let known: usize = out
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| node.bad_input(1, "the shape overflows"))?;
    if let Some(i) = infer {
        if known == 0 || !total.is_multiple_of(known) {
            return Err(node.bad_input(
                1,
                format!("cannot infer -1 in {spec:?} for input {input:?}"),
            ));
        }
        out[i] = total / known;
    } else if known != total {
        return Err(node.bad_input(
            1,
            format!("shape {spec:?} does not hold the {total} elements of {input:?}"),
        ));
    }
    Ok(out)
}

/// The `(start, end)` of a Slice on one axis after ONNX's clamping (an empty axis gives an
/// empty range).
fn clamp_slice(dim: usize, start: i64, end: i64, step: i64) -> (i64, i64) {
    if dim == 0 {
        return (0, 0);
    }
    let d = dim as i128;
    let (mut s, mut e) = (i128::from(start), i128::from(end));
    if s < 0 {
        s += d;
    }
    if e < 0 {
        e += d;
    }
    if step > 0 {
        (s.clamp(0, d) as i64, e.clamp(0, d) as i64)
    } else {
        (s.clamp(0, d - 1) as i64, e.clamp(-1, d - 1) as i64)
    }
}

/// The most entries [`strided_slice`] gathers one by one.
const STRIDED_SLICE_ENTRIES_MAX: usize = 64;

/// Entries `start, start + step, ..` before `end` along `axis` (NumPy slicing, bounds clamped,
/// `step` not 1, possibly negative): one single-entry slice per entry, concatenated in order.
#[allow(clippy::too_many_arguments)]
pub(super) fn strided_slice(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    x: ValueId,
    axis: usize,
    start: i64,
    end: i64,
    step: i64,
    name: &str,
) -> Result<ValueId, OnnxError> {
    let mut idx = Vec::new();
    let mut i = start;
    while (step > 0 && i < end) || (step < 0 && i > end) {
        idx.push(i as usize);
        i += step;
        if idx.len() > STRIDED_SLICE_ENTRIES_MAX {
            return Err(node.bad_input(
                4,
                format!(
                    "step {step} on axis {axis} takes more than {STRIDED_SLICE_ENTRIES_MAX} entries, each a slice of its own"
                ),
            ));
        }
    }
    if idx.is_empty() {
        return Err(node.bad_input(
            1,
            format!("the slice {start}..{end} step {step} of axis {axis} is empty"),
        ));
    }
    let mut pieces = Vec::new();
    for (j, &k) in idx.iter().enumerate() {
        let piece_name = if idx.len() == 1 {
            name.to_string()
        } else {
            format!("{name}.entry{j}")
        };
        pieces.push(slice_graph(imp, node, x, axis, k, k + 1, &piece_name)?);
    }
    if pieces.len() == 1 {
        return Ok(pieces[0]);
    }
    imp.op(node, name, OpKind::Concat { axis }, &pieces)
}

/// `Range(start, limit, delta)` of known scalars.
fn range(k: &[Rc<Known>]) -> known::FoldResult<Known> {
    let [start, limit, delta] = k else {
        return Err("Range takes start, limit and delta".into());
    };
    let elem = start.elem;
    if start.elements() != 1 || limit.elements() != 1 || delta.elements() != 1 {
        return Err("Range takes scalars".into());
    }
    if let (Some(s), Some(l), Some(d)) = (start.ints(), limit.ints(), delta.ints()) {
        let (s, l, d) = (s[0], l[0], d[0]);
        if d == 0 {
            return Err("Range with delta 0".into());
        }
        let n = ((i128::from(l) - i128::from(s)) as f64 / d as f64)
            .ceil()
            .max(0.0) as usize;
        checked_elements(&[n])?;
        let mut v = Vec::with_capacity(n);
        for i in 0..n as i128 {
            let x = i128::from(s) + i * i128::from(d);
            v.push(i64::try_from(x).map_err(|_| "Range overflows int64".to_string())?);
        }
        return Ok(Known::from_ints(elem, vec![n], &v));
    }
    let (s, l, d) = (start.f64s()[0], limit.f64s()[0], delta.f64s()[0]);
    if d == 0.0 || !d.is_finite() {
        return Err("Range with delta 0".into());
    }
    let n = ((l - s) / d).ceil().max(0.0);
    if !n.is_finite() {
        return Err("Range is unbounded".into());
    }
    checked_elements(&[n as usize])?;
    let v: Vec<f64> = (0..n as usize).map(|i| s + i as f64 * d).collect();
    Known::from_f64(elem, vec![v.len()], &v)
}
