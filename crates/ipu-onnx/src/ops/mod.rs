//! The operators: each ONNX node becomes graph operations, or is folded when its inputs are
//! known. Semantics follow the ONNX operator specification (onnx/docs/Operators.md) at opsets
//! 13 to 28; where an operator changed within that range the opset decides (noted per
//! operator).
//!
//! Every operator is an entry ([`Handler`]) in its family's table (`HANDLERS` of
//! `elementwise.rs`, `shape.rs`, ...): its op type and opsets, its evaluation at import if it
//! has one, and its mapping onto graph operations. [`convert`] finds the entry, folds the node
//! when the inputs the evaluation reads are known, and maps it otherwise.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::OnceLock;

mod attention;
mod common;
mod compare;
mod elementwise;
mod gather;
mod handler;
mod matmul;
mod misc;
mod norm;
mod quant;
mod reduce;
mod rotary;
mod shape;

use common::{Outs, one};
use handler::{Emit, Handler};

use crate::OnnxError;
use crate::importer::{DEFAULT_DOMAIN, Importer, Node, Val};
use crate::known::Known;

/// The families' tables.
const TABLES: &[&[Handler]] = &[
    misc::HANDLERS,
    elementwise::HANDLERS,
    compare::HANDLERS,
    shape::HANDLERS,
    gather::HANDLERS,
    reduce::HANDLERS,
    quant::HANDLERS,
    matmul::HANDLERS,
    norm::HANDLERS,
    attention::HANDLERS,
    rotary::HANDLERS,
];

/// Entries by domain and op type, in table order.
type Registry = BTreeMap<&'static str, BTreeMap<&'static str, Vec<Handler>>>;

/// The operator table, built once.
fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut map = Registry::new();
        for h in TABLES.iter().flat_map(|t| t.iter()) {
            map.entry(h.domain)
                .or_default()
                .entry(h.op_type)
                .or_default()
                .push(*h);
        }
        map
    })
}

/// The entry converting `node` at `opset` of its domain, or the refusal of an operator the
/// table has no entry for at that opset.
fn lookup(node: &Node<'_>, opset: i64) -> Result<&'static Handler, OnnxError> {
    let domain = match node.proto.domain() {
        "" => DEFAULT_DOMAIN,
        d => d,
    };
    let Some(entries) = registry().get(domain).and_then(|ops| ops.get(node.op_type)) else {
        return Err(node.unsupported("the importer has no mapping for it"));
    };
    if let Some(h) = entries
        .iter()
        .find(|h| (h.opsets.0..=h.opsets.1).contains(&opset))
    {
        return Ok(h);
    }
    let since = entries.iter().map(|h| h.opsets.0).min().unwrap_or(opset);
    Err(node.unsupported(if opset < since {
        format!(
            "{} exists from opset {since}; the model imports {opset}",
            node.op_type
        )
    } else {
        format!(
            "{} is not mapped at opset {opset}, which the model imports",
            node.op_type
        )
    }))
}

/// The known tensors of `ins` by position, if at least one is given and every given one is
/// known.
fn known_inputs(ins: &[Option<Val>]) -> Option<Vec<Option<Rc<Known>>>> {
    let mut out = Vec::with_capacity(ins.len());
    for v in ins {
        out.push(match v {
            Some(Val::Known(k, _)) => Some(k.clone()),
            Some(Val::Graph(_)) => return None,
            None => None,
        });
    }
    out.iter().any(Option::is_some).then_some(out)
}

/// Converts one node: evaluated at import when its entry has an evaluation and the inputs that
/// reads are known, else mapped (or refused) by the entry. Returns one entry per output
/// (`None` for an output not produced).
pub fn convert(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    let h = lookup(node, imp.opset)?;
    if let Some(f) = h.fold
        && let Some(known) = known_inputs(&ins[..ins.len().min(f.inputs)])
    {
        return one(Val::known((f.eval)(node, &known)?));
    }
    match h.emit {
        Emit::Map(map) => map(imp, node, ins),
        Emit::Refuse(reason) => Err(node.unsupported(reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_of_an_operator_cover_disjoint_opsets() {
        for (domain, ops) in registry() {
            for (op, entries) in ops {
                for (i, a) in entries.iter().enumerate() {
                    assert!(a.opsets.0 <= a.opsets.1, "{domain} {op}: empty opsets");
                    for b in &entries[i + 1..] {
                        assert!(
                            a.opsets.1 < b.opsets.0 || b.opsets.1 < a.opsets.0,
                            "{domain} {op}: two entries at opsets {:?} and {:?}",
                            a.opsets,
                            b.opsets
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn folding_needs_a_given_input_and_every_given_one_known() {
        let k = || Some(Val::known(Known::int64s(&[1])));
        let g = Some(Val::Graph(ipu_graph::ValueId(0)));
        assert!(known_inputs(&[]).is_none());
        assert!(known_inputs(&[None, None]).is_none());
        assert!(known_inputs(&[k(), g.clone()]).is_none());
        let known = known_inputs(&[None, k()]).unwrap();
        assert!(known[0].is_none() && known[1].is_some());
    }
}
