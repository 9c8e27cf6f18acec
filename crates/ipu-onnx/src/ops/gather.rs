//! Gathers: `Gather` (known indices: taken at import from a known tensor, slices and a concat
//! of a graph value; run-time indices: the graph's `gather`, a lookup on the device),
//! `GatherElements` and `GatherND` with known indices (taken at import from known data, else
//! the same slices of the data viewed as rows). Run-time indices of `GatherElements` and
//! `GatherND` are refused.

use ipu_graph::OpKind;

use super::common::{Outs, one, out_name, req, reshape, slice_graph, transpose};
use super::handler::Handler;
use crate::OnnxError;
use crate::importer::{Importer, Node, Val, normalize_axis};

pub const HANDLERS: &[Handler] = &[
    Handler::map("Gather", gather),
    Handler::map("GatherElements", gather_elements),
    Handler::map("GatherND", gather_nd),
];

/// `Gather` with known indices: taken at import from a known tensor, slices and a concat on
/// a graph value (consecutive indices share one slice).
fn gather(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["axis"])?;
    let x = req(node, ins, 0)?;
    let shape = imp.shape(x);
    let axis = normalize_axis(node, "axis", node.int("axis", 0)?, shape.len())?;
    if let Some(Val::Graph(ids)) = ins.get(1).and_then(|v| v.as_ref()) {
        return gather_run_time(imp, node, x, *ids, axis);
    }
    let indices = imp.known_input(node, ins, 1)?;
    let raw = indices
        .ints()
        .ok_or_else(|| node.bad_input(1, "indices must be integers"))?;
    let dim = shape[axis] as i64;
    let mut idx = Vec::with_capacity(raw.len());
    for v in raw {
        let i = if v < 0 { v + dim } else { v };
        if !(0..dim).contains(&i) {
            return Err(node.bad_input(1, format!("index {v} is outside -{dim}..{dim}")));
        }
        idx.push(i as usize);
    }
    let mut out_shape = shape[..axis].to_vec();
    out_shape.extend(&indices.shape);
    out_shape.extend(&shape[axis + 1..]);
    let name = out_name(imp, node, 0);
    take(imp, node, x, axis, &idx, out_shape, &name)
}

/// Entries `idx` along `axis` of `x`, reshaped to `out_shape`: taken at import from a known
/// tensor; slices (one per run of consecutive indices) and a concat of a graph value.
pub(super) fn take(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    x: &Val,
    axis: usize,
    idx: &[usize],
    out_shape: Vec<usize>,
    name: &str,
) -> Outs {
    match x {
        Val::Known(k, _) => {
            let taken = k.take(axis, idx).map_err(|e| node.graph_error(e))?;
            one(Val::known(taken.reshaped(out_shape)))
        }
        Val::Graph(id) => {
            if idx.is_empty() {
                return Err(node.graph_error("the gathered tensor would be empty"));
            }
            let mut runs: Vec<(usize, usize)> = Vec::new();
            for &i in idx {
                match runs.last_mut() {
                    Some((_, end)) if *end == i => *end += 1,
                    _ => runs.push((i, i + 1)),
                }
            }
            let mut parts = Vec::with_capacity(runs.len());
            for (n, &(s, e)) in runs.iter().enumerate() {
                parts.push(slice_graph(
                    imp,
                    node,
                    *id,
                    axis,
                    s,
                    e,
                    &format!("{name}.run{n}"),
                )?);
            }
            let joined = if parts.len() == 1 {
                parts[0]
            } else {
                imp.op(
                    node,
                    &format!("{name}.joined"),
                    OpKind::Concat { axis },
                    &parts,
                )?
            };
            one(reshape(imp, node, &Val::Graph(joined), out_shape, name)?)
        }
    }
}

/// The known integer indices of input `i`, each in `-dim..dim` (negative ones counted from
/// the end) for the dimension `dims(position)` each index position addresses.
fn known_indices(
    imp: &Importer<'_>,
    node: &Node<'_>,
    ins: &[Option<Val>],
    i: usize,
    dims: impl Fn(usize) -> usize,
) -> Result<(Vec<usize>, Vec<usize>), OnnxError> {
    let indices = imp.known_input(node, ins, i)?;
    let raw = indices
        .ints()
        .ok_or_else(|| node.bad_input(i, "indices must be integers"))?;
    let mut out = Vec::with_capacity(raw.len());
    for (p, v) in raw.into_iter().enumerate() {
        let dim = dims(p) as i64;
        let j = if v < 0 { v + dim } else { v };
        if !(0..dim).contains(&j) {
            return Err(node.bad_input(i, format!("index {v} at {p} is outside -{dim}..{dim}")));
        }
        out.push(j as usize);
    }
    Ok((out, indices.shape.clone()))
}

/// `GatherElements` with known indices: `out[.., j, ..] = x[.., idx[.., j, ..], ..]` along
/// `axis`, as flat elements of `x` taken in order.
fn gather_elements(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["axis"])?;
    let x = req(node, ins, 0)?;
    let shape = imp.shape(x);
    let axis = normalize_axis(node, "axis", node.int("axis", 0)?, shape.len())?;
    let (idx, ishape) = known_indices(imp, node, ins, 1, |_| shape[axis])?;
    if ishape.len() != shape.len()
        || ishape
            .iter()
            .zip(&shape)
            .enumerate()
            .any(|(a, (&i, &d))| a != axis && i > d)
    {
        return Err(node.bad_input(
            1,
            format!("indices of shape {ishape:?} do not fit data of shape {shape:?}"),
        ));
    }
    let strides = strides_of(&shape);
    let istrides = strides_of(&ishape);
    let flat: Vec<usize> = (0..idx.len())
        .map(|p| {
            (0..ishape.len())
                .map(|a| {
                    let at = p / istrides[a] % ishape[a];
                    (if a == axis { idx[p] } else { at }) * strides[a]
                })
                .sum()
        })
        .collect();
    let total: usize = shape.iter().product();
    let name = out_name(imp, node, 0);
    let rows = flat_rows(imp, node, x, total, 1, &name)?;
    take(imp, node, &rows, 0, &flat, ishape, &name)
}

/// `GatherND` with known indices: each index tuple (the indices' last dimension, `q`) picks
/// a slice `x[i0, .., iq-1]` of the data viewed as rows of its trailing dimensions.
fn gather_nd(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["batch_dims"])?;
    if node.int("batch_dims", 0)? != 0 {
        return Err(node.bad_attr("batch_dims", "only 0 is supported"));
    }
    let x = req(node, ins, 0)?;
    let shape = imp.shape(x);
    let q = match imp.known_input(node, ins, 1)?.shape.last() {
        Some(&q) if (1..=shape.len()).contains(&q) => q,
        _ => return Err(node.bad_input(1, "the last dimension must be 1 to the data's rank")),
    };
    let (idx, ishape) = known_indices(imp, node, ins, 1, |p| shape[p % q])?;
    let strides = strides_of(&shape[..q]);
    let flat: Vec<usize> = idx
        .chunks(q)
        .map(|t| t.iter().zip(&strides).map(|(i, s)| i * s).sum())
        .collect();
    let inner: usize = shape[q..].iter().product();
    let mut out_shape = ishape[..ishape.len() - 1].to_vec();
    out_shape.extend(&shape[q..]);
    let name = out_name(imp, node, 0);
    let rows = flat_rows(imp, node, x, shape[..q].iter().product(), inner, &name)?;
    take(imp, node, &rows, 0, &flat, out_shape, &name)
}

/// `x` viewed as `[rows, inner]`.
fn flat_rows(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    x: &Val,
    rows: usize,
    inner: usize,
    name: &str,
) -> Result<Val, OnnxError> {
    match x {
        Val::Known(k, _) => Ok(Val::known(k.reshaped(vec![rows, inner]))),
        Val::Graph(_) => reshape(imp, node, x, vec![rows, inner], &format!("{name}.rows")),
    }
}

/// Row-major strides of `shape`, in elements.
fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        s[a] = s[a + 1] * shape[a + 1];
    }
    s
}

/// `Gather` with indices computed at run time (token ids looking up an embedding): a graph
/// `gather` of the table, which stays on the device, by i32 indices, along axis 0 of the table
/// viewed as rows of its other axes (transposed first for another axis: a known table at
/// import).
pub(super) fn gather_run_time(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    x: &Val,
    ids: ipu_graph::ValueId,
    axis: usize,
) -> Outs {
    let dtype = imp.b.ty(ids).dtype;
    if dtype != ipu_graph::DType::I32 {
        return Err(node.bad_input(
            1,
            format!("run-time indices are lowered as 32-bit integers, not {dtype}"),
        ));
    }
    let name = out_name(imp, node, 0);
    let shape = imp.shape(x);
    let ids_shape = imp.b.ty(ids).shape.clone();
    // The table with `axis` first, as rows.
    let mut perm: Vec<usize> = vec![axis];
    perm.extend((0..shape.len()).filter(|&a| a != axis));
    let front = transpose(imp, node, x, perm, &format!("{name}.front"))?;
    let inner: usize = shape
        .iter()
        .enumerate()
        .filter(|&(a, _)| a != axis)
        .map(|(_, d)| d)
        .product();
    let rows = reshape(
        imp,
        node,
        &front,
        vec![shape[axis], inner],
        &format!("{name}.rows"),
    )?;
    let table = imp.data(node, 0, &rows, &format!("{name}.table"))?;
    let flat = if ids_shape.is_empty() {
        match reshape(imp, node, &Val::Graph(ids), vec![1], &format!("{name}.ids"))? {
            Val::Graph(id) => id,
            Val::Known(..) => unreachable!("a graph value stays one"),
        }
    } else {
        ids
    };
    let looked = imp.op(
        node,
        &format!("{name}.rows_of"),
        OpKind::Gather { axis: 0 },
        &[table, flat],
    )?;
    // [ids.., before.., after..], then the axes before `axis` moved to the front.
    let mut shaped = ids_shape.clone();
    shaped.extend(&shape[..axis]);
    shaped.extend(&shape[axis + 1..]);
    let k = ids_shape.len();
    if axis == 0 {
        return one(reshape(imp, node, &Val::Graph(looked), shaped, &name)?);
    }
    let v = reshape(
        imp,
        node,
        &Val::Graph(looked),
        shaped,
        &format!("{name}.shaped"),
    )?;
    let mut back: Vec<usize> = (k..k + axis).collect();
    back.extend(0..k);
    back.extend(k + axis..shape.len() - 1 + k);
    one(transpose(imp, node, &v, back, &name)?)
}
