//! `Identity`, `Dropout` at inference and `Constant`.

use ipu_graph::DType;

use super::common::{Outs, input, one, req};
use super::handler::Handler;
use crate::importer::{Importer, Node, Val};
use crate::known::{Elem, IntKind, Known};
use crate::proto::attribute_proto::AttributeType;

pub const HANDLERS: &[Handler] = &[
    Handler::map("Identity", identity),
    Handler::map("Dropout", dropout),
    Handler::map("Constant", constant),
];

fn identity(_: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    one(req(node, ins, 0)?.clone())
}

/// `Dropout` at inference (opset 13): the identity; a training mode or a read mask is
/// refused.
fn dropout(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["seed"])?;
    let x = req(node, ins, 0)?;
    let training = input(ins, 2).is_some() && imp.int_input(node, ins, 2)?.iter().any(|&t| t != 0);
    if training {
        // Training mode drops elements at random; with ratio 0 it keeps every one.
        let ratio = match input(ins, 1) {
            Some(Val::Known(k, _)) => k.f64s().first().copied(),
            Some(Val::Graph(_)) => None,
            None => Some(0.5),
        };
        if ratio != Some(0.0) {
            return Err(node.bad_input(
                2,
                "training mode with a ratio other than 0 drops elements at random, \
                 which is not supported (inference, or ratio 0)",
            ));
        }
    }
    // The mask, if read, keeps every element: all true.
    let shape = imp.shape(x);
    let n: usize = shape.iter().product();
    let mask = Known::from_ints(Elem::Bool, shape, &vec![1; n]);
    Ok(vec![Some(x.clone()), Some(Val::known(mask))])
}

/// The known value of a `Constant` node.
fn constant(imp: &mut Importer<'_>, node: &Node<'_>, _: &[Option<Val>]) -> Outs {
    let [a] = node.proto.attribute.as_slice() else {
        return Err(node.graph_error("a Constant needs exactly one value attribute"));
    };
    let name = a.name();
    let k = match (name, a.r#type()) {
        ("value", AttributeType::Tensor) => {
            let t =
                a.t.as_ref()
                    .ok_or_else(|| node.bad_attr(name, "has no tensor"))?;
            let tname = node.proto.output.first().cloned().unwrap_or_default();
            crate::tensor::decode(t, &tname, imp.options)?
        }
        ("value_float", AttributeType::Float) => {
            Known::from_f64(Elem::Float(DType::F32), vec![], &[f64::from(a.f())])
                .map_err(|e| node.graph_error(e))?
        }
        ("value_floats", AttributeType::Floats) => Known {
            elem: Elem::Float(DType::F32),
            shape: vec![a.floats.len()],
            bytes: a.floats.iter().flat_map(|x| x.to_le_bytes()).collect(),
        },
        ("value_int", AttributeType::Int) => {
            Known::from_ints(Elem::Int(IntKind::I64), vec![], &[a.i()])
        }
        ("value_ints", AttributeType::Ints) => Known::int64s(&a.ints),
        _ => {
            return Err(node.bad_attr(
                name,
                "not supported (value, value_float(s) and value_int(s) are)",
            ));
        }
    };
    one(Val::known(k))
}
