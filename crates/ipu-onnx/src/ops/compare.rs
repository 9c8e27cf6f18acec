//! Comparisons, logic and selection. The device has no operators for them: they are evaluated
//! at import when every input is known, and refused otherwise.

use std::rc::Rc;

use super::handler::{ALL, Handler, evaluated, given};
use crate::OnnxError;
use crate::importer::Node;
use crate::known::{self, Binary, Known, Unary};

const COMPARISON: &str = "no comparison device operator";
const LOGICAL: &str = "no logical device operator";

pub const HANDLERS: &[Handler] = &[
    Handler::refuse("Equal", COMPARISON).fold(ALL, |n, k| binary(n, k, Binary::Equal)),
    Handler::refuse("Less", COMPARISON).fold(ALL, |n, k| binary(n, k, Binary::Less)),
    Handler::refuse("Greater", COMPARISON).fold(ALL, |n, k| binary(n, k, Binary::Greater)),
    Handler::refuse("LessOrEqual", COMPARISON).fold(ALL, |n, k| binary(n, k, Binary::LessOrEqual)),
    Handler::refuse("GreaterOrEqual", COMPARISON)
        .fold(ALL, |n, k| binary(n, k, Binary::GreaterOrEqual)),
    Handler::refuse("Not", LOGICAL).fold(ALL, not),
    Handler::refuse("And", LOGICAL).fold(ALL, |n, k| binary(n, k, Binary::And)),
    Handler::refuse("Or", LOGICAL).fold(ALL, |n, k| binary(n, k, Binary::Or)),
    Handler::refuse("Xor", LOGICAL).fold(ALL, |n, k| binary(n, k, Binary::Xor)),
    Handler::refuse("Where", "no select device operator").fold(ALL, select),
];

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
