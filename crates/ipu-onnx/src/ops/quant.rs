//! Conversions: `Cast`, `CastLike`, `QuantizeLinear` and `DequantizeLinear`.

use ipu_graph::{DType, OpKind, Overflow};

use super::common::{
    Outs, binary_op, fill_like, fold, input, max2, min2, one, out_name, req, reshape, to_f32,
    unary_op,
};
use super::handler::Handler;
use crate::OnnxError;
use crate::importer::{Importer, Node, Val, normalize_axis};
use crate::known::{self, Elem, elem_of_code};

pub const HANDLERS: &[Handler] = &[
    // A known input is converted at import by the mapping when the conversion saturates, for
    // CastLike whether or not the input giving the type is known.
    Handler::map("Cast", cast),
    Handler::map("CastLike", cast_like),
    Handler::map("QuantizeLinear", quantize),
    Handler::map("DequantizeLinear", dequantize),
];

/// `Cast` to the type `to`.
fn cast(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["to", "saturate", "round_mode"])?;
    let to = node
        .attr("to")
        .ok_or_else(|| node.bad_attr("to", "is required"))?;
    let to = elem_attr(node, "to", to.i())?;
    cast_to(imp, node, req(node, ins, 0)?, to)
}

/// `CastLike`: `Cast` to the type of input 1.
fn cast_like(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["saturate"])?;
    let to = imp.ty(req(node, ins, 1)?).0;
    cast_to(imp, node, req(node, ins, 0)?, to)
}

/// The element type named by a `to` attribute.
fn elem_attr(node: &Node<'_>, attr: &str, code: i64) -> Result<Elem, OnnxError> {
    let code =
        i32::try_from(code).map_err(|_| node.bad_attr(attr, format!("{code} is not a type")))?;
    elem_of_code(code).map_err(|r| node.bad_attr(attr, format!("{}: {r}", known::type_name(code))))
}

/// `Cast` / `CastLike` to `to`.
fn cast_to(imp: &mut Importer<'_>, node: &Node<'_>, x: &Val, to: Elem) -> Outs {
    // `saturate` (opset 19) applies to FP8 targets: 0 overflows to NaN or infinity.
    let overflow = if node.int("saturate", 1)? == 0 {
        Overflow::Nan
    } else {
        Overflow::Saturate
    };
    // `round_mode` (opset 24) applies to FLOAT8E8M0 targets.
    if let Some(a) = node.attr("round_mode") {
        let mode = String::from_utf8_lossy(a.s()).to_string();
        if mode != "up" {
            return Err(node.bad_attr(
                "round_mode",
                format!("`{mode}` is not supported (supported: up, the default)"),
            ));
        }
    }
    if let Val::Known(k, _) = x
        && overflow == Overflow::Saturate
    {
        return fold(node, known::cast(k, to));
    }
    let Some(d) = to.device_dtype() else {
        return Err(node.bad_attr(
            "to",
            format!(
                "{}: the device holds floats, FP8, the MX formats, integers of 16 bits or \
                 fewer and bool",
                to.name()
            ),
        ));
    };
    if imp.ty(x).0 == to {
        return one(x.clone());
    }
    // Run-time 32- and 64-bit integers are 32-bit on the device (as the graph's integer
    // inputs are): a cast between them is nothing to do.
    let d = match d {
        ipu_graph::DType::I64 | ipu_graph::DType::U64 | ipu_graph::DType::U32 => {
            ipu_graph::DType::I32
        }
        d => d,
    };
    if let Val::Graph(id) = x
        && imp.b.ty(*id).dtype == d
    {
        return one(x.clone());
    }
    let name = out_name(imp, node, 0);
    one(unary_op(
        imp,
        node,
        OpKind::Cast { to: d, overflow },
        x,
        0,
        &name,
    )?)
}

/// How QuantizeLinear and DequantizeLinear apply their scale: `x`'s shape, the shape `x` is
/// viewed in (blocked quantization splits the axis into blocks of `block`), and the axis.
struct QuantView {
    shape: Vec<usize>,
    view: Vec<usize>,
    axis: usize,
    block: usize,
}

impl QuantView {
    fn new(node: &Node<'_>, shape: &[usize], per_tensor: bool) -> Result<QuantView, OnnxError> {
        let r = shape.len().max(1);
        let block = node.int("block_size", 0)?;
        let block = usize::try_from(block)
            .map_err(|_| node.bad_attr("block_size", format!("{block} is negative")))?;
        // The axis means nothing to a per-tensor scale (and may then be out of range).
        let axis = if per_tensor && block == 0 {
            0
        } else {
            normalize_axis(node, "axis", node.int("axis", 1)?, r)?
        };
        let mut view = shape.to_vec();
        if block > 0 {
            let Some(&c) = shape.get(axis) else {
                return Err(node.bad_attr("block_size", "blocked quantization of a scalar"));
            };
            if c % block != 0 {
                return Err(node.bad_attr(
                    "block_size",
                    format!("{block} does not divide the axis's {c} elements (ragged blocks are not supported)"),
                ));
            }
            view.splice(axis..=axis, [c / block, block]);
        }
        Ok(QuantView {
            shape: shape.to_vec(),
            view,
            axis,
            block,
        })
    }

    /// A scale or zero point reshaped to broadcast against the view: one value, one per
    /// element of the axis, or one per block.
    fn param(
        &self,
        imp: &mut Importer<'_>,
        node: &Node<'_>,
        p: &Val,
        i: usize,
        name: &str,
    ) -> Result<Val, OnnxError> {
        let ps = imp.shape(p);
        let n: usize = ps.iter().product();
        let mut target = vec![1; self.view.len()];
        if let Some(blocks) = self
            .shape
            .get(self.axis)
            .and_then(|c| c.checked_div(self.block))
        {
            let mut want = self.shape.clone();
            want[self.axis] = blocks;
            if ps != want {
                return Err(node.bad_input(
                    i,
                    format!("blocked quantization needs the shape {want:?}, not {ps:?}"),
                ));
            }
            target = self.view.clone();
            target[self.axis + 1] = 1;
        } else if n != 1 {
            let c = self.shape.get(self.axis).copied().unwrap_or(1);
            if ps.len() != 1 || ps[0] != c {
                return Err(node.bad_input(
                    i,
                    format!(
                        "a per-axis parameter has one value per element of axis {} ({c}), not the shape {ps:?}",
                        self.axis
                    ),
                ));
            }
            target[self.axis] = c;
        }
        reshape(imp, node, p, target, name)
    }
}

/// `DequantizeLinear` (opsets 13 to 25): `(x - zero_point) * scale` in f32, per tensor, per
/// axis or per block, then the output type (the scale's, or `output_dtype`).
fn dequantize(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&["axis", "block_size", "output_dtype"])?;
    let (x, s) = (req(node, ins, 0)?, req(node, ins, 1)?);
    let name = out_name(imp, node, 0);
    let per_tensor = imp.shape(s).iter().product::<usize>() == 1;
    let q = QuantView::new(node, &imp.shape(x), per_tensor)?;
    let n = |s: &str| format!("{name}.{s}");
    let xf = to_f32(imp, node, x, &n("x"))?;
    let mut v = reshape(imp, node, &xf, q.view.clone(), &n("view"))?;
    if let Some(zp) = input(ins, 2) {
        let z = q.param(imp, node, zp, 2, &n("zero_point"))?;
        let z = to_f32(imp, node, &z, &n("zero_point.f32"))?;
        v = binary_op(imp, node, OpKind::Sub, &v, &z, &n("centred"))?;
    }
    let out_elem = match node.int("output_dtype", 0)? {
        0 => imp.ty(s).0,
        code => elem_attr(node, "output_dtype", code)?,
    };
    let sc = q.param(imp, node, s, 1, &n("scale"))?;
    let sc = to_f32(imp, node, &sc, &n("scale.f32"))?;
    let y = binary_op(imp, node, OpKind::Mul, &v, &sc, &n("scaled"))?;
    let y = reshape(imp, node, &y, q.shape.clone(), &n("shaped"))?;
    if out_elem == Elem::Float(DType::F32) {
        let id = imp.data(node, 0, &y, &name)?;
        return one(Val::Graph(id));
    }
    let Some(d) = out_elem.device_dtype() else {
        return Err(node.bad_attr(
            "output_dtype",
            format!("{} is not a float type", out_elem.name()),
        ));
    };
    one(unary_op(imp, node, OpKind::cast(d), &y, 0, &name)?)
}

/// `QuantizeLinear` (opsets 13 to 25): `x / scale` in f32; for integer outputs rounded to
/// nearest even (adding and subtracting 1.5 * 2^23 after clamping to ±2^22, which the
/// saturation below makes exact), plus the zero point, clamped to the type's range and
/// converted; for float outputs (FP8, FP4) converted with `saturate`.
fn quantize(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[
        "axis",
        "block_size",
        "output_dtype",
        "saturate",
        "precision",
    ])?;
    if node.int("precision", 0)? != 0 {
        return Err(node.bad_attr(
            "precision",
            "only the default (0: the scale's type) is supported",
        ));
    }
    let (x, s) = (req(node, ins, 0)?, req(node, ins, 1)?);
    let zp = input(ins, 2);
    let name = out_name(imp, node, 0);
    let n = |s: &str| format!("{name}.{s}");
    let to = match (zp, node.int("output_dtype", 0)?) {
        (Some(z), _) => imp.ty(z).0,
        (None, 0) => Elem::Int(known::IntKind::U8),
        (None, code) => elem_attr(node, "output_dtype", code)?,
    };
    let Some(to_dtype) = to.device_dtype() else {
        return Err(node.bad_attr(
            "output_dtype",
            format!(
                "{}: the device holds integers of 16 bits or fewer, FP8 and FP4",
                to.name()
            ),
        ));
    };
    let per_tensor = imp.shape(s).iter().product::<usize>() == 1;
    let q = QuantView::new(node, &imp.shape(x), per_tensor)?;
    let xf = to_f32(imp, node, x, &n("x"))?;
    let v = reshape(imp, node, &xf, q.view.clone(), &n("view"))?;
    let sc = q.param(imp, node, s, 1, &n("scale"))?;
    let sc = to_f32(imp, node, &sc, &n("scale.f32"))?;
    let mut t = binary_op(imp, node, OpKind::Div, &v, &sc, &n("scaled"))?;
    let zpf = match zp {
        Some(z) => {
            let z = q.param(imp, node, z, 2, &n("zero_point"))?;
            Some(to_f32(imp, node, &z, &n("zero_point.f32"))?)
        }
        None => None,
    };
    let overflow = if to_dtype.int_format().is_some() {
        const LIMIT: f64 = 4_194_304.0; // 2^22
        const MAGIC: f64 = 12_582_912.0; // 1.5 * 2^23
        let lo = fill_like(imp, &t, -LIMIT)?;
        let hi = fill_like(imp, &t, LIMIT)?;
        t = max2(imp, node, &t, &lo, &n("clamp_lo"))?;
        t = min2(imp, node, &t, &hi, &n("clamp_hi"))?;
        let magic = fill_like(imp, &t, MAGIC)?;
        t = binary_op(imp, node, OpKind::Add, &t, &magic, &n("round_up"))?;
        t = binary_op(imp, node, OpKind::Sub, &t, &magic, &n("rounded"))?;
        if let Some(z) = &zpf {
            t = binary_op(imp, node, OpKind::Add, &t, z, &n("shifted"))?;
        }
        let f = to_dtype.int_format().expect("integer");
        let lo = fill_like(imp, &t, f64::from(f.min()))?;
        let hi = fill_like(imp, &t, f64::from(f.max()))?;
        t = max2(imp, node, &t, &lo, &n("saturate_lo"))?;
        t = min2(imp, node, &t, &hi, &n("saturate_hi"))?;
        Overflow::Saturate
    } else {
        if let Some(z) = &zpf {
            t = binary_op(imp, node, OpKind::Add, &t, z, &n("shifted"))?;
        }
        if node.int("saturate", 1)? == 0 {
            Overflow::Nan
        } else {
            Overflow::Saturate
        }
    };
    let t = reshape(imp, node, &t, q.shape.clone(), &n("shaped"))?;
    one(unary_op(
        imp,
        node,
        OpKind::Cast {
            to: to_dtype,
            overflow,
        },
        &t,
        0,
        &name,
    )?)
}
