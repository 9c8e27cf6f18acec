//! Products: `MatMul` with NumPy's semantics and `Gemm` on the graph's matmul, and the
//! convolution the device lacks.

use ipu_graph::{DType, OpKind};

use super::common::{
    Outs, binary_op, float_dtype, input, one, out_name, req, reshape, scale, to_rank, transpose,
};
use super::handler::Handler;
use crate::OnnxError;
use crate::importer::{Importer, Node, Val};

pub const HANDLERS: &[Handler] = &[
    Handler::map("MatMul", matmul_op),
    Handler::map("Gemm", gemm),
    Handler::refuse("Conv", "no convolution device operator"),
];

/// `MatMul` (see [`matmul`]).
fn matmul_op(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let name = out_name(imp, node, 0);
    one(matmul(
        imp,
        node,
        req(node, ins, 0)?,
        req(node, ins, 1)?,
        &name,
    )?)
}

/// `Gemm`: alpha A' B' + beta C, A' and B' transposed by transA and transB (folded for
/// known weights), alpha and beta as scale, C broadcast to [M, N].
fn gemm(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["alpha", "beta", "transA", "transB"])?;
    let name = out_name(imp, node, 0);
    let (a, b) = (req(node, ins, 0)?, req(node, ins, 1)?);
    for (i, v) in [(0, a), (1, b)] {
        if imp.shape(v).len() != 2 {
            return Err(node.bad_input(i, format!("Gemm operands are 2-D, got {:?}", imp.shape(v))));
        }
    }
    let a = if node.int("transA", 0)? != 0 {
        transpose(imp, node, a, vec![1, 0], &format!("{name}.a_t"))?
    } else {
        a.clone()
    };
    let b = if node.int("transB", 0)? != 0 {
        transpose(imp, node, b, vec![1, 0], &format!("{name}.b_t"))?
    } else {
        b.clone()
    };
    let (alpha, beta) = (node.float("alpha", 1.0)?, node.float("beta", 1.0)?);
    let c = input(ins, 2).filter(|_| beta != 0.0);
    let last_mm = alpha == 1.0 && c.is_none();
    let mut y = matmul(
        imp,
        node,
        &a,
        &b,
        &if last_mm {
            name.clone()
        } else {
            format!("{name}.product")
        },
    )?;
    if alpha != 1.0 {
        y = scale(
            imp,
            node,
            &y,
            alpha,
            &if c.is_none() {
                name.clone()
            } else {
                format!("{name}.alpha")
            },
        )?;
    }
    if let Some(c) = c {
        let c = if beta != 1.0 {
            scale(imp, node, c, beta, &format!("{name}.beta"))?
        } else {
            c.clone()
        };
        y = binary_op(imp, node, OpKind::Add, &y, &c, &name)?;
    }
    one(y)
}

/// `MatMul` with NumPy semantics: 1-D operands get a dimension of size 1 for the product and
/// lose it after; batch dimensions broadcast.
fn matmul(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    a: &Val,
    b: &Val,
    name: &str,
) -> Result<Val, OnnxError> {
    let (sa, sb) = (imp.shape(a), imp.shape(b));
    if sa.is_empty() || sb.is_empty() {
        return Err(node.graph_error("MatMul operands need rank >= 1"));
    }
    let dtype = float_dtype(node, imp, a, 0)?;
    let a2 = if sa.len() == 1 {
        reshape(imp, node, a, vec![1, sa[0]], &format!("{name}.lhs_row"))?
    } else {
        a.clone()
    };
    let b2 = if sb.len() == 1 {
        reshape(imp, node, b, vec![sb[0], 1], &format!("{name}.rhs_col"))?
    } else {
        b.clone()
    };
    let mut out_shape = None;
    if sa.len() == 1 || sb.len() == 1 {
        let mut s = crate::known::broadcast_shapes(
            &sa[..sa.len().saturating_sub(2)],
            &sb[..sb.len().saturating_sub(2)],
        )
        .unwrap_or_default();
        if sa.len() > 1 {
            s.push(sa[sa.len() - 2]);
        }
        if sb.len() > 1 {
            s.push(sb[sb.len() - 1]);
        }
        out_shape = Some(s);
    }
    // The device's matmul broadcasts an operand's batch only as a whole (all of it or none):
    // an operand broadcasting some batch axes but not others is expanded along those first
    // (copies concatenated).
    let (sa2, sb2) = (imp.shape(&a2), imp.shape(&b2));
    let rank = sa2.len().max(sb2.len());
    let Some(batch) = crate::known::broadcast_shapes(&sa2[..sa2.len() - 2], &sb2[..sb2.len() - 2])
    else {
        return matmul_product(imp, node, &a2, &b2, dtype, out_shape, name);
    };
    let total: usize = batch.iter().product();
    let mut operands = Vec::new();
    for (v, s, label) in [(&a2, &sa2, "lhs"), (&b2, &sb2, "rhs")] {
        let own: usize = s[..s.len() - 2].iter().product();
        let mut v = v.clone();
        if own != 1 && own != total {
            v = to_rank(imp, node, &v, rank, &format!("{name}.{label}_rank"))?;
            for (axis, &n) in batch.iter().enumerate() {
                if imp.shape(&v)[axis] == 1 && n > 1 {
                    let id = imp.data(node, 0, &v, &format!("{name}.{label}"))?;
                    v = Val::Graph(imp.op(
                        node,
                        &format!("{name}.{label}_expanded{axis}"),
                        OpKind::Concat { axis },
                        &vec![id; n],
                    )?);
                }
            }
        }
        operands.push(v);
    }
    matmul_product(
        imp,
        node,
        &operands[0],
        &operands[1],
        dtype,
        out_shape,
        name,
    )
}

/// The graph's matmul of `a` and `b`, reshaped to `out_shape` if given.
fn matmul_product(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    a2: &Val,
    b2: &Val,
    dtype: DType,
    out_shape: Option<Vec<usize>>,
    name: &str,
) -> Result<Val, OnnxError> {
    let product = if out_shape.is_some() {
        format!("{name}.product")
    } else {
        name.to_string()
    };
    let x = imp.data(node, 0, a2, &format!("{name}.lhs"))?;
    let y = imp.data(node, 1, b2, &format!("{name}.rhs"))?;
    let kind = OpKind::MatMul {
        partials: DType::F32,
        out: dtype,
    };
    let p = Val::Graph(imp.op(node, &product, kind, &[x, y])?);
    match out_shape {
        Some(s) => reshape(imp, node, &p, s, name),
        None => Ok(p),
    }
}
