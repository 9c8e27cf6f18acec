//! Comparisons, logic and selection: evaluated at import when every input is known, else the
//! graph's map operations ([`MapFn`]) on operands broadcast to the result's shape, known ones
//! held in the run-time operands' type (a known int64 next to run-time ids becomes i32, as
//! the ids are on the device).

use std::rc::Rc;

use ipu_graph::{MapFn, OpKind};

use super::common::{
    Outs, broadcast_shapes, broadcast_to, fill_like, one, out_name, req, scalar_like,
};
use super::handler::{ALL, Handler, evaluated, given};
use crate::OnnxError;
use crate::importer::{Importer, Node, Val};
use crate::known::{self, Binary, Elem, Known, Unary};

pub const HANDLERS: &[Handler] = &[
    Handler::map("Equal", |i, n, v| map_fn(i, n, v, MapFn::Equal))
        .fold(ALL, |n, k| binary(n, k, Binary::Equal)),
    Handler::map("Less", |i, n, v| map_fn(i, n, v, MapFn::Less))
        .fold(ALL, |n, k| binary(n, k, Binary::Less)),
    Handler::map("Greater", |i, n, v| map_fn(i, n, v, MapFn::Greater))
        .fold(ALL, |n, k| binary(n, k, Binary::Greater)),
    Handler::map("LessOrEqual", |i, n, v| map_fn(i, n, v, MapFn::LessOrEqual))
        .fold(ALL, |n, k| binary(n, k, Binary::LessOrEqual)),
    Handler::map("GreaterOrEqual", |i, n, v| {
        map_fn(i, n, v, MapFn::GreaterOrEqual)
    })
    .fold(ALL, |n, k| binary(n, k, Binary::GreaterOrEqual)),
    Handler::map("Not", |i, n, v| map_fn(i, n, v, MapFn::Not)).fold(ALL, not),
    Handler::map("And", |i, n, v| map_fn(i, n, v, MapFn::And))
        .fold(ALL, |n, k| binary(n, k, Binary::And)),
    Handler::map("Or", |i, n, v| map_fn(i, n, v, MapFn::Or))
        .fold(ALL, |n, k| binary(n, k, Binary::Or)),
    Handler::map("Xor", |i, n, v| map_fn(i, n, v, MapFn::Xor))
        .fold(ALL, |n, k| binary(n, k, Binary::Xor)),
    Handler::map("Where", |i, n, v| map_fn(i, n, v, MapFn::Where)).fold(ALL, select),
    Handler::map("IsNaN", |i, n, v| map_fn(i, n, v, MapFn::IsNaN)),
    Handler::map("IsInf", is_inf),
    Handler::map("Trilu", trilu).fold(ALL, trilu_fold).since(14),
];

/// `node` as the map operation `f` of its inputs, broadcast to one shape; known inputs take
/// the type of the run-time ones they meet.
fn map_fn(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>], f: MapFn) -> Outs {
    if f != MapFn::IsInf && f != MapFn::IsPosInf && f != MapFn::IsNegInf {
        node.only_attrs(&[])?;
    }
    let vals: Vec<Val> = (0..f.arity())
        .map(|i| req(node, ins, i).cloned())
        .collect::<Result<_, _>>()?;
    map_vals(imp, node, &vals, f)
}

/// The map operation `f` of `vals`, broadcast to one shape; known ones take the type of the
/// run-time ones they meet.
fn map_vals(imp: &mut Importer<'_>, node: &Node<'_>, vals: &[Val], f: MapFn) -> Outs {
    let name = out_name(imp, node, 0);
    one(map_named(imp, node, vals, f, &name)?)
}

/// [`map_vals`] as the value `name`.
pub(super) fn map_named(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    vals: &[Val],
    f: MapFn,
    name: &str,
) -> Result<Val, OnnxError> {
    let shapes: Vec<Vec<usize>> = vals.iter().map(|v| imp.shape(v)).collect();
    let target = broadcast_shapes(node, &shapes)?;
    // The operands that share a type: all of a predicate's, `where`'s last two.
    let shared = if f == MapFn::Where { 1 } else { 0 };
    let run_time = vals[shared..].iter().find_map(|v| match v {
        Val::Graph(id) => Some(imp.ty(&Val::Graph(*id)).0),
        Val::Known(..) => None,
    });
    let mut ids = Vec::with_capacity(vals.len());
    for (k, v) in vals.iter().enumerate() {
        let want = if f == MapFn::Where && k == 0 {
            Some(Elem::Bool)
        } else if k >= shared {
            run_time
        } else {
            None
        };
        let v = match (v, want) {
            (Val::Known(kn, _), Some(e)) if kn.elem != e => {
                Val::known(known::cast(kn, e).map_err(|r| node.bad_input(k, r))?)
            }
            _ => v.clone(),
        };
        let v = broadcast_to(imp, node, &v, &target, &format!("{name}.in{k}"))?;
        ids.push(imp.data(node, k, &v, &format!("{name}.in{k}"))?);
    }
    Ok(Val::Graph(imp.op(node, name, OpKind::Map(f), &ids)?))
}

/// `IsInf`: either sign, or the one `detect_positive` / `detect_negative` keep.
fn is_inf(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["detect_positive", "detect_negative"])?;
    let f = match (
        node.int("detect_positive", 1)? != 0,
        node.int("detect_negative", 1)? != 0,
    ) {
        (true, true) => MapFn::IsInf,
        (true, false) => MapFn::IsPosInf,
        (false, true) => MapFn::IsNegInf,
        (false, false) => {
            let x = req(node, ins, 0)?;
            let zeros = fill_like(imp, x, 0.0)?;
            let Val::Known(k, _) = zeros else {
                return Err(node.graph_error("no infinity detected"));
            };
            return one(Val::known(
                known::cast(&k, Elem::Bool).map_err(|r| node.graph_error(r))?,
            ));
        }
    };
    map_fn(imp, node, ins, f)
}

/// A comparison or a logical operation of the first two given inputs.
fn binary(node: &Node<'_>, ins: &[Option<Rc<Known>>], op: Binary) -> Result<Known, OnnxError> {
    node.only_attrs(&[])?;
    let k = given(ins);
    let b = k.get(1).ok_or_else(|| node.bad_input(1, "is required"))?;
    evaluated(node, known::binary(op, &k[0], b))
}

fn not(node: &Node<'_>, ins: &[Option<Rc<Known>>]) -> Result<Known, OnnxError> {
    node.only_attrs(&[])?;
    evaluated(node, known::unary(Unary::Not, &given(ins)[0]))
}

/// `Where(condition, x, y)`.
fn select(node: &Node<'_>, ins: &[Option<Rc<Known>>]) -> Result<Known, OnnxError> {
    node.only_attrs(&[])?;
    let k = given(ins);
    if k.len() != 3 {
        return Err(node.bad_input(k.len(), "is required"));
    }
    evaluated(node, known::select(&k[0], &k[1], &k[2]))
}

/// `Trilu(input, k)`: the elements on and above (`upper`, the default) or on and below the
/// `k`-th diagonal of the last two axes kept, the others zero. `k` must be known.
fn trilu_keep(node: &Node<'_>, shape: &[usize], k: Option<&Known>) -> Result<Known, OnnxError> {
    node.only_attrs(&["upper"])?;
    let upper = node.int("upper", 1)? != 0;
    let k = match k {
        None => 0,
        Some(k) => match k.ints().as_deref() {
            Some(&[k]) => k,
            _ => return Err(node.bad_input(1, "must be one integer")),
        },
    };
    let r = shape.len();
    if r < 2 {
        return Err(node.bad_input(0, format!("has rank {r}; Trilu needs at least 2")));
    }
    let (rows, cols) = (shape[r - 2] as i64, shape[r - 1] as i64);
    let n: usize = shape.iter().product();
    let keep: Vec<f64> = (0..n as i64)
        .map(|i| {
            let (row, col) = ((i / cols) % rows, i % cols);
            f64::from(u8::from(if upper {
                col - row >= k
            } else {
                col - row <= k
            }))
        })
        .collect();
    Known::from_f64(Elem::Bool, shape.to_vec(), &keep).map_err(|r| node.graph_error(r))
}

fn trilu_fold(node: &Node<'_>, ins: &[Option<Rc<Known>>]) -> Result<Known, OnnxError> {
    let x = ins
        .first()
        .and_then(Option::as_ref)
        .ok_or_else(|| node.bad_input(0, "is required"))?;
    let keep = trilu_keep(node, &x.shape, ins.get(1).and_then(Option::as_deref))?;
    let zero = scalar_like(x.elem, 0.0)?;
    evaluated(node, known::select(&keep, x, &zero))
}

/// `Trilu` of a run-time input: `where(keep, x, 0)` with the constant `keep` of the
/// diagonals kept (a NaN or infinity outside them gives zero, as the operator does).
fn trilu(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    let x = req(node, ins, 0)?;
    let k = match ins.get(1).and_then(Option::as_ref) {
        None => None,
        Some(Val::Known(k, _)) => Some(k.clone()),
        Some(Val::Graph(_)) => {
            return Err(node.bad_input(1, "must be known at import (it is computed at run time)"));
        }
    };
    let keep = trilu_keep(node, &imp.shape(x), k.as_deref())?;
    let zero = fill_like(imp, x, 0.0)?;
    map_vals(
        imp,
        node,
        &[Val::known(keep), x.clone(), zero],
        MapFn::Where,
    )
}
