//! Repeated layers: the run of identical blocks of operations that a transformer's layers are
//! once exported (the same operations on the same types, each block reading the one before's
//! result and its own weights), found so that the compiler plans, lowers and emits one block
//! and runs it once per layer with that layer's weights.
//!
//! [`find`] returns the graph with the first block only (the operations after the run read
//! its result) and a [`Repeat`] naming the block, the value carried from one block to the
//! next, and every constant that differs between blocks with each block's data. Constants
//! equal in every block (GELU's `1/sqrt(2)`, a norm weight all layers share) stay ordinary
//! constants.

use std::collections::{BTreeMap, HashMap};

use crate::{ConstantData, Graph, GraphBuilder, GraphError, OperationId, ValueId};

/// Blocks shorter than this are not worth repeating.
pub const BLOCK_OPERATIONS_MIN: usize = 4;

/// Candidate runs examined at most (the search is bounded; the first that verifies wins).
pub const CANDIDATES_MAX: usize = 4096;

/// A constant that differs between the blocks: the first block's constant (in the graph
/// [`find`] returns) and every block's own, in block order.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The first block's constant.
    pub name: String,
    /// Each block's constant's name, in block order (the first is `name`).
    pub names: Vec<String>,
    /// Each block's data, in block order.
    pub data: Vec<ConstantData>,
}

/// A run of identical blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct Repeat {
    /// Blocks in the run.
    pub count: usize,
    /// The first block's operations, in order (names in both graphs).
    pub block: Vec<String>,
    /// Per block, its operations' names in the original graph (`layers[0] == block`).
    pub layers: Vec<Vec<String>>,
    /// The value the first block reads and the blocks after it read from the block before.
    pub input: String,
    /// The first block's value that the next block reads in place of `input` (and the
    /// operations after the run read from the last block).
    pub output: String,
    /// The constants that differ between blocks.
    pub frames: Vec<Frame>,
    /// The original graph's outputs' names, in order (an output the last block makes is the
    /// first block's value in the graph [`find`] returns).
    pub outputs: Vec<String>,
}

impl Repeat {
    /// Bytes of every layer's constants that differ between layers.
    pub fn frame_bytes(&self) -> u64 {
        let bytes = |f: &Frame| f.data.iter().map(|d| d.len() as u64).sum::<u64>();
        self.frames.iter().map(bytes).sum()
    }
}

fn producer_index(graph: &Graph, v: ValueId) -> Option<usize> {
    graph.value(v).producer.map(|o| o.0 as usize)
}

/// Whether operations `i` and `j` compute the same thing on the same types.
fn same_op(graph: &Graph, i: usize, j: usize) -> bool {
    let (a, b) = (
        graph.operation(OperationId(i as u32)),
        graph.operation(OperationId(j as u32)),
    );
    a.kind == b.kind
        && a.inputs.len() == b.inputs.len()
        && graph.value(a.outputs[0]).ty == graph.value(b.outputs[0]).ty
        && a.inputs
            .iter()
            .zip(&b.inputs)
            .all(|(x, y)| graph.value(*x).ty == graph.value(*y).ty)
}

/// Candidate runs `(start, length, count)`, most operations saved first, then earliest.
fn candidates(graph: &Graph) -> Vec<(usize, usize, usize)> {
    let m = graph.operations().len();
    let mut found = Vec::new();
    for len in BLOCK_OPERATIONS_MIN..=m / 2 {
        for a in 0..=m - 2 * len {
            if !(0..len).all(|j| same_op(graph, a + j, a + len + j)) {
                continue;
            }
            let mut count = 2;
            while a + (count + 1) * len <= m
                && (0..len).all(|j| same_op(graph, a + j, a + count * len + j))
            {
                count += 1;
            }
            found.push((a, len, count));
        }
    }
    found.sort_by_key(|&(a, len, count)| (std::cmp::Reverse((count - 1) * len), a));
    found.truncate(CANDIDATES_MAX);
    found
}

/// What a verified run reads: the carried value, the position of its producer in a block,
/// and per first-block constant that differs, every block's constant.
struct Verified {
    input: ValueId,
    carry: usize,
    frames: BTreeMap<ValueId, Vec<ValueId>>,
}

fn verify(graph: &Graph, a: usize, len: usize, count: usize) -> Option<Verified> {
    let end = a + count * len;
    let mut carry: Option<(ValueId, usize)> = None;
    let mut consts: BTreeMap<ValueId, Vec<Option<ValueId>>> = BTreeMap::new();
    for k in 0..count {
        for j in 0..len {
            let op0 = graph.operation(OperationId((a + j) as u32));
            let opk = graph.operation(OperationId((a + k * len + j) as u32));
            for (&v0, &vk) in op0.inputs.iter().zip(&opk.inputs) {
                match producer_index(graph, v0) {
                    Some(i0) if i0 >= a => {
                        // Made in the first block: made at the same place in this one.
                        if producer_index(graph, vk) != Some(i0 + k * len) {
                            return None;
                        }
                    }
                    _ if graph.constant(v0).is_some() => {
                        graph.constant(vk)?;
                        let per = consts.entry(v0).or_insert_with(|| vec![None; count]);
                        if *per[k].get_or_insert(vk) != vk {
                            return None;
                        }
                    }
                    _ if k == 0 => {}
                    _ if vk == v0 => {
                        // Read by every block from before the run, never the carried value.
                        if carry.is_some_and(|(x, _)| x == v0) {
                            return None;
                        }
                    }
                    _ => {
                        // The carried value: made by the block before, at one place.
                        let r = producer_index(graph, vk)?.checked_sub(a + (k - 1) * len)?;
                        if r >= len || carry.is_some_and(|c| c != (v0, r)) {
                            return None;
                        }
                        carry = Some((v0, r));
                    }
                }
            }
        }
    }
    let (input, r) = carry?;
    // Nothing outside the run reads a block's values but the last block's result, and the
    // first block alone reads the carried value (the next blocks overwrite it).
    let last = graph
        .operation(OperationId((a + (count - 1) * len + r) as u32))
        .outputs[0];
    let inside = |v: ValueId| producer_index(graph, v).is_some_and(|i| i >= a && i < end);
    for (i, op) in graph.operations().iter().enumerate() {
        let in_run = i >= a && i < end;
        for &v in &op.inputs {
            if !in_run && inside(v) && v != last {
                return None;
            }
            if v == input && !(a..a + len).contains(&i) {
                return None;
            }
        }
    }
    if graph
        .outputs()
        .iter()
        .any(|&o| (inside(o) && o != last) || o == input)
    {
        return None;
    }
    // Constants that differ between blocks are read by their block alone.
    let mut frames = BTreeMap::new();
    for (v0, per) in consts {
        let per: Vec<ValueId> = per.into_iter().collect::<Option<_>>()?;
        let data0 = &graph.constant(v0)?.data;
        if per
            .iter()
            .all(|&v| graph.constant(v).is_some_and(|c| c.data == *data0))
        {
            continue;
        }
        frames.insert(v0, per);
    }
    let mut reader: HashMap<ValueId, usize> = HashMap::new();
    for (k, per) in frames.values().flat_map(|p| p.iter().enumerate()) {
        reader.insert(*per, k);
    }
    for (i, op) in graph.operations().iter().enumerate() {
        for v in &op.inputs {
            if let Some(&k) = reader.get(v) {
                let (s, e) = (a + k * len, a + (k + 1) * len);
                if i < s || i >= e {
                    return None;
                }
            }
        }
    }
    if graph.outputs().iter().any(|o| reader.contains_key(o)) {
        return None;
    }
    Some(Verified {
        input,
        carry: r,
        frames,
    })
}

/// The longest run of identical blocks in `graph` and the graph with its first block only,
/// if there is a run of two blocks or more that one carried value chains.
pub fn find(graph: &Graph) -> Result<Option<(Graph, Repeat)>, GraphError> {
    let hoisted = hoist_invariants(graph)?;
    let graph = hoisted.as_ref().unwrap_or(graph);
    for (a, len, count) in candidates(graph) {
        let Some(v) = verify(graph, a, len, count) else {
            continue;
        };
        return rebuild(graph, a, len, count, v).map(Some);
    }
    Ok(None)
}

/// `graph` with the operations that no matrix product feeds (a mask built from the inputs,
/// say) moved before the first matrix product, where an exporter wrote them inside the first
/// layer; None when there are none to move. The order is otherwise kept.
fn hoist_invariants(graph: &Graph) -> Result<Option<Graph>, GraphError> {
    let ops = graph.operations();
    let is_matmul = |o: &crate::Operation| matches!(o.kind, crate::OpKind::MatMul { .. });
    let Some(first) = ops.iter().position(is_matmul) else {
        return Ok(None);
    };
    // Whether a matrix product feeds each operation (the graph is in topological order).
    let mut fed = vec![false; ops.len()];
    for (i, o) in ops.iter().enumerate() {
        fed[i] = is_matmul(o)
            || o.inputs
                .iter()
                .any(|&v| producer_index(graph, v).is_some_and(|p| fed[p]));
    }
    let moved: Vec<usize> = (first..ops.len()).filter(|&i| !fed[i]).collect();
    if moved.is_empty() {
        return Ok(None);
    }
    // Each moved operation right after the last operation before the first product that it
    // depends on (through other moved ones too), so that a layer norm opening the first
    // layer stays next to the layer's product.
    let mut anchor: BTreeMap<usize, Option<usize>> = BTreeMap::new();
    for &m in &moved {
        let a = ops[m]
            .inputs
            .iter()
            .filter_map(|&v| producer_index(graph, v))
            .map(|p| if p < first { Some(p) } else { anchor[&p] })
            .max()
            .flatten();
        anchor.insert(m, a);
    }
    let after = |a: Option<usize>| -> Vec<usize> {
        moved.iter().copied().filter(|m| anchor[m] == a).collect()
    };
    let mut order: Vec<usize> = after(None);
    for i in 0..first {
        order.push(i);
        order.extend(after(Some(i)));
    }
    order.extend((first..ops.len()).filter(|&i| fed[i]));
    copy(graph, order, |_| true, |v| v).map(Some)
}

/// A graph of `graph`'s inputs, its constants `keep` accepts, its operations `order` lists
/// (in that order) and its outputs, every operand and output `v` read as `via(v)`.
fn copy(
    graph: &Graph,
    order: impl IntoIterator<Item = usize>,
    keep: impl Fn(ValueId) -> bool,
    via: impl Fn(ValueId) -> ValueId,
) -> Result<Graph, GraphError> {
    let mut b = GraphBuilder::new(graph.name.clone());
    let mut map: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    for &i in graph.inputs() {
        let val = graph.value(i);
        map.insert(i, b.input(val.name.clone(), val.ty.clone()));
    }
    for c in graph.constants().iter().filter(|c| keep(c.value)) {
        let val = graph.value(c.value);
        let id = b.constant(val.name.clone(), val.ty.clone(), c.data.clone())?;
        map.insert(c.value, id);
    }
    for i in order {
        let op = &graph.operations()[i];
        let ins: Vec<ValueId> = op.inputs.iter().map(|&x| map[&via(x)]).collect();
        let out = op.outputs[0];
        let id = b.op(graph.value(out).name.clone(), op.kind.clone(), &ins)?;
        map.insert(out, id);
    }
    for &o in graph.outputs() {
        b.output(map[&via(o)]);
    }
    b.finish()
}

fn rebuild(
    graph: &Graph,
    a: usize,
    len: usize,
    count: usize,
    v: Verified,
) -> Result<(Graph, Repeat), GraphError> {
    let end = a + count * len;
    let kept = |i: usize| i < a + len || i >= end;
    let ops = graph.operations();
    let last = ops[a + (count - 1) * len + v.carry].outputs[0];
    let first = ops[a + v.carry].outputs[0];
    let read: std::collections::BTreeSet<ValueId> = ops
        .iter()
        .enumerate()
        .filter(|(i, _)| kept(*i))
        .flat_map(|(_, o)| o.inputs.iter().copied())
        .chain(graph.outputs().iter().copied())
        .collect();
    let via = |v: ValueId| if v == last { first } else { v };
    let one = copy(
        graph,
        (0..ops.len()).filter(|&i| kept(i)),
        |c| read.contains(&c),
        via,
    )?;
    let names = |k: usize| -> Vec<String> {
        (0..len)
            .map(|j| ops[a + k * len + j].name.clone())
            .collect()
    };
    let frames = v
        .frames
        .iter()
        .map(|(v0, per)| Frame {
            name: graph.value(*v0).name.clone(),
            names: per.iter().map(|&x| graph.value(x).name.clone()).collect(),
            data: per
                .iter()
                .map(|&x| graph.constant(x).expect("verified constant").data.clone())
                .collect(),
        })
        .collect();
    let repeat = Repeat {
        count,
        block: names(0),
        layers: (0..count).map(names).collect(),
        input: graph.value(v.input).name.clone(),
        output: graph.value(first).name.clone(),
        frames,
        outputs: graph
            .outputs()
            .iter()
            .map(|&o| graph.value(o).name.clone())
            .collect(),
    };
    Ok((one, repeat))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, OpKind, TensorType};

    /// `layers` blocks of matmul by a weight, add a bias, relu, after an input scale.
    fn layered(layers: usize, same_bias: bool) -> Graph {
        let mut b = GraphBuilder::new("layers");
        let t = TensorType::new(DType::F32, [4, 8]);
        let w = TensorType::new(DType::F32, [8, 8]);
        let x = b.input("x", t.clone());
        let mut h = b
            .op("h", OpKind::Scale { factor: 2.0 }, &[x])
            .expect("scale");
        for l in 0..layers {
            let wv: Vec<f32> = (0..64).map(|i| (i + l) as f32 * 0.01).collect();
            let wc = b
                .constant_values(format!("w{l}"), w.clone(), &wv)
                .expect("w");
            let bias = if same_bias { 1.0 } else { l as f32 };
            let bc = b
                .constant_values(format!("b{l}"), t.clone(), &[bias; 32])
                .expect("b");
            let m = b
                .matmul(&format!("m{l}"), h, wc, DType::F32, DType::F32)
                .expect("m");
            let s = b.op(format!("s{l}"), OpKind::Add, &[m, bc]).expect("add");
            let r = b
                .op(format!("r{l}"), OpKind::Unary(crate::UnaryFn::Tanh), &[s])
                .expect("relu");
            h = b
                .op(format!("o{l}"), OpKind::Add, &[r, h])
                .expect("residual");
        }
        let y = b.op("y", OpKind::Scale { factor: 0.5 }, &[h]).expect("y");
        b.output(y);
        b.finish().expect("graph")
    }

    #[test]
    fn identical_layers_become_one_block_and_their_weights_frames() {
        let g = layered(5, true);
        let (one, r) = find(&g).expect("rebuild").expect("a run");
        assert_eq!(r.count, 5);
        assert_eq!(r.block, ["m0", "s0", "r0", "o0"]);
        assert_eq!(r.layers[4], ["m4", "s4", "r4", "o4"]);
        assert_eq!((r.input.as_str(), r.output.as_str()), ("h", "o0"));
        // The biases are equal in every layer: one constant, no frame.
        assert_eq!(r.frames.len(), 1);
        assert_eq!(r.frames[0].names, ["w0", "w1", "w2", "w3", "w4"]);
        assert_eq!(one.operations().len(), 6);
        let y = one.operations().last().expect("y");
        assert_eq!(one.value(y.inputs[0]).name, "o0");
        one.verify().expect("valid");
    }

    #[test]
    fn biases_that_differ_are_frames_too() {
        let (_, r) = find(&layered(3, false)).expect("rebuild").expect("a run");
        let names: Vec<&str> = r.frames.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["w0", "b0"]);
        assert_eq!(r.frames[1].data.len(), 3);
    }

    #[test]
    fn a_mask_built_inside_the_first_layer_leaves_every_layer_in_the_run() {
        // Pre-norm layers: a tanh opens each layer before its product; the first layer also
        // builds the mask every layer adds, after its product (as sdpa exports do).
        let mut b = GraphBuilder::new("pre-norm");
        let t = TensorType::new(DType::F32, [4, 8]);
        let x = b.input("x", t.clone());
        let m = b.input("m", t.clone());
        let mut h = x;
        let mut mask = None;
        for l in 0..3 {
            let n = b.op(format!("n{l}"), OpKind::Unary(crate::UnaryFn::Tanh), &[h]);
            let w = TensorType::new(DType::F32, [8, 8]);
            let wv: Vec<f32> = (0..64).map(|i| (i + l) as f32 * 0.01).collect();
            let w = b.constant_values(format!("w{l}"), w, &wv).expect("w");
            let p = b.matmul(&format!("p{l}"), n.expect("n"), w, DType::F32, DType::F32);
            let p = p.expect("p");
            let k = *mask.get_or_insert_with(|| {
                b.op("mask", OpKind::Scale { factor: -1.0 }, &[m])
                    .expect("mask")
            });
            let q = b.op(format!("q{l}"), OpKind::Add, &[p, k]).expect("q");
            h = b.op(format!("h{l}"), OpKind::Add, &[h, q]).expect("h");
        }
        b.output(h);
        let (_, r) = find(&b.finish().expect("graph"))
            .expect("find")
            .expect("a run");
        assert_eq!(r.count, 3);
        assert_eq!(r.block, ["n0", "p0", "q0", "h0"]);
    }

    #[test]
    fn one_layer_or_a_value_read_past_its_block_is_no_run() {
        assert!(find(&layered(1, true)).expect("find").is_none());
        // A middle layer's result read after the run: not a chain of blocks.
        let mut b = GraphBuilder::new("tap");
        let t = TensorType::new(DType::F32, [4, 8]);
        let x = b.input("x", t.clone());
        let mut h = x;
        let mut taps = Vec::new();
        for l in 0..3 {
            let a = b.op(format!("a{l}"), OpKind::Scale { factor: 2.0 }, &[h]);
            let a = a.expect("a");
            let c = b.op(format!("c{l}"), OpKind::Unary(crate::UnaryFn::Tanh), &[a]);
            let c = c.expect("c");
            let d = b.op(format!("d{l}"), OpKind::Add, &[c, h]).expect("d");
            h = b.op(format!("e{l}"), OpKind::Add, &[d, a]).expect("e");
            taps.push(h);
        }
        let y = b.op("y", OpKind::Add, &[taps[0], taps[2]]).expect("y");
        b.output(y);
        assert!(find(&b.finish().expect("graph")).expect("find").is_none());
    }
}
