//! The bounds of run-time indices: which graph inputs reach a `gather`'s indices unchanged
//! (through reshapes only), and the entries of the table they index. A host writing such an
//! input checks every value against the bound before anything runs.

use crate::{Graph, OpKind, ValueId};

/// A graph input whose values index a table: each must lie in `-entries..entries`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexBound {
    /// The graph input.
    pub input: ValueId,
    /// The entries along the gathered axis of the table.
    pub entries: usize,
    /// The gathering operation's name.
    pub op: String,
}

impl IndexBound {
    /// Whether `value` is a valid index (negative ones count from the end).
    pub fn admits(&self, value: i64) -> bool {
        let n = self.entries as i64;
        (-n..n).contains(&value)
    }
}

/// Every bound on a graph input: one per `gather` or `gather_columns` whose indices are the input or a reshape
/// of it (the tightest first when several tables read one input).
pub fn index_bounds(graph: &Graph) -> Vec<IndexBound> {
    let mut out = Vec::new();
    for op in graph.operations() {
        let axis = match op.kind {
            OpKind::Gather { axis } => axis,
            // The table's columns are its entries.
            OpKind::GatherColumns => 1,
            _ => continue,
        };
        let mut v = op.inputs[1];
        while let Some(p) = graph.value(v).producer {
            let p = graph.operation(p);
            if !matches!(p.kind, OpKind::Reshape { .. }) {
                break;
            }
            v = p.inputs[0];
        }
        if graph.inputs().contains(&v) {
            out.push(IndexBound {
                input: v,
                entries: graph.value(op.inputs[0]).ty.shape[axis],
                op: op.name.clone(),
            });
        }
    }
    out.sort_by_key(|b| (b.input, b.entries));
    out
}
