//! `Attention` (opsets 23 to 25): the graph's fused attention, or the operator's reference
//! unfused into graph operations.

use ipu_graph::{DType, OpKind, UnaryFn};

use super::common::{
    Outs, binary_op, computed_in, fill_like, float_dtype, input, max2, out_name, req, reshape,
    scale, transpose, unary_op,
};
use super::handler::Handler;
use crate::OnnxError;
use crate::importer::{Importer, Node, Val};
use crate::known::{self, Binary, Elem, Known};

pub const HANDLERS: &[Handler] = &[Handler::map("Attention", attention_op)];

/// `Attention`; with bf16 operands computed in f32 (the device has no bf16 arithmetic), the
/// results rounded to bf16.
fn attention_op(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    if matches!(
        input(ins, 0).map(|q| imp.ty(q).0),
        Some(Elem::Float(DType::Bf16))
    ) {
        return computed_in(imp, node, ins, DType::Bf16, DType::F32, |imp, ins| {
            attention(imp, node, ins)
        });
    }
    attention(imp, node, ins)
}

/// `Attention` (opsets 23 to 25) on `[batch, heads, seq, head]` operands. 3-D operands
/// `[batch, seq, heads * head]` are split into heads (`q_num_heads`, `kv_num_heads`) and the
/// result merged back; a past key and value (4-D) are concatenated before the new ones on the
/// sequence axis (the `present_key` and `present_value` outputs); with fewer kv heads than q
/// heads (grouped-query attention) each kv head is repeated for its group of q heads (q head
/// `h` reads kv head `h / group`). `scale` defaults to `1/sqrt(head)`.
///
/// With no mask, cache, cap, window, non-pad lengths or `qk_matmul_output` read, and causal
/// only over equal query and key lengths, it is the graph's `attention`; otherwise it is the
/// unfused form of the operator's reference ([`attention_unfused`]).
fn attention(imp: &mut Importer<'_>, node: &Node<'_>, ins: &[Option<Val>]) -> Outs {
    node.only_attrs(&[
        "is_causal",
        "kv_num_heads",
        "q_num_heads",
        "qk_matmul_output_mode",
        "scale",
        "softcap",
        "softmax_precision",
        "left_window_size",
        "right_window_size",
    ])?;
    let is_read = |i: usize| node.output_read(i);
    let (q, k, v) = (req(node, ins, 0)?, req(node, ins, 1)?, req(node, ins, 2)?);
    let rank = imp.shape(q).len();
    if rank != 3 && rank != 4 || imp.shape(k).len() != rank || imp.shape(v).len() != rank {
        return Err(node.bad_input(0, "Q, K and V must all be 3-D or all 4-D"));
    }
    let name = out_name(imp, node, 0);
    let dtype = float_dtype(node, imp, q, 0)?;
    // To [batch, heads, seq, head].
    let heads = |imp: &mut Importer<'_>,
                 x: &Val,
                 i: usize,
                 attr: &str,
                 label: &str|
     -> Result<Val, OnnxError> {
        if rank == 4 {
            return Ok(x.clone());
        }
        let s = imp.shape(x);
        let h = node.int(attr, 0)?;
        let h = usize::try_from(h)
            .ok()
            .filter(|&h| h > 0 && s[2].is_multiple_of(h))
            .ok_or_else(|| {
                node.bad_attr(
                    attr,
                    format!(
                        "{h} heads do not divide the hidden size {} of input {i}",
                        s[2]
                    ),
                )
            })?;
        let split = reshape(
            imp,
            node,
            x,
            vec![s[0], s[1], h, s[2] / h],
            &format!("{name}.{label}_split"),
        )?;
        transpose(
            imp,
            node,
            &split,
            vec![0, 2, 1, 3],
            &format!("{name}.{label}_heads"),
        )
    };
    let q4 = heads(imp, q, 0, "q_num_heads", "q")?;
    let mut k4 = heads(imp, k, 1, "kv_num_heads", "k")?;
    let mut v4 = heads(imp, v, 2, "kv_num_heads", "v")?;
    // The cache: present = concat(past, new) on the sequence axis.
    let past = [input(ins, 4), input(ins, 5)];
    if past[0].is_some() != past[1].is_some() {
        return Err(node.bad_input(
            if past[0].is_some() { 5 } else { 4 },
            "past_key and past_value must be given together",
        ));
    }
    if past[0].is_some() && input(ins, 6).is_some() {
        return Err(node.bad_input(6, "non-pad lengths cannot be combined with a past cache"));
    }
    let past_len = match past[0] {
        Some(p) => imp.shape(p).get(2).copied().unwrap_or(0),
        None => 0,
    };
    for (slot, x, label) in [(4, &mut k4, "key"), (5, &mut v4, "value")] {
        let present_name = if is_read(slot - 3) {
            out_name(imp, node, slot - 3)
        } else {
            format!("{name}.present_{label}")
        };
        if let Some(p) = input(ins, slot) {
            let (ps, xs) = (imp.shape(p), imp.shape(x));
            if ps.len() != 4 || ps[0] != xs[0] || ps[1] != xs[1] || ps[3] != xs[3] {
                return Err(node.bad_input(
                    slot,
                    format!("past {label} {ps:?} does not match the new {label}s {xs:?}"),
                ));
            }
            let ids = [
                imp.data(node, slot, p, &format!("{name}.past_{label}"))?,
                imp.data(node, slot - 3, x, &format!("{name}.new_{label}"))?,
            ];
            *x = Val::Graph(imp.op(node, &present_name, OpKind::Concat { axis: 2 }, &ids)?);
        }
    }
    let present = [
        is_read(1).then(|| k4.clone()),
        is_read(2).then(|| v4.clone()),
    ];
    let (sq, sk) = (imp.shape(&q4), imp.shape(&k4));
    let (hq, hkv) = (sq[1], sk[1]);
    if hkv != hq {
        if hkv == 0 || !hq.is_multiple_of(hkv) {
            return Err(node.bad_input(1, format!("{hkv} kv heads do not divide {hq} q heads")));
        }
        let group = hq / hkv;
        for (x, label) in [(&mut k4, "k"), (&mut v4, "v")] {
            let s = imp.shape(x);
            let one_per = reshape(
                imp,
                node,
                x,
                vec![s[0], s[1], 1, s[2], s[3]],
                &format!("{name}.{label}_group"),
            )?;
            let id = imp.data(node, 1, &one_per, &format!("{name}.{label}_group"))?;
            let copies = imp.op(
                node,
                &format!("{name}.{label}_repeated"),
                OpKind::Concat { axis: 2 },
                &vec![id; group],
            )?;
            *x = reshape(
                imp,
                node,
                &Val::Graph(copies),
                vec![s[0], hq, s[2], s[3]],
                &format!("{name}.{label}_expanded"),
            )?;
        }
    }
    let causal = node.int("is_causal", 0)? != 0;
    let scale = match node.attr("scale") {
        Some(_) => node.float("scale", 1.0)?,
        None => (1.0 / (sq[3] as f64).sqrt()) as f32,
    };
    let softcap = node.float("softcap", 0.0)?;
    let window = [
        node.int("left_window_size", -1)?,
        node.int("right_window_size", -1)?,
    ];
    let mode = node.int("qk_matmul_output_mode", 0)?;
    let out4 = if rank == 4 {
        name.clone()
    } else {
        format!("{name}.heads")
    };
    let fused = input(ins, 3).is_none()
        && past[0].is_none()
        && input(ins, 6).is_none()
        && softcap == 0.0
        && window == [-1, -1]
        && !is_read(3)
        && (!causal || sq[2] == sk[2]);
    let (y, qk) = if fused {
        let ids = [
            imp.data(node, 0, &q4, &format!("{name}.q"))?,
            imp.data(node, 1, &k4, &format!("{name}.k"))?,
            imp.data(node, 2, &v4, &format!("{name}.v"))?,
        ];
        let kind = OpKind::Attention {
            scale,
            causal,
            partials: DType::F32,
            out: dtype,
        };
        let y = Val::Graph(imp.op(node, &out4, kind, &ids)?);
        imp.notes.push(format!("node `{}`: Attention as the graph's attention (scale {scale}, causal {causal}, {hq} q heads, {hkv} kv heads)", node.name));
        (y, None)
    } else {
        let spec = Unfused {
            dtype,
            scale,
            softcap,
            causal,
            window,
            past_len,
            mode,
            qk_read: is_read(3),
        };
        let (y, qk) = attention_unfused(imp, node, ins, &spec, [&q4, &k4, &v4], &out4)?;
        imp.notes.push(format!("node `{}`: Attention unfused (scale {scale}, causal {causal}, softcap {softcap}, {hq} q heads, {hkv} kv heads, {past_len} past keys)", node.name));
        (y, qk)
    };
    let y = if rank == 4 {
        y
    } else {
        let s = imp.shape(&y);
        let merged = transpose(imp, node, &y, vec![0, 2, 1, 3], &format!("{name}.merge"))?;
        reshape(imp, node, &merged, vec![s[0], s[2], s[1] * s[3]], &name)?
    };
    let [pk, pv] = present;
    Ok(vec![Some(y), pk, pv, qk])
}

/// What [`attention_unfused`] computes, from the node's attributes.
struct Unfused {
    /// Q's dtype: the output's, and the probabilities' before the second matmul.
    dtype: DType,
    scale: f32,
    /// `softcap * tanh(scores / softcap)` when positive.
    softcap: f32,
    causal: bool,
    /// `left_window_size`, `right_window_size` (-1: unbounded).
    window: [i64; 2],
    /// Keys of the past cache before the new ones (the causal and window offset).
    past_len: usize,
    /// `qk_matmul_output_mode`.
    mode: i64,
    qk_read: bool,
}

/// Attention as the reference of the operator specification computes it
/// (`onnx/reference/ops/op_attention.py`), in graph operations: scores `scale * q kᵀ` in f32,
/// the soft cap, plus one additive bias (the mask, the causal frontier, the window and the
/// non-pad lengths), a softmax over the keys, probabilities cast to Q's dtype, times `v`.
///
/// The parts of the bias known at import are one constant: the causal frontier is
/// bottom-right aligned (query `i` sees key `j` when `j <= i + offset`, the offset being the
/// past length, `nonpad[b] - sq` with non-pad lengths, else 0), a key `j >= nonpad[b]` is
/// masked, a mask shorter than the keys is padded with `-inf` (`false`), a boolean mask (known
/// at import: the graph has no booleans) becomes `0` / `-inf`. A float mask given at run time
/// is added to the constant. The frontier alone with offset 0 (top-left: no past, no non-pad
/// lengths, no window, no known mask) is the graph's `causal_mask` instead, with no constant.
///
/// A row the bias masks entirely has output 0 in the specification (the reference's guard
/// zeroes it before `P v`). When a row may be masked entirely (a run-time mask, or a constant
/// with such a row), the softmax is written out so it gives 0 there rather than NaN:
/// `e = exp(x - max(rowmax, f32::MIN))`, `p = e / max(sum(e), f32::MIN_POSITIVE)`; a row with
/// a finite score has `sum(e) >= 1`, so the division is the softmax's.
fn attention_unfused(
    imp: &mut Importer<'_>,
    node: &Node<'_>,
    ins: &[Option<Val>],
    spec: &Unfused,
    [q, k, v]: [&Val; 3],
    out: &str,
) -> Result<(Val, Option<Val>), OnnxError> {
    let n = |step: &str| format!("{out}.{step}");
    let (sq, sk) = (imp.shape(q), imp.shape(k));
    let (batch, len_q, len_k) = (sq[0], sq[2], sk[2]);
    // Non-pad lengths (known): per batch.
    let nonpad = match input(ins, 6) {
        Some(_) => {
            let l = imp.int_input(node, ins, 6)?;
            if l.len() != batch || l.iter().any(|&x| x < 0) {
                return Err(node.bad_input(
                    6,
                    format!("{l:?} is not one non-negative length per batch ({batch})"),
                ));
            }
            Some(l)
        }
        None => None,
    };
    // The constant bias [bb, 1, len_q, len_k].
    let bb = if nonpad.is_some() { batch } else { 1 };
    let mut bias = vec![0.0f64; bb * len_q * len_k];
    let mut constant_bias = false;
    for b in 0..bb {
        let offset = match &nonpad {
            Some(l) => l[b] - len_q as i64,
            None => spec.past_len as i64,
        };
        for i in 0..len_q {
            for j in 0..len_k {
                let diff = i as i64 + offset - j as i64;
                let mut allowed = !spec.causal || diff >= 0;
                if spec.window[0] >= 0 {
                    allowed &= diff <= spec.window[0];
                }
                if spec.window[1] >= 0 {
                    allowed &= -diff <= spec.window[1];
                }
                if let Some(l) = &nonpad {
                    allowed &= (j as i64) < l[b];
                }
                if !allowed {
                    bias[(b * len_q + i) * len_k + j] = f64::NEG_INFINITY;
                    constant_bias = true;
                }
            }
        }
    }
    let mut bias = Known::from_f64(Elem::Float(DType::F32), vec![bb, 1, len_q, len_k], &bias)
        .map_err(|e| node.graph_error(e))?;
    // The mask: known ones join the constant, a run-time one is added in the graph.
    let mut run_time_mask = None;
    if let Some(mask) = input(ins, 3) {
        let (elem, shape) = imp.ty(mask);
        let mask_keys = shape.last().copied().unwrap_or(0);
        if shape.is_empty() || shape.len() > 4 || mask_keys > len_k {
            return Err(node.bad_input(
                3,
                format!("a mask {shape:?} does not fit the scores [.., {len_q}, {len_k}]"),
            ));
        }
        match mask {
            Val::Known(m, _) => {
                let values: Vec<f64> = match m.elem {
                    Elem::Bool => m
                        .ints()
                        .expect("boolean")
                        .iter()
                        .map(|&x| if x != 0 { 0.0 } else { f64::NEG_INFINITY })
                        .collect(),
                    Elem::Float(_) => m.f64s(),
                    e => {
                        return Err(node.bad_input(
                            3,
                            format!("a {} mask: masks are boolean or float", e.name()),
                        ));
                    }
                };
                let rows = values.len() / mask_keys.max(1);
                let mut padded = Vec::with_capacity(rows * len_k);
                for r in 0..rows {
                    padded.extend_from_slice(&values[r * mask_keys..(r + 1) * mask_keys]);
                    padded.extend(std::iter::repeat_n(f64::NEG_INFINITY, len_k - mask_keys));
                }
                let mut padded_shape = shape.clone();
                *padded_shape.last_mut().expect("rank >= 1") = len_k;
                let m = Known::from_f64(Elem::Float(DType::F32), padded_shape, &padded)
                    .map_err(|e| node.graph_error(e))?;
                bias = known::binary(Binary::Add, &bias, &m).map_err(|e| {
                    node.bad_input(3, format!("does not broadcast to the scores: {e}"))
                })?;
                constant_bias = true;
            }
            Val::Graph(_) => {
                if elem != Elem::Float(DType::F32) && elem != Elem::Float(DType::F16) {
                    return Err(node.bad_input(
                        3,
                        format!("a {} mask at run time: masks are f32 or f16", elem.name()),
                    ));
                }
                let mut m = if elem == Elem::Float(DType::F32) {
                    mask.clone()
                } else {
                    unary_op(imp, node, OpKind::cast(DType::F32), mask, 3, &n("mask_f32"))?
                };
                if mask_keys < len_k {
                    // Keys past the mask's are masked: -inf columns after it.
                    let mut pad_shape = shape.clone();
                    *pad_shape.last_mut().expect("rank >= 1") = len_k - mask_keys;
                    let count = pad_shape.iter().product();
                    let pad = Known::from_f64(
                        Elem::Float(DType::F32),
                        pad_shape,
                        &vec![f64::NEG_INFINITY; count],
                    )
                    .map_err(|e| node.graph_error(e))?;
                    let ids = [
                        imp.data(node, 3, &m, &n("mask"))?,
                        imp.data(node, 3, &Val::known(pad), &n("mask_padding"))?,
                    ];
                    let axis = shape.len() - 1;
                    m = Val::Graph(imp.op(
                        node,
                        &n("mask_padded"),
                        OpKind::Concat { axis },
                        &ids,
                    )?);
                }
                run_time_mask = Some(m);
            }
        }
    }
    if bias.shape.len() > 4 {
        return Err(node.bad_input(3, "the mask has more than 4 dimensions"));
    }
    // Rows the constant masks entirely.
    let fully_masked = {
        let b = bias.f64s();
        b.chunks(len_k)
            .any(|row| row.iter().all(|x| *x == f64::NEG_INFINITY))
    };
    let robust = fully_masked || run_time_mask.is_some();

    // Scores in f32.
    let kt = transpose(imp, node, k, vec![0, 1, 3, 2], &n("k_t"))?;
    let ids = [
        imp.data(node, 0, q, &n("q"))?,
        imp.data(node, 1, &kt, &n("k_t"))?,
    ];
    let matmul_f32 = OpKind::MatMul {
        partials: DType::F32,
        out: DType::F32,
    };
    let qk = Val::Graph(imp.op(node, &n("qk"), matmul_f32, &ids)?);
    let mut scores = scale(imp, node, &qk, spec.scale, &n("scores"))?;
    if spec.softcap > 0.0 {
        let d = scale(
            imp,
            node,
            &scores,
            1.0 / spec.softcap,
            &n("softcap_divided"),
        )?;
        let t = unary_op(
            imp,
            node,
            OpKind::Unary(UnaryFn::Tanh),
            &d,
            0,
            &n("softcap_tanh"),
        )?;
        scores = scale(imp, node, &t, spec.softcap, &n("softcapped"))?;
    } else if spec.softcap < 0.0 {
        return Err(node.bad_attr(
            "softcap",
            format!("{}: must be positive or 0", spec.softcap),
        ));
    }
    let capped = scores.clone();
    // The frontier alone, aligned top-left (no past, no non-pad lengths, no window, no known
    // mask): the graph's causal mask (key `j` hidden after query `i`), with no constant.
    let top_left_only = spec.causal
        && spec.past_len == 0
        && nonpad.is_none()
        && spec.window == [-1, -1]
        && !matches!(input(ins, 3), Some(Val::Known(..)));
    if top_left_only {
        scores = unary_op(
            imp,
            node,
            OpKind::CausalMask { key_start: 0 },
            &scores,
            0,
            &n("causal"),
        )?;
    } else if constant_bias {
        scores = binary_op(
            imp,
            node,
            OpKind::Add,
            &scores,
            &Val::known(bias),
            &n("biased"),
        )?;
    }
    if let Some(m) = &run_time_mask {
        scores = binary_op(imp, node, OpKind::Add, &scores, m, &n("masked"))?;
    }
    let p = if robust {
        let id = imp.data(node, 0, &scores, &n("scores"))?;
        let rowmax =
            Val::Graph(imp.op(node, &n("row_max"), OpKind::ReduceMax { axis: 3 }, &[id])?);
        let lowest = fill_like(imp, &rowmax, f64::from(f32::MIN))?;
        let rowmax = max2(imp, node, &rowmax, &lowest, &n("row_max_finite"))?;
        let centred = binary_op(imp, node, OpKind::Sub, &scores, &rowmax, &n("centred"))?;
        let e = unary_op(
            imp,
            node,
            OpKind::Unary(UnaryFn::Exp),
            &centred,
            0,
            &n("exp"),
        )?;
        let id = imp.data(node, 0, &e, &n("exp"))?;
        let sum = Val::Graph(imp.op(node, &n("row_sum"), OpKind::ReduceSum { axis: 3 }, &[id])?);
        let tiny = fill_like(imp, &sum, f64::from(f32::MIN_POSITIVE))?;
        let sum = max2(imp, node, &sum, &tiny, &n("row_sum_positive"))?;
        binary_op(imp, node, OpKind::Div, &e, &sum, &n("probabilities"))?
    } else {
        unary_op(
            imp,
            node,
            OpKind::Softmax { axis: 3 },
            &scores,
            0,
            &n("probabilities"),
        )?
    };
    let cast = |imp: &mut Importer<'_>, x: &Val, label: &str| -> Result<Val, OnnxError> {
        if spec.dtype == DType::F32 {
            return Ok(x.clone());
        }
        unary_op(imp, node, OpKind::cast(spec.dtype), x, 0, label)
    };
    let p_typed = cast(imp, &p, &n("probabilities_cast"))?;
    let ids = [
        imp.data(node, 0, &p_typed, &n("probabilities"))?,
        imp.data(node, 2, v, &n("v"))?,
    ];
    let matmul = OpKind::MatMul {
        partials: DType::F32,
        out: spec.dtype,
    };
    let y = Val::Graph(imp.op(node, out, matmul, &ids)?);
    let qk_out = if spec.qk_read {
        let which = match spec.mode {
            0 | 1 => &capped,
            2 => &scores,
            3 => &p,
            m => {
                return Err(node.bad_attr(
                    "qk_matmul_output_mode",
                    format!("{m}: the modes are 0 to 3"),
                ));
            }
        };
        let qk_name = out_name(imp, node, 3);
        Some(cast(imp, which, &qk_name)?)
    } else {
        None
    };
    Ok((y, qk_out))
}
