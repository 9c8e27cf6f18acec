//! Tied tables held once. A language model whose embedding and LM head share one weight reads
//! it twice: a `gather` along axis 0 of the table `[vocab, hidden]`, and a matmul by its
//! transpose `[hidden, vocab]`. Exporters write either one initializer with a `Transpose` (which
//! the importer folds into a second constant) or two initializers with the same numbers, so the
//! graph holds two constants of the same bytes. Where a table that only `gather`s read has a
//! transposed twin among the constants, bit for bit (elements of 2 or 4 bytes), its lookups
//! read the twin's columns (`gather_columns`) and the table itself is dropped.

use std::collections::{BTreeMap, BTreeSet};

use crate::fuse::builder_with_sources;
use crate::{Graph, GraphError, OpKind, ValueId};

/// One table dropped for its transposed twin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiedTable {
    /// The dropped table's name.
    pub table: String,
    /// The name of the constant holding its transpose, which the lookups now read.
    pub held: String,
    /// The lookups that read it, by name.
    pub lookups: Vec<String>,
}

/// `graph` with every table that has a transposed twin looked up through the twin, and what
/// was shared.
pub fn share_tied_tables(graph: &Graph) -> Result<(Graph, Vec<TiedTable>), GraphError> {
    let mut readers: BTreeMap<ValueId, Vec<usize>> = BTreeMap::new();
    for (i, op) in graph.operations().iter().enumerate() {
        for &v in &op.inputs {
            readers.entry(v).or_default().push(i);
        }
    }
    let ops = graph.operations();
    // Table -> its twin, for every table whose readers are all lookups along axis 0.
    let mut twin: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    for c in graph.constants() {
        let t = c.value;
        let ty = &graph.value(t).ty;
        let Some(rs) = readers.get(&t) else { continue };
        let lookups_only = rs
            .iter()
            .all(|&i| matches!(ops[i].kind, OpKind::Gather { axis: 0 }) && ops[i].inputs[0] == t);
        if ty.shape.len() != 2 || !lookups_only || graph.outputs().contains(&t) {
            continue;
        }
        let (v, h) = (ty.shape[0], ty.shape[1]);
        // Elements of 2 or 4 bytes: what the device's column lookup reads.
        let eb = ty.dtype.bytes();
        if !matches!(eb, 2 | 4) || c.data.len() != v * h * eb {
            continue;
        }
        let found = graph.constants().iter().find(|w| {
            let wt = &graph.value(w.value).ty;
            w.value != t
                && wt.dtype == ty.dtype
                && wt.shape == [h, v]
                && readers.contains_key(&w.value)
                && transposed_bytes(c.data.bytes(), w.data.bytes(), v, h, eb)
        });
        if let Some(w) = found {
            twin.insert(t, w.value);
        }
    }
    if twin.is_empty() {
        return Ok((graph.clone(), Vec::new()));
    }
    let dropped: BTreeSet<ValueId> = twin.keys().copied().collect();
    let (mut b, mut map) = builder_with_sources(graph, |c| !dropped.contains(&c))?;
    let mut shared: BTreeMap<ValueId, Vec<String>> = BTreeMap::new();
    for op in ops {
        let out = op.outputs[0];
        let name = graph.value(out).name.clone();
        let r = match twin.get(&op.inputs[0]) {
            Some(&w) => {
                shared.entry(op.inputs[0]).or_default().push(name.clone());
                b.op(name, OpKind::GatherColumns, &[map[&w], map[&op.inputs[1]]])?
            }
            None => {
                let ins: Vec<ValueId> = op.inputs.iter().map(|i| map[i]).collect();
                b.op(name, op.kind.clone(), &ins)?
            }
        };
        map.insert(out, r);
    }
    for &o in graph.outputs() {
        b.output(map[&o]);
    }
    let tied = shared
        .into_iter()
        .map(|(t, lookups)| TiedTable {
            table: graph.value(t).name.clone(),
            held: graph.value(twin[&t]).name.clone(),
            lookups,
        })
        .collect();
    Ok((b.finish()?, tied))
}

/// Whether `w` (`[h, v]`) holds the transpose of `t` (`[v, h]`), elements of `eb` bytes.
fn transposed_bytes(t: &[u8], w: &[u8], v: usize, h: usize, eb: usize) -> bool {
    t.len() == w.len()
        && (0..v).all(|r| {
            (0..h).all(|c| {
                let (a, b) = ((r * h + c) * eb, (c * v + r) * eb);
                t[a..a + eb] == w[b..b + eb]
            })
        })
}
