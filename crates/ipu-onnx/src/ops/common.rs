//! What the operators share: reading a node's inputs, naming its outputs, and the graph
//! operations several operators are made of: elementwise operations, `scale`, `max`, `min`,
//! reshapes, transposes, slices and conversions. `scale`, `max`, `min`, reshapes, transposes
//! and conversions evaluate known operands at import; the elementwise operations make them
//! graph constants.
//!
//! The graph broadcasts elementwise operands of equal rank only, so NumPy's multidirectional
//! broadcasting is completed here: the lower-rank operand gets leading dimensions of size 1 (a
//! reshape).

use std::rc::Rc;

use ipu_graph::{DType, OpKind, ValueId};

use crate::OnnxError;
use crate::importer::{Importer, Node, Val};
use crate::known::{self, Binary, Elem, Known};

/// A node's outputs (`None` for an output not produced), or why it is refused.
pub type Outs = Result<Vec<Option<Val>>, OnnxError>;

/// Input `i`, if given.
pub fn input(ins: &[Option<Val>], i: usize) -> Option<&Val> {
    ins.get(i).and_then(Option::as_ref)
}

/// Input `i`, or an error saying it is required.
pub fn req<'a>(node: &Node<'_>, ins: &'a [Option<Val>], i: usize) -> Result<&'a Val, OnnxError> {
    input(ins, i).ok_or_else(|| node.bad_input(i, "is required"))
}

/// The graph name for output `i` of `node`.
pub fn out_name(imp: &mut Importer<'_>, node: &Node<'_>, i: usize) -> String {
    match node.proto.output.get(i).filter(|s| !s.is_empty()) {
        Some(o) => imp.reserve(o),
        None => imp.reserve(&node.name),
    }
}

/// The outputs of a node whose single output is `v`.
pub fn one(v: Val) -> Outs {
    Ok(vec![Some(v)])
}

/// The one output of a node evaluated at import by its mapping.
pub fn fold(node: &Node<'_>, r: known::FoldResult<Known>) -> Outs {
    r.map(|k| vec![Some(Val::known(k))])
        .map_err(|e| node.graph_error(e))
}

/// The float dtype of a graph-bound tensor.
pub fn float_dtype(
    node: &Node<'_>,
    imp: &Importer<'_>,
    v: &Val,
    i: usize,
) -> Result<DType, OnnxError> {
    match imp.ty(v).0 {
        Elem::Float(d) if d.is_float() || d.is_fp8() => Ok(d),
        e => Err(node.bad_input(
            i,
            format!(
                "a {} tensor used as data: the graph's tensors are f32, f16 or FP8",
                e.name()
            ),
        )),
    }
}

/// `v` reshaped to `shape` (a known tensor is reshaped at import and keeps its name; a
/// same-shape reshape is skipped).
pub fn reshape(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    v: &Val,
    shape: Vec<usize>,
    name: &str,
) -> Result<Val, OnnxError> {
    if imp.shape(v) == shape {
        return Ok(v.clone());
    }
    match v {
        Val::Known(k, origin) => Ok(Val::Known(Rc::new(k.reshaped(shape)), origin.clone())),
        Val::Graph(id) => {
            if shape.contains(&0) {
                return Err(
                    node.graph_error(format!("an empty tensor {shape:?} cannot be graph data"))
                );
            }
            Ok(Val::Graph(imp.op(
                node,
                name,
                OpKind::Reshape { shape },
                &[*id],
            )?))
        }
    }
}

/// `v` with leading dimensions of size 1 up to rank `r`.
pub fn to_rank(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    v: &Val,
    r: usize,
    name: &str,
) -> Result<Val, OnnxError> {
    let shape = imp.shape(v);
    if shape.len() >= r {
        return Ok(v.clone());
    }
    let mut s = vec![1; r - shape.len()];
    s.extend(shape);
    reshape(imp, node, v, s, name)
}

/// `v` broadcast (NumPy rules) to `target`, a shape it broadcasts to: a known tensor at
/// import, a graph value by copies joined by concat along each axis it grows (named `name`).
pub fn broadcast_to(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    v: &Val,
    target: &[usize],
    name: &str,
) -> Result<Val, OnnxError> {
    if let Val::Known(k, _) = v {
        let r = k.broadcast_to(target).map_err(|e| node.graph_error(e))?;
        return Ok(Val::known(r));
    }
    let mut v = to_rank(imp, node, v, target.len(), &format!("{name}.rank"))?;
    let grow: Vec<usize> = (0..target.len())
        .filter(|&a| imp.shape(&v)[a] != target[a])
        .collect();
    for (i, &axis) in grow.iter().enumerate() {
        let id = imp.data(node, 0, &v, &format!("{name}.input"))?;
        let copies = vec![id; target[axis]];
        let step = if i + 1 == grow.len() {
            name.to_string()
        } else {
            format!("{name}.axis{axis}")
        };
        v = Val::Graph(imp.op(node, &step, OpKind::Concat { axis }, &copies)?);
    }
    Ok(v)
}

/// The NumPy broadcast of `shapes`, or an error naming the input that does not broadcast.
pub fn broadcast_shapes(node: &Node<'_>, shapes: &[Vec<usize>]) -> Result<Vec<usize>, OnnxError> {
    let rank = shapes.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = vec![1; rank];
    for (i, s) in shapes.iter().enumerate() {
        for (j, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + j];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(
                    node.bad_input(i, format!("shape {s:?} does not broadcast with {shapes:?}"))
                );
            }
        }
    }
    Ok(out)
}

/// A graph operation of one operand.
pub fn unary_op(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    kind: OpKind,
    x: &Val,
    i: usize,
    name: &str,
) -> Result<Val, OnnxError> {
    let hint = format!("{name}.input");
    let x = imp.data(node, i, x, &hint)?;
    Ok(Val::Graph(imp.op(node, name, kind, &[x])?))
}

/// A broadcasting elementwise graph operation of two operands.
pub fn binary_op(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    kind: OpKind,
    a: &Val,
    b: &Val,
    name: &str,
) -> Result<Val, OnnxError> {
    let r = imp.shape(a).len().max(imp.shape(b).len());
    let a = to_rank(imp, node, a, r, &format!("{name}.lhs"))?;
    let b = to_rank(imp, node, b, r, &format!("{name}.rhs"))?;
    let a = imp.data(node, 0, &a, &format!("{name}.lhs"))?;
    let b = imp.data(node, 1, &b, &format!("{name}.rhs"))?;
    Ok(Val::Graph(imp.op(node, name, kind, &[a, b])?))
}

/// `x * factor` (`scale`; evaluated at import for a known `x`).
pub fn scale(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    x: &Val,
    factor: f32,
    name: &str,
) -> Result<Val, OnnxError> {
    if let Val::Known(k, origin) = x {
        let k = known::binary(Binary::Mul, k, &scalar_like(k.elem, f64::from(factor))?)
            .map_err(|e| node.graph_error(e))?;
        return Ok(Val::Known(
            Rc::new(k),
            origin.as_ref().map(|o| format!("{o}.scaled")),
        ));
    }
    unary_op(imp, node, OpKind::Scale { factor }, x, 0, name)
}

/// A one-element tensor of `elem` holding `v`.
pub fn scalar_like(elem: Elem, v: f64) -> Result<Known, OnnxError> {
    Known::from_f64(elem, vec![], &[v]).map_err(|e| OnnxError::Malformed { reason: e })
}

/// A tensor of ones (or `v`) with `x`'s rank, every dimension 1, in `x`'s type.
pub fn fill_like(imp: &Importer<'_>, x: &Val, v: f64) -> Result<Val, OnnxError> {
    let (elem, shape) = imp.ty(x);
    let k = Known::from_f64(elem, vec![1; shape.len()], &[v])
        .map_err(|e| OnnxError::Malformed { reason: e })?;
    Ok(Val::known(k))
}

/// `1 / x` (a `div` of ones of `x`'s rank and type by `x`).
pub fn one_over(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    x: &Val,
    name: &str,
) -> Result<Val, OnnxError> {
    let ones = fill_like(imp, x, 1.0)?;
    binary_op(imp, node, OpKind::Div, &ones, x, name)
}

/// `-x` (`scale` by -1).
pub fn negate(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    x: &Val,
    name: &str,
) -> Result<Val, OnnxError> {
    scale(imp, node, x, -1.0, name)
}

/// `op` of `a` and `b` evaluated at import, when both are known.
fn fold_pair(node: &Node<'_>, op: Binary, a: &Val, b: &Val) -> Option<Result<Val, OnnxError>> {
    let (Val::Known(x, _), Val::Known(y, _)) = (a, b) else {
        return None;
    };
    Some(
        known::binary(op, x, y)
            .map(Val::known)
            .map_err(|e| node.graph_error(e)),
    )
}

/// `max(a, b)`.
pub fn max2(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    a: &Val,
    b: &Val,
    name: &str,
) -> Result<Val, OnnxError> {
    if let Some(folded) = fold_pair(node, Binary::Max, a, b) {
        return folded;
    }
    binary_op(imp, node, OpKind::Max, a, b, name)
}

/// `min(a, b) = -max(-a, -b)`: negation is exact, so this is the minimum exactly.
pub fn min2(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    a: &Val,
    b: &Val,
    name: &str,
) -> Result<Val, OnnxError> {
    if let Some(folded) = fold_pair(node, Binary::Min, a, b) {
        return folded;
    }
    let na = negate(imp, node, a, &format!("{name}.neg_lhs"))?;
    let nb = negate(imp, node, b, &format!("{name}.neg_rhs"))?;
    let m = max2(imp, node, &na, &nb, &format!("{name}.max"))?;
    negate(imp, node, &m, name)
}

/// `x[.., start..end, ..]` along `axis` of a graph value (step 1; skipped when whole).
pub fn slice_graph(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    x: ValueId,
    axis: usize,
    start: usize,
    end: usize,
    name: &str,
) -> Result<ValueId, OnnxError> {
    if start == 0 && end == imp.b.ty(x).shape[axis] {
        return Ok(x);
    }
    imp.op(node, name, OpKind::Slice { axis, start, end }, &[x])
}

/// `v` converted to `to` (a known tensor at import).
pub fn cast_val(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    v: &Val,
    to: DType,
    name: &str,
) -> Result<Val, OnnxError> {
    let elem = Elem::of_dtype(to);
    if imp.ty(v).0 == elem {
        return Ok(v.clone());
    }
    if let Val::Known(k, _) = v {
        return known::cast(k, elem)
            .map(Val::known)
            .map_err(|e| node.graph_error(e));
    }
    unary_op(imp, node, OpKind::cast(to), v, 0, name)
}

/// An operator whose `from` operands the device computes in `via`: those inputs are
/// converted, `f` maps the node, and its `via` results are converted back to `from`.
pub fn computed_in(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    ins: &[Option<Val>],
    from: DType,
    via: DType,
    f: impl FnOnce(&mut Importer<'_>, &[Option<Val>]) -> Outs,
) -> Outs {
    let base = out_name(imp, node, 0);
    let mut converted = Vec::with_capacity(ins.len());
    for (i, v) in ins.iter().enumerate() {
        converted.push(match v {
            Some(v) if imp.ty(v).0 == Elem::of_dtype(from) => {
                Some(cast_val(imp, node, v, via, &format!("{base}.in{i}.{via}"))?)
            }
            other => other.clone(),
        });
    }
    let outs = f(imp, &converted)?;
    let mut back = Vec::with_capacity(outs.len());
    for (i, o) in outs.into_iter().enumerate() {
        back.push(match o {
            Some(v) if imp.ty(&v).0 == Elem::of_dtype(via) => Some(cast_val(
                imp,
                node,
                &v,
                from,
                &format!("{base}.out{i}.{from}"),
            )?),
            other => other,
        });
    }
    Ok(back)
}

/// `v` as f32 (a known tensor is converted at import).
pub fn to_f32(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    v: &Val,
    name: &str,
) -> Result<Val, OnnxError> {
    cast_val(imp, node, v, DType::F32, name)
}

/// `x` transposed by `perm` (folded for a known tensor; skipped for the identity).
pub fn transpose(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    x: &Val,
    perm: Vec<usize>,
    name: &str,
) -> Result<Val, OnnxError> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x.clone());
    }
    match x {
        Val::Known(k, origin) => Ok(Val::Known(
            Rc::new(k.transposed(&perm)),
            origin.as_ref().map(|o| format!("{o}.t")),
        )),
        Val::Graph(id) => Ok(Val::Graph(imp.op(
            node,
            name,
            OpKind::Transpose { perm },
            &[*id],
        )?)),
    }
}
