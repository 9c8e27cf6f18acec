//! `RotaryEmbedding` (opset 23), by its definition: the input as `[batch, seq, heads, head]`,
//! the first `rotary_embedding_dim` entries of each head rotated by the cos and sin caches
//! (taken at `position_ids` when given), the rest passed through.

use ipu_graph::OpKind;

use super::common::{Outs, binary_op, input, one, out_name, req, reshape, slice_graph, transpose};
use super::gather::{gather_run_time, take};
use super::handler::Handler;
use super::shape::strided_slice;
use crate::OnnxError;
use crate::importer::{Importer, Node, Val};

pub const HANDLERS: &[Handler] = &[Handler::map("RotaryEmbedding", rotary).since(23)];

/// The first output of a mapping.
fn first(outs: Outs) -> Result<Val, OnnxError> {
    outs?
        .into_iter()
        .next()
        .flatten()
        .ok_or_else(|| OnnxError::Malformed {
            reason: "a mapping gave no output".into(),
        })
}

/// `RotaryEmbedding(input, cos_cache, sin_cache[, position_ids])`: `input` is
/// `[batch, heads, seq, head]`, or `[batch, seq, heads * head]` with `num_heads`. With
/// `x1`, `x2` the two halves of the rotated entries (or, `interleaved`, the even and odd ones):
/// `x1 cos - x2 sin` and `x1 sin + x2 cos` in their places.
fn rotary(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["interleaved", "rotary_embedding_dim", "num_heads"])?;
    let x = req(node, ins, 0)?;
    let (cos, sin) = (req(node, ins, 1)?, req(node, ins, 2)?);
    let shape = imp.shape(x);
    let name = out_name(imp, node, 0);
    let n = |step: &str| format!("{name}.{step}");
    let interleaved = node.int("interleaved", 0)? != 0;
    // The input as [batch, seq, heads, head].
    let (b, s, h, d, x4) = match shape[..] {
        [b, h, s, d] => {
            let t = transpose(imp, node, x, vec![0, 2, 1, 3], &n("bshd"))?;
            (b, s, h, d, t)
        }
        [b, s, hidden] => {
            let h = node.int("num_heads", 0)?;
            if h <= 0 || hidden % h as usize != 0 {
                return Err(node.bad_attr(
                    "num_heads",
                    format!("must divide the hidden size {hidden} of a 3-D input"),
                ));
            }
            let (h, d) = (h as usize, hidden / h as usize);
            let r = reshape(imp, node, x, vec![b, s, h, d], &n("bshd"))?;
            (b, s, h, d, r)
        }
        _ => {
            return Err(node.bad_input(
                0,
                format!("has shape {shape:?}; RotaryEmbedding takes rank 3 or 4"),
            ));
        }
    };
    let rot = match node.int("rotary_embedding_dim", 0)? {
        0 => d,
        r if r > 0 && r as usize <= d && r % 2 == 0 => r as usize,
        r => {
            return Err(node.bad_attr(
                "rotary_embedding_dim",
                format!("{r}: must be even and at most the head size {d}"),
            ));
        }
    };
    let half = rot / 2;
    // The caches at the positions: [batch, seq, half], then [batch, seq, 1, half].
    let cache = |imp: &mut Importer<'_>, c: &Val, label: &str| -> Result<Val, OnnxError> {
        let c = match input(ins, 3) {
            None => c.clone(),
            Some(Val::Graph(ids)) => first(gather_run_time(imp, node, c, *ids, 0))?,
            Some(Val::Known(k, _)) => {
                let rows = imp.shape(c)[0] as i64;
                let mut idx = Vec::new();
                for v in k.ints().unwrap_or_default() {
                    if !(0..rows).contains(&v) {
                        return Err(node.bad_input(
                            3,
                            format!("position {v} is outside the {rows} rows of the caches"),
                        ));
                    }
                    idx.push(v as usize);
                }
                let mut out = k.shape.clone();
                out.extend(&imp.shape(c)[1..]);
                first(take(imp, node, c, 0, &idx, out, &n(label)))?
            }
        };
        if imp.shape(&c) != [b, s, half] {
            return Err(node.bad_input(
                1,
                format!(
                    "the caches at the positions have shape {:?}, not [{b}, {s}, {half}]",
                    imp.shape(&c)
                ),
            ));
        }
        reshape(imp, node, &c, vec![b, s, 1, half], &n(&format!("{label}4")))
    };
    let cos = cache(imp, cos, "cos")?;
    let sin = cache(imp, sin, "sin")?;
    let x4 = imp.data(node, 0, &x4, &n("bshd"))?;
    let (x1, x2) = if interleaved {
        let s1 = strided_slice(imp, node, x4, 3, 0, rot as i64, 2, &n("x1"))?;
        let s2 = strided_slice(imp, node, x4, 3, 1, rot as i64, 2, &n("x2"))?;
        (s1, s2)
    } else {
        let s1 = slice_graph(imp, node, x4, 3, 0, half, &n("x1"))?;
        let s2 = slice_graph(imp, node, x4, 3, half, rot, &n("x2"))?;
        (s1, s2)
    };
    let (x1, x2) = (Val::Graph(x1), Val::Graph(x2));
    let mul = |imp: &mut Importer<'_>, a: &Val, c: &Val, label: &str| {
        binary_op(imp, node, OpKind::Mul, a, c, &n(label))
    };
    let x1c = mul(imp, &x1, &cos, "x1_cos")?;
    let x2s = mul(imp, &x2, &sin, "x2_sin")?;
    let x1s = mul(imp, &x1, &sin, "x1_sin")?;
    let x2c = mul(imp, &x2, &cos, "x2_cos")?;
    let real = binary_op(imp, node, OpKind::Sub, &x1c, &x2s, &n("real"))?;
    let imag = binary_op(imp, node, OpKind::Add, &x1s, &x2c, &n("imag"))?;
    let real = imp.data(node, 0, &real, &n("real"))?;
    let imag = imp.data(node, 0, &imag, &n("imag"))?;
    let rotated = if interleaved {
        // Pairs (real, imag) side by side: [.., half, 2], then [.., rot].
        let pair = |imp: &mut Importer<'_>, v, label: &str| {
            reshape(imp, node, &Val::Graph(v), vec![b, s, h, half, 1], &n(label))
                .and_then(|v| imp.data(node, 0, &v, &n(label)))
        };
        let (re, im) = (pair(imp, real, "real5")?, pair(imp, imag, "imag5")?);
        let both = imp.op(node, &n("pairs"), OpKind::Concat { axis: 4 }, &[re, im])?;
        let flat = reshape(
            imp,
            node,
            &Val::Graph(both),
            vec![b, s, h, rot],
            &n("rotated"),
        )?;
        imp.data(node, 0, &flat, &n("rotated"))?
    } else {
        imp.op(
            node,
            &n("rotated"),
            OpKind::Concat { axis: 3 },
            &[real, imag],
        )?
    };
    let out = if rot < d {
        let pass = slice_graph(imp, node, x4, 3, rot, d, &n("passed"))?;
        imp.op(
            node,
            &n("joined"),
            OpKind::Concat { axis: 3 },
            &[rotated, pass],
        )?
    } else {
        rotated
    };
    let out = Val::Graph(out);
    let y = if shape.len() == 4 {
        transpose(imp, node, &out, vec![0, 2, 1, 3], &name)?
    } else {
        reshape(imp, node, &out, shape.clone(), &name)?
    };
    one(y)
}
