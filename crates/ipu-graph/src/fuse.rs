//! Recognising attention in the form exporters write it: `matmul(q, transpose(k))`, an
//! optional `scale`, an optional `add` of a constant causal mask, `softmax` along the last
//! axis and `matmul(·, v)`, whose intermediates nothing else reads, becomes one `attention`
//! operation (the compiler then lowers it unfused or, when that pays, as `flash_attention`).
//! An `add` of any other f32 or f16 value broadcastable to the scores (a padding mask built at
//! run time from a model's `attention_mask`) becomes the mask operand of a `flash_attention`,
//! which `attention` has not. The sdpa form is recognised too: `q` and `kᵀ` each scaled (one
//! scale of the scores), and the guard `where(is_nan(p), 0, p)` after the softmax, dropped
//! where the mask is finite so that no row of probabilities can be NaN.

use std::collections::{BTreeMap, BTreeSet};

use crate::{DType, Graph, GraphBuilder, GraphError, MapFn, OpKind, OperationId, ValueId};

/// A mask value at or below this counts as masked: exporters write -10000, -1e9, the type's
/// lowest value or -inf above the diagonal; after the softmax's subtraction of the row maximum
/// each gives exp() = 0 in f32, as the causal mask's -inf does.
pub const MASKED_AT_MOST: f32 = -1.0e4;

/// One recognised attention.
#[derive(Debug, Clone, PartialEq)]
pub struct FusedAttention {
    /// The operations it replaces (the final matmul last), by name.
    pub operations: Vec<String>,
    /// The output's name (the final matmul's).
    pub output: String,
    /// Whether a causal mask was recognised.
    pub causal: bool,
}

/// `graph` with every recognised attention subgraph replaced, and what was replaced.
pub fn attention_subgraphs(graph: &Graph) -> Result<(Graph, Vec<FusedAttention>), GraphError> {
    let mut readers: BTreeMap<ValueId, Vec<OperationId>> = BTreeMap::new();
    for id in graph.operation_ids() {
        for &v in &graph.operation(id).inputs {
            readers.entry(v).or_default().push(id);
        }
    }
    let only_reader = |v: ValueId, op: OperationId| {
        !graph.outputs().contains(&v) && readers.get(&v).is_some_and(|r| r == &[op])
    };
    let producer = |v: ValueId| graph.value(v).producer.map(|p| (p, graph.operation(p)));
    // Final matmul -> (q, k source, k perm to apply, v, scale, causal, partials, out, removed ops)
    let mut found = Vec::new();
    for id in graph.operation_ids() {
        let sm = graph.operation(id);
        let OpKind::Softmax { axis } = sm.kind else {
            continue;
        };
        let p = sm.outputs[0];
        if axis + 1 != graph.value(p).ty.shape.len() {
            continue;
        }
        // sdpa's guard after the softmax, `where(is_nan(p), 0, p)`, read in place of `p`.
        let guard = nan_guard(graph, &readers, p);
        let probs = guard.map_or(p, |(_, w)| graph.operation(w).outputs[0]);
        let Some(&[pv]) = readers.get(&probs).map(|r| r.as_slice()) else {
            continue;
        };
        let pv_op = graph.operation(pv);
        let OpKind::MatMul { out, .. } = pv_op.kind else {
            continue;
        };
        if pv_op.inputs[0] != probs
            || graph.outputs().contains(&p)
            || graph.outputs().contains(&probs)
        {
            continue;
        }
        let mut removed = vec![id, pv];
        removed.extend(guard.iter().flat_map(|&(n, w)| [n, w]));
        let mut x = sm.inputs[0];
        let mut causal = false;
        let mut mask = None;
        if let Some((add_id, add)) = producer(x)
            && add.kind == OpKind::Add
            && only_reader(x, id)
        {
            let (s, m) = (add.inputs[0], add.inputs[1]);
            let scores_shape = &graph.value(s).ty.shape;
            if is_causal_mask(graph, m, scores_shape) {
                causal = true;
            } else if is_mask_operand(graph, m, scores_shape) {
                mask = Some(m);
            } else {
                continue;
            }
            // Without the guard's NaN to 0, a row masked throughout would differ: the guard
            // is dropped only where the mask is finite (no row of probabilities is NaN).
            if guard.is_some() && mask.is_some() && !is_finite_mask(graph, m) {
                continue;
            }
            removed.push(add_id);
            x = s;
            if !only_reader(x, add_id) {
                continue;
            }
        } else if !only_reader(x, id) {
            continue;
        }
        let mut scale = 1.0f32;
        let mut scores = x;
        if let Some((sc_id, sc)) = producer(x)
            && let OpKind::Scale { factor } = sc.kind
        {
            scale = factor;
            removed.push(sc_id);
            scores = sc.inputs[0];
            if !only_reader(scores, sc_id) {
                continue;
            }
        }
        let Some((qk_id, qk)) = producer(scores) else {
            continue;
        };
        let OpKind::MatMul { partials, .. } = qk.kind else {
            continue;
        };
        removed.push(qk_id);
        let (mut q, mut kt, v) = (qk.inputs[0], qk.inputs[1], pv_op.inputs[1]);
        // sdpa scales q and kᵀ by the root of the scale each: one scale of the scores.
        for side in [&mut q, &mut kt] {
            if let Some((sc_id, sc)) = producer(*side)
                && let OpKind::Scale { factor } = sc.kind
                && only_reader(*side, qk_id)
            {
                scale *= factor;
                removed.push(sc_id);
                *side = sc.inputs[0];
            }
        }
        // k itself: kᵀ's transpose with its last two axes swapped back, or a new transpose.
        let rank = graph.value(kt).ty.shape.len();
        let (k_src, k_perm) = match producer(kt) {
            Some((_, t)) if matches!(t.kind, OpKind::Transpose { .. }) => {
                let OpKind::Transpose { perm } = &t.kind else {
                    unreachable!()
                };
                let mut perm = perm.clone();
                perm.swap(rank - 2, rank - 1);
                (t.inputs[0], perm)
            }
            _ => {
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.swap(rank - 2, rank - 1);
                (kt, perm)
            }
        };
        let (qs, vs) = (&graph.value(q).ty.shape, &graph.value(v).ty.shape);
        let ks = graph.value(kt).ty.shape.clone();
        let same_batch = qs.len() == rank
            && vs.len() == rank
            && qs[..rank - 2] == ks[..rank - 2]
            && vs[..rank - 2] == ks[..rank - 2];
        let (sq, sk) = (qs[rank - 2], ks[rank - 1]);
        if rank < 3 || !same_batch || (causal && sq != sk) {
            continue;
        }
        let dtypes = [q, kt, v].map(|x| graph.value(x).ty.dtype);
        if dtypes.iter().any(|&d| d != dtypes[0]) {
            continue;
        }
        found.push((
            pv, q, k_src, k_perm, v, scale, causal, partials, out, removed, mask,
        ));
    }
    if found.is_empty() {
        return Ok((graph.clone(), Vec::new()));
    }
    rebuild(graph, found)
}

/// Whether `m` is a constant whose last two axes hold 0 on and below the diagonal and at most
/// [`MASKED_AT_MOST`] above it, broadcast over the leading axes of `scores`.
fn is_causal_mask(graph: &Graph, m: ValueId, scores: &[usize]) -> bool {
    let Some(c) = graph.constant(m) else {
        return false;
    };
    let ty = &graph.value(m).ty;
    let r = ty.shape.len();
    if r < 2 || ty.shape[..r - 2].iter().any(|&d| d != 1) || scores.len() < 2 {
        return false;
    }
    let (sq, sk) = (ty.shape[r - 2], ty.shape[r - 1]);
    if sq != sk || scores[scores.len() - 2..] != [sq, sk] {
        return false;
    }
    let values = crate::decode_elements(ty.dtype, c.data.bytes());
    values.iter().enumerate().all(|(i, &x)| {
        let (row, col) = (i / sk, i % sk);
        if col <= row {
            x == 0.0
        } else {
            x <= MASKED_AT_MOST
        }
    })
}

/// The `is_nan` and `where` of `where(is_nan(p), 0, p)` when they are all that reads the
/// probabilities `p` (sdpa writes it so that a row masked throughout gives zeros, not NaN).
fn nan_guard(
    graph: &Graph,
    readers: &BTreeMap<ValueId, Vec<OperationId>>,
    p: ValueId,
) -> Option<(OperationId, OperationId)> {
    let rs = readers.get(&p)?;
    if rs.len() != 2 {
        return None;
    }
    let is_nan = *rs
        .iter()
        .find(|&&o| graph.operation(o).kind == OpKind::Map(MapFn::IsNaN))?;
    let nan = graph.operation(is_nan).outputs[0];
    let w = *rs.iter().find(|&&o| o != is_nan)?;
    let wop = graph.operation(w);
    (wop.kind == OpKind::Map(MapFn::Where)
        && wop.inputs[..] == [nan, wop.inputs[1], p]
        && constant_all(graph, wop.inputs[1], |x| x == 0.0)
        && readers.get(&nan).is_some_and(|r| r == &[w])
        && !graph.outputs().contains(&nan))
    .then_some((is_nan, w))
}

/// Whether `v` is a constant whose every element satisfies `holds`.
fn constant_all(graph: &Graph, v: ValueId, holds: impl Fn(f32) -> bool) -> bool {
    graph.constant(v).is_some_and(|c| {
        crate::decode_elements(graph.value(v).ty.dtype, c.data.bytes())
            .into_iter()
            .all(holds)
    })
}

/// Whether every element of the mask `m` is finite: a constant of finite values, or a
/// `where` choosing between two such constants (the padding masks exporters build).
fn is_finite_mask(graph: &Graph, m: ValueId) -> bool {
    let finite = |v: ValueId| constant_all(graph, v, f32::is_finite);
    finite(m)
        || graph.value(m).producer.is_some_and(|p| {
            let op = graph.operation(p);
            op.kind == OpKind::Map(MapFn::Where) && finite(op.inputs[1]) && finite(op.inputs[2])
        })
}

/// Whether `m` can be a flash attention's additive mask of scores of shape `scores`: f32 or
/// f16, of rank at most the scores', each dimension (aligned from the right) equal or 1.
fn is_mask_operand(graph: &Graph, m: ValueId, scores: &[usize]) -> bool {
    let ty = &graph.value(m).ty;
    matches!(ty.dtype, DType::F32 | DType::F16)
        && ty.shape.len() <= scores.len()
        && ty
            .shape
            .iter()
            .rev()
            .zip(scores.iter().rev())
            .all(|(&d, &s)| d == s || d == 1)
}

type Found = (
    OperationId,
    ValueId,
    ValueId,
    Vec<usize>,
    ValueId,
    f32,
    bool,
    DType,
    DType,
    Vec<OperationId>,
    Option<ValueId>,
);

/// The graph again with each found subgraph replaced at its final matmul, and every value
/// nothing reads any more (the old kᵀ transpose, the mask constant) left out.
fn rebuild(graph: &Graph, found: Vec<Found>) -> Result<(Graph, Vec<FusedAttention>), GraphError> {
    let removed: BTreeSet<OperationId> = found.iter().flat_map(|f| f.9.iter().copied()).collect();
    let at: BTreeMap<OperationId, &Found> = found.iter().map(|f| (f.0, f)).collect();
    // What the new graph reads: walk back from the outputs through kept operations.
    let mut needed: BTreeSet<ValueId> = graph.outputs().iter().copied().collect();
    for id in graph.operation_ids().collect::<Vec<_>>().into_iter().rev() {
        let op = graph.operation(id);
        let out = op.outputs[0];
        if !needed.contains(&out) {
            continue;
        }
        if let Some(f) = at.get(&id) {
            needed.extend([f.1, f.2, f.4]);
            needed.extend(f.10);
        } else if !removed.contains(&id) {
            needed.extend(op.inputs.iter().copied());
        }
    }
    let (mut b, mut map) = builder_with_sources(graph, |c| needed.contains(&c))?;
    let mut fused = Vec::new();
    for id in graph.operation_ids() {
        let op = graph.operation(id);
        let out = op.outputs[0];
        if let Some(&&(
            _,
            q,
            k_src,
            ref perm,
            v,
            scale,
            causal,
            partials,
            out_dtype,
            ref ops,
            mask,
        )) = at.get(&id)
        {
            let name = graph.value(out).name.clone();
            let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
            let k = if identity {
                map[&k_src]
            } else {
                b.op(
                    format!("{name}.k"),
                    OpKind::Transpose { perm: perm.clone() },
                    &[map[&k_src]],
                )?
            };
            let r = match mask {
                None => {
                    let kind = OpKind::Attention {
                        scale,
                        causal,
                        partials,
                        out: out_dtype,
                    };
                    b.op(name.clone(), kind, &[map[&q], k, map[&v]])?
                }
                Some(m) => {
                    let kind = OpKind::FlashAttention {
                        scale,
                        causal,
                        block_q: FLASH_BLOCK,
                        block_k: FLASH_BLOCK,
                        partials,
                        out: out_dtype,
                    };
                    b.op(name.clone(), kind, &[map[&q], k, map[&v], map[&m]])?
                }
            };
            map.insert(out, r);
            let mut ids = ops.clone();
            ids.sort();
            let names: Vec<String> = ids
                .iter()
                .map(|&o| graph.operation(o).name.clone())
                .collect();
            fused.push(FusedAttention {
                operations: names,
                output: name,
                causal,
            });
            continue;
        }
        if removed.contains(&id) || !needed.contains(&out) {
            continue;
        }
        let ins: Vec<ValueId> = op.inputs.iter().map(|i| map[i]).collect();
        let r = b.op(graph.value(out).name.clone(), op.kind.clone(), &ins)?;
        map.insert(out, r);
    }
    for &o in graph.outputs() {
        b.output(map[&o]);
    }
    Ok((b.finish()?, fused))
}

/// A builder of a new form of `graph` holding its inputs and the constants `keep` accepts, and
/// the map from `graph`'s values to the builder's.
pub(crate) fn builder_with_sources(
    graph: &Graph,
    keep: impl Fn(ValueId) -> bool,
) -> Result<(GraphBuilder, BTreeMap<ValueId, ValueId>), GraphError> {
    let mut b = GraphBuilder::new(graph.name.clone());
    let mut map = BTreeMap::new();
    for &v in graph.inputs() {
        let val = graph.value(v);
        map.insert(v, b.input(val.name.clone(), val.ty.clone()));
    }
    for c in graph.constants() {
        if keep(c.value) {
            let val = graph.value(c.value);
            let id = b.constant(val.name.clone(), val.ty.clone(), c.data.clone())?;
            map.insert(c.value, id);
        }
    }
    Ok((b, map))
}

/// Blocks of queries and keys of the `flash_attention` that [`as_flash`] writes.
pub const FLASH_BLOCK: usize = 128;

/// `graph` with the `attention` operations whose outputs are named in `outputs` written as
/// `flash_attention` (same operands, scale, mask and types): the fused lowering.
pub fn as_flash(graph: &Graph, outputs: &[String]) -> Result<Graph, GraphError> {
    let (mut b, mut map) = builder_with_sources(graph, |_| true)?;
    for op in graph.operations() {
        let out = op.outputs[0];
        let name = graph.value(out).name.clone();
        let kind = match op.kind {
            OpKind::Attention {
                scale,
                causal,
                partials,
                out,
            } if outputs.contains(&name) => OpKind::FlashAttention {
                scale,
                causal,
                block_q: FLASH_BLOCK,
                block_k: FLASH_BLOCK,
                partials,
                out,
            },
            ref k => k.clone(),
        };
        let ins: Vec<ValueId> = op.inputs.iter().map(|i| map[i]).collect();
        map.insert(out, b.op(name, kind, &ins)?);
    }
    for &o in graph.outputs() {
        b.output(map[&o]);
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TensorType;

    /// `softmax(q kᵀ / 8 [+ mask]) v` as an exporter writes it, heads split by a transpose;
    /// `mask` is the value above the diagonal; `probs_out` also outputs the probabilities.
    fn exported(mask: Option<f32>, probs_out: bool) -> Graph {
        let (s, d) = (16usize, 16usize);
        let mut b = GraphBuilder::new("attn");
        let q = b.input("q", TensorType::new(DType::F32, [1, 2, s, d]));
        let kh = b.input("k", TensorType::new(DType::F32, [1, s, 2, d]));
        let v = b.input("v", TensorType::new(DType::F32, [1, 2, s, d]));
        let kt = b
            .op(
                "kt",
                OpKind::Transpose {
                    perm: vec![0, 2, 3, 1],
                },
                &[kh],
            )
            .unwrap();
        let mm = OpKind::MatMul {
            partials: DType::F32,
            out: DType::F32,
        };
        let sc = b.op("scores", mm.clone(), &[q, kt]).unwrap();
        let mut x = b
            .op("scaled", OpKind::Scale { factor: 0.125 }, &[sc])
            .unwrap();
        if let Some(above) = mask {
            let values: Vec<f32> = (0..s * s)
                .map(|i| if i % s <= i / s { 0.0 } else { above })
                .collect();
            let m = b
                .constant_values("mask", TensorType::new(DType::F32, [1, 1, s, s]), &values)
                .unwrap();
            x = b.op("masked", OpKind::Add, &[x, m]).unwrap();
        }
        let p = b.op("probs", OpKind::Softmax { axis: 3 }, &[x]).unwrap();
        let o = b.op("ctx", mm, &[p, v]).unwrap();
        b.output(o);
        if probs_out {
            b.output(p);
        }
        b.finish().unwrap()
    }

    #[test]
    fn the_exported_pattern_becomes_one_attention() {
        for (mask, causal) in [
            (None, false),
            (Some(-10000.0), true),
            (Some(f32::NEG_INFINITY), true),
        ] {
            let (g, fused) = attention_subgraphs(&exported(mask, false)).unwrap();
            assert_eq!(fused.len(), 1, "{}", crate::print(&g));
            assert_eq!(fused[0].causal, causal);
            assert_eq!(fused[0].output, "ctx");
            let kinds: Vec<&str> = g.operations().iter().map(|o| o.kind.mnemonic()).collect();
            assert_eq!(kinds, ["transpose", "attention"], "{}", crate::print(&g));
            // The mask constant and kᵀ are gone; k is transposed to [.., s, d].
            assert!(g.constants().is_empty());
            assert_eq!(
                g.value(g.operations()[1].inputs[1]).ty.shape,
                [1, 2, 16, 16]
            );
        }
    }

    #[test]
    fn a_fused_attention_can_be_written_as_flash_attention() {
        let (g, fused) = attention_subgraphs(&exported(Some(-10000.0), false)).unwrap();
        let f = as_flash(&g, &[fused[0].output.clone()]).unwrap();
        assert!(matches!(
            f.operations()[1].kind,
            OpKind::FlashAttention { causal: true, scale, .. } if scale == 0.125
        ));
    }

    #[test]
    fn intermediates_read_elsewhere_or_other_masks_are_left_alone() {
        // The probabilities are also an output: nothing may be fused.
        assert!(
            attention_subgraphs(&exported(None, true))
                .unwrap()
                .1
                .is_empty()
        );
    }

    #[test]
    fn another_additive_mask_becomes_the_mask_operand_of_flash_attention() {
        // A constant that is not causal (a bias), or a mask computed at run time from a padding
        // mask: added to the scaled scores by the flash attention itself.
        let (g, fused) = attention_subgraphs(&exported(Some(-10.0), false)).unwrap();
        assert_eq!(fused.len(), 1);
        let last = g.operations().last().unwrap();
        assert!(matches!(
            last.kind,
            OpKind::FlashAttention { causal: false, .. }
        ));
        assert_eq!(g.value(last.inputs[3]).name, "mask");
        // A padding mask [1, 1, 1, s] from the inputs.
        let text = crate::print(&exported(None, false)).replace(
            "  %probs = softmax(%scaled)",
            "  %masked = add(%scaled, %pad): f32[1, 2, 16, 16]\n  %probs = softmax(%masked)",
        );
        let text = text.replace(
            "  input %v: f32[1, 2, 16, 16]",
            "  input %v: f32[1, 2, 16, 16]\n  input %pad: f32[1, 1, 1, 16]",
        );
        let (g, fused) = attention_subgraphs(&crate::parse(&text, "t.ipug").unwrap()).unwrap();
        assert_eq!(fused.len(), 1, "{text}");
        let last = g.operations().last().unwrap();
        assert_eq!(g.value(last.inputs[3]).name, "pad");
        assert_eq!(g.inputs().len(), 4);
    }

    /// Attention as the sdpa path exports it: q and kᵀ scaled by 0.5 each, a padding mask
    /// `where(pad, 0, lowest)` (or `-inf`: `masked`) from a boolean input, and the guard
    /// `where(is_nan(p), 0, p)` after the softmax.
    fn sdpa(masked: f32) -> Graph {
        let (s, d) = (16usize, 16usize);
        let mut b = GraphBuilder::new("sdpa");
        let q = b.input("q", TensorType::new(DType::F32, [1, 2, s, d]));
        let k = b.input("k", TensorType::new(DType::F32, [1, 2, s, d]));
        let v = b.input("v", TensorType::new(DType::F32, [1, 2, s, d]));
        let pad = b.input("pad", TensorType::new(DType::Bool, [1, 1, 1, s]));
        // Constants as the importer writes them: broadcast to the shape they are selected in.
        let filled = |b: &mut GraphBuilder, name: &str, x: f32, shape: [usize; 4]| {
            let n = shape.iter().product();
            b.constant_values(name, TensorType::new(DType::F32, shape), &vec![x; n])
                .unwrap()
        };
        let zero = filled(&mut b, "zero", 0.0, [1, 1, 1, s]);
        let low = filled(&mut b, "low", masked, [1, 1, 1, s]);
        let mask = b
            .op("mask", OpKind::Map(MapFn::Where), &[pad, zero, low])
            .unwrap();
        let half = OpKind::Scale { factor: 0.5 };
        let qs = b.op("qs", half.clone(), &[q]).unwrap();
        let kt = b
            .op(
                "kt",
                OpKind::Transpose {
                    perm: vec![0, 1, 3, 2],
                },
                &[k],
            )
            .unwrap();
        let kts = b.op("kts", half, &[kt]).unwrap();
        let mm = OpKind::MatMul {
            partials: DType::F32,
            out: DType::F32,
        };
        let sc = b.op("scores", mm.clone(), &[qs, kts]).unwrap();
        let x = b.op("masked", OpKind::Add, &[sc, mask]).unwrap();
        let p = b.op("probs", OpKind::Softmax { axis: 3 }, &[x]).unwrap();
        let nan = b.op("nan", OpKind::Map(MapFn::IsNaN), &[p]).unwrap();
        let zero2 = filled(&mut b, "zero2", 0.0, [1, 2, s, s]);
        let guarded = b
            .op("guarded", OpKind::Map(MapFn::Where), &[nan, zero2, p])
            .unwrap();
        let o = b.op("ctx", mm, &[guarded, v]).unwrap();
        b.output(o);
        b.finish().unwrap()
    }

    #[test]
    fn sdpa_with_a_finite_padding_mask_becomes_one_flash_attention() {
        let (g, fused) = attention_subgraphs(&sdpa(f32::MIN)).unwrap();
        assert_eq!(fused.len(), 1);
        for gone in ["guarded", "nan", "qs", "kts", "probs"] {
            assert!(fused[0].operations.iter().any(|o| o == gone), "{gone}");
        }
        let last = g.operations().last().unwrap();
        let OpKind::FlashAttention { scale, causal, .. } = last.kind else {
            panic!("{:?}", last.kind)
        };
        assert_eq!((scale, causal), (0.25, false));
        assert_eq!(g.value(last.inputs[0]).name, "q");
        assert_eq!(g.value(last.inputs[3]).name, "mask");
        // A mask of -inf can mask a row throughout, whose NaNs the guard turns into zeros:
        // the pattern is left as it is.
        let (_, fused) = attention_subgraphs(&sdpa(f32::NEG_INFINITY)).unwrap();
        assert!(fused.is_empty());
    }
}
