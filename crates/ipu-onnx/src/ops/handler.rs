//! One entry of the operator table: the nodes it converts (domain, op type, opsets), how it
//! evaluates them at import when their inputs are known, and how it maps them onto graph
//! operations otherwise.

use std::rc::Rc;

use super::common::Outs;
use crate::OnnxError;
use crate::importer::{DEFAULT_DOMAIN, Importer, Node, Val};
use crate::known::{FoldResult, Known};

/// [`Fold::inputs`] of an evaluation that reads every input.
pub const ALL: usize = usize::MAX;

/// A node's evaluation at import, given its known inputs by position (`None`: omitted).
pub type Eval = fn(&Node<'_>, &[Option<Rc<Known>>]) -> Result<Known, OnnxError>;

/// A node's mapping onto graph operations, given its inputs (`None`: omitted); one entry per
/// output (`None` for an output not produced).
pub type Map = fn(&mut Importer<'_>, &Node<'_>, &[Option<Val>]) -> Outs;

/// How an entry evaluates its node at import.
#[derive(Clone, Copy)]
pub struct Fold {
    /// The inputs it reads, from the first ([`ALL`]: all of them). The dispatcher folds
    /// when at least one of them is given and every given one is known.
    pub inputs: usize,
    /// The evaluation.
    pub eval: Eval,
}

/// How an entry converts a node it does not fold.
#[derive(Clone, Copy)]
pub enum Emit {
    /// Graph operations.
    Map(Map),
    /// None: the device has no operator for it (the reason, in the refusal).
    Refuse(&'static str),
}

/// One entry of the operator table.
#[derive(Clone, Copy)]
pub struct Handler {
    /// The operator's domain.
    pub domain: &'static str,
    /// The operator's type.
    pub op_type: &'static str,
    /// The opsets of its domain the entry covers (inclusive).
    pub opsets: (i64, i64),
    /// Its evaluation at import, if it has one.
    pub fold: Option<Fold>,
    /// Its conversion otherwise.
    pub emit: Emit,
}

impl Handler {
    /// `op_type` of the default domain, at every opset, mapped by `map`.
    pub const fn map(op_type: &'static str, map: Map) -> Handler {
        Handler {
            domain: DEFAULT_DOMAIN,
            op_type,
            opsets: (1, i64::MAX),
            fold: None,
            emit: Emit::Map(map),
        }
    }

    /// `op_type` of the default domain, at every opset, refused for `reason` unless folded.
    pub const fn refuse(op_type: &'static str, reason: &'static str) -> Handler {
        Handler {
            domain: DEFAULT_DOMAIN,
            op_type,
            opsets: (1, i64::MAX),
            fold: None,
            emit: Emit::Refuse(reason),
        }
    }

    /// The entry, folded by `eval` when its first `inputs` inputs ([`ALL`]: every input) are
    /// known.
    pub const fn fold(self, inputs: usize, eval: Eval) -> Handler {
        Handler {
            fold: Some(Fold { inputs, eval }),
            ..self
        }
    }

    /// The entry, from opset `opset` of its domain on (an earlier opset is refused as one
    /// where the operator does not exist yet).
    pub const fn since(self, opset: i64) -> Handler {
        Handler {
            opsets: (opset, self.opsets.1),
            ..self
        }
    }
}

/// An evaluator's result as a fold's: its error is the node's.
pub fn evaluated(node: &Node<'_>, r: FoldResult<Known>) -> Result<Known, OnnxError> {
    r.map_err(|e| node.graph_error(e))
}

/// The given inputs of a fold in order, omitted ones left out.
pub fn given(ins: &[Option<Rc<Known>>]) -> Vec<Rc<Known>> {
    ins.iter().flatten().cloned().collect()
}

/// Known input `i` of a fold, or an error saying it is required.
pub fn required<'a>(
    node: &Node<'_>,
    ins: &'a [Option<Rc<Known>>],
    i: usize,
) -> Result<&'a Rc<Known>, OnnxError> {
    ins.get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| node.bad_input(i, "is required"))
}

/// Integer values of known input `i` of a fold.
pub fn required_ints(
    node: &Node<'_>,
    ins: &[Option<Rc<Known>>],
    i: usize,
) -> Result<Vec<i64>, OnnxError> {
    let k = required(node, ins, i)?;
    k.ints().ok_or_else(|| {
        node.bad_input(
            i,
            format!("must be an integer tensor, not {}", k.elem.name()),
        )
    })
}
