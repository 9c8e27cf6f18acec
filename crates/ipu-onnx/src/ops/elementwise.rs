//! Elementwise operators: arithmetic (`Add`, `Sub`, `Mul`, `Div`, the variadic `Max`, `Min`,
//! `Sum`, `Pow`), the unary functions, the relu family, `Clip`, `Sigmoid` and `Gelu`, and the
//! rounding and trigonometric operators the device lacks (evaluated at import only). A product
//! or quotient by a known scalar that is exact as a factor becomes `scale`, which needs no
//! constant.

use std::rc::Rc;

use ipu_graph::{MapFn, OpKind, UnaryFn};

use super::common::{
    Outs, binary_op, broadcast_to, fill_like, input, max2, min2, negate, one, one_over, out_name,
    req, reshape, scale, slice_graph, unary_op,
};
use super::handler::{ALL, Handler, evaluated, given, required};
use crate::OnnxError;
use crate::importer::{Importer, Node, Val};
use crate::known::{self, Binary, Known, Unary};
use crate::proto::attribute_proto::AttributeType;

pub const HANDLERS: &[Handler] = &[
    Handler::map("Add", |imp, n, ins| arithmetic(imp, n, ins, Binary::Add))
        .fold(2, |n, k| arithmetic_fold(n, k, Binary::Add)),
    Handler::map("Sub", |imp, n, ins| arithmetic(imp, n, ins, Binary::Sub))
        .fold(2, |n, k| arithmetic_fold(n, k, Binary::Sub)),
    Handler::map("Mul", |imp, n, ins| arithmetic(imp, n, ins, Binary::Mul))
        .fold(2, |n, k| arithmetic_fold(n, k, Binary::Mul)),
    Handler::map("Div", |imp, n, ins| arithmetic(imp, n, ins, Binary::Div))
        .fold(2, |n, k| arithmetic_fold(n, k, Binary::Div)),
    Handler::map("Max", variadic),
    Handler::map("Min", variadic),
    Handler::map("Sum", variadic),
    Handler::map("Pow", pow).fold(2, pow_fold),
    Handler::map("Neg", neg).fold(1, |n, k| unary_fold(n, k, Unary::Neg)),
    Handler::map("Abs", abs).fold(1, |n, k| unary_fold(n, k, Unary::Abs)),
    Handler::map("Relu", relu).fold(1, |n, k| unary_fold(n, k, Unary::Relu)),
    Handler::map("LeakyRelu", leaky_relu),
    Handler::map("Clip", clip),
    Handler::map("Exp", |imp, n, ins| {
        unary(imp, n, ins, OpKind::Unary(UnaryFn::Exp))
    })
    .fold(1, |n, k| unary_fold(n, k, Unary::Exp)),
    Handler::map("Sqrt", |imp, n, ins| {
        unary(imp, n, ins, OpKind::Unary(UnaryFn::Sqrt))
    })
    .fold(1, |n, k| unary_fold(n, k, Unary::Sqrt)),
    Handler::map("Log", |imp, n, ins| {
        unary(imp, n, ins, OpKind::Unary(UnaryFn::Log))
    })
    .fold(1, |n, k| unary_fold(n, k, Unary::Log)),
    // Tanh, Erf, Sin and Cos are not folded: a known input becomes a constant operand.
    Handler::map("Tanh", |imp, n, ins| {
        unary(imp, n, ins, OpKind::Unary(UnaryFn::Tanh))
    }),
    Handler::map("Erf", |imp, n, ins| {
        unary(imp, n, ins, OpKind::Unary(UnaryFn::Erf))
    }),
    Handler::map("Reciprocal", reciprocal).fold(1, |n, k| unary_fold(n, k, Unary::Reciprocal)),
    Handler::map("Sigmoid", sigmoid),
    Handler::map("Gelu", gelu),
    Handler::map("Sin", |imp, n, ins| {
        unary(imp, n, ins, OpKind::Unary(UnaryFn::Sin))
    }),
    Handler::map("Cos", |imp, n, ins| {
        unary(imp, n, ins, OpKind::Unary(UnaryFn::Cos))
    }),
    Handler::refuse("Floor", "no floor device operator")
        .fold(ALL, |n, k| rounding(n, k, Unary::Floor)),
    Handler::refuse("Ceil", "no ceil device operator")
        .fold(ALL, |n, k| rounding(n, k, Unary::Ceil)),
    Handler::refuse("Round", "no round device operator")
        .fold(ALL, |n, k| rounding(n, k, Unary::Round)),
];

/// A unary operator of known input 0.
fn unary_fold(node: &Node<'_>, ins: &[Option<Rc<Known>>], op: Unary) -> Result<Known, OnnxError> {
    node.only_attrs(&[])?;
    evaluated(node, known::unary(op, required(node, ins, 0)?))
}

/// `Floor`, `Ceil` and `Round` of the first given input.
fn rounding(node: &Node<'_>, ins: &[Option<Rc<Known>>], op: Unary) -> Result<Known, OnnxError> {
    node.only_attrs(&[])?;
    evaluated(node, known::unary(op, &given(ins)[0]))
}

/// `Exp`, `Sqrt`, `Log`, `Tanh` and `Erf`: the graph's operations.
fn unary(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>], kind: OpKind) -> Outs {
    node.only_attrs(&[])?;
    let x = req(node, ins, 0)?;
    let name = out_name(imp, node, 0);
    one(unary_op(imp, node, kind, x, 0, &name)?)
}

fn neg(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let x = req(node, ins, 0)?;
    let name = out_name(imp, node, 0);
    one(negate(imp, node, x, &name)?)
}

/// `Abs = max(x, -x)`, exact.
fn abs(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let x = req(node, ins, 0)?;
    let name = out_name(imp, node, 0);
    let n = negate(imp, node, x, &format!("{name}.neg"))?;
    one(max2(imp, node, x, &n, &name)?)
}

/// `Relu = max(x, 0)`, exact.
fn relu(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let x = req(node, ins, 0)?;
    let name = out_name(imp, node, 0);
    let zero = fill_like(imp, x, 0.0)?;
    one(max2(imp, node, x, &zero, &name)?)
}

/// `LeakyRelu = max(x, alpha x)` for `0 <= alpha <= 1`, and `where(x < 0, alpha x, x)` for
/// any other alpha (where the maximum is not it), both exact.
fn leaky_relu(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["alpha"])?;
    let x = req(node, ins, 0)?;
    let alpha = node.float("alpha", 0.01)?;
    let name = out_name(imp, node, 0);
    let scaled = scale(imp, node, x, alpha, &format!("{name}.leak"))?;
    if (0.0..=1.0).contains(&alpha) {
        return one(max2(imp, node, x, &scaled, &name)?);
    }
    let zero = fill_like(imp, x, 0.0)?;
    let below = super::compare::map_named(
        imp,
        node,
        &[x.clone(), zero],
        MapFn::Less,
        &format!("{name}.below"),
    )?;
    one(super::compare::map_named(
        imp,
        node,
        &[below, scaled, x.clone()],
        MapFn::Where,
        &name,
    )?)
}

/// `Clip` (opset 13): min and max as optional known inputs.
fn clip(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let x = req(node, ins, 0)?;
    let name = out_name(imp, node, 0);
    let rank = imp.shape(x).len();
    // Each bound, known or computed at run time, as one value of `x`'s rank.
    let bound = |imp: &mut Importer<'_>, i: usize, label: &str| {
        let Some(b) = input(ins, i) else {
            return Ok(None);
        };
        if imp.shape(b).iter().product::<usize>() != 1 {
            return Err(node.bad_input(i, "a bound must hold one value"));
        }
        reshape(imp, node, b, vec![1; rank], &format!("{name}.{label}")).map(Some)
    };
    let lo = bound(imp, 1, "min")?;
    let hi = bound(imp, 2, "max")?;
    let mut v = x.clone();
    if let Some(lo) = lo {
        let step = if hi.is_some() {
            format!("{name}.lower")
        } else {
            name.clone()
        };
        v = max2(imp, node, &v, &lo, &step)?;
    }
    if let Some(hi) = hi {
        v = min2(imp, node, &v, &hi, &name)?;
    }
    one(v)
}

/// `Reciprocal = 1 / x`.
fn reciprocal(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let x = req(node, ins, 0)?;
    let name = out_name(imp, node, 0);
    one(one_over(imp, node, x, &name)?)
}

/// `Sigmoid = 1 / (1 + exp(-x))`, its definition in the operator specification.
fn sigmoid(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let x = req(node, ins, 0)?;
    let name = out_name(imp, node, 0);
    let n = negate(imp, node, x, &format!("{name}.neg"))?;
    let e = unary_op(
        imp,
        node,
        OpKind::Unary(UnaryFn::Exp),
        &n,
        0,
        &format!("{name}.exp"),
    )?;
    let ones = fill_like(imp, x, 1.0)?;
    let d = binary_op(
        imp,
        node,
        OpKind::Add,
        &e,
        &ones,
        &format!("{name}.denominator"),
    )?;
    imp.notes.push(format!(
        "node `{}`: Sigmoid as 1 / (1 + exp(-x))",
        node.name
    ));
    one(binary_op(imp, node, OpKind::Div, &ones, &d, &name)?)
}

/// `Pow` of known operands: the exponent in the base's type.
fn pow_fold(node: &Node<'_>, ins: &[Option<Rc<Known>>]) -> Result<Known, OnnxError> {
    node.only_attrs(&[])?;
    let (a, b) = (required(node, ins, 0)?, required(node, ins, 1)?);
    let b = known::cast(b, a.elem).map_err(|r| node.graph_error(r))?;
    evaluated(node, known::binary(Binary::Pow, a, &b))
}

/// `Pow`: a known exponent 1, 2, 3, -1 or 0.5 is identity, x * x, (x * x) * x, 1 / x or
/// sqrt(x) (3 appears in the tanh form of GELU); other exponents as [`pow_scalar`] and
/// [`pow_along_axis`] say.
fn pow(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let (x, e) = (req(node, ins, 0)?, req(node, ins, 1)?);
    let name = out_name(imp, node, 0);
    let Val::Known(ek, _) = e else {
        return Err(node.bad_input(
            1,
            "the exponent must be known at import: with a run-time exponent a negative \
             base's integer powers (real numbers) are not exp(y ln x) (NaN)",
        ));
    };
    let values = ek.f64s();
    let xs = imp.shape(x);
    if known::broadcast_shapes(&xs, &ek.shape).as_ref() != Some(&xs) {
        return Err(node.bad_input(
            1,
            format!(
                "an exponent {:?} that broadcasts the base {xs:?} is not mapped",
                ek.shape
            ),
        ));
    }
    if values.iter().all(|&v| v == values[0]) {
        return one(pow_scalar(imp, node, x, values[0], &name)?);
    }
    one(pow_along_axis(imp, node, x, ek, &name)?)
}

/// `Add`, `Sub`, `Mul`, `Div` of known operands.
fn arithmetic_fold(
    node: &Node<'_>,
    ins: &[Option<Rc<Known>>],
    op: Binary,
) -> Result<Known, OnnxError> {
    node.only_attrs(&[])?;
    let (a, b) = (required(node, ins, 0)?, required(node, ins, 1)?);
    evaluated(node, known::binary(op, a, b))
}

/// The single value of a known tensor with one element, as f64.
fn single_value(v: &Val) -> Option<f64> {
    match v {
        Val::Known(k, _) if k.elements() == 1 => k.f64s().first().copied(),
        _ => None,
    }
}

/// `1 / c` if it is an exact f32 factor: `c` a normal power of two whose reciprocal is
/// normal too.
fn exact_reciprocal(c: f64) -> Option<f32> {
    let f = c as f32;
    let r = 1.0 / f;
    (f64::from(f) == c && f.is_normal() && f.to_bits() & 0x007f_ffff == 0 && r.is_normal())
        .then_some(r)
}

/// Elementwise `Add`, `Sub`, `Mul`, `Div` (folded when both are known): `x * c` and `x / c`
/// for a known scalar `c` (exact as a factor) become `scale`.
fn arithmetic(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>], op: Binary) -> Outs {
    node.only_attrs(&[])?;
    let (a, b) = (req(node, ins, 0)?, req(node, ins, 1)?);
    let name = out_name(imp, node, 0);
    // A known scalar factor whose broadcast does not change the other operand's shape.
    let scalar = |imp: &Importer<'_>, c: &Val, x: &Val| {
        single_value(c)
            .filter(|_| imp.shape(c).len() <= imp.shape(x).len() && imp.ty(c).0 == imp.ty(x).0)
    };
    match op {
        Binary::Mul => {
            for (c, x) in [(b, a), (a, b)] {
                if let Some(f) = scalar(imp, c, x)
                    && (f as f32).is_finite()
                    && matches!(x, Val::Graph(_))
                {
                    return one(scale(imp, node, x, f as f32, &name)?);
                }
            }
        }
        Binary::Div => {
            if let Some(f) = scalar(imp, b, a).and_then(exact_reciprocal)
                && matches!(a, Val::Graph(_))
            {
                return one(scale(imp, node, a, f, &name)?);
            }
        }
        _ => {}
    }
    let kind = match op {
        Binary::Add => OpKind::Add,
        Binary::Sub => OpKind::Sub,
        Binary::Mul => OpKind::Mul,
        _ => OpKind::Div,
    };
    one(binary_op(imp, node, kind, a, b, &name)?)
}

/// Variadic `Max`, `Min`, `Sum` (opset 13): a chain of binary operations.
fn variadic(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[])?;
    let vals: Vec<&Val> = ins.iter().flatten().collect();
    let Some(&first) = vals.first() else {
        return Err(node.bad_input(0, "is required"));
    };
    let name = out_name(imp, node, 0);
    let mut acc = first.clone();
    for (i, &v) in vals.iter().enumerate().skip(1) {
        let step = if i + 1 == vals.len() {
            name.clone()
        } else {
            format!("{name}.{i}")
        };
        acc = match node.op_type {
            "Max" => max2(imp, node, &acc, v, &step)?,
            "Min" => min2(imp, node, &acc, v, &step)?,
            _ => {
                if let (Val::Known(x, _), Val::Known(y, _)) = (&acc, v) {
                    Val::known(known::binary(Binary::Add, x, y).map_err(|e| node.graph_error(e))?)
                } else {
                    binary_op(imp, node, OpKind::Add, &acc, v, &step)?
                }
            }
        };
    }
    one(acc)
}

/// `x ^ v` for a known scalar exponent `v`: 1, 2, 3, -1 and 0.5 as before (the identity,
/// products, a reciprocal, `sqrt`); 0 as ones; other integers up to [`POW_INTEGER_MAX`] in magnitude by
/// repeated squaring (exact signs for negative bases, as NumPy's), negative ones through a
/// reciprocal; any other finite exponent as `exp(v ln x)`, which is NumPy's `x ^ v` wherever
/// that is real: NaN for a negative base (a non-integer power), 0 or `inf` at a zero base,
/// 1 at a base of 1.
fn pow_scalar(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    x: &Val,
    v: f64,
    name: &str,
) -> Result<Val, OnnxError> {
    match v {
        1.0 => Ok(x.clone()),
        2.0 => binary_op(imp, node, OpKind::Mul, x, x, name),
        -1.0 => one_over(imp, node, x, name),
        3.0 => {
            let sq = binary_op(imp, node, OpKind::Mul, x, x, &format!("{name}.square"))?;
            binary_op(imp, node, OpKind::Mul, &sq, x, name)
        }
        0.5 => unary_op(imp, node, OpKind::Unary(UnaryFn::Sqrt), x, 0, name),
        // 1 for every base, NaN and infinities included (C's and NumPy's `pow`).
        0.0 => {
            let shape = imp.shape(x);
            let ones = fill_like(imp, x, 1.0)?;
            broadcast_to(imp, node, &ones, &shape, name)
        }
        _ if v.fract() == 0.0 && v != 0.0 && v.abs() <= POW_INTEGER_MAX => {
            let n = v.abs() as u32;
            let power_name = if v < 0.0 {
                format!("{name}.power")
            } else {
                name.to_string()
            };
            // Square and multiply, from the top bit down.
            let mut acc = x.clone();
            for bit in (0..31 - n.leading_zeros()).rev() {
                let last = bit == 0 && n & 1 == 0;
                let sq_name = if last {
                    power_name.clone()
                } else {
                    format!("{name}.square{bit}")
                };
                acc = binary_op(imp, node, OpKind::Mul, &acc, &acc, &sq_name)?;
                if n >> bit & 1 == 1 {
                    let m_name = if bit == 0 {
                        power_name.clone()
                    } else {
                        format!("{name}.times{bit}")
                    };
                    acc = binary_op(imp, node, OpKind::Mul, &acc, x, &m_name)?;
                }
            }
            if v < 0.0 {
                acc = one_over(imp, node, &acc, name)?;
            }
            Ok(acc)
        }
        _ if v.is_finite() && v != 0.0 => {
            let l = unary_op(
                imp,
                node,
                OpKind::Unary(UnaryFn::Log),
                x,
                0,
                &format!("{name}.log"),
            )?;
            let s = scale(imp, node, &l, v as f32, &format!("{name}.scaled"))?;
            unary_op(imp, node, OpKind::Unary(UnaryFn::Exp), &s, 0, name)
        }
        _ => Err(node.unsupported(format!(
            "exponent {v}: not mapped (infinite and NaN exponents have no device form)"
        ))),
    }
}

/// The largest integer exponent [`pow_scalar`] writes as products (at most 2 log2 of it).
const POW_INTEGER_MAX: f64 = 64.0;

/// The most pieces [`pow_along_axis`] cuts `x` into (one per exponent value along the axis).
const POW_PIECES_MAX: usize = 16;

/// `x ^ e` for a known exponent that varies along one axis of `x` only: `x` sliced along that
/// axis, each slice raised to its exponent ([`pow_scalar`]), the results concatenated.
fn pow_along_axis(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    x: &Val,
    e: &Known,
    name: &str,
) -> Result<Val, OnnxError> {
    let xs = imp.shape(x);
    let rank = xs.len();
    let es = &e.shape;
    let varying: Vec<usize> = (0..es.len()).filter(|&i| es[i] != 1).collect();
    let [ea] = varying[..] else {
        return Err(node.bad_input(
            1,
            format!("an exponent {es:?} varying along more than one axis is not mapped"),
        ));
    };
    if es.len() > rank || xs[rank - es.len() + ea] != es[ea] || es[ea] > POW_PIECES_MAX {
        return Err(node.bad_input(
            1,
            format!(
                "an exponent {es:?} must vary along one axis of the base {xs:?}, in at most {POW_PIECES_MAX} values"
            ),
        ));
    }
    let axis = rank - es.len() + ea;
    let values = e.f64s();
    let xid = imp.data(node, 0, x, &format!("{name}.base"))?;
    let mut pieces = Vec::new();
    for (j, &v) in values.iter().enumerate() {
        let xj = Val::Graph(slice_graph(
            imp,
            node,
            xid,
            axis,
            j,
            j + 1,
            &format!("{name}.base{j}"),
        )?);
        let pj = pow_scalar(imp, node, &xj, v, &format!("{name}.piece{j}"))?;
        pieces.push(imp.data(node, 0, &pj, &format!("{name}.piece{j}"))?);
    }
    Ok(Val::Graph(imp.op(
        node,
        name,
        OpKind::Concat { axis },
        &pieces,
    )?))
}

/// `Gelu` (opset 20) by its definition in the operator specification: `approximate = "none"`
/// is `0.5 x (1 + erf(x / sqrt(2)))`, `"tanh"` is `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
/// x^3)))`, each as the graph's operations in that order.
fn gelu(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["approximate"])?;
    let approximate = match node.attr("approximate") {
        None => "none".to_string(),
        Some(a) if a.r#type() == AttributeType::String => {
            String::from_utf8_lossy(a.s()).into_owned()
        }
        Some(_) => return Err(node.bad_attr("approximate", "must be a string")),
    };
    let x = req(node, ins, 0)?;
    let name = out_name(imp, node, 0);
    let n = |step: &str| format!("{name}.{step}");
    let ones = fill_like(imp, x, 1.0)?;
    let inner = match approximate.as_str() {
        "none" => {
            let d = scale(imp, node, x, std::f32::consts::FRAC_1_SQRT_2, &n("scaled"))?;
            unary_op(imp, node, OpKind::Unary(UnaryFn::Erf), &d, 0, &n("erf"))?
        }
        "tanh" => {
            let sq = binary_op(imp, node, OpKind::Mul, x, x, &n("square"))?;
            let cube = binary_op(imp, node, OpKind::Mul, &sq, x, &n("cube"))?;
            let c = scale(imp, node, &cube, 0.044715, &n("cube_scaled"))?;
            let sum = binary_op(imp, node, OpKind::Add, x, &c, &n("sum"))?;
            let factor = (2.0 / std::f64::consts::PI).sqrt() as f32;
            let s = scale(imp, node, &sum, factor, &n("scaled"))?;
            unary_op(imp, node, OpKind::Unary(UnaryFn::Tanh), &s, 0, &n("tanh"))?
        }
        other => {
            return Err(node.bad_attr(
                "approximate",
                format!("`{other}` is neither \"none\" nor \"tanh\""),
            ));
        }
    };
    let one_plus = binary_op(imp, node, OpKind::Add, &inner, &ones, &n("one_plus"))?;
    let prod = binary_op(imp, node, OpKind::Mul, x, &one_plus, &n("product"))?;
    imp.notes.push(format!(
        "node `{}`: Gelu (approximate = {approximate}) by its definition",
        node.name
    ));
    one(scale(imp, node, &prod, 0.5, &name)?)
}
